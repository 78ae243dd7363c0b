/* agent/jobs/autoshare.c - shares = auto's rule (see autoshare.h). */
#include "agent/jobs/autoshare.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The collective time less the rank's own stalls in it (0 at least). */
static double coll_net(const struct gm_autoshare_obs *o)
{
    const double s = o->stall_s > 0 ? o->stall_s : 0;

    return o->coll_s > s ? o->coll_s - s : 0;
}

void gm_autoshare_avg_start(struct gm_autoshare_avg *a)
{
    memset(a, 0, sizeof(*a));
}

static void round_clear(struct gm_autoshare_avg *a)
{
    a->rsteps = 0;
    a->rstep_s = a->rcoll_s = a->rstall_s = 0;
}

void gm_autoshare_avg_switch(struct gm_autoshare_avg *a)
{
    a->syncs = 0;
    round_clear(a);
}

void gm_autoshare_avg_step(struct gm_autoshare_avg *a, const struct gm_autoshare_step *s)
{
    struct gm_autoshare_obs *o = &a->obs;

    if (s->samples <= 0)
        return;
    if ((s->rounds != 0) != (a->rounds != 0)) { /* to or from DiLoCo: other steps */
        memset(o, 0, sizeof(*o));
        a->rounds = s->rounds != 0;
        gm_autoshare_avg_switch(a);
    }
    if (++a->steps <= GM_AUTOSHARE_WARM)
        return;
    if (!a->rounds) { /* a collective every step: each step averaged in (x0.9) */
        o->step_s = o->step_s > 0 ? 0.9 * o->step_s + 0.1 * s->step_s : s->step_s;
        o->coll_s = o->step_s > 0 && o->samples > 0 ? 0.9 * o->coll_s + 0.1 * s->coll_s : s->coll_s;
        o->stall_s =
            o->step_s > 0 && o->samples > 0 ? 0.9 * o->stall_s + 0.1 * s->stall_s : s->stall_s;
        o->samples = s->samples;
        return;
    }
    /* DiLoCo: a round, from one sync's step (excluded) to the next's (included) */
    a->rsteps++;
    a->rstep_s += s->step_s;
    a->rcoll_s += s->coll_s;
    a->rstall_s += s->stall_s < s->coll_s ? s->stall_s : s->coll_s;
    if (!s->synced)
        return;
    if (a->syncs++ == 0) { /* a partial round, with the ranks' start skew: left out */
        round_clear(a);
        return;
    }
    const double n = a->rsteps, x = o->samples > 0 ? GM_AUTOSHARE_ROUND_NEW : 1;
    o->step_s = (1 - x) * o->step_s + x * a->rstep_s / n;
    o->coll_s = (1 - x) * o->coll_s + x * a->rcoll_s / n;
    o->stall_s = (1 - x) * o->stall_s + x * a->rstall_s / n;
    o->samples = s->samples;
    a->folds++;
    round_clear(a);
}

int gm_autoshare_new_round(struct gm_autoshare *a, int rounds, int folds)
{
    if (!rounds)
        return 1;
    if (folds == a->round_seen)
        return 0;
    a->round_seen = folds;
    return 1;
}

int gm_autoshare_speeds(const struct gm_autoshare_obs *obs, int world, double *sps)
{
    double min_coll = INFINITY;
    int known = 0;

    for (int r = 0; r < world; r++)
        if (obs[r].samples > 0 && obs[r].step_s > 0 && coll_net(&obs[r]) < min_coll)
            min_coll = coll_net(&obs[r]);
    for (int r = 0; r < world; r++) {
        double busy = obs[r].step_s - (coll_net(&obs[r]) - min_coll);
        sps[r] = 0;
        if (obs[r].samples <= 0 || !(obs[r].step_s > 0) || !(busy > 0) || !isfinite(busy))
            continue;
        sps[r] = obs[r].samples / busy;
        known++;
    }
    return known;
}

/* The proportional split: largest remainder over integer weights. */
static int balance_prop(const double *sps, int world, int g, int *counts)
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

static double busy(const double *sps, const double *over_s, int r, int n)
{
    return n / sps[r] + over_s[r];
}

/* Equal predicted busy times: the time T at which sum_r max(0, s_r (T - o_r)) = g (bisection:
 * the sum grows with T), each rank's share floored (one at least), then the samples left each
 * to the rank whose busy time it makes shortest (or, where the ones given to tiny ranks went
 * past g, taken from the longest). */
static int balance_fit(const double *sps, const double *over_s, int world, int g, int *counts)
{
    double lo = 0, hi = 0;
    int sum = 0, tiny = 0;

    for (int r = 0; r < world; r++) {
        double t = over_s[r] + g / sps[r];
        hi = t > hi ? t : hi;
    }
    for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi), n = 0;
        for (int r = 0; r < world; r++)
            n += mid > over_s[r] ? sps[r] * (mid - over_s[r]) : 0;
        if (n < g)
            lo = mid;
        else
            hi = mid;
    }
    for (int r = 0; r < world; r++) { /* at lo the shares sum to g or less */
        double x = lo > over_s[r] ? sps[r] * (lo - over_s[r]) : 0;
        if (x < 1) {
            counts[r] = 1;
            tiny++;
        } else {
            counts[r] = x < g ? (int)floor(x) : g;
        }
        sum += counts[r];
    }
    while (sum > g) {
        int worst = -1;
        for (int r = 0; r < world; r++)
            if (counts[r] > 1 && (worst < 0 || busy(sps, over_s, r, counts[r]) >
                                                   busy(sps, over_s, worst, counts[worst])))
                worst = r;
        counts[worst]--; /* g >= world: some rank has more than one */
        sum--;
    }
    while (sum < g) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (busy(sps, over_s, r, counts[r] + 1) < busy(sps, over_s, best, counts[best] + 1))
                best = r;
        counts[best]++;
        sum++;
    }
    return tiny;
}

int gm_autoshare_balance(const double *sps, const double *over_s, int world, int g, int *counts)
{
    bool any = false;

    for (int r = 0; over_s != NULL && r < world; r++)
        any = any || over_s[r] > 0;
    return any ? balance_fit(sps, over_s, world, g, counts) : balance_prop(sps, world, g, counts);
}

double gm_autoshare_step_s(const double *sps, const double *over_s, int world, const int *counts)
{
    double t = 0;

    for (int r = 0; r < world; r++) {
        double x = sps[r] > 0 ? counts[r] / sps[r] + (over_s != NULL ? over_s[r] : 0) : INFINITY;
        t = x > t ? x : t;
    }
    return t;
}

/* Point i to the end (the newest), the others kept in order. */
static void to_end(struct gm_autoshare_hist *h, int i)
{
    int n = h->n[i], adds = h->adds[i];
    double busy = h->busy_s[i], ref = h->ref_s[i];

    for (; i + 1 < h->npts; i++) {
        h->n[i] = h->n[i + 1];
        h->adds[i] = h->adds[i + 1];
        h->busy_s[i] = h->busy_s[i + 1];
        h->ref_s[i] = h->ref_s[i + 1];
    }
    h->n[i] = n;
    h->adds[i] = adds;
    h->busy_s[i] = busy;
    h->ref_s[i] = ref;
}

int gm_autoshare_hist_add(struct gm_autoshare_hist *h, int n, double busy_s)
{
    int i, moved = 0;

    if (n <= 0 || !(busy_s > 0) || !isfinite(busy_s))
        return 0;
    for (i = 0; i < h->npts && h->n[i] != n; i++)
        ;
    if (i < h->npts && h->adds[i] >= GM_AUTOSHARE_SETTLE &&
        fabs(busy_s - h->ref_s[i]) > GM_AUTOSHARE_MOVED * h->ref_s[i]) {
        h->npts = 0; /* the machine changed speed: the other shares' times are stale */
        i = 0;
        moved = 1;
    }
    if (i == h->npts) { /* a new share (the oldest goes when full) */
        if (h->npts == GM_AUTOSHARE_POINTS) {
            to_end(h, 0);
            h->npts--;
        }
        i = h->npts++;
        h->n[i] = n;
        h->adds[i] = 0;
    }
    h->busy_s[i] = busy_s;
    if (h->adds[i] < GM_AUTOSHARE_SETTLE) { /* still settling: the reference follows */
        h->ref_s[i] = busy_s;
        h->adds[i]++;
    }
    to_end(h, i);
    return moved;
}

int gm_autoshare_fit(const struct gm_autoshare_hist *h, double *sps, double *over_s)
{
    double mn = 0, mb = 0, snn = 0, snb = 0, slope, o;
    const int k = h->npts;
    int lo = k > 0 ? h->n[0] : 0, hi = lo;

    *sps = 0;
    *over_s = 0;
    if (k <= 0)
        return 0;
    for (int i = 0; i < k; i++) {
        mn += h->n[i];
        mb += h->busy_s[i];
        lo = h->n[i] < lo ? h->n[i] : lo;
        hi = h->n[i] > hi ? h->n[i] : hi;
    }
    mn /= k;
    mb /= k;
    for (int i = 0; i < k; i++) {
        snn += (h->n[i] - mn) * (h->n[i] - mn);
        snb += (h->n[i] - mn) * (h->busy_s[i] - mb);
    }
    if (k >= 2 && snn > 0 && hi - lo >= GM_AUTOSHARE_SPREAD * hi) { /* else noise's slope */
        slope = snb / snn;
        o = mb - slope * mn;
        if (slope > 0 && o >= 0 && isfinite(slope) && isfinite(o)) {
            *sps = 1 / slope;
            *over_s = o;
            return 2;
        }
    }
    *sps = h->n[k - 1] / h->busy_s[k - 1]; /* the proportional rule, at the newest share */
    return 1;
}

int gm_autoshare_plan(const struct gm_autoshare_obs *obs, int world, struct gm_autoshare_plan *pl)
{
    return gm_autoshare_plan_for(obs, world, 0, pl);
}

int gm_autoshare_plan_for(const struct gm_autoshare_obs *obs, int world, int rounds,
                          struct gm_autoshare_plan *pl)
{
    double min_coll = INFINITY;

    memset(pl, 0, sizeof(*pl));
    pl->ref = -1;
    pl->rounds = rounds != 0;
    if (world < 1 || world > GM_JOB_SHARES_MAX)
        return -1;
    for (int r = 0; r < world; r++) {
        if (obs[r].samples <= 0 || !(obs[r].step_s > 0) || !isfinite(obs[r].step_s) ||
            !(obs[r].coll_s >= 0) || obs[r].coll_s > obs[r].step_s)
            return -1;
        min_coll = coll_net(&obs[r]) < min_coll ? coll_net(&obs[r]) : min_coll;
        /* compute per sample: everything outside the collective (its stalls there included) */
        double c = (obs[r].step_s - obs[r].coll_s) / obs[r].samples;
        if (c > 0 && (pl->ref < 0 || c < pl->c_s)) {
            pl->ref = r;
            pl->c_s = c;
        }
    }
    if (pl->ref < 0)
        return -1;
    pl->coll_s = world > 1 ? min_coll : 0;
    for (int r = 0; r < world; r++) {
        /* busy: the step less the rank's wait for the others (its collective net of its own
         * stalls, beyond the collective's own cost); its work at the reference's pace */
        double busy = obs[r].step_s - (coll_net(&obs[r]) - pl->coll_s);
        double work = obs[r].samples * pl->c_s + pl->coll_s;
        /* DiLoCo: the sync's part is the round's, once, at the link's pace: only the inner
         * steps are the rank's own */
        double f = pl->rounds ? (busy - pl->coll_s) / (obs[r].samples * pl->c_s) : busy / work;
        pl->slow[r] = f > 1 && isfinite(f) ? f : 1; /* nobody is faster than the reference */
        pl->sps[r] = 1 / (pl->slow[r] * pl->c_s);
        pl->over_s[r] = pl->rounds ? pl->coll_s : pl->slow[r] * pl->coll_s;
    }
    return pl->ref;
}

/* The predicted step with the ranks in keep (those with keep[r]) at their balanced shares of
 * models sps, over_s (counts filled for them, 0 for the others): one rank alone has no
 * collective, its overhead is alone_s[r] (NULL: 0). */
static double kept_step(const double *sps_in, const double *over_in, const double *alone_s,
                        int world, int g, const int *keep, int *counts)
{
    double sps[GM_JOB_SHARES_MAX] = {0}, over[GM_JOB_SHARES_MAX] = {0};
    int idx[GM_JOB_SHARES_MAX], c[GM_JOB_SHARES_MAX], k = 0;

    for (int r = 0; r < world; r++) {
        counts[r] = 0;
        if (keep[r])
            idx[k++] = r;
    }
    if (k == 0 || g < k)
        return INFINITY;
    for (int i = 0; i < k; i++) {
        sps[i] = sps_in[idx[i]];
        over[i] = k > 1 ? over_in[idx[i]] : alone_s != NULL ? alone_s[idx[i]] : 0;
    }
    (void)gm_autoshare_balance(sps, over, k, g, c);
    for (int i = 0; i < k; i++)
        counts[idx[i]] = c[i];
    return gm_autoshare_step_s(sps, over, k, c);
}

int gm_autoshare_spare(struct gm_autoshare *a, const struct gm_autoshare_obs *obs, int world,
                       int g, long step, char *why, size_t cap)
{
    struct gm_autoshare_plan pl;
    int keep[GM_JOB_SHARES_MAX];
    int with[GM_JOB_SHARES_MAX], without[GM_JOB_SHARES_MAX], slow = -1;
    double with_s, without_s;

    if (world < 2 || world > GM_JOB_SHARES_MAX || g < world || step < a->quiet_until ||
        gm_autoshare_plan_for(obs, world, a->rounds, &pl) < 0)
        return -1;
    for (int r = 1; r < world; r++) /* rank 0 trains: it is never the spare */
        if (slow < 0 || pl.slow[r] > pl.slow[slow])
            slow = r;
    for (int r = 0; r < world; r++)
        keep[r] = 1;
    with_s = kept_step(pl.sps, pl.over_s, NULL, world, g, keep, with);
    keep[slow] = 0;
    without_s = kept_step(pl.sps, pl.over_s, NULL, world, g, keep, without);
    if (!(with_s * GM_AUTOSHARE_KEEP_GAIN > without_s)) {
        a->spare_confirm = 0;
        return -1;
    }
    if (++a->spare_confirm < GM_AUTOSHARE_CONFIRM)
        return -1;
    a->spare_confirm = 0;
    snprintf(why, cap,
             "too slow to help: it works %.1fx slower than the fastest rank, and a step's %s "
             "costs %.2f ms%s: with it a step is predicted %.2f ms (its balanced share %d of %d), "
             "without it %.2f ms",
             pl.slow[slow], pl.rounds ? "share of the outer sync" : "collective", pl.coll_s * 1e3,
             pl.rounds ? "" : " at the fastest's pace", with_s * 1e3, with[slow], g,
             without_s * 1e3);
    return slow;
}

void gm_autoshare_group(struct gm_autoshare *a, long step)
{
    a->confirm = 0;
    a->spare_confirm = 0;
    a->quiet_until = step + (a->groups == 0 ? GM_AUTOSHARE_DWELL_FIRST : GM_AUTOSHARE_DWELL);
    a->groups++;
    a->round_seen = 0; /* the new group's ranks count their rounds afresh */
    a->nreads = 0;     /* the new group's step is its own */
    a->settled_s = 0;
    /* this group is the outcome of the change decided last, if one was (and it was measured):
     * any other new group (a rank lost or left out, a codec) has nothing to be judged against */
    a->judging = a->pending && a->before_s > 0;
    a->pending = 0;
}

double gm_autoshare_hyst(const struct gm_autoshare *a)
{
    double h = GM_AUTOSHARE_HYST;

    for (int i = 0; i < a->fails && h < GM_AUTOSHARE_HYST_MAX; i++)
        h = 1 + 2 * (h - 1);
    return h < GM_AUTOSHARE_HYST_MAX ? h : GM_AUTOSHARE_HYST_MAX;
}

int gm_autoshare_measure(struct gm_autoshare *a, long step, double step_s)
{
    int ready;

    if (step < a->quiet_until || !(step_s > 0) || !isfinite(step_s) ||
        (a->nreads > 0 && step <= a->read_last))
        return 0;
    if (a->nreads == 0)
        a->read_first = step;
    a->read_last = step;
    a->reads[a->nreads % GM_AUTOSHARE_JUDGE_TICKS] = step_s;
    a->nreads++;
    const double m = gm_autoshare_measured(a, &ready);
    if (!ready)
        return 0;
    if (!(a->settled_s > 0)) {
        a->settled_s = m;
        return 0;
    }
    if (fabs(m - a->settled_s) <= GM_AUTOSHARE_MOVED * a->settled_s)
        return 0;
    gm_autoshare_forget(a); /* the same shares, another step: a machine changed speed */
    return 1;
}

double gm_autoshare_measured(const struct gm_autoshare *a, int *ready)
{
    const int k = a->nreads < GM_AUTOSHARE_JUDGE_TICKS ? a->nreads : GM_AUTOSHARE_JUDGE_TICKS;
    double sum = 0;

    if (ready != NULL)
        *ready = k == GM_AUTOSHARE_JUDGE_TICKS &&
                 a->read_last - a->read_first >= GM_AUTOSHARE_JUDGE_STEPS;
    for (int i = 0; i < k; i++)
        sum += a->reads[i];
    return k > 0 ? sum / k : 0;
}

void gm_autoshare_forget(struct gm_autoshare *a)
{
    a->fails = 0;
    a->ntried = 0;
    a->judging = 0;
    a->before_s = 0; /* a change pending now was measured against the old speed */
    a->nreads = 0;   /* nor is the running group's step what it was */
    a->settled_s = 0;
}

void gm_autoshare_text(const int *c, int n, char *buf, size_t cap)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < n && o + 1 < cap; i++) {
        int k = snprintf(buf + o, cap - o, "%s%d", i ? ":" : "", c[i]);
        if (k < 0 || (size_t)k >= cap - o) {
            buf[o] = '\0'; /* whole counts only, not a cut one */
            break;
        }
        o += (size_t)k;
    }
}

/* L1 distance between two splits of world ranks. */
static int dist(const int *x, const int *y, int world)
{
    int d = 0;

    for (int r = 0; r < world; r++)
        d += abs(x[r] - y[r]);
    return d;
}

int gm_autoshare_judge(struct gm_autoshare *a, int world, const int *cur, int *out, char *why,
                       size_t cap)
{
    int ready;
    const double now_s = gm_autoshare_measured(a, &ready);

    if (!a->judging || !ready)
        return 0;
    a->judging = 0;
    if (world != a->before_world || world < 1 || world > GM_JOB_SHARES_MAX || !(now_s > 0))
        return 0;
    const double gain = a->before_s / now_s;
    char from[GM_JOB_SHARES_MAX * 12], to[GM_JOB_SHARES_MAX * 12];
    gm_autoshare_text(a->before, world, from, sizeof(from));
    gm_autoshare_text(cur, world, to, sizeof(to));
    if (gain >= GM_AUTOSHARE_PAID) {
        snprintf(why, cap, "paid: %s -> %s measured %.2f ms a step against %.2f ms (%.2fx)", from,
                 to, now_s * 1e3, a->before_s * 1e3, gain);
        return 1;
    }
    /* did not pay: remembered, and the next change must promise more */
    if (a->tried_world != world)
        a->ntried = 0;
    a->tried_world = world;
    if (a->ntried == GM_AUTOSHARE_TRIED) {
        memmove(&a->tried[0], &a->tried[1], sizeof(a->tried[0]) * (GM_AUTOSHARE_TRIED - 1));
        a->ntried--;
    }
    memcpy(a->tried[a->ntried].n, cur, sizeof(int) * (size_t)world);
    a->tried[a->ntried].step_s = now_s;
    a->ntried++;
    a->fails++;
    if (now_s > GM_AUTOSHARE_WORSE * a->before_s) {
        memcpy(out, a->before, sizeof(int) * (size_t)world);
        snprintf(why, cap,
                 "did not pay: %s -> %s measured %.2f ms a step against %.2f ms (%.2fx): back to "
                 "%s; the next change needs a predicted %.2fx",
                 from, to, now_s * 1e3, a->before_s * 1e3, gain, from, gm_autoshare_hyst(a));
        return 3;
    }
    snprintf(why, cap,
             "did not pay: %s -> %s measured %.2f ms a step against %.2f ms (%.2fx): kept; the "
             "next change needs a predicted %.2fx",
             from, to, now_s * 1e3, a->before_s * 1e3, gain, gm_autoshare_hyst(a));
    return 2;
}

int gm_autoshare_decide(struct gm_autoshare *a, const double *sps, const double *over_s, int world,
                        int g, const int *cur, long step, int *out, char *why, size_t cap)
{
    double now_s, new_s;
    int tiny;

    if (world < 2 || world > GM_JOB_SHARES_MAX || g < world || step < a->quiet_until)
        return 0;
    if (a->judging) /* the last change's outcome first (gm_autoshare_judge) */
        return 0;
    for (int r = 0; r < world; r++)
        if (!(sps[r] > 0) || !isfinite(sps[r]))
            return 0;
    tiny = gm_autoshare_balance(sps, over_s, world, g, out);
    now_s = gm_autoshare_step_s(sps, over_s, world, cur);
    new_s = gm_autoshare_step_s(sps, over_s, world, out);
    const double meas_s = gm_autoshare_measured(a, NULL), hyst = gm_autoshare_hyst(a);
    /* the gain predicted by the model, and against the running step as measured (the model's
     * own prediction for the running shares can be off where the measure moves with the
     * share: a quota-capped rank's work falling into its periods) */
    bool want = now_s >= hyst * new_s && !(meas_s > 0 && meas_s < hyst * new_s);
    /* back toward shares that did not pay (as near them as to where it is): only when the
     * prediction is much better */
    for (int i = 0; want && a->tried_world == world && i < a->ntried; i++)
        if (dist(out, a->tried[i].n, world) <= dist(out, cur, world) &&
            !(now_s >= GM_AUTOSHARE_HYST_MAX * new_s && meas_s >= GM_AUTOSHARE_HYST_MAX * new_s))
            want = false;
    if (!want) {
        a->confirm = 0;
        return 0;
    }
    if (++a->confirm < GM_AUTOSHARE_CONFIRM)
        return 0;
    a->confirm = 0;
    bool fitted = false;
    for (int r = 0; over_s != NULL && r < world; r++)
        fitted = fitted || over_s[r] > 0;
    /* to be judged by its outcome once the new group is measured */
    a->pending = 1;
    a->before_world = world;
    memcpy(a->before, cur, sizeof(int) * (size_t)world);
    a->before_s = meas_s;
    char meas[48] = "";
    if (meas_s > 0)
        snprintf(meas, sizeof(meas), " (measured %.1f ms)", meas_s * 1e3);
    snprintf(why, cap,
             "predicted compute per step %.1f ms with the running shares%s, %.1f ms balanced "
             "(>= %.2fx; %s)%s",
             now_s * 1e3, meas, new_s * 1e3, hyst,
             fitted ? "busy = n/s + o fitted" : "in proportion to the speeds",
             tiny > 0 ? "; a rank is too slow to help (its share is below one sample: it "
                        "takes one)"
                      : "");
    return 1;
}

/* A probe's compute line t(n) = n / s + o (o >= 0; else the proportional rule at n[0]). */
static void probe_line(const struct gm_autoshare_probe *p, double *sps, double *o)
{
    const double slope = (p->busy_s[0] - p->busy_s[1]) / (p->n[0] - p->n[1]);
    const double icpt = p->busy_s[0] - slope * p->n[0];

    if (slope > 0 && icpt >= 0 && isfinite(slope) && isfinite(icpt)) {
        *sps = 1 / slope;
        *o = icpt;
        return;
    }
    *sps = p->n[0] / p->busy_s[0];
    *o = 0;
}

int gm_autoshare_probe_plan(const struct gm_autoshare_probe *pr, int world, int g, double coll_s,
                            int rounds, struct gm_autoshare_probed *out, char *why, size_t cap)
{
    double own_o[GM_JOB_SHARES_MAX], at_eq[GM_JOB_SHARES_MAX], fastest = INFINITY;
    int eq[GM_JOB_SHARES_MAX], with[GM_JOB_SHARES_MAX], without[GM_JOB_SHARES_MAX];
    char left[160] = "";
    size_t lo = 0;

    memset(out, 0, sizeof(*out));
    if (cap > 0)
        why[0] = '\0';
    if (world < 1 || world > GM_JOB_SHARES_MAX || g < world || !(coll_s >= 0) || !isfinite(coll_s))
        return -EINVAL;
    gm_job_split_by(g, world, NULL, eq);
    for (int r = 0; r < world; r++) {
        const struct gm_autoshare_probe *p = &pr[r];
        if (p->n[1] < 1 || p->n[0] <= p->n[1] || !(p->busy_s[0] > 0) || !(p->busy_s[1] > 0) ||
            !isfinite(p->busy_s[0]) || !isfinite(p->busy_s[1]))
            return -EINVAL;
        probe_line(p, &out->sps[r], &own_o[r]);
        at_eq[r] = eq[r] / out->sps[r] + own_o[r];
        fastest = at_eq[r] < fastest ? at_eq[r] : fastest;
    }
    const double k = world > 1 ? coll_s : 0;
    for (int r = 0; r < world; r++) {
        out->slow[r] = at_eq[r] / fastest;
        out->over_s[r] = own_o[r] + (rounds ? 1 : out->slow[r]) * k;
        out->keep[r] = 1;
    }
    out->equal_s = gm_autoshare_step_s(out->sps, world > 1 ? out->over_s : own_o, world, eq);
    /* the spare rule, the slowest first, as long as it holds */
    for (int kept = world; kept >= 2; kept--) {
        int slow = -1;
        for (int r = 1; r < world; r++)
            if (out->keep[r] && (slow < 0 || out->slow[r] > out->slow[slow]))
                slow = r;
        const double with_s = kept_step(out->sps, out->over_s, own_o, world, g, out->keep, with);
        out->keep[slow] = 0;
        const double without_s =
            kept_step(out->sps, out->over_s, own_o, world, g, out->keep, without);
        if (!(with_s * GM_AUTOSHARE_KEEP_GAIN > without_s)) { /* it pays its way */
            out->keep[slow] = 1;
            break;
        }
        out->spares++;
        int n = snprintf(left + lo, sizeof(left) - lo,
                         "%s%d (%.1fx slower, share %d: %.2f ms "
                         "against %.2f ms without it)",
                         lo ? ", " : "", slow, out->slow[slow], with[slow], with_s * 1e3,
                         without_s * 1e3);
        if (n > 0 && (size_t)n < sizeof(left) - lo)
            lo += (size_t)n;
    }
    out->step_s = kept_step(out->sps, out->over_s, own_o, world, g, out->keep, out->counts);
    if (out->spares > 0) { /* the kept ranks: balanced only past the hysteresis, as below */
        int nk = 0, idx[GM_JOB_SHARES_MAX], c[GM_JOB_SHARES_MAX];
        double sps[GM_JOB_SHARES_MAX], over[GM_JOB_SHARES_MAX];
        for (int r = 0; r < world; r++)
            if (out->keep[r])
                idx[nk++] = r;
        gm_job_split_by(g, nk, NULL, c);
        for (int i = 0; i < nk; i++) {
            sps[i] = out->sps[idx[i]];
            over[i] = nk > 1 ? out->over_s[idx[i]] : own_o[idx[i]];
        }
        const double kept_eq_s = gm_autoshare_step_s(sps, over, nk, c);
        if (!(kept_eq_s >= GM_AUTOSHARE_HYST * out->step_s)) {
            for (int i = 0; i < nk; i++)
                out->counts[idx[i]] = c[i];
            out->step_s = kept_eq_s;
        }
    }
    out->change = out->spares > 0;
    if (!out->change && out->equal_s >= GM_AUTOSHARE_HYST * out->step_s)
        out->change = 1;
    if (!out->change)
        memcpy(out->counts, eq, sizeof(int) * (size_t)world);
    if (out->change && out->spares == 0 &&
        memcmp(out->counts, eq, sizeof(int) * (size_t)world) == 0)
        out->change = 0; /* balanced rounds to the equal split */
    if (out->change)
        snprintf(why, cap,
                 "probe: predicted step %.2f ms at equal shares, %.2f ms at these (the "
                 "collective %.2f ms at the fastest's pace)%s%s",
                 out->equal_s * 1e3, out->step_s * 1e3, k * 1e3,
                 out->spares ? "; too slow to help, left out: rank " : "", left);
    else
        snprintf(why, cap,
                 "probe: equal shares kept: predicted step %.2f ms, %.2f ms balanced (not %.2fx "
                 "faster)",
                 out->equal_s * 1e3, out->step_s * 1e3, GM_AUTOSHARE_HYST);
    return 0;
}
