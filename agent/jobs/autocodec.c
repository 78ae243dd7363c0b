/*
 * agent/jobs/autocodec.c - codec = auto on the coordinator (see autocodec.h).
 */
#include "agent/jobs/autocodec.h"

#include <cblas.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/nn/model.h"

#define TIME_REPS 5
#define TIME_MIN_S 0.3     /* and at least this long: longer than a CFS quota period (100 ms) */
#define TIME_BATCH_MAX 256 /* larger per-rank batches: timed at this, scaled linearly */

int gm_autocodec_model(const struct gm_job *job, int batch, struct gm_model **m, size_t *per)
{
    struct gm_model_spec ms;
    int c, h, w, err;

    gm_job_input_shape(job, &c, &h, &w);
    if ((err = gm_job_model_spec(job, c, h, w, 10, &ms)) < 0)
        return err;
    *per = (size_t)ms.in_c * (size_t)ms.in_h * (size_t)ms.in_w;
    return gm_model_new(&ms, batch, m);
}

int gm_autocodec_resolve(struct gm_job *job, int world, const struct gm_coll_link *links,
                         const int *islands, struct gm_gradsync_auto_out *out, char *reason,
                         size_t cap)
{
    struct gm_gradsync_auto_out o;
    struct gm_coll_link *l = NULL, slow = {0};
    struct gm_model *m = NULL;
    size_t per = 0, known = 0;
    int batch, timed, err;
    double compute;

    if (out == NULL)
        out = &o;
    memset(out, 0, sizeof(*out));
    reason[0] = '\0';
    if (job->comm.codec != GM_JOB_CODEC_AUTO)
        return 0;
    job->comm.codec = GM_JOB_CODEC_FP32; /* whatever happens below, never auto past here */
    if (world < 2) {
        snprintf(reason, cap, "fp32: one rank, nothing crosses a link");
        return 0;
    }
    for (int i = 0; links != NULL && i < world * world; i++)
        if (i / world != i % world && links[i].bytes_per_s > 0) {
            if (known++ == 0 || links[i].bytes_per_s < slow.bytes_per_s)
                slow.bytes_per_s = links[i].bytes_per_s;
            if (links[i].alpha_s > slow.alpha_s)
                slow.alpha_s = links[i].alpha_s;
        }
    if (known == 0) {
        snprintf(reason, cap, "fp32: no link between the ranks is measured yet");
        return 0;
    }
    l = calloc((size_t)world * (size_t)world, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    for (int i = 0; i < world * world; i++)
        l[i] = i / world == i % world     ? (struct gm_coll_link){0, 1e15}
               : links[i].bytes_per_s > 0 ? links[i]
                                          : slow;
    batch = job->optim.global_batch / world;
    if (batch < 1)
        batch = 1;
    timed = batch < TIME_BATCH_MAX ? batch : TIME_BATCH_MAX;
    if ((err = gm_autocodec_model(job, timed, &m, &per)) < 0) {
        snprintf(reason, cap, "fp32: the model cannot be built to time it (%s)", gm_strerror(err));
        goto out;
    }
    openblas_set_num_threads(job->threads);
    compute = gm_gradsync_time_compute(m, per, timed, TIME_REPS, TIME_MIN_S);
    if (compute <= 0) {
        err = (int)compute;
        snprintf(reason, cap, "fp32: timing the model failed (%s)", gm_strerror(err));
        goto out;
    }
    compute *= (double)batch / timed; /* a step's compute grows with its batch */
    {
        struct gm_gradsync_auto_in in = {.m = m,
                                         .world = world,
                                         .links = l,
                                         .compute_s = compute,
                                         .job = job,
                                         .groups = islands};
        if ((err = gm_gradsync_auto_choose(&in, out)) < 0) {
            snprintf(reason, cap, "fp32: no choice (%s)", gm_strerror(err));
            goto out;
        }
    }
    job->comm.codec = out->pick.id;
    if (out->pick.kind == GM_GRADSYNC_KIND_DILOCO)
        job->comm.local_steps = (int)out->pick.local_steps;
    job->comm.auto_resolved = true;
    snprintf(reason, cap, "%s", out->reason);
    for (int i = 0; i < GM_GRADSYNC_AUTO_NCAND; i++) {
        char label[48];
        gm_gradsync_describe(&out->cand[i].s, label, sizeof(label));
        gm_info("event=codec-auto-candidate codec=\"%s\" comm_ms=%.3f step_ms=%.3f fits=%d", label,
                out->cand[i].comm_s * 1e3, out->cand[i].step_s * 1e3, out->cand[i].fits);
    }
out:
    gm_model_free(m);
    free(l);
    return err;
}

/* --- switching mid-run ------------------------------------------------------------------- */

#define LEAD_MIN 3
#define LEAD_MAX 50
#define FRAME_BYTES (256.0 * 1024) /* one TRAIN frame a control message may wait behind */

struct gm_autoswitch {
    struct gm_job job;        /* settings only (text not kept): the candidates' [comm] */
    struct gm_model *m;       /* owned: the job's model, for the estimates */
    double compute_s;         /* one step's compute, timed at submit */
    int world;                /* of the current group */
    struct gm_coll_link *fit; /* owned, world: each rank's newest fit */
    uint64_t *ops;            /* owned, world: its samples (0: none yet) */
    double *sync;             /* owned, world: members' DiLoCo syncs (0: none; [0] unused) */
    double width_sync[2];     /* the group's last measured sync of 16-bit [0] and 8-bit [1]
                               * deltas (the longest rank's; 0: not run in this group) */
    uint64_t ops_decided;     /* the sum of ops at the last decision */
    double *wait_s;           /* owned, world: each rank's wait for the collective a step */
    double *cpu_s;            /* owned, world: the compute its collective took a step */
    bool *costed;             /* owned, world: rank r reported those */
    bool one_island;          /* every pair is lan: priced on the ranks' measurements alone */
    struct gm_gradsync_switch hyst;
    uint32_t seq;   /* switches announced */
    bool pending;   /* seq announced, answers missing */
    bool *answered; /* owned, world */
};

int gm_autoswitch_new(const struct gm_job *job, double compute_s, struct gm_autoswitch **out)
{
    struct gm_autoswitch *a;
    size_t per;
    int err;

    *out = NULL;
    if (!(compute_s >= 0) || !isfinite(compute_s))
        return -EINVAL;
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->job = *job;
    a->job.text = NULL; /* not owned here: only the settings are read */
    a->job.text_len = 0;
    a->compute_s = compute_s;
    if ((err = gm_autocodec_model(job, 1, &a->m, &per)) < 0) {
        free(a);
        return err;
    }
    *out = a;
    return 0;
}

void gm_autoswitch_free(struct gm_autoswitch *a)
{
    if (a == NULL)
        return;
    gm_model_free(a->m);
    free(a->fit);
    free(a->ops);
    free(a->sync);
    free(a->answered);
    free(a->wait_s);
    free(a->cpu_s);
    free(a->costed);
    free(a);
}

void gm_autoswitch_group(struct gm_autoswitch *a, int world, long step)
{
    free(a->fit);
    free(a->ops);
    free(a->sync);
    free(a->answered);
    free(a->wait_s);
    free(a->cpu_s);
    free(a->costed);
    a->world = world > 0 ? world : 1;
    a->width_sync[0] = a->width_sync[1] = 0; /* other links, other syncs */
    a->fit = calloc((size_t)a->world, sizeof(*a->fit));
    a->ops = calloc((size_t)a->world, sizeof(*a->ops));
    a->sync = calloc((size_t)a->world, sizeof(*a->sync));
    a->answered = calloc((size_t)a->world, sizeof(*a->answered));
    a->wait_s = calloc((size_t)a->world, sizeof(*a->wait_s));
    a->cpu_s = calloc((size_t)a->world, sizeof(*a->cpu_s));
    a->costed = calloc((size_t)a->world, sizeof(*a->costed));
    if (a->fit == NULL || a->ops == NULL || a->sync == NULL || a->answered == NULL ||
        a->wait_s == NULL || a->cpu_s == NULL || a->costed == NULL)
        a->world = 0; /* out of memory: no decisions in this group */
    a->ops_decided = 0;
    a->pending = false;
    gm_gradsync_switch_quiet(&a->hyst, step);
}

void gm_autoswitch_fit(struct gm_autoswitch *a, int r, const struct gm_coll_link *fit, uint64_t ops)
{
    if (r < 0 || r >= a->world || !(fit->bytes_per_s > 0) || !(fit->alpha_s >= 0))
        return;
    a->fit[r] = *fit;
    a->ops[r] = ops;
}

void gm_autoswitch_sync(struct gm_autoswitch *a, int r, double sync_s)
{
    if (r >= 1 && r < a->world && sync_s >= 0 && isfinite(sync_s))
        a->sync[r] = sync_s;
}

void gm_autoswitch_cost(struct gm_autoswitch *a, int r, double wait_s, double cpu_s)
{
    if (r < 0 || r >= a->world || !(wait_s >= 0) || !(cpu_s >= 0) || !isfinite(wait_s) ||
        !isfinite(cpu_s))
        return;
    a->wait_s[r] = wait_s;
    a->cpu_s[r] = cpu_s;
    a->costed[r] = true;
}

void gm_autoswitch_one_island(struct gm_autoswitch *a, bool one)
{
    a->one_island = one;
}

bool gm_autoswitch_pending(const struct gm_autoswitch *a, uint32_t *seq)
{
    *seq = a->seq;
    return a->pending;
}

int gm_autoswitch_answer(struct gm_autoswitch *a, int r, uint32_t seq, bool ok)
{
    if (!a->pending || seq != a->seq || r < 1 || r >= a->world)
        return 0;
    if (!ok) {
        a->pending = false;
        return -1;
    }
    a->answered[r] = true;
    for (int i = 1; i < a->world; i++)
        if (!a->answered[i])
            return 0;
    a->pending = false;
    return 1;
}

int gm_autoswitch_decide(struct gm_autoswitch *a, const struct gm_gradsync_strategy *cur,
                         const struct gm_coll_link *links, const int *islands, long step,
                         double compute_s, double sync_s, long total_steps,
                         struct gm_autoswitch_decision *d)
{
    const int w = a->world;
    struct gm_coll_link slow = {0}, hop, *l;
    struct gm_gradsync_auto_out o;
    uint64_t ops = 0;
    double worst = -1, taken = 0, wait = -1, meas;
    double compute = compute_s > 0 ? compute_s : a->compute_s;
    int err, pick, lead;

    memset(d, 0, sizeof(*d));
    if (w < 2 || a->pending)
        return 0;
    /* the measured part (autocodec.h, "Measured cost"): the most compute any rank's collective
     * took from its trainer; in one island also the least any rank waited for it (the slowest
     * rank waits least: what it waits is the collective's, not another rank's lateness) */
    for (int r = 0; r < w; r++) {
        if (!a->costed[r])
            continue;
        if (a->cpu_s[r] > taken)
            taken = a->cpu_s[r];
        if (wait < 0 || a->wait_s[r] < wait)
            wait = a->wait_s[r];
    }
    meas = taken + (a->one_island && wait > 0 ? wait : 0);
    /* rank 0's measured compute holds what its collective took from it: the trainer's own
     * compute is the rest (never under half: a measure gone wrong does not price the step
     * at nothing) */
    if (compute_s > 0 && a->costed[0])
        compute =
            compute_s - a->cpu_s[0] > 0.5 * compute_s ? compute_s - a->cpu_s[0] : 0.5 * compute_s;
    if (!(compute > 0))
        return 0; /* nothing timed at submit, no step measured yet */
    for (int r = 0; r < w; r++) {
        /* the slowest rank's fit: the one predicting the longest fp32 all-reduce */
        double t;
        ops += a->ops[r];
        if (a->ops[r] == 0)
            continue;
        t = a->fit[r].alpha_s + (double)gm_model_num_trainable(a->m) * 4 / a->fit[r].bytes_per_s;
        if (t > worst) {
            worst = t;
            slow = a->fit[r];
        }
    }
    if (worst < 0 || ops == a->ops_decided)
        return 0;                             /* nothing new since the last decision */
    const double sync0 = sync_s;              /* rank 0's, for the log */
    for (int r = 1; sync_s > 0 && r < w; r++) /* the sync's critical path: the longest */
        if (a->sync[r] > sync_s)
            sync_s = a->sync[r];
    a->ops_decided = ops;
    if (cur->kind == GM_GRADSYNC_KIND_DILOCO && sync_s > 0 && isfinite(sync_s))
        a->width_sync[cur->codec == GM_CODEC_Q8] = sync_s;
    gm_gradsync_ab_hop(&slow, w, &hop);
    l = calloc((size_t)w * (size_t)w, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    for (int i = 0; i < w * w; i++)
        l[i] = i / w == i % w || a->one_island             ? (struct gm_coll_link){0, 1e15}
               : links != NULL && links[i].bytes_per_s > 0 ? links[i]
                                                           : hop;
    {
        struct gm_gradsync_auto_in in = {.m = a->m,
                                         .world = w,
                                         .links = l,
                                         .compute_s = compute,
                                         .job = &a->job,
                                         .groups = islands,
                                         /* rank 0's syncs, while DiLoCo runs: what H is
                                          * sized from then, not the fitted links */
                                         .sync_s =
                                             cur->kind == GM_GRADSYNC_KIND_DILOCO ? sync_s : 0,
                                         .sync_codec = cur->codec,
                                         .other_sync_s =
                                             cur->kind == GM_GRADSYNC_KIND_DILOCO
                                                 ? a->width_sync[cur->codec != GM_CODEC_Q8]
                                                 : 0,
                                         .meas_s = meas,
                                         .meas_of = cur,
                                         .dense_only = a->one_island};
        err = gm_gradsync_auto_choose(&in, &o);
    }
    free(l);
    if (err < 0)
        return err;
    {
        /* H as the ranks would run it (8 rounds in the run at least): a re-sizing that the
         * cap undoes is none */
        struct gm_gradsync_strategy c = *cur;
        c.cap_h = o.pick.cap_h = true; /* as every member takes a switch (job_codec.c) */
        c.local_steps = gm_gradsync_diloco_h(&c, total_steps);
        o.pick.local_steps = gm_gradsync_diloco_h(&o.pick, total_steps);
        a->hyst.total_steps = total_steps; /* the lags as the ranks run them */
        pick = gm_gradsync_switch_decide(&a->hyst, &o, &c, compute, 0, step);
    }
    if (pick < 0 || gm_gradsync_auto_index(&o.pick) != pick)
        return 0;
    {
        const struct gm_gradsync_auto_cand *c = &o.cand[gm_gradsync_auto_index(cur)];
        double msg_s = 2 * hop.alpha_s + FRAME_BYTES / hop.bytes_per_s;
        double leadf = 2 + ceil(msg_s / (c->step_s > 0 ? c->step_s : compute));
        lead = leadf < LEAD_MIN ? LEAD_MIN : leadf > LEAD_MAX ? LEAD_MAX : (int)leadf;
        char from[48], to[48];
        d->to = o.pick;
        d->to.algo = cur->algo;
        d->lead = lead;
        d->step = step + lead;
        d->seq = ++a->seq;
        gm_gradsync_describe(cur, from, sizeof(from));
        gm_gradsync_describe(&d->to, to, sizeof(to));
        if (cur->kind == GM_GRADSYNC_KIND_DILOCO && d->to.kind == GM_GRADSYNC_KIND_DILOCO)
            snprintf(d->why, sizeof(d->why),
                     "%s: a sync takes %.1f ms (%s; rank 0's %.1f ms), its lag of %u steps of "
                     "%.2f ms covers %.1f ms; %s's lag covered %.1f ms",
                     to, o.sync_s * 1e3,
                     sync_s <= 0                 ? "the fitted link"
                     : d->to.codec == cur->codec ? "measured"
                     : o.sync_s == a->width_sync[d->to.codec == GM_CODEC_Q8]
                         ? "measured when it last ran"
                         : "measured at the other width, scaled",
                     sync0 * 1e3, gm_gradsync_run_lag(&d->to, total_steps), compute * 1e3,
                     gm_gradsync_run_lag(&d->to, total_steps) * compute * 1e3, from,
                     gm_gradsync_run_lag(cur, total_steps) * compute * 1e3);
        else if (a->one_island)
            snprintf(d->why, sizeof(d->why),
                     "%s: predicted %.2f ms of communication per %.2f ms step of compute, as "
                     "measured on the ranks of one LAN island (%s: %.2f ms, of it %.2f ms of "
                     "compute its CPU work took from the trainer), scaled by the bytes",
                     to, o.cand[pick].comm_s * 1e3, compute * 1e3, from, c->comm_s * 1e3,
                     taken * 1e3);
        else
            snprintf(d->why, sizeof(d->why),
                     "%s: predicted %.2f ms of communication per %.2f ms step of compute on the "
                     "fitted link (%.3f ms, %.2f Mbit/s a hop) and %.2f ms of compute measured "
                     "taken by the collective's CPU work; %s would take %.2f ms",
                     to, o.cand[pick].comm_s * 1e3, compute * 1e3, hop.alpha_s * 1e3,
                     hop.bytes_per_s * 8e-6, o.cand[pick].meas_s * 1e3, from, c->comm_s * 1e3);
    }
    a->pending = true;
    memset(a->answered, 0, (size_t)w * sizeof(*a->answered));
    gm_gradsync_switch_quiet(&a->hyst, d->step);
    if (d->to.kind == GM_GRADSYNC_KIND_DILOCO && d->to.local_steps >= 2) {
        /* the switch waits for the running round's end (up to H steps), and the next
         * decision for two syncs of the new H: rank 0's measured sync is then its own */
        long h0 = cur->kind == GM_GRADSYNC_KIND_DILOCO ? (long)cur->local_steps : 0;
        long h1 = (long)d->to.local_steps;
        a->hyst.quiet_until =
            d->step + h0 + 2 * h1 + (long)gm_gradsync_diloco_lag(d->to.local_steps);
    }
    return 1;
}
