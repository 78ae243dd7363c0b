/*
 * tests/unit/test_iface.c - interfaces, egress, classes, path MTU, watch (discovery/iface.h).
 *
 * Real interfaces only.  The first part needs nothing: lo, the classifier on
 * hand-made structs, the tunnels list, the watch's contract.  The second part
 * runs as root in a forked child that unshares a network and a mount
 * namespace (and mounts its own /sys, as `ip netns exec` does, so sysfs shows
 * the new namespace); the test process itself stays where it was:
 *
 *      child netns
 *      lo          127.0.0.1/8, ::1
 *      gmtun0      tun   10.77.0.1/24, fd77::1/64; 10.99.0.0/16 routed here
 *      gmtap0      tap   10.78.0.1/24
 *      gmdum0      dummy 10.79.0.1/24, multicast on     (when the kernel has dummy)
 *      gmveth0 --- gmveth1   veth pair
 *        198.51.100.1/24, fd80::1/64        10.81.0.1/24, multicast off
 *        203.0.113.0/24 via 198.51.100.254
 *      gmwg0       wireguard                             (when the kernel has it)
 *
 * The child exits with its failure count; a skip (not root, no namespaces,
 * no `ip`) prints a note and skips only that part.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/test.h"
#include "discovery/iface.h"

GM_TEST_DEFINE_STATE;

#define CHILD_SKIP 250 /* exit status of a child that could not set up its namespace */

/* --- helpers --------------------------------------------------------------- */

static struct sockaddr_in sin4(const char *ip, unsigned short port)
{
    struct sockaddr_in s;

    memset(&s, 0, sizeof(s));
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &s.sin_addr) != 1)
        fprintf(stderr, "bad test address %s\n", ip);
    return s;
}

static struct sockaddr_in6 sin6(const char *ip, unsigned short port)
{
    struct sockaddr_in6 s;

    memset(&s, 0, sizeof(s));
    s.sin6_family = AF_INET6;
    s.sin6_port = htons(port);
    if (inet_pton(AF_INET6, ip, &s.sin6_addr) != 1)
        fprintf(stderr, "bad test address %s\n", ip);
    return s;
}

static struct in_addr ip4(const char *ip)
{
    return sin4(ip, 0).sin_addr;
}

/* Class of dst (an IPv4 or IPv6 literal) through egress. */
static enum gm_link_class class_of(const char *dst, const struct gm_iface *egress)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;

    if (strchr(dst, ':') != NULL) {
        a6 = sin6(dst, 0);
        return gm_iface_classify((struct sockaddr *)&a6, egress);
    }
    a4 = sin4(dst, 0);
    return gm_iface_classify((struct sockaddr *)&a4, egress);
}

/* Egress for dst (IPv4 or IPv6 literal). */
static int egress_of(const char *dst, const char *tunnels, struct gm_iface *out)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;

    if (strchr(dst, ':') != NULL) {
        a6 = sin6(dst, 4242);
        return gm_iface_egress((struct sockaddr *)&a6, tunnels, out);
    }
    a4 = sin4(dst, 4242);
    return gm_iface_egress((struct sockaddr *)&a4, tunnels, out);
}

static const struct gm_iface *find(const struct gm_iface *v, size_t n, const char *name)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    return NULL;
}

/* Copies the named interface out of a fresh list; 0 when found. */
static int lookup(const char *tunnels, const char *name, struct gm_iface *out)
{
    struct gm_iface *v = NULL;
    const struct gm_iface *f;
    size_t n = 0;
    int err;

    memset(out, 0, sizeof(*out));
    err = gm_iface_list(tunnels, &v, &n);
    if (err < 0)
        return err;
    f = find(v, n, name);
    if (f != NULL)
        *out = *f;
    free(v);
    return f != NULL ? 0 : -ENODEV;
}

/* Runs a shell command; returns its exit status (0 = success). */
__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd); /* a failing check prints the command */
}

/* A connected UDP socket to dst (IPv4 or IPv6 literal), or -1. */
static int udp_to(const char *dst)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    int fd, rc;

    if (strchr(dst, ':') != NULL) {
        a6 = sin6(dst, 9);
        fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&a6, sizeof(a6));
    } else {
        a4 = sin4(dst, 9);
        fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&a4, sizeof(a4));
    }
    if (rc < 0 && fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* --- no privileges needed -------------------------------------------------- */

static void test_class_names(void)
{
    GM_CHECK_STREQ(gm_class_name(GM_CLASS_LAN), "lan");
    GM_CHECK_STREQ(gm_class_name(GM_CLASS_TUNNEL), "tunnel");
    GM_CHECK_STREQ(gm_class_name(GM_CLASS_WAN), "wan");
    GM_CHECK_STREQ(gm_class_name((enum gm_link_class)0), "unknown");
}

static void test_list_lo(void)
{
    struct gm_iface *v = NULL;
    const struct gm_iface *lo;
    size_t n = 0, i;

    GM_CHECK_OK(gm_iface_list(NULL, &v, &n));
    GM_CHECK(n >= 1);
    lo = find(v, n, "lo");
    GM_CHECK(lo != NULL);
    if (lo != NULL) {
        GM_CHECK_STREQ(lo->kind, "loopback");
        GM_CHECK_EQ(lo->index, if_nametoindex("lo"));
        GM_CHECK(lo->flags & IFF_LOOPBACK);
        GM_CHECK_EQ(lo->tunnel, 0);
        GM_CHECK_EQ(lo->multicast, 0);
        GM_CHECK_EQ(lo->addr4.s_addr, ip4("127.0.0.1").s_addr);
        GM_CHECK_EQ(lo->mask4.s_addr, ip4("255.0.0.0").s_addr);
        GM_CHECK(lo->mtu > 0);
    }
    /* one entry per device, every one named and indexed */
    for (i = 0; i < n; i++) {
        GM_CHECK(v[i].name[0] != '\0');
        GM_CHECK(strchr(v[i].name, ':') == NULL);
        GM_CHECK(find(v, n, v[i].name) == &v[i]);
        GM_CHECK(v[i].kind[0] != '\0');
        GM_CHECK(!v[i].multicast || ((v[i].flags & IFF_UP) && v[i].addr4.s_addr != 0 &&
                                     !v[i].tunnel && !(v[i].flags & IFF_LOOPBACK)));
    }
    free(v);
}

static void test_tunnels_list(void)
{
    struct gm_iface lo, e;
    struct gm_iface *v = (struct gm_iface *)&lo; /* must be cleared on error */
    size_t n = 7;

    /* "a, lo ,,c": lo listed between blanks and empty items */
    GM_CHECK_OK(lookup("a, lo ,,c", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 1);
    GM_CHECK_STREQ(lo.kind, "loopback"); /* the list marks, the kind stays */
    GM_CHECK_EQ(lo.multicast, 0);
    GM_CHECK_OK(lookup("a, b ,,c", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 0);
    GM_CHECK_OK(lookup("xlo,lo2,l,o", "lo", &lo)); /* whole names only */
    GM_CHECK_EQ(lo.tunnel, 0);
    GM_CHECK_OK(lookup(",,,lo", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 1);
    GM_CHECK_OK(lookup("\tlo\n", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 1);
    GM_CHECK_OK(lookup("", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 0);
    GM_CHECK_OK(lookup(" , ", "lo", &lo));
    GM_CHECK_EQ(lo.tunnel, 0);
    GM_CHECK_OK(lookup("abcdefghijklmno", "lo", &lo)); /* 15 characters: longest valid */

    /* names no interface can have */
    GM_CHECK_ERR(gm_iface_list("lo, abcdefghijklmnop", &v, &n), -EINVAL); /* 16 characters */
    GM_CHECK(v == NULL);
    GM_CHECK_EQ(n, 0);
    GM_CHECK_ERR(gm_iface_list("lo/x", &v, &n), -EINVAL);
    GM_CHECK_ERR(gm_iface_list("eth0:1", &v, &n), -EINVAL);
    GM_CHECK_ERR(gm_iface_list("..", &v, &n), -EINVAL);
    GM_CHECK_ERR(gm_iface_list("a,.", &v, &n), -EINVAL);

    /* egress takes the same list */
    GM_CHECK_OK(egress_of("127.0.0.1", "wg9 lo", &e));
    GM_CHECK_STREQ(e.name, "lo");
    GM_CHECK_EQ(e.tunnel, 1);
    GM_CHECK_EQ(class_of("127.0.0.1", &e), GM_CLASS_TUNNEL);
    GM_CHECK_ERR(egress_of("127.0.0.1", "lo/", &e), -EINVAL);
}

static void test_egress_lo(void)
{
    struct gm_iface e;
    struct sockaddr_un un;
    struct sockaddr_in a4 = sin4("127.0.0.1", 0); /* port 0 is allowed */

    GM_CHECK_OK(egress_of("127.0.0.1", NULL, &e));
    GM_CHECK_STREQ(e.name, "lo");
    GM_CHECK_STREQ(e.kind, "loopback");
    GM_CHECK_EQ(e.index, if_nametoindex("lo"));
    GM_CHECK_EQ(e.tunnel, 0);
    GM_CHECK_EQ(e.addr4.s_addr, ip4("127.0.0.1").s_addr);
    GM_CHECK_EQ(class_of("127.0.0.1", &e), GM_CLASS_LAN);
    GM_CHECK_OK(egress_of("127.3.2.1", "", &e));
    GM_CHECK_STREQ(e.name, "lo");
    GM_CHECK_OK(gm_iface_egress((struct sockaddr *)&a4, NULL, &e));
    GM_CHECK_STREQ(e.name, "lo");

    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    memset(&e, 0x5a, sizeof(e));
    GM_CHECK_ERR(gm_iface_egress((struct sockaddr *)&un, NULL, &e), -EAFNOSUPPORT);
    GM_CHECK_EQ(e.name[0], 0); /* cleared on entry */
    GM_CHECK_EQ(e.index, 0);
    GM_CHECK_ERR(gm_iface_egress(NULL, NULL, &e), -EINVAL);
}

static void test_classify(void)
{
    struct gm_iface eth, pub, tun, nomask;

    memset(&eth, 0, sizeof(eth));
    snprintf(eth.name, sizeof(eth.name), "eth9");
    snprintf(eth.kind, sizeof(eth.kind), "ether");
    eth.flags = IFF_UP | IFF_MULTICAST;
    eth.addr4 = ip4("10.0.0.1");
    eth.mask4 = ip4("255.255.255.0");
    pub = eth; /* a public /24: only the subnet rule makes its neighbours lan */
    pub.addr4 = ip4("198.51.100.1");
    tun = eth;
    snprintf(tun.kind, sizeof(tun.kind), "tun");
    tun.tunnel = 1;
    nomask = pub;
    nomask.mask4.s_addr = 0;

    GM_CHECK_EQ(class_of("8.8.8.8", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("10.0.0.7", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("192.168.1.1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("198.51.100.7", &pub), GM_CLASS_LAN);   /* same subnet */
    GM_CHECK_EQ(class_of("198.51.100.255", &pub), GM_CLASS_LAN); /* still inside */
    GM_CHECK_EQ(class_of("198.51.101.7", &pub), GM_CLASS_WAN);   /* next /24 */
    GM_CHECK_EQ(class_of("198.51.100.7", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("198.51.100.7", &nomask), GM_CLASS_WAN); /* no mask, no subnet */
    GM_CHECK_EQ(class_of("198.51.100.7", NULL), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("10.1.1.1", NULL), GM_CLASS_LAN);

    /* every private range, just inside and just outside */
    GM_CHECK_EQ(class_of("10.255.255.255", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("11.0.0.0", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("9.255.255.255", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("172.16.0.0", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("172.31.255.255", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("172.15.255.255", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("172.32.0.0", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("192.168.255.255", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("192.169.0.0", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("192.167.255.255", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("100.64.0.0", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("100.127.255.255", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("100.63.255.255", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("100.128.0.0", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("127.0.0.1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("127.255.0.9", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("128.0.0.1", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("169.254.0.1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("169.255.0.1", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("169.253.0.1", &eth), GM_CLASS_WAN);

    /* IPv6 */
    GM_CHECK_EQ(class_of("fc00::1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("fdff:ffff::1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("fe00::1", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("fb00::1", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("fe80::1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("febf:ffff::1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("fec0::1", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("::1", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("::2", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("2001:4860:4860::8888", &eth), GM_CLASS_WAN);
    /* v4-mapped IPv6 is judged as IPv4, subnet rule included */
    GM_CHECK_EQ(class_of("::ffff:10.1.2.3", &eth), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("::ffff:8.8.8.8", &eth), GM_CLASS_WAN);
    GM_CHECK_EQ(class_of("::ffff:198.51.100.9", &pub), GM_CLASS_LAN);
    GM_CHECK_EQ(class_of("::ffff:198.51.101.9", &pub), GM_CLASS_WAN);

    /* a tunnel egress wins over everything */
    GM_CHECK_EQ(class_of("8.8.8.8", &tun), GM_CLASS_TUNNEL);
    GM_CHECK_EQ(class_of("10.0.0.7", &tun), GM_CLASS_TUNNEL);
    GM_CHECK_EQ(class_of("127.0.0.1", &tun), GM_CLASS_TUNNEL);
    GM_CHECK_EQ(class_of("2001:4860:4860::8888", &tun), GM_CLASS_TUNNEL);
    GM_CHECK_EQ(class_of("fe80::1", &tun), GM_CLASS_TUNNEL);
}

static void test_path_mtu_lo(void)
{
    struct gm_iface lo;
    int fd, ufd;

    GM_CHECK_OK(lookup(NULL, "lo", &lo));
    fd = udp_to("127.0.0.1");
    GM_CHECK(fd >= 0);
    if (fd >= 0) {
        GM_CHECK(lo.mtu > 0);
        GM_CHECK_EQ(gm_iface_path_mtu(fd), GM_MIN(lo.mtu, 65535)); /* IPv4 caps at 65535 */
        close(fd);
    }
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); /* not connected */
    GM_CHECK(fd >= 0);
    GM_CHECK_EQ(gm_iface_path_mtu(fd), 0);
    close(fd);
    ufd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    GM_CHECK(ufd >= 0);
    GM_CHECK_EQ(gm_iface_path_mtu(ufd), 0);
    close(ufd);
    GM_CHECK_EQ(gm_iface_path_mtu(-1), 0);
}

static void count_cb(void *arg)
{
    (*(int *)arg)++;
}

static void test_watch_contract(void)
{
    uv_loop_t loop;
    struct gm_iface_watch *w = (struct gm_iface_watch *)&loop;
    int calls = 0, err;

    GM_CHECK_OK(uv_loop_init(&loop));
    GM_CHECK_ERR(gm_iface_watch_start(&loop, NULL, &calls, &w), -EINVAL);
    GM_CHECK(w == NULL);
    GM_CHECK_ERR(gm_iface_watch_start(NULL, count_cb, &calls, &w), -EINVAL);
    gm_iface_watch_stop(NULL); /* NULL-safe */

    /* start then stop at once: the handles close, the struct is freed in the
     * last close callback (ASan would see a leak), cb never runs */
    err = gm_iface_watch_start(&loop, count_cb, &calls, &w);
    if (err < 0) {
        fprintf(stderr, "note: no rtnetlink here (%s): callers poll instead\n", gm_strerror(err));
        GM_CHECK(w == NULL);
    } else {
        GM_CHECK(w != NULL);
        gm_iface_watch_stop(w);
        GM_CHECK_OK(uv_run(&loop, UV_RUN_DEFAULT));
    }
    GM_CHECK_EQ(calls, 0);
    GM_CHECK_OK(uv_loop_close(&loop));
}

/* --- root, in a fresh network namespace (forked child) --------------------- */

/* The watch, run first while the namespace is still quiet (lo down, nothing
 * else): burst 1 must give exactly one callback, 200 ms to 2 s later; burst 2
 * starts a debounce that the stop cancels, so no callback follows it. */
struct watch_run {
    uv_loop_t loop;
    uv_timer_t step, guard;
    struct gm_iface_watch *w;
    int calls;
    uint64_t t_burst, t_cb;
};

static void run_finish(struct watch_run *r)
{
    gm_iface_watch_stop(r->w);
    r->w = NULL;
    uv_close((uv_handle_t *)&r->step, NULL);
    uv_close((uv_handle_t *)&r->guard, NULL);
}

static void step_end(uv_timer_t *t)
{
    struct watch_run *r = t->data;

    GM_CHECK_EQ(r->calls, 1); /* nothing after the stop */
    run_finish(r);
}

static void step_stop(uv_timer_t *t)
{
    struct watch_run *r = t->data;

    gm_iface_watch_stop(r->w); /* a debounce from burst 2 is pending now */
    r->w = NULL;
    uv_timer_start(&r->step, step_end, 400, 0);
}

static void step_quiet(uv_timer_t *t)
{
    struct watch_run *r = t->data;

    GM_CHECK_EQ(r->calls, 1); /* one callback for the whole burst */
    GM_CHECK_EQ(sh("ip link del gmdum1"), 0);
    uv_timer_start(&r->step, step_stop, 50, 0);
}

static void on_change(void *arg)
{
    struct watch_run *r = arg;

    if (++r->calls == 1) {
        r->t_cb = uv_now(&r->loop);
        uv_timer_stop(&r->guard);
        uv_timer_start(&r->step, step_quiet, 500, 0);
    }
}

static void guard_fired(uv_timer_t *t)
{
    struct watch_run *r = t->data;

    GM_CHECK(r->calls > 0 && "no change callback within 2 s");
    run_finish(r);
}

static void step_burst(uv_timer_t *t)
{
    struct watch_run *r = t->data;

    uv_update_time(&r->loop);
    r->t_burst = uv_now(&r->loop);
    uv_timer_start(&r->guard, guard_fired, 2000, 0);
    /* several changes back to back: link, MTU, address */
    GM_CHECK_EQ(sh("{ ip link add gmdum1 type dummy 2>/dev/null ||"
                   "  ip link add gmdum1 type veth peer name gmdum1p; } &&"
                   " ip link set gmdum1 mtu 1300 && ip addr add 10.66.0.1/24 dev gmdum1"),
                0);
}

static void child_watch(void)
{
    struct watch_run r;
    int err;

    memset(&r, 0, sizeof(r));
    GM_CHECK_OK(uv_loop_init(&r.loop));
    err = gm_iface_watch_start(&r.loop, on_change, &r, &r.w);
    GM_CHECK_OK(err);
    if (err < 0) {
        uv_loop_close(&r.loop);
        return;
    }
    uv_timer_init(&r.loop, &r.step);
    uv_timer_init(&r.loop, &r.guard);
    r.step.data = &r;
    r.guard.data = &r;
    uv_timer_start(&r.step, step_burst, 20, 0);
    GM_CHECK_OK(uv_run(&r.loop, UV_RUN_DEFAULT));
    GM_CHECK_EQ(r.calls, 1);
    GM_CHECK(r.t_cb >= r.t_burst + 200); /* debounced */
    GM_CHECK(r.t_cb < r.t_burst + 2000);
    GM_CHECK_OK(uv_loop_close(&r.loop)); /* every handle closed, the watch freed */
}

static void child_kinds(int have_dummy)
{
    struct gm_iface *v = NULL;
    const struct gm_iface *f;
    size_t n = 0;

    GM_CHECK_OK(gm_iface_list(NULL, &v, &n));
    f = find(v, n, "lo");
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_STREQ(f->kind, "loopback");
        GM_CHECK_EQ(f->multicast, 0);
        GM_CHECK_EQ(f->addr4.s_addr, ip4("127.0.0.1").s_addr);
    }
    f = find(v, n, "gmtun0");
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_STREQ(f->kind, "tun");
        GM_CHECK_EQ(f->tunnel, 1);
        GM_CHECK_EQ(f->multicast, 0); /* up, IFF_MULTICAST, IPv4: still a tunnel */
        GM_CHECK(f->flags & IFF_MULTICAST);
        GM_CHECK(f->flags & IFF_UP);
        GM_CHECK_EQ(f->index, if_nametoindex("gmtun0"));
        GM_CHECK_EQ(f->addr4.s_addr, ip4("10.77.0.1").s_addr);
        GM_CHECK_EQ(f->mask4.s_addr, ip4("255.255.255.0").s_addr);
        GM_CHECK_EQ(f->mtu, 1500);
    }
    f = find(v, n, "gmtap0");
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_STREQ(f->kind, "tap");
        GM_CHECK_EQ(f->tunnel, 1);
        GM_CHECK_EQ(f->multicast, 0);
        GM_CHECK_EQ(f->addr4.s_addr, ip4("10.78.0.1").s_addr);
    }
    f = find(v, n, "gmveth0");
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_STREQ(f->kind, "ether");
        GM_CHECK_EQ(f->tunnel, 0);
        GM_CHECK_EQ(f->multicast, 1);
        GM_CHECK_EQ(f->addr4.s_addr, ip4("198.51.100.1").s_addr);
        GM_CHECK_EQ(f->mtu, 1500);
    }
    f = find(v, n, "gmveth1"); /* up with IPv4, but multicast off */
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_STREQ(f->kind, "ether");
        GM_CHECK_EQ(f->multicast, 0);
        GM_CHECK_EQ(f->addr4.s_addr, ip4("10.81.0.1").s_addr);
    }
    f = find(v, n, "gmveth2"); /* up, multicast, but no IPv4: listed, no beacons */
    GM_CHECK(f != NULL);
    if (f != NULL) {
        GM_CHECK_EQ(f->addr4.s_addr, 0);
        GM_CHECK_EQ(f->mask4.s_addr, 0);
        GM_CHECK_EQ(f->multicast, 0);
        GM_CHECK(f->index > 0);
    }
    f = find(v, n, "gmdum0");
    if (have_dummy) {
        GM_CHECK(f != NULL);
        if (f != NULL) {
            GM_CHECK_STREQ(f->kind, "ether");
            GM_CHECK_EQ(f->tunnel, 0);
            GM_CHECK_EQ(f->multicast, 1);
        }
    }
    free(v);

    /* named in the config: a tunnel, so no beacons */
    {
        struct gm_iface e;

        GM_CHECK_OK(lookup("gmveth1,gmveth0", "gmveth0", &e));
        GM_CHECK_EQ(e.tunnel, 1);
        GM_CHECK_STREQ(e.kind, "ether");
        GM_CHECK_EQ(e.multicast, 0);
    }

    /* WireGuard is a module many kernels (this CI VM's included) lack. */
    if (sh("ip link add gmwg0 type wireguard 2>/dev/null") == 0) {
        struct gm_iface e;

        GM_CHECK_OK(lookup(NULL, "gmwg0", &e));
        GM_CHECK_STREQ(e.kind, "wireguard");
        GM_CHECK_EQ(e.tunnel, 1);
        GM_CHECK_EQ(e.multicast, 0);
    } else {
        fprintf(stderr, "note: no wireguard in this kernel: kind wireguard not exercised\n");
    }
}

static void child_egress(int have6)
{
    struct gm_iface e;
    struct sockaddr_in6 m;

    GM_CHECK_OK(egress_of("10.99.1.1", NULL, &e)); /* routed via the tun */
    GM_CHECK_STREQ(e.name, "gmtun0");
    GM_CHECK_STREQ(e.kind, "tun");
    GM_CHECK_EQ(e.index, if_nametoindex("gmtun0"));
    GM_CHECK_EQ(class_of("10.99.1.1", &e), GM_CLASS_TUNNEL);
    GM_CHECK_OK(egress_of("10.77.0.9", NULL, &e)); /* on-link on the tun */
    GM_CHECK_STREQ(e.name, "gmtun0");
    GM_CHECK_OK(egress_of("10.78.0.9", NULL, &e));
    GM_CHECK_STREQ(e.name, "gmtap0");
    GM_CHECK_EQ(class_of("10.78.0.9", &e), GM_CLASS_TUNNEL);

    GM_CHECK_OK(egress_of("198.51.100.9", NULL, &e)); /* public, on-link */
    GM_CHECK_STREQ(e.name, "gmveth0");
    GM_CHECK_EQ(class_of("198.51.100.9", &e), GM_CLASS_LAN);
    GM_CHECK_OK(egress_of("203.0.113.5", NULL, &e)); /* public, via a gateway */
    GM_CHECK_STREQ(e.name, "gmveth0");
    GM_CHECK_EQ(class_of("203.0.113.5", &e), GM_CLASS_WAN);
    GM_CHECK_OK(egress_of("203.0.113.5", "gmveth0", &e));
    GM_CHECK_EQ(class_of("203.0.113.5", &e), GM_CLASS_TUNNEL);
    GM_CHECK_OK(egress_of("10.81.0.77", NULL, &e)); /* second device of the pair */
    GM_CHECK_STREQ(e.name, "gmveth1");
    GM_CHECK_OK(egress_of("10.81.7.1", NULL, &e)); /* an alias label maps to its device */
    GM_CHECK_STREQ(e.name, "gmveth1");
    GM_CHECK_EQ(e.addr4.s_addr, ip4("10.81.0.1").s_addr); /* first address */

    memset(&e, 0x5a, sizeof(e));
    GM_CHECK_ERR(egress_of("8.8.8.8", NULL, &e), -ENETUNREACH); /* no default route */
    GM_CHECK_EQ(e.name[0], 0);
    GM_CHECK_ERR(egress_of("10.44.0.1", NULL, &e), -ENETUNREACH); /* unreachable route */

    if (!have6) {
        fprintf(stderr, "note: no IPv6 in this kernel: IPv6 egress not exercised\n");
        return;
    }
    GM_CHECK_OK(egress_of("::1", NULL, &e));
    GM_CHECK_STREQ(e.name, "lo");
    GM_CHECK_OK(egress_of("fd77::9", NULL, &e));
    GM_CHECK_STREQ(e.name, "gmtun0");
    GM_CHECK_EQ(class_of("fd77::9", &e), GM_CLASS_TUNNEL);
    GM_CHECK_OK(egress_of("fd80::9", NULL, &e));
    GM_CHECK_STREQ(e.name, "gmveth0");
    GM_CHECK_EQ(e.addr4.s_addr, ip4("198.51.100.1").s_addr);
    GM_CHECK_EQ(class_of("fd80::9", &e), GM_CLASS_LAN);
    /* a v4-mapped destination leaves from the IPv4 address of the device */
    m = sin6("::ffff:198.51.100.9", 9);
    GM_CHECK_OK(gm_iface_egress((struct sockaddr *)&m, NULL, &e));
    GM_CHECK_STREQ(e.name, "gmveth0");
    GM_CHECK_EQ(gm_iface_classify((struct sockaddr *)&m, &e), GM_CLASS_LAN);
    GM_CHECK_ERR(egress_of("2001:4860:4860::8888", NULL, &e), -ENETUNREACH);
}

static void child_mtu(int have6)
{
    struct gm_iface e;
    int fd;

    GM_CHECK_EQ(sh("ip link set gmtun0 mtu 1400"), 0);
    GM_CHECK_OK(lookup(NULL, "gmtun0", &e));
    GM_CHECK_EQ(e.mtu, 1400);
    fd = udp_to("10.99.1.1");
    GM_CHECK(fd >= 0);
    GM_CHECK_EQ(gm_iface_path_mtu(fd), 1400);
    if (fd >= 0)
        close(fd);
    fd = udp_to("203.0.113.5");
    GM_CHECK(fd >= 0);
    GM_CHECK_EQ(gm_iface_path_mtu(fd), 1500);
    if (fd >= 0)
        close(fd);
    if (have6) {
        fd = udp_to("fd77::9");
        GM_CHECK(fd >= 0);
        GM_CHECK_EQ(gm_iface_path_mtu(fd), 1400);
        if (fd >= 0)
            close(fd);
    }
}

/* Last: taking a link down drops its routes and IPv6 addresses. */
static void child_down(void)
{
    struct gm_iface e;

    GM_CHECK_EQ(sh("ip link set gmveth0 down"), 0);
    GM_CHECK_OK(lookup(NULL, "gmveth0", &e));
    GM_CHECK(!(e.flags & IFF_UP));
    GM_CHECK_EQ(e.multicast, 0); /* down: no beacons */
    GM_CHECK_EQ(sh("ip link set gmveth0 up"), 0);
    GM_CHECK_OK(lookup(NULL, "gmveth0", &e));
    GM_CHECK_EQ(e.multicast, 1);
}

/* Makes the namespace and its /sys; 0, or CHILD_SKIP after a note. */
static int child_setup(void)
{
    if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0) {
        fprintf(stderr, "note: unshare(CLONE_NEWNET|CLONE_NEWNS): %s\n", strerror(errno));
        return CHILD_SKIP;
    }
    /* our own /sys, so /sys/class/net shows this namespace; private, so the
     * parent's mounts stay as they are */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || umount2("/sys", MNT_DETACH) < 0 ||
        mount("sysfs", "/sys", "sysfs", 0, NULL) < 0) {
        fprintf(stderr, "note: cannot mount sysfs in the new namespace: %s\n", strerror(errno));
        return CHILD_SKIP;
    }
    if (system("ip -V >/dev/null 2>&1") != 0) {
        fprintf(stderr, "note: no `ip` (iproute2)\n");
        return CHILD_SKIP;
    }
    return 0;
}

static int child_main(void)
{
    long f0 = gm_test_state.failures, c0 = gm_test_state.checks;
    int have_dummy, have6, rc;

    rc = child_setup();
    if (rc != 0)
        return rc;
    have6 = access("/proc/sys/net/ipv6", F_OK) == 0;
    if (have6) /* no duplicate address detection: no addresses that turn up late */
        GM_CHECK_EQ(sh("echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad &&"
                       " echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad"),
                    0);

    child_watch();

    GM_CHECK_EQ(sh("ip link set lo up"), 0);
    GM_CHECK_EQ(sh("ip tuntap add dev gmtun0 mode tun && ip addr add 10.77.0.1/24 dev gmtun0 &&"
                   " ip link set gmtun0 up && ip route add 10.99.0.0/16 dev gmtun0"),
                0);
    GM_CHECK_EQ(sh("ip tuntap add dev gmtap0 mode tap && ip addr add 10.78.0.1/24 dev gmtap0 &&"
                   " ip link set gmtap0 up"),
                0);
    GM_CHECK_EQ(sh("ip link add gmveth0 type veth peer name gmveth1 &&"
                   " ip addr add 198.51.100.1/24 dev gmveth0 && ip link set gmveth0 up &&"
                   " ip route add 203.0.113.0/24 via 198.51.100.254 dev gmveth0 &&"
                   " ip addr add 10.81.0.1/24 dev gmveth1 &&"
                   " ip addr add 10.81.7.1/24 dev gmveth1 label gmveth1:7 &&"
                   " ip link set gmveth1 multicast off up &&"
                   " ip route add unreachable 10.44.0.0/16"),
                0);
    GM_CHECK_EQ(sh("ip link add gmveth2 type veth peer name gmveth3 && ip link set gmveth2 up"), 0);
    if (have6)
        GM_CHECK_EQ(sh("ip -6 addr add fd77::1/64 dev gmtun0 nodad &&"
                       " ip -6 addr add fd80::1/64 dev gmveth0 nodad"),
                    0);
    /* This CI VM's kernel has no dummy driver: the veths stand in for it. */
    have_dummy = sh("ip link add gmdum0 type dummy 2>/dev/null") == 0;
    if (have_dummy)
        GM_CHECK_EQ(sh("ip addr add 10.79.0.1/24 dev gmdum0 &&"
                       " ip link set gmdum0 multicast on up"),
                    0);
    else
        fprintf(stderr, "note: no dummy interfaces in this kernel: veth covers ether\n");

    child_kinds(have_dummy);
    child_egress(have6);
    child_mtu(have6);
    child_down();
    rc = (int)(gm_test_state.failures - f0);
    fprintf(stderr, "namespace child: %ld checks, %d failed\n", gm_test_state.checks - c0, rc);
    return rc > 200 ? 200 : rc;
}

static void test_netns(void)
{
    pid_t pid;
    int st = 0;

    if (geteuid() != 0) {
        fprintf(stderr, "note: not root: namespace part skipped\n");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    GM_CHECK(pid >= 0);
    if (pid < 0)
        return;
    if (pid == 0)
        exit(child_main()); /* exit, not _exit: LeakSanitizer checks the child too */
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    GM_CHECK(WIFEXITED(st));
    if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_SKIP) {
        fprintf(stderr, "note: namespace part skipped\n");
        return;
    }
    GM_CHECK_EQ(WEXITSTATUS(st), 0); /* the child's failure count */
}

int main(void)
{
    GM_TEST_RUN(test_class_names);
    GM_TEST_RUN(test_list_lo);
    GM_TEST_RUN(test_tunnels_list);
    GM_TEST_RUN(test_egress_lo);
    GM_TEST_RUN(test_classify);
    GM_TEST_RUN(test_path_mtu_lo);
    GM_TEST_RUN(test_watch_contract);
    GM_TEST_RUN(test_netns);
    return gm_test_finish("test_iface");
}
