/*
 * train/comm/bucket.h - hands gradients to the collective bucket by bucket while
 * backward is still running, so communication overlaps compute.
 *
 * Layers are contiguous in the flat gradient buffer (layer i ends at
 * layer_end[i] floats).  Buckets group whole layers in reverse order (what
 * backward produces first goes first), each >= bucket_bytes (see
 * gm_coll_bucket_bytes(): few large buckets on high-RTT links).  Per step:
 * gm_bucketer_begin(), then gm_bucketer_ready(layer) as each layer's gradient
 * is final (any order); a bucket's all-reduce starts when its last layer is
 * ready, and the step's callback runs once every bucket is reduced (status:
 * the first error).  The gm_coll queue runs buckets in the order they became
 * ready, so every rank must release layers in the same order.
 * If gm_bucketer_ready() returns an error the step is abandoned: its callback
 * is not called; buckets already in flight finish silently.  Loop thread.
 */
#ifndef GM_TRAIN_COMM_BUCKET_H
#define GM_TRAIN_COMM_BUCKET_H

#include <stddef.h>

#include "common/err.h"
#include "train/comm/collective.h"

struct gm_bucketer;

GM_MUST_CHECK int gm_bucketer_new(const size_t *layer_end, size_t nlayers, size_t bucket_bytes,
                                  struct gm_bucketer **out);
void gm_bucketer_free(struct gm_bucketer *b);

size_t gm_bucketer_count(const struct gm_bucketer *b);
void gm_bucketer_range(const struct gm_bucketer *b, size_t i, size_t *off, size_t *len);

/* Starts a step over grad (borrowed until cb).  -EBUSY if one is running. */
GM_MUST_CHECK int gm_bucketer_begin(struct gm_bucketer *b, struct gm_coll *c, float *grad,
                                    const struct gm_coll_opts *o, gm_coll_done_cb cb, void *arg);
/* Layer's gradient is final.  -EINVAL for a bad or repeated layer. */
GM_MUST_CHECK int gm_bucketer_ready(struct gm_bucketer *b, size_t layer);

#endif
