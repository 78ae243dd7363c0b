/*
 * agent/jobs/jobroom.h - the job room's entry points into the agent (see
 * jobroom.c): its room table, and making its state in gm_agent_open.
 */
#ifndef GM_AGENT_JOBS_JOBROOM_H
#define GM_AGENT_JOBS_JOBROOM_H

#include "common/err.h"

struct gm_agent;
struct gm_room;

extern const struct gm_room gm_job_room;

/* Makes a->jobs and a->resume (agent/jobs/jobresume.h; agent.c frees both). */
GM_MUST_CHECK int gm_jobroom_open(struct gm_agent *a);

#endif
