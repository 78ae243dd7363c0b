/*
 * agent/drain.c - see drain.h.  State: a->drain_phase (DRAIN_NONE until
 * SIGTERM), when it started and the current phase's deadline.
 */
#include "agent/drain.h"

#include <stdio.h>
#include <string.h>

#include "agent/cluster/chief.h"
#include "agent/jobs/job.h"
#include "agent/core/state.h"
#include "common/log.h"
#include "common/time.h"

/* Both bounds together stay under the unit's TimeoutStopSec=15s (systemd/gradmesh@.service). */
#define DRAIN_STEP_S 8     /* the longest the step in flight may take to end */
#define DRAIN_TRANSFER_S 3 /* the longest a leadership transfer may take */
#define NS 1000000000ull

enum { DRAIN_NONE = 0, DRAIN_STEP, DRAIN_TRANSFER };

int gm_drain_active(const struct gm_agent *a)
{
    return a->drain_phase != DRAIN_NONE;
}

int gm_drain_start(struct gm_agent *a)
{
    if (a->drain_phase != DRAIN_NONE || a->stopping || !gm_chief_can_hand_over(a))
        return 0;
    a->drain_phase = DRAIN_STEP;
    a->drain_t0 = gm_time_mono_ns();
    a->drain_deadline = a->drain_t0 + DRAIN_STEP_S * NS;
    gm_notice("event=drain-start node=%s term=%llu job_running=%d", a->cfg.node,
              (unsigned long long)gm_chief_term(a), !gm_jobs_idle(a->jobs));
    gm_jobs_leave(a->jobs); /* the trainer ends after the step in flight */
    return 1;
}

/* Logs the end of the drain; returns 1, "stop now", for gm_drain_tick to pass on. */
static int finish(struct gm_agent *a, uint64_t now, const char *how)
{
    char chief[GM_CHIEF_NAME_MAX + 1];
    uint64_t term = 0;
    int known = gm_chief_leader(a, chief, &term) == 0;

    gm_notice("event=drain-done node=%s chief=%s term=%llu ms=%llu how=\"%s\"", a->cfg.node,
              known ? chief : "-", (unsigned long long)term,
              (unsigned long long)((now - a->drain_t0) / 1000000ull), how);
    return 1;
}

int gm_drain_tick(struct gm_agent *a, uint64_t now)
{
    if (a->drain_phase == DRAIN_STEP) {
        if (!gm_jobs_idle(a->jobs) && now < a->drain_deadline)
            return 0;
        gm_notice("event=drain-step-done node=%s ms=%llu timed_out=%d", a->cfg.node,
                  (unsigned long long)((now - a->drain_t0) / 1000000ull), !gm_jobs_idle(a->jobs));
        if (gm_chief_hand_over(a, "drain: SIGTERM") != 0)
            return finish(a, now, "nobody to hand the chief over to: stopping as the chief");
        a->drain_phase = DRAIN_TRANSFER;
        a->drain_deadline = now + DRAIN_TRANSFER_S * NS;
        return 0;
    }
    if (a->drain_phase == DRAIN_TRANSFER) {
        char chief[GM_CHIEF_NAME_MAX + 1];
        uint64_t term;
        if (gm_chief_leader(a, chief, &term) == 0 && strcmp(chief, a->cfg.node) != 0)
            return finish(a, now, "leadership handed over");
        if (!gm_chief_is_leader(a))
            return finish(a, now,
                          "no longer the chief, and no other chief yet (the voters left too?)");
        if (now >= a->drain_deadline)
            return finish(a, now, "the transfer did not end in time: stopping as the chief");
    }
    return 0;
}
