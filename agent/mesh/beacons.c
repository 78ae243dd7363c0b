/*
 * agent/mesh/beacons.c - see beacons.h.
 *
 * The join beacon keys derive from token verifiers: both are wiped before
 * this returns.
 */
#include "agent/mesh/beacons.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "agent/mesh/members.h"
#include "agent/core/state.h"
#include "common/log.h"
#include "crypto/tls.h"
#include "crypto/token.h"
#include "discovery/discovery.h"

#define JKEYS_MAX 16

/* A fresh MEMBER beacon: dial the node if it is new or down and the rule says
 * we dial, else ask it to dial us by answering with our own beacon. */
static void on_hint(void *arg, const struct gm_beacon *b, const char *serial, const char *address)
{
    struct gm_agent *a = arg;
    struct gm_peer *p = gm_agent_peer_find(a, b->node);
    struct sockaddr_storage ss;

    if (a->stopping || gm_tls_ctx_denied(a->tls, serial))
        return;
    if (p != NULL && p->link != NULL)
        return;
    if (strcmp(a->cfg.node, b->node) > 0) {
        gm_disc_announce(a->disc); /* it dials (smaller id) */
        return;
    }
    if (p != NULL) {
        if (strcmp(p->address, address) != 0 && !p->dialing) {
            gm_info("event=member-moved node=%s from=%s to=%s via=beacon", p->node, p->address,
                    address);
            snprintf(p->address, sizeof(p->address), "%s", address);
            gm_agent_ignore(gm_members_save(a));
        }
        p->next_dial = 0;
        gm_members_dial(a, p);
        return;
    }
    if (gm_members_dialing_to(a, b->node))
        return; /* already on the way */
    if (gm_proto_addr_parse(address, &ss) != 0)
        return;
    gm_info("event=beacon-new-node node=%s address=%s action=dial", b->node, address);
    gm_agent_ignore(gm_agent_dial(a, b->node, (struct sockaddr *)&ss, NULL));
}

/* Admitter: one JOIN beacon key per live token. */
void gm_beacons_refresh_join_keys(struct gm_agent *a)
{
    uint8_t keys[JKEYS_MAX][GM_BEACON_KEY_LEN], v[GM_TOKEN_VERIFIER_LEN], id[GM_TOKEN_ID_LEN];
    struct gm_token_info info;
    int64_t now = (int64_t)time(NULL);
    size_t i, n = 0, total;
    const char *why;

    if (a->disc == NULL || a->tokens == NULL)
        return;
    total = gm_token_store_count(a->tokens);
    for (i = total; i > 0 && n < JKEYS_MAX; i--) { /* newest first */
        if (gm_token_store_get(a->tokens, i - 1, &info) != 0 || info.revoked ||
            info.uses_left <= 0 || info.expires <= now)
            continue;
        if (sodium_hex2bin(id, sizeof(id), info.id, strlen(info.id), NULL, NULL, NULL) != 0 ||
            gm_token_store_check(a->tokens, id, now, v, &why) != 0)
            continue;
        gm_beacon_join_key(v, keys[n++]);
    }
    gm_disc_set_join_keys(a->disc, (const uint8_t(*)[GM_BEACON_KEY_LEN])keys, n);
    sodium_memzero(keys, sizeof(keys));
    sodium_memzero(v, sizeof(v));
}

static int listen_is_loopback(const char *listen)
{
    return strncmp(listen, "127.", 4) == 0 || strncmp(listen, "[::1]", 5) == 0;
}

void gm_beacons_start(struct gm_agent *a)
{
    struct gm_disc_config dc = {0};
    int err;

    if (a->cfg.multicast[0] == '\0') {
        gm_info("event=discovery-off reason=\"multicast = off in the config\"");
        return;
    }
    if (listen_is_loopback(a->listen_addr)) {
        gm_info("event=discovery-off reason=\"listening on loopback only\"");
        return;
    }
    if (!a->have_bkey && a->cakey == NULL)
        gm_warn("event=discovery-degraded reason=\"no beacon.key in %s: this node finds others "
                "only through members and static peers\"",
                a->cfg.state_dir);
    dc.group = a->cfg.multicast;
    dc.tunnels = a->cfg.tunnels;
    dc.interfaces = a->cfg.interfaces;
    dc.cluster = a->cfg.cluster;
    dc.node = a->cfg.node;
    dc.listen = a->listen_addr;
    dc.ca = a->ca;
    dc.cert = a->cert;
    dc.key = a->key;
    dc.bkey = a->have_bkey ? a->bkey : NULL;
    dc.admitter = a->cakey != NULL;
    dc.on_hint = on_hint;
    dc.arg = a;
    err = gm_disc_start(&a->loop, &dc, &a->disc);
    if (err != 0) {
        gm_warn("event=discovery-off group=%s err=%d msg=\"%s\"", a->cfg.multicast, err,
                gm_strerror(err));
        a->disc = NULL;
        return;
    }
    gm_beacons_refresh_join_keys(a);
}

void gm_beacons_stop(struct gm_agent *a)
{
    gm_disc_stop(a->disc);
    a->disc = NULL;
}
