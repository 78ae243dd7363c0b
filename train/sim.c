/*
 * train/sim.c - simulated workers (see sim.h).
 *
 * Threads: one trainer thread per rank; all collective and transport state is
 * guarded by sim.mu.  rendezvous(): start this rank's op; the last to arrive
 * runs the in-memory transport until idle (every op of the round completes,
 * since all were started) and bumps the generation; the others wait for it.
 */
#include "train/sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/comm/collective.h"
#include "train/ckpt/safetensors.h"
#include "train/comm/transport_mem.h"
#include "train/gradsync.h"

struct sim;

struct rank_ctx {
    struct sim *s;
    int rank;
    struct gm_coll *coll;     /* owned */
    struct gm_gradsync *sync; /* owned */
    int status, calls;        /* of the op in flight */
    struct gm_train_comm comm;
    struct gm_train_opts opts;
    struct gm_train_summary sum;
    int err;
    pthread_t th;
    char error_name[64]; /* its error feedback's tensor name in rank 0's checkpoints */
    int next_resize;     /* so->resize[next_resize] is the next one this rank takes */
};

struct sim {
    struct gm_job job; /* shallow copy, threads = 1 */
    struct gm_gradsync_strategy strategy;
    const struct gm_sim_opts *so;
    int n;
    struct gm_memnet *net; /* owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, exited;
    uint64_t gen;
    uint64_t rounds, last_round_bytes;
    uint64_t grad_bytes; /* payload of counted rounds, all ranks */
    struct rank_ctx *r;  /* owned, n */
};

static uint64_t bytes_sent(const struct sim *s)
{
    uint64_t b = 0;

    for (int i = 0; i < s->n; i++) {
        struct gm_coll_traffic t;
        gm_coll_traffic_total(s->r[i].coll, &t, NULL);
        b += t.payload_bytes;
    }
    return b;
}

/* Under mu: break every link so that started ops fail, and release waiters. */
static void abort_round(struct sim *s)
{
    for (int a = 0; a < s->n; a++)
        for (int b = a + 1; b < s->n; b++)
            gm_memnet_fail_link(s->net, a, b);
    gm_memnet_run(s->net);
    s->arrived = 0;
    s->gen++;
    pthread_cond_broadcast(&s->cv);
}

static void op_done(struct gm_coll *c, int status, void *arg)
{
    struct rank_ctx *rc = arg;

    (void)c;
    rc->status = status;
    rc->calls++;
}

/* The gradsync executor (gm_gradsync_exec.run): starts this rank's op under mu, and the last
 * rank to arrive runs the round.  counted: the round moves gradients or parameters
 * (bytes_sent); hash checks do not. */
static int rendezvous(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct rank_ctx *rc = ctx;
    struct sim *s = rc->s;
    uint64_t gen;
    int err;

    pthread_mutex_lock(&s->mu);
    if (s->exited > 0) {
        pthread_mutex_unlock(&s->mu);
        return GM_ERR_ABORTED;
    }
    rc->calls = 0;
    rc->status = 0;
    err = start(rc->coll, arg, op_done, rc);
    if (err < 0) {
        s->exited++; /* this rank is out: nobody may wait for it */
        abort_round(s);
        pthread_mutex_unlock(&s->mu);
        return err;
    }
    gen = s->gen;
    if (++s->arrived == s->n) {
        uint64_t before = bytes_sent(s);
        gm_memnet_run(s->net);
        if (counted) {
            s->last_round_bytes = bytes_sent(s) - before;
            s->grad_bytes += s->last_round_bytes;
            s->rounds++;
        }
        s->arrived = 0;
        s->gen++;
        pthread_cond_broadcast(&s->cv);
    } else {
        while (s->gen == gen)
            pthread_cond_wait(&s->cv, &s->mu);
    }
    err = rc->calls == 1 ? rc->status : GM_ERR_ABORTED;
    pthread_mutex_unlock(&s->mu);
    return err;
}

static int hook_reduce(void *ctx, struct gm_train_state *st)
{
    struct gm_model *m = st->model;
    long step = st->step, total_steps = st->total_steps;
    struct rank_ctx *rc = ctx;

    gm_gradsync_note_share(rc->sync, st->share_samples, st->global_batch);
    return gm_gradsync_reduce(rc->sync, m, step, total_steps);
}

/* The strategy a re-size switches to: the job's, with H and the deltas' width replaced. */
static int resized(const struct sim *s, const struct gm_sim_resize *z,
                   struct gm_gradsync_strategy *out)
{
    struct gm_job job = s->job;

    job.comm.codec = z->bits == 8 ? GM_JOB_CODEC_DILOCO8 : GM_JOB_CODEC_DILOCO;
    job.comm.local_steps = (int)z->h;
    return gm_gradsync_strategy_from_job(&job, out);
}

/* A replayed re-size takes effect at the first round boundary at or after its step, as an
 * announced switch does in agent/jobs/rank_train.c: the round in flight flushed, a new
 * gradsync (its outer momentum afresh). */
static int hook_backward_begin(void *ctx, struct gm_train_state *st)
{
    struct rank_ctx *rc = ctx;
    const struct sim *s = rc->s;
    struct gm_gradsync_strategy to;
    struct gm_gradsync *next = NULL;
    int err;

    while (rc->next_resize < s->so->nresize) {
        const struct gm_sim_resize *z = &s->so->resize[rc->next_resize];
        if (st->step < z->step || gm_gradsync_switch_step(rc->sync, z->step) > st->step)
            return 0;
        rc->next_resize++;
        if ((err = resized(s, z, &to)) < 0 || (err = gm_gradsync_flush(rc->sync, st->model)) < 0)
            return err;
        gm_gradsync_log_waits(rc->sync);
        struct gm_gradsync_exec ex = {.run = rendezvous, .ctx = rc};
        if ((err = gm_gradsync_new(&to, rc->rank, s->n, s->job.seed, &ex, &next)) < 0)
            return err;
        gm_gradsync_free(rc->sync);
        rc->sync = next;
        if (rc->rank == 0)
            gm_info("event=simulate-resize step=%ld h=%u bits=%d", st->step, z->h, z->bits);
    }
    return 0;
}

static bool hook_local_grads(void *ctx)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_local_grads(rc->sync);
}

static int hook_after(void *ctx, struct gm_train_state *st)
{
    struct gm_model *m = st->model;
    long step = st->step - 1, total_steps = st->total_steps; /* the step just taken */
    struct rank_ctx *rc = ctx;

    return gm_gradsync_after_step(rc->sync, m, step, total_steps);
}

static const float *hook_eval_params(void *ctx, size_t *n)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_outer_params(rc->sync, n);
}

static long hook_eval_defer(void *ctx, long steps_done, long total_steps)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_eval_defer(rc->sync, steps_done, total_steps);
}

/* A sharded evaluation's collectives (train/trainer.h eval_sum, eval_bcast, eval_fsum) */
static int hook_eval_sum(void *ctx, long step, double *v, size_t n)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_eval_sum(rc->sync, step, v, n);
}

static int hook_eval_bcast(void *ctx, long step, float *buf, size_t n)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_eval_bcast(rc->sync, step, buf, n);
}

static int hook_eval_fsum(void *ctx, long step, float *buf, size_t n)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_eval_fsum(rc->sync, step, buf, n);
}

/* Rank 0's checkpoint holds its own codec state and, since every rank lives in this process,
 * the other ranks' error feedback too (GM_GRADSYNC_PSGD_ERROR ".rankR"), so that a resumed
 * simulation continues bitwise.  The others' buffers do not change meanwhile: PowerSGD
 * updates them only in a round, which waits for rank 0. */
static size_t hook_codec_state(void *ctx, struct gm_st_tensor *t, size_t cap, const char **codec)
{
    struct rank_ctx *rc = ctx;
    struct sim *s = rc->s;
    size_t k = gm_gradsync_ckpt_state(rc->sync, t, cap, codec);

    for (int i = 1; rc->rank == 0 && i < s->n && k < cap; i++) {
        size_t n;
        const float *e = gm_gradsync_psgd_error(s->r[i].sync, &n);
        if (e == NULL)
            continue;
        t[k] = (struct gm_st_tensor){
            .name = s->r[i].error_name, .data = e, .ndim = 1, .shape = {(int64_t)n}};
        k++;
    }
    return k;
}

static int hook_codec_restore(void *ctx, const struct gm_st_file *f, const char *codec,
                              const char *origin)
{
    struct rank_ctx *rc = ctx;

    return gm_gradsync_ckpt_restore(rc->sync, f, codec, origin);
}

static void *rank_main(void *arg)
{
    struct rank_ctx *rc = arg;
    struct sim *s = rc->s;

    rc->err = gm_trainer_run(&s->job, &rc->opts, &rc->sum);
    pthread_mutex_lock(&s->mu);
    s->exited++;
    if (s->arrived > 0) /* others wait for a step this rank will never take */
        abort_round(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int gm_sim_train(const struct gm_job *job, const struct gm_train_opts *opts,
                 const struct gm_sim_opts *so, struct gm_train_summary *sum)
{
    struct sim s;
    int err = 0, started = 0;
    struct gm_coll_config cc = {0};

    memset(sum, 0, sizeof(*sum));
    memset(&s, 0, sizeof(s));
    if (so->workers < 1 || so->workers > 64)
        return -EINVAL;
    s.job = *job;
    s.job.threads = 1;
    s.so = so;
    s.n = so->workers;
    if ((err = gm_gradsync_strategy_from_job(job, &s.strategy)) < 0)
        return err;
    if (so->nresize > 0 && s.strategy.kind != GM_GRADSYNC_KIND_DILOCO) {
        gm_err("event=simulate-resize-refused codec=%s: re-sizes replay DiLoCo's; the job's "
               "[comm] codec must be diloco or diloco8",
               gm_job_codec_name(s.strategy.id));
        return GM_ERR_CONFIG;
    }
    s.strategy.error_feedback = so->error_feedback;
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    s.net = gm_memnet_new(s.n);
    s.r = calloc((size_t)s.n, sizeof(*s.r));
    if (s.net == NULL || s.r == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < s.n; i++) {
        struct rank_ctx *rc = &s.r[i];
        rc->s = &s;
        rc->rank = i;
        gm_gradsync_psgd_error_name(i, rc->error_name, sizeof(rc->error_name));
        struct gm_gradsync_exec ex = {.run = rendezvous, .ctx = rc};
        rc->coll = gm_coll_new(gm_memnet_transport(s.net, i), &cc);
        if (rc->coll == NULL) {
            err = -ENOMEM;
            goto out;
        }
        if ((err = gm_gradsync_new(&s.strategy, i, s.n, job->seed, &ex, &rc->sync)) < 0)
            goto out;
        rc->comm =
            (struct gm_train_comm){.rank = i,
                                   .world = s.n,
                                   .reduce_grads = hook_reduce,
                                   .after_step = hook_after,
                                   .backward_begin = so->nresize > 0 ? hook_backward_begin : NULL,
                                   .local_grads = hook_local_grads,
                                   .codec_state = hook_codec_state,
                                   .eval_params = hook_eval_params,
                                   .eval_defer = hook_eval_defer,
                                   .eval_sum = so->eval_alone ? NULL : hook_eval_sum,
                                   .eval_bcast = so->eval_alone ? NULL : hook_eval_bcast,
                                   .eval_fsum = so->eval_alone ? NULL : hook_eval_fsum,
                                   .codec_restore = hook_codec_restore,
                                   .ctx = rc};
        rc->opts = *opts;
        rc->opts.comm = &rc->comm;
        if (i != 0)
            rc->opts.hooks = NULL; /* rank 0 reports for all (and hooks need not be thread-safe) */
    }
    gm_info("event=simulate workers=%d codec=%s", s.n, gm_job_codec_name(s.strategy.id));
    for (int i = 0; i < s.n; i++) {
        int e = pthread_create(&s.r[i].th, NULL, rank_main, &s.r[i]);
        if (e != 0) {
            err = -e;
            break;
        }
        started++;
    }
    if (err < 0) { /* let the started ranks fail fast */
        pthread_mutex_lock(&s.mu);
        s.exited++;
        abort_round(&s);
        pthread_mutex_unlock(&s.mu);
    }
    for (int i = 0; i < started; i++)
        pthread_join(s.r[i].th, NULL);
    for (int i = 0; i < started && err == 0; i++)
        if (s.r[i].err < 0 && s.r[i].err != GM_ERR_ABORTED)
            err = s.r[i].err;
    /* A stop request reaches the ranks at different steps: when rank 0 stopped
     * cleanly (and saved), the others' GM_ERR_ABORTED is the expected echo. */
    for (int i = 0; i < started && err == 0; i++)
        if (s.r[i].err < 0 && !(started == s.n && s.r[0].err == 0 && s.r[0].sum.interrupted))
            err = s.r[i].err;
    if (err == 0) {
        *sum = s.r[0].sum;
        sum->samples_per_s *= s.n;
        sum->bytes_sent = s.grad_bytes;
        snprintf(sum->codec, sizeof(sum->codec), "%s", gm_gradsync_summary_codec(&s.strategy, s.n));
        gm_info("event=simulate_done workers=%d codec=%s bytes_sent=%llu rounds=%llu "
                "last_round_bytes=%llu hash_checks=%llu test_accuracy=%.2f",
                s.n, sum->codec, (unsigned long long)sum->bytes_sent, (unsigned long long)s.rounds,
                (unsigned long long)s.last_round_bytes,
                (unsigned long long)gm_gradsync_hash_checks(s.r[0].sync), sum->test_accuracy);
    }
out:
    if (s.net != NULL)
        gm_memnet_run(s.net);
    if (s.r != NULL) {
        for (int i = 0; i < s.n; i++) {
            gm_gradsync_free(s.r[i].sync);
            gm_coll_free(s.r[i].coll);
        }
    }
    free(s.r);
    gm_memnet_free(s.net);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return err;
}

int gm_sim_resize_parse(const char *arg, struct gm_sim_opts *so, char *why, size_t why_len)
{
    const char *p = arg;
    long last = 0;

    so->nresize = 0;
    while (p != NULL && *p != '\0') {
        struct gm_sim_resize z = {.bits = 16};
        char *end;
        long v;

        if (so->nresize == GM_SIM_RESIZE_MAX) {
            snprintf(why, why_len, "more than %d re-sizes", GM_SIM_RESIZE_MAX);
            return -EINVAL;
        }
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || *end != ':' || errno != 0 || v < 1 || v <= last) {
            snprintf(why, why_len,
                     "re-size %d: want STEP:H[:BITS] with STEP >= 1 and above "
                     "the one before",
                     so->nresize + 1);
            return -EINVAL;
        }
        z.step = last = v;
        p = end + 1;
        v = strtol(p, &end, 10);
        if (end == p || (*end != ':' && *end != ',' && *end != '\0') || errno != 0 || v < 1 ||
            v > 1000000) {
            snprintf(why, why_len, "re-size %d: H wants 1..1000000", so->nresize + 1);
            return -EINVAL;
        }
        z.h = (uint32_t)v;
        p = end;
        if (*p == ':') {
            v = strtol(p + 1, &end, 10);
            if (end == p + 1 || (*end != ',' && *end != '\0') || (v != 8 && v != 16)) {
                snprintf(why, why_len, "re-size %d: BITS wants 16 or 8", so->nresize + 1);
                return -EINVAL;
            }
            z.bits = (int)v;
            p = end;
        }
        so->resize[so->nresize++] = z;
        if (*p == ',') {
            p++;
            if (*p == '\0') {
                snprintf(why, why_len, "a trailing ','");
                return -EINVAL;
            }
        }
    }
    if (so->nresize == 0) {
        snprintf(why, why_len, "no re-size given");
        return -EINVAL;
    }
    return 0;
}
