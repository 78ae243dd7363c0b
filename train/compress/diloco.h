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
/* Floats all-reduced per sync (n) and syncs completed. */
size_t gm_diloco_payload_floats(const struct gm_diloco *d);
uint64_t gm_diloco_syncs(const struct gm_diloco *d);

#endif
