/*
 * train/job.h - the job file: what to train, on what data, with which optimizer.
 *
 * A job file is INI (README.md "Job file", gradmesh-job(5)), parsed with inih.  Sections and keys:
 *
 *   [job]      name (default "job"), model (mlp | lenet5 | vgg7 | resnet20 | resnet18 | resnet34 |
 *              resnet50 | mobilenet_v2 | vgg11_bn | vgg16 | vgg16_bn, required),
 *              epochs (>= 1, 5),
 *              seed (u64, 1), threads (1..1024, 1), log_every (steps >= 1, 100),
 *              eval_every (epochs >= 1, 1), out (default "<name>.safetensors"),
 *              device (auto | cpu | cuda | cuda:N | cuda:all; unset: the agent's [train] device,
 *              else auto; train/nn/device.h)
 *              checkpoint_every (steps >= 0, 0 = no checkpoints), checkpoint_keep (>= 1, 3),
 *              checkpoint_dir (train --local only; default "<name>.checkpoints"),
 *              shares (equal | auto | N:N[:N...], equal): each rank's part of the global
 *              batch; auto: from each rank's speed, probed before the first group and
 *              measured and re-balanced during the run by the job's coordinator
 *              (agent/jobs/autoshare.h, shareprobe.h; equal in `train --local`);
 *              N:N... lists one positive weight per rank, in rank order (at most
 *              GM_JOB_SHARES_MAX, each 1..1000000): the global batch stays the same and is
 *              split in proportion (train/trainer.h gm_train_split), the gradient is the
 *              sample-weighted mean; a job with fixed shares runs on exactly that many ranks
 *   [model]    hidden (comma list of MLP hidden sizes, "256"; mlp only), dropout ([0, 1), 0),
 *              init (a safetensors file of PyTorch-named weights to start from,
 *              train/ckpt/weights.h), freeze (space-separated module prefixes, or
 *              "backbone": every module but the head; train/nn/graph.h gm_graph_freeze).
 *              A freeze prefix that matches no module of the model, and an [data]
 *              image_size the model cannot take, are refused here (the model's graph is
 *              built for the check: no memory for activations)
 *   [data]     kind (idx | cifar10 | folder, required), dir (required),
 *              test_split ((0, 1), 0.1), image_size (0..4096, 0 = native), channels (1 | 3, 3);
 *              the last three apply to kind = folder only; pad (0..64, 0): a zero border
 *              around every image (Fashion-MNIST 28x28 + pad 2 = 32x32 for vgg7/resnet20);
 *              folder only, streamed (train/data/loader.h): train_dir and val_dir (folders
 *              inside dir, both or neither, instead of test_split), augment (none | flip |
 *              crop | crop_flip, none), crop_scale (2 numbers in (0, 1], "0.08, 1") and
 *              crop_ratio (2 numbers > 0, "0.75, 1.3333333"; crop only), resize (0..8192, 0:
 *              evaluation stretches to image_size; else shorter side then centre crop, >=
 *              image_size), cache (bytes, K/M/G/T suffixes, 256M), loader_threads (0..64, 0 =
 *              from the cores), prefetch (1..64 batches, 2), skip_bad (bool, false);
 *              any kind: normalize (none | imagenet, none) or mean and std (1 or 3 numbers
 *              each, std > 0); image_size must be >= 1 with crop or resize
 *   [optim]    name (sgd | adam, required), lr (> 0, required), batch (>= 1 per worker) or
 *              global_batch (>= 1, split over the workers; must divide by their number at
 *              submit): exactly one of the two is required,
 *              momentum ([0, 1), 0) and nesterov (bool, false): sgd only, nesterov needs
 *              momentum > 0; weight_decay (>= 0, 0); beta1 ([0, 1), 0.9), beta2 ([0, 1), 0.999),
 *              eps (> 0, 1e-8): adam only; precision (fp32 | bf16, fp32): bf16 runs
 *              convolutions and matrix products in bf16 with fp32 master weights and
 *              optimizer state, on a GPU only (the trainer refuses it on the CPU, exit 78)
 *   [schedule] kind (constant | step | cosine, constant), warmup_steps (>= 0, 0),
 *              step_size (steps >= 1; required by and only for step), gamma ((0, 1], 0.1; step),
 *              min_lr (>= 0 and < lr, 0; cosine)
 *   [comm]     codec (auto | fp32 | fp16 | powersgd | diloco | diloco8, auto), rank (1..1024,
 *              2; powersgd), local_steps (>= 1, 16; diloco), outer_lr (> 0, 0.7; diloco),
 *              outer_momentum ([0, 1), 0.9; diloco), overlap (bool, false; diloco: each outer
 *              sync runs during the first quarter of the next round, half with auto's H
 *              at a short run's cap, its update applied then, train/compress/diloco.h),
 *              bn_refresh (0..1024 batches, 8; diloco: before an evaluation of the outer
 *              parameters each rank runs that many of its training batches through them to
 *              refresh batch norm's running statistics, train/trainer.c refresh_bn); diloco8
 *              is diloco with 8-bit deltas and error feedback, its keys diloco's; auto may
 *              pick any, so it accepts all six keys
 *
 * Choices (strict on purpose: a typo must not silently train the wrong thing):
 * - Unknown sections and keys, duplicate keys, keys outside any section, and keys that cannot
 *   take effect with the chosen kind (beta1 with sgd, gamma without a step schedule) are errors.
 * - Numbers: decimal only ([+-]digits[.digits][e[+-]digits]); no hex, NaN, Inf, trailing junk,
 *   empty values or out-of-range values.  Parsed with strtod in the C locale (never changed).
 *   Booleans: true/false/yes/no/1/0, case-insensitive.  Enum values are lower case, exact.
 * - Job names use [A-Za-z0-9._-], do not start with '.', at most 63 bytes: they name files.
 * - A line may hold at most GM_JOB_LINE_MAX bytes (inih's fixed line buffer); leading
 *   whitespace is dropped, so inih's multi-line continuation values are never used.
 *   The text must be UTF-8 without NUL bytes and at most GM_JOB_TEXT_MAX bytes, because
 *   checkpoints store it verbatim as JSON metadata.
 * - inih also accepts "key: value" and comments starting with ; or # (inline: " ;").
 * - Every problem logs exactly one line, "<origin>:<line>: <problem>" (no line where none
 *   applies, e.g. a missing key), and the call returns GM_ERR_CONFIG; only the first problem
 *   is reported.
 *
 * Called from main() / the agent's job control on one thread; no global state is changed
 * (inih's tunables are left alone).
 */
#ifndef GM_TRAIN_JOB_H
#define GM_TRAIN_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/nn/device.h"

#define GM_JOB_NAME_MAX 64       /* buffer size: 63 bytes + NUL */
#define GM_JOB_PATH_MAX 1024     /* buffer size for dir and out */
#define GM_JOB_HIDDEN_MAX 16     /* MLP hidden layers at most */
#define GM_JOB_TEXT_MAX 65536    /* bytes of job text at most */
#define GM_JOB_LINE_MAX 197      /* bytes a line at most, not counting "\r\n" */
#define GM_JOB_SHARES_MAX 64     /* [job] shares: weights listed at most (the simulation's world) */
#define GM_JOB_SHARE_MAX 1000000 /* [job] shares: one weight at most */
/* [comm] overlap's default (see docs/BENCHMARKS.md, "Overlapped DiLoCo", for why) */
#define GM_JOB_OVERLAP_DEFAULT false
/* [comm] bn_refresh's default: batches a rank runs through the outer parameters before an
 * evaluation (docs/BENCHMARKS.md, "Batch norm's statistics refreshed", for why 8) */
#define GM_JOB_BN_REFRESH_DEFAULT 8

enum gm_job_model {
    GM_JOB_MODEL_MLP,
    GM_JOB_MODEL_LENET5,
    GM_JOB_MODEL_VGG7,
    GM_JOB_MODEL_RESNET20,
    GM_JOB_MODEL_RESNET18, /* torchvision's families (train/nn/zoo.c) */
    GM_JOB_MODEL_RESNET34,
    GM_JOB_MODEL_RESNET50,
    GM_JOB_MODEL_MOBILENET_V2,
    GM_JOB_MODEL_VGG11_BN,
    GM_JOB_MODEL_VGG16,
    GM_JOB_MODEL_VGG16_BN,
};

enum gm_job_data_kind {
    GM_JOB_DATA_KIND_IDX,
    GM_JOB_DATA_KIND_CIFAR10,
    GM_JOB_DATA_KIND_FOLDER,
};

/* [data] augment: torchvision's RandomResizedCrop (crop) and RandomHorizontalFlip (flip) on the
 * training split of a folder (train/data/augment.h). */
enum gm_job_augment {
    GM_JOB_AUGMENT_NONE,
    GM_JOB_AUGMENT_FLIP,
    GM_JOB_AUGMENT_CROP,
    GM_JOB_AUGMENT_CROP_FLIP,
};

/* [data] normalize: none, or ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224,
 * 0.225); explicit values go in mean and std. */
enum gm_job_normalize {
    GM_JOB_NORMALIZE_NONE,
    GM_JOB_NORMALIZE_IMAGENET,
};

/* A short list of numbers from the job file ([data] mean, std, crop_scale, crop_ratio). */
struct gm_job_floats {
    int n; /* 0: not set */
    double v[3];
};

/* [job] shares: how the global batch is split over the ranks.  equal: G/W each, the first
 * G mod W ranks one more (what every job did before shares); fixed: in proportion to the
 * listed weights. */
enum gm_job_shares_mode {
    GM_JOB_SHARES_EQUAL,
    GM_JOB_SHARES_FIXED,
    GM_JOB_SHARES_AUTO, /* measured by the agents (agent/jobs/autoshare.h); equal in one process */
};

struct gm_job_shares {
    enum gm_job_shares_mode mode;
    int n;                         /* fixed: weights listed (the world it runs on); else 0 */
    uint32_t w[GM_JOB_SHARES_MAX]; /* fixed: each >= 1 */
};

enum gm_job_optimizer {
    GM_JOB_OPTIMIZER_SGD,
    GM_JOB_OPTIMIZER_ADAM,
};

/* [optim] precision: the arithmetic of convolutions and matrix products.  bf16: in bf16
 * with fp32 master weights and fp32 optimizer state (GPU only; the CPU refuses it). */
enum gm_job_precision {
    GM_JOB_PRECISION_FP32,
    GM_JOB_PRECISION_BF16,
};

enum gm_job_schedule_kind {
    GM_JOB_SCHEDULE_KIND_CONSTANT,
    GM_JOB_SCHEDULE_KIND_STEP,
    GM_JOB_SCHEDULE_KIND_COSINE,
};

/*
 * The gradient syncs a job can name ([comm] codec), one line each: the enum's suffix, the
 * name (in the job file, on the wire, in logs and summaries), the gradient-sync kind
 * (GM_GRADSYNC_KIND_<kind>, train/gradsync.h) and the wire element type (GM_CODEC_<wire>,
 * train/comm/codec.h).  This list is the only one: the enum below, the job file's parser
 * (gm_job_codec_parse), the strategies and auto's candidates (train/gradsync.c) are all
 * made from it, so a new codec is one line here plus its gradsync kind.  AUTO comes first
 * and is no strategy: a coordinator resolves it to one of the others (its kind column is a
 * placeholder, never read).
 */
#define GM_JOB_CODECS(X)                                                                           \
    X(AUTO, "auto", DENSE, FP32)                                                                   \
    X(FP32, "fp32", DENSE, FP32)                                                                   \
    X(FP16, "fp16", DENSE, FP16)                                                                   \
    X(POWERSGD, "powersgd", POWERSGD, FP16)                                                        \
    X(DILOCO, "diloco", DILOCO, FP16)                                                              \
    X(DILOCO8, "diloco8", DILOCO, Q8)

#define GM_JOB_CODEC_ENUM_(id, name, kind, wire) GM_JOB_CODEC_##id,
enum gm_job_codec { GM_JOB_CODECS(GM_JOB_CODEC_ENUM_) GM_JOB_CODEC_COUNT };
#undef GM_JOB_CODEC_ENUM_

struct gm_job {
    /* [job] */
    char name[GM_JOB_NAME_MAX];
    enum gm_job_model model;
    int epochs;
    uint64_t seed;
    int threads;                          /* BLAS / compute threads */
    int log_every;                        /* steps */
    int eval_every;                       /* epochs */
    char out[GM_JOB_PATH_MAX];            /* final weights; "<name>.safetensors" unless set */
    struct gm_device_spec device;         /* auto unless set */
    bool device_set;                      /* [job] device was given: it wins over the agent's */
    int checkpoint_every;                 /* steps between checkpoints; 0: none */
    int checkpoint_keep;                  /* newest checkpoints kept */
    char checkpoint_dir[GM_JOB_PATH_MAX]; /* train --local; "<name>.checkpoints" unless set */
    struct gm_job_shares shares;          /* equal unless set */

    /* [model] */
    int hidden[GM_JOB_HIDDEN_MAX]; /* MLP hidden sizes, n_hidden of them */
    int n_hidden;
    double dropout;
    char init[GM_JOB_PATH_MAX];       /* weights to start from; "" = none */
    char freeze[GM_JOB_LINE_MAX + 1]; /* module prefixes or "backbone"; "" = none */

    struct gm_job_data {
        enum gm_job_data_kind kind;
        char dir[GM_JOB_PATH_MAX];
        double test_split; /* folder */
        int image_size;    /* folder; 0 = native size */
        int channels;      /* folder; 1 or 3 */
        int pad;           /* zero border in pixels, 0..64 (any kind) */
        /* folder, streamed (train/data/loader.h) */
        char train_dir[GM_JOB_PATH_MAX]; /* inside dir; "" unless set, then with val_dir */
        char val_dir[GM_JOB_PATH_MAX];
        enum gm_job_augment augment;
        struct gm_job_floats crop_scale, crop_ratio; /* defaults (0.08, 1), (3/4, 4/3) */
        int resize; /* eval: shorter side before the centre crop; 0: stretch */
        enum gm_job_normalize normalize;
        struct gm_job_floats mean, std; /* explicit normalisation (any kind) */
        uint64_t cache;                 /* bytes of decoded images kept */
        int loader_threads;             /* 0: from the cores */
        int prefetch;                   /* batches decoded ahead */
        bool skip_bad;
    } data;

    struct gm_job_optim {
        enum gm_job_optimizer name;
        double lr;
        int batch;        /* per worker; 0 when global_batch is set */
        int global_batch; /* shared by the workers; 0 when batch is set */
        double momentum;
        bool nesterov;
        double weight_decay;
        double beta1, beta2, eps;
        enum gm_job_precision precision;
    } optim;

    struct gm_job_schedule {
        enum gm_job_schedule_kind kind;
        int64_t warmup_steps;
        int64_t step_size; /* step: decay every step_size steps */
        double gamma;      /* step: decay factor */
        double min_lr;     /* cosine: floor */
    } schedule;

    struct gm_job_comm {
        enum gm_job_codec codec;
        int rank;        /* powersgd */
        int local_steps; /* diloco: H */
        double outer_lr;
        double outer_momentum;
        bool overlap;   /* diloco: outer sync overlapped with the next round */
        int bn_refresh; /* diloco: training batches a rank runs before an evaluation */
        /* not from the file: codec = auto resolved by a coordinator (agent/jobs/autocodec.h); its
         * DiLoCo H is then cut to 8 rounds in the run (gm_gradsync_diloco_plan) */
        bool auto_resolved;
    } comm;

    char *text;      /* owned: the job text as read, NUL-terminated (checkpoint metadata) */
    size_t text_len; /* bytes, without the NUL */
    /* The job's identity, set by the parser: SHA-256 (lower-case hex) of the text less the
     * lines of the keys a run may change and still go on from its checkpoints ([job] epochs:
     * extending a finished or stopped run).  Checkpoints name their job by it ("job_hash",
     * train/ckpt/ckpt.h), and the agent files them under its first 16 digits
     * (gm_jobs_ckpt_key).  Without text (gm_job_defaults): that of an empty text. */
    char identity[65];
};

/* Fills every field with its default (required fields get placeholders); text = NULL.
 * Does not free: call it on a fresh struct. */
void gm_job_defaults(struct gm_job *job);

/* Reads and parses the job file at path, then checks [model] init's file against the
 * model's names and shapes for the job's data (train/ckpt/weights.h gm_weights_check: so
 * `train` and `submit` refuse it before anything runs or is written; gm_job_parse touches
 * no file).  On error job is freed and GM_ERR_CONFIG returned (-ENOMEM on allocation
 * failure); either way exactly one line was logged on failure. */
int gm_job_load(const char *path, struct gm_job *job) GM_MUST_CHECK;

/* Parses len bytes of job text (need not be NUL-terminated); origin names it in messages
 * (NULL: "job").  The text is copied into job->text.  Errors as gm_job_load. */
int gm_job_parse(const char *text, size_t len, const char *origin,
                 struct gm_job *job) GM_MUST_CHECK;

/* The global batch of a job run by world workers: global_batch, or batch * world.
 * GM_ERR_CONFIG (one line logged) when global_batch does not divide by world with equal
 * shares, when fixed shares list another number of ranks than world, or when the split
 * (gm_job_split) gives a worker no sample. */
int gm_job_global_batch(const struct gm_job *job, int world, int *out) GM_MUST_CHECK;

/* The keys whose values differ between two job texts, was (an earlier run's, a checkpoint's
 * "job") and now, for a person: "[optim] lr (0.001 -> 0.002), [job] seed (unset -> 7)", in the
 * key table's order, into out (n bytes, truncated).  Values are compared as the parser reads
 * them (trimmed, inline comment dropped; "1e-3" and "0.001" differ, as they do to the
 * identity); the keys the identity leaves out ([job] epochs) are not named.  Returns how many
 * differ (0: the texts differ in comments, blank lines or the order of lines only), or
 * GM_ERR_CONFIG when a text does not parse (one line logged), -ENOMEM. */
int gm_job_diff(const char *was, size_t was_len, const char *now, size_t now_len, char *out,
                size_t n) GM_MUST_CHECK;
/* The samples of each of world ranks in a global batch g (counts[0..world)), by the job's
 * shares: equal, or fixed when they list world weights, else equal too (a group that shrank
 * after a peer loss: the caller says so).  Deterministic: train/trainer.h gm_train_split. */
void gm_job_split(const struct gm_job *job, int g, int world, int *counts);
/* The same split by explicit weights w[0..world) (each >= 1), or equal for w = NULL:
 * largest remainder, ties to the lower rank, integer arithmetic only.  world <=
 * GM_JOB_SHARES_MAX for weights (else equal). */
void gm_job_split_by(int g, int world, const uint32_t *w, int *counts);

/* Frees job->text; NULL-safe, idempotent; leaves the struct zeroed. */
void gm_job_free(struct gm_job *job);

/* Names for logs and summaries ("mlp", "adam", "powersgd", ...); "?" if out of range. */
const char *gm_job_model_name(enum gm_job_model m);
/* The model named name ([job] model's values): 0, or -EINVAL (*out untouched). */
GM_MUST_CHECK int gm_job_model_parse(const char *name, enum gm_job_model *out);
const char *gm_job_data_kind_name(enum gm_job_data_kind k);
const char *gm_job_augment_name(enum gm_job_augment a);
const char *gm_job_optimizer_name(enum gm_job_optimizer o);
const char *gm_job_schedule_kind_name(enum gm_job_schedule_kind k);
/* DiLoCo, with 16- or 8-bit deltas: the codecs that [comm] local_steps and the outer keys
 * apply to. */
static inline bool gm_job_codec_is_diloco(enum gm_job_codec c)
{
    return c == GM_JOB_CODEC_DILOCO || c == GM_JOB_CODEC_DILOCO8;
}
/* The codec's name ("?" for a value outside the list). */
const char *gm_job_codec_name(enum gm_job_codec c);
/* The one parser of codec names (job files, wire messages): 0, or -EINVAL for a name not in
 * GM_JOB_CODECS (*out untouched). */
GM_MUST_CHECK int gm_job_codec_parse(const char *name, enum gm_job_codec *out);
const char *gm_job_precision_name(enum gm_job_precision p);

/* The model a job trains, for inputs of in_c x in_h x in_w and `classes` classes (at least
 * 2), on the CPU (the caller picks another device): the one mapping from [job] model and the
 * [model] keys to a struct gm_model_spec, used by the trainer (with the dataset's real shape),
 * codec = auto's timing (agent/jobs/autocodec.c) and doctor (with gm_job_input_shape's).
 * 0, or GM_ERR_CONFIG (logged) for more hidden layers than a model holds. */
struct gm_model_spec;
GM_MUST_CHECK int gm_job_model_spec(const struct gm_job *job, int in_c, int in_h, int in_w,
                                    int classes, struct gm_model_spec *out);
/* The input shape a job's data implies before any file is read: idx 1x28x28, cifar10 3x32x32
 * (each grown by [data] pad on every side), folder channels x image_size^2 (32 for a folder of
 * native size, which only its files tell). */
void gm_job_input_shape(const struct gm_job *job, int *c, int *h, int *w);

#endif
