/*
 * train/comm/collective.h - all-reduce, broadcast, barrier and the parameter-hash
 * check over a gm_transport (train/comm/transport.h), for synchronous data-parallel
 * training.  Runs on the loop thread; event-driven (no blocking, no threads).
 *
 * Model.  One gm_coll per rank per group generation.  Operations are started
 * with *_start() and finish through their callback, which always runs later
 * from the loop (never inside *_start()).  Operations are queued and run one at
 * a time in call order; every rank must start the same operations in the same
 * order (with the same algorithm, codec, size and step), or they fail with
 * GM_ERR_MISMATCH.  The buffer is BORROWED from start until the callback.
 *
 * Algorithms (all reduce in fp32, whatever the wire codec):
 *  - RING: reduce-scatter then all-gather over the ranks in rank order; each
 *    segment is cut into chunks of ~chunk_bytes on the wire and every chunk is
 *    forwarded as soon as it is reduced, so receive, reduce and send overlap.
 *    Segment j is always summed starting at rank j around the ring, and the
 *    all-gather forwards the owner's encoded bytes unchanged, so every rank
 *    ends with identical bits.  Bytes sent per rank: 2S - seg(r+1) - seg(r+2)
 *    = 2(N-1)/N * S when N divides the element count (plus 56-byte headers).
 *  - DIRECT: every rank sends its (encoded) buffer to every other and sums all
 *    N contributions itself in rank order (identical bits everywhere: the same
 *    IEEE adds in the same order).  One round: for small payloads/worlds.
 *    Needs N * S bytes of scratch.
 *  - HIER: reduce inside each group (cfg.groups; LAN islands, or one group
 *    around a star VPN's hub) to its leader (the rank the group's label names
 *    when that rank is in the group, else its lowest rank) in fp32, all-reduce among leaders (ring,
 * or direct for two leaders and for q8) with the requested codec, broadcast fp32 inside each group.
 *  - AUTO: the cheapest under the alpha-beta model (train/comm/coll_plan.c) from
 *    cfg.links; all ranks must hold the same link table so they agree.
 * Codecs: fp32, or fp16/bf16 with the input pre-scaled by 1/N for MEAN
 * (overflow headroom); fp32 and q8 MEAN divide once, at the segment owner (DIRECT: every
 * rank, after its sum).  q8 (int8 blocks with an fp32 scale, codec.h) runs with any
 * algorithm; its chunks are whole blocks.  DIRECT sends each rank's encoding of its own
 * buffer unchanged, so a sender knows exactly what of its contribution the wire lost
 * (DiLoCo's 8-bit error feedback relies on it); the ring re-encodes partial sums.
 * Loss (opts.loss, q8 with DIRECT or HIER): n floats the op fills, before its callback, with
 * what the wire lost of this rank's contribution: DIRECT, its buffer minus the decoding of its
 * encoding; HIER, on a group's leader the same of the group's fp32 sum (the leaders' stage
 * runs DIRECT for q8, each leader's encoding of its group's sum sent unchanged), zeros on the
 * other members (their buffers travel in fp32) and on a leader alone (nothing encoded); a world
 * of one: zeros.  So the losses of all ranks add up to what the wire dropped of the sum.
 *
 * Errors (reported through the callback; the collective never completes with a
 * silently wrong sum): GM_ERR_MISMATCH (peer disagrees on generation, op
 * sequence, step, algorithm, codec or element count), GM_ERR_PROTO (chunk of
 * the wrong stage, offset, length), GM_ERR_NUMERIC (NaN/Inf in the result: seen
 * identically by every rank, as results are bitwise equal), GM_ERR_ABORTED (a
 * peer aborted), transport errors as returned.  On any error the rank sends
 * ABORT to every peer (so none waits forever), stops its receives, waits for
 * its outstanding sends and completes; the gm_coll is then broken (later and
 * queued operations fail with GM_ERR_ABORTED) and the caller re-forms the
 * group: new transport links/queues, new generation, new gm_coll.
 *
 * Accounting: bytes and messages sent/received per peer and per wire codec,
 * payload (encoded elements) separate from framing (message headers, ABORTs).
 */
#ifndef GM_TRAIN_COMM_COLLECTIVE_H
#define GM_TRAIN_COMM_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/comm/codec.h"
#include "train/comm/coll_wire.h"
#include "train/comm/transport.h"

struct gm_coll;

enum gm_coll_algo {
    GM_COLL_AUTO = 0,
    GM_COLL_RING = 1,
    GM_COLL_DIRECT = 2,
    GM_COLL_HIER = 3,
    GM_COLL_ALGO_COUNT = 4,
};

enum gm_coll_reduce {
    GM_COLL_SUM = 0,
    GM_COLL_MEAN = 1,
};

/* One directed link, as measured: latency (s) and throughput (bytes/s). */
struct gm_coll_link {
    double alpha_s;
    double bytes_per_s;
};

struct gm_coll_config {
    uint32_t generation; /* group generation, checked in every message */
    size_t chunk_bytes;  /* wire bytes per chunk; 0: 256 KiB */
    const int *groups;   /* world entries, group id per rank; NULL: one group (copied) */
    const struct gm_coll_link *links; /* world*world, [i*world+j] is i->j; NULL: uniform (copied) */
};

struct gm_coll_opts {
    enum gm_coll_algo algo;
    enum gm_codec codec; /* wire codec (HIER: between leaders) */
    enum gm_coll_reduce reduce;
    uint64_t step; /* training step, checked against every peer */
    float *loss;   /* q8, DIRECT or HIER: n floats, the wire's loss (above); NULL: none wanted */
};

struct gm_coll_traffic {
    uint64_t payload_bytes; /* encoded elements */
    uint64_t frame_bytes;   /* headers and control messages */
    uint64_t msgs;
};

typedef void (*gm_coll_done_cb)(struct gm_coll *c, int status, void *arg);

/* Returns NULL on out-of-memory or invalid arguments (checked with GM_ASSERT:
 * they are programmer errors).  t is borrowed and must outlive the gm_coll. */
struct gm_coll *gm_coll_new(struct gm_transport *t, const struct gm_coll_config *cfg);
/* NULL-safe.  The gm_coll must be idle (gm_coll_busy() false; run the loop
 * until it is) and this must not be called from inside one of its callbacks. */
void gm_coll_free(struct gm_coll *c);

int gm_coll_rank(const struct gm_coll *c);
int gm_coll_world(const struct gm_coll *c);
bool gm_coll_busy(const struct gm_coll *c);
/* Group leaders in the world (cfg.groups; 1 without groups): HIER's leaders' stage. */
int gm_coll_leaders(const struct gm_coll *c);
/* The algorithm an op with these options would run (AUTO resolved). */
enum gm_coll_algo gm_coll_resolve(const struct gm_coll *c, const struct gm_coll_opts *o, size_t n);

/* buf[0..n) = sum (or mean) over ranks.  -EINVAL on bad options (a loss with another codec
 * than q8, or with an algorithm other than DIRECT or HIER in a world of more than one),
 * GM_ERR_ABORTED if the gm_coll is broken; otherwise cb runs exactly once.  opts.loss, like
 * buf, is borrowed until cb. */
GM_MUST_CHECK int gm_coll_allreduce_start(struct gm_coll *c, float *buf, size_t n,
                                          const struct gm_coll_opts *o, gm_coll_done_cb cb,
                                          void *arg);
/* buf[0..n) of root is copied (fp32 bytes, pipelined chunks) to every rank. */
GM_MUST_CHECK int gm_coll_broadcast_start(struct gm_coll *c, float *buf, size_t n, int root,
                                          uint64_t step, gm_coll_done_cb cb, void *arg);
/* Completes on a rank once every rank has entered it. */
GM_MUST_CHECK int gm_coll_barrier_start(struct gm_coll *c, uint64_t step, gm_coll_done_cb cb,
                                        void *arg);
/* Completes with 0 on every rank if all ranks hold identical bytes in
 * buf[0..nbytes), GM_ERR_MISMATCH on every rank otherwise (all agree).  It
 * exchanges 64 bytes per rank (a 64-bit hash, split so sums stay exact). */
GM_MUST_CHECK int gm_coll_hashcheck_start(struct gm_coll *c, const void *buf, size_t nbytes,
                                          uint64_t step, gm_coll_done_cb cb, void *arg);

/* Traffic counters.  peer in [0, world); codec < GM_CODEC_COUNT. */
void gm_coll_traffic_peer(const struct gm_coll *c, int peer, struct gm_coll_traffic *sent,
                          struct gm_coll_traffic *recvd);
void gm_coll_traffic_codec(const struct gm_coll *c, enum gm_codec codec,
                           struct gm_coll_traffic *sent, struct gm_coll_traffic *recvd);
void gm_coll_traffic_total(const struct gm_coll *c, struct gm_coll_traffic *sent,
                           struct gm_coll_traffic *recvd);
void gm_coll_traffic_reset(struct gm_coll *c);

/* --- cost model (train/comm/coll_plan.c) ------------------------------------- */

/* Estimated seconds for an all-reduce of n fp32 elements with this codec;
 * links may be NULL (1 Gbit/s, 0.2 ms everywhere), groups may be NULL. */
double gm_coll_cost(enum gm_coll_algo algo, int world, const struct gm_coll_link *links,
                    const int *groups, size_t n, enum gm_codec codec);
/* The leader of rank r's group (see HIER above): the rank groups[r] when it carries that label
 * itself, else the lowest rank with it; 0 when groups is NULL. */
int gm_coll_group_leader(const int *groups, int world, int r);
/* The cheapest of RING, DIRECT, HIER (HIER only when groups split the world). */
enum gm_coll_algo gm_coll_choose(int world, const struct gm_coll_link *links, const int *groups,
                                 size_t n, enum gm_codec codec);
/* Bucket size for a link: large enough that latency is <= ~10% of the
 * transfer time, clamped to [256 KiB, 64 MiB]; few large buckets on high RTT. */
size_t gm_coll_bucket_bytes(const struct gm_coll_link *bottleneck);
/* Splits layers into buckets of >= bucket_bytes, in REVERSE layer order
 * (the order backward produces them).  layer_end[i] is the end offset (in
 * floats) of layer i in the flat buffer, layers contiguous from 0.  Writes
 * bucket i as [bucket_off[i], bucket_off[i] + bucket_len[i]); returns the count
 * (<= nlayers). */
size_t gm_coll_buckets(const size_t *layer_end, size_t nlayers, size_t bucket_bytes,
                       size_t *bucket_off, size_t *bucket_len);

#endif
