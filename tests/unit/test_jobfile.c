/*
 * tests/unit/test_jobfile.c - job file parsing: defaults, every key, and each kind of bad file
 * returning GM_ERR_CONFIG with exactly one log line naming file, line and problem.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/err.h"
#include "common/log.h"
#include "common/test.h"
#include "train/ckpt/ckpt.h"
#include "train/job.h"

GM_TEST_DEFINE_STATE;

#define MINIMAL                                                                                    \
    "[job]\n"                                                                                      \
    "model = mlp\n"                                                                                \
    "[data]\n"                                                                                     \
    "kind = idx\n"                                                                                 \
    "dir = /data/fmnist\n"                                                                         \
    "[optim]\n"                                                                                    \
    "name = sgd\n"                                                                                 \
    "lr = 0.1\n"                                                                                   \
    "batch = 64\n"

/* Reads everything from fd (non-blocking pipe end) into buf. */
static void drain(int fd, char *buf, size_t n)
{
    size_t off = 0;

    for (;;) {
        ssize_t r = read(fd, buf + off, n - 1 - off);
        if (r <= 0)
            break;
        off += (size_t)r;
        if (off >= n - 1)
            break;
    }
    buf[off] = '\0';
}

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Log capture around one call: begin points the log at a pipe (fds), end reads what came
 * into log and points it back at stderr. */
static int capture_begin(int fds[2], char *log)
{
    if (pipe(fds) != 0) {
        log[0] = '\0';
        return -errno;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    gm_log_set_fd(fds[1]);
    return 0;
}

static void capture_end(int fds[2], char *log, size_t n)
{
    gm_log_set_fd(2);
    close(fds[1]);
    drain(fds[0], log, n);
    close(fds[0]);
}

/* Parses text as "job.ini", capturing what is logged into log. */
static int parse_capture(const char *text, size_t len, struct gm_job *job, char *log, size_t n)
{
    int fds[2], r;

    if ((r = capture_begin(fds, log)) < 0)
        return r;
    r = gm_job_parse(text, len, "job.ini", job);
    capture_end(fds, log, n);
    return r;
}

static int load_capture(const char *path, struct gm_job *job, char *log, size_t n)
{
    int fds[2], r;

    if ((r = capture_begin(fds, log)) < 0)
        return r;
    r = gm_job_load(path, job);
    capture_end(fds, log, n);
    return r;
}

/* text must fail with exactly the one log line want (without "\n"). */
static void expect_bad(const char *text, const char *want)
{
    struct gm_job job;
    char log[4096], line[1024];

    GM_CHECK_ERR(parse_capture(text, strlen(text), &job, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_EQ(count_lines(log), 1);
    snprintf(line, sizeof(line), "%s\n", want);
    GM_CHECK_STREQ(log, line);
    GM_CHECK(job.text == NULL); /* freed on failure */
    gm_job_free(&job);
}

static int parse_quiet(const char *text, struct gm_job *job)
{
    char log[4096];
    int r = parse_capture(text, strlen(text), job, log, sizeof(log));

    if (r != 0)
        fprintf(stderr, "unexpected: %s", log);
    return r;
}

static void test_defaults(void)
{
    struct gm_job job;

    GM_CHECK_OK(parse_quiet(MINIMAL, &job));
    GM_CHECK_STREQ(job.name, "job");
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_MLP);
    GM_CHECK_EQ(job.epochs, 5);
    GM_CHECK(job.seed == 1);
    GM_CHECK_EQ(job.threads, 1);
    GM_CHECK_EQ(job.log_every, 100);
    GM_CHECK_EQ(job.eval_every, 1);
    GM_CHECK_STREQ(job.out, "job.safetensors");
    GM_CHECK_EQ(job.device.want, GM_DEVICE_WANT_AUTO);
    GM_CHECK(!job.device_set);
    GM_CHECK_EQ(job.n_hidden, 1);
    GM_CHECK_EQ(job.hidden[0], 256);
    GM_CHECK(job.dropout == 0);
    GM_CHECK_EQ(job.data.kind, GM_JOB_DATA_KIND_IDX);
    GM_CHECK_STREQ(job.data.dir, "/data/fmnist");
    GM_CHECK(job.data.test_split == 0.1);
    GM_CHECK_EQ(job.data.image_size, 0);
    GM_CHECK_EQ(job.data.channels, 3);
    GM_CHECK_EQ(job.data.pad, 0);
    GM_CHECK_EQ(job.optim.name, GM_JOB_OPTIMIZER_SGD);
    GM_CHECK(job.optim.lr == 0.1);
    GM_CHECK_EQ(job.optim.batch, 64);
    GM_CHECK(job.optim.momentum == 0);
    GM_CHECK(!job.optim.nesterov);
    GM_CHECK(job.optim.weight_decay == 0);
    GM_CHECK(job.optim.beta1 == 0.9);
    GM_CHECK(job.optim.beta2 == 0.999);
    GM_CHECK(job.optim.eps == 1e-8);
    GM_CHECK_EQ(job.optim.precision, GM_JOB_PRECISION_FP32);
    GM_CHECK_STREQ(gm_job_precision_name(job.optim.precision), "fp32");
    GM_CHECK_EQ(job.schedule.kind, GM_JOB_SCHEDULE_KIND_CONSTANT);
    GM_CHECK_EQ(job.schedule.warmup_steps, 0);
    GM_CHECK(job.schedule.gamma == 0.1);
    GM_CHECK(job.schedule.min_lr == 0);
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_AUTO);
    GM_CHECK_EQ(job.comm.rank, 2);
    GM_CHECK_EQ(job.comm.local_steps, 16);
    GM_CHECK(job.comm.outer_lr == 0.7);
    GM_CHECK(job.comm.outer_momentum == 0.9);
    GM_CHECK(!job.comm.overlap);
    /* the raw text is kept for checkpoint metadata */
    GM_CHECK_EQ(job.text_len, strlen(MINIMAL));
    GM_CHECK_STREQ(job.text, MINIMAL);
    gm_job_free(&job);
    GM_CHECK(job.text == NULL);
    gm_job_free(&job); /* idempotent */
    gm_job_free(NULL);
}

static void test_every_key_sgd(void)
{
    static const char text[] = "; a comment\n"
                               "# another\n"
                               "[job]\n"
                               "name = run-1.a_b\n"
                               "model = mlp ; inline comment\n"
                               "epochs = 12\n"
                               "seed = 18446744073709551615\n"
                               "threads = 8\n"
                               "log_every = 7\n"
                               "eval_every = 3\n"
                               "out = /tmp/w.safetensors\n"
                               "device = cuda:1\n"
                               "[model]\n"
                               "hidden = 512, 256,128\n"
                               "dropout = 0.25\n"
                               "[data]\n"
                               "kind = folder\n"
                               "dir = /srv/images/cats and dogs\n"
                               "test_split = 0.2\n"
                               "image_size = 32\n"
                               "channels = 1\n"
                               "pad = 2\n"
                               "[optim]\n"
                               "name = sgd\n"
                               "lr = 1e-2\n"
                               "batch = 128\n"
                               "momentum = 0.9\n"
                               "nesterov = Yes\n"
                               "weight_decay = 5e-4\n"
                               "precision = bf16\n"
                               "[schedule]\n"
                               "kind = step\n"
                               "warmup_steps = 100\n"
                               "step_size = 1000\n"
                               "gamma = 0.5\n"
                               "[comm]\n"
                               "codec = powersgd\n"
                               "rank = 4\n";
    struct gm_job job;

    GM_CHECK_OK(parse_quiet(text, &job));
    GM_CHECK_STREQ(job.name, "run-1.a_b");
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_MLP);
    GM_CHECK_EQ(job.epochs, 12);
    GM_CHECK(job.seed == UINT64_MAX);
    GM_CHECK_EQ(job.threads, 8);
    GM_CHECK_EQ(job.log_every, 7);
    GM_CHECK_EQ(job.eval_every, 3);
    GM_CHECK_STREQ(job.out, "/tmp/w.safetensors");
    GM_CHECK_EQ(job.device.want, GM_DEVICE_WANT_CUDA);
    GM_CHECK_EQ(job.device.index, 1);
    GM_CHECK(job.device_set);
    GM_CHECK_EQ(job.n_hidden, 3);
    GM_CHECK_EQ(job.hidden[0], 512);
    GM_CHECK_EQ(job.hidden[1], 256);
    GM_CHECK_EQ(job.hidden[2], 128);
    GM_CHECK(job.dropout == 0.25);
    GM_CHECK_EQ(job.data.kind, GM_JOB_DATA_KIND_FOLDER);
    GM_CHECK_STREQ(job.data.dir, "/srv/images/cats and dogs");
    GM_CHECK(job.data.test_split == 0.2);
    GM_CHECK_EQ(job.data.image_size, 32);
    GM_CHECK_EQ(job.data.channels, 1);
    GM_CHECK_EQ(job.data.pad, 2);
    GM_CHECK_EQ(job.optim.name, GM_JOB_OPTIMIZER_SGD);
    GM_CHECK(job.optim.lr == 1e-2);
    GM_CHECK_EQ(job.optim.batch, 128);
    GM_CHECK(job.optim.momentum == 0.9);
    GM_CHECK(job.optim.nesterov);
    GM_CHECK(job.optim.weight_decay == 5e-4);
    GM_CHECK_EQ(job.optim.precision, GM_JOB_PRECISION_BF16);
    GM_CHECK_STREQ(gm_job_precision_name(job.optim.precision), "bf16");
    GM_CHECK_EQ(job.schedule.kind, GM_JOB_SCHEDULE_KIND_STEP);
    GM_CHECK_EQ(job.schedule.warmup_steps, 100);
    GM_CHECK_EQ(job.schedule.step_size, 1000);
    GM_CHECK(job.schedule.gamma == 0.5);
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_POWERSGD);
    GM_CHECK_EQ(job.comm.rank, 4);
    gm_job_free(&job);
}

static void test_every_key_adam(void)
{
    static const char text[] = "\xEF\xBB\xBF[job]\r\n" /* BOM and CRLF */
                               "  name = lenet\r\n"    /* indented: a key, not a continuation */
                               "\tmodel = lenet5\r\n"
                               "[model]\n"
                               "dropout = 0\n"
                               "[data]\n"
                               "kind = cifar10\n"
                               "dir = /d\n"
                               "[optim]\n"
                               "name = adam\n"
                               "lr = .001\n"
                               "batch = 32\n"
                               "weight_decay = 0\n"
                               "beta1 = 0.8\n"
                               "beta2 = 0.99\n"
                               "eps = 1E-6\n"
                               "[schedule]\n"
                               "kind = cosine\n"
                               "min_lr = 1e-5\n"
                               "[comm]\n"
                               "codec = diloco\n"
                               "local_steps = 32\n"
                               "outer_lr = 0.5\n"
                               "outer_momentum = 0.8\n"
                               "overlap = yes\n"
                               "bn_refresh = 4\n";
    struct gm_job job;

    GM_CHECK_OK(parse_quiet(text, &job));
    GM_CHECK_STREQ(job.name, "lenet");
    GM_CHECK_STREQ(job.out, "lenet.safetensors");
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_LENET5);
    GM_CHECK_EQ(job.data.kind, GM_JOB_DATA_KIND_CIFAR10);
    GM_CHECK_EQ(job.optim.name, GM_JOB_OPTIMIZER_ADAM);
    GM_CHECK(job.optim.lr == 0.001);
    GM_CHECK(job.optim.beta1 == 0.8);
    GM_CHECK(job.optim.beta2 == 0.99);
    GM_CHECK(job.optim.eps == 1e-6);
    GM_CHECK_EQ(job.schedule.kind, GM_JOB_SCHEDULE_KIND_COSINE);
    GM_CHECK(job.schedule.min_lr == 1e-5);
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_DILOCO);
    GM_CHECK_EQ(job.comm.local_steps, 32);
    GM_CHECK(job.comm.outer_lr == 0.5);
    GM_CHECK(job.comm.outer_momentum == 0.8);
    GM_CHECK(job.comm.overlap);
    GM_CHECK_EQ(job.comm.bn_refresh, 4);
    GM_CHECK_STREQ(gm_job_model_name(job.model), "lenet5");
    GM_CHECK_STREQ(gm_job_data_kind_name(job.data.kind), "cifar10");
    GM_CHECK_STREQ(gm_job_optimizer_name(job.optim.name), "adam");
    GM_CHECK_STREQ(gm_job_schedule_kind_name(job.schedule.kind), "cosine");
    GM_CHECK_STREQ(gm_job_codec_name(job.comm.codec), "diloco");
    GM_CHECK_STREQ(gm_job_codec_name((enum gm_job_codec)99), "?");
    gm_job_free(&job);
}

/* The job-file example of the design card (README.md "Job file"), verbatim. */
static void test_design_example(void)
{
    static const char text[] =
        "[job]\n"
        "name   = fmnist-lenet\n"
        "model  = lenet5          ; mlp | lenet5 | later: vgg, resnet\n"
        "epochs = 5\n"
        "seed   = 1\n"
        "[data]\n"
        "kind   = idx             ; idx | cifar10 | folder\n"
        "dir    = /usr/share/datasets/fashion-mnist   ; the four standard file names, .gz or not\n"
        "[optim]\n"
        "name   = adam            ; sgd | adam\n"
        "lr     = 0.001\n"
        "batch  = 64              ; per worker\n"
        "[comm]\n"
        "codec  = auto            ; auto | fp32 | fp16 | powersgd | diloco\n";
    struct gm_job job;

    GM_CHECK_OK(parse_quiet(text, &job));
    GM_CHECK_STREQ(job.name, "fmnist-lenet");
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_LENET5);
    GM_CHECK_STREQ(job.data.dir, "/usr/share/datasets/fashion-mnist");
    GM_CHECK_EQ(job.optim.name, GM_JOB_OPTIMIZER_ADAM);
    GM_CHECK_EQ(job.optim.batch, 64);
    GM_CHECK_EQ(job.comm.codec, GM_JOB_CODEC_AUTO);
    gm_job_free(&job);
}

#define HEAD "[job]\nmodel = mlp\n[data]\nkind = idx\ndir = /d\n[optim]\nname = sgd\n"
/* HEAD is 7 lines: line 8 is the first after it. */

static void test_bad_values(void)
{
    expect_bad(HEAD "lr = 0.1\nbatch = -64\n",
               "error: job.ini:9: [optim] batch = -64: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch = 0\n",
               "error: job.ini:9: [optim] batch = 0: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch = 12abc\n",
               "error: job.ini:9: [optim] batch = 12abc: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch = 1.5\n",
               "error: job.ini:9: [optim] batch = 1.5: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch = 99999999999\n",
               "error: job.ini:9: [optim] batch = 99999999999: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch = 0x10\n",
               "error: job.ini:9: [optim] batch = 0x10: must be a positive integer");
    expect_bad(HEAD "lr = 0.1\nbatch =\n", "error: job.ini:9: [optim] batch has an empty value");
    expect_bad(HEAD "lr = 0\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = 0: must be a number > 0");
    expect_bad(HEAD "lr = -0.1\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = -0.1: must be a number > 0");
    expect_bad(HEAD "lr = nan\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = nan: must be a number > 0");
    expect_bad(HEAD "lr = NaN\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = NaN: must be a number > 0");
    expect_bad(HEAD "lr = inf\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = inf: must be a number > 0");
    expect_bad(HEAD "lr = 1e999\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = 1e999: must be a number > 0");
    expect_bad(HEAD "lr = 0x1p-3\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = 0x1p-3: must be a number > 0");
    expect_bad(HEAD "lr = 0.1.\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = 0.1.: must be a number > 0");
    expect_bad(HEAD "lr = 1e\nbatch = 1\n",
               "error: job.ini:8: [optim] lr = 1e: must be a number > 0");
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nmomentum = 1\n",
               "error: job.ini:10: [optim] momentum = 1: must be a number in [0, 1)");
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nprecision = fp16\n",
               "error: job.ini:10: unknown precision 'fp16' (known: fp32, bf16)");
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nnesterov = maybe\n",
               "error: job.ini:10: [optim] nesterov = maybe: must be true, false, yes, no, 1 or 0");
    expect_bad("[job]\nmodel = mlp\nseed = -1\n",
               "error: job.ini:3: [job] seed = -1: must be an integer from 0 to "
               "18446744073709551615");
    expect_bad("[job]\nmodel = mlp\nseed = 18446744073709551616\n",
               "error: job.ini:3: [job] seed = 18446744073709551616: must be an integer from 0 "
               "to 18446744073709551615");
    expect_bad("[job]\nthreads = 1025\n",
               "error: job.ini:2: [job] threads = 1025: must be an integer from 1 to 1024");
    expect_bad("[job]\nepochs = 0\n",
               "error: job.ini:2: [job] epochs = 0: must be a positive integer");
    expect_bad("[job]\nname = ../x\n",
               "error: job.ini:2: [job] name = ../x: must use only letters, digits, '.', '_' and "
               "'-', and not start with '.'");
    expect_bad("[model]\nhidden = 256,,128\n",
               "error: job.ini:2: [model] hidden = 256,,128: must be a comma-separated list of 1 "
               "to 16 integers from 1 to 1048576");
    expect_bad("[model]\nhidden = 256 128\n",
               "error: job.ini:2: [model] hidden = 256 128: must be a comma-separated list of 1 "
               "to 16 integers from 1 to 1048576");
    expect_bad("[model]\nhidden = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n",
               "error: job.ini:2: [model] hidden = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17: "
               "must be a comma-separated list of 1 to 16 integers from 1 to 1048576");
    expect_bad("[data]\nchannels = 2\n", "error: job.ini:2: [data] channels = 2: must be 1 or 3");
    expect_bad("[job]\ndevice = gpu\n", "error: job.ini:2: [job] device = gpu: must be auto, cpu, "
                                        "cuda, cuda:N (N < 64) or cuda:all");
    expect_bad("[job]\ndevice = cuda:64\n", "error: job.ini:2: [job] device = cuda:64: must be "
                                            "auto, cpu, cuda, cuda:N (N < 64) or cuda:all");
    expect_bad("[data]\ntest_split = 1\n",
               "error: job.ini:2: [data] test_split = 1: must be a number in (0, 1)");
    expect_bad("[schedule]\ngamma = 1.5\n",
               "error: job.ini:2: [schedule] gamma = 1.5: must be a number in (0, 1]");
    /* control bytes never reach the log verbatim */
    expect_bad("[job]\nepochs = 1\x1b[2J\n",
               "error: job.ini:2: [job] epochs = 1?[2J: must be a positive integer");
}

static void test_bad_names(void)
{
    expect_bad("[job]\nmodel = lenet7\n",
               "error: job.ini:2: unknown model 'lenet7' (known: mlp, lenet5, vgg7, resnet20, "
               "resnet18, resnet34, resnet50, mobilenet_v2, vgg11_bn, vgg16, vgg16_bn)");
    expect_bad("[job]\nmodel = MLP\n",
               "error: job.ini:2: unknown model 'MLP' (known: mlp, lenet5, vgg7, resnet20, "
               "resnet18, resnet34, resnet50, mobilenet_v2, vgg11_bn, vgg16, vgg16_bn)");
    expect_bad("[optim]\nname = rmsprop\n",
               "error: job.ini:2: unknown optimizer 'rmsprop' (known: sgd, adam)");
    expect_bad("[data]\nkind = csv\n",
               "error: job.ini:2: unknown data kind 'csv' (known: idx, cifar10, folder)");
    expect_bad("[schedule]\nkind = linear\n",
               "error: job.ini:2: unknown schedule kind 'linear' (known: constant, step, cosine)");
    expect_bad("[comm]\ncodec = zstd\n",
               "error: job.ini:2: unknown codec 'zstd' (known: auto, fp32, fp16, powersgd, "
               "diloco, diloco8)");
    expect_bad("[job]\nmodel = mlp\n[optimm]\nlr = 1\n",
               "error: job.ini:3: unknown section [optimm] (known: job, model, data, optim, "
               "schedule, comm)");
    /* an empty unknown section is caught too */
    expect_bad(MINIMAL "[extra]\n",
               "error: job.ini:10: unknown section [extra] (known: job, model, data, optim, "
               "schedule, comm)");
    expect_bad(
        "[optim]\nlrr = 0.1\n",
        "error: job.ini:2: unknown key 'lrr' in [optim] (known: name, lr, batch, global_batch, "
        "momentum, nesterov, weight_decay, beta1, beta2, eps, precision)");
    expect_bad("model = mlp\n",
               "error: job.ini:1: key 'model' is outside any section (put it under [job], "
               "[data], ...)");
}

static void test_bad_structure(void)
{
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nlr = 0.2\n",
               "error: job.ini:10: duplicate key [optim] lr (first set on line 8)");
    /* duplicate across a repeated section header */
    expect_bad(MINIMAL "[job]\nmodel = lenet5\n",
               "error: job.ini:11: duplicate key [job] model (first set on line 2)");
    expect_bad("[job]\nmodel = mlp\n", "error: job.ini: missing required key [data] kind");
    expect_bad(HEAD "batch = 1\n", "error: job.ini: missing required key [optim] lr");
    expect_bad(HEAD "lr = 1\n",
               "error: job.ini: missing required key [optim] batch (per worker) or global_batch");
    expect_bad(HEAD "lr = 1\nbatch = 8\nglobal_batch = 16\n",
               "error: job.ini:10: [optim] batch (per worker) and global_batch exclude each other: "
               "keep one");
    expect_bad("", "error: job.ini: missing required key [job] model");
    expect_bad("[job]\nmodel mlp\n",
               "error: job.ini:2: syntax error: expected '[section]' or 'key = value'");
    expect_bad("[job\nmodel = mlp\n",
               "error: job.ini:1: syntax error: expected '[section]' or 'key = value'");
    /* the earlier of a syntax error and a value error is the one reported */
    expect_bad("[job]\nmodel mlp\nepochs = -1\n",
               "error: job.ini:2: syntax error: expected '[section]' or 'key = value'");
    expect_bad("[job]\nepochs = -1\nmodel mlp\n",
               "error: job.ini:2: [job] epochs = -1: must be a positive integer");
}

static void test_bad_combinations(void)
{
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nnesterov = true\n",
               "error: job.ini:10: [optim] nesterov = true needs momentum > 0");
    expect_bad(HEAD "lr = 0.1\nbatch = 1\nbeta1 = 0.5\n",
               "error: job.ini:10: [optim] beta1 only applies with name = adam");
    expect_bad("[job]\nmodel = mlp\n[data]\nkind = idx\ndir = /d\n[optim]\nname = adam\n"
               "lr = 0.1\nbatch = 1\nmomentum = 0.9\n",
               "error: job.ini:10: [optim] momentum only applies with name = sgd");
    expect_bad(MINIMAL "[data]\ntest_split = 0.5\n",
               "error: job.ini:11: [data] test_split only applies with kind = folder");
    expect_bad("[job]\nmodel = lenet5\n[model]\nhidden = 10\n[data]\nkind = idx\ndir = /d\n"
               "[optim]\nname = sgd\nlr = 0.1\nbatch = 1\n",
               "error: job.ini:4: [model] hidden only applies with [job] model = mlp");
    expect_bad(MINIMAL "[schedule]\nkind = step\n",
               "error: job.ini:11: [schedule] kind = step needs step_size");
    expect_bad(MINIMAL "[schedule]\ngamma = 0.5\n",
               "error: job.ini:11: [schedule] gamma only applies with kind = step");
    expect_bad(MINIMAL "[schedule]\nkind = cosine\nmin_lr = 0.1\n",
               "error: job.ini:12: [schedule] min_lr = 0.1 must be below [optim] lr = 0.1");
    expect_bad(MINIMAL "[comm]\ncodec = fp16\nrank = 4\n",
               "error: job.ini:12: [comm] rank only applies with codec = powersgd or auto");
    expect_bad(
        MINIMAL "[comm]\ncodec = powersgd\nlocal_steps = 4\n",
        "error: job.ini:12: [comm] local_steps only applies with codec = diloco, diloco8 or auto");
    expect_bad(
        MINIMAL "[comm]\ncodec = fp32\noverlap = true\n",
        "error: job.ini:12: [comm] overlap only applies with codec = diloco, diloco8 or auto");
    expect_bad(
        MINIMAL "[comm]\ncodec = fp16\nbn_refresh = 2\n",
        "error: job.ini:12: [comm] bn_refresh only applies with codec = diloco, diloco8 or auto");
    expect_bad(MINIMAL "[comm]\ncodec = diloco\nbn_refresh = 1025\n",
               "error: job.ini:12: [comm] bn_refresh = 1025: must be an integer from 0 to 1024");
}

/* [model] init and freeze, and image_size against the model's graph. */
#define FAMILY(model, extra)                                                                       \
    "[job]\nmodel = " model "\n[model]\n" extra "[data]\nkind = folder\ndir = /d\n"                \
    "image_size = 64\n[optim]\nname = sgd\nlr = 0.1\nbatch = 1\n"

static void test_model_keys(void)
{
    char log[4096];
    struct gm_job job;
    const char *ok = FAMILY("resnet18", "init = /w/resnet18.safetensors\nfreeze = layer1 layer2.0 "
                                        "conv1\n");

    GM_CHECK_OK(parse_capture(ok, strlen(ok), &job, log, sizeof(log)));
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_RESNET18);
    GM_CHECK_STREQ(job.init, "/w/resnet18.safetensors");
    GM_CHECK_STREQ(job.freeze, "layer1 layer2.0 conv1");
    gm_job_free(&job);
    ok = FAMILY("vgg16_bn", "freeze = backbone\n");
    GM_CHECK_OK(parse_capture(ok, strlen(ok), &job, log, sizeof(log)));
    GM_CHECK_STREQ(gm_job_model_name(job.model), "vgg16_bn");
    gm_job_free(&job);
    expect_bad(FAMILY("resnet18", "freeze = layer1 layer9\n"),
               "error: job.ini:4: [model] freeze: 'layer9' matches no module (a module name such "
               "as 'fc', or a dotted prefix of one, or 'backbone')");
    expect_bad(FAMILY("resnet50", "freeze = fc.weight\n"),
               "error: job.ini:4: [model] freeze: 'fc.weight' matches no module (a module name "
               "such as 'fc', or a dotted prefix of one, or 'backbone')");
    expect_bad(FAMILY("mobilenet_v2", "freeze = features classifier\n"),
               "error: job.ini:4: [model] freeze = features classifier leaves no parameter to "
               "train");
    expect_bad("[job]\nmodel = vgg16\n[data]\nkind = folder\ndir = /d\nimage_size = 28\n"
               "[optim]\nname = sgd\nlr = 0.1\nbatch = 1\n",
               "error: job.ini:6: [data] image_size = 28: vgg16 takes images of at least 32x32 "
               "(five 2x2 max-pools), not 28x28");
}

#define FOLDER                                                                                     \
    "[job]\nmodel = mlp\n[optim]\nname = sgd\nlr = 0.1\nbatch = 1\n[data]\nkind = folder\n"        \
    "dir = /d\n"
/* FOLDER is 9 lines. */

static void test_photo_keys(void)
{
    struct gm_job job;

    GM_CHECK_OK(parse_quiet(FOLDER "train_dir = TrainData\nval_dir = Val/Data\nimage_size = 64\n"
                                   "resize = 72\naugment = crop_flip\ncrop_scale = 0.25, 1\n"
                                   "crop_ratio = 0.5,2\nmean = 0.5\nstd = 0.25\ncache = 2G\n"
                                   "loader_threads = 3\nprefetch = 4\nskip_bad = yes\n",
                            &job));
    GM_CHECK_STREQ(job.data.train_dir, "TrainData");
    GM_CHECK_STREQ(job.data.val_dir, "Val/Data");
    GM_CHECK_EQ(job.data.augment, GM_JOB_AUGMENT_CROP_FLIP);
    GM_CHECK(job.data.crop_scale.n == 2 && job.data.crop_scale.v[0] == 0.25 &&
             job.data.crop_scale.v[1] == 1);
    GM_CHECK(job.data.crop_ratio.v[0] == 0.5 && job.data.crop_ratio.v[1] == 2);
    GM_CHECK(job.data.mean.n == 1 && job.data.mean.v[0] == 0.5 && job.data.std.v[0] == 0.25);
    GM_CHECK_EQ(job.data.cache, (uint64_t)2 << 30);
    GM_CHECK_EQ(job.data.resize, 72);
    GM_CHECK_EQ(job.data.loader_threads, 3);
    GM_CHECK_EQ(job.data.prefetch, 4);
    GM_CHECK(job.data.skip_bad);
    gm_job_free(&job);
    /* defaults */
    GM_CHECK_OK(parse_quiet(FOLDER, &job));
    GM_CHECK_EQ(job.data.augment, GM_JOB_AUGMENT_NONE);
    GM_CHECK(job.data.crop_scale.v[0] == 0.08 && job.data.crop_ratio.v[1] == 4.0 / 3.0);
    GM_CHECK_EQ(job.data.cache, (uint64_t)256 << 20);
    GM_CHECK_EQ(job.data.normalize, GM_JOB_NORMALIZE_NONE);
    gm_job_free(&job);
    GM_CHECK_OK(parse_quiet(FOLDER "normalize = imagenet\ncache = 0\n", &job));
    GM_CHECK_EQ(job.data.normalize, GM_JOB_NORMALIZE_IMAGENET);
    GM_CHECK_EQ(job.data.cache, 0);
    gm_job_free(&job);

    expect_bad(FOLDER "train_dir = t\n",
               "error: job.ini:10: [data] train_dir and val_dir go together (or use test_split)");
    expect_bad(FOLDER "train_dir = t\nval_dir = v\ntest_split = 0.2\n",
               "error: job.ini:12: [data] test_split does not apply with train_dir and val_dir");
    expect_bad(FOLDER "train_dir = t\nval_dir = a/../../v\n",
               "error: job.ini:11: [data] train_dir and val_dir are folders inside dir (relative, "
               "without '..'), so that the dataset check covers them");
    expect_bad(FOLDER "train_dir = /t\nval_dir = v\n",
               "error: job.ini:10: [data] train_dir and val_dir are folders inside dir (relative, "
               "without '..'), so that the dataset check covers them");
    expect_bad(FOLDER "augment = crop\n",
               "error: job.ini:10: [data] image_size = 0 (native size) cannot go with augment = "
               "crop: set image_size >= 1");
    expect_bad(FOLDER "image_size = 0\nresize = 10\n",
               "error: job.ini:10: [data] image_size = 0 (native size) cannot go with resize: set "
               "image_size >= 1");
    expect_bad(FOLDER "image_size = 32\nresize = 31\n",
               "error: job.ini:11: [data] resize = 31 is below image_size = 32: the centre crop "
               "must fit");
    expect_bad(
        FOLDER "crop_scale = 0.5, 1\n",
        "error: job.ini:10: [data] crop_scale only applies with augment = crop or crop_flip");
    expect_bad(
        FOLDER "image_size = 8\naugment = crop\ncrop_scale = 0.5, 0.25\n",
        "error: job.ini:12: [data] crop_scale and crop_ratio are ranges: the first number is "
        "the lower bound");
    expect_bad(FOLDER "image_size = 8\naugment = crop\ncrop_scale = 0, 1\n",
               "error: job.ini:12: [data] crop_scale = 0, 1: must be 2 comma-separated numbers, "
               "each in (0, 1]");
    expect_bad(FOLDER "image_size = 8\naugment = crop\ncrop_ratio = 1\n",
               "error: job.ini:12: [data] crop_ratio = 1: must be 2 comma-separated numbers, each "
               "> 0");
    expect_bad(FOLDER "mean = 0.5, 0.5, 0.5\n",
               "error: job.ini:10: [data] mean and std go together, with 1 or 3 values each (the "
               "same count)");
    expect_bad(FOLDER "mean = 0.5, 0.5\nstd = 1, 1\n",
               "error: job.ini:10: [data] mean and std go together, with 1 or 3 values each (the "
               "same count)");
    expect_bad(
        FOLDER "std = 0\nmean = 0\n",
        "error: job.ini:10: [data] std = 0: must be 1 to 3 comma-separated numbers, each > 0");
    expect_bad(FOLDER "mean = 0\nstd = 1\nnormalize = imagenet\n",
               "error: job.ini:12: [data] normalize and mean/std exclude each other: keep one");
    expect_bad(FOLDER "cache = 12X\n",
               "error: job.ini:10: [data] cache = 12X: must be a byte count (digits, optionally "
               "followed by K, M, G or T)");
    expect_bad(FOLDER "cache = 99999999999T\n",
               "error: job.ini:10: [data] cache = 99999999999T: must be a byte count (digits, "
               "optionally followed by K, M, G or T)");
    expect_bad(MINIMAL "[data]\naugment = flip\n",
               "error: job.ini:11: [data] augment only applies with kind = folder");
    expect_bad(MINIMAL "[data]\nskip_bad = true\n",
               "error: job.ini:11: [data] skip_bad only applies with kind = folder");
    expect_bad(FOLDER "augment = mixup\n",
               "error: job.ini:10: unknown augment 'mixup' (known: none, flip, crop, crop_flip)");
}

static void test_bad_bytes(void)
{
    char text[512], log[4096];
    struct gm_job job;

    expect_bad("[job]\nname = caf\xe9\n", "error: job.ini:2: text is not valid UTF-8");
    expect_bad("[job]\nname = \xed\xa0\x80\n", "error: job.ini:2: text is not valid UTF-8");
    expect_bad("[job]\nname = \xc0\xaf\n", "error: job.ini:2: text is not valid UTF-8");
    GM_CHECK_ERR(parse_capture("[job]\n\nname = a\0b\n", 17, &job, log, sizeof(log)),
                 GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job.ini:3: NUL byte in the text\n");

    /* 197 bytes is the longest line; 198 is refused rather than split */
    snprintf(text, sizeof(text), MINIMAL "[job]\nname = %0*d\n", 197 - 7, 0);
    GM_CHECK_ERR(parse_capture(text, strlen(text), &job, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job.ini:11: [job] name is longer than 63 bytes\n");
    snprintf(text, sizeof(text), MINIMAL "[job]\nout = %0*d\n", 197 - 6, 0);
    GM_CHECK_OK(parse_capture(text, strlen(text), &job, log, sizeof(log)));
    GM_CHECK_EQ(strlen(job.out), 191);
    gm_job_free(&job);
    snprintf(text, sizeof(text), MINIMAL "[job]\nout = %0*d\n", 198 - 6, 0);
    GM_CHECK_ERR(parse_capture(text, strlen(text), &job, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job.ini:11: line is longer than 197 bytes\n");
    /* unterminated last line */
    GM_CHECK_OK(
        parse_capture(MINIMAL "momentum = 0.5", strlen(MINIMAL) + 14, &job, log, sizeof(log)));
    GM_CHECK(job.optim.momentum == 0.5);
    gm_job_free(&job);
}

static char tmpdir[256];

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    GM_CHECK(f != NULL);
    if (f == NULL)
        return;
    GM_CHECK_EQ(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* The recipes shipped in docs/jobs/ parse, and name the model their file name says. */
static void test_shipped_jobs(void)
{
    static const struct {
        const char *file;
        enum gm_job_model model;
        int pad;
    } jobs[] = {
        {"docs/jobs/fmnist-mlp.ini", GM_JOB_MODEL_MLP, 0},
        {"docs/jobs/fmnist-lenet5.ini", GM_JOB_MODEL_LENET5, 0},
        {"docs/jobs/fmnist-vgg7.ini", GM_JOB_MODEL_VGG7, 2},
        {"docs/jobs/fmnist-resnet20.ini", GM_JOB_MODEL_RESNET20, 2},
        {"docs/jobs/cifar10-vgg7.ini", GM_JOB_MODEL_VGG7, 0},
        {"docs/jobs/cifar10-resnet20.ini", GM_JOB_MODEL_RESNET20, 0},
    };
    char log[4096];
    struct gm_job job;

    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        GM_CHECK_OK(load_capture(jobs[i].file, &job, log, sizeof(log)));
        GM_CHECK_STREQ(log, "");
        GM_CHECK_EQ(job.model, jobs[i].model);
        GM_CHECK_EQ(job.data.pad, jobs[i].pad);
        gm_job_free(&job);
    }
}

static void test_load(void)
{
    char path[512], want[1024], log[4096];
    struct gm_job job;
    char *big;
    size_t off;

    snprintf(path, sizeof(path), "%s/job.ini", tmpdir);
    write_file(path, MINIMAL, strlen(MINIMAL));
    GM_CHECK_OK(load_capture(path, &job, log, sizeof(log)));
    GM_CHECK_STREQ(log, "");
    GM_CHECK_STREQ(job.text, MINIMAL);
    GM_CHECK_EQ(job.optim.batch, 64);
    gm_job_free(&job);

    /* errors in a file name the file */
    write_file(path, HEAD "lr = 0.1\nbatch = -64\n", strlen(HEAD) + 21);
    GM_CHECK_ERR(load_capture(path, &job, log, sizeof(log)), GM_ERR_CONFIG);
    snprintf(want, sizeof(want), "error: %s:9: [optim] batch = -64: must be a positive integer\n",
             path);
    GM_CHECK_STREQ(log, want);

    snprintf(path, sizeof(path), "%s/absent.ini", tmpdir);
    GM_CHECK_ERR(load_capture(path, &job, log, sizeof(log)), GM_ERR_CONFIG);
    snprintf(want, sizeof(want), "error: %s: cannot read: No such file or directory\n", path);
    GM_CHECK_STREQ(log, want);

    GM_CHECK_ERR(load_capture(tmpdir, &job, log, sizeof(log)), GM_ERR_CONFIG);
    snprintf(want, sizeof(want), "error: %s: cannot read: Is a directory\n", tmpdir);
    GM_CHECK_STREQ(log, want);

    /* exactly GM_JOB_TEXT_MAX bytes is fine, one more is not */
    big = malloc(GM_JOB_TEXT_MAX + 1);
    GM_CHECK(big != NULL);
    if (big == NULL)
        return;
    memcpy(big, MINIMAL, strlen(MINIMAL));
    off = strlen(MINIMAL);
    while (off < GM_JOB_TEXT_MAX) {
        size_t n = GM_JOB_TEXT_MAX - off > 80 ? 80 : GM_JOB_TEXT_MAX - off;
        memset(big + off, ';', n - 1);
        big[off + n - 1] = '\n';
        off += n;
    }
    snprintf(path, sizeof(path), "%s/big.ini", tmpdir);
    write_file(path, big, GM_JOB_TEXT_MAX);
    GM_CHECK_OK(load_capture(path, &job, log, sizeof(log)));
    GM_CHECK_EQ(job.text_len, GM_JOB_TEXT_MAX);
    gm_job_free(&job);
    big[GM_JOB_TEXT_MAX] = '\n';
    write_file(path, big, GM_JOB_TEXT_MAX + 1);
    GM_CHECK_ERR(load_capture(path, &job, log, sizeof(log)), GM_ERR_CONFIG);
    snprintf(want, sizeof(want), "error: %s: larger than 65536 bytes\n", path);
    GM_CHECK_STREQ(log, want);
    GM_CHECK_ERR(parse_capture(big, GM_JOB_TEXT_MAX + 1, &job, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job.ini: larger than 65536 bytes\n");
    free(big);
}

/* The identity leaves out the [job] epochs line and nothing else; gm_job_diff names the keys
 * whose values differ, never epochs. */
static void test_identity_and_diff(void)
{
    static const char a[] = "[job]\nmodel = mlp\nepochs = 5\nseed = 3\n[data]\nkind = idx\n"
                            "dir = /d\n[optim]\nname = sgd\nlr = 0.1\nbatch = 64\n";
    static const char b[] = "[job]\nmodel = mlp\n  epochs: 8\nseed = 3\n[data]\nkind = idx\n"
                            "dir = /d\n[optim]\nname = sgd\nlr = 0.1\nbatch = 64\n";
    static const char none[] = "[job]\nmodel = mlp\nseed = 3\n[data]\nkind = idx\n"
                               "dir = /d\n[optim]\nname = sgd\nlr = 0.1\nbatch = 64\n";
    static const char lr[] = "[job]\nmodel = mlp\nepochs = 8\nseed = 3\n[data]\nkind = idx\n"
                             "dir = /d\n[optim]\nname = sgd\nlr = 0.2 ; faster\nbatch = 64\n"
                             "momentum = 0.9\n";
    static const char comment[] = "[job]\nmodel = mlp\nepochs = 5\nseed = 3 ; same\n[data]\n"
                                  "kind = idx\ndir = /d\n[optim]\nname = sgd\nlr = 0.1\n"
                                  "batch = 64\n";
    /* "epochs" as a value elsewhere is not the key: only the line that set [job] epochs goes */
    static const char other[] = "[job]\nmodel = mlp\nepochs = 5\nseed = 3\n[data]\nkind = idx\n"
                                "dir = /epochs = 5\n[optim]\nname = sgd\nlr = 0.1\nbatch = 64\n";
    struct gm_job ja, jb, jn, jl, jc, jo;
    char out[512], hex[65];

    GM_CHECK_OK(parse_quiet(a, &ja));
    GM_CHECK_OK(parse_quiet(b, &jb));
    GM_CHECK_OK(parse_quiet(none, &jn));
    GM_CHECK_OK(parse_quiet(lr, &jl));
    GM_CHECK_OK(parse_quiet(comment, &jc));
    GM_CHECK_OK(parse_quiet(other, &jo));
    GM_CHECK_EQ(jb.epochs, 8);
    GM_CHECK_EQ(strlen(ja.identity), (size_t)64);
    /* the identity is the SHA-256 of the text less the epochs line: here, of `none` */
    GM_CHECK_STREQ(ja.identity, jn.identity);
    GM_CHECK_STREQ(jb.identity, jn.identity);
    gm_ckpt_sha256_hex(none, strlen(none), hex);
    GM_CHECK_STREQ(jn.identity, hex);
    GM_CHECK(strcmp(ja.identity, jl.identity) != 0);
    GM_CHECK(strcmp(ja.identity, jc.identity) != 0);
    GM_CHECK(strcmp(ja.identity, jo.identity) != 0);

    GM_CHECK_EQ(gm_job_diff(a, strlen(a), b, strlen(b), out, sizeof(out)), 0);
    GM_CHECK_STREQ(out, "");
    GM_CHECK_EQ(gm_job_diff(a, strlen(a), comment, strlen(comment), out, sizeof(out)), 0);
    GM_CHECK_EQ(gm_job_diff(a, strlen(a), lr, strlen(lr), out, sizeof(out)), 2);
    GM_CHECK_STREQ(out, "[optim] lr (0.1 -> 0.2), [optim] momentum (unset -> 0.9)");
    GM_CHECK_EQ(gm_job_diff(lr, strlen(lr), a, strlen(a), out, 20), 2); /* truncated, ended */
    GM_CHECK_EQ(strlen(out), (size_t)19);
    GM_CHECK_EQ(gm_job_diff(a, strlen(a), other, strlen(other), out, sizeof(out)), 1);
    GM_CHECK_STREQ(out, "[data] dir (/d -> /epochs = 5)");
    {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC); /* the refusal's line: not checked */
        GM_CHECK(null >= 0);
        gm_log_set_fd(null);
        GM_CHECK_ERR(gm_job_diff("[job]\nfoo = 1\n", 14, a, strlen(a), out, sizeof(out)),
                     GM_ERR_CONFIG);
        gm_log_set_fd(2);
        close(null);
    }
    gm_job_free(&ja);
    gm_job_free(&jb);
    gm_job_free(&jn);
    gm_job_free(&jl);
    gm_job_free(&jc);
    gm_job_free(&jo);
}

static void cleanup_tmpdir(void)
{
    static const char *const names[] = {"job.ini", "big.ini"};
    char path[512];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

/* gm_job_global_batch for world, capturing its log line (if any) into log. */
static int global_batch_capture(const struct gm_job *job, int world, int *g, char *log, size_t n)
{
    int fds[2], r;

    if ((r = capture_begin(fds, log)) < 0)
        return r;
    r = gm_job_global_batch(job, world, g);
    capture_end(fds, log, n);
    return r;
}

/* [job] shares: the values, the split (sums to G, in proportion, deterministic, equal as
 * before), and the global batch's refusals (wrong world, a rank with no sample). */
static void test_shares(void)
{
    struct gm_job job;
    char log[4096];
    int counts[GM_JOB_SHARES_MAX], g;

    GM_CHECK_OK(parse_quiet(MINIMAL, &job));
    GM_CHECK_EQ(job.shares.mode, GM_JOB_SHARES_EQUAL);
    gm_job_free(&job);
    GM_CHECK_OK(parse_quiet("[job]\nmodel = mlp\nshares = 3:1\n[data]\nkind = idx\ndir = /d\n"
                            "[optim]\nname = sgd\nlr = 0.1\nglobal_batch = 96\n",
                            &job));
    GM_CHECK_EQ(job.shares.mode, GM_JOB_SHARES_FIXED);
    GM_CHECK_EQ(job.shares.n, 2);
    GM_CHECK_EQ(job.shares.w[0], 3u);
    GM_CHECK_EQ(job.shares.w[1], 1u);
    gm_job_split(&job, 96, 2, counts);
    GM_CHECK_EQ(counts[0], 72);
    GM_CHECK_EQ(counts[1], 24);
    /* another world than the shares name: equal (the trainer logs it) */
    gm_job_split(&job, 96, 3, counts);
    GM_CHECK_EQ(counts[0], 32);
    GM_CHECK_EQ(counts[2], 32);
    GM_CHECK_OK(global_batch_capture(&job, 2, &g, log, sizeof(log)));
    GM_CHECK_EQ(g, 96);
    GM_CHECK_STREQ(log, "");
    GM_CHECK_ERR(global_batch_capture(&job, 3, &g, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job job: [job] shares = 3:1 names 2 ranks, but 3 workers run the "
                        "job: list one weight per worker, or set shares = equal\n");
    /* a share that rounds to no sample: 3:1 of 2 is 1.5 and 0.5, the tie to rank 0 */
    job.optim.global_batch = 2;
    GM_CHECK_ERR(global_batch_capture(&job, 2, &g, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job job: [job] shares = 3:1 split the global batch of 2 so that "
                        "rank 1 gets no sample: raise the batch or that rank's weight\n");
    job.optim.global_batch = 3; /* 2.25 and 0.75: 2 and 1 */
    GM_CHECK_OK(global_batch_capture(&job, 2, &g, log, sizeof(log)));
    job.shares.w[0] = 1000000;
    job.shares.w[1] = 1;
    job.optim.global_batch = 0;
    job.optim.batch = 1; /* G = 2: 2 x 1000000/1000001 rounds to 2 and 0 */
    GM_CHECK_ERR(global_batch_capture(&job, 2, &g, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job job: [job] shares = 1000000:1 split the global batch of 2 so "
                        "that rank 1 gets no sample: raise the batch or that rank's weight\n");
    gm_job_free(&job);

    /* equal shares: with a global batch smaller than the world, refused */
    GM_CHECK_OK(parse_quiet(HEAD "lr = 0.1\nglobal_batch = 2\n", &job));
    GM_CHECK_ERR(global_batch_capture(&job, 3, &g, log, sizeof(log)), GM_ERR_CONFIG);
    gm_job_free(&job);

    /* 1:1:2 of 96, and of numbers that leave remainders: the largest get one more, ties
     * to the lower rank; always the whole batch, each rank near its exact share */
    const uint32_t w112[3] = {1, 1, 2}, w7[3] = {7, 5, 3};
    gm_job_split_by(96, 3, w112, counts);
    GM_CHECK_EQ(counts[0], 24);
    GM_CHECK_EQ(counts[1], 24);
    GM_CHECK_EQ(counts[2], 48);
    gm_job_split_by(10, 3, w112, counts); /* 2.5, 2.5, 5: the tie goes to rank 0 */
    GM_CHECK_EQ(counts[0], 3);
    GM_CHECK_EQ(counts[1], 2);
    GM_CHECK_EQ(counts[2], 5);
    for (int G = 1; G <= 200; G++) {
        int sum = 0;
        gm_job_split_by(G, 3, w7, counts);
        for (int r = 0; r < 3; r++) {
            double exact = (double)G * w7[r] / 15.0;
            GM_CHECK(counts[r] >= (int)exact && counts[r] <= (int)exact + 1);
            sum += counts[r];
        }
        GM_CHECK_EQ(sum, G);
        /* NULL: equal, the first G mod W one more (what every job did before shares) */
        gm_job_split_by(G, 7, NULL, counts);
        for (int r = 0; r < 7; r++)
            GM_CHECK_EQ(counts[r], G / 7 + (r < G % 7 ? 1 : 0));
    }
    /* equal weights split exactly as equal shares do */
    const uint32_t w555[5] = {5, 5, 5, 5, 5};
    int eq[5];
    gm_job_split_by(98, 5, w555, counts);
    gm_job_split_by(98, 5, NULL, eq);
    for (int r = 0; r < 5; r++)
        GM_CHECK_EQ(counts[r], eq[r]);

    static const char *const bad[] = {"3",         "3:0",   "3::1", "3:1:", "1.5:1",
                                      "1000001:1", "Equal", "AUTO", " :1"};
    for (size_t i = 0; i < GM_ARRAY_SIZE(bad); i++) {
        char text[64], want[256];
        snprintf(text, sizeof(text), "[job]\nshares = %s\n", bad[i]);
        snprintf(want, sizeof(want),
                 "error: job.ini:2: [job] shares = %s: must be equal, auto, or 2 to 64 weights "
                 "from 1 to 1000000 joined by ':' (3:1)",
                 bad[i][0] == ' ' ? bad[i] + 1 : bad[i]);
        expect_bad(text, want);
    }
    /* auto: equal in one process; the global batch need not divide, but must cover the
     * workers */
    GM_CHECK_OK(parse_quiet("[job]\nmodel = mlp\nshares = auto\n[data]\nkind = idx\ndir = /d\n"
                            "[optim]\nname = sgd\nlr = 0.1\nglobal_batch = 10\n",
                            &job));
    GM_CHECK_EQ(job.shares.mode, GM_JOB_SHARES_AUTO);
    GM_CHECK_OK(global_batch_capture(&job, 3, &g, log, sizeof(log)));
    GM_CHECK_EQ(g, 10);
    gm_job_split(&job, 10, 3, counts);
    GM_CHECK_EQ(counts[0], 4);
    GM_CHECK_EQ(counts[2], 3);
    GM_CHECK_ERR(global_batch_capture(&job, 11, &g, log, sizeof(log)), GM_ERR_CONFIG);
    GM_CHECK_STREQ(log, "error: job job: [optim] global_batch = 10 is smaller than the 11 "
                        "workers: each takes at least one sample of it\n");
    gm_job_free(&job);
}

int main(void)
{
    const char *base = getenv("TMPDIR");

    snprintf(tmpdir, sizeof(tmpdir), "%s/gm-test-job-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_defaults);
    GM_TEST_RUN(test_every_key_sgd);
    GM_TEST_RUN(test_every_key_adam);
    GM_TEST_RUN(test_design_example);
    GM_TEST_RUN(test_bad_values);
    GM_TEST_RUN(test_bad_names);
    GM_TEST_RUN(test_bad_structure);
    GM_TEST_RUN(test_bad_combinations);
    GM_TEST_RUN(test_model_keys);
    GM_TEST_RUN(test_photo_keys);
    GM_TEST_RUN(test_bad_bytes);
    GM_TEST_RUN(test_load);
    GM_TEST_RUN(test_shares);
    GM_TEST_RUN(test_shipped_jobs);
    GM_TEST_RUN(test_identity_and_diff);
    cleanup_tmpdir();
    return gm_test_finish("test_jobfile");
}
