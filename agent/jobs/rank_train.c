/*
 * agent/jobs/rank_train.c - one rank's trainer thread (see rank.h): gm_rank_start, the
 * thread's body (gm_trainer_run), and the communication and report hooks it runs with:
 * resync (rank 0's state broadcast to a new group, skipped where every rank holds it), the
 * codec switch at a step boundary, the gradient all-reduce, progress, metrics, TensorBoard
 * events, the final parameter hash and checkpoint notes.  Every collective goes to the loop
 * through the bridge in rank.c (gm_rank_bridge_run, rk->exec); nothing here touches a libuv
 * handle but the async send that wakes the loop.  Shared state: agent/jobs/rank_int.h.
 */
#include "agent/jobs/rank.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "agent/service/metrics.h"
#include "agent/jobs/rank_int.h"
#include "common/log.h"
#include "common/byteorder.h"
#include "common/log.h"
#include "common/time.h"
#include "train/ckpt/ckpt.h"
#include "train/comm/collective.h"
#include "train/gradsync.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"
#include "train/tbevents.h"

/* --- trainer thread -------------------------------------------------------------------- */

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

static int start_hashcheck(struct gm_coll *c, void *arg, gm_coll_done_cb done, void *done_arg)
{
    struct bcast *b = arg;

    return gm_coll_hashcheck_start(c, b->buf, b->n * sizeof(float), b->gen, done, done_arg);
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
    const size_t nt = gm_model_num_trainable(st->model); /* params [0, nt) train, the rest frozen */
    struct bcast b = {.n = np + no + HDR_FLOATS};
    size_t ns = np; /* the params rank 0 sends: all, or the trainable ones */
    int rank, world, err;

    pthread_mutex_lock(&rk->mu);
    if (b.n * sizeof(float) > rk->op_bytes_max) { /* the largest op: the loop sizes the xport's */
        rk->op_bytes_max = b.n * sizeof(float);   /* queue by it (rank.c size_queue) */
        uv_async_send(&rk->async);
    }
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
    if (rk->next_nshares == world && world > 1) { /* the group's shares (shares = auto) */
        st->share_n = world;
        for (int i = 0; i < world; i++)
            st->share_w[i] = (uint32_t)rk->next_shares[i];
    } else if (rk->job.shares.mode == GM_JOB_SHARES_AUTO) {
        st->share_n = 0; /* none measured yet: equal */
    }
    /* the step averages start afresh with the group: its shares, and so its steps, differ */
    rk->prog.step_s = rk->prog.coll_s = rk->prog.stall_s = rk->prog.cpu_taken_s = 0;
    rk->taken_n = 0;
    rk->prog.sync_s = 0; /* another group: other links */
    gm_autoshare_avg_start(&rk->avg);
    rk->prog.share = 0;
    rk->prog.rounds = rk->prog.round_folds = 0;
    rk->strat.algo = rk->group_hier ? GM_COLL_HIER : GM_COLL_RING; /* the gradsync made below */
    rk->sw.pending = false; /* an announced switch belonged to the group before */
    rk->at_step = -1;
    rk->align_h = 1;
    rk->fit_skip = true; /* the first op waits for every rank's resync */
    pthread_mutex_unlock(&rk->mu);

    (void)gm_rank_bridge_wait(
        rk); /* overlap ops of the failed step are over before gradsync goes */
    gm_gradsync_free(rk->gs);
    rk->gs = NULL;
    if (rk->state_buf == NULL && (rk->state_buf = malloc(b.n * sizeof(float))) == NULL)
        return -ENOMEM;
    b.buf = rk->state_buf;
    b.gen = rk->synced_gen;
    /* Frozen parameters never move: when every rank already holds the same ones (the same
     * init file; a 64-bit hash compared by all, all agree on the answer) they stay out of the
     * broadcast, which is then the trainable part and the optimizer state alone; a fine-tuned
     * backbone costs the link nothing at a group's start. */
    if (world > 1 && nt < np) {
        struct bcast h = {.buf = gm_model_params(st->model) + nt, .n = np - nt, .gen = b.gen};
        err = gm_rank_bridge_run(rk, start_hashcheck, &h, false);
        if (err < 0 && err != GM_ERR_MISMATCH)
            return err;
        ns = err == 0 ? nt : np;
        gm_info("event=resync-frozen generation=%u frozen=%zu same=%d", b.gen & 0xffff, np - nt,
                err == 0);
    }
    b.n = ns + no + HDR_FLOATS;
    /* Every rank lays out what rank 0 would send.  When all hold the same bytes (a group
     * re-formed after a change of shares or a lost member: the others finished the same steps
     * in the same groups; a fresh start from the same init file) the broadcast is skipped: the
     * hash check is the group's first collective either way, and a resnet18's parameters and
     * Adam state (134 MB) cost a minute over a 20 Mbit/s tunnel at every group. */
    memcpy(b.buf, gm_model_params(st->model), ns * sizeof(float));
    if (no > 0)
        memcpy(b.buf + ns, gm_optim_state(st->optim), no * sizeof(float));
    put_u64(b.buf + ns + no, (uint64_t)st->step);
    put_u64(b.buf + ns + no + 4, (uint64_t)st->optim->step);
    bool same = false;
    if (world > 1) {
        err = gm_rank_bridge_run(rk, start_hashcheck, &b, false);
        if (err < 0 && err != GM_ERR_MISMATCH)
            return err;
        same = err == 0;
        gm_info("event=resync generation=%u bytes=%zu same=%d step=%ld%s", b.gen & 0xffff,
                b.n * sizeof(float), same, st->step,
                same ? ": every rank holds rank 0's state, no broadcast" : "");
    }
    if (world > 1 && !same && (err = gm_rank_bridge_run(rk, start_bcast, &b, false)) < 0)
        return err;
    if (rank != 0 && !same) {
        memcpy(gm_model_params(st->model), b.buf, ns * sizeof(float));
        if (no > 0)
            memcpy(gm_optim_state(st->optim), b.buf + ns, no * sizeof(float));
        st->step = (long)get_u64(b.buf + ns + no);
        st->optim->step = (long)get_u64(b.buf + ns + no + 4);
    }
    st->rank = rank;
    st->world = world;
    rk->nparams = gm_model_num_trainable(st->model); /* what a step all-reduces */
    err = gm_gradsync_new(&rk->strat, rank, world, rk->job.seed, &rk->exec, &rk->gs);
    if (err < 0)
        return err;
    pthread_mutex_lock(&rk->mu);
    rk->prog.rank = rank;
    rk->prog.world = world;
    rk->prog.generation = rk->synced_gen;
    rk->bytes_at_step = rk->bytes_sent_total; /* a step's bytes are its own: not the resync's */
    rk->prog.step = st->step;
    rk->prog.total_steps = st->total_steps;
    if (rk->prog.resumed_from[0] != '\0' && rk->prog.resumed_step < 0)
        rk->prog.resumed_step = st->step; /* the first group after the resume starts there */
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
    if ((err = gm_rank_bridge_run(rk, start_bcast, &b, false)) < 0)
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
    /* overlapped DiLoCo: the sync of the round just ended is still in flight; every rank
     * waits for it here and applies it, at this same step */
    if ((err = gm_gradsync_flush(rk->gs, st->model)) < 0)
        return err;
    if (rk->strat.kind == GM_GRADSYNC_KIND_DILOCO && sw.to.kind != GM_GRADSYNC_KIND_DILOCO &&
        st->world > 1 && (err = take_rank0_state(rk, st)) < 0)
        return err;
    /* codec state: dropped with the old gradsync (gradsync.h, "Switching"); nothing of it is
     * in flight at a step boundary.  What its syncs cost is logged first (a run that re-sizes
     * DiLoCo's H has one event=diloco-waits per H) */
    gm_gradsync_log_waits(rk->gs);
    gm_gradsync_free(rk->gs);
    rk->gs = NULL;
    rk->strat = sw.to;
    if ((err = gm_gradsync_new(&rk->strat, st->rank, st->world, rk->job.seed, &rk->exec, &rk->gs)) <
        0)
        return err;
    gm_autoshare_avg_switch(&rk->avg); /* a DiLoCo round in progress is not one */
    pthread_mutex_lock(&rk->mu);
    rk->prog.cpu_taken_s = 0; /* the new codec's collective takes its own */
    rk->taken_n = 0;
    pthread_mutex_unlock(&rk->mu);
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
        rk->fit_skip = true; /* this step's first op comes after the evaluation */
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

    gm_gradsync_note_share(rk->gs, st->share_samples, st->global_batch);
    return gm_gradsync_reduce(rk->gs, st->model, st->step, st->total_steps);
}

static bool hook_local_grads(void *ctx)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_local_grads(rk->gs);
}

static const float *hook_eval_params(void *ctx, size_t *n)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_outer_params(rk->gs, n);
}

static long hook_eval_defer(void *ctx, long steps_done, long total_steps)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_eval_defer(rk->gs, steps_done, total_steps);
}

/* A sharded evaluation's collectives (train/trainer.h eval_sum, eval_bcast, eval_fsum) */
static int hook_eval_sum(void *ctx, long step, double *v, size_t n)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_eval_sum(rk->gs, step, v, n);
}

static int hook_eval_bcast(void *ctx, long step, float *buf, size_t n)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_eval_bcast(rk->gs, step, buf, n);
}

static int hook_eval_fsum(void *ctx, long step, float *buf, size_t n)
{
    struct gm_rank *rk = ctx;

    return gm_gradsync_eval_fsum(rk->gs, step, buf, n);
}

static int hook_after(void *ctx, struct gm_train_state *st)
{
    struct gm_rank *rk = ctx;
    const uint64_t checks = gm_gradsync_hash_checks(rk->gs), t0 = gm_time_mono_ns();
    /* st->step is already the next step (trainer.h): the step just taken is st->step - 1 */
    int err = gm_gradsync_after_step(rk->gs, st->model, st->step - 1, st->total_steps);
    /* DiLoCo's outer sync, if this step waited for one (every sync is hash-checked): what
     * shares = auto counts as its collective (hook_step) */
    rk->after_s = (double)(gm_time_mono_ns() - t0) * 1e-9;
    rk->after_synced = gm_gradsync_hash_checks(rk->gs) > checks;
    double sync = gm_gradsync_diloco_sync_s(rk->gs);

    pthread_mutex_lock(&rk->mu);
    rk->prog.hash_checks = gm_gradsync_hash_checks(rk->gs);
    if (sync > 0) /* 0 until the codec running now has synced: the last one's is kept */
        rk->prog.sync_s = sync;
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
    rk->ckpt.err = 0;
    rk->ckpt.step = step;
    snprintf(rk->ckpt.sha256, sizeof(rk->ckpt.sha256), "%s", sha256);
    snprintf(rk->ckpt.path, sizeof(rk->ckpt.path), "%s", path);
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
}

/* Rank 0's threads: a checkpoint could not be written (err); the loop hears of it as of a
 * written one (the newest note wins). */
static void hook_checkpoint_failed(void *ctx, const char *path, long step, int err)
{
    struct gm_rank *rk = ctx;

    pthread_mutex_lock(&rk->mu);
    rk->ckpt.pending = true;
    rk->ckpt.err = err;
    rk->ckpt.step = step;
    rk->ckpt.sha256[0] = '\0';
    snprintf(rk->ckpt.path, sizeof(rk->ckpt.path), "%s", path);
    pthread_mutex_unlock(&rk->mu);
    uv_async_send(&rk->async);
}

/* Trainer thread: the observer hooks (train/trainer.h) feed the metrics room. */
/* Rank 0 resumes from checkpoint origin: remembered for `jobs` ("resuming from step N", and
 * "extending from A to B epochs" when the checkpoint's run had other total steps).
 * The agent's ranks carry no codec state across a restart (the group resyncs it). */
static int hook_codec_restore(void *ctx, const struct gm_st_file *f, const char *codec,
                              const char *origin)
{
    struct gm_rank *rk = ctx;
    struct gm_ckpt_info info;
    /* the trainer parsed the same metadata before: a failure here only loses the "from" */
    long total = gm_ckpt_info_parse(f, origin, &info) == 0 ? info.total_steps : 0;

    (void)codec;
    pthread_mutex_lock(&rk->mu);
    snprintf(rk->prog.resumed_from, sizeof(rk->prog.resumed_from), "%s", origin);
    rk->prog.resumed_total_steps = total;
    pthread_mutex_unlock(&rk->mu);
    return 0;
}

static void hook_step(void *ctx, const struct gm_train_step_info *si)
{
    struct gm_rank *rk = ctx;
    /* DiLoCo: the ranks meet only at its outer syncs, which wait in after_step (the
     * trainer's optimizer time); that wait is the step's collective for shares = auto */
    const bool rounds = gm_gradsync_local_grads(rk->gs);
    const double coll = si->collective_s + (rounds ? rk->after_s : 0);
    /* this step's stalls in its collective: the loop thread's (which runs it) and the
     * trainer's own, woken at its end but not run, each inside the waits (rank.c wait_done) */
    double stall = (double)rk->wait_delay_ns * 1e-9;
    double taken = 0;
    uint64_t lr, lrd, tr, td;

    rk->wait_delay_ns = 0;
    /* the compute the collective took from the trainer this step (gm_gradsync_cpu_taken):
     * the loop's CPU outside the waits, against the trainer's CPU and run delay */
    if (gm_rank_sched_read(rk->loop_sched_fd, &lr, &lrd) == 0 &&
        gm_rank_sched_read(rk->trainer_sched_fd, &tr, &td) == 0) {
        if (rk->sched_ok && lr >= rk->sched_loop_run && tr >= rk->sched_tr_run &&
            td >= rk->sched_tr_delay) {
            uint64_t loop = lr - rk->sched_loop_run;
            loop = loop > rk->wait_loop_cpu_ns ? loop - rk->wait_loop_cpu_ns : 0;
            taken =
                gm_gradsync_cpu_taken((double)loop * 1e-9, (double)(tr - rk->sched_tr_run) * 1e-9,
                                      (double)(td - rk->sched_tr_delay) * 1e-9);
        }
        rk->sched_loop_run = lr;
        rk->sched_tr_run = tr;
        rk->sched_tr_delay = td;
        rk->sched_ok = true;
    }
    rk->wait_loop_cpu_ns = 0;

    stall = stall < coll ? stall : coll;
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
    /* where this rank's step time went, once an epoch (data: the loader's part of compute;
     * collective: the all-reduce or sync, waiting for the slowest rank included) */
    rk->split.steps++;
    rk->split.compute_s += si->compute_s - si->data_s;
    rk->split.data_s += si->data_s;
    rk->split.collective_s += si->collective_s;
    rk->split.optimizer_s += si->optimizer_s;
    rk->split.cpu_taken_s += taken;
    if (si->epoch_end) {
        gm_info("event=step-split epoch=%d steps=%ld compute_s=%.2f data_s=%.2f collective_s=%.2f "
                "optimizer_s=%.2f cpu_taken_s=%.2f",
                si->epoch, rk->split.steps, rk->split.compute_s, rk->split.data_s,
                rk->split.collective_s, rk->split.optimizer_s, rk->split.cpu_taken_s);
        memset(&rk->split, 0, sizeof(rk->split));
    }
    rk->mjob.step = si->step;
    rk->mjob.epoch = si->epoch;
    rk->mjob.compute_s = si->compute_s;
    rk->prog.compute_s =
        rk->prog.compute_s > 0 ? 0.9 * rk->prog.compute_s + 0.1 * si->compute_s : si->compute_s;
    /* a plain mean over the first ten steps of a group or codec, then x0.9: what the last
     * codec's collective took is not carried into the new one's */
    rk->taken_n++;
    rk->prog.cpu_taken_s +=
        (taken - rk->prog.cpu_taken_s) / (rk->taken_n < 10 ? (double)rk->taken_n : 10.0);
    /* what shares = auto reads (agent/jobs/autoshare.h): a group's first steps wait for its
     * resync and warm its buffers, and are left out (else the first decisions,
     * GM_AUTOSHARE_DWELL steps in, still carry them); DiLoCo's steps averaged by rounds */
    {
        const struct gm_autoshare_step as = {
            .samples = si->samples,
            .step_s = si->compute_s + si->collective_s + si->optimizer_s,
            .coll_s = coll,
            .stall_s = stall,
            .rounds = rounds,
            .synced = rounds && rk->after_synced,
        };
        gm_autoshare_avg_step(&rk->avg, &as);
        rk->prog.step_s = rk->avg.obs.step_s;
        rk->prog.coll_s = rk->avg.obs.coll_s;
        rk->prog.stall_s = rk->avg.obs.stall_s;
        rk->prog.share = rk->avg.obs.samples;
        rk->prog.rounds = rk->avg.rounds;
        rk->prog.round_folds = rk->avg.folds;
    }
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

static void *trainer_main(void *arg)
{
    struct gm_rank *rk = arg;

    gm_log_clear_last_error();
    rk->trainer_sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    rk->err = gm_trainer_run(&rk->job, &rk->opts, &rk->sum);
    if (rk->err != 0) /* its reason, as `train --local` would print it */
        snprintf(rk->err_line, sizeof(rk->err_line), "%s", gm_log_last_error());
    /* ops a stop or an error left submitted (overlapped DiLoCo's sync in its lag steps) end
     * before their requests are freed (a stop has failed the links: they end at once) */
    (void)gm_rank_bridge_wait(rk);
    if (rk->trainer_sched_fd >= 0) {
        close(rk->trainer_sched_fd);
        rk->trainer_sched_fd = -1;
    }
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
    if (rk->metrics != NULL && rk->err == 0) { /* its final values stay until the next one */
        struct gm_metrics_job_final f = {.steps = rk->sum.steps, .wall_s = rk->sum.wall_s};
        snprintf(f.id, sizeof(f.id), "%s", rk->mjob.id);
        snprintf(f.name, sizeof(f.name), "%s", rk->mjob.name);
        /* rank 0 reports the evaluations; the others hold no test figures */
        f.accuracy_pct = rk->mjob.accuracy_pct >= 0 ? rk->sum.test_accuracy : -1;
        f.loss = rk->mjob.accuracy_pct >= 0 ? rk->sum.test_loss : -1;
        gm_metrics_job_finish(rk->metrics, &f);
    } else if (rk->metrics != NULL) {
        gm_metrics_job_clear(rk->metrics); /* no gauges of a job that failed */
    }
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
    rk->loop_sched_fd = rk->trainer_sched_fd = -1;
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
    rk->comm = (struct gm_train_comm){.rank = 0,
                                      .world = 1, /* the first group says; resync sets both */
                                      .min_world = 1,
                                      .start = hook_resync,
                                      .reduce_grads = hook_reduce,
                                      .after_step = hook_after,
                                      .resync = hook_resync,
                                      .backward_begin = hook_backward_begin,
                                      .grads_ready = hook_grads_ready,
                                      .local_grads = hook_local_grads,
                                      .progress = hook_progress,
                                      .finish = hook_finish,
                                      .codec_state = hook_codec_state,
                                      .eval_params = hook_eval_params,
                                      .eval_defer = hook_eval_defer,
                                      .eval_sum = hook_eval_sum,
                                      .eval_bcast = hook_eval_bcast,
                                      .eval_fsum = hook_eval_fsum,
                                      .codec_restore = hook_codec_restore,
                                      .ctx = rk};
    rk->hooks = (struct gm_train_hooks){.on_step = hook_step, .on_eval = hook_eval, .ctx = rk};
    snprintf(rk->mjob.name, sizeof(rk->mjob.name), "%s", job->name);
    rk->prog.resumed_step = -1;      /* hook_codec_restore and the first step say */
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
        rk->opts.on_checkpoint_failed = hook_checkpoint_failed;
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
         * writes its own view; only rank 0 reports evaluations) */
        char dir[GM_JOB_PATH_MAX + 16];
        const char *slash = strrchr(rk->out, '/');
        int n = slash != NULL ? (int)(slash - rk->out) : 1;
        snprintf(dir, sizeof(dir), "%.*s/tensorboard", n, slash != NULL ? rk->out : ".");
        if (gm_tb_open(dir, &rk->tb) < 0) /* logged; the job runs without events */
            rk->tb = NULL;
    }
    if ((err = gm_rank_bridge_open(rk)) < 0)
        goto fail;
    if ((err = -pthread_create(&rk->th, NULL, trainer_main, rk)) < 0) {
        gm_tb_close(rk->tb);
        rk->tb = NULL;
        gm_rank_bridge_close(rk);
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
