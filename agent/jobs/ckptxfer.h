/*
 * agent/jobs/ckptxfer.h - the checkpoint room: replicating checkpoint files to other members over
 * the member links, and knowing who holds which.
 *
 * Sending.  When rank 0 here commits a checkpoint (agent/jobs/job.h ckpt_written), the file is read
 * once and queued on the link to each other rank of the group as one CKPT_DATA bulk message
 * (GM_MSG_CKPT_DATA, cut by the link into GM_LINK_CHUNK frames, MORE on all but the last; the
 * request id numbers the transfer): a header (u32 big-endian length, then a JSON object
 * {key, step, sha256, bytes, keep, term}) followed by the file's bytes.  TLS authenticates every
 * frame; end to end, the receiver hashes what it writes and commits the file only when its
 * SHA-256 and length are the ones the header announced.
 *
 * Receiving.  Per peer, one transfer at a time (the link sends bulk messages one after the
 * other): the header is checked (key 16 hex digits, a step, 64 hex digits, bytes within
 * GM_CKPTX_FILE_MAX, keep >= 1) before anything is created; the bytes go to a temp file in
 * STATE_DIR/checkpoints/KEY/, then fsync, rename to step-NNNNNNNNNN.safetensors, fsync of the
 * directory, the .sha256 beside it (train/ckpt/ckpt.h's layout, so `checkpoint list`, export and
 * a resume here treat it like one written here), and the directory is pruned to keep.  Then a
 * CKPT_ACK control frame (JSON {key, step, sha256, ok, error?}) goes back.  A transfer that
 * breaks (link down, a bad chunk, a wrong hash) leaves no file under a final name.  A frame
 * out of order (a header that does not decode, a chunk of another request id in the middle of
 * one, more bytes than announced) closes the link with GM_ERR_PROTO.  A transfer this node
 * cannot store (a full disk: ENOSPC, EDQUOT; any write error) is answered at once with an ACK
 * that says why, its temp file removed, and the rest of its chunks swallowed: the link and the
 * job go on, and the sender knows this node holds no copy (gm_ckptx_ctl_list's not_held).  A
 * full disk is said as such: event=disk-full, gm_ckptx_disk (status, the metrics).
 *
 * Holders.  The sender records, per checkpoint (key, step, sha256, term), the nodes that hold
 * it: itself at once, each member whose ACK says ok; a receiver records the sender and itself
 * for each checkpoint it commits.  gm_ckptx_held() lists them, newest first;
 * gm_ckptx_set_on_held() registers a callback run each time a holder is added; the room
 * (gm_ckptroom_open) registers the commit rule: the chief records a checkpoint held by a
 * majority of the voters in the replicated state.  The last GM_CKPTX_HELD_MAX are kept.
 *
 * Choices: file writes on the loop thread, chunk by chunk (at most GM_LINK_CHUNK a write, one
 * fsync per file): checkpoints of the models trained today are a few MB; a model of hundreds of
 * MB would want libuv's threadpool here.  The sender reads the file on the loop thread too.
 * Loop thread only.
 */
#ifndef GM_AGENT_JOBS_CKPTXFER_H
#define GM_AGENT_JOBS_CKPTXFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agent/net/frame.h"
#include "common/err.h"
#include "crypto/identity.h"

#define GM_CKPTX_KEY_LEN 16
#define GM_CKPTX_HDR_MAX 1024                 /* bytes of header JSON at most */
#define GM_CKPTX_FILE_MAX ((uint64_t)4 << 30) /* 4 GiB */
#define GM_CKPTX_HELD_MAX 32
#define GM_CKPTX_HOLDERS_MAX 64

struct gm_ckptx;
struct gm_link;
struct gm_agent;

/* The header of a CKPT_DATA message. */
struct gm_ckptx_hdr {
    char key[GM_CKPTX_KEY_LEN + 1];
    long step;
    char sha256[65];
    uint64_t bytes;
    int keep;
    uint64_t term;
};

/* A CKPT_ACK. */
struct gm_ckptx_ack {
    char key[GM_CKPTX_KEY_LEN + 1];
    long step;
    char sha256[65];
    bool ok;
    char error[160]; /* printable ASCII; "" when ok */
};

/* One checkpoint and who holds it. */
struct gm_ckpt_held {
    char key[GM_CKPTX_KEY_LEN + 1];
    long step;
    char sha256[65];
    uint64_t term;
    size_t nholders;
    char holders[GM_CKPTX_HOLDERS_MAX][GM_ID_NAME_MAX + 1];
    uint64_t t_ns; /* monotonic time it was first recorded here */
};

/* This node's disk, as the checkpoints it received found it. */
struct gm_ckptx_disk {
    bool full;       /* the last checkpoint failed for want of space (none stored since) */
    uint64_t enospc; /* checkpoints (own or replicas) not stored for want of space */
    char path[1100]; /* where (the last such failure) */
    char peer[GM_ID_NAME_MAX + 1];
    long step;
    uint64_t t_ns; /* monotonic, when */
};

/* A member that answered a checkpoint of ours with a refusal: it holds no copy of it. */
struct gm_ckptx_refusal {
    char node[GM_ID_NAME_MAX + 1];
    char key[GM_CKPTX_KEY_LEN + 1];
    long step;
    char error[160];
};
#define GM_CKPTX_REFUSALS_MAX 16

struct gm_ckptx_env {
    const char *node;      /* this node (borrowed) */
    const char *state_dir; /* borrowed */
    struct gm_link *(*link_to)(void *agent, const char *node);
    void *agent;
};

/* The header as bytes (u32 length, JSON); 0, -EINVAL (a field out of range), -ENOBUFS. */
GM_MUST_CHECK int gm_ckptx_hdr_encode(const struct gm_ckptx_hdr *h, uint8_t *buf, size_t cap,
                                      size_t *len);
/* Decodes a header at the start of p[0..len); *used: its bytes.  GM_ERR_PROTO. */
GM_MUST_CHECK int gm_ckptx_hdr_decode(const uint8_t *p, size_t len, struct gm_ckptx_hdr *h,
                                      size_t *used);
GM_MUST_CHECK int gm_ckptx_ack_encode(const struct gm_ckptx_ack *a, char **json, size_t *len);
GM_MUST_CHECK int gm_ckptx_ack_decode(const uint8_t *p, size_t len, struct gm_ckptx_ack *a);

GM_MUST_CHECK int gm_ckptx_new(const struct gm_ckptx_env *env, struct gm_ckptx **out);
/* Aborts transfers being received (their temp files removed); NULL-safe. */
void gm_ckptx_free(struct gm_ckptx *x);

/* Replicates a committed checkpoint (path, sha256) of key to nodes[n] (at most keep kept
 * there) and records this node as a holder.  Errors (the file unreadable) are logged. */
void gm_ckptx_send(struct gm_ckptx *x, const char *key, const char *path, const char *sha256,
                   long step, int keep, uint64_t term, const char (*nodes)[GM_ID_NAME_MAX + 1],
                   size_t n);

/* A frame of this room from node: CKPT_DATA or CKPT_ACK.  0, or an error that closes the
 * link (GM_ERR_PROTO for bytes out of order or malformed). */
GM_MUST_CHECK int gm_ckptx_on_frame(struct gm_ckptx *x, const char *node,
                                    const struct gm_frame_hdr *h, const uint8_t *p);
/* node's link is gone: its transfer in progress is dropped. */
void gm_ckptx_link_down(struct gm_ckptx *x, const char *node);

/* Checkpoints and their holders, newest first (by step, then arrival); writes at most cap,
 * returns how many there are. */
size_t gm_ckptx_held(const struct gm_ckptx *x, struct gm_ckpt_held *out, size_t cap);
/* Called (loop thread) each time a node is added as the holder of a checkpoint. */
void gm_ckptx_set_on_held(struct gm_ckptx *x, void (*fn)(void *arg, const struct gm_ckpt_held *h),
                          void *arg);

/* Seconds since the newest checkpoint was recorded here (written by this node's rank or
 * received from another), or -1 when none was (gradmesh_checkpoint_age_seconds). */
double gm_ckptx_newest_age_s(const struct gm_ckptx *x);

/* This node's own checkpoint of step (path) could not be written (err): a full disk is noted
 * and said as for a replica (event=disk-full what=checkpoint); other errors are the writer's
 * (logged there). */
void gm_ckptx_write_failed(struct gm_ckptx *x, const char *path, long step, int err);
/* This node's disk as the checkpoints it wrote or received found it. */
void gm_ckptx_disk(const struct gm_ckptx *x, struct gm_ckptx_disk *out);
/* The same for `status --json` ("disk"): {full, enospc_total, and after a failure: error,
 * path, peer, step, age_s}. */
json_t *gm_ckptx_disk_json(const struct gm_ckptx *x);

/* The control command "checkpoints": {dir, held: [{key, step, sha256, term, holders}],
 * not_held: [{node, key, step, error}] (the last refusal of each member that answered one of
 * ours with one, and has not stored one of that key since), disk: see gm_ckptx_disk}. */
json_t *gm_ckptx_ctl_list(struct gm_ckptx *x);

extern const struct gm_room gm_ckpt_room;
/* Makes a->ckptx. */
GM_MUST_CHECK int gm_ckptroom_open(struct gm_agent *a);

#endif
