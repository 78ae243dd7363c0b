/*
 * agent/jobs/xport.h - train/comm/transport.h over the member links: the training
 * channel.
 *
 * One gm_xport per job group generation (a group is re-formed as a new xport
 * when membership changes).  Rank r's messages to peer p travel as
 * GM_MSG_TRAIN frames on the member link to p, sent with gm_link_send_bulk:
 * the link cuts a message into GM_LINK_CHUNK frames (GM_FRAME_F_MORE on all
 * but the last) and serves its control queue before every chunk, so PING and
 * gossip never wait behind more than one chunk of a tensor.  The frame's
 * request id is (generation << 32 | message sequence number), so the owner can
 * route a frame to the right generation before it reaches the xport, and the
 * xport checks that every message from a peer carries the next sequence number.
 *
 * Receiving (gm_xport_on_frame, called by the owner's frame dispatch):
 * chunks are reassembled per peer (at most GM_XPORT_MSG_MAX bytes); a whole
 * message goes straight to the armed recv (zero copy when it came in one
 * frame) or waits in the peer's queue.  While a peer's queue holds more than
 * the queue limit its link stops reading (gm_link_pause_read): an unarmed recv
 * is the backpressure.  Pausing stops the whole link (PINGs, raft, acks too) and a
 * peer whose data we do not read gives up on the TCP connection after
 * GM_LINK_USER_TIMEOUT_MS, so the limit must cover what a correct peer sends
 * while it waits for us: a peer is at most one collective ahead of us (every op
 * but rank 0's broadcast needs our data before it can finish), plus the start of
 * its next one.  The owner sets the limit from the largest op of the group
 * (gm_xport_set_queue_max: 2 x its bytes + GM_XPORT_QUEUE_MAX, which is also
 * the floor); a peer that passes it is broken or hostile, and its pause is
 * logged (event=xport-read-paused).  That limit is what bounds the queue's
 * memory (issue 21: a 16 MiB limit paused the LAN link of a peer waiting for a
 * leader whose op queue was busy with a slow tunnel's broadcast, and it timed
 * out after 30 s).  A chunk with the wrong sequence number,
 * a message over the maximum, or a frame that interleaves two messages is
 * GM_ERR_PROTO: the owner closes that link with an ERROR frame.
 *
 * A broken link (gm_xport_link_down) completes the peer's armed recv with the
 * error and makes later sends and recvs to it fail at once; sends already
 * handed to the link complete with an error when the link closes (link.c's
 * bulk done callback).  gm_xport_fail_all does that for every peer (the group
 * is being re-formed).
 *
 * Lifetime: gm_xport_close() is asynchronous (an idle handle serves post());
 * it waits until no send is outstanding in any link, then frees.  Links are
 * borrowed; the owner detaches a link (gm_xport_link_down) before it is
 * freed.  Loop thread only.
 */
#ifndef GM_AGENT_JOBS_XPORT_H
#define GM_AGENT_JOBS_XPORT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agent/net/frame.h"
#include "common/err.h"
#include "train/comm/transport.h"

struct gm_link;
struct gm_xport;

/* gm_coll chunk size on the training channel: one message fits one link frame */
#define GM_XPORT_CHUNK ((256u << 10) - 64)
#define GM_XPORT_MSG_MAX (64u << 20)   /* bytes in one training message at most */
#define GM_XPORT_QUEUE_MAX (16u << 20) /* queued bytes per peer before its link pauses, at least */

struct gm_xport_stats {
    uint64_t bytes_sent, bytes_recv; /* training messages' bytes (no frame headers) */
    uint64_t msgs_sent, msgs_recv;
    uint64_t queued_bytes; /* whole messages waiting for a recv (now) */
    uint64_t queued_peak;  /* the most queued_bytes has been */
    int read_paused;       /* 1 while the peer's link is paused by that queue */
};

/* world >= 1, 0 <= rank < world.  Every peer starts with no link: sends and
 * recvs to it fail with -ENOTCONN until gm_xport_set_link. */
GM_MUST_CHECK int gm_xport_new(uv_loop_t *loop, uint32_t generation, int rank, int world,
                               struct gm_xport **out);
/* A peer's queued bytes before its link pauses (at least GM_XPORT_QUEUE_MAX, the default);
 * raising it resumes a paused link whose queue is under half the new limit. */
void gm_xport_set_queue_max(struct gm_xport *x, size_t bytes);
size_t gm_xport_queue_max(const struct gm_xport *x);
/* The queue limit for a group whose largest collective moves op_bytes (one rank's buffer,
 * fp32) to a peer: one op and the start of the next, plus GM_XPORT_QUEUE_MAX of small ops
 * and framing. */
size_t gm_xport_queue_max_for(size_t op_bytes);
/* Attaches the member link that reaches peer (borrowed). */
void gm_xport_set_link(struct gm_xport *x, int peer, struct gm_link *l);
struct gm_link *gm_xport_link(const struct gm_xport *x, int peer);
struct gm_transport *gm_xport_transport(struct gm_xport *x);
uint32_t gm_xport_generation(const struct gm_xport *x);

/* The link to peer delivered a GM_MSG_TRAIN frame of this generation.
 * 0, or GM_ERR_PROTO / -ENOMEM: the caller closes that link. */
GM_MUST_CHECK int gm_xport_on_frame(struct gm_xport *x, int peer, const struct gm_frame_hdr *h,
                                    const uint8_t *payload);
/* The link to peer is gone (err < 0): detach it, fail its armed recv. */
void gm_xport_link_down(struct gm_xport *x, int peer, int err);
/* Every peer down with err (the group is being re-formed). */
void gm_xport_fail_all(struct gm_xport *x, int err);

void gm_xport_stats(const struct gm_xport *x, int peer, struct gm_xport_stats *s);

/* When the peers' data first arrived, for timing one collective op without the time spent
 * waiting for a late peer: gm_xport_rx_mark at the op's start; gm_xport_rx_first then gives the
 * monotonic time (ns) of the first TRAIN frame received since (the mark's own time when a
 * message was already queued or partly received), 0 while none has come. */
void gm_xport_rx_mark(struct gm_xport *x);
uint64_t gm_xport_rx_first(const struct gm_xport *x);
/* The same per peer, the latest of them: when the last peer that sent anything since the mark
 * sent its first frame (0: none).  A sync whose peers came late waited until then for them. */
uint64_t gm_xport_rx_last_first(const struct gm_xport *x);

/* Frees x once its outstanding sends have completed; NULL-safe.  No callback
 * of x runs after this call. */
void gm_xport_close(struct gm_xport *x);

/* The frame request id of message seq in generation gen, and back. */
static inline uint64_t gm_xport_req(uint32_t gen, uint32_t seq)
{
    return (uint64_t)gen << 32 | seq;
}

static inline uint32_t gm_xport_req_generation(uint64_t req)
{
    return (uint32_t)(req >> 32);
}

#endif
