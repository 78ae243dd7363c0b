/*
 * agent/jobs/job.c - the job control room (see job.h): the spine, the job registry and history, the
 * helpers every part uses (ids, terms, sending, traffic accounting), the rank callbacks (trainer
 * events), LAN islands, forming and re-forming groups, ending a job, and the teardown. The room's
 * other files are listed in agent/jobs/job_int.h.
 *
 * State: at most one current job (coordinated here or run here as a member)
 * and a short history of finished ones for `gradmesh jobs`.  The coordinator
 * tracks, per participant, whether its dataset check came back; per group
 * generation, the rank order.  TRAIN frames of a generation not formed here
 * yet wait in a bounded stash.
 */
#include "agent/jobs/job_int.h"

#include <stdarg.h>
#include <sys/stat.h>

#include <openssl/rand.h>

static bool may_coordinate(struct gm_jobs *j);

const char *jobs_state_name(enum jstate st)
{
    static const char *const names[] = {"checking",  "running", "done",
                                        "cancelled", "failed",  "refused"};

    return names[st];
}

void jobs_job_free(struct job *jb)
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
uint32_t jobs_job_tag(const char *id)
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
        if (jb == NULL || g >> 16 != jobs_job_tag(jb->id) || g < gen) {
            *pp = s->next;
            j->stash_bytes -= s->h.len;
            free(s);
        } else {
            pp = &s->next;
        }
    }
}

/* This node's raft term (0 without consensus). */
uint64_t jobs_my_term(struct gm_jobs *j)
{
    char chief[NODE_LEN], why[8];
    uint64_t term = 0;

    if (j->env.chief != NULL)
        (void)j->env.chief(j->env.agent, chief, &term, why, sizeof(why)); /* term either way */
    return term;
}

int jobs_send_msg(struct gm_jobs *j, const char *node, uint16_t type, const struct gm_jobmsg *m)
{
    struct gm_link *l = j->env.link_to(j->env.agent, node);
    char *json = NULL;
    size_t len = 0;
    int err;

    if (l == NULL)
        return -ENOTCONN;
    if ((err = gm_jobmsg_encode(type, m, &json, &len)) < 0)
        return err;
    err = gm_link_send(l, type, jobs_my_term(j), json, len); /* req: the term (job.h) */
    free(json);
    return err;
}

void jobs_new_id(char out[GM_JOB_ID_LEN + 1])
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

void jobs_to_history(struct gm_jobs *j, struct job *jb)
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
        jobs_job_free(old);
    }
}

void jobs_autoreq_free(struct autoreq *r)
{
    if (r == NULL)
        return;
    free(r->links);
    free(r->isl);
    free(r);
}

struct job *jobs_find(struct gm_jobs *j, const char *id)
{
    if (j->cur != NULL && strcmp(j->cur->id, id) == 0)
        return j->cur;
    for (struct job *jb = j->history; jb != NULL; jb = jb->next)
        if (strcmp(jb->id, id) == 0)
            return jb;
    return NULL;
}

int jobs_rank_of(const struct job *jb, const char *node)
{
    for (size_t i = 0; i < jb->world; i++)
        if (strcmp(jb->ranks[i], node) == 0)
            return (int)i;
    return -1;
}

struct linkacc *jobs_acc_of(struct job *jb, const char *node, bool add)
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
void jobs_account_group(struct job *jb)
{
    struct gm_xport *x = jb->rank != NULL ? gm_rank_xport(jb->rank) : NULL;

    if (x == NULL || jb->ranks == NULL)
        return;
    for (size_t i = 0; i < jb->world; i++) {
        struct gm_xport_stats st;
        struct linkacc *a;
        gm_xport_stats(x, (int)i, &st);
        if ((st.bytes_sent | st.bytes_recv) == 0 ||
            (a = jobs_acc_of(jb, jb->ranks[i], true)) == NULL)
            continue;
        a->sent += st.bytes_sent;
        a->recv += st.bytes_recv;
    }
}

/* The coordinator's job state into the chief's replicated state. */
void jobs_record(struct gm_jobs *j, const struct job *jb, enum jstate st)
{
    if (j->env.record != NULL && jb->coord)
        j->env.record(j->env.agent, jb->id, jobs_state_name(st), jb->steps, jb->job.name,
                      st != J_DONE && st != J_RUNNING && st != J_CHECKING ? jb->error : NULL);
}

static void rank_exit(struct gm_rank *rk, int err, const struct gm_train_summary *sum, void *arg)
{
    struct gm_jobs *j = arg;
    struct job *jb = j->cur;
    char reason[GM_JOB_MSG_MAX], why[GM_JOB_MSG_MAX];

    if (jb == NULL || jb->rank != rk) { /* cannot happen: a rank belongs to the current job */
        gm_rank_free(rk);
        return;
    }
    /* the trainer's own line ("DIR: N training samples, fewer than one global batch of G"),
     * never the name of err 0 */
    snprintf(reason, sizeof(reason), "%s", gm_rank_error(rk));
    if (sum->error[0]) /* said by another thread (the loader's, naming the file) */
        snprintf(reason, sizeof(reason), "%s", sum->error);
    gm_rank_get_progress(rk, &jb->last);
    if (jb->last.params_sha256[0])
        gm_notice("event=job-final-hash job=%s rank=%d world=%d generation=%u step=%ld "
                  "params_sha256=%s",
                  jb->id, jb->last.rank, jb->last.world, jb->last.generation, sum->steps,
                  jb->last.params_sha256);
    jobs_account_group(jb);
    jb->rank = NULL;
    gm_rank_free(rk);
    /* a member whose coordinator's JOB_END came first keeps the coordinator's figures: its own
     * rank did not evaluate (rank 0 does), and its NaN would replace the job's accuracy */
    if (!jb->remote_summary) {
        jb->steps = sum->steps;
        jb->test_accuracy = sum->test_accuracy;
        jb->samples_per_s = sum->samples_per_s;
        if (sum->checkpoint[0])
            snprintf(jb->weights, sizeof(jb->weights), "%s", sum->checkpoint);
    }
    jb->epochs = sum->epochs;
    jb->test_loss = sum->test_loss;
    jb->wall_s = sum->wall_s;
    jb->bytes_sent = sum->bytes_sent;
    if (jb->coord && j->leaving) { /* drain: no JOB_END, the next chief takes the job over */
        jb->state = J_CANCELLED;
        jb->t_end = gm_time_mono_ns();
        snprintf(jb->error, sizeof(jb->error), "this node left the job (drain)");
        gm_notice("event=job-left job=%s step=%ld", jb->id, (long)jb->last.step);
        return;
    }
    snprintf(why, sizeof(why), "rank on %.64s stopped: %.400s", j->env.node, reason);
    if (jb->coord) {
        if (jb->state != J_RUNNING) { /* ended already (jobs_end_job stopped the rank): said */
            if (err != 0)
                gm_notice("event=job-rank-exit job=%s state=%s steps=%ld reason=\"%s\"", jb->id,
                          jobs_state_name(jb->state), sum->steps, reason);
            jobs_to_history(j, jb);
        } else if (err == 0) {
            jobs_end_job(j, jb, jb->stop_sent ? J_CANCELLED : J_DONE,
                         jb->stop_sent ? "cancelled" : "finished");
        } else if (jb->stop_sent) {
            jobs_end_job(j, jb, J_CANCELLED, "cancelled");
        } else {
            jobs_end_job(j, jb, J_FAILED, why);
        }
        return;
    }
    if (err != 0 && !jb->stop_sent) {
        struct gm_jobmsg m = {.gen = jb->gen, .code = err};
        snprintf(m.id, sizeof(m.id), "%s", jb->id);
        snprintf(m.event, sizeof(m.event), "exit");
        snprintf(m.message, sizeof(m.message), "%s", reason);
        (void)jobs_send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
    }
    if (err != 0 && jb->error[0] == 0)
        snprintf(jb->error, sizeof(jb->error), "%s", why);
    if (jb->state == J_RUNNING && err == 0) {
        /* every step is done here; the coordinator's JOB_END brings its evaluation */
        gm_notice("event=job-rank-finished job=%s steps=%ld", jb->id, sum->steps);
        return;
    }
    if (jb->state == J_RUNNING)
        jb->state = J_FAILED;
    jb->t_end = gm_time_mono_ns();
    gm_notice("event=job-rank-exit job=%s state=%s steps=%ld reason=\"%s\"", jb->id,
              jobs_state_name(jb->state), sum->steps,
              jb->error[0] ? jb->error : jobs_state_name(jb->state));
    jobs_to_history(j, jb);
}

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
            jobs_reform_after_failure(j, jb, "an operation failed here");
        }
        return;
    }
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.event, sizeof(m.event), "group-failed");
    snprintf(m.message, sizeof(m.message), "%s", gm_strerror(err));
    (void)jobs_send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
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

/* Rank 0 could not write a checkpoint (a full disk): the agent says so. */
static void rank_checkpoint_failed(struct gm_rank *rk, const char *path, long step, int err,
                                   void *arg)
{
    struct gm_jobs *j = arg;

    (void)rk;
    if (j->env.ckpt_failed != NULL)
        j->env.ckpt_failed(j->env.agent, path, step, err);
}

static const struct gm_rank_ops rank_ops = {
    .on_exit = rank_exit,
    .on_group_failed = rank_group_failed,
    .on_checkpoint = rank_checkpoint,
    .on_checkpoint_failed = rank_checkpoint_failed,
};

void gm_jobs_ckpt_key(const struct gm_job *job, char key[GM_JOBS_CKPT_KEY_LEN + 1])
{
    memcpy(key, job->identity, GM_JOBS_CKPT_KEY_LEN);
    key[GM_JOBS_CKPT_KEY_LEN] = '\0';
}

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
int *jobs_group_islands(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n)
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
bool jobs_one_lan(struct gm_jobs *j, char (*nodes)[NODE_LEN], size_t n)
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
int jobs_form_local(struct gm_jobs *j, struct job *jb)
{
    int me = jobs_rank_of(jb, j->env.node), err;
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
    gm_rank_set_shares(jb->rank, jb->shares, jb->nshares == (int)jb->world ? jb->nshares : 0);
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
        int r = jobs_rank_of(jb, s->node);
        struct gm_link *l = j->env.link_to(j->env.agent, s->node);
        if (r >= 0 && gm_xport_on_frame(x, r, &s->h, s->data) < 0 && l != NULL)
            gm_link_fail(l, GM_ERR_PROTO, "malformed training message");
        *pp = s->next;
        j->stash_bytes -= s->h.len;
        free(s);
    }
    return 0;
}

int jobs_start_rank(struct gm_jobs *j, struct job *jb)
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
    ck.term = jobs_my_term(j);                   /* the chief's term when the job started here */
    if (jb->coord && j->env.committed != NULL) { /* only what the cluster committed */
        long nc = j->env.committed(j->env.agent, key, committed, GM_RANK_COMMITTED_MAX);
        ck.committed_only = nc >= 0;
        ck.committed = committed;
        ck.ncommitted = nc > 0 ? (size_t)nc : 0;
    }
    if ((err = gm_rank_start(j->env.loop, &jb->job, out, &ck, &rank_ops, j, &jb->rank)) < 0)
        return err;
    if (j->env.metrics != NULL)
        gm_rank_set_metrics(jb->rank, j->env.metrics(j->env.agent), jb->id);
    jb->t_start = gm_time_mono_ns();
    return 0;
}

/* --- shares = auto (agent/jobs/autoshare.h) --- */

struct gm_autoshare_hist *jobs_shares_hist(struct job *jb, const char *node)
{
    int freeslot = -1;

    for (int i = 0; i < GM_JOB_SHARES_MAX; i++) {
        if (strcmp(jb->fits[i].node, node) == 0)
            return &jb->fits[i].h;
        if (freeslot < 0 && jb->fits[i].node[0] == '\0')
            freeslot = i;
    }
    for (int i = 0; freeslot < 0 && i < GM_JOB_SHARES_MAX; i++) {
        bool in = false;
        for (size_t r = 0; r < jb->world && !in; r++)
            in = strcmp(jb->ranks[r], jb->fits[i].node) == 0;
        if (!in)
            freeslot = i;
    }
    if (freeslot < 0)
        return NULL;
    memset(&jb->fits[freeslot], 0, sizeof(jb->fits[freeslot]));
    snprintf(jb->fits[freeslot].node, sizeof(jb->fits[freeslot].node), "%s", node);
    return &jb->fits[freeslot].h;
}

int jobs_shares_models(struct job *jb, const struct gm_autoshare_plan *plan, double *sps,
                       double *over_s)
{
    const int w = (int)jb->world;
    double prop[GM_JOB_SHARES_MAX];
    struct gm_autoshare_plan own;
    int known = 0;

    if (w < 1 || w > GM_JOB_SHARES_MAX)
        return 0;
    (void)gm_autoshare_speeds(jb->obs, w, prop);
    if (plan == NULL && gm_autoshare_plan_for(jb->obs, w, jb->ash.rounds, &own) >= 0)
        plan = &own;
    for (int r = 0; r < w; r++) {
        struct gm_autoshare_hist *h = jobs_shares_hist(jb, jb->ranks[r]);
        const int fit = h != NULL ? gm_autoshare_fit(h, &sps[r], &over_s[r]) : 0;
        if (fit < 2 && plan != NULL && plan->sps[r] > 0) { /* one share: the plan's model */
            sps[r] = plan->sps[r];
            over_s[r] = plan->over_s[r];
        } else if (fit == 0) {
            sps[r] = prop[r];
            over_s[r] = 0;
        }
        known += sps[r] > 0;
    }
    return known;
}

void jobs_shares_for_group(struct job *jb, char (*old_ranks)[NODE_LEN], size_t old_world)
{
    struct gm_autoshare_obs obs[GM_JOB_SHARES_MAX];
    double sps[GM_JOB_SHARES_MAX], over[GM_JOB_SHARES_MAX];
    const int w = (int)jb->world;
    bool same = old_ranks != NULL && old_world == jb->world, known = w >= 2;

    if (jb->job.shares.mode != GM_JOB_SHARES_AUTO || w > GM_JOB_SHARES_MAX) {
        jb->nshares = 0;
        return;
    }
    if (old_ranks == NULL && jb->probe_shares) { /* the job's first group: the probe's shares */
        jb->probe_shares = false;
        if (jb->nshares != w)
            jb->nshares = 0;
        memset(jb->obs, 0, sizeof(jb->obs));
        return;
    }
    /* the old group's plan, from all its ranks (a rank left out was the one the others waited
     * for: the collective's cost is read on it), its models following their nodes */
    struct gm_autoshare_plan old_pl, pl;
    const bool planned =
        old_ranks != NULL && old_world >= 1 && old_world <= GM_JOB_SHARES_MAX &&
        gm_autoshare_plan_for(jb->obs, (int)old_world, jb->ash.rounds, &old_pl) >= 0;
    memset(&pl, 0, sizeof(pl));
    /* the observations follow their nodes into the new rank order */
    memset(obs, 0, sizeof(obs));
    for (int i = 0; i < w; i++) {
        for (size_t k = 0; old_ranks != NULL && k < old_world && k < GM_JOB_SHARES_MAX; k++)
            if (strcmp(old_ranks[k], jb->ranks[i]) == 0) {
                obs[i] = jb->obs[k];
                if (planned) {
                    pl.sps[i] = old_pl.sps[k];
                    pl.over_s[i] = old_pl.over_s[k];
                }
            }
        if (old_ranks == NULL || (size_t)i >= old_world || strcmp(old_ranks[i], jb->ranks[i]) != 0)
            same = false;
    }
    memcpy(jb->obs, obs, sizeof(obs));
    known = known && jobs_shares_models(jb, &pl, sps, over) == w; /* pl: none when 0 */
    if (!(same && jb->nshares == w)) { /* else the ones the tick just decided, or the running */
        if (known) {
            gm_autoshare_balance(sps, over, w, jb->job.optim.global_batch, jb->shares);
            jb->nshares = w;
        } else {
            jb->nshares = 0; /* equal until every rank's speed is known */
        }
    }
    /* the new group's decisions wait for its own steps (the ranks' averages restart) */
    memset(jb->obs, 0, sizeof(jb->obs));
}

void jobs_probe_logged(struct gm_jobs *j, const char *id, int err, const struct gm_shareprobe *p,
                       const char *why)
{
    if (err == 0)
        gm_notice("event=shares-probe job=%s node=%s ms=%.0f n=%d/%d pass_ms=%.2f/%.2f", id,
                  j->env.node, p->cost_s * 1e3, p->p.n[0], p->p.n[1], p->p.busy_s[0] * 1e3,
                  p->p.busy_s[1] * 1e3);
    else
        gm_warn("event=shares-probe-failed job=%s node=%s err=\"%s\": %s; the first group runs "
                "equal shares",
                id, j->env.node, gm_strerror(err), why);
}

size_t jobs_group_nodes(struct gm_jobs *j, struct job *jb, char (*out)[NODE_LEN], bool warn)
{
    size_t n = 1;

    snprintf(out[0], NODE_LEN, "%s", j->env.node);
    for (size_t i = 0; i < jb->nparts; i++) {
        if (!jb->parts[i].checked || jb->parts[i].spare ||
            j->env.link_to(j->env.agent, jb->parts[i].node) == NULL)
            continue;
        if (jobs_quiet(j, jb->parts[i].node)) { /* silent: back once it answers (timer_cb) */
            if (warn)
                gm_warn("event=job-member-quiet job=%s node=%s quiet_ms=%u: left out of the "
                        "group",
                        jb->id, jb->parts[i].node,
                        gm_link_quiet_ms(j->env.link_to(j->env.agent, jb->parts[i].node)));
            continue;
        }
        snprintf(out[n++], NODE_LEN, "%s", jb->parts[i].node);
    }
    qsort(out + 1, n - 1, NODE_LEN, cmp_node);
    return n;
}

/* Coordinator: a new generation with every participant that has an up link. */
void jobs_reform(struct gm_jobs *j, struct job *jb, const char *reason)
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
    if (jobs_stalled(j)) { /* this process just woke: raft has yet to say who leads */
        uint64_t at = j->stalled_until > gm_time_mono_ns()
                          ? j->stalled_until
                          : gm_time_mono_ns() + STALL_HOLD_MS * 1000000ull;
        gm_warn("event=job-group-fenced job=%s reason=\"%s\": this node stalled; trying again "
                "in %llu ms",
                jb->id, reason, (unsigned long long)((at - gm_time_mono_ns()) / 1000000ull));
        jb->reform_at = at;
        return;
    }
    jb->reform_at = 0;
    jobs_account_group(jb);
    const size_t old_world = jb->world;
    char(*old_ranks)[NODE_LEN] = NULL;
    if (old_world > 0 && (old_ranks = calloc(old_world, NODE_LEN)) != NULL)
        memcpy(old_ranks, jb->ranks, old_world * NODE_LEN);
    n = jobs_group_nodes(j, jb, jb->ranks, true);
    jb->world = n;
    jobs_shares_for_group(jb, old_ranks, old_world); /* shares = auto */
    free(old_ranks);
    free(jb->islands);
    jb->islands = jobs_group_islands(j, jb->ranks, n);
    if ((jb->gen & 0xffff) == 0xffff) {
        gm_rank_stop(jb->rank);
        snprintf(jb->error, sizeof(jb->error), "65535 groups in one job: giving up");
        return;
    }
    jb->gen++;
    gm_notice("event=job-group job=%s generation=%u world=%zu reason=\"%s\"", jb->id,
              jb->gen & 0xffff, n, reason);
    {
        struct gm_rank_progress p;
        gm_rank_get_progress(jb->rank, &p);
        if (jb->asw != NULL)
            gm_autoswitch_group(jb->asw, (int)n, p.step);
        gm_autoshare_group(&jb->ash, p.step);
    }
    m.gen = jb->gen;
    m.ranks = jb->ranks;
    m.nranks = n;
    m.global_batch = jb->job.optim.global_batch;
    m.islands = jb->islands;                              /* borrowed; m is not freed */
    m.shares = jb->nshares == (int)n ? jb->shares : NULL; /* borrowed */
    if (jb->codec_auto) { /* auto's choice, so every rank runs the same strategy */
        m.codec = jb->job.comm.codec;
        m.local_steps = (uint32_t)jb->job.comm.local_steps;
    }
    m.text = jb->job.text;
    m.text_len = jb->job.text_len;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.origin, sizeof(m.origin), "%s", jb->origin);
    for (size_t i = 1; i < n; i++)
        if ((err = jobs_send_msg(j, jb->ranks[i], GM_MSG_JOB_GROUP, &m)) < 0)
            gm_warn("event=job-group-send node=%s err=\"%s\"", jb->ranks[i], gm_strerror(err));
    if ((err = jobs_form_local(j, jb)) < 0) {
        gm_rank_stop(jb->rank);
        snprintf(jb->error, sizeof(jb->error), "cannot form group %u: %s", jb->gen,
                 gm_strerror(err));
    }
}

/* A group failed without anyone leaving (a link that is not up yet, a glitch): re-form
 * at once the first time, then back off (0.2 s doubling to 5 s) while groups keep failing
 * before a single step is taken, so a flapping link cannot spin the cluster. */
void jobs_reform_after_failure(struct gm_jobs *j, struct job *jb, const char *why)
{
    struct gm_rank_progress p = {0};
    uint64_t delay_ms;

    if (jb->rank != NULL)
        gm_rank_get_progress(jb->rank, &p);
    if (p.step > jb->streak_step)
        jb->fail_streak = 0;
    jb->streak_step = p.step;
    if (jb->fail_streak++ == 0) {
        jobs_reform(j, jb, why);
        return;
    }
    delay_ms = 100ull << (jb->fail_streak < 6 ? jb->fail_streak : 6);
    if (delay_ms > 5000)
        delay_ms = 5000;
    jb->reform_at = gm_time_mono_ns() + delay_ms * 1000000ull;
    gm_warn("event=job-group-retry job=%s failures=%u delay_ms=%llu reason=\"%s\"", jb->id,
            jb->fail_streak, (unsigned long long)delay_ms, why);
}

void jobs_end_job(struct gm_jobs *j, struct job *jb, enum jstate st, const char *msg)
{
    struct gm_jobmsg m = {0};

    jb->state = st;
    if (st != J_DONE && jb->error[0] == 0)
        snprintf(jb->error, sizeof(jb->error), "%s", msg);
    if (st != J_DONE) /* one reason everywhere: the one recorded here */
        msg = jb->error;
    jobs_record(j, jb, st);
    jb->t_end = gm_time_mono_ns();
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.state, sizeof(m.state), "%s", jobs_state_name(st));
    snprintf(m.message, sizeof(m.message), "%s", msg);
    if (st == J_DONE) {
        m.have_summary = true;
        m.test_accuracy = jb->test_accuracy;
        m.steps = jb->steps;
        m.samples_per_s = jb->samples_per_s;
        snprintf(m.weights, sizeof(m.weights), "%.1000s", jb->weights);
    }
    for (size_t i = 0; i < jb->nparts; i++)
        (void)jobs_send_msg(j, jb->parts[i].node, GM_MSG_JOB_END, &m);
    if (st == J_DONE)
        gm_notice("event=job-done job=%s name=%s steps=%ld test_accuracy=%.2f samples_per_s=%.0f "
                  "weights=%s",
                  jb->id, jb->job.name, jb->steps, jb->test_accuracy, jb->samples_per_s,
                  jb->weights);
    else
        gm_notice("event=job-end job=%s state=%s msg=\"%s\"", jb->id, jobs_state_name(st),
                  jb->error);
    if (jb->rank != NULL) { /* still running here: it ends at its next step */
        jb->stop_sent = true;
        gm_rank_stop(jb->rank);
        return;
    }
    jobs_to_history(j, jb);
}

void jobs_refuse(struct gm_jobs *j, struct job *jb, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(jb->error, sizeof(jb->error), fmt, ap);
    va_end(ap);
    gm_warn("event=job-refused job=%s msg=\"%s\"", jb->id, jb->error);
    jobs_end_job(j, jb, J_REFUSED, jb->error);
}

void jobs_offer_clear(struct pending_offer *po)
{
    free(po->ranks);
    free(po->text);
    free(po->files);
    memset(po, 0, sizeof(*po));
}

void jobs_held_clear(struct held_group *hg)
{
    free(hg->payload);
    memset(hg, 0, sizeof(*hg));
}

json_t *jobs_ctl_error(int code, const char *msg)
{
    return json_pack("{s:s,s:i}", "error", msg, "code", code);
}

/* Whether node is the chief now (with consensus on). */
bool jobs_is_chief(struct gm_jobs *j, const char *node)
{
    char chief[GM_ID_NAME_MAX + 1], why[128];
    uint64_t term;

    return j->env.chief != NULL &&
           j->env.chief(j->env.agent, chief, &term, why, sizeof(why)) == 0 &&
           strcmp(chief, node) == 0;
}

/*
 * Silent ranks.  A member that is alive at the TCP level but silent (SIGSTOPped, a paused VM)
 * loses its links within seconds (the silence deadline, agent/mesh/measure.h), which fails
 * the group and re-forms it without the member, as for a crash; when it wakes it redials, is
 * offered the job and enters at a step boundary.  Two things here cover the seconds before
 * that:
 *  - jobs_reform leaves out a rank whose link is quiet (gm_link_is_quiet: nothing for
 *    GM_LINK_QUIET_MS and half its silence deadline; a live peer is never that quiet), so
 *    a chief elected because the old one froze does not take the job over with the frozen
 *    node in its group; timer_cb puts such a member back (a new group) once its link is
 *    lively again.
 *  - A coordinator that itself stalled (its own tick came STALL_MS late: it was frozen) forms
 *    no group for STALL_HOLD_MS: raft has not yet told it that another chief was elected
 *    meanwhile, and a group formed now (its links to the others closed while it slept) would
 *    be a 1-rank group training alone under a stale term.  The reform waits (reform_at).
 */
bool jobs_quiet(struct gm_jobs *j, const char *node)
{
    return gm_link_is_quiet(j->env.link_to(j->env.agent, node));
}

bool jobs_stalled(struct gm_jobs *j)
{
    uint64_t now = gm_time_mono_ns();

    return now < j->stalled_until ||
           (j->t_tick != 0 && now - j->t_tick > (uint64_t)STALL_MS * 1000000ull);
}

/* Whether this node may form groups: it is the chief (or there is no consensus at all). */
static bool may_coordinate(struct gm_jobs *j)
{
    return j->env.chief == NULL || jobs_is_chief(j, j->env.node);
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
    return j == NULL || (j->prechecks == 0 && (j->cur == NULL || j->cur->rank == NULL));
}

/* What this node's checkpoint directory of job can take: the free space of its file system
 * and the room its earlier checkpoints of the job (up to checkpoint_keep) give back; false
 * when the free space cannot be read. */
bool jobs_ckpt_room(struct gm_jobs *j, const struct gm_job *job, uint64_t *room)
{
    char key[GM_JOBS_CKPT_KEY_LEN + 1], dir[1100];
    struct gm_ckpt_entry *e = NULL;
    size_t n = 0;

    gm_jobs_ckpt_key(job, key);
    snprintf(dir, sizeof(dir), "%s/checkpoints/%s", j->env.state_dir, key);
    if (gm_ckpt_free_bytes(dir, room) < 0)
        return false;
    if (gm_ckpt_dir_list(dir, &e, &n) == 0)
        for (size_t i = 0; i < n && i < (size_t)job->checkpoint_keep; i++)
            *room += e[i].bytes > 0 ? (uint64_t)e[i].bytes : 0;
    free(e);
    return true;
}

static void timer_closed(uv_handle_t *h)
{
    struct gm_jobs *j = h->data;
    struct job *jb;

    jobs_job_free(j->cur);
    while ((jb = j->history) != NULL) {
        j->history = jb->next;
        jobs_job_free(jb);
    }
    stash_drop(j, NULL, 0);
    jobs_offer_clear(&j->po);
    jobs_held_clear(&j->held);
    gm_datahash_free(j->dh);
    if (j->auto_req != NULL) /* its answer comes to nobody (job_check.c frees it) */
        j->auto_req->j = NULL;
    free(j);
}

void gm_jobs_free(struct gm_jobs *j)
{
    if (j == NULL)
        return;
    GM_ASSERT(gm_jobs_idle(j));
    uv_close((uv_handle_t *)&j->timer, timer_closed);
}
