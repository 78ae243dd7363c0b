/*
 * agent/service/metrics.c - see metrics.h.
 *
 * Ownership: struct gm_metrics owns the MHD daemon, the mutex and the copies of everything
 * published.  gm_metrics_stop() stops the daemon first (MHD joins its thread and closes
 * every connection), so no handler runs while the struct is freed.
 */
#include "agent/service/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "agent/service/version.h"
#include "common/log.h"

#define CONN_MEMORY (16u << 10)
#define TEXT_CAP_MIN 4096

struct refusal {
    char what[8];
    char reason[16];
    uint64_t n;
};

struct gm_metrics {
    struct MHD_Daemon *d;
    char address[GM_ADDR_MAX];
    pthread_mutex_t mu; /* guards everything below */
    struct gm_metrics_cluster cluster;
    int have_cluster;
    struct gm_metrics_link *links; /* owned */
    size_t nlinks;
    struct refusal refusals[GM_METRICS_REASONS_MAX];
    size_t nrefusals;
    uint64_t joins_accepted;
    struct gm_metrics_job job;
    int have_job;
    struct gm_metrics_rank ranks[GM_METRICS_RANKS_MAX]; /* the job's group (coordinator) */
    size_t nranks;
    char ranks_id[GM_METRICS_JOB_ID_MAX]; /* whose group */
    struct gm_metrics_job_final last; /* the last job that ended */
    int have_last;
};

/* --- text ------------------------------------------------------------------------------- */

struct text {
    char *p;
    size_t len, cap;
    int oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *q = realloc(t->p, 2 * t->cap + (size_t)n);
        if (q == NULL) {
            t->oom = 1;
            return;
        }
        t->p = q;
        t->cap = 2 * t->cap + (size_t)n;
    }
}

/* A label value with \, " and newline escaped (the exposition format's rules). */
static const char *esc(char *dst, size_t cap, const char *s)
{
    size_t o = 0;

    for (; *s != '\0' && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            dst[o++] = '\\';
            dst[o++] = *s;
        } else if (*s == '\n') {
            dst[o++] = '\\';
            dst[o++] = 'n';
        } else {
            dst[o++] = *s;
        }
    }
    dst[o] = '\0';
    return dst;
}

static void head(struct text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_cluster(struct gm_metrics *m, struct text *t)
{
    const struct gm_metrics_cluster *c = &m->cluster;
    char a[160], b[160];

    head(t, "gradmesh_up", "gauge", "1 while the agent runs.");
    put(t, "gradmesh_up{cluster=\"%s\",node=\"%s\"} 1\n", esc(a, sizeof(a), c->cluster),
        esc(b, sizeof(b), c->node));
    head(t, "gradmesh_members", "gauge", "Members known, this node excluded.");
    put(t, "gradmesh_members %u\n", c->members);
    head(t, "gradmesh_members_up", "gauge", "Members with an up link.");
    put(t, "gradmesh_members_up %u\n", c->members_up);
}

/* What this binary is: the same four values as `gradmesh version` (version.h). */
static void render_build_info(struct text *t)
{
    char v[160], c[160];

    head(t, "gradmesh_build_info", "gauge",
         "1, labelled with the build: version, commit, cuda (1 or 0), peer protocol.");
    put(t, "gradmesh_build_info{version=\"%s\",commit=\"%s\",cuda=\"%d\",proto=\"%d\"} 1\n",
        esc(v, sizeof(v), gm_version_string()), esc(c, sizeof(c), gm_version_commit()),
        gm_version_cuda(), GM_PROTO_VERSION);
}

/* Counters the loop bumps as things happen: there with or without a cluster snapshot. */
static void render_counters(struct gm_metrics *m, struct text *t)
{
    head(t, "gradmesh_joins_total", "counter", "Join requests answered, by result.");
    put(t, "gradmesh_joins_total{result=\"accepted\"} %llu\n",
        (unsigned long long)m->joins_accepted);
    {
        uint64_t refused = 0;
        for (size_t i = 0; i < m->nrefusals; i++)
            if (strcmp(m->refusals[i].what, "join") == 0)
                refused += m->refusals[i].n;
        put(t, "gradmesh_joins_total{result=\"refused\"} %llu\n", (unsigned long long)refused);
    }
    head(t, "gradmesh_refused_total", "counter", "Refused connections and joins, by reason.");
    for (size_t i = 0; i < m->nrefusals; i++)
        put(t, "gradmesh_refused_total{what=\"%s\",reason=\"%s\"} %llu\n", m->refusals[i].what,
            m->refusals[i].reason, (unsigned long long)m->refusals[i].n);
}

static void render_cluster_tail(struct gm_metrics *m, struct text *t)
{
    const struct gm_metrics_cluster *c = &m->cluster;

    head(t, "gradmesh_token_uses_total", "counter", "Joins admitted by invite tokens.");
    put(t, "gradmesh_token_uses_total %llu\n", (unsigned long long)c->token_uses);
    if (c->checkpoint_age_s >= 0) {
        head(t, "gradmesh_checkpoint_age_seconds", "gauge", "Age of the newest checkpoint.");
        put(t, "gradmesh_checkpoint_age_seconds %.3f\n", c->checkpoint_age_s);
    }
    head(t, "gradmesh_disk_full", "gauge",
         "1 while the last checkpoint written or received failed for want of space.");
    put(t, "gradmesh_disk_full %d\n", c->disk_full ? 1 : 0);
    head(t, "gradmesh_disk_full_total", "counter",
         "Checkpoints (own or replicas) not stored for want of space.");
    put(t, "gradmesh_disk_full_total %llu\n", (unsigned long long)c->disk_full_total);
    if (c->term >= 0) {
        head(t, "gradmesh_term", "gauge", "Election term.");
        put(t, "gradmesh_term %lld\n", (long long)c->term);
    }
}

/* The per-link families, one series per member; unknown values left out. */
static void render_links(struct gm_metrics *m, struct text *t)
{
    char p[160], ad[160];
    size_t i;

#define LABELS(l) esc(p, sizeof(p), (l)->peer), (l)->cls
    head(t, "gradmesh_link_info", "gauge", "1 per member link, with its class, codec, address.");
    for (i = 0; i < m->nlinks; i++)
        put(t, "gradmesh_link_info{peer=\"%s\",class=\"%s\",codec=\"%s\",address=\"%s\"} 1\n",
            LABELS(&m->links[i]), m->links[i].codec, esc(ad, sizeof(ad), m->links[i].address));
    head(t, "gradmesh_link_up", "gauge", "1 when the link to the member is up.");
    for (i = 0; i < m->nlinks; i++)
        put(t, "gradmesh_link_up{peer=\"%s\",class=\"%s\"} %d\n", LABELS(&m->links[i]),
            m->links[i].up);
    head(t, "gradmesh_link_sent_bytes_total", "counter", "Bytes sent on the current link.");
    for (i = 0; i < m->nlinks; i++)
        put(t, "gradmesh_link_sent_bytes_total{peer=\"%s\",class=\"%s\"} %llu\n",
            LABELS(&m->links[i]), (unsigned long long)m->links[i].bytes_sent);
    head(t, "gradmesh_link_received_bytes_total", "counter", "Bytes received on the current link.");
    for (i = 0; i < m->nlinks; i++)
        put(t, "gradmesh_link_received_bytes_total{peer=\"%s\",class=\"%s\"} %llu\n",
            LABELS(&m->links[i]), (unsigned long long)m->links[i].bytes_received);
    head(t, "gradmesh_link_rtt_seconds", "gauge", "Last round-trip time over TLS.");
    for (i = 0; i < m->nlinks; i++)
        if (m->links[i].rtt_s >= 0)
            put(t, "gradmesh_link_rtt_seconds{peer=\"%s\",class=\"%s\"} %.6f\n",
                LABELS(&m->links[i]), m->links[i].rtt_s);
    head(t, "gradmesh_link_throughput_bits_per_second", "gauge",
         "Measured throughput, out to and in from the member.");
    for (i = 0; i < m->nlinks; i++) {
        if (m->links[i].bps_out >= 0)
            put(t,
                "gradmesh_link_throughput_bits_per_second{peer=\"%s\",class=\"%s\","
                "direction=\"out\"} %.0f\n",
                LABELS(&m->links[i]), m->links[i].bps_out);
        if (m->links[i].bps_in >= 0)
            put(t,
                "gradmesh_link_throughput_bits_per_second{peer=\"%s\",class=\"%s\","
                "direction=\"in\"} %.0f\n",
                LABELS(&m->links[i]), m->links[i].bps_in);
    }
    head(t, "gradmesh_link_tcp_retransmits_total", "counter",
         "TCP retransmissions on the link's socket (TCP_INFO).");
    for (i = 0; i < m->nlinks; i++)
        if (m->links[i].tcp_retransmits >= 0)
            put(t, "gradmesh_link_tcp_retransmits_total{peer=\"%s\",class=\"%s\"} %lld\n",
                LABELS(&m->links[i]), (long long)m->links[i].tcp_retransmits);
#undef LABELS
}

static void render_job(struct gm_metrics *m, struct text *t)
{
    const struct gm_metrics_job *j = &m->job;
    static const char *const phases[] = {"compute", "collective", "optimizer"};
    const double split[] = {j->compute_s, j->collective_s, j->optimizer_s};
    char id[160], name[160], l[400];

    /* job_id and job_name: "job" is the label Prometheus gives every target's scrape job */
    snprintf(l, sizeof(l), "job_id=\"%s\",job_name=\"%s\"", esc(id, sizeof(id), j->id),
             esc(name, sizeof(name), j->name));
    head(t, "gradmesh_job_step", "gauge", "Steps done by the running job.");
    put(t, "gradmesh_job_step{%s} %lld\n", l, (long long)j->step);
    head(t, "gradmesh_job_epoch", "gauge", "Epoch of the running job.");
    put(t, "gradmesh_job_epoch{%s} %d\n", l, j->epoch);
    head(t, "gradmesh_job_step_seconds", "gauge", "The last step's time, by phase.");
    for (int i = 0; i < 3; i++)
        put(t, "gradmesh_job_step_seconds{%s,phase=\"%s\"} %.6f\n", l, phases[i], split[i]);
    head(t, "gradmesh_job_samples_per_second", "gauge", "Training samples per second.");
    put(t, "gradmesh_job_samples_per_second{%s} %.3f\n", l, j->samples_per_s);
    head(t, "gradmesh_job_loss", "gauge", "Training loss.");
    put(t, "gradmesh_job_loss{%s} %.6g\n", l, j->loss);
    if (j->accuracy_pct >= 0) {
        head(t, "gradmesh_job_accuracy_percent", "gauge", "Last test accuracy.");
        put(t, "gradmesh_job_accuracy_percent{%s} %.4f\n", l, j->accuracy_pct);
    }
    if (j->bytes_per_step >= 0) {
        head(t, "gradmesh_job_bytes_per_step", "gauge", "Bytes sent by this rank per step.");
        put(t, "gradmesh_job_bytes_per_step{%s} %.0f\n", l, j->bytes_per_step);
    }
    if (j->compression_ratio >= 0) {
        head(t, "gradmesh_job_compression_ratio", "gauge", "fp32 bytes / bytes on the wire.");
        put(t, "gradmesh_job_compression_ratio{%s} %.4f\n", l, j->compression_ratio);
    }
    if (m->nranks > 0 && strcmp(m->ranks_id, j->id) == 0) { /* not a job before's */
        char node[2 * (GM_ID_NAME_MAX + 1) + 2];
        head(t, "gradmesh_job_rank_share_samples", "gauge",
             "Each rank's part of the global batch ([job] shares), on the coordinator.");
        for (size_t i = 0; i < m->nranks; i++)
            put(t, "gradmesh_job_rank_share_samples{%s,rank=\"%zu\",node=\"%s\"} %d\n", l, i,
                esc(node, sizeof(node), m->ranks[i].node), m->ranks[i].samples);
        head(t, "gradmesh_job_rank_samples_per_second", "gauge",
             "Each rank's samples per second of its busy time, on the coordinator.");
        for (size_t i = 0; i < m->nranks; i++)
            if (m->ranks[i].samples_per_s >= 0)
                put(t, "gradmesh_job_rank_samples_per_second{%s,rank=\"%zu\",node=\"%s\"} %.3f\n",
                    l, i, esc(node, sizeof(node), m->ranks[i].node), m->ranks[i].samples_per_s);
    }
}

/* The last job that ended: there until the next one ends. */
static void render_last(struct gm_metrics *m, struct text *t)
{
    const struct gm_metrics_job_final *f = &m->last;
    char id[160], name[160], l[400];

    snprintf(l, sizeof(l), "job_id=\"%s\",job_name=\"%s\"", esc(id, sizeof(id), f->id),
             esc(name, sizeof(name), f->name));
    head(t, "gradmesh_job_last_steps", "gauge", "Steps the last ended job ran.");
    put(t, "gradmesh_job_last_steps{%s} %lld\n", l, (long long)f->steps);
    head(t, "gradmesh_job_last_wall_seconds", "gauge", "Wall time of the last ended job.");
    put(t, "gradmesh_job_last_wall_seconds{%s} %.3f\n", l, f->wall_s);
    if (f->accuracy_pct >= 0) {
        head(t, "gradmesh_job_last_accuracy_percent", "gauge",
             "Final test accuracy of the last ended job.");
        put(t, "gradmesh_job_last_accuracy_percent{%s} %.4f\n", l, f->accuracy_pct);
    }
    if (f->loss >= 0) {
        head(t, "gradmesh_job_last_loss", "gauge", "Final test loss of the last ended job.");
        put(t, "gradmesh_job_last_loss{%s} %.6g\n", l, f->loss);
    }
}

int gm_metrics_render(struct gm_metrics *m, char **out, size_t *len)
{
    struct text t = {.cap = TEXT_CAP_MIN};

    *out = NULL;
    *len = 0;
    t.p = malloc(t.cap);
    if (t.p == NULL)
        return -ENOMEM;
    t.p[0] = '\0';
    render_build_info(&t);
    pthread_mutex_lock(&m->mu);
    if (m->have_cluster)
        render_cluster(m, &t);
    render_counters(m, &t);
    if (m->have_cluster)
        render_cluster_tail(m, &t);
    render_links(m, &t);
    if (m->have_job)
        render_job(m, &t);
    if (m->have_last)
        render_last(m, &t);
    pthread_mutex_unlock(&m->mu);
    if (t.oom) {
        free(t.p);
        return -ENOMEM;
    }
    *out = t.p;
    *len = t.len;
    return 0;
}

/* --- HTTP ---------------------------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* MHD's access handler, on the HTTP thread.  Requests carry no body we want: a request with
 * one is answered 405 before its body is read. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct gm_metrics *m = cls;
    struct MHD_Response *r;
    enum MHD_Result ret;
    char *text;
    size_t len;

    (void)version;
    (void)upload_data;
    (void)req_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
    if (*upload_data_size != 0)
        return reply(conn, MHD_HTTP_BAD_REQUEST, "no body expected\n");
    if (strcmp(url, "/metrics") != 0)
        return reply(conn, MHD_HTTP_NOT_FOUND, "only /metrics is served here\n");
    if (gm_metrics_render(m, &text, &len) != 0)
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
    r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* MHD writes its own diagnostics here (malformed requests and the like): one debug line. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[256];

    (void)cls;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    gm_debug("event=metrics-http msg=\"%s\"", buf);
}

int gm_metrics_start(const char *addr, struct gm_metrics **out)
{
    struct sockaddr_storage ss;
    const union MHD_DaemonInfo *info;
    struct gm_metrics *m;
    /* poll(2), not epoll: with MHD_USE_EPOLL, Debian's 0.9.75 kept the per-address slots of
     * connections their peer closed mid-request, so a scraper that gave up locked its
     * address out (tests/unit/test_metrics.c, test_held_connections).  16 fds: no matter. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    int err;

    *out = NULL;
    if (gm_proto_addr_parse(addr, &ss) != 0)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    err = pthread_mutex_init(&m->mu, NULL);
    if (err != 0) {
        free(m);
        return -err;
    }
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    errno = 0;
    m->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)GM_METRICS_CONN_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)GM_METRICS_CONN_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)GM_METRICS_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)CONN_MEMORY, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_END);
    if (m->d == NULL) {
        err = errno != 0 ? -errno : -EADDRINUSE;
        gm_err("event=metrics-listen address=%s err=%d msg=\"%s\"", addr, err, gm_strerror(err));
        pthread_mutex_destroy(&m->mu);
        free(m);
        return err;
    }
    snprintf(m->address, sizeof(m->address), "%s", addr);
    info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    if (info != NULL) {
        char *colon = strrchr(m->address, ':');
        snprintf(colon + 1, sizeof(m->address) - (size_t)(colon + 1 - m->address), "%u",
                 (unsigned)info->port);
    }
    gm_notice("event=metrics-listening address=%s path=/metrics", m->address);
    *out = m;
    return 0;
}

void gm_metrics_stop(struct gm_metrics *m)
{
    if (m == NULL)
        return;
    MHD_stop_daemon(m->d);
    pthread_mutex_destroy(&m->mu);
    free(m->links);
    free(m);
}

const char *gm_metrics_address(const struct gm_metrics *m)
{
    return m->address;
}

/* --- publishing ------------------------------------------------------------------------- */

void gm_metrics_set_cluster(struct gm_metrics *m, const struct gm_metrics_cluster *c)
{
    pthread_mutex_lock(&m->mu);
    m->cluster = *c;
    m->have_cluster = 1;
    pthread_mutex_unlock(&m->mu);
}

int gm_metrics_set_links(struct gm_metrics *m, const struct gm_metrics_link *links, size_t n)
{
    struct gm_metrics_link *copy = NULL, *old;

    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, links, n * sizeof(*copy));
    }
    pthread_mutex_lock(&m->mu);
    old = m->links;
    m->links = copy;
    m->nlinks = n;
    pthread_mutex_unlock(&m->mu);
    free(old);
    return 0;
}

void gm_metrics_refused(struct gm_metrics *m, const char *what, const char *reason)
{
    struct refusal *r = NULL;

    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->nrefusals && r == NULL; i++)
        if (strcmp(m->refusals[i].what, what) == 0 && strcmp(m->refusals[i].reason, reason) == 0)
            r = &m->refusals[i];
    if (r == NULL && m->nrefusals >= GM_METRICS_REASONS_MAX - 1) {
        /* all but one slot taken: the last is the catch-all {what="any", reason="other"} */
        r = &m->refusals[GM_METRICS_REASONS_MAX - 1];
        snprintf(r->what, sizeof(r->what), "any");
        snprintf(r->reason, sizeof(r->reason), "other");
        m->nrefusals = GM_METRICS_REASONS_MAX;
    } else if (r == NULL) {
        r = &m->refusals[m->nrefusals++];
        snprintf(r->what, sizeof(r->what), "%s", what);
        snprintf(r->reason, sizeof(r->reason), "%s", reason);
    }
    r->n++;
    pthread_mutex_unlock(&m->mu);
}

void gm_metrics_join_accepted(struct gm_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->joins_accepted++;
    pthread_mutex_unlock(&m->mu);
}

const char *gm_metrics_reason(int err)
{
    switch (err) {
    case GM_ERR_TOKEN:
        return "token";
    case GM_ERR_AUTH:
        return "auth";
    case GM_ERR_PROTO:
        return "protocol";
    case GM_ERR_MISMATCH:
        return "mismatch";
    case -EACCES:
    case -EPERM:
        return "denied";
    case -EBUSY:
    case -EAGAIN:
        return "rate-limit";
    case -ETIMEDOUT:
        return "timeout";
    case -EEXIST:
        return "duplicate";
    default:
        return "other";
    }
}

void gm_metrics_job_update(struct gm_metrics *m, const struct gm_metrics_job *j)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->job = *j;
    m->job.id[sizeof(m->job.id) - 1] = '\0';
    m->job.name[sizeof(m->job.name) - 1] = '\0';
    m->have_job = 1;
    pthread_mutex_unlock(&m->mu);
}

void gm_metrics_job_ranks(struct gm_metrics *m, const char *job_id,
                          const struct gm_metrics_rank *ranks, size_t n)
{
    if (m == NULL)
        return;
    n = n < GM_METRICS_RANKS_MAX ? n : GM_METRICS_RANKS_MAX;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        m->ranks[i] = ranks[i];
        m->ranks[i].node[sizeof(m->ranks[i].node) - 1] = '\0';
    }
    m->nranks = n;
    snprintf(m->ranks_id, sizeof(m->ranks_id), "%s", job_id);
    pthread_mutex_unlock(&m->mu);
}

void gm_metrics_job_clear(struct gm_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->have_job = 0;
    m->nranks = 0;
    pthread_mutex_unlock(&m->mu);
}

void gm_metrics_job_finish(struct gm_metrics *m, const struct gm_metrics_job_final *f)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->have_job = 0;
    m->nranks = 0;
    m->last = *f;
    m->last.id[sizeof(m->last.id) - 1] = '\0';
    m->last.name[sizeof(m->last.name) - 1] = '\0';
    m->have_last = 1;
    pthread_mutex_unlock(&m->mu);
}
