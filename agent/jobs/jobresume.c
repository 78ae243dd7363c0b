/*
 * agent/jobs/jobresume.c - the chief resumes the job of a cluster restarted from nothing (see
 * jobresume.h).
 *
 * Choices: the barrier (not the leader's first heartbeat) is what says the state machine is
 * up to date: a new leader may know of committed entries it has not applied yet.  Waiting
 * for every member that trains, bounded, rather than starting with the first majority: a
 * job resumed with another world would take other shards and float sums in another order,
 * so its result would differ from the run that was interrupted; after the bound, it resumes
 * with the members up (the job re-forms when the others come, as any job does).
 */
#include "agent/jobs/jobresume.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cluster/chief.h"
#include "agent/jobs/job.h"
#include "agent/core/state.h"
#include "common/log.h"
#include "train/job.h"

static void barrier_cb(struct raft_barrier *req, int status)
{
    struct gm_jobresume *rs = req->data;

    rs->phase = status == 0 ? GM_JOBRESUME_PHASE_WAIT : GM_JOBRESUME_PHASE_IDLE;
    rs->wait_since = 0;
    rs->wait_logged = 0;
}

/* The newest job the state holds a spec of and that did not end, or NULL. */
static const struct gm_chief_job *open_job(const struct gm_chief_fsm *f)
{
    for (size_t i = f->njobs; i-- > 0;)
        if (f->jobs[i].spec != NULL && !gm_chief_job_state_final(f->jobs[i].state))
            return &f->jobs[i];
    return NULL;
}

/* The members that train (recorded, not witnesses, not this node) without an up link: how
 * many, their names into missing (cap bytes). */
static unsigned members_missing(struct gm_agent *a, const struct gm_chief_fsm *f, char *missing,
                                size_t cap)
{
    unsigned n = 0;
    size_t used = 0;

    missing[0] = '\0';
    for (size_t i = 0; i < f->nmembers; i++) {
        const struct gm_chief_member *m = &f->members[i];
        if (m->role == GM_CHIEF_ROLE_WITNESS || strcmp(m->node, a->cfg.node) == 0 ||
            gm_chief_fsm_is_revoked(f, m->node) || gm_agent_up_link(a, m->node) != NULL)
            continue;
        n++;
        if (used < cap) {
            int k = snprintf(missing + used, cap - used, "%s%s", used ? "," : "", m->node);
            used += k > 0 ? (size_t)k : 0;
        }
    }
    return n;
}

/* The newest committed checkpoint step of the job with checkpoint key key, or -1. */
static long newest_committed(const struct gm_chief_fsm *f, const char *key)
{
    long step = -1;

    for (size_t i = 0; i < f->nckpts; i++)
        if (strcmp(f->ckpts[i].job, key) == 0 && f->ckpts[i].step > step)
            step = (long)f->ckpts[i].step;
    return step;
}

/* The checkpoint key of a replicated job (gm_jobs_ckpt_key of its parsed text), or "". */
static void key_of(const struct gm_chief_job *jb, char key[GM_JOBS_CKPT_KEY_LEN + 1])
{
    struct gm_job job;

    key[0] = '\0';
    if (jb->spec != NULL && gm_job_parse(jb->spec, jb->spec_len, jb->job, &job) == 0) {
        gm_jobs_ckpt_key(&job, key);
        gm_job_free(&job);
    }
}

static void try_resume(struct gm_agent *a, struct gm_jobresume *rs, uint64_t now)
{
    const struct gm_chief_fsm *f = gm_chief_state(a);
    const struct gm_chief_job *jb = f != NULL ? open_job(f) : NULL;
    char missing[256], key[GM_JOBS_CKPT_KEY_LEN + 1];
    unsigned nmiss;
    int err;

    if (jb == NULL) {
        rs->phase = GM_JOBRESUME_PHASE_DONE;
        return;
    }
    if (gm_chief_role_of(a, a->cfg.node) == GM_CHIEF_ROLE_WITNESS) {
        rs->phase = GM_JOBRESUME_PHASE_DONE; /* it hands leadership to a trainer, who resumes */
        return;
    }
    if (rs->wait_since == 0)
        rs->wait_since = now;
    nmiss = members_missing(a, f, missing, sizeof(missing));
    if (nmiss > 0 && now - rs->wait_since < (uint64_t)GM_JOBRESUME_WAIT_MS * 1000000ull) {
        if (!rs->wait_logged)
            gm_notice("event=job-resume-wait job=%s missing=%s: waiting up to %d s for every "
                      "member that trains",
                      jb->job, missing, GM_JOBRESUME_WAIT_MS / 1000);
        rs->wait_logged = 1;
        return;
    }
    rs->phase = GM_JOBRESUME_PHASE_DONE;
    key_of(jb, key);
    err = gm_jobs_resume(a->jobs, jb->job, jb->spec, jb->spec_len, (int)jb->global_batch);
    if (err == 0)
        gm_notice("event=job-auto-resume job=%s state=%s step=%" PRId64 " newest_committed=%ld "
                  "term=%" PRIu64 " missing=%s",
                  jb->job, jb->state, jb->step, newest_committed(f, key), rs->term,
                  nmiss > 0 ? missing : "none");
    else if (err == -EBUSY)
        gm_info("event=job-resume-skip job=%s: a job is current here already", jb->job);
    /* else: gm_jobs_resume logged why */
}

struct gm_jobresume *gm_jobresume_new(void)
{
    return calloc(1, sizeof(struct gm_jobresume));
}

void gm_jobresume_free(struct gm_jobresume *rs)
{
    free(rs);
}

void gm_jobresume_tick(struct gm_agent *a, struct gm_jobresume *rs, uint64_t now)
{
    char leader[GM_CHIEF_NAME_MAX + 1];
    uint64_t term = 0;
    int lead;

    if (rs == NULL || !gm_chief_active(a))
        return;
    lead = gm_chief_leader(a, leader, &term) == 0 && strcmp(leader, a->cfg.node) == 0;
    if (rs->phase == GM_JOBRESUME_PHASE_BARRIER)
        return; /* its callback comes, also when raft closes */
    if (!lead || term != rs->term) {
        rs->phase = GM_JOBRESUME_PHASE_IDLE;
        rs->term = lead ? term : 0;
    }
    if (!lead || a->jobs == NULL)
        return;
    switch (rs->phase) {
    case GM_JOBRESUME_PHASE_IDLE:
        rs->barrier.data = rs;
        if (gm_chief_barrier(a, &rs->barrier, barrier_cb) == 0)
            rs->phase = GM_JOBRESUME_PHASE_BARRIER;
        break;
    case GM_JOBRESUME_PHASE_WAIT:
        try_resume(a, rs, now);
        break;
    default:
        break;
    }
}
