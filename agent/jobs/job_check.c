/*
 * agent/jobs/job_check.c - the job room (agent/jobs/job.h), the coordinator's check: taking a job
 * (submit, a member's JOB_SUBMIT, a resume), hashing its own dataset, the trainer's own check of
 * the job (on the threadpool: what `train --local` checks before its first step, and room for the
 * checkpoints), offering the job, comparing each JOB_CHECK (the files, and the room each member's
 * checkpoint directory has), starting. Private state and shared helpers: agent/jobs/job_int.h. Loop
 * thread only.
 */
#include "agent/jobs/job_int.h"

static void evaluate(struct gm_jobs *j, struct job *jb);

/* Whether every member's checkpoint directory can take the job's checkpoints (the newest
 * checkpoint_keep and the one being received); refuses the job, naming the first that cannot. */
static bool rooms_fit(struct gm_jobs *j, struct job *jb)
{
    uint64_t need = jb->ckpt_bytes * (uint64_t)(jb->job.checkpoint_keep + 1);

    if (jb->job.checkpoint_every <= 0)
        return true;
    for (size_t i = 0; i < jb->nparts; i++) {
        const struct part *p = &jb->parts[i];
        if (!p->have_room || p->ckpt_room >= need)
            continue;
        jobs_refuse(j, jb,
                    "member %s: no room for the job's checkpoints: %d kept and the one being "
                    "received need about %.1f MB (%.1f MB each), its checkpoint directory has "
                    "%.1f MB; free some space there, lower [job] checkpoint_keep or set "
                    "checkpoint_every = 0",
                    p->node, jb->job.checkpoint_keep, (double)need / 1e6,
                    (double)jb->ckpt_bytes / 1e6, (double)p->ckpt_room / 1e6);
        return false;
    }
    return true;
}

/* codec = auto: the model timed on the threadpool (job_codec.c prepared the request) */
static void auto_work(uv_work_t *w)
{
    struct autoreq *r = w->data;

    r->err = gm_autocodec_resolve(&r->job, r->world, r->links, r->isl, &r->o, r->reason,
                                  sizeof(r->reason));
}

static void auto_done(uv_work_t *w, int status)
{
    struct autoreq *r = w->data;
    struct gm_jobs *j = r->j;
    struct job *jb = j != NULL ? jobs_find(j, r->id) : NULL;

    if (j != NULL && j->auto_req == r)
        j->auto_req = NULL;
    if (jb != NULL && jb->coord && jb->codec_pending) {
        jb->codec_pending = false;
        jobs_auto_apply(jb, r, status);
        jobs_autoreq_free(r);
        jobs_maybe_start(j, jb);
        return;
    }
    jobs_autoreq_free(r); /* the room or the job is gone */
}

/* Resolves codec = auto for a job being taken: at once, or the timing queued (the offers and
 * the check go on; the job starts when it is back). */
static void resolve_auto(struct gm_jobs *j, struct job *jb, char (*up)[NODE_LEN], size_t n)
{
    struct autoreq *r = jobs_resolve_auto(j, jb, up, n);

    if (r == NULL)
        return;
    if (uv_queue_work(j->env.loop, &r->work, auto_work, auto_done) < 0) {
        auto_work(&r->work); /* here, as before */
        jobs_auto_apply(jb, r, 0);
        jobs_autoreq_free(r);
        return;
    }
    if (j->auto_req != NULL) /* an older job's timing: that job is gone */
        j->auto_req->j = NULL;
    j->auto_req = r;
    jb->codec_pending = true;
}

/* shares = auto's speed probe on the coordinator (agent/jobs/shareprobe.h), on libuv's
 * threadpool once its own dataset is hashed and the job checked (so that neither slows it),
 * while the members' checks, each with its own probe, come in. */
struct cprobe {
    uv_work_t req;
    struct gm_jobs *j;
    char id[GM_JOB_ID_LEN + 1];
    struct gm_job job; /* a copy of the settings, text NULL: owns nothing */
    int world, err;
    struct gm_shareprobe out;
    char why[256];
};

static void cprobe_work(uv_work_t *req)
{
    struct cprobe *r = req->data;

    r->err = gm_shareprobe_run(&r->job, r->world, &r->out, r->why, sizeof(r->why));
}

static void cprobe_done(uv_work_t *req, int status)
{
    struct cprobe *r = req->data;
    struct gm_jobs *j = r->j;
    struct job *jb = jobs_find(j, r->id);

    j->prechecks--;
    if (status < 0 && r->err == 0) {
        r->err = status;
        snprintf(r->why, sizeof(r->why), "%s", uv_strerror(status));
    }
    jobs_probe_logged(j, r->id, r->err, &r->out, r->why);
    if (jb != NULL && jb == j->cur && jb->coord && jb->state == J_CHECKING) {
        jb->probe_done = true;
        jb->have_probe = r->err == 0;
        jb->probe = r->out;
        jobs_maybe_start(j, jb);
    }
    free(r);
}

/* Starts the coordinator's probe; false when it cannot (the job then starts at equal shares). */
static bool cprobe_start(struct gm_jobs *j, struct job *jb)
{
    struct cprobe *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return false;
    r->j = j;
    r->req.data = r;
    snprintf(r->id, sizeof(r->id), "%s", jb->id);
    r->job = jb->job;
    r->job.text = NULL;
    r->job.text_len = 0;
    if (!r->job.device_set) /* the job file did not choose: this agent's [train] device */
        r->job.device = j->env.device;
    r->world = (int)jb->nparts + 1;
    if (uv_queue_work(j->env.loop, &r->req, cprobe_work, cprobe_done) < 0) {
        free(r);
        return false;
    }
    j->prechecks++;
    return true;
}

void jobs_maybe_start(struct gm_jobs *j, struct job *jb)
{
    int err = -ENOMEM; /* when the calloc fails */

    if (jb->state != J_CHECKING || !jb->own_hashed || !jb->prechecked || jb->codec_pending)
        return;
    if (jb->job.shares.mode == GM_JOB_SHARES_AUTO && jb->nparts > 0 && !jb->probe_started) {
        jb->probe_started = true;
        jb->probe_done = !cprobe_start(j, jb);
    }
    if (jb->probe_started && !jb->probe_done)
        return; /* the coordinator's own probe: bounded (shareprobe.h) */
    for (size_t i = 0; i < jb->nparts; i++)
        if (!jb->parts[i].checked)
            return;
    if (!rooms_fit(j, jb))
        return;
    jb->state = J_RUNNING;
    jobs_record(j, jb, J_RUNNING);
    jb->ranks = calloc(jb->nparts + 1, NODE_LEN);
    if (jb->ranks == NULL || (err = jobs_start_rank(j, jb)) < 0) {
        jobs_refuse(j, jb, "cannot start the trainer: %s", gm_strerror(err));
        return;
    }
    jobs_shares_probe(j, jb); /* shares = auto: the first group's shares from the probes */
    jobs_reform(j, jb, "start");
}

/* Compares a member's entries (files, or groups g of them) with ours; "" when equal. */
static void compare(const struct job *jb, const char *node, enum gm_jobfile_group g,
                    const struct gm_jobfile *f, size_t n, char *why, size_t cap)
{
    const struct gm_jobfile *own = jb->files;
    struct gm_jobfile *grouped = NULL;
    size_t nown = jb->nfiles, a = 0, b = 0;
    int err;

    why[0] = 0;
    if (g != GM_JOBFILE_GROUP_FILE) { /* ours summed the same way: the entries compare */
        if ((err = gm_datahash_group(jb->files, jb->nfiles, g, &grouped, &nown)) < 0) {
            snprintf(why, cap, "cannot sum the dataset's hashes: %s", gm_strerror(err));
            return;
        }
        own = grouped;
    }
    while (a < nown || b < n) {
        int c = a == nown ? 1 : b == n ? -1 : strcmp(own[a].name, f[b].name);
        if (c < 0) {
            snprintf(why, cap, "member %s is missing %.160s/%.160s", node, jb->job.data.dir,
                     own[a].name);
            break;
        }
        if (c > 0) {
            snprintf(why, cap, "member %s has %.160s/%.160s, which %s does not", node,
                     jb->job.data.dir, f[b].name, jb->coordinator);
            break;
        }
        if (strcmp(own[a].sha256, f[b].sha256) != 0 || own[a].size != f[b].size ||
            own[a].count != f[b].count) {
            if (g == GM_JOBFILE_GROUP_FILE)
                snprintf(why, cap,
                         "member %s: %.160s/%.160s differs (sha256 %.12s..., here %.12s...)", node,
                         jb->job.data.dir, f[b].name, f[b].sha256, own[a].sha256);
            else /* a folder's summary: its file count and bytes, the names are not sent */
                snprintf(why, cap,
                         "member %s: %.160s/%.160s differs (%llu files, %llu bytes there; %llu "
                         "files, %llu bytes here)",
                         node, jb->job.data.dir, f[b].name, (unsigned long long)f[b].count,
                         (unsigned long long)f[b].size, (unsigned long long)own[a].count,
                         (unsigned long long)own[a].size);
            break;
        }
        a++;
        b++;
    }
    free(grouped);
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
            compare(jb, p->node, p->group, p->files, p->nfiles, why, sizeof(why));
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
    jobs_maybe_start(j, jb);
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
    p->group = m->group;
    m->files = NULL;
    snprintf(p->error, sizeof(p->error), "%s", m->message);
    p->have_room = m->have_room;
    p->ckpt_room = m->ckpt_room;
    p->have_probe = m->have_probe;
    if (m->have_probe)
        p->probe = (struct gm_autoshare_probe){{m->probe_n[0], m->probe_n[1]},
                                               {m->probe_s[0], m->probe_s[1]}};
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

/* A new job without committed checkpoints of its own, named like an earlier one this node
 * coordinated (its history, newest first) whose checkpoints the cluster committed: it starts
 * at step 0, and says which keys differ from that job's (only [job] epochs may change for a
 * job to go on from another's checkpoints: train/job.h).  Best effort: a job coordinated
 * elsewhere, or before a restart, is not in this node's history. */
static void note_prior(struct gm_jobs *j, struct job *jb)
{
    char key[GM_JOBS_CKPT_KEY_LEN + 1], k2[GM_JOBS_CKPT_KEY_LEN + 1], diff[256];
    struct gm_ckpt_ref ref;
    const struct job *p;
    int k;

    if (j->env.committed == NULL)
        return;
    gm_jobs_ckpt_key(&jb->job, key);
    if (j->env.committed(j->env.agent, key, &ref, 1) != 0)
        return;
    for (p = j->history; p != NULL; p = p->next) {
        if (!p->coord || p->job.text == NULL || strcmp(p->job.name, jb->job.name) != 0)
            continue;
        gm_jobs_ckpt_key(&p->job, k2);
        if (strcmp(k2, key) != 0 && j->env.committed(j->env.agent, k2, &ref, 1) > 0)
            break;
    }
    if (p == NULL || (k = gm_job_diff(p->job.text, p->job.text_len, jb->job.text, jb->job.text_len,
                                      diff, sizeof(diff))) < 0)
        return;
    snprintf(jb->note, sizeof(jb->note),
             "starting at step 0: the checkpoints of the earlier job %s (%.63s) are of other "
             "settings: %s; only [job] epochs may change for a job to go on from them",
             p->id, jb->job.name, k > 0 ? diff : "its job file differs in comments or layout");
    gm_notice("event=job-not-resumed job=%s name=%s earlier=%s differs=\"%s\"", jb->id,
              jb->job.name, p->id, k > 0 ? diff : "comments or layout");
}

/* The trainer's own checks of a job the coordinator took (gm_trainer_check), on libuv's
 * threadpool: the dataset's headers and sizes against the job, the global batch against the
 * dataset, the model on its images, and room for the checkpoints here.  The members hold the
 * same bytes (the hash check), so what passes here passes on every rank; a refusal is the line
 * `train --local` prints. */
struct precheck {
    uv_work_t req;
    struct gm_jobs *j;
    char id[GM_JOB_ID_LEN + 1];
    char *text; /* owned copy of the job text */
    size_t len;
    char origin[256];
    int global_batch, world;
    char ckdir[1100];
    int err;
    bool space; /* the refusal is about this node's checkpoint directory */
    char line[GM_JOB_MSG_MAX];
    struct gm_train_check chk;
};

static void precheck_work(uv_work_t *req)
{
    struct precheck *pc = req->data;
    struct gm_job job;
    uint64_t need, avail;

    gm_log_clear_last_error();
    pc->err = gm_job_parse(pc->text, pc->len, pc->origin, &job);
    if (pc->err < 0)
        goto out;
    job.optim.global_batch = pc->global_batch; /* fixed at submit */
    job.optim.batch = 0;
    pc->err = gm_trainer_check(&job, pc->world, &pc->chk);
    if (pc->err == 0 && job.checkpoint_every > 0) {
        pc->err = gm_trainer_ckpt_space(pc->ckdir, pc->chk.ckpt_bytes, job.checkpoint_keep, &need,
                                        &avail);
        pc->space = pc->err < 0;
    }
    gm_job_free(&job);
out:
    if (pc->err < 0)
        snprintf(pc->line, sizeof(pc->line), "%s",
                 gm_log_last_error()[0] ? gm_log_last_error() : gm_strerror(pc->err));
}

static void precheck_done(uv_work_t *req, int status)
{
    struct precheck *pc = req->data;
    struct gm_jobs *j = pc->j;
    struct job *jb = jobs_find(j, pc->id);

    j->prechecks--;
    if (jb != NULL && jb == j->cur && jb->coord && jb->state == J_CHECKING) {
        if (status < 0 && pc->err == 0) {
            pc->err = status;
            snprintf(pc->line, sizeof(pc->line), "%s", uv_strerror(status));
        }
        if (pc->err < 0 && pc->space)
            jobs_refuse(j, jb, "member %s (the coordinator): %s", j->env.node, pc->line);
        else if (pc->err < 0)
            jobs_refuse(j, jb, "%s", pc->line);
        else {
            jb->prechecked = true;
            jb->ckpt_bytes = pc->chk.ckpt_bytes;
            gm_info("event=job-prechecked job=%s train_samples=%zu global_batch=%d "
                    "checkpoint_bytes=%llu",
                    jb->id, pc->chk.n_train, pc->chk.global_batch,
                    (unsigned long long)pc->chk.ckpt_bytes);
            jobs_maybe_start(j, jb);
        }
    }
    free(pc->text);
    free(pc);
}

static int precheck_start(struct gm_jobs *j, struct job *jb, int world)
{
    struct precheck *pc = calloc(1, sizeof(*pc));
    char key[GM_JOBS_CKPT_KEY_LEN + 1];
    int err;

    if (pc == NULL || (pc->text = malloc(jb->job.text_len + 1)) == NULL) {
        free(pc);
        return -ENOMEM;
    }
    memcpy(pc->text, jb->job.text, jb->job.text_len);
    pc->text[jb->job.text_len] = '\0';
    pc->len = jb->job.text_len;
    snprintf(pc->origin, sizeof(pc->origin), "%s", jb->origin);
    snprintf(pc->id, sizeof(pc->id), "%s", jb->id);
    pc->global_batch = jb->job.optim.global_batch;
    pc->world = world;
    gm_jobs_ckpt_key(&jb->job, key);
    snprintf(pc->ckdir, sizeof(pc->ckdir), "%s/checkpoints/%s", j->env.state_dir, key);
    pc->j = j;
    pc->req.data = pc;
    if ((err = uv_queue_work(j->env.loop, &pc->req, precheck_work, precheck_done)) < 0) {
        free(pc->text);
        free(pc);
        return err;
    }
    j->prechecks++;
    return 0;
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
        resolve_auto(j, jb, up, n);
    jb->state = J_CHECKING;
    jobs_record(j, jb, J_CHECKING);
    if (j->env.record_spec != NULL)
        j->env.record_spec(j->env.agent, jb->id, text, len, g);
    if (given_id == NULL)
        note_prior(j, jb);
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
    if ((err = precheck_start(j, jb, (int)n + 1)) < 0) {
        jobs_refuse(j, jb, "cannot check the job: %s", gm_strerror(err));
        return 0;
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
