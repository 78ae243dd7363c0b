/*
 * agent/agent.c - see agent.h; the rooms are listed in agent/core/state.h.
 *
 * This file holds the lifecycle (open/start/stop/free, signals, the tick
 * timer, identity and beacon key loading), the links (listener and accept,
 * on_up/on_frame/on_close, BYE and ERROR; dialing is state.c's) and the dispatch of
 * frames and control commands over the rooms' tables (`rooms[]`).
 *
 * Ownership: struct gm_agent owns the loop, its handles (listener, timer,
 * two signals: freed after their close callbacks, counted in handles_open),
 * the identity, the TLS context (which must outlive every link), the token
 * store and the peer table.  Each link carries a struct gm_lctx (owned by the
 * agent's list, freed in the link's on_close).  peer.link is borrowed and
 * cleared in on_close.
 */
#include "agent/agent.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/cluster/admit.h"
#include "agent/mesh/beacons.h"
#include "agent/cluster/chief.h"
#include "agent/jobs/ckptxfer.h"
#include "agent/service/control.h"
#include "agent/drain.h"
#include "agent/mesh/endpoints.h"
#include "agent/jobs/job.h"
#include "agent/jobs/jobresume.h"
#include "agent/jobs/jobroom.h"
#include "agent/cluster/keyring.h"
#include "agent/net/link.h"
#include "agent/mesh/measure.h"
#include "agent/mesh/members.h"
#include "agent/service/metrics.h"
#include "agent/service/notify.h"
#include "agent/service/statelock.h"
#include "agent/service/version.h"
#include "agent/net/proto.h"
#include "agent/core/state.h"
#include "agent/views.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "crypto/beacon.h"
#include "crypto/tls.h"
#include "crypto/token.h"
#include "discovery/discovery.h"

#define MAX_HANDSHAKING 64 /* unauthenticated connections at once; more are dropped */
#define STOP_LINGER_MS 200 /* on stop, a link waits this long for its peer's EOF */

static const char *lstate_name(uint32_t s)
{
    switch (s) {
    case GM_LSTATE_HANDSHAKE:
        return "handshake";
    case GM_LSTATE_JOIN:
        return "join";
    case GM_LSTATE_HELLO:
        return "hello";
    case GM_LSTATE_UP:
        return "up";
    case GM_LSTATE_DONE:
        return "done";
    default:
        return "?";
    }
}

/* --- links ---------------------------------------------------------------- */

static int on_up(struct gm_link *l);
static int on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload);
static void on_close(struct gm_link *l, int err);

static const struct gm_link_ops link_ops = {
    .on_up = on_up,
    .on_frame = on_frame,
    .on_close = on_close,
};

static int on_up(struct gm_link *l)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_agent *a = c->a;
    struct gm_tls *t = gm_link_tls(l);

    if (gm_tls_is_join(t)) {
        if (a->cakey == NULL || a->tokens == NULL)
            return gm_agent_refuse(l, GM_ERR_AUTH,
                                   "this node does not admit joins (it holds no CA key)");
        gm_link_set_state(l, GM_LSTATE_JOIN);
        return 0;
    }
    if (c->dialed && c->node[0] != '\0' && strcmp(gm_tls_peer_node(t), c->node) != 0) {
        snprintf(c->reason, sizeof(c->reason), "dialed %s but the certificate names %s", c->node,
                 gm_tls_peer_node(t));
        return GM_ERR_AUTH;
    }
    snprintf(c->node, sizeof(c->node), "%s", gm_tls_peer_node(t));
    if (strcmp(c->node, a->cfg.node) == 0)
        return gm_agent_refuse(l, GM_ERR_AUTH, "peer uses this node's own name");
    if (!gm_rooms_may_link(a, c->node)) /* the chief room: revoked */
        return gm_agent_refuse(l, GM_ERR_AUTH, GM_PROTO_REVOKED_MSG);
    gm_link_set_state(l, GM_LSTATE_HELLO);
    gm_measure_link_view(a, c);
    return gm_members_send_hello(a, c);
}

static int h_bye(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                 const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);

    (void)a;
    (void)h;
    (void)p;
    snprintf(c->reason, sizeof(c->reason), "peer said bye");
    gm_link_close(l, 0);
    return 0;
}

static int h_error(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                   const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    char msg[200];
    int code = 0;

    if (gm_proto_error_decode(p, h->len, &code, msg, sizeof(msg)) != 0) {
        code = GM_ERR_PROTO;
        snprintf(msg, sizeof(msg), "malformed error frame");
    }
    if (gm_link_state(l) == GM_LSTATE_HELLO && strcmp(msg, "malformed hello") == 0)
        /* the words of builds before the peer protocol was versioned, about our hello */
        snprintf(c->reason, sizeof(c->reason),
                 "peer refused this node's hello: it runs an older gradmesh (before peer "
                 "protocol %d); upgrade it to this node's version (%s)",
                 GM_PROTO_VERSION, gm_version_string());
    else
        snprintf(c->reason, sizeof(c->reason), "peer refused: %s", msg);
    if (code == GM_ERR_AUTH && strcmp(msg, GM_PROTO_REVOKED_MSG) == 0 && !a->revoked) {
        a->revoked = true; /* `gradmesh leave` waits for this (status "revoked") */
        gm_warn("event=this-node-revoked peer=%s reason=\"a member refuses this node as "
                "revoked\"",
                c->node);
    }
    gm_link_close(l, code);
    return 0;
}

/* --- dispatch --------------------------------------------------------------- */

/* The link's own frames: a peer's goodbye and refusal. */
static const struct gm_room_frame link_frames[] = {
    {GM_MSG_BYE, GM_LSTATE_HELLO | GM_LSTATE_UP, h_bye},
    {GM_MSG_ERROR, GM_LSTATE_JOIN | GM_LSTATE_HELLO | GM_LSTATE_UP | GM_LSTATE_DONE, h_error},
};

static const struct gm_room link_room = {
    .name = "link",
    .frames = link_frames,
    .nframes = GM_ARRAY_SIZE(link_frames),
};

/* Every room whose frames or control commands the agent serves (see
 * agent/core/state.h).  A new room adds its `const struct gm_room` here. */
static const struct gm_room *const rooms[] = {
    &link_room,   &gm_members_room, &gm_measure_room, &gm_admit_room,   &gm_views_room,
    &gm_job_room, &gm_chief_room,   &gm_ckpt_room,    &gm_keyring_room,
};

/* Programmer errors: a frame type or a command name claimed twice. */
static void rooms_check(void)
{
    size_t r, i, q, k;

    for (r = 0; r < GM_ARRAY_SIZE(rooms); r++) {
        for (i = 0; i < rooms[r]->nframes; i++)
            for (q = r; q < GM_ARRAY_SIZE(rooms); q++)
                for (k = q == r ? i + 1 : 0; k < rooms[q]->nframes; k++)
                    GM_ASSERT(rooms[r]->frames[i].type != rooms[q]->frames[k].type);
        for (i = 0; i < rooms[r]->ncommands; i++)
            for (q = r; q < GM_ARRAY_SIZE(rooms); q++)
                for (k = q == r ? i + 1 : 0; k < rooms[q]->ncommands; k++)
                    GM_ASSERT(strcmp(rooms[r]->commands[i].name, rooms[q]->commands[k].name) != 0);
    }
}

static const struct gm_room_frame *frame_find(uint16_t type)
{
    size_t r, i;

    for (r = 0; r < GM_ARRAY_SIZE(rooms); r++)
        for (i = 0; i < rooms[r]->nframes; i++)
            if (rooms[r]->frames[i].type == type)
                return &rooms[r]->frames[i];
    return NULL;
}

static const struct gm_room_command *command_find(const char *name)
{
    size_t r, i;

    for (r = 0; r < GM_ARRAY_SIZE(rooms); r++)
        for (i = 0; i < rooms[r]->ncommands; i++)
            if (strcmp(rooms[r]->commands[i].name, name) == 0)
                return &rooms[r]->commands[i];
    return NULL;
}

static int on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct gm_lctx *c = gm_link_data(l);
    uint32_t st = gm_link_state(l);
    const struct gm_room_frame *f = frame_find(h->type);

    if (f == NULL)
        return gm_agent_refuse(l, GM_ERR_PROTO, "unexpected message type");
    if (!(f->states & st)) {
        char msg[128];
        snprintf(msg, sizeof(msg), "message %s not allowed in state %s",
                 gm_proto_type_name(h->type), lstate_name(st));
        return gm_agent_refuse(l, GM_ERR_PROTO, msg);
    }
    return f->fn(c->a, l, h, payload);
}

static void on_close(struct gm_link *l, int err)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_agent *a = c->a;
    struct gm_peer *p = c->node[0] ? gm_agent_peer_find(a, c->node) : NULL;
    const char *reason = c->reason[0] ? c->reason : gm_tls_reason(gm_link_tls(l));

    gm_admit_link_closed(a, c);
    if (p != NULL && p->link == l) {
        p->link = NULL;
        gm_rooms_link_down(a, p, err != 0 ? err : GM_ERR_ABORTED); /* measure, jobs, chief, ... */
        gm_notice("event=link-down peer=%s err=%d msg=\"%s\" reason=\"%s\"", p->node, err,
                  gm_strerror(err), reason);
    } else if (c->ep != NULL && gm_link_state(l) != GM_LSTATE_UP && !c->duplicate) {
        gm_endpoint_failed(c->ep, err, reason);
    } else if (!c->dialed && gm_link_state(l) == GM_LSTATE_HANDSHAKE &&
               gm_link_bytes_received(l) == 0) {
        /* a bare connect (a peer's reachability check, a port scan): nothing to say */
        gm_debug("event=connection-closed-early address=%s", gm_link_peer_addr(l));
    } else if (c->dialed && gm_link_state(l) == GM_LSTATE_HANDSHAKE && err != GM_ERR_AUTH &&
               err != GM_ERR_PROTO) {
        /* a member that is down: say so once, then quietly retry */
        if (p != NULL && p->backoff_ms == 0)
            gm_info("event=dial-failed peer=%s address=%s err=%d msg=\"%s\"", p->node, p->address,
                    err, gm_strerror(err));
        else
            gm_debug("event=dial-failed peer=%s err=%d", c->node, err);
    } else if (err != 0 && !a->stopping) {
        if (err == GM_ERR_AUTH || err == GM_ERR_PROTO) {
            a->stats.links_refused++;
            a->stats.last_refusal = err;
            gm_metrics_refused(a->metrics, "link", gm_metrics_reason(err));
        }
        gm_warn("event=link-closed peer=%s address=%s err=%d msg=\"%s\" reason=\"%s\"",
                c->node[0] ? c->node : "-", gm_link_peer_addr(l), err, gm_strerror(err), reason);
    }
    if (c->ep != NULL)
        gm_endpoint_link_closed(c->ep, gm_link_state(l) == GM_LSTATE_UP || c->duplicate);
    if (p != NULL && c->dialed && c->ep == NULL)
        gm_members_dial_ended(p);
    gm_agent_lctx_free(c);
}

static void connection_cb(uv_stream_t *server, int status)
{
    struct gm_agent *a = server->data;
    struct gm_link_opts o = gm_agent_link_opts(a, GM_TLS_ROLE_SERVER);
    struct gm_lctx *c;
    int err;

    if (status < 0 || a->stopping)
        return;
    c = gm_agent_lctx_new(a);
    if (c == NULL)
        return;
    err = gm_link_new(&a->loop, a->tls, &o, &link_ops, c, &c->link);
    if (err == 0) {
        gm_link_set_state(c->link, GM_LSTATE_HANDSHAKE);
        err = gm_link_accept(c->link, server);
        if (err != 0)
            gm_link_free_unstarted(c->link);
    }
    if (err == 0) {
        struct gm_lctx *k;
        int n = 0;
        for (k = a->links; k != NULL; k = k->next)
            n += !k->dialed && gm_link_state(k->link) == GM_LSTATE_HANDSHAKE;
        if (n > MAX_HANDSHAKING) {
            snprintf(c->reason, sizeof(c->reason), "too many connections in handshake");
            gm_link_close(c->link, -EBUSY);
        }
        return;
    }
    if (err != 0) {
        gm_err("event=accept-failed err=%d msg=\"%s\"", err, gm_strerror(err));
        gm_agent_lctx_free(c);
    }
}

/* --- control socket --------------------------------------------------------- */

static void control_cb(void *arg, const char *req, size_t len, char **resp)
{
    struct gm_agent *a = arg;
    json_error_t e;
    json_t *j = json_loadb(req, len, JSON_REJECT_DUPLICATES, &e), *r = NULL;
    const char *cmd = json_string_value(json_object_get(j, "cmd"));

    const struct gm_room_command *k = cmd != NULL ? command_find(cmd) : NULL;

    if (cmd == NULL)
        r = gm_agent_ctl_error(-EINVAL, "bad request");
    else if (k == NULL)
        r = gm_agent_ctl_error(-EINVAL, "unknown command");
    else
        r = k->fn(a, j);
    json_decref(j);
    *resp = r != NULL ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
}

/* --- lifecycle -------------------------------------------------------------- */

static void notify_status(struct gm_agent *a);

static void tick_cb(uv_timer_t *t)
{
    struct gm_agent *a = t->data;
    uint64_t now = gm_time_mono_ns();

    gm_members_tick(a, now);
    gm_endpoints_tick(a, now);
    gm_measure_tick(a, now);
    gm_beacons_refresh_join_keys(a);
    gm_admit_tick(a, now);
    gm_chief_tick(a, now);
    gm_jobresume_tick(a, a->resume, now); /* after the chief's: it reads its state */
    gm_keyring_tick(a);
    if (gm_drain_tick(a, now))
        gm_agent_stop(a); /* drain decides, the agent acts */
    notify_status(a);
    gm_views_publish_metrics(a);
}

/* STATUS= for systemctl status: members up, and the job once there are jobs. */
static void notify_status(struct gm_agent *a)
{
    char st[sizeof(a->notify_status)];

    snprintf(st, sizeof(st), "%d of %zu members up; listening on %s", gm_agent_members_up(a),
             a->npeers, a->listen_addr);
    if (strcmp(st, a->notify_status) == 0)
        return;
    memcpy(a->notify_status, st, sizeof(st));
    gm_notify_status(st);
}

static void watchdog_cb(uv_timer_t *t)
{
    (void)t;
    gm_notify_watchdog(); /* from the loop: a hung loop stops feeding it */
}

static void handle_close_cb(uv_handle_t *h)
{
    struct gm_agent *a = h->data;

    a->handles_open--;
}

/* SIGTERM on the chief drains (agent/drain.h); otherwise, and on a second signal, stop. */
static void signal_cb(uv_signal_t *s, int signum)
{
    struct gm_agent *a = s->data;

    if (signum == SIGTERM && !gm_drain_active(a) && gm_drain_start(a)) {
        gm_notice("event=signal signal=%d action=drain", signum);
        if (gm_drain_tick(a, gm_time_mono_ns())) /* nothing to wait for */
            gm_agent_stop(a);
        return;
    }
    gm_notice("event=signal signal=%d action=stop", signum);
    gm_agent_stop(a);
}

static int load_identity(struct gm_agent *a)
{
    char path[GM_PATH_MAX];
    int err;

    err = gm_config_state_path(&a->cfg, "node.key", path, sizeof(path));
    if (err == 0)
        err = gm_id_key_load(path, &a->key);
    if (err == 0)
        err = gm_config_state_path(&a->cfg, "node.crt", path, sizeof(path));
    if (err == 0)
        err = gm_id_cert_load(path, &a->cert);
    if (err == 0)
        err = gm_config_state_path(&a->cfg, "ca.crt", path, sizeof(path));
    if (err == 0)
        err = gm_id_cert_load(path, &a->ca);
    if (err != 0) {
        gm_err("event=identity-load state=%s err=%d msg=\"%s\"", a->cfg.state_dir, err,
               gm_strerror(err));
        return err == -EACCES ? err : GM_ERR_CONFIG; /* a permission: gm_config_check_state */
    }
    if (!gm_id_cert_matches_key(a->cert, a->key)) {
        gm_err("event=identity-load reason=\"node.crt does not match node.key\"");
        return GM_ERR_CONFIG;
    }
    err = gm_config_state_path(&a->cfg, "ca.key", path, sizeof(path));
    if (err == 0) {
        err = gm_id_key_load(path, &a->cakey);
        if (err == -ENOENT)
            return 0; /* not the admitter */
        if (err != 0)
            return GM_ERR_CONFIG;
        err = gm_config_state_path(&a->cfg, "tokens", path, sizeof(path));
        if (err == 0)
            err = gm_token_store_open(path, &a->tokens);
        if (err != 0)
            return GM_ERR_CONFIG;
    }
    return err;
}

/* beacon.key: every member's copy of the cluster beacon key (JOIN_ACCEPT);
 * the admitter makes one when it has none (clusters made before beacons). */
static int load_beacon_key(struct gm_agent *a)
{
    char path[GM_PATH_MAX];
    int err = gm_config_state_path(&a->cfg, "beacon.key", path, sizeof(path));

    if (err == 0)
        err = gm_beacon_key_load(path, a->bkey);
    if (err == -ENOENT && a->cakey != NULL) {
        gm_beacon_key_generate(a->bkey);
        err = gm_beacon_key_save(path, a->bkey);
        if (err == 0)
            gm_notice("event=beacon-key-created file=%s", path);
    } else if (err == -ENOENT) {
        return 0;
    }
    if (err != 0) {
        gm_err("event=beacon-key-load file=%s err=%d msg=\"%s\"", path, err, gm_strerror(err));
        return GM_ERR_CONFIG;
    }
    a->have_bkey = 1;
    return 0;
}

int gm_agent_open(const char *config_path, struct gm_agent **out)
{
    struct gm_agent *a;
    struct gm_tls_config tc = {0};
    int err;

    *out = NULL;
    rooms_check();
    signal(SIGPIPE, SIG_IGN); /* a vanished client or peer is EPIPE, not death */
    if (sodium_init() < 0)
        return -ENOMEM;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->link_ops = &link_ops;
    a->rooms = rooms;
    a->nrooms = GM_ARRAY_SIZE(rooms);
    err = uv_loop_init(&a->loop);
    if (err != 0) {
        free(a);
        return err;
    }
    err = gm_config_load(config_path, &a->cfg);
    /* this user can use the state directory (only looked at: a file it cannot use is named
     * with its owner before the lock, itself a file there, meets the same problem) */
    if (err == 0)
        err = gm_config_check_state(&a->cfg);
    /* one agent per state directory: before anything in it is read or written */
    if (err == 0) {
        err = gm_statelock_take(a->cfg.state_dir, a->cfg.listen, &a->state_lock_fd);
        a->state_locked = err == 0;
    }
    if (err == 0)
        err = load_identity(a);
    if (err == 0) {
        char cl[GM_ID_NAME_MAX + 1], node[GM_ID_NAME_MAX + 1];
        if (gm_id_cert_identity(a->cert, cl, node) != 0 || strcmp(cl, a->cfg.cluster) != 0 ||
            strcmp(node, a->cfg.node) != 0) {
            gm_err("event=identity-mismatch reason=\"node.crt does not name cluster %s node %s\"",
                   a->cfg.cluster, a->cfg.node);
            err = GM_ERR_CONFIG;
        }
    }
    if (err == 0) {
        tc.cluster = a->cfg.cluster;
        tc.ca = a->ca;
        tc.cert = a->cert;
        tc.key = a->key;
        tc.accept_joins = a->cakey != NULL;
        err = gm_tls_ctx_new(&tc, &a->tls);
    }
    if (err == 0)
        err = gm_admit_load_denylist(a);
    if (err == 0)
        err = gm_members_load(a);
    if (err == 0)
        err = load_beacon_key(a);
    if (err == 0)
        err = gm_endpoints_parse(a);
    if (err == 0)
        gm_admit_load_admitter(a);
    if (err == 0)
        err = gm_jobroom_open(a);
    if (err == 0)
        err = gm_chief_open(a);
    if (err == 0)
        err = gm_ckptroom_open(a);
    if (err != 0) {
        gm_agent_free(a);
        return err;
    }
    *out = a;
    return 0;
}

int gm_agent_start(struct gm_agent *a)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), err;

    err = gm_proto_addr_parse(a->cfg.listen, &ss);
    if (err != 0)
        return GM_ERR_CONFIG;
    err = uv_tcp_init(&a->loop, &a->listener);
    if (err != 0)
        return err;
    a->listener.data = a;
    a->handles_open++;
    a->started = 1;
    err = uv_tcp_bind(&a->listener, (struct sockaddr *)&ss, 0);
    if (err == 0)
        err = uv_listen((uv_stream_t *)&a->listener, 128, connection_cb);
    if (err == 0)
        err = uv_tcp_getsockname(&a->listener, (struct sockaddr *)&ss, &len);
    if (err == 0)
        err = gm_proto_addr_format((struct sockaddr *)&ss, a->listen_addr);
    if (err != 0) {
        gm_err("event=listen-failed address=%s err=%d msg=\"%s\"", a->cfg.listen, err,
               uv_strerror(err));
        return err;
    }
    if (a->state_locked && gm_statelock_update(a->state_lock_fd, a->listen_addr) != 0)
        gm_warn("event=state-lock-record state=%s: the lock file keeps the configured address",
                a->cfg.state_dir);
    err = uv_timer_init(&a->loop, &a->timer);
    if (err != 0)
        return err;
    a->timer.data = a;
    a->handles_open++;
    err = uv_timer_start(&a->timer, tick_cb, 0, GM_AGENT_TICK_MS);
    if (err == 0)
        err = uv_signal_init(&a->loop, &a->sigint);
    if (err != 0)
        return err;
    a->sigint.data = a;
    a->handles_open++;
    err = uv_signal_init(&a->loop, &a->sigterm);
    if (err != 0)
        return err;
    a->sigterm.data = a;
    a->handles_open++;
    err = uv_signal_start(&a->sigint, signal_cb, SIGINT);
    if (err == 0)
        err = uv_signal_start(&a->sigterm, signal_cb, SIGTERM);
    if (err == 0)
        err = gm_control_start(&a->loop, a->cfg.control, control_cb, a, &a->control);
    if (err != 0)
        return err;
    if (a->cfg.metrics[0] != '\0') {
        err = gm_metrics_start(a->cfg.metrics, &a->metrics);
        if (err != 0)
            return err;
        gm_views_publish_metrics(a);
    }
    a->watchdog_ms = gm_notify_watchdog_ms();
    if (a->watchdog_ms > 0) {
        err = uv_timer_init(&a->loop, &a->watchdog);
        if (err != 0)
            return err;
        a->watchdog.data = a;
        a->watchdog_started = 1;
        err = uv_timer_start(&a->watchdog, watchdog_cb, 0, a->watchdog_ms);
        if (err != 0)
            return err;
    }
    err = gm_chief_start(a);
    if (err != 0)
        return err;
    gm_beacons_start(a); /* without it the agent still works through members and peers */
    gm_notice("event=agent-started cluster=%s node=%s listen=%s members=%zu admitter=%d "
              "metrics=%s watchdog_ms=%llu",
              a->cfg.cluster, a->cfg.node, a->listen_addr, a->npeers, a->cakey != NULL,
              a->metrics != NULL ? gm_metrics_address(a->metrics) : "off",
              (unsigned long long)a->watchdog_ms);
    snprintf(a->notify_status, sizeof(a->notify_status), "listening on %s", a->listen_addr);
    gm_notify_ready(a->notify_status);
    return 0;
}

void gm_agent_stop(struct gm_agent *a)
{
    struct gm_lctx *c;

    if (a->stopping)
        return;
    a->stopping = 1;
    if (a->started)
        gm_notify_stopping();
    gm_jobs_stop(a->jobs); /* the trainer ends at its next step; rank 0 keeps its weights */
    /* BYE, close_notify, and a short wait for each peer's EOF: a stop is prompt even when a
     * peer is busy (e.g. mid throughput probe) and would drain slowly. */
    for (c = a->links; c != NULL; c = c->next) {
        if (gm_link_state(c->link) == GM_LSTATE_UP)
            gm_agent_ignore(
                gm_link_send(c->link, GM_MSG_BYE, 0, NULL, 0)); /* peers log a clean exit */
        gm_link_close_within(c->link, 0, STOP_LINGER_MS);
    }
    if (a->watchdog_started) {
        a->watchdog_started = 0;
        uv_close((uv_handle_t *)&a->watchdog, NULL); /* embedded; nothing to free */
    }
    gm_control_close(a->control);
    a->control = NULL;
    gm_beacons_stop(a);
    gm_endpoints_stop(a);
    gm_measure_stop(a);
    gm_chief_stop(a); /* raft closes its I/O and its channels */
    if (a->started) {
        uv_close((uv_handle_t *)&a->listener, handle_close_cb);
        if (a->handles_open >= 2)
            uv_close((uv_handle_t *)&a->timer, handle_close_cb);
        if (a->handles_open >= 3)
            uv_close((uv_handle_t *)&a->sigint, handle_close_cb);
        if (a->handles_open >= 4)
            uv_close((uv_handle_t *)&a->sigterm, handle_close_cb);
    }
}

void gm_agent_free(struct gm_agent *a)
{
    if (a == NULL)
        return;
    if (a->started || a->chief != NULL) {
        gm_agent_stop(a);
        while (uv_run(&a->loop, UV_RUN_DEFAULT) != 0)
            ;
    }
    gm_chief_free(a);
    if (a->jobs != NULL) { /* its trainer is gone: the loop above waited for it */
        gm_jobs_free(a->jobs);
        a->jobs = NULL;
        while (uv_run(&a->loop, UV_RUN_DEFAULT) != 0)
            ;
    }
    gm_jobresume_free(a->resume); /* after the chief: raft has called its barrier back */
    a->resume = NULL;
    gm_ckptx_free(a->ckptx); /* after the links: nothing arrives any more */
    a->ckptx = NULL;
    gm_metrics_stop(a->metrics); /* after the trainer: it may publish until it ends */
    a->metrics = NULL;
    if (uv_loop_close(&a->loop) != 0)
        gm_warn("event=loop-close-busy");
    gm_tls_ctx_free(a->tls);
    gm_token_store_free(a->tokens);
    gm_id_key_free(a->key);
    gm_id_key_free(a->cakey);
    gm_id_cert_free(a->cert);
    gm_id_cert_free(a->ca);
    gm_members_free(a);
    gm_endpoints_free(a);
    gm_measure_free(a);
    sodium_memzero(a->bkey, sizeof(a->bkey));
    if (a->state_locked) /* last: nothing of this agent touches the state directory any more */
        gm_statelock_release(&a->state_lock_fd);
    free(a);
}

uv_loop_t *gm_agent_loop(struct gm_agent *a)
{
    return &a->loop;
}

const char *gm_agent_listen_addr(const struct gm_agent *a)
{
    return a->listen_addr;
}
