/*
 * discovery/iface.c - see iface.h.
 *
 * Choices:
 *  - One builder, describe(), turns a name plus the getifaddrs(3) list into a
 *    struct gm_iface; gm_iface_list runs it once per interface and
 *    gm_iface_egress once for the interface that owns the source address.
 *  - IPv4 alias labels ("eth0:1") count as their base interface (netdev names
 *    cannot contain ':'), so an alias address still maps back to its device.
 *  - sysfs reads are bounded (one read(2) into a small stack buffer); a
 *    missing or unreadable file means "unknown", never an error.  sysfs shows
 *    the network namespace of whoever mounted /sys: an agent moved into
 *    another namespace needs its own /sys mount (as `ip netns exec` does),
 *    else kinds and MTUs are those of namesakes outside.
 *  - The tunnels list is checked before anything else: a name that no
 *    interface could have (too long, '/', ':', "." or "..") is -EINVAL.
 *  - gm_iface_egress sends nothing: connect(2) on a UDP socket only routes.
 *    An unreachable route (EHOSTUNREACH) is "no route" too: -ENETUNREACH.
 *    A destination port of 0 is replaced by 9 (discard) so the lookup cannot
 *    trip over port 0; ports only matter to policy routing anyway.
 *  - gm_iface_classify accepts egress NULL (no interface known): then only
 *    the address ranges count.
 *  - Classification has no IPv6 subnet test: struct gm_iface carries only
 *    the IPv4 prefix, so an IPv6 peer is lan only when its address is private,
 *    link-local or loopback.
 *  - The watch drains the netlink socket without parsing (the messages are
 *    only a trigger; ENOBUFS means we missed some, which is also a trigger),
 *    then (re)arms a 200 ms timer whose expiry calls cb once.  One drain reads
 *    at most WATCH_DRAIN messages so a flood cannot starve the loop; libuv
 *    polls level-triggered, so whatever is left wakes us again.
 *
 * Threads: everything but the watch is reentrant (no shared state); the watch
 * belongs to its loop's thread.
 */
#include "discovery/iface.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if_arp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define WATCH_QUIET_MS 200
#define WATCH_DRAIN 1024

const char *gm_class_name(enum gm_link_class c)
{
    switch (c) {
    case GM_CLASS_LAN:
        return "lan";
    case GM_CLASS_TUNNEL:
        return "tunnel";
    case GM_CLASS_WAN:
        return "wan";
    }
    return "unknown";
}

/* --- tunnels list ---------------------------------------------------------- */

static int is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Next non-empty token of a comma/space-separated list; 0 at the end. */
static int next_name(const char **p, const char **tok, size_t *len)
{
    const char *s = *p;

    while (*s != '\0' && is_sep(*s))
        s++;
    if (*s == '\0') {
        *p = s;
        return 0;
    }
    *tok = s;
    while (*s != '\0' && !is_sep(*s))
        s++;
    *len = (size_t)(s - *tok);
    *p = s;
    return 1;
}

/* What the kernel accepts as a netdev name (dev_valid_name). */
static int valid_name(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || len >= IF_NAMESIZE)
        return 0;
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return 0;
    for (i = 0; i < len; i++)
        if (s[i] == '/' || s[i] == ':' || s[i] == '\0')
            return 0;
    return 1;
}

static int check_tunnels(const char *tunnels)
{
    const char *p = tunnels, *tok;
    size_t len;

    if (p == NULL)
        return 0;
    while (next_name(&p, &tok, &len))
        if (!valid_name(tok, len))
            return -EINVAL;
    return 0;
}

static int listed(const char *tunnels, const char *name)
{
    const char *p = tunnels, *tok;
    size_t len, nlen = strlen(name);

    if (p == NULL)
        return 0;
    while (next_name(&p, &tok, &len))
        if (len == nlen && memcmp(tok, name, len) == 0)
            return 1;
    return 0;
}

/* --- sysfs ----------------------------------------------------------------- */

/* Reads at most cap - 1 bytes of /sys/class/net/NAME/FILE into buf
 * (NUL-terminated).  Returns the length or a negative errno. */
static int sysfs_read(const char *name, const char *file, char *buf, size_t cap)
{
    char path[96];
    ssize_t n;
    int fd, w;

    buf[0] = '\0';
    w = snprintf(path, sizeof(path), "/sys/class/net/%s/%s", name, file);
    if (w < 0 || (size_t)w >= sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    do {
        n = read(fd, buf, cap - 1);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        n = -errno;
        close(fd);
        return (int)n;
    }
    close(fd);
    buf[n] = '\0';
    return (int)n;
}

/* A decimal integer file (type, mtu); -1 when missing or malformed. */
static long sysfs_long(const char *name, const char *file)
{
    char buf[32], *end;
    long v;

    if (sysfs_read(name, file, buf, sizeof(buf)) <= 0)
        return -1;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf || (*end != '\0' && *end != '\n') || v < 0)
        return -1;
    return v;
}

/* 1 when uevent has the line "DEVTYPE=<devtype>". */
static int sysfs_devtype_is(const char *name, const char *devtype)
{
    char buf[512];
    const char *line, *nl;
    size_t want = strlen("DEVTYPE=") + strlen(devtype);

    if (sysfs_read(name, "uevent", buf, sizeof(buf)) <= 0)
        return 0;
    for (line = buf; *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl == NULL)
            nl = line + strlen(line);
        if ((size_t)(nl - line) == want && strncmp(line, "DEVTYPE=", 8) == 0 &&
            memcmp(line + 8, devtype, want - 8) == 0)
            return 1;
        if (*nl == '\0')
            break;
    }
    return 0;
}

/* --- describing one interface ---------------------------------------------- */

/* Length of the device part of a getifaddrs name ("eth0:1" -> 4). */
static size_t base_len(const char *ifa_name)
{
    const char *colon = strchr(ifa_name, ':');

    return colon != NULL ? (size_t)(colon - ifa_name) : strlen(ifa_name);
}

static int same_device(const char *ifa_name, const char *name)
{
    size_t n = base_len(ifa_name);

    return n == strlen(name) && memcmp(ifa_name, name, n) == 0;
}

/* Copies the device part of ifa_name (base_len < IF_NAMESIZE) into name. */
static void device_name(const char *ifa_name, char name[IF_NAMESIZE])
{
    size_t n = base_len(ifa_name);

    memcpy(name, ifa_name, n);
    name[n] = '\0';
}

/* 1 when a names a device (short enough to be one) no earlier entry names. */
static int first_of_device(const struct ifaddrs *all, const struct ifaddrs *a)
{
    const struct ifaddrs *b;
    size_t n;

    if (a->ifa_name == NULL)
        return 0;
    n = base_len(a->ifa_name);
    if (n >= IF_NAMESIZE)
        return 0;
    for (b = all; b != a; b = b->ifa_next)
        if (b->ifa_name != NULL && base_len(b->ifa_name) == n &&
            memcmp(b->ifa_name, a->ifa_name, n) == 0)
            return 0;
    return 1;
}

static void set_kind(struct gm_iface *f, const char *kind)
{
    snprintf(f->kind, sizeof(f->kind), "%s", kind);
}

/* Fills *f for the device `name` from the getifaddrs list and sysfs. */
static void describe(const struct ifaddrs *all, const char *name, const char *tunnels,
                     struct gm_iface *f)
{
    const struct ifaddrs *a;
    int have_flags = 0;
    long type, mtu;
    char buf[32];

    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->index = if_nametoindex(name); /* 0 when it vanished meanwhile */
    for (a = all; a != NULL; a = a->ifa_next) {
        if (a->ifa_name == NULL || !same_device(a->ifa_name, name))
            continue;
        if (!have_flags) {
            f->flags = a->ifa_flags; /* link flags: the same on every entry */
            have_flags = 1;
        }
        if (f->addr4.s_addr == 0 && a->ifa_addr != NULL && a->ifa_addr->sa_family == AF_INET) {
            f->addr4 = ((const struct sockaddr_in *)(const void *)a->ifa_addr)->sin_addr;
            if (a->ifa_netmask != NULL && a->ifa_netmask->sa_family == AF_INET)
                f->mask4 = ((const struct sockaddr_in *)(const void *)a->ifa_netmask)->sin_addr;
        }
    }

    type = sysfs_long(name, "type");
    mtu = sysfs_long(name, "mtu");
    f->mtu = mtu > 0 && mtu <= 0x7fffffff ? (int)mtu : 0;
    if (f->flags & IFF_LOOPBACK) {
        set_kind(f, "loopback");
    } else if (sysfs_read(name, "tun_flags", buf, sizeof(buf)) >= 0) {
        set_kind(f, type == ARPHRD_ETHER ? "tap" : "tun");
        f->tunnel = 1;
    } else if (sysfs_devtype_is(name, "wireguard")) {
        set_kind(f, "wireguard");
        f->tunnel = 1;
    } else if (type == ARPHRD_PPP) {
        set_kind(f, "ppp");
        f->tunnel = 1;
    } else if (type == ARPHRD_NONE && (f->flags & IFF_POINTOPOINT)) {
        set_kind(f, "other");
        f->tunnel = 1;
    } else {
        set_kind(f, type == ARPHRD_ETHER ? "ether" : "other");
    }
    if (listed(tunnels, name))
        f->tunnel = 1;
    f->multicast = (f->flags & IFF_UP) && (f->flags & IFF_MULTICAST) &&
                   !(f->flags & IFF_LOOPBACK) && !f->tunnel && f->addr4.s_addr != 0;
}

int gm_iface_list(const char *tunnels, struct gm_iface **out, size_t *n)
{
    struct ifaddrs *all = NULL;
    const struct ifaddrs *a;
    struct gm_iface *v;
    size_t count = 0, i = 0;
    char name[IF_NAMESIZE];
    int err;

    *out = NULL;
    *n = 0;
    err = check_tunnels(tunnels);
    if (err < 0)
        return err;
    if (getifaddrs(&all) < 0)
        return -errno;
    /* One entry per device, in order of first appearance. */
    for (a = all; a != NULL; a = a->ifa_next)
        if (first_of_device(all, a))
            count++;
    v = calloc(count > 0 ? count : 1, sizeof(*v));
    if (v == NULL) {
        freeifaddrs(all);
        return -ENOMEM;
    }
    for (a = all; a != NULL && i < count; a = a->ifa_next) {
        if (!first_of_device(all, a))
            continue;
        device_name(a->ifa_name, name);
        describe(all, name, tunnels, &v[i++]);
    }
    freeifaddrs(all);
    *out = v;
    *n = i;
    return 0;
}

/* --- egress ---------------------------------------------------------------- */

static int v4_mapped(const struct in6_addr *a6, struct in_addr *a4)
{
    if (!IN6_IS_ADDR_V4MAPPED(a6))
        return 0;
    memcpy(&a4->s_addr, &a6->s6_addr[12], 4);
    return 1;
}

/* 1 when the getifaddrs entry holds the local address src. */
static int holds(const struct ifaddrs *a, const struct sockaddr_storage *src)
{
    const struct sockaddr *sa = a->ifa_addr;
    const struct sockaddr_in6 *s6, *e6;
    struct in_addr v4;

    if (sa == NULL)
        return 0;
    if (src->ss_family == AF_INET6) {
        s6 = (const struct sockaddr_in6 *)src;
        if (v4_mapped(&s6->sin6_addr, &v4))
            return sa->sa_family == AF_INET &&
                   ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr == v4.s_addr;
        if (sa->sa_family != AF_INET6)
            return 0;
        e6 = (const struct sockaddr_in6 *)(const void *)sa;
        /* link-local addresses repeat across links: the scope tells them apart */
        if (s6->sin6_scope_id != 0 && e6->sin6_scope_id != 0 &&
            s6->sin6_scope_id != e6->sin6_scope_id)
            return 0;
        return memcmp(&s6->sin6_addr, &e6->sin6_addr, sizeof(s6->sin6_addr)) == 0;
    }
    return sa->sa_family == AF_INET &&
           ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)src)->sin_addr.s_addr;
}

int gm_iface_egress(const struct sockaddr *dst, const char *tunnels, struct gm_iface *out)
{
    struct sockaddr_storage to, src;
    socklen_t tolen, srclen = sizeof(src);
    struct ifaddrs *all = NULL;
    const struct ifaddrs *a;
    char name[IF_NAMESIZE];
    int fd = -1, err;

    memset(out, 0, sizeof(*out));
    if (dst == NULL)
        return -EINVAL;
    err = check_tunnels(tunnels);
    if (err < 0)
        return err;
    memset(&to, 0, sizeof(to));
    if (dst->sa_family == AF_INET) {
        tolen = sizeof(struct sockaddr_in);
        memcpy(&to, dst, tolen);
        if (((struct sockaddr_in *)&to)->sin_port == 0)
            ((struct sockaddr_in *)&to)->sin_port = htons(9);
    } else if (dst->sa_family == AF_INET6) {
        tolen = sizeof(struct sockaddr_in6);
        memcpy(&to, dst, tolen);
        if (((struct sockaddr_in6 *)&to)->sin6_port == 0)
            ((struct sockaddr_in6 *)&to)->sin6_port = htons(9);
    } else {
        return -EAFNOSUPPORT;
    }

    fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&to, tolen) < 0) {
        err = errno == EHOSTUNREACH ? -ENETUNREACH : -errno;
        goto out;
    }
    if (getsockname(fd, (struct sockaddr *)&src, &srclen) < 0) {
        err = -errno;
        goto out;
    }
    if (getifaddrs(&all) < 0) {
        err = -errno;
        goto out;
    }
    err = -ENODEV;
    for (a = all; a != NULL; a = a->ifa_next) {
        if (a->ifa_name == NULL || base_len(a->ifa_name) >= IF_NAMESIZE || !holds(a, &src))
            continue;
        device_name(a->ifa_name, name);
        describe(all, name, tunnels, out);
        err = 0;
        break;
    }
out:
    if (all != NULL)
        freeifaddrs(all);
    close(fd);
    return err;
}

/* --- classification -------------------------------------------------------- */

/* addr in host order; prefix/len like 10.0.0.0/8 */
static int in4(uint32_t addr, uint32_t prefix, int len)
{
    uint32_t mask = len == 0 ? 0 : 0xffffffffu << (32 - len);

    return (addr & mask) == prefix;
}

static int private4(struct in_addr a)
{
    uint32_t h = ntohl(a.s_addr);

    return in4(h, 0x0a000000u, 8) ||  /* 10/8 */
           in4(h, 0xac100000u, 12) || /* 172.16/12 */
           in4(h, 0xc0a80000u, 16) || /* 192.168/16 */
           in4(h, 0x64400000u, 10) || /* 100.64/10, RFC 6598 shared */
           in4(h, 0x7f000000u, 8) ||  /* 127/8 */
           in4(h, 0xa9fe0000u, 16);   /* 169.254/16 */
}

static int private6(const struct in6_addr *a)
{
    return (a->s6_addr[0] & 0xfe) == 0xfc ||                            /* fc00::/7 */
           (a->s6_addr[0] == 0xfe && (a->s6_addr[1] & 0xc0) == 0x80) || /* fe80::/10 */
           IN6_IS_ADDR_LOOPBACK(a);
}

enum gm_link_class gm_iface_classify(const struct sockaddr *dst, const struct gm_iface *egress)
{
    struct in_addr v4;
    int is4 = 0;

    if (egress != NULL && egress->tunnel)
        return GM_CLASS_TUNNEL;
    if (dst == NULL)
        return GM_CLASS_WAN;
    if (dst->sa_family == AF_INET) {
        v4 = ((const struct sockaddr_in *)(const void *)dst)->sin_addr;
        is4 = 1;
    } else if (dst->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)dst)->sin6_addr;

        is4 = v4_mapped(a6, &v4);
        if (!is4)
            return private6(a6) ? GM_CLASS_LAN : GM_CLASS_WAN;
    }
    if (!is4)
        return GM_CLASS_WAN;
    if (private4(v4))
        return GM_CLASS_LAN;
    /* a zero mask would put every address in the subnet */
    if (egress != NULL && egress->addr4.s_addr != 0 && egress->mask4.s_addr != 0 &&
        (v4.s_addr & egress->mask4.s_addr) == (egress->addr4.s_addr & egress->mask4.s_addr))
        return GM_CLASS_LAN;
    return GM_CLASS_WAN;
}

/* --- path MTU -------------------------------------------------------------- */

int gm_iface_path_mtu(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss), len = sizeof(int);
    int mtu = 0;

    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0)
        return 0;
    if (ss.ss_family == AF_INET) {
        if (getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len) < 0)
            return 0;
    } else if (ss.ss_family == AF_INET6) {
        if (getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &len) < 0)
            return 0;
    } else {
        return 0;
    }
    return mtu > 0 ? mtu : 0;
}

/* --- change watch ---------------------------------------------------------- */

struct gm_iface_watch {
    uv_poll_t poll;   /* on fd */
    uv_timer_t quiet; /* fires WATCH_QUIET_MS after the last message */
    gm_iface_change_fn cb;
    void *arg;
    int fd;   /* netlink socket, owned */
    int open; /* handles not yet closed; freed at 0 */
    int stopped;
};

static void watch_close_cb(uv_handle_t *h)
{
    struct gm_iface_watch *w = h->data;

    if (--w->open > 0)
        return;
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}

static void watch_quiet_cb(uv_timer_t *t)
{
    struct gm_iface_watch *w = t->data;

    if (!w->stopped)
        w->cb(w->arg);
}

static void watch_poll_cb(uv_poll_t *p, int status, int events)
{
    struct gm_iface_watch *w = p->data;
    char buf[4096];
    ssize_t n;
    int i;

    (void)events;
    if (status < 0) {
        /* The fd is unusable from now on: say so once, stop polling, and
         * let the caller take one last snapshot. */
        gm_warn("event=iface-watch-failed reason=\"%s\" note=\"no more change events\"",
                uv_strerror(status));
        uv_poll_stop(p);
        uv_timer_start(&w->quiet, watch_quiet_cb, WATCH_QUIET_MS, 0);
        return;
    }
    for (i = 0; i < WATCH_DRAIN; i++) {
        n = recv(w->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n >= 0 || errno == EINTR || errno == ENOBUFS)
            continue; /* a message, or an overrun: either way a trigger */
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            gm_warn("event=iface-watch-recv reason=\"%s\"", strerror(errno));
        break;
    }
    uv_timer_start(&w->quiet, watch_quiet_cb, WATCH_QUIET_MS, 0);
}

int gm_iface_watch_start(uv_loop_t *loop, gm_iface_change_fn cb, void *arg,
                         struct gm_iface_watch **out)
{
    struct sockaddr_nl sa;
    struct gm_iface_watch *w;
    int err;

    *out = NULL;
    if (loop == NULL || cb == NULL)
        return -EINVAL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->cb = cb;
    w->arg = arg;
    w->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (w->fd < 0) {
        err = -errno;
        free(w);
        return err;
    }
    memset(&sa, 0, sizeof(sa));
    sa.nl_family = AF_NETLINK;
    sa.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    if (bind(w->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        err = -errno;
        goto fail_fd;
    }
    err = uv_poll_init(loop, &w->poll, w->fd);
    if (err < 0)
        goto fail_fd; /* the handle was not registered with the loop */
    uv_timer_init(loop, &w->quiet);
    w->poll.data = w;
    w->quiet.data = w;
    w->open = 2;
    err = uv_poll_start(&w->poll, UV_READABLE, watch_poll_cb);
    if (err < 0) {
        /* Both handles are live now: tear down through the close callbacks
         * (which free w); cb is never called. */
        gm_iface_watch_stop(w);
        return err;
    }
    *out = w;
    return 0;
fail_fd:
    close(w->fd);
    free(w);
    return err;
}

void gm_iface_watch_stop(struct gm_iface_watch *w)
{
    if (w == NULL || w->stopped)
        return;
    w->stopped = 1;
    uv_close((uv_handle_t *)&w->poll, watch_close_cb);
    uv_close((uv_handle_t *)&w->quiet, watch_close_cb);
}
