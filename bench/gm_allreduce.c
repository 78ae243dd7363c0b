/*
 * bench/gm_allreduce.c - the gradmesh side of bench/allreduce.sh: the
 * collective the agents train with (train/comm/collective.h, RING, fp32, SUM)
 * over the agent transport (agent/jobs/xport.h) on real TLS links (agent/net/link.h:
 * libuv TCP, TLS 1.3 with mutual authentication), on loopback.
 *
 * Setup (what agent/jobs/job.c and agent/jobs/rank.c do for a job group, minus the
 * control plane): the parent makes a cluster CA and one certificate per rank
 * (node names r0..rN-1) and one listening socket per rank on 127.0.0.1, then
 * forks N processes, one per rank, each with its own uv loop on one thread.
 * Rank r dials every rank below it; the others dial it; a link's peer is the
 * rank it dialled, or the node name in the peer's certificate.  Each rank
 * makes one gm_xport (generation 1) and attaches each link when its handshake
 * is done (TRAIN frames that arrive before the collective starts wait in the
 * xport); once all N-1 links are up it makes its gm_coll with chunk_bytes =
 * GM_XPORT_CHUNK, as agent/jobs/rank.c does.  No listener is ever dialled before
 * it exists (all are made before the fork), so nothing waits on readiness.
 *
 * Timing, per size, like bench/mpi_allreduce.c: one warm-up all-reduce of
 * rank+1 everywhere, checked against N(N+1)/2 and then zeroed; one calibration
 * call; the ranks agree on an iteration count from their mean calibration time
 * (an all-reduce of a time vector: bitwise identical on every rank, so every
 * rank computes the same count) for about TARGET_S seconds, bounded to
 * [MIN_ITERS, MAX_ITERS] (GM_ALLREDUCE_ITERS=I fixes it instead, for
 * profiling a fixed amount of work); a gm_coll barrier; that many all-reduces back to back
 * (each started from the previous one's callback); the slowest rank's time.
 * Rank 0 prints, per size:
 *   impl=gradmesh ranks=N bytes=B iters=I lat_ms=... algbw_GBps=... busbw_GBps=... cpu_ms=...
 * cpu_ms: the CPU time of a rank's process per call over the timed calls,
 * averaged over the ranks (CLOCK_PROCESS_CPUTIME_ID).
 *
 * usage: gm_allreduce N [SIZE_BYTES...]      default 0.25, 4, 64, 256 MiB
 * GM_TLS_OPENSSL_RECORDS=1 keeps OpenSSL's record layer after the handshake
 * (crypto/tls.h openssl_records), to compare it with the engine's own.
 * Exit 0 when every rank finished with correct sums, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <uv.h>

#include "agent/net/link.h"
#include "agent/jobs/xport.h"
#include "common/time.h"
#include "crypto/identity.h"
#include "crypto/tls.h"
#include "train/comm/collective.h"

#define MAXW 16
#define MAXSIZES 16
#define TARGET_S 2.0
#define MIN_ITERS 3
#define MAX_ITERS 200

enum phase { PH_WARM, PH_CAL, PH_AGREE, PH_BARRIER, PH_RUN, PH_REPORT, PH_BYE };

struct peer {
    struct bench *b;
    int rank; /* -1 until known (accepted links: from the certificate) */
    struct gm_link *l;
};

struct bench {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_timer_t drain; /* after the last op: close links once their queues are empty */
    int rank, world, nup, nclosed, failed;
    struct gm_tls_ctx *tls;
    struct peer peers[MAXW]; /* by link, not by rank */
    struct gm_xport *x;
    struct gm_coll *c;
    size_t sizes[MAXSIZES];
    int nsizes, cur, iters, it;
    enum phase ph;
    float *buf;
    size_t n;
    float tv[2 * MAXW]; /* rank r's wall seconds at [r], CPU seconds at [MAXW + r] */
    uint64_t t0;
    double c0; /* CPU seconds at the start of the timed calls */
    double cal_s;
};

static void fail(struct bench *b, const char *what, int err)
{
    fprintf(stderr, "gm_allreduce rank %d: %s: %s\n", b->rank, what, gm_strerror(err));
    fflush(stderr);
    _exit(1);
}

/* --- the benchmark's state machine (loop thread) ------------------------- */

static void step(struct bench *b);

static void op_done(struct gm_coll *c, int status, void *arg)
{
    struct bench *b = arg;

    (void)c;
    if (status != 0)
        fail(b, "collective", status);
    step(b);
}

static void start_allreduce(struct bench *b, float *buf, size_t n, enum gm_coll_algo algo)
{
    struct gm_coll_opts o = {.algo = algo, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM};
    int err = gm_coll_allreduce_start(b->c, buf, n, &o, op_done, b);

    if (err < 0)
        fail(b, "gm_coll_allreduce_start", err);
}

static double cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The time vector: every rank's wall and CPU seconds, summed (others are 0)
 * with DIRECT, so every rank holds the same bits afterwards. */
static void share_time(struct bench *b, double s, double cpu)
{
    memset(b->tv, 0, sizeof(b->tv));
    b->tv[b->rank] = (float)s;
    b->tv[MAXW + b->rank] = (float)cpu;
    start_allreduce(b, b->tv, 2 * MAXW, GM_COLL_DIRECT);
}

static void begin_size(struct bench *b)
{
    size_t i;

    free(b->buf);
    b->n = b->sizes[b->cur] / sizeof(float);
    b->buf = malloc(b->n * sizeof(float));
    if (b->buf == NULL)
        fail(b, "malloc", -ENOMEM);
    for (i = 0; i < b->n; i++)
        b->buf[i] = (float)(b->rank + 1);
    b->ph = PH_WARM;
    start_allreduce(b, b->buf, b->n, GM_COLL_RING);
}

static void close_links(uv_timer_t *t)
{
    struct bench *b = t->data;
    int i;

    for (i = 0; i < b->world - 1; i++)
        if (b->peers[i].l != NULL && gm_link_bulk_queued(b->peers[i].l) > 0)
            return; /* our last messages are still on their way to the socket */
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    for (i = 0; i < b->world - 1; i++)
        if (b->peers[i].l != NULL)
            gm_link_close(b->peers[i].l, 0);
}

static void step(struct bench *b)
{
    double tmax, cpu;
    int r;

    switch (b->ph) {
    case PH_WARM: {
        float want = (float)b->world * (float)(b->world + 1) / 2.0f;
        size_t i;
        for (i = 0; i < b->n; i++)
            if (b->buf[i] != want) {
                fprintf(stderr, "gm_allreduce rank %d: WRONG_SUM at %zu: %g, want %g\n", b->rank, i,
                        (double)b->buf[i], (double)want);
                _exit(1);
            }
        memset(b->buf, 0, b->n * sizeof(float)); /* timed calls sum zeros: no overflow */
        b->ph = PH_CAL;
        b->t0 = gm_time_mono_ns();
        start_allreduce(b, b->buf, b->n, GM_COLL_RING);
        return;
    }
    case PH_CAL:
        b->ph = PH_AGREE;
        share_time(b, gm_time_seconds_since(b->t0), 0);
        return;
    case PH_AGREE: {
        double mean = 0, want;
        int err;
        for (r = 0; r < b->world; r++)
            mean += b->tv[r];
        mean /= b->world;
        want = TARGET_S / (mean > 1e-9 ? mean : 1e-9);
        b->iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (int)want;
        if (getenv("GM_ALLREDUCE_ITERS") != NULL) /* fixed work, for counting instructions */
            b->iters =
                atoi(getenv("GM_ALLREDUCE_ITERS")) > 0 ? atoi(getenv("GM_ALLREDUCE_ITERS")) : 1;
        b->ph = PH_BARRIER;
        err = gm_coll_barrier_start(b->c, 0, op_done, b);
        if (err < 0)
            fail(b, "gm_coll_barrier_start", err);
        return;
    }
    case PH_BARRIER:
        b->ph = PH_RUN;
        b->it = 0;
        b->t0 = gm_time_mono_ns();
        b->c0 = cpu_now();
        start_allreduce(b, b->buf, b->n, GM_COLL_RING);
        return;
    case PH_RUN:
        if (++b->it < b->iters) {
            start_allreduce(b, b->buf, b->n, GM_COLL_RING);
            return;
        }
        b->ph = PH_REPORT;
        share_time(b, gm_time_seconds_since(b->t0), cpu_now() - b->c0);
        return;
    case PH_REPORT:
        for (tmax = 0, cpu = 0, r = 0; r < b->world; r++) {
            tmax = b->tv[r] > tmax ? b->tv[r] : tmax;
            cpu += b->tv[MAXW + r];
        }
        if (b->rank == 0) {
            size_t bytes = b->sizes[b->cur];
            double lat = tmax / b->iters, alg = (double)bytes / lat / 1e9;
            printf("impl=gradmesh ranks=%d bytes=%zu iters=%d lat_ms=%.3f algbw_GBps=%.4f "
                   "busbw_GBps=%.4f cpu_ms=%.3f\n",
                   b->world, bytes, b->iters, lat * 1e3, alg, alg * 2.0 * (b->world - 1) / b->world,
                   cpu / b->world / b->iters * 1e3);
            fflush(stdout);
        }
        if (++b->cur < b->nsizes) {
            begin_size(b);
            return;
        }
        /* A last barrier: once it completes here, every rank has received
         * everything it will ever need from us. */
        b->ph = PH_BYE;
        if (gm_coll_barrier_start(b->c, 1, op_done, b) < 0)
            fail(b, "gm_coll_barrier_start", -EIO);
        return;
    case PH_BYE:
        uv_timer_init(&b->loop, &b->drain);
        b->drain.data = b;
        uv_timer_start(&b->drain, close_links, 0, 1);
        return;
    }
}

/* --- links ----------------------------------------------------------------- */

static int link_up(struct gm_link *l)
{
    struct peer *p = gm_link_data(l);
    struct bench *b = p->b;
    struct gm_coll_config cc = {.generation = 1, .chunk_bytes = GM_XPORT_CHUNK};

    if (p->rank < 0) {
        const char *node = gm_tls_peer_node(gm_link_tls(l));
        if (node[0] != 'r' || (p->rank = atoi(node + 1)) <= b->rank || p->rank >= b->world)
            return -EPROTO;
    }
    gm_xport_set_link(b->x, p->rank, l);
    if (++b->nup < b->world - 1)
        return 0;
    uv_close((uv_handle_t *)&b->listener, NULL);
    b->c = gm_coll_new(gm_xport_transport(b->x), &cc);
    if (b->c == NULL)
        fail(b, "gm_coll_new", -ENOMEM);
    begin_size(b);
    return 0;
}

static int link_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct peer *p = gm_link_data(l);

    if (h->type != GM_MSG_TRAIN)
        return 0;
    return gm_xport_on_frame(p->b->x, p->rank, h, payload);
}

static void link_closed(struct gm_link *l, int err)
{
    struct peer *p = gm_link_data(l);
    struct bench *b = p->b;

    if (b->ph != PH_BYE) {
        fprintf(stderr, "gm_allreduce rank %d: link to rank %d closed: %s (%s)\n", b->rank, p->rank,
                gm_strerror(err), gm_tls_reason(gm_link_tls(l)));
        b->failed = 1;
    }
    if (p->rank >= 0 && b->x != NULL)
        gm_xport_link_down(b->x, p->rank, err < 0 ? err : -ECONNRESET);
    p->l = NULL;
    if (++b->nclosed == b->world - 1 || b->failed) {
        if (b->failed)
            _exit(1);
        gm_coll_free(b->c);
        b->c = NULL;
        gm_xport_close(b->x);
        b->x = NULL;
    }
}

static const struct gm_link_ops link_ops = {
    .on_up = link_up, .on_frame = link_frame, .on_close = link_closed};

static struct peer *new_peer(struct bench *b, int rank, enum gm_tls_role role)
{
    struct gm_link_opts o = {.role = role};
    struct peer *p;
    int i, err;

    for (i = 0; i < b->world - 1 && b->peers[i].b != NULL; i++)
        ;
    if (i == b->world - 1)
        fail(b, "one link too many", -EPROTO);
    p = &b->peers[i];
    p->b = b;
    p->rank = rank;
    err = gm_link_new(&b->loop, b->tls, &o, &link_ops, p, &p->l);
    if (err < 0)
        fail(b, "gm_link_new", err);
    return p;
}

static void on_conn(uv_stream_t *srv, int status)
{
    struct bench *b = srv->data;
    struct peer *p;
    int err;

    if (status < 0)
        fail(b, "accept", status);
    p = new_peer(b, -1, GM_TLS_ROLE_SERVER);
    err = gm_link_accept(p->l, srv);
    if (err < 0)
        fail(b, "gm_link_accept", err);
}

static int run_rank(int rank, int world, struct gm_tls_ctx *tls, const int *lfd, const int *port,
                    const size_t *sizes, int nsizes)
{
    struct bench b;
    int j, err;

    memset(&b, 0, sizeof(b));
    b.rank = rank;
    b.world = world;
    b.tls = tls;
    b.nsizes = nsizes;
    memcpy(b.sizes, sizes, (size_t)nsizes * sizeof(size_t));
    uv_loop_init(&b.loop);
    if ((err = gm_xport_new(&b.loop, 1, rank, world, &b.x)) < 0)
        fail(&b, "gm_xport_new", err);
    uv_tcp_init(&b.loop, &b.listener);
    b.listener.data = &b;
    if ((err = uv_tcp_open(&b.listener, lfd[rank])) < 0 ||
        (err = uv_listen((uv_stream_t *)&b.listener, MAXW, on_conn)) < 0)
        fail(&b, "listen", err);
    for (j = 0; j < world; j++)
        if (j != rank)
            close(lfd[j]);
    for (j = 0; j < rank; j++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port[j]),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct peer *p = new_peer(&b, j, GM_TLS_ROLE_CLIENT);
        if ((err = gm_link_connect(p->l, (struct sockaddr *)&a)) < 0)
            fail(&b, "gm_link_connect", err);
    }
    if (world == 1)
        fail(&b, "needs 2 ranks or more", -EINVAL);
    uv_run(&b.loop, UV_RUN_DEFAULT);
    free(b.buf);
    return b.failed || b.ph != PH_BYE ? 1 : 0;
}

/* --- setup (parent) -------------------------------------------------------- */

static int listen_any(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, MAXW) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static int make_ctx(const struct gm_cert *ca, const struct gm_key *cakey, int rank,
                    struct gm_tls_ctx **out)
{
    struct gm_key *k = NULL;
    struct gm_cert *c = NULL;
    uint8_t pub[GM_ID_PUB_LEN];
    char name[16];
    struct gm_tls_config tc = {.cluster = "bench", .ca = ca};
    int err;

    snprintf(name, sizeof(name), "r%d", rank);
    if ((err = gm_id_key_generate(&k)) < 0 || (err = gm_id_key_public(k, pub)) < 0 ||
        (err = gm_id_cert_issue(ca, cakey, "bench", name, pub, 1, &c)) < 0)
        goto out;
    tc.cert = c;
    tc.key = k;
    tc.openssl_records = getenv("GM_TLS_OPENSSL_RECORDS") != NULL; /* the A/B of crypto/record.h */
    err = gm_tls_ctx_new(&tc, out);
out:
    gm_id_cert_free(c);
    gm_id_key_free(k);
    return err;
}

int main(int argc, char **argv)
{
    static const size_t defaults[] = {256u << 10, 4u << 20, 64u << 20, 256u << 20};
    size_t sizes[MAXSIZES];
    int world = argc > 1 ? atoi(argv[1]) : 2, nsizes = 0, r, st, rc = 0;
    int lfd[MAXW], port[MAXW];
    pid_t pid[MAXW];
    struct gm_key *cakey = NULL;
    struct gm_cert *ca = NULL;

    if (world < 2 || world > MAXW || argc - 2 > MAXSIZES) {
        fprintf(stderr, "usage: gm_allreduce N(2..%d) [SIZE_BYTES...]\n", MAXW);
        return 2;
    }
    for (r = 2; r < argc; r++)
        sizes[nsizes++] = (size_t)strtoull(argv[r], NULL, 0) / sizeof(float) * sizeof(float);
    if (nsizes == 0)
        for (; nsizes < 4; nsizes++)
            sizes[nsizes] = defaults[nsizes];
    if (sodium_init() < 0 || gm_id_key_generate(&cakey) < 0 ||
        gm_id_ca_create("bench", cakey, 1, &ca) < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    for (r = 0; r < world; r++)
        if ((lfd[r] = listen_any(&port[r])) < 0) {
            perror("listen");
            return 1;
        }
    for (r = 0; r < world; r++) {
        struct gm_tls_ctx *tls = NULL;
        int err = make_ctx(ca, cakey, r, &tls);
        if (err < 0) {
            fprintf(stderr, "gm_allreduce: identity for rank %d: %s\n", r, gm_strerror(err));
            return 1;
        }
        fflush(stdout);
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(run_rank(r, world, tls, lfd, port, sizes, nsizes));
        gm_tls_ctx_free(tls);
        if (pid[r] < 0) {
            perror("fork");
            return 1;
        }
    }
    for (r = 0; r < world; r++) {
        close(lfd[r]);
        if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    }
    gm_id_cert_free(ca);
    gm_id_key_free(cakey);
    return rc;
}
