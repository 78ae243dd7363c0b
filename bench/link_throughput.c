/*
 * bench/link_throughput.c - bulk throughput of a gradmesh TLS link against
 * plain TCP on loopback, measured in the same run (issue 3, "Done when" 3).
 *
 * Each trial moves BYTES (default 1 GiB) from one sender process to one
 * receiver process, each pinned to its own core:
 *   tcp: blocking write()/read() of 1 MiB buffers (the plain-TCP ceiling);
 *   tls: agent/net/link.h end to end: libuv TCP, TLS 1.3 (AES-128-GCM, mutual
 *        auth with an in-memory cluster CA), 256 KiB BULK frames.
 * The clock runs from the sender's first byte to the receiver's one-byte
 * acknowledgement of the last.  Trials alternate tcp/tls; the medians print:
 *   tcp_GBps=... tls_GBps=... ratio=...
 * Each side also measures its own CPU time (CLOCK_PROCESS_CPUTIME_ID); the
 * busier side bounds what one core each could do, a figure that holds on a
 * machine shared with other work:  cpu_ratio = cpu-bound tls / cpu-bound tcp.
 *
 * usage: link_throughput [--rx-netns NS --tx-netns NS --addr IPV4] [BYTES] [TRIALS] [SOCKBUF]
 *
 * Without options both ends meet on 127.0.0.1.  With them (bench/link_veth.sh)
 * the receiver listens on ADDR inside network namespace RX and the sender
 * connects from namespace TX: the listening socket is made after setns(RX),
 * then the process moves to TX before it forks, so the receiver's accepted
 * sockets live in RX and every socket the sender makes lives in TX.  A socket
 * keeps the namespace it was created in; nothing else here depends on one.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
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
#include "common/time.h"
#include "crypto/identity.h"
#include "crypto/tls.h"

#define BUF (64u << 20)

static size_t total;
static int sockbuf;
static struct in_addr addr;        /* where the receiver listens */
static int rx_ns = -1, tx_ns = -1; /* /run/netns/NAME descriptors, or -1 */

struct result {
    double gbps;           /* wall clock */
    double cpu_tx, cpu_rx; /* seconds of CPU, sender and receiver */
};

static double cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The child's CPU seconds travel back through a pipe. */
static void send_cpu(int fd, double cpu)
{
    if (write(fd, &cpu, sizeof(cpu)) != sizeof(cpu))
        _exit(5);
}

static double recv_cpu(int fd)
{
    double cpu = -1;

    if (read(fd, &cpu, sizeof(cpu)) != sizeof(cpu))
        return -1;
    return cpu;
}

static void pin_cpu(int cpu)
{
    cpu_set_t set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    CPU_ZERO(&set);
    CPU_SET(n > 1 ? cpu % n : 0, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

static int enter_ns(int fd)
{
    if (fd >= 0 && setns(fd, CLONE_NEWNET) != 0) {
        perror("setns");
        return -1;
    }
    return 0;
}

static int open_ns(const char *name)
{
    char path[256];
    int fd;

    snprintf(path, sizeof(path), "/run/netns/%s", name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        perror(path);
    return fd;
}

/* A listening socket on addr in the receiver's namespace; the process is in
 * the sender's namespace when it returns. */
static int listen_any(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = addr};
    socklen_t len = sizeof(a);
    int fd, one = 1;

    if (enter_ns(rx_ns) != 0)
        return -1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || enter_ns(tx_ns) != 0)
        return -1;

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0)
        return -1;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static void tune(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof(sockbuf));
    }
}

/* --- plain TCP ------------------------------------------------------------ */

static struct result trial_tcp(void)
{
    int port, lfd = listen_any(&port), st, pfd[2];
    struct result res = {-1, 0, 0};
    pid_t pid;
    uint64_t t0;
    double c0;
    char *buf = malloc(1u << 20);
    size_t done = 0;
    char ack;

    memset(buf, 0x5a, 1u << 20);
    if (lfd < 0 || pipe(pfd) != 0)
        return res;
    pid = fork();
    if (pid == 0) { /* receiver */
        int fd;
        pin_cpu(1);
        fd = accept(lfd, NULL, NULL);
        c0 = cpu_now();
        tune(fd);
        while (done < total) {
            ssize_t r = read(fd, buf, 1u << 20);
            if (r <= 0)
                _exit(1);
            done += (size_t)r;
        }
        ack = 1;
        send_cpu(pfd[1], cpu_now() - c0);
        _exit(write(fd, &ack, 1) == 1 ? 0 : 1);
    }
    pin_cpu(0);
    close(lfd);
    {
        struct sockaddr_in a = {
            .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = addr};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
            return res;
        tune(fd);
        t0 = gm_time_mono_ns();
        c0 = cpu_now();
        while (done < total) {
            size_t n = total - done < (1u << 20) ? total - done : (1u << 20);
            ssize_t w = write(fd, buf, n);
            if (w <= 0)
                return res;
            done += (size_t)w;
        }
        if (read(fd, &ack, 1) != 1)
            return res;
        {
            double s = gm_time_seconds_since(t0);
            res.cpu_tx = cpu_now() - c0;
            res.cpu_rx = recv_cpu(pfd[0]);
            close(fd);
            waitpid(pid, &st, 0);
            free(buf);
            close(pfd[0]);
            close(pfd[1]);
            res.gbps = (double)total / s / 1e9;
            return res;
        }
    }
}

/* --- TLS link ------------------------------------------------------------- */

struct ids {
    struct gm_tls_ctx *srv, *cli;
};

struct side {
    uv_loop_t loop;
    uv_tcp_t listener;
    struct gm_link *l;
    size_t got, queued;
    uint8_t *buf;
    int done, cpu_fd;
    uint64_t t0;
    double gbps, c0, cpu;
};

static int rx_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct side *s = gm_link_data(l);

    (void)p;
    if (h->type == GM_MSG_BULK) {
        s->got += h->len;
        if (s->got >= total) {
            uint8_t ack = 1;
            send_cpu(s->cpu_fd, cpu_now() - s->c0);
            return gm_link_send(l, GM_MSG_PONG, 0, &ack, 1);
        }
    }
    return 0;
}

static void rx_close(struct gm_link *l, int err)
{
    struct side *s = gm_link_data(l);

    (void)err;
    s->done = 1;
    uv_close((uv_handle_t *)&s->listener, NULL);
}

static const struct gm_link_ops rx_ops = {.on_frame = rx_frame, .on_close = rx_close};

static void rx_conn(uv_stream_t *srv, int status)
{
    struct side *s = srv->data;
    struct ids *ids = s->listener.loop->data;
    struct gm_link_opts o = {.role = GM_TLS_ROLE_SERVER, .sockbuf = sockbuf};

    s->c0 = cpu_now();
    if (status != 0 || gm_link_new(&s->loop, ids->srv, &o, &rx_ops, s, &s->l) != 0 ||
        gm_link_accept(s->l, srv) != 0)
        _exit(2);
}

static void tx_more(struct gm_link *l);

static void tx_done(void *arg, int err)
{
    (void)arg;
    (void)err;
}

static void tx_more(struct gm_link *l)
{
    struct side *s = gm_link_data(l);

    /* keep two buffers' worth queued; the buffer is only read, never changed */
    while (s->queued < total && gm_link_bulk_queued(l) < 2 * (size_t)BUF) {
        size_t n = total - s->queued < BUF ? total - s->queued : BUF;
        if (gm_link_send_bulk(l, GM_MSG_BULK, 1, s->buf, n, tx_done, s) != 0)
            _exit(3);
        s->queued += n;
    }
}

static int tx_up(struct gm_link *l)
{
    struct side *s = gm_link_data(l);

    s->t0 = gm_time_mono_ns();
    s->c0 = cpu_now();
    tx_more(l);
    return 0;
}

static int tx_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct side *s = gm_link_data(l);

    (void)p;
    if (h->type == GM_MSG_PONG && h->len == 1) {
        s->gbps = (double)total / gm_time_seconds_since(s->t0) / 1e9;
        s->cpu = cpu_now() - s->c0;
        gm_link_close(l, 0);
    }
    return 0;
}

static void tx_close(struct gm_link *l, int err)
{
    struct side *s = gm_link_data(l);

    if (err != 0)
        fprintf(stderr, "tls sender: %s (%s)\n", gm_strerror(err), gm_tls_reason(gm_link_tls(l)));
    s->done = 1;
}

static const struct gm_link_ops tx_ops = {
    .on_up = tx_up, .on_frame = tx_frame, .on_writable = tx_more, .on_close = tx_close};

static struct result trial_tls(struct ids *ids)
{
    int port, lfd = listen_any(&port), st, pfd[2];
    struct result res = {-1, 0, 0};
    struct side s;
    pid_t pid;

    memset(&s, 0, sizeof(s));
    if (lfd < 0 || pipe(pfd) != 0)
        return res;
    s.cpu_fd = pfd[1];
    pid = fork();
    if (pid == 0) {
        pin_cpu(1);
        uv_loop_init(&s.loop);
        s.loop.data = ids;
        uv_tcp_init(&s.loop, &s.listener);
        s.listener.data = &s;
        uv_tcp_open(&s.listener, lfd);
        uv_listen((uv_stream_t *)&s.listener, 4, rx_conn);
        uv_run(&s.loop, UV_RUN_DEFAULT);
        _exit(s.got >= total ? 0 : 4);
    }
    pin_cpu(0);
    close(lfd);
    {
        struct sockaddr_in a = {
            .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = addr};
        struct gm_link_opts o = {.role = GM_TLS_ROLE_CLIENT, .sockbuf = sockbuf};
        s.buf = malloc(BUF);
        memset(s.buf, 0xa5, BUF);
        uv_loop_init(&s.loop);
        if (gm_link_new(&s.loop, ids->cli, &o, &tx_ops, &s, &s.l) != 0 ||
            gm_link_connect(s.l, (struct sockaddr *)&a) != 0)
            return res;
        uv_run(&s.loop, UV_RUN_DEFAULT);
        uv_loop_close(&s.loop);
        free(s.buf);
    }
    waitpid(pid, &st, 0);
    res.cpu_rx = recv_cpu(pfd[0]);
    close(pfd[0]);
    close(pfd[1]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || s.gbps <= 0) {
        fprintf(stderr, "tls receiver failed (status %d)\n", st);
        return res;
    }
    res.gbps = s.gbps;
    res.cpu_tx = s.cpu;
    return res;
}

static int make_ids(struct ids *ids)
{
    struct gm_key *cakey = NULL, *k1 = NULL, *k2 = NULL;
    struct gm_cert *ca = NULL, *c1 = NULL, *c2 = NULL;
    uint8_t pub[GM_ID_PUB_LEN];
    struct gm_tls_config tc = {.cluster = "bench"};

    if (gm_id_key_generate(&cakey) || gm_id_ca_create("bench", cakey, 1, &ca) ||
        gm_id_key_generate(&k1) || gm_id_key_public(k1, pub) ||
        gm_id_cert_issue(ca, cakey, "bench", "rx", pub, 1, &c1) || gm_id_key_generate(&k2) ||
        gm_id_key_public(k2, pub) || gm_id_cert_issue(ca, cakey, "bench", "tx", pub, 1, &c2))
        return -1;
    tc.ca = ca;
    tc.cert = c1;
    tc.key = k1;
    if (gm_tls_ctx_new(&tc, &ids->srv))
        return -1;
    tc.cert = c2;
    tc.key = k2;
    return gm_tls_ctx_new(&tc, &ids->cli);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* GB/s one core each could carry: bounded by the busier side. */
static double cpu_bound(const struct result *r)
{
    double c = r->cpu_tx > r->cpu_rx ? r->cpu_tx : r->cpu_rx;

    return c > 0 ? (double)total / c / 1e9 : 0;
}

int main(int argc, char **argv)
{
    int trials = 3, i;
    double tcp[32], tls[32], ctcp[32], ctls[32];
    struct ids ids;

    addr.s_addr = htonl(INADDR_LOOPBACK);
    while (argc > 2 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--rx-netns") == 0)
            rx_ns = open_ns(argv[2]);
        else if (strcmp(argv[1], "--tx-netns") == 0)
            tx_ns = open_ns(argv[2]);
        else if (strcmp(argv[1], "--addr") != 0 || inet_pton(AF_INET, argv[2], &addr) != 1)
            return 2;
        if ((strcmp(argv[1], "--rx-netns") == 0 && rx_ns < 0) ||
            (strcmp(argv[1], "--tx-netns") == 0 && tx_ns < 0))
            return 2;
        argc -= 2;
        argv += 2;
    }
    total = argc > 1 ? strtoull(argv[1], NULL, 0) : (1ull << 30);
    trials = argc > 2 ? atoi(argv[2]) : 3;
    sockbuf = argc > 3 ? atoi(argv[3]) : 0;
    if (trials < 1 || trials > 32 || sodium_init() < 0 || make_ids(&ids) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < trials; i++) {
        struct result a = trial_tcp(), b = trial_tls(&ids);
        if (a.gbps <= 0 || b.gbps <= 0)
            return 1;
        tcp[i] = a.gbps;
        tls[i] = b.gbps;
        ctcp[i] = cpu_bound(&a);
        ctls[i] = cpu_bound(&b);
        printf("trial %d: tcp %.3f GB/s (cpu s: tx %.3f rx %.3f)  tls %.3f GB/s (cpu s: tx %.3f "
               "rx %.3f)  ratio %.3f  cpu_ratio %.3f\n",
               i + 1, a.gbps, a.cpu_tx, a.cpu_rx, b.gbps, b.cpu_tx, b.cpu_rx, b.gbps / a.gbps,
               ctls[i] / ctcp[i]);
        fflush(stdout);
    }
    qsort(tcp, (size_t)trials, sizeof(double), cmp);
    qsort(tls, (size_t)trials, sizeof(double), cmp);
    qsort(ctcp, (size_t)trials, sizeof(double), cmp);
    qsort(ctls, (size_t)trials, sizeof(double), cmp);
    printf("bytes=%zu trials=%d sockbuf=%d tcp_GBps=%.4f tls_GBps=%.4f ratio=%.3f "
           "cpu_tcp_GBps=%.3f cpu_tls_GBps=%.3f cpu_ratio=%.3f\n",
           total, trials, sockbuf, tcp[trials / 2], tls[trials / 2],
           tls[trials / 2] / tcp[trials / 2], ctcp[trials / 2], ctls[trials / 2],
           ctls[trials / 2] / ctcp[trials / 2]);
    gm_tls_ctx_free(ids.srv);
    gm_tls_ctx_free(ids.cli);
    return 0;
}
