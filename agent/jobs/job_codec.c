/*
 * agent/jobs/job_codec.c - the job room (agent/jobs/job.h), codec = auto: the coordinator's choice
 * of a gradient sync at submit (agent/jobs/autocodec.h) and its switches mid-run: fit reports, the
 * switch tick, JOB_SWITCH. Private state and shared helpers: agent/jobs/job_int.h.  Loop thread
 * only; auto's timing of the model at submit is prepared here (an autoreq: its own copy of the
 * job's settings and links) and run on libuv's threadpool by job_check.c, so that the loop, and
 * with it the chief's heartbeats, never waits seconds for a large model's steps.
 */
#include "agent/jobs/job_int.h"

/* The choice made (or not), logged, and what comes with it (loop thread). */
static void auto_chosen(struct job *jb, int world, int err, const struct gm_gradsync_auto_out *o)
{
    if (err < 0)
        snprintf(jb->codec_reason, sizeof(jb->codec_reason), "fp32: auto failed (%s)",
                 gm_strerror(err));
    {
        char sp[32] = "-"; /* not predicted: the model did not run */
        if (o->speedup > 0)
            snprintf(sp, sizeof(sp), "%.2f", o->speedup);
        gm_notice("event=codec-auto job=%s codec=%s local_steps=%d world=%d speedup=%s "
                  "reason=\"%s\"",
                  jb->id, gm_job_codec_name(jb->job.comm.codec),
                  gm_job_codec_is_diloco(jb->job.comm.codec) ? jb->job.comm.local_steps : 0, world,
                  sp, jb->codec_reason);
    }
    if (err == 0 && gm_job_codec_is_diloco(jb->job.comm.codec)) {
        int k = gm_gradsync_auto_index(&o->pick);
        jb->have_auto_comm = k >= 0 && k < GM_GRADSYNC_AUTO_NCAND && o->cand[k].comm_s >= 0 &&
                             isfinite(o->cand[k].comm_s);
        jb->auto_comm_s = jb->have_auto_comm ? o->cand[k].comm_s : 0;
    }
    /* compute_s 0: one LAN island, fp32 without timing; the switches then price the
     * measured cost (agent/jobs/autocodec.h) from rank 0's measured steps */
    if (err == 0 && jb->job.comm.auto_resolved &&
        gm_autoswitch_new(&jb->job, o->compute_s, &jb->asw) < 0)
        gm_warn("event=codec-auto-switch-off job=%s: no switching mid-run (out of memory)", jb->id);
    if (err == 0 && o->too_slow)
        gm_warn("event=codec-auto-too-slow world=%d speedup=%.2f: the links are too slow for "
                "%d agents to train faster than one (predicted %.2fx of one agent's speed)",
                world, o->speedup, world, o->speedup);
}

/* The timing's answer into the job (loop thread): status < 0, the work was cancelled. */
void jobs_auto_apply(struct job *jb, struct autoreq *r, int status)
{
    if (status < 0 && r->err == 0)
        r->err = status;        /* fp32, said */
    jb->job.comm = r->job.comm; /* the choice (fp32 at least: never auto past here) */
    if (r->err < 0)
        jb->job.comm.codec = GM_JOB_CODEC_FP32;
    snprintf(jb->codec_reason, sizeof(jb->codec_reason), "%s", r->reason);
    auto_chosen(jb, r->world, r->err, &r->o);
}

/* Coordinator, at submit: auto's choice for this node and the n members up
 * (agent/jobs/autocodec.h), into jb->job.comm; JOB_GROUP carries it to every rank.  Returns
 * NULL when it is made (no timing needed, or no memory to time it elsewhere), else the request
 * that times the model: the caller runs it on the threadpool and hands its answer to
 * jobs_auto_apply. */
struct autoreq *jobs_resolve_auto(struct gm_jobs *j, struct job *jb, char (*up)[NODE_LEN], size_t n)
{
    int world = (int)n + 1, err;
    struct gm_coll_link *links = calloc((size_t)world * (size_t)world, sizeof(*links));
    struct gm_gradsync_auto_out o;
    struct autoreq *r = NULL;

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
            isl = jobs_group_islands(j, nodes, (size_t)world);
        }
        if (nodes != NULL && jobs_one_lan(j, nodes, (size_t)world)) {
            /* one LAN island and no tunnel: full precision, as inside any island (the
             * model would price a loaded machine's PING RTT as the link's latency) */
            memset(&o, 0, sizeof(o));
            jb->job.comm.codec = GM_JOB_CODEC_FP32;
            jb->job.comm.auto_resolved = true; /* switches priced on the ranks' measurements */
            snprintf(jb->codec_reason, sizeof(jb->codec_reason),
                     "fp32: every link of the group is on a LAN (one island: full precision "
                     "until the ranks' measured steps say its cost is over budget)");
            err = 0;
        } else if (links != NULL && (r = calloc(1, sizeof(*r))) != NULL) {
            /* the model's steps are timed elsewhere: the request owns links and isl */
            r->work.data = r;
            r->j = j;
            snprintf(r->id, sizeof(r->id), "%s", jb->id);
            r->job = jb->job;
            r->job.text = NULL;
            r->job.text_len = 0;
            r->world = world;
            r->links = links;
            r->isl = isl;
            free(nodes);
            return r;
        } else {
            err = gm_autocodec_resolve(&jb->job, world, links, isl, &o, jb->codec_reason,
                                       sizeof(jb->codec_reason));
        }
        free(nodes);
        free(isl);
    }
    free(links);
    if (err < 0)
        jb->job.comm.codec = GM_JOB_CODEC_FP32;
    auto_chosen(jb, world, err, &o);
    return NULL;
}

/* Member: the coordinator's choice for codec = auto, from JOB_GROUP. */
void jobs_apply_comm(struct job *jb, const struct gm_jobmsg *m)
{
    if (m->codec == GM_JOB_CODEC_AUTO)
        return; /* no choice of auto's: the job's own [comm] */
    jb->codec_auto = true;
    jb->job.comm.codec = m->codec;
    jb->job.comm.local_steps = (int)m->local_steps;
    jb->job.comm.auto_resolved = true;
}

#define SHARES_LOG_MS 1000 /* shares = auto: the coordinator's measure line this often */
#define FIT_REPORT_MS 1000 /* a member reports its rank's fit this often (with new samples) */

#define SWITCH_ANSWER_MS                                                                           \
    30000 /* every member answers a switch within this, or the group re-forms */

/* Member: the rank's fit to the coordinator. */
void jobs_fit_report_tick(struct gm_jobs *j, struct job *jb)
{
    struct gm_jobmsg m = {.gen = jb->gen, .have_fit = true};
    struct gm_coll_link f;
    uint64_t ops, now = gm_time_mono_ns();

    const bool shares_auto = jb->job.shares.mode == GM_JOB_SHARES_AUTO;
    struct gm_rank_progress p;

    /* shares = auto: every tick (the speeds must follow a machine that gets busy) */
    if (jb->coord || (!jb->codec_auto && !shares_auto) || jb->rank == NULL ||
        jb->state != J_RUNNING ||
        now - jb->fit_sent_ns < (uint64_t)(shares_auto ? TICK_MS : FIT_REPORT_MS) * 1000000ull)
        return;
    gm_rank_get_fit(jb->rank, &f, &ops);
    if (ops == jb->fit_sent_ops)
        return;
    gm_rank_get_progress(jb->rank, &p);
    if (p.share > 0 && p.step_s > 0 && p.coll_s <= p.step_s) {
        m.have_speed = true;
        m.speed_samples = p.share;
        m.speed_step_s = p.step_s;
        m.speed_coll_s = p.coll_s;
        m.speed_stall_s = p.stall_s < p.coll_s ? p.stall_s : p.coll_s;
        m.speed_cpu_s = p.cpu_taken_s >= 0 && p.cpu_taken_s < p.step_s ? p.cpu_taken_s : 0;
    }
    jb->fit_sent_ns = now;
    jb->fit_sent_ops = ops;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    snprintf(m.event, sizeof(m.event), "fit");
    m.fit_alpha_s = f.alpha_s;
    m.fit_bytes_per_s = f.bytes_per_s;
    m.fit_ops = ops;
    if (p.sync_s > 0 && p.sync_s <= GM_JOBMSG_SYNC_MAX_S)
        m.fit_sync_s = p.sync_s; /* DiLoCo: the coordinator sizes H from the longest */
    (void)jobs_send_msg(j, jb->coordinator, GM_MSG_JOB_REPORT, &m);
}

/* Coordinator: the lan pairs' measurements among the current ranks (others 0); *all_lan:
 * every pair is lan (one island). */
static struct gm_coll_link *lan_links(struct gm_jobs *j, struct job *jb, bool *all_lan)
{
    const size_t w = jb->world;
    struct gm_coll_link *l = calloc(w * w, sizeof(*l));

    *all_lan = l != NULL;
    for (size_t a = 0; l != NULL && a < w; a++)
        for (size_t b = 0; b < w; b++) {
            double rtt, mbps;
            if (a == b)
                continue;
            if (j->env.link_is_lan == NULL || j->env.link_measured == NULL ||
                !j->env.link_is_lan(j->env.agent, jb->ranks[a], jb->ranks[b])) {
                *all_lan = false;
                continue;
            }
            if (j->env.link_measured(j->env.agent, jb->ranks[a], jb->ranks[b], &rtt, &mbps) == 0)
                l[a * w + b] = (struct gm_coll_link){rtt / 2e3, mbps * 1e6 / 8};
        }
    return l;
}

/* Coordinator, every tick: re-decide from the ranks' fits; announce a switch. */
void jobs_switch_tick(struct gm_jobs *j, struct job *jb)
{
    struct gm_autoswitch_decision d;
    struct gm_gradsync_strategy cur;
    struct gm_rank_progress p;
    struct gm_coll_link f, *links;
    struct gm_jobmsg m = {0};
    uint64_t ops;
    long at;
    bool all_lan;
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
        jobs_reform(j, jb, "a member did not answer a codec switch");
        return;
    }
    gm_rank_get_progress(jb->rank, &p);
    if (p.generation != jb->gen)
        return; /* rank 0 has not taken the current group yet */
    gm_rank_get_fit(jb->rank, &f, &ops);
    gm_autoswitch_fit(jb->asw, 0, &f, ops);
    if (p.step_s > 0)
        gm_autoswitch_cost(jb->asw, 0, p.coll_s, p.cpu_taken_s);
    if (gm_gradsync_strategy_from_job(&jb->job, &cur) < 0)
        return;
    cur.algo = jb->islands != NULL ? GM_COLL_HIER : GM_COLL_RING;
    links = lan_links(j, jb, &all_lan);
    if (links == NULL)
        return;
    gm_autoswitch_one_island(jb->asw, all_lan);
    err = gm_autoswitch_decide(jb->asw, &cur, links, jb->islands, p.step, p.compute_s, p.sync_s,
                               p.total_steps, &d);
    free(links);
    if (err <= 0)
        return;
    if (p.total_steps > 0 && d.step >= p.total_steps) { /* the run ends before it would */
        gm_autoswitch_answer(jb->asw, 1, d.seq, false);
        return;
    }
    if ((err = gm_rank_switch(jb->rank, jb->gen, d.seq, d.step, &d.to, true, &at)) == -ERANGE) {
        gm_autoswitch_answer(jb->asw, 1, d.seq, false); /* as above: its round ends too late */
        return;
    }
    if (err < 0) {
        gm_warn("event=codec-switch-skip job=%s seq=%u step=%ld err=\"%s\"", jb->id, d.seq, d.step,
                gm_strerror(err));
        gm_autoswitch_group(jb->asw, (int)jb->world, p.step); /* decide again later */
        return;
    }
    jb->job.comm.codec = d.to.id;
    jb->job.comm.local_steps = (int)d.to.local_steps;
    jb->switch_ns = gm_time_mono_ns();
    snprintf(jb->codec_reason, sizeof(jb->codec_reason), "switched: %s", d.why);
    gm_notice("event=codec-switch-announce job=%s generation=%u seq=%u step=%ld at_step=%ld "
              "lead=%d codec=%s local_steps=%u reason=\"%s\"",
              jb->id, jb->gen & 0xffff, d.seq, d.step, p.step, d.lead, gm_job_codec_name(d.to.id),
              d.to.local_steps, d.why);
    m.gen = jb->gen;
    m.seq = d.seq;
    m.step = d.step;
    snprintf(m.id, sizeof(m.id), "%s", jb->id);
    m.codec = d.to.id;
    m.local_steps = d.to.local_steps;
    for (size_t i = 1; i < jb->world; i++)
        if ((err = jobs_send_msg(j, jb->ranks[i], GM_MSG_JOB_SWITCH, &m)) < 0)
            gm_warn("event=job-switch-send node=%s err=\"%s\"", jb->ranks[i], gm_strerror(err));
}

/* Member: the coordinator's switch; answer whether this rank takes it at that step. */
int jobs_on_switch(struct gm_jobs *j, const char *node, struct gm_jobmsg *m)
{
    struct job *jb = j->cur;
    struct gm_gradsync_strategy to;
    struct gm_jobmsg a = {.gen = m->gen, .seq = m->seq};
    enum gm_job_codec c = m->codec; /* never AUTO: the decoder refuses it */
    long at = -1;
    int err;

    if (jb == NULL || jb->coord || strcmp(jb->id, m->id) != 0 || strcmp(node, jb->coordinator) != 0)
        return 0; /* not this member's job: it is in none of that job's groups */
    if (jb->rank == NULL)
        err = -ESRCH;
    else if ((err = gm_gradsync_strategy_of(c, &jb->job, &to)) == 0) {
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
              jb->id, m->gen & 0xffff, m->seq, m->step, at, gm_job_codec_name(m->codec), err == 0);
    snprintf(a.id, sizeof(a.id), "%s", jb->id);
    snprintf(a.event, sizeof(a.event), "%s", err == 0 ? "switch-ok" : "switch-late");
    snprintf(a.message, sizeof(a.message), "%s", err == 0 ? "" : gm_strerror(err));
    a.code = err;
    a.step = at > 0 ? at : 0;
    (void)jobs_send_msg(j, node, GM_MSG_JOB_REPORT, &a);
    return 0;
}

/* Coordinator: a member's fit, or its answer to a switch. */
void jobs_on_switch_report(struct gm_jobs *j, struct job *jb, const char *node,
                           const struct gm_jobmsg *m)
{
    int r = jobs_rank_of(jb, node), res;

    if (m->have_speed && m->gen == jb->gen && r >= 1 && r < GM_JOB_SHARES_MAX) /* shares = auto */
        jb->obs[r] = (struct gm_autoshare_obs){m->speed_samples, m->speed_step_s, m->speed_coll_s,
                                               m->speed_stall_s};
    if (jb->asw == NULL || m->gen != jb->gen || r < 1)
        return;
    if (m->have_fit) {
        struct gm_coll_link f = {m->fit_alpha_s, m->fit_bytes_per_s};
        gm_autoswitch_fit(jb->asw, r, &f, m->fit_ops);
        gm_autoswitch_sync(jb->asw, r, m->fit_sync_s);
        if (m->have_speed)
            gm_autoswitch_cost(jb->asw, r, m->speed_coll_s, m->speed_cpu_s);
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
        jobs_reform(j, jb, "a member could not switch codec at the announced step");
    }
}

/* --- shares = auto (agent/jobs/autoshare.h) ----------------------------------------------- */

/* Coordinator: node marked a spare of the job, for why (the spare rule's line), and told. */
static void shares_mark_spare(struct gm_jobs *j, struct job *jb, const char *node, long step,
                              const char *why)
{
    for (size_t i = 0; i < jb->nparts; i++) {
        if (strcmp(jb->parts[i].node, node) != 0)
            continue;
        jb->parts[i].spare = true;
        snprintf(jb->parts[i].spare_why, sizeof(jb->parts[i].spare_why), "%.199s", why);
    }
    gm_notice("event=shares-spare job=%s generation=%u step=%ld node=%s reason=\"%s\"", jb->id,
              jb->gen & 0xffff, step, node, why);
    { /* the spare's part of the job is over: its trainer stops (and its record says why)
       * instead of waiting in a group that no longer has it */
        struct gm_jobmsg e = {0};
        snprintf(e.id, sizeof(e.id), "%s", jb->id);
        snprintf(e.state, sizeof(e.state), "cancelled");
        snprintf(e.message, sizeof(e.message), "left out as a spare: %.400s", why);
        (void)jobs_send_msg(j, node, GM_MSG_JOB_END, &e);
    }
    snprintf(jb->shares_reason, sizeof(jb->shares_reason), "%.64s left out: %.200s", node, why);
}

/* Coordinator: rank r (>= 1) left out of the job as a spare, for why; the group re-forms. */
static void shares_leave_out(struct gm_jobs *j, struct job *jb, int r, long step, const char *why)
{
    shares_mark_spare(j, jb, jb->ranks[r], step, why);
    jobs_reform(j, jb, "a rank too slow to help left out");
}

/* The collective's own cost a step for a model of params floats over the nodes' links that are
 * known not to be on a LAN (ring: 2 (w - 1) / w of its bytes over the slowest of them, 2 (w - 1)
 * latencies of the farthest; the bytes and the syncs of jb's codec), at the fastest machine's
 * pace; 0 when there is none.  A LAN pair,
 * or one not measured yet (a member's LINK_STATS still to come), is left out: a PING RTT and a
 * throughput probe on a loaded machine read its load, not the link (loopback under load: 52 ms
 * and 331 Mb/s, where the collective took 0.16 ms); the rule on the group's own steps prices
 * the collective after the dwell. */
static double probe_coll_s(struct gm_jobs *j, const struct job *jb, char (*nodes)[NODE_LEN],
                           size_t w, size_t params)
{
    /* the codec the group runs: fp16 and DiLoCo send 2 bytes a parameter (diloco8 one),
     * PowerSGD's factors are small (its latencies only), and DiLoCo syncs once every H steps.
     * DiLoCo picked by auto: auto's own price of it per step, which knows the islands (one
     * tunnel exchange a sync, not a ring's 2(w-1) latencies) and the overlap; this ring
     * formula priced LeNet-5's 3-host rows at 12-17 ms a step where the syncs cost ~2, and the
     * probe left two of three equal hosts out */
    const enum gm_job_codec codec = jb->job.comm.codec;
    if (jb->have_auto_comm && gm_job_codec_is_diloco(codec))
        return jb->auto_comm_s;
    const double bytes = codec == GM_JOB_CODEC_DILOCO8                                ? 1
                         : codec == GM_JOB_CODEC_FP16 || codec == GM_JOB_CODEC_DILOCO ? 2
                         : codec == GM_JOB_CODEC_POWERSGD                             ? 0
                                                                                      : 4;
    const double per_step = gm_job_codec_is_diloco(codec) && jb->job.comm.local_steps > 1
                                ? jb->job.comm.local_steps
                                : 1;
    double bw = 0, alpha = 0;
    bool known = false;

    for (size_t a = 0; j->env.link_measured != NULL && a < w; a++)
        for (size_t b = 0; b < w; b++) {
            double rtt, mbps;
            if (a == b || j->env.link_measured(j->env.agent, nodes[a], nodes[b], &rtt, &mbps) < 0 ||
                !(mbps > 0) ||
                (j->env.link_is_lan != NULL &&
                 (j->env.link_is_lan(j->env.agent, nodes[a], nodes[b]) ||
                  j->env.link_is_lan(j->env.agent, nodes[b], nodes[a]))))
                continue;
            if (!known || mbps * 1e6 / 8 < bw)
                bw = mbps * 1e6 / 8;
            alpha = rtt / 2e3 > alpha ? rtt / 2e3 : alpha;
            known = true;
        }
    if (!known || w < 2)
        return 0;
    return (2.0 * (double)(w - 1) / (double)w * (double)params * bytes / bw +
            2.0 * (double)(w - 1) * alpha) /
           per_step;
}

/* The coordinator is the chief, and rank 0 trains: the rule never leaves it out.  When the
 * probe says that, were the fastest rank coordinating, this node would be left out as too slow
 * to help, the chief's role (and with it the job) goes to the fastest rank, if it can lead (a
 * voter with an up link): a slow machine that happens to be the chief (the one that ran `init`,
 * an old PC) would otherwise hold every step of the job back.  The first group runs the plan
 * here; once it has stepped, the shares tick hands over (jobs_shares_tick), and the new chief
 * takes the job over at its last finished step (agent/jobs/job_partition.c), where the
 * ordinary rule leaves this node out.  One try per job: a failed transfer leaves the job here. */
static void probe_handover(struct gm_jobs *j, struct job *jb, const struct gm_autoshare_probe *pr,
                           char (*nodes)[NODE_LEN], int w, double k_s,
                           const struct gm_autoshare_probed *o)
{
    struct gm_autoshare_probe re[GM_JOB_SHARES_MAX];
    struct gm_autoshare_probed o2;
    char why[400];
    int f = 0;

    if (j->env.hand_chief_to == NULL || w < 2)
        return;
    for (int r = 1; r < w; r++)
        if (o->slow[r] < o->slow[f])
            f = r;
    if (f == 0)
        return;
    re[0] = pr[f]; /* as if the fastest coordinated: this node as its rank 1 */
    re[1] = pr[0];
    for (int r = 1, k = 2; r < w; r++)
        if (r != f)
            re[k++] = pr[r];
    if (gm_autoshare_probe_plan(re, w, jb->job.optim.global_batch, k_s,
                                gm_job_codec_is_diloco(jb->job.comm.codec), &o2, why,
                                sizeof(why)) < 0 ||
        o2.keep[1])
        return;
    snprintf(jb->handover_to, sizeof(jb->handover_to), "%s", nodes[f]);
    snprintf(jb->handover_why, sizeof(jb->handover_why),
             "shares: this node works %.1fx slower than %s, too slow to help job %s (probe), "
             "and the chief trains: %s takes the chief's role and the job",
             o2.slow[1], nodes[f], jb->id, nodes[f]);
    gm_notice("event=shares-handover-plan job=%s to=%s slowness=%.1f: the coordinator is too slow "
              "to help; the chief's role goes to %s once the first group has stepped",
              jb->id, nodes[f], o2.slow[1], nodes[f]);
}

void jobs_shares_probe(struct gm_jobs *j, struct job *jb)
{
    struct gm_autoshare_probe pr[GM_JOB_SHARES_MAX];
    struct gm_autoshare_probed o;
    char(*nodes)[NODE_LEN] = NULL;
    char why[400], pts[GM_JOB_SHARES_MAX * 40], from[GM_JOB_SHARES_MAX * 12],
        to[GM_JOB_SHARES_MAX * 12];
    const int g = jb->job.optim.global_batch;
    size_t w, o_len = 0;

    if (jb->job.shares.mode != GM_JOB_SHARES_AUTO || !jb->probe_started)
        return;
    nodes = calloc(jb->nparts + 1, NODE_LEN);
    if (nodes == NULL)
        return;
    w = jobs_group_nodes(j, jb, nodes, false);
    const char *missing = NULL;
    if (!jb->have_probe)
        missing = nodes[0];
    for (size_t r = 1; missing == NULL && r < w; r++)
        for (size_t i = 0; i < jb->nparts; i++)
            if (strcmp(jb->parts[i].node, nodes[r]) == 0 && !jb->parts[i].have_probe)
                missing = nodes[r];
    if (w < 2 || w > GM_JOB_SHARES_MAX || g < (int)w || missing != NULL) {
        if (missing != NULL)
            gm_info("event=shares-probe-skip job=%s node=%s: no probe from it; the first group "
                    "runs equal shares",
                    jb->id, missing);
        free(nodes);
        return;
    }
    pts[0] = '\0';
    for (size_t r = 0; r < w; r++) {
        pr[r] = jb->probe.p;
        for (size_t i = 0; r > 0 && i < jb->nparts; i++)
            if (strcmp(jb->parts[i].node, nodes[r]) == 0)
                pr[r] = jb->parts[i].probe;
        int k = snprintf(pts + o_len, sizeof(pts) - o_len, "%s%s:%d/%.2f,%d/%.2f", r ? " " : "",
                         nodes[r], pr[r].n[0], pr[r].busy_s[0] * 1e3, pr[r].n[1],
                         pr[r].busy_s[1] * 1e3);
        if (k > 0 && (size_t)k < sizeof(pts) - o_len)
            o_len += (size_t)k;
    }
    const double k_s = probe_coll_s(j, jb, nodes, w, jb->probe.params);
    if (gm_autoshare_probe_plan(pr, (int)w, g, k_s, gm_job_codec_is_diloco(jb->job.comm.codec), &o,
                                why, sizeof(why)) < 0) {
        gm_warn("event=shares-probe-skip job=%s: the probes make no sense (%s); the first group "
                "runs equal shares",
                jb->id, pts);
        free(nodes);
        return;
    }
    gm_info("event=shares-probe-plan job=%s world=%zu points=n/pass_ms:%s coll_ms=%.3f "
            "equal_ms=%.2f balanced_ms=%.2f",
            jb->id, w, pts, k_s * 1e3, o.equal_s * 1e3, o.step_s * 1e3);
    probe_handover(j, jb, pr, nodes, (int)w, k_s, &o);
    if (!o.change) {
        gm_info("event=shares-probe-keep job=%s reason=\"%s\"", jb->id, why);
        snprintf(jb->shares_reason, sizeof(jb->shares_reason), "%.319s", why);
        free(nodes);
        return;
    }
    int eq[GM_JOB_SHARES_MAX], kept[GM_JOB_SHARES_MAX], nk = 0;
    gm_job_split_by(g, (int)w, NULL, eq);
    for (size_t r = 0; r < w; r++)
        if (o.keep[r])
            kept[nk++] = o.counts[r];
    gm_autoshare_text(eq, (int)w, from, sizeof(from));
    gm_autoshare_text(kept, nk, to, sizeof(to));
    for (size_t r = 1; r < w; r++)
        if (!o.keep[r]) {
            char sw[320];
            snprintf(sw, sizeof(sw),
                     "too slow to help (probe): it works %.1fx slower than the fastest rank; "
                     "predicted step %.2f ms without it",
                     o.slow[r], o.step_s * 1e3);
            shares_mark_spare(j, jb, nodes[r], 0, sw);
        }
    if (nk >= 2) { /* (one rank left: no shares, only the spares) */
        gm_notice("event=shares-change job=%s generation=%u step=0 from=%s to=%s reason=\"%s\"",
                  jb->id, jb->gen & 0xffff, from, to, why); /* (no group yet: 0) */
        memcpy(jb->shares, kept, sizeof(int) * (size_t)nk);
        jb->nshares = nk;
        jb->probe_shares = true;
    }
    /* not judged by outcome: no group ran the equal shares, and against their predicted step
     * (compute only: no collective, optimizer or load) a right change measured slower (1.0 +
     * 0.5 under load: 83:45 measured 10.87 ms against 6.45 predicted, undone).  The first
     * group's own steps decide past its dwell, from the plan of its own steps, as after any
     * first group: a probe that misjudged is moved back by the ordinary rule, and that change
     * is judged.  The probe's points are not put in the fit either: compute alone, they are
     * not the busy times the ranks report. */
    if (nk >= 2)
        snprintf(jb->shares_reason, sizeof(jb->shares_reason), "%.319s", why);
    free(nodes);
}

void jobs_shares_tick(struct gm_jobs *j, struct job *jb)
{
    struct gm_rank_progress p;
    int cur[GM_JOB_SHARES_MAX], out[GM_JOB_SHARES_MAX];
    const int w = (int)jb->world, g = jb->job.optim.global_batch;
    char why[320], from[GM_JOB_SHARES_MAX * 12], to[GM_JOB_SHARES_MAX * 12];
    uint32_t seq;

    if (jb->job.shares.mode != GM_JOB_SHARES_AUTO || jb->rank == NULL || jb->state != J_RUNNING ||
        w < 2 || w > GM_JOB_SHARES_MAX || (jb->asw != NULL && gm_autoswitch_pending(jb->asw, &seq)))
        return; /* a codec switch first: re-forming now would abandon it */
    gm_rank_get_progress(jb->rank, &p);
    if (p.generation != jb->gen || p.share <= 0 || p.step_s <= 0)
        return;                       /* rank 0 has not taken the current group, or no step yet */
    if (jb->handover_to[0] != '\0') { /* probe_handover: one try, every rank has stepped */
        int err = j->env.hand_chief_to(j->env.agent, jb->handover_to, jb->handover_why);
        if (err < 0)
            gm_warn("event=shares-handover-failed job=%s to=%s err=\"%s\": this node goes on "
                    "coordinating",
                    jb->id, jb->handover_to, gm_strerror(err));
        jb->handover_to[0] = '\0';
        if (err == 0)
            return;
    }
    jb->obs[0] = (struct gm_autoshare_obs){p.share, p.step_s, p.coll_s, p.stall_s};
    jb->ash.rounds = p.rounds; /* every rank runs rank 0's codec: DiLoCo's rounds or steps */
    double sps[GM_JOB_SHARES_MAX], over[GM_JOB_SHARES_MAX], prop[GM_JOB_SHARES_MAX];
    if (gm_autoshare_speeds(jb->obs, w, prop) < w)
        return;
    if (p.step >= jb->ash.quiet_until) /* past the dwell: this group's busy times, for the fit */
        for (int r = 0; r < w; r++) {
            struct gm_autoshare_hist *h = jobs_shares_hist(jb, jb->ranks[r]);
            if (h != NULL)
                (void)gm_autoshare_hist_add(h, jb->obs[r].samples, jb->obs[r].samples / prop[r]);
        }
    /* the job's step as measured (rank 0's, in lockstep the job's): what a change is judged by;
     * moved at the same shares, a machine changed speed and the outcomes so far are stale */
    if (gm_autoshare_measure(&jb->ash, p.step, p.step_s) > 0)
        gm_info("event=shares-forget job=%s generation=%u step=%ld step_ms=%.2f: the job's step "
                "moved at the same shares; the outcomes of earlier changes no longer hold",
                jb->id, jb->gen & 0xffff, p.step, p.step_s * 1e3);
    if (jobs_shares_models(jb, NULL, sps, over) < w)
        return;
    if (gm_time_mono_ns() - jb->shares_log_ns >= SHARES_LOG_MS * 1000000ull) {
        /* what the rule reads, now and then (info: a decision that does not come is the
         * question this answers) */
        char ob[GM_JOB_SHARES_MAX * 48];
        size_t o = 0;
        ob[0] = '\0';
        for (int r = 0; r < w && o + 1 < sizeof(ob); r++) {
            int k =
                snprintf(ob + o, sizeof(ob) - o, "%s%d/%.2f/%.2f/%.2f/%.0f/%.0f/%.2f", r ? "," : "",
                         jb->obs[r].samples, jb->obs[r].step_s * 1e3, jb->obs[r].coll_s * 1e3,
                         jb->obs[r].stall_s * 1e3, prop[r], sps[r], over[r] * 1e3);
            if (k < 0 || (size_t)k >= sizeof(ob) - o)
                break;
            o += (size_t)k;
        }
        /* and the plan's reading: the collective's own cost, each rank's slowness */
        struct gm_autoshare_plan pl;
        char sl[GM_JOB_SHARES_MAX * 12];
        sl[0] = '\0';
        if (gm_autoshare_plan_for(jb->obs, w, jb->ash.rounds, &pl) >= 0)
            for (int r = 0, q = 0; r < w && (size_t)q + 1 < sizeof(sl); r++) {
                int k =
                    snprintf(sl + q, sizeof(sl) - (size_t)q, "%s%.2f", r ? ":" : "", pl.slow[r]);
                if (k < 0 || (size_t)k >= sizeof(sl) - (size_t)q)
                    break;
                q += k;
            }
        jb->shares_log_ns = gm_time_mono_ns();
        gm_info("event=shares-measure job=%s generation=%u step=%ld "
                "ranks=samples/step_ms/coll_ms/stall_ms/sps/model_sps/overhead_ms:%s "
                "plan_coll_ms=%.2f plan_slowness=%s shape=%s",
                jb->id, jb->gen & 0xffff, p.step, ob, sl[0] ? pl.coll_s * 1e3 : -1.0,
                sl[0] ? sl : "-", jb->ash.rounds ? "rounds" : "steps");
    }
    if (jb->nshares == w)
        memcpy(cur, jb->shares, sizeof(int) * (size_t)w);
    else
        gm_job_split_by(g, w, NULL, cur);
    /* the last change's outcome, once its group is measured: kept, or taken back */
    static const char *const outcome[] = {"", "paid", "kept", "undone"};
    int verdict = gm_autoshare_judge(&jb->ash, w, cur, out, why, sizeof(why));
    if (verdict > 0 && verdict <= 3)
        gm_notice("event=shares-judged job=%s generation=%u step=%ld outcome=%s reason=\"%s\"",
                  jb->id, jb->gen & 0xffff, p.step, outcome[verdict], why);
    if (verdict == 3) {
        memcpy(jb->shares, out, sizeof(int) * (size_t)w);
        jb->nshares = w;
        snprintf(jb->shares_reason, sizeof(jb->shares_reason), "%.319s", why);
        jobs_reform(j, jb, "shares taken back: the change did not pay");
        return;
    }
    /* DiLoCo: one decision a round (its readings change once a round) */
    if (!gm_autoshare_new_round(&jb->ash, p.rounds, p.round_folds))
        return;
    /* too slow to help?  Asked before the shares, so that a rank that would cost more than it
     * gives is left out in the first decision instead of after a re-balance (one re-formed
     * group, not two); while that builds up, the shares wait */
    int spare = gm_autoshare_spare(&jb->ash, jb->obs, w, g, p.step, why, sizeof(why));
    if (spare >= 1) { /* never rank 0: the coordinator trains (it cannot be its own spare) */
        shares_leave_out(j, jb, spare, p.step, why);
        return;
    }
    if (jb->ash.spare_confirm > 0) {
        jb->ash.confirm = 0;
        return;
    }
    if (gm_autoshare_decide(&jb->ash, sps, over, w, g, cur, p.step, out, why, sizeof(why)) <= 0)
        return;
    gm_autoshare_text(cur, w, from, sizeof(from));
    gm_autoshare_text(out, w, to, sizeof(to));
    {
        char sp[GM_JOB_SHARES_MAX * 12];
        size_t o = 0;
        sp[0] = '\0';
        for (int i = 0; i < w && o + 1 < sizeof(sp); i++) {
            int k = snprintf(sp + o, sizeof(sp) - o, "%s%.0f", i ? ":" : "", sps[i]);
            if (k < 0 || (size_t)k >= sizeof(sp) - o)
                break;
            o += (size_t)k;
        }
        char ov[GM_JOB_SHARES_MAX * 12];
        o = 0;
        ov[0] = '\0';
        for (int i = 0; i < w && o + 1 < sizeof(ov); i++) {
            int k = snprintf(ov + o, sizeof(ov) - o, "%s%.2f", i ? ":" : "", over[i] * 1e3);
            if (k < 0 || (size_t)k >= sizeof(ov) - o)
                break;
            o += (size_t)k;
        }
        int pts[GM_JOB_SHARES_MAX];
        char np[GM_JOB_SHARES_MAX * 12];
        for (int i = 0; i < w; i++) {
            const struct gm_autoshare_hist *h = jobs_shares_hist(jb, jb->ranks[i]);
            pts[i] = h != NULL ? h->npts : 0;
        }
        gm_autoshare_text(pts, w, np, sizeof(np));
        gm_notice("event=shares-change job=%s generation=%u step=%ld from=%s to=%s "
                  "samples_per_s=%s overhead_ms=%s points=%s reason=\"%s\"",
                  jb->id, jb->gen & 0xffff, p.step, from, to, sp, ov, np, why);
    }
    memcpy(jb->shares, out, sizeof(int) * (size_t)w);
    jb->nshares = w;
    snprintf(jb->shares_reason, sizeof(jb->shares_reason), "%.319s", why);
    jobs_reform(j, jb, "shares changed");
}

/* Coordinator: the group's shares and speeds for the Prometheus endpoint (every tick, whatever
 * [job] shares says; speeds only where measured: shares = auto's reports). */
void jobs_shares_publish(struct gm_jobs *j, struct job *jb)
{
    struct gm_metrics_rank mr[GM_JOB_SHARES_MAX];
    struct gm_rank_progress p;
    int counts[GM_JOB_SHARES_MAX];
    double sps[GM_JOB_SHARES_MAX] = {0};
    const int w = (int)jb->world, g = jb->job.optim.global_batch;
    struct gm_metrics *m = j->env.metrics != NULL ? j->env.metrics(j->env.agent) : NULL;

    if (m == NULL || jb->rank == NULL || jb->state != J_RUNNING || w < 1 || w > GM_JOB_SHARES_MAX ||
        g < w)
        return;
    gm_rank_get_progress(jb->rank, &p);
    if (p.generation == jb->gen && p.share > 0 && p.step_s > 0)
        jb->obs[0] = (struct gm_autoshare_obs){p.share, p.step_s, p.coll_s, p.stall_s};
    (void)gm_autoshare_speeds(jb->obs, w, sps);
    if (jb->nshares == w)
        memcpy(counts, jb->shares, sizeof(int) * (size_t)w);
    else
        gm_job_split(&jb->job, g, w, counts);
    for (int r = 0; r < w; r++) {
        snprintf(mr[r].node, sizeof(mr[r].node), "%s", jb->ranks[r]);
        mr[r].samples = counts[r];
        mr[r].samples_per_s = sps[r] > 0 ? sps[r] : -1;
    }
    gm_metrics_job_ranks(m, jb->id, mr, (size_t)w);
}
