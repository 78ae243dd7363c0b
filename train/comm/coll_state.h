/*
 * train/comm/coll_state.h - the collective's op state (struct gm_coll, op,
 * phase), shared by its files; not a public interface.
 *
 * Files, dependencies one way: collective.c (operations, queue, progress,
 * abort, lifecycle, counters, hash check) -> coll_phase.h/.c (the phase
 * engines and the sending helpers) -> coll_state.h (this) -> coll_wire.h
 * (header bytes, hash).  The phase engines never call up into collective.c:
 * they hand the transport the completion callbacks collective.c stored in
 * struct gm_coll (on_sent, on_recv).
 */
#ifndef GM_TRAIN_COMM_COLL_STATE_H
#define GM_TRAIN_COMM_COLL_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/comm/collective.h"

enum ph_kind { PH_NONE, PH_RING, PH_DIRECT, PH_REDUCE, PH_BCAST };
enum op_kind { OP_ALLREDUCE = 1, OP_BROADCAST = 2, OP_BARRIER = 3 };

struct phase {
    enum ph_kind kind;
    const int *members; /* borrowed from gm_coll: global ranks */
    int nm;
    int me;   /* my index in members, -1 if not taking part */
    int root; /* index in members (REDUCE, BCAST) */
    enum gm_codec codec;
    float prescale, postscale;
    size_t chunk_elems;
    bool started, done;
    /* ring */
    size_t *seg_off; /* owned, nm + 1 */
    uint32_t stage, chunk;
    bool finite_checked; /* every final element went through the check below */
    bool nonfinite;      /* a final element was Inf or NaN */
    /* direct, reduce, bcast */
    uint32_t *next_chunk;  /* owned, nm */
    unsigned char **store; /* owned, nm (entries owned) */
    int pending;
};

struct op {
    struct op *next;
    enum op_kind kind;
    enum gm_coll_algo algo;
    uint8_t kind_byte;
    uint32_t seq;
    struct gm_coll_opts opts;
    float *buf; /* borrowed */
    size_t n;
    int root;
    struct phase ph[3];
    int nph, cur;
    int status;
    bool aborting;
    gm_coll_done_cb cb;
    void *arg;
};

struct gm_coll {
    struct gm_transport *t; /* borrowed */
    /* collective.c's transport callbacks, set by gm_coll_new (arg: the wire, resp. c) */
    gm_transport_send_cb on_sent;
    gm_transport_recv_cb on_recv;
    int rank, world;
    uint32_t generation;
    size_t chunk_bytes;
    int *groups;                /* owned or NULL */
    struct gm_coll_link *links; /* owned or NULL */
    int *all;                   /* owned: 0..world-1 */
    int *grp;                   /* owned: my group, ascending */
    int ngrp, grp_me, grp_root; /* grp_root: the leader's index in grp */
    int *leaders;               /* owned: group leaders, ascending */
    int nleaders, leader_me;
    struct op *active, *qhead, *qtail;
    uint32_t next_seq;
    bool broken, kick_pending;
    bool *armed;                          /* owned, world */
    int sends_out;                        /* sends not yet called back */
    struct gm_coll_traffic *sent, *recvd; /* owned, world */
    struct gm_coll_traffic sent_codec[GM_CODEC_COUNT], recvd_codec[GM_CODEC_COUNT];
};

/* One message on its way: the header (and an encoded payload) in data, or,
 * for an fp32 ring chunk, the header in data and the payload read in place
 * from the operation's buffer (body, borrowed until on_sent). */
struct wire {
    struct gm_coll *c;
    size_t len; /* bytes in data */
    const void *body;
    size_t body_len;
    unsigned char data[];
};

#endif
