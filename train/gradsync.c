/*
 * train/gradsync.c - gradient synchronization strategies and the per-rank logic around the
 * optimizer step (see gradsync.h).  Was the simulation's own code (train/sim.c) until the
 * agent's runtime needed the very same logic.
 */
#include "train/gradsync.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "train/compress/diloco.h"
#include "train/compress/powersgd.h"
#include "train/ckpt/ckpt.h"
#include "train/nn/model.h"

struct gm_gradsync {
    struct gm_gradsync_strategy s;
    int rank, world;
    uint64_t seed;
    struct gm_gradsync_exec ex;
    struct gm_psgd *psgd; /* owned, lazily (needs total_steps) */
    struct gm_diloco *dl; /* owned, lazily (needs the initial weights) */
    uint32_t dl_h;        /* dl's H (capped) */
    uint32_t dl_lag;      /* overlapped: steps from a boundary to its update, 0: blocking */
    /* overlapped DiLoCo: the sync and hash check of the boundary at dl_step were handed to
     * the executor (submit, or run when it has none) and not yet waited for; dl_err: the
     * first error among them (0).  With the executor's wait_one, the lag step waits for the
     * sync alone and leaves the hash check running (dl_hash_inflight) until the next
     * boundary: its round trip is then off the trainer's path.  It exchanges dl_anchor_hash,
     * the anchor's hash taken when the sync started (the loop thread; the trainer applies the
     * update to the anchor while the check still runs) */
    bool dl_inflight, dl_hash_inflight;
    long dl_step;
    int dl_err;
    uint64_t dl_anchor_hash;
    uint64_t dl_wait_ns, dl_wait_max_ns; /* the trainer blocked on DiLoCo's syncs, for the log */
    uint64_t dl_waits;
    /* what a sync really takes (gm_gradsync_diloco_sync_s): the overlapped sync's done
     * callback, wrapped to stamp dl_done_ns (loop thread; read by the trainer thread after
     * the executor's wait), its submit time, and the last GM_GRADSYNC_SYNC_SAMPLES
     * submit-to-done seconds (a ring; dl_nsync pushed in all) */
    gm_coll_done_cb dl_done;
    void *dl_done_arg;
    uint64_t dl_submit_ns, dl_done_ns;
    double dl_sync[GM_GRADSYNC_SYNC_SAMPLES];
    uint64_t dl_nsync;
    /* unequal shares: this step's samples of this rank and of all (gm_gradsync_note_share),
     * and their sums over the DiLoCo round so far (its outer weight) */
    int step_n, step_g;
    uint64_t round_n, round_g;
    /* the op being started: set by the trainer thread, read by start while run blocks it */
    struct gm_model *m; /* borrowed */
    long step;
    float *eval_f; /* a sharded evaluation's op: its floats (borrowed), eval_n of them */
    size_t eval_n;
    uint64_t hash_checks;
    /* overlap (dense, exec with submit/wait): the bucket layout, made on first use */
    struct bucket *buckets; /* owned, nbuckets */
    size_t nbuckets, ntensors;
    size_t *bucket_of; /* owned: per tensor */
    size_t *missing;   /* owned: per bucket, tensors not yet ready this step */
    size_t submitted;  /* buckets submitted this step */
    bool overlap;      /* begin was called for this step */
    /* checkpoints: a copy of the factors to write, and codec state restored from one, applied
     * when the codec's state is made (owned, each NULL when none; n* their lengths) */
    float *ckpt_factors;
    float *pend_factors, *pend_error, *pend_anchor, *pend_momentum, *pend_delta, *pend_start;
    size_t npend_factors, npend_error, npend_anchor, npend_momentum, npend_delta, npend_start;
};

struct bucket {
    struct gm_gradsync *g;
    size_t off, len, tensors;
};

/* --- strategies -------------------------------------------------------------------------- */

/* The kind and wire type of each codec, in enum order: GM_JOB_CODECS's columns. */
#define CODEC_ROW_(id, name, kind, wire) {GM_GRADSYNC_KIND_##kind, GM_CODEC_##wire},
static const struct {
    enum gm_gradsync_kind kind;
    enum gm_codec wire;
} codec_rows[GM_JOB_CODEC_COUNT] = {GM_JOB_CODECS(CODEC_ROW_)};
#undef CODEC_ROW_

static void strategy_init(struct gm_gradsync_strategy *s, enum gm_job_codec id)
{
    struct gm_psgd_config pc;
    struct gm_diloco_config dc;

    gm_psgd_config_default(&pc);
    gm_diloco_config_default(&dc);
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->kind = codec_rows[id].kind;
    s->codec = codec_rows[id].wire;
    /* 8-bit deltas run DIRECT (train/compress/diloco.h, "8-bit deltas"); the rest the ring */
    s->algo = s->codec == GM_CODEC_Q8 ? GM_COLL_DIRECT : GM_COLL_RING;
    s->rank = pc.rank;
    s->error_feedback = true;
    s->local_steps = dc.h;
    s->outer_lr = dc.outer_lr;
    s->outer_momentum = dc.momentum;
}

int gm_gradsync_strategy_of(enum gm_job_codec codec, const struct gm_job *job,
                            struct gm_gradsync_strategy *out)
{
    if (codec == GM_JOB_CODEC_AUTO || (int)codec < 0 || codec >= GM_JOB_CODEC_COUNT) {
        memset(out, 0, sizeof(*out));
        return -EINVAL;
    }
    strategy_init(out, codec);
    if (job != NULL) {
        out->rank = job->comm.rank;
        out->local_steps = (uint32_t)job->comm.local_steps;
        out->outer_lr = job->comm.outer_lr;
        out->outer_momentum = job->comm.outer_momentum;
        out->cap_h = job->comm.auto_resolved;
        out->overlap = out->kind == GM_GRADSYNC_KIND_DILOCO && job->comm.overlap;
    }
    return 0;
}

int gm_gradsync_strategy_from_job(const struct gm_job *job, struct gm_gradsync_strategy *out)
{
    if (job->comm.codec == GM_JOB_CODEC_AUTO) {
        gm_info("codec=auto resolved to fp32: nothing measured links for this run (one process, "
                "or no coordinator's choice)");
        return gm_gradsync_strategy_of(GM_JOB_CODEC_FP32, job, out);
    }
    return gm_gradsync_strategy_of(job->comm.codec, job, out);
}

const char *gm_gradsync_summary_codec(const struct gm_gradsync_strategy *s, int world)
{
    return world < 2 || s == NULL ? "none" : gm_job_codec_name(s->id);
}

size_t gm_gradsync_strategies(struct gm_gradsync_strategy *out, size_t cap)
{
    size_t n = 0;

    for (int c = 0; c < GM_JOB_CODEC_COUNT; c++) {
        if (c == GM_JOB_CODEC_AUTO)
            continue;
        if (n < cap)
            strategy_init(&out[n], (enum gm_job_codec)c);
        n++;
    }
    return n;
}

void gm_gradsync_describe(const struct gm_gradsync_strategy *s, char *buf, size_t cap)
{
    switch (s->kind) {
    case GM_GRADSYNC_KIND_POWERSGD:
        snprintf(buf, cap, "%s rank %d (%s)", gm_job_codec_name(s->id), s->rank,
                 gm_codec_name(s->codec));
        break;
    case GM_GRADSYNC_KIND_DILOCO:
        snprintf(buf, cap, "%s H=%u (%s%s)", gm_job_codec_name(s->id), s->local_steps,
                 gm_codec_name(s->codec), s->overlap ? ", overlapped" : "");
        break;
    default:
        snprintf(buf, cap, "%s", gm_job_codec_name(s->id));
        break;
    }
}

/* PowerSGD's view of each parameter tensor: its 2-D shape, or a dense column. */
static struct gm_view *model_views(const struct gm_model *m, size_t *nt)
{
    struct gm_view *v;

    *nt = gm_model_num_trainable_tensors(m);
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

/* The PowerSGD config a rank runs with (warmup_steps set by the caller). */
static void psgd_config(const struct gm_gradsync_strategy *s, uint64_t seed,
                        struct gm_psgd_config *cfg)
{
    gm_psgd_config_default(cfg);
    cfg->rank = s->rank;
    cfg->error_feedback = s->error_feedback;
    cfg->seed = seed;
    cfg->codec = s->codec;
    cfg->algo = s->algo;
}

/* Floats one PowerSGD step all-reduces for model m after warm-up. */
static int psgd_payload(const struct gm_gradsync_strategy *s, const struct gm_model *m,
                        size_t *floats)
{
    struct gm_psgd_config cfg;
    struct gm_psgd *p = NULL;
    size_t nt;
    struct gm_view *v = model_views(m, &nt);
    int err;

    *floats = 0;
    if (v == NULL)
        return -ENOMEM;
    psgd_config(s, 1, &cfg);
    err = gm_psgd_new(&cfg, v, nt, gm_model_num_trainable(m), &p);
    free(v);
    if (err == 0)
        *floats = gm_psgd_payload_floats(p, 0);
    gm_psgd_free(p);
    return err;
}

int gm_gradsync_estimate(const struct gm_gradsync_strategy *s, const struct gm_model *m, int world,
                         const struct gm_coll_link *links, struct gm_gradsync_cost *out)
{
    return gm_gradsync_estimate_groups(s, m, world, links, NULL, out);
}

int gm_gradsync_estimate_groups(const struct gm_gradsync_strategy *s, const struct gm_model *m,
                                int world, const struct gm_coll_link *links, const int *groups,
                                struct gm_gradsync_cost *out)
{
    size_t params = gm_model_num_trainable(m), floats;
    size_t esize = gm_codec_elem_size(s->codec);
    int err;

    memset(out, 0, sizeof(*out));
    if (world < 1 || esize == 0)
        return -EINVAL;
    switch (s->kind) {
    case GM_GRADSYNC_KIND_DENSE:
        out->step_bytes = gm_codec_bytes(s->codec, params);
        out->seconds = gm_coll_cost(s->algo, world, links, groups, params, s->codec);
        break;
    case GM_GRADSYNC_KIND_POWERSGD:
        if ((err = psgd_payload(s, m, &floats)) < 0)
            return err;
        out->step_bytes = gm_codec_bytes(s->codec, floats);
        out->seconds = 2 * gm_coll_cost(s->algo, world, links, groups, floats / 2, s->codec);
        break;
    case GM_GRADSYNC_KIND_DILOCO:
        if (s->local_steps < 1)
            return -EINVAL;
        out->step_bytes = gm_codec_bytes(s->codec, params) / s->local_steps;
        out->seconds =
            gm_coll_cost(s->algo, world, links, groups, params, s->codec) / s->local_steps;
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

/* --- one rank ------------------------------------------------------------------------------ */

int gm_gradsync_new(const struct gm_gradsync_strategy *s, int rank, int world, uint64_t seed,
                    const struct gm_gradsync_exec *ex, struct gm_gradsync **out)
{
    struct gm_gradsync *g;

    *out = NULL;
    if (s == NULL || ex == NULL || ex->run == NULL || world < 1 || rank < 0 || rank >= world)
        return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    g->s = *s;
    g->rank = rank;
    g->world = world;
    g->seed = seed;
    g->ex = *ex;
    *out = g;
    return 0;
}

void gm_gradsync_free(struct gm_gradsync *g)
{
    if (g == NULL)
        return;
    gm_psgd_free(g->psgd);
    gm_diloco_free(g->dl);
    free(g->ckpt_factors);
    free(g->pend_factors);
    free(g->pend_error);
    free(g->pend_anchor);
    free(g->pend_momentum);
    free(g->pend_delta);
    free(g->pend_start);
    free(g->buckets);
    free(g->bucket_of);
    free(g->missing);
    free(g);
}

uint64_t gm_gradsync_hash_checks(const struct gm_gradsync *g)
{
    return g->hash_checks;
}

static int start_dense(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;
    struct gm_coll_opts o = {
        .algo = g->s.algo, .codec = g->s.codec, .reduce = GM_COLL_MEAN, .step = (uint64_t)g->step};

    return gm_coll_allreduce_start(c, gm_model_grads(g->m), gm_model_num_trainable(g->m), &o, done,
                                   done_arg);
}

static int start_psgd(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;

    return gm_psgd_reduce_start(g->psgd, c, gm_model_grads(g->m), (uint64_t)g->step, done,
                                done_arg);
}

static int start_diloco(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;

    return gm_diloco_sync_start(g->dl, c, gm_model_params(g->m), (uint64_t)g->step, done, done_arg);
}

/* The overlapped sync's completion: its time stamped, then the executor's callback. */
static void late_done(struct gm_coll *c, int status, void *arg)
{
    struct gm_gradsync *g = arg;

    g->dl_done_ns = gm_time_mono_ns(); /* the trainer reads it after the executor's wait */
    g->dl_done(c, status, g->dl_done_arg);
}

/* Overlapped DiLoCo's ops, started by the executor after gm_gradsync_after_step handed them
 * over: they read only the gm_diloco (its delta; the anchor, which the trainer leaves alone
 * until it waits for them) and dl_step, never the model; the sync also writes the dl_done
 * fields, which the trainer reads only after its wait. */
static int start_diloco_late(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;
    const float *anchor, *mom;
    size_t n;
    int err;

    g->dl_done = done;
    g->dl_done_arg = done_arg;
    g->dl_done_ns = 0;
    if ((err = gm_diloco_overlap_start(g->dl, c, (uint64_t)g->dl_step, late_done, g)) < 0)
        return err;
    /* the anchor is still the boundary's (the trainer applies the update only after waiting
     * for this op): its hash, for the check after it, taken while the sync's first bytes go */
    n = gm_diloco_state(g->dl, &anchor, &mom);
    g->dl_anchor_hash = gm_coll_hash(anchor, n * sizeof(float));
    return 0;
}

/* The anchor's hash at dl_step (start_diloco_late took it), the same on every rank. */
static int start_hash_anchor(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;

    return gm_coll_hashcheck_start(c, &g->dl_anchor_hash, sizeof(g->dl_anchor_hash),
                                   (uint64_t)g->dl_step, done, done_arg);
}

static int start_hashcheck(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;

    return gm_coll_hashcheck_start(c, gm_model_params(g->m),
                                   gm_model_num_params(g->m) * sizeof(float), (uint64_t)g->step,
                                   done, done_arg);
}

static int run(struct gm_gradsync *g, gm_gradsync_start_fn start, struct gm_model *m, long step,
               bool counted)
{
    g->m = m;
    g->step = step;
    return g->ex.run(g->ex.ctx, start, g, counted);
}

/* A sharded evaluation's ops (gm_gradsync_eval_sum, gm_gradsync_eval_bcast): their buffer,
 * set by the trainer thread while run blocks it. */
static int start_eval_sum(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;
    const struct gm_coll_opts o = {.algo = GM_COLL_DIRECT,
                                   .codec = GM_CODEC_FP32,
                                   .reduce = GM_COLL_SUM,
                                   .step = (uint64_t)g->step};

    return gm_coll_allreduce_start(c, g->eval_f, g->eval_n, &o, done, done_arg);
}

static int start_eval_bcast(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct gm_gradsync *g = arg;

    return gm_coll_broadcast_start(c, g->eval_f, g->eval_n, 0, (uint64_t)g->step, done, done_arg);
}

/* One of a sharded evaluation's ops on buf[0..n), in place. */
static int run_eval_op(struct gm_gradsync *g, gm_gradsync_start_fn start, long step, float *buf,
                       size_t n)
{
    int err;

    g->eval_f = buf;
    g->eval_n = n;
    err = run(g, start, g->m, step, false);
    g->eval_f = NULL;
    return err;
}

int gm_gradsync_eval_sum(struct gm_gradsync *g, long step, double *v, size_t n)
{
    float f[2 * GM_GRADSYNC_EVAL_SUM_MAX];
    int err;

    if (n > GM_GRADSYNC_EVAL_SUM_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) { /* each double as a float and the float of the rest */
        f[2 * i] = (float)v[i];
        f[2 * i + 1] = (float)(v[i] - (double)f[2 * i]);
    }
    err = run_eval_op(g, start_eval_sum, step, f, 2 * n);
    for (size_t i = 0; err == 0 && i < n; i++)
        v[i] = (double)f[2 * i] + (double)f[2 * i + 1];
    return err;
}

int gm_gradsync_eval_fsum(struct gm_gradsync *g, long step, float *buf, size_t n)
{
    return run_eval_op(g, start_eval_sum, step, buf, n);
}

int gm_gradsync_eval_bcast(struct gm_gradsync *g, long step, float *buf, size_t n)
{
    return run_eval_op(g, start_eval_bcast, step, buf, n);
}

static void drop_pending(float **p, size_t *n)
{
    free(*p);
    *p = NULL;
    *n = 0;
}

/* The restored PowerSGD state, into the codec just made. */
static void apply_pending_psgd(struct gm_gradsync *g)
{
    int ef, fa;

    if (g->pend_factors == NULL && g->pend_error == NULL)
        return;
    fa = g->pend_factors != NULL ? gm_psgd_state_set(g->psgd, g->pend_factors, g->npend_factors)
                                 : -ENOENT;
    ef =
        g->pend_error != NULL ? gm_psgd_error_set(g->psgd, g->pend_error, g->npend_error) : -ENOENT;
    if (fa == -EINVAL || ef == -EINVAL)
        gm_warn("event=codec-state-refused rank=%d codec=powersgd factors=%zu/%zu error=%zu/%zu: "
                "the checkpoint's state does not fit this model; that part starts fresh",
                g->rank, g->npend_factors, gm_psgd_state_floats(g->psgd), g->npend_error,
                gm_psgd_nelems(g->psgd));
    gm_info("event=codec-state-restored rank=%d codec=powersgd factors=%s error_feedback=%s",
            g->rank, fa == 0 ? "yes" : "no",
            ef == 0 ? "yes" : "no (starts at zero: the checkpoint holds no error of this rank)");
    drop_pending(&g->pend_factors, &g->npend_factors);
    drop_pending(&g->pend_error, &g->npend_error);
}

static void apply_pending_diloco(struct gm_gradsync *g)
{
    int err;

    if (g->pend_anchor == NULL || g->pend_momentum == NULL) {
        drop_pending(&g->pend_anchor, &g->npend_anchor);
        drop_pending(&g->pend_momentum, &g->npend_momentum);
        drop_pending(&g->pend_delta, &g->npend_delta);
        drop_pending(&g->pend_start, &g->npend_start);
        return;
    }
    if ((g->pend_delta != NULL || g->pend_start != NULL) && !g->s.overlap) {
        /* the outer update of the last boundary is not in the checkpoint's anchor yet, and
         * the steps since it are to be carried over: a blocking run has neither */
        gm_warn("event=codec-state-refused rank=%d codec=diloco: the checkpoint was written "
                "by a run with [comm] overlap = true, before its last sync was applied; "
                "this run has overlap = false, so the outer state starts fresh (resume with "
                "overlap = true to continue it exactly)",
                g->rank);
        drop_pending(&g->pend_anchor, &g->npend_anchor);
        drop_pending(&g->pend_momentum, &g->npend_momentum);
        drop_pending(&g->pend_delta, &g->npend_delta);
        drop_pending(&g->pend_start, &g->npend_start);
        return;
    }
    err = g->npend_anchor == g->npend_momentum
              ? gm_diloco_state_set(g->dl, g->pend_anchor, g->pend_momentum, g->npend_anchor)
              : -EINVAL;
    if (err == 0 && g->pend_delta != NULL)
        err = gm_diloco_pending_set(g->dl, g->pend_delta, g->npend_delta);
    if (err == 0 && g->pend_start != NULL)
        err = gm_diloco_round_start_set(g->dl, g->pend_start, g->npend_start);
    if (err != 0)
        gm_warn("event=codec-state-refused rank=%d codec=diloco floats=%zu: the checkpoint's "
                "outer state does not fit this model; it starts fresh",
                g->rank, g->npend_anchor);
    else
        gm_info("event=codec-state-restored rank=%d codec=diloco anchor=yes momentum=yes "
                "pending_update=%s",
                g->rank, g->pend_delta != NULL ? "yes" : "no");
    if (err == 0 && g->pend_start != NULL && g->world > 1 && g->rank == 0)
        gm_warn("event=diloco-resume-inexact world=%d: an overlapped checkpoint holds the "
                "writer's weights and round only; every rank continues from them, so the "
                "outer state is exact but the run is not bitwise the uninterrupted one",
                g->world);
    drop_pending(&g->pend_anchor, &g->npend_anchor);
    drop_pending(&g->pend_momentum, &g->npend_momentum);
    drop_pending(&g->pend_delta, &g->npend_delta);
    drop_pending(&g->pend_start, &g->npend_start);
}

static int init_psgd(struct gm_gradsync *g, struct gm_model *m, long total_steps)
{
    size_t nt;
    struct gm_view *v = model_views(m, &nt);
    struct gm_psgd_config cfg;
    int err;

    if (v == NULL)
        return -ENOMEM;
    psgd_config(&g->s, g->seed, &cfg);
    cfg.warmup_steps = (uint64_t)(total_steps * 2 / 100);
    err = gm_psgd_new(&cfg, v, nt, gm_model_num_trainable(m), &g->psgd);
    free(v);
    if (err == 0)
        apply_pending_psgd(g);
    if (err == 0 && g->rank == 0)
        gm_info("event=powersgd rank=%d matrices=%zu dense_floats=%zu warmup_steps=%llu "
                "payload_floats=%zu params=%zu error_feedback=%d",
                cfg.rank, gm_psgd_matrices(g->psgd), gm_psgd_dense_floats(g->psgd),
                (unsigned long long)cfg.warmup_steps,
                gm_psgd_payload_floats(g->psgd, cfg.warmup_steps), gm_model_num_trainable(m),
                cfg.error_feedback);
    return err;
}

int gm_gradsync_reduce(struct gm_gradsync *g, struct gm_model *m, long step, long total_steps)
{
    int err;

    switch (g->s.kind) {
    case GM_GRADSYNC_KIND_POWERSGD:
        if (g->psgd == NULL && (err = init_psgd(g, m, total_steps)) < 0)
            return err;
        return run(g, start_psgd, m, step, true);
    case GM_GRADSYNC_KIND_DILOCO:
        if (g->dl == NULL) { /* before the first local step: the shared initial weights */
            struct gm_diloco_config cfg;
            struct gm_gradsync_diloco_run plan;
            gm_diloco_config_default(&cfg);
            gm_gradsync_diloco_plan(&g->s, total_steps, &plan);
            cfg.h = plan.h;
            g->dl_h = cfg.h;
            g->dl_lag = plan.lag;
            cfg.outer_lr = (float)plan.outer_lr;
            cfg.momentum = (float)plan.outer_momentum;
            cfg.codec = g->s.codec;
            cfg.algo = g->s.algo;
            gm_info("event=diloco rank=%d world=%d local_steps=%u outer_lr=%g outer_momentum=%g "
                    "codec=%s overlap=%d lag=%u start_step=%ld rounds=%ld%s%s%s",
                    g->rank, g->world, cfg.h, (double)cfg.outer_lr, (double)cfg.momentum,
                    gm_codec_name(cfg.codec), g->s.overlap, g->dl_lag, step, plan.rounds,
                    plan.why[0] ? " reason=\"" : "", plan.why, plan.why[0] ? "\"" : "");
            err = gm_diloco_new(&cfg, gm_model_params(m), gm_model_num_trainable(m), &g->dl);
            if (err == 0)
                apply_pending_diloco(g);
            g->round_n = g->round_g = 0;
            if (err < 0)
                return err;
        }
        g->round_n += (uint64_t)g->step_n;
        g->round_g += (uint64_t)g->step_g;
        return 0;
    default:
        if (g->overlap) {
            g->overlap = false;
            if (g->submitted == g->nbuckets)
                return g->ex.wait(g->ex.ctx);
            /* a layer never reported (cannot happen with the model's hook): finish the step
             * the plain way once the submitted buckets are done */
            if ((err = g->ex.wait(g->ex.ctx)) < 0)
                return err;
        }
        return run(g, start_dense, m, step, true);
    }
}

static int start_bucket(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct bucket *b = arg;
    struct gm_gradsync *g = b->g;
    struct gm_coll_opts o = {
        .algo = g->s.algo, .codec = g->s.codec, .reduce = GM_COLL_MEAN, .step = (uint64_t)g->step};

    return gm_coll_allreduce_start(c, gm_model_grads(g->m) + b->off, b->len, &o, done, done_arg);
}

static int make_buckets(struct gm_gradsync *g, struct gm_model *m)
{
    size_t nt = gm_model_num_trainable_tensors(m), *end, *off, *len, n;

    end = calloc(nt + 1, sizeof(size_t));
    off = calloc(nt + 1, sizeof(size_t));
    len = calloc(nt + 1, sizeof(size_t));
    g->bucket_of = calloc(nt + 1, sizeof(size_t));
    g->missing = calloc(nt + 1, sizeof(size_t));
    g->buckets = calloc(nt + 1, sizeof(struct bucket));
    if (end == NULL || off == NULL || len == NULL || g->bucket_of == NULL || g->missing == NULL ||
        g->buckets == NULL) {
        free(end);
        free(off);
        free(len);
        return -ENOMEM;
    }
    for (size_t i = 0; i < nt; i++) {
        const struct gm_param_info *pi = gm_model_tensor(m, i);
        end[i] = pi->offset + pi->numel;
        GM_ASSERT(pi->offset == (i > 0 ? end[i - 1] : 0)); /* contiguous, in order */
    }
    n = gm_coll_buckets(end, nt, gm_coll_bucket_bytes(NULL), off, len);
    for (size_t k = 0; k < n; k++)
        g->buckets[k] = (struct bucket){.g = g, .off = off[k], .len = len[k]};
    for (size_t i = 0; i < nt; i++) {
        size_t start = i > 0 ? end[i - 1] : 0;
        for (size_t k = 0; k < n; k++)
            if (start >= off[k] && end[i] <= off[k] + len[k]) {
                g->bucket_of[i] = k;
                g->buckets[k].tensors++;
                break;
            }
    }
    g->nbuckets = n;
    g->ntensors = nt;
    free(end);
    free(off);
    free(len);
    return 0;
}

int gm_gradsync_backward_begin(struct gm_gradsync *g, struct gm_model *m, long step)
{
    int err;

    g->overlap = false;
    if (g->s.kind != GM_GRADSYNC_KIND_DENSE || g->ex.submit == NULL || g->ex.wait == NULL)
        return 0;
    if (g->buckets == NULL && (err = make_buckets(g, m)) < 0)
        return err;
    g->m = m;
    g->step = step;
    g->submitted = 0;
    for (size_t k = 0; k < g->nbuckets; k++)
        g->missing[k] = g->buckets[k].tensors;
    g->overlap = true;
    return 0;
}

void gm_gradsync_grads_ready(struct gm_gradsync *g, size_t first_tensor, size_t n)
{
    if (g == NULL || !g->overlap)
        return;
    for (size_t i = first_tensor; i < first_tensor + n && i < g->ntensors; i++) {
        size_t k = g->bucket_of[i];
        if (g->missing[k] == 0 || --g->missing[k] > 0)
            continue;
        g->ex.submit(g->ex.ctx, start_bucket, &g->buckets[k], true);
        g->submitted++;
    }
}

/* Overlapped DiLoCo: hands op to the executor without waiting (run, when it cannot submit:
 * the same updates, in the same places, only not overlapped).  After an error nothing more
 * is handed over until the wait. */
static void dl_submit(struct gm_gradsync *g, gm_gradsync_start_fn start, bool counted)
{
    int err;

    if (g->dl_err < 0)
        return;
    if (g->ex.submit != NULL && g->ex.wait != NULL) {
        g->ex.submit(g->ex.ctx, start, g, counted);
        return;
    }
    if ((err = g->ex.run(g->ex.ctx, start, g, counted)) < 0)
        g->dl_err = err;
}

/* One sync's submit-to-done time, for gm_gradsync_diloco_sync_s. */
static void note_sync(struct gm_gradsync *g, uint64_t ns)
{
    g->dl_sync[g->dl_nsync++ % GM_GRADSYNC_SYNC_SAMPLES] = (double)ns * 1e-9;
}

double gm_gradsync_diloco_sync_s(const struct gm_gradsync *g)
{
    double v[GM_GRADSYNC_SYNC_SAMPLES];
    size_t n;

    if (g == NULL || g->dl_nsync == 0)
        return 0;
    n = g->dl_nsync < GM_GRADSYNC_SYNC_SAMPLES ? (size_t)g->dl_nsync : GM_GRADSYNC_SYNC_SAMPLES;
    memcpy(v, g->dl_sync, n * sizeof(*v));
    for (size_t i = 1; i < n; i++) /* insertion sort: n <= 8 */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The time the trainer blocked in one of DiLoCo's waits, for the log. */
static void note_wait(struct gm_gradsync *g, uint64_t dt)
{
    g->dl_wait_ns += dt;
    g->dl_wait_max_ns = GM_MAX(g->dl_wait_max_ns, dt);
}

/* Waits for the hash check a lag step left running (the only op then handed over); its
 * error stays in dl_err. */
static void dl_settle_hash(struct gm_gradsync *g)
{
    uint64_t t0 = gm_time_mono_ns();
    int err;

    if (!g->dl_hash_inflight)
        return;
    g->dl_hash_inflight = false;
    err = g->ex.wait(g->ex.ctx);
    note_wait(g, gm_time_mono_ns() - t0);
    if (g->dl_err == 0 && err < 0)
        g->dl_err = err;
    if (g->dl_err == 0)
        g->hash_checks++; /* the anchor's hash check at dl_step passed */
}

/* Waits for the ops dl_submit handed over (if any); their first error stays in dl_err.
 * sync_only (the lag step): with the executor's wait_one, for the sync alone, leaving its
 * hash check running (dl_hash_inflight; an error drains it at once). */
static void dl_settle(struct gm_gradsync *g, bool sync_only)
{
    const bool one = sync_only && g->ex.submit != NULL && g->ex.wait_one != NULL;
    uint64_t t0 = gm_time_mono_ns(), dt;
    int err = 0;

    if (!g->dl_inflight) {
        if (!sync_only)
            dl_settle_hash(g);
        return;
    }
    g->dl_inflight = false;
    if (g->ex.submit != NULL && g->ex.wait != NULL)
        err = one ? g->ex.wait_one(g->ex.ctx) : g->ex.wait(g->ex.ctx);
    if (one && err < 0)
        (void)g->ex.wait(g->ex.ctx); /* nothing stays running after an error */
    dt = gm_time_mono_ns() - t0;
    note_wait(g, dt);
    g->dl_waits++;
    if (g->dl_err == 0 && err < 0)
        g->dl_err = err;
    if (one && err == 0)
        g->dl_hash_inflight = true;
    else if (g->dl_err == 0)
        g->hash_checks++; /* the anchor's hash check at dl_step passed */
    if (g->dl_err == 0 && g->dl_submit_ns != 0 && g->dl_done_ns > g->dl_submit_ns) {
        uint64_t in = g->ex.peers_in != NULL ? g->ex.peers_in(g->ex.ctx) : 0;
        uint64_t from = in > g->dl_submit_ns && in < g->dl_done_ns ? in : g->dl_submit_ns;
        note_sync(g, g->dl_done_ns - from); /* from when every rank's data was on its way */
        gm_debug("event=diloco-sync rank=%d step=%ld submit_to_peers_ms=%.1f "
                 "peers_to_done_ms=%.1f wait_ms=%.1f",
                 g->rank, g->dl_step, (double)(from - g->dl_submit_ns) * 1e-6,
                 (double)(g->dl_done_ns - from) * 1e-6, (double)dt * 1e-6);
    }
    g->dl_submit_ns = 0;
}

/* dl_settle, then the first error, which it clears */
static int dl_wait(struct gm_gradsync *g, bool sync_only)
{
    int err;

    dl_settle(g, sync_only);
    err = g->dl_err;
    g->dl_err = 0;
    if (err == GM_ERR_MISMATCH)
        gm_err("event=replicas_differ step=%ld: parameters are not bitwise identical", g->dl_step);
    return err;
}

/* What DiLoCo's syncs cost the trainer: overlapped, the time blocked at the lag step waiting
 * for a sync still running (0 when the lag steps hid it); blocking, the whole sync. */
static void log_waits(const struct gm_gradsync *g)
{
    if (g->s.kind != GM_GRADSYNC_KIND_DILOCO)
        return;
    gm_info("event=diloco-waits rank=%d overlap=%d syncs=%llu wait_ms=%.1f mean_ms=%.2f "
            "max_ms=%.1f",
            g->rank, g->dl_lag > 0, (unsigned long long)g->dl_waits, (double)g->dl_wait_ns * 1e-6,
            g->dl_waits > 0 ? (double)g->dl_wait_ns * 1e-6 / (double)g->dl_waits : 0.0,
            (double)g->dl_wait_max_ns * 1e-6);
}

/* The round about to be synced: this rank's outer weight, world x its samples / everyone's
 * (exactly 1 with equal shares, so equal runs keep their bits), and a new round. */
static void round_weight(struct gm_gradsync *g)
{
    float w = 1.0f;

    if (g->round_g > 0 && (uint64_t)g->world * g->round_n != g->round_g)
        w = (float)((double)g->world * (double)g->round_n / (double)g->round_g);
    gm_diloco_set_weight(g->dl, w);
    g->round_n = g->round_g = 0;
}

void gm_gradsync_note_share(struct gm_gradsync *g, int n, int global_batch)
{
    g->step_n = n;
    g->step_g = global_batch;
}

const float *gm_gradsync_outer_params(const struct gm_gradsync *g, size_t *n)
{
    const float *anchor, *mom;

    *n = 0;
    if (g == NULL || g->s.kind != GM_GRADSYNC_KIND_DILOCO || g->dl == NULL)
        return NULL;
    *n = gm_diloco_state(g->dl, &anchor, &mom);
    return anchor;
}

bool gm_gradsync_local_grads(const struct gm_gradsync *g)
{
    return g != NULL && g->s.kind == GM_GRADSYNC_KIND_DILOCO;
}

/* DiLoCo with [comm] overlap (see train/compress/diloco.h, "Overlapped rounds"): at a
 * boundary, keep the round's delta and hand its sync and a hash check of the anchor (the
 * outer parameters: identical on every rank) to the executor; dl_lag steps later wait for
 * them (normally long done: they had dl_lag steps of compute to hide behind) and apply the
 * update.  The run's last step applies a pending update and ends on the anchor, checked as
 * always. */
static int after_step_overlap(struct gm_gradsync *g, struct gm_model *m, long step, bool last)
{
    float *params = gm_model_params(m);
    uint64_t pos = ((uint64_t)step + 1) % g->dl_h;
    int err;

    if (pos == g->dl_lag && (g->dl_inflight || gm_diloco_pending(g->dl) != NULL)) {
        if ((err = dl_wait(g, true)) < 0)
            return err;
        if ((err = gm_diloco_overlap_apply(g->dl, params)) < 0)
            return err;
    }
    if (pos == 0) {
        if (g->dl_hash_inflight && (err = dl_wait(g, false)) < 0)
            return err; /* the last round's hash check, long done: dl_step is still its step */
        round_weight(g);
        if ((err = gm_diloco_overlap_boundary(g->dl, params)) < 0)
            return err;
        g->dl_step = step;
        g->dl_inflight = true;
        g->dl_submit_ns = gm_time_mono_ns();
        dl_submit(g, start_diloco_late, true);
        dl_submit(g, start_hash_anchor, false);
    }
    if (!last)
        return 0;
    if ((err = dl_wait(g, false)) < 0)
        return err;
    log_waits(g);
    return gm_diloco_overlap_flush(g->dl, params); /* mid-round: the local steps are dropped */
}

long gm_gradsync_eval_defer(const struct gm_gradsync *g, long steps_done, long total_steps)
{
    uint64_t pos;

    if (g == NULL || g->s.kind != GM_GRADSYNC_KIND_DILOCO || g->dl_lag == 0 || g->dl == NULL ||
        steps_done >= total_steps || steps_done < 0)
        return 0;
    if (!g->dl_inflight && gm_diloco_pending(g->dl) == NULL)
        return 0;
    pos = (uint64_t)steps_done % g->dl_h; /* after_step_overlap's, of the step just taken */
    if (pos >= g->dl_lag)
        return 0;
    return GM_MIN((long)(g->dl_lag - pos), total_steps - steps_done);
}

uint32_t gm_gradsync_diloco_lag(uint32_t h)
{
    return h >= 2 ? (h + 3) / 4 : 0; /* a quarter of the round rounded up: 1 to h - 1 */
}

void gm_gradsync_log_waits(const struct gm_gradsync *g)
{
    if (g != NULL)
        log_waits(g);
}

int gm_gradsync_flush(struct gm_gradsync *g, struct gm_model *m)
{
    int err;

    if (g == NULL || g->s.kind != GM_GRADSYNC_KIND_DILOCO || g->dl_lag == 0 || g->dl == NULL)
        return 0;
    if ((err = dl_wait(g, false)) < 0)
        return err;
    return gm_diloco_overlap_flush(g->dl, gm_model_params(m));
}

int gm_gradsync_after_step(struct gm_gradsync *g, struct gm_model *m, long step, long total_steps)
{
    bool last = step + 1 == total_steps;
    int err;

    if (g->s.kind == GM_GRADSYNC_KIND_DILOCO && g->dl_lag > 0) {
        if ((err = after_step_overlap(g, m, step, last)) < 0 || !last)
            return err;
    } else if (g->s.kind == GM_GRADSYNC_KIND_DILOCO) {
        if (gm_diloco_due(g->dl, (uint64_t)step)) {
            uint64_t t0 = gm_time_mono_ns(), dt;
            round_weight(g);
            if ((err = run(g, start_diloco, m, step, true)) < 0)
                return err;
            dt = gm_time_mono_ns() - t0;
            g->dl_wait_ns += dt;
            g->dl_wait_max_ns = GM_MAX(g->dl_wait_max_ns, dt);
            g->dl_waits++;
            /* blocking: the trainer waits the whole sync; its cost starts once every rank's
             * data is on its way */
            uint64_t in = g->ex.peers_in != NULL ? g->ex.peers_in(g->ex.ctx) : 0;
            note_sync(g, in > t0 && in < t0 + dt ? t0 + dt - in : dt);
            if (last)
                log_waits(g);
        } else if (last) { /* mid-round: end on the outer parameters, like every rank */
            log_waits(g);
            if ((err = gm_diloco_restore(g->dl, gm_model_params(m))) < 0)
                return err;
        } else {
            return 0;
        }
    } else if ((step + 1) % GM_GRADSYNC_HASH_EVERY != 0 && !last) {
        return 0;
    }
    err = run(g, start_hashcheck, m, step, false);
    if (err == 0)
        g->hash_checks++;
    if (err == GM_ERR_MISMATCH)
        gm_err("event=replicas_differ step=%ld: parameters are not bitwise identical", step);
    return err;
}

static size_t flat(struct gm_st_tensor *t, const char *name, const float *data, size_t n)
{
    t->name = name;
    t->data = data;
    t->ndim = 1;
    t->shape[0] = (int64_t)n;
    return 1;
}

size_t gm_gradsync_ckpt_state(struct gm_gradsync *g, struct gm_st_tensor *t, size_t cap,
                              const char **codec)
{
    size_t k = 0;

    *codec = gm_job_codec_name(g->s.id);
    if (g->psgd != NULL && cap >= 2) {
        size_t nf = gm_psgd_state_floats(g->psgd);
        if (g->ckpt_factors == NULL)
            g->ckpt_factors = malloc((nf + 1) * sizeof(float));
        if (g->ckpt_factors != NULL) {
            gm_psgd_state_get(g->psgd, g->ckpt_factors);
            k += flat(&t[k], GM_GRADSYNC_PSGD_ERROR, gm_psgd_error(g->psgd),
                      gm_psgd_nelems(g->psgd));
            k += flat(&t[k], GM_GRADSYNC_PSGD_FACTORS, g->ckpt_factors, nf);
        }
    }
    if (g->dl != NULL && cap >= k + 2) {
        const float *anchor, *mom, *late;
        size_t n;
        /* overlapped: the round's sync completes first (its error: next wait) */
        dl_settle(g, false);
        n = gm_diloco_state(g->dl, &anchor, &mom);
        k += flat(&t[k], GM_CKPT_CODEC_PREFIX "diloco.anchor", anchor, n);
        k += flat(&t[k], GM_CKPT_CODEC_PREFIX "diloco.momentum", mom, n);
        if ((late = gm_diloco_pending(g->dl)) != NULL && cap >= k + 1)
            k += flat(&t[k], GM_GRADSYNC_DILOCO_PENDING, late, n);
        if (late != NULL && gm_diloco_round_start(g->dl) != NULL && cap >= k + 1)
            k += flat(&t[k], GM_GRADSYNC_DILOCO_START, gm_diloco_round_start(g->dl), n);
    }
    return k;
}

const float *gm_gradsync_psgd_error(const struct gm_gradsync *g, size_t *n)
{
    *n = g->psgd != NULL ? gm_psgd_nelems(g->psgd) : 0;
    return g->psgd != NULL ? gm_psgd_error(g->psgd) : NULL;
}

void gm_gradsync_psgd_error_name(int rank, char *buf, size_t cap)
{
    if (rank == 0)
        snprintf(buf, cap, "%s", GM_GRADSYNC_PSGD_ERROR);
    else
        snprintf(buf, cap, "%s.rank%d", GM_GRADSYNC_PSGD_ERROR, rank);
}

/* Copies tensor name of f, if there, into *out (n floats).  0 (also when absent),
 * GM_ERR_FORMAT, -ENOMEM. */
static int take(const struct gm_st_file *f, const char *name, const char *origin, float **out,
                size_t *n)
{
    const struct gm_st_entry *e = gm_safetensors_find(f, name);

    drop_pending(out, n);
    if (e == NULL)
        return 0;
    if (e->dtype != GM_ST_DTYPE_F32 || e->numel < 0) {
        gm_err("%s: codec state %s is not F32", origin, name);
        return GM_ERR_FORMAT;
    }
    *out = malloc(((size_t)e->numel + 1) * sizeof(float));
    if (*out == NULL)
        return -ENOMEM;
    if (gm_safetensors_to_f32(e, *out, (size_t)e->numel) != 0) {
        gm_err("%s: codec state %s cannot be read", origin, name);
        drop_pending(out, n);
        return GM_ERR_FORMAT;
    }
    *n = (size_t)e->numel;
    return 0;
}

int gm_gradsync_ckpt_restore(struct gm_gradsync *g, const struct gm_st_file *f, const char *codec,
                             const char *origin)
{
    char ename[96];
    int err = 0;

    if (codec == NULL || codec[0] == '\0' || strcmp(codec, gm_job_codec_name(g->s.id)) != 0) {
        if (g->rank == 0 && g->s.kind != GM_GRADSYNC_KIND_DENSE)
            gm_info("event=codec-state-none path=%s held=%s codec=%s: the codec's state starts "
                    "fresh",
                    origin, codec != NULL && codec[0] ? codec : "none", gm_job_codec_name(g->s.id));
        return 0;
    }
    gm_gradsync_psgd_error_name(g->rank, ename, sizeof(ename));
    if (g->s.kind == GM_GRADSYNC_KIND_POWERSGD) {
        err = take(f, GM_GRADSYNC_PSGD_FACTORS, origin, &g->pend_factors, &g->npend_factors);
        if (err == 0)
            err = take(f, ename, origin, &g->pend_error, &g->npend_error);
    } else if (g->s.kind == GM_GRADSYNC_KIND_DILOCO) {
        err = take(f, GM_CKPT_CODEC_PREFIX "diloco.anchor", origin, &g->pend_anchor,
                   &g->npend_anchor);
        if (err == 0)
            err = take(f, GM_CKPT_CODEC_PREFIX "diloco.momentum", origin, &g->pend_momentum,
                       &g->npend_momentum);
        if (err == 0)
            err = take(f, GM_GRADSYNC_DILOCO_PENDING, origin, &g->pend_delta, &g->npend_delta);
        if (err == 0)
            err = take(f, GM_GRADSYNC_DILOCO_START, origin, &g->pend_start, &g->npend_start);
    }
    if (err == 0 && g->psgd != NULL)
        apply_pending_psgd(g);
    if (err == 0 && g->dl != NULL)
        apply_pending_diloco(g);
    return err;
}

/* --- codec = auto ---------------------------------------------------------------------- */

#define AB_DECAY 0.9           /* weight kept by the older samples at each new one */
#define AB_PRIOR_W 0.02        /* each of the prior's two points: a fiftieth of a sample */
#define AB_PRIOR_X (256 << 10) /* the prior's second point: 256 KiB */

void gm_gradsync_ab_init(struct gm_gradsync_ab *f, double alpha_s, double bytes_per_s)
{
    memset(f, 0, sizeof(*f));
    gm_gradsync_ab_prior(f, alpha_s, bytes_per_s);
}

void gm_gradsync_ab_prior(struct gm_gradsync_ab *f, double alpha_s, double bytes_per_s)
{
    f->a0 = alpha_s >= 0 && isfinite(alpha_s) ? alpha_s : 0;
    f->b0 = bytes_per_s > 0 && isfinite(bytes_per_s) ? 1.0 / bytes_per_s : 1e-9;
}

void gm_gradsync_ab_add(struct gm_gradsync_ab *f, double bytes, double seconds)
{
    if (!(bytes >= 0) || !(seconds >= 0) || !isfinite(bytes) || !isfinite(seconds))
        return;
    f->w = f->w * AB_DECAY + 1;
    f->sx = f->sx * AB_DECAY + bytes;
    f->sy = f->sy * AB_DECAY + seconds;
    f->sxx = f->sxx * AB_DECAY + bytes * bytes;
    f->sxy = f->sxy * AB_DECAY + bytes * seconds;
    f->n++;
}

/* The samples' sizes spread by less than a tenth of their mean (or there are none). */
static bool one_size(const struct gm_gradsync_ab *f)
{
    double mean, var;

    if (!(f->w > 0))
        return true;
    mean = f->sx / f->w;
    var = f->sxx / f->w - mean * mean;
    return !(var > 0.01 * mean * mean);
}

void gm_gradsync_ab_link(const struct gm_gradsync_ab *f, struct gm_coll_link *out)
{
    /* the samples plus the prior's two points, (0, a0) and (X, a0 + X b0), never forgotten */
    const double x = AB_PRIOR_X, pw = AB_PRIOR_W;
    double w = f->w + 2 * pw, sx = f->sx + pw * x, sxx = f->sxx + pw * x * x;
    double sy = f->sy + pw * (2 * f->a0 + x * f->b0);
    double sxy = f->sxy + pw * x * (f->a0 + x * f->b0);
    double det = w * sxx - sx * sx, beta, alpha;
    bool floored = false;

    beta = det > 0 ? (w * sxy - sx * sy) / det : f->b0;
    alpha = (sy - beta * sx) / w;
    if (!(alpha >= f->a0) && sxx > 0 && one_size(f)) {
        floored = true;
        /* samples of one message size (a compressing codec, DiLoCo) cannot tell latency from
         * bandwidth, and the free fit may read 0 ms on a 50 ms tunnel: then no op is taken
         * to be faster than the link's measured one-way latency; alpha is fixed there and
         * beta fitted alone */
        alpha = f->a0;
        beta = (sxy - alpha * sx) / sxx;
    }
    if (!(beta > 1e-12)) {
        beta = 1e-12; /* 1 TB/s: a fit that says "free" is read as "very fast" */
        if (!floored) /* the intercept of the clamped slope, not of the free fit's negative
                       * one, which lies above every sample */
            alpha = (sy - beta * sx) / w;
    }
    if (!(alpha >= 0))
        alpha = 0;
    out->alpha_s = alpha;
    out->bytes_per_s = 1.0 / beta;
}

bool gm_gradsync_islands_split(const int *groups, int world)
{
    int n = 0;

    if (groups == NULL)
        return false;
    for (int r = 0; r < world; r++)
        n += groups[r] == r; /* leaders: the lowest rank of their island */
    return n > 1 && n < world;
}

bool gm_gradsync_groups_hier(const int *groups, int world)
{
    bool one = groups != NULL && world >= 3;

    for (int r = 1; one && r < world; r++)
        one = groups[r] == groups[0];
    return gm_gradsync_islands_split(groups, world) ||
           (one && groups[0] >= 0 && groups[0] < world); /* a star's hub */
}

static double rtt_at(const double *rtt, int world, int a, int b)
{
    return rtt[a * world + b] > 0 ? rtt[a * world + b] : rtt[b * world + a];
}

int gm_gradsync_star_hub(const double *rtt_ms, int world, double tol)
{
    int hub = -1;
    double best = 0;

    if (rtt_ms == NULL || world < 3 || tol < 0 || tol >= 1)
        return -1;
    if (tol == 0)
        tol = GM_GRADSYNC_STAR_TOL;
    for (int a = 0; a < world; a++)
        for (int b = 0; b < world; b++)
            if (a != b && !(rtt_at(rtt_ms, world, a, b) > 0))
                return -1; /* a pair nobody measured: cannot tell */
    for (int h = 0; h < world; h++) {
        bool star = true;
        double sum = 0;
        for (int a = 0; a < world && star; a++) {
            if (a == h)
                continue;
            sum += rtt_at(rtt_ms, world, a, h);
            for (int b = a + 1; b < world && star; b++)
                if (b != h &&
                    rtt_at(rtt_ms, world, a, b) <
                        (1 - tol) * (rtt_at(rtt_ms, world, a, h) + rtt_at(rtt_ms, world, h, b)))
                    star = false;
        }
        if (star && (hub < 0 || sum < best)) {
            hub = h;
            best = sum;
        }
    }
    return hub;
}

void gm_gradsync_islands(const bool *lan, int world, int *groups)
{
    for (int r = 0; r < world; r++)
        groups[r] = r;
    /* connected components over LAN pairs; each rank labelled with its component's lowest
     * rank (union by smaller label, repeated until nothing changes: world is small) */
    for (bool changed = true; changed;) {
        changed = false;
        for (int a = 0; a < world; a++)
            for (int b = 0; b < world; b++)
                if (a != b && (lan[a * world + b] || lan[b * world + a]) && groups[b] > groups[a]) {
                    groups[b] = groups[a];
                    changed = true;
                }
    }
}

/* auto's candidates: every codec of GM_JOB_CODECS but AUTO, in the list's order */
_Static_assert(GM_GRADSYNC_AUTO_NCAND == GM_JOB_CODEC_COUNT - 1, "auto tries every codec");

void gm_gradsync_diloco_plan(const struct gm_gradsync_strategy *s, long total_steps,
                             struct gm_gradsync_diloco_run *out)
{
    uint32_t h = s->local_steps > 0 ? s->local_steps : 1;
    size_t len = 0;

    memset(out, 0, sizeof(*out));
    out->outer_lr = s->outer_lr;
    out->outer_momentum = s->outer_momentum;
    if (s->cap_h && total_steps / GM_GRADSYNC_AUTO_MIN_ROUNDS < (long)h) {
        uint32_t cut = total_steps >= GM_GRADSYNC_AUTO_MIN_ROUNDS
                           ? (uint32_t)(total_steps / GM_GRADSYNC_AUTO_MIN_ROUNDS)
                           : 1;
        if (total_steps > 0 && cut < h) {
            len += (size_t)snprintf(out->why, sizeof(out->why),
                                    "H %u -> %u: a run of %ld steps syncs at least %d times", h,
                                    cut, total_steps, GM_GRADSYNC_AUTO_MIN_ROUNDS);
            h = cut;
        }
    }
    out->h = h;
    out->rounds = total_steps > 0 ? total_steps / h : 0;
    out->lag = s->overlap ? gm_gradsync_diloco_lag(h) : 0;
    if (s->overlap && s->cap_h && total_steps >= GM_GRADSYNC_AUTO_MIN_ROUNDS &&
        (long)h >= total_steps / GM_GRADSYNC_AUTO_MIN_ROUNDS && h >= 2) {
        out->lag = (h + 1) / 2; /* H at the run's cap: a longer lag instead (gradsync.h) */
        if (len < sizeof(out->why))
            len += (size_t)snprintf(out->why + len, sizeof(out->why) - len,
                                    "%slag %u, half the round: H is at the run's cap",
                                    len > 0 ? "; " : "", out->lag);
    }
    if (s->cap_h && out->rounds > 0 && out->rounds < GM_GRADSYNC_AUTO_NESTEROV_ROUNDS &&
        (s->outer_lr != 1.0 || s->outer_momentum != 0)) {
        out->outer_lr = 1.0; /* few outer steps: Nesterov's overshoot is not averaged out */
        out->outer_momentum = 0;
        if (len < sizeof(out->why))
            snprintf(out->why + len, sizeof(out->why) - len,
                     "%souter step plain averaging: %ld rounds < %d", len > 0 ? "; " : "",
                     out->rounds, GM_GRADSYNC_AUTO_NESTEROV_ROUNDS);
    }
}

uint32_t gm_gradsync_diloco_h(const struct gm_gradsync_strategy *s, long total_steps)
{
    struct gm_gradsync_diloco_run r;

    gm_gradsync_diloco_plan(s, total_steps, &r);
    return r.h;
}

uint32_t gm_gradsync_run_lag(const struct gm_gradsync_strategy *s, long total_steps)
{
    struct gm_gradsync_strategy c = *s;
    struct gm_gradsync_diloco_run r;

    c.cap_h = true;
    gm_gradsync_diloco_plan(&c, total_steps, &r);
    return r.lag;
}

long gm_gradsync_switch_step(const struct gm_gradsync *g, long step)
{
    if (g == NULL || g->s.kind != GM_GRADSYNC_KIND_DILOCO || g->dl == NULL || g->dl_h < 2)
        return step;
    /* the sync runs after step t when (t + 1) % H == 0 (gm_diloco_due): boundaries are the
     * multiples of H */
    return (step + (long)g->dl_h - 1) / (long)g->dl_h * (long)g->dl_h;
}

int gm_gradsync_auto_index(const struct gm_gradsync_strategy *s)
{
    switch (s->kind) {
    case GM_GRADSYNC_KIND_POWERSGD:
        return 2;
    case GM_GRADSYNC_KIND_DILOCO:
        return s->codec == GM_CODEC_Q8 ? 4 : 3;
    default:
        return s->codec == GM_CODEC_FP32 ? 0 : 1;
    }
}

void gm_gradsync_ab_hop(const struct gm_coll_link *fit, int world, struct gm_coll_link *hop)
{
    hop->alpha_s = world > 1 ? fit->alpha_s / (2.0 * (world - 1)) : fit->alpha_s;
    hop->bytes_per_s = fit->bytes_per_s;
}

void gm_gradsync_switch_quiet(struct gm_gradsync_switch *sw, long step)
{
    sw->target = 0;
    sw->streak = 0;
    sw->quiet_until = step + GM_GRADSYNC_SWITCH_DWELL;
}

/* DiLoCo runs cur and auto now sizes it at o->pick's H: whether the change is worth a switch
 * (the header comment, "Switching").  A larger H when cur's leaves the trainer waiting well
 * over budget: overlapped, when cur's lag steps cover less than 1/HYST of a sync (what the
 * trainer then waits at every lag step); blocking, when cur's share of a sync per step is
 * over HYST x the budget.  A smaller H (more syncs: closer to synchronous SGD) when the pick's
 * is at most cur's / GM_GRADSYNC_RESIZE_SHRINK and fits. */
static bool diloco_resize(const struct gm_gradsync_auto_out *o,
                          const struct gm_gradsync_strategy *cur, double compute_s, double budget,
                          long total_steps)
{
    const double hc = cur->local_steps, hp = o->pick.local_steps;

    if (cur->local_steps < 1 || cur->overlap != o->pick.overlap || !(o->sync_s > 0))
        return false;
    if (hp > hc && cur->overlap)
        return gm_gradsync_run_lag(cur, total_steps) * compute_s * GM_GRADSYNC_SWITCH_HYST <
               o->sync_s;
    if (hp > hc)
        return o->sync_s / hc > GM_GRADSYNC_SWITCH_HYST * budget;
    return hp * GM_GRADSYNC_RESIZE_SHRINK <= hc && o->cand[gm_gradsync_auto_index(cur)].fits;
}

/* DiLoCo runs cur and auto now picks the other width of deltas (the header comment,
 * "Switching").  To 8 bits: when the 16-bit sync leaves a wait well over budget (as a larger
 * H is judged in diloco_resize: cur's lag covering under 1/HYST of the 16-bit sync,
 * blocking: a sync per step over HYST x the budget; or 16-bit's best H over HYST x the
 * budget).  Back to 16 bits: when its sync would be hidden by the H cap's lag with HYST to
 * spare (blocking: its share at the cap under budget / HYST), so that a sync that hovers at
 * the lag does not flap between the widths; auto's smallest H that hides it then runs. */
static bool diloco_width(const struct gm_gradsync_auto_out *o,
                         const struct gm_gradsync_strategy *cur, double compute_s, double budget,
                         long total_steps)
{
    const struct gm_gradsync_auto_cand *c16 = &o->cand[3];
    const double hyst = GM_GRADSYNC_SWITCH_HYST;
    struct gm_gradsync_strategy cap = c16->s;

    if (cur->local_steps < 1 || !(c16->sync_s > 0))
        return false;
    if (o->pick.codec == GM_CODEC_Q8) {
        if (c16->comm_s > hyst * budget)
            return true;
        return cur->overlap ? gm_gradsync_run_lag(cur, total_steps) * compute_s * hyst < c16->sync_s
                            : c16->sync_s / cur->local_steps > hyst * budget;
    }
    if (!c16->fits)
        return false;
    cap.local_steps = GM_GRADSYNC_AUTO_MAX_H; /* auto's H cap, as the run would cut it */
    return c16->s.overlap
               ? gm_gradsync_run_lag(&cap, total_steps) * compute_s >= hyst * c16->sync_s
               : c16->sync_s / GM_GRADSYNC_AUTO_MAX_H < budget / hyst;
}

int gm_gradsync_switch_decide(struct gm_gradsync_switch *sw, const struct gm_gradsync_auto_out *o,
                              const struct gm_gradsync_strategy *cur, double compute_s,
                              double comm_frac, long step)
{
    const double budget = (comm_frac > 0 ? comm_frac : GM_GRADSYNC_AUTO_COMM_FRAC) * compute_s;
    const int ci = gm_gradsync_auto_index(cur), pi = gm_gradsync_auto_index(&o->pick);
    int want = -1;

    if (step < sw->quiet_until) {
        sw->target = sw->streak = 0;
        return -1;
    }
    if (pi != ci && cur->kind == GM_GRADSYNC_KIND_DILOCO && o->pick.kind == GM_GRADSYNC_KIND_DILOCO)
        want = diloco_width(o, cur, compute_s, budget, sw->total_steps) ? pi
                                                                         : -1; /* 16 <-> 8 bits */
    else if (pi > ci && o->cand[ci].comm_s > (cur->kind == GM_GRADSYNC_KIND_DENSE &&
                                                      o->pick.kind == GM_GRADSYNC_KIND_DENSE
                                                  ? GM_GRADSYNC_SWITCH_HYST_DENSE
                                                  : GM_GRADSYNC_SWITCH_HYST) *
                                                 budget)
        want = pi; /* the running codec is (well) over budget: a cheaper, less faithful one */
    else if (pi < ci && o->cand[pi].comm_s < budget / GM_GRADSYNC_SWITCH_HYST)
        want = pi; /* a more faithful one is well under budget */
    else if (pi == ci && cur->kind == GM_GRADSYNC_KIND_DILOCO &&
             diloco_resize(o, cur, compute_s, budget, sw->total_steps))
        want = pi; /* DiLoCo again, with H re-sized to the sync it now takes */
    if (want < 0) {
        sw->target = sw->streak = 0;
        return -1;
    }
    if (sw->target == want + 1) {
        sw->streak++;
    } else {
        sw->target = want + 1;
        sw->streak = 1;
    }
    if (sw->streak < GM_GRADSYNC_SWITCH_CONFIRM)
        return -1;
    sw->target = sw->streak = 0;
    return want;
}

/* Whether a candidate of wire codec `codec` runs HIER on these groups: where
 * gm_gradsync_groups_hier says so; 8-bit deltas only over islands that split the world
 * (around a star's hub they run DIRECT, as gm_diloco_sync_start does: fp32 over the spokes
 * would be four times their bytes). */
static bool runs_hier(enum gm_codec codec, const int *groups, int world)
{
    return codec == GM_CODEC_Q8 ? gm_gradsync_islands_split(groups, world)
                                : gm_gradsync_groups_hier(groups, world);
}

/* The links' estimate of one DiLoCo sync with the wire codec of job codec id, run as auto's
 * candidates run (HIER over splitting islands, runs_hier). */
static int diloco_sync_est(const struct gm_gradsync_auto_in *in, enum gm_job_codec id, double *s)
{
    struct gm_gradsync_strategy st;
    struct gm_gradsync_cost cost;
    int err;

    if ((err = gm_gradsync_strategy_of(id, in->job, &st)) < 0)
        return err;
    if (runs_hier(st.codec, in->groups, in->world))
        st.algo = GM_COLL_HIER;
    st.local_steps = 1;
    if ((err = gm_gradsync_estimate_groups(&st, in->m, in->world, in->links, in->groups, &cost)) <
        0)
        return err;
    *s = cost.seconds;
    return 0;
}

double gm_gradsync_cpu_taken(double loop_cpu_s, double trainer_cpu_s, double trainer_delay_s)
{
    double taken;

    if (!(loop_cpu_s > 0) || !(trainer_cpu_s > 0) || !(trainer_delay_s > 0) ||
        !isfinite(loop_cpu_s) || !isfinite(trainer_cpu_s) || !isfinite(trainer_delay_s))
        return 0;
    taken = loop_cpu_s * (trainer_cpu_s + trainer_delay_s) / (trainer_cpu_s + loop_cpu_s);
    return taken < trainer_delay_s ? taken : trainer_delay_s;
}

int gm_gradsync_auto_choose(const struct gm_gradsync_auto_in *in, struct gm_gradsync_auto_out *out)
{
    double frac, budget, est16 = 0, est8 = 0, measured_est, meas_per_byte = 0, meas_own = 0;
    int meas_idx = -1;
    uint32_t max_h;
    int best = -1, cheapest = 0, err;

    memset(out, 0, sizeof(*out));
    if (in == NULL || in->m == NULL || in->world < 2 || in->links == NULL || !(in->compute_s > 0) ||
        !isfinite(in->compute_s) || in->comm_frac < 0)
        return -EINVAL;
    frac = in->comm_frac > 0 ? in->comm_frac : GM_GRADSYNC_AUTO_COMM_FRAC;
    max_h = in->max_h > 0 ? in->max_h : GM_GRADSYNC_AUTO_MAX_H;
    if (max_h < GM_GRADSYNC_AUTO_MIN_H)
        max_h = GM_GRADSYNC_AUTO_MIN_H;
    budget = frac * in->compute_s;
    if ((err = diloco_sync_est(in, GM_JOB_CODEC_DILOCO, &est16)) < 0 ||
        (err = diloco_sync_est(in, GM_JOB_CODEC_DILOCO8, &est8)) < 0)
        return err;
    measured_est = in->sync_codec == GM_CODEC_Q8 ? est8 : est16;
    if (in->meas_s > 0 && isfinite(in->meas_s) && in->meas_of != NULL &&
        in->meas_of->kind != GM_GRADSYNC_KIND_DENSE) {
        /* PowerSGD's or DiLoCo's measured cost is its own (compression on the trainer, a
         * baseline of the loop's other work that its few bytes would multiply): it prices
         * that candidate alone */
        meas_idx = gm_gradsync_auto_index(in->meas_of);
        meas_own = in->meas_s;
    } else if (in->meas_s > 0 && isfinite(in->meas_s) && in->meas_of != NULL) {
        /* the measured cost per byte of what ran: TLS, summing and copies go by the bytes */
        struct gm_gradsync_strategy mo = *in->meas_of;
        struct gm_gradsync_cost mc;
        if (runs_hier(mo.codec, in->groups, in->world))
            mo.algo = GM_COLL_HIER;
        if ((err = gm_gradsync_estimate_groups(&mo, in->m, in->world, in->links, in->groups, &mc)) <
            0)
            return err;
        if (mc.step_bytes > 0)
            meas_per_byte = in->meas_s / (double)mc.step_bytes;
    }
    for (int i = 0; i < GM_GRADSYNC_AUTO_NCAND; i++) {
        struct gm_gradsync_auto_cand *c = &out->cand[i];
        struct gm_gradsync_cost cost;
        double sync_s = 0;

        if ((err = gm_gradsync_strategy_of((enum gm_job_codec)(GM_JOB_CODEC_AUTO + 1 + i), in->job,
                                           &c->s)) < 0)
            return err;
        if (runs_hier(c->s.codec, in->groups, in->world))
            c->s.algo = GM_COLL_HIER;
        if (c->s.kind == GM_GRADSYNC_KIND_DILOCO) {
            double need, est = c->s.codec == GM_CODEC_Q8 ? est8 : est16;
            /* measured while DiLoCo runs: what a sync really takes on these links, with the
             * TCP windows, the TLS records and the capped host's own work that the
             * alpha-beta links leave out; for the other width of deltas than the one that
             * ran, that time scaled by the links' ratio of the two */
            sync_s = in->sync_s > 0 && isfinite(in->sync_s) && measured_est > 0
                         ? in->sync_s * (est / measured_est)
                         : est;
            if ((c->s.codec == GM_CODEC_Q8) != (in->sync_codec == GM_CODEC_Q8) &&
                in->sync_s > 0 && in->other_sync_s > sync_s && isfinite(in->other_sync_s))
                sync_s = in->other_sync_s; /* the other width, as it measured when it ran */
            c->sync_s = sync_s;
            /* the smallest H whose per-step share of the sync fits the budget; overlapped,
             * the smallest whose lag steps cover the sync (the budget then absorbs jitter) */
            need = ceil(sync_s / budget * (1 - 1e-9));
            if (c->s.overlap) {
                need = max_h;
                for (uint32_t h = GM_GRADSYNC_AUTO_MIN_H; h < max_h; h++)
                    if (gm_gradsync_diloco_lag(h) * in->compute_s >= sync_s * (1 - 1e-9)) {
                        need = h;
                        break;
                    }
            }
            c->s.local_steps = need < GM_GRADSYNC_AUTO_MIN_H ? GM_GRADSYNC_AUTO_MIN_H
                               : need > max_h                ? max_h
                                                             : (uint32_t)need;
        }
        if ((err = gm_gradsync_estimate_groups(&c->s, in->m, in->world, in->links, in->groups,
                                               &cost)) < 0)
            return err;
        c->comm_s = cost.seconds;
        if (c->s.kind == GM_GRADSYNC_KIND_DILOCO && !c->s.overlap)
            c->comm_s = sync_s / c->s.local_steps; /* as the links say, or as measured */
        if (c->s.kind == GM_GRADSYNC_KIND_DILOCO && c->s.overlap) {
            /* the sync runs during the lag steps after its boundary: what shows per step is
             * the part the lag steps' compute does not cover, over the round */
            double h = c->s.local_steps, lag = gm_gradsync_diloco_lag(c->s.local_steps);
            c->comm_s = sync_s > lag * in->compute_s ? (sync_s - lag * in->compute_s) / h : 0;
        }
        /* the measured part, which no overlap hides: the CPU it takes is the trainer's */
        c->meas_s = meas_idx >= 0 ? (i == meas_idx ? meas_own : 0)
                                  : meas_per_byte * (double)cost.step_bytes;
        c->comm_s += c->meas_s;
        c->step_s = in->compute_s + c->comm_s;
        c->fits = c->comm_s <= budget * (1 + 1e-9);
        if (in->dense_only && c->s.kind != GM_GRADSYNC_KIND_DENSE) {
            c->fits = false;
            continue; /* not a candidate: neither the pick nor the cheapest */
        }
        /* overlapped 16-bit deltas whose sync the lag does not hide even at the H cap: 8-bit
         * deltas (next) halve the bytes; the uncovered wait, though within the budget, is
         * what kept 2 agents at 5 Mbit/s at 1.32x one (docs/BENCHMARKS.md) */
        if (c->s.kind == GM_GRADSYNC_KIND_DILOCO && c->s.overlap && c->s.codec != GM_CODEC_Q8 &&
            gm_gradsync_diloco_lag(c->s.local_steps) * in->compute_s < sync_s * (1 - 1e-9))
            c->fits = false;
        if (c->fits && best < 0)
            best = i;
        if (c->step_s < out->cand[cheapest].step_s)
            cheapest = i;
    }
    out->compute_s = in->compute_s;
    out->too_slow = best < 0;
    if (best < 0)
        best = cheapest;
    out->pick = out->cand[best].s;
    /* the pick's sync, or 16-bit diloco's (candidate 3, gm_gradsync_auto_index) */
    out->sync_s =
        out->pick.kind == GM_GRADSYNC_KIND_DILOCO ? out->cand[best].sync_s : out->cand[3].sync_s;
    out->speedup = in->world * in->compute_s / out->cand[best].step_s;
    if (out->speedup < 1)
        out->too_slow = true;
    {
        char label[48];
        gm_gradsync_describe(&out->pick, label, sizeof(label));
        if (best == 0 || out->cand[best].fits)
            snprintf(out->reason, sizeof(out->reason),
                     "%s: %.2f ms of communication per %.2f ms step of compute (<= %.0f%%)%s",
                     label, out->cand[best].comm_s * 1e3, in->compute_s * 1e3, frac * 100,
                     best > 0 ? "; the codecs before it do not fit" : "");
        else
            snprintf(out->reason, sizeof(out->reason),
                     "%s: nothing keeps communication under %.0f%% of compute; this is the "
                     "fastest step (%.2f ms for %.2f ms of compute)",
                     label, frac * 100, out->cand[best].step_s * 1e3, in->compute_s * 1e3);
        if (meas_per_byte > 0 || meas_own > 0) {
            size_t len = strlen(out->reason);
            snprintf(out->reason + len, sizeof(out->reason) - len,
                     "; of it %.2f ms measured on the ranks (%.2f ms for the running codec)",
                     out->cand[best].meas_s * 1e3, in->meas_s * 1e3);
        }
        if (out->pick.kind == GM_GRADSYNC_KIND_DILOCO && out->pick.overlap &&
            gm_gradsync_diloco_lag(out->pick.local_steps) * in->compute_s <
                out->sync_s * (1 - 1e-9)) {
            /* the H cap, not the sync, sized it: say what the lag leaves uncovered */
            size_t len = strlen(out->reason);
            snprintf(out->reason + len, sizeof(out->reason) - len,
                     "; H at its cap: %u lag steps cover %.0f of a %.0f ms sync",
                     gm_gradsync_diloco_lag(out->pick.local_steps),
                     gm_gradsync_diloco_lag(out->pick.local_steps) * in->compute_s * 1e3,
                     out->sync_s * 1e3);
        }
    }
    return 0;
}

double gm_gradsync_time_compute(struct gm_model *m, size_t per, int n, int reps, double min_s)
{
    float *x = gm_model_input(m);
    int32_t *labels;
    uint64_t rng = 0x9e3779b97f4a7c15u, t0 = 0, min_ns;
    int classes = gm_model_classes(m), err = 0, r;

    if (n < 1 || n > gm_model_max_batch(m) || reps < 1 || per == 0 || !(min_s >= 0))
        return -EINVAL;
    min_ns = (uint64_t)(GM_MIN(min_s, 600.0) * 1e9);
    labels = malloc((size_t)n * sizeof(*labels));
    if (labels == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < per * (size_t)n; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        x[i] = (float)(rng >> 40) / (float)(1u << 24);
    }
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)((unsigned)i % (unsigned)classes);
    for (r = 0; err == 0; r++) { /* run 0 is the warm-up; the clock starts after it */
        if (r == 1)
            t0 = gm_time_mono_ns();
        if (r > reps && (r > 1000 || gm_time_mono_ns() - t0 >= min_ns))
            break;
        if ((err = gm_model_forward(m, n, 1, (uint64_t)r)) < 0)
            break;
        (void)gm_model_loss(m, n, labels, NULL);
        err = gm_model_backward(m, n);
    }
    free(labels);
    if (err < 0)
        return err;
    return (double)(gm_time_mono_ns() - t0) / 1e9 / (r - 1);
}
