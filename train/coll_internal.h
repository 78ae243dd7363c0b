/*
 * train/coll_internal.h - state shared by the collective's files; not a
 * public interface (only train/collective.c, coll_phase.c include it).
 *
 * collective.c: operations, queue, progress, abort, lifecycle, counters.
 * coll_phase.c: the phase engines (ring; direct/reduce/broadcast "star")
 * and the sending helpers.  coll_wire.c: header bytes, hash, hash check.
 */
#ifndef GM_TRAIN_COLL_INTERNAL_H
#define GM_TRAIN_COLL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/collective.h"

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
    int rank, world;
    uint32_t generation;
    size_t chunk_bytes;
    int *groups;                /* owned or NULL */
    struct gm_coll_link *links; /* owned or NULL */
    int *all;                   /* owned: 0..world-1 */
    int *grp;                   /* owned: my group, ascending */
    int ngrp, grp_me;
    int *leaders; /* owned: group leaders, ascending */
    int nleaders, leader_me;
    struct op *active, *qhead, *qtail;
    uint32_t next_seq;
    bool broken, kick_pending;
    bool *armed;                          /* owned, world */
    int sends_out;                        /* sends not yet called back */
    struct gm_coll_traffic *sent, *recvd; /* owned, world */
    struct gm_coll_traffic sent_codec[GM_CODEC_COUNT], recvd_codec[GM_CODEC_COUNT];
};

struct wire {
    struct gm_coll *c;
    size_t len;
    unsigned char data[];
};

/* coll_phase.c */
void gm_coll_account(struct gm_coll_traffic *t, size_t payload, size_t frame);
struct wire *gm_coll_wire_new(struct gm_coll *c, size_t payload);
/* Sends w (freed on error or in gm_coll_on_sent); counts it. */
int gm_coll_wire_send(struct gm_coll *c, int peer, struct wire *w, struct gm_coll_hdr *h);
void gm_coll_base_hdr(const struct gm_coll *c, const struct op *op, struct gm_coll_hdr *h);
void gm_coll_phase_release(struct phase *p);
/* Starts op->ph[op->cur]; may mark it done at once. */
int gm_coll_phase_start(struct gm_coll *c, struct op *op);
/* A validated DATA message from member `from` of the current phase. */
int gm_coll_phase_on_msg(struct gm_coll *c, struct op *op, struct phase *p, int from,
                         const struct gm_coll_hdr *h, const unsigned char *payload);

/* collective.c: the transport callbacks */
void gm_coll_on_sent(struct gm_transport *t, int peer, int status, void *arg);
void gm_coll_on_recv(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                     void *arg);

#endif
