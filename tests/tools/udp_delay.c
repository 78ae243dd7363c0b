/*
 * tests/tools/udp_delay.c - a userspace UDP relay that adds a fixed one-way delay in each
 * direction: the namespace testbed's latency (tests/integration/netns.bash, nb_delay), where
 * the kernel's netem qdisc is not available.
 *
 *   udp_delay --listen IP:PORT --to IP:PORT --delay-ms D [--ready FILE]
 *
 * A datagram from a client on --listen leaves towards --to D ms after it arrived; a datagram
 * from --to leaves towards the client (the last address that sent to --listen) D ms after it
 * arrived.  One relay in front of an OpenVPN server therefore adds 2 D to the tunnel's RTT.
 *
 * Choices:
 * - C, not Python: the relay runs beside 2-4 training processes on a 2-core machine; a
 *   scheduling delay in the relay is added to every packet behind it, so the loop must be
 *   short (recv until EAGAIN, send what is due, sleep until the next due time with ppoll's
 *   nanosecond timeout) and cheap per packet.
 * - Order is preserved: one FIFO per direction and the same delay for every datagram, so the
 *   due times in a FIFO never decrease; a datagram never overtakes an older one.
 * - Nothing is dropped by the relay: the FIFOs grow without a bound (a 20 Mbit/s link with
 *   50 ms holds 125 KB), the socket buffers are 8 MiB (SO_RCVBUFFORCE/SO_SNDBUFFORCE as root,
 *   the plain options otherwise), and a send that would block waits for POLLOUT with the
 *   datagram kept at the head.  Rate limits and their drops stay the job of tbf on the veth:
 *   a send refused with ENOBUFS (tbf's queue is full) is the link dropping the datagram, as it
 *   does to OpenVPN's own sends on the other side, so the relay counts it (link_drops) and goes
 *   on instead of retrying in a busy loop or queueing what the link refused.
 * - Lateness (send time - due time) is measured per datagram; on SIGTERM/SIGINT the relay
 *   prints per direction: datagrams, bytes, the largest queue and the mean / max lateness,
 *   so a loaded machine's effect on the delay is on record, not guessed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_DGRAM 65536
#define SOCKBUF (8 << 20)

struct pkt {
    struct pkt *next;
    uint64_t due_ns;
    size_t len;
    unsigned char data[];
};

struct dir {
    const char *name;
    struct pkt *head, **tail;
    size_t queued, max_queued;
    uint64_t pkts, bytes, late_sum_ns, late_max_ns;
    uint64_t link_drops; /* sends the egress qdisc refused (ENOBUFS), not the relay's */
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int parse_addr(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    char *end;
    long port;

    memset(sa, 0, sizeof(*sa));
    if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
        return -1;
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static void big_buffers(int fd)
{
    int v = SOCKBUF;

    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

/* Receives every datagram waiting on fd into d's FIFO, due delay_ns from now.  from: where
 * the last one came from (NULL: not wanted).  0, or -1 on a real error. */
static int drain(int fd, struct dir *d, uint64_t delay_ns, struct sockaddr_in *from,
                 bool *have_from, unsigned char *buf)
{
    for (;;) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        ssize_t n = recvfrom(fd, buf, MAX_DGRAM, MSG_DONTWAIT, (struct sockaddr *)&sa, &sl);
        struct pkt *p;

        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR || errno == ECONNREFUSED) /* ICMP from an absent server */
                continue;
            perror("udp_delay: recvfrom");
            return -1;
        }
        p = malloc(sizeof(*p) + (size_t)n);
        if (p == NULL) {
            fprintf(stderr, "udp_delay: out of memory\n");
            return -1;
        }
        p->next = NULL;
        p->due_ns = now_ns() + delay_ns;
        p->len = (size_t)n;
        memcpy(p->data, buf, (size_t)n);
        *d->tail = p;
        d->tail = &p->next;
        if (++d->queued > d->max_queued)
            d->max_queued = d->queued;
        if (from != NULL) {
            *from = sa;
            *have_from = true;
        }
    }
}

/* Sends every due datagram at the head of d on fd (to dst when not NULL).  Returns 1 when a
 * send would block (the head stays), 0 otherwise, -1 on a real error. */
static int flush(int fd, struct dir *d, const struct sockaddr_in *dst)
{
    while (d->head != NULL) {
        struct pkt *p = d->head;
        uint64_t t = now_ns();
        ssize_t n;

        if (p->due_ns > t)
            return 0;
        n = dst != NULL ? sendto(fd, p->data, p->len, MSG_DONTWAIT, (const struct sockaddr *)dst,
                                 sizeof(*dst))
                        : send(fd, p->data, p->len, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            if (errno == ENOBUFS) { /* the egress qdisc (tbf) dropped it: the link's drop */
                d->link_drops++;
                goto sent;
            }
            if (errno == EINTR)
                continue;
            if (errno != ECONNREFUSED) { /* a refused one is gone, as on a real path */
                perror("udp_delay: send");
                return -1;
            }
        }
        d->pkts++;
        d->bytes += p->len;
    sent:
        d->late_sum_ns += t - p->due_ns;
        if (t - p->due_ns > d->late_max_ns)
            d->late_max_ns = t - p->due_ns;
        d->head = p->next;
        if (d->head == NULL)
            d->tail = &d->head;
        d->queued--;
        free(p);
    }
    return 0;
}

static void report(const struct dir *d)
{
    fprintf(stderr,
            "udp_delay: %s datagrams=%llu bytes=%llu link_drops=%llu max_queue=%zu "
            "late_mean_us=%.1f late_max_us=%.1f\n",
            d->name, (unsigned long long)d->pkts, (unsigned long long)d->bytes,
            (unsigned long long)d->link_drops, d->max_queued,
            d->pkts ? (double)d->late_sum_ns / (double)d->pkts / 1e3 : 0.0,
            (double)d->late_max_ns / 1e3);
}

static void free_dir(struct dir *d)
{
    while (d->head != NULL) {
        struct pkt *p = d->head;
        d->head = p->next;
        free(p);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: udp_delay --listen IP:PORT --to IP:PORT --delay-ms D [--ready FILE]\n");
}

int main(int argc, char **argv)
{
    struct sockaddr_in lsa, tsa, client;
    const char *ready = NULL;
    bool have_l = false, have_t = false, have_client = false;
    double delay_ms = -1;
    struct dir up = {.name = "to-server"}, down = {.name = "to-client"};
    unsigned char *buf;
    int lfd, tfd, rc = 0;
    uint64_t delay_ns;
    struct sigaction sa;

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (v == NULL) {
            usage();
            return 2;
        }
        if (strcmp(argv[i], "--listen") == 0) {
            if (parse_addr(v, &lsa) < 0) {
                fprintf(stderr, "udp_delay: --listen %s: not IPv4:PORT\n", v);
                return 2;
            }
            have_l = true;
        } else if (strcmp(argv[i], "--to") == 0) {
            if (parse_addr(v, &tsa) < 0) {
                fprintf(stderr, "udp_delay: --to %s: not IPv4:PORT\n", v);
                return 2;
            }
            have_t = true;
        } else if (strcmp(argv[i], "--delay-ms") == 0) {
            delay_ms = strtod(v, &end);
            if (*end != '\0' || !(delay_ms >= 0 && delay_ms <= 10000)) {
                fprintf(stderr, "udp_delay: --delay-ms %s: not a number of ms in [0, 10000]\n", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--ready") == 0) {
            ready = v;
        } else {
            usage();
            return 2;
        }
        i++;
    }
    if (!have_l || !have_t || delay_ms < 0) {
        usage();
        return 2;
    }
    delay_ns = (uint64_t)(delay_ms * 1e6);
    up.tail = &up.head;
    down.tail = &down.head;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    lfd = socket(AF_INET, SOCK_DGRAM, 0);
    tfd = socket(AF_INET, SOCK_DGRAM, 0);
    buf = malloc(MAX_DGRAM);
    if (lfd < 0 || tfd < 0 || buf == NULL) {
        perror("udp_delay: socket");
        return 1;
    }
    big_buffers(lfd);
    big_buffers(tfd);
    if (bind(lfd, (struct sockaddr *)&lsa, sizeof(lsa)) < 0) {
        perror("udp_delay: bind --listen");
        return 1;
    }
    if (connect(tfd, (struct sockaddr *)&tsa, sizeof(tsa)) < 0) {
        perror("udp_delay: connect --to");
        return 1;
    }
    if (ready != NULL) {
        FILE *f = fopen(ready, "w");
        if (f == NULL || fclose(f) != 0) {
            perror("udp_delay: --ready");
            return 1;
        }
    }

    while (!stop_flag) {
        struct pollfd pf[2] = {{.fd = lfd, .events = POLLIN}, {.fd = tfd, .events = POLLIN}};
        struct timespec ts, *tsp = NULL;
        uint64_t next = UINT64_MAX, t;
        int bu, bd;

        if ((bu = flush(tfd, &up, NULL)) < 0 ||
            (bd = have_client ? flush(lfd, &down, &client) : 0) < 0) {
            rc = 1;
            break;
        }
        if (bu)
            pf[1].events |= POLLOUT;
        else if (up.head != NULL)
            next = up.head->due_ns;
        if (bd)
            pf[0].events |= POLLOUT;
        else if (have_client && down.head != NULL && down.head->due_ns < next)
            next = down.head->due_ns;
        if (next != UINT64_MAX) {
            t = now_ns();
            t = next > t ? next - t : 0;
            ts.tv_sec = (time_t)(t / 1000000000u);
            ts.tv_nsec = (long)(t % 1000000000u);
            tsp = &ts;
        }
        if (ppoll(pf, 2, tsp, NULL) < 0) {
            if (errno == EINTR)
                continue;
            perror("udp_delay: ppoll");
            rc = 1;
            break;
        }
        if (((pf[0].revents & (POLLIN | POLLERR)) &&
             drain(lfd, &up, delay_ns, &client, &have_client, buf) < 0) ||
            ((pf[1].revents & (POLLIN | POLLERR)) &&
             drain(tfd, &down, delay_ns, NULL, NULL, buf) < 0)) {
            rc = 1;
            break;
        }
    }
    report(&up);
    report(&down);
    free_dir(&up);
    free_dir(&down);
    free(buf);
    close(lfd);
    close(tfd);
    return rc;
}
