/*
 * discovery/discovery.h - LAN multicast beacons: sending, receiving, hints.
 *
 * One gm_disc per agent (or per `gradmesh join` looking for an admitter).
 * Sockets: one UDP socket bound to the group address and port (SO_REUSEADDR,
 * so several agents on one host all receive), joined to the group on every
 * beacon interface (discovery/iface.h: up, multicast, not loopback, not a
 * tunnel, with IPv4; and named in cfg.interfaces when that is set); one UDP socket for sending, TTL
 * 1, multicast loop on, whose outgoing interface is set before each synchronous send
 * (uv_udp_try_send), one copy per beacon interface.  Interfaces are taken
 * again when rtnetlink says they changed (and every 30 s in case the watch is
 * unavailable); a vanished interface is logged once and dropped, a new one
 * joined.  Only IPv4 multicast: IPv6 LANs are reached through static peers.
 *
 * Schedule: beacons and a SOLICIT at start and on every interface change,
 * then every second for the first 5 s, then every GM_DISC_INTERVAL_MS with
 * +-20% jitter.  A SOLICIT from anyone, or gm_disc_announce(), sends them
 * now (at most one round every 250 ms).  An admitter also sends one JOIN
 * beacon per key set with gm_disc_set_join_keys.
 *
 * Receiving: every datagram goes through gm_disc_input (also the fuzzing and
 * unit-test entry).  MEMBER beacons are opened (crypto/beacon.h), the sender
 * must not be this node, and gm_beacon_seen drops stale and replayed ones;
 * the rest reach the hint callback with the address to dial (the beacon's
 * host, or the datagram's source when the sender listens on a wildcard).
 * A dropped datagram is logged once per source and reason (then at debug
 * level), counted, and never crashes or loops.
 *
 * Loop thread only.
 */
#ifndef GM_DISCOVERY_DISCOVERY_H
#define GM_DISCOVERY_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uv.h>

#include "common/err.h"
#include "crypto/beacon.h"
#include "crypto/identity.h"

#define GM_DISC_GROUP_DEFAULT "239.192.74.50:7451" /* organisation-local scope */
#define GM_DISC_INTERVAL_MS 5000
#define GM_DISC_ADDR_MAX 64

struct gm_disc;

/* A confirmed-fresh MEMBER beacon: b (its fields), serial of the sender's
 * certificate (for the denylist), address "ip:port" to dial. */
typedef void (*gm_disc_hint_fn)(void *arg, const struct gm_beacon *b, const char *serial,
                                const char *address);

struct gm_disc_config {
    const char *group;      /* "ip:port" of the multicast group */
    const char *tunnels;    /* config-named tunnel interfaces, or NULL */
    const char *interfaces; /* only these interfaces (comma-separated); NULL/"": all */
    const char *cluster;
    const char *node;           /* NULL for a joiner */
    const char *listen;         /* our TCP listen "ip:port" (NULL for a joiner) */
    const struct gm_cert *ca;   /* NULL for a joiner */
    const struct gm_cert *cert; /* NULL for a joiner */
    const struct gm_key *key;   /* NULL for a joiner */
    const uint8_t *bkey;        /* beacon key, NULL: send and read no MEMBER beacons */
    int admitter;               /* sets GM_BEACON_F_ADMITTER */
    const uint8_t *find_jkey;   /* joiner: open JOIN beacons with this key */
    gm_disc_hint_fn on_hint;    /* MEMBER beacons (agents) */
    void (*on_admitter)(void *arg, const struct gm_beacon *b, const char *address); /* joiner */
    void *arg;
};

struct gm_disc_stats {
    unsigned sent, received, accepted, ignored;
    unsigned ignored_format, ignored_auth, ignored_stale, ignored_replay, ignored_self,
        ignored_foreign;
    unsigned ifaces; /* beacon interfaces now */
};

/* "ip:port" of an IPv4 multicast group -> sockaddr; -EINVAL otherwise. */
GM_MUST_CHECK int gm_disc_parse_group(const char *s, struct sockaddr_in *out);

/* Opens the sockets and starts the schedule.  Errors: bad group (-EINVAL),
 * socket errors (the caller logs and runs without multicast). */
GM_MUST_CHECK int gm_disc_start(uv_loop_t *loop, const struct gm_disc_config *cfg,
                                struct gm_disc **out);
/* Asynchronous: closes its handles and frees itself; no callback after this. */
void gm_disc_stop(struct gm_disc *d);

/* Admitter: the JOIN beacon keys of the live tokens (copied; n <= 16 used). */
void gm_disc_set_join_keys(struct gm_disc *d, const uint8_t (*jkeys)[GM_BEACON_KEY_LEN], size_t n);
/* Sends a beacon round now (rate-limited), e.g. to answer a new peer's beacon. */
void gm_disc_announce(struct gm_disc *d);
/* One datagram from src, as if it came off the socket. */
void gm_disc_input(struct gm_disc *d, const uint8_t *p, size_t len, const struct sockaddr *src);

void gm_disc_get_stats(const struct gm_disc *d, struct gm_disc_stats *s);
/* Names of the interfaces beacons go out on, comma-separated, into out. */
void gm_disc_ifaces(const struct gm_disc *d, char *out, size_t cap);

/* `gradmesh join` without --peer: solicits and listens on group for up to
 * timeout_ms for a JOIN beacon that opens with jkey and names cluster; the
 * admitter's "ip:port" into address.  -ETIMEDOUT when none answered. */
GM_MUST_CHECK int gm_disc_find_admitter(const char *group, const char *tunnels, const char *cluster,
                                        const uint8_t jkey[GM_BEACON_KEY_LEN], int timeout_ms,
                                        char address[GM_DISC_ADDR_MAX],
                                        char node[GM_ID_NAME_MAX + 1]);

#endif
