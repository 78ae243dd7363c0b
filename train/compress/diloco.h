/*
 * train/compress/diloco.h - local SGD with an outer optimizer (DiLoCo, Douillard et al.
 * 2023) on top of the collective.
 *
 * Each rank takes H local optimizer steps on its own shard with no
 * communication; then the ranks all-reduce (mean) the parameter delta
 * delta = anchor - params (the "outer gradient"; fp16 on the wire by default)
 * and apply outer Nesterov SGD to the anchor (the parameters at the last sync):
 *   m = mu m + delta;  anchor -= lr (delta + mu m)   (plain momentum: lr m)
 * then params = anchor on every rank (bitwise identical: delta is).  Defaults:
 * lr 0.7, momentum 0.9, Nesterov.  With H = 1, lr = 1, mu = 0 and an fp32 wire
 * this is synchronous SGD up to fp32 rounding of (anchor - params).
 * The inner optimizer's state (Adam moments...) stays local.  One gm_diloco per
 * rank; loop thread (or the simulation's single thread).
 *
 * 8-bit deltas (codec GM_CODEC_Q8, the job's `diloco8`): the delta goes on the wire as int8
 * blocks with an fp32 scale (train/comm/codec.h), with error feedback: each rank keeps what
 * the quantisation dropped of its own delta (its residual e) and adds it to the next round's,
 *   x = delta + e;  e = x - decode(encode(x));  x is what the all-reduce is given
 * so over rounds nothing of a rank's delta is lost, only delayed by a round (Seide et al.
 * 2014; Karimireddy et al. 2019).  The all-reduce writes e itself (gm_coll_opts.loss,
 * collective.h "Loss"), from the very bytes it sends.  It runs DIRECT: every rank sends its
 * own encoding of x to every other and each sums the N decoded contributions in rank order in
 * fp32 (the same IEEE adds everywhere: bit-identical results).  Or, where cfg.algo is HIER and
 * the collective's groups have two leaders or more (LAN islands that split the world), HIER:
 * x goes in fp32 to the island's leader, which sends one encoding of the island's sum to the
 * other leaders (DIRECT among them) and keeps what it lost as its e; the other members' e is
 * zero (nothing of theirs was encoded).  An island then sends one encoding over the slow
 * links instead of one per member: for 2 LAN ranks and 1 over a tunnel, half the tunnel's
 * bytes.  Around a star's hub (one group) DIRECT runs: HIER would carry fp32 over the spokes.
 * Never the ring: it re-encodes partial sums at every hop and owner, losses that belong to no
 * rank's residual.  For 2 ranks DIRECT moves as many bytes as the ring (N + N/64 a rank:
 * 0.51x fp16's ring) in one hop instead of two; for w ranks (w - 1) x that, so below fp16's
 * ring up to w = 3 and at par at 4 (codec = auto prices it with gm_coll_cost).
 * Round-to-nearest, not stochastic rounding: it is deterministic by construction, and error
 * feedback removes the bias stochastic rounding would be for.  The residual is per rank and
 * not in checkpoints (a resumed or switched run starts it at zero: one round's quantisation
 * error, at most max|delta| / 254 per block, is dropped).  With one rank nothing is encoded
 * (the collective runs no wire) and e is added in and cleared.
 *
 * Overlapped rounds (gm_diloco_overlap_*; after Streaming DiLoCo, Douillard et al. 2025,
 * with the whole model as one fragment): the sync of round r runs during the first `lag`
 * steps of round r+1 (1 <= lag < H, chosen by the caller: gm_gradsync_diloco_plan, a quarter of
 * H or half of it), and the outer update is applied then, lag steps late:
 *   at the boundary (gm_diloco_overlap_boundary): d[r] = anchor - params, the delta of the
 *     blocking rounds, whose all-reduce is started (gm_diloco_overlap_start, on the loop
 *     thread); this rank's params take the outer step its own delta alone would give (eager,
 *     below): params = start = anchor - lr (d + mu (mu m + d)) with d its own (unweighted)
 *     delta, m left as it is; the local steps go on from there;
 *   lag steps later (gm_diloco_overlap_apply, once the mean D[r] is in):
 *     m = mu m + D[r];  anchor -= lr (D[r] + mu m)       (the blocking update, unchanged)
 *     params = anchor + (params - start)                 (the lag steps taken meanwhile kept)
 * so the anchor (the outer parameters) follows exactly the blocking recurrence on the deltas
 * it is given and is bitwise identical on every rank; only each rank's own lag steps are
 * carried over onto it rather than taken from it.
 * Eager (after Kale et al. 2025, "Eager updates for overlapped communication and computation in
 * DiLoCo"): the rank's own delta stands in for the mean until the mean arrives, so the lag
 * steps are taken near where the update will put the rank, and the apply moves it by
 * lr (1 + mu) (D - d) rather than by the whole outer step less d.  With Nesterov momentum the
 * outer step is several times the delta (lr (1 + mu / (1 - mu)) D in a steady state: 7 D at
 * 0.7 and 0.9), and lag steps taken from the round's end point before that jump cost
 * accuracy.  LeNet-5, 2 simulated ranks, 8-bit deltas, mean of five seeds after epoch 3,
 * without and with the eager step: H=32, lag 8 (a quarter): 86.49%, 87.05%; H=40, lag 10:
 * 86.52%, 86.72%; H=20, lag 10 (a half): 86.37%, 87.36%; H=64, lag 16: 86.02%, 85.82%
 * (docs/BENCHMARKS.md, "Eager outer steps").  With plain averaging (lr 1, momentum 0) it
 * changes nothing: params stay exactly as they are.  The params of the ranks differ between
 * syncs, as they do mid-round in the blocking rounds; gm_diloco_overlap_flush (the run's end,
 * leaving DiLoCo) applies a pending update and sets params = anchor on every rank.  Between
 * gm_diloco_overlap_start and its callback only the all-reduce touches the delta; the anchor
 * is left alone until the apply (so the trainer thread may hash it meanwhile).
 */
#ifndef GM_TRAIN_COMPRESS_DILOCO_H
#define GM_TRAIN_COMPRESS_DILOCO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/comm/codec.h"
#include "train/comm/collective.h"

struct gm_diloco_config {
    uint32_t h; /* local steps between syncs, >= 1 */
    float outer_lr;
    float momentum;
    bool nesterov;
    enum gm_codec codec; /* wire codec of the delta (GM_CODEC_Q8: with error feedback) */
    enum gm_coll_algo algo;
};

struct gm_diloco;

/* h 16, lr 0.7, momentum 0.9, Nesterov, fp16, AUTO. */
void gm_diloco_config_default(struct gm_diloco_config *cfg);
/* Copies params (n floats) as the first anchor.  -EINVAL, -ENOMEM. */
GM_MUST_CHECK int gm_diloco_new(const struct gm_diloco_config *cfg, const float *params, size_t n,
                                struct gm_diloco **out);
void gm_diloco_free(struct gm_diloco *d);

/* This rank's weight in the next sync's mean: its delta (anchor - params) is multiplied by w
 * before the all-reduce takes the mean (1 by default).  Unequal shares of the global batch
 * (train/trainer.h) give w = world * (samples this rank took in the round) / (samples all
 * took), so the outer step follows the sample-weighted mean delta (train/gradsync.h). */
void gm_diloco_set_weight(struct gm_diloco *d, float w);

/* True when local step `step` (0-based, just taken) ends a round of h. */
bool gm_diloco_due(const struct gm_diloco *d, uint64_t step);
/* Starts the sync: on success cb runs once params hold the new anchor. */
GM_MUST_CHECK int gm_diloco_sync_start(struct gm_diloco *d, struct gm_coll *c, float *params,
                                       uint64_t step, gm_coll_done_cb cb, void *arg);
/* params = the anchor (the outer parameters after the last sync), dropping
 * the local steps since: how a run that ends mid-round ends identical on
 * every rank, with DiLoCo's outer parameters.  -EBUSY during a sync. */
GM_MUST_CHECK int gm_diloco_restore(struct gm_diloco *d, float *params);
/* The outer state (checkpoints): the anchor and the outer momentum, n floats each. */
size_t gm_diloco_state(const struct gm_diloco *d, const float **anchor, const float **momentum);
/* Replaces the outer state (a checkpoint's): -EINVAL for another n, -EBUSY during a sync. */
GM_MUST_CHECK int gm_diloco_state_set(struct gm_diloco *d, const float *anchor,
                                      const float *momentum, size_t n);
/* --- overlapped rounds (see the top) --------------------------------------------------- */

/* At a round boundary (trainer thread; no op in flight): keeps this round's delta and moves
 * params by the eager outer step of this rank's own delta, noting where they start (see the
 * top).  -EPROTO while the round before was not applied, -EBUSY while an op runs, -EINVAL for
 * params NULL. */
GM_MUST_CHECK int gm_diloco_overlap_boundary(struct gm_diloco *d, float *params);
/* Applies the reduced delta: the outer step, then params = anchor + the steps since the
 * boundary.  -EPROTO when no reduced delta waits (never started, or failed), -EBUSY. */
GM_MUST_CHECK int gm_diloco_overlap_apply(struct gm_diloco *d, float *params);
/* Starts the all-reduce (mean) of the delta the last boundary kept; cb(c, status, arg) once
 * it is reduced (it then waits to be folded in).  -EPROTO when there is none, -EBUSY. */
GM_MUST_CHECK int gm_diloco_overlap_start(struct gm_diloco *d, struct gm_coll *c, uint64_t step,
                                          gm_coll_done_cb cb, void *arg);
/* Folds a reduced delta in (the outer step alone), then params = anchor.  A delta not yet reduced
 * (never started, or failed) is dropped: -EPROTO, params = anchor all the same.  -EBUSY
 * while it runs.  With nothing pending: params = anchor, 0. */
GM_MUST_CHECK int gm_diloco_overlap_flush(struct gm_diloco *d, float *params);
/* The reduced delta waiting to be applied (n floats, identical on every rank), or NULL: what
 * a checkpoint of an overlapped run holds besides the anchor and the momentum. */
const float *gm_diloco_pending(const struct gm_diloco *d);
/* Sets it (a checkpoint's): -EINVAL for another n, -EBUSY while an op runs. */
GM_MUST_CHECK int gm_diloco_pending_set(struct gm_diloco *d, const float *delta, size_t n);
/* This rank's params at the last boundary while its update is pending (n floats; NULL when
 * none is), and setting it (a checkpoint's, with the params it was written with): -EINVAL
 * for another n, -EBUSY while an op runs.  gm_diloco_state_set leaves it alone. */
const float *gm_diloco_round_start(const struct gm_diloco *d);
GM_MUST_CHECK int gm_diloco_round_start_set(struct gm_diloco *d, const float *start, size_t n);

/* 8-bit deltas: this rank's error-feedback residual (n floats, see the top); NULL for
 * another codec. */
const float *gm_diloco_residual(const struct gm_diloco *d);

/* Floats all-reduced per sync (n) and syncs completed (overlapped: deltas folded in). */
size_t gm_diloco_payload_floats(const struct gm_diloco *d);
uint64_t gm_diloco_syncs(const struct gm_diloco *d);

#endif
