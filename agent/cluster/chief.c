/*
 * agent/cluster/chief.c - the chief room's engine (see chief.h): raft's lifecycle and I/O,
 * the state machine's glue, proposals' raft_apply, the results table of requests made here,
 * the controller that keeps raft's configuration in line with the members and their recorded
 * roles, hand-over and election tuning, and the queries (leader, term, status).  What is
 * asked of the chief (requests, CHIEF_REQ/CHIEF_ANS, the commands, the room table) is
 * chiefreq.c, above this file: nothing here calls into it (agent/cluster/chief_int.h).
 *
 * Ownership: struct gm_chief (a->chief) owns the raft instance, its libuv
 * I/O backend, the transport (agent/cluster/chiefnet.h) and the state machine.  A
 * proposal (struct prop) is owned by raft from raft_apply until its callback,
 * which frees it.  gm_chief_stop closes raft (raft closes its I/O and the
 * transport); gm_chief_free runs after the loop has drained.
 */
#include "agent/cluster/chief.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "agent/cluster/chief_int.h"
#include "agent/cluster/chiefnet.h"
#include "agent/net/link.h"
#include "agent/mesh/measure.h"
#include "agent/core/state.h"
#include "common/log.h"
#include "common/time.h"

#define ELECTION_MS 1000
/* With a voter behind a tunnel or a WAN link, raft's heartbeats share that slow link with
 * training's bulk traffic (bounded by gm_link_set_high_water, but at 1 Mbit/s that is still
 * most of a second), so the election timeout starts here there; and never below
 * ELECTION_RTT_X times the slowest voter link's measured round trip (PINGs queue exactly as
 * heartbeats do), up to ELECTION_MAX_MS.  Raft's safety does not depend on timeouts; this
 * trades a slower failover on slow links for a chief that does not flap under load.
 * "Measured round trip" is the median of the link's fresh samples (the last 16 PINGs within
 * 30 s, none that spans this node's own stall: agent/net/link.h), and a link counts only once
 * it has ELECTION_MIN_SAMPLES of them and its throughput probe is over: a frozen voter's stale
 * answers (one PONG 20 s late), a node that itself was frozen, or the probes of dozens of
 * links forming at once, used to set 17-30 s from a single sample. */
#define ELECTION_MIN_SAMPLES 4
#define ELECTION_SLOW_MS 5000
#define ELECTION_RTT_X 10
#define ELECTION_MAX_MS 30000
#define HEARTBEAT_MS 100
#define SNAPSHOT_THRESHOLD 256
#define SNAPSHOT_TRAILING 64
#define ASK_TIMEOUT_S 10 /* a request with a callback that has no answer by then fails */

/* --- results ----------------------------------------------------------------- */

/* Runs r's callback once, with code and msg. */
static void result_call(struct result *r, int code, const char *msg)
{
    gm_chief_done_fn done = r->done;

    r->done = NULL;
    if (done != NULL)
        done(r->arg, code, msg);
}

struct result *gm_chief_result_new(struct gm_chief *ch)
{
    struct result *r = &ch->results[ch->next_req % RESULTS_MAX];

    if (r->state == RES_PENDING)
        result_call(r, -ETIMEDOUT, "no answer from the chief");
    memset(r, 0, sizeof(*r));
    r->req = ++ch->next_req;
    r->state = RES_PENDING;
    r->t0 = gm_time_mono_ns();
    return r;
}

struct result *gm_chief_result_find(struct gm_chief *ch, uint64_t req)
{
    for (size_t i = 0; i < RESULTS_MAX; i++)
        if (ch->results[i].state != RES_FREE && ch->results[i].req == req)
            return &ch->results[i];
    return NULL;
}

void gm_chief_result_set(struct gm_chief *ch, uint64_t req, int code, const char *msg)
{
    struct result *r = gm_chief_result_find(ch, req);

    if (r == NULL)
        return;
    r->state = code == 0 ? RES_DONE : RES_REFUSED;
    r->code = code;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    result_call(r, code, msg);
}

/* Requests with a callback that had no answer in ASK_TIMEOUT_S fail (a chief lost meanwhile);
 * with now == 0, all of them (the agent stops). */
static void results_expire(struct gm_chief *ch, uint64_t now)
{
    for (size_t i = 0; i < RESULTS_MAX; i++) {
        struct result *r = &ch->results[i];
        if (r->state != RES_PENDING || r->done == NULL ||
            (now != 0 && now - r->t0 < (uint64_t)ASK_TIMEOUT_S * 1000000000ull))
            continue;
        r->state = RES_REFUSED;
        r->code = now != 0 ? -ETIMEDOUT : -ECANCELED;
        snprintf(r->msg, sizeof(r->msg), "%s",
                 now != 0 ? "no answer from the chief" : "the agent stops");
        result_call(r, r->code, r->msg);
    }
}

/* --- helpers ------------------------------------------------------------------- */

static int want_raft_role(enum gm_chief_role r)
{
    return r == GM_CHIEF_ROLE_SPARE ? RAFT_STANDBY : RAFT_VOTER;
}

int gm_chief_leader(struct gm_agent *a, char out[GM_CHIEF_NAME_MAX + 1], uint64_t *term)
{
    struct gm_chief *ch = a->chief;
    raft_id id = 0;
    const char *addr = NULL;

    out[0] = '\0';
    *term = 0;
    if (ch == NULL || !ch->raft_ready)
        return -ENOENT;
    raft_leader(&ch->raft, &id, &addr);
    *term = ch->raft.current_term;
    if (id == 0 || addr == NULL)
        return -ENOENT;
    snprintf(out, GM_CHIEF_NAME_MAX + 1, "%s", addr);
    return 0;
}

uint64_t gm_chief_term(struct gm_agent *a)
{
    return a->chief != NULL && a->chief->raft_ready ? a->chief->raft.current_term : 0;
}

const struct gm_chief_fsm *gm_chief_state(struct gm_agent *a)
{
    return a->chief != NULL ? &a->chief->fsm : NULL;
}

int gm_chief_is_revoked(struct gm_agent *a, const char *node)
{
    return a->chief != NULL && gm_chief_fsm_is_revoked(&a->chief->fsm, node);
}

enum gm_chief_role gm_chief_role_of(struct gm_agent *a, const char *node)
{
    const struct gm_chief_member *m =
        a->chief != NULL ? gm_chief_fsm_member(&a->chief->fsm, node) : NULL;

    return m != NULL ? m->role : GM_CHIEF_ROLE_VOTER;
}

/* The voters in raft's configuration, and those this node is one of or has an up link to (with
 * heard: an up link that is not quiet, gm_link_is_quiet). */
static void voters_up(struct gm_chief *ch, bool heard, unsigned *voters, unsigned *up)
{
    const struct raft_configuration *c = &ch->raft.configuration;

    *voters = 0;
    *up = 0;
    for (unsigned i = 0; i < c->n; i++) {
        struct gm_link *l;

        if (c->servers[i].role != RAFT_VOTER)
            continue;
        (*voters)++;
        l = c->servers[i].id == ch->raft.id ? NULL : gm_agent_up_link(ch->a, c->servers[i].address);
        *up += c->servers[i].id == ch->raft.id || (l != NULL && !(heard && gm_link_is_quiet(l)));
    }
}

/* Why there is no chief, from this node's view ("" when there is one). */
static void no_chief_reason(struct gm_chief *ch, char *out, size_t cap)
{
    const struct raft_configuration *c;
    unsigned voters = 0, up = 0;
    char leader[GM_CHIEF_NAME_MAX + 1];
    uint64_t term;

    out[0] = '\0';
    if (ch == NULL || !ch->raft_ready) {
        snprintf(out, cap, "consensus is not running");
        return;
    }
    if (gm_chief_leader(ch->a, leader, &term) == 0)
        return;
    c = &ch->raft.configuration;
    if (c->n == 0) {
        snprintf(out, cap,
                 "this node is not in the raft configuration yet: waiting for the chief "
                 "to add it");
        return;
    }
    voters_up(ch, false, &voters, &up);
    if (2 * up <= voters)
        snprintf(out, cap, "no majority: %u of %u voters reachable (%u needed); training pauses",
                 up, voters, voters / 2 + 1);
    else
        snprintf(out, cap,
                 "no chief heard from: an election is under way, or this node is cut off "
                 "(%u of %u voters still linked)",
                 up, voters);
}

int gm_chief_coordinator(struct gm_agent *a, char out[GM_CHIEF_NAME_MAX + 1], uint64_t *term,
                         char *why, size_t cap)
{
    int err = gm_chief_leader(a, out, term);
    unsigned voters, up;

    why[0] = '\0';
    if (err != 0) {
        no_chief_reason(a->chief, why, cap);
        return err;
    }
    /* Raft's leader that links show cut off from a majority (a silent link closes within
     * seconds, raft's own step-down can come later): no coordinator, so no group of its own
     * trains in the minority while the majority elects another chief.  A quiet link counts as
     * cut off here already: cut off from two peers, a coordinator sees one link close a few
     * milliseconds before the other, and between the two it would form a 1-rank group with
     * the quiet one left out (agent/jobs/job.c, "Silent ranks") and train alone. */
    if (gm_chief_leads(a->chief)) {
        voters_up(a->chief, true, &voters, &up);
        if (2 * up <= voters) {
            out[0] = '\0';
            snprintf(why, cap,
                     "no majority: %u of %u voters reachable (%u needed); training pauses", up,
                     voters, voters / 2 + 1);
            return -ENOENT;
        }
    }
    return 0;
}

void gm_chief_status(struct gm_agent *a, json_t *o)
{
    struct gm_chief *ch = a->chief;
    char leader[GM_CHIEF_NAME_MAX + 1], why[MSG_MAX];
    uint64_t term = 0;
    int have = gm_chief_leader(a, leader, &term) == 0;
    const struct raft_server *s =
        ch != NULL && ch->raft_ready ? gm_chief_server_find(ch, a->cfg.node) : NULL;

    json_object_set_new(o, "chief", have ? json_string(leader) : json_null());
    json_object_set_new(o, "term", json_integer((json_int_t)term));
    json_object_set_new(o, "quorum", json_boolean(have));
    if (ch != NULL)
        no_chief_reason(ch, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "consensus is not running");
    json_object_set_new(o, "chief_reason", have ? json_null() : json_string(why));
    json_object_set_new(o, "member_role",
                        json_string(gm_chief_role_name(gm_chief_role_of(a, a->cfg.node))));
    json_object_set_new(o, "raft_role",
                        json_string(s != NULL ? gm_chief_raft_role_name(s->role) : "none"));
}

/* Logs each chief once per term: the test of "one chief per term" reads these lines. */
static void log_chief(struct gm_chief *ch)
{
    char leader[GM_CHIEF_NAME_MAX + 1];
    uint64_t term;

    if (gm_chief_leader(ch->a, leader, &term) != 0)
        return;
    if (term == ch->logged_term && strcmp(leader, ch->logged_chief) == 0)
        return;
    ch->logged_term = term;
    snprintf(ch->logged_chief, sizeof(ch->logged_chief), "%s", leader);
    if (strcmp(leader, ch->a->cfg.node) == 0)
        gm_notice("event=chief-elected node=%s term=%llu", leader, (unsigned long long)term);
    else
        gm_notice("event=chief-known chief=%s term=%llu", leader, (unsigned long long)term);
}

/* --- the state machine ---------------------------------------------------------- */

/* What a committed command does outside the state machine, on every node. */
static void after_apply(void *arg, const struct gm_chief_cmd *c, int code)
{
    struct gm_chief *ch = arg;
    struct gm_agent *a = ch->a;

    if (ch->fsm.restores != ch->restores_logged) {
        ch->restores_logged = ch->fsm.restores;
        gm_info("event=chief-snapshot-restored term=%llu members=%zu",
                (unsigned long long)ch->fsm.term, ch->fsm.nmembers);
    }
    if (code != 0) {
        gm_warn("event=chief-command-refused op=%d term=%llu err=%d msg=\"%s\"", (int)c->op,
                (unsigned long long)c->term, code, gm_strerror(code));
        return;
    }
    if (c->op == GM_CHIEF_OP_REVOKE) {
        gm_notice("event=node-revoked node=%s term=%llu", c->node, (unsigned long long)c->term);
        if (strcmp(c->node, a->cfg.node) == 0)
            a->revoked = true;
        if (strcmp(c->node, a->cfg.node) == 0)
            gm_warn("event=this-node-revoked reason=\"the cluster revoked this node; its "
                    "members refuse it\"");
        for (struct gm_lctx *k = a->links; k != NULL; k = k->next)
            if (strcmp(k->node, c->node) == 0 && !gm_link_is_closing(k->link)) {
                snprintf(k->reason, sizeof(k->reason), "revoked");
                gm_link_fail(k->link, GM_ERR_AUTH, GM_PROTO_REVOKED_MSG);
            }
        gm_chiefnet_link_down(ch->net, c->node);
    } else if (c->op == GM_CHIEF_OP_MEMBER) {
        gm_notice("event=member-role node=%s role=%s term=%llu", c->node,
                  gm_chief_role_name(c->role), (unsigned long long)c->term);
    }
}

/* --- the controller's pace --------------------------------------------------------- */

static void controller(struct gm_chief *ch);

static void kick_cb(uv_timer_t *t)
{
    struct gm_chief *ch = t->data;

    if (ch->started && !ch->closing && !ch->closed)
        controller(ch);
}

/* The controller's step committed: the next one is taken on the loop's next turn, so a new
 * member's three steps (chief-add, its role recorded, chief-assign) and the next member's
 * follow each other at commit speed.  A step that failed or was refused is retried at the
 * agent tick's pace (gm_chief_tick), as is everything else (a link that comes up, a
 * transfer): a refusal that repeats must not fill raft's log at commit speed.  Never the
 * controller itself from here: raft calls these callbacks from inside its own apply and
 * close paths. */
static void controller_kick(struct gm_chief *ch)
{
    if (ch->kick_open && !ch->closing && !ch->closed)
        (void)uv_timer_start(&ch->kick, kick_cb, 0, 0);
}

/* --- proposals ---------------------------------------------------------------- */

static void apply_cb(struct raft_apply *req, int status, void *result)
{
    struct prop *p = req->data;
    struct gm_chief *ch = p->ch;
    int code = status != 0 ? -EAGAIN : (int)(intptr_t)result;
    char msg[MSG_MAX];

    if (p->own) {
        ch->own_busy = 0;
        if (code == 0)
            controller_kick(ch);
    }
    if (status != 0)
        snprintf(msg, sizeof(msg), "%s: not committed (%s); try again", p->what,
                 raft_strerror(status));
    else if (code != 0)
        snprintf(msg, sizeof(msg), "%s: refused (%s)", p->what, gm_strerror(code));
    else
        snprintf(msg, sizeof(msg), "%s: committed", p->what);
    if (p->answer != NULL)
        p->answer(ch, p, code, msg);
    free(p);
}

int gm_chief_apply(struct gm_chief *ch, struct gm_chief_cmd *c, const char *origin,
                   uint64_t origin_req, int own, const char *what, gm_chief_answer_fn answer)
{
    struct prop *p;
    struct raft_buffer b;
    int err;

    if (!gm_chief_leads(ch))
        return -EAGAIN;
    c->term = ch->raft.current_term;
    err = gm_chief_cmd_buffer(c, &b);
    if (err != 0)
        return err;
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        raft_free(b.base);
        return -ENOMEM;
    }
    p->ch = ch;
    p->req.data = p;
    p->answer = answer;
    p->own = own;
    p->origin_req = origin_req;
    snprintf(p->origin, sizeof(p->origin), "%s", origin);
    snprintf(p->what, sizeof(p->what), "%s", what);
    err = raft_apply(&ch->raft, &p->req, &b, 1, apply_cb);
    if (err != 0) {
        raft_free(b.base);
        free(p);
        return err == RAFT_NOTLEADER ? -EAGAIN : -EIO;
    }
    if (own)
        ch->own_busy = 1;
    return 0;
}

/* --- the controller --------------------------------------------------------------- */

static void change_cb(struct raft_change *req, int status)
{
    struct gm_chief *ch = req->data;

    ch->change_busy = 0;
    if (status != 0)
        gm_info("event=chief-change-failed err=\"%s\"", raft_strerror(status));
    else
        controller_kick(ch);
}

static void transfer_cb(struct raft_transfer *req)
{
    struct gm_chief *ch = req->data;

    ch->transfer_busy = 0;
}

/* One step toward: every up member in the configuration, every server recorded with a
 * role, raft's roles as recorded, no revoked server.  Called each agent tick and again as
 * soon as its previous step commits (controller_kick). */
static void controller(struct gm_chief *ch)
{
    struct gm_agent *a = ch->a;
    const struct raft_configuration *c = &ch->raft.configuration;
    int err = 0;

    if (!gm_chief_leads(ch) || ch->change_busy || ch->own_busy || ch->transfer_busy ||
        ch->handing_over || ch->raft.configuration_uncommitted_index != 0)
        return;
    ch->change.data = ch;
    if (gm_chief_role_of(a, a->cfg.node) == GM_CHIEF_ROLE_WITNESS) { /* a trainer leads */
        for (unsigned i = 0; i < c->n; i++) {
            const struct raft_server *s = &c->servers[i];
            if (s->role == RAFT_VOTER && s->id != ch->raft.id && gm_agent_up_link(a, s->address) &&
                gm_chief_role_of(a, s->address) == GM_CHIEF_ROLE_VOTER) {
                gm_notice("event=chief-transfer to=%s reason=\"this node is a witness\"",
                          s->address);
                ch->transfer.data = ch;
                ch->transfer_busy =
                    raft_transfer(&ch->raft, &ch->transfer, s->id, transfer_cb) == 0;
                return;
            }
        }
    }
    for (unsigned i = 0; i < c->n; i++) { /* revoked: out */
        const struct raft_server *s = &c->servers[i];
        if (gm_chief_fsm_is_revoked(&ch->fsm, s->address) && s->id != ch->raft.id) {
            gm_notice("event=chief-remove node=%s reason=revoked", s->address);
            err = raft_remove(&ch->raft, &ch->change, s->id, change_cb);
            ch->change_busy = err == 0;
            return;
        }
    }
    for (unsigned i = 0; i < c->n; i++) { /* unrecorded: record a role */
        const struct raft_server *s = &c->servers[i];
        if (gm_chief_fsm_member(&ch->fsm, s->address) == NULL) {
            struct gm_chief_cmd k = {.op = GM_CHIEF_OP_MEMBER};
            snprintf(k.node, sizeof(k.node), "%s", s->address);
            k.role = gm_chief_fsm_recorded_voters(&ch->fsm) < GM_CHIEF_VOTERS ? GM_CHIEF_ROLE_VOTER
                                                                              : GM_CHIEF_ROLE_SPARE;
            if (gm_chief_apply(ch, &k, "", 0, 1, "record member", NULL) != 0)
                gm_debug("event=chief-record-failed node=%s", s->address);
            return;
        }
    }
    for (unsigned i = 0; i < c->n; i++) { /* raft's role as recorded */
        const struct raft_server *s = &c->servers[i];
        int want = want_raft_role(gm_chief_fsm_member(&ch->fsm, s->address)->role);
        if (s->role == want)
            continue;
        if (s->id == ch->raft.id && want != RAFT_VOTER) { /* a voter takes over first */
            gm_notice("event=chief-transfer reason=\"this node's recorded role is spare\"");
            ch->transfer.data = ch;
            ch->transfer_busy = raft_transfer(&ch->raft, &ch->transfer, 0, transfer_cb) == 0;
            return;
        }
        if (want == RAFT_VOTER && gm_agent_up_link(a, s->address) == NULL)
            continue; /* a promotion needs it to catch up */
        gm_notice("event=chief-assign node=%s raft_role=%s", s->address,
                  gm_chief_raft_role_name(want));
        err = raft_assign(&ch->raft, &ch->change, s->id, want, change_cb);
        ch->change_busy = err == 0;
        if (err != 0)
            gm_info("event=chief-assign-failed node=%s err=\"%s\"", s->address, raft_strerror(err));
        return;
    }
    for (size_t i = 0; i < a->npeers; i++) { /* up members raft does not know: in */
        const char *node = a->peers[i].node;
        if (gm_chief_server_find(ch, node) != NULL || gm_chief_fsm_is_revoked(&ch->fsm, node) ||
            gm_agent_up_link(a, node) == NULL)
            continue;
        gm_notice("event=chief-add node=%s", node);
        err = raft_add(&ch->raft, &ch->change, gm_chiefnet_raft_id(node), node, change_cb);
        ch->change_busy = err == 0;
        if (err != 0)
            gm_info("event=chief-add-failed node=%s err=\"%s\"", node, raft_strerror(err));
        return;
    }
}

int gm_chief_is_leader(struct gm_agent *a)
{
    return a->chief != NULL && gm_chief_leads(a->chief);
}

/* A voter (recorded and in raft) other than this node, with an up link; NULL when none. */
static const struct raft_server *successor(struct gm_chief *ch)
{
    const struct raft_configuration *c = &ch->raft.configuration;

    for (unsigned i = 0; i < c->n; i++) {
        const struct raft_server *s = &c->servers[i];
        if (s->role == RAFT_VOTER && s->id != ch->raft.id && gm_agent_up_link(ch->a, s->address) &&
            gm_chief_role_of(ch->a, s->address) == GM_CHIEF_ROLE_VOTER &&
            !gm_chief_fsm_is_revoked(&ch->fsm, s->address))
            return s;
    }
    return NULL;
}

int gm_chief_can_hand_over(struct gm_agent *a)
{
    return gm_chief_is_leader(a) && successor(a->chief) != NULL;
}

int gm_chief_hand_over(struct gm_agent *a, const char *why)
{
    struct gm_chief *ch = a->chief;
    const struct raft_server *s;
    int err;

    if (!gm_chief_is_leader(a) || (s = successor(ch)) == NULL)
        return -ENOENT;
    if (ch->transfer_busy)
        return -EBUSY;
    ch->transfer.data = ch;
    err = raft_transfer(&ch->raft, &ch->transfer, s->id, transfer_cb);
    if (err != 0) {
        gm_warn("event=chief-transfer-failed to=%s err=\"%s\"", s->address, raft_strerror(err));
        return -EIO;
    }
    ch->transfer_busy = 1;
    ch->handing_over = 1;
    gm_notice("event=chief-transfer to=%s term=%llu reason=\"%s\"", s->address,
              (unsigned long long)ch->raft.current_term, why);
    return 0;
}

int gm_chief_hand_to(struct gm_agent *a, const char *node, const char *why)
{
    struct gm_chief *ch = a->chief;
    const struct raft_configuration *c;
    const struct raft_server *s = NULL;
    int err;

    if (ch == NULL || !gm_chief_is_leader(a) || strcmp(node, a->cfg.node) == 0)
        return -ENOENT;
    c = &ch->raft.configuration;
    for (unsigned i = 0; i < c->n && s == NULL; i++)
        if (strcmp(c->servers[i].address, node) == 0)
            s = &c->servers[i];
    if (s == NULL || s->role != RAFT_VOTER || gm_agent_up_link(a, node) == NULL ||
        gm_chief_role_of(a, node) != GM_CHIEF_ROLE_VOTER || gm_chief_fsm_is_revoked(&ch->fsm, node))
        return -ENOENT;
    if (ch->transfer_busy || ch->handing_over || ch->change_busy)
        return -EBUSY;
    ch->transfer.data = ch;
    err = raft_transfer(&ch->raft, &ch->transfer, s->id, transfer_cb);
    if (err != 0) {
        gm_warn("event=chief-transfer-failed to=%s err=\"%s\"", node, raft_strerror(err));
        return -EIO;
    }
    ch->transfer_busy = 1;
    gm_notice("event=chief-transfer to=%s term=%llu reason=\"%s\"", node,
              (unsigned long long)ch->raft.current_term, why);
    return 0;
}

/* The election timeout this node wants from its links to the other voters (see ELECTION_SLOW_MS):
 * raised at once, lowered only once the links want less than half of it. */
static void tune_election(struct gm_chief *ch)
{
    const struct raft_configuration *c = &ch->raft.configuration;
    unsigned want = ELECTION_MS;
    const char *why = "lan";

    for (unsigned i = 0; i < c->n; i++) {
        struct gm_peer *p;
        double rtt;
        if (c->servers[i].id == ch->raft.id || c->servers[i].role != RAFT_VOTER ||
            (p = gm_agent_peer_find(ch->a, c->servers[i].address)) == NULL || p->link == NULL)
            continue;
        enum gm_link_class cls = gm_measure_class(p);
        if (cls != 0 && cls != GM_CLASS_LAN && want < ELECTION_SLOW_MS) {
            want = ELECTION_SLOW_MS;
            why = "slow-link";
        }
        /* not while its throughput probe runs: PINGs then queue behind the probe's trains,
         * which a link formed moments ago sends once and training never does */
        rtt = gm_link_rtt_samples(p->link) >= ELECTION_MIN_SAMPLES && p->m.probe_size == 0
                  ? gm_link_rtt_ms(p->link)
                  : 0;
        if (rtt * ELECTION_RTT_X > want) {
            want = rtt * ELECTION_RTT_X < ELECTION_MAX_MS ? (unsigned)(rtt * ELECTION_RTT_X)
                                                          : ELECTION_MAX_MS;
            why = "rtt";
        }
    }
    if (want == ch->election_ms || (want < ch->election_ms && 2 * want > ch->election_ms))
        return;
    gm_info("event=chief-election-timeout ms=%u was=%u why=%s", want, ch->election_ms, why);
    ch->election_ms = want;
    raft_set_election_timeout(&ch->raft, want);
}

void gm_chief_tick(struct gm_agent *a, uint64_t now)
{
    struct gm_chief *ch = a->chief;

    if (ch == NULL || !ch->started || ch->closed || ch->closing)
        return;
    tune_election(ch);
    results_expire(ch, now);
    log_chief(ch);
    gm_chiefnet_recheck(ch->net);
    controller(ch);
}

int gm_chief_active(struct gm_agent *a)
{
    const struct gm_chief *ch = a->chief;

    return ch != NULL && ch->started && !ch->closed && !ch->closing;
}

int gm_chief_barrier(struct gm_agent *a, struct raft_barrier *req, raft_barrier_cb cb)
{
    struct gm_chief *ch = a->chief;

    if (ch == NULL || !gm_chief_leads(ch))
        return -EAGAIN;
    return raft_barrier(&ch->raft, req, cb) == 0 ? 0 : -EAGAIN;
}

void gm_chief_link_down(struct gm_agent *a, const char *node)
{
    if (a->chief != NULL)
        gm_chiefnet_link_down(a->chief->net, node);
}

/* --- transport env ---------------------------------------------------------------- */

static struct gm_link *env_link_to(void *agent, const char *node)
{
    return gm_agent_up_link(agent, node);
}

/* A raft channel from node: never from a revoked node, nor (once this node is in a
 * configuration) from a node raft does not know. */
static int env_allowed(void *agent, const char *node, char *why, size_t cap)
{
    struct gm_agent *a = agent;
    struct gm_chief *ch = a->chief;

    if (gm_chief_fsm_is_revoked(&ch->fsm, node)) {
        snprintf(why, cap, "%s is revoked", node);
        return GM_ERR_AUTH;
    }
    if (ch->raft_ready && ch->raft.configuration.n > 0 && gm_chief_server_find(ch, node) == NULL) {
        snprintf(why, cap, "%s is not in the raft configuration", node);
        return GM_ERR_AUTH;
    }
    return 0;
}

/* --- lifecycle ---------------------------------------------------------------------- */

int gm_chief_open(struct gm_agent *a)
{
    struct gm_chief *ch = calloc(1, sizeof(*ch));
    struct gm_chiefnet_env env = {
        .loop = &a->loop, .link_to = env_link_to, .allowed = env_allowed, .agent = a};
    int err;

    if (ch == NULL)
        return -ENOMEM;
    ch->a = a;
    a->chief = ch;
    gm_chief_fsm_init(&ch->fsm);
    err = uv_timer_init(&a->loop, &ch->kick);
    if (err != 0)
        return err;
    ch->kick.data = ch;
    ch->kick_open = 1;
    err = gm_config_state_path(&a->cfg, "raft", ch->dir, sizeof(ch->dir));
    if (err != 0)
        return err;
    if (mkdir(ch->dir, 0700) != 0 && errno != EEXIST) {
        err = -errno;
        gm_err("event=chief-dir-failed dir=%s err=%d msg=\"%s\"", ch->dir, err, gm_strerror(err));
        return err;
    }
    err = gm_chiefnet_new(&env, &ch->net);
    if (err != 0)
        return err;
    err = raft_uv_init(&ch->io, &a->loop, ch->dir, gm_chiefnet_transport(ch->net));
    if (err != 0) {
        gm_err("event=chief-init-failed dir=%s err=\"%s\"", ch->dir, ch->io.errmsg);
        return -EIO;
    }
    ch->io_ready = 1;
    raft_uv_set_connect_retry_delay(&ch->io, 250);
    ch->fsm.after = after_apply;
    ch->fsm.after_arg = ch;
    gm_chief_fsm_raft(&ch->fsm, &ch->rfsm);
    err = raft_init(&ch->raft, &ch->io, &ch->rfsm, gm_chiefnet_raft_id(a->cfg.node), a->cfg.node);
    if (err != 0) {
        gm_err("event=chief-init-failed err=\"%s\"", raft_errmsg(&ch->raft));
        return -EIO;
    }
    ch->raft_ready = 1;
    raft_set_election_timeout(&ch->raft, ELECTION_MS);
    ch->election_ms = ELECTION_MS;
    raft_set_heartbeat_timeout(&ch->raft, HEARTBEAT_MS);
    raft_set_snapshot_threshold(&ch->raft, SNAPSHOT_THRESHOLD);
    raft_set_snapshot_trailing(&ch->raft, SNAPSHOT_TRAILING);
    raft_set_pre_vote(&ch->raft, true);
    if (a->cakey != NULL) { /* the init node: the first voter, once */
        struct raft_configuration conf;
        raft_configuration_init(&conf);
        err = raft_configuration_add(&conf, ch->raft.id, a->cfg.node, RAFT_VOTER);
        if (err == 0)
            err = raft_bootstrap(&ch->raft, &conf);
        raft_configuration_close(&conf);
        if (err == 0)
            gm_notice("event=chief-bootstrap node=%s dir=%s", a->cfg.node, ch->dir);
        else if (err != RAFT_CANTBOOTSTRAP) {
            gm_err("event=chief-bootstrap-failed err=\"%s\"", raft_errmsg(&ch->raft));
            return -EIO;
        }
    }
    return 0;
}

int gm_chief_start(struct gm_agent *a)
{
    struct gm_chief *ch = a->chief;
    int err = raft_start(&ch->raft);

    if (err != 0) {
        gm_err("event=chief-start-failed dir=%s err=\"%s\"", ch->dir, raft_errmsg(&ch->raft));
        return -EIO;
    }
    ch->started = 1;
    gm_info("event=chief-started node=%s raft_id=%llu term=%llu servers=%u", a->cfg.node,
            (unsigned long long)ch->raft.id, (unsigned long long)ch->raft.current_term,
            ch->raft.configuration.n);
    return 0;
}

static void on_raft_closed(struct raft *r)
{
    struct gm_chief *ch = r->data;

    ch->closed = 1;
}

static void transport_closed_cb(struct raft_uv_transport *t)
{
    (void)t;
}

void gm_chief_stop(struct gm_agent *a)
{
    struct gm_chief *ch = a->chief;

    if (ch == NULL || ch->closed || ch->closing)
        return;
    ch->closing = 1;
    if (ch->kick_open) {
        ch->kick_open = 0;
        uv_close((uv_handle_t *)&ch->kick, NULL); /* embedded; the loop drains before free */
    }
    if (ch->raft_ready) {
        ch->raft.data = ch;
        raft_close(&ch->raft, on_raft_closed); /* closes the I/O and the transport */
        /* raft frees its configuration while it closes: from here on every accessor
         * (gm_chief_leader, no_chief_reason, ...) sees consensus as not running; a member's
         * job timer asks who is chief after its links closed at stop */
        ch->raft_ready = 0;
    } else {
        ch->closed = 1;
        if (ch->io_ready)
            ch->io.close(&ch->io, NULL);
        else if (ch->net != NULL)
            gm_chiefnet_transport(ch->net)->close(gm_chiefnet_transport(ch->net),
                                                  transport_closed_cb);
    }
}

void gm_chief_free(struct gm_agent *a)
{
    struct gm_chief *ch = a->chief;

    if (ch == NULL)
        return;
    results_expire(ch, 0);
    if (ch->io_ready)
        raft_uv_close(&ch->io);
    gm_chiefnet_free(ch->net);
    gm_chief_fsm_free(&ch->fsm);
    free(ch);
    a->chief = NULL;
}

/* --- frames ----------------------------------------------------------------------- */

int gm_chief_on_raft(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                     const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    int err;

    if (a->chief == NULL || a->chief->net == NULL)
        return 0;
    err = gm_chiefnet_on_frame(a->chief->net, c->node, h, p);
    return err != 0 ? gm_agent_refuse(l, err, "malformed raft frame") : 0;
}
