/*
 * agent/cluster/chiefnet.h - raft's transport over the member links: a
 * `struct raft_uv_transport` (raft/uv.h) whose connections are channels
 * inside the mutual-TLS links, never a port of their own.
 *
 * Why raft_uv_transport and not a whole raft_io: raft's libuv backend
 * (raft_uv_init) already does the hard, well-tested part - the on-disk log
 * segments, snapshots, their fsyncs and recovery - and asks of a transport
 * only "give me a byte stream to server N" and "here is a stream from server
 * N".  A full raft_io would re-implement that storage.
 *
 * How a channel works (the way dqlite proxies raft over its own connections,
 * and go-dqlite over TLS): raft gets one end of a Unix socketpair as a
 * uv_pipe_t and speaks its own wire format into it; we read the other end
 * and carry the bytes in GM_MSG_RAFT frames of the link to that node, and
 * write what arrives from the peer into it.  raft_uv connections are
 * one-way (a client that sends, a server that receives), so a channel is the
 * connector's: request id = the channel id the connector chose, payload =
 * one op byte then data:
 *   0 DATA   connector -> acceptor: raft bytes; the first one opens the
 *            channel on the acceptor, which hands raft a new stream
 *   1 CLOSE  connector -> acceptor: the connector's raft closed it
 *   2 CLOSE  acceptor -> connector: refused, or the acceptor's raft closed it
 * A link going down closes its channels (raft sees EOF and reconnects when
 * it wants to, through a link that is up again).
 *
 * Who may talk raft: the peer's node id comes from its certificate (the
 * link is mutual TLS), and raft's server id is derived from it
 * (gm_chiefnet_raft_id), so a member cannot speak as another.  Before a
 * channel opens, and again on every gm_chiefnet_recheck, env.allowed() is
 * asked; a refused channel (a revoked node, a node not in the raft
 * configuration) is closed, logged with the reason, and its votes and
 * appends never reach raft.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_CLUSTER_CHIEFNET_H
#define GM_AGENT_CLUSTER_CHIEFNET_H

#include <stddef.h>
#include <stdint.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "agent/net/frame.h"
#include "common/err.h"

#define GM_CHIEFNET_CHUNK (64u << 10)     /* raft bytes per frame */
#define GM_CHIEFNET_QUEUE_MAX (32u << 20) /* bytes waiting for raft to read, per channel */

struct gm_link;
struct gm_chiefnet;

struct gm_chiefnet_env {
    uv_loop_t *loop;
    /* The up member link to node, or NULL. */
    struct gm_link *(*link_to)(void *agent, const char *node);
    /* 0 when node may speak raft to this one, else an error with why (a refusal). */
    int (*allowed)(void *agent, const char *node, char *why, size_t cap);
    void *agent;
};

/* raft's server id of a node: 64 bits of SHA-1 of its id (raft_digest), never 0. */
raft_id gm_chiefnet_raft_id(const char *node);

GM_MUST_CHECK int gm_chiefnet_new(const struct gm_chiefnet_env *env, struct gm_chiefnet **out);
/* The transport to hand to raft_uv_init (it lives as long as n). */
struct raft_uv_transport *gm_chiefnet_transport(struct gm_chiefnet *n);
/* Frees n: only after raft closed the transport, or if it never started. */
void gm_chiefnet_free(struct gm_chiefnet *n);

/* A GM_MSG_RAFT frame from node's link; negative: a malformed frame (close the link). */
GM_MUST_CHECK int gm_chiefnet_on_frame(struct gm_chiefnet *n, const char *node,
                                       const struct gm_frame_hdr *h, const uint8_t *p);
/* node's link went down (or was closed): its channels close. */
void gm_chiefnet_link_down(struct gm_chiefnet *n, const char *node);
/* Asks env.allowed() again for every open channel; closes the refused ones. */
void gm_chiefnet_recheck(struct gm_chiefnet *n);
/* Channels open now (tests). */
size_t gm_chiefnet_channels(const struct gm_chiefnet *n);

#endif
