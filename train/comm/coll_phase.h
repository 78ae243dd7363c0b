/*
 * train/comm/coll_phase.h - the collective's phase engines (ring; direct,
 * reduce and broadcast "star") and sending helpers, for collective.c only;
 * not a public interface.  See coll_state.h for the layering.
 */
#ifndef GM_TRAIN_COMM_COLL_PHASE_H
#define GM_TRAIN_COMM_COLL_PHASE_H

#include <stddef.h>

#include "train/comm/coll_state.h"

void gm_coll_account(struct gm_coll_traffic *t, size_t payload, size_t frame);
/* false when x[0..n) holds an Inf or a NaN */
bool gm_coll_all_finite(const float *x, size_t n);
struct wire *gm_coll_wire_new(struct gm_coll *c, size_t payload);
/* Sends w (freed on error or in c->on_sent); counts it. */
int gm_coll_wire_send(struct gm_coll *c, int peer, struct wire *w, struct gm_coll_hdr *h);
void gm_coll_base_hdr(const struct gm_coll *c, const struct op *op, struct gm_coll_hdr *h);
void gm_coll_phase_release(struct phase *p);
/* Starts op->ph[op->cur]; may mark it done at once. */
int gm_coll_phase_start(struct gm_coll *c, struct op *op);
/* A validated DATA message from member `from` of the current phase. */
int gm_coll_phase_on_msg(struct gm_coll *c, struct op *op, struct phase *p, int from,
                         const struct gm_coll_hdr *h, const unsigned char *payload);

#endif
