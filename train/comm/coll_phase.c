/*
 * train/comm/coll_phase.c - the collective's phase engines (see collective.c for
 * the operation around them, coll_state.h for the shared state).
 *
 * RING: reduce-scatter then all-gather; at stage s < N-1 rank r sends segment
 * r-s and receives r-s-1 (mod N); after N-1 stages it owns segment r+1, and at
 * all-gather stage a it sends r+1-a and receives r-a.  A received chunk is
 * reduced (or stored) and forwarded at once: that is the pipelining.
 * STAR: DIRECT (all to all, everyone sums in member order), REDUCE (members to
 * the root, which sums) and BCAST (root to members), whole buffer in chunks.
 */
#include "train/comm/coll_phase.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

/* --- checks -------------------------------------------------------------- */

/* The exponent bits all set: Inf or NaN.  Eight lanes of max over the
 * exponents, so that the compiler vectorises it. */
bool gm_coll_all_finite(const float *x, size_t n)
{
    uint32_t m[8] = {0};
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            uint32_t u;
            memcpy(&u, &x[i + (size_t)k], sizeof(u));
            u &= 0x7f800000u;
            m[k] = u > m[k] ? u : m[k];
        }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        u &= 0x7f800000u;
        m[0] = u > m[0] ? u : m[0];
    }
    for (int k = 1; k < 8; k++)
        m[0] = m[k] > m[0] ? m[k] : m[0];
    return m[0] != 0x7f800000u;
}

/* --- sending ------------------------------------------------------------- */

void gm_coll_account(struct gm_coll_traffic *t, size_t payload, size_t frame)
{
    t->payload_bytes += payload;
    t->frame_bytes += frame;
    t->msgs++;
}

/* Sends header + payload_bytes (already in w->data after the header). */
int gm_coll_wire_send(struct gm_coll *c, int peer, struct wire *w, struct gm_coll_hdr *h)
{
    int err;

    gm_coll_hdr_encode(h, w->data);
    err = gm_transport_send2(c->t, peer, w->data, w->len, w->body, w->body_len, c->on_sent, w);
    if (err < 0) {
        free(w);
        return err;
    }
    c->sends_out++;
    if (h->type == GM_COLL_MSG_ABORT) {
        gm_coll_account(&c->sent[peer], 0, w->len);
        gm_coll_account(&c->sent_codec[h->codec < GM_CODEC_COUNT ? h->codec : 0], 0, w->len);
    } else {
        gm_coll_account(&c->sent[peer], h->payload_bytes, GM_COLL_HDR_BYTES);
        gm_coll_account(&c->sent_codec[h->codec], h->payload_bytes, GM_COLL_HDR_BYTES);
    }
    return 0;
}

struct wire *gm_coll_wire_new(struct gm_coll *c, size_t payload)
{
    struct wire *w = malloc(sizeof(*w) + GM_COLL_HDR_BYTES + payload);

    if (w == NULL)
        return NULL;
    w->c = c;
    w->len = GM_COLL_HDR_BYTES + payload;
    w->body = NULL;
    w->body_len = 0;
    return w;
}

void gm_coll_base_hdr(const struct gm_coll *c, const struct op *op, struct gm_coll_hdr *h)
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
 * A RING phase's fp32 chunk is not copied: the transport reads it from src
 * (op->buf) in place.  That is safe because the ring writes a region of
 * op->buf only on receiving a message that causally follows the peer having
 * received this rank's last send of that region (so the transport has taken
 * its bytes), and the op completes only once every send is done.
 */
static int send_chunk(struct gm_coll *c, struct op *op, int peer, uint32_t stage, uint32_t chunk,
                      size_t off, size_t cnt, const float *src, const void *raw,
                      const unsigned char **payload)
{
    struct phase *p = &op->ph[op->cur];
    size_t bytes = gm_codec_bytes(p->codec, cnt);
    bool in_place = p->kind == PH_RING && p->codec == GM_CODEC_FP32 && src != NULL && cnt > 0;
    struct wire *w = gm_coll_wire_new(c, in_place ? 0 : bytes);
    struct gm_coll_hdr h;
    unsigned char *pl;

    if (w == NULL)
        return -ENOMEM;
    pl = w->data + GM_COLL_HDR_BYTES;
    if (in_place) {
        w->body = src;
        w->body_len = bytes;
        pl = (unsigned char *)src;
    } else if (src != NULL) {
        gm_codec_encode(p->codec, src, cnt, pl);
    } else if (cnt > 0 && raw != NULL) {
        memcpy(pl, raw, bytes);
    }
    if (payload != NULL)
        *payload = pl;
    gm_coll_base_hdr(c, op, &h);
    h.stage = stage;
    h.chunk = chunk;
    h.offset = off;
    h.count = (uint32_t)cnt;
    h.payload_bytes = (uint32_t)bytes;
    return gm_coll_wire_send(c, peer, w, &h);
}

static int arm(struct gm_coll *c, int peer)
{
    int err;

    GM_ASSERT(!c->armed[peer]);
    err = gm_transport_recv(c->t, peer, c->on_recv, c);
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

void gm_coll_phase_release(struct phase *p)
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
        p->seg_off[j + 1] =
            p->seg_off[j] + op->n / (size_t)p->nm + ((size_t)j < op->n % (size_t)p->nm ? 1 : 0);
    p->finite_checked = true; /* ring_on_msg checks every chunk as it becomes final */
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
    size_t off, cnt;
    uint32_t st = p->stage;
    float *dst;
    int err = 0;

    if (from != mod(p->me - 1, nm))
        return GM_ERR_PROTO;
    seg = ring_recv_seg(p, st);
    chunk_range(p, p->seg_off[seg], seg_len(p, seg), p->chunk, &off, &cnt);
    if (h->stage != st || h->chunk != p->chunk || h->offset != off || h->count != cnt ||
        h->payload_bytes != gm_codec_bytes(p->codec, cnt))
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
            p->nonfinite |= !gm_coll_all_finite(dst, cnt);
        }
    } else { /* all-gather: take the owner's bytes and pass them on unchanged */
        gm_codec_decode(p->codec, pl, cnt, dst);
        p->nonfinite |= !gm_coll_all_finite(dst, cnt);
        if (st < 2 * (uint32_t)nm - 3) /* fp32: dst holds the same bytes, sent in place */
            err = send_chunk(c, op, right, st + 1, p->chunk, off, cnt,
                             p->codec == GM_CODEC_FP32 ? dst : NULL, pl, NULL);
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
    size_t bytes = gm_codec_bytes(p->codec, n);

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
        p->store[j] = malloc(bytes + 1);
        if (p->store[j] == NULL)
            return -ENOMEM;
    }
    return 0;
}

static int send_all_chunks(struct gm_coll *c, struct op *op, struct phase *p, int peer,
                           const float *src, const unsigned char *raw)
{
    size_t off, cnt;

    /* raw holds the whole buffer encoded: a chunk's bytes start where its first element's do
     * (q8: chunks are whole blocks, gm_codec_chunk_elems) */
    for (size_t k = 0; k < nchunks(p, op->n); k++) {
        int err;
        chunk_range(p, 0, op->n, k, &off, &cnt);
        err = send_chunk(c, op, peer, 0, (uint32_t)k, off, cnt, src != NULL ? src + off : NULL,
                         raw != NULL ? raw + gm_codec_bytes(p->codec, off) : NULL, NULL);
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
        if (op->opts.loss != NULL) { /* what the wire drops of this rank's contribution */
            gm_codec_decode(p->codec, p->store[p->me], op->n, op->opts.loss);
            for (size_t i = 0; i < op->n; i++)
                op->opts.loss[i] = op->buf[i] - op->opts.loss[i];
        }
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
    size_t off, cnt, bytes;
    size_t k = p->next_chunk[from];

    if (from == p->me || (p->kind != PH_DIRECT && p->me != p->root && from != p->root) ||
        k >= nchunks(p, op->n))
        return GM_ERR_PROTO;
    chunk_range(p, 0, op->n, k, &off, &cnt);
    bytes = gm_codec_bytes(p->codec, cnt);
    if (h->stage != 0 || h->chunk != k || h->offset != off || h->count != cnt ||
        h->payload_bytes != bytes)
        return GM_ERR_PROTO;
    if (p->kind == PH_BCAST)
        gm_codec_decode(p->codec, pl, cnt, op->buf + off);
    else if (cnt > 0)
        memcpy(p->store[from] + gm_codec_bytes(p->codec, off), pl, bytes);
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

int gm_coll_phase_start(struct gm_coll *c, struct op *op)
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

int gm_coll_phase_on_msg(struct gm_coll *c, struct op *op, struct phase *p, int from,
                         const struct gm_coll_hdr *h, const unsigned char *payload)
{
    if (p->kind == PH_RING)
        return ring_on_msg(c, op, p, from, h, payload);
    return star_on_msg(c, op, p, from, h, payload);
}
