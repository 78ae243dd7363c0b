/*
 * train/comm/coll_wire.c - the collective's message header (big-endian, fixed 56
 * bytes) and the parameter hash; see coll_wire.h.
 */
#include <string.h>
#include "train/comm/coll_wire.h"

#include "common/byteorder.h"
#include "train/kernels/kfn.h"

void gm_coll_hdr_encode(const struct gm_coll_hdr *h, unsigned char *out)
{
    gm_put_be32(out, GM_COLL_MAGIC);
    out[4] = h->type;
    out[5] = h->kind;
    out[6] = h->codec;
    out[7] = h->phase;
    gm_put_be32(out + 8, h->generation);
    gm_put_be32(out + 12, h->seq);
    gm_put_be64(out + 16, h->step);
    gm_put_be64(out + 24, h->total);
    gm_put_be32(out + 32, h->stage);
    gm_put_be32(out + 36, h->chunk);
    gm_put_be64(out + 40, h->offset);
    gm_put_be32(out + 48, h->count);
    gm_put_be32(out + 52, h->payload_bytes);
}

int gm_coll_hdr_decode(const void *buf, size_t len, struct gm_coll_hdr *h)
{
    const unsigned char *p = buf;

    memset(h, 0, sizeof(*h));
    if (buf == NULL || len < GM_COLL_HDR_BYTES || gm_get_be32(p) != GM_COLL_MAGIC)
        return GM_ERR_PROTO;
    h->type = p[4];
    h->kind = p[5];
    h->codec = p[6];
    h->phase = p[7];
    h->generation = gm_get_be32(p + 8);
    h->seq = gm_get_be32(p + 12);
    h->step = gm_get_be64(p + 16);
    h->total = gm_get_be64(p + 24);
    h->stage = gm_get_be32(p + 32);
    h->chunk = gm_get_be32(p + 36);
    h->offset = gm_get_be64(p + 40);
    h->count = gm_get_be32(p + 48);
    h->payload_bytes = gm_get_be32(p + 52);
    if (h->type != GM_COLL_MSG_DATA && h->type != GM_COLL_MSG_ABORT)
        return GM_ERR_PROTO;
    if ((uint64_t)h->payload_bytes != (uint64_t)(len - GM_COLL_HDR_BYTES))
        return GM_ERR_PROTO;
    return 0;
}

uint64_t gm_coll_hash(const void *buf, size_t nbytes)
{
    const unsigned char *p = buf;
    uint64_t h[4];

    /* The lane step, seeds and finish are shared with the CUDA kernel (train/kernels/kfn.h),
     * which runs the four lanes in four threads; here they go through memory once,
     * interleaved. */
    for (int l = 0; l < 4; l++)
        h[l] = gm_khash_seed(l);
    for (size_t i = 0; i + 32 <= nbytes; i += 32) {
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * (size_t)l, sizeof(w));
            h[l] = gm_khash_lane(h[l], w);
        }
    }
    return gm_khash_finish(h, nbytes, p + (nbytes & ~(size_t)31));
}
