/* agent/jobs/shareprobe.c - shares = auto's speed probe on one rank (see shareprobe.h). */
#include "agent/jobs/shareprobe.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/jobs/autocodec.h"
#include "common/time.h"
#include "train/kernels/cuda.h"
#include "train/nn/device.h"
#include "train/nn/tensor.h"
#include "train/nn/model.h"

/* One forward and backward pass of n samples (the inputs and labels already there). */
static int pass(struct gm_model *m, int n, const int32_t *labels, uint64_t seed)
{
    int err = gm_model_forward(m, n, 1, seed);

    if (err < 0)
        return err;
    (void)gm_model_loss(m, n, labels, NULL);
    return gm_model_backward(m, n);
}

int gm_shareprobe_run(const struct gm_job *job, int world, struct gm_shareprobe *out, char *why,
                      size_t cap)
{
    const uint64_t t_start = gm_time_mono_ns();
    const int g = job->optim.global_batch;
    struct gm_model *m = NULL;
    int32_t *labels = NULL;
    char dwhy[320];
    size_t per = 0;
    int n0, n1, err;

    memset(out, 0, sizeof(*out));
    why[0] = '\0';
    if (world < 1 || g < world) {
        snprintf(why, cap, "global batch %d for %d ranks", g, world);
        return -EINVAL;
    }
    if (job->device.want != GM_DEVICE_WANT_CPU && gm_device_available(GM_DEVICE_CUDA) &&
        gm_cuda_device_count(dwhy, sizeof(dwhy)) >= 1) {
        snprintf(why, cap, "the rank trains on a GPU here: a CPU probe would not time it");
        return -ENOTSUP;
    }
    n0 = (g + world - 1) / world;
    if ((err = gm_autocodec_model(job, n0, &m, &per)) < 0) {
        snprintf(why, cap, "the model cannot be built (%s)", gm_strerror(err));
        return err;
    }
    openblas_set_num_threads(job->threads > 0 ? job->threads : 1);
    labels = malloc((size_t)n0 * sizeof(*labels));
    if (labels == NULL) {
        err = -ENOMEM;
        goto out;
    }
    {
        float *x = gm_model_input(m);
        uint64_t rng = 0x9e3779b97f4a7c15u;
        const int classes = gm_model_classes(m);
        for (size_t i = 0; i < per * (size_t)n0; i++) {
            rng = rng * 6364136223846793005u + 1442695040888963407u;
            x[i] = (float)(rng >> 40) / (float)(1u << 24);
        }
        for (int i = 0; i < n0; i++)
            labels[i] = (int32_t)((unsigned)i % (unsigned)(classes > 0 ? classes : 1));
    }
    /* the warm-up, at a small count: it says what a pass costs here, so that a slow machine
     * (a tenth of a core, a large model) times fewer samples instead of for seconds */
    {
        const int nw = n0 >= 8 ? n0 / 8 : 1;
        const uint64_t t = gm_time_mono_ns();
        if ((err = pass(m, nw, labels, 1)) < 0)
            goto out;
        const double per_sample = (double)(gm_time_mono_ns() - t) / 1e9 / nw;
        const double most = GM_SHAREPROBE_BUDGET_S / 6 / (per_sample > 0 ? per_sample : 1e-9);
        if (most < n0)
            n0 = most < 2 ? 2 : (int)most;
    }
    n1 = n0 / 2 > 0 ? n0 / 2 : 1;
    if (n0 <= n1)
        n0 = n1 + 1; /* n0 >= 2 here; the model holds the equal share or more */
    {
        /* blocks of passes at one count, n0 n1 n0 n1, each timed whole over BLOCK_S at least:
         * a quota's throttle lands in whichever pass runs out of it, so single passes, or
         * passes alternated one by one, read the cap unevenly between the two counts (at 0.5
         * core a pass of 64 read 4.47 ms and one of 32 4.17: no line); a block spans many
         * periods */
        const int ns[2] = {n0, n1};
        double t[2] = {0, 0};
        int reps[2] = {0, 0};
        uint64_t seed = 2;
        const uint64_t t0 = gm_time_mono_ns();
        for (int b = 0; b < 2 * GM_SHAREPROBE_BLOCKS; b++) {
            const int k = b % 2;
            const uint64_t a = gm_time_mono_ns();
            double wall = 0;
            do {
                if ((err = pass(m, ns[k], labels, seed++)) < 0)
                    goto out;
                reps[k]++;
                wall = (double)(gm_time_mono_ns() - a) / 1e9;
            } while (wall < GM_SHAREPROBE_BLOCK_S);
            t[k] += wall;
            if (b >= 1 && (double)(gm_time_mono_ns() - t0) / 1e9 >= GM_SHAREPROBE_BUDGET_S)
                break; /* both counts timed once at least */
        }
        for (int i = 0; i < 2; i++) {
            out->p.n[i] = ns[i];
            out->p.busy_s[i] = t[i] / reps[i];
        }
    }
    out->params = gm_model_num_trainable(m);
out:
    if (err < 0 && why[0] == '\0')
        snprintf(why, cap, "timing the model failed (%s)", gm_strerror(err));
    free(labels);
    gm_model_free(m);
    out->cost_s = (double)(gm_time_mono_ns() - t_start) / 1e9;
    return err;
}
