/*
 * agent/net/frame.h - length-prefixed frames (the wire format under TLS).
 *
 * Header, 16 bytes, network byte order:
 *   u16 type | u16 flags | u32 length | u64 request id
 * followed by length payload bytes.  The parser checks the header (known
 * type, known flags, length <= the link's maximum) before it allocates
 * anything, and delivers a payload straight from the input when it arrived
 * in one piece (no copy), else from one buffer of exactly length bytes.
 *
 * Loop thread only; one parser per link.
 */
#ifndef GM_AGENT_NET_FRAME_H
#define GM_AGENT_NET_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_FRAME_HDR_LEN 16
#define GM_FRAME_MAX_DEFAULT (16u << 20) /* 16 MiB: bulk chunks are far smaller */
#define GM_FRAME_F_MORE 0x0001u          /* bulk: more chunks of this request follow */
#define GM_FRAME_F_KNOWN 0x0001u

struct gm_frame_hdr {
    uint16_t type;
    uint16_t flags;
    uint32_t len;
    uint64_t req;
};

/* Returns 1 when the type is one the receiver knows. */
typedef int (*gm_frame_known_fn)(uint16_t type);
/* Called once per complete frame; a non-zero return stops the parser and is
 * returned by gm_frame_parser_feed. payload is valid during the call only. */
typedef int (*gm_frame_cb)(void *arg, const struct gm_frame_hdr *h, const uint8_t *payload);

struct gm_frame_parser {
    uint32_t max_len;
    gm_frame_known_fn known; /* borrowed */
    uint8_t hdr[GM_FRAME_HDR_LEN];
    size_t hdr_have;
    int in_payload;
    int dead; /* sticky after an error */
    struct gm_frame_hdr cur;
    uint8_t *buf; /* owned, cap bytes, reused across frames up to GM_FRAME_KEEP */
    size_t cap, have;
};

#define GM_FRAME_KEEP (1u << 20) /* payload buffers up to this size are kept for the next frame */

void gm_frame_hdr_encode(const struct gm_frame_hdr *h, uint8_t out[GM_FRAME_HDR_LEN]);
/* GM_ERR_PROTO: unknown type or flags; -EMSGSIZE: length over max_len. */
GM_MUST_CHECK int gm_frame_hdr_decode(const uint8_t in[GM_FRAME_HDR_LEN], uint32_t max_len,
                                      gm_frame_known_fn known, struct gm_frame_hdr *out);

void gm_frame_parser_init(struct gm_frame_parser *p, uint32_t max_len, gm_frame_known_fn known);
void gm_frame_parser_free(struct gm_frame_parser *p);
/* Consumes all len bytes; 0, a header error, -ENOMEM or the callback's value. */
GM_MUST_CHECK int gm_frame_parser_feed(struct gm_frame_parser *p, const uint8_t *data, size_t len,
                                       gm_frame_cb cb, void *arg);
/* Zero-copy input, for a reader that can write straight into the parser
 * (the TLS engine decrypts into the payload buffer): *dst and the return value say where and
 * how many bytes the parser wants next (never 0 unless dead), then
 * gm_frame_parser_commit says how many were written there. */
size_t gm_frame_parser_space(struct gm_frame_parser *p, uint8_t **dst);
GM_MUST_CHECK int gm_frame_parser_commit(struct gm_frame_parser *p, size_t n, gm_frame_cb cb,
                                         void *arg);
/* 1 when the parser sits between frames (a clean place for the stream to end). */
int gm_frame_parser_idle(const struct gm_frame_parser *p);

#endif
