/*
 * discovery/discovery.c - see discovery.h.
 *
 * Choices: libuv UDP handles (no extra event source); the outgoing interface
 * is set with IP_MULTICAST_IF right before each uv_udp_try_send, which sends
 * synchronously, so the setting cannot be raced by a queued send (a beacon
 * that would block is dropped: the next round follows).  Interface changes
 * come from discovery/iface.h's rtnetlink watch plus a slow rescan.  Log lines
 * for dropped datagrams are kept to one per (source, reason) in a small ring.
 */
#include "discovery/discovery.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "common/log.h"
#include "common/time.h"
#include "discovery/iface.h"

#define TICK_MS 250
#define FAST_ROUNDS 5         /* one a second after start or a change */
#define MIN_ROUND_GAP_MS 250  /* answers to SOLICIT and announce */
#define RESCAN_MS 30000       /* interfaces, when no change was signalled */
#define SOLICIT_EVERY_MS 1000 /* joiner */
#define JOIN_KEYS_MAX 16
#define SEEN_MAX 1024 /* senders the replay filter remembers */
#define LOG_SLOTS 64
#define MS 1000000ull

enum drop {
    DROP_FORMAT = 1,
    DROP_AUTH,
    DROP_STALE,
    DROP_REPLAY,
    DROP_FOREIGN,
};

struct ifslot {
    unsigned index;
    char name[IF_NAMESIZE];
    char addr[INET_ADDRSTRLEN];
};

struct logslot {
    char src[INET6_ADDRSTRLEN];
    int reason;
};

struct gm_disc {
    uv_loop_t *loop;
    uv_udp_t rx, tx;
    uv_timer_t timer;
    struct gm_iface_watch *watch;
    int handles_open, stopping;
    struct sockaddr_in group;
    char group_ip[INET_ADDRSTRLEN];
    char cluster[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
    char host[GM_BEACON_HOST_MAX], tunnels[256], allow[256];
    uint16_t port;
    const struct gm_cert *ca, *cert;
    const struct gm_key *key;
    uint8_t bkey[GM_BEACON_KEY_LEN], jkey[GM_BEACON_KEY_LEN];
    int have_bkey, have_jkey, admitter;
    uint8_t jkeys[JOIN_KEYS_MAX][GM_BEACON_KEY_LEN];
    size_t njkeys;
    gm_disc_hint_fn on_hint;
    void (*on_admitter)(void *arg, const struct gm_beacon *b, const char *address);
    void *arg;
    struct gm_beacon_seen *seen;
    struct ifslot *ifs;
    size_t nifs;
    uint64_t seq;
    uint64_t next_round, last_round, next_rescan;
    int fast_left, rescan_pending;
    struct logslot logs[LOG_SLOTS];
    size_t log_next;
    uint8_t rxbuf[2048];
    struct gm_disc_stats st;
};

static void ignore(int err)
{
    (void)err;
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int gm_disc_parse_group(const char *s, struct sockaddr_in *out)
{
    char ip[INET_ADDRSTRLEN];
    const char *colon = s != NULL ? strrchr(s, ':') : NULL;
    char *end = NULL;
    unsigned long port;
    size_t n;

    if (colon == NULL || (n = (size_t)(colon - s)) == 0 || n >= sizeof(ip))
        return -EINVAL;
    memcpy(ip, s, n);
    ip[n] = '\0';
    port = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port == 0 || port > 65535)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &out->sin_addr) != 1 || !IN_MULTICAST(ntohl(out->sin_addr.s_addr)))
        return -EINVAL;
    return 0;
}

/* Splits our listen "ip:port" into the advertised host ("" for a wildcard) and port. */
static int split_listen(struct gm_disc *d, const char *listen)
{
    const char *colon = strrchr(listen, ':');
    char host[GM_BEACON_HOST_MAX + 2];
    size_t n;
    long port;

    if (colon == NULL || (n = (size_t)(colon - listen)) >= sizeof(host))
        return -EINVAL;
    memcpy(host, listen, n);
    host[n] = '\0';
    port = strtol(colon + 1, NULL, 10);
    if (port <= 0 || port > 65535)
        return -EINVAL;
    d->port = (uint16_t)port;
    if (host[0] == '[' && n >= 2) { /* [v6] */
        memmove(host, host + 1, n - 2);
        host[n - 2] = '\0';
    }
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
        host[0] = '\0';
    snprintf(d->host, sizeof(d->host), "%s", host);
    return 0;
}

/* --- logging drops, once per source and reason --------------------------- */

static const char *drop_name(int reason)
{
    switch (reason) {
    case DROP_FORMAT:
        return "malformed";
    case DROP_AUTH:
        return "unauthenticated (forged, damaged or sealed with another key)";
    case DROP_STALE:
        return "stale (timestamp outside the window: replay or clock skew)";
    case DROP_REPLAY:
        return "replay (not newer than the last beacon from that node)";
    case DROP_FOREIGN:
        return "another cluster";
    default:
        return "?";
    }
}

static void drop(struct gm_disc *d, int reason, const char *src, const char *node)
{
    size_t i;

    d->st.ignored++;
    switch (reason) {
    case DROP_FORMAT:
        d->st.ignored_format++;
        break;
    case DROP_AUTH:
        d->st.ignored_auth++;
        break;
    case DROP_STALE:
        d->st.ignored_stale++;
        break;
    case DROP_REPLAY:
        d->st.ignored_replay++;
        break;
    default:
        d->st.ignored_foreign++;
        break;
    }
    for (i = 0; i < LOG_SLOTS; i++) {
        if (d->logs[i].reason == reason && strcmp(d->logs[i].src, src) == 0) {
            gm_debug("event=beacon-ignored source=%s node=%s reason=\"%s\"", src, node,
                     drop_name(reason));
            return;
        }
    }
    d->logs[d->log_next].reason = reason;
    snprintf(d->logs[d->log_next].src, sizeof(d->logs[0].src), "%s", src);
    d->log_next = (d->log_next + 1) % LOG_SLOTS;
    gm_warn("event=beacon-ignored source=%s node=%s reason=\"%s\" (logged once per source)", src,
            node, drop_name(reason));
}

/* --- sending ----------------------------------------------------------------- */

static void send_all(struct gm_disc *d, const uint8_t *p, size_t len)
{
    uv_buf_t buf = uv_buf_init((char *)p, (unsigned)len);
    size_t i;

    for (i = 0; i < d->nifs; i++) {
        int r = uv_udp_set_multicast_interface(&d->tx, d->ifs[i].addr);
        if (r == 0)
            r = uv_udp_try_send(&d->tx, &buf, 1, (const struct sockaddr *)&d->group);
        if (r >= 0)
            d->st.sent++;
        else
            gm_debug("event=beacon-send-failed iface=%s err=%s", d->ifs[i].name, uv_strerror(r));
    }
}

static void fill_beacon(struct gm_disc *d, struct gm_beacon *b, int64_t now)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->cluster, sizeof(b->cluster), "%s", d->cluster);
    snprintf(b->node, sizeof(b->node), "%s", d->node);
    snprintf(b->host, sizeof(b->host), "%s", d->host);
    b->port = d->port;
    b->flags = d->admitter ? GM_BEACON_F_ADMITTER : 0;
    b->ts_ms = now;
    b->seq = d->seq++;
}

static void send_round(struct gm_disc *d, int solicit)
{
    uint8_t pkt[GM_BEACON_MAX];
    struct gm_beacon b;
    size_t len, i;
    int64_t now = wall_ms();

    d->last_round = gm_time_mono_ns();
    if (d->nifs == 0)
        return;
    if (d->node[0] != '\0') {
        fill_beacon(d, &b, now);
        if (d->have_bkey &&
            gm_beacon_seal_member(&b, d->cert, d->key, d->bkey, pkt, sizeof(pkt), &len) == 0)
            send_all(d, pkt, len);
        for (i = 0; i < d->njkeys; i++)
            if (gm_beacon_seal_join(&b, d->jkeys[i], pkt, sizeof(pkt), &len) == 0)
                send_all(d, pkt, len);
    }
    if (solicit && gm_beacon_solicit(pkt, sizeof(pkt), &len) == 0)
        send_all(d, pkt, len);
}

void gm_disc_announce(struct gm_disc *d)
{
    uint64_t now = gm_time_mono_ns();

    if (d == NULL || d->stopping)
        return;
    if (now - d->last_round >= MIN_ROUND_GAP_MS * MS)
        send_round(d, 0);
    else if (d->next_round > d->last_round + MIN_ROUND_GAP_MS * MS)
        d->next_round = d->last_round + MIN_ROUND_GAP_MS * MS; /* soon, from the timer */
}

/* --- interfaces ----------------------------------------------------------- */

static int slot_same(const struct ifslot *a, const struct ifslot *b)
{
    return a->index == b->index && strcmp(a->addr, b->addr) == 0;
}

static int slot_in(const struct ifslot *s, const struct ifslot *set, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (slot_same(s, &set[i]))
            return 1;
    return 0;
}

/* 1 when name is in the comma/space separated list. */
static int name_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    const char *p = list;

    while (*p != '\0') {
        size_t k = strcspn(p, ", \t");
        if (k == n && strncmp(p, name, n) == 0)
            return 1;
        p += k;
        p += strspn(p, ", \t");
    }
    return 0;
}

/* Takes the interfaces again; returns 1 when the beacon set changed. */
static int rescan(struct gm_disc *d)
{
    struct gm_iface *list = NULL;
    struct ifslot *ns;
    size_t n = 0, i, k = 0;
    int changed = 0, err;

    err = gm_iface_list(d->tunnels, &list, &n);
    if (err != 0) {
        gm_warn("event=iface-list-failed err=%d msg=\"%s\"", err, gm_strerror(err));
        return 0;
    }
    ns = calloc(n ? n : 1, sizeof(*ns));
    if (ns == NULL) {
        free(list);
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (!list[i].multicast || (d->allow[0] != '\0' && !name_listed(d->allow, list[i].name)))
            continue;
        ns[k].index = list[i].index;
        snprintf(ns[k].name, sizeof(ns[k].name), "%s", list[i].name);
        inet_ntop(AF_INET, &list[i].addr4, ns[k].addr, sizeof(ns[k].addr));
        k++;
    }
    free(list);
    for (i = 0; i < d->nifs; i++) {
        if (slot_in(&d->ifs[i], ns, k))
            continue;
        changed = 1;
        /* the kernel drops the membership with the address; this may fail */
        ignore(uv_udp_set_membership(&d->rx, d->group_ip, d->ifs[i].addr, UV_LEAVE_GROUP));
        gm_notice("event=beacon-iface-gone iface=%s address=%s", d->ifs[i].name, d->ifs[i].addr);
    }
    for (i = 0; i < k; i++) {
        if (slot_in(&ns[i], d->ifs, d->nifs))
            continue;
        changed = 1;
        err = uv_udp_set_membership(&d->rx, d->group_ip, ns[i].addr, UV_JOIN_GROUP);
        if (err != 0 && err != UV_EADDRINUSE)
            gm_warn("event=beacon-iface-join-failed iface=%s group=%s err=\"%s\"", ns[i].name,
                    d->group_ip, uv_strerror(err));
        else
            gm_info("event=beacon-iface iface=%s address=%s group=%s", ns[i].name, ns[i].addr,
                    d->group_ip);
    }
    free(d->ifs);
    d->ifs = ns;
    d->nifs = k;
    d->st.ifaces = (unsigned)k;
    return changed;
}

static void restart_schedule(struct gm_disc *d)
{
    d->fast_left = FAST_ROUNDS;
    d->next_round = 0; /* now */
}

static void iface_changed(void *arg)
{
    struct gm_disc *d = arg;

    if (d->stopping)
        return;
    if (rescan(d))
        restart_schedule(d);
}

static uint64_t next_interval_ms(struct gm_disc *d)
{
    uint32_t jitter;

    if (d->node[0] == '\0')
        return SOLICIT_EVERY_MS;
    if (d->fast_left > 0) {
        d->fast_left--;
        return 1000;
    }
    jitter = randombytes_uniform(GM_DISC_INTERVAL_MS * 2 / 5 + 1); /* +-20% */
    return GM_DISC_INTERVAL_MS - GM_DISC_INTERVAL_MS / 5 + jitter;
}

static void tick_cb(uv_timer_t *t)
{
    struct gm_disc *d = t->data;
    uint64_t now = gm_time_mono_ns();

    if (d->stopping)
        return;
    if (now >= d->next_rescan) {
        d->next_rescan = now + RESCAN_MS * MS;
        if (rescan(d))
            restart_schedule(d);
    }
    if (now >= d->next_round) {
        int first = d->fast_left == FAST_ROUNDS;
        send_round(d, first || d->node[0] == '\0');
        d->next_round = now + next_interval_ms(d) * MS;
    }
}

/* --- receiving -------------------------------------------------------------- */

static void source_ip(const struct sockaddr *src, char out[INET6_ADDRSTRLEN])
{
    out[0] = '\0';
    if (src == NULL)
        snprintf(out, INET6_ADDRSTRLEN, "-");
    else if (src->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)src)->sin_addr, out, INET6_ADDRSTRLEN);
    else if (src->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)src)->sin6_addr, out, INET6_ADDRSTRLEN);
    else
        snprintf(out, INET6_ADDRSTRLEN, "?");
}

static void dial_address(const struct gm_beacon *b, const char *src, char out[GM_DISC_ADDR_MAX])
{
    const char *host = b->host[0] != '\0' ? b->host : src;

    if (strchr(host, ':') != NULL)
        snprintf(out, GM_DISC_ADDR_MAX, "[%s]:%u", host, (unsigned)b->port);
    else
        snprintf(out, GM_DISC_ADDR_MAX, "%s:%u", host, (unsigned)b->port);
}

static void input_member(struct gm_disc *d, const uint8_t *p, size_t len, const char *src)
{
    struct gm_beacon b;
    char serial[41], address[GM_DISC_ADDR_MAX];
    int err;

    if (!d->have_bkey)
        return; /* a joiner, or a member without the beacon key */
    err = gm_beacon_open_member(p, len, d->bkey, d->ca, &b, serial);
    if (err != 0) {
        drop(d, err == GM_ERR_FORMAT ? DROP_FORMAT : DROP_AUTH, src, "-");
        return;
    }
    if (strcmp(b.cluster, d->cluster) != 0) {
        drop(d, DROP_FOREIGN, src, b.node);
        return;
    }
    if (strcmp(b.node, d->node) == 0) {
        d->st.ignored_self++;
        return;
    }
    err = gm_beacon_seen_check(d->seen, &b, wall_ms());
    if (err == -EEXIST) {
        /* the same beacon again: normal when it comes by two interfaces */
        d->st.ignored++;
        d->st.ignored_replay++;
        gm_debug("event=beacon-ignored source=%s node=%s reason=\"a copy of the last one\"", src,
                 b.node);
        return;
    }
    if (err != 0) {
        drop(d, err == -ESTALE ? DROP_STALE : DROP_REPLAY, src, b.node);
        return;
    }
    d->st.accepted++;
    dial_address(&b, src, address);
    gm_debug("event=beacon node=%s address=%s admitter=%d", b.node, address,
             (b.flags & GM_BEACON_F_ADMITTER) != 0);
    if (d->on_hint != NULL)
        d->on_hint(d->arg, &b, serial, address);
}

static void input_join(struct gm_disc *d, const uint8_t *p, size_t len, const char *src)
{
    struct gm_beacon b;
    char address[GM_DISC_ADDR_MAX];
    int64_t now = wall_ms();

    if (!d->have_jkey)
        return; /* JOIN beacons are for joiners */
    if (gm_beacon_open_join(p, len, d->jkey, &b) != 0) {
        gm_debug("event=join-beacon-skipped source=%s reason=\"another token\"", src);
        return; /* normal: other tokens, other clusters */
    }
    if (strcmp(b.cluster, d->cluster) != 0) {
        drop(d, DROP_FOREIGN, src, b.node);
        return;
    }
    if (b.ts_ms > now + GM_BEACON_WINDOW_MS || b.ts_ms < now - GM_BEACON_WINDOW_MS) {
        drop(d, DROP_STALE, src, b.node);
        return;
    }
    d->st.accepted++;
    dial_address(&b, src, address);
    if (d->on_admitter != NULL)
        d->on_admitter(d->arg, &b, address);
}

void gm_disc_input(struct gm_disc *d, const uint8_t *p, size_t len, const struct sockaddr *src)
{
    char ip[INET6_ADDRSTRLEN];
    int kind;

    if (d->stopping)
        return;
    d->st.received++;
    source_ip(src, ip);
    kind = gm_beacon_kind(p, len);
    switch (kind) {
    case GM_BEACON_MEMBER:
        input_member(d, p, len, ip);
        break;
    case GM_BEACON_JOIN:
        input_join(d, p, len, ip);
        break;
    case GM_BEACON_SOLICIT:
        if (d->node[0] != '\0')
            gm_disc_announce(d);
        break;
    default:
        drop(d, DROP_FORMAT, ip, "-");
        break;
    }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct gm_disc *d = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)d->rxbuf, sizeof(d->rxbuf));
}

static void recv_cb(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *src,
                    unsigned flags)
{
    struct gm_disc *d = h->data;

    if (nread < 0) {
        gm_debug("event=beacon-recv-error err=%s", uv_strerror((int)nread));
        return;
    }
    if (nread == 0 || src == NULL)
        return;
    if (flags & UV_UDP_PARTIAL) {
        char ip[INET6_ADDRSTRLEN];
        source_ip(src, ip);
        drop(d, DROP_FORMAT, ip, "-");
        return;
    }
    gm_disc_input(d, (const uint8_t *)buf->base, (size_t)nread, src);
}

/* --- lifecycle ---------------------------------------------------------------- */

static void close_cb(uv_handle_t *h)
{
    struct gm_disc *d = h->data;

    if (--d->handles_open == 0) {
        gm_beacon_seen_free(d->seen);
        sodium_memzero(d->bkey, sizeof(d->bkey));
        sodium_memzero(d->jkey, sizeof(d->jkey));
        sodium_memzero(d->jkeys, sizeof(d->jkeys));
        free(d->ifs);
        free(d);
    }
}

void gm_disc_stop(struct gm_disc *d)
{
    if (d == NULL || d->stopping)
        return;
    d->stopping = 1;
    if (d->watch != NULL)
        gm_iface_watch_stop(d->watch);
    d->watch = NULL;
    uv_close((uv_handle_t *)&d->timer, close_cb);
    uv_close((uv_handle_t *)&d->rx, close_cb);
    uv_close((uv_handle_t *)&d->tx, close_cb);
}

static int copy_config(struct gm_disc *d, const struct gm_disc_config *c)
{
    if (gm_disc_parse_group(c->group, &d->group) != 0)
        return -EINVAL;
    inet_ntop(AF_INET, &d->group.sin_addr, d->group_ip, sizeof(d->group_ip));
    snprintf(d->cluster, sizeof(d->cluster), "%s", c->cluster ? c->cluster : "");
    snprintf(d->node, sizeof(d->node), "%s", c->node ? c->node : "");
    snprintf(d->tunnels, sizeof(d->tunnels), "%s", c->tunnels ? c->tunnels : "");
    snprintf(d->allow, sizeof(d->allow), "%s", c->interfaces ? c->interfaces : "");
    if (c->node != NULL && (c->listen == NULL || split_listen(d, c->listen) != 0))
        return -EINVAL;
    if (c->node != NULL && c->bkey != NULL) {
        if (c->ca == NULL || c->cert == NULL || c->key == NULL)
            return -EINVAL;
        memcpy(d->bkey, c->bkey, GM_BEACON_KEY_LEN);
        d->have_bkey = 1;
    }
    if (c->find_jkey != NULL) {
        memcpy(d->jkey, c->find_jkey, GM_BEACON_KEY_LEN);
        d->have_jkey = 1;
    }
    d->ca = c->ca;
    d->cert = c->cert;
    d->key = c->key;
    d->admitter = c->admitter;
    d->on_hint = c->on_hint;
    d->on_admitter = c->on_admitter;
    d->arg = c->arg;
    return 0;
}

static int open_sockets(struct gm_disc *d)
{
    struct sockaddr_in any = {.sin_family = AF_INET};
    int err;

    err = uv_udp_bind(&d->rx, (const struct sockaddr *)&d->group, UV_UDP_REUSEADDR);
    if (err == 0)
        err = uv_udp_recv_start(&d->rx, alloc_cb, recv_cb);
    if (err == 0)
        err = uv_udp_bind(&d->tx, (const struct sockaddr *)&any, 0);
    if (err == 0)
        err = uv_udp_set_multicast_ttl(&d->tx, 1);
    if (err == 0)
        err = uv_udp_set_multicast_loop(&d->tx, 1);
    return err;
}

int gm_disc_start(uv_loop_t *loop, const struct gm_disc_config *cfg, struct gm_disc **out)
{
    struct gm_disc *d;
    int err;

    *out = NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return -ENOMEM;
    d->loop = loop;
    err = copy_config(d, cfg);
    if (err == 0)
        err = gm_beacon_seen_new(SEEN_MAX, GM_BEACON_WINDOW_MS, &d->seen);
    if (err != 0) {
        sodium_memzero(d, sizeof(*d));
        free(d);
        return err;
    }
    randombytes_buf(&d->seq, sizeof(d->seq));
    d->seq >>= 16; /* room to count up; the timestamp orders restarts anyway */
    ignore(uv_udp_init(loop, &d->rx));
    ignore(uv_udp_init(loop, &d->tx));
    ignore(uv_timer_init(loop, &d->timer));
    d->rx.data = d->tx.data = d->timer.data = d;
    d->handles_open = 3;
    err = open_sockets(d);
    if (err == 0)
        err = uv_timer_start(&d->timer, tick_cb, 0, TICK_MS);
    if (err != 0) {
        gm_warn("event=discovery-failed group=%s err=\"%s\"", cfg->group, uv_strerror(err));
        gm_disc_stop(d);
        return err;
    }
    if (gm_iface_watch_start(loop, iface_changed, d, &d->watch) != 0) {
        d->watch = NULL;
        gm_info("event=iface-watch-unavailable fallback=\"rescan every %d s\"", RESCAN_MS / 1000);
    }
    ignore(rescan(d));
    d->next_rescan = gm_time_mono_ns() + RESCAN_MS * MS;
    restart_schedule(d);
    gm_info("event=discovery-started group=%s interfaces=%zu member_beacons=%d", cfg->group,
            d->nifs, d->have_bkey);
    *out = d;
    return 0;
}

void gm_disc_set_join_keys(struct gm_disc *d, const uint8_t (*jkeys)[GM_BEACON_KEY_LEN], size_t n)
{
    if (d == NULL)
        return;
    if (n > JOIN_KEYS_MAX)
        n = JOIN_KEYS_MAX;
    sodium_memzero(d->jkeys, sizeof(d->jkeys));
    if (n > 0)
        memcpy(d->jkeys, jkeys, n * GM_BEACON_KEY_LEN);
    d->njkeys = n;
}

void gm_disc_get_stats(const struct gm_disc *d, struct gm_disc_stats *s)
{
    *s = d->st;
}

void gm_disc_ifaces(const struct gm_disc *d, char *out, size_t cap)
{
    size_t i, off = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (i = 0; i < d->nifs && off < cap; i++) {
        int n = snprintf(out + off, cap - off, "%s%s", i ? "," : "", d->ifs[i].name);
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

/* --- the joiner's search ----------------------------------------------------------- */

struct finder {
    struct gm_disc *d;
    uv_timer_t deadline;
    int found;
    char address[GM_DISC_ADDR_MAX];
    char node[GM_ID_NAME_MAX + 1];
};

static void finder_closed(uv_handle_t *h)
{
    (void)h;
}

static void finder_end(struct finder *f)
{
    gm_disc_stop(f->d);
    f->d = NULL;
    uv_close((uv_handle_t *)&f->deadline, finder_closed);
}

static void found_cb(void *arg, const struct gm_beacon *b, const char *address)
{
    struct finder *f = arg;

    if (f->found || f->d == NULL)
        return;
    f->found = 1;
    snprintf(f->address, sizeof(f->address), "%s", address);
    snprintf(f->node, sizeof(f->node), "%s", b->node);
    finder_end(f);
}

static void deadline_cb(uv_timer_t *t)
{
    struct finder *f = t->data;

    if (f->d != NULL)
        finder_end(f);
}

int gm_disc_find_admitter(const char *group, const char *tunnels, const char *cluster,
                          const uint8_t jkey[GM_BEACON_KEY_LEN], int timeout_ms,
                          char address[GM_DISC_ADDR_MAX], char node[GM_ID_NAME_MAX + 1])
{
    struct gm_disc_config c = {.group = group,
                               .tunnels = tunnels,
                               .cluster = cluster,
                               .find_jkey = jkey,
                               .on_admitter = found_cb};
    struct finder f;
    uv_loop_t loop;
    int err;

    memset(&f, 0, sizeof(f));
    c.arg = &f;
    err = uv_loop_init(&loop);
    if (err != 0)
        return err;
    err = gm_disc_start(&loop, &c, &f.d);
    if (err == 0 && f.d->nifs == 0) {
        gm_disc_stop(f.d);
        err = -ENETDOWN;
    }
    if (err == 0) {
        ignore(uv_timer_init(&loop, &f.deadline));
        f.deadline.data = &f;
        ignore(uv_timer_start(&f.deadline, deadline_cb, (uint64_t)timeout_ms, 0));
    }
    while (uv_run(&loop, UV_RUN_DEFAULT) != 0)
        ;
    ignore(uv_loop_close(&loop));
    if (err != 0)
        return err;
    if (!f.found)
        return -ETIMEDOUT;
    snprintf(address, GM_DISC_ADDR_MAX, "%s", f.address);
    snprintf(node, GM_ID_NAME_MAX + 1, "%s", f.node);
    return 0;
}
