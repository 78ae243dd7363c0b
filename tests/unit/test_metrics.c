/*
 * tests/unit/test_metrics.c - the Prometheus room: what is published is what GET /metrics
 * serves (over a real socket), unknown values are left out, labels are escaped, anything
 * but GET /metrics is refused, a garbage request is answered 400 or closed without hurting
 * the next scrape, connections over the limit are refused while publishing goes on, and
 * the contracts of start/stop.  (tests/integration/prometheus.sh scrapes a real agent with
 * Debian's prometheus.)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/service/metrics.h"
#include "agent/service/version.h"
#include "common/err.h"
#include "common/test.h"
#include "common/time.h"

GM_TEST_DEFINE_STATE;

static int dial(const char *addr)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    const char *colon = strrchr(addr, ':');
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Sends req on a new connection, reads until EOF or 3 s; the response in buf. */
static size_t http(const char *addr, const char *req, char *buf, size_t cap)
{
    int fd = dial(addr);
    size_t off = 0;
    uint64_t deadline = gm_time_mono_ns() + 3000000000ull;

    buf[0] = '\0';
    if (fd < 0)
        return 0;
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        return 0;
    }
    while (off + 1 < cap && gm_time_mono_ns() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t r;
        if (poll(&p, 1, 100) <= 0)
            continue;
        r = read(fd, buf + off, cap - 1 - off);
        if (r <= 0)
            break;
        off += (size_t)r;
    }
    buf[off] = '\0';
    close(fd);
    return off;
}

static struct gm_metrics_link link_of(const char *peer, int up, double rtt)
{
    struct gm_metrics_link l;

    memset(&l, 0, sizeof(l));
    snprintf(l.peer, sizeof(l.peer), "%s", peer);
    snprintf(l.address, sizeof(l.address), "10.0.0.2:7450");
    l.cls = "tunnel";
    l.codec = "none";
    l.up = up;
    l.bytes_sent = 1234;
    l.bytes_received = 99;
    l.rtt_s = rtt;
    l.bps_out = 1e8;
    l.bps_in = -1;
    l.tcp_retransmits = 7;
    return l;
}

static void test_serve(void)
{
    struct gm_metrics *m = NULL;
    struct gm_metrics_cluster c = {
        .members = 2, .members_up = 1, .token_uses = 3, .checkpoint_age_s = -1, .term = -1};
    struct gm_metrics_link links[2];
    struct gm_metrics_job j = {.id = "j-1234",
                               .name = "fm\"nist",
                               .step = 42,
                               .epoch = 1,
                               .compute_s = 0.01,
                               .collective_s = 0.002,
                               .optimizer_s = 0.001,
                               .samples_per_s = 6400,
                               .loss = 0.5,
                               .accuracy_pct = -1,
                               .bytes_per_step = 1000,
                               .compression_ratio = 2};
    static char buf[65536];

    GM_CHECK_OK(gm_metrics_start("127.0.0.1:0", &m));
    if (m == NULL)
        return;
    GM_CHECK(strcmp(gm_metrics_address(m), "127.0.0.1:0") != 0);
    snprintf(c.cluster, sizeof(c.cluster), "lab");
    snprintf(c.node, sizeof(c.node), "n1");
    gm_metrics_set_cluster(m, &c);
    links[0] = link_of("n2", 1, 0.0015);
    links[1] = link_of("n3", 0, -1);
    GM_CHECK_OK(gm_metrics_set_links(m, links, 2));
    gm_metrics_refused(m, "join", gm_metrics_reason(GM_ERR_TOKEN));
    gm_metrics_refused(m, "join", gm_metrics_reason(GM_ERR_TOKEN));
    gm_metrics_refused(m, "link", gm_metrics_reason(GM_ERR_AUTH));
    gm_metrics_join_accepted(m);
    gm_metrics_job_update(m, &j);

    http(gm_metrics_address(m), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         buf, sizeof(buf));
    GM_CHECK(strncmp(buf, "HTTP/1.1 200", 12) == 0);
    GM_CHECK(strstr(buf, "Content-Type: text/plain; version=0.0.4") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_up{cluster=\"lab\",node=\"n1\"} 1\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_members_up 1\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_joins_total{result=\"accepted\"} 1\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_joins_total{result=\"refused\"} 2\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_refused_total{what=\"join\",reason=\"token\"} 2\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_refused_total{what=\"link\",reason=\"auth\"} 1\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_link_sent_bytes_total{peer=\"n2\",class=\"tunnel\"} 1234\n") !=
             NULL);
    GM_CHECK(strstr(buf, "gradmesh_link_rtt_seconds{peer=\"n2\",class=\"tunnel\"} 0.001500\n") !=
             NULL);
    GM_CHECK(strstr(buf, "gradmesh_link_rtt_seconds{peer=\"n3\"") == NULL); /* unknown: left out */
    GM_CHECK(strstr(buf, "direction=\"out\"} 100000000\n") != NULL);
    GM_CHECK(strstr(buf, "direction=\"in\"") == NULL);
    GM_CHECK(strstr(buf, "gradmesh_link_tcp_retransmits_total{peer=\"n2\",class=\"tunnel\"} 7\n") !=
             NULL);
    GM_CHECK(strstr(buf, "gradmesh_link_up{peer=\"n3\",class=\"tunnel\"} 0\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_checkpoint_age_seconds") == NULL);
    /* job_id and job_name, never "job" (Prometheus's own label); the name escaped */
    GM_CHECK(strstr(buf, "gradmesh_job_step{job_id=\"j-1234\",job_name=\"fm\\\"nist\"} 42\n") !=
             NULL);
    GM_CHECK(strstr(buf, "{job=") == NULL && strstr(buf, ",job=") == NULL);
    GM_CHECK(strstr(buf, "phase=\"collective\"} 0.002000\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_accuracy_percent") == NULL);
    GM_CHECK(strstr(buf,
                    "gradmesh_job_compression_ratio{job_id=\"j-1234\",job_name=\"fm\\\"nist\"} "
                    "2.0000\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_") == NULL); /* no job has ended yet */
    GM_CHECK(strstr(buf, "gradmesh_job_rank_") == NULL);  /* no group published */

    /* the coordinator's group: each rank's share and speed (left out where not measured); a
     * list of another job is not this one's */
    {
        const struct gm_metrics_rank rk[2] = {{"alpha", 100, 14500.25}, {"be\"ta", 28, -1}};
        gm_metrics_job_ranks(m, "j-other", rk, 2);
        http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
        GM_CHECK(strstr(buf, "gradmesh_job_rank_") == NULL);
        gm_metrics_job_ranks(m, "j-1234", rk, 2);
    }
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "gradmesh_job_rank_share_samples{job_id=\"j-1234\",job_name=\"fm\\\"nist\","
                         "rank=\"0\",node=\"alpha\"} 100\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_rank_share_samples{job_id=\"j-1234\",job_name=\"fm\\\"nist\","
                         "rank=\"1\",node=\"be\\\"ta\"} 28\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_rank_samples_per_second{job_id=\"j-1234\",job_name=\"fm\\\"nist\","
                         "rank=\"0\",node=\"alpha\"} 14500.250\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_rank_samples_per_second{job_id=\"j-1234\",job_name=\"fm\\\"nist\","
                         "rank=\"1\"") == NULL);

    gm_metrics_job_clear(m);
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "gradmesh_job_step") == NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_rank_") == NULL);
    gm_metrics_job_update(m, &j); /* the same job again: the list went with the clear */
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "gradmesh_job_rank_") == NULL);
    gm_metrics_job_clear(m);
    GM_CHECK(strstr(buf, "gradmesh_up{") != NULL);

    /* a job that ends: its running series go, its final values stay until the next one ends */
    gm_metrics_job_update(m, &j);
    {
        struct gm_metrics_job_final f = {.id = "j-1234",
                                         .name = "fm",
                                         .steps = 3744,
                                         .accuracy_pct = 84.91,
                                         .loss = 0.4321,
                                         .wall_s = 61.5};
        gm_metrics_job_finish(m, &f);
    }
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "gradmesh_job_step{") == NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_steps{job_id=\"j-1234\",job_name=\"fm\"} 3744\n") !=
             NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_accuracy_percent{job_id=\"j-1234\",job_name=\"fm\"} "
                         "84.9100\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_loss{job_id=\"j-1234\",job_name=\"fm\"} 0.4321\n") !=
             NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_wall_seconds{job_id=\"j-1234\",job_name=\"fm\"} "
                         "61.500\n") != NULL);
    gm_metrics_job_update(m, &j); /* the next job runs: the last one's values stay */
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "gradmesh_job_last_steps{job_id=\"j-1234\"") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_step{") != NULL);
    {
        struct gm_metrics_job_final f = {
            .id = "j-5678", .name = "b", .steps = 7, .accuracy_pct = -1, .loss = -1, .wall_s = 1};
        gm_metrics_job_finish(m, &f); /* ... until it ends: replaced, no accuracy on this rank */
    }
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, "j-1234") == NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_steps{job_id=\"j-5678\",job_name=\"b\"} 7\n") != NULL);
    GM_CHECK(strstr(buf, "gradmesh_job_last_accuracy_percent") == NULL);

    http(gm_metrics_address(m), "GET / HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strncmp(buf, "HTTP/1.0 404", 12) == 0 || strncmp(buf, "HTTP/1.1 404", 12) == 0);
    http(gm_metrics_address(m), "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", buf,
         sizeof(buf));
    GM_CHECK(strstr(buf, " 405 ") != NULL);
    /* garbage: answered with an error or closed; the next scrape still works */
    http(gm_metrics_address(m), "\x16\x03\x01\x02\x00garbage\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, " 200 ") == NULL);
    http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    GM_CHECK(strstr(buf, " 200 ") != NULL);
    gm_metrics_stop(m);
}

static void test_held_connections(void)
{
    struct gm_metrics *m = NULL;
    struct gm_metrics_link l = link_of("n2", 1, 0.001);
    static char buf[65536];
    int fds[GM_METRICS_CONN_MAX + 4], n = 0;
    uint64_t t0;

    GM_CHECK_OK(gm_metrics_start("127.0.0.1:0", &m));
    if (m == NULL)
        return;
    /* more idle connections than the per-address limit, a partial request on each */
    for (int i = 0; i < GM_METRICS_CONN_MAX + 4; i++) {
        fds[n] = dial(gm_metrics_address(m));
        if (fds[n] >= 0 && write(fds[n], "GET /met", 8) == 8)
            n++;
    }
    GM_CHECK(n >= GM_METRICS_CONN_PER_IP);
    /* publishing never waits on the HTTP side */
    t0 = gm_time_mono_ns();
    for (int i = 0; i < 1000; i++)
        GM_CHECK_OK(gm_metrics_set_links(m, &l, 1));
    GM_CHECK(gm_time_mono_ns() - t0 < 500000000ull);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    /* with the holders gone, a scrape is served again (MHD notices the closes) */
    for (int tries = 0; tries < 50; tries++) {
        http(gm_metrics_address(m), "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
        if (strstr(buf, " 200 ") != NULL)
            break;
        usleep(100000);
    }
    GM_CHECK(strstr(buf, "gradmesh_link_up{peer=\"n2\",class=\"tunnel\"} 1") != NULL);
    gm_metrics_stop(m);
}

static void test_contracts(void)
{
    struct gm_metrics *m = (struct gm_metrics *)1, *m2 = NULL;

    GM_CHECK_ERR(gm_metrics_start("nonsense", &m), -EINVAL);
    GM_CHECK(m == NULL);
    GM_CHECK_OK(gm_metrics_start("127.0.0.1:0", &m));
    if (m != NULL) {
        GM_CHECK(gm_metrics_start(gm_metrics_address(m), &m2) < 0); /* port taken */
        GM_CHECK(m2 == NULL);
    }
    if (m != NULL) { /* more distinct reasons than slots: the rest land in one catch-all */
        char *text = NULL, reason[16];
        size_t len = 0, lines = 0;
        for (int i = 0; i < 2 * GM_METRICS_REASONS_MAX; i++) {
            snprintf(reason, sizeof(reason), "r%d", i);
            gm_metrics_refused(m, "link", reason);
        }
        GM_CHECK_OK(gm_metrics_render(m, &text, &len));
        { /* what this binary is, with the values `gradmesh version` prints */
            char want[256];
            snprintf(
                want, sizeof(want),
                "gradmesh_build_info{version=\"%s\",commit=\"%s\",cuda=\"%d\",proto=\"%d\"} 1\n",
                gm_version_string(), gm_version_commit(), gm_version_cuda(), GM_PROTO_VERSION);
            GM_CHECK(text != NULL && strstr(text, want) != NULL);
        }
        for (const char *p = text;
             p != NULL && (p = strstr(p, "\ngradmesh_refused_total{")) != NULL; p++)
            lines++;
        GM_CHECK_EQ(lines, GM_METRICS_REASONS_MAX);
        GM_CHECK(text != NULL &&
                 strstr(text, "gradmesh_refused_total{what=\"any\",reason=\"other\"} 33\n") !=
                     NULL);
        free(text);
    }
    gm_metrics_stop(m);
    gm_metrics_stop(NULL);
    GM_CHECK_STREQ(gm_metrics_reason(-ETIMEDOUT), "timeout");
    GM_CHECK_STREQ(gm_metrics_reason(-12345), "other");
}

int main(void)
{
    GM_TEST_RUN(test_serve);
    GM_TEST_RUN(test_held_connections);
    GM_TEST_RUN(test_contracts);
    return gm_test_finish("test_metrics");
}
