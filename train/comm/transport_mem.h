/*
 * train/comm/transport_mem.h - in-memory transport: N ranks in one process.
 *
 * For unit tests and `gradmesh train --local --simulate-workers N`.  One
 * gm_memnet holds N endpoints (struct gm_transport, see train/comm/transport.h) and
 * a FIFO per ordered pair of ranks.  Nothing happens until the owner drives it:
 * gm_memnet_poll() performs exactly one unit of progress (one callback) and
 * gm_memnet_run() polls until nothing is left to do.  The order of progress is
 * fixed (completion events FIFO, then link errors, then deliveries round-robin
 * over links), so a run is deterministic.
 *
 * send() copies the message into the link's queue (so the sender's buffer is
 * released at the next poll, as a socket write would) and the receiver gets the
 * copy lent for the duration of its recv callback.  Tests can break a link
 * (gm_memnet_fail_link) or install a hook that sees, edits, truncates or kills
 * every message before it is delivered.  Single-threaded.
 */
#ifndef GM_TRAIN_COMM_TRANSPORT_MEM_H
#define GM_TRAIN_COMM_TRANSPORT_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/comm/transport.h"

struct gm_memnet;

enum gm_memnet_verdict {
    GM_MEMNET_DELIVER = 0,   /* deliver the (possibly edited) message */
    GM_MEMNET_FAIL_LINK = 1, /* drop it and break the link both ways */
};

/* Sees every message before delivery; may edit bytes in place and shrink *len. */
typedef enum gm_memnet_verdict (*gm_memnet_hook)(void *arg, int src, int dst, unsigned char *msg,
                                                 size_t *len);

/* NULL on out-of-memory or world < 1. */
struct gm_memnet *gm_memnet_new(int world);
void gm_memnet_free(struct gm_memnet *n);

/* Endpoint of rank (borrowed, lives as long as n). */
struct gm_transport *gm_memnet_transport(struct gm_memnet *n, int rank);

/* One unit of progress: returns 1 if a callback ran, 0 if idle. */
int gm_memnet_poll(struct gm_memnet *n);
/* Polls until idle; returns the number of callbacks run. */
uint64_t gm_memnet_run(struct gm_memnet *n);

/* Breaks the link a<->b: queued messages are dropped, armed recvs fail with
 * -ECONNRESET at the next poll, later sends/recvs return -ECONNRESET. */
void gm_memnet_fail_link(struct gm_memnet *n, int a, int b);
void gm_memnet_set_hook(struct gm_memnet *n, gm_memnet_hook hook, void *arg);

/* Messages and bytes delivered so far (all links). */
uint64_t gm_memnet_delivered_msgs(const struct gm_memnet *n);
uint64_t gm_memnet_delivered_bytes(const struct gm_memnet *n);
/* Messages still queued (sent, not yet received). */
uint64_t gm_memnet_queued_msgs(const struct gm_memnet *n);

#endif
