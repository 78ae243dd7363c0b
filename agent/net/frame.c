/* agent/net/frame.c - see frame.h. */
#include "agent/net/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/byteorder.h"

void gm_frame_hdr_encode(const struct gm_frame_hdr *h, uint8_t out[GM_FRAME_HDR_LEN])
{
    gm_put_be16(out, h->type);
    gm_put_be16(out + 2, h->flags);
    gm_put_be32(out + 4, h->len);
    gm_put_be64(out + 8, h->req);
}

int gm_frame_hdr_decode(const uint8_t in[GM_FRAME_HDR_LEN], uint32_t max_len,
                        gm_frame_known_fn known, struct gm_frame_hdr *out)
{
    out->type = gm_get_be16(in);
    out->flags = gm_get_be16(in + 2);
    out->len = gm_get_be32(in + 4);
    out->req = gm_get_be64(in + 8);
    if (known != NULL && !known(out->type))
        return GM_ERR_PROTO;
    if ((out->flags & ~GM_FRAME_F_KNOWN) != 0)
        return GM_ERR_PROTO;
    if (out->len > max_len)
        return -EMSGSIZE;
    return 0;
}

void gm_frame_parser_init(struct gm_frame_parser *p, uint32_t max_len, gm_frame_known_fn known)
{
    memset(p, 0, sizeof(*p));
    p->max_len = max_len;
    p->known = known;
}

void gm_frame_parser_free(struct gm_frame_parser *p)
{
    if (p == NULL)
        return;
    free(p->buf);
    p->buf = NULL;
    p->cap = 0;
    p->in_payload = 0;
    p->hdr_have = 0;
    p->have = 0;
}

int gm_frame_parser_idle(const struct gm_frame_parser *p)
{
    return !p->dead && !p->in_payload && p->hdr_have == 0;
}

/* A payload buffer of cur.len bytes (len was checked against max_len). */
static int reserve(struct gm_frame_parser *p)
{
    if (p->cap < p->cur.len) {
        free(p->buf);
        p->cap = 0;
        p->buf = malloc(p->cur.len);
        if (p->buf == NULL)
            return -ENOMEM;
        p->cap = p->cur.len;
    }
    p->have = 0;
    p->in_payload = 1;
    return 0;
}

static int payload_done(struct gm_frame_parser *p, gm_frame_cb cb, void *arg)
{
    int err;

    p->in_payload = 0;
    err = cb(arg, &p->cur, p->buf);
    if (p->cap > GM_FRAME_KEEP) {
        free(p->buf);
        p->buf = NULL;
        p->cap = 0;
    }
    return err;
}

size_t gm_frame_parser_space(struct gm_frame_parser *p, uint8_t **dst)
{
    *dst = NULL;
    if (p->dead)
        return 0;
    if (!p->in_payload) {
        *dst = p->hdr + p->hdr_have;
        return GM_FRAME_HDR_LEN - p->hdr_have;
    }
    *dst = p->buf + p->have;
    return p->cur.len - p->have;
}

int gm_frame_parser_commit(struct gm_frame_parser *p, size_t n, gm_frame_cb cb, void *arg)
{
    int err;

    if (p->dead)
        return GM_ERR_PROTO;
    if (!p->in_payload) {
        if (n > GM_FRAME_HDR_LEN - p->hdr_have)
            return -EINVAL;
        p->hdr_have += n;
        if (p->hdr_have < GM_FRAME_HDR_LEN)
            return 0;
        p->hdr_have = 0;
        err = gm_frame_hdr_decode(p->hdr, p->max_len, p->known, &p->cur);
        if (err != 0)
            goto dead;
        if (p->cur.len == 0) {
            err = cb(arg, &p->cur, NULL);
            if (err != 0)
                goto dead;
            return 0;
        }
        err = reserve(p);
        if (err != 0)
            goto dead;
        return 0;
    }
    if (n > p->cur.len - p->have)
        return -EINVAL;
    p->have += n;
    if (p->have < p->cur.len)
        return 0;
    err = payload_done(p, cb, arg);
    if (err != 0)
        goto dead;
    return 0;
dead:
    p->dead = 1;
    gm_frame_parser_free(p);
    return err;
}

int gm_frame_parser_feed(struct gm_frame_parser *p, const uint8_t *data, size_t len, gm_frame_cb cb,
                         void *arg)
{
    int err;

    if (p->dead)
        return GM_ERR_PROTO;
    while (len > 0) {
        if (!p->in_payload) {
            size_t take = GM_FRAME_HDR_LEN - p->hdr_have;
            if (take > len)
                take = len;
            memcpy(p->hdr + p->hdr_have, data, take);
            p->hdr_have += take;
            data += take;
            len -= take;
            if (p->hdr_have < GM_FRAME_HDR_LEN)
                break;
            p->hdr_have = 0;
            err = gm_frame_hdr_decode(p->hdr, p->max_len, p->known, &p->cur);
            if (err != 0)
                goto dead;
            if (p->cur.len == 0) {
                err = cb(arg, &p->cur, NULL);
                if (err != 0)
                    goto dead;
                continue;
            }
            if (len >= p->cur.len) { /* whole payload here: no copy */
                const uint8_t *payload = data;
                data += p->cur.len;
                len -= p->cur.len;
                err = cb(arg, &p->cur, payload);
                if (err != 0)
                    goto dead;
                continue;
            }
            err = reserve(p);
            if (err != 0)
                goto dead;
        }
        {
            size_t take = p->cur.len - p->have;
            if (take > len)
                take = len;
            memcpy(p->buf + p->have, data, take);
            p->have += take;
            data += take;
            len -= take;
            if (p->have < p->cur.len)
                break;
            err = payload_done(p, cb, arg);
            if (err != 0)
                goto dead;
        }
    }
    return 0;
dead:
    p->dead = 1;
    gm_frame_parser_free(p);
    return err;
}
