/*
 * agent/jobs/rank.c - the trainer thread of one rank and its bridge to the loop
 * (see rank.h).
 *
 * Locking: mu guards the request slot, the newest group's description, the
 * stop flag, the exit flag and the progress snapshot.  The loop thread owns
 * the gm_coll and the xport of the current group and of retired groups that
 * are still winding down (the graveyard: a gm_coll may only be freed when it
 * is idle, and never from inside its own callback, so retired groups are
 * reaped from the async callback).  The trainer thread owns the gradsync
 * strategy state and never touches a libuv handle.
 */
#include "agent/jobs/rank.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "agent/service/metrics.h"
#include "agent/jobs/xport.h"
#include "common/assert.h"
#include "common/byteorder.h"
#include "common/log.h"
#include "common/time.h"
#include "train/comm/collective.h"
#include "train/gradsync.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"
#include "train/tbevents.h"

/* One collective operation asked for by the trainer thread. */
struct req {
    struct req *next;     /* pending / inflight queue (under mu, then the loop's) */
    struct req *sub_next; /* trainer only: the overlap ops awaiting wait */
    gm_gradsync_start_fn start;
    void *arg;
    uint32_t gen; /* the group it belongs to */
    int status;
    bool done;
    bool fit;    /* a sample for the rank's alpha-beta fit (set by the trainer) */
    uint64_t t0; /* loop: when it was started */
};

struct old_group {
    struct old_group *next;
    struct gm_coll *coll; /* owned */
    struct gm_xport *x;   /* owned */
};

struct gm_rank {
    uv_loop_t *loop;
    uv_async_t async; /* trainer -> loop: a request, or the exit; async.data = this */
    const struct gm_rank_ops *ops;
    void *arg;
    pthread_t th;
    bool th_started, exit_reported, freeing;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    struct req *pending, **pending_tail; /* FIFO: asked for, not yet taken by the loop */
    uint32_t group_gen;                  /* newest group handed over */
    int group_rank, group_world;
    bool group_hier; /* the newest group runs GM_COLL_HIER over its islands */
    bool stopping, exited;
    struct gm_rank_progress prog;
    uint64_t bytes_sent_total;  /* collective payload this rank sent, all groups */
    struct gm_metrics *metrics; /* borrowed, may be NULL: where the trainer publishes */
    struct gm_metrics_job mjob; /* the last published (accuracy kept between evaluations) */
    struct gm_tb_writer *tb;    /* owned, trainer thread only (NULL: none): the job's events */
    struct gm_gradsync_ab fit;  /* alpha-beta of this rank's gradient/parameter ops (loop) */
    double fit_s;               /* their seconds, summed */
    struct pending_switch {     /* a codec switch announced by the coordinator */
        bool pending, wait, answered, ok;
        uint32_t gen, seq;
        long step; /* announced; taken at the first step >= it where the codec may be left */
        struct gm_gradsync_strategy to;
    } sw;
    long at_step;                           /* the trainer passed this step's boundary */
    long align_h;                           /* gm_gradsync_switch_step(gs, 1) at that boundary */
    struct gm_gradsync_strategy next_strat; /* the strategy of the next group (set_codec) */
    bool next_strat_set;
    struct ckpt_note { /* the newest checkpoint written, until the loop takes it */
        bool pending;
        long step;
        char sha256[65];
        char path[GM_JOB_PATH_MAX + 64];
    } ckpt;

    /* loop thread only */
    struct req *inflight, **inflight_tail; /* FIFO: started; gm_coll completes in order */
    struct gm_coll *coll;                  /* owned: the current group */
    struct gm_xport *x;                    /* owned */
    uint32_t coll_gen, broken_gen;
    uint64_t coll_bytes_seen; /* the current gm_coll's payload bytes sent, counted so far */
    struct old_group *graveyard;
    uint64_t payload_retired; /* gradient bytes sent by retired groups */

    /* trainer thread only */
    uint64_t bytes_at_step; /* bytes_sent_total at the last step's report */
    size_t nparams;
    struct req *submitted, **submitted_tail; /* overlap: heap reqs, until wait */
    int submit_err;
    uint32_t synced_gen;
    struct gm_gradsync *gs; /* owned */
    int fit_epoch;          /* the epoch last logged */
    bool fit_skip;          /* the next counted op waits for rank 0's evaluation or a resync */
    struct gm_gradsync_strategy strat;
    struct gm_gradsync_exec exec;
    float *state_buf; /* owned: the resync broadcast */
    struct gm_train_comm comm;
    struct gm_train_hooks hooks;
    struct gm_train_opts opts;
    volatile sig_atomic_t stop;
    struct gm_job job; /* owned copy */
    char out[GM_JOB_PATH_MAX];
    char ckpt_dir[GM_JOB_PATH_MAX];
    struct gm_ckpt_ref committed[GM_RANK_COMMITTED_MAX];
    int err;
    struct gm_train_summary sum;
};

/* --- loop thread ----------------------------------------------------------------------- */

static void complete(struct gm_rank *rk, struct req *r, int status)
{
    pthread_mutex_lock(&rk->mu);
    r->status = status;
    r->done = true;
    pthread_cond_broadcast(&rk->cv);
    pthread_mutex_unlock(&rk->mu);
}

static bool stopping(struct gm_rank *rk)
{
    bool s;

    pthread_mutex_lock(&rk->mu);
    s = rk->stopping;
    pthread_mutex_unlock(&rk->mu);
    return s;
}

/* What the trainer hears of an operation's error. */
static int map_err(struct gm_rank *rk, uint32_t gen, int err)
{
    if (err >= 0)
        return err;
    if (stopping(rk))
        return GM_ERR_ABORTED;
    if (err == GM_ERR_MISMATCH || err == GM_ERR_NUMERIC || err == -EINVAL || err == -ENOMEM)
        return err; /* not about the group: the run ends */
    if (gen == rk->coll_gen && rk->broken_gen != gen) {
        rk->broken_gen = gen;
        gm_warn("event=group-failed generation=%u err=\"%s\"", gen & 0xffff, gm_strerror(err));
        if (rk->ops->on_group_failed != NULL)
            rk->ops->on_group_failed(rk, gen, err, rk->arg);
    }
    return GM_ERR_REGROUP;
}

static void op_done(struct gm_coll *c, int status, void *arg)
{
    struct gm_rank *rk = arg;
    struct req *r = rk->inflight;
    uint64_t now = gm_time_mono_ns();

    if (c == rk->coll) { /* the bytes this op sent, for the per-step metrics and the fit */
        struct gm_coll_traffic t;
        gm_coll_traffic_total(c, &t, NULL);
        pthread_mutex_lock(&rk->mu);
        rk->bytes_sent_total += t.payload_bytes - rk->coll_bytes_seen;
        if (r != NULL && r->fit && status == 0 && r->t0 != 0) {
            /* the op's time on the link: from its start (ops run one after another: when it
             * was started or the one before it ended), or from when the peers' data first
             * came if they were late, so that waiting for a slower rank is not priced as
             * link time */
            uint64_t first = rk->x != NULL ? gm_xport_rx_first(rk->x) : 0;
            uint64_t t0 = first > r->t0 && first <= now ? first : r->t0;
            double dt = (double)(now - t0) * 1e-9;
            gm_gradsync_ab_add(&rk->fit, (double)(t.payload_bytes - rk->coll_bytes_seen), dt);
            rk->fit_s += dt;
        }
        pthread_mutex_unlock(&rk->mu);
        rk->coll_bytes_seen = t.payload_bytes;
    }
    if (r != NULL) {
        rk->inflight = r->next;
        if (rk->inflight == NULL)
            rk->inflight_tail = &rk->inflight;
        complete(rk, r, map_err(rk, r->gen, status));
    }
    if (rk->inflight != NULL && c == rk->coll) { /* the next op starts running now */
        rk->inflight->t0 = now;
        if (rk->x != NULL)
            gm_xport_rx_mark(rk->x);
    }
    uv_async_send(&rk->async); /* reap retired groups outside this callback */
}

static void start_req(struct gm_rank *rk, struct req *r)
{
    int err;

    if (stopping(rk)) {
        complete(rk, r, GM_ERR_ABORTED);
        return;
    }
    if (rk->coll == NULL || r->gen != rk->coll_gen || rk->broken_gen == r->gen) {
        complete(rk, r, GM_ERR_REGROUP);
        return;
    }
    r->t0 = 0; /* set when it starts running: now, or when the op before it ends */
    if (rk->inflight == NULL) {
        r->t0 = gm_time_mono_ns();
        gm_xport_rx_mark(rk->x);
    }
    err = r->start(rk->coll, r->arg, op_done, rk);
    if (err < 0) {
        complete(rk, r, map_err(rk, r->gen, err));
        return;
    }
    r->next = NULL;
    *rk->inflight_tail = r;
    rk->inflight_tail = &r->next;
}

static void retire(struct gm_rank *rk)
{
    struct old_group *o;

    if (rk->coll == NULL && rk->x == NULL)
        return;
    if (rk->x != NULL)
        gm_xport_fail_all(rk->x, GM_ERR_ABORTED);
    o = calloc(1, sizeof(*o));
    GM_ASSERT(o != NULL); /* small; out of memory here leaves no sane way on */
    o->coll = rk->coll;
    o->x = rk->x;
    o->next = rk->graveyard;
    rk->graveyard = o;
    rk->coll = NULL;
    rk->x = NULL;
}

static void reap(struct gm_rank *rk)
{
    struct old_group **pp = &rk->graveyard;

    while (*pp != NULL) {
        struct old_group *o = *pp;
        if (o->coll != NULL && gm_coll_busy(o->coll)) {
            pp = &o->next;
            continue;
        }
        if (o->coll != NULL) {
            struct gm_coll_traffic t;
            gm_coll_traffic_total(o->coll, &t, NULL);
            rk->payload_retired += t.payload_bytes;
        }
        gm_coll_free(o->coll);
        gm_xport_close(o->x);
        *pp = o->next;
        free(o);
    }
}

static void handle_closed(uv_handle_t *h)
{
    struct gm_rank *rk = h->data;

    gm_gradsync_free(rk->gs);
    free(rk->state_buf);
    gm_job_free(&rk->job);
    pthread_mutex_destroy(&rk->mu);
    pthread_cond_destroy(&rk->cv);
    free(rk);
}

static void async_cb(uv_async_t *a)
{
    struct gm_rank *rk = a->data;
    struct req *r;
    struct ckpt_note ck;
    bool report;

    pthread_mutex_lock(&rk->mu);
    r = rk->pending;
    rk->pending = NULL;
    rk->pending_tail = &rk->pending;
    report = rk->exited && !rk->exit_reported;
    ck = rk->ckpt;
    rk->ckpt.pending = false;
    pthread_mutex_unlock(&rk->mu);
    while (r != NULL) { /* in order: every rank starts the same ops in the same order */
        struct req *next = r->next;
        start_req(rk, r);
        r = next;
    }
    if (ck.pending && !rk->freeing && rk->ops->on_checkpoint != NULL)
        rk->ops->on_checkpoint(rk, ck.path, ck.sha256, ck.step, rk->arg);
    reap(rk);
    if (rk->freeing) {
        if (rk->graveyard == NULL && !uv_is_closing((uv_handle_t *)a))
            uv_close((uv_handle_t *)a, handle_closed);
        return;
    }
    if (report) {
        rk->exit_reported = true;
        pthread_join(rk->th, NULL);
        rk->th_started = false;
        if (rk->sum.bytes_sent == 0) {
            uint64_t b = rk->payload_retired;
            if (rk->coll != NULL) {
                struct gm_coll_traffic t;
                gm_coll_traffic_total(rk->coll, &t, NULL);
                b += t.payload_bytes;
            }
            rk->sum.bytes_sent = b;
        }
        rk->ops->on_exit(rk, rk->err, &rk->sum, rk->arg);
    }
}

int gm_rank_set_group(struct gm_rank *rk, uint32_t gen, int rank, int world, struct gm_xport *x,
                      const int *islands)
{
    bool hier = gm_gradsync_groups_hier(islands, world);
    struct gm_coll_config cc = {
        .generation = gen, .chunk_bytes = GM_XPORT_CHUNK, .groups = hier ? islands : NULL};

    retire(rk);
    rk->x = x;
    rk->coll = gm_coll_new(gm_xport_transport(x), &cc);
    if (rk->coll == NULL) {
        retire(rk);
        return -ENOMEM;
    }
    rk->coll_gen = gen;
    rk->coll_bytes_seen = 0;
    pthread_mutex_lock(&rk->mu);
    rk->group_gen = gen;
    rk->group_rank = rank;
    rk->group_world = world;
    rk->group_hier = hier;
    pthread_cond_broadcast(&rk->cv);
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
    return 0;
}

struct gm_xport *gm_rank_xport(struct gm_rank *rk)
{
    return rk->x;
}

uint32_t gm_rank_generation(const struct gm_rank *rk)
{
    return rk->coll_gen;
}

void gm_rank_group_broken(struct gm_rank *rk)
{
    if (rk->coll == NULL || rk->broken_gen == rk->coll_gen)
        return;
    rk->broken_gen = rk->coll_gen;
    gm_xport_fail_all(rk->x, GM_ERR_ABORTED); /* the op in flight fails, later ones regroup */
}

void gm_rank_stop(struct gm_rank *rk)
{
    pthread_mutex_lock(&rk->mu);
    rk->stopping = true;
    rk->stop = 1;
    pthread_cond_broadcast(&rk->cv);
    pthread_mutex_unlock(&rk->mu);
    if (rk->x != NULL)
        gm_xport_fail_all(rk->x, GM_ERR_ABORTED);
}

void gm_rank_get_progress(struct gm_rank *rk, struct gm_rank_progress *p)
{
    pthread_mutex_lock(&rk->mu);
    *p = rk->prog;
    pthread_mutex_unlock(&rk->mu);
}

void gm_rank_get_fit(struct gm_rank *rk, struct gm_coll_link *fit, uint64_t *n)
{
    pthread_mutex_lock(&rk->mu);
    gm_gradsync_ab_link(&rk->fit, fit);
    *n = rk->fit.n;
    pthread_mutex_unlock(&rk->mu);
}

void gm_rank_set_fit_prior(struct gm_rank *rk, double alpha_s, double bytes_per_s)
{
    pthread_mutex_lock(&rk->mu);
    gm_gradsync_ab_prior(&rk->fit, alpha_s, bytes_per_s);
    pthread_mutex_unlock(&rk->mu);
}

void gm_rank_set_codec(struct gm_rank *rk, const struct gm_gradsync_strategy *s)
{
    pthread_mutex_lock(&rk->mu);
    rk->next_strat = *s;
    rk->next_strat_set = true;
    pthread_mutex_unlock(&rk->mu);
}

int gm_rank_switch(struct gm_rank *rk, uint32_t gen, uint32_t seq, long step,
                   const struct gm_gradsync_strategy *to, bool wait, long *at_step)
{
    int err = 0;
    long h;

    pthread_mutex_lock(&rk->mu);
    h = rk->align_h > 1 ? rk->align_h : 1;
    *at_step = rk->at_step;
    if (gen != rk->synced_gen || gen != rk->group_gen)
        err = -ESTALE; /* not (or no longer) in that group */
    else if ((step + h - 1) / h * h <= rk->at_step)
        err = -EALREADY; /* the trainer is past the step it would take effect at */
    else
        rk->sw = (struct pending_switch){
            .pending = true, .wait = wait, .gen = gen, .seq = seq, .step = step, .to = *to};
    pthread_mutex_unlock(&rk->mu);
    return err;
}

void gm_rank_switch_answer(struct gm_rank *rk, uint32_t seq, bool ok)
{
    pthread_mutex_lock(&rk->mu);
    if (rk->sw.pending && rk->sw.seq == seq && !rk->sw.answered) {
        rk->sw.answered = true;
        rk->sw.ok = ok;
        pthread_cond_broadcast(&rk->cv);
    }
    pthread_mutex_unlock(&rk->mu);
}

/* --- trainer thread -------------------------------------------------------------------- */

/* Queues r for the loop; 0, or why not (the trainer then does not wait for it). */
static int enqueue(struct gm_rank *rk, struct req *r)
{
    pthread_mutex_lock(&rk->mu);
    if (rk->stopping) {
        pthread_mutex_unlock(&rk->mu);
        return GM_ERR_ABORTED;
    }
    if (rk->group_gen != rk->synced_gen) { /* a newer group exists: leave this one */
        pthread_mutex_unlock(&rk->mu);
        return GM_ERR_REGROUP;
    }
    r->gen = rk->synced_gen;
    r->next = NULL;
    *rk->pending_tail = r;
    rk->pending_tail = &r->next;
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
    return 0;
}

/* Under mu: a stop withdraws the requests the loop has not taken yet. */
static void withdraw_pending(struct gm_rank *rk)
{
    struct req *r;

    while ((r = rk->pending) != NULL) {
        rk->pending = r->next;
        r->status = GM_ERR_ABORTED;
        r->done = true;
    }
    rk->pending_tail = &rk->pending;
}

static void wait_done(struct gm_rank *rk, struct req *r)
{
    pthread_mutex_lock(&rk->mu);
    while (!r->done) {
        if (rk->stopping && rk->pending != NULL)
            withdraw_pending(rk);
        if (!r->done)
            pthread_cond_wait(&rk->cv, &rk->mu);
    }
    pthread_mutex_unlock(&rk->mu);
}

/* gradsync's executor: the op runs on the loop, the trainer waits for it.
 * Ops submitted for overlap come first (they were asked for first). */
static int bridge_run(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct gm_rank *rk = ctx;
    struct req r = {.start = start, .arg = arg, .fit = counted && !rk->fit_skip};
    int err;

    if (counted)
        rk->fit_skip = false;
    if ((err = enqueue(rk, &r)) < 0)
        return err;
    wait_done(rk, &r);
    return r.status;
}

static void bridge_submit(void *ctx, gm_gradsync_start_fn start, void *arg)
{
    struct gm_rank *rk = ctx;
    struct req *r;
    int err;

    if (rk->submit_err < 0)
        return;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rk->submit_err = -ENOMEM;
        return;
    }
    r->start = start;
    r->arg = arg;
    r->fit = !rk->fit_skip; /* gradient buckets: counted */
    rk->fit_skip = false;
    if ((err = enqueue(rk, r)) < 0) {
        rk->submit_err = err;
        free(r);
        return;
    }
    *rk->submitted_tail = r;
    rk->submitted_tail = &r->sub_next;
}

static int bridge_wait(void *ctx)
{
    struct gm_rank *rk = ctx;
    struct req *r;
    int err = rk->submit_err;

    while ((r = rk->submitted) != NULL) {
        wait_done(rk, r);
        if (err == 0 && r->status < 0)
            err = r->status;
        rk->submitted = r->sub_next;
        free(r);
    }
    rk->submitted_tail = &rk->submitted;
    rk->submit_err = 0;
    return err;
}

struct bcast {
    float *buf;
    size_t n;
    uint32_t gen;
};

static int start_bcast(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct bcast *b = arg;

    return gm_coll_broadcast_start(c, b->buf, b->n, 0, b->gen, done, done_arg);
}

/* Integers ride in the float broadcast as 16-bit pieces: every one is exact. */
#define HDR_FLOATS 8

static void put_u64(float *f, uint64_t v)
{
    for (int i = 0; i < 4; i++)
        f[i] = (float)((v >> (16 * i)) & 0xffff);
}

static uint64_t get_u64(const float *f)
{
    uint64_t v = 0;

    for (int i = 0; i < 4; i++)
        v |= (uint64_t)f[i] << (16 * i);
    return v;
}

/* Wait for a group newer than the last one, then take rank 0's state. */
static int hook_resync(void *ctx, struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;
    const size_t np = gm_model_num_params(st->model), no = gm_optim_state_len(st->optim);
    struct bcast b = {.n = np + no + HDR_FLOATS};
    int rank, world, err;

    pthread_mutex_lock(&rk->mu);
    while (!rk->stopping && rk->group_gen <= rk->synced_gen)
        pthread_cond_wait(&rk->cv, &rk->mu);
    if (rk->stopping) {
        pthread_mutex_unlock(&rk->mu);
        return GM_ERR_ABORTED;
    }
    rk->synced_gen = rk->group_gen;
    rank = rk->group_rank;
    world = rk->group_world;
    if (rk->next_strat_set) /* the coordinator's current pick (codec = auto) */
        rk->strat = rk->next_strat;
    rk->strat.algo = rk->group_hier ? GM_COLL_HIER : GM_COLL_RING; /* the gradsync made below */
    rk->sw.pending = false; /* an announced switch belonged to the group before */
    rk->at_step = -1;
    rk->align_h = 1;
    rk->fit_skip = true; /* the first op waits for every rank's resync */
    pthread_mutex_unlock(&rk->mu);

    (void)bridge_wait(rk); /* overlap ops of the failed step are over before gradsync goes */
    gm_gradsync_free(rk->gs);
    rk->gs = NULL;
    if (rk->state_buf == NULL && (rk->state_buf = malloc(b.n * sizeof(float))) == NULL)
        return -ENOMEM;
    b.buf = rk->state_buf;
    b.gen = rk->synced_gen;
    if (rank == 0) {
        memcpy(b.buf, gm_model_params(st->model), np * sizeof(float));
        if (no > 0)
            memcpy(b.buf + np, gm_optim_state(st->optim), no * sizeof(float));
        put_u64(b.buf + np + no, (uint64_t)st->step);
        put_u64(b.buf + np + no + 4, (uint64_t)st->optim->step);
    }
    if (world > 1 && (err = bridge_run(rk, start_bcast, &b, false)) < 0)
        return err;
    if (rank != 0) {
        memcpy(gm_model_params(st->model), b.buf, np * sizeof(float));
        if (no > 0)
            memcpy(gm_optim_state(st->optim), b.buf + np, no * sizeof(float));
        st->step = (long)get_u64(b.buf + np + no);
        st->optim->step = (long)get_u64(b.buf + np + no + 4);
    }
    st->rank = rank;
    st->world = world;
    rk->nparams = np;
    err = gm_gradsync_new(&rk->strat, rank, world, rk->job.seed, &rk->exec, &rk->gs);
    if (err < 0)
        return err;
    pthread_mutex_lock(&rk->mu);
    rk->prog.rank = rank;
    rk->prog.world = world;
    rk->prog.generation = rk->synced_gen;
    rk->prog.step = st->step;
    rk->prog.total_steps = st->total_steps;
    pthread_mutex_unlock(&rk->mu);
    gm_notice("event=group generation=%u rank=%d world=%d step=%ld", rk->synced_gen & 0xffff, rank,
              world, st->step);
    return 0;
}

/* Every rank of the group: parameters and optimizer state become rank 0's (a broadcast). */
static int take_rank0_state(struct gm_rank *rk, struct gm_train_state *st)
{
    const size_t np = gm_model_num_params(st->model), no = gm_optim_state_len(st->optim);
    struct bcast b = {.buf = rk->state_buf, .n = np + no, .gen = (uint32_t)st->step};
    int err;

    if (b.buf == NULL) /* made by the group's resync, np + no + HDR_FLOATS */
        return -EINVAL;
    if (st->rank == 0) {
        memcpy(b.buf, gm_model_params(st->model), np * sizeof(float));
        if (no > 0)
            memcpy(b.buf + np, gm_optim_state(st->optim), no * sizeof(float));
    }
    if ((err = bridge_run(rk, start_bcast, &b, false)) < 0)
        return err;
    if (st->rank != 0) {
        memcpy(gm_model_params(st->model), b.buf, np * sizeof(float));
        if (no > 0)
            memcpy(gm_optim_state(st->optim), b.buf + np, no * sizeof(float));
    }
    return 0;
}

/* At the boundary of step st->step: an announced switch due now takes effect (rank.h). */
static int maybe_switch(struct gm_rank *rk, struct gm_train_state *st)
{
    struct pending_switch sw;
    char from[48], to[48];
    int err;

    pthread_mutex_lock(&rk->mu);
    rk->at_step = st->step; /* from now on only a later step can be accepted */
    rk->align_h = gm_gradsync_switch_step(rk->gs, 1);
    if (!rk->sw.pending || rk->sw.gen != rk->synced_gen || st->step < rk->sw.step ||
        gm_gradsync_switch_step(rk->gs, rk->sw.step) > st->step) {
        pthread_mutex_unlock(&rk->mu);
        return 0;
    }
    while (rk->sw.wait && !rk->sw.answered && !rk->stopping && rk->group_gen == rk->synced_gen)
        pthread_cond_wait(&rk->cv, &rk->mu); /* rank 0: until every member accepted it */
    if (rk->stopping) {                      /* the step's first op says so */
        pthread_mutex_unlock(&rk->mu);
        return 0;
    }
    sw = rk->sw;
    rk->sw.pending = false;
    if (rk->group_gen != rk->synced_gen || (sw.wait && !sw.ok)) {
        /* a member could not take it at this step: the coordinator re-forms the group with
         * the new codec instead; wait for that group */
        pthread_mutex_unlock(&rk->mu);
        gm_warn("event=codec-switch-abandoned generation=%u step=%ld seq=%u",
                rk->synced_gen & 0xffff, st->step, sw.seq);
        return GM_ERR_REGROUP;
    }
    sw.to.algo = rk->group_hier ? GM_COLL_HIER : GM_COLL_RING;
    pthread_mutex_unlock(&rk->mu);

    gm_gradsync_describe(&rk->strat, from, sizeof(from));
    gm_gradsync_describe(&sw.to, to, sizeof(to));
    /* leaving DiLoCo: its inner optimizer ran on each rank's own gradients, so the optimizer
     * states (Adam's moments) differ although the round boundary left the parameters equal;
     * a synchronous codec steps every rank's optimizer on the same gradient, which keeps
     * replicas equal only from equal states.  Every rank takes rank 0's (every rank comes here
     * at the same step: the same collective in the same place). */
    if (rk->strat.kind == GM_GRADSYNC_KIND_DILOCO && sw.to.kind != GM_GRADSYNC_KIND_DILOCO &&
        st->world > 1 && (err = take_rank0_state(rk, st)) < 0)
        return err;
    /* codec state: dropped with the old gradsync (gradsync.h, "Switching"); nothing of it is
     * in flight at a step boundary */
    gm_gradsync_free(rk->gs);
    rk->gs = NULL;
    rk->strat = sw.to;
    if ((err = gm_gradsync_new(&rk->strat, st->rank, st->world, rk->job.seed, &rk->exec, &rk->gs)) <
        0)
        return err;
    gm_notice("event=codec-switch generation=%u rank=%d step=%ld announced_step=%ld seq=%u "
              "from=\"%s\" to=\"%s\"",
              rk->synced_gen & 0xffff, st->rank, st->step, sw.step, sw.seq, from, to);
    return 0;
}

static int hook_backward_begin(void *ctx, struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;
    int err;

    if (rk->job.epochs > 0 && st->total_steps >= rk->job.epochs &&
        st->step % (st->total_steps / rk->job.epochs) == 0)
        rk->fit_skip = true; /* this step's first op waits while rank 0 evaluates */
    if ((err = maybe_switch(rk, st)) < 0)
        return err;
    return gm_gradsync_backward_begin(rk->gs, st->model, st->step);
}

static void hook_grads_ready(void *ctx, size_t first, size_t n)
{
    struct gm_rank *rk = ctx;

    gm_gradsync_grads_ready(rk->gs, first, n);
}

static int hook_reduce(void *ctx, struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_reduce(rk->gs, st->model, st->step, st->total_steps);
}

static int hook_after(void *ctx, struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;
    /* st->step is already the next step (trainer.h): the step just taken is st->step - 1 */
    int err = gm_gradsync_after_step(rk->gs, st->model, st->step - 1, st->total_steps);

    pthread_mutex_lock(&rk->mu);
    rk->prog.hash_checks = gm_gradsync_hash_checks(rk->gs);
    rk->prog.step = st->step - (err == 0 ? 0 : 1);
    pthread_mutex_unlock(&rk->mu);
    return err;
}

static void hook_progress(void *ctx, const struct gm_train_state *st, int epoch, double loss,
                          double sps)
{
    struct gm_rank *rk = ctx;

    pthread_mutex_lock(&rk->mu);
    rk->prog.step = st->step;
    rk->prog.total_steps = st->total_steps;
    rk->prog.epoch = epoch;
    rk->prog.loss = loss;
    if (sps > 0)
        rk->prog.samples_per_s = sps;
    pthread_mutex_unlock(&rk->mu);
}

static int cmp_tensor_name(const void *a, const void *b, void *m)
{
    return strcmp(gm_model_tensor(m, *(const size_t *)a)->name,
                  gm_model_tensor(m, *(const size_t *)b)->name);
}

/* The SHA-256 of the parameters as rank.h defines it, into hex[65] ("" on failure). */
static void params_sha256(struct gm_model *m, char hex[65])
{
    const size_t nt = gm_model_num_tensors(m);
    size_t *order = calloc(nt, sizeof(*order)), maxn = 0;
    float *t = NULL;
    uint8_t *le = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = false;

    hex[0] = 0;
    for (size_t i = 0; i < nt; i++)
        if (gm_model_tensor(m, i)->numel > maxn)
            maxn = gm_model_tensor(m, i)->numel;
    t = malloc(maxn * sizeof(float) + 1);
    le = malloc(maxn * 4 + 1);
    if (order == NULL || t == NULL || le == NULL || ctx == NULL ||
        EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        goto out;
    for (size_t i = 0; i < nt; i++)
        order[i] = i;
    qsort_r(order, nt, sizeof(*order), cmp_tensor_name, m);
    for (size_t k = 0; k < nt; k++) {
        const struct gm_param_info *pi = gm_model_tensor(m, order[k]);
        gm_model_export_tensor(m, order[k], gm_model_params(m), t);
        for (size_t j = 0; j < pi->numel; j++) {
            uint32_t w;
            memcpy(&w, &t[j], sizeof(w));
            gm_put_le32(le + 4 * j, w);
        }
        if (EVP_DigestUpdate(ctx, le, pi->numel * 4) != 1)
            goto out;
    }
    ok = EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 32;
out:
    if (ok)
        for (unsigned int i = 0; i < mdlen; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    free(order);
    free(t);
    free(le);
}

static void hook_finish(void *ctx, const struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;
    char hex[65];

    params_sha256(st->model, hex);
    pthread_mutex_lock(&rk->mu);
    memcpy(rk->prog.params_sha256, hex, sizeof(hex));
    pthread_mutex_unlock(&rk->mu);
}

/* Trainer thread: the codec state a checkpoint holds (this rank's gradsync). */
static size_t hook_codec_state(void *ctx, struct gm_st_tensor *t, size_t cap, const char **codec)
{
    struct gm_rank *rk = ctx;

    *codec = "";
    return rk->gs != NULL ? gm_gradsync_ckpt_state(rk->gs, t, cap, codec) : 0;
}

/* Trainer thread: a checkpoint is written and committed; the loop hears of it (the newest
 * one wins when two come before the loop runs: the older one stays on disk here). */
static void hook_checkpoint(void *ctx, const char *path, const char *sha256, long step)
{
    struct gm_rank *rk = ctx;

    pthread_mutex_lock(&rk->mu);
    rk->ckpt.pending = true;
    rk->ckpt.step = step;
    snprintf(rk->ckpt.sha256, sizeof(rk->ckpt.sha256), "%s", sha256);
    snprintf(rk->ckpt.path, sizeof(rk->ckpt.path), "%s", path);
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
}

/* Trainer thread: the observer hooks (train/trainer.h) feed the metrics room. */
static void hook_step(void *ctx, const struct gm_train_step_info *si)
{
    struct gm_rank *rk = ctx;

    if (rk->tb != NULL)
        gm_tb_on_step(rk->tb, si);
    pthread_mutex_lock(&rk->mu);
    if (si->epoch != rk->fit_epoch && rk->fit.n > 0) { /* once an epoch: what the fit says */
        struct gm_coll_link l;
        gm_gradsync_ab_link(&rk->fit, &l);
        gm_info("event=coll-fit epoch=%d ops=%llu mean_ms=%.2f mean_bytes=%.0f alpha_ms=%.3f "
                "mbps=%.2f",
                si->epoch, (unsigned long long)rk->fit.n, rk->fit_s / (double)rk->fit.n * 1e3,
                rk->fit.sx / rk->fit.w, l.alpha_s * 1e3, l.bytes_per_s * 8e-6);
        rk->fit_epoch = si->epoch;
    }
    rk->mjob.step = si->step;
    rk->mjob.epoch = si->epoch;
    rk->mjob.compute_s = si->compute_s;
    rk->prog.compute_s =
        rk->prog.compute_s > 0 ? 0.9 * rk->prog.compute_s + 0.1 * si->compute_s : si->compute_s;
    rk->mjob.collective_s = si->collective_s;
    rk->mjob.optimizer_s = si->optimizer_s;
    rk->mjob.samples_per_s = si->samples_per_s;
    rk->mjob.loss = si->loss;
    {
        uint64_t b = rk->bytes_sent_total - rk->bytes_at_step;
        int w = rk->prog.world;
        rk->bytes_at_step = rk->bytes_sent_total;
        rk->mjob.bytes_per_step = w > 1 ? (double)b : -1;
        /* against fp32 through the ring: 2(W-1)/W of the gradient's bytes per rank */
        rk->mjob.compression_ratio =
            w > 1 && b > 0 ? 2.0 * (w - 1) / w * (double)rk->nparams * 4.0 / (double)b : -1;
    }
    if (rk->metrics != NULL)
        gm_metrics_job_update(rk->metrics, &rk->mjob); /* its own short lock, never ours */
    pthread_mutex_unlock(&rk->mu);
}

static void hook_eval(void *ctx, const struct gm_train_eval_info *ei)
{
    struct gm_rank *rk = ctx;

    if (rk->tb != NULL)
        gm_tb_on_eval(rk->tb, ei);
    pthread_mutex_lock(&rk->mu);
    rk->mjob.accuracy_pct = ei->test_accuracy;
    if (rk->metrics != NULL)
        gm_metrics_job_update(rk->metrics, &rk->mjob);
    pthread_mutex_unlock(&rk->mu);
}

void gm_rank_set_metrics(struct gm_rank *rk, struct gm_metrics *m)
{
    pthread_mutex_lock(&rk->mu);
    rk->metrics = m;
    pthread_mutex_unlock(&rk->mu);
}

static void *trainer_main(void *arg)
{
    struct gm_rank *rk = arg;

    rk->err = gm_trainer_run(&rk->job, &rk->opts, &rk->sum);
    pthread_mutex_lock(&rk->mu); /* every op this thread waited for has counted its bytes */
    if (rk->sum.bytes_sent == 0)
        rk->sum.bytes_sent = rk->bytes_sent_total;
    pthread_mutex_unlock(&rk->mu);
    if (rk->tb != NULL) { /* a failed event file never fails the job (logged once) */
        if (rk->err == 0 && gm_tb_write_summary(rk->tb, &rk->sum) != 0)
            gm_warn("event=tensorboard-incomplete file=%s", gm_tb_path(rk->tb));
        gm_tb_close(rk->tb);
        rk->tb = NULL;
    }
    pthread_mutex_lock(&rk->mu);
    rk->exited = true;
    if (rk->metrics != NULL)
        gm_metrics_job_clear(rk->metrics); /* no gauges of a job that is over */
    if (rk->err == 0)
        rk->prog.test_accuracy = rk->sum.test_accuracy;
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
    return NULL;
}

int gm_rank_start(uv_loop_t *loop, const struct gm_job *job, const char *out,
                  const struct gm_rank_ckpt *ck, const struct gm_rank_ops *ops, void *arg,
                  struct gm_rank **out_rk)
{
    struct gm_rank *rk;
    int err;

    *out_rk = NULL;
    rk = calloc(1, sizeof(*rk));
    if (rk == NULL)
        return -ENOMEM;
    rk->loop = loop;
    rk->ops = ops;
    rk->arg = arg;
    pthread_mutex_init(&rk->mu, NULL);
    pthread_cond_init(&rk->cv, NULL);
    rk->prog.test_accuracy = NAN;
    rk->job = *job;
    rk->job.text = NULL;
    if (job->text != NULL) {
        rk->job.text = malloc(job->text_len + 1);
        if (rk->job.text == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        memcpy(rk->job.text, job->text, job->text_len + 1);
    }
    snprintf(rk->out, sizeof(rk->out), "%s", out);
    if ((err = gm_gradsync_strategy_from_job(&rk->job, &rk->strat)) < 0)
        goto fail;
    /* a prior of 1 Gbit/s until the group's links are known (gm_rank_set_fit_prior) */
    gm_gradsync_ab_init(&rk->fit, 0, 125e6);
    rk->at_step = -1;
    rk->align_h = 1;
    rk->exec = (struct gm_gradsync_exec){
        .run = bridge_run, .submit = bridge_submit, .wait = bridge_wait, .ctx = rk};
    rk->pending_tail = &rk->pending;
    rk->inflight_tail = &rk->inflight;
    rk->submitted_tail = &rk->submitted;
    rk->comm = (struct gm_train_comm){.rank = 0,
                                      .world = 1, /* the first group says; resync sets both */
                                      .min_world = 1,
                                      .start = hook_resync,
                                      .reduce_grads = hook_reduce,
                                      .after_step = hook_after,
                                      .resync = hook_resync,
                                      .backward_begin = hook_backward_begin,
                                      .grads_ready = hook_grads_ready,
                                      .progress = hook_progress,
                                      .finish = hook_finish,
                                      .codec_state = hook_codec_state,
                                      .ctx = rk};
    rk->hooks = (struct gm_train_hooks){.on_step = hook_step, .on_eval = hook_eval, .ctx = rk};
    snprintf(rk->mjob.name, sizeof(rk->mjob.name), "%s", job->name);
    rk->mjob.accuracy_pct = -1;      /* not evaluated yet */
    rk->mjob.bytes_per_step = -1;    /* until a step with a peer reports them */
    rk->mjob.compression_ratio = -1; /* idem */
    /* keep_on_stop: every rank keeps the weights of its last finished step when the job
     * stops early (a lost coordinator, a cancel): the coordinator's are not the only copy */
    rk->opts = (struct gm_train_opts){.progress = 0,
                                      .stop = &rk->stop,
                                      .out = rk->out,
                                      .comm = &rk->comm,
                                      .keep_on_stop = 1,
                                      .hooks = &rk->hooks};
    if (ck != NULL && ck->dir != NULL) {
        snprintf(rk->ckpt_dir, sizeof(rk->ckpt_dir), "%s", ck->dir);
        rk->opts.ckpt_dir = rk->ckpt_dir;
        rk->opts.term = ck->term;
        rk->opts.on_checkpoint = hook_checkpoint;
        rk->opts.ckpt_ctx = rk;
        if (ck->resume) {
            rk->opts.resume = rk->ckpt_dir;
            rk->opts.resume_optional = 1;
        }
        if (ck->resume && ck->committed_only) {
            size_t n =
                ck->ncommitted < GM_RANK_COMMITTED_MAX ? ck->ncommitted : GM_RANK_COMMITTED_MAX;
            if (n > 0)
                memcpy(rk->committed, ck->committed, n * sizeof(rk->committed[0]));
            rk->opts.committed_only = 1;
            rk->opts.committed = rk->committed;
            rk->opts.ncommitted = n;
        }
    }
    {
        /* the job's TensorBoard events, beside its weights: JOBDIR/tensorboard/ (each agent
         * writes its own view; only rank 0 evaluates) */
        char dir[GM_JOB_PATH_MAX + 16];
        const char *slash = strrchr(rk->out, '/');
        int n = slash != NULL ? (int)(slash - rk->out) : 1;
        snprintf(dir, sizeof(dir), "%.*s/tensorboard", n, slash != NULL ? rk->out : ".");
        if (gm_tb_open(dir, &rk->tb) < 0) /* logged; the job runs without events */
            rk->tb = NULL;
    }
    if ((err = uv_async_init(loop, &rk->async, async_cb)) < 0)
        goto fail;
    rk->async.data = rk;
    if ((err = -pthread_create(&rk->th, NULL, trainer_main, rk)) < 0) {
        gm_tb_close(rk->tb);
        rk->tb = NULL;
        rk->freeing = true;
        uv_close((uv_handle_t *)&rk->async, handle_closed);
        return err;
    }
    rk->th_started = true;
    *out_rk = rk;
    return 0;
fail:
    gm_tb_close(rk->tb); /* NULL-safe */
    gm_job_free(&rk->job);
    pthread_mutex_destroy(&rk->mu);
    pthread_cond_destroy(&rk->cv);
    free(rk);
    return err;
}

void gm_rank_free(struct gm_rank *rk)
{
    if (rk == NULL || rk->freeing)
        return;
    GM_ASSERT(rk->exit_reported); /* stop it and wait for on_exit first */
    rk->freeing = true;
    retire(rk);
    uv_async_send(&rk->async); /* closes once every retired group is idle */
}
