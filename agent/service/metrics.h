/*
 * agent/service/metrics.h - the agent's Prometheus endpoint: `GET /metrics` on the configured
 * [metrics] listen address (text exposition format 0.0.4), nothing else.
 *
 * Threads.  The HTTP side is libmicrohttpd (Debian's libmicrohttpd-dev) with its own polling
 * thread, not a libuv responder on the loop: a scraper that sends garbage, trickles bytes or
 * holds connections open then costs that thread (bounded: 16 connections, 8 per address,
 * 5 s to send a request, 16 KiB per connection) and never the loop, and we parse no HTTP
 * ourselves.  The loop and the trainer publish numbers into this struct under its mutex;
 * the HTTP thread renders the text from them under the same mutex.  Nobody waits on the
 * other for longer than a copy.
 *
 * Who calls what:
 *   loop thread     gm_metrics_start / gm_metrics_stop (joins the HTTP thread),
 *                   gm_metrics_set_cluster, gm_metrics_set_links (every tick),
 *                   gm_metrics_refused (each refusal), gm_metrics_join_accepted
 *   any thread      gm_metrics_job_update / _ranks / _clear / _finish (the job runtime; the
 *                   trainer thread may call it directly after each step)
 *   tests           gm_metrics_render
 *
 * Series (names, labels and units in gradmesh.conf(5), "METRICS"):
 *   gradmesh_build_info{version,commit,cuda,proto}, gradmesh_up{cluster,node}, gradmesh_members,
 * gradmesh_members_up, gradmesh_joins_total{result}, gradmesh_refused_total{what,reason},
 *   gradmesh_token_uses_total, gradmesh_checkpoint_age_seconds, gradmesh_term,
 *   gradmesh_disk_full (1 while the last checkpoint failed for want of space),
 *   gradmesh_disk_full_total (checkpoints, own or replicas, not stored for want of space),
 *   gradmesh_link_info{peer,class,codec,address}, gradmesh_link_up{peer,class},
 *   gradmesh_link_{sent,received}_bytes_total{peer,class}, gradmesh_link_rtt_seconds,
 *   gradmesh_link_throughput_bits_per_second{peer,class,direction},
 *   gradmesh_link_tcp_retransmits_total{peer,class},
 *   gradmesh_job_step{job_id,job_name}, gradmesh_job_epoch,
 *   gradmesh_job_step_seconds{job_id,job_name,phase}, gradmesh_job_samples_per_second,
 *   gradmesh_job_loss, gradmesh_job_accuracy_percent, gradmesh_job_bytes_per_step,
 *   gradmesh_job_compression_ratio; on the job's coordinator, each rank's part of the global
 *   batch and its speed: gradmesh_job_rank_share_samples{job_id,job_name,rank,node},
 *   gradmesh_job_rank_samples_per_second; after a job ends, until the next one ends:
 *   gradmesh_job_last_{steps,accuracy_percent,loss,wall_seconds}{job_id,job_name}.
 * A value that is not known yet (RTT before the first pong, throughput before a probe,
 * checkpoint age before a checkpoint, term before the election) is left out, not exported
 * as 0.
 */
#ifndef GM_AGENT_SERVICE_METRICS_H
#define GM_AGENT_SERVICE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/identity.h"

#define GM_METRICS_CONN_MAX 16    /* connections served at once */
#define GM_METRICS_CONN_PER_IP 8  /* of them from one address */
#define GM_METRICS_TIMEOUT_S 5    /* idle connection closed after */
#define GM_METRICS_REASONS_MAX 32 /* distinct {what, reason} refusal counters */

struct gm_metrics;

struct gm_metrics_cluster {
    char cluster[GM_ID_NAME_MAX + 1];
    char node[GM_ID_NAME_MAX + 1];
    unsigned members, members_up;
    uint64_t token_uses;
    double checkpoint_age_s;  /* < 0: no checkpoint yet */
    int64_t term;             /* < 0: no election yet */
    bool disk_full;           /* the last checkpoint failed for want of space */
    uint64_t disk_full_total; /* checkpoints (own, replicas) not stored for want of space */
};

struct gm_metrics_link {
    char peer[GM_ID_NAME_MAX + 1];
    char address[GM_ADDR_MAX];
    const char *cls;   /* "lan" | "tunnel" | "wan" | "unknown"; static string */
    const char *codec; /* static string; "none" until a job picks one */
    int up;
    uint64_t bytes_sent, bytes_received; /* TLS payload through the current link */
    double rtt_s;                        /* < 0: unknown */
    double bps_out, bps_in;              /* measured throughput; < 0: unknown */
    int64_t tcp_retransmits;             /* TCP_INFO tcpi_total_retrans; < 0: unknown */
};

#define GM_METRICS_JOB_ID_MAX 40

/* What a job reports after each step (or every few); names as in gradmesh.conf(5).  Every
 * job series is labelled job_id and job_name (never "job": Prometheus's own label). */
struct gm_metrics_job {
    char id[GM_METRICS_JOB_ID_MAX];
    char name[64];
    int64_t step;
    int epoch;
    double compute_s, collective_s, optimizer_s; /* the last step's split */
    double samples_per_s;
    double loss;
    double accuracy_pct;      /* < 0: not evaluated yet */
    double bytes_per_step;    /* sent by this rank; < 0: unknown */
    double compression_ratio; /* fp32 bytes / bytes on the wire; < 0: unknown */
};

/* Listens on addr ("ip:port", port 0: the kernel picks) and starts the HTTP thread.
 * -EINVAL for a bad address, -EADDRINUSE & co. from bind (logged once). */
GM_MUST_CHECK int gm_metrics_start(const char *addr, struct gm_metrics **out);
/* Stops the HTTP thread, closes its connections and frees; NULL-safe. */
void gm_metrics_stop(struct gm_metrics *m);
/* The bound address, "ip:port" (the real port when 0 was asked for). */
const char *gm_metrics_address(const struct gm_metrics *m);

void gm_metrics_set_cluster(struct gm_metrics *m, const struct gm_metrics_cluster *c);
/* Replaces the link list with a copy of links[0..n). -ENOMEM keeps the old one. */
GM_MUST_CHECK int gm_metrics_set_links(struct gm_metrics *m, const struct gm_metrics_link *links,
                                       size_t n);
/* Counts a refused connection or join: what = "link" | "join"; reason from
 * gm_metrics_reason(err).  Past GM_METRICS_REASONS_MAX - 1 pairs, new ones count as
 * {what="any", reason="other"}. */
void gm_metrics_refused(struct gm_metrics *m, const char *what, const char *reason);
void gm_metrics_join_accepted(struct gm_metrics *m);
/* A short label for an error code ("token", "auth", "protocol", "denied", "rate-limit",
 * "timeout", "other"). */
const char *gm_metrics_reason(int err);

/* A finished (or stopped) job's final values, exported as gradmesh_job_last_* until the next
 * job ends, so that a scrape after the end still sees them. */
struct gm_metrics_job_final {
    char id[GM_METRICS_JOB_ID_MAX];
    char name[64];
    int64_t steps;
    double accuracy_pct; /* < 0: not evaluated on this node */
    double loss;         /* test loss; < 0: not evaluated on this node */
    double wall_s;
};

void gm_metrics_job_update(struct gm_metrics *m, const struct gm_metrics_job *j);

#define GM_METRICS_RANKS_MAX 64 /* ranks listed (train/job.h GM_JOB_SHARES_MAX) */

/* One rank of the running job's group, as its coordinator sees it ([job] shares). */
struct gm_metrics_rank {
    char node[GM_ID_NAME_MAX + 1];
    int samples;          /* its part of the global batch */
    double samples_per_s; /* samples per second of its busy time; < 0: not measured */
};

/* The running job's group (coordinator): replaces the list with ranks[0..n) (n past
 * GM_METRICS_RANKS_MAX: the first ones) of job job_id; exported while that job runs, as
 * gradmesh_job_rank_share_samples and gradmesh_job_rank_samples_per_second
 * {job_id,job_name,rank,node}.  Cleared with the job's series. */
void gm_metrics_job_ranks(struct gm_metrics *m, const char *job_id,
                          const struct gm_metrics_rank *ranks, size_t n);
/* The running job's series go away (the job ended or failed) */
void gm_metrics_job_clear(struct gm_metrics *m);
/* The running job's series go away, and f replaces the last finished job's values. */
void gm_metrics_job_finish(struct gm_metrics *m, const struct gm_metrics_job_final *f);

/* The exposition text as served (malloc'd, NUL-terminated; *len without the NUL).
 * -ENOMEM. */
GM_MUST_CHECK int gm_metrics_render(struct gm_metrics *m, char **out, size_t *len);

#endif
