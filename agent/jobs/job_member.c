/*
 * agent/jobs/job_member.c - the job room (agent/jobs/job.h), the member side: answering an offer
 * (JOB_CHECK once hashed and linked to every rank), JOB_GROUP, JOB_REPORT, JOB_END, and forwarding
 * a submit to the coordinator. Private state and shared helpers: agent/jobs/job_int.h.  Loop thread
 * only.
 */
#include "agent/jobs/job_int.h"

/* Sends the pending offer's JOB_CHECK when it can: hashed, and linked to every rank. */
void jobs_try_answer(struct gm_jobs *j)
{
    struct pending_offer *po = &j->po;
    struct gm_jobmsg m = {0};
    const char *missing = NULL;

    if (!po->active || !po->hashed || j->stopping)
        return;
    /* a node cut off from the chief that offers rejoins with an old term: until raft brings
     * it up to date, its answer would be dropped as stale (gm_jobs_on_frame) */
    if (jobs_my_term(j) < po->term && gm_time_mono_ns() < po->deadline)
        return;
    for (size_t i = 0; i < po->nranks && po->error[0] == 0; i++)
        if (strcmp(po->ranks[i], j->env.node) != 0 &&
            j->env.link_to(j->env.agent, po->ranks[i]) == NULL)
            missing = po->ranks[i];
    if (missing != NULL && gm_time_mono_ns() < po->deadline)
        return; /* its link may be coming up (a restarted member redials with backoff) */
    if (po->probing)
        return; /* shares = auto: the speed probe's answer goes with it (bounded: shareprobe.h) */
    snprintf(m.id, sizeof(m.id), "%s", po->id);
    if (po->error[0])
        snprintf(m.message, sizeof(m.message), "%s", po->error);
    else if (missing != NULL)
        snprintf(m.message, sizeof(m.message), "no link to %s after %d s", missing,
                 MESH_TIMEOUT_MS / 1000);
    else {
        m.files = po->files;
        m.nfiles = po->nfiles;
        m.group = po->group;
    }
    m.have_room = po->have_room;
    m.ckpt_room = po->ckpt_room;
    if (po->have_probe && m.message[0] == '\0') {
        m.have_probe = true;
        memcpy(m.probe_n, po->probe.n, sizeof(m.probe_n));
        memcpy(m.probe_s, po->probe.busy_s, sizeof(m.probe_s));
    }
    (void)jobs_send_msg(j, po->coord, GM_MSG_JOB_CHECK, &m);
    jobs_offer_clear(po);
}

/* shares = auto's speed probe of an offered job (agent/jobs/shareprobe.h), on libuv's
 * threadpool once the dataset is hashed (not beside the hashing, which would slow it); counted
 * in j->prechecks so that the room outlives it (gm_jobs_idle). */
struct proberq {
    uv_work_t req;
    struct gm_jobs *j;
    char id[GM_JOB_ID_LEN + 1];
    char *text; /* owned */
    size_t len;
    char origin[300];
    struct gm_device_spec device; /* this agent's [train] device (the job's own wins) */
    int world, err;
    struct gm_shareprobe out;
    char why[256];
};

static void probe_work(uv_work_t *req)
{
    struct proberq *r = req->data;
    struct gm_job job;
    int g;

    if ((r->err = gm_job_parse(r->text, r->len, r->origin, &job)) < 0) {
        snprintf(r->why, sizeof(r->why), "the job does not parse");
        return;
    }
    if (!job.device_set)
        job.device = r->device;
    if ((r->err = gm_job_global_batch(&job, r->world, &g)) == 0) {
        job.optim.global_batch = g;
        r->err = gm_shareprobe_run(&job, r->world, &r->out, r->why, sizeof(r->why));
    } else {
        snprintf(r->why, sizeof(r->why), "no global batch for %d ranks", r->world);
    }
    gm_job_free(&job);
}

static void probe_done(uv_work_t *req, int status)
{
    struct proberq *r = req->data;
    struct gm_jobs *j = r->j;
    struct pending_offer *po = &j->po;

    j->prechecks--;
    if (status < 0 && r->err == 0) {
        r->err = status;
        snprintf(r->why, sizeof(r->why), "%s", uv_strerror(status));
    }
    jobs_probe_logged(j, r->id, r->err, &r->out, r->why);
    if (po->active && po->probing && strcmp(po->id, r->id) == 0) {
        po->probing = false;
        po->have_probe = r->err == 0;
        po->probe = r->out.p;
        jobs_try_answer(j);
    }
    free(r->text);
    free(r);
}

/* Starts the probe of the pending offer; false when it cannot (the answer goes without). */
static bool probe_start(struct gm_jobs *j, struct pending_offer *po)
{
    struct proberq *r = calloc(1, sizeof(*r));

    if (r == NULL || po->text == NULL)
        goto fail;
    r->text = po->text; /* the request owns it now */
    r->len = po->text_len;
    po->text = NULL;
    r->j = j;
    r->req.data = r;
    snprintf(r->id, sizeof(r->id), "%s", po->id);
    snprintf(r->origin, sizeof(r->origin), "%s", po->origin);
    r->device = j->env.device;
    r->world = po->nranks > 0 ? (int)po->nranks : 1;
    if (uv_queue_work(j->env.loop, &r->req, probe_work, probe_done) < 0)
        goto fail;
    j->prechecks++;
    po->probing = true;
    return true;
fail:
    if (r != NULL)
        free(r->text);
    free(r);
    return false;
}

/* The member's dataset, hashed to answer an offer: the answer goes once it can reach every
 * rank (try_answer). */
static void offer_hashed(void *arg, struct gm_jobfile *files, size_t n, const char *error)
{
    struct hashreq *hr = arg;
    struct gm_jobs *j = hr->j;
    struct pending_offer *po = &j->po;

    if (!po->active || strcmp(po->id, hr->id) != 0 || po->hashed) {
        free(files);
        free(hr);
        return;
    }
    po->hashed = true;
    snprintf(po->error, sizeof(po->error), "%s", error);
    if (error[0] == 0) { /* at most GM_JOB_FILES_MAX entries on the wire */
        struct gm_jobfile *gs = NULL;
        size_t ng = 0;
        int err;
        po->group = gm_datahash_pick(files, n);
        if ((err = gm_datahash_group(files, n, po->group, &gs, &ng)) < 0)
            snprintf(po->error, sizeof(po->error), "cannot sum the dataset's hashes: %s",
                     gm_strerror(err));
        free(files);
        files = gs;
        n = ng;
    }
    po->files = files;
    po->nfiles = po->error[0] ? 0 : n;
    free(hr);
    if (po->want_probe && po->error[0] == 0)
        (void)probe_start(j, po);
    jobs_try_answer(j);
}

static int member_parse(struct gm_jobmsg *m, struct gm_job *job)
{
    char origin[300];

    snprintf(origin, sizeof(origin), "%s", m->origin[0] ? m->origin : "job");
    return gm_job_parse(m->text, m->text_len, origin, job);
}

int jobs_on_offer(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct gm_job job;
    struct hashreq *hr;
    int err;

    if ((err = member_parse(m, &job)) < 0) {
        struct gm_jobmsg r = {0};
        snprintf(r.id, sizeof(r.id), "%s", m->id);
        snprintf(r.message, sizeof(r.message), "the job does not parse here (see %s's log)",
                 j->env.node);
        return jobs_send_msg(j, node, GM_MSG_JOB_CHECK, &r);
    }
    hr = calloc(1, sizeof(*hr));
    if (hr == NULL) {
        gm_job_free(&job);
        return -ENOMEM;
    }
    jobs_offer_clear(&j->po); /* a newer offer replaces an unanswered one */
    j->po.active = true;
    snprintf(j->po.id, sizeof(j->po.id), "%s", m->id);
    snprintf(j->po.coord, sizeof(j->po.coord), "%s", node);
    j->po.ranks = m->ranks;
    j->po.nranks = m->nranks;
    m->ranks = NULL;
    j->po.deadline = gm_time_mono_ns() + (uint64_t)MESH_TIMEOUT_MS * 1000000ull;
    j->po.term = j->frame_term;
    j->po.have_room = jobs_ckpt_room(j, &job, &j->po.ckpt_room);
    if (job.shares.mode == GM_JOB_SHARES_AUTO && (j->po.text = malloc(m->text_len + 1)) != NULL) {
        memcpy(j->po.text, m->text, m->text_len);
        j->po.text[m->text_len] = '\0';
        j->po.text_len = m->text_len;
        snprintf(j->po.origin, sizeof(j->po.origin), "%s", m->origin[0] ? m->origin : "job");
        j->po.want_probe = true;
    }
    hr->j = j;
    snprintf(hr->id, sizeof(hr->id), "%s", m->id);
    snprintf(hr->reply_to, sizeof(hr->reply_to), "%s", node);
    err = gm_datahash_start(j->dh, job.data.dir, job.data.kind == GM_JOB_DATA_KIND_FOLDER,
                            offer_hashed, hr);
    gm_job_free(&job);
    if (err < 0)
        free(hr);
    return err;
}

int jobs_on_group(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    int err;

    if (jb != NULL && strcmp(jb->id, m->id) != 0) {
        if (jb->coord)
            return GM_ERR_PROTO; /* two coordinators: refuse the other one's group */
        if (jb->rank != NULL) {
            struct gm_jobmsg r = {.gen = m->gen, .code = GM_ERR_ABORTED};
            gm_warn("event=job-replaced job=%s by=%s", jb->id, m->id);
            jb->stop_sent = true;
            gm_rank_stop(jb->rank);
            /* the coordinator sends the group again after our report: this rank cannot join
             * group m->gen until the old one has stopped, and its exit reports nothing */
            snprintf(r.id, sizeof(r.id), "%s", m->id);
            snprintf(r.event, sizeof(r.event), "group-failed");
            snprintf(r.message, sizeof(r.message), "the previous job's rank is stopping here");
            return jobs_send_msg(j, node, GM_MSG_JOB_REPORT, &r);
        }
        jobs_to_history(j, jb);
        jb = NULL;
    }
    if (jb == NULL) {
        jb = calloc(1, sizeof(*jb));
        if (jb == NULL)
            return -ENOMEM;
        snprintf(jb->id, sizeof(jb->id), "%s", m->id);
        snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", node);
        snprintf(jb->origin, sizeof(jb->origin), "%s", m->origin);
        jb->test_accuracy = NAN;
        jb->t_submit = gm_time_mono_ns();
        if ((err = member_parse(m, &jb->job)) < 0) {
            free(jb);
            return 0;
        }
        jb->job.optim.global_batch = m->global_batch; /* the coordinator's, fixed at submit */
        jb->job.optim.batch = 0;
        jobs_apply_comm(jb, m);
        jb->state = J_RUNNING;
        j->cur = jb;
        if ((err = jobs_start_rank(j, jb)) < 0) {
            jb->state = J_FAILED;
            snprintf(jb->error, sizeof(jb->error), "cannot start the trainer: %s",
                     gm_strerror(err));
            jobs_to_history(j, jb);
            return 0;
        }
        gm_notice("event=job-joined job=%s name=%s coordinator=%s", jb->id, jb->job.name, node);
    }
    if (jb->rank == NULL && jb->state == J_CHECKING && !jb->coord &&
        strcmp(node, jb->coordinator) == 0) {         /* our forwarded submit: it starts */
        jb->job.optim.global_batch = m->global_batch; /* the coordinator's, fixed at submit */
        jb->job.optim.batch = 0;
        jobs_apply_comm(jb, m);
        jb->state = J_RUNNING;
        if ((err = jobs_start_rank(j, jb)) < 0) {
            jb->state = J_FAILED;
            snprintf(jb->error, sizeof(jb->error), "cannot start the trainer: %s",
                     gm_strerror(err));
            jobs_to_history(j, jb);
            return 0;
        }
    }
    if (jb->rank != NULL && jb->state == J_RUNNING && strcmp(node, jb->coordinator) != 0 &&
        strcmp(node, j->env.node) != 0 && jobs_is_chief(j, node)) {
        /* the chief took the job over: from a lost coordinator, or from this node, deposed */
        if (jb->coord)
            jobs_step_down(j, jb, "a group from the chief");
        if (jb->orphan_since == 0)
            snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", jb->coordinator);
        gm_notice("event=job-coordinator-new job=%s coordinator=%s lost=%s", jb->id, node,
                  jb->lost_coord);
        snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", node);
        jb->orphan_since = 0;
        /* generations are counted by each coordinator: a deposed one that re-formed its
         * group before raft told it would otherwise drop the new chief's groups of a number
         * not above its own, and the new chief's group would wait for it for ever */
        jb->gen = 0;
    }
    if (strcmp(node, jb->coordinator) != 0 || jb->rank == NULL || m->gen <= jb->gen)
        return 0;         /* stale */
    jb->orphan_since = 0; /* a group from the coordinator: it was a link that came back */
    jobs_account_group(jb);
    free(jb->ranks);
    jb->ranks = m->ranks;
    m->ranks = NULL;
    free(jb->islands);
    jb->islands = m->islands; /* NULL: none */
    m->islands = NULL;
    jb->world = m->nranks;
    jb->gen = m->gen;
    jb->nshares = 0; /* shares = auto: the coordinator's for this group, if any */
    if (m->shares != NULL && m->nranks <= GM_JOB_SHARES_MAX) {
        memcpy(jb->shares, m->shares, sizeof(int) * m->nranks);
        jb->nshares = (int)m->nranks;
    }
    jobs_apply_comm(jb, m); /* codec = auto: the pick may have switched since the first group */
    if ((err = jobs_form_local(j, jb)) < 0)
        gm_warn("event=job-form job=%s generation=%u err=\"%s\"", jb->id, jb->gen & 0xffff,
                gm_strerror(err));
    return 0;
}

int jobs_on_report(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;

    if (jb != NULL && jb->coord && strcmp(jb->id, m->id) == 0 && strcmp(m->event, "cancel") == 0) {
        /* `gradmesh cancel` typed on a member, forwarded here as a submit is */
        char why[GM_JOB_MSG_MAX + 64];
        if (jb->stop_sent)
            return 0;
        snprintf(why, sizeof(why), "cancelled by the user on %s", node);
        gm_notice("event=job-cancel job=%s from=%s", jb->id, node);
        jobs_end_job(j, jb, J_CANCELLED, why);
        return 0;
    }
    if (jb == NULL || !jb->coord || strcmp(jb->id, m->id) != 0 || jb->state != J_RUNNING)
        return 0;
    if (m->have_fit || strncmp(m->event, "switch-", 7) == 0) {
        jobs_on_switch_report(j, jb, node, m);
        return 0;
    }
    if (strcmp(m->event, "exit") == 0) {
        char why[GM_JOB_MSG_MAX + 64];
        snprintf(why, sizeof(why), "rank on %s stopped: %s", node, m->message);
        if (m->code == GM_ERR_MISMATCH)
            snprintf(why, sizeof(why),
                     "parameters differ between ranks (hash check failed on %s and its peers)",
                     node);
        jobs_end_job(j, jb, J_FAILED, why);
        return 0;
    }
    if (m->gen == jb->gen && jb->failed_gen != m->gen) {
        jb->failed_gen = m->gen;
        jobs_reform_after_failure(j, jb, "a member's operation failed");
    }
    return 0;
}

int jobs_on_end(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = jobs_find(j, m->id);

    if (jb == NULL || jb->coord || strcmp(node, jb->coordinator) != 0)
        return 0;
    jb->state = strcmp(m->state, "done") == 0        ? J_DONE
                : strcmp(m->state, "cancelled") == 0 ? J_CANCELLED
                : strcmp(m->state, "refused") == 0   ? J_REFUSED
                                                     : J_FAILED;
    jb->t_end = gm_time_mono_ns();
    if (m->have_summary) { /* the coordinator's figures: rank 0 evaluated and wrote them */
        jb->test_accuracy = m->test_accuracy;
        jb->steps = m->steps;
        jb->samples_per_s = m->samples_per_s;
        snprintf(jb->weights, sizeof(jb->weights), "%s:%s", node, m->weights);
        jb->remote_summary = true;
    }
    if (jb->state != J_DONE)
        snprintf(jb->error, sizeof(jb->error), "%s", m->message);
    if (jb->rank != NULL) {
        /* a rank that waits for a group (cut off, or its coordinator lost, when the job
         * ended) would wait for ever: it stops; one in the last group ends by itself */
        if (jb->state != J_DONE || jb->orphan_since != 0) {
            jb->stop_sent = true;
            gm_rank_stop(jb->rank);
        }
        return 0; /* its exit moves it to the history */
    }
    if (jb == j->cur)
        jobs_to_history(j, jb);
    return 0;
}

/* A member forwards a submit to the coordinator and keeps a record of it, so that the
 * submitter's `jobs` follows it (JOB_GROUP makes it run here, JOB_END ends it). */
int jobs_member_submit(struct gm_jobs *j, const char *coord, const char *text, size_t len,
                       const char *origin, char id[GM_JOB_ID_LEN + 1], char *msg, size_t cap)
{
    struct gm_jobmsg m = {.text = (char *)text, .text_len = len};
    struct job *jb;
    int err;

    if (j->cur != NULL) {
        snprintf(msg, cap, "job %s (%s) is %s: one job at a time (cancel it first)", j->cur->id,
                 j->cur->job.name, jobs_state_name(j->cur->state));
        return -EBUSY;
    }
    jb = calloc(1, sizeof(*jb));
    if (jb == NULL) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    snprintf(jb->origin, sizeof(jb->origin), "%s", origin != NULL ? origin : "job");
    if ((err = gm_job_parse(text, len, jb->origin, &jb->job)) < 0) {
        free(jb);
        snprintf(msg, cap, "the job does not parse on %s (its log says why)", j->env.node);
        return GM_ERR_CONFIG;
    }
    jobs_new_id(jb->id);
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", coord);
    jb->state = J_CHECKING;
    jb->test_accuracy = NAN;
    jb->t_submit = gm_time_mono_ns();
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.origin, sizeof(m.origin), "%s", jb->origin);
    if ((err = jobs_send_msg(j, coord, GM_MSG_JOB_SUBMIT, &m)) < 0) {
        snprintf(msg, cap, "cannot reach the coordinator %s: %s", coord, gm_strerror(err));
        jobs_job_free(jb);
        return err;
    }
    snprintf(id, GM_JOB_ID_LEN + 1, "%s", jb->id);
    j->cur = jb;
    gm_notice("event=job-forwarded job=%s name=%s coordinator=%s", jb->id, jb->job.name, coord);
    return 0;
}
