/*
 * agent/jobs/job.h - distributed jobs: submit, check, form groups, re-form on
 * membership changes, finish (the job control room).
 *
 * Roles.  One agent coordinates (gm_jobs_coordinator()): the chief, the raft
 * leader the members elected (agent/cluster/chief.h).  With no chief (no majority of
 * voters reachable) there is no coordinator and a submit is refused with the
 * reason: no majority, no training.  Only an agent without consensus at all
 * (env.chief NULL: the unit tests' bare job rooms) falls back to the lowest
 * node id among this node and the members with an up link.  The coordinator
 * is always rank 0; witnesses never train (env.members_up leaves them out).
 *
 * Term fencing: every JOB_* frame carries the sender's raft term in the frame
 * header's request id (0: the sender knows no term).  A JOB_* frame whose
 * term is older than this node's is dropped and logged (a deposed chief's
 * offer, group or end never acts); a newer one is fine (this node is behind
 * and raft brings it up to date).  Exempt: a member's JOB_REPORT fit or switch
 * answer (data, not a command), fenced by its generation and switch number.
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
 *             the file.  Meanwhile the coordinator runs the trainer's own check
 *             (gm_trainer_check, on the threadpool: the dataset's headers and
 *             sizes against the job, the model on its images; what passes on
 *             its copy passes on every member's, the same bytes) and refuses
 *             with the line `train --local` prints; and a job whose checkpoints
 *             (checkpoint_keep and the next) do not fit the room a member's
 *             JOB_CHECK says its checkpoint directory has is refused, naming it
 *   running   generation 1: ranks = [coordinator, the others by node id];
 *             JOB_GROUP to each; every rank takes rank 0's initial state
 *   re-form   a member's link goes down, or it reports JOB_REPORT
 *             group-failed, or a member comes (back) up and passes the check:
 *             a new generation with the members that are up, at the next step
 *             boundary (agent/jobs/rank.h), data re-sharded at once
 *   done      rank 0 finished (weights under state_dir/jobs/ID/), JOB_END to
 *             all; also cancelled (gm_jobs cancel) or failed (an error on any
 *             rank, or the coordinator lost and no chief took the job over).
 *             A job ends once: a failed rank's own error line (gm_rank_error)
 *             is the reason JOB_END carries to every member and the chief
 *             records (with the job's name) in the replicated state, where
 *             every node's `jobs` and `status` read how a job ended
 * A member keeps a record of the job it runs, so `gradmesh jobs` works there.
 *
 * No majority, no training (agent/jobs/job_partition.c): only the chief forms
 * groups.  A coordinator that is no longer the chief breaks its group and
 * waits as a member; a member that lost its coordinator waits while there is
 * no chief; a member elected chief takes the job over at once.  Such a job is
 * "paused" in `jobs`/`status` (paused_reason says why) and rejoins at a step
 * boundary when a chief offers it the job again; the answer to that offer is
 * held until this node's term has caught up with the offer's, or it would be
 * dropped as stale.
 *
 * Wire (agent/net/proto.h): JOB_OFFER, JOB_CHECK, JOB_GROUP, JOB_REPORT, JOB_END,
 * JOB_SUBMIT are JSON control frames (agent/jobs/jobmsg.h); GM_MSG_TRAIN carries the
 * collectives' messages (agent/jobs/xport.h), routed by the generation in the
 * frame's request id: an older generation is dropped, a newer one waits
 * (bounded) for its JOB_GROUP, a sender that is not a rank of the job closes
 * that link with ERROR.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_JOBS_JOB_H
#define GM_AGENT_JOBS_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "agent/net/frame.h"
#include "common/err.h"
#include "train/nn/device.h"
#include "crypto/identity.h"

struct gm_jobs;
struct gm_link;
struct gm_ckpt_ref;

/* A job as the replicated state holds it (agent/cluster/chieffsm.h). */
#define GM_JOBS_RECORDED_MAX 64
struct gm_jobs_record {
    char id[GM_ID_NAME_MAX + 1];
    char name[64];
    char state[16];
    char error[512];
    long step;
    uint64_t term;
};

/* What the job room needs from the agent. */
struct gm_jobs_env {
    uv_loop_t *loop;
    const char *node;      /* this node's id (borrowed, lives as long as the agent) */
    const char *state_dir; /* borrowed */
    /* [train] device: the device of this agent's ranks unless the job file sets one */
    struct gm_device_spec device;
    /* The up member link to node, or NULL. */
    struct gm_link *(*link_to)(void *agent, const char *node);
    /* Member nodes with an up link (not this node); returns how many, writes at most cap
     * (nodes NULL: only counts them). */
    size_t (*members_up)(void *agent, char (*nodes)[GM_ID_NAME_MAX + 1], size_t cap);
    /* The chief (node id into out) and the current term (*term, also when there is no
     * chief): 0, or -ENOENT with why there is none in why.  NULL: no consensus (tests):
     * the lowest node id up coordinates and frames carry term 0. */
    int (*chief)(void *agent, char out[GM_ID_NAME_MAX + 1], uint64_t *term, char *why, size_t cap);
    /* Hands the chief's role to node (a voter with an up link), for why; 0 when the transfer
     * started, else a negative error (optional: NULL in tests without consensus). */
    int (*hand_chief_to)(void *agent, const char *node, const char *why);
    /* Records a coordinated job's state in the replicated state (optional), with its name
     * and, once it ended other than done, the reason (NULL: none). */
    void (*record)(void *agent, const char *id, const char *state, long step, const char *name,
                   const char *error);
    /* Optional: the jobs the replicated state holds, oldest first, at most cap into out;
     * how many, or -1 without one.  `gradmesh jobs` shows their state and reason on every
     * node alike (the job history is replicated state). */
    long (*recorded)(void *agent, struct gm_jobs_record *out, size_t cap);
    /* Optional: records a job the coordinator took, its text and the global batch fixed for
     * it, in the replicated state, so a restarted cluster resumes it (agent/jobs/jobresume.h). */
    void (*record_spec)(void *agent, const char *id, const char *text, size_t len,
                        int global_batch);
    /* Optional: the checkpoints of the job whose checkpoint key is key that the cluster
     * committed (raft: held by a majority of the voters), at most cap into out; returns how
     * many, or -1 when there is no replicated state (then the coordinator resumes from its
     * newest valid checkpoint, committed or not). */
    long (*committed)(void *agent, const char *key, struct gm_ckpt_ref *out, size_t cap);
    /* What is measured of the link from node `from` to node `to` (this node's own links, or
     * what member `from` said of its links): RTT in ms and throughput in Mbit/s, both > 0;
     * -ENOENT when either is unknown.  NULL: nothing is (codec = auto then runs fp32). */
    int (*link_measured)(void *agent, const char *from, const char *to, double *rtt_ms,
                         double *mbps);
    /* Whether the link between nodes a and b is of class lan, as a's agent sees it (this
     * node's own links) or as member a said in its LINK_STATS: 1 yes, 0 no or unknown.  NULL:
     * no islands (every group runs the ring). */
    int (*link_is_lan)(void *agent, const char *a, const char *b);
    /* Where a rank publishes its job metrics (agent/service/metrics.h), or NULL. */
    struct gm_metrics *(*metrics)(void *agent);
    /* Optional: rank 0 here committed a checkpoint of the job whose checkpoint directory is
     * STATE_DIR/checkpoints/key (path, SHA-256 hex, step, the job's checkpoint_keep); nodes[n]
     * are the group's other ranks, to replicate it to. */
    void (*ckpt_written)(void *agent, const char *key, const char *path, const char *sha256,
                         long step, int keep, const char (*nodes)[GM_ID_NAME_MAX + 1], size_t n);
    /* Optional: rank 0 here could not write the checkpoint of step (path; err, ENOSPC for a
     * full disk); the job goes on. */
    void (*ckpt_failed)(void *agent, const char *path, long step, int err);
    void *agent;
};

#define GM_JOBS_CKPT_KEY_LEN 16
struct gm_job;
/* The name of a job's checkpoint directory: the first 16 hex digits of the job's identity
 * (struct gm_job: the SHA-256 of its text less the [job] epochs line; the job hash of
 * train/ckpt/ckpt.h), so the same job file submitted again, or with other epochs (extending a
 * finished or stopped run), finds its checkpoints. */
void gm_jobs_ckpt_key(const struct gm_job *job, char key[GM_JOBS_CKPT_KEY_LEN + 1]);

GM_MUST_CHECK int gm_jobs_new(const struct gm_jobs_env *env, struct gm_jobs **out);
/* Stops the running rank, if any; the agent keeps its loop running until
 * gm_jobs_idle() says the trainer thread is gone, then calls gm_jobs_free. */
void gm_jobs_stop(struct gm_jobs *j);
/* Like gm_jobs_stop, but a job coordinated here is left, not ended: no JOB_END goes out, so
 * the members keep it for the next chief (agent/drain.h). */
void gm_jobs_leave(struct gm_jobs *j);
bool gm_jobs_idle(const struct gm_jobs *j);
void gm_jobs_free(struct gm_jobs *j);

/* The node that coordinates jobs now (the chief), or "" with why there is none in why
 * (why may be NULL). */
const char *gm_jobs_coordinator(struct gm_jobs *j, char out[GM_ID_NAME_MAX + 1], char *why,
                                size_t cap);

/* A JOB_* or TRAIN frame from the member link l of node; a negative return
 * closes that link (the caller sends ERROR first). */
GM_MUST_CHECK int gm_jobs_on_frame(struct gm_jobs *j, struct gm_link *l, const char *node,
                                   const struct gm_frame_hdr *h, const uint8_t *payload);
int gm_jobs_handles(uint16_t type);
void gm_jobs_link_up(struct gm_jobs *j, const char *node);
void gm_jobs_link_down(struct gm_jobs *j, const char *node, int err);

/* The chief resumes job id of a cluster restarted from nothing (agent/jobs/jobresume.h): as a
 * submit of text here under that id with the global batch fixed before; its coordinator
 * resumes from the newest committed checkpoint.  0; -EBUSY when a job is current here (it
 * goes on instead); another error (logged) when the job cannot be taken. */
GM_MUST_CHECK int gm_jobs_resume(struct gm_jobs *j, const char *id, const char *text, size_t len,
                                 int global_batch);

/* Control-socket commands; each returns a new JSON object ({"error":..} on failure). */
json_t *gm_jobs_ctl_submit(struct gm_jobs *j, json_t *req);
json_t *gm_jobs_ctl_list(struct gm_jobs *j);
json_t *gm_jobs_ctl_cancel(struct gm_jobs *j, json_t *req);
/* The running (or last) job for status --json, or null. */
json_t *gm_jobs_status_json(struct gm_jobs *j);

#endif
