/*
 * agent/core/state.h - what the agent's rooms share: struct gm_agent, the member
 * entry (struct gm_peer), the per-link context (struct gm_lctx), the link
 * states, the room table type, and the helpers (state.c) every room uses on
 * them.  Not a public header: only agent/ includes it.  It sits below every
 * room, so no room needs agent.c, and agent.c only calls down.
 *
 * Rooms, bottom up (docs/ARCHITECTURE.md has the table; tests/layering.sh keeps every
 * include pointing down): net/ (frames, wire messages, the link) < service/ (config, control
 * socket, metrics, sd_notify) < core/ (this header) < mesh/ (members, measure, endpoints,
 * beacons) < cluster/ (chief, chiefreq, chieffsm, chiefnet, keyring, admit, joiner) < jobs/
 * (jobroom and the job*.c files, rank, xport, ckptxfer, autocodec, datahash, jobresume,
 * jobmsg) < the root (agent.c: lifecycle, links, dispatch; views.c; drain.c) < cli/.  Each
 * file's header comment says what it owns.
 *
 * Registering a room: a room defines one `const struct gm_room` listing its
 * frames {type, allowed link states, handler} and its control commands
 * {name, handler}, declares it in its header, and agent.c adds it to its
 * `rooms[]` list.  gm_agent_open() asserts that no frame type and no command
 * name is claimed twice.  A frame not allowed in the link's state, or of a
 * type no room claims, closes that link with GM_ERR_PROTO (ERROR first).
 * Handlers keep their helpers static; what another room needs goes in the
 * room's header.  Periodic work, stop and free are called by name from
 * agent.c (tick_cb, gm_agent_stop, gm_agent_free), so their order stays in
 * one place.  A member's link coming up is announced once, from members.c's HELLO handler,
 * and its going down once, from agent.c's on_close, through the rooms' optional hooks
 * (link_up, link_down; gm_rooms_link_up/down below): measure, admit (the renewal nudge), the
 * jobs, the chief and the checkpoints register there instead of being called by name, so
 * members.c never calls up into a room above it.  Likewise may_link lets the chief refuse a
 * revoked node before a dial or after a handshake.
 *
 * Per-room state lives in struct gm_agent under the room's heading below;
 * a new room with more than a few fields adds one pointer to its own opaque
 * struct (e.g. `struct gm_jobs *jobs`, made in gm_agent_open, freed in
 * gm_agent_free).
 *
 * Loop thread only, like all of the agent.
 */
#ifndef GM_AGENT_CORE_STATE_H
#define GM_AGENT_CORE_STATE_H

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agent/service/config.h"
#include "agent/net/frame.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/beacon.h"
#include "discovery/iface.h"

#define GM_AGENT_TICK_MS 500 /* the agent's timer; also a member's first redial */

/* Link states (gm_link_set_state); a frame names the states it is allowed in. */
enum gm_lstate {
    GM_LSTATE_HANDSHAKE = 1u << 0,
    GM_LSTATE_JOIN = 1u << 1,  /* cert-less joiner: only JOIN_REQUEST */
    GM_LSTATE_HELLO = 1u << 2, /* member, waiting for its HELLO */
    GM_LSTATE_UP = 1u << 3,
    GM_LSTATE_DONE = 1u << 4, /* answered a join; closing */
};

struct gm_link_stat;

/* What is known of the link to one member (measure.c's: agent/mesh/measure.h);
 * reset when a new link comes up.  Here, not in measure.h, because every
 * struct gm_peer embeds one and this header sits below the mesh room. */
struct gm_measure {
    enum gm_link_class cls_local, cls_remote; /* 0: unknown */
    int mtu_local, mtu_remote;
    char iface[IF_NAMESIZE];
    double mbps_out, mbps_in; /* < 0: unknown */
    int reach_out;            /* we can open a TCP connection to it: 1, 0, -1 unknown */
    uint32_t probe_size;      /* bytes of the round in flight; 0: no probe running */
    int probe_after_pong;     /* probe once the first RTT (on the idle link) is in */
    uint64_t probe_req;
    struct gm_link_stat *remote; /* its LINK_STATS (owned) */
    size_t nremote;
};

/* One member (members.c owns the table). */
struct gm_peer {
    char node[GM_ID_NAME_MAX + 1];
    char address[GM_ADDR_MAX];
    struct gm_link *link; /* borrowed: the up link */
    int dialing;
    uint64_t next_dial;
    unsigned backoff_ms;
    struct gm_measure m; /* measure.c's; reset when a new link comes up */
    /* from its last HELLO (members.c): the peer protocol and the build it runs; 0 and ""
     * until a link came up */
    int proto;
    char version[GM_PROTO_VERSION_MAX];
};

struct gm_endpoint;
struct gm_jobresume;
struct gm_ckptx;
struct gm_reach;
struct gm_join_wait;

/* One per link, made by agent.c, freed in its on_close. */
struct gm_lctx {
    struct gm_agent *a;
    struct gm_link *link;
    struct gm_lctx *next, **pprev;
    char node[GM_ID_NAME_MAX + 1]; /* peer, once known (dialed: expected, "" = any) */
    int dialed;
    struct gm_endpoint *ep; /* dialed for this static endpoint (borrowed) */
    int duplicate;          /* closed because the pair has a link already */
    char reason[256];
    /* the view from this end, sent in HELLO (measure.c) */
    enum gm_link_class cls;
    int mtu;
    char iface[IF_NAMESIZE];
    /* the bulk/probe train arriving now (measure.c) */
    int rx_active;
    uint16_t rx_type;
    uint64_t rx_req, rx_t0, rx_bytes, rx_first;
    uint64_t keyring_sent;        /* keyring.c: the keyring_gen last sent on this link */
    uint64_t keyring_answered_ns; /* keyring.c: when a KEYRING_REQ was last answered here */
    struct gm_join_wait *jw;      /* admit.c: a join waiting for its token use to commit */
};

/* Counters of the agent's links and joins (agent.c, admit.c, members.c; views.c shows them). */
struct gm_agent_stats {
    unsigned joins_accepted, joins_refused, links_up, links_refused;
    int last_refusal; /* error code of the last refused join or link */
};

#define GM_JOIN_FAILS_MAX 20 /* refused joins per window, all tokens together */

struct gm_agent {
    /* agent.c: lifecycle */
    uv_loop_t loop;
    struct gm_config cfg;
    struct gm_key *key, *cakey; /* cakey: voters that hold the CA key only (keyring.h) */
    struct gm_cert *cert, *ca;
    struct gm_tls_ctx *tls;             /* must outlive every link */
    const struct gm_link_ops *link_ops; /* agent.c's callbacks, for every link */
    uv_tcp_t listener;
    uv_timer_t timer;
    uv_signal_t sigint, sigterm;
    struct gm_control *control;
    struct gm_lctx *links;
    int started, stopping, handles_open;
    char listen_addr[GM_ADDR_MAX];
    /* agent/service/statelock.h: the state directory's lock, held for the process's life */
    int state_lock_fd;
    bool state_locked; /* state_lock_fd is ours (a struct made without gm_agent_open: no) */
    /* the cluster revoked this node (its raft entry, or a member's refusal saying so) */
    bool revoked;
    struct gm_agent_stats stats;
    /* members.c */
    struct gm_peer *peers;
    size_t npeers, cap_peers;
    /* admit.c */
    struct gm_token_store *tokens;     /* with cakey only */
    char admitter[GM_ID_NAME_MAX + 1]; /* node that issues certificates ("" if unknown) */
    uint64_t next_renew_check;
    int64_t join_fails[GM_JOIN_FAILS_MAX];
    size_t join_fail_next;
    /* measure.c */
    uint8_t *zeros; /* probe block of zeros (untouched pages), made on first use */
    uint64_t req_seq, next_stats;
    struct gm_reach *reaches; /* reachability checks in flight */
    /* endpoints.c */
    struct gm_endpoint *eps;
    size_t neps;
    /* beacons.c */
    struct gm_disc *disc;
    uint8_t bkey[GM_BEACON_KEY_LEN];
    int have_bkey;
    /* agent.c: systemd (notify.h) */
    uv_timer_t watchdog;     /* WATCHDOG=1 every watchdog_ms, from the loop */
    uint64_t watchdog_ms;    /* 0: systemd wants no watchdog */
    int watchdog_started;    /* the timer handle is open */
    char notify_status[128]; /* the last STATUS= sent */
    /* metrics.c (its HTTP side runs on its own thread; views.c publishes into it) */
    struct gm_metrics *metrics; /* NULL: [metrics] listen is empty */
    /* job.c (via jobroom.c) */
    struct gm_jobs *jobs;
    struct gm_jobresume *resume; /* jobresume.c: a restarted cluster resumes its job */
    /* chief.c: consensus and the replicated state */
    struct gm_chief *chief;
    /* ckptxfer.c */
    struct gm_ckptx *ckptx;
    /* keyring.c: the CA key's handover between voters */
    uint64_t keyring_gen;      /* bumped when the key or the token records change here */
    uint64_t keyring_asked_ns; /* when this node, a voter without the key, last asked for it */
    uint64_t keyring_asks;     /* asks since this node last received the key */
    /* drain.c: SIGTERM on the chief */
    int drain_phase;
    uint64_t drain_t0, drain_deadline;
    /* agent.c: the rooms' table (rooms[]), for the hooks of struct gm_room */
    const struct gm_room *const *rooms; /* borrowed: static */
    size_t nrooms;
    /* next rooms: one pointer each to their own state */
};

/* --- rooms ------------------------------------------------------------------ */

/* A frame handler: 0, or an error that closes the link (on_close logs it). */
typedef int (*gm_room_frame_fn)(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                                const uint8_t *p);
/* A control command: the answer object (an {error, code} object on failure),
 * NULL only for out-of-memory.  req is the whole request ({"cmd": name, ...}). */
typedef json_t *(*gm_room_command_fn)(struct gm_agent *a, json_t *req);

struct gm_room_frame {
    uint16_t type;   /* GM_MSG_* */
    uint32_t states; /* enum gm_lstate bits it is allowed in */
    gm_room_frame_fn fn;
};

struct gm_room_command {
    const char *name; /* the request's "cmd" */
    gm_room_command_fn fn;
};

/* Optional hooks (NULL: not wanted), called for every room that sets them, in the order of
 * agent.c's rooms[] (gm_rooms_link_up & co. below): link events are announced in one place,
 * so the mesh room below never names the rooms above that follow its members. */
struct gm_room {
    const char *name;
    const struct gm_room_frame *frames;
    size_t nframes;
    const struct gm_room_command *commands;
    size_t ncommands;
    /* p's link c is up: its HELLO was accepted and the member entry updated (members.c) */
    void (*link_up)(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c);
    /* p's up link is gone (agent.c's on_close); err: why, never 0 */
    void (*link_down)(struct gm_agent *a, struct gm_peer *p, int err);
    /* 0 vetoes any link to node, dialed or accepted (the chief: a revoked node), else 1 */
    int (*may_link)(struct gm_agent *a, const char *node);
};

/* --- state.c: helpers for the rooms ------------------------------------------ */

/* For results that are deliberately dropped (they are logged where they occur). */
static inline void gm_agent_ignore(int err)
{
    (void)err;
}

/* A link context on a->links (NULL: no memory); freed from the link's on_close. */
struct gm_lctx *gm_agent_lctx_new(struct gm_agent *a);
void gm_agent_lctx_free(struct gm_lctx *c);
/* Link options for role: a PING every 5 s, and a member that sends nothing for
 * [node] peer_timeout seconds is dropped (its link closes with -ETIMEDOUT). */
struct gm_link_opts gm_agent_link_opts(const struct gm_agent *a, enum gm_tls_role role);
/* The member named node, or NULL. */
struct gm_peer *gm_agent_peer_find(struct gm_agent *a, const char *node);
/* The up (and not closing) member link to node, or NULL. */
struct gm_link *gm_agent_up_link(struct gm_agent *a, const char *node);
/* Closes l with err after an ERROR frame; what is kept as the reason.  Returns 0. */
int gm_agent_refuse(struct gm_link *l, int err, const char *what);
/* Sends json (malloc'd, freed here) as one frame; err != 0 is passed through. */
GM_MUST_CHECK int gm_agent_send_json(struct gm_link *l, uint16_t type, char *json, size_t len,
                                     int err);
/* Dials addr expecting node (or anyone of the cluster when node is ""), for ep
 * when not NULL.  Errors after 0 arrive in on_close. */
GM_MUST_CHECK int gm_agent_dial(struct gm_agent *a, const char *node, const struct sockaddr *addr,
                                struct gm_endpoint *ep);
/* Reads state file name (its path into path) into a malloc'd *text; a missing
 * file is 0 with *text NULL. */
GM_MUST_CHECK int gm_agent_state_read(const struct gm_agent *a, const char *name,
                                      char path[GM_PATH_MAX], char **text);
/* {"error": msg, "code": err}: a command's refusal. */
json_t *gm_agent_ctl_error(int err, const char *msg);
/* Number of members with an up link. */
int gm_agent_members_up(const struct gm_agent *a);

/* The rooms' hooks, each room's in turn (struct gm_room). */
void gm_rooms_link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c);
void gm_rooms_link_down(struct gm_agent *a, struct gm_peer *p, int err);
/* 1 unless a room vetoes a link to node. */
int gm_rooms_may_link(struct gm_agent *a, const char *node);

#endif
