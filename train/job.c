/*
 * train/job.c - job file parser; the format and the rules are in job.h.
 *
 * How it works: the text is read by common/ini.c (the reader the agent's config uses too):
 * checked as a whole first (NUL bytes, UTF-8), then fed to inih line by line, with each
 * key's line number, a length check instead of inih's silent split of long lines, section
 * headers checked as they appear, and a stop at the first problem.  Keys are a table
 * (section, key, type, offset into struct gm_job, range), one entry a line through the K_*
 * macros below; set_value() checks and stores one value; checks that involve several keys
 * run after the last line (check_whole).  The first problem is logged once at the end.
 */
#include "train/job.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/assert.h"
#include "common/ini.h"
#include "common/log.h"
#include "train/ckpt/ckpt.h"
#include "train/ckpt/weights.h"
#include "train/nn/graph.h"
#include "train/nn/zoo.h"

_Static_assert(sizeof(enum gm_job_model) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_data_kind) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_optimizer) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_schedule_kind) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_codec) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_precision) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_augment) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_normalize) == sizeof(int), "enums are stored as int");

#define HIDDEN_SIZE_MAX 1048576

enum ktype {
    KT_STR,      /* non-empty string, fits the buffer */
    KT_NAME,     /* KT_STR restricted to [A-Za-z0-9._-], not starting with '.' */
    KT_INT,      /* int in [imin, imax] */
    KT_I64,      /* int64_t in [imin, imax] */
    KT_U64,      /* any uint64_t */
    KT_F64,      /* finite double in [fmin, fmax], ends open per flags */
    KT_BOOL,     /* true/false/yes/no/1/0 */
    KT_ENUM,     /* one of names[], stored as int */
    KT_HIDDEN,   /* comma list of ints into job->hidden / n_hidden */
    KT_CHANNELS, /* 1 or 3 */
    KT_DEVICE,   /* auto | cpu | cuda | cuda:N | cuda:all (train/nn/device.h) */
    KT_FLIST,    /* imin..imax comma-separated numbers in [fmin, fmax] (struct gm_job_floats) */
    KT_BYTES,    /* a byte count: digits with an optional K, M, G or T (powers of 1024) */
    KT_SHARES,   /* equal | N:N[:N...] (struct gm_job_shares) */
};

enum {
    K_REQUIRED = 1u << 0,
    K_FMIN_OPEN = 1u << 1,
    K_FMAX_OPEN = 1u << 2,
    /* may change between a run and its continuation: left out of the job's identity
     * (gm_job identity), so a run extended by it goes on from its checkpoints */
    K_EXTENDS = 1u << 3,
};

static const char *const model_names[] = {"mlp",      "lenet5",   "vgg7",     "resnet20",
                                          "resnet18", "resnet34", "resnet50", "mobilenet_v2",
                                          "vgg11_bn", "vgg16",    "vgg16_bn", NULL};
static const char *const data_kind_names[] = {"idx", "cifar10", "folder", NULL};
static const char *const optimizer_names[] = {"sgd", "adam", NULL};
static const char *const precision_names[] = {"fp32", "bf16", NULL};
static const char *const schedule_kind_names[] = {"constant", "step", "cosine", NULL};
static const char *const augment_names[] = {"none", "flip", "crop", "crop_flip", NULL};
static const char *const normalize_names[] = {"none", "imagenet", NULL};
#define CODEC_NAME_(id, name, kind, wire) name,
static const char *const codec_names[] = {GM_JOB_CODECS(CODEC_NAME_) NULL};
#undef CODEC_NAME_
static const char *const section_names[] = {"job", "model", "data", "optim", "schedule", "comm"};

/* Entries of struct gm_ini_key (common/ini.h): {section, key, type, offset, size (KT_STR,
 * KT_NAME: buffer size), imin, imax, fmin, fmax, flags, names (KT_ENUM), what (KT_ENUM)}. */
#define OFF(f) offsetof(struct gm_job, f)
#define FSIZE(f) sizeof(((struct gm_job *)0)->f)
#define K_STR(s, k, f, fl)                                                                         \
    {                                                                                              \
        s, k, KT_STR, OFF(f), FSIZE(f), 0, 0, 0, 0, fl, NULL, NULL                                 \
    }
#define K_INT(s, k, f, lo, hi, fl)                                                                 \
    {                                                                                              \
        s, k, KT_INT, OFF(f), 0, lo, hi, 0, 0, fl, NULL, NULL                                      \
    }
#define K_I64(s, k, f, lo, hi)                                                                     \
    {                                                                                              \
        s, k, KT_I64, OFF(f), 0, lo, hi, 0, 0, 0, NULL, NULL                                       \
    }
#define K_F64(s, k, f, lo, hi, fl)                                                                 \
    {                                                                                              \
        s, k, KT_F64, OFF(f), 0, 0, 0, lo, hi, fl, NULL, NULL                                      \
    }
#define K_ENUM(s, k, f, names, what, fl)                                                           \
    {                                                                                              \
        s, k, KT_ENUM, OFF(f), 0, 0, 0, 0, 0, fl, names, what                                      \
    }
#define K_FLIST(s, k, f, nmin, nmax, lo, hi, fl)                                                   \
    {                                                                                              \
        s, k, KT_FLIST, OFF(f), 0, nmin, nmax, lo, hi, fl, NULL, NULL                              \
    }
#define K_OTHER(s, k, t, f)                                                                        \
    {                                                                                              \
        s, k, t, OFF(f), FSIZE(f), 0, 0, 0, 0, 0, NULL, NULL                                       \
    }

static const struct gm_ini_key keys[] = {
    K_OTHER("job", "name", KT_NAME, name),
    K_ENUM("job", "model", model, model_names, "model", K_REQUIRED),
    K_INT("job", "epochs", epochs, 1, INT_MAX, K_EXTENDS),
    K_OTHER("job", "seed", KT_U64, seed),
    K_INT("job", "threads", threads, 1, 1024, 0),
    K_INT("job", "log_every", log_every, 1, INT_MAX, 0),
    K_INT("job", "eval_every", eval_every, 1, INT_MAX, 0),
    K_STR("job", "out", out, 0),
    K_OTHER("job", "device", KT_DEVICE, device),
    K_INT("job", "checkpoint_every", checkpoint_every, 0, INT_MAX, 0),
    K_INT("job", "checkpoint_keep", checkpoint_keep, 1, 1000000, 0),
    K_STR("job", "checkpoint_dir", checkpoint_dir, 0),
    K_OTHER("job", "shares", KT_SHARES, shares),

    K_OTHER("model", "hidden", KT_HIDDEN, hidden),
    K_F64("model", "dropout", dropout, 0, 1, K_FMAX_OPEN),
    K_STR("model", "init", init, 0),
    K_STR("model", "freeze", freeze, 0),

    K_ENUM("data", "kind", data.kind, data_kind_names, "data kind", K_REQUIRED),
    K_STR("data", "dir", data.dir, K_REQUIRED),
    K_F64("data", "test_split", data.test_split, 0, 1, K_FMIN_OPEN | K_FMAX_OPEN),
    K_INT("data", "image_size", data.image_size, 0, 4096, 0),
    K_OTHER("data", "channels", KT_CHANNELS, data.channels),
    K_INT("data", "pad", data.pad, 0, 64, 0),
    K_STR("data", "train_dir", data.train_dir, 0),
    K_STR("data", "val_dir", data.val_dir, 0),
    K_ENUM("data", "augment", data.augment, augment_names, "augment", 0),
    K_FLIST("data", "crop_scale", data.crop_scale, 2, 2, 0, 1, K_FMIN_OPEN),
    K_FLIST("data", "crop_ratio", data.crop_ratio, 2, 2, 0, INFINITY, K_FMIN_OPEN),
    K_INT("data", "resize", data.resize, 0, 8192, 0),
    K_ENUM("data", "normalize", data.normalize, normalize_names, "normalize", 0),
    K_FLIST("data", "mean", data.mean, 1, 3, -INFINITY, INFINITY, 0),
    K_FLIST("data", "std", data.std, 1, 3, 0, INFINITY, K_FMIN_OPEN),
    K_OTHER("data", "cache", KT_BYTES, data.cache),
    K_INT("data", "loader_threads", data.loader_threads, 0, 64, 0),
    K_INT("data", "prefetch", data.prefetch, 1, 64, 0),
    K_OTHER("data", "skip_bad", KT_BOOL, data.skip_bad),

    K_ENUM("optim", "name", optim.name, optimizer_names, "optimizer", K_REQUIRED),
    K_F64("optim", "lr", optim.lr, 0, INFINITY, K_REQUIRED | K_FMIN_OPEN),
    K_INT("optim", "batch", optim.batch, 1, INT_MAX, 0),
    K_INT("optim", "global_batch", optim.global_batch, 1, INT_MAX, 0),
    K_F64("optim", "momentum", optim.momentum, 0, 1, K_FMAX_OPEN),
    K_OTHER("optim", "nesterov", KT_BOOL, optim.nesterov),
    K_F64("optim", "weight_decay", optim.weight_decay, 0, INFINITY, 0),
    K_F64("optim", "beta1", optim.beta1, 0, 1, K_FMAX_OPEN),
    K_F64("optim", "beta2", optim.beta2, 0, 1, K_FMAX_OPEN),
    K_F64("optim", "eps", optim.eps, 0, INFINITY, K_FMIN_OPEN),
    K_ENUM("optim", "precision", optim.precision, precision_names, "precision", 0),

    K_ENUM("schedule", "kind", schedule.kind, schedule_kind_names, "schedule kind", 0),
    K_I64("schedule", "warmup_steps", schedule.warmup_steps, 0, INT64_MAX),
    K_I64("schedule", "step_size", schedule.step_size, 1, INT64_MAX),
    K_F64("schedule", "gamma", schedule.gamma, 0, 1, K_FMIN_OPEN),
    K_F64("schedule", "min_lr", schedule.min_lr, 0, INFINITY, 0),

    K_ENUM("comm", "codec", comm.codec, codec_names, "codec", 0),
    K_INT("comm", "rank", comm.rank, 1, 1024, 0),
    K_INT("comm", "local_steps", comm.local_steps, 1, INT_MAX, 0),
    K_F64("comm", "outer_lr", comm.outer_lr, 0, INFINITY, K_FMIN_OPEN),
    K_F64("comm", "outer_momentum", comm.outer_momentum, 0, 1, K_FMAX_OPEN),
    K_OTHER("comm", "overlap", KT_BOOL, comm.overlap),
    K_INT("comm", "bn_refresh", comm.bn_refresh, 0, 1024, 0),
};
#define NKEYS GM_ARRAY_SIZE(keys)

/* A key that only takes effect when the int (enum) at enum_off is one of mask's bits. */
struct applies {
    const char *section, *key;
    size_t enum_off;
    unsigned mask;
    const char *when;
};

/* the DiLoCo keys: diloco's, diloco8's and auto's (which may pick either) */
#define DILOCO_KEY                                                                                 \
    ((1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_DILOCO) | (1u << GM_JOB_CODEC_DILOCO8))

static const struct applies applies[] = {
    {"model", "hidden", OFF(model), 1u << GM_JOB_MODEL_MLP, "[job] model = mlp"},
    {"data", "test_split", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "image_size", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "channels", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "train_dir", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "val_dir", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "augment", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "crop_scale", OFF(data.augment),
     (1u << GM_JOB_AUGMENT_CROP) | (1u << GM_JOB_AUGMENT_CROP_FLIP), "augment = crop or crop_flip"},
    {"data", "crop_ratio", OFF(data.augment),
     (1u << GM_JOB_AUGMENT_CROP) | (1u << GM_JOB_AUGMENT_CROP_FLIP), "augment = crop or crop_flip"},
    {"data", "resize", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "cache", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "loader_threads", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "prefetch", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "skip_bad", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"optim", "momentum", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_SGD, "name = sgd"},
    {"optim", "nesterov", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_SGD, "name = sgd"},
    {"optim", "beta1", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"optim", "beta2", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"optim", "eps", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"schedule", "step_size", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_STEP, "kind = step"},
    {"schedule", "gamma", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_STEP, "kind = step"},
    {"schedule", "min_lr", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_COSINE, "kind = cosine"},
    {"comm", "rank", OFF(comm.codec), (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_POWERSGD),
     "codec = powersgd or auto"},
    {"comm", "local_steps", OFF(comm.codec), DILOCO_KEY, "codec = diloco, diloco8 or auto"},
    {"comm", "outer_lr", OFF(comm.codec), DILOCO_KEY, "codec = diloco, diloco8 or auto"},
    {"comm", "outer_momentum", OFF(comm.codec), DILOCO_KEY, "codec = diloco, diloco8 or auto"},
    {"comm", "overlap", OFF(comm.codec), DILOCO_KEY, "codec = diloco, diloco8 or auto"},
    {"comm", "bn_refresh", OFF(comm.codec), DILOCO_KEY, "codec = diloco, diloco8 or auto"},
};

/* --- messages ----------------------------------------------------------------------------- */

static void list_names(char *dst, size_t n, const char *const *names, size_t count)
{
    size_t off = 0;

    dst[0] = '\0';
    for (size_t i = 0; i < count && names[i] != NULL && off < n; i++) {
        int r = snprintf(dst + off, n - off, "%s%s", i ? ", " : "", names[i]);
        if (r < 0)
            break;
        off += (size_t)r;
    }
}

static void list_keys(char *dst, size_t n, const char *section)
{
    const char *names[NKEYS];
    size_t count = 0;

    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0)
            names[count++] = keys[i].key;
    list_names(dst, n, names, count);
}

static void describe(char *dst, size_t n, const struct gm_ini_key *k)
{
    long long top = k->type == KT_INT ? INT_MAX : INT64_MAX;

    switch ((enum ktype)k->type) {
    case KT_INT:
    case KT_I64:
        if (k->imax != top)
            snprintf(dst, n, "an integer from %lld to %lld", k->imin, k->imax);
        else if (k->imin == 1)
            snprintf(dst, n, "a positive integer");
        else if (k->imin == 0)
            snprintf(dst, n, "a non-negative integer");
        else
            snprintf(dst, n, "an integer >= %lld", k->imin);
        break;
    case KT_U64:
        snprintf(dst, n, "an integer from 0 to %llu", (unsigned long long)UINT64_MAX);
        break;
    case KT_F64:
        if (isinf(k->fmax))
            snprintf(dst, n, "a number %s %g", (k->flags & K_FMIN_OPEN) ? ">" : ">=", k->fmin);
        else
            snprintf(dst, n, "a number in %c%g, %g%c", (k->flags & K_FMIN_OPEN) ? '(' : '[',
                     k->fmin, k->fmax, (k->flags & K_FMAX_OPEN) ? ')' : ']');
        break;
    case KT_BOOL:
        snprintf(dst, n, "true, false, yes, no, 1 or 0");
        break;
    case KT_CHANNELS:
        snprintf(dst, n, "1 or 3");
        break;
    case KT_DEVICE:
        snprintf(dst, n, "auto, cpu, cuda, cuda:N (N < %d) or cuda:all", GM_DEVICE_CUDA_MAX);
        break;
    case KT_FLIST:
        if (k->imin == k->imax)
            snprintf(dst, n, "%lld comma-separated numbers", k->imin);
        else
            snprintf(dst, n, "%lld to %lld comma-separated numbers", k->imin, k->imax);
        if (isfinite(k->fmin) || isfinite(k->fmax)) {
            size_t l = strlen(dst);
            if (isinf(k->fmax))
                snprintf(dst + l, n - l, ", each %s %g",
                         (k->flags & K_FMIN_OPEN) ? ">" : ">=", k->fmin);
            else
                snprintf(dst + l, n - l, ", each in %c%g, %g%c",
                         (k->flags & K_FMIN_OPEN) ? '(' : '[', k->fmin, k->fmax,
                         (k->flags & K_FMAX_OPEN) ? ')' : ']');
        }
        break;
    case KT_SHARES:
        snprintf(dst, n, "equal, auto, or 2 to %d weights from 1 to %d joined by ':' (3:1)",
                 GM_JOB_SHARES_MAX, GM_JOB_SHARE_MAX);
        break;
    case KT_BYTES:
        snprintf(dst, n, "a byte count (digits, optionally followed by K, M, G or T)");
        break;
    case KT_HIDDEN:
        snprintf(dst, n, "a comma-separated list of 1 to %d integers from 1 to %d",
                 GM_JOB_HIDDEN_MAX, HIDDEN_SIZE_MAX);
        break;
    default:
        snprintf(dst, n, "valid");
        break;
    }
}

/* --- scalars ------------------------------------------------------------------------------ */

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool all_digits(const char *p)
{
    if (!is_digit(*p))
        return false;
    while (is_digit(*p))
        p++;
    return *p == '\0';
}

static bool parse_ll(const char *s, long long *out)
{
    char *end;
    long long v;

    if (!all_digits(s + (*s == '+' || *s == '-')))
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (!all_digits(s)) /* no sign: strtoull would wrap "-1" */
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    _Static_assert(sizeof(v) == sizeof(*out), "unsigned long long is 64 bits");
    *out = (uint64_t)v;
    return true;
}

/* Decimal only: [+-]digits[.digits][(e|E)[+-]digits], at least one mantissa digit; so no
 * hex, "nan", "inf" or leading blanks reach strtod.  Overflow and underflow are rejected. */
static bool parse_f64(const char *s, double *out)
{
    const char *p = s;
    int nd = 0, ne = 0;
    char *end;
    double v;

    if (*p == '+' || *p == '-')
        p++;
    for (; is_digit(*p); p++)
        nd++;
    if (*p == '.')
        for (p++; is_digit(*p); p++)
            nd++;
    if (nd == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        for (; is_digit(*p); p++)
            ne++;
        if (ne == 0)
            return false;
    }
    if (*p != '\0')
        return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "1"}, *const no[] = {"false", "no", "0"};

    for (size_t i = 0; i < GM_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_hidden(const char *s, int *sizes, int *count)
{
    int n = 0;
    const char *p = s;

    for (;;) {
        char item[32];
        size_t len = 0;
        long long v;

        while (*p == ' ' || *p == '\t')
            p++;
        while (*p != '\0' && *p != ',' && *p != ' ' && *p != '\t') {
            if (len + 1 >= sizeof(item))
                return false;
            item[len++] = *p++;
        }
        item[len] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (n >= GM_JOB_HIDDEN_MAX || !parse_ll(item, &v) || v < 1 || v > HIDDEN_SIZE_MAX)
            return false;
        sizes[n++] = (int)v;
        if (*p == '\0')
            break;
        if (*p != ',')
            return false;
        p++;
    }
    *count = n;
    return true;
}

/* "equal", or "a:b[:c...]": 2..GM_JOB_SHARES_MAX integer weights in [1, GM_JOB_SHARE_MAX]
 * (a single weight would say nothing: one rank takes the whole batch either way). */
static bool parse_shares(const char *s, struct gm_job_shares *out)
{
    struct gm_job_shares sh = {.mode = GM_JOB_SHARES_FIXED};
    const char *p = s;

    if (strcmp(s, "equal") == 0 || strcmp(s, "auto") == 0) {
        *out = (struct gm_job_shares){.mode = strcmp(s, "auto") == 0 ? GM_JOB_SHARES_AUTO
                                                                     : GM_JOB_SHARES_EQUAL};
        return true;
    }
    for (;;) {
        char item[16];
        size_t len = 0;
        long long v;

        while (*p >= '0' && *p <= '9') {
            if (len + 1 >= sizeof(item))
                return false;
            item[len++] = *p++;
        }
        item[len] = '\0';
        if (sh.n >= GM_JOB_SHARES_MAX || !parse_ll(item, &v) || v < 1 || v > GM_JOB_SHARE_MAX)
            return false;
        sh.w[sh.n++] = (uint32_t)v;
        if (*p == '\0')
            break;
        if (*p != ':')
            return false;
        p++;
    }
    if (sh.n < 2)
        return false;
    *out = sh;
    return true;
}

/* "a, b, c": count numbers in [k->fmin, k->fmax] (ends open per flags) into out. */
static bool parse_flist(const struct gm_ini_key *k, const char *s, struct gm_job_floats *out)
{
    struct gm_job_floats f = {0};
    const char *p = s;

    for (;;) {
        char item[48];
        size_t len = 0;
        double v;

        while (*p == ' ' || *p == '\t')
            p++;
        while (*p != '\0' && *p != ',' && *p != ' ' && *p != '\t') {
            if (len + 1 >= sizeof(item))
                return false;
            item[len++] = *p++;
        }
        item[len] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (f.n >= (int)k->imax || !parse_f64(item, &v) || v < k->fmin || v > k->fmax ||
            ((k->flags & K_FMIN_OPEN) && v == k->fmin) ||
            ((k->flags & K_FMAX_OPEN) && v == k->fmax))
            return false;
        f.v[f.n++] = v;
        if (*p == '\0')
            break;
        if (*p != ',')
            return false;
        p++;
    }
    if (f.n < (int)k->imin)
        return false;
    *out = f;
    return true;
}

/* Digits, then nothing or one of K, M, G, T (case-insensitive, powers of 1024), no overflow. */
static bool parse_bytes(const char *s, uint64_t *out)
{
    static const char units[] = "kmgt";
    char digits[32];
    size_t len = strlen(s);
    unsigned shift = 0;
    uint64_t v;

    if (len == 0 || len >= sizeof(digits))
        return false;
    memcpy(digits, s, len + 1);
    if (!is_digit(digits[len - 1])) {
        const char *u = strchr(units, digits[len - 1] | 0x20);
        if (u == NULL)
            return false;
        shift = 10u * (unsigned)(u - units + 1);
        digits[len - 1] = '\0';
    }
    if (!parse_u64(digits, &v) || (shift > 0 && v > (UINT64_MAX >> shift)))
        return false;
    *out = v << shift;
    return true;
}

static bool valid_name(const char *s)
{
    if (s[0] == '.')
        return false;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || is_digit(*s) || *s == '.' ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* Parses value into the field k names; records a problem on failure. */
static void set_value(struct gm_ini *ini, const struct gm_ini_key *k, const char *value)
{
    struct gm_job *job = ini->dest;
    char *field = (char *)job + k->off;
    char pv[256], desc[160];
    bool ok = false;

    gm_ini_printable(pv, sizeof(pv), value);
    if (value[0] == '\0') {
        gm_ini_fail(ini, ini->line, "[%s] %s has an empty value", k->section, k->key);
        return;
    }
    switch ((enum ktype)k->type) {
    case KT_NAME:
    case KT_STR:
        if (strlen(value) >= k->size) {
            gm_ini_fail(ini, ini->line, "[%s] %s is longer than %zu bytes", k->section, k->key,
                        k->size - 1);
            return;
        }
        if (k->type == KT_NAME && !valid_name(value)) {
            gm_ini_fail(ini, ini->line,
                        "[%s] %s = %s: must use only letters, digits, '.', '_' and '-', and not "
                        "start with '.'",
                        k->section, k->key, pv);
            return;
        }
        memcpy(field, value, strlen(value) + 1);
        return;
    case KT_INT:
    case KT_I64: {
        long long v;
        ok = parse_ll(value, &v) && v >= k->imin && v <= k->imax;
        if (ok && k->type == KT_INT) {
            int iv = (int)v;
            memcpy(field, &iv, sizeof(iv));
        } else if (ok) {
            int64_t lv = v;
            memcpy(field, &lv, sizeof(lv));
        }
        break;
    }
    case KT_U64: {
        uint64_t v;
        ok = parse_u64(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_F64: {
        double v;
        ok = parse_f64(value, &v) && v >= k->fmin && v <= k->fmax &&
             !((k->flags & K_FMIN_OPEN) && v == k->fmin) &&
             !((k->flags & K_FMAX_OPEN) && v == k->fmax);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_BOOL: {
        bool v;
        ok = parse_bool(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_DEVICE: {
        struct gm_device_spec v;
        ok = gm_device_spec_parse(value, &v) == 0;
        if (ok) {
            memcpy(field, &v, sizeof(v));
            job->device_set = true;
        }
        break;
    }
    case KT_CHANNELS: {
        long long v;
        ok = parse_ll(value, &v) && (v == 1 || v == 3);
        if (ok) {
            int iv = (int)v;
            memcpy(field, &iv, sizeof(iv));
        }
        break;
    }
    case KT_FLIST: {
        struct gm_job_floats v;
        ok = parse_flist(k, value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_BYTES: {
        uint64_t v;
        ok = parse_bytes(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_SHARES: {
        struct gm_job_shares v;
        ok = parse_shares(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_HIDDEN: {
        int sizes[GM_JOB_HIDDEN_MAX], n = 0;
        ok = parse_hidden(value, sizes, &n);
        if (ok) {
            memcpy(job->hidden, sizes, sizeof(int) * (size_t)n);
            job->n_hidden = n;
        }
        break;
    }
    case KT_ENUM:
        for (int i = 0; k->names[i] != NULL; i++) {
            if (strcmp(value, k->names[i]) == 0) {
                memcpy(field, &i, sizeof(i));
                return;
            }
        }
        list_names(desc, sizeof(desc), k->names, SIZE_MAX);
        gm_ini_fail(ini, ini->line, "unknown %s '%s' (known: %s)", k->what, pv, desc);
        return;
    }
    if (!ok) {
        describe(desc, sizeof(desc), k);
        gm_ini_fail(ini, ini->line, "[%s] %s = %s: must be %s", k->section, k->key, pv, desc);
    }
}

/* --- what the table does not hold ------------------------------------------------------- */

static void unknown_section(struct gm_ini *ini, const char *s, size_t len)
{
    char name[64], known[128];
    size_t n = len < sizeof(name) - 1 ? len : sizeof(name) - 1;

    memcpy(name, s, n);
    name[n] = '\0';
    gm_ini_printable(name, sizeof(name), name);
    list_names(known, sizeof(known), section_names, GM_ARRAY_SIZE(section_names));
    gm_ini_fail(ini, ini->line, "unknown section [%s]%s (known: %s)", name, n < len ? "..." : "",
                known);
}

static void outside(struct gm_ini *ini, const char *key)
{
    char pk[64];

    gm_ini_fail(ini, ini->line, "key '%s' is outside any section (put it under [job], [data], ...)",
                gm_ini_printable(pk, sizeof(pk), key));
}

static void unknown_key(struct gm_ini *ini, const char *section, const char *key)
{
    char pk[64], ps[64], known[256];

    list_keys(known, sizeof(known), section);
    gm_ini_fail(ini, ini->line, "unknown key '%s' in [%s] (known: %s)",
                gm_ini_printable(pk, sizeof(pk), key), gm_ini_printable(ps, sizeof(ps), section),
                known);
}

static void twice(struct gm_ini *ini, const struct gm_ini_key *k, int first_line)
{
    gm_ini_fail(ini, ini->line, "duplicate key [%s] %s (first set on line %d)", k->section, k->key,
                first_line);
}

/* --- whole file --------------------------------------------------------------------------- */

int gm_job_model_spec(const struct gm_job *job, int in_c, int in_h, int in_w, int classes,
                      struct gm_model_spec *out)
{
    memset(out, 0, sizeof(*out));
    out->name = gm_job_model_name(job->model);
    out->in_c = in_c;
    out->in_h = in_h;
    out->in_w = in_w;
    out->classes = classes < 2 ? 2 : classes;
    out->nhidden = job->n_hidden;
    if (out->nhidden > GM_MODEL_MAX_HIDDEN) {
        gm_err("job: %d hidden layers, at most %d supported", out->nhidden, GM_MODEL_MAX_HIDDEN);
        return GM_ERR_CONFIG;
    }
    for (int i = 0; i < out->nhidden; i++)
        out->hidden[i] = job->hidden[i];
    out->dropout = (float)job->dropout;
    out->freeze = job->freeze;
    out->device = GM_DEVICE_CPU;
    return 0;
}

void gm_job_input_shape(const struct gm_job *job, int *c, int *h, int *w)
{
    switch (job->data.kind) {
    case GM_JOB_DATA_KIND_CIFAR10:
        *c = 3, *h = *w = 32;
        break;
    case GM_JOB_DATA_KIND_FOLDER:
        *c = job->data.channels;
        *h = *w = job->data.image_size > 0 ? job->data.image_size : 32;
        break;
    default:
        *c = 1, *h = *w = 28;
        break;
    }
    if (job->data.pad > 0 && job->data.kind != GM_JOB_DATA_KIND_FOLDER) {
        *h += 2 * job->data.pad;
        *w += 2 * job->data.pad;
    }
}

/* The model's graph for this job (no activations): a freeze prefix must match a module,
 * and an image_size must be one the model takes.  The graph's input is [data] image_size
 * when set (3 channels, the folder default), else 224x224: other sizes come from the data
 * and are checked when the model is built (train/trainer.c). */
static int check_model(struct gm_ini *ini)
{
    const struct gm_job *job = ini->dest;
    const int size = job->data.image_size > 0 ? job->data.image_size : 224;
    struct gm_model_spec ms;
    struct gm_graph g;
    int err;

    if (gm_job_model_spec(job, job->data.channels > 0 ? job->data.channels : 3, size, size, 10,
                          &ms) < 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "model", "hidden"),
                    "[model] hidden: at most %d layers", GM_MODEL_MAX_HIDDEN);
        return -1;
    }
    if (gm_graph_init(&g, ms.in_c, ms.in_h, ms.in_w) < 0) {
        gm_ini_fail(ini, 0, "out of memory checking the model");
        return -1;
    }
    err = gm_zoo_build(&g, &ms);
    if (err < 0) {
        gm_ini_fail(ini, job->data.image_size > 0 ? gm_ini_line_of(ini, "data", "image_size") : 0,
                    "[data] image_size = %d: %s", size, g.msg);
    } else if ((err = gm_graph_freeze(&g, job->freeze)) < 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "model", "freeze"), "%s", g.msg);
    }
    gm_graph_free(&g);
    return err < 0 ? -1 : 0;
}

/* [model] init against the model's graph for the job's data: names and shapes (a head of
 * another class count is fine), before anything runs or is written.  The shape is the one
 * the job's data implies (gm_job_input_shape; a folder without image_size is checked at
 * 224x224: sizes only matter for mlp, lenet5 and vgg7's first linear layer, and the trainer
 * checks again with the real data). */
static int check_init(const struct gm_job *job)
{
    struct gm_model_spec ms;
    struct gm_graph g;
    int c, h, w, err;

    gm_job_input_shape(job, &c, &h, &w);
    if (job->data.kind == GM_JOB_DATA_KIND_FOLDER && job->data.image_size <= 0)
        h = w = 224;
    if (gm_job_model_spec(job, c, h, w, 10, &ms) < 0)
        return 0; /* refused by check_model already */
    if ((err = gm_graph_init(&g, ms.in_c, ms.in_h, ms.in_w)) < 0)
        return err;
    if (gm_zoo_build(&g, &ms) < 0) { /* the trainer reports it with the data's real shape */
        gm_graph_free(&g);
        return 0;
    }
    err = gm_weights_check(&g, ms.name, job->init);
    gm_graph_free(&g);
    return err;
}

/* A folder inside [data] dir: relative, no ".." component. */
static bool inside_dir(const char *p)
{
    const char *seg = p;

    if (p[0] == '/')
        return false;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t len = end != NULL ? (size_t)(end - seg) : strlen(seg);
        if (len == 2 && seg[0] == '.' && seg[1] == '.')
            return false;
        if (end == NULL)
            return true;
        seg = end + 1;
    }
}

/* [data]'s rules between keys; false after recording a problem. */
static bool check_data(struct gm_ini *ini)
{
    struct gm_job_data *d = &((struct gm_job *)ini->dest)->data;
    const int crop = d->augment == GM_JOB_AUGMENT_CROP || d->augment == GM_JOB_AUGMENT_CROP_FLIP;
    int lt = gm_ini_line_of(ini, "data", "train_dir"), lv = gm_ini_line_of(ini, "data", "val_dir");
    int line;

    if ((lt != 0) != (lv != 0)) {
        gm_ini_fail(ini, lt ? lt : lv,
                    "[data] train_dir and val_dir go together (or use test_split)");
        return false;
    }
    if (lt != 0 && gm_ini_line_of(ini, "data", "test_split") != 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "data", "test_split"),
                    "[data] test_split does not apply with train_dir and val_dir");
        return false;
    }
    if (lt != 0 && (!inside_dir(d->train_dir) || !inside_dir(d->val_dir))) {
        gm_ini_fail(
            ini, !inside_dir(d->train_dir) ? lt : lv,
            "[data] train_dir and val_dir are folders inside dir (relative, without '..'), so "
            "that the dataset check covers them");
        return false;
    }
    line = gm_ini_line_of(ini, "data", "image_size");
    if (d->image_size == 0 && (crop || d->resize > 0)) {
        gm_ini_fail(ini, line ? line : gm_ini_line_of(ini, "data", crop ? "augment" : "resize"),
                    "[data] image_size = 0 (native size) cannot go with %s: set image_size >= 1",
                    crop ? "augment = crop" : "resize");
        return false;
    }
    if (d->resize > 0 && d->resize < d->image_size) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "data", "resize"),
                    "[data] resize = %d is below image_size = %d: the centre crop must fit",
                    d->resize, d->image_size);
        return false;
    }
    if (d->crop_scale.v[0] > d->crop_scale.v[1] || d->crop_ratio.v[0] > d->crop_ratio.v[1]) {
        gm_ini_fail(
            ini,
            gm_ini_line_of(ini, "data",
                           d->crop_scale.v[0] > d->crop_scale.v[1] ? "crop_scale" : "crop_ratio"),
            "[data] crop_scale and crop_ratio are ranges: the first number is the lower bound");
        return false;
    }
    if ((d->mean.n != 0) != (d->std.n != 0) || d->mean.n != d->std.n || d->mean.n == 2) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "data", d->mean.n ? "mean" : "std"),
                    "[data] mean and std go together, with 1 or 3 values each (the same count)");
        return false;
    }
    if (d->mean.n != 0 && gm_ini_line_of(ini, "data", "normalize") != 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "data", "normalize"),
                    "[data] normalize and mean/std exclude each other: keep one");
        return false;
    }
    return true;
}

/* job->identity: SHA-256 of the text less the lines of the K_EXTENDS keys (ini->seen: the
 * line that set each key; lines end at '\n', as common/ini.c counts them).  Digest failure
 * (out of memory) leaves "", which no checkpoint records (gm_ckpt_sha256_hex does the same). */
static void set_identity(struct gm_ini *ini)
{
    struct gm_job *job = ini->dest;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t pos = 0;
    int line = 1, ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

    job->identity[0] = '\0';
    while (ok && pos < job->text_len) {
        const char *nl = memchr(job->text + pos, '\n', job->text_len - pos);
        size_t end = nl != NULL ? (size_t)(nl - job->text) + 1 : job->text_len;
        bool skip = false;

        for (size_t i = 0; i < NKEYS; i++)
            skip = skip || ((keys[i].flags & K_EXTENDS) && ini->seen[i] == line);
        if (!skip)
            ok = EVP_DigestUpdate(ctx, job->text + pos, end - pos) == 1;
        pos = end;
        line++;
    }
    if (ok && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 32)
        for (unsigned i = 0; i < 32; i++)
            snprintf(job->identity + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
}

/* Rules that involve more than one key, run after the whole file was read. */
static void check_whole(struct gm_ini *ini)
{
    struct gm_job *job = ini->dest;
    int line;

    for (size_t i = 0; i < NKEYS; i++) {
        if ((keys[i].flags & K_REQUIRED) && ini->seen[i] == 0) {
            gm_ini_fail(ini, 0, "missing required key [%s] %s", keys[i].section, keys[i].key);
            return;
        }
    }
    for (size_t i = 0; i < GM_ARRAY_SIZE(applies); i++) {
        const struct applies *a = &applies[i];
        int v;

        line = gm_ini_line_of(ini, a->section, a->key);
        memcpy(&v, (const char *)job + a->enum_off, sizeof(v));
        if (line != 0 && !(a->mask & (1u << v))) {
            gm_ini_fail(ini, line, "[%s] %s only applies with %s", a->section, a->key, a->when);
            return;
        }
    }
    if (gm_ini_line_of(ini, "optim", "batch") == 0 &&
        gm_ini_line_of(ini, "optim", "global_batch") == 0) {
        gm_ini_fail(ini, 0, "missing required key [optim] batch (per worker) or global_batch");
        return;
    }
    if (gm_ini_line_of(ini, "optim", "batch") != 0 &&
        gm_ini_line_of(ini, "optim", "global_batch") != 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "optim", "global_batch"),
                    "[optim] batch (per worker) and global_batch exclude each other: keep one");
        return;
    }
    line = gm_ini_line_of(ini, "optim", "nesterov");
    if (job->optim.nesterov && job->optim.momentum <= 0) {
        gm_ini_fail(ini, line, "[optim] nesterov = true needs momentum > 0");
        return;
    }
    if (job->schedule.kind == GM_JOB_SCHEDULE_KIND_STEP &&
        gm_ini_line_of(ini, "schedule", "step_size") == 0) {
        gm_ini_fail(ini, gm_ini_line_of(ini, "schedule", "kind"),
                    "[schedule] kind = step needs step_size");
        return;
    }
    line = gm_ini_line_of(ini, "schedule", "min_lr");
    if (line != 0 && job->schedule.min_lr >= job->optim.lr) {
        gm_ini_fail(ini, line, "[schedule] min_lr = %g must be below [optim] lr = %g",
                    job->schedule.min_lr, job->optim.lr);
        return;
    }
    if (!check_data(ini))
        return;
    if (check_model(ini) < 0)
        return;
    if (gm_ini_line_of(ini, "job", "out") == 0)
        snprintf(job->out, sizeof(job->out), "%s.safetensors", job->name);
    if (gm_ini_line_of(ini, "job", "checkpoint_dir") == 0)
        snprintf(job->checkpoint_dir, sizeof(job->checkpoint_dir), "%s.checkpoints", job->name);
    set_identity(ini);
}

static const struct gm_ini_spec spec = {
    .keys = keys,
    .nkeys = NKEYS,
    .sections = section_names,
    .nsections = GM_ARRAY_SIZE(section_names),
    .line_max = GM_JOB_LINE_MAX,
    .flags = GM_INI_UTF8 | GM_INI_ALL_BLANKS,
    .set = set_value,
    .whole = check_whole,
    .outside = outside,
    .unknown_section = unknown_section,
    .unknown_key = unknown_key,
    .twice = twice,
};

/* Parses job->text (already set, NUL-terminated). */
static int parse_text(struct gm_job *job, const char *origin)
{
    int err = gm_ini_parse(&spec, job->text, job->text_len, origin, job);

    if (err == -ENOMEM)
        gm_err("%s: out of memory while parsing", origin);
    return err;
}

/* --- public ------------------------------------------------------------------------------- */

void gm_job_defaults(struct gm_job *job)
{
    memset(job, 0, sizeof(*job));
    snprintf(job->name, sizeof(job->name), "job");
    job->model = GM_JOB_MODEL_MLP; /* placeholder: required */
    job->epochs = 5;
    job->seed = 1;
    job->threads = 1;
    job->log_every = 100;
    job->eval_every = 1;
    snprintf(job->out, sizeof(job->out), "job.safetensors");
    job->checkpoint_every = 0;
    job->checkpoint_keep = 3;
    snprintf(job->checkpoint_dir, sizeof(job->checkpoint_dir), "job.checkpoints");
    job->hidden[0] = 256;
    job->n_hidden = 1;
    job->dropout = 0;
    job->data.kind = GM_JOB_DATA_KIND_IDX; /* placeholder: required */
    job->data.test_split = 0.1;
    job->data.image_size = 0;
    job->data.channels = 3;
    job->data.augment = GM_JOB_AUGMENT_NONE;
    job->data.crop_scale = (struct gm_job_floats){2, {0.08, 1.0, 0}};
    job->data.crop_ratio = (struct gm_job_floats){2, {3.0 / 4.0, 4.0 / 3.0, 0}};
    job->data.resize = 0;
    job->data.normalize = GM_JOB_NORMALIZE_NONE;
    job->data.cache = (uint64_t)256 << 20;
    job->data.loader_threads = 0;
    job->data.prefetch = 2;
    job->data.skip_bad = false;
    job->optim.name = GM_JOB_OPTIMIZER_SGD; /* placeholder: required */
    job->optim.lr = 0;                      /* placeholder: required */
    job->optim.batch = 0;                   /* placeholder: this or global_batch required */
    job->optim.global_batch = 0;
    job->optim.momentum = 0;
    job->optim.nesterov = false;
    job->optim.weight_decay = 0;
    job->optim.beta1 = 0.9;
    job->optim.beta2 = 0.999;
    job->optim.eps = 1e-8;
    job->optim.precision = GM_JOB_PRECISION_FP32;
    job->schedule.kind = GM_JOB_SCHEDULE_KIND_CONSTANT;
    job->schedule.warmup_steps = 0;
    job->schedule.step_size = 0; /* required by kind = step */
    job->schedule.gamma = 0.1;
    job->schedule.min_lr = 0;
    job->comm.codec = GM_JOB_CODEC_AUTO;
    job->comm.rank = 2;
    job->comm.local_steps = 16;
    job->comm.outer_lr = 0.7;
    job->comm.outer_momentum = 0.9;
    job->comm.overlap = GM_JOB_OVERLAP_DEFAULT;
    job->comm.bn_refresh = GM_JOB_BN_REFRESH_DEFAULT;
    job->text = NULL;
    job->text_len = 0;
    gm_ckpt_sha256_hex("", 0, job->identity); /* no text: the identity of an empty one */
}

/* Takes ownership of text (malloc'd, len bytes plus a NUL). */
static int parse_owned(char *text, size_t len, const char *origin, struct gm_job *job)
{
    int err;

    gm_job_defaults(job);
    job->text = text;
    job->text_len = len;
    err = parse_text(job, origin);
    if (err != 0)
        gm_job_free(job);
    return err;
}

int gm_job_parse(const char *text, size_t len, const char *origin, struct gm_job *job)
{
    char *copy;

    gm_job_defaults(job);
    if (origin == NULL)
        origin = "job";
    if (len > GM_JOB_TEXT_MAX) {
        gm_err("%s: larger than %d bytes", origin, GM_JOB_TEXT_MAX);
        gm_job_free(job);
        return GM_ERR_CONFIG;
    }
    copy = malloc(len + 1);
    if (copy == NULL) {
        gm_err("%s: out of memory", origin);
        gm_job_free(job);
        return -ENOMEM;
    }
    if (len > 0)
        memcpy(copy, text, len);
    copy[len] = '\0';
    return parse_owned(copy, len, origin, job);
}

int gm_job_load(const char *path, struct gm_job *job)
{
    char *buf = NULL;
    size_t len = 0;
    int fd, err;

    gm_job_defaults(job);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = -errno;
        gm_err("%s: cannot read: %s", path, gm_strerror(err));
        gm_job_free(job);
        return GM_ERR_CONFIG;
    }
    buf = malloc(GM_JOB_TEXT_MAX + 2);
    if (buf == NULL) {
        gm_err("%s: out of memory", path);
        err = -ENOMEM;
        goto out;
    }
    for (;;) { /* read one byte past the cap to tell "exactly the cap" from "more" */
        ssize_t r = read(fd, buf + len, GM_JOB_TEXT_MAX + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = -errno;
            gm_err("%s: cannot read: %s", path, gm_strerror(err));
            err = GM_ERR_CONFIG;
            goto out;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len > GM_JOB_TEXT_MAX) {
            gm_err("%s: larger than %d bytes", path, GM_JOB_TEXT_MAX);
            err = GM_ERR_CONFIG;
            goto out;
        }
    }
    buf[len] = '\0';
    close(fd);
    if ((err = parse_owned(buf, len, path, job)) < 0)
        return err;
    if (job->init[0] != '\0' && (err = check_init(job)) < 0) {
        gm_job_free(job);
        return err;
    }
    return 0;
out:
    free(buf);
    close(fd);
    gm_job_free(job);
    return err;
}

/* gm_job_diff's reading of a text: every key's value as inih hands it (trimmed, inline
 * comment dropped), NULL where unset; the checks of set_value are not run. */
struct raw_values {
    char *v[NKEYS];
    bool nomem;
};

static void raw_set(struct gm_ini *ini, const struct gm_ini_key *k, const char *value)
{
    struct raw_values *rv = ini->dest;
    size_t i = (size_t)(k - keys);

    rv->v[i] = strdup(value);
    rv->nomem = rv->nomem || rv->v[i] == NULL;
}

static const struct gm_ini_spec raw_spec = {
    .keys = keys,
    .nkeys = NKEYS,
    .sections = section_names,
    .nsections = GM_ARRAY_SIZE(section_names),
    .line_max = GM_JOB_LINE_MAX,
    .flags = GM_INI_UTF8 | GM_INI_ALL_BLANKS,
    .set = raw_set,
    .whole = NULL,
    .outside = outside,
    .unknown_section = unknown_section,
    .unknown_key = unknown_key,
    .twice = twice,
};

static void raw_free(struct raw_values *rv)
{
    for (size_t i = 0; i < NKEYS; i++)
        free(rv->v[i]);
    memset(rv, 0, sizeof(*rv));
}

static int raw_read(const char *text, size_t len, const char *origin, struct raw_values *rv)
{
    int err;

    memset(rv, 0, sizeof(*rv));
    if (len > GM_JOB_TEXT_MAX) {
        gm_err("%s: larger than %d bytes", origin, GM_JOB_TEXT_MAX);
        return GM_ERR_CONFIG;
    }
    err = gm_ini_parse(&raw_spec, text, len, origin, rv);
    if (err == 0 && rv->nomem)
        err = -ENOMEM;
    if (err != 0)
        raw_free(rv);
    return err;
}

int gm_job_diff(const char *was, size_t was_len, const char *now, size_t now_len, char *out,
                size_t n)
{
    struct raw_values a, b;
    size_t used = 0;
    int err, count = 0;

    if (n > 0)
        out[0] = '\0';
    if ((err = raw_read(was, was_len, "the earlier job text", &a)) != 0)
        return err;
    if ((err = raw_read(now, now_len, "the job text", &b)) != 0) {
        raw_free(&a);
        return err;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        char pa[64], pb[64];
        int w;

        if ((keys[i].flags & K_EXTENDS) || (a.v[i] == NULL && b.v[i] == NULL) ||
            (a.v[i] != NULL && b.v[i] != NULL && strcmp(a.v[i], b.v[i]) == 0))
            continue;
        w = snprintf(out + used, n > used ? n - used : 0, "%s[%s] %s (%s -> %s)",
                     count > 0 ? ", " : "", keys[i].section, keys[i].key,
                     a.v[i] != NULL ? gm_ini_printable(pa, sizeof(pa), a.v[i]) : "unset",
                     b.v[i] != NULL ? gm_ini_printable(pb, sizeof(pb), b.v[i]) : "unset");
        if (w > 0)
            used = used + (size_t)w < n ? used + (size_t)w : (n > 0 ? n - 1 : 0);
        count++;
    }
    raw_free(&a);
    raw_free(&b);
    return count;
}

void gm_job_free(struct gm_job *job)
{
    if (job == NULL)
        return;
    free(job->text);
    memset(job, 0, sizeof(*job));
}

static const char *name_of(const char *const *names, size_t count, int v)
{
    return v >= 0 && (size_t)v < count && names[v] != NULL ? names[v] : "?";
}

const char *gm_job_model_name(enum gm_job_model m)
{
    return name_of(model_names, GM_ARRAY_SIZE(model_names), (int)m);
}

const char *gm_job_data_kind_name(enum gm_job_data_kind k)
{
    return name_of(data_kind_names, GM_ARRAY_SIZE(data_kind_names), (int)k);
}

const char *gm_job_augment_name(enum gm_job_augment a)
{
    return name_of(augment_names, GM_ARRAY_SIZE(augment_names), (int)a);
}

const char *gm_job_optimizer_name(enum gm_job_optimizer o)
{
    return name_of(optimizer_names, GM_ARRAY_SIZE(optimizer_names), (int)o);
}

const char *gm_job_schedule_kind_name(enum gm_job_schedule_kind k)
{
    return name_of(schedule_kind_names, GM_ARRAY_SIZE(schedule_kind_names), (int)k);
}

int gm_job_model_parse(const char *name, enum gm_job_model *out)
{
    for (int i = 0; name != NULL && model_names[i] != NULL; i++)
        if (strcmp(name, model_names[i]) == 0) {
            *out = (enum gm_job_model)i;
            return 0;
        }
    return -EINVAL;
}

const char *gm_job_codec_name(enum gm_job_codec c)
{
    return name_of(codec_names, GM_ARRAY_SIZE(codec_names), (int)c);
}

int gm_job_codec_parse(const char *name, enum gm_job_codec *out)
{
    for (int i = 0; name != NULL && i < GM_JOB_CODEC_COUNT; i++)
        if (strcmp(name, codec_names[i]) == 0) {
            *out = (enum gm_job_codec)i;
            return 0;
        }
    return -EINVAL;
}

const char *gm_job_precision_name(enum gm_job_precision p)
{
    return name_of(precision_names, GM_ARRAY_SIZE(precision_names), (int)p);
}

void gm_job_split_by(int g, int world, const uint32_t *w, int *counts)
{
    uint64_t sum = 0, rem[GM_JOB_SHARES_MAX];
    int given = 0;

    if (w == NULL || world > GM_JOB_SHARES_MAX) { /* equal: G/W, the first G mod W one more */
        for (int r = 0; r < world; r++)
            counts[r] = g / world + (r < g % world ? 1 : 0);
        return;
    }
    for (int r = 0; r < world; r++)
        sum += w[r];
    /* largest remainder (Hamilton): the floors first, then one more sample each to the
     * largest remainders, ties to the lower rank; integer arithmetic only, so every rank
     * computes the same counts */
    for (int r = 0; r < world; r++) {
        uint64_t q = (uint64_t)g * w[r];
        counts[r] = (int)(q / sum);
        rem[r] = q % sum;
        given += counts[r];
    }
    while (given < g) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (rem[r] > rem[best])
                best = r;
        counts[best]++;
        rem[best] = 0; /* at most one extra each: the extras number fewer than world */
        given++;
    }
}

void gm_job_split(const struct gm_job *job, int g, int world, int *counts)
{
    const bool fixed = job->shares.mode == GM_JOB_SHARES_FIXED && job->shares.n == world;

    gm_job_split_by(g, world, fixed ? job->shares.w : NULL, counts);
}

/* "3:1" into buf, for messages */
static const char *shares_text(const struct gm_job_shares *sh, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < sh->n && o + 1 < len; i++) {
        int k = snprintf(buf + o, len - o, "%s%u", i ? ":" : "", sh->w[i]);
        if (k < 0 || (size_t)k >= len - o)
            break;
        o += (size_t)k;
    }
    return buf;
}

int gm_job_global_batch(const struct gm_job *job, int world, int *out)
{
    const bool fixed = job->shares.mode == GM_JOB_SHARES_FIXED;
    char sh[GM_JOB_LINE_MAX + 1];
    int g, counts[GM_JOB_SHARES_MAX];

    *out = 0;
    if (world < 1)
        return -EINVAL;
    if (fixed && job->shares.n != world) {
        gm_err("job %s: [job] shares = %s names %d ranks, but %d workers run the job: list one "
               "weight per worker, or set shares = equal",
               job->name, shares_text(&job->shares, sh, sizeof(sh)), job->shares.n, world);
        return GM_ERR_CONFIG;
    }
    if (job->optim.global_batch > 0) {
        if (job->shares.mode == GM_JOB_SHARES_AUTO && job->optim.global_batch < world) {
            gm_err("job %s: [optim] global_batch = %d is smaller than the %d workers: each "
                   "takes at least one sample of it",
                   job->name, job->optim.global_batch, world);
            return GM_ERR_CONFIG;
        }
        if (job->shares.mode == GM_JOB_SHARES_EQUAL && job->optim.global_batch % world != 0) {
            gm_err("job %s: [optim] global_batch = %d does not divide by %d workers", job->name,
                   job->optim.global_batch, world);
            return GM_ERR_CONFIG;
        }
        g = job->optim.global_batch;
    } else {
        if (job->optim.batch > INT_MAX / world) {
            gm_err("job %s: [optim] batch = %d times %d workers is too large", job->name,
                   job->optim.batch, world);
            return GM_ERR_CONFIG;
        }
        g = job->optim.batch * world;
    }
    if (fixed) {
        gm_job_split(job, g, world, counts);
        for (int r = 0; r < world; r++) {
            if (counts[r] < 1) {
                gm_err("job %s: [job] shares = %s split the global batch of %d so that rank %d "
                       "gets no sample: raise the batch or that rank's weight",
                       job->name, shares_text(&job->shares, sh, sizeof(sh)), g, r);
                return GM_ERR_CONFIG;
            }
        }
    }
    *out = g;
    return 0;
}
