/*
 * agent/jobs/jobresume.h - a cluster restarted from nothing resumes its job by itself.
 *
 * The replicated state (agent/cluster/chieffsm.h) holds each job the chief took with its text and
 * the global batch fixed for it (op job-spec, SHA-256 checked on every replica), its state
 * (op job) and the checkpoints a majority of the voters hold (op checkpoint).  When every
 * agent was killed, none remembers the job in memory; the state is still in each voter's
 * raft log and snapshots.
 *
 * A node that becomes chief (raft leader) in a term waits until its state machine has
 * applied everything committed before (raft_barrier), then looks for the newest job whose
 * state is not final (checking or running) and whose spec it holds.  If this node runs no job
 * already (a chief that took a job over from a lost one in memory, agent/jobs/job.c, goes on with
 * it instead) and is not a witness, it waits up to GM_JOBRESUME_WAIT_MS for a link to every
 * member that trains (the recorded members that are not witnesses), so that the job resumes
 * with the world it had, then takes the job again under its id (gm_jobs_resume).  Its rank 0
 * resumes from the newest raft-committed checkpoint of the job that it holds and that hashes
 * to the committed SHA-256; a missing or corrupt one falls back to the committed one before
 * it, logged (train/trainer.h committed_only); with none, from step 0.
 *
 * Logs: event=job-resume-wait (once a term, which members are missing), event=job-auto-resume
 * (job, step recorded, newest committed checkpoint, members up), event=job-resume-skip.
 *
 * Resuming a job is the job room's business: the state is a->resume, made by the job room
 * (gm_jobroom_open) and ticked by agent.c right after the chief's tick, so the consensus room
 * below knows nothing of it.  Freed after the chief (a barrier in flight calls back when raft
 * closes).  Loop thread only.
 */
#ifndef GM_AGENT_JOBS_JOBRESUME_H
#define GM_AGENT_JOBS_JOBRESUME_H

#include <stdint.h>

#include <raft.h>

#define GM_JOBRESUME_WAIT_MS 15000

struct gm_agent;

enum gm_jobresume_phase {
    GM_JOBRESUME_PHASE_IDLE = 0,
    GM_JOBRESUME_PHASE_BARRIER, /* raft_barrier in flight */
    GM_JOBRESUME_PHASE_WAIT,    /* applied: waiting for the members */
    GM_JOBRESUME_PHASE_DONE,    /* handled for this term */
};

struct gm_jobresume {
    enum gm_jobresume_phase phase;
    uint64_t term;       /* the term being handled */
    uint64_t wait_since; /* monotonic ns, phase WAIT */
    int wait_logged;
    struct raft_barrier barrier;
};

/* A zeroed state (phase IDLE), or NULL for out-of-memory. */
struct gm_jobresume *gm_jobresume_new(void);
void gm_jobresume_free(struct gm_jobresume *rs);
/* One step, while the chief runs here (gm_chief_active); now: monotonic ns. */
void gm_jobresume_tick(struct gm_agent *a, struct gm_jobresume *rs, uint64_t now);

#endif
