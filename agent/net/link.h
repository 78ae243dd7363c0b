/*
 * agent/net/link.h - one TLS connection to a peer over libuv TCP.
 *
 * Layers: uv read_cb -> crypto/tls (memory BIOs) -> agent/frame parser ->
 * ops->on_frame (the owner's dispatch table).  Writes go down the same path;
 * the TLS write BIO is flushed to uv_write after every TLS call.
 *
 * Sending: control frames (gm_link_send, copied) sit in a priority queue;
 * bulk payloads (gm_link_send_bulk, borrowed until their done callback) are
 * cut into GM_LINK_CHUNK chunks (GM_FRAME_F_MORE on all but the last), and
 * the control queue is served before every chunk.  At most GM_LINK_HIGH_WATER
 * bytes of ciphertext wait in libuv's write queue, so a control frame waits
 * behind at most that much bulk.  When the write queue passes
 * GM_LINK_READ_STOP (a peer that sends but does not read) the link stops
 * reading until it drains.  Bulk senders are told by on_writable when the
 * bulk queue empties.
 *
 * A slow link (a tunnel) gets a lower bound with gm_link_set_high_water, which also caps the
 * unsent bytes the kernel holds (TCP_NOTSENT_LOWAT) and cuts bulk into smaller chunks:
 * otherwise a control frame (a raft heartbeat) waits behind seconds of bulk in libuv's queue
 * and the socket buffer (1 MiB is 8 s at 1 Mbit/s; 64 KiB, 16 KiB chunks and 32 KiB in the
 * kernel are under a second).
 *
 * Liveness: TCP keepalive, TCP_USER_TIMEOUT, and (when enabled) a PING every
 * interval; no frame for timeout closes the link with -ETIMEDOUT, or for the owner's shorter
 * silence deadline (gm_link_set_silence_ms: a peer that is alive at the TCP level and silent,
 * a SIGSTOPped process or a paused VM, logged event=link-silent).  A tick that comes more
 * than 1.5 s late means this process itself did not run: the silence is ours, so the clock
 * restarts, and round trips that span the stall are not sampled.  A link that has not
 * finished its handshake in GM_LINK_HANDSHAKE_MS is closed too.
 *
 * Round trips: the last GM_LINK_RTT_SAMPLES PING round trips are kept; gm_link_rtt_ms is
 * their median over the last 30 s (0: none that fresh), so one stale or stalled sample (a
 * peer that answers a PING after a freeze) never stands for the link.
 *
 * Closing (gm_link_close) is asynchronous: queued control frames are sent,
 * then close_notify, then the TCP write side is shut down; on_close runs
 * once, from the handles' close callbacks, after which the link is freed.
 * Loop thread only.
 */
#ifndef GM_AGENT_NET_LINK_H
#define GM_AGENT_NET_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agent/net/frame.h"
#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/tls.h"

#define GM_LINK_CHUNK (256u << 10)
#define GM_LINK_HIGH_WATER (1u << 20)
#define GM_LINK_SLOW_HIGH_WATER (64u << 10) /* tunnels and WANs: 0.5 s at 1 Mbit/s */
#define GM_LINK_READ_STOP (8u << 20)
#define GM_LINK_HEAD_MAX 256u       /* gm_link_send_bulk2's head */
#define GM_LINK_CTRL_MAX (4u << 20) /* queued control bytes before sends fail */
#define GM_LINK_HANDSHAKE_MS 10000
#define GM_LINK_LINGER_MS 2000 /* a closing link waits this long for the peer's EOF */
#define GM_LINK_USER_TIMEOUT_MS 30000
#define GM_LINK_RTT_SAMPLES 16

struct gm_link;

struct gm_link_ops {
    /* Handshake done; a non-zero return closes the link with it. */
    int (*on_up)(struct gm_link *l);
    /* One frame; a non-zero return closes the link with it. */
    int (*on_frame)(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload);
    /* The bulk queue emptied (optional). */
    void (*on_writable)(struct gm_link *l);
    /* Last call; l is freed when it returns.  err: why it closed (0: asked to). */
    void (*on_close)(struct gm_link *l, int err);
};

struct gm_link_opts {
    enum gm_tls_role role;
    uint32_t max_frame;  /* 0: GM_FRAME_MAX_DEFAULT */
    int sockbuf;         /* SO_SNDBUF/SO_RCVBUF bytes; 0: kernel autotuning */
    unsigned ping_ms;    /* 0: no keepalive pings */
    unsigned timeout_ms; /* idle timeout when pinging */
};

typedef void (*gm_link_done_fn)(void *arg, int err);

/* Creates a link with a new TLS session from ctx (borrowed, must outlive it). */
GM_MUST_CHECK int gm_link_new(uv_loop_t *loop, struct gm_tls_ctx *ctx,
                              const struct gm_link_opts *opts, const struct gm_link_ops *ops,
                              void *data, struct gm_link **out);
/* Frees a link that was never started (neither accept nor connect called/succeeded). */
void gm_link_free_unstarted(struct gm_link *l);
/* On an error return the link is unstarted: free it with gm_link_free_unstarted. */
GM_MUST_CHECK int gm_link_accept(struct gm_link *l, uv_stream_t *server);
/* Errors after this returns 0 arrive through on_close. */
GM_MUST_CHECK int gm_link_connect(struct gm_link *l, const struct sockaddr *addr);

/* Queues one control frame (payload copied).  -ENOBUFS past GM_LINK_CTRL_MAX,
 * -EPIPE when closing. */
GM_MUST_CHECK int gm_link_send(struct gm_link *l, uint16_t type, uint64_t req, const void *payload,
                               size_t len);
/* Caps the link's bulk frames (TRAIN, BULK, PROBE, CKPT_DATA: everything sent with
 * gm_link_send_bulk*) at bytes_per_s of frame bytes (0: no cap), with a token bucket
 * (common/tbucket.h) holding 50 ms of the rate; a capped link cuts bulk into frames of at least
 * 16 KiB as the bucket allows and waits on a timer in between.  Control frames are never held
 * back (they are small, and PING must not wait), but their bytes are taken from the bucket too
 * (gm_tbucket_charge): the bulk after them waits, so the cap holds for all the link sends.
 * Loop thread. */
void gm_link_set_rate(struct gm_link *l, double bytes_per_s);
double gm_link_rate(const struct gm_link *l);
/* Ciphertext bytes that may wait above the kernel (default GM_LINK_HIGH_WATER), half of it
 * as the socket's TCP_NOTSENT_LOWAT, and a quarter of it (16 KiB to GM_LINK_CHUNK) as the bulk
 * chunk: how long a control frame can wait behind bulk. */
void gm_link_set_high_water(struct gm_link *l, size_t bytes);
/* Tests and fuzzing only: queues bytes as-is (no frame header) into the TLS stream. */
GM_MUST_CHECK int gm_link_send_raw(struct gm_link *l, const void *bytes, size_t len);
/* Queues a bulk payload (borrowed until done(arg, err) runs; never called
 * from inside this function). */
GM_MUST_CHECK int gm_link_send_bulk(struct gm_link *l, uint16_t type, uint64_t req,
                                    const void *data, size_t len, gm_link_done_fn done, void *arg);
/* The same with the payload head || data: head (at most GM_LINK_HEAD_MAX
 * bytes, a message header) and data are both borrowed until done runs, so a
 * sender can put its own header before a slice of a larger buffer without
 * copying the slice. */
GM_MUST_CHECK int gm_link_send_bulk2(struct gm_link *l, uint16_t type, uint64_t req,
                                     const void *head, size_t head_len, const void *data,
                                     size_t len, gm_link_done_fn done, void *arg);
/* Sends ERROR {err, message} and closes with err. */
void gm_link_fail(struct gm_link *l, int err, const char *message);
void gm_link_close(struct gm_link *l, int err);
/* gm_link_close, waiting at most linger_ms (not GM_LINK_LINGER_MS) for the peer to drain
 * before the handles close: for a daemon that is shutting down. */
void gm_link_close_within(struct gm_link *l, int err, unsigned linger_ms);
/* Owner backpressure: pause stops reading the socket (frames already
 * decrypted are still delivered), 0 resumes.  While paused the idle timeout
 * does not run: the silence is ours. */
void gm_link_pause_read(struct gm_link *l, int pause);
/* Sends a PING now (RTT and clock skew come back with the PONG). */
void gm_link_ping(struct gm_link *l);
void gm_link_pong(struct gm_link *l, const uint8_t *payload, size_t len);
void gm_link_rtt_sample(struct gm_link *l, const uint8_t *payload, size_t len);

void *gm_link_data(const struct gm_link *l);
void gm_link_set_data(struct gm_link *l, void *data);
struct gm_tls *gm_link_tls(const struct gm_link *l);
const char *gm_link_peer_addr(const struct gm_link *l);
uint32_t gm_link_state(const struct gm_link *l);
void gm_link_set_state(struct gm_link *l, uint32_t state);
int gm_link_is_closing(const struct gm_link *l);
/* The median of the fresh round-trip samples (0: none), and their maximum. */
double gm_link_rtt_ms(const struct gm_link *l);
double gm_link_rtt_max_ms(const struct gm_link *l);
unsigned gm_link_rtt_samples(const struct gm_link *l); /* how many fresh samples */
/* Milliseconds since the last bytes came from the peer (0 while not up or paused). */
unsigned gm_link_quiet_ms(const struct gm_link *l);
/* The silence deadline: no bytes for ms closes the link (-ETIMEDOUT, event=link-silent); 0
 * leaves only opts.timeout_ms; never longer than opts.timeout_ms.  gm_link_silence_ms: the
 * one in force. */
void gm_link_set_silence_ms(struct gm_link *l, unsigned ms);
unsigned gm_link_silence_ms(const struct gm_link *l);
/* Whether the peer has been quiet for longer than a live one ever is: GM_LINK_QUIET_MS and half
 * the silence deadline (PINGs go every 500 ms both ways; a tunnel's PONG may wait behind its
 * bulk for a while).  Such a link is still up, but doubtful: its deadline closes it within
 * seconds unless bytes come.  NULL: false. */
#define GM_LINK_QUIET_MS 1200
bool gm_link_is_quiet(const struct gm_link *l);
/* Peer's wall clock minus ours, from the last PONG; 0 when none came yet. */
int gm_link_skew_ms(const struct gm_link *l, double *skew);
/* The TCP socket (for getsockname / path MTU), -1 before connect. */
int gm_link_fd(const struct gm_link *l);
size_t gm_link_bulk_queued(const struct gm_link *l);
uint64_t gm_link_bytes_sent(const struct gm_link *l);
uint64_t gm_link_bytes_received(const struct gm_link *l);

#endif
