/*
 * agent/jobs/job.c - the job control room (see job.h).
 *
 * State: at most one current job (coordinated here or run here as a member)
 * and a short history of finished ones for `gradmesh jobs`.  The coordinator
 * tracks, per participant, whether its dataset check came back; per group
 * generation, the rank order.  TRAIN frames of a generation not formed here
 * yet wait in a bounded stash.
 */
#include "agent/jobs/job.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/rand.h>

#include "agent/jobs/autocodec.h"
#include "agent/jobs/datahash.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/jobs/rank.h"
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
#define NODE_LEN (GM_ID_NAME_MAX + 1)

enum jstate { J_CHECKING, J_RUNNING, J_DONE, J_CANCELLED, J_FAILED, J_REFUSED };

static const char *const jstate_names[] = {"checking",  "running", "done",
                                           "cancelled", "failed",  "refused"};

struct part {
    char node[NODE_LEN];
    bool checked;             /* its dataset equals ours */
    bool answered;            /* its JOB_CHECK came, not compared yet */
    struct gm_jobfile *files; /* owned: its answer */
    size_t nfiles;
    char error[GM_JOB_MSG_MAX];
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
    bool remote_summary;       /* a member: the coordinator's figures came with JOB_END */
    bool codec_auto;           /* [comm] codec = auto, resolved by the coordinator into job.comm */
    char codec_reason[340];    /* coordinator: why auto picked what it did */
    struct gm_autoswitch *asw; /* owned, coordinator of an auto job: switching mid-run */
    uint64_t switch_ns;        /* coordinator: when the pending switch was announced */
    uint64_t fit_sent_ns;      /* member: its last fit report */
    uint64_t fit_sent_ops;
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
    struct gm_jobfile *files; /* owned */
    size_t nfiles;
    char error[GM_JOB_MSG_MAX];
    uint64_t deadline;
    uint64_t term; /* the offer's: answered once this node's term has caught up with it */
};

struct gm_jobs {
    struct gm_jobs_env env;
    struct pending_offer po;
    struct gm_datahash *dh; /* owned */
    struct job *cur;        /* owned */
    struct job *history;    /* owned, newest first */
    struct stashed *stash;  /* owned */
    size_t stash_bytes;
    uv_timer_t timer; /* check timeouts */
    bool stopping;
    bool leaving;        /* gm_jobs_leave: the job goes on without this node */
    uint64_t frame_term; /* the term of the JOB_* frame being handled */
};

/* --- helpers ----------------------------------------------------------------------------- */

static void job_free(struct job *jb)
{
    if (jb == NULL)
        return;
    GM_ASSERT(jb->rank == NULL);
    gm_job_free(&jb->job);
    for (size_t i = 0; i < jb->nparts; i++)
        free(jb->parts[i].files);
    free(jb->parts);
    free(jb->files);
    free(jb->ranks);
    free(jb->islands);
    free(jb->acc);
    gm_autoswitch_free(jb->asw);
    free(jb);
}

/* A job's generations are (tag << 16) | n: the tag comes from its id, so a frame
 * still on the wire from an earlier job never passes for one of this job's. */
static uint32_t job_tag(const char *id)
{
    uint32_t t = 0;

    for (int i = 0; i < 4 && id[i]; i++)
        t = t << 4 | (uint32_t)(id[i] <= '9' ? id[i] - '0' : id[i] - 'a' + 10);
    return t & 0xffff;
}

/* Drops stashed frames that cannot be used any more: every one when jb is NULL, else
 * those of another job or of a generation older than gen. */
static void stash_drop(struct gm_jobs *j, const struct job *jb, uint32_t gen)
{
    struct stashed **pp = &j->stash;

    while (*pp != NULL) {
        struct stashed *s = *pp;
        uint32_t g = gm_xport_req_generation(s->h.req);
        if (jb == NULL || g >> 16 != job_tag(jb->id) || g < gen) {
            *pp = s->next;
            j->stash_bytes -= s->h.len;
            free(s);
        } else {
            pp = &s->next;
        }
    }
}

/* This node's raft term (0 without consensus). */
static uint64_t my_term(struct gm_jobs *j)
{
    char chief[NODE_LEN], why[8];
    uint64_t term = 0;

    if (j->env.chief != NULL)
        (void)j->env.chief(j->env.agent, chief, &term, why, sizeof(why)); /* term either way */
    return term;
}

static int send_msg(struct gm_jobs *j, const char *node, uint16_t type, const struct gm_jobmsg *m)
{
    struct gm_link *l = j->env.link_to(j->env.agent, node);
    char *json = NULL;
    size_t len = 0;
    int err;

    if (l == NULL)
        return -ENOTCONN;
    if ((err = gm_jobmsg_encode(type, m, &json, &len)) < 0)
        return err;
    err = gm_link_send(l, type, my_term(j), json, len); /* req: the term (job.h) */
    free(json);
    return err;
}

static void new_id(char out[GM_JOB_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[GM_JOB_ID_LEN / 2];

    if (RAND_bytes(b, sizeof(b)) != 1) { /* not for secrecy: a name */
        uint64_t t = gm_time_mono_ns();
        memcpy(b, &t, sizeof(b) < sizeof(t) ? sizeof(b) : sizeof(t));
    }
    for (size_t i = 0; i < sizeof(b); i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[GM_JOB_ID_LEN] = 0;
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

const char *gm_jobs_coordinator(struct gm_jobs *j, char out[NODE_LEN], char *why, size_t cap)
{
    char(*up)[NODE_LEN];
    size_t n;
    uint64_t term;
    char tmp[8];

    if (j->env.chief != NULL) {
        if (j->env.chief(j->env.agent, out, &term, why != NULL ? why : tmp,
                         why != NULL ? cap : sizeof(tmp)) != 0)
            out[0] = '\0';
        return out;
    }
    up = calloc(GM_JOB_RANKS_MAX, NODE_LEN);
    n = up != NULL ? j->env.members_up(j->env.agent, up, GM_JOB_RANKS_MAX) : 0;
    snprintf(out, NODE_LEN, "%s", j->env.node);
    for (size_t i = 0; i < n && i < GM_JOB_RANKS_MAX; i++)
        if (strcmp(up[i], out) < 0)
            snprintf(out, NODE_LEN, "%s", up[i]);
    free(up);
    return out;
}

static void to_history(struct gm_jobs *j, struct job *jb)
{
    size_t n = 0;
    struct job **pp;

    if (j->cur == jb) {
        j->cur = NULL;
        stash_drop(j, NULL, 0);
    }
    jb->next = j->history;
    j->history = jb;
    for (pp = &j->history; *pp != NULL && n < HISTORY_MAX; pp = &(*pp)->next)
        n++;
    while (*pp != NULL) {
        struct job *old = *pp;
        *pp = old->next;
        job_free(old);
    }
}

static struct job *find(struct gm_jobs *j, const char *id)
{
    if (j->cur != NULL && strcmp(j->cur->id, id) == 0)
        return j->cur;
    for (struct job *jb = j->history; jb != NULL; jb = jb->next)
        if (strcmp(jb->id, id) == 0)
            return jb;
    return NULL;
}

static int rank_of(const struct job *jb, const char *node)
{
    for (size_t i = 0; i < jb->world; i++)
        if (strcmp(jb->ranks[i], node) == 0)
            return (int)i;
    return -1;
}

static struct linkacc *acc_of(struct job *jb, const char *node, bool add)
{
    struct linkacc *a;

    for (size_t i = 0; i < jb->nacc; i++)
        if (strcmp(jb->acc[i].node, node) == 0)
            return &jb->acc[i];
    if (!add || (a = realloc(jb->acc, (jb->nacc + 1) * sizeof(*a))) == NULL)
        return NULL;
    jb->acc = a;
    a = &jb->acc[jb->nacc++];
    memset(a, 0, sizeof(*a));
    snprintf(a->node, sizeof(a->node), "%s", node);
    return a;
}

/* Adds the current group's per-link bytes to the job's totals, by node; called just
 * before the rank order changes (a new group) or the rank goes. */
static void account_group(struct job *jb)
{
    struct gm_xport *x = jb->rank != NULL ? gm_rank_xport(jb->rank) : NULL;

    if (x == NULL || jb->ranks == NULL)
        return;
    for (size_t i = 0; i < jb->world; i++) {
        struct gm_xport_stats st;
        struct linkacc *a;
        gm_xport_stats(x, (int)i, &st);
        if ((st.bytes_sent | st.bytes_recv) == 0 || (a = acc_of(jb, jb->ranks[i], true)) == NULL)
            continue;
        a->sent += st.bytes_sent;
        a->recv += st.bytes_recv;
    }
}

/* --- rank callbacks -------------------------------------------------------------------- */

/* The coordinator's job state into the chief's replicated state. */
static void record(struct gm_jobs *j, const struct job *jb, enum jstate st)
{
    if (j->env.record != NULL && jb->coord)
        j->env.record(j->env.agent, jb->id, jstate_names[st], jb->steps);
}

static void end_job(struct gm_jobs *j, struct job *jb, enum jstate st, const char *msg);

static void rank_exit(struct gm_rank *rk, int err, const struct gm_train_summary *sum, void *arg)
{
    struct gm_jobs *j = arg;
    struct job *jb = j->cur;

    if (jb == NULL || jb->rank != rk) { /* cannot happen: a rank belongs to the current job */
        gm_rank_free(rk);
        return;
    }
    gm_rank_get_progress(rk, &jb->last);
    if (jb->last.params_sha256[0])
        gm_notice("event=job-final-hash job=%s rank=%d world=%d generation=%u step=%ld "
                  "params_sha256=%s",
                  jb->id, jb->last.rank, jb->last.world, jb->last.generation, sum->steps,
                  jb->last.params_sha256);
    account_group(jb);
    jb->rank = NULL;
    gm_rank_free(rk);
    jb->steps = sum->steps;
    jb->epochs = sum->epochs;
    jb->test_accuracy = sum->test_accuracy;
    jb->test_loss = sum->test_loss;
    jb->samples_per_s = sum->samples_per_s;
    jb->wall_s = sum->wall_s;
    jb->bytes_sent = sum->bytes_sent;
    if (sum->checkpoint[0])
        snprintf(jb->weights, sizeof(jb->weights), "%s", sum->checkpoint);
    if (jb->coord && j->leaving) { /* drain: no JOB_END, the next chief takes the job over */
        jb->state = J_CANCELLED;
        jb->t_end = gm_time_mono_ns();
        snprintf(jb->error, sizeof(jb->error), "this node left the job (drain)");
        gm_notice("event=job-left job=%s step=%ld", jb->id, (long)jb->last.step);
        return;
    }
    if (jb->coord) {
        if (err == 0)
            end_job(j, jb, jb->stop_sent ? J_CANCELLED : J_DONE,
                    jb->stop_sent ? "cancelled" : "finished");
        else
            end_job(j, jb, jb->stop_sent ? J_CANCELLED : J_FAILED, gm_strerror(err));
        return;
    }
    if (err != 0 && !jb->stop_sent) {
        struct gm_jobmsg m = {.gen = gm_rank_generation(rk), .code = err};
        snprintf(m.id, sizeof(m.id), "%s", jb->id);
        snprintf(m.event, sizeof(m.event), "exit");
        snprintf(m.message, sizeof(m.message), "%s", gm_strerror(err));
        (void)send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
    }
    if (err != 0 && jb->error[0] == 0)
        snprintf(jb->error, sizeof(jb->error), "%s", gm_strerror(err));
    if (jb->state == J_RUNNING && err == 0) {
        /* every step is done here; the coordinator's JOB_END brings its evaluation */
        gm_notice("event=job-rank-finished job=%s steps=%ld", jb->id, sum->steps);
        return;
    }
    if (jb->state == J_RUNNING)
        jb->state = J_FAILED;
    jb->t_end = gm_time_mono_ns();
    gm_notice("event=job-rank-exit job=%s state=%s steps=%ld err=\"%s\"", jb->id,
              jstate_names[jb->state], sum->steps, gm_strerror(err));
    to_history(j, jb);
}

static void reform(struct gm_jobs *j, struct job *jb, const char *reason);
static bool is_chief(struct gm_jobs *j, const char *node);
static bool may_coordinate(struct gm_jobs *j);
static void step_down(struct gm_jobs *j, struct job *jb, const char *why);
static void reform_after_failure(struct gm_jobs *j, struct job *jb, const char *why);

static void rank_group_failed(struct gm_rank *rk, uint32_t gen, int err, void *arg)
{
    struct gm_jobs *j = arg;
    struct job *jb = j->cur;
    struct gm_jobmsg m = {.gen = gen, .code = err};

    (void)rk;
    if (jb == NULL)
        return;
    if (jb->coord) {
        if (gen == jb->gen && jb->failed_gen != gen) {
            jb->failed_gen = gen;
            reform_after_failure(j, jb, "an operation failed here");
        }
        return;
    }
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.event, sizeof(m.event), "group-failed");
    snprintf(m.message, sizeof(m.message), "%s", gm_strerror(err));
    (void)send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
}

/* Rank 0 committed a checkpoint: the agent replicates it to the group's other ranks. */
static void rank_checkpoint(struct gm_rank *rk, const char *path, const char *sha256, long step,
                            void *arg)
{
    struct gm_jobs *j = arg;
    struct job *jb = j->cur;
    char key[GM_JOBS_CKPT_KEY_LEN + 1];

    (void)rk;
    if (jb == NULL || !jb->coord || j->env.ckpt_written == NULL || jb->world < 1)
        return;
    gm_jobs_ckpt_key(&jb->job, key);
    j->env.ckpt_written(j->env.agent, key, path, sha256, step, jb->job.checkpoint_keep,
                        (const char(*)[GM_ID_NAME_MAX + 1])(jb->ranks + 1), jb->world - 1);
}

static const struct gm_rank_ops rank_ops = {
    .on_exit = rank_exit,
    .on_group_failed = rank_group_failed,
    .on_checkpoint = rank_checkpoint,
};

void gm_jobs_ckpt_key(const struct gm_job *job, char key[GM_JOBS_CKPT_KEY_LEN + 1])
{
    char hex[65];

    gm_ckpt_sha256_hex(job->text != NULL ? job->text : "", job->text != NULL ? job->text_len : 0,
                       hex);
    memcpy(key, hex, GM_JOBS_CKPT_KEY_LEN);
    key[GM_JOBS_CKPT_KEY_LEN] = '\0';
}

/* --- codec = auto ------------------------------------------------------------------------ */

/* Coordinator: a star VPN among the n nodes (no LAN islands split them) from the RTTs the
 * agents measured (gm_gradsync_star_hub): every rank labelled with the hub, so the group's
 * collectives gather and reduce at the hub and broadcast from it; NULL when it is no star. */
static int *star_hub(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n)
{
    double *rtt = calloc(n * n, sizeof(*rtt)), mbps;
    int *g = calloc(n, sizeof(*g)), hub = -1;

    for (size_t a = 0; rtt != NULL && j->env.link_measured != NULL && a < n; a++)
        for (size_t b = 0; b < n; b++)
            if (a != b &&
                j->env.link_measured(j->env.agent, nodes[a], nodes[b], &rtt[a * n + b], &mbps) < 0)
                rtt[a * n + b] = 0; /* unknown: the reverse stands in, or no star */
    if (rtt != NULL && g != NULL)
        hub = gm_gradsync_star_hub(rtt, (int)n, 0);
    free(rtt);
    if (hub < 0) {
        free(g);
        return NULL;
    }
    for (size_t r = 0; r < n; r++)
        g[r] = hub;
    gm_notice("event=job-star hub=%s world=%zu: the spokes reach each other through it; "
              "reducing at the hub",
              nodes[hub], n);
    return g;
}

/* Coordinator: the LAN islands of nodes (n of them, in rank order) from the link classes the
 * agents measured, or NULL when they do not split the group (one island, or none of more than
 * one rank) or are unknown. */
static int *group_islands(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n)
{
    bool *lan, any_lan = false;
    int *g;

    if (j->env.link_is_lan == NULL || n < 3)
        return NULL; /* two ranks: both islands of one, or one island: the ring either way */
    lan = calloc(n * n, sizeof(*lan));
    g = calloc(n, sizeof(*g));
    if (lan == NULL || g == NULL) {
        free(lan);
        free(g);
        return NULL; /* the ring: slower, never wrong */
    }
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++)
            lan[a * n + b] = a != b && j->env.link_is_lan(j->env.agent, nodes[a], nodes[b]);
    gm_gradsync_islands(lan, (int)n, g);
    for (size_t i = 0; i < n * n; i++)
        any_lan = any_lan || lan[i];
    free(lan);
    if (!gm_gradsync_islands_split(g, (int)n)) {
        free(g);
        /* a star is of tunnels: on a LAN, a loaded machine's RTTs could look like one */
        return any_lan ? NULL : star_hub(j, nodes, n);
    }
    return g;
}

/* Whether every pair of the n nodes is linked by a link of class lan (either end's view). */
static bool one_lan(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n)
{
    if (j->env.link_is_lan == NULL || n < 2)
        return false;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            if (!j->env.link_is_lan(j->env.agent, nodes[a], nodes[b]) &&
                !j->env.link_is_lan(j->env.agent, nodes[b], nodes[a]))
                return false;
    return true;
}

/* Coordinator, at submit: auto's choice for this node and the n members up
 * (agent/jobs/autocodec.h), into jb->job.comm; JOB_GROUP carries it to every rank. */
static void resolve_auto(struct gm_jobs *j, struct job *jb, char (*up)[NODE_LEN], size_t n)
{
    int world = (int)n + 1, err;
    struct gm_coll_link *links = calloc((size_t)world * (size_t)world, sizeof(*links));
    struct gm_gradsync_auto_out o;

    jb->codec_auto = true;
    for (int a = 0; links != NULL && a < world; a++)
        for (int b = 0; b < world; b++) {
            const char *from = a == 0 ? j->env.node : up[a - 1];
            const char *to = b == 0 ? j->env.node : up[b - 1];
            double rtt, mbps;
            if (a == b || j->env.link_measured == NULL)
                continue;
            /* a member that has not sent LINK_STATS yet: the reverse direction stands in */
            if (j->env.link_measured(j->env.agent, from, to, &rtt, &mbps) < 0 &&
                j->env.link_measured(j->env.agent, to, from, &rtt, &mbps) < 0)
                continue;
            links[a * world + b] = (struct gm_coll_link){rtt / 2e3, mbps * 1e6 / 8};
        }
    {
        char(*nodes)[NODE_LEN] = calloc((size_t)world, NODE_LEN);
        int *isl = NULL;
        if (nodes != NULL) {
            snprintf(nodes[0], NODE_LEN, "%s", j->env.node);
            for (size_t i = 0; i < n; i++)
                snprintf(nodes[i + 1], NODE_LEN, "%s", up[i]);
            isl = group_islands(j, nodes, (size_t)world);
        }
        if (nodes != NULL && one_lan(j, nodes, (size_t)world)) {
            /* one LAN island and no tunnel: full precision, as inside any island (the
             * model would price a loaded machine's PING RTT as the link's latency) */
            memset(&o, 0, sizeof(o));
            jb->job.comm.codec = GM_JOB_CODEC_FP32;
            snprintf(jb->codec_reason, sizeof(jb->codec_reason),
                     "fp32: every link of the group is on a LAN (one island: full precision)");
            err = 0;
        } else {
            err = gm_autocodec_resolve(&jb->job, world, links, isl, &o, jb->codec_reason,
                                       sizeof(jb->codec_reason));
        }
        free(nodes);
        free(isl);
    }
    free(links);
    if (err < 0)
        snprintf(jb->codec_reason, sizeof(jb->codec_reason), "fp32: auto failed (%s)",
                 gm_strerror(err));
    {
        char sp[32] = "-"; /* not predicted: the model did not run */
        if (o.speedup > 0)
            snprintf(sp, sizeof(sp), "%.2f", o.speedup);
        gm_notice("event=codec-auto job=%s codec=%s local_steps=%d world=%d speedup=%s "
                  "reason=\"%s\"",
                  jb->id, gm_job_codec_name(jb->job.comm.codec),
                  jb->job.comm.codec == GM_JOB_CODEC_DILOCO ? jb->job.comm.local_steps : 0, world,
                  sp, jb->codec_reason);
    }
    if (err == 0 && o.compute_s > 0 && jb->job.comm.auto_resolved &&
        gm_autoswitch_new(&jb->job, o.compute_s, &jb->asw) < 0)
        gm_warn("event=codec-auto-switch-off job=%s: no switching mid-run (out of memory)", jb->id);
    if (err == 0 && o.too_slow)
        gm_warn("event=codec-auto-too-slow world=%d speedup=%.2f: the links are too slow for "
                "%d agents to train faster than one (predicted %.2fx of one agent's speed)",
                world, o.speedup, world, o.speedup);
}

/* Member: the coordinator's choice for codec = auto, from JOB_GROUP. */
static void apply_comm(struct job *jb, const struct gm_jobmsg *m)
{
    enum gm_job_codec c;

    if (m->codec[0] == '\0' || gm_autocodec_parse(m->codec, &c) < 0)
        return; /* the decoder accepts only the four names */
    jb->codec_auto = true;
    jb->job.comm.codec = c;
    jb->job.comm.local_steps = (int)m->local_steps;
    jb->job.comm.auto_resolved = true;
}

/* --- codec = auto: switching mid-run (agent/jobs/autocodec.h) -------------------------------- */

#define FIT_REPORT_MS 1000 /* a member reports its rank's fit this often (with new samples) */
#define SWITCH_ANSWER_MS                                                                           \
    30000 /* every member answers a switch within this, or the group re-forms */

/* Member: the rank's fit to the coordinator. */
static void fit_report_tick(struct gm_jobs *j, struct job *jb)
{
    struct gm_jobmsg m = {.gen = jb->gen, .have_fit = true};
    struct gm_coll_link f;
    uint64_t ops, now = gm_time_mono_ns();

    if (jb->coord || !jb->codec_auto || jb->rank == NULL || jb->state != J_RUNNING ||
        now - jb->fit_sent_ns < (uint64_t)FIT_REPORT_MS * 1000000ull)
        return;
    gm_rank_get_fit(jb->rank, &f, &ops);
    if (ops == jb->fit_sent_ops)
        return;
    jb->fit_sent_ns = now;
    jb->fit_sent_ops = ops;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.event, sizeof(m.event), "fit");
    m.fit_alpha_s = f.alpha_s;
    m.fit_bytes_per_s = f.bytes_per_s;
    m.fit_ops = ops;
    (void)send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
}

/* Coordinator: the lan pairs' measurements among the current ranks (others 0). */
static struct gm_coll_link *lan_links(struct gm_jobs *j, struct job *jb)
{
    const size_t w = jb->world;
    struct gm_coll_link *l = calloc(w * w, sizeof(*l));

    for (size_t a = 0; l != NULL && a < w; a++)
        for (size_t b = 0; b < w; b++) {
            double rtt, mbps;
            if (a == b || j->env.link_is_lan == NULL || j->env.link_measured == NULL ||
                !j->env.link_is_lan(j->env.agent, jb->ranks[a], jb->ranks[b]))
                continue;
            if (j->env.link_measured(j->env.agent, jb->ranks[a], jb->ranks[b], &rtt, &mbps) == 0)
                l[a * w + b] = (struct gm_coll_link){rtt / 2e3, mbps * 1e6 / 8};
        }
    return l;
}

/* Coordinator, every tick: re-decide from the ranks' fits; announce a switch. */
static void switch_tick(struct gm_jobs *j, struct job *jb)
{
    struct gm_autoswitch_decision d;
    struct gm_gradsync_strategy cur;
    struct gm_rank_progress p;
    struct gm_coll_link f, *links;
    struct gm_jobmsg m = {0};
    uint64_t ops;
    long at;
    int err;

    if (jb->asw == NULL || jb->rank == NULL || jb->state != J_RUNNING || jb->world < 2)
        return;
    if (gm_autoswitch_pending(jb->asw, &d.seq)) {
        if (gm_time_mono_ns() - jb->switch_ns < (uint64_t)SWITCH_ANSWER_MS * 1000000ull)
            return;
        gm_warn("event=codec-switch-late job=%s seq=%u: no answer from every member in %d s; "
                "re-forming the group with the new codec",
                jb->id, d.seq, SWITCH_ANSWER_MS / 1000);
        gm_autoswitch_answer(jb->asw, 1, d.seq, false);
        gm_rank_switch_answer(jb->rank, d.seq, false);
        reform(j, jb, "a member did not answer a codec switch");
        return;
    }
    gm_rank_get_progress(jb->rank, &p);
    if (p.generation != jb->gen)
        return; /* rank 0 has not taken the current group yet */
    gm_rank_get_fit(jb->rank, &f, &ops);
    gm_autoswitch_fit(jb->asw, 0, &f, ops);
    if (gm_gradsync_strategy_from_job(&jb->job, &cur) < 0)
        return;
    cur.algo = jb->islands != NULL ? GM_COLL_HIER : GM_COLL_RING;
    links = lan_links(j, jb);
    if (links == NULL)
        return;
    err = gm_autoswitch_decide(jb->asw, &cur, links, jb->islands, p.step, p.compute_s, &d);
    free(links);
    if (err <= 0)
        return;
    if (p.total_steps > 0 && d.step >= p.total_steps) { /* the run ends before it would */
        gm_autoswitch_answer(jb->asw, 1, d.seq, false);
        return;
    }
    if ((err = gm_rank_switch(jb->rank, jb->gen, d.seq, d.step, &d.to, true, &at)) < 0) {
        gm_warn("event=codec-switch-skip job=%s seq=%u step=%ld err=\"%s\"", jb->id, d.seq, d.step,
                gm_strerror(err));
        gm_autoswitch_group(jb->asw, (int)jb->world, p.step); /* decide again later */
        return;
    }
    if (gm_autocodec_parse(d.to.name, &jb->job.comm.codec) < 0)
        return;
    jb->job.comm.local_steps = (int)d.to.local_steps;
    jb->switch_ns = gm_time_mono_ns();
    snprintf(jb->codec_reason, sizeof(jb->codec_reason), "switched: %s", d.why);
    gm_notice("event=codec-switch-announce job=%s generation=%u seq=%u step=%ld at_step=%ld "
              "lead=%d codec=%s local_steps=%u reason=\"%s\"",
              jb->id, jb->gen & 0xffff, d.seq, d.step, p.step, d.lead, d.to.name, d.to.local_steps,
              d.why);
    m.gen = jb->gen;
    m.seq = d.seq;
    m.step = d.step;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.codec, sizeof(m.codec), "%s", d.to.name);
    m.local_steps = d.to.local_steps;
    for (size_t i = 1; i < jb->world; i++)
        if ((err = send_msg(j, jb->ranks[i], GM_MSG_JOB_SWITCH, &m)) < 0)
            gm_warn("event=job-switch-send node=%s err=\"%s\"", jb->ranks[i], gm_strerror(err));
}

/* Member: the coordinator's switch; answer whether this rank takes it at that step. */
static int on_switch(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    struct gm_gradsync_strategy to;
    struct gm_jobmsg a = {.gen = m->gen, .seq = m->seq};
    enum gm_job_codec c;
    long at = -1;
    int err;

    if (jb == NULL || jb->coord || strcmp(jb->id, m->id) != 0 || strcmp(node, jb->coordinator) != 0)
        return 0; /* not this member's job: it is in none of that job's groups */
    if (jb->rank == NULL)
        err = -ESRCH;
    else if ((err = gm_autocodec_parse(m->codec, &c)) == 0 &&
             (err = gm_gradsync_strategy_of(c, &jb->job, &to)) == 0) {
        to.local_steps = m->local_steps;
        to.cap_h = true;
        err = gm_rank_switch(jb->rank, m->gen, m->seq, m->step, &to, false, &at);
    }
    if (err == 0) {
        jb->job.comm.codec = c;
        jb->job.comm.local_steps = (int)m->local_steps;
    }
    gm_notice("event=codec-switch-answer job=%s generation=%u seq=%u step=%ld at_step=%ld "
              "codec=%s ok=%d",
              jb->id, m->gen & 0xffff, m->seq, m->step, at, m->codec, err == 0);
    snprintf(a.id, sizeof(a.id), "%s", jb->id);
    snprintf(a.event, sizeof(a.event), "%s", err == 0 ? "switch-ok" : "switch-late");
    snprintf(a.message, sizeof(a.message), "%s", err == 0 ? "" : gm_strerror(err));
    a.code = err;
    a.step = at > 0 ? at : 0;
    (void)send_msg(j, node, GM_MSG_JOB_REPORT, &a);
    return 0;
}

/* Coordinator: a member's fit, or its answer to a switch. */
static void on_switch_report(struct gm_jobs *j, struct job *jb, const char *node,
                             const struct gm_jobmsg *m)
{
    int r = rank_of(jb, node), res;

    if (jb->asw == NULL || m->gen != jb->gen || r < 1)
        return;
    if (m->have_fit) {
        struct gm_coll_link f = {m->fit_alpha_s, m->fit_bytes_per_s};
        gm_autoswitch_fit(jb->asw, r, &f, m->fit_ops);
        return;
    }
    res = gm_autoswitch_answer(jb->asw, r, m->seq, strcmp(m->event, "switch-ok") == 0);
    if (res > 0 && jb->rank != NULL)
        gm_rank_switch_answer(jb->rank, m->seq, true);
    if (res < 0) {
        gm_warn("event=codec-switch-late job=%s seq=%u node=%s node_step=%ld: re-forming the "
                "group with the new codec",
                jb->id, m->seq, node, m->step);
        if (jb->rank != NULL)
            gm_rank_switch_answer(jb->rank, m->seq, false);
        reform(j, jb, "a member could not switch codec at the announced step");
    }
}

/* --- groups ------------------------------------------------------------------------------ */

/* The slowest measured link from rank me to another rank of the group (by the time a
 * gradient's worth of fp32 takes): alpha (one-way, s) and bytes a second; false if none. */
static bool slowest_link(struct gm_jobs *j, struct job *jb, int me, double *alpha, double *bps)
{
    double worst = -1;

    for (size_t i = 0; j->env.link_measured != NULL && i < jb->world; i++) {
        double rtt, mbps, t;
        if ((int)i == me ||
            j->env.link_measured(j->env.agent, jb->ranks[me], jb->ranks[i], &rtt, &mbps) < 0 ||
            !(mbps > 0) || !(rtt >= 0))
            continue;
        t = rtt / 2e3 + 4e6 / (mbps * 1e6 / 8); /* a million floats */
        if (t > worst) {
            worst = t;
            *alpha = rtt / 2e3;
            *bps = mbps * 1e6 / 8;
        }
    }
    return worst >= 0;
}

/* Builds this node's transport for group gen and hands it to the rank. */
static int form_local(struct gm_jobs *j, struct job *jb)
{
    int me = rank_of(jb, j->env.node), err;
    struct gm_xport *x = NULL;

    if (me < 0)
        return -EINVAL;
    if ((err = gm_xport_new(j->env.loop, jb->gen, me, (int)jb->world, &x)) < 0)
        return err;
    for (size_t i = 0; i < jb->world; i++) {
        if ((int)i == me)
            continue;
        struct gm_link *l = j->env.link_to(j->env.agent, jb->ranks[i]);
        if (l != NULL)
            gm_xport_set_link(x, (int)i, l);
        else
            gm_xport_link_down(x, (int)i, -ENOTCONN); /* the group fails; a new one follows */
    }
    if (jb->islands != NULL) { /* the group runs the hierarchical all-reduce over them */
        char list[4 * GM_JOB_RANKS_MAX] = "";
        size_t o = 0;
        for (size_t i = 0; i < jb->world && o < sizeof(list) - 8; i++)
            o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d", i ? "," : "", jb->islands[i]);
        gm_notice("event=job-islands job=%s generation=%u islands=%s", jb->id, jb->gen & 0xffff,
                  list);
    }
    if (jb->codec_auto) { /* the current pick (it may have switched since the job began) */
        struct gm_gradsync_strategy s;
        double alpha = 0, bps = 0;
        if (slowest_link(j, jb, me, &alpha, &bps))
            gm_rank_set_fit_prior(jb->rank, alpha, bps);
        if (gm_gradsync_strategy_from_job(&jb->job, &s) == 0)
            gm_rank_set_codec(jb->rank, &s);
    }
    if ((err = gm_rank_set_group(jb->rank, jb->gen, me, (int)jb->world, x, jb->islands)) < 0)
        return err;
    /* frames of this generation that came before the group */
    stash_drop(j, jb, jb->gen);
    for (struct stashed **pp = &j->stash; *pp != NULL;) {
        struct stashed *s = *pp;
        if (gm_xport_req_generation(s->h.req) != jb->gen) {
            pp = &s->next;
            continue;
        }
        int r = rank_of(jb, s->node);
        struct gm_link *l = j->env.link_to(j->env.agent, s->node);
        if (r >= 0 && gm_xport_on_frame(x, r, &s->h, s->data) < 0 && l != NULL)
            gm_link_fail(l, GM_ERR_PROTO, "malformed training message");
        *pp = s->next;
        j->stash_bytes -= s->h.len;
        free(s);
    }
    return 0;
}

static int start_rank(struct gm_jobs *j, struct job *jb)
{
    char dir[1024], out[1100], ckdir[1100], key[GM_JOBS_CKPT_KEY_LEN + 1];
    struct gm_ckpt_ref committed[GM_RANK_COMMITTED_MAX];
    struct gm_rank_ckpt ck = {0};
    int err;

    snprintf(dir, sizeof(dir), "%s/jobs", j->env.state_dir);
    (void)mkdir(dir, 0700);
    snprintf(dir, sizeof(dir), "%s/jobs/%s", j->env.state_dir, jb->id);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        gm_err("event=job-dir dir=%s err=\"%s\"", dir, strerror(errno));
        return -errno;
    }
    snprintf(out, sizeof(out), "%s/%s.safetensors", dir, jb->job.name);
    if (!jb->job.device_set) /* the job file did not choose: this agent's [train] device */
        jb->job.device = j->env.device;
    /* checkpoints: STATE_DIR/checkpoints/KEY (KEY from the job text, so a job submitted again
     * finds them); the coordinator resumes from the newest valid one there, if any */
    gm_jobs_ckpt_key(&jb->job, key);
    snprintf(ckdir, sizeof(ckdir), "%s/checkpoints/%s", j->env.state_dir, key);
    ck.dir = ckdir;
    ck.resume = jb->coord;
    ck.term = my_term(j);                        /* the chief's term when the job started here */
    if (jb->coord && j->env.committed != NULL) { /* only what the cluster committed */
        long nc = j->env.committed(j->env.agent, key, committed, GM_RANK_COMMITTED_MAX);
        ck.committed_only = nc >= 0;
        ck.committed = committed;
        ck.ncommitted = nc > 0 ? (size_t)nc : 0;
    }
    if ((err = gm_rank_start(j->env.loop, &jb->job, out, &ck, &rank_ops, j, &jb->rank)) < 0)
        return err;
    if (j->env.metrics != NULL)
        gm_rank_set_metrics(jb->rank, j->env.metrics(j->env.agent));
    jb->t_start = gm_time_mono_ns();
    return 0;
}

/* Coordinator: a new generation with every participant that has an up link. */
static void reform(struct gm_jobs *j, struct job *jb, const char *reason)
{
    size_t n = 1;
    struct gm_jobmsg m = {0};
    int err;

    if (jb->state != J_RUNNING || jb->rank == NULL)
        return;
    if (!may_coordinate(j)) { /* deposed or cut off: partition_tick pauses the job here */
        gm_warn("event=job-group-fenced job=%s reason=\"%s\": this node is not the chief", jb->id,
                reason);
        return;
    }
    jb->reform_at = 0;
    account_group(jb);
    snprintf(jb->ranks[0], NODE_LEN, "%s", j->env.node);
    for (size_t i = 0; i < jb->nparts; i++)
        if (jb->parts[i].checked && j->env.link_to(j->env.agent, jb->parts[i].node) != NULL)
            snprintf(jb->ranks[n++], NODE_LEN, "%s", jb->parts[i].node);
    qsort(jb->ranks + 1, n - 1, NODE_LEN, cmp_node);
    jb->world = n;
    free(jb->islands);
    jb->islands = group_islands(j, jb->ranks, n);
    if ((jb->gen & 0xffff) == 0xffff) {
        gm_rank_stop(jb->rank);
        snprintf(jb->error, sizeof(jb->error), "65535 groups in one job: giving up");
        return;
    }
    jb->gen++;
    gm_notice("event=job-group job=%s generation=%u world=%zu reason=\"%s\"", jb->id,
              jb->gen & 0xffff, n, reason);
    if (jb->asw != NULL) {
        struct gm_rank_progress p;
        gm_rank_get_progress(jb->rank, &p);
        gm_autoswitch_group(jb->asw, (int)n, p.step);
    }
    m.gen = jb->gen;
    m.ranks = jb->ranks;
    m.nranks = n;
    m.global_batch = jb->job.optim.global_batch;
    m.islands = jb->islands; /* borrowed; m is not freed */
    if (jb->codec_auto) {    /* auto's choice, so every rank runs the same strategy */
        snprintf(m.codec, sizeof(m.codec), "%s", gm_job_codec_name(jb->job.comm.codec));
        m.local_steps = (uint32_t)jb->job.comm.local_steps;
    }
    m.text = jb->job.text;
    m.text_len = jb->job.text_len;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.origin, sizeof(m.origin), "%s", jb->origin);
    for (size_t i = 1; i < n; i++)
        if ((err = send_msg(j, jb->ranks[i], GM_MSG_JOB_GROUP, &m)) < 0)
            gm_warn("event=job-group-send node=%s err=\"%s\"", jb->ranks[i], gm_strerror(err));
    if ((err = form_local(j, jb)) < 0) {
        gm_rank_stop(jb->rank);
        snprintf(jb->error, sizeof(jb->error), "cannot form group %u: %s", jb->gen,
                 gm_strerror(err));
    }
}

/* A group failed without anyone leaving (a link that is not up yet, a glitch): re-form
 * at once the first time, then back off (0.2 s doubling to 5 s) while groups keep failing
 * before a single step is taken, so a flapping link cannot spin the cluster. */
static void reform_after_failure(struct gm_jobs *j, struct job *jb, const char *why)
{
    struct gm_rank_progress p = {0};
    uint64_t delay_ms;

    if (jb->rank != NULL)
        gm_rank_get_progress(jb->rank, &p);
    if (p.step > jb->streak_step)
        jb->fail_streak = 0;
    jb->streak_step = p.step;
    if (jb->fail_streak++ == 0) {
        reform(j, jb, why);
        return;
    }
    delay_ms = 100ull << (jb->fail_streak < 6 ? jb->fail_streak : 6);
    if (delay_ms > 5000)
        delay_ms = 5000;
    jb->reform_at = gm_time_mono_ns() + delay_ms * 1000000ull;
    gm_warn("event=job-group-retry job=%s failures=%u delay_ms=%llu reason=\"%s\"", jb->id,
            jb->fail_streak, (unsigned long long)delay_ms, why);
}

/* --- the end ----------------------------------------------------------------------------- */

static void end_job(struct gm_jobs *j, struct job *jb, enum jstate st, const char *msg)
{
    struct gm_jobmsg m = {0};

    jb->state = st;
    record(j, jb, st);
    if (st != J_DONE && jb->error[0] == 0)
        snprintf(jb->error, sizeof(jb->error), "%s", msg);
    jb->t_end = gm_time_mono_ns();
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.state, sizeof(m.state), "%s",
             st == J_DONE        ? "done"
             : st == J_CANCELLED ? "cancelled"
                                 : "failed");
    snprintf(m.message, sizeof(m.message), "%s", msg);
    if (st == J_DONE) {
        m.have_summary = true;
        m.test_accuracy = jb->test_accuracy;
        m.steps = jb->steps;
        m.samples_per_s = jb->samples_per_s;
        snprintf(m.weights, sizeof(m.weights), "%.1000s", jb->weights);
    }
    for (size_t i = 0; i < jb->nparts; i++)
        (void)send_msg(j, jb->parts[i].node, GM_MSG_JOB_END, &m);
    if (st == J_DONE)
        gm_notice("event=job-done job=%s name=%s steps=%ld test_accuracy=%.2f samples_per_s=%.0f "
                  "weights=%s",
                  jb->id, jb->job.name, jb->steps, jb->test_accuracy, jb->samples_per_s,
                  jb->weights);
    else
        gm_notice("event=job-end job=%s state=%s msg=\"%s\"", jb->id, jstate_names[st], jb->error);
    if (jb->rank != NULL) { /* still running here: it ends at its next step */
        jb->stop_sent = true;
        gm_rank_stop(jb->rank);
        return;
    }
    to_history(j, jb);
}

static void refuse(struct gm_jobs *j, struct job *jb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void refuse(struct gm_jobs *j, struct job *jb, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(jb->error, sizeof(jb->error), fmt, ap);
    va_end(ap);
    gm_warn("event=job-refused job=%s msg=\"%s\"", jb->id, jb->error);
    end_job(j, jb, J_REFUSED, jb->error);
}

/* --- checks ------------------------------------------------------------------------------ */

static void maybe_start(struct gm_jobs *j, struct job *jb)
{
    int err = -ENOMEM; /* when the calloc fails */

    if (jb->state != J_CHECKING || !jb->own_hashed)
        return;
    for (size_t i = 0; i < jb->nparts; i++)
        if (!jb->parts[i].checked)
            return;
    jb->state = J_RUNNING;
    record(j, jb, J_RUNNING);
    jb->ranks = calloc(jb->nparts + 1, NODE_LEN);
    if (jb->ranks == NULL || (err = start_rank(j, jb)) < 0) {
        refuse(j, jb, "cannot start the trainer: %s", gm_strerror(err));
        return;
    }
    reform(j, jb, "start");
}

/* Compares a member's files with ours; "" when equal. */
static void compare(const struct job *jb, const char *node, const struct gm_jobfile *f, size_t n,
                    char *why, size_t cap)
{
    size_t a = 0, b = 0;

    why[0] = 0;
    while (a < jb->nfiles || b < n) {
        int c = a == jb->nfiles ? 1 : b == n ? -1 : strcmp(jb->files[a].name, f[b].name);
        if (c < 0) {
            snprintf(why, cap, "member %s is missing %.160s/%.160s", node, jb->job.data.dir,
                     jb->files[a].name);
            return;
        }
        if (c > 0) {
            snprintf(why, cap, "member %s has %.160s/%.160s, which %s does not", node,
                     jb->job.data.dir, f[b].name, jb->coordinator);
            return;
        }
        if (strcmp(jb->files[a].sha256, f[b].sha256) != 0 || jb->files[a].size != f[b].size) {
            snprintf(why, cap, "member %s: %.160s/%.160s differs (sha256 %.12s..., here %.12s...)",
                     node, jb->job.data.dir, f[b].name, f[b].sha256, jb->files[a].sha256);
            return;
        }
        a++;
        b++;
    }
}

static void offer_clear(struct pending_offer *po)
{
    free(po->ranks);
    free(po->files);
    memset(po, 0, sizeof(*po));
}

/* Sends the pending offer's JOB_CHECK when it can: hashed, and linked to every rank. */
static void try_answer(struct gm_jobs *j)
{
    struct pending_offer *po = &j->po;
    struct gm_jobmsg m = {0};
    const char *missing = NULL;

    if (!po->active || !po->hashed || j->stopping)
        return;
    /* a node cut off from the chief that offers rejoins with an old term: until raft brings
     * it up to date, its answer would be dropped as stale (gm_jobs_on_frame) */
    if (my_term(j) < po->term && gm_time_mono_ns() < po->deadline)
        return;
    for (size_t i = 0; i < po->nranks && po->error[0] == 0; i++)
        if (strcmp(po->ranks[i], j->env.node) != 0 &&
            j->env.link_to(j->env.agent, po->ranks[i]) == NULL)
            missing = po->ranks[i];
    if (missing != NULL && gm_time_mono_ns() < po->deadline)
        return; /* its link may be coming up (a restarted member redials with backoff) */
    snprintf(m.id, sizeof(m.id), "%s", po->id);
    if (po->error[0])
        snprintf(m.message, sizeof(m.message), "%s", po->error);
    else if (missing != NULL)
        snprintf(m.message, sizeof(m.message), "no link to %s after %d s", missing,
                 MESH_TIMEOUT_MS / 1000);
    else {
        m.files = po->files;
        m.nfiles = po->nfiles;
    }
    (void)send_msg(j, po->coord, GM_MSG_JOB_CHECK, &m);
    offer_clear(po);
}

static void evaluate(struct gm_jobs *j, struct job *jb);

static void hashed(void *arg, struct gm_jobfile *files, size_t n, const char *error)
{
    struct hashreq *hr = arg;
    struct gm_jobs *j = hr->j;
    struct job *jb = find(j, hr->id);

    if (hr->reply_to[0]) { /* a member answering an offer: once it can reach every rank */
        struct pending_offer *po = &j->po;
        if (!po->active || strcmp(po->id, hr->id) != 0 || po->hashed) {
            free(files);
            free(hr);
            return;
        }
        po->hashed = true;
        po->files = files;
        po->nfiles = error[0] ? 0 : n;
        snprintf(po->error, sizeof(po->error), "%s", error);
        free(hr);
        try_answer(j);
        return;
    }
    /* checking a submitted job, or a job taken over while it runs (takeover) */
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
        refuse(j, jb, "%s (on %s, the coordinator)", error, j->env.node);
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
            compare(jb, p->node, p->files, p->nfiles, why, sizeof(why));
        free(p->files);
        p->files = NULL;
        p->nfiles = 0;
        if (why[0] && jb->state == J_CHECKING) {
            refuse(j, jb, "%s", why);
            return;
        }
        if (why[0]) {
            gm_warn("event=job-member-refused job=%s node=%s msg=\"%s\"", jb->id, p->node, why);
            continue;
        }
        p->checked = true;
        if (jb->state == J_RUNNING)
            reform(j, jb, "a member came (back)");
    }
    maybe_start(j, jb);
}

static int on_check(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
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
    m->files = NULL;
    snprintf(p->error, sizeof(p->error), "%s", m->message);
    p->answered = true;
    evaluate(j, jb);
    return 0;
}

/* Offers the job to node, naming the nodes it would train with: this one and every
 * participant with an up link.  The member answers once it has a link to each, so a
 * group never forms around a missing member-to-member link. */
static void offer(struct gm_jobs *j, struct job *jb, const char *node)
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
    if ((err = send_msg(j, node, GM_MSG_JOB_OFFER, &m)) < 0)
        gm_warn("event=job-offer node=%s err=\"%s\"", node, gm_strerror(err));
    free(m.ranks);
}

/* --- member side -------------------------------------------------------------------------- */

static int member_parse(struct gm_jobmsg *m, struct gm_job *job)
{
    char origin[300];

    snprintf(origin, sizeof(origin), "%s", m->origin[0] ? m->origin : "job");
    return gm_job_parse(m->text, m->text_len, origin, job);
}

static int on_offer(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct gm_job job;
    struct hashreq *hr;
    int err;

    if ((err = member_parse(m, &job)) < 0) {
        struct gm_jobmsg r = {0};
        snprintf(r.id, sizeof(r.id), "%s", m->id);
        snprintf(r.message, sizeof(r.message), "the job does not parse here (see %s's log)",
                 j->env.node);
        return send_msg(j, node, GM_MSG_JOB_CHECK, &r);
    }
    hr = calloc(1, sizeof(*hr));
    if (hr == NULL) {
        gm_job_free(&job);
        return -ENOMEM;
    }
    offer_clear(&j->po); /* a newer offer replaces an unanswered one */
    j->po.active = true;
    snprintf(j->po.id, sizeof(j->po.id), "%s", m->id);
    snprintf(j->po.coord, sizeof(j->po.coord), "%s", node);
    j->po.ranks = m->ranks;
    j->po.nranks = m->nranks;
    m->ranks = NULL;
    j->po.deadline = gm_time_mono_ns() + (uint64_t)MESH_TIMEOUT_MS * 1000000ull;
    j->po.term = j->frame_term;
    hr->j = j;
    snprintf(hr->id, sizeof(hr->id), "%s", m->id);
    snprintf(hr->reply_to, sizeof(hr->reply_to), "%s", node);
    err = gm_datahash_start(j->dh, job.data.dir, job.data.kind == GM_JOB_DATA_KIND_FOLDER, hashed,
                            hr);
    gm_job_free(&job);
    if (err < 0)
        free(hr);
    return err;
}

static int on_group(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    int err;

    if (jb != NULL && strcmp(jb->id, m->id) != 0) {
        if (jb->coord)
            return GM_ERR_PROTO; /* two coordinators: refuse the other one's group */
        if (jb->rank != NULL) {
            gm_warn("event=job-replaced job=%s by=%s", jb->id, m->id);
            jb->stop_sent = true;
            gm_rank_stop(jb->rank);
            return 0; /* the coordinator sends the group again after our report */
        }
        to_history(j, jb);
        jb = NULL;
    }
    if (jb == NULL) {
        jb = calloc(1, sizeof(*jb));
        if (jb == NULL)
            return -ENOMEM;
        snprintf(jb->id, sizeof(jb->id), "%s", m->id);
        snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", node);
        snprintf(jb->origin, sizeof(jb->origin), "%s", m->origin);
        jb->test_accuracy = NAN;
        jb->t_submit = gm_time_mono_ns();
        if ((err = member_parse(m, &jb->job)) < 0) {
            free(jb);
            return 0;
        }
        jb->job.optim.global_batch = m->global_batch; /* the coordinator's, fixed at submit */
        jb->job.optim.batch = 0;
        apply_comm(jb, m);
        jb->state = J_RUNNING;
        j->cur = jb;
        if ((err = start_rank(j, jb)) < 0) {
            jb->state = J_FAILED;
            snprintf(jb->error, sizeof(jb->error), "cannot start the trainer: %s",
                     gm_strerror(err));
            to_history(j, jb);
            return 0;
        }
        gm_notice("event=job-joined job=%s name=%s coordinator=%s", jb->id, jb->job.name, node);
    }
    if (jb->rank == NULL && jb->state == J_CHECKING && !jb->coord &&
        strcmp(node, jb->coordinator) == 0) {         /* our forwarded submit: it starts */
        jb->job.optim.global_batch = m->global_batch; /* the coordinator's, fixed at submit */
        jb->job.optim.batch = 0;
        apply_comm(jb, m);
        jb->state = J_RUNNING;
        if ((err = start_rank(j, jb)) < 0) {
            jb->state = J_FAILED;
            snprintf(jb->error, sizeof(jb->error), "cannot start the trainer: %s",
                     gm_strerror(err));
            to_history(j, jb);
            return 0;
        }
    }
    if (jb->rank != NULL && jb->state == J_RUNNING && strcmp(node, jb->coordinator) != 0 &&
        strcmp(node, j->env.node) != 0 && is_chief(j, node)) {
        /* the chief took the job over: from a lost coordinator, or from this node, deposed */
        if (jb->coord)
            step_down(j, jb, "a group from the chief");
        if (jb->orphan_since == 0)
            snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", jb->coordinator);
        gm_notice("event=job-coordinator-new job=%s coordinator=%s lost=%s", jb->id, node,
                  jb->lost_coord);
        snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", node);
        jb->orphan_since = 0;
    }
    if (strcmp(node, jb->coordinator) != 0 || jb->rank == NULL || m->gen <= jb->gen)
        return 0;         /* stale */
    jb->orphan_since = 0; /* a group from the coordinator: it was a link that came back */
    account_group(jb);
    free(jb->ranks);
    jb->ranks = m->ranks;
    m->ranks = NULL;
    free(jb->islands);
    jb->islands = m->islands; /* NULL: none */
    m->islands = NULL;
    jb->world = m->nranks;
    jb->gen = m->gen;
    apply_comm(jb, m); /* codec = auto: the pick may have switched since the first group */
    if ((err = form_local(j, jb)) < 0)
        gm_warn("event=job-form job=%s generation=%u err=\"%s\"", jb->id, jb->gen & 0xffff,
                gm_strerror(err));
    return 0;
}

static int on_report(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;

    if (jb == NULL || !jb->coord || strcmp(jb->id, m->id) != 0 || jb->state != J_RUNNING)
        return 0;
    if (m->have_fit || strncmp(m->event, "switch-", 7) == 0) {
        on_switch_report(j, jb, node, m);
        return 0;
    }
    if (strcmp(m->event, "exit") == 0) {
        char why[GM_JOB_MSG_MAX + 64];
        snprintf(why, sizeof(why), "rank on %s stopped: %s", node, m->message);
        if (m->code == GM_ERR_MISMATCH)
            snprintf(why, sizeof(why),
                     "parameters differ between ranks (hash check failed on %s and its peers)",
                     node);
        end_job(j, jb, J_FAILED, why);
        return 0;
    }
    if (m->gen == jb->gen && jb->failed_gen != m->gen) {
        jb->failed_gen = m->gen;
        reform_after_failure(j, jb, "a member's operation failed");
    }
    return 0;
}

static int on_end(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = find(j, m->id);

    if (jb == NULL || jb->coord || strcmp(node, jb->coordinator) != 0)
        return 0;
    jb->state = strcmp(m->state, "done") == 0        ? J_DONE
                : strcmp(m->state, "cancelled") == 0 ? J_CANCELLED
                : strcmp(m->state, "refused") == 0   ? J_REFUSED
                                                     : J_FAILED;
    jb->t_end = gm_time_mono_ns();
    if (m->have_summary) { /* the coordinator's figures: rank 0 evaluated and wrote them */
        jb->test_accuracy = m->test_accuracy;
        jb->steps = m->steps;
        jb->samples_per_s = m->samples_per_s;
        snprintf(jb->weights, sizeof(jb->weights), "%s:%s", node, m->weights);
        jb->remote_summary = true;
    }
    if (jb->state != J_DONE)
        snprintf(jb->error, sizeof(jb->error), "%s", m->message);
    if (jb->rank != NULL) {
        if (jb->state != J_DONE) {
            jb->stop_sent = true;
            gm_rank_stop(jb->rank);
        }
        return 0; /* its exit moves it to the history */
    }
    if (jb == j->cur)
        to_history(j, jb);
    return 0;
}

/* --- frames ------------------------------------------------------------------------------- */

int gm_jobs_handles(uint16_t type)
{
    return type == GM_MSG_TRAIN || (type >= GM_MSG_JOB_OFFER && type <= GM_MSG_JOB_SWITCH);
}

static int on_train(struct gm_jobs *j, struct gm_link *l, const char *node,
                    const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct job *jb = j->cur;
    uint32_t gen = gm_xport_req_generation(h->req);
    struct stashed *s;

    (void)l;
    if (jb != NULL && gen >> 16 != job_tag(jb->id))
        return 0; /* an earlier job's message still on the wire */
    if (jb != NULL && jb->rank != NULL && gen == gm_rank_generation(jb->rank)) {
        int r = rank_of(jb, node);
        struct gm_xport *x = gm_rank_xport(jb->rank);
        if (r < 0 || r == rank_of(jb, j->env.node))
            return GM_ERR_PROTO; /* not a rank of this group */
        return x != NULL ? gm_xport_on_frame(x, r, h, payload) : 0;
    }
    if (jb != NULL && jb->rank != NULL && gen < gm_rank_generation(jb->rank))
        return 0; /* a retired group's message still on the wire */
    if (j->stash_bytes + h->len > STASH_MAX)
        return GM_ERR_PROTO; /* nobody asked for that much before its group */
    s = malloc(sizeof(*s) + h->len);
    if (s == NULL)
        return -ENOMEM;
    snprintf(s->node, sizeof(s->node), "%s", node);
    s->h = *h;
    memcpy(s->data, payload, h->len);
    s->next = NULL;
    struct stashed **pp = &j->stash;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = s;
    j->stash_bytes += h->len;
    return 0;
}

static int on_submit(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);

/* The job messages and their handlers (the frames' link states are jobroom.c's table). */
static const struct {
    uint16_t type;
    int (*fn)(struct gm_jobs *j, const char *node, struct gm_jobmsg *m);
} handlers[] = {
    {GM_MSG_JOB_OFFER, on_offer},   {GM_MSG_JOB_CHECK, on_check}, {GM_MSG_JOB_GROUP, on_group},
    {GM_MSG_JOB_REPORT, on_report}, {GM_MSG_JOB_END, on_end},     {GM_MSG_JOB_SUBMIT, on_submit},
    {GM_MSG_JOB_SWITCH, on_switch},
};

int gm_jobs_on_frame(struct gm_jobs *j, struct gm_link *l, const char *node,
                     const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct gm_jobmsg m;
    int err;

    if (h->type == GM_MSG_TRAIN)
        return on_train(j, l, node, h, payload);
    if ((err = gm_jobmsg_decode(h->type, payload, h->len, &m)) < 0)
        return err;
    /* a deposed chief's, or a late answer to one; a member's fit or switch answer is no
     * command and is fenced by its generation and sequence number instead (a member that
     * has not heard of a new term yet must not stall a switch) */
    if (h->req != 0 && h->req < my_term(j) &&
        !(h->type == GM_MSG_JOB_REPORT && (m.have_fit || m.seq > 0))) {
        gm_warn("event=job-message-stale type=%s from=%s term=%llu current_term=%llu",
                gm_proto_type_name(h->type), node, (unsigned long long)h->req,
                (unsigned long long)my_term(j));
        gm_jobmsg_free(&m);
        return 0;
    }
    j->frame_term = h->req;
    err = GM_ERR_PROTO;
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (handlers[i].type == h->type)
            err = handlers[i].fn(j, node, &m);
    gm_jobmsg_free(&m);
    return err;
}

void gm_jobs_link_up(struct gm_jobs *j, const char *node)
{
    struct job *jb = j->cur;

    try_answer(j); /* a pending offer may have waited for this link */

    if (jb == NULL || !jb->coord || jb->state != J_RUNNING || j->stopping)
        return;
    bool known = false;
    for (size_t i = 0; i < jb->nparts; i++)
        if (strcmp(jb->parts[i].node, node) == 0) {
            known = true;
            jb->parts[i].checked = false; /* it restarted: check it again */
            jb->parts[i].answered = false;
        }
    if (!known) {
        struct part *np = realloc(jb->parts, (jb->nparts + 1) * sizeof(*np));
        char(*nr)[NODE_LEN] = realloc(jb->ranks, (jb->nparts + 2) * NODE_LEN);
        if (np == NULL || nr == NULL) {
            if (np != NULL)
                jb->parts = np;
            if (nr != NULL)
                jb->ranks = nr;
            return;
        }
        jb->parts = np;
        jb->ranks = nr;
        memset(&jb->parts[jb->nparts], 0, sizeof(*np));
        snprintf(jb->parts[jb->nparts].node, NODE_LEN, "%s", node);
        jb->nparts++;
    }
    gm_notice("event=job-offer-member job=%s node=%s", jb->id, node);
    offer(j, jb, node);
}

void gm_jobs_link_down(struct gm_jobs *j, const char *node, int err)
{
    struct job *jb = j->cur;
    int r;

    if (jb == NULL)
        return;
    if (jb->rank != NULL && gm_rank_xport(jb->rank) != NULL && (r = rank_of(jb, node)) >= 0)
        gm_xport_link_down(gm_rank_xport(jb->rank), r, err);
    if (!jb->coord) {
        if (strcmp(node, jb->coordinator) == 0 && jb->state == J_RUNNING && jb->rank != NULL &&
            j->env.chief != NULL && jb->orphan_since == 0) {
            /* the survivors elect a chief, which takes the job over from their identical
             * state at the last finished step (timer_cb, on_group) */
            jb->orphan_since = gm_time_mono_ns();
            snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", node);
            gm_warn("event=job-coordinator-lost job=%s coordinator=%s: waiting up to %d s for "
                    "the next chief to take the job over",
                    jb->id, node, ORPHAN_TIMEOUT_MS / 1000);
            return;
        }
        if (strcmp(node, jb->coordinator) == 0 &&
            (jb->state == J_RUNNING || jb->state == J_CHECKING)) {
            snprintf(jb->error, sizeof(jb->error),
                     "coordinator %s lost (%s): the job stops; this member keeps the weights "
                     "of its last finished step (gradmesh jobs shows where)",
                     node, gm_strerror(err));
            gm_err("event=job-coordinator-lost job=%s coordinator=%s", jb->id, node);
            jb->state = J_FAILED;
            jb->t_end = gm_time_mono_ns();
            if (jb->rank != NULL) {
                jb->stop_sent = true;
                gm_rank_stop(jb->rank);
            } else {
                to_history(j, jb);
            }
        }
        return;
    }
    for (size_t i = 0; i < jb->nparts; i++) {
        if (strcmp(jb->parts[i].node, node) != 0)
            continue;
        if (jb->state == J_CHECKING) {
            refuse(j, jb, "member %s left during the dataset check", node);
            return;
        }
        if (jb->state == J_RUNNING && rank_of(jb, node) >= 0) {
            gm_warn("event=job-member-lost job=%s node=%s err=\"%s\"", jb->id, node,
                    gm_strerror(err));
            jb->parts[i].checked = false;
            reform(j, jb, "a member was lost");
        }
    }
}

/* --- control ------------------------------------------------------------------------------ */

static json_t *ctl_error(int code, const char *msg)
{
    return json_pack("{s:s,s:i}", "error", msg, "code", code);
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
                 j->cur->job.name, jstate_names[j->cur->state]);
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
        new_id(jb->id);
    jb->gen = job_tag(jb->id) << 16; /* the first group is ... | 1 */
    jb->coord = true;
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", j->env.node);
    if (jb->job.comm.codec == GM_JOB_CODEC_AUTO)
        resolve_auto(j, jb, up, n);
    jb->state = J_CHECKING;
    record(j, jb, J_CHECKING);
    if (j->env.record_spec != NULL)
        j->env.record_spec(j->env.agent, jb->id, text, len, g);
    jb->test_accuracy = NAN;
    jb->t_submit = gm_time_mono_ns();
    jb->parts = calloc(n + 1, sizeof(*jb->parts));
    hr = calloc(1, sizeof(*hr));
    if (jb->parts == NULL || hr == NULL) {
        free(hr);
        free(up);
        job_free(jb);
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
                            hashed, hr);
    if (err < 0) {
        free(hr);
        refuse(j, jb, "cannot hash %s: %s", jb->job.data.dir, gm_strerror(err));
        return 0; /* refused: jobs says why */
    }
    for (size_t i = 0; i < jb->nparts; i++)
        offer(j, jb, jb->parts[i].node);
    gm_notice("event=job-submitted job=%s name=%s members=%zu global_batch=%d", jb->id,
              jb->job.name, n + 1, g);
    return 0;
}

static int coord_submit(struct gm_jobs *j, const char *text, size_t len, const char *origin,
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

/* A member forwards a submit to the coordinator and keeps a record of it, so that the
 * submitter's `jobs` follows it (JOB_GROUP makes it run here, JOB_END ends it). */
static int member_submit(struct gm_jobs *j, const char *coord, const char *text, size_t len,
                         const char *origin, char id[GM_JOB_ID_LEN + 1], char *msg, size_t cap)
{
    struct gm_jobmsg m = {.text = (char *)text, .text_len = len};
    struct job *jb;
    int err;

    if (j->cur != NULL) {
        snprintf(msg, cap, "job %s (%s) is %s: one job at a time (cancel it first)", j->cur->id,
                 j->cur->job.name, jstate_names[j->cur->state]);
        return -EBUSY;
    }
    jb = calloc(1, sizeof(*jb));
    if (jb == NULL) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    snprintf(jb->origin, sizeof(jb->origin), "%s", origin != NULL ? origin : "job");
    if ((err = gm_job_parse(text, len, jb->origin, &jb->job)) < 0) {
        free(jb);
        snprintf(msg, cap, "the job does not parse on %s (its log says why)", j->env.node);
        return GM_ERR_CONFIG;
    }
    new_id(jb->id);
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", coord);
    jb->state = J_CHECKING;
    jb->test_accuracy = NAN;
    jb->t_submit = gm_time_mono_ns();
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.origin, sizeof(m.origin), "%s", jb->origin);
    if ((err = send_msg(j, coord, GM_MSG_JOB_SUBMIT, &m)) < 0) {
        snprintf(msg, cap, "cannot reach the coordinator %s: %s", coord, gm_strerror(err));
        job_free(jb);
        return err;
    }
    snprintf(id, GM_JOB_ID_LEN + 1, "%s", jb->id);
    j->cur = jb;
    gm_notice("event=job-forwarded job=%s name=%s coordinator=%s", jb->id, jb->job.name, coord);
    return 0;
}

json_t *gm_jobs_ctl_submit(struct gm_jobs *j, json_t *req)
{
    json_t *t = json_object_get(req, "text");
    const char *text = json_string_value(t);
    const char *origin = json_string_value(json_object_get(req, "origin"));
    char coord[NODE_LEN], msg[GM_JOB_MSG_MAX] = "", id[GM_JOB_ID_LEN + 1] = "";
    char why[200] = "", line[260];
    int err;

    if (text == NULL)
        return ctl_error(-EINVAL, "bad request: no job text");
    gm_jobs_coordinator(j, coord, why, sizeof(why));
    if (coord[0] == '\0') {
        snprintf(line, sizeof(line), "no chief, so no training: %s", why);
        return ctl_error(-EAGAIN, line);
    }
    if (strcmp(coord, j->env.node) == 0)
        err = coord_submit(j, text, json_string_length(t), origin, NULL, id, msg, sizeof(msg));
    else
        err = member_submit(j, coord, text, json_string_length(t), origin, id, msg, sizeof(msg));
    if (err < 0)
        return ctl_error(err, msg);
    /* the world at submit: the coordinator's participants, or a member's own view */
    int world = j->cur != NULL && j->cur->coord ? (int)j->cur->nparts + 1
                                                : (int)j->env.members_up(j->env.agent, NULL, 0) + 1;
    return json_pack("{s:s,s:s,s:s,s:i}", "id", id, "state", "checking", "coordinator", coord,
                     "world", world);
}

static int on_submit(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    char msg[GM_JOB_MSG_MAX] = "", id[GM_JOB_ID_LEN + 1], coord[NODE_LEN];
    struct gm_jobmsg r = {0};
    int err;

    if (find(j, m->id) != NULL)
        return 0; /* a repeat */
    gm_jobs_coordinator(j, coord, NULL, 0);
    if (strcmp(coord, j->env.node) != 0) {
        snprintf(msg, sizeof(msg), "%s is not the coordinator (%s is)", j->env.node,
                 coord[0] ? coord : "none: no chief");
        err = GM_ERR_CONFIG;
    } else {
        err = coord_submit(j, m->text, m->text_len, m->origin, m->id, id, msg, sizeof(msg));
    }
    if (err == 0) {
        gm_notice("event=job-submitted-by job=%s node=%s", m->id, node);
        return 0;
    }
    snprintf(r.id, sizeof(r.id), "%s", m->id);
    snprintf(r.state, sizeof(r.state), "refused");
    snprintf(r.message, sizeof(r.message), "%s", msg);
    return send_msg(j, node, GM_MSG_JOB_END, &r);
}

static const char *paused_why(struct gm_jobs *j, const struct job *jb, char *buf, size_t cap);

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
    const char *paused = paused_why(j, jb, pbuf, sizeof(pbuf)); /* shown as state "paused" */

    if (jb->rank != NULL)
        gm_rank_get_progress(jb->rank, &p);
    wall = (double)((jb->t_end ? jb->t_end : gm_time_mono_ns()) - jb->t_submit) * 1e-9;
    o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:i,s:I}", "id", jb->id, "name", jb->job.name,
                  "state", paused != NULL ? "paused" : jstate_names[jb->state], "coordinator",
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
    json_object_set_new(o, "local_steps",
                        jb->job.comm.codec == GM_JOB_CODEC_DILOCO
                            ? json_integer(jb->job.comm.local_steps)
                            : json_null());
    json_object_set_new(o, "paused_reason", paused != NULL ? json_string(paused) : json_null());
    json_object_set_new(o, "error", jb->error[0] ? json_string(jb->error) : json_null());
    json_object_set_new(o, "weights", jb->weights[0] ? json_string(jb->weights) : json_null());
    /* bytes per peer node over the job's life: retired groups plus the current one */
    struct gm_xport *x = jb->rank != NULL ? gm_rank_xport(jb->rank) : NULL;
    for (size_t i = 0; x != NULL && i < jb->world && jb->ranks != NULL; i++) {
        struct gm_xport_stats st;
        if (strcmp(jb->ranks[i], j->env.node) == 0)
            continue;
        gm_xport_stats(x, (int)i, &st);
        if (acc_of(jb, jb->ranks[i], true) == NULL)
            continue;
        struct linkacc *a = acc_of(jb, jb->ranks[i], false);
        json_array_append_new(links,
                              json_pack("{s:s,s:I,s:I}", "node", a->node, "bytes_sent",
                                        (json_int_t)(a->sent + st.bytes_sent), "bytes_received",
                                        (json_int_t)(a->recv + st.bytes_recv)));
    }
    for (size_t i = 0; i < jb->nacc; i++) { /* peers not in the current group */
        if (x != NULL && rank_of(jb, jb->acc[i].node) >= 0)
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

json_t *gm_jobs_ctl_list(struct gm_jobs *j)
{
    json_t *a = json_array();

    if (j->cur != NULL)
        json_array_append_new(a, job_json(j, j->cur));
    for (struct job *jb = j->history; jb != NULL; jb = jb->next)
        json_array_append_new(a, job_json(j, jb));
    return json_pack("{s:o}", "jobs", a);
}

json_t *gm_jobs_status_json(struct gm_jobs *j)
{
    if (j->cur != NULL)
        return job_json(j, j->cur);
    if (j->history != NULL)
        return job_json(j, j->history);
    return json_null();
}

json_t *gm_jobs_ctl_cancel(struct gm_jobs *j, json_t *req)
{
    const char *id = json_string_value(json_object_get(req, "id"));
    struct job *jb = id != NULL ? find(j, id) : NULL;
    char msg[256];

    if (jb == NULL) {
        snprintf(msg, sizeof(msg), "no job %s here", id != NULL ? id : "(none given)");
        return ctl_error(-ENOENT, msg);
    }
    if (!jb->coord) {
        snprintf(msg, sizeof(msg), "job %s is coordinated by %s: cancel it there", jb->id,
                 jb->coordinator);
        return ctl_error(GM_ERR_CONFIG, msg);
    }
    if (jb != j->cur || jb->stop_sent) {
        snprintf(msg, sizeof(msg), "job %s is already %s", jb->id, jstate_names[jb->state]);
        return ctl_error(-EALREADY, msg);
    }
    gm_notice("event=job-cancel job=%s", jb->id);
    end_job(j, jb, J_CANCELLED, "cancelled by the user");
    return json_pack("{s:s,s:s}", "id", jb->id, "state", "cancelled");
}

/* --- lifecycle ---------------------------------------------------------------------------- */

/* Whether node is the chief now (with consensus on). */
static bool is_chief(struct gm_jobs *j, const char *node)
{
    char chief[GM_ID_NAME_MAX + 1], why[128];
    uint64_t term;

    return j->env.chief != NULL &&
           j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) == 0 &&
           strcmp(chief, node) == 0;
}

/* --- partitions: no majority, no training ----------------------------------------------
 *
 * Only the chief coordinates (job.h), and a partition or a lost chief moves that role:
 *  - A coordinator that is no longer the chief (cut off in a minority: raft's leader steps
 *    down when it cannot reach a majority; or deposed by a newer term) steps down: its
 *    current group is broken, so its rank stops at the step in flight and waits for a group,
 *    and reform() refuses to form one while this node is not the chief.  The job stays here
 *    as a member's, paused, and follows the chief that takes it over.  This is what keeps a
 *    minority from training alone as a 1-rank group that thinks it is the job.
 *  - A member that lost its coordinator (gm_jobs_link_down) waits, paused.  While there is
 *    no chief at all (no majority) it waits for as long as that lasts; once there is one, it
 *    waits ORPHAN_TIMEOUT_MS for it to take the job over, then stops as it used to.
 *  - A member that is elected chief takes the job over: the other ranks of the last group
 *    become its participants, already checked (the old coordinator compared their datasets
 *    with the same files), and it forms a group with itself as rank 0, whose resync gives
 *    every rank its state at the last finished step (the step in flight failed on all of
 *    them): no rollback.  Those that are unreachable now are offered the job again when
 *    their links come back (gm_jobs_link_up), and rejoin at a step boundary.
 * Stale messages of a deposed coordinator are dropped by term (gm_jobs_on_frame).
 */

/* Whether this node may form groups: it is the chief (or there is no consensus at all). */
static bool may_coordinate(struct gm_jobs *j)
{
    return j->env.chief == NULL || is_chief(j, j->env.node);
}

/* Why the current job does not train here now (into buf), or NULL when it is not paused. */
static const char *paused_why(struct gm_jobs *j, const struct job *jb, char *buf, size_t cap)
{
    char chief[NODE_LEN], why[GM_JOB_MSG_MAX];
    uint64_t term;

    if (jb != j->cur || jb->coord || jb->state != J_RUNNING || jb->rank == NULL ||
        jb->orphan_since == 0)
        return NULL;
    if (j->env.chief == NULL || j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) != 0)
        snprintf(buf, cap, "no chief: %s", j->env.chief != NULL ? why : "no consensus");
    else if (strcmp(jb->lost_coord, j->env.node) == 0)
        snprintf(buf, cap,
                 "this node stopped coordinating (it is not the chief): waiting for "
                 "chief %s to take the job over",
                 chief);
    else
        snprintf(buf, cap, "coordinator %s lost: waiting for chief %s to take the job over",
                 jb->lost_coord, chief);
    return buf;
}

/* This node coordinates jb but is not the chief any more: pause (see above). */
static void step_down(struct gm_jobs *j, struct job *jb, const char *why)
{
    struct gm_rank_progress p = {0};

    gm_rank_get_progress(jb->rank, &p);
    gm_rank_group_broken(jb->rank); /* the step in flight fails; no later one starts */
    jb->coord = false;
    jb->reform_at = 0;
    jb->orphan_since = gm_time_mono_ns();
    snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", j->env.node);
    gm_warn("event=job-paused job=%s step=%ld reason=\"this node coordinated the job and is not "
            "the chief any more (%s): no majority, no training\"",
            jb->id, p.step, why);
}

/* This node, a member of jb's last group, is the chief: it takes the job over. */
static void takeover(struct gm_jobs *j, struct job *jb)
{
    struct part *parts;
    size_t n = 0;

    parts = calloc(jb->world > 0 ? jb->world : 1, sizeof(*parts));
    if (parts == NULL)
        return;                /* the next tick tries again */
    if (jb->orphan_since == 0) /* its link is up: a chief elected on the other side of a split */
        snprintf(jb->lost_coord, sizeof(jb->lost_coord), "%s", jb->coordinator);
    for (size_t i = 0; i < jb->world; i++) {
        if (strcmp(jb->ranks[i], j->env.node) == 0)
            continue;
        snprintf(parts[n].node, NODE_LEN, "%s", jb->ranks[i]);
        parts[n].checked = true; /* checked by the lost coordinator against the same files */
        n++;
    }
    for (size_t i = 0; i < jb->nparts; i++)
        free(jb->parts[i].files);
    free(jb->parts);
    jb->parts = parts;
    jb->nparts = n;
    jb->coord = true;
    jb->orphan_since = 0;
    snprintf(jb->coordinator, sizeof(jb->coordinator), "%s", j->env.node);
    gm_notice("event=job-takeover job=%s lost=%s members=%zu", jb->id, jb->lost_coord, n);
    if (!jb->own_hashed) { /* our own dataset listing, to check members that come back */
        struct hashreq *hr = calloc(1, sizeof(*hr));
        if (hr != NULL) {
            hr->j = j;
            snprintf(hr->id, sizeof(hr->id), "%s", jb->id);
            if (gm_datahash_start(j->dh, jb->job.data.dir,
                                  jb->job.data.kind == GM_JOB_DATA_KIND_FOLDER, hashed, hr) < 0)
                free(hr);
        }
    }
    if (j->env.record != NULL)
        j->env.record(j->env.agent, jb->id, "running", (long)jb->last.step);
    reform(j, jb, "the coordinator was lost: the new chief took the job over");
}

/* Every tick, with consensus on: the current job against who the chief is now. */
static void partition_tick(struct gm_jobs *j, struct job *jb)
{
    char chief[NODE_LEN], why[GM_JOB_MSG_MAX];
    uint64_t term;
    int have;

    if (j->env.chief == NULL || jb->state != J_RUNNING || jb->rank == NULL) {
        jb->orphan_since = 0;
        return;
    }
    have = j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) == 0;
    if (jb->coord) {
        if (!have || strcmp(chief, j->env.node) != 0)
            step_down(j, jb, have ? "another chief was elected" : why);
        return;
    }
    if (have && strcmp(chief, j->env.node) == 0) {
        takeover(j, jb);
        return;
    }
    if (jb->orphan_since == 0)
        return;
    if (!have) { /* no majority here: wait as long as that lasts; the countdown starts over */
        jb->orphan_since = gm_time_mono_ns();
        return;
    }
    if (gm_time_mono_ns() - jb->orphan_since < (uint64_t)ORPHAN_TIMEOUT_MS * 1000000ull)
        return;
    jb->orphan_since = 0;
    snprintf(jb->error, sizeof(jb->error),
             "coordinator %s lost and chief %s did not take the job over in %d s: the job stops; "
             "this member keeps the weights of its last finished step (gradmesh jobs shows "
             "where)",
             jb->lost_coord, chief, ORPHAN_TIMEOUT_MS / 1000);
    gm_err("event=job-coordinator-lost job=%s coordinator=%s: no takeover", jb->id, jb->lost_coord);
    jb->state = J_FAILED;
    jb->t_end = gm_time_mono_ns();
    jb->stop_sent = true;
    gm_rank_stop(jb->rank);
}

static void timer_cb(uv_timer_t *t)
{
    struct gm_jobs *j = t->data;
    struct job *jb = j->cur;

    try_answer(j); /* the mesh deadline */
    if (jb != NULL)
        partition_tick(j, jb);
    jb = j->cur;
    if (jb != NULL && jb->coord)
        switch_tick(j, jb);
    else if (jb != NULL)
        fit_report_tick(j, jb);
    if (jb != NULL && jb->coord && jb->state == J_RUNNING && jb->reform_at != 0 &&
        gm_time_mono_ns() >= jb->reform_at) {
        jb->reform_at = 0;
        reform(j, jb, "retry after a failed group");
    }

    if (jb == NULL || jb->state != J_CHECKING || !jb->coord)
        return;
    if (gm_time_mono_ns() - jb->t_submit < (uint64_t)CHECK_TIMEOUT_MS * 1000000ull)
        return;
    for (size_t i = 0; i < jb->nparts; i++)
        if (!jb->parts[i].checked) {
            refuse(j, jb, "member %s did not answer the dataset check in %d s", jb->parts[i].node,
                   CHECK_TIMEOUT_MS / 1000);
            return;
        }
}

int gm_jobs_new(const struct gm_jobs_env *env, struct gm_jobs **out)
{
    struct gm_jobs *j = calloc(1, sizeof(*j));
    int err;

    *out = NULL;
    if (j == NULL)
        return -ENOMEM;
    j->env = *env;
    if ((err = gm_datahash_new(env->loop, &j->dh)) < 0 ||
        (err = uv_timer_init(env->loop, &j->timer)) < 0) {
        gm_datahash_free(j->dh);
        free(j);
        return err;
    }
    j->timer.data = j;
    (void)uv_timer_start(&j->timer, timer_cb, TICK_MS, TICK_MS);
    uv_unref((uv_handle_t *)&j->timer);
    *out = j;
    return 0;
}

void gm_jobs_stop(struct gm_jobs *j)
{
    if (j == NULL)
        return;
    j->stopping = true;
    if (j->cur != NULL && j->cur->rank != NULL) {
        j->cur->stop_sent = true;
        gm_rank_stop(j->cur->rank);
    }
}

void gm_jobs_leave(struct gm_jobs *j)
{
    if (j == NULL)
        return;
    j->leaving = true;
    gm_jobs_stop(j);
}

bool gm_jobs_idle(const struct gm_jobs *j)
{
    return j == NULL || j->cur == NULL || j->cur->rank == NULL;
}

static void timer_closed(uv_handle_t *h)
{
    struct gm_jobs *j = h->data;
    struct job *jb;

    job_free(j->cur);
    while ((jb = j->history) != NULL) {
        j->history = jb->next;
        job_free(jb);
    }
    stash_drop(j, NULL, 0);
    offer_clear(&j->po);
    gm_datahash_free(j->dh);
    free(j);
}

void gm_jobs_free(struct gm_jobs *j)
{
    if (j == NULL)
        return;
    GM_ASSERT(gm_jobs_idle(j));
    uv_close((uv_handle_t *)&j->timer, timer_closed);
}
