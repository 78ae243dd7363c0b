/*
 * tests/fuzz/fuzz_frame.c - the frame parser (agent/net/frame.h) fed arbitrary
 * bytes in arbitrary splits, every complete frame passed to the decoder of
 * its type (agent/net/proto.h), as a link would.  Input: byte 0 = split size
 * (1..128) and path (bit 7: the zero-copy space/commit path the links use,
 * else gm_frame_parser_feed), the rest = the stream.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/frame.h"
#include "agent/net/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_frame(void *arg, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct gm_msg_hello hello;
    struct gm_msg_rate rate;
    char msg[128];
    struct gm_member *m = NULL;
    struct gm_msg_join_request rq;
    struct gm_msg_join_accept ac;
    size_t n = 0;
    int code;

    (void)arg;
    if (h->len > 0 && p == NULL)
        abort(); /* the parser promised a payload */
    switch (h->type) {
    case GM_MSG_HELLO:
        (void)!gm_proto_hello_decode(p, h->len, &hello);
        break;
    case GM_MSG_RATE:
        (void)!gm_proto_rate_decode(p, h->len, &rate);
        break;
    case GM_MSG_LINK_STATS: {
        struct gm_link_stat *ls = NULL;
        if (gm_proto_link_stats_decode(p, h->len, &ls, &n) == 0)
            free(ls);
        break;
    }
    case GM_MSG_MEMBERS:
        if (gm_proto_members_decode(p, h->len, &m, &n) == 0)
            free(m);
        break;
    case GM_MSG_ERROR:
        (void)!gm_proto_error_decode(p, h->len, &code, msg, sizeof(msg));
        break;
    case GM_MSG_JOIN_REQUEST:
        (void)!gm_proto_join_request_decode(p, h->len, &rq);
        break;
    case GM_MSG_JOIN_ACCEPT:
        if (gm_proto_join_accept_decode(p, h->len, &ac) == 0)
            gm_proto_join_accept_free(&ac);
        break;
    case GM_MSG_RENEW_ACCEPT: {
        char *pem = NULL;
        if (gm_proto_renew_decode(p, h->len, &pem) == 0)
            free(pem);
        break;
    }
    default:
        break;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gm_frame_parser p;
    size_t split, off;
    int zero_copy;

    if (size < 1)
        return 0;
    split = (size_t)(data[0] & 0x7f) + 1;
    zero_copy = data[0] & 0x80;
    data++;
    size--;
    gm_frame_parser_init(&p, 1u << 16, gm_proto_type_known);
    for (off = 0; off < size;) {
        size_t n = size - off < split ? size - off : split;
        if (zero_copy) {
            uint8_t *dst = NULL;
            size_t room = gm_frame_parser_space(&p, &dst);
            if (room == 0 || dst == NULL)
                abort(); /* only a dead parser has no room, and we stop at errors */
            if (n > room)
                n = room;
            memcpy(dst, data + off, n);
            if (gm_frame_parser_commit(&p, n, on_frame, NULL) != 0)
                break;
        } else if (gm_frame_parser_feed(&p, data + off, n, on_frame, NULL) != 0) {
            break;
        }
        off += n;
    }
    gm_frame_parser_free(&p);
    return 0;
}
