/*
 * train/gradsync.h - gradient synchronization: the one home of the job's [comm] choice.
 *
 * A strategy is what [comm] means once resolved: a kind (dense all-reduce, PowerSGD, DiLoCo),
 * the wire codec and the kind's settings.  gm_gradsync_strategy_from_job() is the only place
 * that maps the job's codec enum (train/job.h) to it; the simulation (train/sim.c), the agent's
 * job runtime and `gradmesh doctor` all start from a strategy, so they cannot disagree.
 *
 * auto: chosen by gm_gradsync_auto_choose (below) from measured links and compute, by the job's
 * coordinator, which then sends the concrete codec to every rank (agent/jobs/job.c).  Where nothing
 * has chosen (train --local, the simulation) gm_gradsync_strategy_from_job resolves auto to
 * dense fp32 and logs why: in one process the "links" are memory.
 *
 * codec = auto, the model (gm_gradsync_auto_choose; pure, tested with synthetic measurements):
 *  - a link is alpha-beta: seconds = alpha + bytes / bytes_per_s.  gm_gradsync_ab fits alpha
 *    and beta by least squares over the real collectives' (bytes, seconds), forgetting old
 *    samples (weight x0.9 per sample: the newest ten or so dominate, so a link that changes
 *    shows within a few steps), starting from the measured RTT/2 and throughput as a
 *    prior worth a fiftieth of a sample at each of two sizes, so that one message size (a job runs
 * one codec) still gives a well-posed fit: the prior pins what the samples cannot tell apart.
 *  - each candidate's communication per step is gm_gradsync_estimate over those links (the
 *    ring, as the collectives run it); step time = compute + communication (no overlap
 *    credited: the prediction errs slow), except for DiLoCo with [comm] overlap (the job's,
 *    in->job), whose sync runs during the first lag = gm_gradsync_diloco_lag(H) steps of the
 *    next round: a round costs H compute + max(0, sync - lag compute), not H compute + sync.
 *  - the pick is the first, in the order fp32, fp16, powersgd, diloco, diloco8, whose
 *    communication is at most comm_frac of the compute (default GM_GRADSYNC_AUTO_COMM_FRAC):
 *    the order is that of fidelity to synchronous fp32 SGD (fp16 within 0.2 points of fp32,
 *    PowerSGD within 0.7, DiLoCo changes the optimizer), so "cheapest" is the least lossy
 *    codec that keeps the link off the critical path.  DiLoCo's H is sized to the link: the
 *    smallest H >= GM_GRADSYNC_AUTO_MIN_H whose per-step share of a sync fits; capped at
 *    max_h.  Overlapped, the smallest H >= GM_GRADSYNC_AUTO_MIN_H whose lag steps of compute
 *    cover one sync (no predicted wait; the budget is left for jitter): about 2/5 of the
 *    blocking H.  Overlapped 16-bit diloco fits only when some H up to the cap hides its sync
 *    entirely; when even the cap's lag leaves a wait, diloco8 (8-bit deltas with error
 *    feedback, train/compress/diloco.h: 0.51x the bytes, one hop) is tried next, sized the
 *    same way: at 5 Mbit/s the 16-bit sync (350-420 ms) outran H = 64's lag (~100 ms).
 *  - one sync's cost is the links' estimate, or, while DiLoCo runs, what the ranks measure
 *    (in->sync_s, gm_gradsync_diloco_sync_s, from when the peers' data came; the longest over
 *    the ranks, agent/jobs/autocodec.h gm_autoswitch_sync): on LeNet-5 over a 20 Mbit/s,
 *    51 ms tunnel the links said ~100 ms where syncs took 120-180 ms (TCP windows over the
 *    RTT, TLS, the capped host's own work), and the lag hid half of each.
 *  - auto's DiLoCo H is sized before the run's length is known; every rank caps it when DiLoCo
 *    starts (cap_h, gm_gradsync_diloco_plan: the same total_steps everywhere, so the same H and
 *    outer step) so that the run syncs at least GM_GRADSYNC_AUTO_MIN_ROUNDS times, and runs
 *    its outer step as plain averaging (lr 1, momentum 0) when it has fewer than
 *    GM_GRADSYNC_AUTO_NESTEROV_ROUNDS rounds: a fine-tune of 260 steps at H = 64 had 4 rounds
 *    and ended 8.6 points below synchronous training, its Nesterov step overshooting
 *    (docs/BENCHMARKS.md, "A codec for the short fine-tune").  The price is a sync that the
 *    shorter round's lag hides less of: in a short run accuracy is worth more than speed.
 *  - the measured cost (in->meas_s, issue 21): what the running strategy's collective costs a
 *    step beyond the links, as the ranks measured it (the compute its CPU work took from the
 *    trainer of a capped host, gm_gradsync_cpu_taken; for one LAN island, whose links are
 *    given as free, the wait for it too), is added to every candidate's communication in
 *    proportion to its bytes a step (fp16: half of fp32's).  No overlap hides it: on a capped
 *    host the loop's TLS and summing run inside the trainer's cores.
 *  - too_slow: even DiLoCo at max_h does not fit, or the predicted speed of world agents is
 *    below one agent's (world * compute / step < 1): the caller warns that the link does not
 *    help.  The pick is then still the cheapest-step candidate.
 *
 * Switching mid-run (the coordinator re-decides; agent/jobs/autocodec.h carries it out):
 *  - every rank fits alpha-beta to its own collectives (seconds against the bytes it sent,
 *    each op timed on the loop from its start, the previous op's end or, when the peers were
 *    late, the arrival of their first frame, to its completion: waiting for a slower rank is
 *    not link time)
 *    and reports the fit; the coordinator reads the slowest rank's fit as one hop of the ring
 *    (gm_gradsync_ab_hop), puts it on every link that is not lan (lan pairs keep the link
 *    layer's measurement) and runs gm_gradsync_auto_choose over those links with rank 0's
 *    measured compute per step: the same model and rule as the first pick;
 *  - hysteresis (gm_gradsync_switch_decide): the pick replaces the running codec only when
 *    the running one's predicted communication is above GM_GRADSYNC_SWITCH_HYST x the budget
 *    (a less faithful pick; from fp32 to fp16, above the budget itself:
 *    GM_GRADSYNC_SWITCH_HYST_DENSE), or the pick's is below the budget / GM_GRADSYNC_SWITCH_HYST (a
 *    more faithful one), on GM_GRADSYNC_SWITCH_CONFIRM decisions in a row, and never within
 *    GM_GRADSYNC_SWITCH_DWELL steps of a group forming or a switch taking effect.  DiLoCo
 *    re-sized is a switch to DiLoCo with the new H (every rank changes H and lag at the same
 *    round boundary) when it is worth one: a larger H when the running lag's compute covers
 *    under 1/HYST of a measured sync (blocking: a sync per step over HYST x the budget), a
 *    smaller one when auto's H is at most the running one / GM_GRADSYNC_RESIZE_SHRINK; no
 *    decision then until two rounds of the new H have synced (agent/jobs/autocodec.c), so
 *    that the next is made on its own syncs.  16-bit diloco to diloco8 likewise, when the
 *    16-bit sync leaves the running lag covering under 1/HYST of it (or 16-bit's best H's
 *    wait is over HYST x the budget); back when the 16-bit sync would be hidden by the H
 *    cap's lag with HYST to spare (the measured sync of one width prices the other by the links'
 *    ratio, gm_gradsync_auto_in.sync_codec, or at what the other measured when it last ran in
 *    the group where that is longer, other_sync_s); DiLoCo's residuals start at zero, as its
 *    momentum does.  Between 20% and 30% of compute, say, a codec stays;
 *  - codec state at a switch: PowerSGD's error feedback and Q are dropped (reset): the error
 *    is each rank's own, flushing it would need a dense all-reduce of the whole gradient over
 *    the very link that became too slow, and what is lost is bounded by one step's
 *    compression error, as at every re-formed group.  DiLoCo is left only at a round boundary
 *    (gm_gradsync_switch_step: after its sync, when every rank holds the outer parameters), so
 *    its last round is flushed, not lost; its outer momentum starts afresh.  A codec switched
 *    to starts fresh (PowerSGD from the job's seed, DiLoCo anchored at the shared weights).
 *    Carrying DiLoCo's momentum over a re-size (scaled by the H's ratio or not) was tried
 *    and ended lower in simulated replays of the testbed's re-sizes (docs/BENCHMARKS.md).
 *
 * Settings, as the simulation has always used them: every kind runs the ring all-reduce (byte
 * counts compare like with like); fp32/fp16 average the gradients every step; powersgd: rank
 * from [comm], error feedback, fp16 factors, seed = the job's, dense fp16 warm-up for the first
 * 2% of steps; diloco: local_steps, outer_lr, outer_momentum from [comm], Nesterov, fp16 deltas.
 *
 * Per rank (gm_gradsync_new): the logic one replica runs around its optimizer step, hooked into
 * the trainer (struct gm_train_comm) by whoever drives the ranks:
 *  - gm_gradsync_reduce(), after backward: dense and PowerSGD replace the gradients by their
 *    mean over ranks; DiLoCo, on its first call, anchors the shared initial weights.
 *  - gm_gradsync_after_step(), after the optimizer step: DiLoCo syncs the parameters every
 *    local_steps steps; a run that ends mid-round ends on the outer parameters of the last
 *    sync (the local steps since are dropped), so every rank ends identical.  The parameter
 *    hash check (gm_coll_hashcheck_start) then proves the replicas bitwise identical: after
 *    every DiLoCo sync, every 100 steps otherwise, and after the last step; a difference fails
 *    the run with GM_ERR_MISMATCH (logged as event=replicas_differ).
 *    With [comm] overlap (and H >= 2) DiLoCo's sync and the hash check of the outer
 *    parameters are handed to exec->submit at each round boundary and waited for
 *    gm_gradsync_diloco_lag(H) steps later, where the outer update is applied with the
 *    steps taken meanwhile carried over (train/compress/diloco.h, "Overlapped rounds"); the
 *    run's last step waits for a pending sync, applies it, ends on the outer parameters and
 *    checks as above.
 *
 * The executor.  gradsync never touches a gm_coll itself: every collective op goes through
 * exec->run(ctx, start, arg, counted), which must call start(c, arg, done, done_arg) on the
 * rank's current gm_coll in the thread that owns it (the simulation: under its rendezvous
 * mutex; the agent: on the loop thread), block the calling trainer thread until done runs, and
 * return the op's status (or start's error, in which case done never runs).  While run blocks,
 * the trainer thread touches neither the model nor the gradsync, so start may read both.
 * `counted` is true for ops that move gradients or parameters (bytes_sent accounting), false
 * for hash checks.
 *
 * Threads: a gm_gradsync belongs to its rank's trainer thread; strategies are plain values.
 * Placement: train/ top level, beside job and trainer, because it joins job.h, nn/model.h,
 * comm/ and compress/ (which itself sits on comm/); inside comm/ it would point back up.
 */
#ifndef GM_TRAIN_GRADSYNC_H
#define GM_TRAIN_GRADSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/comm/codec.h"
#include "train/comm/collective.h"
#include "train/job.h"

#define GM_GRADSYNC_HASH_EVERY 100 /* steps between parameter-hash checks (not DiLoCo) */
#define GM_GRADSYNC_SYNC_SAMPLES 8 /* DiLoCo syncs whose time gm_gradsync_diloco_sync_s keeps */

enum gm_gradsync_kind {
    GM_GRADSYNC_KIND_DENSE,    /* all-reduce the gradients every step */
    GM_GRADSYNC_KIND_POWERSGD, /* low-rank gradients, error feedback */
    GM_GRADSYNC_KIND_DILOCO,   /* local steps, outer optimizer on the parameter deltas */
};

struct gm_gradsync_strategy {
    enum gm_gradsync_kind kind;
    enum gm_codec codec; /* wire codec (dense: the gradients; powersgd: factors; diloco: deltas) */
    enum gm_coll_algo algo; /* of every all-reduce */
    int rank;               /* powersgd */
    bool error_feedback;    /* powersgd; false only for the negative control */
    uint32_t local_steps;   /* diloco: H */
    double outer_lr;        /* diloco */
    double outer_momentum;  /* diloco */
    enum gm_job_codec id;   /* which of GM_JOB_CODECS (never AUTO); its name: gm_job_codec_name */
    bool cap_h;             /* diloco: auto's pick, run as gm_gradsync_diloco_plan says */
    bool overlap;           /* diloco: the outer sync runs during the next round ([comm]) */
};

/* One collective op on c; done(c, status, done_arg) runs later, exactly once, unless this
 * returns < 0. */
typedef int (*gm_gradsync_start_fn)(struct gm_coll *c, void *arg, gm_coll_done_cb done,
                                    void *done_arg);

struct gm_gradsync_exec {
    /* Runs start on the rank's current gm_coll in the thread that owns it and blocks the
     * calling (trainer) thread until the op completes; returns its status (or start's error).
     * counted: the op moves gradients/parameters (byte accounting), false for hash checks. */
    int (*run)(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted);
    /* Optional, for overlap: submit has start called as run does but returns without
     * waiting (ops complete in submit order, after every op run or submitted before; an
     * executor may also run it to completion before returning, as the simulation does);
     * wait blocks until every op submitted since the last wait has completed and returns the
     * first error among them (0 if none).  A submit error is returned by the next wait.
     * Between submit and wait the trainer thread must leave alone whatever the op reads or
     * writes (gradsync's DiLoCo: the delta buffer; the anchor it hashes is read-only until
     * the wait).  counted as for run.  Both NULL: no overlap (bucketed backward and
     * [comm] overlap then run blocking). */
    void (*submit)(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted);
    int (*wait)(void *ctx);
    /* Optional, with submit and wait: waits for the oldest submitted op not yet waited for
     * and returns its status (0 when none is left; a submit error as wait would).
     * Overlapped DiLoCo waits at its lag step for the sync alone and leaves the anchor's hash
     * check (one round trip) running until the next boundary; NULL: it waits for both. */
    int (*wait_one)(void *ctx);
    /* Optional: for the last counted op to complete, when the last of the peers' data began
     * to arrive, if that was after the op started (monotonic ns; 0: every peer was in time).
     * DiLoCo's measured sync (gm_gradsync_diloco_sync_s) leaves out the time before it: a
     * rank that reached the boundary first would otherwise time its wait for the others. */
    uint64_t (*peers_in)(void *ctx);
    void *ctx; /* borrowed */
};

struct gm_gradsync;
struct gm_model;

/* The job's [comm] as a strategy (auto resolved, see above).  0, or -EINVAL for a codec the
 * job loader would not have accepted. */
GM_MUST_CHECK int gm_gradsync_strategy_from_job(const struct gm_job *job,
                                                struct gm_gradsync_strategy *out);

/* What a run's summary records as its codec: "none" when world < 2 (train --local: nothing
 * crosses a wire and bytes_sent is 0, so naming [comm]'s codec would claim a compression that
 * never ran), else the strategy's name.  s may be NULL when world < 2. */
const char *gm_gradsync_summary_codec(const struct gm_gradsync_strategy *s, int world);

/* One rank's synchronizer; *out NULL on error (-EINVAL, -ENOMEM).  ex is copied; seed is the
 * job's (PowerSGD's shared random start). */
GM_MUST_CHECK int gm_gradsync_new(const struct gm_gradsync_strategy *s, int rank, int world,
                                  uint64_t seed, const struct gm_gradsync_exec *ex,
                                  struct gm_gradsync **out);
/* NULL-safe.  No op may be in flight. */
void gm_gradsync_free(struct gm_gradsync *g);

/* Overlap of backward and communication (dense strategies, and only when the executor has
 * submit/wait): call begin before backward, then grads_ready from the model's gradient hook
 * (gm_model_set_grad_hook) as each layer's gradients become final.  The gradients are cut
 * into buckets (gm_coll_buckets, reverse layer order, gm_coll_bucket_bytes); each bucket's
 * all-reduce is submitted as soon as its last layer is ready, so it runs while the rest of
 * backward does; gm_gradsync_reduce then waits for them.  Every rank cuts and submits the
 * same buckets in the same order.  Without begin (or for other strategies) reduce
 * all-reduces the whole buffer at once. */
GM_MUST_CHECK int gm_gradsync_backward_begin(struct gm_gradsync *g, struct gm_model *m, long step);
void gm_gradsync_grads_ready(struct gm_gradsync *g, size_t first_tensor, size_t n);

/* Unequal shares of the global batch (train/trainer.h "Data order"): before each reduce, the
 * samples n this rank takes in this step out of global_batch.  Dense and PowerSGD need
 * nothing more (the trainer scales the gradients by world * n / global_batch before they
 * reach the codec, so every codec reduces sample-weighted gradients).  DiLoCo, for which
 * gm_gradsync_local_grads is true, takes its inner steps on the rank's own batch mean
 * (unscaled: a slow rank's smaller batch is as good a local step as any) and weights each
 * rank's outer delta by the samples it processed in the round (gm_diloco_set_weight: world
 * x its samples / all samples), so the outer step follows the sample-weighted mean.  Chosen
 * over giving slow ranks fewer inner steps: every rank then still syncs at the same step
 * (the collective's lockstep and the round boundaries stay as they are), and a rank's share
 * already makes its inner steps as short as everyone's.  Equal shares give the weight 1
 * exactly: those runs keep their bits. */
void gm_gradsync_note_share(struct gm_gradsync *g, int n, int global_batch);
/* True when the strategy's optimizer steps on this rank's own gradients (DiLoCo). */
bool gm_gradsync_local_grads(const struct gm_gradsync *g);
/* DiLoCo: its outer parameters, *n floats (the model's trainable prefix), bitwise identical on
 * every rank: what a test evaluation is of (train/trainer.h eval_params).  Mid-round each
 * replica's own parameters are its local steps away from them, one worker's drift rather than
 * the job's model.  Overlapped, the round in flight is not in them until its update is applied.
 * NULL (and *n = 0) for the other codecs, whose replicas are identical after every step. */
const float *gm_gradsync_outer_params(const struct gm_gradsync *g, size_t *n);

/* Overlapped DiLoCo: how many more steps until the update of the round in flight is in the
 * outer parameters (gm_gradsync_outer_params), after steps_done steps; 0 when none is pending
 * (or blocking DiLoCo, or another codec), capped at the steps left (the last step applies it).
 * From the round schedule alone, so the same on every rank of a group: the trainer puts an
 * epoch's evaluation off by that many steps (train/trainer.h eval_defer), so that it is of the
 * model the epoch's last round made rather than the round before's. */
long gm_gradsync_eval_defer(const struct gm_gradsync *g, long steps_done, long total_steps);

/* A sharded evaluation's collectives (train/trainer.h eval_sum and eval_bcast), run on the
 * executor like the codec's ops (uncounted: no gradient traffic).  eval_sum: v[0..n) summed
 * over the ranks in place (n <= GM_GRADSYNC_EVAL_SUM_MAX; each double travels as two floats,
 * its float and the float of the rest, summed in float: counts of samples are exact below
 * 2^24, sums of losses good to float rounding, ~1e-7 relative); eval_bcast: rank 0's
 * buf[0..n) to every rank; eval_fsum: buf[0..n) summed over the ranks in place, in float
 * (the same sum on every rank).  0, -EINVAL, or the op's error (GM_ERR_REGROUP in the agent
 * when the group broke). */
#define GM_GRADSYNC_EVAL_SUM_MAX 8
GM_MUST_CHECK int gm_gradsync_eval_sum(struct gm_gradsync *g, long step, double *v, size_t n);
GM_MUST_CHECK int gm_gradsync_eval_bcast(struct gm_gradsync *g, long step, float *buf, size_t n);
GM_MUST_CHECK int gm_gradsync_eval_fsum(struct gm_gradsync *g, long step, float *buf, size_t n);

/* After backward, before the optimizer step (trainer's reduce_grads).  0 or an error. */
GM_MUST_CHECK int gm_gradsync_reduce(struct gm_gradsync *g, struct gm_model *m, long step,
                                     long total_steps);
/* After the optimizer step (trainer's after_step).  0 or an error (GM_ERR_MISMATCH when the
 * replicas differ). */
GM_MUST_CHECK int gm_gradsync_after_step(struct gm_gradsync *g, struct gm_model *m, long step,
                                         long total_steps);
/* Overlapped DiLoCo ([comm] overlap): waits for the sync in flight and folds it in; params =
 * the outer parameters, identical on every rank when every rank calls it at the same round
 * boundary (before leaving DiLoCo at gm_gradsync_switch_step).  0 otherwise, or the sync's
 * error.  Trainer thread. */
GM_MUST_CHECK int gm_gradsync_flush(struct gm_gradsync *g, struct gm_model *m);

/* This rank's codec state for a checkpoint (train/ckpt/ckpt.h): PowerSGD's error feedback
 * (GM_GRADSYNC_PSGD_ERROR) and factors (GM_GRADSYNC_PSGD_FACTORS: every Q then every Phat,
 * gm_psgd_state_get), DiLoCo's anchor and outer momentum ("gradmesh.codec.diloco.anchor",
 * ".momentum") and, overlapped, between a boundary and its update, the reduced delta
 * (GM_GRADSYNC_DILOCO_PENDING; the sync in flight is waited for first) and this rank's params
 * at that boundary (GM_GRADSYNC_DILOCO_START), flat; up to cap tensors into t (data borrowed
 * until the next call into g), *codec the strategy's name.  Returns how many (0 before the
 * state exists, and for dense strategies). */
#define GM_GRADSYNC_PSGD_ERROR "gradmesh.codec.powersgd.error"
#define GM_GRADSYNC_PSGD_FACTORS "gradmesh.codec.powersgd.factors"
/* overlapped DiLoCo: the all-reduced delta of the last boundary, not yet applied */
#define GM_GRADSYNC_DILOCO_PENDING "gradmesh.codec.diloco.pending"
/* overlapped DiLoCo: the writer's params at that boundary (the steps since carry over) */
#define GM_GRADSYNC_DILOCO_START "gradmesh.codec.diloco.start"
struct gm_st_tensor;
struct gm_st_file;
size_t gm_gradsync_ckpt_state(struct gm_gradsync *g, struct gm_st_tensor *t, size_t cap,
                              const char **codec);
/* PowerSGD's error-feedback memory of this rank (*n floats), NULL when there is none yet. */
const float *gm_gradsync_psgd_error(const struct gm_gradsync *g, size_t *n);
/* The name of rank's error feedback in a checkpoint into buf: GM_GRADSYNC_PSGD_ERROR for rank
 * 0 (the writer's own), GM_GRADSYNC_PSGD_ERROR ".rankR" for the others (a simulation's
 * rank 0 holds them all: train/sim.c). */
void gm_gradsync_psgd_error_name(int rank, char *buf, size_t cap);
/* Takes the codec state of a checkpoint f (written by a run of codec `codec`) for this rank:
 * PowerSGD's factors and this rank's error feedback, DiLoCo's anchor and momentum.  The
 * state is created lazily (on the first step), so it is kept and applied then; a part of
 * another length than the run's is refused then (logged) and that part starts fresh.
 * Another codec's state, or none: nothing (logged).  0, GM_ERR_FORMAT (not F32; logged),
 * -ENOMEM. */
GM_MUST_CHECK int gm_gradsync_ckpt_restore(struct gm_gradsync *g, const struct gm_st_file *f,
                                           const char *codec, const char *origin);

/* Hash checks this rank passed. */
uint64_t gm_gradsync_hash_checks(const struct gm_gradsync *g);

/* --- doctor: what each strategy would cost --------------------------------------------- */

/* The strategies `gradmesh doctor` compares, in its order: fp32, fp16, powersgd rank 2,
 * diloco H=16 (each with the settings above).  Writes up to cap, returns how many there are. */
size_t gm_gradsync_strategies(struct gm_gradsync_strategy *out, size_t cap);
/* A label with the settings that matter ("powersgd rank 2 (fp16)"), into buf. */
void gm_gradsync_describe(const struct gm_gradsync_strategy *s, char *buf, size_t cap);

struct gm_gradsync_cost {
    uint64_t step_bytes; /* bytes all-reduced per step on average (encoded; DiLoCo: per sync / H) */
    double seconds;      /* estimated communication seconds per step (gm_coll_cost) */
};

/* Per-step communication of strategy s for model m over world ranks joined by links (as
 * gm_coll_cost: world*world, NULL for the uniform default).  PowerSGD counts its payload after
 * warm-up as two all-reduces (P, then Q) of half of it each; DiLoCo one all-reduce of the
 * parameters per local_steps steps.  0, -EINVAL, -ENOMEM. */
GM_MUST_CHECK int gm_gradsync_estimate(const struct gm_gradsync_strategy *s,
                                       const struct gm_model *m, int world,
                                       const struct gm_coll_link *links,
                                       struct gm_gradsync_cost *out);

/* --- codec = auto ------------------------------------------------------------------------ */

#define GM_GRADSYNC_AUTO_COMM_FRAC 0.2 /* communication per step <= this x compute */
#define GM_GRADSYNC_AUTO_MIN_H 8       /* DiLoCo's smallest H when auto picks it */
/* and its largest: H trades accuracy per epoch for bytes.  On LeNet-5/Fashion-MNIST with 2
 * agents (468 steps an epoch) H = 21-92 reached the 1-agent accuracy in as many epochs, H = 237
 * did not in one more (bench/seed_table.sh); past this a slower link gets a step that
 * waits on its sync rather than models that drift apart. */
#define GM_GRADSYNC_AUTO_MAX_H 64
/* A run with auto's DiLoCo syncs at least this many times (its H is cut to fit; see the
 * header comment), and below GM_GRADSYNC_AUTO_NESTEROV_ROUNDS rounds its outer step is plain
 * averaging.  From the fine-tune simulated over 260 steps (docs/BENCHMARKS.md, "A codec for
 * the short fine-tune"): at 4 rounds (H=64) Nesterov ended 4.9 points below fp16 every step
 * and plain averaging 2.7; at 8 (H=32) plain averaging matched fp16 where Nesterov was 4.3
 * below; 16 (H=16) matched it either way, but its lag hides a third of a sync, not 3/5: two
 * agents would step slower than one.  LeNet-5's tunnel runs (1404-2340 steps, H 52-64: 21-45
 * rounds) are above both. */
#define GM_GRADSYNC_AUTO_MIN_ROUNDS 8
#define GM_GRADSYNC_AUTO_NESTEROV_ROUNDS 16

/* A link's alpha-beta fit (see the header comment).  Plain value. */
struct gm_gradsync_ab {
    double a0, b0;              /* the prior: alpha (s), beta (s per byte) */
    double w, sx, sy, sxx, sxy; /* the samples' weighted sums over (bytes, seconds) */
    uint64_t n;                 /* samples added */
};

/* Starts the fit from a measurement: alpha_s (one-way latency, >= 0) and bytes_per_s (> 0). */
void gm_gradsync_ab_init(struct gm_gradsync_ab *f, double alpha_s, double bytes_per_s);
/* Replaces the prior (as gm_gradsync_ab_init), keeping the samples: the link was measured. */
void gm_gradsync_ab_prior(struct gm_gradsync_ab *f, double alpha_s, double bytes_per_s);
/* One real collective: bytes sent on the link, seconds it took.  Non-finite or negative
 * values are ignored. */
void gm_gradsync_ab_add(struct gm_gradsync_ab *f, double bytes, double seconds);
/* The fitted link (alpha >= 0, bytes_per_s > 0). */
void gm_gradsync_ab_link(const struct gm_gradsync_ab *f, struct gm_coll_link *out);

struct gm_gradsync_auto_in {
    const struct gm_model *m;
    int world;                        /* >= 2 */
    const struct gm_coll_link *links; /* world*world, [i*world+j] is i->j */
    double compute_s;                 /* one step's compute on one rank, measured, > 0 */
    double comm_frac;                 /* 0: GM_GRADSYNC_AUTO_COMM_FRAC */
    uint32_t max_h;                   /* 0: GM_GRADSYNC_AUTO_MAX_H */
    const struct gm_job *job;         /* settings kept (powersgd rank, diloco outer); may be NULL */
    const int *groups; /* LAN islands (gm_gradsync_islands), NULL: none; when they split the
                        * world every candidate runs GM_COLL_HIER: fp32 inside islands, the
                        * candidate's codec between their leaders */
    double sync_s;     /* one DiLoCo sync as measured (gm_gradsync_diloco_sync_s) while DiLoCo
                        * runs, 0: none; DiLoCo's H is then sized from it, not the links */
    enum gm_codec sync_codec; /* the deltas' wire codec of the DiLoCo that sync_s timed:
                               * GM_CODEC_Q8 for diloco8, anything else reads as fp16; the
                               * other width's sync is sync_s x the links' ratio of the two,
                               * or other_sync_s where that is longer */
    double other_sync_s; /* the other width's sync as measured when it last ran in this group
                          * (0: it has not): a width left for its measured sync is judged on
                          * that, not only on the scaled one (which read 73 ms for a 16-bit
                          * sync measured at 88-123 ms, and the deltas' width changed four
                          * times in a LeNet-5 run over the 20 Mbit/s tunnel) */
    /* What the running strategy's collective costs a step beyond what the links price, as
     * measured on the ranks (0: nothing measured): the compute its CPU work (TLS, summing,
     * encoding, on the loop thread) took from the trainer on a capped or busy host
     * (gm_gradsync_cpu_taken), and, where links are given as free (one LAN island, whose
     * bucketed all-reduce overlaps backward: the probe knows neither), the trainer's wait for
     * it too.  Measured on a dense codec, each candidate pays it scaled by its bytes per step
     * against meas_of's (gm_gradsync_estimate's step_bytes): half the bytes, half the TLS and
     * summing (measured on the capped fine-tune pair: fp16 took 37% less than fp32, not 50%,
     * so the rule errs towards leaving fp32 and, with the hysteresis, against coming back).
     * Measured on PowerSGD or DiLoCo, it prices that candidate alone: their compression
     * runs on the trainer and the loop's own baseline work (~7 ms a step on a capped host
     * with no collective at all) would be multiplied by their small bytes. */
    double meas_s;
    const struct gm_gradsync_strategy *meas_of; /* what ran while meas_s was measured */
    /* only the dense codecs (fp32, fp16) are candidates; the others never fit and are never
     * the cheapest: where the price is the measured cost alone (one LAN island), theirs does
     * not follow from a dense all-reduce's by the bytes (PowerSGD's compression and its
     * blocking all-reduces run on the trainer; DiLoCo changes the optimizer) */
    bool dense_only;
};

#define GM_GRADSYNC_AUTO_NCAND 5

struct gm_gradsync_auto_cand {
    struct gm_gradsync_strategy s; /* diloco: H as sized to the link */
    double comm_s, step_s;         /* predicted per step */
    double meas_s;                 /* of comm_s: in->meas_s scaled by the bytes (0: none) */
    double sync_s;                 /* diloco: one sync as priced (0 for the others) */
    bool fits;                     /* comm_s <= comm_frac * compute_s */
};

struct gm_gradsync_auto_out {
    struct gm_gradsync_strategy pick;
    struct gm_gradsync_auto_cand cand[GM_GRADSYNC_AUTO_NCAND]; /* fp32, fp16, powersgd, diloco,
                                                                * diloco8 */
    double speedup;                                            /* world * compute / pick's step */
    double compute_s;                                          /* in->compute_s */
    double sync_s; /* one DiLoCo sync as priced (the pick's when it is DiLoCo, else 16-bit
                    * diloco's): in->sync_s (scaled), or the links' estimate */
    bool too_slow;
    char reason[240]; /* one line: why this pick */
};

/* --- codec = auto, switching mid-run ------------------------------------------------------ */

/* Leave the current codec only when its predicted communication is above HYST x the budget;
 * move to a more faithful one only when that one's is below budget / HYST. */
#define GM_GRADSYNC_SWITCH_HYST 1.5
/* fp32 -> fp16 (a dense codec to a narrower dense one) as soon as the running one is over the
 * budget, the threshold auto's first pick uses: the margin above is for moves that cost
 * accuracy (PowerSGD's low rank, DiLoCo's local steps), and fp16 gradients cost none that the
 * tables measure (docs/BENCHMARKS.md, the capped LAN pair).  Measured on a quiet capped LAN
 * pair, fp32 cost 28-31% of compute, inside the 1.5 margin's band, while fp16 stepped 14% faster
 * (issue 21); within the band the switch came only when the measure's noise crossed 30%, at
 * step 105 of 260.  The way back keeps the margin (fp32 below budget / HYST), so a measure
 * near the budget switches once, not back and forth. */
#define GM_GRADSYNC_SWITCH_HYST_DENSE 1.0
/* DiLoCo's H is made smaller only when auto's is at most the running one / this: a re-size
 * restarts the outer momentum, and on a loaded machine the measured compute and sync move
 * by 1.5x within a minute (the testbed at load 8-9: H 14 -> 28 -> 18 -> 30 -> 50 -> 30 with
 * 1.5 here) while a larger H is only a little less faithful. */
#define GM_GRADSYNC_RESIZE_SHRINK 2.0
/* The same target on this many decisions in a row, each on fresher fits. */
#define GM_GRADSYNC_SWITCH_CONFIRM 2
/* Steps after a group forms or a switch takes effect before the next decision: the fit needs
 * samples of the codec that runs (x0.9 a sample: ten give it two thirds of the weight). */
#define GM_GRADSYNC_SWITCH_DWELL 10

/* The coordinator's hysteresis state (plain value; all zero: no decision pending). */
struct gm_gradsync_switch {
    int target;       /* candidate index (auto order) decided last, + 1 (0: none) */
    int streak;       /* decisions in a row for it */
    long quiet_until; /* no decision before this step */
    long total_steps; /* the run's, set by the caller (0: unknown): DiLoCo's lags are judged as
                       * the ranks run them (gm_gradsync_run_lag: half the round at the cap) */
};

/* The candidate index (0 fp32, 1 fp16, 2 powersgd, 3 diloco, 4 diloco8: auto's order) of a
 * strategy. */
int gm_gradsync_auto_index(const struct gm_gradsync_strategy *s);

/* One decision at rank 0's step, from auto's predictions over the fitted links (o, from
 * gm_gradsync_auto_choose with the same compute_s and comm_frac; 0: the default) for a job
 * running cur (see the header comment, "Switching").  Returns the candidate index to switch
 * to, or -1 to stay; a switch resets the streak (the caller then calls
 * gm_gradsync_switch_quiet with the step it takes effect at). */
int gm_gradsync_switch_decide(struct gm_gradsync_switch *sw, const struct gm_gradsync_auto_out *o,
                              const struct gm_gradsync_strategy *cur, double compute_s,
                              double comm_frac, long step);
/* No decision until GM_GRADSYNC_SWITCH_DWELL steps after step (a group formed or a switch
 * took effect there); a pending streak is dropped. */
void gm_gradsync_switch_quiet(struct gm_gradsync_switch *sw, long step);

/* A rank's fit (gm_gradsync_ab_link over its collectives: seconds against the bytes that rank
 * sent) as one hop of the ring of world ranks: an all-reduce of N bytes is 2(world-1) hops,
 * each sending N/world bytes, so the fit's intercept is 2(world-1) alphas and its slope the
 * hop's seconds per byte. */
void gm_gradsync_ab_hop(const struct gm_coll_link *fit, int world, struct gm_coll_link *hop);

/* What one DiLoCo sync of this rank really took, in seconds: the median of its last
 * GM_GRADSYNC_SYNC_SAMPLES syncs (overlapped: from the boundary that submitted it to its
 * all-reduce's completion on the loop, whatever the trainer did meanwhile, waiting for the
 * slower rank included; blocking: the trainer's wait); 0 before the first or for another
 * kind.  Trainer thread.  What codec = auto re-sizes H from (gm_gradsync_auto_in.sync_s). */
double gm_gradsync_diloco_sync_s(const struct gm_gradsync *g);

/* Logs what DiLoCo's syncs have blocked this rank's trainer so far (event=diloco-waits, as
 * at the run's last step): for a codec switch away from this gradsync.  No op for other
 * kinds; NULL-safe. */
void gm_gradsync_log_waits(const struct gm_gradsync *g);

/* Overlapped DiLoCo: the steps from a boundary to the application of its sync, a quarter
 * of the round rounded up (at least 1, at most h - 1); 0 for h < 2 (then the rounds block).
 * A quarter, not half: on the tunnel testbed the half lag's accuracy after 3 epochs fell
 * short of the target where the quarter's did not, so with H re-sized from the measured syncs
 * (up to the cap of 64) the quarter lag reached the target sooner at 20 and at 5 Mbit/s
 * (docs/BENCHMARKS.md, "Overlapped DiLoCo", session 11's pairing; again in session 18, with
 * each epoch evaluated once its round's update was in).  Since the lag steps start from the
 * eager outer step (train/compress/diloco.h, "Eager"), a long lag costs less, and half the
 * round at half the H reads better in simulation where a sync needs 10 lag steps or more
 * (docs/BENCHMARKS.md, "Eager outer steps"); not adopted: auto would then pick 16-bit deltas
 * at a large H over 8-bit ones at a small H, which its order of codecs does not weigh.  The
 * rank runs the plan's lag
 * (gm_gradsync_diloco_plan below): this, or half the round where auto's H is at the run's cap;
 * auto's pricing uses this one. */
uint32_t gm_gradsync_diloco_lag(uint32_t h);
/* DiLoCo as a rank runs it over a run of total_steps (0 or less: unknown): the strategy's H,
 * its lag (overlapped), outer lr and momentum, except for auto's pick (cap_h), whose H is cut
 * to total_steps / GM_GRADSYNC_AUTO_MIN_ROUNDS (at least 1), whose lag at that cap is half the
 * round (rounded up) instead of a quarter, and whose outer step is plain averaging below
 * GM_GRADSYNC_AUTO_NESTEROV_ROUNDS rounds (total_steps / H); why says what changed ("" when
 * nothing did).  Pure: every rank computes the same from the same total_steps.
 * The half lag at the cap: auto sizes H so that a quarter of it covers a sync; where the run
 * is too short for that H, the sync would block every lag step for the rest (the 3-agent
 * fine-tune over the tunnel, 8-bit deltas then DIRECT: 5-6 s of each 11 s sync, a quarter of
 * a round's time; about 5 s since they run HIER over islands), and the
 * longer lag hides it instead.  Below the cap a longer lag only costs accuracy (LeNet-5 over
 * the tunnel, docs/BENCHMARKS.md "Overlapped DiLoCo"). */
struct gm_gradsync_diloco_run {
    uint32_t h;
    uint32_t lag; /* overlapped: gm_gradsync_diloco_lag(h), or half of h at the run's cap; 0:
                   * blocking */
    double outer_lr, outer_momentum;
    long rounds; /* total_steps / h; 0 when total_steps is unknown */
    char why[224];
};
void gm_gradsync_diloco_plan(const struct gm_gradsync_strategy *s, long total_steps,
                             struct gm_gradsync_diloco_run *out);
/* Its H alone. */
uint32_t gm_gradsync_diloco_h(const struct gm_gradsync_strategy *s, long total_steps);
/* The lag auto's pick s runs with over total_steps (its plan with cap_h set; total_steps 0 or
 * less: gm_gradsync_diloco_lag of s's H; 0 when s is blocking). */
uint32_t gm_gradsync_run_lag(const struct gm_gradsync_strategy *s, long total_steps);
/* The first step >= step at which a rank running g may leave its strategy without losing
 * state that the others hold too: DiLoCo's next round boundary (its sync has run, every rank
 * holds the outer parameters), else step itself. */
long gm_gradsync_switch_step(const struct gm_gradsync *g, long step);

/* The compute a step's collective took from the trainer, in seconds, from one rank's
 * scheduler statistics over a step (or their averages): loop_cpu_s, the CPU time of the loop
 * thread that runs the collective; trainer_cpu_s and trainer_delay_s, the trainer thread's CPU
 * time and its run delay (runnable, not running).  While the trainer is runnable, the process
 * gets q = (trainer_cpu_s + loop_cpu_s) / (trainer_cpu_s + trainer_delay_s) cores; had the
 * loop taken nothing, the trainer would have run loop_cpu_s / q sooner.  At most
 * trainer_delay_s: a trainer that was never held off a core (a spare core ran the loop) lost
 * nothing to it.  0 for a value that is not finite and positive.  Pure. */
double gm_gradsync_cpu_taken(double loop_cpu_s, double trainer_cpu_s, double trainer_delay_s);

/* Predicts every candidate and picks one (see the header comment).  0, -EINVAL, -ENOMEM. */
GM_MUST_CHECK int gm_gradsync_auto_choose(const struct gm_gradsync_auto_in *in,
                                          struct gm_gradsync_auto_out *out);

/* The strategy of a concrete job codec (not auto), with the job's settings. */
GM_MUST_CHECK int gm_gradsync_strategy_of(enum gm_job_codec codec, const struct gm_job *job,
                                          struct gm_gradsync_strategy *out);

/* Times one training step's compute (forward, loss, backward) of model m at batch n (<= its
 * max batch) on random inputs of per floats a sample (in_c * in_h * in_w): after one warm-up,
 * at least reps runs and more until min_s seconds have passed (at most 1000 runs); the mean
 * wall time of a run.  A mean over a sustained stretch, not the median of a short burst: a
 * CPU that is shared, or capped by a cgroup quota (which lets a burst shorter than its period
 * run at full speed), shows as it will when training runs continuously.  Seconds, or a
 * negative error. */
double gm_gradsync_time_compute(struct gm_model *m, size_t per, int n, int reps, double min_s);

/* As gm_gradsync_estimate, for a strategy whose algo is GM_COLL_HIER over groups (world
 * entries, the lowest rank of each rank's island; NULL: one group). */
GM_MUST_CHECK int gm_gradsync_estimate_groups(const struct gm_gradsync_strategy *s,
                                              const struct gm_model *m, int world,
                                              const struct gm_coll_link *links, const int *groups,
                                              struct gm_gradsync_cost *out);

/* --- islands ------------------------------------------------------------------------------ */

/* LAN islands: lan is world*world, [a*world+b] true when the link a->b is of class lan (either
 * direction joins a and b).  Writes groups[r] = the lowest rank of r's island (the leader of
 * the hierarchical all-reduce, train/comm/collective.h HIER). */
void gm_gradsync_islands(const bool *lan, int world, int *groups);
/* groups (NULL: none) split the world into more than one island but not one per rank: the
 * hierarchical all-reduce helps. */
bool gm_gradsync_islands_split(const int *groups, int world);

/* --- a star (hub-and-spoke) VPN ------------------------------------------------------------ */

#define GM_GRADSYNC_STAR_TOL 0.2 /* a spoke-to-spoke RTT may be this much under the two legs */

/* The hub of a star among world (>= 3) ranks from their RTTs (ms, world*world, [a*world+b];
 * <= 0: unknown, the reverse direction stands in): the rank h whose every other pair a, b has
 * rtt(a,b) >= (1 - tol) (rtt(a,h) + rtt(h,b)), i.e. their packets go through h; with several
 * (three ranks in a line) the one with the smallest sum of RTTs.  -1: no star, or a pair
 * unknown.  tol 0: GM_GRADSYNC_STAR_TOL. */
int gm_gradsync_star_hub(const double *rtt_ms, int world, double tol);
/* Groups (world entries, NULL: none) on which the collectives run GM_COLL_HIER: LAN islands that
 * split the world (gm_gradsync_islands_split), or one group around a star's hub (every rank
 * labelled with the hub: gather and reduce at the hub, broadcast from it). */
bool gm_gradsync_groups_hier(const int *groups, int world);

#endif
