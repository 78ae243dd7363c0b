/*
 * agent/jobs/rank_int.h - private to the rank's two files (as libuv's src/unix/internal.h):
 * struct gm_rank and the bridge functions rank_train.c calls in rank.c.  Nothing outside
 * agent/jobs/rank*.c includes it; the interface is agent/jobs/rank.h.
 *
 * The two files, one way: rank.c (the loop side and the bridge) calls nothing in
 * rank_train.c (the trainer thread's hooks, trainer_main, gm_rank_start).
 *
 * Locking: mu guards the request slot, the newest group's description, the
 * stop flag, the exit flag and the progress snapshot.  The loop thread owns
 * the gm_coll and the xport of the current group and of retired groups that
 * are still winding down (the graveyard: a gm_coll may only be freed when it
 * is idle, and never from inside its own callback, so retired groups are
 * reaped from the async callback).  The trainer thread owns the gradsync
 * strategy state and never touches a libuv handle.
 */
#ifndef GM_AGENT_JOBS_RANK_INT_H
#define GM_AGENT_JOBS_RANK_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "agent/jobs/autoshare.h"
#include "agent/jobs/rank.h"
#include "agent/service/metrics.h"
#include "train/gradsync.h"
#include "train/tbevents.h"

/* One collective operation asked for by the trainer thread. */
struct req {
    struct req *next;     /* pending / inflight queue (under mu, then the loop's) */
    struct req *sub_next; /* trainer only: the overlap ops awaiting wait */
    gm_gradsync_start_fn start;
    void *arg;
    uint32_t gen; /* the group it belongs to */
    int status;
    bool done;
    bool fit;    /* a sample for the rank's alpha-beta fit (set by the trainer) */
    bool counted; /* it moves gradients or parameters (gradsync's counted) */
    uint64_t t0; /* loop: when it was started */
};

struct old_group {
    struct old_group *next;
    struct gm_coll *coll; /* owned */
    struct gm_xport *x;   /* owned */
};

struct gm_rank {
    uv_loop_t *loop;
    uv_async_t async; /* trainer -> loop: a request, or the exit; async.data = this */
    const struct gm_rank_ops *ops;
    void *arg;
    pthread_t th;
    bool th_started, exit_reported, freeing;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    struct req *pending, **pending_tail; /* FIFO: asked for, not yet taken by the loop */
    uint32_t group_gen;                  /* newest group handed over */
    int group_rank, group_world;
    bool group_hier; /* the newest group runs GM_COLL_HIER over its islands */
    bool stopping, exited;
    struct gm_rank_progress prog;
    int loop_sched_fd; /* the loop thread's /proc/.../schedstat (-1: none), read by the trainer */
    uint64_t bytes_sent_total;  /* collective payload this rank sent, all groups */
    struct gm_metrics *metrics; /* borrowed, may be NULL: where the trainer publishes */
    struct gm_metrics_job mjob; /* the last published (accuracy kept between evaluations) */
    struct gm_tb_writer *tb;    /* owned, trainer thread only (NULL: none): the job's events */
    struct gm_gradsync_ab fit;  /* alpha-beta of this rank's gradient/parameter ops (loop) */
    double fit_s;               /* their seconds, summed */
    struct pending_switch {     /* a codec switch announced by the coordinator */
        bool pending, wait, answered, ok;
        uint32_t gen, seq;
        long step; /* announced; taken at the first step >= it where the codec may be left */
        struct gm_gradsync_strategy to;
    } sw;
    long at_step;                           /* the trainer passed this step's boundary */
    long align_h;                           /* gm_gradsync_switch_step(gs, 1) at that boundary */
    struct gm_gradsync_strategy next_strat; /* the strategy of the next group (set_codec) */
    bool next_strat_set;
    int next_shares[GM_JOB_SHARES_MAX]; /* the next group's samples per rank (set_shares) */
    int next_nshares;                   /* 0: none, the trainer's own (the job's) */
    /* the last counted op to complete: when the last of its peers' data began to arrive, if
     * after the op started (0: every peer's was there in time); gradsync's peers_in */
    uint64_t peers_in_ns;
    struct ckpt_note {                  /* the newest checkpoint written, until the loop takes it */
        bool pending;
        int err; /* not written: why (the path it was for) */
        long step;
        char sha256[65];
        char path[GM_JOB_PATH_MAX + 64];
    } ckpt;
    /* the largest collective's bytes to one peer (the resync broadcast: parameters and
     * optimizer state in fp32; 0: not known yet): sizes the xports' queue limits */
    size_t op_bytes_max;

    /* loop thread only */
    struct req *inflight, **inflight_tail; /* FIFO: started; gm_coll completes in order */
    struct gm_coll *coll;                  /* owned: the current group */
    struct gm_xport *x;                    /* owned */
    uint32_t coll_gen, broken_gen;
    uint64_t coll_bytes_seen; /* the current gm_coll's payload bytes sent, counted so far */
    struct old_group *graveyard;
    uint64_t payload_retired; /* gradient bytes sent by retired groups */

    /* trainer thread only */
    uint64_t bytes_at_step; /* bytes_sent_total at the last step's report */
    size_t nparams;         /* trainable: what a step all-reduces (frozen ones never move) */
    struct req *submitted, **submitted_tail; /* overlap: heap reqs, until wait */
    int submit_err;
    uint32_t synced_gen;
    struct gm_gradsync *gs;    /* owned */
    int trainer_sched_fd;      /* this thread's /proc/.../schedstat (-1: none) */
    uint64_t wait_delay_ns;    /* its and the loop's run delay inside collective waits since the
                                * last step (rank.c wait_done) */
    uint64_t wait_loop_cpu_ns; /* the loop thread's CPU time inside those waits (the trainer
                                * slept: taken from nobody) */
    /* the schedstat readings at the last step's end (cpu_taken: gm_gradsync_cpu_taken over
     * each step); sched_ok: they were read */
    uint64_t sched_loop_run, sched_tr_run, sched_tr_delay;
    bool sched_ok;
    long taken_n;  /* steps in prog.cpu_taken_s since the group or codec began */
    int fit_epoch; /* the epoch last logged */
    struct {       /* this epoch's step time, summed: event=step-split */
        long steps;
        double compute_s, data_s, collective_s, optimizer_s, cpu_taken_s;
    } split;
    bool fit_skip; /* the next counted op waits for rank 0's evaluation or a resync */
    /* shares = auto: this group's step averages (prog.step_s and the rest), and the last
     * after_step hook's time (DiLoCo: its sync's wait) and whether it waited for a sync */
    struct gm_autoshare_avg avg;
    double after_s;
    bool after_synced;
    struct gm_gradsync_strategy strat;
    struct gm_gradsync_exec exec;
    float *state_buf; /* owned: the resync broadcast */
    struct gm_train_comm comm;
    struct gm_train_hooks hooks;
    struct gm_train_opts opts;
    volatile sig_atomic_t stop;
    struct gm_job job; /* owned copy */
    char out[GM_JOB_PATH_MAX];
    char ckpt_dir[GM_JOB_PATH_MAX];
    struct gm_ckpt_ref committed[GM_RANK_COMMITTED_MAX];
    int err;
    char err_line[512]; /* the trainer's last error line when err != 0 (read after the join) */
    struct gm_train_summary sum;
};

/* --- rank.c: the bridge ------------------------------------------------------------------ */

/* Sets up the request queues, rk->exec (gradsync's executor over the loop) and the async
 * handle on rk->loop (async.data = rk); 0 or a libuv error. */
/* The run delay (ns: time runnable but not running, field 2) of the thread whose
 * /proc/.../schedstat fd is, 0 where it cannot be read.  Any thread. */
uint64_t gm_rank_sched_delay_ns(int fd);
/* Both fields: CPU time (ns: field 1) into *run and run delay into *delay; 0, or -1 (both
 * then 0) where they cannot be read.  Any thread. */
int gm_rank_sched_read(int fd, uint64_t *run, uint64_t *delay);

GM_MUST_CHECK int gm_rank_bridge_open(struct gm_rank *rk);
/* The thread never started: closes the async handle, which frees rk. */
void gm_rank_bridge_close(struct gm_rank *rk);
/* rk->exec's run, for the trainer thread: the op runs on the loop, the trainer waits for
 * it (ctx: the rank). */
int gm_rank_bridge_run(void *ctx, gm_gradsync_start_fn start, void *arg, bool counted);
/* rk->exec's wait: waits for every op submitted for overlap; the first error, or 0. */
int gm_rank_bridge_wait(void *ctx);

#endif
