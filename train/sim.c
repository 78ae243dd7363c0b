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
#include "train/collective.h"
#include "train/diloco.h"
#include "train/model.h"
#include "train/powersgd.h"
#include "train/transport_mem.h"

enum sim_codec { SIM_FP32, SIM_FP16, SIM_PSGD, SIM_DILOCO };

struct sim;

struct rank_ctx {
    struct sim *s;
    int rank;
    struct gm_coll *coll; /* owned */
    struct gm_psgd *psgd; /* owned, lazily */
    struct gm_diloco *dl; /* owned, lazily */
    int status, calls;    /* of the op in flight */
    struct gm_train_comm comm;
    struct gm_train_opts opts;
    struct gm_train_summary sum;
    int err;
    pthread_t th;
};

struct sim {
    struct gm_job job; /* shallow copy, threads = 1 */
    enum sim_codec codec;
    bool error_feedback;
    int n;
    struct gm_memnet *net; /* owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, exited;
    uint64_t gen;
    uint64_t rounds, last_round_bytes;
    uint64_t grad_bytes;  /* payload of counted rounds, all ranks */
    uint64_t hash_checks; /* passed, counted by rank 0 */
    struct rank_ctx *r;   /* owned, n */
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

typedef int (*start_fn)(struct rank_ctx *rc, struct gm_model *m, long step);

/* counted: the round moves gradients or parameters (bytes_sent); hash checks do not. */
static int rendezvous(struct rank_ctx *rc, start_fn start, struct gm_model *m, long step,
                      bool counted)
{
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
    err = start(rc, m, step);
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

static int start_dense(struct rank_ctx *rc, struct gm_model *m, long step)
{
    struct gm_coll_opts o = {.algo = GM_COLL_RING,
                             .codec = rc->s->codec == SIM_FP16 ? GM_CODEC_FP16 : GM_CODEC_FP32,
                             .reduce = GM_COLL_MEAN,
                             .step = (uint64_t)step};

    return gm_coll_allreduce_start(rc->coll, gm_model_grads(m), gm_model_num_params(m), &o, op_done,
                                   rc);
}

static int start_psgd(struct rank_ctx *rc, struct gm_model *m, long step)
{
    return gm_psgd_reduce_start(rc->psgd, rc->coll, gm_model_grads(m), (uint64_t)step, op_done, rc);
}

static int start_diloco(struct rank_ctx *rc, struct gm_model *m, long step)
{
    return gm_diloco_sync_start(rc->dl, rc->coll, gm_model_params(m), (uint64_t)step, op_done, rc);
}

static int start_hashcheck(struct rank_ctx *rc, struct gm_model *m, long step)
{
    return gm_coll_hashcheck_start(rc->coll, gm_model_params(m),
                                   gm_model_num_params(m) * sizeof(float), (uint64_t)step, op_done,
                                   rc);
}

/* PowerSGD's view of each parameter tensor: its 2-D shape, or a dense column. */
static struct gm_view *model_views(const struct gm_model *m, size_t *nt)
{
    struct gm_view *v;

    *nt = gm_model_num_tensors(m);
    v = calloc(*nt + 1, sizeof(*v));
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < *nt; i++) {
        const struct gm_param_info *pi = gm_model_tensor(m, i);
        v[i].offset = pi->offset;
        v[i].rows = (size_t)pi->rows;
        v[i].cols = (size_t)pi->cols;
        if (v[i].rows * v[i].cols != pi->numel) { /* no 2-D view: send it dense */
            v[i].rows = pi->numel;
            v[i].cols = 1;
        }
    }
    return v;
}

int gm_sim_psgd_payload(const struct gm_model *m, int rank, size_t *floats)
{
    struct gm_psgd_config cfg;
    struct gm_psgd *p = NULL;
    size_t nt;
    struct gm_view *v = model_views(m, &nt);
    int err;

    *floats = 0;
    if (v == NULL)
        return -ENOMEM;
    gm_psgd_config_default(&cfg);
    cfg.rank = rank;
    err = gm_psgd_new(&cfg, v, nt, gm_model_num_params(m), &p);
    free(v);
    if (err == 0)
        *floats = gm_psgd_payload_floats(p, 0);
    gm_psgd_free(p);
    return err;
}

static int init_psgd(struct rank_ctx *rc, struct gm_model *m, long total_steps)
{
    const struct gm_job *job = &rc->s->job;
    size_t nt;
    struct gm_view *v = model_views(m, &nt);
    struct gm_psgd_config cfg;
    int err;

    if (v == NULL)
        return -ENOMEM;
    gm_psgd_config_default(&cfg);
    cfg.rank = job->comm.rank;
    cfg.warmup_steps = (uint64_t)(total_steps * 2 / 100);
    cfg.error_feedback = rc->s->error_feedback;
    cfg.seed = job->seed;
    cfg.algo = GM_COLL_RING;
    err = gm_psgd_new(&cfg, v, nt, gm_model_num_params(m), &rc->psgd);
    free(v);
    if (err == 0 && rc->rank == 0)
        gm_info("event=powersgd rank=%d matrices=%zu dense_floats=%zu warmup_steps=%llu "
                "payload_floats=%zu params=%zu error_feedback=%d",
                cfg.rank, gm_psgd_matrices(rc->psgd), gm_psgd_dense_floats(rc->psgd),
                (unsigned long long)cfg.warmup_steps,
                gm_psgd_payload_floats(rc->psgd, cfg.warmup_steps), gm_model_num_params(m),
                cfg.error_feedback);
    return err;
}

static int hook_reduce(void *ctx, struct gm_model *m, long step, long total_steps)
{
    struct rank_ctx *rc = ctx;
    int err;

    switch (rc->s->codec) {
    case SIM_PSGD:
        if (rc->psgd == NULL && (err = init_psgd(rc, m, total_steps)) < 0)
            return err;
        return rendezvous(rc, start_psgd, m, step, true);
    case SIM_DILOCO:
        if (rc->dl == NULL) { /* before the first local step: the shared initial weights */
            struct gm_diloco_config cfg;
            gm_diloco_config_default(&cfg);
            cfg.h = (uint32_t)rc->s->job.comm.local_steps;
            cfg.outer_lr = (float)rc->s->job.comm.outer_lr;
            cfg.momentum = (float)rc->s->job.comm.outer_momentum;
            cfg.algo = GM_COLL_RING;
            return gm_diloco_new(&cfg, gm_model_params(m), gm_model_num_params(m), &rc->dl);
        }
        return 0;
    default:
        return rendezvous(rc, start_dense, m, step, true);
    }
}

/* Proves the replicas identical: after every DiLoCo sync (params agree only
 * then), every 100 steps otherwise, and after the last step. */
static int hook_after(void *ctx, struct gm_model *m, long step, long total_steps)
{
    struct rank_ctx *rc = ctx;
    bool last = step + 1 == total_steps;
    int err;

    if (rc->s->codec == SIM_DILOCO) {
        if (gm_diloco_due(rc->dl, (uint64_t)step)) {
            if ((err = rendezvous(rc, start_diloco, m, step, true)) < 0)
                return err;
        } else if (last) { /* mid-round: end on the outer parameters, like every rank */
            if ((err = gm_diloco_restore(rc->dl, gm_model_params(m))) < 0)
                return err;
        } else {
            return 0;
        }
    } else if ((step + 1) % 100 != 0 && !last) {
        return 0;
    }
    err = rendezvous(rc, start_hashcheck, m, step, false);
    if (err == 0 && rc->rank == 0)
        rc->s->hash_checks++;
    if (err == GM_ERR_MISMATCH)
        gm_err("event=replicas_differ step=%ld: parameters are not bitwise identical", step);
    return err;
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

static const char *codec_name(enum sim_codec c)
{
    static const char *const names[] = {"fp32", "fp16", "powersgd", "diloco"};
    return names[c];
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
    s.n = so->workers;
    s.error_feedback = so->error_feedback;
    switch (job->comm.codec) {
    case GM_JOB_CODEC_FP16:
        s.codec = SIM_FP16;
        break;
    case GM_JOB_CODEC_POWERSGD:
        s.codec = SIM_PSGD;
        break;
    case GM_JOB_CODEC_DILOCO:
        s.codec = SIM_DILOCO;
        break;
    default:
        s.codec = SIM_FP32;
        break;
    }
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
        rc->coll = gm_coll_new(gm_memnet_transport(s.net, i), &cc);
        if (rc->coll == NULL) {
            err = -ENOMEM;
            goto out;
        }
        rc->comm = (struct gm_train_comm){.rank = i,
                                          .world = s.n,
                                          .reduce_grads = hook_reduce,
                                          .after_step = hook_after,
                                          .ctx = rc};
        rc->opts = *opts;
        rc->opts.comm = &rc->comm;
    }
    gm_info("event=simulate workers=%d codec=%s", s.n, codec_name(s.codec));
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
        snprintf(sum->codec, sizeof(sum->codec), "%s", codec_name(s.codec));
        gm_info("event=simulate_done workers=%d codec=%s bytes_sent=%llu rounds=%llu "
                "last_round_bytes=%llu hash_checks=%llu test_accuracy=%.2f",
                s.n, sum->codec, (unsigned long long)sum->bytes_sent, (unsigned long long)s.rounds,
                (unsigned long long)s.last_round_bytes, (unsigned long long)s.hash_checks,
                sum->test_accuracy);
    }
out:
    if (s.net != NULL)
        gm_memnet_run(s.net);
    if (s.r != NULL) {
        for (int i = 0; i < s.n; i++) {
            gm_psgd_free(s.r[i].psgd);
            gm_diloco_free(s.r[i].dl);
            gm_coll_free(s.r[i].coll);
        }
    }
    free(s.r);
    gm_memnet_free(s.net);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return err;
}
