/*
 * agent/cluster/chiefreq.c - what is asked of the chief (see chief.h): revoke and role
 * requests and token uses, proposed here on the chief or forwarded to it in CHIEF_REQ and
 * answered in CHIEF_ANS once committed or refused; the job and checkpoint records other rooms
 * propose; the members/revoke/role/chief-result commands; and the room's table.  Above
 * chief.c (the raft engine), through agent/cluster/chief_int.h: a request's proposal carries
 * answer(), which chief.c's apply callback runs, so chief.c calls nothing here.
 *
 * The CHIEF_REQ/CHIEF_ANS payloads are encoded and decoded by agent/cluster/chieffsm.h.
 *
 * Loop thread only.
 */
#include "agent/cluster/chief.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <raft.h>

#include "agent/cluster/chief_int.h"
#include "agent/cluster/chiefmsg.h"
#include "agent/net/link.h"
#include "agent/core/state.h"
#include "common/log.h"

/* --- requests ----------------------------------------------------------------- */

/* A request's answer (struct prop's answer): to the result here, or in CHIEF_ANS to the
 * member that forwarded it. */
static void answer(struct gm_chief *ch, const struct prop *p, int code, const char *msg)
{
    struct gm_chief_ans ans = {.code = code};
    struct gm_link *l;
    char *text = NULL;
    size_t len;

    if (p->origin[0] == '\0') {
        gm_chief_result_set(ch, p->origin_req, code, msg);
        return;
    }
    l = gm_agent_up_link(ch->a, p->origin);
    snprintf(ans.message, sizeof(ans.message), "%s", msg);
    if (l != NULL && gm_chief_ans_encode(&ans, &text, &len) == 0 &&
        gm_link_send(l, GM_MSG_CHIEF_ANS, p->origin_req, text, len) != 0)
        gm_info("event=chief-answer-lost origin=%s", p->origin); /* it times out */
    free(text);
}

/* Would the voters left after node takes role (voter: 1) still form a majority with
 * the links up now?  0, or -EBUSY with why. */
static int majority_check(struct gm_chief *ch, const char *node, int voter, char *why, size_t cap)
{
    const struct raft_configuration *c = &ch->raft.configuration;
    unsigned voters = 0, up = 0;
    int counted = 0;

    for (unsigned i = 0; i < c->n; i++) {
        const struct raft_server *s = &c->servers[i];
        int is_node = strcmp(s->address, node) == 0;
        int v = is_node ? voter : s->role == RAFT_VOTER;
        counted |= is_node;
        if (!v)
            continue;
        voters++;
        up += s->id == ch->raft.id || gm_agent_up_link(ch->a, s->address) != NULL;
    }
    if (!counted && voter) {
        voters++;
        up += gm_agent_up_link(ch->a, node) != NULL;
    }
    if (voters == 0) {
        snprintf(why, cap, "no voter would be left");
        return -EBUSY;
    }
    if (2 * up <= voters) {
        snprintf(why, cap, "would leave no majority: %u of %u voters reachable", up, voters);
        return -EBUSY;
    }
    return 0;
}

/* A revoke or role request, on the chief.  0 when proposed (the answer comes on commit),
 * else an error with why. */
static int request(struct gm_chief *ch, const char *cmd, const char *node, const char *role,
                   const char *origin, uint64_t origin_req, char *why, size_t cap)
{
    struct gm_chief_cmd c = {0};
    char what[96];
    int err;

    if (node == NULL || !gm_id_name_valid(node)) {
        snprintf(why, cap, "bad node id");
        return -EINVAL;
    }
    if (gm_chief_fsm_member(&ch->fsm, node) == NULL && gm_chief_server_find(ch, node) == NULL &&
        !(strcmp(cmd, "revoke") == 0 && gm_agent_peer_find(ch->a, node) != NULL)) {
        snprintf(why, cap, "%s is not a member", node);
        return -ENOENT;
    }
    if (gm_chief_fsm_is_revoked(&ch->fsm, node)) {
        snprintf(why, cap, "%s is revoked", node);
        return -EPERM;
    }
    snprintf(c.node, sizeof(c.node), "%s", node);
    if (strcmp(cmd, "revoke") == 0) {
        if (strcmp(node, ch->a->cfg.node) == 0) {
            snprintf(why, cap,
                     "%s is the chief: it cannot revoke itself (stop it, or make it "
                     "a spare first)",
                     node);
            return -EPERM;
        }
        err = majority_check(ch, node, 0, why, cap);
        if (err != 0)
            return err;
        c.op = GM_CHIEF_OP_REVOKE;
        c.at = (int64_t)time(NULL);
        snprintf(what, sizeof(what), "revoke %s", node);
    } else {
        if (role == NULL || gm_chief_role_parse(role, &c.role) != 0) {
            snprintf(why, cap, "role must be voter, witness or spare");
            return -EINVAL;
        }
        err = majority_check(ch, node, c.role != GM_CHIEF_ROLE_SPARE, why, cap);
        if (err != 0)
            return err;
        c.op = GM_CHIEF_OP_MEMBER;
        snprintf(what, sizeof(what), "role %s %s", node, role);
    }
    err = gm_chief_apply(ch, &c, origin, origin_req, 0, what, answer);
    if (err != 0)
        snprintf(why, cap, "%s: could not propose (%s)", what, gm_strerror(err));
    else
        gm_notice("event=chief-request %s origin=%s term=%llu", what,
                  origin[0] ? origin : ch->a->cfg.node, (unsigned long long)ch->raft.current_term);
    return err;
}

/* A token use asked by origin ("" : this node), on the chief: only a voter admits. */
static int use_request(struct gm_chief *ch, const char *token, int64_t limit, const char *origin,
                       uint64_t origin_req, char *why, size_t cap)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_TOKEN_USE, .limit = limit};
    const char *who = origin[0] ? origin : ch->a->cfg.node;
    char what[96];
    int err;

    if (gm_chief_role_of(ch->a, who) != GM_CHIEF_ROLE_VOTER ||
        gm_chief_fsm_is_revoked(&ch->fsm, who)) {
        snprintf(why, cap, "%s is not a voter: only voters admit", who);
        return -EPERM;
    }
    snprintf(c.token, sizeof(c.token), "%s", token);
    snprintf(what, sizeof(what), "token-use %s by %s", token, who);
    err = gm_chief_apply(ch, &c, origin, origin_req, 0, what, answer);
    if (err != 0)
        snprintf(why, cap, "%s: could not propose (%s)", what, gm_strerror(err));
    else
        gm_info("event=chief-request %s limit=%lld term=%llu", what, (long long)limit,
                (unsigned long long)ch->raft.current_term);
    return err;
}

int gm_chief_use_token(struct gm_agent *a, const char *token, int limit, gm_chief_done_fn done,
                       void *arg)
{
    struct gm_chief *ch = a->chief;
    char leader[GM_CHIEF_NAME_MAX + 1], why[MSG_MAX];
    struct gm_chief_req fr = {.limit = limit};
    struct result *r;
    struct gm_link *l;
    uint64_t term;
    char *text = NULL;
    size_t len = 0;
    int err;

    if (ch == NULL || gm_chief_leader(a, leader, &term) != 0)
        return -EAGAIN;
    l = gm_chief_leads(ch) ? NULL : gm_agent_up_link(a, leader);
    if (!gm_chief_leads(ch) && l == NULL)
        return -EHOSTUNREACH;
    r = gm_chief_result_new(ch);
    r->done = done;
    r->arg = arg;
    if (gm_chief_leads(ch)) {
        err = use_request(ch, token, limit, "", r->req, why, sizeof(why));
        if (err != 0) {
            gm_info("event=token-use-unproposed token=%s reason=\"%s\"", token, why);
            r->done = NULL;
            r->state = RES_FREE;
        }
        return err;
    }
    snprintf(fr.cmd, sizeof(fr.cmd), "use");
    snprintf(fr.token, sizeof(fr.token), "%s", token);
    err = gm_chief_req_encode(&fr, &text, &len);
    if (err == 0)
        err = gm_link_send(l, GM_MSG_CHIEF_REQ, r->req, text, len);
    free(text);
    if (err != 0) {
        r->done = NULL;
        r->state = RES_FREE;
    }
    return err;
}

int gm_chief_propose(struct gm_agent *a, struct gm_chief_cmd *c, const char *what)
{
    struct gm_chief *ch = a->chief;

    if (ch == NULL || !gm_chief_leads(ch))
        return -EAGAIN;
    return gm_chief_apply(ch, c, "", 0, 0, what, NULL);
}

/* Copies s into out (cap bytes), cut at a UTF-8 character boundary (JSON strings must be
 * valid UTF-8). */
static void copy_utf8(char *out, size_t cap, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--; /* s[n] would be a continuation byte: cut before its lead byte */
    }
    if (n > 0)
        memcpy(out, s, n);
    out[n] = '\0';
}

void gm_chief_record_job(struct gm_agent *a, const char *id, const char *state, long step,
                         const char *name, const char *error)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_JOB, .step = step < 0 ? 0 : step};
    char what[96];
    int err;

    if (a->chief == NULL || !gm_chief_leads(a->chief))
        return;
    snprintf(c.job, sizeof(c.job), "%s", id);
    snprintf(c.state, sizeof(c.state), "%s", state);
    copy_utf8(c.name, sizeof(c.name), name);
    copy_utf8(c.error, sizeof(c.error), error);
    snprintf(what, sizeof(what), "job %s %s", id, state);
    err = gm_chief_propose(a, &c, what);
    if (err != 0)
        gm_info("event=chief-job-unrecorded job=%s state=%s err=%d", id, state, err);
}

void gm_chief_record_job_spec(struct gm_agent *a, const char *id, const char *text, size_t len,
                              int global_batch)
{
    struct gm_chief_cmd *c;
    char what[96];
    int err;

    if (a->chief == NULL || !gm_chief_leads(a->chief))
        return;
    if (len > GM_CHIEF_SPEC_MAX) {
        gm_warn("event=chief-job-spec-unrecorded job=%s bytes=%zu: the job text is over %d "
                "bytes, so a cluster restarted from nothing will not resume it by itself",
                id, len, GM_CHIEF_SPEC_MAX);
        return;
    }
    c = calloc(1, sizeof(*c)); /* the text makes it large for a stack */
    if (c == NULL)
        return;
    c->op = GM_CHIEF_OP_JOB_SPEC;
    snprintf(c->job, sizeof(c->job), "%s", id);
    memcpy(c->spec, text, len);
    c->spec[len] = '\0';
    c->spec_len = len;
    gm_ckpt_sha256_hex(text, len, c->sha256);
    c->global_batch = global_batch;
    snprintf(what, sizeof(what), "job %s spec", id);
    err = gm_chief_propose(a, c, what);
    if (err != 0)
        gm_info("event=chief-job-spec-unrecorded job=%s err=%d", id, err);
    free(c);
}

long gm_chief_committed(struct gm_agent *a, const char *key, struct gm_ckpt_ref *out, size_t cap)
{
    const struct gm_chief_fsm *f;
    size_t n = 0;

    if (a->chief == NULL)
        return -1;
    f = &a->chief->fsm;
    for (size_t i = 0; i < f->nckpts && n < cap; i++) {
        if (strcmp(f->ckpts[i].job, key) != 0)
            continue;
        out[n].step = (long)f->ckpts[i].step;
        memcpy(out[n].sha256, f->ckpts[i].sha256, sizeof(out[n].sha256));
        n++;
    }
    return (long)n;
}

/* --- frames ----------------------------------------------------------------------- */

/* A member forwards a revoke or role request to this node, the chief. */
static int on_req(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_chief *ch = a->chief;
    struct gm_chief_req r;
    struct prop fake = {.ch = ch, .origin_req = h->req};
    char why[MSG_MAX];
    int err;

    if (gm_chief_req_decode(p, h->len, &r) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed chief request");
    snprintf(fake.origin, sizeof(fake.origin), "%s", c->node);
    if (!gm_chief_leads(ch)) {
        snprintf(why, sizeof(why), "%s is not the chief (any more)", a->cfg.node);
        err = -EAGAIN;
    } else if (strcmp(r.cmd, "use") == 0) {
        err = use_request(ch, r.token, r.limit, c->node, h->req, why, sizeof(why));
    } else {
        err = request(ch, r.cmd, r.node,
                      strcmp(r.cmd, "role") == 0 ? gm_chief_role_name(r.role) : NULL, c->node,
                      h->req, why, sizeof(why));
    }
    if (err != 0) {
        gm_warn("event=chief-request-refused origin=%s reason=\"%s\"", c->node, why);
        answer(ch, &fake, err, why);
    }
    return 0;
}

static int on_ans(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                  const uint8_t *p)
{
    struct gm_chief_ans ans;

    if (gm_chief_ans_decode(p, h->len, &ans) != 0)
        return gm_agent_refuse(l, GM_ERR_PROTO, "malformed chief answer");
    gm_chief_result_set(a->chief, h->req, ans.code, ans.message);
    return 0;
}

/* --- commands ----------------------------------------------------------------------- */

static json_t *cmd_members(struct gm_agent *a, json_t *req)
{
    struct gm_chief *ch = a->chief;
    json_t *o = json_object(), *list = json_array(), *st;
    const struct raft_configuration *c = &ch->raft.configuration;

    (void)req;
    if (o == NULL || list == NULL) {
        json_decref(o);
        json_decref(list);
        return NULL;
    }
    gm_chief_status(a, o);
    json_object_set_new(o, "node", json_string(a->cfg.node));
    /* every node the state machine, raft or the member table knows, once */
    for (size_t i = 0; i <= a->npeers + c->n + ch->fsm.nmembers; i++) {
        const char *node = i == 0                  ? a->cfg.node
                           : i <= a->npeers        ? a->peers[i - 1].node
                           : i <= a->npeers + c->n ? c->servers[i - 1 - a->npeers].address
                                                   : ch->fsm.members[i - 1 - a->npeers - c->n].node;
        const struct gm_chief_member *m = gm_chief_fsm_member(&ch->fsm, node);
        const struct raft_server *s = gm_chief_server_find(ch, node);
        size_t k;
        json_t *e;
        int dup = 0;

        json_array_foreach(list, k, e) dup |=
            strcmp(json_string_value(json_object_get(e, "node")), node) == 0;
        if (dup || gm_chief_fsm_is_revoked(&ch->fsm, node))
            continue;
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:s, s:b}", "node", node, "role",
                            m != NULL ? gm_chief_role_name(m->role) : "-", "raft",
                            s != NULL ? gm_chief_raft_role_name(s->role) : "none", "link",
                            strcmp(node, a->cfg.node) == 0      ? "self"
                            : gm_agent_up_link(a, node) != NULL ? "up"
                                                                : "down",
                            "chief",
                            json_is_string(json_object_get(o, "chief")) &&
                                strcmp(json_string_value(json_object_get(o, "chief")), node) == 0));
    }
    json_object_set_new(o, "members", list);
    st = gm_chief_fsm_json(&ch->fsm);
    if (st != NULL) {
        json_object_set(o, "revoked", json_object_get(st, "revoked"));
        json_object_set(o, "state", st);
        json_decref(st);
    }
    json_object_set_new(o, "applied_index", json_integer((json_int_t)raft_last_applied(&ch->raft)));
    return o;
}

/* revoke and role: on the chief, proposed here; elsewhere, forwarded to it. */
static json_t *change(struct gm_agent *a, json_t *req, const char *cmd)
{
    struct gm_chief *ch = a->chief;
    const char *node = json_string_value(json_object_get(req, "node"));
    const char *role = json_string_value(json_object_get(req, "role"));
    char leader[GM_CHIEF_NAME_MAX + 1], why[MSG_MAX];
    uint64_t term;
    struct result *r;
    struct gm_link *l;
    int err;

    if (node == NULL || !gm_id_name_valid(node))
        return gm_agent_ctl_error(-EINVAL, "bad node id");
    if (gm_chief_coordinator(a, leader, &term, why, sizeof(why)) != 0) {
        char msg[MSG_MAX + 32];
        snprintf(msg, sizeof(msg), "no chief: %s", why);
        return gm_agent_ctl_error(-EAGAIN, msg);
    }
    r = gm_chief_result_new(ch);
    if (gm_chief_leads(ch)) {
        err = request(ch, cmd, node, role, "", r->req, why, sizeof(why));
        if (err != 0) {
            r->state = RES_FREE;
            return gm_agent_ctl_error(err, why);
        }
        return json_pack("{s:I, s:s}", "req", (json_int_t)r->req, "chief", leader);
    }
    l = gm_agent_up_link(a, leader);
    if (l == NULL) {
        r->state = RES_FREE;
        snprintf(why, sizeof(why), "no link to the chief %s", leader);
        return gm_agent_ctl_error(-EHOSTUNREACH, why);
    }
    struct gm_chief_req fr = {0};
    char *text = NULL;
    size_t len = 0;
    snprintf(fr.cmd, sizeof(fr.cmd), "%s", cmd);
    snprintf(fr.node, sizeof(fr.node), "%s", node);
    if (strcmp(cmd, "role") == 0 && (role == NULL || gm_chief_role_parse(role, &fr.role) != 0)) {
        r->state = RES_FREE;
        return gm_agent_ctl_error(-EINVAL, "role must be voter, witness or spare");
    }
    if (gm_chief_req_encode(&fr, &text, &len) != 0 ||
        gm_link_send(l, GM_MSG_CHIEF_REQ, r->req, text, len) != 0) {
        free(text);
        r->state = RES_FREE;
        return gm_agent_ctl_error(-EIO, "could not forward the request to the chief");
    }
    free(text);
    return json_pack("{s:I, s:s}", "req", (json_int_t)r->req, "chief", leader);
}

static json_t *cmd_revoke(struct gm_agent *a, json_t *req)
{
    return change(a, req, "revoke");
}

static json_t *cmd_role(struct gm_agent *a, json_t *req)
{
    return change(a, req, "role");
}

static json_t *cmd_result(struct gm_agent *a, json_t *req)
{
    json_t *id = json_object_get(req, "req");
    struct result *r = json_is_integer(id)
                           ? gm_chief_result_find(a->chief, (uint64_t)json_integer_value(id))
                           : NULL;

    if (r == NULL)
        return gm_agent_ctl_error(-ENOENT, "no such request");
    return json_pack("{s:s, s:i, s:s}", "state",
                     r->state == RES_PENDING ? "pending"
                     : r->state == RES_DONE  ? "done"
                                             : "refused",
                     "code", r->code, "message", r->msg);
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_RAFT, GM_LSTATE_UP, gm_chief_on_raft},
    {GM_MSG_CHIEF_REQ, GM_LSTATE_UP, on_req},
    {GM_MSG_CHIEF_ANS, GM_LSTATE_UP, on_ans},
};

static const struct gm_room_command commands[] = {
    {"members", cmd_members},
    {"revoke", cmd_revoke},
    {"role", cmd_role},
    {"chief-result", cmd_result},
};

static void link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    (void)err;
    gm_chief_link_down(a, p->node);
}

/* A revoked node gets no link, dialed or accepted. */
static int may_link(struct gm_agent *a, const char *node)
{
    return !gm_chief_is_revoked(a, node);
}

const struct gm_room gm_chief_room = {
    .name = "chief",
    .frames = frames,
    .nframes = sizeof(frames) / sizeof(frames[0]),
    .commands = commands,
    .ncommands = sizeof(commands) / sizeof(commands[0]),
    .link_down = link_down,
    .may_link = may_link,
};
