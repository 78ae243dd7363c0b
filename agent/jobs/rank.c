/*
 * agent/jobs/rank.c - one rank's loop side and its bridge to the trainer thread (see
 * rank.h): the request FIFO the trainer fills and the async callback that starts each
 * request on the group's gm_coll, the groups (current and retired), the setters and
 * getters the job room calls, and gradsync's executor (run/submit/wait) that the trainer
 * thread calls.  The trainer's side (its hooks, trainer_main, gm_rank_start) is
 * rank_train.c, above this file; the state both share is agent/jobs/rank_int.h.
 */
#include "agent/jobs/rank.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/jobs/rank_int.h"
#include "agent/jobs/xport.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "train/comm/collective.h"
#include "train/gradsync.h"

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
        if (r != NULL && r->counted) {
            uint64_t in = rk->x != NULL ? gm_xport_rx_last_first(rk->x) : 0;
            rk->peers_in_ns = in > r->t0 && in <= now ? in : 0;
        }
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

/* The xport's queue limit covers the group's largest op (xport.h): a peer that waits for
 * our collective while we finish another op (a slow link's broadcast, rank 0's evaluation)
 * must not have its link paused. */
static void size_queue(struct gm_rank *rk)
{
    size_t op_bytes;

    if (rk->x == NULL)
        return;
    pthread_mutex_lock(&rk->mu);
    op_bytes = rk->op_bytes_max;
    pthread_mutex_unlock(&rk->mu);
    if (op_bytes > 0 && gm_xport_queue_max(rk->x) != gm_xport_queue_max_for(op_bytes))
        gm_xport_set_queue_max(rk->x, gm_xport_queue_max_for(op_bytes));
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
    size_queue(rk);
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
    if (rk->loop_sched_fd >= 0)
        close(rk->loop_sched_fd);
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
    size_queue(rk);     /* the trainer may have learnt the largest op */
    while (r != NULL) { /* in order: every rank starts the same ops in the same order */
        struct req *next = r->next;
        start_req(rk, r);
        r = next;
    }
    if (ck.pending && !rk->freeing && ck.err == 0 && rk->ops->on_checkpoint != NULL)
        rk->ops->on_checkpoint(rk, ck.path, ck.sha256, ck.step, rk->arg);
    if (ck.pending && !rk->freeing && ck.err != 0 && rk->ops->on_checkpoint_failed != NULL)
        rk->ops->on_checkpoint_failed(rk, ck.path, ck.step, ck.err, rk->arg);
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
    size_queue(rk); /* known from an earlier group: before the new group's first frame */
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

const char *gm_rank_error(const struct gm_rank *rk)
{
    if (rk->err == 0)
        return "";
    return rk->err_line[0] ? rk->err_line : gm_strerror(rk->err);
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

void gm_rank_set_shares(struct gm_rank *rk, const int *counts, int n)
{
    pthread_mutex_lock(&rk->mu);
    rk->next_nshares = n > 0 && n <= GM_JOB_SHARES_MAX ? n : 0;
    if (rk->next_nshares > 0)
        memcpy(rk->next_shares, counts, sizeof(int) * (size_t)n);
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
    else if (rk->prog.total_steps > 0 && (step + h - 1) / h * h >= rk->prog.total_steps)
        err = -ERANGE; /* the run ends before the (DiLoCo round) boundary it would take */
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

void gm_rank_set_metrics(struct gm_rank *rk, struct gm_metrics *m, const char *job_id)
{
    pthread_mutex_lock(&rk->mu);
    rk->metrics = m;
    snprintf(rk->mjob.id, sizeof(rk->mjob.id), "%s", job_id);
    pthread_mutex_unlock(&rk->mu);
}

/* --- the bridge, trainer thread ----------------------------------------------------------- */

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

int gm_rank_sched_read(int fd, uint64_t *run, uint64_t *delay)
{
    char buf[96];
    unsigned long long r = 0, d = 0;
    ssize_t n;

    *run = *delay = 0;
    if (fd < 0 || (n = pread(fd, buf, sizeof(buf) - 1, 0)) <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &r, &d) != 2)
        return -1;
    *run = r;
    *delay = d;
    return 0;
}

uint64_t gm_rank_sched_delay_ns(int fd)
{
    uint64_t run, delay;

    (void)gm_rank_sched_read(fd, &run, &delay);
    return delay;
}

/* Trainer thread.  Inside a wait for the collective, the time the loop thread (which runs it)
 * and this thread (woken at its end) were runnable but not running (a quota's throttle, other
 * work) counts as this rank's stall in the collective (rk->wait_delay_ns, rank_train.c's step
 * measure): both read over the wait only, since the loop thread's delays outside it (an
 * overlapped bucket during backward, a heartbeat while throttled) are not in the collective's
 * time, and counted over the whole step they ate it whole (a rank at 0.2 core read its
 * collective as all stall, which priced the collective at nothing); at most the wait's wall
 * time (both threads throttled at once count once).  The loop thread's CPU time inside the
 * wait is counted too (rk->wait_loop_cpu_ns): the trainer slept through it, so the step's
 * measure of the compute the collective took from the trainer leaves it out. */
static void wait_done(struct gm_rank *rk, struct req *r)
{
    const uint64_t d0 = gm_rank_sched_delay_ns(rk->trainer_sched_fd);
    uint64_t l0, lc0, t0;

    (void)gm_rank_sched_read(rk->loop_sched_fd, &lc0, &l0);
    t0 = gm_time_mono_ns();

    pthread_mutex_lock(&rk->mu);
    while (!r->done) {
        if (rk->stopping && rk->pending != NULL)
            withdraw_pending(rk);
        if (!r->done)
            pthread_cond_wait(&rk->cv, &rk->mu);
    }
    pthread_mutex_unlock(&rk->mu);
    {
        const uint64_t d1 = gm_rank_sched_delay_ns(rk->trainer_sched_fd);
        uint64_t l1, lc1, wall, d;
        (void)gm_rank_sched_read(rk->loop_sched_fd, &lc1, &l1);
        wall = gm_time_mono_ns() - t0;
        rk->wait_loop_cpu_ns += lc1 > lc0 ? lc1 - lc0 : 0;
        d = (rk->trainer_sched_fd >= 0 && d1 > d0 ? d1 - d0 : 0) +
            (rk->loop_sched_fd >= 0 && l1 > l0 ? l1 - l0 : 0);
        rk->wait_delay_ns += d < wall ? d : wall;
    }
}

/* gradsync's executor: the op runs on the loop, the trainer waits for it.
 * Ops submitted for overlap come first (they were asked for first). */
int gm_rank_bridge_run(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
{
    struct gm_rank *rk = ctx;
    struct req r = {
        .start = start, .arg = arg, .fit = counted && !rk->fit_skip, .counted = counted};
    int err;

    if (counted)
        rk->fit_skip = false;
    if ((err = enqueue(rk, &r)) < 0)
        return err;
    wait_done(rk, &r);
    return r.status;
}

static void bridge_submit(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted)
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
    r->fit = counted && !rk->fit_skip; /* as gm_rank_bridge_run */
    r->counted = counted;
    if (counted)
        rk->fit_skip = false;
    if ((err = enqueue(rk, r)) < 0) {
        rk->submit_err = err;
        free(r);
        return;
    }
    *rk->submitted_tail = r;
    rk->submitted_tail = &r->sub_next;
}

int gm_rank_bridge_wait(void *ctx)
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

static int bridge_wait_one(void *ctx)
{
    struct gm_rank *rk = ctx;
    struct req *r = rk->submitted;
    int err;

    if (rk->submit_err < 0 || r == NULL)
        return gm_rank_bridge_wait(rk); /* the submit's error, once the rest ended; or 0 */
    wait_done(rk, r);
    err = r->status;
    rk->submitted = r->sub_next;
    if (rk->submitted == NULL)
        rk->submitted_tail = &rk->submitted;
    free(r);
    return err;
}

static uint64_t bridge_peers_in(void *ctx)
{
    struct gm_rank *rk = ctx;
    uint64_t in;

    pthread_mutex_lock(&rk->mu);
    in = rk->peers_in_ns;
    pthread_mutex_unlock(&rk->mu);
    return in;
}

int gm_rank_bridge_open(struct gm_rank *rk)
{
    int err;

    rk->exec = (struct gm_gradsync_exec){.run = gm_rank_bridge_run,
                                         .submit = bridge_submit,
                                         .wait = gm_rank_bridge_wait,
                                         .wait_one = bridge_wait_one,
                                         .peers_in = bridge_peers_in,
                                         .ctx = rk};
    rk->pending_tail = &rk->pending;
    rk->inflight_tail = &rk->inflight;
    rk->submitted_tail = &rk->submitted;
    if ((err = uv_async_init(rk->loop, &rk->async, async_cb)) < 0)
        return err;
    rk->async.data = rk;
    /* this (the loop) thread's scheduler statistics, for the trainer's stall measure (none
     * where /proc has no schedstat: the measure reads 0 then) */
    rk->loop_sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    return 0;
}

void gm_rank_bridge_close(struct gm_rank *rk)
{
    rk->freeing = true;
    uv_close((uv_handle_t *)&rk->async, handle_closed);
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
