/*
 * agent/autocodec.c - codec = auto on the coordinator (see autocodec.h).
 */
#include "agent/autocodec.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/nn/model.h"

#define TIME_REPS 5

int gm_autocodec_parse(const char *name, enum gm_job_codec *out)
{
    static const enum gm_job_codec all[] = {GM_JOB_CODEC_FP32, GM_JOB_CODEC_FP16,
                                            GM_JOB_CODEC_POWERSGD, GM_JOB_CODEC_DILOCO};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(name, gm_job_codec_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -EINVAL;
}

/* The job's model with the input shape its data kind implies (see the header). */
static int job_model(const struct gm_job *job, int batch, struct gm_model **m, size_t *per)
{
    struct gm_model_spec ms = {.name = gm_job_model_name(job->model), .classes = 10};

    switch (job->data.kind) {
    case GM_JOB_DATA_KIND_CIFAR10:
        ms.in_c = 3, ms.in_h = ms.in_w = 32;
        break;
    case GM_JOB_DATA_KIND_FOLDER:
        ms.in_c = job->data.channels;
        ms.in_h = ms.in_w = job->data.image_size > 0 ? job->data.image_size : 32;
        break;
    default:
        ms.in_c = 1, ms.in_h = ms.in_w = 28;
        break;
    }
    ms.nhidden = job->n_hidden < GM_MODEL_MAX_HIDDEN ? job->n_hidden : GM_MODEL_MAX_HIDDEN;
    for (int i = 0; i < ms.nhidden; i++)
        ms.hidden[i] = job->hidden[i];
    ms.dropout = (float)job->dropout;
    ms.device = GM_DEVICE_CPU;
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
    int batch, err;
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
    if ((err = job_model(job, batch, &m, &per)) < 0) {
        snprintf(reason, cap, "fp32: the model cannot be built to time it (%s)", gm_strerror(err));
        goto out;
    }
    openblas_set_num_threads(job->threads);
    compute = gm_gradsync_time_compute(m, per, batch, TIME_REPS);
    if (compute <= 0) {
        err = (int)compute;
        snprintf(reason, cap, "fp32: timing the model failed (%s)", gm_strerror(err));
        goto out;
    }
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
    if ((err = gm_autocodec_parse(out->pick.name, &job->comm.codec)) < 0)
        goto out;
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
