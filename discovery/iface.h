/*
 * discovery/iface.h - network interfaces, link classes, path MTU, change watch.
 *
 * Interfaces come from getifaddrs(3) plus sysfs (/sys/class/net/NAME/):
 * a tunnel is an interface whose kind is tun or tap (the tun_flags file
 * exists), WireGuard (DEVTYPE=wireguard in uevent), ppp (type 512), or any
 * other ARPHRD_NONE (type 65534) point-to-point device, or one named in the
 * config's [discovery] tunnels list.  Beacons go out on interfaces that are
 * up, multicast-capable, not loopback, not tunnels, and have an IPv4 address.
 *
 * A path's class comes from its egress interface: the kernel's choice for
 * the destination (a connected UDP socket: no packet is sent), mapped from the
 * chosen source address back to the interface.  tunnel when that interface
 * is a tunnel; else lan when the destination is loopback, private (RFC 1918,
 * RFC 6598 shared, fc00::/7), link-local, or inside a subnet of the egress
 * interface; else wan.
 *
 * Changes: an rtnetlink socket (RTMGRP_LINK, IPV4/IPV6_IFADDR) polled by
 * libuv; the messages are only a trigger (read and dropped, never parsed):
 * the callback runs once per burst, after 200 ms of quiet, and the caller
 * takes a fresh gm_iface_list.  Loop thread only for the watch; the rest is
 * pure and thread-safe.
 */
#ifndef GM_DISCOVERY_IFACE_H
#define GM_DISCOVERY_IFACE_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include <uv.h>

#include "common/err.h"

enum gm_link_class {
    GM_CLASS_LAN = 1,
    GM_CLASS_TUNNEL = 2,
    GM_CLASS_WAN = 3,
};

/* "lan", "tunnel", "wan". */
const char *gm_class_name(enum gm_link_class c);

struct gm_iface {
    char name[IF_NAMESIZE];
    unsigned index;
    unsigned flags; /* IFF_* */
    char kind[16];  /* "loopback", "ether", "tun", "tap", "wireguard", "ppp", "other" */
    int tunnel;     /* 1: tunnel (see above) */
    int mtu;        /* from sysfs; 0 when unknown */
    int multicast;  /* 1: beacons go out here */
    struct in_addr addr4, mask4; /* first IPv4 address and netmask; s_addr 0 when none */
};

/* Snapshot.  tunnels: comma/space-separated interface names the config
 * declares tunnels (NULL or "" for none; empty items are skipped, a name no
 * interface could have is -EINVAL).  *out malloc'd (free()). */
GM_MUST_CHECK int gm_iface_list(const char *tunnels, struct gm_iface **out, size_t *n);

/* The interface packets to dst leave through.  -ENETUNREACH when there is no
 * route, -ENODEV when the source address matches no interface,
 * -EAFNOSUPPORT when dst is neither IPv4 nor IPv6. */
GM_MUST_CHECK int gm_iface_egress(const struct sockaddr *dst, const char *tunnels,
                                  struct gm_iface *out);

/* Class of the path to dst that leaves through egress (see above). */
enum gm_link_class gm_iface_classify(const struct sockaddr *dst, const struct gm_iface *egress);

/* Path MTU of a connected socket (IP_MTU / IPV6_MTU); 0 when unknown. */
int gm_iface_path_mtu(int fd);

struct gm_iface_watch;
typedef void (*gm_iface_change_fn)(void *arg);
/* Starts the watch; cb(arg) runs on the loop thread once per burst of changes.
 * Fails with the socket's error (-EPERM, -EACCES, -EAFNOSUPPORT...) where
 * rtnetlink is not available (seccomp, some sandboxes): the caller then falls
 * back to polling gm_iface_list on a timer. */
GM_MUST_CHECK int gm_iface_watch_start(uv_loop_t *loop, gm_iface_change_fn cb, void *arg,
                                       struct gm_iface_watch **out);
/* Asynchronous: closes its handles and frees itself; cb is not called again. */
void gm_iface_watch_stop(struct gm_iface_watch *w);

#endif
