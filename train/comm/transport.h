/*
 * train/comm/transport.h - the message transport that collectives run over.
 *
 * train/ knows nothing of sockets: a collective talks to its peers only through
 * this vtable.  agent/ implements it over libuv TLS links; train/comm/transport_mem.c
 * implements it in memory for tests and `--simulate-workers`.
 *
 * Contract (every implementation keeps it; the collectives rely on it):
 *  - Event-loop driven, no threads of its own.  Every function is called on the
 *    loop thread and returns at once.  Callbacks run later from the loop, never
 *    from inside the call that registered them (no re-entrancy).
 *  - A call that returns a negative error never invokes its callback; one that
 *    returns 0 invokes it exactly once (unless the recv is stopped first).
 *  - Messages are whole (framing is the transport's job) and arrive in the order
 *    sent, per ordered pair of ranks.  Nothing is reordered across peers' queues.
 *  - send(): the message is head || body (two pieces, so that a collective can
 *    send a small header beside a slice of the caller's tensor without copying
 *    the slice; body may be NULL with body_len 0).  Both are BORROWED until
 *    send_cb runs; send_cb means "the transport no longer needs them" (written
 *    to the socket, encrypted or copied), not "the peer read it".  On a broken
 *    link send_cb gets a negative status.
 *  - recv(): one-shot pull.  At most one recv may be armed per peer; it delivers
 *    the next message from that peer (messages that arrive with no recv armed wait
 *    in the transport, which may stop reading the socket: that is the backpressure)
 *    and then disarms.  The message buffer is LENT for the duration of recv_cb
 *    only.  A broken link completes an armed recv with a negative status and
 *    buf == NULL.  recv_stop() disarms synchronously: no callback follows.
 *  - post(): run cb once on a later loop iteration (libuv: an idle/check handle).
 *    Used where an operation would otherwise complete synchronously.
 */
#ifndef GM_TRAIN_COMM_TRANSPORT_H
#define GM_TRAIN_COMM_TRANSPORT_H

#include <stddef.h>

#include "common/err.h"

struct gm_transport;

typedef void (*gm_transport_send_cb)(struct gm_transport *t, int peer, int status, void *arg);
typedef void (*gm_transport_recv_cb)(struct gm_transport *t, int peer, int status, const void *buf,
                                     size_t len, void *arg);
typedef void (*gm_transport_post_cb)(struct gm_transport *t, void *arg);

struct gm_transport_ops {
    int (*send)(struct gm_transport *t, int peer, const void *head, size_t head_len,
                const void *body, size_t body_len, gm_transport_send_cb cb, void *arg);
    int (*recv)(struct gm_transport *t, int peer, gm_transport_recv_cb cb, void *arg);
    void (*recv_stop)(struct gm_transport *t, int peer);
    int (*post)(struct gm_transport *t, gm_transport_post_cb cb, void *arg);
};

/* Embedded in (or pointed to by) the implementation's own struct. */
struct gm_transport {
    const struct gm_transport_ops *ops; /* borrowed, static */
    int rank;                           /* this endpoint's rank */
    int world;                          /* ranks are 0 .. world-1 */
    void *impl;                         /* the implementation's state (borrowed) */
};

GM_MUST_CHECK static inline int gm_transport_send(struct gm_transport *t, int peer, const void *buf,
                                                  size_t len, gm_transport_send_cb cb, void *arg)
{
    return t->ops->send(t, peer, buf, len, NULL, 0, cb, arg);
}

/* One message made of two borrowed pieces, head then body. */
GM_MUST_CHECK static inline int gm_transport_send2(struct gm_transport *t, int peer,
                                                   const void *head, size_t head_len,
                                                   const void *body, size_t body_len,
                                                   gm_transport_send_cb cb, void *arg)
{
    return t->ops->send(t, peer, head, head_len, body, body_len, cb, arg);
}

GM_MUST_CHECK static inline int gm_transport_recv(struct gm_transport *t, int peer,
                                                  gm_transport_recv_cb cb, void *arg)
{
    return t->ops->recv(t, peer, cb, arg);
}

static inline void gm_transport_recv_stop(struct gm_transport *t, int peer)
{
    t->ops->recv_stop(t, peer);
}

GM_MUST_CHECK static inline int gm_transport_post(struct gm_transport *t, gm_transport_post_cb cb,
                                                  void *arg)
{
    return t->ops->post(t, cb, arg);
}

#endif
