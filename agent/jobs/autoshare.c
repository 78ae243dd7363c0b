/* agent/jobs/autoshare.c - shares = auto's rule (see autoshare.h). */
#include "agent/jobs/autoshare.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int gm_autoshare_speeds(const struct gm_autoshare_obs *obs, int world, double *sps)
{
    double min_coll = INFINITY;
    int known = 0;

    for (int r = 0; r < world; r++)
        if (obs[r].samples > 0 && obs[r].step_s > 0 && obs[r].coll_s < min_coll)
            min_coll = obs[r].coll_s;
    for (int r = 0; r < world; r++) {
        double busy = obs[r].step_s - (obs[r].coll_s - min_coll);
        sps[r] = 0;
        if (obs[r].samples <= 0 || !(obs[r].step_s > 0) || !(busy > 0) || !isfinite(busy))
            continue;
        sps[r] = obs[r].samples / busy;
        known++;
    }
    return known;
}

int gm_autoshare_balance(const double *sps, int world, int g, int *counts)
{
    uint32_t w[GM_JOB_SHARES_MAX] = {0};
    double top = 0;
    int tiny = 0;

    for (int r = 0; r < world; r++)
        top = sps[r] > top ? sps[r] : top;
    for (int r = 0; r < world; r++) {
        double x = top > 0 ? sps[r] / top * 1e6 : 1e6;
        w[r] = x < 1 ? 1 : (uint32_t)lround(x); /* 1..1e6: gm_job_split_by's integers */
    }
    gm_job_split_by(g, world, w, counts);
    /* a rank cannot take no sample: it takes one, from the largest share */
    for (int r = 0; r < world; r++) {
        if (counts[r] >= 1)
            continue;
        int big = 0;
        for (int i = 1; i < world; i++)
            if (counts[i] > counts[big])
                big = i;
        counts[big]--;
        counts[r] = 1;
        tiny++;
    }
    return tiny;
}

double gm_autoshare_step_s(const double *sps, int world, const int *counts)
{
    double t = 0;

    for (int r = 0; r < world; r++) {
        double x = sps[r] > 0 ? counts[r] / sps[r] : INFINITY;
        t = x > t ? x : t;
    }
    return t;
}

int gm_autoshare_spare(struct gm_autoshare *a, const double *sps,
                       const struct gm_autoshare_obs *obs, int world, const int *counts, long step,
                       char *why, size_t cap)
{
    double total = 0, min_coll = INFINITY, saves;
    int slow = 0;

    if (world < 2 || step < a->quiet_until)
        return -1;
    for (int r = 0; r < world; r++) {
        if (!(sps[r] > 0) || obs[r].samples <= 0)
            return -1;
        total += sps[r];
        min_coll = obs[r].coll_s < min_coll ? obs[r].coll_s : min_coll;
        if (sps[r] < sps[slow])
            slow = r;
    }
    saves = counts[slow] / (total - sps[slow]);
    if (!(saves < min_coll)) {
        a->spare_confirm = 0;
        return -1;
    }
    if (++a->spare_confirm < GM_AUTOSHARE_CONFIRM)
        return -1;
    a->spare_confirm = 0;
    snprintf(why, cap,
             "too slow to help: its %d samples a step (at %.0f samples/s) save the others %.2f ms, "
             "less than a step's collective costs (%.2f ms)",
             counts[slow], sps[slow], saves * 1e3, min_coll * 1e3);
    return slow;
}

void gm_autoshare_group(struct gm_autoshare *a, long step)
{
    a->confirm = 0;
    a->spare_confirm = 0;
    a->quiet_until = step + GM_AUTOSHARE_DWELL;
}

int gm_autoshare_decide(struct gm_autoshare *a, const double *sps, int world, int g, const int *cur,
                        long step, int *out, char *why, size_t cap)
{
    double now_s, new_s;
    int tiny;

    if (world < 2 || world > GM_JOB_SHARES_MAX || g < world || step < a->quiet_until)
        return 0;
    for (int r = 0; r < world; r++)
        if (!(sps[r] > 0) || !isfinite(sps[r]))
            return 0;
    tiny = gm_autoshare_balance(sps, world, g, out);
    now_s = gm_autoshare_step_s(sps, world, cur);
    new_s = gm_autoshare_step_s(sps, world, out);
    if (!(now_s >= GM_AUTOSHARE_HYST * new_s)) {
        a->confirm = 0;
        return 0;
    }
    if (++a->confirm < GM_AUTOSHARE_CONFIRM)
        return 0;
    a->confirm = 0;
    snprintf(why, cap,
             "predicted compute per step %.1f ms with the running shares, %.1f ms balanced "
             "(>= %.2fx)%s",
             now_s * 1e3, new_s * 1e3, GM_AUTOSHARE_HYST,
             tiny > 0 ? "; a rank is too slow to help (its share is below one sample: it "
                        "takes one)"
                      : "");
    return 1;
}
