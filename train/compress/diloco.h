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
 * Overlapped rounds (gm_diloco_overlap_*: the outer update one round late, with eager
 * starts, after Streaming DiLoCo and "Eager updates for overlapped communication and
 * computation in DiLoCo", Kale et al. 2025): at the boundary of round r every rank
 *   1. takes its own delta of round r, d[r] = start - params (start: where round r began),
 *   2. folds the mean delta D[r-1] of the round before (all-reduced meanwhile) into the outer
 *      state: m = mu m + D[r-1];  anchor -= lr (D[r-1] + mu m)   (the update above),
 *   3. starts round r+1 at the outer step its own delta would give, uncommitted:
 *      m' = mu m + d[r];  params = start = anchor - lr (d[r] + mu m')   (plain: lr m'),
 *   4. keeps d[r] to be all-reduced while round r+1 computes (gm_diloco_overlap_start, on the
 *      loop thread), to be folded in at boundary r+1.
 * The anchor (the outer parameters) takes only all-reduced values, so it is bitwise identical
 * on every rank at every boundary; the params differ by each rank's own last round, as they
 * do mid-round in the blocking rounds, until gm_diloco_overlap_flush folds the last D in and
 * sets params = anchor (the run's end, leaving DiLoCo).  With one rank, d = D and the rounds
 * are the blocking ones up to the fp16 rounding of the wire.  The first boundary has no D[-1].
 * Between gm_diloco_overlap_start and its callback only the all-reduce touches the delta; it
 * never touches the anchor (so the trainer thread may hash the anchor meanwhile).
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
    enum gm_codec codec; /* wire codec of the delta */
    enum gm_coll_algo algo;
};

struct gm_diloco;

/* h 16, lr 0.7, momentum 0.9, Nesterov, fp16, AUTO. */
void gm_diloco_config_default(struct gm_diloco_config *cfg);
/* Copies params (n floats) as the first anchor.  -EINVAL, -ENOMEM. */
GM_MUST_CHECK int gm_diloco_new(const struct gm_diloco_config *cfg, const float *params, size_t n,
                                struct gm_diloco **out);
void gm_diloco_free(struct gm_diloco *d);

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

/* At a round boundary (trainer thread; no op in flight): steps 1-3 above.  -EBUSY while the
 * all-reduce of the last round runs, -EPROTO when it was started but never completed (its
 * error went to the caller), -EINVAL for params NULL. */
GM_MUST_CHECK int gm_diloco_overlap_boundary(struct gm_diloco *d, float *params);
/* Starts the all-reduce (mean) of the delta the last boundary kept; cb(c, status, arg) once
 * it is reduced (it then waits to be folded in).  -EPROTO when there is none, -EBUSY. */
GM_MUST_CHECK int gm_diloco_overlap_start(struct gm_diloco *d, struct gm_coll *c, uint64_t step,
                                          gm_coll_done_cb cb, void *arg);
/* Folds a reduced delta in (step 1 alone), then params = anchor.  A delta not yet reduced
 * (never started, or failed) is dropped: -EPROTO, params = anchor all the same.  -EBUSY
 * while it runs.  With nothing pending: params = anchor, 0. */
GM_MUST_CHECK int gm_diloco_overlap_flush(struct gm_diloco *d, float *params);
/* The reduced delta waiting to be folded in at the next boundary (n floats, identical on
 * every rank), or NULL: what a checkpoint of an overlapped run holds besides the anchor and
 * the momentum. */
const float *gm_diloco_pending(const struct gm_diloco *d);
/* Sets it (a checkpoint's): -EINVAL for another n, -EBUSY while an op runs. */
GM_MUST_CHECK int gm_diloco_pending_set(struct gm_diloco *d, const float *delta, size_t n);
/* Where this rank's current overlapped round began (n floats; the params at creation until
 * the first boundary), and setting it (a checkpoint's, with the params it was written with):
 * -EINVAL for another n, -EBUSY while an op runs.  gm_diloco_state_set leaves it alone. */
const float *gm_diloco_round_start(const struct gm_diloco *d);
GM_MUST_CHECK int gm_diloco_round_start_set(struct gm_diloco *d, const float *start, size_t n);

/* Floats all-reduced per sync (n) and syncs completed (overlapped: deltas folded in). */
size_t gm_diloco_payload_floats(const struct gm_diloco *d);
uint64_t gm_diloco_syncs(const struct gm_diloco *d);

#endif
