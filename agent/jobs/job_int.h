/*
 * agent/jobs/job_int.h - private to the job room's files (agent/jobs/job*.c): the job
 * structures, the limits, and the functions the files share.  Not for any other file: the
 * rest of the agent sees the room through agent/jobs/job.h.
 *
 * The files, bottom up; each calls only the files above it in this list (none calls back):
 *   job.c            the spine: registry, history, helpers, rank callbacks, islands, groups
 *                    (with shares = auto's shares for each), the end of a job, teardown
 *   job_codec.c      codec = auto: the choice at submit and switching mid-run; shares = auto:
 *                    the ranks' step reports, re-balancing, spares (agent/jobs/autoshare.h)
 *   job_check.c      the coordinator: take a job, hash, the trainer's check, offer, compare
 *                    checks (files, checkpoint room), start
 *   job_partition.c  no majority, no training: step down, paused, takeover
 *   job_member.c     the member: offers, groups, reports, the end, forwarding a submit
 *   job_control.c    the control commands and the JSON views
 *   job_frames.c     frame dispatch, the TRAIN stash, link up/down, the timer, gm_jobs_new
 * Shared functions carry the jobs_ prefix; everything else stays static in its file.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_JOBS_JOB_INT_H
#define GM_AGENT_JOBS_JOB_INT_H

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/jobs/autocodec.h"
#include "agent/jobs/autoshare.h"
#include "agent/jobs/datahash.h"
#include "agent/jobs/job.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/service/metrics.h"
#include "agent/jobs/rank.h"
#include "agent/jobs/shareprobe.h"
#include "agent/jobs/xport.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "train/ckpt/ckpt.h"
#include "train/job.h"

#define HISTORY_MAX 16
#define STASH_MAX (64u << 20)
#define ORPHAN_TIMEOUT_MS 30000 /* a member waits this long for a chief to take a job over */
#define CHECK_TIMEOUT_MS 120000
#define MESH_TIMEOUT_MS 60000 /* a member waits this long for links to the other ranks */
#define TICK_MS 200
/* Silent ranks and a stalled coordinator (job.c, "Silent ranks"): */
#define STALL_MS 1500      /* the room's tick this late: this process did not run */
#define STALL_HOLD_MS 3000 /* after a stall, form no group for this long */
#define NODE_LEN (GM_ID_NAME_MAX + 1)

enum jstate { J_CHECKING, J_RUNNING, J_DONE, J_CANCELLED, J_FAILED, J_REFUSED };

struct part {
    char node[NODE_LEN];
    bool checked;  /* its dataset equals ours */
    bool answered; /* its JOB_CHECK came, not compared yet */
    bool spare;    /* shares = auto left it out: too slow to help (spare_why) */
    char spare_why[200];
    struct gm_jobfile *files; /* owned: its answer */
    size_t nfiles;
    enum gm_jobfile_group group; /* what its answer's entries stand for */
    char error[GM_JOB_MSG_MAX];
    bool have_room;     /* its answer said how much its checkpoint directory can take */
    uint64_t ckpt_room; /* bytes */
    bool have_probe;    /* shares = auto: its speed probe came with its answer */
    struct gm_autoshare_probe probe;
};

struct job {
    struct job *next; /* history */
    char id[GM_JOB_ID_LEN + 1];
    bool coord; /* coordinated here */
    char coordinator[NODE_LEN];
    enum jstate state;
    char error[GM_JOB_MSG_MAX];
    struct gm_job job; /* parsed; owns the text */
    char origin[256];
    uint64_t t_submit, t_start, t_end;
    /* coordinator */
    struct part *parts; /* owned */
    size_t nparts;
    struct gm_jobfile *files; /* owned: this node's dataset */
    size_t nfiles;
    bool own_hashed;
    bool prechecked;         /* the trainer's own checks passed here (gm_trainer_check) */
    uint64_t ckpt_bytes;     /* about one checkpoint's size, from that check */
    uint32_t gen;            /* current group */
    char (*ranks)[NODE_LEN]; /* owned: the current group's rank order */
    int *islands;            /* owned: the current group's LAN islands (world entries), or NULL */
    size_t world;
    uint32_t failed_gen;  /* last generation reported failed (re-form once) */
    unsigned fail_streak; /* groups that failed in a row without a step taken */
    long streak_step;     /* the coordinator's step when the last one failed */
    uint64_t reform_at;   /* a delayed re-form is due then (0: none) */
    /* member */
    uint64_t orphan_since; /* its coordinator was lost then, waiting for the next chief (0: no) */
    char lost_coord[NODE_LEN];
    /* both */
    struct gm_rank *rank; /* owned; NULL when not running here */
    bool stop_sent;
    char weights[1200]; /* "node:path" for a member that learned it from JOB_END */
    double test_accuracy, test_loss, samples_per_s, wall_s;
    long steps;
    int epochs;
    uint64_t bytes_sent;
    struct linkacc *acc; /* owned: training-channel bytes per peer node, of retired groups */
    size_t nacc;
    bool remote_summary;    /* a member: the coordinator's figures came with JOB_END */
    bool codec_auto;        /* [comm] codec = auto, resolved by the coordinator into job.comm */
    /* coordinator: auto's DiLoCo pick priced its communication per step (auto_comm_s, s):
     * the shares probe's collective (job_codec.c probe_coll_s) */
    bool have_auto_comm;
    double auto_comm_s;
    char codec_reason[340]; /* coordinator: why auto picked what it did */
    /* coordinator: why a job named like an earlier one did not go on from its checkpoints */
    char note[512];
    struct gm_autoswitch *asw; /* owned, coordinator of an auto job: switching mid-run */
    bool codec_pending;        /* coordinator: auto's timing runs on the threadpool (job_codec.c);
                                * the job starts once it is back */
    uint64_t switch_ns;        /* coordinator: when the pending switch was announced */
    uint64_t fit_sent_ns;      /* member: its last fit report */
    uint64_t fit_sent_ops;
    /* [job] shares = auto (agent/jobs/autoshare.h): the current group's samples per rank
     * (nshares = world; 0: none, equal), the ranks' reported steps (coordinator; rank order
     * of the current group, samples 0: not yet), the decision's state */
    int shares[GM_JOB_SHARES_MAX];
    int nshares;
    struct gm_autoshare_obs obs[GM_JOB_SHARES_MAX];
    struct gm_autoshare ash;
    /* coordinator: each node's busy time at the shares it ran, across groups (the fit of
     * busy = n / s + o; node "" : a free slot) */
    struct {
        char node[NODE_LEN];
        struct gm_autoshare_hist h;
    } fits[GM_JOB_SHARES_MAX];
    char shares_reason[320]; /* coordinator: why the last change */
    /* coordinator, shares = auto: its own speed probe (agent/jobs/shareprobe.h) before the
     * first group, and whether the first group takes the probe's shares (jobs_shares_probe) */
    bool probe_started, probe_done, have_probe, probe_shares;
    /* shares = auto: the probe found this coordinator (the chief) too slow to help and a
     * faster voter to lead: handed over once the first group has stepped ("" when not) */
    char handover_to[NODE_LEN];
    char handover_why[256];
    struct gm_shareprobe probe;
    uint64_t shares_log_ns;  /* coordinator: the last event=shares-measure line */
    struct gm_rank_progress last;
};

struct linkacc {
    char node[NODE_LEN];
    uint64_t sent, recv;
};

struct stashed {
    struct stashed *next;
    char node[NODE_LEN];
    struct gm_frame_hdr h;
    uint8_t data[];
};

struct hashreq {
    struct gm_jobs *j;
    char id[GM_JOB_ID_LEN + 1];
    char reply_to[NODE_LEN]; /* "" : the coordinator's own dataset */
};

/* A member's answer to an offer, held until its dataset is hashed and it has a link to
 * every node it will train with (or the deadline passes). */
struct pending_offer {
    bool active, hashed;
    char id[GM_JOB_ID_LEN + 1];
    char coord[NODE_LEN];
    char (*ranks)[NODE_LEN]; /* owned */
    size_t nranks;
    struct gm_jobfile *files; /* owned: the answer's entries (gm_datahash_group) */
    size_t nfiles;
    enum gm_jobfile_group group;
    char error[GM_JOB_MSG_MAX];
    bool have_room;     /* ckpt_room is known */
    uint64_t ckpt_room; /* what this node's checkpoint directory of the job can take */
    uint64_t deadline;
    uint64_t term; /* the offer's: answered once this node's term has caught up with it */
    /* shares = auto: the speed probe, run once hashed (the answer waits for it) */
    bool want_probe, probing, have_probe;
    struct gm_autoshare_probe probe;
    char *text; /* owned: the offered job's text, for the probe */
    size_t text_len;
    char origin[300];
};

/* A JOB_GROUP for the current job, of this node's term or a newer one, from a node that raft
 * has not yet named chief here (a chief that handed its role on, starved of CPU, hears the new
 * chief's group before raft names it): dropped, it would never come again and the new chief's
 * group would wait for this node for ever.  Replayed by the room's tick once raft names its
 * sender chief; dropped once a newer term comes or after ORPHAN_TIMEOUT_MS. */
struct held_group {
    char id[GM_JOB_ID_LEN + 1]; /* its job's: replayed only while that job is current */
    uint8_t *payload;           /* owned, NULL: none */
    uint32_t len;
    char node[NODE_LEN];
    uint64_t term, until;
};

struct gm_jobs {
    struct gm_jobs_env env;
    struct pending_offer po;
    struct held_group held;
    struct gm_datahash *dh; /* owned */
    struct job *cur;        /* owned */
    struct job *history;    /* owned, newest first */
    struct stashed *stash;  /* owned */
    size_t stash_bytes;
    uv_timer_t timer; /* check timeouts */
    bool stopping;
    bool leaving;        /* gm_jobs_leave: the job goes on without this node */
    unsigned prechecks;  /* gm_trainer_check runs on the threadpool (gm_jobs_idle waits) */
    uint64_t frame_term; /* the term of the JOB_* frame being handled */
    struct autoreq *auto_req; /* auto's timing in flight (job_codec.c), or NULL */
    uint64_t t_tick;          /* the room's last tick (mono ns) */
    uint64_t stalled_until;   /* after a stall of this process: no group before then */
};

/* codec = auto's timing of the model, on libuv's threadpool (made by job_codec.c, run by
 * job_check.c); j goes NULL when the jobs room is freed first (job.c), so the answer finds
 * nothing to apply to. */
struct autoreq {
    uv_work_t work;
    struct gm_jobs *j; /* borrowed, or NULL */
    char id[GM_JOB_ID_LEN + 1];
    struct gm_job job; /* a copy of the settings, text NULL: owns nothing */
    int world, err;
    struct gm_coll_link *links; /* owned */
    int *isl;                   /* owned, may be NULL */
    struct gm_gradsync_auto_out o;
    char reason[340];
};

const char *jobs_state_name(enum jstate st);

/* job.c */
/* Coordinator, shares = auto: the shares of a group about to form (jobs_reform, after its
 * ranks are set; old_ranks: the group before, old_world of them): the ones just decided when
 * the ranks are the same, else balanced from the speeds known (which follow their nodes),
 * else none (equal). */
void jobs_shares_for_group(struct job *jb, char (*old_ranks)[NODE_LEN], size_t old_world);
/* "72:24" from n sample counts */
/* Coordinator, shares = auto: the node's busy-time history, a slot made on first use (one of a
 * node no longer in the group reused when all are taken; NULL when none is free). */
struct gm_autoshare_hist *jobs_shares_hist(struct job *jb, const char *node);
/* Coordinator, shares = auto: the current group's ranks' models (agent/jobs/autoshare.h
 * gm_autoshare_fit from their history where it has two shares, else the plan's model: plan's
 * where given (in rank order; sps 0: none), else gm_autoshare_plan of the group's own steps,
 * else the proportional rule; sps[r] = 0 where none is known).  Returns how many ranks are
 * known. */
int jobs_shares_models(struct job *jb, const struct gm_autoshare_plan *plan, double *sps,
                       double *over_s);
void jobs_job_free(struct job *jb);
/* shares = auto: this node's speed probe of job id done (err < 0: failed, for why), logged. */
void jobs_probe_logged(struct gm_jobs *j, const char *id, int err, const struct gm_shareprobe *p,
                       const char *why);
/* Coordinator: the nodes of the group jobs_reform would form now (this node first, then every
 * checked participant that is not a spare, has an up link and is not quiet, sorted), into out
 * (nparts + 1 entries); warn: log the quiet ones.  Returns how many. */
size_t jobs_group_nodes(struct gm_jobs *j, struct job *jb, char (*out)[NODE_LEN], bool warn);
uint32_t jobs_job_tag(const char *id);
uint64_t jobs_my_term(struct gm_jobs *j);
int jobs_send_msg(struct gm_jobs *j, const char *node, uint16_t type, const struct gm_jobmsg *m);
void jobs_new_id(char out[GM_JOB_ID_LEN + 1]);
void jobs_to_history(struct gm_jobs *j, struct job *jb);
struct job *jobs_find(struct gm_jobs *j, const char *id);
void jobs_autoreq_free(struct autoreq *r); /* NULL-safe */
int jobs_rank_of(const struct job *jb, const char *node);
struct linkacc *jobs_acc_of(struct job *jb, const char *node, bool add);
void jobs_account_group(struct job *jb);
void jobs_record(struct gm_jobs *j, const struct job *jb, enum jstate st);
int *jobs_group_islands(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n);
bool jobs_one_lan(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n);
int jobs_form_local(struct gm_jobs *j, struct job *jb);
int jobs_start_rank(struct gm_jobs *j, struct job *jb);
void jobs_reform(struct gm_jobs *j, struct job *jb, const char *reason);
void jobs_reform_after_failure(struct gm_jobs *j, struct job *jb, const char *why);
void jobs_end_job(struct gm_jobs *j, struct job *jb, enum jstate st, const char *msg);
void jobs_refuse(struct gm_jobs *j, struct job *jb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jobs_offer_clear(struct pending_offer *po);
void jobs_held_clear(struct held_group *hg);
json_t *jobs_ctl_error(int code, const char *msg);
bool jobs_is_chief(struct gm_jobs *j, const char *node);
bool jobs_ckpt_room(struct gm_jobs *j, const struct gm_job *job, uint64_t *room);
bool jobs_quiet(struct gm_jobs *j, const char *node);
bool jobs_stalled(struct gm_jobs *j);

/* job_codec.c */
struct autoreq *jobs_resolve_auto(struct gm_jobs *j, struct job *jb, char (*up)[NODE_LEN],
                                  size_t n);
void jobs_auto_apply(struct job *jb, struct autoreq *r, int status);
void jobs_apply_comm(struct job *jb, const struct gm_jobmsg *m);
void jobs_fit_report_tick(struct gm_jobs *j, struct job *jb);
void jobs_switch_tick(struct gm_jobs *j, struct job *jb);
/* Coordinator, shares = auto: re-decide the shares from the speeds; re-form the group with
 * new ones (agent/jobs/autoshare.h). */
void jobs_shares_tick(struct gm_jobs *j, struct job *jb);
/* Coordinator: the group's shares and speeds to the metrics endpoint (every tick). */
void jobs_shares_publish(struct gm_jobs *j, struct job *jb);
/* Coordinator, shares = auto, before the first group: the speed probes of every rank it would
 * have (its own and the members' answers) into the first group's shares and spares
 * (agent/jobs/autoshare.h gm_autoshare_probe_plan); nothing when a probe is missing. */
void jobs_shares_probe(struct gm_jobs *j, struct job *jb);
int jobs_on_switch(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
void jobs_on_switch_report(struct gm_jobs *j, struct job *jb, const char *node,
                           const struct gm_jobmsg *m);

/* job_check.c */
void jobs_own_hashed(void *arg, struct gm_jobfile *files, size_t n, const char *error);
/* Starts a checked job once nothing it waits for is left (auto's codec back, every member's
 * dataset equal to ours). */
void jobs_maybe_start(struct gm_jobs *j, struct job *jb);
int jobs_on_check(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
void jobs_offer(struct gm_jobs *j, struct job *jb, const char *node);
int jobs_coord_submit(struct gm_jobs *j, const char *text, size_t len, const char *origin,
                      const char *given_id, char id[GM_JOB_ID_LEN + 1], char *msg, size_t cap);
int jobs_on_submit(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);

/* job_partition.c */
const char *jobs_paused_why(struct gm_jobs *j, const struct job *jb, char *buf, size_t cap);
void jobs_step_down(struct gm_jobs *j, struct job *jb, const char *why);
void jobs_partition_tick(struct gm_jobs *j, struct job *jb);

/* job_member.c */
void jobs_try_answer(struct gm_jobs *j);
int jobs_on_offer(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
int jobs_on_group(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
int jobs_on_report(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
int jobs_on_end(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
int jobs_member_submit(struct gm_jobs *j, const char *coord, const char *text, size_t len,
                       const char *origin, char id[GM_JOB_ID_LEN + 1], char *msg, size_t cap);

#endif
