/*
 * agent/jobs/job_control.c - the job room (agent/jobs/job.h), control commands: submit, jobs,
 * cancel and the status view of the current job (JSON for the control socket). Private state and
 * shared helpers: agent/jobs/job_int.h.  Loop thread only.
 */
#include "agent/jobs/job_int.h"
#include "train/gradsync.h"

json_t *gm_jobs_ctl_submit(struct gm_jobs *j, json_t *req)
{
    json_t *t = json_object_get(req, "text");
    const char *text = json_string_value(t);
    const char *origin = json_string_value(json_object_get(req, "origin"));
    char coord[NODE_LEN], msg[GM_JOB_MSG_MAX] = "", id[GM_JOB_ID_LEN + 1] = "";
    char why[200] = "", line[260];
    int err;

    if (text == NULL)
        return jobs_ctl_error(-EINVAL, "bad request: no job text");
    gm_jobs_coordinator(j, coord, why, sizeof(why));
    if (coord[0] == '\0') {
        snprintf(line, sizeof(line), "no chief, so no training: %s", why);
        return jobs_ctl_error(-EAGAIN, line);
    }
    if (strcmp(coord, j->env.node) == 0)
        err = jobs_coord_submit(j, text, json_string_length(t), origin, NULL, id, msg, sizeof(msg));
    else
        err =
            jobs_member_submit(j, coord, text, json_string_length(t), origin, id, msg, sizeof(msg));
    if (err < 0)
        return jobs_ctl_error(err, msg);
    /* the world at submit: the coordinator's participants, or a member's own view */
    int world = j->cur != NULL && j->cur->coord ? (int)j->cur->nparts + 1
                                                : (int)j->env.members_up(j->env.agent, NULL, 0) + 1;
    return json_pack("{s:s,s:s,s:s,s:i}", "id", id, "state", "checking", "coordinator", coord,
                     "world", world);
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(round(v * 100.0) / 100.0) : json_null();
}

static json_t *job_json(struct gm_jobs *j, struct job *jb)
{
    struct gm_rank_progress p = jb->last;
    json_t *o, *links = json_array();
    double wall;
    char pbuf[GM_JOB_MSG_MAX + 64];
    const char *paused = jobs_paused_why(j, jb, pbuf, sizeof(pbuf)); /* shown as state "paused" */

    if (jb->rank != NULL)
        gm_rank_get_progress(jb->rank, &p);
    wall = (double)((jb->t_end ? jb->t_end : gm_time_mono_ns()) - jb->t_submit) * 1e-9;
    o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:i,s:I}", "id", jb->id, "name", jb->job.name,
                  "state", paused != NULL ? "paused" : jobs_state_name(jb->state), "coordinator",
                  jb->coordinator, "codec", gm_job_codec_name(jb->job.comm.codec), "step",
                  (json_int_t)(jb->rank != NULL ? p.step
                               : jb->steps      ? jb->steps
                                                : p.step),
                  "total_steps", (json_int_t)p.total_steps, "epoch", p.epoch + 1, "world",
                  jb->rank != NULL && p.world > 0 ? p.world : (int)jb->world, "generation",
                  (json_int_t)(jb->gen & 0xffff));
    if (o == NULL) {
        json_decref(links);
        return NULL;
    }
    json_object_set_new(o, "loss", num(p.loss));
    json_object_set_new(o, "samples_per_s",
                        num(jb->rank != NULL ? p.samples_per_s : jb->samples_per_s));
    json_object_set_new(o, "hash_checks", json_integer((json_int_t)p.hash_checks));
    json_object_set_new(o, "params_sha256",
                        p.params_sha256[0] ? json_string(p.params_sha256) : json_null());
    json_object_set_new(o, "wall_s", num(wall));
    json_object_set_new(o, "codec_auto", json_boolean(jb->codec_auto));
    json_object_set_new(o, "codec_reason",
                        jb->codec_reason[0] ? json_string(jb->codec_reason) : json_null());
    /* DiLoCo's H as the ranks run it: auto's pick cut to the run's rounds (the same pure
     * gm_gradsync_diloco_plan every rank applies to the same total steps) */
    if (gm_job_codec_is_diloco(jb->job.comm.codec)) {
        struct gm_gradsync_strategy s;
        long h = jb->job.comm.local_steps;
        if (p.total_steps > 0 && gm_gradsync_strategy_of(jb->job.comm.codec, &jb->job, &s) == 0)
            h = gm_gradsync_diloco_h(&s, p.total_steps);
        json_object_set_new(o, "local_steps", json_integer(h));
    } else {
        json_object_set_new(o, "local_steps", json_null());
    }
    json_object_set_new(o, "paused_reason", paused != NULL ? json_string(paused) : json_null());
    /* each rank's part of the global batch ([job] shares) and its compute speed (samples per
     * second of compute: the coordinator knows every rank's with shares = auto, a member its
     * own), in rank order of the current group */
    {
        static const char *const modes[] = {"equal", "fixed", "auto"};
        const int w = (int)jb->world;
        int counts[GM_JOB_SHARES_MAX];
        json_t *sh = json_array();
        double sps[GM_JOB_SHARES_MAX] = {0}, fsps[GM_JOB_SHARES_MAX] = {0};
        double over[GM_JOB_SHARES_MAX] = {0};
        bool models = false;
        if (jb->coord && w >= 1 && w <= GM_JOB_SHARES_MAX) { /* the coordinator's view */
            if (jb->rank != NULL && p.share > 0)
                jb->obs[0] = (struct gm_autoshare_obs){p.share, p.step_s, p.coll_s, p.stall_s};
            (void)gm_autoshare_speeds(jb->obs, w, sps);
            models = jb->job.shares.mode == GM_JOB_SHARES_AUTO &&
                     jobs_shares_models(jb, NULL, fsps, over) == w;
        }
        if (w >= 1 && w <= GM_JOB_SHARES_MAX && jb->ranks != NULL &&
            jb->job.optim.global_batch >= w) {
            if (jb->nshares == w)
                memcpy(counts, jb->shares, sizeof(int) * (size_t)w);
            else
                gm_job_split(&jb->job, jb->job.optim.global_batch, w, counts);
            for (int i = 0; i < w; i++) {
                json_array_append_new(
                    sh,
                    json_pack("{s:s,s:i,s:o,s:o,s:o}", "node", jb->ranks[i], "samples", counts[i],
                              "samples_per_s", sps[i] > 0 ? num(sps[i]) : json_null(),
                              "fit_samples_per_s", models ? num(fsps[i]) : json_null(),
                              "fit_overhead_s", models ? num(over[i]) : json_null()));
            }
        }
        json_object_set_new(o, "shares", sh);
        /* what shares = auto would choose now (the tick's own balance, of the models above;
         * it switches to them only past its hysteresis) */
        json_t *would = json_null();
        if (models && jb->job.optim.global_batch >= w) {
            int bal[GM_JOB_SHARES_MAX];
            gm_autoshare_balance(fsps, over, w, jb->job.optim.global_batch, bal);
            would = json_array();
            for (int i = 0; i < w; i++)
                json_array_append_new(would, json_integer(bal[i]));
        }
        json_object_set_new(o, "shares_balanced", would);
        json_t *spares = json_array();
        for (size_t i = 0; jb->coord && i < jb->nparts; i++)
            if (jb->parts[i].spare)
                json_array_append_new(spares, json_pack("{s:s,s:s}", "node", jb->parts[i].node,
                                                        "reason", jb->parts[i].spare_why));
        json_object_set_new(o, "spares", spares);
        json_object_set_new(o, "shares_mode", json_string(modes[jb->job.shares.mode]));
        json_object_set_new(o, "global_batch", json_integer(jb->job.optim.global_batch));
        json_object_set_new(o, "shares_reason",
                            jb->shares_reason[0] ? json_string(jb->shares_reason) : json_null());
    }
    /* the nodes of the current group, rank order: a follower sees members leave and come back */
    {
        json_t *ranks = json_array();
        for (size_t i = 0; jb->ranks != NULL && i < (size_t)jb->world; i++)
            json_array_append_new(ranks, json_string(jb->ranks[i]));
        json_object_set_new(o, "ranks", ranks);
    }
    /* kept once the rank is gone (p is then its last progress): a job that resumed and ended
     * between two polls of `submit --follow` still says where it went on from */
    json_object_set_new(o, "resumed_from",
                        p.resumed_step >= 0 && p.resumed_from[0] != '\0'
                            ? json_pack("{s:I,s:s}", "step", (json_int_t)p.resumed_step,
                                        "checkpoint", p.resumed_from)
                            : json_null());
    /* a run extended (or shortened) by [job] epochs: the epochs of the run it goes on from */
    if (p.resumed_step >= 0 && p.resumed_from[0] != '\0' && p.resumed_total_steps > 0 &&
        p.total_steps > 0 && p.resumed_total_steps != p.total_steps && jb->job.epochs > 0) {
        long spe = p.total_steps / jb->job.epochs;
        json_t *res = json_object_get(o, "resumed_from");
        json_object_set_new(res, "from_epochs",
                            json_integer(spe > 0 ? (json_int_t)(p.resumed_total_steps / spe) : 0));
        json_object_set_new(res, "epochs", json_integer(jb->job.epochs));
    }
    json_object_set_new(o, "error", jb->error[0] ? json_string(jb->error) : json_null());
    json_object_set_new(o, "note", jb->note[0] ? json_string(jb->note) : json_null());
    json_object_set_new(o, "weights", jb->weights[0] ? json_string(jb->weights) : json_null());
    /* bytes per peer node over the job's life: retired groups plus the current one */
    struct gm_xport *x = jb->rank != NULL ? gm_rank_xport(jb->rank) : NULL;
    for (size_t i = 0; x != NULL && i < jb->world && jb->ranks != NULL; i++) {
        struct gm_xport_stats st;
        if (strcmp(jb->ranks[i], j->env.node) == 0)
            continue;
        gm_xport_stats(x, (int)i, &st);
        if (jobs_acc_of(jb, jb->ranks[i], true) == NULL)
            continue;
        struct linkacc *a = jobs_acc_of(jb, jb->ranks[i], false);
        json_array_append_new(links,
                              json_pack("{s:s,s:I,s:I}", "node", a->node, "bytes_sent",
                                        (json_int_t)(a->sent + st.bytes_sent), "bytes_received",
                                        (json_int_t)(a->recv + st.bytes_recv)));
    }
    for (size_t i = 0; i < jb->nacc; i++) { /* peers not in the current group */
        if (x != NULL && jobs_rank_of(jb, jb->acc[i].node) >= 0)
            continue;
        json_array_append_new(links, json_pack("{s:s,s:I,s:I}", "node", jb->acc[i].node,
                                               "bytes_sent", (json_int_t)jb->acc[i].sent,
                                               "bytes_received", (json_int_t)jb->acc[i].recv));
    }
    json_object_set_new(o, "links", links);
    if (jb->state == J_DONE || jb->state == J_CANCELLED) {
        json_t *sum = json_pack(
            "{s:o,s:o,s:i,s:I,s:o,s:o,s:I,s:s,s:o}", "test_accuracy", num(jb->test_accuracy),
            "test_loss", num(jb->test_loss), "epochs", jb->epochs, "steps", (json_int_t)jb->steps,
            "samples_per_s", num(jb->samples_per_s), "wall_s", num(jb->wall_s), "bytes_sent",
            (json_int_t)jb->bytes_sent, "codec", gm_job_codec_name(jb->job.comm.codec),
            "checkpoint", jb->weights[0] ? json_string(jb->weights) : json_null());
        json_object_set_new(o, "summary", sum);
    } else {
        json_object_set_new(o, "summary", json_null());
    }
    return o;
}

static bool final_state(const char *st)
{
    return strcmp(st, "done") == 0 || strcmp(st, "cancelled") == 0 || strcmp(st, "failed") == 0 ||
           strcmp(st, "refused") == 0;
}

/* The replicated record of a job that ended is the truth about how it ended, on every node:
 * o (this node's view of the job) takes its state and reason. */
static void apply_record(json_t *o, const struct gm_jobs_record *r)
{
    if (!final_state(r->state))
        return;
    json_object_set_new(o, "state", json_string(r->state));
    json_object_set_new(o, "paused_reason", json_null());
    if (strcmp(r->state, "done") != 0)
        json_object_set_new(o, "error", r->error[0] ? json_string(r->error) : json_null());
    json_object_set_new(o, "recorded_term", json_integer((json_int_t)r->term));
}

/* A job this node has no record of (it was not a member, or it restarted since), from the
 * replicated state: what every node knows of it. */
static json_t *record_json(const struct gm_jobs_record *r)
{
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:n,s:I,s:i,s:i,s:n,s:n,s:n,s:o,s:n,s:I}", "id", r->id, "name", r->name,
        "state", r->state, "coordinator", "step", (json_int_t)r->step, "epoch", 0, "world", 0,
        "loss", "samples_per_s", "paused_reason", "error",
        r->error[0] && strcmp(r->state, "done") != 0 ? json_string(r->error) : json_null(),
        "weights", "recorded_term", (json_int_t)r->term);

    if (o != NULL)
        json_object_set_new(o, "summary", json_null());
    return o;
}

/* jb's view, with its replicated record applied (marked seen), appended to a. */
static void list_add(struct gm_jobs *j, json_t *a, struct job *jb, const struct gm_jobs_record *rec,
                     long nrec, bool *seen)
{
    json_t *o = job_json(j, jb);

    for (long i = 0; o != NULL && i < nrec; i++)
        if (strcmp(rec[i].id, jb->id) == 0) {
            seen[i] = true;
            apply_record(o, &rec[i]);
        }
    json_array_append_new(a, o);
}

json_t *gm_jobs_ctl_list(struct gm_jobs *j)
{
    json_t *a = json_array();
    struct gm_jobs_record *rec = NULL;
    long nrec = -1;
    bool *seen = NULL;

    if (j->env.recorded != NULL && (rec = calloc(GM_JOBS_RECORDED_MAX, sizeof(*rec))) != NULL &&
        (seen = calloc(GM_JOBS_RECORDED_MAX, sizeof(*seen))) != NULL)
        nrec = j->env.recorded(j->env.agent, rec, GM_JOBS_RECORDED_MAX);
    if (j->cur != NULL)
        list_add(j, a, j->cur, rec, nrec, seen);
    for (struct job *jb = j->history; jb != NULL; jb = jb->next)
        list_add(j, a, jb, rec, nrec, seen);
    for (long i = nrec - 1; i >= 0; i--) /* newest first, as the history */
        if (!seen[i] && final_state(rec[i].state))
            json_array_append_new(a, record_json(&rec[i]));
    free(rec);
    free(seen);
    return json_pack("{s:o}", "jobs", a);
}

json_t *gm_jobs_status_json(struct gm_jobs *j)
{
    struct job *jb = j->cur != NULL ? j->cur : j->history;
    struct gm_jobs_record *rec = NULL;
    json_t *o = NULL;
    long nrec = -1;

    if (j->env.recorded != NULL && (rec = calloc(GM_JOBS_RECORDED_MAX, sizeof(*rec))) != NULL)
        nrec = j->env.recorded(j->env.agent, rec, GM_JOBS_RECORDED_MAX);
    if (jb != NULL) {
        o = job_json(j, jb);
        for (long i = 0; o != NULL && i < nrec; i++)
            if (strcmp(rec[i].id, jb->id) == 0)
                apply_record(o, &rec[i]);
    } else { /* none here: the newest the cluster recorded as ended */
        for (long i = nrec - 1; i >= 0 && o == NULL; i--)
            if (final_state(rec[i].state))
                o = record_json(&rec[i]);
    }
    free(rec);
    return o != NULL ? o : json_null();
}

json_t *gm_jobs_ctl_cancel(struct gm_jobs *j, json_t *req)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    struct job *jb = id != NULL ? jobs_find(j, id) : NULL;
    char msg[256];

    if (jb == NULL) {
        snprintf(msg, sizeof(msg), "no job %s here", id != NULL ? id : "(none given)");
        return jobs_ctl_error(-ENOENT, msg);
    }
    if (!jb->coord && jb == j->cur && !jb->stop_sent) {
        /* forwarded to the coordinator, as a submit typed here is; its JOB_END ends it here */
        struct gm_jobmsg m = {.gen = jb->gen};
        int err;
        snprintf(m.id, sizeof(m.id), "%s", jb->id);
        snprintf(m.event, sizeof(m.event), "cancel");
        snprintf(m.message, sizeof(m.message), "cancelled on %s", j->env.node);
        if ((err = jobs_send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m)) < 0) {
            snprintf(msg, sizeof(msg), "cannot reach the coordinator %s to cancel job %s: %s",
                     jb->coordinator, jb->id, gm_strerror(err));
            return jobs_ctl_error(err, msg);
        }
        gm_notice("event=job-cancel-forwarded job=%s coordinator=%s", jb->id, jb->coordinator);
        return json_pack("{s:s,s:s,s:s}", "id", jb->id, "state", "cancelling", "coordinator",
                         jb->coordinator);
    }
    if (jb != j->cur || jb->stop_sent) {
        snprintf(msg, sizeof(msg), "job %s is already %s", jb->id, jobs_state_name(jb->state));
        return jobs_ctl_error(-EALREADY, msg);
    }
    gm_notice("event=job-cancel job=%s", jb->id);
    jobs_end_job(j, jb, J_CANCELLED, "cancelled by the user");
    return json_pack("{s:s,s:s}", "id", jb->id, "state", "cancelled");
}
