/*
 * agent/jobs/job_partition.c - the job room (agent/jobs/job.h), partitions: no majority, no
 * training: stepping down, paused jobs, a new chief taking a job over, the orphan wait. Private
 * state and shared helpers: agent/jobs/job_int.h.  Loop thread only.
 */
#include "agent/jobs/job_int.h"

/*
 * Only the chief coordinates (job.h), and a partition or a lost chief moves that role:
 *  - A coordinator that is no longer the chief (cut off in a minority: raft's leader steps
 *    down when it cannot reach a majority; or deposed by a newer term) steps down: its
 *    current group is broken, so its rank stops at the step in flight and waits for a group,
 *    and reform() refuses to form one while this node is not the chief.  The job stays here
 *    as a member's, paused, and follows the chief that takes it over.  This is what keeps a
 *    minority from training alone as a 1-rank group that thinks it is the job.
 *  - A member that lost its coordinator (gm_jobs_link_down) waits, paused.  While there is
 *    no chief at all (no majority) it waits for as long as that lasts; once there is one, it
 *    waits ORPHAN_TIMEOUT_MS for it to take the job over, then stops as it used to.
 *  - A member that is elected chief takes the job over: the other ranks of the last group
 *    become its participants, already checked (the old coordinator compared their datasets
 *    with the same files), and it forms a group with itself as rank 0, whose resync gives
 *    every rank its state at the last finished step (the step in flight failed on all of
 *    them): no rollback.  Those that are unreachable now are offered the job again when
 *    their links come back (gm_jobs_link_up), and rejoin at a step boundary.
 * Stale messages of a deposed coordinator are dropped by term (gm_jobs_on_frame).
 */

/* Why the current job does not train here now (into buf), or NULL when it is not paused. */
const char *jobs_paused_why(struct gm_jobs *j, const struct job *jb, char *buf, size_t cap)
{
    char chief[NODE_LEN], why[GM_JOB_MSG_MAX];
    uint64_t term;

    if (jb != j->cur || jb->coord || jb->state != J_RUNNING || jb->rank == NULL ||
        jb->orphan_since == 0)
        return NULL;
    if (j->env.chief == NULL || j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) != 0)
        snprintf(buf, cap, "no chief: %s", j->env.chief != NULL ? why : "no consensus");
    else if (strcmp(jb->lost_coord, j->env.node) == 0)
        snprintf(buf, cap,
                 "this node stopped coordinating (it is not the chief): waiting for "
                 "chief %s to take the job over",
                 chief);
    else
        snprintf(buf, cap, "coordinator %s lost: waiting for chief %s to take the job over",
                 jb->lost_coord, chief);
    return buf;
}

/* This node coordinates jb but is not the chief any more: pause (see above). */
void jobs_step_down(struct gm_jobs *j, struct job *jb, const char *why)
{
    struct gm_rank_progress p = {0};

    gm_rank_get_progress(jb->rank, &p);
    gm_rank_group_broken(jb->rank); /* the step in flight fails; no later one starts */
    jb->coord = false;
    jb->reform_at = 0;
    jb->orphan_since = gm_time_mono_ns();
    snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", j->env.node);
    gm_warn("event=job-paused job=%s step=%ld reason=\"this node coordinated the job and is not "
            "the chief any more (%s): no majority, no training\"",
            jb->id, p.step, why);
}

/* This node, a member of jb's last group, is the chief: it takes the job over. */
static void takeover(struct gm_jobs *j, struct job *jb)
{
    struct part *parts;
    size_t n = 0;

    parts = calloc(jb->world > 0 ? jb->world : 1, sizeof(*parts));
    if (parts == NULL)
        return;                /* the next tick tries again */
    if (jb->orphan_since == 0) /* its link is up: a chief elected on the other side of a split */
        snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", jb->coordinator);
    for (size_t i = 0; i < jb->world; i++) {
        if (strcmp(jb->ranks[i], j->env.node) == 0)
            continue;
        snprintf(parts[n].node, NODE_LEN, "%s", jb->ranks[i]);
        parts[n].checked = true; /* checked by the lost coordinator against the same files */
        n++;
    }
    for (size_t i = 0; i < jb->nparts; i++)
        free(jb->parts[i].files);
    free(jb->parts);
    jb->parts = parts;
    jb->nparts = n;
    jb->coord = true;
    jb->orphan_since = 0;
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", j->env.node);
    gm_notice("event=job-takeover job=%s lost=%s members=%zu", jb->id, jb->lost_coord, n);
    if (!jb->own_hashed) { /* our own dataset listing, to check members that come back */
        struct hashreq *hr = calloc(1, sizeof(*hr));
        if (hr != NULL) {
            hr->j = j;
            snprintf(hr->id, sizeof(hr->id), "%s", jb->id);
            if (gm_datahash_start(j->dh, jb->job.data.dir,
                                  jb->job.data.kind == GM_JOB_DATA_KIND_FOLDER, jobs_own_hashed,
                                  hr) < 0)
                free(hr);
        }
    }
    if (j->env.record != NULL)
        j->env.record(j->env.agent, jb->id, "running", (long)jb->last.step, jb->job.name, NULL);
    jobs_reform(j, jb, "the coordinator was lost: the new chief took the job over");
}

/* Every tick, with consensus on: the current job against who the chief is now. */
void jobs_partition_tick(struct gm_jobs *j, struct job *jb)
{
    char chief[NODE_LEN], why[GM_JOB_MSG_MAX];
    uint64_t term;
    int have;

    if (j->env.chief == NULL || jb->state != J_RUNNING || jb->rank == NULL) {
        jb->orphan_since = 0;
        return;
    }
    have = j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) == 0;
    if (jb->coord) {
        if (!have || strcmp(chief, j->env.node) != 0)
            jobs_step_down(j, jb, have ? "another chief was elected" : why);
        return;
    }
    if (have && strcmp(chief, j->env.node) == 0) {
        takeover(j, jb);
        return;
    }
    if (jb->orphan_since == 0)
        return;
    if (!have) { /* no majority here: wait as long as that lasts; the countdown starts over */
        jb->orphan_since = gm_time_mono_ns();
        return;
    }
    if (gm_time_mono_ns() - jb->orphan_since < (uint64_t)ORPHAN_TIMEOUT_MS * 1000000ull)
        return;
    jb->orphan_since = 0;
    snprintf(jb->error, sizeof(jb->error),
             "coordinator %s lost and chief %s did not take the job over in %d s: the job stops; "
             "this member keeps the weights of its last finished step (gradmesh jobs shows "
             "where)",
             jb->lost_coord, chief, ORPHAN_TIMEOUT_MS / 1000);
    gm_err("event=job-coordinator-lost job=%s coordinator=%s: no takeover", jb->id, jb->lost_coord);
    jb->state = J_FAILED;
    jb->t_end = gm_time_mono_ns();
    jb->stop_sent = true;
    gm_rank_stop(jb->rank);
}
