/*
 * tests/unit/test_discovery.c - the receiving side of discovery, fed real
 * beacons (real keys, certificates and seals) through gm_disc_input, the
 * entry the UDP socket uses.  The discovery object sends nothing here: its
 * interface list names no interface of this machine.  Multicast itself is
 * tested between network namespaces (tests/integration/discovery_lan.sh).
 *
 * Asserted: a fresh beacon becomes a hint with the sender's address; the same
 * datagram again (a replay from a capture), an old one, one with any byte
 * flipped, a truncated one, one sealed with another cluster's beacon key, one
 * sealed with the right key but signed by a node of another cluster, and our
 * own are all ignored and counted by reason; JOIN beacons reach a joiner only
 * under its token's key.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#include <uv.h>

#include "common/err.h"
#include "common/test.h"
#include "tests/unit/world.h"
#include "crypto/beacon.h"
#include "crypto/identity.h"
#include "discovery/discovery.h"

GM_TEST_DEFINE_STATE;

struct seen {
    int hints, admitters;
    struct gm_beacon last;
    char address[GM_DISC_ADDR_MAX];
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_hint(void *arg, const struct gm_beacon *b, const char *serial, const char *address)
{
    struct seen *s = arg;

    (void)serial;
    s->hints++;
    s->last = *b;
    snprintf(s->address, sizeof(s->address), "%s", address);
}

static void on_admitter(void *arg, const struct gm_beacon *b, const char *address)
{
    struct seen *s = arg;

    s->admitters++;
    s->last = *b;
    snprintf(s->address, sizeof(s->address), "%s", address);
}

static size_t member_beacon(const struct world *n, const char *cluster, const char *name,
                            const uint8_t *bkey, int64_t ts, uint64_t seq, uint8_t *out)
{
    struct gm_beacon b;
    size_t len = 0;

    memset(&b, 0, sizeof(b));
    snprintf(b.cluster, sizeof(b.cluster), "%s", cluster);
    snprintf(b.node, sizeof(b.node), "%s", name);
    b.port = 7450;
    b.ts_ms = ts;
    b.seq = seq;
    GM_CHECK_OK(gm_beacon_seal_member(&b, n->cert, n->key, bkey, out, GM_BEACON_MAX, &len));
    return len;
}

static struct sockaddr_in src_addr(const char *ip)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7451)};

    GM_CHECK_EQ(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    return sa;
}

static void close_loop(uv_loop_t *loop)
{
    while (uv_run(loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(loop));
}

static void test_member_beacons(void)
{
    struct world a, b, foreign; /* a and b: cluster lab; foreign: another CA named lab */
    uint8_t bkey1[GM_BEACON_KEY_LEN], bkey2[GM_BEACON_KEY_LEN];
    struct gm_disc_config cfg = {0};
    struct gm_disc *d = NULL;
    struct gm_disc_stats st;
    struct seen seen = {0};
    struct sockaddr_in src = src_addr("10.1.0.2");
    uint8_t pkt[GM_BEACON_MAX], bad[GM_BEACON_MAX];
    size_t len, i;
    uv_loop_t loop;
    unsigned flips_ignored = 0;

    world_make(&a, "lab", "alpha");
    world_node(&a, &b, "lab", "beta");
    world_make(&foreign, "lab", "mallory"); /* same name, another CA */
    gm_beacon_key_generate(bkey1);
    gm_beacon_key_generate(bkey2);
    GM_CHECK_OK(uv_loop_init(&loop));
    cfg.group = GM_DISC_GROUP_DEFAULT;
    cfg.interfaces = "gm-no-such-if"; /* send nothing anywhere */
    cfg.cluster = "lab";
    cfg.node = "alpha";
    cfg.listen = "0.0.0.0:7450";
    cfg.ca = a.ca;
    cfg.cert = a.cert;
    cfg.key = a.key;
    cfg.bkey = bkey1;
    cfg.on_hint = on_hint;
    cfg.arg = &seen;
    GM_CHECK_OK(gm_disc_start(&loop, &cfg, &d));
    if (d == NULL)
        goto out;

    /* fresh: a hint with the datagram's source and the beacon's port */
    len = member_beacon(&b, "lab", "beta", bkey1, now_ms(), 10, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 1);
    GM_CHECK_STREQ(seen.last.node, "beta");
    GM_CHECK_STREQ(seen.address, "10.1.0.2:7450");

    /* the same bytes again: a replay from a capture */
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 1);
    gm_disc_get_stats(d, &st);
    GM_CHECK_EQ(st.ignored_replay, 1);

    /* an older capture of the same sender, and one from before the window */
    len = member_beacon(&b, "lab", "beta", bkey1, now_ms() - 1000, 11, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    len = member_beacon(&b, "lab", "beta", bkey1, now_ms() - GM_BEACON_WINDOW_MS - 5000, 12, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 1);
    gm_disc_get_stats(d, &st);
    GM_CHECK_EQ(st.ignored_replay, 2);
    GM_CHECK_EQ(st.ignored_stale, 1);

    /* every single flipped byte of a fresh beacon */
    len = member_beacon(&b, "lab", "beta", bkey1, now_ms() + 10, 20, pkt);
    for (i = 0; i < len; i++) {
        int before = seen.hints;
        memcpy(bad, pkt, len);
        bad[i] ^= 0x40;
        gm_disc_input(d, bad, len, (struct sockaddr *)&src);
        flips_ignored += seen.hints == before;
    }
    GM_CHECK_EQ(flips_ignored, (unsigned)len);
    /* truncated */
    gm_disc_input(d, pkt, len / 2, (struct sockaddr *)&src);
    gm_disc_input(d, pkt, 3, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 1);
    /* the untouched one still counts: nothing above poisoned the filter */
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 2);

    /* another cluster's beacon key */
    len = member_beacon(&b, "lab", "beta", bkey2, now_ms() + 20, 30, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    /* our beacon key (leaked), signed by a node of another cluster */
    len = member_beacon(&foreign, "lab", "mallory", bkey1, now_ms(), 1, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 2);
    gm_disc_get_stats(d, &st);
    GM_CHECK(st.ignored_auth >= 2);

    /* our own beacon, looped back */
    len = member_beacon(&a, "lab", "alpha", bkey1, now_ms(), 1, pkt);
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.hints, 2);
    gm_disc_get_stats(d, &st);
    GM_CHECK_EQ(st.ignored_self, 1);
    GM_CHECK_EQ(st.accepted, 2);

    /* garbage of every small length */
    for (i = 0; i < 64; i++) {
        memset(bad, (int)i, sizeof(bad));
        gm_disc_input(d, bad, i, (struct sockaddr *)&src);
    }
    GM_CHECK_EQ(seen.hints, 2);
    gm_disc_stop(d);
out:
    close_loop(&loop);
    world_free(&a);
    world_free(&b);
    world_free(&foreign);
}

static void test_join_beacons(void)
{
    uint8_t v1[GM_TOKEN_VERIFIER_LEN], v2[GM_TOKEN_VERIFIER_LEN];
    uint8_t k1[GM_BEACON_KEY_LEN], k2[GM_BEACON_KEY_LEN], pkt[GM_BEACON_MAX];
    struct gm_disc_config cfg = {0};
    struct gm_disc *d = NULL;
    struct seen seen = {0};
    struct sockaddr_in src = src_addr("10.1.0.1");
    struct gm_beacon b;
    size_t len = 0;
    uv_loop_t loop;

    randombytes_buf(v1, sizeof(v1));
    randombytes_buf(v2, sizeof(v2));
    gm_beacon_join_key(v1, k1);
    gm_beacon_join_key(v2, k2);
    GM_CHECK_OK(uv_loop_init(&loop));
    cfg.group = GM_DISC_GROUP_DEFAULT;
    cfg.interfaces = "gm-no-such-if";
    cfg.cluster = "lab";
    cfg.find_jkey = k1;
    cfg.on_admitter = on_admitter;
    cfg.arg = &seen;
    GM_CHECK_OK(gm_disc_start(&loop, &cfg, &d));
    if (d == NULL)
        goto out;
    memset(&b, 0, sizeof(b));
    snprintf(b.cluster, sizeof(b.cluster), "lab");
    snprintf(b.node, sizeof(b.node), "admin");
    b.port = 7450;
    b.flags = GM_BEACON_F_ADMITTER;
    b.ts_ms = now_ms();
    /* another token's beacon: not for us */
    GM_CHECK_OK(gm_beacon_seal_join(&b, k2, pkt, sizeof(pkt), &len));
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.admitters, 0);
    /* ours, but stale */
    b.ts_ms = now_ms() - GM_BEACON_WINDOW_MS - 1000;
    GM_CHECK_OK(gm_beacon_seal_join(&b, k1, pkt, sizeof(pkt), &len));
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.admitters, 0);
    /* ours, fresh; the host in the beacon wins over the source address */
    b.ts_ms = now_ms();
    snprintf(b.host, sizeof(b.host), "10.9.0.1");
    GM_CHECK_OK(gm_beacon_seal_join(&b, k1, pkt, sizeof(pkt), &len));
    gm_disc_input(d, pkt, len, (struct sockaddr *)&src);
    GM_CHECK_EQ(seen.admitters, 1);
    GM_CHECK_STREQ(seen.address, "10.9.0.1:7450");
    GM_CHECK_STREQ(seen.last.node, "admin");
    gm_disc_stop(d);
out:
    close_loop(&loop);
}

static void test_groups(void)
{
    struct sockaddr_in g;

    GM_CHECK_OK(gm_disc_parse_group("239.192.74.50:7451", &g));
    GM_CHECK_EQ(ntohs(g.sin_port), 7451);
    GM_CHECK_ERR(gm_disc_parse_group("10.0.0.1:7451", &g), -EINVAL); /* not multicast */
    GM_CHECK_ERR(gm_disc_parse_group("239.192.74.50", &g), -EINVAL);
    GM_CHECK_ERR(gm_disc_parse_group("239.192.74.50:0", &g), -EINVAL);
    GM_CHECK_ERR(gm_disc_parse_group("239.192.74.50:99999", &g), -EINVAL);
    GM_CHECK_ERR(gm_disc_parse_group("off", &g), -EINVAL);
    GM_CHECK_ERR(gm_disc_parse_group(NULL, &g), -EINVAL);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    GM_TEST_RUN(test_groups);
    GM_TEST_RUN(test_member_beacons);
    GM_TEST_RUN(test_join_beacons);
    return gm_test_finish("test_discovery");
}
