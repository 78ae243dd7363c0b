/*
 * agent/jobs/jobroom.c - the job room's place in the agent: its frame and command
 * tables (struct gm_room, see agent/core/state.h) and what agent/jobs/job.h needs from
 * the agent (struct gm_jobs_env: member links, members that are up).  The
 * job logic itself is agent/jobs/job*.c (agent/jobs/job_int.h), which sees the agent only through
 * that env and so runs in tests without one.  Loop thread only.
 */
#include "agent/jobs/jobroom.h"

#include <errno.h>
#include <string.h>

#include "agent/cluster/chief.h"
#include "agent/cluster/chieffsm.h"
#include "agent/jobs/ckptxfer.h"
#include "agent/jobs/job.h"
#include "agent/jobs/jobresume.h"
#include "agent/mesh/measure.h"
#include "agent/core/state.h"

static struct gm_link *link_to(void *agent, const char *node)
{
    return gm_agent_up_link(agent, node);
}

/* Rank 0 here committed a checkpoint: the checkpoint room replicates it. */
static void ckpt_written(void *agent, const char *key, const char *path, const char *sha256,
                         long step, int keep, const char (*nodes)[GM_ID_NAME_MAX + 1], size_t n)
{
    struct gm_agent *a = agent;

    gm_ckptx_send(a->ckptx, key, path, sha256, step, keep, 0, nodes, n);
}

/* Rank 0 here could not write a checkpoint: the checkpoint room says so (a full disk). */
static void ckpt_failed(void *agent, const char *path, long step, int err)
{
    struct gm_agent *a = agent;

    gm_ckptx_write_failed(a->ckptx, path, step, err);
}

static size_t members_up(void *agent, char (*nodes)[GM_ID_NAME_MAX + 1], size_t cap)
{
    struct gm_agent *a = agent;
    size_t n = 0;

    for (size_t i = 0; i < a->npeers; i++) {
        if (link_to(a, a->peers[i].node) == NULL || strcmp(a->peers[i].node, a->cfg.node) == 0 ||
            gm_chief_role_of(a, a->peers[i].node) == GM_CHIEF_ROLE_WITNESS) /* never trains */
            continue;
        if (nodes != NULL && n < cap)
            memcpy(nodes[n], a->peers[i].node, sizeof(nodes[n]));
        n++;
    }
    return nodes == NULL || n < cap ? n : cap; /* nodes NULL: just count */
}

static int chief_of(void *agent, char out[GM_ID_NAME_MAX + 1], uint64_t *term, char *why,
                    size_t cap)
{
    return gm_chief_coordinator(agent, out, term, why, cap);
}

static int hand_chief_to(void *agent, const char *node, const char *why)
{
    return gm_chief_hand_to(agent, node, why);
}

static void record_job(void *agent, const char *id, const char *state, long step, const char *name,
                       const char *error)
{
    gm_chief_record_job(agent, id, state, step, name, error);
}

static long recorded(void *agent, struct gm_jobs_record *out, size_t cap)
{
    const struct gm_chief_fsm *f = gm_chief_state(agent);
    size_t n = 0;

    if (f == NULL)
        return -1;
    for (size_t i = 0; i < f->njobs && n < cap; i++, n++) {
        const struct gm_chief_job *jb = &f->jobs[i];
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].id, sizeof(out[n].id), "%s", jb->job);
        snprintf(out[n].name, sizeof(out[n].name), "%s", jb->name);
        snprintf(out[n].state, sizeof(out[n].state), "%s", jb->state);
        snprintf(out[n].error, sizeof(out[n].error), "%s", jb->error);
        out[n].step = (long)jb->step;
        out[n].term = jb->term;
    }
    return (long)n;
}

static void record_spec(void *agent, const char *id, const char *text, size_t len, int global_batch)
{
    gm_chief_record_job_spec(agent, id, text, len, global_batch);
}

static long committed(void *agent, const char *key, struct gm_ckpt_ref *out, size_t cap)
{
    return gm_chief_committed(agent, key, out, cap);
}

static int link_measured(void *agent, const char *from, const char *to, double *rtt_ms,
                         double *mbps)
{
    struct gm_agent *a = agent;
    const struct gm_peer *p;

    *rtt_ms = *mbps = -1;
    if (strcmp(from, a->cfg.node) == 0) { /* ours: the link's PING RTT and our probe */
        p = gm_agent_peer_find(a, to);
        if (p == NULL || p->link == NULL)
            return -ENOENT;
        *rtt_ms = gm_link_rtt_ms(p->link);
        *mbps = p->m.mbps_out;
        if (gm_link_rate(p->link) > 0 && *mbps > gm_link_rate(p->link) * 8e-6)
            *mbps = gm_link_rate(p->link) * 8e-6; /* max_tunnel_mbit: what auto may count on */
    } else { /* theirs: the last LINK_STATS member `from` sent us */
        p = gm_agent_peer_find(a, from);
        for (size_t k = 0; p != NULL && p->link != NULL && k < p->m.nremote; k++)
            if (strcmp(p->m.remote[k].node, to) == 0) {
                *rtt_ms = p->m.remote[k].rtt_ms;
                *mbps = p->m.remote[k].throughput_mbps;
            }
    }
    return *rtt_ms > 0 && *mbps > 0 ? 0 : -ENOENT;
}

static int link_is_lan(void *agent, const char *from, const char *to)
{
    struct gm_agent *a = agent;
    const struct gm_peer *p;

    if (strcmp(from, a->cfg.node) == 0) {
        p = gm_agent_peer_find(a, to);
        return p != NULL && p->link != NULL && gm_measure_class(p) == GM_CLASS_LAN;
    }
    p = gm_agent_peer_find(a, from);
    for (size_t k = 0; p != NULL && p->link != NULL && k < p->m.nremote; k++)
        if (strcmp(p->m.remote[k].node, to) == 0)
            return strcmp(p->m.remote[k].link_class, gm_class_name(GM_CLASS_LAN)) == 0;
    return 0;
}

/* The agent's metrics room; it outlives every rank (gm_agent_free stops it last). */
static struct gm_metrics *metrics_of(void *agent)
{
    return ((struct gm_agent *)agent)->metrics;
}

int gm_jobroom_open(struct gm_agent *a)
{
    struct gm_jobs_env env = {.loop = &a->loop,
                              .node = a->cfg.node,
                              .state_dir = a->cfg.state_dir,
                              .device = a->cfg.device,
                              .link_to = link_to,
                              .members_up = members_up,
                              .chief = chief_of,
                              .hand_chief_to = hand_chief_to,
                              .record = record_job,
                              .recorded = recorded,
                              .record_spec = record_spec,
                              .committed = committed,
                              .link_measured = link_measured,
                              .link_is_lan = link_is_lan,
                              .metrics = metrics_of,
                              .ckpt_written = ckpt_written,
                              .ckpt_failed = ckpt_failed,
                              .agent = a};

    a->resume = gm_jobresume_new();
    if (a->resume == NULL)
        return -ENOMEM;
    return gm_jobs_new(&env, &a->jobs);
}

static int on_job_frame(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                        const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    int err = gm_jobs_on_frame(a->jobs, l, c->node, h, p);

    if (err < 0)
        return gm_agent_refuse(l, err,
                               h->type == GM_MSG_TRAIN ? "malformed or unexpected training message"
                                                       : "malformed job message");
    return 0;
}

static json_t *cmd_submit(struct gm_agent *a, json_t *req)
{
    return gm_jobs_ctl_submit(a->jobs, req);
}

static json_t *cmd_jobs(struct gm_agent *a, json_t *req)
{
    (void)req;
    return gm_jobs_ctl_list(a->jobs);
}

static json_t *cmd_cancel(struct gm_agent *a, json_t *req)
{
    return gm_jobs_ctl_cancel(a->jobs, req);
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_TRAIN, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_OFFER, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_CHECK, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_GROUP, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_REPORT, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_END, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_SUBMIT, GM_LSTATE_UP, on_job_frame},
    {GM_MSG_JOB_SWITCH, GM_LSTATE_UP, on_job_frame},
};

static const struct gm_room_command commands[] = {
    {"submit", cmd_submit},
    {"jobs", cmd_jobs},
    {"cancel", cmd_cancel},
};

static void room_link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    (void)c;
    gm_jobs_link_up(a->jobs, p->node);
}

static void room_link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    gm_jobs_link_down(a->jobs, p->node, err);
}

const struct gm_room gm_job_room = {
    .name = "job",
    .frames = frames,
    .nframes = sizeof(frames) / sizeof(frames[0]),
    .commands = commands,
    .ncommands = sizeof(commands) / sizeof(commands[0]),
    .link_up = room_link_up,
    .link_down = room_link_down,
};
