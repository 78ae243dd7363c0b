/*
 * agent/job.h - distributed jobs: submit, check, form groups, re-form on
 * membership changes, finish (the job control room).
 *
 * Roles.  One agent coordinates (gm_jobs_coordinator(): the lowest node id
 * among this node and the members with an up link; the election issue
 * replaces that one function).  The coordinator is always rank 0.
 *
 * One job at a time runs in a cluster.  Its life, on the coordinator:
 *   submit    the CLI already parsed the job (it prints the parse error and
 *             exits 78); a member that is not the coordinator forwards it
 *             (JOB_SUBMIT, with the id it chose) and keeps a record that JOB_GROUP
 *             and JOB_END bring up to date; the coordinator checks that the global batch divides
 *             by the world (this node and every member with an up link), hashes
 *             its own dataset files and sends JOB_OFFER to the others
 *   checking  every member parses the job, hashes its files (SHA-256, cached by
 *             path, size and mtime, on libuv's threadpool) and answers
 *             JOB_CHECK; any difference (a missing dir, a missing, extra or
 *             changed file) refuses the job with one line naming the member and
 *             the file
 *   running   generation 1: ranks = [coordinator, the others by node id];
 *             JOB_GROUP to each; every rank takes rank 0's initial state
 *   re-form   a member's link goes down, or it reports JOB_REPORT
 *             group-failed, or a member comes (back) up and passes the check:
 *             a new generation with the members that are up, at the next step
 *             boundary (agent/rank.h), data re-sharded at once
 *   done      rank 0 finished (weights under state_dir/jobs/ID/), JOB_END to
 *             all; also cancelled (gm_jobs cancel) or failed (an error on any
 *             rank, or the coordinator lost: members stop and say so)
 * A member keeps a record of the job it runs, so `gradmesh jobs` works there.
 *
 * Wire (agent/proto.h): JOB_OFFER, JOB_CHECK, JOB_GROUP, JOB_REPORT, JOB_END,
 * JOB_SUBMIT are JSON control frames (agent/jobmsg.h); GM_MSG_TRAIN carries the
 * collectives' messages (agent/xport.h), routed by the generation in the
 * frame's request id: an older generation is dropped, a newer one waits
 * (bounded) for its JOB_GROUP, a sender that is not a rank of the job closes
 * that link with ERROR.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_JOB_H
#define GM_AGENT_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <uv.h>

#include "agent/frame.h"
#include "common/err.h"
#include "crypto/identity.h"

struct gm_jobs;
struct gm_link;

/* What the job room needs from the agent. */
struct gm_jobs_env {
    uv_loop_t *loop;
    const char *node;      /* this node's id (borrowed, lives as long as the agent) */
    const char *state_dir; /* borrowed */
    /* The up member link to node, or NULL. */
    struct gm_link *(*link_to)(void *agent, const char *node);
    /* Member nodes with an up link (not this node); returns how many, writes at most cap
     * (nodes NULL: only counts them). */
    size_t (*members_up)(void *agent, char (*nodes)[GM_ID_NAME_MAX + 1], size_t cap);
    /* What is measured of the link from node `from` to node `to` (this node's own links, or
     * what member `from` said of its links): RTT in ms and throughput in Mbit/s, both > 0;
     * -ENOENT when either is unknown.  NULL: nothing is (codec = auto then runs fp32). */
    int (*link_measured)(void *agent, const char *from, const char *to, double *rtt_ms,
                         double *mbps);
    /* Whether the link between nodes a and b is of class lan, as a's agent sees it (this
     * node's own links) or as member a said in its LINK_STATS: 1 yes, 0 no or unknown.  NULL:
     * no islands (every group runs the ring). */
    int (*link_is_lan)(void *agent, const char *a, const char *b);
    /* Where a rank publishes its job metrics (agent/metrics.h), or NULL. */
    struct gm_metrics *(*metrics)(void *agent);
    void *agent;
};

GM_MUST_CHECK int gm_jobs_new(const struct gm_jobs_env *env, struct gm_jobs **out);
/* Stops the running rank, if any; the agent keeps its loop running until
 * gm_jobs_idle() says the trainer thread is gone, then calls gm_jobs_free. */
void gm_jobs_stop(struct gm_jobs *j);
bool gm_jobs_idle(const struct gm_jobs *j);
void gm_jobs_free(struct gm_jobs *j);

/* The node that coordinates jobs now (this node or a member with an up link). */
const char *gm_jobs_coordinator(struct gm_jobs *j, char out[GM_ID_NAME_MAX + 1]);

/* A JOB_* or TRAIN frame from the member link l of node; a negative return
 * closes that link (the caller sends ERROR first). */
GM_MUST_CHECK int gm_jobs_on_frame(struct gm_jobs *j, struct gm_link *l, const char *node,
                                   const struct gm_frame_hdr *h, const uint8_t *payload);
int gm_jobs_handles(uint16_t type);
void gm_jobs_link_up(struct gm_jobs *j, const char *node);
void gm_jobs_link_down(struct gm_jobs *j, const char *node, int err);

/* Control-socket commands; each returns a new JSON object ({"error":..} on failure). */
json_t *gm_jobs_ctl_submit(struct gm_jobs *j, json_t *req);
json_t *gm_jobs_ctl_list(struct gm_jobs *j);
json_t *gm_jobs_ctl_cancel(struct gm_jobs *j, json_t *req);
/* The running (or last) job for status --json, or null. */
json_t *gm_jobs_status_json(struct gm_jobs *j);

#endif
