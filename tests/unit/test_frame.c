/* tests/unit/test_frame.c - frame codec (agent/net/frame.h) and message payloads
 * (agent/net/proto.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/frame.h"
#include "agent/net/proto.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

struct seen {
    int n;
    struct gm_frame_hdr h[8];
    uint8_t payload[8][64];
    int stop_at; /* return an error on this frame number (1-based) */
};

static int cb(void *arg, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct seen *s = arg;

    if (s->n < 8) {
        s->h[s->n] = *h;
        if (h->len <= 64 && p != NULL)
            memcpy(s->payload[s->n], p, h->len);
    }
    s->n++;
    return s->n == s->stop_at ? -ECANCELED : 0;
}

static size_t frame(uint8_t *out, uint16_t type, uint16_t flags, uint64_t req, const char *p)
{
    struct gm_frame_hdr h = {.type = type, .flags = flags, .len = (uint32_t)strlen(p), .req = req};

    gm_frame_hdr_encode(&h, out);
    memcpy(out + GM_FRAME_HDR_LEN, p, h.len);
    return GM_FRAME_HDR_LEN + h.len;
}

static void test_header_bytes(void)
{
    struct gm_frame_hdr h = {.type = 0x0102,
                             .flags = 1,
                             .len = 0x03040506,
                             .req = 0x0708090a0b0c0d0eull},
                        back;
    uint8_t b[16];
    const uint8_t want[16] = {1, 2, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

    gm_frame_hdr_encode(&h, b);
    GM_CHECK(memcmp(b, want, 16) == 0);
    GM_CHECK_OK(gm_frame_hdr_decode(b, 0xffffffffu, NULL, &back));
    GM_CHECK_EQ(back.type, h.type);
    GM_CHECK_EQ(back.len, h.len);
    GM_CHECK(back.req == h.req);
    GM_CHECK_ERR(gm_frame_hdr_decode(b, 1000, NULL, &back), -EMSGSIZE);
    GM_CHECK_ERR(gm_frame_hdr_decode(b, 0xffffffffu, gm_proto_type_known, &back), GM_ERR_PROTO);
    b[3] = 2; /* unknown flag */
    GM_CHECK_ERR(gm_frame_hdr_decode(b, 0xffffffffu, NULL, &back), GM_ERR_PROTO);
}

static void test_parser_splits(void)
{
    uint8_t buf[256];
    size_t n = 0, i;
    struct gm_frame_parser p;
    struct seen s;

    n += frame(buf + n, GM_MSG_HELLO, 0, 1, "abc");
    n += frame(buf + n, GM_MSG_PING, 0, 2, "");
    n += frame(buf + n, GM_MSG_BULK, GM_FRAME_F_MORE, 3, "0123456789");
    /* whole buffer at once */
    memset(&s, 0, sizeof(s));
    gm_frame_parser_init(&p, 1024, gm_proto_type_known);
    GM_CHECK_OK(gm_frame_parser_feed(&p, buf, n, cb, &s));
    GM_CHECK_EQ(s.n, 3);
    GM_CHECK(gm_frame_parser_idle(&p));
    gm_frame_parser_free(&p);
    /* one byte at a time gives the same frames */
    memset(&s, 0, sizeof(s));
    gm_frame_parser_init(&p, 1024, gm_proto_type_known);
    for (i = 0; i < n; i++) {
        GM_CHECK_OK(gm_frame_parser_feed(&p, buf + i, 1, cb, &s));
        if (i + 1 < n)
            GM_CHECK(!gm_frame_parser_idle(&p) || s.n > 0);
    }
    GM_CHECK_EQ(s.n, 3);
    GM_CHECK_EQ(s.h[0].type, GM_MSG_HELLO);
    GM_CHECK(memcmp(s.payload[0], "abc", 3) == 0);
    GM_CHECK_EQ(s.h[1].len, 0);
    GM_CHECK_EQ(s.h[2].flags, GM_FRAME_F_MORE);
    GM_CHECK(s.h[2].req == 3);
    GM_CHECK(memcmp(s.payload[2], "0123456789", 10) == 0);
    GM_CHECK(gm_frame_parser_idle(&p));
    /* truncated: the parser is mid-frame */
    GM_CHECK_OK(gm_frame_parser_feed(&p, buf, 10, cb, &s));
    GM_CHECK(!gm_frame_parser_idle(&p));
    GM_CHECK_OK(gm_frame_parser_feed(&p, buf + 10, 8, cb, &s)); /* header done, payload short */
    GM_CHECK(!gm_frame_parser_idle(&p));
    gm_frame_parser_free(&p);
    gm_frame_parser_free(&p); /* idempotent */
}

/* The zero-copy path (space/commit) gives the same frames as feed. */
static void test_parser_space_commit(void)
{
    uint8_t buf[256], *dst;
    size_t n = 0, off = 0, room, step;
    struct gm_frame_parser p;
    struct seen s;
    int err = 0;

    n += frame(buf + n, GM_MSG_HELLO, 0, 1, "abc");
    n += frame(buf + n, GM_MSG_PING, 0, 2, "");
    n += frame(buf + n, GM_MSG_BULK, GM_FRAME_F_MORE, 3, "0123456789");
    for (step = 1; step <= 7; step += 6) {
        memset(&s, 0, sizeof(s));
        off = 0;
        gm_frame_parser_init(&p, 1024, gm_proto_type_known);
        while (off < n && err == 0) {
            room = gm_frame_parser_space(&p, &dst);
            GM_CHECK(room > 0 && dst != NULL);
            if (room > step)
                room = step;
            if (room > n - off)
                room = n - off;
            memcpy(dst, buf + off, room);
            off += room;
            err = gm_frame_parser_commit(&p, room, cb, &s);
        }
        GM_CHECK_OK(err);
        GM_CHECK_EQ(s.n, 3);
        GM_CHECK(memcmp(s.payload[2], "0123456789", 10) == 0);
        GM_CHECK(gm_frame_parser_idle(&p));
        GM_CHECK_ERR(gm_frame_parser_commit(&p, 17, cb, &s), -EINVAL);
        gm_frame_parser_free(&p);
    }
    /* an oversized header is refused on commit, before any payload buffer */
    {
        struct gm_frame_hdr h = {.type = GM_MSG_BULK, .len = 1u << 30};
        gm_frame_parser_init(&p, 1024, gm_proto_type_known);
        GM_CHECK_EQ(gm_frame_parser_space(&p, &dst), GM_FRAME_HDR_LEN);
        gm_frame_hdr_encode(&h, dst);
        GM_CHECK_ERR(gm_frame_parser_commit(&p, GM_FRAME_HDR_LEN, cb, &s), -EMSGSIZE);
        GM_CHECK(p.buf == NULL);
        GM_CHECK_EQ(gm_frame_parser_space(&p, &dst), 0);
        gm_frame_parser_free(&p);
    }
}

static void test_parser_rejects(void)
{
    uint8_t buf[64];
    struct gm_frame_hdr h = {.type = GM_MSG_BULK, .len = 1u << 30};
    struct gm_frame_parser p;
    struct seen s;
    size_t n;

    /* oversized: refused from the header alone, nothing allocated */
    memset(&s, 0, sizeof(s));
    gm_frame_hdr_encode(&h, buf);
    gm_frame_parser_init(&p, 1024, gm_proto_type_known);
    GM_CHECK_ERR(gm_frame_parser_feed(&p, buf, GM_FRAME_HDR_LEN, cb, &s), -EMSGSIZE);
    GM_CHECK(p.buf == NULL);
    GM_CHECK_EQ(s.n, 0);
    /* a dead parser stays dead */
    n = frame(buf, GM_MSG_PING, 0, 0, "");
    GM_CHECK_ERR(gm_frame_parser_feed(&p, buf, n, cb, &s), GM_ERR_PROTO);
    gm_frame_parser_free(&p);
    /* unknown type */
    gm_frame_parser_init(&p, 1024, gm_proto_type_known);
    n = frame(buf, 999, 0, 0, "x");
    GM_CHECK_ERR(gm_frame_parser_feed(&p, buf, n, cb, &s), GM_ERR_PROTO);
    gm_frame_parser_free(&p);
    /* the callback's error stops the parser */
    memset(&s, 0, sizeof(s));
    s.stop_at = 1;
    gm_frame_parser_init(&p, 1024, gm_proto_type_known);
    n = frame(buf, GM_MSG_PING, 0, 0, "a");
    n += frame(buf + n, GM_MSG_PING, 0, 0, "b");
    GM_CHECK_ERR(gm_frame_parser_feed(&p, buf, n, cb, &s), -ECANCELED);
    GM_CHECK_EQ(s.n, 1);
    gm_frame_parser_free(&p);
}

static void test_addr(void)
{
    struct sockaddr_storage ss;
    char out[GM_ADDR_MAX];

    GM_CHECK_OK(gm_proto_addr_parse("127.0.0.1:7700", &ss));
    GM_CHECK_OK(gm_proto_addr_format((struct sockaddr *)&ss, out));
    GM_CHECK_STREQ(out, "127.0.0.1:7700");
    GM_CHECK_OK(gm_proto_addr_parse("[::1]:80", &ss));
    GM_CHECK_OK(gm_proto_addr_format((struct sockaddr *)&ss, out));
    GM_CHECK_STREQ(out, "[::1]:80");
    GM_CHECK_ERR(gm_proto_addr_parse("host:80", &ss), -EINVAL);
    GM_CHECK_ERR(gm_proto_addr_parse("1.2.3.4", &ss), -EINVAL);
    GM_CHECK_ERR(gm_proto_addr_parse("1.2.3.4:70000", &ss), -EINVAL);
    GM_CHECK_ERR(gm_proto_addr_parse("1.2.3.4:", &ss), -EINVAL);
    GM_CHECK_ERR(gm_proto_addr_parse("[::1:80", &ss), -EINVAL);
    gm_proto_addr_fill_host("0.0.0.0:7700", "10.1.2.3:5555", out);
    GM_CHECK_STREQ(out, "10.1.2.3:7700");
    gm_proto_addr_fill_host("10.9.9.9:7700", "10.1.2.3:5555", out);
    GM_CHECK_STREQ(out, "10.9.9.9:7700");
}

static void test_messages(void)
{
    struct gm_msg_join_request rq, rq2;
    struct gm_msg_join_accept ac, ac2;
    struct gm_member m[2] = {{"alpha", "127.0.0.1:1"}, {"beta", "[::1]:2"}}, *mm = NULL;
    struct gm_msg_hello hi = {"alpha", "127.0.0.1:7", "", 0, 0, ""}, hi2;
    struct gm_msg_rate rt = {7, 1u << 20, 4200}, rt2;
    struct gm_link_stat ls[2] = {{"beta", "tunnel", 12.5, 18.25, 1}, {"gamma", "lan", -1, -1, -1}},
                        *ls2 = NULL;
    char msg[64], *json = NULL;
    size_t len = 0, n = 0;
    int code = 0;
#define HELLO_BAD(text) gm_proto_hello_decode((const uint8_t *)(text), strlen(text), &hi2)

    GM_CHECK_OK(gm_proto_hello_encode(&hi, &json, &len));
    GM_CHECK_OK(gm_proto_hello_decode((uint8_t *)json, len, &hi2));
    GM_CHECK_STREQ(hi2.node, "alpha");
    GM_CHECK_STREQ(hi2.listen, "127.0.0.1:7");
    GM_CHECK_STREQ(hi2.link_class, "");
    GM_CHECK_EQ(hi2.mtu, 0);
    free(json);
    snprintf(hi.link_class, sizeof(hi.link_class), "tunnel");
    hi.mtu = 1400;
    GM_CHECK_OK(gm_proto_hello_encode(&hi, &json, &len));
    GM_CHECK_OK(gm_proto_hello_decode((uint8_t *)json, len, &hi2));
    GM_CHECK_STREQ(hi2.link_class, "tunnel");
    GM_CHECK_EQ(hi2.mtu, 1400);
    GM_CHECK_EQ(hi2.proto, GM_PROTO_VERSION); /* the encoder's default */
    GM_CHECK_STREQ(hi2.version, "");
    free(json);
    snprintf(hi.version, sizeof(hi.version), "1.2.3-dev+gabc");
    hi.proto = 7;
    GM_CHECK_OK(gm_proto_hello_encode(&hi, &json, &len));
    GM_CHECK_OK(gm_proto_hello_decode((uint8_t *)json, len, &hi2));
    GM_CHECK_STREQ(hi2.version, "1.2.3-dev+gabc");
    GM_CHECK_EQ(hi2.proto, 7);
    free(json);
    /* a build before versioning: no proto, no version -> protocol 1 */
    GM_CHECK_OK(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\"}"));
    GM_CHECK_EQ(hi2.proto, 1);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"proto\":0}"), GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"proto\":\"2\"}"),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"version\":\"a b\"}"),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"version\":\"\"}"),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"A\",\"listen\":\"1.2.3.4:5\"}"), GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"node\":\"b\"}"), GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"class\":\"moon\"}"),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"mtu\":70000}"),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("{\"node\":\"a\",\"listen\":\"1.2.3.4:5\",\"extra\":1}"), GM_ERR_PROTO);
    GM_CHECK_ERR(HELLO_BAD("[]"), GM_ERR_PROTO);
    GM_CHECK_ERR(gm_proto_hello_decode(NULL, 0, &hi2), GM_ERR_PROTO);
#undef HELLO_BAD

    GM_CHECK_OK(gm_proto_rate_encode(&rt, &json, &len));
    GM_CHECK_OK(gm_proto_rate_decode((uint8_t *)json, len, &rt2));
    GM_CHECK(rt2.req == 7 && rt2.bytes == (1u << 20) && rt2.us == 4200);
    free(json);
    GM_CHECK_ERR(
        gm_proto_rate_decode((const uint8_t *)"{\"req\":1,\"bytes\":5,\"us\":0}", 27, &rt2),
        GM_ERR_PROTO);
    GM_CHECK_OK(gm_proto_link_stats_encode(ls, 2, &json, &len));
    GM_CHECK_OK(gm_proto_link_stats_decode((uint8_t *)json, len, &ls2, &n));
    GM_CHECK_EQ(n, 2);
    if (n == 2) {
        GM_CHECK_STREQ(ls2[0].link_class, "tunnel");
        GM_CHECK(ls2[0].rtt_ms == 12.5 && ls2[0].throughput_mbps == 18.25 && ls2[0].reach == 1);
        GM_CHECK(ls2[1].rtt_ms < 0 && ls2[1].throughput_mbps < 0 && ls2[1].reach == -1);
    }
    free(ls2);
    free(json);
    GM_CHECK_ERR(gm_proto_link_stats_decode((const uint8_t *)"{\"links\":[1]}", 12, &ls2, &n),
                 GM_ERR_PROTO);

    GM_CHECK_OK(gm_proto_members_encode(m, 2, &json, &len));
    GM_CHECK_OK(gm_proto_members_decode((uint8_t *)json, len, &mm, &n));
    GM_CHECK_EQ(n, 2);
    if (n == 2)
        GM_CHECK_STREQ(mm[1].address, "[::1]:2");
    free(mm);
    free(json);

    GM_CHECK_OK(gm_proto_error_encode(GM_ERR_TOKEN, "expired", &json, &len));
    GM_CHECK_OK(gm_proto_error_decode((uint8_t *)json, len, &code, msg, sizeof(msg)));
    GM_CHECK_EQ(code, GM_ERR_TOKEN);
    GM_CHECK_STREQ(msg, "expired");
    free(json);

    memset(&rq, 0, sizeof(rq));
    memset(rq.token_id, 0xab, sizeof(rq.token_id));
    memset(rq.pubkey, 0x11, sizeof(rq.pubkey));
    memset(rq.proof, 0x22, sizeof(rq.proof));
    strcpy(rq.node, "gamma");
    strcpy(rq.listen, "10.0.0.1:7700");
    GM_CHECK_OK(gm_proto_join_request_encode(&rq, &json, &len));
    GM_CHECK_OK(gm_proto_join_request_decode((uint8_t *)json, len, &rq2));
    GM_CHECK(memcmp(&rq, &rq2, sizeof(rq)) == 0);
    /* every truncation of a valid request is refused */
    for (size_t cut = 0; cut < len; cut++)
        GM_CHECK_ERR(gm_proto_join_request_decode((uint8_t *)json, cut, &rq2), GM_ERR_PROTO);
    free(json);

    memset(&ac, 0, sizeof(ac));
    strcpy(ac.node, "gamma");
    ac.cert_pem = "-----BEGIN CERTIFICATE-----\nx\n";
    ac.ca_pem = "-----BEGIN CERTIFICATE-----\ny\n";
    ac.members = m;
    ac.n_members = 2;
    GM_CHECK_OK(gm_proto_join_accept_encode(&ac, &json, &len));
    GM_CHECK_OK(gm_proto_join_accept_decode((uint8_t *)json, len, &ac2));
    GM_CHECK_STREQ(ac2.cert_pem, ac.cert_pem);
    GM_CHECK_EQ(ac2.n_members, 2);
    gm_proto_join_accept_free(&ac2);
    gm_proto_join_accept_free(&ac2);
    GM_CHECK_ERR(gm_proto_join_accept_decode((uint8_t *)json, len - 1, &ac2), GM_ERR_PROTO);
    GM_CHECK(ac2.cert_pem == NULL);
    free(json);
}

int main(void)
{
    GM_TEST_RUN(test_header_bytes);
    GM_TEST_RUN(test_parser_splits);
    GM_TEST_RUN(test_parser_space_commit);
    GM_TEST_RUN(test_parser_rejects);
    GM_TEST_RUN(test_addr);
    GM_TEST_RUN(test_messages);
    return gm_test_finish("test_frame");
}
