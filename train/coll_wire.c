/*
 * train/coll_wire.c - the collective's message header (big-endian, fixed 56
 * bytes; see collective.h), the parameter hash and the hash check (an
 * all-reduce of 16 small integers built from the hash).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "train/collective.h"

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
            if ((double)gm_coll_world(c) * s2 != s * s)
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
    struct gm_coll_opts o = {
        .algo = GM_COLL_DIRECT, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM, .step = step};
    struct hashcheck *hc;
    uint64_t h;
    int err;

    if (c == NULL || cb == NULL || (buf == NULL && nbytes > 0))
        return -EINVAL;
    if (gm_coll_world(c) > 257)
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
