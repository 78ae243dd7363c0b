/*
 * agent/jobs/job_frames.c - the job room (agent/jobs/job.h), dispatch: the JOB_* frames (term
 * fence, handlers table), the TRAIN frames and their stash, link up/down, the room's timer that
 * drives the other parts, and gm_jobs_new. Private state and shared helpers: agent/jobs/job_int.h.
 * Loop thread only.
 */
#include "agent/jobs/job_int.h"

static void timer_cb(uv_timer_t *t);

int gm_jobs_handles(uint16_t type)
{
    return type == GM_MSG_TRAIN || (type >= GM_MSG_JOB_OFFER && type <= GM_MSG_JOB_SWITCH);
}

static int on_train(struct gm_jobs *j, struct gm_link *l, const char *node,
                    const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct job *jb = j->cur;
    uint32_t gen = gm_xport_req_generation(h->req);
    struct stashed *s;

    (void)l;
    if (jb != NULL && gen >> 16 != jobs_job_tag(jb->id))
        return 0; /* an earlier job's message still on the wire */
    if (jb != NULL && jb->rank != NULL && gen == gm_rank_generation(jb->rank)) {
        int r = jobs_rank_of(jb, node);
        struct gm_xport *x = gm_rank_xport(jb->rank);
        if (r < 0 || r == jobs_rank_of(jb, j->env.node))
            return GM_ERR_PROTO; /* not a rank of this group */
        return x != NULL ? gm_xport_on_frame(x, r, h, payload) : 0;
    }
    if (jb != NULL && jb->rank != NULL && gen < gm_rank_generation(jb->rank))
        return 0; /* a retired group's message still on the wire */
    if (j->stash_bytes + h->len > STASH_MAX)
        return GM_ERR_PROTO; /* nobody asked for that much before its group */
    s = malloc(sizeof(*s) + h->len);
    if (s == NULL)
        return -ENOMEM;
    snprintf(s->node, sizeof(s->node), "%s", node);
    s->h = *h;
    memcpy(s->data, payload, h->len);
    s->next = NULL;
    struct stashed **pp = &j->stash;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = s;
    j->stash_bytes += h->len;
    return 0;
}

/* The job messages and their handlers (the frames' link states are jobroom.c's table). */
static const struct {
    uint16_t type;
    int (*fn)(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
} handlers[] = {
    {GM_MSG_JOB_OFFER, jobs_on_offer},   {GM_MSG_JOB_CHECK, jobs_on_check},
    {GM_MSG_JOB_GROUP, jobs_on_group},   {GM_MSG_JOB_REPORT, jobs_on_report},
    {GM_MSG_JOB_END, jobs_on_end},       {GM_MSG_JOB_SUBMIT, jobs_on_submit},
    {GM_MSG_JOB_SWITCH, jobs_on_switch},
};

/* Holds a group for the current job from node, of our term or a newer one, that raft has not
 * named chief here yet (struct held_group): raft may have brought this node to the new term
 * (a vote) before it names the term's chief.  True: held (a newer one replaces it). */
static bool group_hold(struct gm_jobs *j, const char *node, const struct gm_frame_hdr *h,
                       const uint8_t *payload, const struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    struct held_group *hg = &j->held;
    uint8_t *copy;

    if (j->env.chief == NULL || h->req == 0 || h->req < jobs_my_term(j) || jb == NULL ||
        strcmp(jb->id, m->id) != 0 || jb->rank == NULL || jb->state != J_RUNNING ||
        strcmp(node, jb->coordinator) == 0 || jobs_is_chief(j, node) ||
        (copy = malloc(h->len > 0 ? h->len : 1)) == NULL)
        return false;
    memcpy(copy, payload, h->len);
    jobs_held_clear(hg);
    hg->payload = copy;
    hg->len = h->len;
    hg->term = h->req;
    hg->until = gm_time_mono_ns() + (uint64_t)ORPHAN_TIMEOUT_MS * 1000000ull;
    snprintf(hg->node, sizeof(hg->node), "%s", node);
    snprintf(hg->id, sizeof(hg->id), "%s", jb->id);
    gm_notice("event=job-group-held job=%s from=%s term=%llu current_term=%llu: until raft names "
              "it chief here",
              jb->id, node, (unsigned long long)h->req, (unsigned long long)jobs_my_term(j));
    return true;
}

/* Every tick: the held group, replayed once raft names its sender chief. */
static void held_tick(struct gm_jobs *j)
{
    struct held_group *hg = &j->held;
    struct gm_frame_hdr h = {.type = GM_MSG_JOB_GROUP};
    uint64_t term = jobs_my_term(j);
    char from[NODE_LEN];
    uint8_t *payload;
    int err;

    if (hg->payload == NULL)
        return;
    if (j->cur == NULL || strcmp(j->cur->id, hg->id) != 0) { /* its job ended here meanwhile */
        gm_notice("event=job-group-dropped job=%s from=%s: the job is not current here any more",
                  hg->id, hg->node);
        jobs_held_clear(hg);
        return;
    }
    if (!jobs_is_chief(j, hg->node) && term <= hg->term && gm_time_mono_ns() < hg->until)
        return; /* not yet */
    if (!jobs_is_chief(j, hg->node)) {
        gm_warn("event=job-group-dropped job=%s from=%s term=%llu current_term=%llu: %s", hg->id,
                hg->node, (unsigned long long)hg->term, (unsigned long long)term,
                term > hg->term ? "a newer term came" : "raft did not name it chief in time");
        jobs_held_clear(hg);
        return;
    }
    /* taken out first: a replay that held again would own a fresh copy */
    payload = hg->payload;
    snprintf(from, sizeof(from), "%s", hg->node);
    h.len = hg->len;
    h.req = hg->term;
    hg->payload = NULL;
    jobs_held_clear(hg);
    gm_notice("event=job-group-replayed from=%s term=%llu", from, (unsigned long long)h.req);
    if ((err = gm_jobs_on_frame(j, NULL, from, &h, payload)) < 0)
        gm_warn("event=job-group-replay-failed from=%s err=\"%s\"", from, gm_strerror(err));
    free(payload);
}

int gm_jobs_on_frame(struct gm_jobs *j, struct gm_link *l, const char *node,
                     const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct gm_jobmsg m;
    int err;

    if (h->type == GM_MSG_TRAIN)
        return on_train(j, l, node, h, payload);
    if ((err = gm_jobmsg_decode(h->type, payload, h->len, &m)) < 0)
        return err;
    /* a deposed chief's, or a late answer to one; a member's fit or switch answer is no
     * command and is fenced by its generation and sequence number instead (a member that
     * has not heard of a new term yet must not stall a switch) */
    if (h->req != 0 && h->req < jobs_my_term(j) &&
        !(h->type == GM_MSG_JOB_REPORT && (m.have_fit || m.seq > 0))) {
        gm_warn("event=job-message-stale type=%s from=%s term=%llu current_term=%llu",
                gm_proto_type_name(h->type), node, (unsigned long long)h->req,
                (unsigned long long)jobs_my_term(j));
        gm_jobmsg_free(&m);
        return 0;
    }
    if (h->type == GM_MSG_JOB_GROUP && group_hold(j, node, h, payload, &m)) {
        gm_jobmsg_free(&m);
        return 0;
    }
    j->frame_term = h->req;
    err = GM_ERR_PROTO;
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (handlers[i].type == h->type)
            err = handlers[i].fn(j, node, &m);
    gm_jobmsg_free(&m);
    return err;
}

void gm_jobs_link_up(struct gm_jobs *j, const char *node)
{
    struct job *jb = j->cur;

    jobs_try_answer(j); /* a pending offer may have waited for this link */

    if (jb == NULL || !jb->coord || jb->state != J_RUNNING || j->stopping)
        return;
    bool known = false;
    for (size_t i = 0; i < jb->nparts; i++)
        if (strcmp(jb->parts[i].node, node) == 0) {
            known = true;
            jb->parts[i].checked = false; /* it restarted: check it again */
            jb->parts[i].answered = false;
        }
    if (!known) {
        struct part *np = realloc(jb->parts, (jb->nparts + 1) * sizeof(*np));
        char(*nr)[NODE_LEN] = realloc(jb->ranks, (jb->nparts + 2) * NODE_LEN);
        if (np == NULL || nr == NULL) {
            if (np != NULL)
                jb->parts = np;
            if (nr != NULL)
                jb->ranks = nr;
            return;
        }
        jb->parts = np;
        jb->ranks = nr;
        memset(&jb->parts[jb->nparts], 0, sizeof(*np));
        snprintf(jb->parts[jb->nparts].node, NODE_LEN, "%s", node);
        jb->nparts++;
    }
    gm_notice("event=job-offer-member job=%s node=%s", jb->id, node);
    jobs_offer(j, jb, node);
}

void gm_jobs_link_down(struct gm_jobs *j, const char *node, int err)
{
    struct job *jb = j->cur;
    int r;

    if (jb == NULL)
        return;
    if (jb->rank != NULL && gm_rank_xport(jb->rank) != NULL && (r = jobs_rank_of(jb, node)) >= 0)
        gm_xport_link_down(gm_rank_xport(jb->rank), r, err);
    if (!jb->coord) {
        if (strcmp(node, jb->coordinator) == 0 && jb->state == J_RUNNING && jb->rank != NULL &&
            j->env.chief != NULL && jb->orphan_since == 0) {
            /* the survivors elect a chief, which takes the job over from their identical
             * state at the last finished step (timer_cb, on_group) */
            jb->orphan_since = gm_time_mono_ns();
            snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", node);
            gm_warn("event=job-coordinator-lost job=%s coordinator=%s: waiting up to %d s for "
                    "the next chief to take the job over",
                    jb->id, node, ORPHAN_TIMEOUT_MS / 1000);
            return;
        }
        if (strcmp(node, jb->coordinator) == 0 &&
            (jb->state == J_RUNNING || jb->state == J_CHECKING)) {
            snprintf(jb->error, sizeof(jb->error),
                     "coordinator %s lost (%s): the job stops; this member keeps the weights "
                     "of its last finished step (gradmesh jobs shows where)",
                     node, gm_strerror(err));
            gm_err("event=job-coordinator-lost job=%s coordinator=%s", jb->id, node);
            jb->state = J_FAILED;
            jb->t_end = gm_time_mono_ns();
            if (jb->rank != NULL) {
                jb->stop_sent = true;
                gm_rank_stop(jb->rank);
            } else {
                jobs_to_history(j, jb);
            }
        }
        return;
    }
    for (size_t i = 0; i < jb->nparts; i++) {
        if (strcmp(jb->parts[i].node, node) != 0)
            continue;
        if (jb->state == J_CHECKING) {
            jobs_refuse(j, jb, "member %s left during the dataset check", node);
            return;
        }
        if (jb->state == J_RUNNING && jobs_rank_of(jb, node) >= 0) {
            gm_warn("event=job-member-lost job=%s node=%s err=\"%s\"", jb->id, node,
                    gm_strerror(err));
            jb->parts[i].checked = false;
            jobs_reform(j, jb, "a member was lost");
        }
    }
}

static void timer_cb(uv_timer_t *t)
{
    struct gm_jobs *j = t->data;
    struct job *jb = j->cur;
    uint64_t now = gm_time_mono_ns();

    if (j->t_tick != 0 && now - j->t_tick > (uint64_t)STALL_MS * 1000000ull) {
        j->stalled_until = now + (uint64_t)STALL_HOLD_MS * 1000000ull;
        gm_warn("event=agent-stalled ms=%llu: no group before %d ms from now",
                (unsigned long long)((now - j->t_tick) / 1000000ull), STALL_HOLD_MS);
    }
    j->t_tick = now;
    jobs_try_answer(j); /* the mesh deadline */
    held_tick(j);
    jb = j->cur;
    if (jb != NULL)
        jobs_partition_tick(j, jb);
    jb = j->cur;
    if (jb != NULL && jb->coord) {
        jobs_switch_tick(j, jb);
        if (j->cur == jb)
            jobs_shares_tick(j, jb);
        if (j->cur == jb)
            jobs_shares_publish(j, jb);
    } else if (jb != NULL)
        jobs_fit_report_tick(j, jb);
    if (jb != NULL && jb->coord && jb->state == J_RUNNING && jb->reform_at != 0 &&
        gm_time_mono_ns() >= jb->reform_at) {
        jb->reform_at = 0;
        jobs_reform(j, jb, "retry after a failed group");
    }
    if (jb != NULL && jb->coord && jb->state == J_RUNNING && jb->rank != NULL && jb->reform_at == 0)
        for (size_t i = 0; i < jb->nparts; i++) /* a rank left out while quiet answers again */
            if (jb->parts[i].checked && !jb->parts[i].spare && /* a spare is out for good */
                jobs_rank_of(jb, jb->parts[i].node) < 0 &&
                j->env.link_to(j->env.agent, jb->parts[i].node) != NULL &&
                !jobs_quiet(j, jb->parts[i].node)) {
                jobs_reform(j, jb, "a member that was quiet answers again");
                break;
            }

    if (jb == NULL || jb->state != J_CHECKING || !jb->coord)
        return;
    if (gm_time_mono_ns() - jb->t_submit < (uint64_t)CHECK_TIMEOUT_MS * 1000000ull)
        return;
    for (size_t i = 0; i < jb->nparts; i++)
        if (!jb->parts[i].checked) {
            jobs_refuse(j, jb, "member %s did not answer the dataset check in %d s",
                        jb->parts[i].node, CHECK_TIMEOUT_MS / 1000);
            return;
        }
}

int gm_jobs_new(const struct gm_jobs_env *env, struct gm_jobs **out)
{
    struct gm_jobs *j = calloc(1, sizeof(*j));
    int err;

    *out = NULL;
    if (j == NULL)
        return -ENOMEM;
    j->env = *env;
    if ((err = gm_datahash_new(env->loop, &j->dh)) < 0 ||
        (err = uv_timer_init(env->loop, &j->timer)) < 0) {
        gm_datahash_free(j->dh);
        free(j);
        return err;
    }
    j->timer.data = j;
    (void)uv_timer_start(&j->timer, timer_cb, TICK_MS, TICK_MS);
    uv_unref((uv_handle_t *)&j->timer);
    *out = j;
    return 0;
}
