/*
 * train/collective.c - the collective state machine (see collective.h).
 *
 * One operation is active at a time; it runs up to three phases (HIER: group
 * reduce, leader all-reduce, group broadcast).  A phase arms one-shot receives
 * only from the peers it still expects messages from, so messages of a later
 * phase (or op) simply wait in the transport: per-peer FIFO order plus the
 * fixed send order make every expected (stage, chunk, offset, count) known in
 * advance, and anything else is an error.
 *
 * Ring send order.  A rank sends all stage-0 chunks first, then exactly one
 * stage s+1 chunk per stage-s chunk received, in receive order; by induction
 * every rank sends in lexicographic (stage, chunk) order, which is what its
 * right neighbour expects.  Empty segments still send one empty chunk so that
 * every rank hears from its left neighbour at every stage (size mismatches are
 * always caught).
 *
 * Re-entrancy discipline: only the top-level transport callbacks (on_recv,
 * on_sent, on_kick) call progress(), which may finish the op and run the
 * user's callback; everything below returns error codes upwards.
 */
#include "train/collective.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"

#define DEFAULT_CHUNK_BYTES ((size_t)256 * 1024)

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
    uint32_t *next_chunk;   /* owned, nm */
    unsigned char **store;  /* owned, nm (entries owned) */
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
    int *leaders;               /* owned: group leaders, ascending */
    int nleaders, leader_me;
    struct op *active, *qhead, *qtail;
    uint32_t next_seq;
    bool broken, kick_pending;
    bool *armed;   /* owned, world */
    int sends_out; /* sends not yet called back */
    struct gm_coll_traffic *sent, *recvd; /* owned, world */
    struct gm_coll_traffic sent_codec[GM_CODEC_COUNT], recvd_codec[GM_CODEC_COUNT];
};

struct wire {
    struct gm_coll *c;
    size_t len;
    unsigned char data[];
};

/* --- header ------------------------------------------------------------- */

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const unsigned char *p)
{
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

void gm_coll_hdr_encode(const struct gm_coll_hdr *h, unsigned char *out)
{
    put32(out, GM_COLL_MAGIC);
    out[4] = h->type;
    out[5] = h->kind;
    out[6] = h->codec;
    out[7] = h->phase;
    put32(out + 8, h->generation);
    put32(out + 12, h->seq);
    put64(out + 16, h->step);
    put64(out + 24, h->total);
    put32(out + 32, h->stage);
    put32(out + 36, h->chunk);
    put64(out + 40, h->offset);
    put32(out + 48, h->count);
    put32(out + 52, h->payload_bytes);
}

int gm_coll_hdr_decode(const void *buf, size_t len, struct gm_coll_hdr *h)
{
    const unsigned char *p = buf;

    memset(h, 0, sizeof(*h));
    if (buf == NULL || len < GM_COLL_HDR_BYTES || get32(p) != GM_COLL_MAGIC)
        return GM_ERR_PROTO;
    h->type = p[4];
    h->kind = p[5];
    h->codec = p[6];
    h->phase = p[7];
    h->generation = get32(p + 8);
    h->seq = get32(p + 12);
    h->step = get64(p + 16);
    h->total = get64(p + 24);
    h->stage = get32(p + 32);
    h->chunk = get32(p + 36);
    h->offset = get64(p + 40);
    h->count = get32(p + 48);
    h->payload_bytes = get32(p + 52);
    if (h->type != GM_COLL_MSG_DATA && h->type != GM_COLL_MSG_ABORT)
        return GM_ERR_PROTO;
    if ((uint64_t)h->payload_bytes != (uint64_t)(len - GM_COLL_HDR_BYTES))
        return GM_ERR_PROTO;
    return 0;
}

/* --- sending ------------------------------------------------------------- */

static void account(struct gm_coll_traffic *t, size_t payload, size_t frame)
{
    t->payload_bytes += payload;
    t->frame_bytes += frame;
    t->msgs++;
}

static void on_sent(struct gm_transport *t, int peer, int status, void *arg);

/* Sends header + payload_bytes (already in w->data after the header). */
static int wire_send(struct gm_coll *c, int peer, struct wire *w, struct gm_coll_hdr *h)
{
    int err;

    gm_coll_hdr_encode(h, w->data);
    err = gm_transport_send(c->t, peer, w->data, w->len, on_sent, w);
    if (err < 0) {
        free(w);
        return err;
    }
    c->sends_out++;
    if (h->type == GM_COLL_MSG_ABORT) {
        account(&c->sent[peer], 0, w->len);
        account(&c->sent_codec[h->codec < GM_CODEC_COUNT ? h->codec : 0], 0, w->len);
    } else {
        account(&c->sent[peer], h->payload_bytes, GM_COLL_HDR_BYTES);
        account(&c->sent_codec[h->codec], h->payload_bytes, GM_COLL_HDR_BYTES);
    }
    return 0;
}

static struct wire *wire_new(struct gm_coll *c, size_t payload)
{
    struct wire *w = malloc(sizeof(*w) + GM_COLL_HDR_BYTES + payload);

    if (w == NULL)
        return NULL;
    w->c = c;
    w->len = GM_COLL_HDR_BYTES + payload;
    return w;
}

static void base_hdr(const struct gm_coll *c, const struct op *op, struct gm_coll_hdr *h)
{
    memset(h, 0, sizeof(*h));
    h->type = GM_COLL_MSG_DATA;
    h->kind = op->kind_byte;
    h->codec = (uint8_t)op->ph[op->cur].codec;
    h->phase = (uint8_t)op->cur;
    h->generation = c->generation;
    h->seq = op->seq;
    h->step = op->opts.step;
    h->total = op->n;
}

/*
 * Sends one chunk [off, off+cnt) to peer: encoded from src (floats) or copied
 * from raw (already-encoded bytes).  *payload (optional) gets the encoded bytes.
 */
static int send_chunk(struct gm_coll *c, struct op *op, int peer, uint32_t stage, uint32_t chunk,
                      size_t off, size_t cnt, const float *src, const void *raw,
                      const unsigned char **payload)
{
    struct phase *p = &op->ph[op->cur];
    size_t esz = gm_codec_elem_size(p->codec);
    struct wire *w = wire_new(c, cnt * esz);
    struct gm_coll_hdr h;
    unsigned char *pl;

    if (w == NULL)
        return -ENOMEM;
    pl = w->data + GM_COLL_HDR_BYTES;
    if (src != NULL)
        gm_codec_encode(p->codec, src, cnt, pl);
    else if (cnt > 0 && raw != NULL)
        memcpy(pl, raw, cnt * esz);
    if (payload != NULL)
        *payload = pl;
    base_hdr(c, op, &h);
    h.stage = stage;
    h.chunk = chunk;
    h.offset = off;
    h.count = (uint32_t)cnt;
    h.payload_bytes = (uint32_t)(cnt * esz);
    return wire_send(c, peer, w, &h);
}

static void on_recv(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                    void *arg);

static int arm(struct gm_coll *c, int peer)
{
    int err;

    GM_ASSERT(!c->armed[peer]);
    err = gm_transport_recv(c->t, peer, on_recv, c);
    if (err == 0)
        c->armed[peer] = true;
    return err;
}

/* --- phases -------------------------------------------------------------- */

static size_t nchunks(const struct phase *p, size_t len)
{
    return len == 0 ? 1 : (len + p->chunk_elems - 1) / p->chunk_elems;
}

static void chunk_range(const struct phase *p, size_t seg_off, size_t seg_len, size_t k,
                        size_t *off, size_t *cnt)
{
    size_t start = k * p->chunk_elems;

    *off = seg_off + start;
    *cnt = seg_len == 0 ? 0 : GM_MIN(p->chunk_elems, seg_len - start);
}

static int mod(int a, int m)
{
    return ((a % m) + m) % m;
}

static void scale(float *x, size_t n, float s)
{
    if (s != 1.0f)
        for (size_t i = 0; i < n; i++)
            x[i] *= s;
}

static void phase_release(struct phase *p)
{
    if (p->store != NULL)
        for (int j = 0; j < p->nm; j++)
            free(p->store[j]);
    free(p->store);
    free(p->seg_off);
    free(p->next_chunk);
    p->store = NULL;
    p->seg_off = NULL;
    p->next_chunk = NULL;
}

static int ring_recv_seg(const struct phase *p, uint32_t stage)
{
    int s = (int)stage;
    return s < p->nm - 1 ? mod(p->me - s - 1, p->nm) : mod(p->me - (s - (p->nm - 1)), p->nm);
}

static size_t seg_len(const struct phase *p, int seg)
{
    return p->seg_off[seg + 1] - p->seg_off[seg];
}

static int ring_start(struct gm_coll *c, struct op *op, struct phase *p)
{
    int right, seg, err;
    size_t k, off, cnt;

    scale(op->buf, op->n, p->prescale);
    if (p->nm == 1) {
        scale(op->buf, op->n, p->postscale);
        p->done = true;
        return 0;
    }
    p->seg_off = calloc((size_t)p->nm + 1, sizeof(size_t));
    if (p->seg_off == NULL)
        return -ENOMEM;
    for (int j = 0; j < p->nm; j++)
        p->seg_off[j + 1] = p->seg_off[j] + op->n / (size_t)p->nm +
                            ((size_t)j < op->n % (size_t)p->nm ? 1 : 0);
    right = p->members[mod(p->me + 1, p->nm)];
    seg = p->me;
    for (k = 0; k < nchunks(p, seg_len(p, seg)); k++) {
        chunk_range(p, p->seg_off[seg], seg_len(p, seg), k, &off, &cnt);
        err = send_chunk(c, op, right, 0, (uint32_t)k, off, cnt, op->buf + off, NULL, NULL);
        if (err < 0)
            return err;
    }
    p->stage = 0;
    p->chunk = 0;
    return arm(c, p->members[mod(p->me - 1, p->nm)]);
}

static int ring_on_msg(struct gm_coll *c, struct op *op, struct phase *p, int from,
                       const struct gm_coll_hdr *h, const unsigned char *pl)
{
    int nm = p->nm, seg, right = p->members[mod(p->me + 1, nm)];
    size_t off, cnt, esz = gm_codec_elem_size(p->codec);
    uint32_t st = p->stage;
    float *dst;
    int err = 0;

    if (from != mod(p->me - 1, nm))
        return GM_ERR_PROTO;
    seg = ring_recv_seg(p, st);
    chunk_range(p, p->seg_off[seg], seg_len(p, seg), p->chunk, &off, &cnt);
    if (h->stage != st || h->chunk != p->chunk || h->offset != off || h->count != cnt ||
        h->payload_bytes != cnt * esz)
        return GM_ERR_PROTO;
    dst = op->buf + off;
    if (st < (uint32_t)nm - 1) { /* reduce-scatter: incoming partial + mine */
        gm_codec_decode_add(p->codec, pl, dst, cnt, dst);
        if (st < (uint32_t)nm - 2) {
            err = send_chunk(c, op, right, st + 1, p->chunk, off, cnt, dst, NULL, NULL);
        } else { /* segment complete here: this rank owns it */
            const unsigned char *enc = NULL;
            scale(dst, cnt, p->postscale);
            err = send_chunk(c, op, right, st + 1, p->chunk, off, cnt, dst, NULL, &enc);
            if (err == 0 && p->codec != GM_CODEC_FP32)
                gm_codec_decode(p->codec, enc, cnt, dst); /* keep what the others get */
        }
    } else { /* all-gather: take the owner's bytes and pass them on unchanged */
        gm_codec_decode(p->codec, pl, cnt, dst);
        if (st < 2 * (uint32_t)nm - 3)
            err = send_chunk(c, op, right, st + 1, p->chunk, off, cnt, NULL, pl, NULL);
    }
    if (err < 0)
        return err;
    if (++p->chunk == nchunks(p, seg_len(p, seg))) {
        p->stage++;
        p->chunk = 0;
    }
    if (p->stage == 2 * (uint32_t)nm - 2) {
        p->done = true;
        return 0;
    }
    return arm(c, p->members[mod(p->me - 1, nm)]);
}

/* DIRECT, REDUCE (to root) and BCAST (from root): whole buffer, chunked. */
static int star_alloc(struct phase *p, size_t n, bool store)
{
    size_t esz = gm_codec_elem_size(p->codec);

    p->next_chunk = calloc((size_t)p->nm, sizeof(uint32_t));
    if (p->next_chunk == NULL)
        return -ENOMEM;
    if (!store)
        return 0;
    p->store = calloc((size_t)p->nm, sizeof(*p->store));
    if (p->store == NULL)
        return -ENOMEM;
    for (int j = 0; j < p->nm; j++) {
        if (p->kind == PH_REDUCE && j == p->root)
            continue;
        p->store[j] = malloc(n * esz + 1);
        if (p->store[j] == NULL)
            return -ENOMEM;
    }
    return 0;
}

static int send_all_chunks(struct gm_coll *c, struct op *op, struct phase *p, int peer,
                           const float *src, const unsigned char *raw)
{
    size_t esz = gm_codec_elem_size(p->codec), off, cnt;

    for (size_t k = 0; k < nchunks(p, op->n); k++) {
        int err;
        chunk_range(p, 0, op->n, k, &off, &cnt);
        err = send_chunk(c, op, peer, 0, (uint32_t)k, off, cnt, src != NULL ? src + off : NULL,
                         raw != NULL ? raw + off * esz : NULL, NULL);
        if (err < 0)
            return err;
    }
    return 0;
}

static void direct_sum(struct op *op, struct phase *p)
{
    gm_codec_decode(p->codec, p->store[0], op->n, op->buf);
    for (int j = 1; j < p->nm; j++)
        gm_codec_decode_add(p->codec, p->store[j], op->buf, op->n, op->buf);
    scale(op->buf, op->n, p->postscale);
}

static void reduce_sum(struct op *op, struct phase *p)
{
    for (int j = 0; j < p->nm; j++)
        if (j != p->root)
            gm_codec_decode_add(p->codec, p->store[j], op->buf, op->n, op->buf);
}

static int star_start(struct gm_coll *c, struct op *op, struct phase *p)
{
    int err;

    switch (p->kind) {
    case PH_DIRECT:
        scale(op->buf, op->n, p->prescale);
        if (p->nm == 1) { /* alone (HIER with one group): nothing goes on the wire */
            scale(op->buf, op->n, p->postscale);
            p->done = true;
            return 0;
        }
        err = star_alloc(p, op->n, true);
        if (err < 0)
            return err;
        gm_codec_encode(p->codec, op->buf, op->n, p->store[p->me]);
        for (int j = 0; j < p->nm; j++) {
            if (j == p->me)
                continue;
            err = send_all_chunks(c, op, p, p->members[j], NULL, p->store[p->me]);
            if (err < 0)
                return err;
        }
        p->pending = p->nm - 1;
        break;
    case PH_REDUCE:
        if (p->me != p->root) {
            p->done = true;
            return send_all_chunks(c, op, p, p->members[p->root], op->buf, NULL);
        }
        err = star_alloc(p, op->n, true);
        if (err < 0)
            return err;
        p->pending = p->nm - 1;
        break;
    case PH_BCAST:
        if (p->me == p->root) {
            for (int j = 0; j < p->nm; j++) {
                if (j == p->root)
                    continue;
                err = send_all_chunks(c, op, p, p->members[j], op->buf, NULL);
                if (err < 0)
                    return err;
            }
            p->done = true;
            return 0;
        }
        err = star_alloc(p, op->n, false);
        if (err < 0)
            return err;
        p->pending = 1;
        return arm(c, p->members[p->root]);
    default:
        return -EINVAL;
    }
    if (p->pending == 0) {
        if (p->kind == PH_DIRECT)
            direct_sum(op, p);
        p->done = true;
        return 0;
    }
    for (int j = 0; j < p->nm; j++) {
        if (j == p->me)
            continue;
        err = arm(c, p->members[j]);
        if (err < 0)
            return err;
    }
    return 0;
}

static int star_on_msg(struct gm_coll *c, struct op *op, struct phase *p, int from,
                       const struct gm_coll_hdr *h, const unsigned char *pl)
{
    size_t esz = gm_codec_elem_size(p->codec), off, cnt;
    size_t k = p->next_chunk[from];

    if (from == p->me || (p->kind != PH_DIRECT && p->me != p->root && from != p->root) ||
        k >= nchunks(p, op->n))
        return GM_ERR_PROTO;
    chunk_range(p, 0, op->n, k, &off, &cnt);
    if (h->stage != 0 || h->chunk != k || h->offset != off || h->count != cnt ||
        h->payload_bytes != cnt * esz)
        return GM_ERR_PROTO;
    if (p->kind == PH_BCAST)
        gm_codec_decode(p->codec, pl, cnt, op->buf + off);
    else if (cnt > 0)
        memcpy(p->store[from] + off * esz, pl, cnt * esz);
    if (++p->next_chunk[from] < nchunks(p, op->n))
        return arm(c, p->members[from]);
    if (--p->pending > 0)
        return 0;
    if (p->kind == PH_DIRECT)
        direct_sum(op, p);
    else if (p->kind == PH_REDUCE)
        reduce_sum(op, p);
    p->done = true;
    return 0;
}

static int phase_start(struct gm_coll *c, struct op *op)
{
    struct phase *p = &op->ph[op->cur];

    p->started = true;
    if (p->kind == PH_NONE || p->me < 0) {
        p->done = true;
        return 0;
    }
    if (p->kind == PH_RING)
        return ring_start(c, op, p);
    return star_start(c, op, p);
}

/* --- operations ---------------------------------------------------------- */

static void set_phase(const struct gm_coll *c, struct phase *p, enum ph_kind kind,
                      const int *members, int nm, int me, int root, enum gm_codec codec)
{
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->members = members;
    p->nm = nm;
    p->me = me;
    p->root = root;
    p->codec = codec;
    p->prescale = p->postscale = 1.0f;
    p->chunk_elems = GM_MAX((size_t)1, c->chunk_bytes / gm_codec_elem_size(codec));
}

static void build_phases(struct gm_coll *c, struct op *op)
{
    enum gm_codec codec = op->opts.codec;
    float pre = 1.0f, post = 1.0f;

    if (op->kind == OP_BROADCAST) {
        op->nph = 1;
        set_phase(c, &op->ph[0], PH_BCAST, c->all, c->world, c->rank, op->root, GM_CODEC_FP32);
        return;
    }
    if (op->kind == OP_BARRIER) {
        op->nph = 1;
        set_phase(c, &op->ph[0], PH_DIRECT, c->all, c->world, c->rank, 0, GM_CODEC_FP32);
        return;
    }
    if (op->opts.reduce == GM_COLL_MEAN) {
        if (codec == GM_CODEC_FP32)
            post = 1.0f / (float)c->world;
        else
            pre = 1.0f / (float)c->world;
    }
    switch (op->algo) {
    case GM_COLL_DIRECT:
        op->nph = 1;
        set_phase(c, &op->ph[0], PH_DIRECT, c->all, c->world, c->rank, 0, codec);
        break;
    case GM_COLL_HIER:
        op->nph = 3;
        set_phase(c, &op->ph[0], PH_REDUCE, c->grp, c->ngrp, c->grp_me, 0, GM_CODEC_FP32);
        set_phase(c, &op->ph[1], c->nleaders <= 2 ? PH_DIRECT : PH_RING, c->leaders, c->nleaders,
                  c->leader_me, 0, codec);
        set_phase(c, &op->ph[2], PH_BCAST, c->grp, c->ngrp, c->grp_me, 0, GM_CODEC_FP32);
        op->ph[1].prescale = pre;
        op->ph[1].postscale = post;
        return;
    default:
        op->nph = 1;
        set_phase(c, &op->ph[0], PH_RING, c->all, c->world, c->rank, 0, codec);
        break;
    }
    op->ph[0].prescale = pre;
    op->ph[0].postscale = post;
}

static void on_kick(struct gm_transport *t, void *arg);

static void send_aborts(struct gm_coll *c, struct op *op, int err)
{
    for (int peer = 0; peer < c->world; peer++) {
        struct wire *w;
        struct gm_coll_hdr h;
        if (peer == c->rank)
            continue;
        w = wire_new(c, 0);
        if (w == NULL)
            continue; /* the peer will see the link close or time out */
        base_hdr(c, op, &h);
        h.type = GM_COLL_MSG_ABORT;
        h.count = (uint32_t)(-err);
        (void)wire_send(c, peer, w, &h); /* best effort: a dead link is fine */
    }
}

static void op_fail(struct gm_coll *c, int err)
{
    struct op *op = c->active;

    GM_ASSERT(op != NULL && err < 0);
    if (op->aborting)
        return;
    op->aborting = true;
    op->status = err;
    gm_debug("event=coll_abort rank=%d seq=%u err=%d msg=\"%s\"", c->rank, op->seq, err,
             gm_strerror(err));
    for (int peer = 0; peer < c->world; peer++) {
        if (c->armed[peer]) {
            gm_transport_recv_stop(c->t, peer);
            c->armed[peer] = false;
        }
    }
    /* Also when err is GM_ERR_ABORTED: ranks that were not listening to the
     * origin of the abort learn it from us (each rank sends one set per op). */
    send_aborts(c, op, err);
}

static bool all_finite(const float *x, size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        bad |= ((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

static void op_free(struct op *op)
{
    for (int i = 0; i < 3; i++)
        phase_release(&op->ph[i]);
    free(op);
}

static void finish(struct gm_coll *c)
{
    struct op *op = c->active;
    int status = op->status;

    c->active = NULL;
    if (status == 0 && op->kind == OP_ALLREDUCE && !all_finite(op->buf, op->n))
        status = GM_ERR_NUMERIC;
    if (status != 0 && status != GM_ERR_NUMERIC)
        c->broken = true; /* NUMERIC: every rank agrees, the group stays usable */
    gm_coll_done_cb cb = op->cb;
    void *arg = op->arg;
    op_free(op);
    if (c->broken) {
        struct op *q = c->qhead;
        c->qhead = c->qtail = NULL;
        cb(c, status, arg);
        while (q != NULL) {
            struct op *next = q->next;
            q->cb(c, GM_ERR_ABORTED, q->arg);
            op_free(q);
            q = next;
        }
        return;
    }
    cb(c, status, arg);
}

static void activate(struct gm_coll *c)
{
    struct op *op = c->qhead;
    int err;

    c->qhead = op->next;
    if (c->qhead == NULL)
        c->qtail = NULL;
    op->next = NULL;
    c->active = op;
    build_phases(c, op);
    op->cur = 0;
    err = phase_start(c, op);
    if (err < 0)
        op_fail(c, err);
}

static bool any_armed(const struct gm_coll *c)
{
    for (int i = 0; i < c->world; i++)
        if (c->armed[i])
            return true;
    return false;
}

static void progress(struct gm_coll *c)
{
    for (;;) {
        struct op *op;

        if (c->active == NULL) {
            if (c->qhead == NULL)
                return;
            activate(c);
        }
        op = c->active;
        while (!op->aborting && op->ph[op->cur].done && op->cur + 1 < op->nph) {
            int err;
            op->cur++;
            err = phase_start(c, op);
            if (err < 0)
                op_fail(c, err);
        }
        if (!op->aborting && !op->ph[op->cur].done)
            return;
        if (c->sends_out > 0 || any_armed(c))
            return;
        finish(c);
    }
}

static void on_kick(struct gm_transport *t, void *arg)
{
    struct gm_coll *c = arg;

    (void)t;
    c->kick_pending = false;
    progress(c);
}

static void on_sent(struct gm_transport *t, int peer, int status, void *arg)
{
    struct wire *w = arg;
    struct gm_coll *c = w->c;

    (void)t;
    (void)peer;
    free(w);
    c->sends_out--;
    if (status < 0 && c->active != NULL)
        op_fail(c, status);
    progress(c);
}

static int member_index(const struct phase *p, int rank)
{
    for (int j = 0; j < p->nm; j++)
        if (p->members[j] == rank)
            return j;
    return -1;
}

static int handle_msg(struct gm_coll *c, struct op *op, int peer, const void *buf, size_t len)
{
    struct gm_coll_hdr h;
    struct phase *p = &op->ph[op->cur];
    int err = gm_coll_hdr_decode(buf, len, &h), from;

    if (err < 0)
        return err;
    if (h.type == GM_COLL_MSG_ABORT) {
        account(&c->recvd[peer], 0, len);
        account(&c->recvd_codec[p->codec], 0, len);
        return GM_ERR_ABORTED;
    }
    if (h.codec >= GM_CODEC_COUNT)
        return GM_ERR_MISMATCH;
    account(&c->recvd[peer], h.payload_bytes, GM_COLL_HDR_BYTES);
    account(&c->recvd_codec[h.codec], h.payload_bytes, GM_COLL_HDR_BYTES);
    if (h.generation != c->generation || h.seq != op->seq || h.step != op->opts.step ||
        h.kind != op->kind_byte || h.phase != op->cur || h.codec != p->codec || h.total != op->n)
        return GM_ERR_MISMATCH;
    from = member_index(p, peer);
    if (from < 0 || p->done)
        return GM_ERR_PROTO;
    if (p->kind == PH_RING)
        return ring_on_msg(c, op, p, from, &h, (const unsigned char *)buf + GM_COLL_HDR_BYTES);
    return star_on_msg(c, op, p, from, &h, (const unsigned char *)buf + GM_COLL_HDR_BYTES);
}

static void on_recv(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                    void *arg)
{
    struct gm_coll *c = arg;
    int err;

    (void)t;
    c->armed[peer] = false;
    GM_ASSERT(c->active != NULL);
    err = status < 0 ? status : handle_msg(c, c->active, peer, buf, len);
    if (err < 0) {
        if (err != GM_ERR_ABORTED)
            gm_warn("event=coll_error rank=%d peer=%d err=%d msg=\"%s\"", c->rank, peer, err,
                    gm_strerror(err));
        op_fail(c, err);
    }
    progress(c);
}

static int enqueue(struct gm_coll *c, struct op *op)
{
    if (!c->kick_pending) {
        int err = gm_transport_post(c->t, on_kick, c);
        if (err < 0) {
            free(op);
            return err;
        }
        c->kick_pending = true;
    }
    op->seq = c->next_seq++;
    op->kind_byte = (uint8_t)((op->kind << 4) | op->algo);
    if (c->qtail != NULL)
        c->qtail->next = op;
    else
        c->qhead = op;
    c->qtail = op;
    return 0;
}

enum gm_coll_algo gm_coll_resolve(const struct gm_coll *c, const struct gm_coll_opts *o, size_t n)
{
    if (c->world == 1)
        return GM_COLL_RING;
    if (o->algo != GM_COLL_AUTO)
        return o->algo;
    return gm_coll_choose(c->world, c->links, c->groups, n, o->codec);
}

int gm_coll_allreduce_start(struct gm_coll *c, float *buf, size_t n, const struct gm_coll_opts *o,
                            gm_coll_done_cb cb, void *arg)
{
    struct op *op;

    if (c == NULL || o == NULL || cb == NULL || (buf == NULL && n > 0) ||
        (unsigned)o->algo >= GM_COLL_ALGO_COUNT || gm_codec_elem_size(o->codec) == 0 ||
        (o->reduce != GM_COLL_SUM && o->reduce != GM_COLL_MEAN))
        return -EINVAL;
    if (c->broken)
        return GM_ERR_ABORTED;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return -ENOMEM;
    op->kind = OP_ALLREDUCE;
    op->opts = *o;
    op->algo = gm_coll_resolve(c, o, n);
    op->buf = buf;
    op->n = n;
    op->cb = cb;
    op->arg = arg;
    return enqueue(c, op);
}

int gm_coll_broadcast_start(struct gm_coll *c, float *buf, size_t n, int root, uint64_t step,
                            gm_coll_done_cb cb, void *arg)
{
    struct op *op;

    if (c == NULL || cb == NULL || (buf == NULL && n > 0) || root < 0 || root >= c->world)
        return -EINVAL;
    if (c->broken)
        return GM_ERR_ABORTED;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return -ENOMEM;
    op->kind = OP_BROADCAST;
    op->algo = GM_COLL_DIRECT;
    op->opts.codec = GM_CODEC_FP32;
    op->opts.step = step;
    op->root = root;
    op->buf = buf;
    op->n = n;
    op->cb = cb;
    op->arg = arg;
    return enqueue(c, op);
}

int gm_coll_barrier_start(struct gm_coll *c, uint64_t step, gm_coll_done_cb cb, void *arg)
{
    struct op *op;

    if (c == NULL || cb == NULL)
        return -EINVAL;
    if (c->broken)
        return GM_ERR_ABORTED;
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return -ENOMEM;
    op->kind = OP_BARRIER;
    op->algo = GM_COLL_DIRECT;
    op->opts.codec = GM_CODEC_FP32;
    op->opts.step = step;
    op->cb = cb;
    op->arg = arg;
    return enqueue(c, op);
}

/* --- hash check ---------------------------------------------------------- */

struct hashcheck {
    float v[16]; /* bytes of the hash, then their squares */
    gm_coll_done_cb cb;
    void *arg;
};

static void hashcheck_done(struct gm_coll *c, int status, void *arg)
{
    struct hashcheck *hc = arg;

    if (status == 0) {
        /* All equal iff N * sum(b^2) == (sum b)^2 for every byte (Cauchy-Schwarz).
         * The sums are exact in fp32 (< 2^24 for N < 258) and identical on every
         * rank, so every rank reaches the same verdict. */
        for (int i = 0; i < 8; i++) {
            double s = hc->v[i], s2 = hc->v[8 + i];
            if ((double)c->world * s2 != s * s)
                status = GM_ERR_MISMATCH;
        }
    }
    gm_coll_done_cb cb = hc->cb;
    void *cb_arg = hc->arg;
    free(hc);
    cb(c, status, cb_arg);
}

int gm_coll_hashcheck_start(struct gm_coll *c, const void *buf, size_t nbytes, uint64_t step,
                            gm_coll_done_cb cb, void *arg)
{
    struct gm_coll_opts o = {.algo = GM_COLL_DIRECT, .codec = GM_CODEC_FP32,
                             .reduce = GM_COLL_SUM, .step = step};
    struct hashcheck *hc;
    uint64_t h;
    int err;

    if (c == NULL || cb == NULL || (buf == NULL && nbytes > 0))
        return -EINVAL;
    if (c->world > 257)
        return -EINVAL;
    hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return -ENOMEM;
    h = gm_coll_hash(buf, nbytes);
    for (int i = 0; i < 8; i++) {
        float b = (float)((h >> (8 * i)) & 0xffu);
        hc->v[i] = b;
        hc->v[8 + i] = b * b;
    }
    hc->cb = cb;
    hc->arg = arg;
    err = gm_coll_allreduce_start(c, hc->v, 16, &o, hashcheck_done, hc);
    if (err < 0)
        free(hc);
    return err;
}

uint64_t gm_coll_hash(const void *buf, size_t nbytes)
{
    const unsigned char *p = buf;
    uint64_t h[4] = {0x243f6a8885a308d3u, 0x13198a2e03707344u, 0xa4093822299f31d0u,
                     0x082efa98ec4e6c89u};
    const uint64_t k = 0x9e3779b97f4a7c15u;
    size_t i = 0;

    for (; i + 32 <= nbytes; i += 32) {
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * (size_t)l, sizeof(w));
            h[l] = (h[l] ^ w) * k;
            h[l] ^= h[l] >> 29;
        }
    }
    uint64_t r = (uint64_t)nbytes * k;
    for (int l = 0; l < 4; l++)
        r = (r ^ h[l]) * k, r ^= r >> 31;
    for (; i < nbytes; i++)
        r = (r ^ p[i]) * k;
    r ^= r >> 33;
    r *= 0xff51afd7ed558ccdu;
    r ^= r >> 33;
    return r;
}

/* --- lifecycle and counters ---------------------------------------------- */

struct gm_coll *gm_coll_new(struct gm_transport *t, const struct gm_coll_config *cfg)
{
    struct gm_coll *c;
    int world, rank;

    GM_ASSERT(t != NULL && cfg != NULL && t->world >= 1 && t->rank >= 0 && t->rank < t->world);
    GM_ASSERT(cfg->chunk_bytes == 0 || (cfg->chunk_bytes >= 4 && cfg->chunk_bytes <= (1u << 30)));
    world = t->world;
    rank = t->rank;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->t = t;
    c->rank = rank;
    c->world = world;
    c->generation = cfg->generation;
    c->chunk_bytes = cfg->chunk_bytes != 0 ? cfg->chunk_bytes : DEFAULT_CHUNK_BYTES;
    c->all = calloc((size_t)world, sizeof(int));
    c->grp = calloc((size_t)world, sizeof(int));
    c->leaders = calloc((size_t)world, sizeof(int));
    c->armed = calloc((size_t)world, sizeof(bool));
    c->sent = calloc((size_t)world, sizeof(*c->sent));
    c->recvd = calloc((size_t)world, sizeof(*c->recvd));
    if (c->all == NULL || c->grp == NULL || c->leaders == NULL || c->armed == NULL ||
        c->sent == NULL || c->recvd == NULL)
        goto fail;
    if (cfg->groups != NULL) {
        c->groups = malloc((size_t)world * sizeof(int));
        if (c->groups == NULL)
            goto fail;
        memcpy(c->groups, cfg->groups, (size_t)world * sizeof(int));
    }
    if (cfg->links != NULL) {
        c->links = malloc((size_t)world * (size_t)world * sizeof(*c->links));
        if (c->links == NULL)
            goto fail;
        memcpy(c->links, cfg->links, (size_t)world * (size_t)world * sizeof(*c->links));
    }
    for (int r = 0; r < world; r++) {
        int g = c->groups != NULL ? c->groups[r] : 0;
        int mine = c->groups != NULL ? c->groups[rank] : 0;
        bool leader = true;
        c->all[r] = r;
        for (int q = 0; q < r; q++)
            if ((c->groups != NULL ? c->groups[q] : 0) == g)
                leader = false;
        if (leader)
            c->leaders[c->nleaders++] = r;
        if (g == mine) {
            if (r == rank)
                c->grp_me = c->ngrp;
            c->grp[c->ngrp++] = r;
        }
    }
    c->leader_me = -1;
    for (int i = 0; i < c->nleaders; i++)
        if (c->leaders[i] == rank)
            c->leader_me = i;
    return c;
fail:
    gm_coll_free(c);
    return NULL;
}

void gm_coll_free(struct gm_coll *c)
{
    if (c == NULL)
        return;
    GM_ASSERT(!gm_coll_busy(c));
    free(c->groups);
    free(c->links);
    free(c->all);
    free(c->grp);
    free(c->leaders);
    free(c->armed);
    free(c->sent);
    free(c->recvd);
    free(c);
}

int gm_coll_rank(const struct gm_coll *c)
{
    return c->rank;
}

int gm_coll_world(const struct gm_coll *c)
{
    return c->world;
}

bool gm_coll_busy(const struct gm_coll *c)
{
    return c->active != NULL || c->qhead != NULL || c->kick_pending || c->sends_out > 0;
}

static void copy_traffic(struct gm_coll_traffic *dst, const struct gm_coll_traffic *src)
{
    if (dst != NULL)
        *dst = *src;
}

void gm_coll_traffic_peer(const struct gm_coll *c, int peer, struct gm_coll_traffic *sent,
                          struct gm_coll_traffic *recvd)
{
    GM_ASSERT(peer >= 0 && peer < c->world);
    copy_traffic(sent, &c->sent[peer]);
    copy_traffic(recvd, &c->recvd[peer]);
}

void gm_coll_traffic_codec(const struct gm_coll *c, enum gm_codec codec,
                           struct gm_coll_traffic *sent, struct gm_coll_traffic *recvd)
{
    GM_ASSERT((unsigned)codec < GM_CODEC_COUNT);
    copy_traffic(sent, &c->sent_codec[codec]);
    copy_traffic(recvd, &c->recvd_codec[codec]);
}

void gm_coll_traffic_total(const struct gm_coll *c, struct gm_coll_traffic *sent,
                           struct gm_coll_traffic *recvd)
{
    struct gm_coll_traffic s = {0}, r = {0};

    for (int p = 0; p < c->world; p++) {
        s.payload_bytes += c->sent[p].payload_bytes;
        s.frame_bytes += c->sent[p].frame_bytes;
        s.msgs += c->sent[p].msgs;
        r.payload_bytes += c->recvd[p].payload_bytes;
        r.frame_bytes += c->recvd[p].frame_bytes;
        r.msgs += c->recvd[p].msgs;
    }
    copy_traffic(sent, &s);
    copy_traffic(recvd, &r);
}

void gm_coll_traffic_reset(struct gm_coll *c)
{
    memset(c->sent, 0, (size_t)c->world * sizeof(*c->sent));
    memset(c->recvd, 0, (size_t)c->world * sizeof(*c->recvd));
    memset(c->sent_codec, 0, sizeof(c->sent_codec));
    memset(c->recvd_codec, 0, sizeof(c->recvd_codec));
}
