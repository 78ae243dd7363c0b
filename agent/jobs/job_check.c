/*
 * agent/jobs/job_check.c - the job room (agent/jobs/job.h), the coordinator's check: taking a job
 * (submit, a member's JOB_SUBMIT, a resume), hashing its own dataset, offering the job, comparing
 * each JOB_CHECK, starting. Private state and shared helpers: agent/jobs/job_int.h.  Loop thread
 * only.
 */
#include "agent/jobs/job_int.h"

static void evaluate(struct gm_jobs *j, struct job *jb);

static void maybe_start(struct gm_jobs *j, struct job *jb)
{
    int err = -ENOMEM; /* when the calloc fails */

    if (jb->state != J_CHECKING || !jb->own_hashed)
        return;
    for (size_t i = 0; i < jb->nparts; i++)
        if (!jb->parts[i].checked)
            return;
    jb->state = J_RUNNING;
    jobs_record(j, jb, J_RUNNING);
    jb->ranks = calloc(jb->nparts + 1, NODE_LEN);
    if (jb->ranks == NULL || (err = jobs_start_rank(j, jb)) < 0) {
        jobs_refuse(j, jb, "cannot start the trainer: %s", gm_strerror(err));
        return;
    }
    jobs_reform(j, jb, "start");
}

/* Compares a member's files with ours; "" when equal. */
static void compare(const struct job *jb, const char *node, const struct gm_jobfile *f, size_t n,
                    char *why, size_t cap)
{
    size_t a = 0, b = 0;

    why[0] = 0;
    while (a < jb->nfiles || b < n) {
        int c = a == jb->nfiles ? 1 : b == n ? -1 : strcmp(jb->files[a].name, f[b].name);
        if (c < 0) {
            snprintf(why, cap, "member %s is missing %.160s/%.160s", node, jb->job.data.dir,
                     jb->files[a].name);
            return;
        }
        if (c > 0) {
            snprintf(why, cap, "member %s has %.160s/%.160s, which %s does not", node,
                     jb->job.data.dir, f[b].name, jb->coordinator);
            return;
        }
        if (strcmp(jb->files[a].sha256, f[b].sha256) != 0 || jb->files[a].size != f[b].size) {
            snprintf(why, cap, "member %s: %.160s/%.160s differs (sha256 %.12s..., here %.12s...)",
                     node, jb->job.data.dir, f[b].name, f[b].sha256, jb->files[a].sha256);
            return;
        }
        a++;
        b++;
    }
}

/* The coordinator's own dataset, hashed: checking a submitted job, or a job taken over while
 * it runs (takeover). */
void jobs_own_hashed(void *arg, struct gm_jobfile *files, size_t n, const char *error)
{
    struct hashreq *hr = arg;
    struct gm_jobs *j = hr->j;
    struct job *jb = jobs_find(j, hr->id);

    if (jb == NULL || jb != j->cur ||
        (jb->state != J_CHECKING && (jb->state != J_RUNNING || !jb->coord || jb->own_hashed))) {
        free(files);
        free(hr);
        return;
    }
    if (error[0] && jb->state == J_RUNNING) { /* the job runs on: no member can rejoin it */
        gm_warn("event=job-takeover-hash job=%s err=\"%s\"", jb->id, error);
        free(files);
        free(hr);
        return;
    }
    if (error[0]) {
        free(files);
        free(hr);
        jobs_refuse(j, jb, "%s (on %s, the coordinator)", error, j->env.node);
        return;
    }
    jb->files = files;
    jb->nfiles = n;
    jb->own_hashed = true;
    free(hr);
    evaluate(j, jb); /* members that answered before us are compared now */
}

/* Compares every answered check with our own files (once we have them):
 * refuses at the first difference while checking, starts when all agree;
 * while running, a member that passes joins at a new generation. */
static void evaluate(struct gm_jobs *j, struct job *jb)
{
    char why[GM_JOB_MSG_MAX];

    if (!jb->own_hashed)
        return;
    for (size_t i = 0; i < jb->nparts; i++) {
        struct part *p = &jb->parts[i];
        if (!p->answered)
            continue;
        p->answered = false;
        if (p->error[0])
            snprintf(why, sizeof(why), "member %s: %.400s", p->node, p->error);
        else
            compare(jb, p->node, p->files, p->nfiles, why, sizeof(why));
        free(p->files);
        p->files = NULL;
        p->nfiles = 0;
        if (why[0] && jb->state == J_CHECKING) {
            jobs_refuse(j, jb, "%s", why);
            return;
        }
        if (why[0]) {
            gm_warn("event=job-member-refused job=%s node=%s msg=\"%s\"", jb->id, p->node, why);
            continue;
        }
        p->checked = true;
        if (jb->state == J_RUNNING)
            jobs_reform(j, jb, "a member came (back)");
    }
    maybe_start(j, jb);
}

int jobs_on_check(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    struct part *p = NULL;

    if (jb == NULL || !jb->coord || strcmp(jb->id, m->id) != 0)
        return 0; /* an old job's answer */
    for (size_t i = 0; i < jb->nparts; i++)
        if (strcmp(jb->parts[i].node, node) == 0)
            p = &jb->parts[i];
    if (p == NULL || (jb->state != J_CHECKING && jb->state != J_RUNNING))
        return 0;
    free(p->files);
    p->files = m->files;
    p->nfiles = m->nfiles;
    m->files = NULL;
    snprintf(p->error, sizeof(p->error), "%s", m->message);
    p->answered = true;
    evaluate(j, jb);
    return 0;
}

/* Offers the job to node, naming the nodes it would train with: this one and every
 * participant with an up link.  The member answers once it has a link to each, so a
 * group never forms around a missing member-to-member link. */
void jobs_offer(struct gm_jobs *j, struct job *jb, const char *node)
{
    struct gm_jobmsg m = {.text = jb->job.text, .text_len = jb->job.text_len};
    int err;

    m.ranks = calloc(jb->nparts + 1, NODE_LEN);
    if (m.ranks != NULL) {
        snprintf(m.ranks[m.nranks++], NODE_LEN, "%s", j->env.node);
        for (size_t i = 0; i < jb->nparts; i++)
            if (j->env.link_to(j->env.agent, jb->parts[i].node) != NULL)
                snprintf(m.ranks[m.nranks++], NODE_LEN, "%s", jb->parts[i].node);
    }
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.origin, sizeof(m.origin), "%s", jb->origin);
    if ((err = jobs_send_msg(j, node, GM_MSG_JOB_OFFER, &m)) < 0)
        gm_warn("event=job-offer node=%s err=\"%s\"", node, gm_strerror(err));
    free(m.ranks);
}

/* The coordinator takes a job: from its own control socket (id NULL: a new one), forwarded
 * by a member (JOB_SUBMIT, with the member's id), or resumed after a restart (its id, and
 * fixed_gb > 0: the global batch fixed when it was first taken).  Returns 0 and fills id, or
 * an error with one line for the user in msg. */
static int coord_take(struct gm_jobs *j, const char *text, size_t len, const char *origin,
                      const char *given_id, int fixed_gb, char id[GM_JOB_ID_LEN + 1], char *msg,
                      size_t cap)
{
    char(*up)[NODE_LEN] = NULL;
    struct hashreq *hr = NULL;
    struct job *jb;
    size_t n;
    int g, err;

    if (j->cur != NULL) {
        snprintf(msg, cap, "job %s (%s) is %s: one job at a time (cancel it first)", j->cur->id,
                 j->cur->job.name, jobs_state_name(j->cur->state));
        return -EBUSY;
    }
    jb = calloc(1, sizeof(*jb));
    up = calloc(GM_JOB_RANKS_MAX, NODE_LEN);
    if (jb == NULL || up == NULL) {
        free(jb);
        free(up);
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    snprintf(jb->origin, sizeof(jb->origin), "%s", origin != NULL ? origin : "job");
    if ((err = gm_job_parse(text, len, jb->origin, &jb->job)) < 0) {
        free(jb);
        free(up);
        snprintf(msg, cap, "the job does not parse on the coordinator %s (its log says why)",
                 j->env.node);
        return GM_ERR_CONFIG;
    }
    n = j->env.members_up(j->env.agent, up, GM_JOB_RANKS_MAX - 1);
    if (fixed_gb > 0) {
        jb->job.optim.global_batch = fixed_gb;
        jb->job.optim.batch = 0;
    }
    if ((err = gm_job_global_batch(&jb->job, (int)n + 1, &g)) < 0) {
        if (jb->job.shares.mode == GM_JOB_SHARES_FIXED)
            snprintf(msg, cap,
                     "%.200s: [job] shares name %d ranks, each with at least one sample of the "
                     "global batch; %zu workers are up (the coordinator's log says which fails)",
                     jb->origin, jb->job.shares.n, n + 1);
        else if (jb->job.optim.global_batch > 0 && (size_t)jb->job.optim.global_batch < n + 1)
            snprintf(msg, cap,
                     "%.200s: [optim] global_batch = %d is smaller than the %zu workers up: "
                     "each takes at least one sample",
                     jb->origin, jb->job.optim.global_batch, n + 1);
        else
            snprintf(msg, cap, "%.200s: [optim] global_batch = %d does not divide by %zu workers",
                     jb->origin, jb->job.optim.global_batch, n + 1);
        gm_job_free(&jb->job);
        free(jb);
        free(up);
        return GM_ERR_CONFIG;
    }
    /* The global batch is fixed here, at the world of the submit, for the whole job: the ranks'
     * trainers start before their first group says the world, a member that comes back may join
     * a smaller or larger group, and every rank must cut the same blocks from the data. */
    jb->job.optim.global_batch = g;
    jb->job.optim.batch = 0;
    if (given_id != NULL)
        snprintf(jb->id, sizeof(jb->id), "%s", given_id);
    else
        jobs_new_id(jb->id);
    jb->gen = jobs_job_tag(jb->id) << 16; /* the first group is ... | 1 */
    jb->coord = true;
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", j->env.node);
    if (jb->job.comm.codec == GM_JOB_CODEC_AUTO)
        jobs_resolve_auto(j, jb, up, n);
    jb->state = J_CHECKING;
    jobs_record(j, jb, J_CHECKING);
    if (j->env.record_spec != NULL)
        j->env.record_spec(j->env.agent, jb->id, text, len, g);
    jb->test_accuracy = NAN;
    jb->t_submit = gm_time_mono_ns();
    jb->parts = calloc(n + 1, sizeof(*jb->parts));
    hr = calloc(1, sizeof(*hr));
    if (jb->parts == NULL || hr == NULL) {
        free(hr);
        free(up);
        jobs_job_free(jb);
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        snprintf(jb->parts[i].node, NODE_LEN, "%s", up[i]);
    jb->nparts = n;
    free(up);
    j->cur = jb;
    snprintf(id, GM_JOB_ID_LEN + 1, "%s", jb->id);
    hr->j = j;
    snprintf(hr->id, sizeof(hr->id), "%s", jb->id);
    err = gm_datahash_start(j->dh, jb->job.data.dir, jb->job.data.kind == GM_JOB_DATA_KIND_FOLDER,
                            jobs_own_hashed, hr);
    if (err < 0) {
        free(hr);
        jobs_refuse(j, jb, "cannot hash %s: %s", jb->job.data.dir, gm_strerror(err));
        return 0; /* refused: jobs says why */
    }
    for (size_t i = 0; i < jb->nparts; i++)
        jobs_offer(j, jb, jb->parts[i].node);
    gm_notice("event=job-submitted job=%s name=%s members=%zu global_batch=%d", jb->id,
              jb->job.name, n + 1, g);
    return 0;
}

int jobs_coord_submit(struct gm_jobs *j, const char *text, size_t len, const char *origin,
                      const char *given_id, char id[GM_JOB_ID_LEN + 1], char *msg, size_t cap)
{
    return coord_take(j, text, len, origin, given_id, 0, id, msg, cap);
}

int gm_jobs_resume(struct gm_jobs *j, const char *id, const char *text, size_t len,
                   int global_batch)
{
    char msg[GM_JOB_MSG_MAX] = "", got[GM_JOB_ID_LEN + 1];
    int err;

    if (j->cur != NULL)
        return -EBUSY;
    err = coord_take(j, text, len, "resumed", id, global_batch, got, msg, sizeof(msg));
    if (err < 0)
        gm_err("event=job-resume-failed job=%s err=\"%s\": %s", id, gm_strerror(err), msg);
    return err;
}

int jobs_on_submit(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    char msg[GM_JOB_MSG_MAX] = "", id[GM_JOB_ID_LEN + 1], coord[NODE_LEN];
    struct gm_jobmsg r = {0};
    int err;

    if (jobs_find(j, m->id) != NULL)
        return 0; /* a repeat */
    gm_jobs_coordinator(j, coord, NULL, 0);
    if (strcmp(coord, j->env.node) != 0) {
        snprintf(msg, sizeof(msg), "%s is not the coordinator (%s is)", j->env.node,
                 coord[0] ? coord : "none: no chief");
        err = GM_ERR_CONFIG;
    } else {
        err = jobs_coord_submit(j, m->text, m->text_len, m->origin, m->id, id, msg, sizeof(msg));
    }
    if (err == 0) {
        gm_notice("event=job-submitted-by job=%s node=%s", m->id, node);
        return 0;
    }
    snprintf(r.id, sizeof(r.id), "%s", m->id);
    snprintf(r.state, sizeof(r.state), "refused");
    snprintf(r.message, sizeof(r.message), "%s", msg);
    return jobs_send_msg(j, node, GM_MSG_JOB_END, &r);
}
