/*
 * tests/unit/test_trainer.c - train/trainer.h's communication-hook contract, on a one-rank
 * "group" over a tiny synthetic IDX dataset (64 training images of 8x8, an MLP, 8 steps):
 *
 *  - a regroup inside after_step, where the resync keeps the state (what rank 0 does: it
 *    broadcasts its own), must not take the step again: the weights equal an undisturbed
 *    run's bit for bit (before the fix rank 0 broadcast the post-step state with the
 *    pre-step count, and every rank applied that step twice);
 *  - a regroup inside after_step whose resync rolls the state back to before the step (the
 *    new group's rank 0 had not taken it) takes the step again: equal bits too;
 *  - after_step sees st->step already counting the step just taken;
 *  - finish runs once on a run that ends, with st->step = total_steps, and not at all on
 *    a run that is stopped early;
 *  - eval_params: the evaluations are of the parameters the hook names (here the model
 *    before its first step: they equal those of a run whose learning rate is 0, bit for bit,
 *    and differ from the replica's own), and the replica trains on from its own parameters,
 *    put back bit for bit (its weights equal a run without the hook's);
 *  - codec state in checkpoints (codec_state / codec_restore, train/sim.h with 2 workers,
 *    16 steps, a checkpoint every 4): a PowerSGD run resumed from the checkpoint of step 8
 *    ends with weights bitwise those of the run that never stopped; the same checkpoint with
 *    its codec state stripped (negative control) ends elsewhere.  (Not DiLoCo: its ranks'
 *    inner optimizer moments and mid-round parameters are their own, and a checkpoint holds
 *    rank 0's; its anchor and outer momentum are restored, not claimed bitwise.)
 * These runs say device = cpu: the CPU is the definition of correct, and they stay on it
 * where a GPU answers too.
 *
 * Where a GPU answers (a CUDA build on a GPU machine; otherwise test_cuda_trainer says why
 * it skips and checks nothing), the same jobs run with device = cuda: an MLP (an epoch) and
 * ResNet-20 (convolutions, batch norm, shortcuts; one step) train to the CPU's weights and
 * batch norm buffers within fp32 tolerance, and the regroup cases above end bitwise equal to the
 * undisturbed GPU run, which exercises the trainer's state copies around the hooks and the model's
 * gradient downloads.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/log.h"
#include "common/test.h"
#include "train/ckpt/ckpt.h"
#include "train/ckpt/safetensors.h"
#include "train/data/idx.h"
#include "train/job.h"
#include "train/kernels/cuda.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"
#include "train/sim.h"
#include "train/trainer.h"

GM_TEST_DEFINE_STATE;

#define NTRAIN 64
#define NTEST 16
#define SIDE 8
#define STEPS 8 /* NTRAIN / global_batch */

static char dir[64];

static void write_idx(const char *name, uint32_t magic, uint32_t n, int images, unsigned salt)
{
    char path[256];
    uint8_t hdr[16];
    size_t hlen = images ? 16 : 8, len = images ? (size_t)n * SIDE * SIDE : n;
    uint8_t *body = malloc(len);
    FILE *f;

    GM_CHECK(body != NULL);
    if (body == NULL)
        return;
    gm_put_be32(hdr, magic);
    gm_put_be32(hdr + 4, n);
    gm_put_be32(hdr + 8, SIDE);
    gm_put_be32(hdr + 12, SIDE);
    for (size_t i = 0; i < len; i++) /* labels 0..3; images a fixed pattern */
        body[i] = images ? (uint8_t)((i * 2654435761u + salt) >> 7) : (uint8_t)(i % 4);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_EQ(fwrite(hdr, 1, hlen, f), hlen);
        GM_CHECK_EQ(fwrite(body, 1, len, f), len);
        GM_CHECK_EQ(fclose(f), 0);
    }
    free(body);
}

static const char *device = "cpu"; /* of the jobs load_job makes */

static int load_job(struct gm_job *job)
{
    char text[1024];
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = t\nmodel = mlp\nepochs = 1\nseed = 3\nlog_every = 1000\n"
                     "device = %s\n"
                     "[model]\nhidden = 16\n"
                     "[data]\nkind = idx\ndir = %s\n"
                     "[optim]\nname = adam\nlr = 0.01\nglobal_batch = %d\n",
                     device, dir, NTRAIN / STEPS);

    return gm_job_parse(text, (size_t)n, "test", job);
}

/* The whole file, for a bitwise comparison of two weight files (same job text, same step). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    *len = 0;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n)
        *len = (size_t)n;
    fclose(f);
    return buf;
}

static void check_same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *pa = slurp(a, &la), *pb = slurp(b, &lb);

    GM_CHECK(pa != NULL && pb != NULL);
    GM_CHECK_EQ(la, lb);
    GM_CHECK(pa != NULL && pb != NULL && la == lb && memcmp(pa, pb, la) == 0);
    free(pa);
    free(pb);
}

/* [optim] precision = bf16 on the CPU: refused as a configuration error (exit 78), the
 * one line naming the key and the way out; nothing trained, no weights written. */
/* The one job -> model mapping (gm_job_model_spec) and the shape a data kind implies. */
static void test_model_spec(void)
{
    struct gm_model_spec ms;
    struct gm_job job;
    int c, h, w;

    gm_job_defaults(&job);
    GM_CHECK_OK(gm_job_model_parse("lenet5", &job.model));
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_LENET5);
    GM_CHECK_ERR(gm_job_model_parse("lenet", &job.model), -EINVAL);
    GM_CHECK_EQ(job.model, GM_JOB_MODEL_LENET5);
    gm_job_input_shape(&job, &c, &h, &w);
    GM_CHECK(c == 1 && h == 28 && w == 28);
    job.data.pad = 2;
    gm_job_input_shape(&job, &c, &h, &w);
    GM_CHECK(c == 1 && h == 32 && w == 32);
    job.data.kind = GM_JOB_DATA_KIND_CIFAR10;
    gm_job_input_shape(&job, &c, &h, &w);
    GM_CHECK(c == 3 && h == 36 && w == 36);
    job.data.kind = GM_JOB_DATA_KIND_FOLDER;
    job.data.image_size = 64;
    gm_job_input_shape(&job, &c, &h, &w);
    GM_CHECK(c == 3 && h == 64 && w == 64); /* a folder's size is the image size, no pad */

    GM_CHECK_OK(gm_job_model_spec(&job, 3, 64, 64, 1, &ms));
    GM_CHECK_STREQ(ms.name, "lenet5");
    GM_CHECK(ms.in_c == 3 && ms.in_h == 64 && ms.in_w == 64 && ms.classes == 2);
    GM_CHECK(ms.nhidden == 1 && ms.hidden[0] == 256 && ms.device == GM_DEVICE_CPU);
    job.n_hidden = GM_MODEL_MAX_HIDDEN + 1;
    GM_CHECK_ERR(gm_job_model_spec(&job, 3, 64, 64, 10, &ms), GM_ERR_CONFIG);
}

static void test_bf16_refused_on_cpu(void)
{
    char text[1024], out[128], line[512];
    struct gm_job job;
    struct gm_train_summary sum;
    volatile sig_atomic_t stop = 0;
    struct gm_train_opts o = {.progress = 0, .stop = &stop, .out = out};
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = b\nmodel = mlp\nepochs = 1\nseed = 3\ndevice = cpu\n"
                     "[model]\nhidden = 16\n"
                     "[data]\nkind = idx\ndir = %s\n"
                     "[optim]\nname = sgd\nlr = 0.05\nglobal_batch = %d\nprecision = bf16\n",
                     dir, NTRAIN / STEPS);
    char logpath[128];
    size_t loglen = 0;
    char *log;
    int fd;

    snprintf(out, sizeof(out), "%s/bf16.safetensors", dir);
    snprintf(logpath, sizeof(logpath), "%s/bf16.log", dir);
    GM_CHECK_OK(gm_job_parse(text, (size_t)n, "test", &job));
    fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    GM_CHECK(fd >= 0);
    if (fd >= 0)
        gm_log_set_fd(fd);
    GM_CHECK_ERR(gm_trainer_run(&job, &o, &sum), GM_ERR_CONFIG);
    gm_log_set_fd(2);
    if (fd >= 0)
        close(fd);
    gm_job_free(&job);
    log = slurp(logpath, &loglen);
    GM_CHECK(log != NULL);
    snprintf(line, sizeof(line), "%.*s", (int)loglen, log != NULL ? log : "");
    fprintf(stderr, "%s", line);
    GM_CHECK(strstr(line, "[optim] precision = bf16 needs a GPU (device = cuda)") != NULL);
    GM_CHECK(strstr(line, "set precision = fp32") != NULL);
    GM_CHECK(access(out, F_OK) != 0);
    free(log);
}

/* A fake one-rank group whose hooks regroup at one chosen point. */
struct fake {
    long regroup_after; /* after_step of this step taken returns GM_ERR_REGROUP once; -1 never */
    int rollback;       /* the resync restores the state from before that step */
    long stop_after;    /* after_step of this step taken sets the stop flag; -1 never */
    volatile sig_atomic_t *stop;
    int resyncs, finishes, bad_after_step;
    long finish_step, expect_after;
    /* the snapshot taken in reduce_grads of step regroup_after */
    float *params, *ostate;
    long ostep, snap_step;
    /* eval_params: evaluate the parameters from before the first step instead */
    int eval_first;
    float *first;
    size_t nfirst;
    int eval_calls;
    /* eval_defer: every epoch's evaluation put off by this many steps (0: no hook); the
     * steps done at each eval_params call (after_step's last st->step) */
    long defer, last_step, eval_at[8];
    /* eval_sum and eval_bcast, with the comm saying world 2 (rank 0 alone runs: its
     * evaluations are of its slice, which is all these count): the steps of the eval_sum
     * calls, one per shared evaluation */
    int shared, sums;
    long sum_at[8];
    /* eval_fsum too (with shared): a second rank whose buffers are twice rank 0's, as
     * eval_bcast last gave them (b0) */
    int fsum, fsums;
    float *b0;
    size_t nb0;
    /* run_ev: the job bn_job's (also with fsum), its [comm] bn_refresh this */
    int bn, refresh;
};

static int fake_reduce(void *ctx, struct gm_train_state *st)
{
    struct fake *f = ctx;
    size_t np = gm_model_num_params(st->model), no = gm_optim_state_len(st->optim);

    f->expect_after = st->step + 1;
    if (f->eval_first && f->first == NULL) {
        f->nfirst = np;
        if ((f->first = malloc(np * sizeof(float))) == NULL)
            return -ENOMEM;
        memcpy(f->first, gm_model_params(st->model), np * sizeof(float));
    }
    if (st->step != f->regroup_after || !f->rollback || f->params != NULL)
        return 0;
    f->params = malloc(np * sizeof(float));
    f->ostate = malloc((no + 1) * sizeof(float));
    if (f->params == NULL || f->ostate == NULL)
        return -ENOMEM;
    memcpy(f->params, gm_model_params(st->model), np * sizeof(float));
    memcpy(f->ostate, gm_optim_state(st->optim), no * sizeof(float));
    f->ostep = st->optim->step; /* Adam's t before the step */
    f->snap_step = st->step;
    return 0; /* gradients are not state: the trainer recomputes them from the data */
}

static int fake_after(void *ctx, struct gm_train_state *st)
{
    struct fake *f = ctx;
    long taken = st->step - 1;

    f->last_step = st->step;
    if (st->step != f->expect_after)
        f->bad_after_step++;
    if (taken == f->stop_after && f->stop != NULL)
        *f->stop = 1;
    if (taken == f->regroup_after) {
        f->regroup_after = -1; /* once */
        return GM_ERR_REGROUP;
    }
    return 0;
}

static int fake_resync(void *ctx, struct gm_train_state *st)
{
    struct fake *f = ctx;

    f->resyncs++;
    if (f->rollback && f->params != NULL) {
        memcpy(gm_model_params(st->model), f->params,
               gm_model_num_params(st->model) * sizeof(float));
        memcpy(gm_optim_state(st->optim), f->ostate, gm_optim_state_len(st->optim) * sizeof(float));
        st->optim->step = f->ostep;
        st->step = f->snap_step;
    }
    return 0;
}

static const float *fake_eval_params(void *ctx, size_t *n)
{
    struct fake *f = ctx;

    if (f->eval_calls < 8)
        f->eval_at[f->eval_calls] = f->last_step;
    f->eval_calls++;
    *n = f->nfirst;
    return f->first;
}

static long fake_eval_defer(void *ctx, long steps_done, long total_steps)
{
    struct fake *f = ctx;

    return f->defer < total_steps - steps_done ? f->defer : total_steps - steps_done;
}

static int fake_eval_sum(void *ctx, long step, double *v, size_t n)
{
    struct fake *f = ctx;

    (void)step, (void)v, (void)n; /* one rank: the sums are its own */
    if (f->sums < 8)
        f->sum_at[f->sums] = f->last_step;
    f->sums++;
    return 0;
}

static int fake_eval_bcast(void *ctx, long step, float *buf, size_t n)
{
    struct fake *f = ctx;

    (void)step; /* rank 0's buffers are its own: kept for eval_fsum */
    if (f->fsum && f->nb0 != n) {
        free(f->b0);
        f->nb0 = 0;
        if ((f->b0 = malloc(n * sizeof(float))) == NULL)
            return -ENOMEM;
        f->nb0 = n;
    }
    if (f->fsum)
        memcpy(f->b0, buf, n * sizeof(float));
    return 0;
}

static int fake_eval_fsum(void *ctx, long step, float *buf, size_t n)
{
    struct fake *f = ctx;

    (void)step;
    if (f->b0 == NULL || f->nb0 != n)
        return -EINVAL;
    f->fsums++;
    for (size_t i = 0; i < n; i++) /* the second rank's weighted difference from rank 0's */
        buf[i] += (float)(0.5 * (2.0 * (double)f->b0[i] - (double)f->b0[i]));
    return 0;
}

static void fake_finish(void *ctx, const struct gm_train_state *st)
{
    struct fake *f = ctx;

    f->finishes++;
    f->finish_step = st->step;
}

/* The test losses of a run's evaluations, in order. */
struct evals {
    int n;
    double loss[4], acc[4];
    long step[4];
};

static void on_eval(void *ctx, const struct gm_train_eval_info *e)
{
    struct evals *v = ctx;

    if (v->n < 4) {
        v->loss[v->n] = e->test_loss;
        v->acc[v->n] = e->test_accuracy;
        v->step[v->n] = e->step;
    }
    v->n++;
}

/* resnet20 (batch norm) on padded images, 8 samples a step */
static int bn_job(struct gm_job *job)
{
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = bm\nmodel = resnet20\nepochs = 2\nseed = 4\ndevice = cpu\n"
                     "[data]\nkind = idx\ndir = %s\npad = 4\n"
                     "[optim]\nname = sgd\nlr = 0.05\nmomentum = 0.9\nglobal_batch = 8\n",
                     dir);

    return gm_job_parse(text, (size_t)n, "test", job);
}

/* run_ev: with epochs, the learning rate (< 0: the job's) and the evaluations recorded */
static int run_ev(const char *out, struct fake *f, struct gm_train_summary *sum, int epochs,
                  float lr, struct evals *ev)
{
    struct gm_job job;
    volatile sig_atomic_t stop = 0;
    struct gm_train_comm comm = {.rank = 0,
                                 .world = f && f->shared ? 2 : 1,
                                 .reduce_grads = fake_reduce,
                                 .after_step = fake_after,
                                 .resync = fake_resync,
                                 .finish = fake_finish,
                                 .eval_params = f && f->eval_first ? fake_eval_params : NULL,
                                 .eval_defer = f && f->defer > 0 ? fake_eval_defer : NULL,
                                 .eval_sum = f && f->shared ? fake_eval_sum : NULL,
                                 .eval_bcast = f && f->shared ? fake_eval_bcast : NULL,
                                 .eval_fsum = f && f->fsum ? fake_eval_fsum : NULL,
                                 .ctx = f};
    struct gm_train_hooks hooks = {.on_eval = on_eval, .ctx = ev};
    struct gm_train_opts o = {.progress = 0,
                              .stop = &stop,
                              .out = out,
                              .comm = f ? &comm : NULL,
                              .hooks = ev != NULL ? &hooks : NULL};
    int err;

    if ((err = f != NULL && (f->fsum || f->bn) ? bn_job(&job) : load_job(&job)) < 0)
        return err;
    if (f != NULL && f->bn)
        job.comm.bn_refresh = f->refresh;
    if (epochs > 0)
        job.epochs = epochs;
    if (lr >= 0)
        job.optim.lr = lr;
    if (f != NULL)
        f->stop = &stop;
    err = gm_trainer_run(&job, &o, sum);
    gm_job_free(&job);
    return err;
}

static int run(const char *out, struct fake *f, struct gm_train_summary *sum)
{
    return run_ev(out, f, sum, 0, -1, NULL);
}

/* eval_params (DiLoCo's outer parameters in the real runs): 2 epochs, an evaluation after
 * each, of the parameters from before the first step. */
static void test_eval_params(void)
{
    char a[128], b[128], c[128];
    struct gm_train_summary sum;
    struct fake own = {.regroup_after = -1, .stop_after = -1};
    struct fake first = {.regroup_after = -1, .stop_after = -1, .eval_first = 1};
    struct fake still = {.regroup_after = -1, .stop_after = -1};
    struct evals ea = {0}, eb = {0}, ec = {0};

    snprintf(a, sizeof(a), "%s/a.safetensors", dir);
    snprintf(b, sizeof(b), "%s/b.safetensors", dir);
    snprintf(c, sizeof(c), "%s/c.safetensors", dir);
    GM_CHECK_OK(run_ev(a, &own, &sum, 2, -1, &ea));   /* its own parameters */
    GM_CHECK_OK(run_ev(b, &first, &sum, 2, -1, &eb)); /* those before its first step */
    GM_CHECK_OK(run_ev(c, &still, &sum, 2, 0, &ec));  /* lr 0: its own never move */
    GM_CHECK_EQ(ea.n, 2);
    GM_CHECK_EQ(eb.n, 2);
    GM_CHECK_EQ(ec.n, 2);
    GM_CHECK_EQ(first.eval_calls, 2);
    GM_CHECK(first.first != NULL);
    check_same_file(a, b); /* the hook's evaluations left the training alone */
    for (int i = 0; i < 2; i++) {
        GM_CHECK(eb.loss[i] == ec.loss[i]); /* the model before any step, bit for bit */
        GM_CHECK(eb.acc[i] == ec.acc[i]);
    }
    GM_CHECK(ea.loss[0] != eb.loss[0] && ea.loss[1] != eb.loss[1]); /* not the replica's */
    { /* stopped early, a run writes its own weights and evaluates those, hook or not */
        struct fake own2 = {.regroup_after = -1, .stop_after = 3};
        struct fake first2 = {.regroup_after = -1, .stop_after = 3, .eval_first = 1};
        struct gm_train_summary s1, s2;
        GM_CHECK_OK(run_ev(a, &own2, &s1, 2, -1, NULL));
        GM_CHECK_OK(run_ev(b, &first2, &s2, 2, -1, NULL));
        GM_CHECK(s1.interrupted && s2.interrupted);
        GM_CHECK_EQ(first2.eval_calls, 0);
        GM_CHECK(s1.test_loss == s2.test_loss);
        GM_CHECK(s2.test_loss != ec.loss[0]); /* not the model before its first step */
        check_same_file(a, b);
        free(first2.first);
    }
    free(first.first);
    (void)unlink(a);
    (void)unlink(b);
    (void)unlink(c);
}

/* eval_defer (overlapped DiLoCo's update in flight at an epoch's end): 3 epochs of STEPS
 * steps.  Put off 3 steps, each evaluation runs 3 steps after its epoch's end (the last at
 * the run's end), still reports its epoch's end step, and the training is untouched (the
 * weights of a run without the hook).  Put off more than an epoch, an evaluation runs at the
 * next epoch's end at the latest.  A regroup before it is due makes rank 0 evaluate at once,
 * alone (not shared: the new group need not have put it off), and so does one at the step it
 * is due; a stop before it leaves the interrupted run's evaluation alone. */
static void test_eval_defer(void)
{
    char a[128], b[128];
    struct gm_train_summary sum;
    struct fake plain = {.regroup_after = -1, .stop_after = -1, .eval_first = 1};
    struct fake later = {.regroup_after = -1, .stop_after = -1, .eval_first = 1, .defer = 3};
    struct fake long_ = {.regroup_after = -1, .stop_after = -1, .eval_first = 1, .defer = 10};
    struct fake regr = {.regroup_after = 9, .stop_after = -1, .eval_first = 1, .defer = 3};
    struct fake stop = {.regroup_after = -1, .stop_after = 9, .eval_first = 1, .defer = 3};
    struct evals ep = {0}, el = {0}, eg = {0}, er = {0}, es = {0};
    const long want_plain[] = {STEPS, 2 * STEPS, 3 * STEPS};
    const long want_later[] = {STEPS + 3, 2 * STEPS + 3, 3 * STEPS};
    const long want_long[] = {2 * STEPS, 3 * STEPS, 3 * STEPS};
    const long want_regr[] = {10, 2 * STEPS + 3, 3 * STEPS};

    snprintf(a, sizeof(a), "%s/a.safetensors", dir);
    snprintf(b, sizeof(b), "%s/b.safetensors", dir);
    GM_CHECK_OK(run_ev(a, &plain, &sum, 3, -1, &ep));
    GM_CHECK_OK(run_ev(b, &later, &sum, 3, -1, &el));
    check_same_file(a, b);
    GM_CHECK_OK(run_ev(b, &long_, &sum, 3, -1, &eg));
    check_same_file(a, b);
    GM_CHECK_OK(run_ev(b, &regr, &sum, 3, -1, &er));
    GM_CHECK_EQ(regr.resyncs, 1);
    GM_CHECK_EQ(plain.eval_calls, 3);
    GM_CHECK_EQ(later.eval_calls, 3);
    GM_CHECK_EQ(long_.eval_calls, 3);
    GM_CHECK_EQ(regr.eval_calls, 3);
    GM_CHECK_EQ(ep.n, 3);
    GM_CHECK_EQ(el.n, 3);
    GM_CHECK_EQ(eg.n, 3);
    GM_CHECK_EQ(er.n, 3);
    for (int i = 0; i < 3; i++) {
        GM_CHECK_EQ(plain.eval_at[i], want_plain[i]);
        GM_CHECK_EQ(later.eval_at[i], want_later[i]);
        GM_CHECK_EQ(long_.eval_at[i], want_long[i]);
        GM_CHECK_EQ(regr.eval_at[i], want_regr[i]);
        /* reported at the epoch's end, and of the parameters eval_params names */
        GM_CHECK_EQ(el.step[i], (i + 1) * STEPS);
        GM_CHECK_EQ(eg.step[i], (i + 1) * STEPS);
        GM_CHECK_EQ(er.step[i], (i + 1) * STEPS);
        GM_CHECK(el.loss[i] == ep.loss[i]);
    }
    { /* shared evaluations: a regroup at the step epoch 1's is due (11) makes it rank 0's
       * alone; epochs 2 and 3 are shared */
        struct fake at = {
            .regroup_after = 10, .stop_after = -1, .eval_first = 1, .defer = 3, .shared = 1};
        struct evals ea = {0};
        GM_CHECK_OK(run_ev(b, &at, &sum, 3, -1, &ea));
        GM_CHECK_EQ(at.resyncs, 1);
        GM_CHECK_EQ(ea.n, 3);
        GM_CHECK_EQ(at.eval_calls, 3);
        GM_CHECK_EQ(at.eval_at[0], STEPS + 3);
        GM_CHECK_EQ(at.sums, 2);
        GM_CHECK_EQ(at.sum_at[0], 2 * STEPS + 3);
        GM_CHECK_EQ(at.sum_at[1], 3 * STEPS);
        free(at.first);
        free(at.params);
        free(at.ostate);
    }
    GM_CHECK_OK(run_ev(b, &stop, &sum, 3, -1, &es));
    GM_CHECK(sum.interrupted);
    GM_CHECK_EQ(stop.eval_calls, 0); /* epoch 1's was still put off */
    GM_CHECK_EQ(es.n, 1);            /* the interrupted run's, of the replica */
    GM_CHECK_EQ(es.step[0], 10);
    free(plain.first);
    free(later.first);
    free(long_.first);
    free(regr.first);
    free(stop.first);
    free(regr.params);
    free(regr.ostate);
    (void)unlink(a);
    (void)unlink(b);
}

/* A model with batch norm (on padded images, 8x8 + 2*4): the weights file holds its buffers
 * under PyTorch's names, the counter equal to the steps taken. */
static void test_batchnorm_checkpoint(void)
{
    char text[1024], out[128];
    struct gm_job job;
    struct gm_train_summary sum;
    volatile sig_atomic_t stop = 0;
    struct gm_train_opts o = {.progress = 0, .stop = &stop, .out = out};
    struct gm_st_file f;
    const struct gm_st_entry *e;
    float v[16];
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = bn\nmodel = resnet20\nepochs = 1\nseed = 3\ndevice = cpu\n"
                     "[data]\nkind = idx\ndir = %s\npad = 4\n"
                     "[optim]\nname = sgd\nlr = 0.05\nmomentum = 0.9\nglobal_batch = %d\n",
                     dir, NTRAIN / STEPS);

    snprintf(out, sizeof(out), "%s/bn.safetensors", dir);
    GM_CHECK_OK(gm_job_parse(text, (size_t)n, "test", &job));
    GM_CHECK_OK(gm_trainer_run(&job, &o, &sum));
    gm_job_free(&job);
    GM_CHECK_EQ(sum.steps, STEPS);
    GM_CHECK_OK(gm_safetensors_load(out, &f));
    GM_CHECK_EQ(f.n_tensors, 59 + 57); /* parameters + batch norm buffers, as PyTorch's */
    e = gm_safetensors_find(&f, "layer3.2.bn2.num_batches_tracked");
    GM_CHECK(e != NULL && e->ndim == 0 && e->numel == 1);
    if (e != NULL && e->numel == 1) {
        GM_CHECK_OK(gm_safetensors_to_f32(e, v, 1));
        GM_CHECK(v[0] == (float)STEPS);
    }
    e = gm_safetensors_find(&f, "bn1.running_var");
    GM_CHECK(e != NULL && e->ndim == 1 && e->shape[0] == 16);
    if (e != NULL && e->numel == 16) {
        GM_CHECK_OK(gm_safetensors_to_f32(e, v, 16));
        GM_CHECK(v[0] != 1.0f); /* moved from its initial value */
    }
    e = gm_safetensors_find(&f, "conv1.weight");
    GM_CHECK(e != NULL && e->ndim == 4 && e->shape[1] == 1 && e->shape[2] == 3);
    GM_CHECK(gm_safetensors_find(&f, "conv1.bias") == NULL);
    gm_safetensors_free(&f);
}

/* --- evaluations shared by the ranks ------------------------------------------------------ */

/* A simulated run of model (resnet20: batch norm, whose buffers are each rank's own; mlp:
 * none), `workers` ranks of 4 samples a step, 2 epochs, comm's [comm], every evaluation
 * recorded; evaluations shared, or rank 0's alone. */
static int eval_run(const char *model, const char *shares, const char *comm, int workers,
                    bool alone, const char *out, struct evals *ev)
{
    char text[1024];
    struct gm_job job;
    struct gm_train_summary sum;
    volatile sig_atomic_t stop = 0;
    struct gm_train_hooks hooks = {.on_eval = on_eval, .ctx = ev};
    struct gm_train_opts o = {.progress = 0, .stop = &stop, .out = out, .hooks = &hooks};
    struct gm_sim_opts so = {.workers = workers, .error_feedback = true, .eval_alone = alone};
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = ev\nmodel = %s\nepochs = 2\nseed = 4\ndevice = cpu\n"
                     "%s[data]\nkind = idx\ndir = %s\npad = 4\n"
                     "[optim]\nname = sgd\nlr = 0.05\nmomentum = 0.9\nglobal_batch = %d\n"
                     "[comm]\n%s",
                     model, shares, dir, 4 * workers, comm);
    int err;

    memset(ev, 0, sizeof(*ev));
    if ((err = gm_job_parse(text, (size_t)n, "test", &job)) < 0)
        return err;
    err = gm_sim_train(&job, &o, &so, &sum);
    gm_job_free(&job);
    return err;
}

/* 1 when the two weight files hold the same parameters, bit for bit, and (buffers) the same
 * batch norm buffers too, so every tensor alike, or (!buffers) different ones: some running
 * statistic differs. */
static int same_params(const char *a, const char *b, bool buffers)
{
    struct gm_st_file fa, fb;
    int same = 1, nbuf = 0, bufs_same = 1;

    GM_CHECK_OK(gm_safetensors_load(a, &fa));
    GM_CHECK_OK(gm_safetensors_load(b, &fb));
    if (fa.n_tensors != fb.n_tensors || fa.n_tensors == 0)
        same = 0;
    for (size_t i = 0; same && i < fa.n_tensors; i++) {
        const struct gm_st_entry *e = gm_safetensors_find(&fb, fa.tensors[i].name);
        const bool buf = strstr(fa.tensors[i].name, ".running_") != NULL ||
                         strstr(fa.tensors[i].name, ".num_batches_tracked") != NULL;
        const bool eq = e != NULL && e->nbytes == fa.tensors[i].nbytes &&
                        memcmp(e->data, fa.tensors[i].data, e->nbytes) == 0;
        if (!buf)
            same = eq;
        nbuf += buf;
        if (buf && !eq)
            bufs_same = 0;
    }
    gm_safetensors_free(&fa);
    gm_safetensors_free(&fb);
    return same && (buffers ? bufs_same : nbuf > 0 && !bufs_same);
}

/* Every rank evaluating its slice of the test set gives rank 0's evaluation of all of it: on
 * a model without buffers (mlp) the same accuracy, the loss to float rounding, the same
 * weights after; with 2 and 3 ranks (slices 8 + 8 and 6 + 5 + 5 of 16; with shares 3:1,
 * 12 + 4), a dense codec and DiLoCo (whose evaluations are of the outer parameters).  With
 * batch norm (resnet20) a shared evaluation runs with the ranks' mean running statistics,
 * rank 0's alone with its own: the training is the same (the same parameters at the end: each
 * rank's own statistics put back after every evaluation but the last), and the weights
 * written carry the mean, not rank 0's (test_eval_mean_buffers checks the mean itself). */
static void test_eval_shared(void)
{
    static const char *const comms[] = {"codec = fp32\n", "codec = diloco\nlocal_steps = 3\n",
                                        /* 2 ranks: a sync in flight at each epoch's end (the shared
                                         * evaluation's collectives queue behind it) */
                                        "codec = diloco\nlocal_steps = 4\noverlap = true\n"};
    char a[128], b[128];
    static const struct {
        int workers;
        const char *shares;
    } cases[] = {{2, ""}, {3, ""}, {2, "shares = 3:1\n"}};

    snprintf(a, sizeof(a), "%s/shared.safetensors", dir);
    snprintf(b, sizeof(b), "%s/alone.safetensors", dir);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        for (size_t c = 0; c < sizeof(comms) / sizeof(comms[0]); c++) {
            const int w = cases[k].workers;
            struct evals shared, alone;
            GM_CHECK_OK(eval_run("mlp", cases[k].shares, comms[c], w, false, a, &shared));
            GM_CHECK_OK(eval_run("mlp", cases[k].shares, comms[c], w, true, b, &alone));
            GM_CHECK_EQ(shared.n, 2);
            GM_CHECK_EQ(alone.n, 2);
            for (int i = 0; i < 2 && i < shared.n && i < alone.n; i++) {
                GM_CHECK(shared.acc[i] == alone.acc[i]);
                GM_CHECK_NEAR(shared.loss[i], alone.loss[i], 0, 1e-6);
            }
            GM_CHECK(same_params(a, b, true));
            GM_CHECK_OK(eval_run("resnet20", cases[k].shares, comms[c], w, false, a, &shared));
            GM_CHECK_OK(eval_run("resnet20", cases[k].shares, comms[c], w, true, b, &alone));
            GM_CHECK_EQ(shared.n, 2);
            GM_CHECK_EQ(alone.n, 2);
            GM_CHECK(same_params(a, b, false));
        }
    (void)unlink(a);
    (void)unlink(b);
}

/* The mean of the ranks' running statistics (train/trainer.c shared_buffers) as rank 0 of two
 * meets it, the second rank faked by the comm: its statistics twice rank 0's.  Every shared
 * evaluation sums the weighted differences (one eval_fsum each), rank 0's own statistics are
 * put back after the first epoch's (the second epoch trains on as without the sum), and the
 * weights written at the end carry the mean, rank 0's + half the difference, element for
 * element (batch norm's counter too); the parameters are those of the run without the sum. */
static void test_eval_mean_buffers(void)
{
    char a[128], b[128];
    struct gm_train_summary sum;
    struct fake mean = {.regroup_after = -1, .stop_after = -1, .shared = 1, .fsum = 1};
    struct fake first = {.regroup_after = -1, .stop_after = -1, .shared = 1, .bn = 1, .refresh = 8};
    struct gm_st_file fa, fb;
    size_t checked = 0;

    snprintf(a, sizeof(a), "%s/mean.safetensors", dir);
    snprintf(b, sizeof(b), "%s/rank0.safetensors", dir);
    GM_CHECK_OK(run_ev(a, &mean, &sum, 2, -1, NULL));
    GM_CHECK_EQ(mean.fsums, 2);
    GM_CHECK_OK(run_ev(b, &first, &sum, 2, -1, NULL)); /* rank 0's statistics alone */
    GM_CHECK_EQ(first.sums, 2);
    GM_CHECK(same_params(a, b, false));
    GM_CHECK_OK(gm_safetensors_load(a, &fa));
    GM_CHECK_OK(gm_safetensors_load(b, &fb));
    for (size_t i = 0; i < fa.n_tensors; i++) {
        const struct gm_st_entry *ea = &fa.tensors[i], *eb = gm_safetensors_find(&fb, ea->name);
        float x, y, va[64], vb[64];
        if (strstr(ea->name, ".running_") == NULL && strstr(ea->name, ".num_batches") == NULL)
            continue;
        GM_CHECK(eb != NULL && eb->numel == ea->numel);
        if (eb == NULL || eb->numel != ea->numel || ea->numel > 64)
            continue;
        GM_CHECK_OK(gm_safetensors_to_f32(ea, va, ea->numel));
        GM_CHECK_OK(gm_safetensors_to_f32(eb, vb, eb->numel));
        for (int64_t j = 0; j < ea->numel; j++) {
            x = va[j];
            y = vb[j] + (float)(0.5 * (2.0 * (double)vb[j] - (double)vb[j]));
            GM_CHECK(x == y);
            checked++;
        }
    }
    GM_CHECK(checked > 1000); /* resnet20's 19 batch norms: 3 * 16 * 7 + ... statistics */
    gm_safetensors_free(&fa);
    gm_safetensors_free(&fb);
    free(mean.b0);
    free(first.b0);
    (void)unlink(a);
    (void)unlink(b);
}

/* rank 0 alone (world 1) on bn_job, its evaluations of the parameters from before the first
 * step (eval_params, as DiLoCo's outer ones), with [comm] bn_refresh = refresh, stopped after
 * step stop_after (-1: never); weights into out, evaluations into ev */
static int refresh_run(const char *out, int refresh, long stop_after, struct evals *ev)
{
    struct gm_train_summary sum;
    struct fake f = {.regroup_after = -1,
                     .stop_after = stop_after,
                     .eval_first = 1,
                     .bn = 1,
                     .refresh = refresh};
    int err;

    memset(ev, 0, sizeof(*ev));
    err = run_ev(out, &f, &sum, 2, -1, ev);
    free(f.first);
    return err;
}

/* The first batch norm's num_batches_tracked in a weights file, -1 when missing. */
static long tracked(const char *path)
{
    struct gm_st_file fa;
    long n = -1;
    float v;

    GM_CHECK_OK(gm_safetensors_load(path, &fa));
    for (size_t i = 0; i < fa.n_tensors && n < 0; i++)
        if (strstr(fa.tensors[i].name, ".num_batches_tracked") != NULL &&
            gm_safetensors_to_f32(&fa.tensors[i], &v, 1) == 0)
            n = (long)v;
    gm_safetensors_free(&fa);
    return n;
}

/* [comm] bn_refresh (train/trainer.c refresh_bn): an evaluation of parameters that are not
 * the replica's own runs that many training forwards through them first, so that batch
 * norm's statistics fit them.  Against the same run without (bn_refresh = 0): the same
 * parameters, bit for bit (no gradient, no step); other evaluations (both epochs' losses);
 * the weights written at the end carry the refreshed statistics, whose counter is exactly 3
 * batches past the other's (so the first evaluation's were put back, else 6); stopped in
 * epoch 2, after epoch 1's refreshed evaluation, the weights written are the replica's own,
 * statistics and all, bit for bit those of the run without. */
static void test_bn_refresh(void)
{
    char a[128], b[128];
    struct evals plain, fresh;

    snprintf(a, sizeof(a), "%s/plain.safetensors", dir);
    snprintf(b, sizeof(b), "%s/fresh.safetensors", dir);
    GM_CHECK_OK(refresh_run(a, 0, -1, &plain));
    GM_CHECK_OK(refresh_run(b, 3, -1, &fresh));
    GM_CHECK_EQ(plain.n, 2);
    GM_CHECK_EQ(fresh.n, 2);
    for (int i = 0; i < 2 && i < plain.n && i < fresh.n; i++)
        GM_CHECK(plain.loss[i] != fresh.loss[i]);
    GM_CHECK(same_params(a, b, false));
    GM_CHECK(tracked(a) > 0);
    GM_CHECK_EQ(tracked(b), tracked(a) + 3);
    /* 8 steps an epoch: stopped after step 10, in epoch 2 */
    GM_CHECK_OK(refresh_run(a, 0, 9, &plain));
    GM_CHECK_OK(refresh_run(b, 3, 9, &fresh));
    GM_CHECK_EQ(fresh.n, 2); /* epoch 1's and the stopped run's */
    GM_CHECK(fresh.n >= 1 && plain.n >= 1 && plain.loss[0] != fresh.loss[0]);
    GM_CHECK(same_params(a, b, true));
    (void)unlink(a);
    (void)unlink(b);
}

/* --- codec state across a resume ------------------------------------------------------- */

/* `workers` simulated workers, 2 epochs of 8 steps, a checkpoint every 4 steps into ckdir;
 * from resume (NULL: the start); weights into out. */
static int sim_run(const char *comm, int workers, const char *ckdir, const char *resume,
                   const char *out)
{
    char text[1024];
    struct gm_job job;
    struct gm_train_summary sum;
    volatile sig_atomic_t stop = 0;
    struct gm_train_opts o = {
        .progress = 0, .stop = &stop, .out = out, .ckpt_dir = ckdir, .resume = resume};
    struct gm_sim_opts so = {.workers = workers, .error_feedback = true};
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = cs\nmodel = mlp\nepochs = 2\nseed = 5\n"
                     "checkpoint_every = 4\ncheckpoint_keep = 8\n[model]\nhidden = 32\n"
                     "[data]\nkind = idx\ndir = %s\n[optim]\nname = adam\nlr = 0.01\n"
                     "global_batch = %d\n[comm]\n%s",
                     dir, NTRAIN / STEPS, comm);
    int err;

    if ((err = gm_job_parse(text, (size_t)n, "test", &job)) < 0)
        return err;
    err = gm_sim_train(&job, &o, &so, &sum);
    gm_job_free(&job);
    if (err == 0 && sum.steps != 2 * STEPS)
        err = -EPROTO;
    return err;
}

/* Copies checkpoint src to dst without its codec state ("gradmesh.codec.*"); returns how many
 * tensors it left out. */
static size_t strip_codec(const char *src, const char *dst)
{
    struct gm_st_file f;
    struct gm_ckpt_info info;
    struct gm_st_tensor t[64];
    float *bufs[64];
    size_t nt = 0, dropped = 0;

    GM_CHECK_OK(gm_ckpt_load(src, NULL, NULL, &f, &info, NULL));
    for (size_t i = 0; i < f.n_tensors && nt < 64; i++) {
        const struct gm_st_entry *e = &f.tensors[i];
        if (strncmp(e->name, GM_CKPT_CODEC_PREFIX, strlen(GM_CKPT_CODEC_PREFIX)) == 0) {
            dropped++;
            continue;
        }
        bufs[nt] = malloc((size_t)e->numel * sizeof(float) + 1);
        GM_CHECK(bufs[nt] != NULL && e->dtype == GM_ST_DTYPE_F32);
        GM_CHECK_OK(gm_safetensors_to_f32(e, bufs[nt], (size_t)e->numel));
        t[nt] = (struct gm_st_tensor){.name = e->name, .data = bufs[nt], .ndim = e->ndim};
        memcpy(t[nt].shape, e->shape, sizeof(e->shape));
        nt++;
    }
    GM_CHECK_OK(gm_ckpt_write(dst, t, nt, &info, gm_safetensors_meta(&f, "job"), NULL));
    for (size_t i = 0; i < nt; i++)
        free(bufs[i]);
    gm_safetensors_free(&f);
    return dropped;
}

static void rm_dir(const char *d)
{
    struct gm_ckpt_entry *v = NULL;
    size_t n = 0;
    char p[1200];

    if (gm_ckpt_dir_list(d, &v, &n) == 0)
        for (size_t i = 0; i < n; i++) {
            snprintf(p, sizeof(p), "%s" GM_CKPT_SHA_SUFFIX, v[i].path);
            (void)unlink(p);
            (void)unlink(v[i].path);
        }
    free(v);
    (void)rmdir(d);
}

static void codec_resume(const char *comm, int workers, size_t want_codec_tensors)
{
    char whole[128], res[128], strip[128], dw[128], dr[128], ds[128], ck8[1100], cks[1100];

    snprintf(whole, sizeof(whole), "%s/cs-whole.safetensors", dir);
    snprintf(res, sizeof(res), "%s/cs-resumed.safetensors", dir);
    snprintf(strip, sizeof(strip), "%s/cs-stripped.safetensors", dir);
    snprintf(dw, sizeof(dw), "%s/ck-whole", dir);
    snprintf(dr, sizeof(dr), "%s/ck-resumed", dir);
    snprintf(ds, sizeof(ds), "%s/ck-stripped", dir);
    GM_CHECK_OK(sim_run(comm, workers, dw, NULL, whole));
    GM_CHECK_OK(gm_ckpt_path(dw, 8, ck8, sizeof(ck8)));
    { /* the checkpoint holds the codec state (both ranks' error feedback for PowerSGD) */
        struct gm_st_file f;
        struct gm_ckpt_info info;
        size_t nc = 0;
        GM_CHECK_OK(gm_ckpt_load(ck8, NULL, NULL, &f, &info, NULL));
        for (size_t i = 0; i < f.n_tensors; i++)
            nc +=
                strncmp(f.tensors[i].name, GM_CKPT_CODEC_PREFIX, strlen(GM_CKPT_CODEC_PREFIX)) == 0;
        GM_CHECK_EQ(nc, want_codec_tensors);
        GM_CHECK_EQ(info.step, 8);
        gm_safetensors_free(&f);
    }
    GM_CHECK_OK(sim_run(comm, workers, dr, ck8, res));
    GM_CHECK(same_params(whole, res, true));

    GM_CHECK_OK(gm_ckpt_mkdirs(ds));
    GM_CHECK_OK(gm_ckpt_path(ds, 8, cks, sizeof(cks)));
    GM_CHECK_EQ(strip_codec(ck8, cks), want_codec_tensors);
    GM_CHECK_OK(sim_run(comm, workers, ds, cks, strip));
    GM_CHECK(!same_params(whole, strip, true)); /* the codec state is what made them equal */
    (void)unlink(whole);
    (void)unlink(res);
    (void)unlink(strip);
    rm_dir(dw);
    rm_dir(dr);
    rm_dir(ds);
}

static void test_powersgd_resume(void)
{
    /* error feedback of rank 0 and rank 1, and the factors */
    codec_resume("codec = powersgd\n", 2, 3);
}

/* Overlapped DiLoCo, H = 4 (a lag of 1): the checkpoint of step 8 is written right after the
 * boundary of step 8, its sync reduced but not applied (that is for step 9).  It holds the
 * anchor, the outer momentum, that pending update and the params it was computed from; one
 * worker resumed from it ends bit for bit where the uninterrupted run does (and not without
 * the codec state).  With two workers a checkpoint holds rank 0's weights only, so the
 * resumed run, every rank continuing from rank 0's, is a valid run (it passes every hash
 * check of the outer parameters), not the uninterrupted one: said at resume. */
static void test_diloco_overlap_resume(void)
{
    const char *comm = "codec = diloco\nlocal_steps = 4\noverlap = true\n";
    char whole[128], res[128], dw[128], dr[128], ck8[1100];

    codec_resume(comm, 1, 4);
    snprintf(whole, sizeof(whole), "%s/ov2-whole.safetensors", dir);
    snprintf(res, sizeof(res), "%s/ov2-resumed.safetensors", dir);
    snprintf(dw, sizeof(dw), "%s/ck-ov2-whole", dir);
    snprintf(dr, sizeof(dr), "%s/ck-ov2-resumed", dir);
    GM_CHECK_OK(sim_run(comm, 2, dw, NULL, whole));
    GM_CHECK_OK(gm_ckpt_path(dw, 8, ck8, sizeof(ck8)));
    GM_CHECK_OK(sim_run(comm, 2, dr, ck8, res));
    (void)unlink(whole);
    (void)unlink(res);
    rm_dir(dw);
    rm_dir(dr);
}

static void test_regroup_in_after_step(void)
{
    char a[128], b[128], c[128], d[128];
    struct gm_train_summary sum;
    struct fake keep = {.regroup_after = 3, .stop_after = -1};
    struct fake back = {.regroup_after = 5, .rollback = 1, .stop_after = -1};
    struct fake stopped = {.regroup_after = -1, .stop_after = 2};

    snprintf(a, sizeof(a), "%s/a.safetensors", dir);
    snprintf(b, sizeof(b), "%s/b.safetensors", dir);
    snprintf(c, sizeof(c), "%s/c.safetensors", dir);
    snprintf(d, sizeof(d), "%s/d.safetensors", dir);

    GM_CHECK_OK(run(a, NULL, &sum)); /* undisturbed, no hooks */
    GM_CHECK_EQ(sum.steps, STEPS);

    GM_CHECK_OK(run(b, &keep, &sum)); /* resync keeps the post-step state */
    GM_CHECK_EQ(sum.steps, STEPS);
    GM_CHECK_EQ(keep.resyncs, 1);
    GM_CHECK_EQ(keep.bad_after_step, 0);
    GM_CHECK_EQ(keep.finishes, 1);
    GM_CHECK_EQ(keep.finish_step, STEPS);
    check_same_file(a, b);

    GM_CHECK_OK(run(c, &back, &sum)); /* resync rolls back to before the step */
    GM_CHECK_EQ(sum.steps, STEPS);
    GM_CHECK_EQ(back.resyncs, 1);
    GM_CHECK_EQ(back.bad_after_step, 0);
    GM_CHECK_EQ(back.finishes, 1);
    check_same_file(a, c);
    free(back.params);
    free(back.ostate);

    GM_CHECK_OK(run(d, &stopped, &sum)); /* stopped early: no finish */
    GM_CHECK_EQ(sum.interrupted, 1);
    GM_CHECK_EQ(sum.steps, 3);
    GM_CHECK_EQ(stopped.finishes, 0);
}

/* Trains model (SGD with momentum: an update proportional to the gradient, so fp32
 * differences stay fp32-sized) on dev and writes the weights to out. */
static int train_sgd(const char *model, const char *dev, int steps, const char *out,
                     struct gm_train_summary *sum)
{
    char text[1024];
    struct gm_job job;
    volatile sig_atomic_t stop = 0;
    struct gm_train_opts o = {.progress = 0, .stop = &stop, .out = out};
    int n = snprintf(text, sizeof(text),
                     "[job]\nname = dev\nmodel = %s\nepochs = 1\nseed = 5\ndevice = %s\n"
                     "%s"
                     "[data]\nkind = idx\ndir = %s\npad = 4\n"
                     "[optim]\nname = sgd\nlr = 0.05\nmomentum = 0.9\nglobal_batch = %d\n",
                     model, dev, strcmp(model, "mlp") == 0 ? "[model]\nhidden = 32\n" : "", dir,
                     NTRAIN / steps);
    int err;

    if ((err = gm_job_parse(text, (size_t)n, "test", &job)) < 0)
        return err;
    err = gm_trainer_run(&job, &o, sum);
    gm_job_free(&job);
    return err;
}

/* Every tensor of two weight files (parameters and buffers) within rtol of the largest
 * magnitude of that tensor in ref. */
static void check_close_files(const char *got, const char *ref, double rtol)
{
    struct gm_st_file g, r;
    float *a = NULL, *b = NULL;

    GM_CHECK_OK(gm_safetensors_load(got, &g));
    GM_CHECK_OK(gm_safetensors_load(ref, &r));
    GM_CHECK_EQ(g.n_tensors, r.n_tensors);
    for (size_t i = 0; i < r.n_tensors; i++) {
        const struct gm_st_entry *re = &r.tensors[i], *ge = gm_safetensors_find(&g, re->name);
        const size_t n = (size_t)re->numel;
        double scale = 0, worst = 0;

        GM_CHECK(ge != NULL && ge->numel == re->numel);
        if (ge == NULL || ge->numel != re->numel)
            continue;
        a = realloc(a, (n + 1) * sizeof(float));
        b = realloc(b, (n + 1) * sizeof(float));
        GM_CHECK(a != NULL && b != NULL);
        if (a == NULL || b == NULL)
            break;
        GM_CHECK_OK(gm_safetensors_to_f32(ge, a, n));
        GM_CHECK_OK(gm_safetensors_to_f32(re, b, n));
        for (size_t j = 0; j < n; j++) {
            scale = fmax(scale, fabs((double)b[j]));
            worst = fmax(worst, fabs((double)a[j] - (double)b[j]));
        }
        gm_test_state.checks++;
        if (!(worst <= rtol * scale + 1e-7))
            GM_TEST_FAIL_("%s: the GPU's differs from the CPU's by %.3g (scale %.3g)", re->name,
                          worst, scale);
    }
    free(a);
    free(b);
    gm_safetensors_free(&g);
    gm_safetensors_free(&r);
}

static void test_cuda_trainer(void)
{
    /* ResNet-20 takes one step: batch norm at batch 8 amplifies rounding, so that after
     * eight steps an H200 and the CPU differed by 20% of conv1's scale, each side being as
     * right as the other (tests/unit/test_cuda_model.c holds the measurement); one step
     * from the same weights stays within fp32 tolerance and still covers the GPU path:
     * upload, forward, backward, momentum, batch norm buffers, the saved file. */
    static const char *const models[] = {"mlp", "resnet20"};
    static const int steps[] = {STEPS, 1};
    char why[320], ref[128], got[128], a[128], b[128], c[128];
    struct gm_train_summary sum;
    struct fake keep = {.regroup_after = 3, .stop_after = -1};
    struct fake back = {.regroup_after = 5, .rollback = 1, .stop_after = -1};

    if (!gm_cuda_built() || gm_cuda_device_count(why, sizeof(why)) < 1) {
        fprintf(stderr, "skip test_cuda_trainer: %s\n",
                gm_cuda_built() ? why : "this build has no CUDA backend");
        return;
    }
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        snprintf(ref, sizeof(ref), "%s/%s-cpu.safetensors", dir, models[i]);
        snprintf(got, sizeof(got), "%s/%s-cuda.safetensors", dir, models[i]);
        GM_CHECK_OK(train_sgd(models[i], "cpu", steps[i], ref, &sum));
        GM_CHECK_STREQ(sum.device, "cpu");
        GM_CHECK_OK(train_sgd(models[i], "cuda", steps[i], got, &sum));
        GM_CHECK_STREQ(sum.device, "cuda:0");
        GM_CHECK_EQ(sum.steps, steps[i]);
        check_close_files(got, ref, 1e-3);
        unlink(ref);
        unlink(got);
    }
    /* the hooks' paths on the GPU: state copies around them, gradient downloads */
    device = "cuda";
    snprintf(a, sizeof(a), "%s/ga.safetensors", dir);
    snprintf(b, sizeof(b), "%s/gb.safetensors", dir);
    snprintf(c, sizeof(c), "%s/gc.safetensors", dir);
    GM_CHECK_OK(run(a, NULL, &sum));
    GM_CHECK_STREQ(sum.device, "cuda:0");
    GM_CHECK_OK(run(b, &keep, &sum));
    GM_CHECK_EQ(keep.resyncs, 1);
    GM_CHECK_EQ(keep.bad_after_step, 0);
    check_same_file(a, b);
    GM_CHECK_OK(run(c, &back, &sum));
    GM_CHECK_EQ(back.resyncs, 1);
    check_same_file(a, c);
    free(back.params);
    free(back.ostate);
    device = "cpu";
    unlink(a);
    unlink(b);
    unlink(c);
}

/* gm_trainer_check (issue 23): what the run checks before its first step, without training;
 * its checkpoint estimate against a checkpoint the run then writes; and the room check. */
static void test_trainer_check(void)
{
    struct gm_job job;
    struct gm_train_check chk;
    struct gm_train_opts opts = {0};
    struct gm_train_summary sum;
    char ck[128], out[128], path[1100], want[256];
    uint64_t need, avail;
    struct stat st;

    GM_CHECK_OK(load_job(&job));
    GM_CHECK_OK(gm_trainer_check(&job, 1, &chk));
    GM_CHECK_EQ(chk.n_train, (size_t)NTRAIN);
    GM_CHECK_EQ(chk.global_batch, NTRAIN / STEPS);
    GM_CHECK(chk.ckpt_bytes > 0);
    /* the estimate: at least the file, and not far over it */
    job.checkpoint_every = STEPS;
    job.checkpoint_keep = 1;
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    snprintf(out, sizeof(out), "%s/e.safetensors", dir);
    opts.ckpt_dir = ck;
    opts.out = out;
    GM_CHECK_OK(gm_trainer_run(&job, &opts, &sum));
    GM_CHECK_OK(gm_ckpt_path(ck, STEPS, path, sizeof(path)));
    GM_CHECK_EQ(stat(path, &st), 0);
    GM_CHECK((uint64_t)st.st_size <= chk.ckpt_bytes);
    GM_CHECK(chk.ckpt_bytes <= (uint64_t)st.st_size + (uint64_t)st.st_size / 10 + 16384);
    (void)unlink(path);
    strncat(path, ".sha256", sizeof(path) - strlen(path) - 1);
    (void)unlink(path);
    (void)rmdir(ck);
    (void)unlink(out);
    /* room: a petabyte a checkpoint does not fit, one byte does */
    gm_log_clear_last_error();
    GM_CHECK_ERR(gm_trainer_ckpt_space(dir, 1ull << 50, 3, &need, &avail), -ENOSPC);
    GM_CHECK_EQ(need, 4ull << 50);
    GM_CHECK(strstr(gm_log_last_error(), ": no room for the job's checkpoints: 3 kept") != NULL);
    GM_CHECK_OK(gm_trainer_ckpt_space(dir, 1, 1, &need, &avail));
    /* more than the dataset holds: the line train --local prints, as the last error */
    job.optim.global_batch = 2 * NTRAIN;
    gm_log_clear_last_error();
    GM_CHECK_ERR(gm_trainer_check(&job, 1, &chk), GM_ERR_CONFIG);
    snprintf(want, sizeof(want), "%s: %d training samples, fewer than one global batch of %d", dir,
             NTRAIN, 2 * NTRAIN);
    GM_CHECK_STREQ(gm_log_last_error(), want);
    /* world 3 does not divide 8 */
    job.optim.global_batch = NTRAIN / STEPS;
    GM_CHECK(gm_trainer_check(&job, 3, &chk) < 0);
    gm_job_free(&job);
}

int main(void)
{
    char path[128];
    int rc;

    gm_log_set_level(GM_LOG_WARN);
    snprintf(dir, sizeof(dir), "/tmp/gm-test-trainer.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    write_idx("train-images-idx3-ubyte", GM_IDX_MAGIC_IMAGES, NTRAIN, 1, 1);
    write_idx("train-labels-idx1-ubyte", GM_IDX_MAGIC_LABELS, NTRAIN, 0, 0);
    write_idx("t10k-images-idx3-ubyte", GM_IDX_MAGIC_IMAGES, NTEST, 1, 2);
    write_idx("t10k-labels-idx1-ubyte", GM_IDX_MAGIC_LABELS, NTEST, 0, 0);
    GM_TEST_RUN(test_regroup_in_after_step);
    GM_TEST_RUN(test_eval_params);
    GM_TEST_RUN(test_eval_defer);
    GM_TEST_RUN(test_batchnorm_checkpoint);
    GM_TEST_RUN(test_model_spec);
    GM_TEST_RUN(test_bf16_refused_on_cpu);
    GM_TEST_RUN(test_cuda_trainer);
    GM_TEST_RUN(test_eval_shared);
    GM_TEST_RUN(test_eval_mean_buffers);
    GM_TEST_RUN(test_bn_refresh);
    GM_TEST_RUN(test_powersgd_resume);
    GM_TEST_RUN(test_diloco_overlap_resume);
    GM_TEST_RUN(test_trainer_check);
    rc = gm_test_finish("test_trainer");
    static const char *names[] = {
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",  "a.safetensors",           "b.safetensors",
        "c.safetensors",           "d.safetensors",           "bn.safetensors"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        (void)unlink(path);
    }
    (void)rmdir(dir);
    return rc;
}
