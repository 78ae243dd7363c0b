/*
 * agent/jobs/autoshare.h - [job] shares = auto on the job's coordinator: each rank's part of
 * the global batch from its measured speed, so that a slow machine adds to the job instead of
 * holding the others back (issue 25).  Pure functions and a small state; tested alone
 * (tests/unit/test_autoshare.c); the job room (agent/jobs/job_codec.c) feeds it and carries the
 * decision out.
 *
 * The measure (gm_autoshare_speeds): each rank's speed in samples per second of its busy time,
 * from its last steps (averaged x0.9, the trainer's step timing that codec = auto reads too;
 * under DiLoCo by rounds, its outer sync's wait as the collective: gm_autoshare_avg below):
 * its samples per step, a step's wall time T_r (compute, collective, optimizer) and the part
 * C_r of it in the collective.  The ranks step in lockstep, so a rank that waits for a slower
 * one waits inside its collective; the rank that waits least, min C, is the one everybody
 * waits for, and its C is the collective's own cost.  A rank's busy time is T_r - (C_r - min C)
 * (everything but its wait), and its speed samples_r / busy_r.  (Not the compute time alone: on
 * a machine capped by a CPU quota, or busy with other work, the stalls fall in any phase of the
 * step, and the compute time alone read a rank capped at 0.1 core as 2-4x faster than it was.)
 * C_r is taken net of the rank's own stalls in it, stall_r (the run delay of its loop thread
 * and of its trainer waiting, agent/jobs/rank.h): a rank stalled inside its collective holds
 * every rank there, and counted as collective that read both ranks of 1.0 + 0.5 core as
 * equally fast.  (The spare rule below prices the collective the same way: read whole, a
 * slow rank's stalls in it at equal shares made keeping it look dear.)
 * Members report theirs with their alpha-beta fit (JOB_REPORT "fit" speed), rank 0 reads its
 * own.
 *
 * The model (gm_autoshare_fit): a rank's busy time at n samples a step is n / s + o, its
 * samples per second s and a per-step overhead o (the collective's own cost, the optimizer,
 * launching a step: what does not grow with its samples, and which a CPU-capped machine pays
 * slowly).  Each rank keeps its busy time at the last few shares it ran
 * (gm_autoshare_hist_add, GM_AUTOSHARE_POINTS of them, one per share); with two or more
 * different shares (at least GM_AUTOSHARE_SPREAD of the largest apart: closer, the slope is
 * mostly noise), s and o are their least-squares line; with a single share (the first
 * group), or a line that makes no sense (o < 0, or busy not growing with n: noise, or the
 * machine's speed changed between the points), the proportional rule: o = 0, s = n / busy at
 * the newest point (the job room uses the plan's model below there instead, when it has
 * one).  A point whose busy time moves more than GM_AUTOSHARE_MOVED from what it
 * settled at (its GM_AUTOSHARE_SETTLE-th measurement, once a group's averages no longer carry
 * its slow first steps), at the same share, says the machine changed speed: the rank's other
 * points are dropped.  (The proportional rule alone under-corrects: it reads a slow rank's
 * fixed cost as if it grew with its samples, so a smaller share is predicted faster than it
 * is; with beta at 0.2 core it stopped at 75:53 of 128.)
 *
 * The rule (gm_autoshare_decide), on every coordinator tick with a speed for every rank:
 *  - balanced shares (gm_autoshare_balance): the global batch split so that the predicted
 *    busy times n_r / s_r + o_r are equal (as equal as whole samples allow: the continuous
 *    split, then each remaining sample to the rank it lengthens least; at least one sample
 *    each); with every o = 0, in proportion to the speeds (largest remainder, train/job.h
 *    gm_job_split_by);
 *  - a step's compute is predicted as the slowest rank's, max_r n_r / s_r + o_r
 *    (gm_autoshare_step_s); the balanced shares replace the running ones when they predict a
 *    step at least GM_AUTOSHARE_HYST times faster, on GM_AUTOSHARE_CONFIRM decisions in a row,
 *    and never within GM_AUTOSHARE_DWELL steps of a group forming (a change of shares forms one):
 *    the hysteresis, so that measurement noise does not re-form groups; and also against the
 *    running step as measured (gm_autoshare_measure: rank 0's step time, the job's in
 *    lockstep), not only as the models predict it;
 *  - judged by outcome (gm_autoshare_judge): the group a change forms is measured (the mean of
 *    its last GM_AUTOSHARE_JUDGE_TICKS readings past its dwell) before any other change, and
 *    compared with the group before it: not GM_AUTOSHARE_PAID faster, the change is remembered
 *    as not paying and the hysteresis's excess doubles (at most GM_AUTOSHARE_HYST_MAX);
 *    GM_AUTOSHARE_WORSE slower, the old shares come back at once; a change back toward shares
 *    that did not pay needs GM_AUTOSHARE_HYST_MAX.  (A quota-capped rank's measured speed
 *    moves with its share: the models alone flapped LeNet-5's 1.0 + 0.5 five times in 1600
 *    steps.)  A group whose measured step moves GM_AUTOSHARE_MOVED at the same shares forgets
 *    all that (gm_autoshare_forget), so a real speed change is still followed;
 *  - too slow to help (gm_autoshare_spare), asked on every tick past the dwell, before the
 *    shares (so in the job's first decision, at equal shares), on GM_AUTOSHARE_CONFIRM ticks
 *    in a row: from the plan (gm_autoshare_plan), the slowest rank r >= 1 is left out of the
 *    job as a spare unless keeping it predicts a step at least GM_AUTOSHARE_KEEP_GAIN times
 *    faster than the step without it (both at their balanced shares; one rank left alone has
 *    no collective).  While it holds, the shares wait (no re-balancing first: one re-formed
 *    group instead of two).  The world shrinks by one (to 1 at least); the spare stays out for
 *    the rest of the job (`jobs` says which and why).
 *
 * The plan separates a rank's own slowness from what the collective costs (the stalls of a
 * CPU-capped rank land in any phase of its step, its collective included, where the wall clock
 * cannot tell them from the collective's cost: read whole, the collective of 1.0 + 0.2 core at
 * equal shares cost 8.9-13.8 ms, where net of the slow rank's stalls it was 0.1 ms).  The
 * reference rank is the one with the least compute per sample, c = (T_r - C_r) / n_r; the
 * collective's own cost K is the
 * least C_r net of the rank's own stalls (min_r C_r - stall_r: a capped rank's throttle does
 * not slow its CPU, it stops it, so what remains is the collective at full pace).  Every rank
 * does the same work per step, n c + K at the reference's pace (the same model, the same
 * collective), at its own pace: its slowness f_r = busy_r / (n_r c + K) (>= 1; busy_r as in
 * gm_autoshare_speeds), so its model is busy(n) = f_r (n c + K): samples per second
 * 1 / (f_r c) and overhead f_r K.  A machine at a fifth of the speed pays its part of the
 * collective five times as slowly, which is what makes a small share cost more than it saves.
 * Under DiLoCo (the rounds' averages, gm_autoshare_plan_for with rounds): c and K as above,
 * K now the sync's cost per step (the least wait at a sync, per step of the round); a rank's
 * slowness is its inner steps' alone, f_r = (busy_r - K) / (n_r c), and its overhead K itself,
 * not f_r K: the ranks meet once a round, the slowest's H inner steps pace it, and the sync is
 * paid once, at the link's pace (a tunnel), not at the rank's; scaled, a half-capped rank at
 * its balanced share read 1.73x instead of 2x (test_autoshare test_diloco).
 * The same model gives the shares of a rank measured at one share only (the job room's
 * jobs_shares_models), instead of the proportional rule.  Per-step work outside the collective
 * (the optimizer, starting a step) is folded into c at the reference's share: at equal shares
 * that favours keeping a marginal rank, which the next group's decision, at balanced shares
 * (the running step against the reference's time per sample at nearly the global batch),
 * corrects.
 *
 * Carried out by re-forming the group with the new shares (JOB_GROUP "shares"): every rank
 * takes them at the same step, the first of the new group (rank 0's), from rank 0's state; a
 * rank lost meanwhile is simply not in that group.  Loop thread of the coordinator.
 */
#ifndef GM_AGENT_JOBS_AUTOSHARE_H
#define GM_AGENT_JOBS_AUTOSHARE_H

#include <stddef.h>

#include "train/job.h"

#define GM_AUTOSHARE_HYST 1.15 /* predicted step compute at least this much faster */
#define GM_AUTOSHARE_CONFIRM 3 /* decisions in a row (ticks of 200 ms: 0.6 s) */
#define GM_AUTOSHARE_DWELL 20  /* steps after a group forms before a decision */
#define GM_AUTOSHARE_DWELL_FIRST 5 /* the job's first group (equal or the probe's): sooner */

/* A rank's last steps, averaged: samples per step, a step's wall time, its collective part and
 * the part of that the rank's own machine stalled (<= coll_s; 0: none or not known). */
struct gm_autoshare_obs {
    int samples; /* 0: not known */
    double step_s, coll_s, stall_s;
};

/* A rank's averages, the observation it reports (gm_autoshare_avg_step, on its trainer
 * thread, once a step): its steps past a group's first GM_AUTOSHARE_WARM (resync, warm-up).
 * Per-step codecs (fp32, fp16, PowerSGD): every step meets the others in its collective, and
 * each step is averaged in (x0.9).  DiLoCo (the step's rounds set): the ranks meet only at the
 * outer syncs, every H steps; its steps are compute only but for the one that waits for a sync
 * (blocking: the whole sync; overlapped: what its lag steps did not hide, and the wait for the
 * slowest rank to reach the boundary; hierarchical: the island's followers wait for their
 * leader's exchange too), and that wait is its collective.  Averaged per step (x0.9) those
 * read at a random tick a rank that had just waited as many times slower than one that had not
 * (a follower or the capped host 15-25x, "the collective 0.00 ms": the wait fell in the
 * optimizer's time, the collective was 0), so DiLoCo's observation is a whole round's: from
 * one sync's step to the next, its steps' time, wait and stall summed over the round and
 * divided by its steps (the sync's cost amortised per step), averaged over rounds
 * (GM_AUTOSHARE_ROUND_NEW the newest's weight).  The first sync of a group (or since the codec
 * changed) closes a partial round, with the ranks' start skew in it: left out.  Read so, the
 * rank that waits least is again the slowest (the others wait for its H inner steps), its wait
 * the sync's own cost per step, and the rule below holds as for a collective per step (one
 * decision tick a round: gm_autoshare_new_round). */
#define GM_AUTOSHARE_WARM 2        /* a group's first steps, left out of the averages */
#define GM_AUTOSHARE_ROUND_NEW 0.5 /* DiLoCo: a round's weight in the averages */

/* One step of a rank, as its trainer took it. */
struct gm_autoshare_step {
    int samples;    /* its share of the global batch (<= 0: not counted) */
    double step_s;  /* wall time: compute, collective, optimizer (DiLoCo's sync included) */
    double coll_s;  /* the part waiting for the others (DiLoCo: the outer sync's wait) */
    double stall_s; /* the rank's own stall inside coll_s (<= coll_s) */
    int rounds;     /* DiLoCo: the ranks meet only at outer syncs */
    int synced;     /* DiLoCo: this step waited for (and applied) an outer sync */
};

struct gm_autoshare_avg {
    struct gm_autoshare_obs obs; /* what the rank reports (samples 0: nothing yet) */
    int steps;                   /* counted steps since the group formed */
    int rounds;                  /* the shape being averaged: 1 DiLoCo's */
    int syncs;                   /* DiLoCo: syncs seen since the group or the codec changed */
    int folds;                   /* DiLoCo: rounds averaged in since the group formed */
    int rsteps;                  /* DiLoCo: the round so far, summed */
    double rstep_s, rcoll_s, rstall_s;
};

/* A group forms: nothing averaged yet. */
void gm_autoshare_avg_start(struct gm_autoshare_avg *a);
/* The codec changed at a step boundary: a DiLoCo round in progress is not one round (and its
 * sync's wait, if any, falls outside it): it starts again, its first sync left out.  Per-step
 * averages are kept (a switch between per-step codecs keeps them as before). */
void gm_autoshare_avg_switch(struct gm_autoshare_avg *a);
/* One step (see above).  A change of shape (to or from DiLoCo) starts the averages again. */
void gm_autoshare_avg_step(struct gm_autoshare_avg *a, const struct gm_autoshare_step *s);

/* The ranks' speeds (samples per second of busy time, see above) from their observations;
 * sps[r] = 0 where obs[r] is not known or makes no sense.  Returns how many are known. */
int gm_autoshare_speeds(const struct gm_autoshare_obs *obs, int world, double *sps);

/* Shares of global batch g for world ranks of speeds sps (samples/s, each > 0) and per-step
 * overheads over_s (seconds, each >= 0; NULL: all 0, the proportional split): equal predicted
 * busy times (see above), each >= 1 (g >= world), summing to g.  Returns how many ranks' share
 * was below one sample before rounding (they were given one). */
int gm_autoshare_balance(const double *sps, const double *over_s, int world, int g, int *counts);

/* The predicted compute of a step with counts: max_r counts[r] / sps[r] + over_s[r] (seconds;
 * over_s NULL: 0). */
double gm_autoshare_step_s(const double *sps, const double *over_s, int world, const int *counts);
/* Shares as text, "a:b:c" (n counts; truncated to cap, always terminated). */
void gm_autoshare_text(const int *c, int n, char *buf, size_t cap);

#define GM_AUTOSHARE_POINTS 4    /* shares remembered per rank for the fit */
#define GM_AUTOSHARE_MOVED 0.25  /* busy at the same share moved this much: speed changed */
#define GM_AUTOSHARE_SETTLE 5    /* measurements of a share before its time is the reference */
#define GM_AUTOSHARE_SPREAD 0.10 /* shares this far apart (of the largest) before a line */

/* A rank's busy time at the shares it ran, newest last. */
struct gm_autoshare_hist {
    int npts;
    int n[GM_AUTOSHARE_POINTS];
    double busy_s[GM_AUTOSHARE_POINTS]; /* the latest at that share */
    double ref_s[GM_AUTOSHARE_POINTS];  /* what it settled at (its GM_AUTOSHARE_SETTLE-th) */
    int adds[GM_AUTOSHARE_POINTS];      /* measurements at that share, up to SETTLE */
};

/* Records busy_s (> 0) at share n (> 0), see above; anything else is ignored.  Returns 1 when
 * the point said the machine changed speed (the others were dropped), else 0. */
int gm_autoshare_hist_add(struct gm_autoshare_hist *h, int n, double busy_s);

/* The model of h: *sps and *over_s.  Returns 2 when fitted (two shares or more, far enough
 * apart, a line that makes sense), 1 for the proportional rule (else), 0 when h is empty
 * (*sps = 0, *over_s = 0). */
int gm_autoshare_fit(const struct gm_autoshare_hist *h, double *sps, double *over_s);

/* The outcome (gm_autoshare_judge): what a group's steps measured, on rank 0's clock. */
#define GM_AUTOSHARE_JUDGE_TICKS 5  /* a group's step: the mean of its last this many readings */
#define GM_AUTOSHARE_JUDGE_STEPS 10 /* taken over this many steps at least, past the dwell */
#define GM_AUTOSHARE_PAID 1.02      /* a change paid: the step measured this much faster */
#define GM_AUTOSHARE_WORSE 1.05     /* a change measured this much slower is undone */
#define GM_AUTOSHARE_HYST_MAX 2.0   /* the hysteresis grows (x2 its excess a failure) to this */
#define GM_AUTOSHARE_TRIED 4        /* shares remembered as not paying */

struct gm_autoshare {
    int confirm;       /* decisions in a row that wanted a change */
    int spare_confirm; /* calls in a row that found a spare */
    long quiet_until;  /* no decision before this step */
    int groups;        /* groups formed so far */
    /* the running group's measured step (gm_autoshare_measure): its last readings past the
     * dwell, a ring */
    double reads[GM_AUTOSHARE_JUDGE_TICKS];
    int nreads;      /* readings so far in this group (the ring holds the last JUDGE_TICKS) */
    long read_first; /* the step of its first reading (when nreads > 0) */
    long read_last;  /* and of its last */
    double settled_s; /* its measured step when first ready (0: not yet) */
    /* the change being carried out (pending: decided, the group not formed yet) or judged (the
     * running group is its outcome): the group before it, its shares and measured step */
    int pending, judging;
    int before_world;
    int before[GM_JOB_SHARES_MAX];
    double before_s;
    int fails; /* changes that did not pay since the speeds last changed: the hysteresis grows */
    int ntried;
    struct {
        int n[GM_JOB_SHARES_MAX];
        double step_s; /* what they measured */
    } tried[GM_AUTOSHARE_TRIED]; /* shares that did not pay, newest last (same world) */
    int tried_world;
    int rounds;     /* the group's steps are DiLoCo's (rank 0's averages): the plan's shape */
    int round_seen; /* DiLoCo: rank 0's rounds averaged in when last asked */
};

/* Whether a decision tick counts: always with per-step averages; under DiLoCo only when rank 0
 * has averaged in a round since the last tick that counted (folds: its gm_autoshare_avg's),
 * since its readings change once a round and GM_AUTOSHARE_CONFIRM ticks of one round confirm
 * nothing (a change or a spare then holds on that many rounds in a row).  Returns 1 or 0. */
int gm_autoshare_new_round(struct gm_autoshare *a, int rounds, int folds);

/* A group formed at step: the count restarts, and no decision for GM_AUTOSHARE_DWELL steps
 * (GM_AUTOSHARE_DWELL_FIRST for the job's first group: it runs the speed probe's shares, or
 * without a probe equal shares at the slowest rank's pace, until the first decision; its first
 * steps, warm-up and resync, are not in the ranks' averages, agent/jobs/rank_train.c). */
void gm_autoshare_group(struct gm_autoshare *a, long step);

#define GM_AUTOSHARE_KEEP_GAIN 1.10 /* a rank stays when the step with it is this much faster */

/* The plan above, from the ranks' steps obs (every one known). */
struct gm_autoshare_plan {
    int ref;       /* the reference rank: the least compute per sample */
    double c_s;    /* its compute per sample (seconds) */
    double coll_s; /* the collective's own cost K (seconds; 0 for one rank) */
    double slow[GM_JOB_SHARES_MAX];   /* each rank's slowness f_r (the reference's 1) */
    double sps[GM_JOB_SHARES_MAX];    /* its model: samples per second, 1 / (f_r c) */
    double over_s[GM_JOB_SHARES_MAX]; /* and overhead per step, f_r K (DiLoCo: K) */
    int rounds;                       /* read as DiLoCo's rounds (gm_autoshare_plan_for) */
};

/* Fills pl from obs (world ranks).  Returns the reference rank, or -1 (pl->ref -1) when a
 * rank's steps are not known or make no sense. */
int gm_autoshare_plan(const struct gm_autoshare_obs *obs, int world, struct gm_autoshare_plan *pl);
/* The same for steps of either shape: rounds 1, DiLoCo's (see "Under DiLoCo" above). */
int gm_autoshare_plan_for(const struct gm_autoshare_obs *obs, int world, int rounds,
                          struct gm_autoshare_plan *pl);

/* The spare rule above for a group of world ranks with steps obs at global batch g: the rank
 * to leave out (why filled, one line), or -1 (also while the rule has not held on
 * GM_AUTOSHARE_CONFIRM calls in a row, or within the dwell; a call that finds no spare resets
 * the count).  a->spare_confirm > 0 after a call: a spare is building up. */
int gm_autoshare_spare(struct gm_autoshare *a, const struct gm_autoshare_obs *obs, int world,
                       int g, long step, char *why, size_t cap);

/* One decision at rank 0's step for the running counts cur (world ranks, global batch g) and
 * the models sps, over_s (an sps entry <= 0: not measured yet: no decision; over_s NULL: all
 * 0).  Returns 1 with out filled (and why: one line, for the log) when the shares should change
 * now, else 0. */
int gm_autoshare_decide(struct gm_autoshare *a, const double *sps, const double *over_s, int world,
                        int g, const int *cur, long step, int *out, char *why, size_t cap);

/* Rank 0's reading at a coordinator tick: its step and its averaged step time step_s (the
 * job's step in lockstep: global batch / the job's samples per second).  Readings within the
 * dwell, or without a new step, are not taken.  Returns 1 when the running group's measured
 * step moved more than GM_AUTOSHARE_MOVED from what it first measured, at the same shares: a
 * machine changed speed, and gm_autoshare_forget was called; else 0. */
int gm_autoshare_measure(struct gm_autoshare *a, long step, double step_s);

/* The running group's measured step (the mean of its last readings; 0: none yet); *ready
 * (may be NULL) 1 once GM_AUTOSHARE_JUDGE_TICKS readings over GM_AUTOSHARE_JUDGE_STEPS steps. */
double gm_autoshare_measured(const struct gm_autoshare *a, int *ready);

/* The outcome of the last change of shares, once the group it formed is measured (see above):
 * 0 nothing to say (no change judged, or not measured yet); 1 it paid; 2 it did not pay, kept
 * (the hysteresis grew); 3 it did not pay and measured slower: out filled with the shares
 * before it, to take back now (not judged in turn).  why filled (one line) when > 0.  cur: the
 * running shares (world ranks). */
int gm_autoshare_judge(struct gm_autoshare *a, int world, const int *cur, int *out, char *why,
                       size_t cap);

/* The job's speed changed at the same shares (gm_autoshare_measure): what the outcomes said
 * is stale.  (Not a rank's busy time moving, gm_autoshare_hist_add: under other load that
 * moved every few hundred steps while the job's step did not, and forgot a lock that held.) */
void gm_autoshare_forget(struct gm_autoshare *a);

/* The hysteresis now: GM_AUTOSHARE_HYST, its excess doubled for each change that did not pay,
 * at most GM_AUTOSHARE_HYST_MAX. */
double gm_autoshare_hyst(const struct gm_autoshare *a);

/* The speed probe (agent/jobs/job_check.c): before the job's first group, every rank times its
 * own forward and backward passes of the job's model (no optimizer step, no collective, a
 * scratch model: nothing of the job's state) at two sample counts, so that the first group
 * already runs the plan's shares instead of paying its first steps at the slowest rank's pace.
 * A rank's two points give its compute line t(n) = n / s + o; its slowness f_r is its t at the
 * equal share over the fastest rank's; the collective's own cost K (estimated from the links and
 * the model's size: coll_s) is paid at each rank's pace, f_r K, as in the plan above.  The spare
 * rule above then runs on these models (repeatedly: the slowest rank r >= 1 left out while
 * keeping it does not predict a step GM_AUTOSHARE_KEEP_GAIN faster), the kept ranks are
 * balanced, and the shares change from equal only when the balanced step is predicted
 * GM_AUTOSHARE_HYST times faster than the equal one (or a rank was left out: then the kept
 * ranks split the batch equally unless balancing them passes the same hysteresis, so that two
 * equal machines beside a spare do not start at a split the probe's noise drew).  The first group
 * then decides from its own steps past its dwell, as any first group (the probe's decision is
 * not judged by outcome: no group ran the equal shares it would be judged against). */
struct gm_autoshare_probe {
    int n[2];         /* the sample counts timed, n[0] > n[1] >= 1 */
    double busy_s[2]; /* a pass (forward and backward) at each, seconds, > 0 */
};

struct gm_autoshare_probed {
    int keep[GM_JOB_SHARES_MAX];      /* 1: in the first group; 0: left out as a spare */
    int counts[GM_JOB_SHARES_MAX];    /* the kept ranks' samples (0 for a spare), summing to g */
    double sps[GM_JOB_SHARES_MAX];    /* each rank's model: samples per second */
    double over_s[GM_JOB_SHARES_MAX]; /* and overhead per step (o_r + f_r K; rounds: o_r + K) */
    double slow[GM_JOB_SHARES_MAX];   /* its slowness f_r (the fastest's 1) */
    double step_s;                    /* the predicted step with counts */
    double equal_s;                   /* the predicted step at equal shares, every rank kept */
    int spares;                       /* ranks left out */
    int change;                       /* 1: counts differ from the equal split of every rank */
};

/* The decision above from world ranks' probes pr at global batch g (g >= world), the
 * collective's own cost coll_s (>= 0) at the fastest rank's pace; rounds: the group runs
 * DiLoCo, whose sync (coll_s, per step) is paid once a round over the links, not at each rank's
 * compute pace, so every rank's overhead is o_r + K, as in the plan of measured rounds
 * (gm_autoshare_plan_for).  Rank 0 is never a spare.  Returns 0 with out filled and why (one
 * line), or -EINVAL (a probe makes no sense). */
int gm_autoshare_probe_plan(const struct gm_autoshare_probe *pr, int world, int g, double coll_s,
                            int rounds, struct gm_autoshare_probed *out, char *why, size_t cap);

#endif
