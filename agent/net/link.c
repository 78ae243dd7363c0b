/*
 * agent/net/link.c - see link.h.
 *
 * Memory: the link struct lives until both of its handles (tcp, timer) are
 * closed; on_close runs then and the struct is freed right after.  Write
 * requests own their ciphertext and are freed in write_cb (also when
 * cancelled by uv_close).
 */
#include "agent/net/link.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/assert.h"
#include "common/byteorder.h"
#include "common/log.h"
#include "common/tbucket.h"
#include "common/time.h"

#define RX_BUF (256u << 10)
#define TICK_MS 250
/* A tick this late means this process did not run (SIGSTOP, a paused VM, a swap storm): the
 * silence on its links meanwhile is its own, and round trips that span it measure it. */
#define STALL_MS 1500
#define RTT_FRESH_MS 30000 /* round-trip samples older than this are not used */

struct ctrl_frame {
    struct ctrl_frame *next;
    size_t len;
    uint8_t data[]; /* header + payload, plaintext */
};

#define RATE_MIN_FRAME (16u << 10) /* a capped link's bulk frames: at least this */

struct bulk_item {
    struct bulk_item *next;
    uint16_t type;
    uint64_t req;
    const uint8_t *head, *data; /* borrowed: the payload is head || data */
    size_t head_len, len, off;  /* len: head_len + data's length; off: sent so far */
    gm_link_done_fn done;
    void *arg;
};

struct wreq {
    uv_write_t req;
    struct gm_link *l;
    struct gm_tls_block b; /* the engine's output block, given back when written */
};

struct gm_link {
    uv_tcp_t tcp; /* tcp.data = this */
    uv_timer_t timer;
    uv_timer_t rate_timer; /* the bulk cap's bucket refills: pump again */
    uv_idle_t idle;        /* kick(): work for the next loop iteration */
    uv_connect_t connect_req;
    uv_shutdown_t shutdown_req;
    uv_loop_t *loop;
    struct gm_tls *tls; /* owned */
    struct gm_frame_parser parser;
    struct gm_link_opts opts;
    const struct gm_link_ops *ops; /* borrowed */
    void *data;                    /* owner's */
    uint32_t state;
    int started, handles_open, closing, close_err, close_started, up, reading, got_close_notify;
    int connected, shut; /* tcp usable for writes; uv_shutdown requested */
    int paused;          /* the owner stopped reading (gm_link_pause_read) */
    struct ctrl_frame *ctrl_head, **ctrl_tail;
    size_t ctrl_bytes;
    struct bulk_item *bulk_head, **bulk_tail;
    size_t bulk_bytes;
    struct bulk_item *fin_head, **fin_tail; /* sent; done() not called yet */
    int want_writable;
    size_t wq_bytes; /* ciphertext in libuv's write queue */
    uint64_t t_start, t_last_rx, t_last_ping;
    uint64_t t_last_tick, t_stall; /* the last tick; the end of the last stall (0: none) */
    unsigned silence_ms;           /* gm_link_set_silence_ms (0: opts.timeout_ms only) */
    struct {
        uint64_t at;   /* when the PONG came (mono ns) */
        double rtt_ms; /* 0: empty */
    } rtts[GM_LINK_RTT_SAMPLES];
    unsigned rtt_next;
    unsigned linger_ms; /* closing: give up on a clean close after this */
    double rtt_ms, skew_ms;
    int have_skew;
    uint64_t tx, rx;
    char peer[GM_ADDR_MAX];
    uint8_t *rxbuf;    /* owned, RX_BUF */
    int rated;         /* bulk frames go through tb (gm_link_set_rate) */
    size_t high_water; /* ciphertext bytes queued above the kernel (gm_link_set_high_water) */
    size_t chunk;      /* bulk bytes per frame: GM_LINK_CHUNK, less on a slow link */
    int handler_err;   /* the parser's error came from ops->on_frame, not the header */
    struct gm_tbucket tb;
};

/* For results that do not change what happens next (best-effort sends). */
static void ignore(int err)
{
    (void)err;
}

static void pump(struct gm_link *l);
static void resume_read(struct gm_link *l);
static void start_close(struct gm_link *l);
static void tick_cb(uv_timer_t *t);

void *gm_link_data(const struct gm_link *l)
{
    return l->data;
}

void gm_link_set_data(struct gm_link *l, void *data)
{
    l->data = data;
}

struct gm_tls *gm_link_tls(const struct gm_link *l)
{
    return l->tls;
}

const char *gm_link_peer_addr(const struct gm_link *l)
{
    return l->peer;
}

uint32_t gm_link_state(const struct gm_link *l)
{
    return l->state;
}

void gm_link_set_state(struct gm_link *l, uint32_t state)
{
    l->state = state;
}

int gm_link_is_closing(const struct gm_link *l)
{
    return l->closing;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The fresh samples (sorted) into v; returns how many. */
static size_t fresh_rtts(const struct gm_link *l, double v[GM_LINK_RTT_SAMPLES])
{
    uint64_t now = gm_time_mono_ns();
    size_t n = 0;

    for (size_t i = 0; i < GM_LINK_RTT_SAMPLES; i++)
        if (l->rtts[i].rtt_ms > 0 && now - l->rtts[i].at <= (uint64_t)RTT_FRESH_MS * 1000000ull)
            v[n++] = l->rtts[i].rtt_ms;
    qsort(v, n, sizeof(v[0]), cmp_double);
    return n;
}

double gm_link_rtt_ms(const struct gm_link *l)
{
    double v[GM_LINK_RTT_SAMPLES];
    size_t n = fresh_rtts(l, v);

    if (n == 0)
        return 0;
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

unsigned gm_link_rtt_samples(const struct gm_link *l)
{
    double v[GM_LINK_RTT_SAMPLES];

    return (unsigned)fresh_rtts(l, v);
}

double gm_link_rtt_max_ms(const struct gm_link *l)
{
    double v[GM_LINK_RTT_SAMPLES];
    size_t n = fresh_rtts(l, v);

    return n > 0 ? v[n - 1] : 0;
}

unsigned gm_link_quiet_ms(const struct gm_link *l)
{
    uint64_t now = gm_time_mono_ns();

    if (!l->up || l->paused || now < l->t_last_rx)
        return 0;
    return (unsigned)((now - l->t_last_rx) / 1000000ull);
}

void gm_link_set_silence_ms(struct gm_link *l, unsigned ms)
{
    l->silence_ms = ms;
}

unsigned gm_link_silence_ms(const struct gm_link *l)
{
    unsigned t = l->opts.ping_ms != 0 ? l->opts.timeout_ms : 0;

    if (l->silence_ms != 0 && (t == 0 || l->silence_ms < t))
        t = l->silence_ms;
    return t;
}

bool gm_link_is_quiet(const struct gm_link *l)
{
    unsigned q = l != NULL ? gm_link_quiet_ms(l) : 0;

    return q > GM_LINK_QUIET_MS && q > gm_link_silence_ms(l) / 2;
}

int gm_link_skew_ms(const struct gm_link *l, double *skew)
{
    *skew = l->skew_ms;
    return l->have_skew;
}

int gm_link_fd(const struct gm_link *l)
{
    uv_os_fd_t fd;

    if (uv_fileno((const uv_handle_t *)&l->tcp, &fd) != 0)
        return -1;
    return (int)fd;
}

size_t gm_link_bulk_queued(const struct gm_link *l)
{
    return l->bulk_bytes;
}

uint64_t gm_link_bytes_sent(const struct gm_link *l)
{
    return l->tx;
}

uint64_t gm_link_bytes_received(const struct gm_link *l)
{
    return l->rx;
}

int gm_link_new(uv_loop_t *loop, struct gm_tls_ctx *ctx, const struct gm_link_opts *opts,
                const struct gm_link_ops *ops, void *data, struct gm_link **out)
{
    struct gm_link *l;
    int err;

    *out = NULL;
    /* libuv writes with write(2): a peer that resets mid-write must fail
     * this link with EPIPE, not kill the process with SIGPIPE. Process-wide,
     * so every program with a link (agent, joiner, tests) gets it. */
    signal(SIGPIPE, SIG_IGN);
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->loop = loop;
    l->opts = *opts;
    if (l->opts.max_frame == 0)
        l->opts.max_frame = GM_FRAME_MAX_DEFAULT;
    l->ops = ops;
    l->data = data;
    l->high_water = GM_LINK_HIGH_WATER;
    l->chunk = GM_LINK_CHUNK;
    l->ctrl_tail = &l->ctrl_head;
    l->bulk_tail = &l->bulk_head;
    l->fin_tail = &l->fin_head;
    l->rxbuf = malloc(RX_BUF);
    if (l->rxbuf == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    err = gm_tls_new(ctx, opts->role, &l->tls);
    if (err != 0)
        goto fail;
    gm_frame_parser_init(&l->parser, l->opts.max_frame, gm_proto_type_known);
    snprintf(l->peer, sizeof(l->peer), "?");
    *out = l;
    return 0;
fail:
    free(l->rxbuf);
    free(l);
    return err;
}

static void free_queues(struct gm_link *l, int err)
{
    struct ctrl_frame *c;
    struct bulk_item *b;

    while ((c = l->ctrl_head) != NULL) {
        l->ctrl_head = c->next;
        free(c);
    }
    l->ctrl_tail = &l->ctrl_head;
    l->ctrl_bytes = 0;
    while ((b = l->fin_head) != NULL) { /* these were sent */
        l->fin_head = b->next;
        if (b->done != NULL)
            b->done(b->arg, 0);
        free(b);
    }
    l->fin_tail = &l->fin_head;
    while ((b = l->bulk_head) != NULL) {
        l->bulk_head = b->next;
        if (b->done != NULL)
            b->done(b->arg, err);
        free(b);
    }
    l->bulk_tail = &l->bulk_head;
    l->bulk_bytes = 0;
}

static void link_release(struct gm_link *l)
{
    gm_frame_parser_free(&l->parser);
    gm_tls_free(l->tls);
    free(l->rxbuf);
    free(l);
}

void gm_link_free_unstarted(struct gm_link *l)
{
    if (l == NULL)
        return;
    if (l->started)
        return; /* started links are freed by their close callbacks */
    free_queues(l, GM_ERR_ABORTED);
    link_release(l);
}

static void close_cb(uv_handle_t *h)
{
    struct gm_link *l = h->data;

    if (--l->handles_open > 0)
        return;
    free_queues(l, l->close_err != 0 ? l->close_err : GM_ERR_ABORTED);
    if (l->ops->on_close != NULL)
        l->ops->on_close(l, l->close_err);
    link_release(l);
}

static void close_handles(struct gm_link *l)
{
    if (l->close_started)
        return;
    l->close_started = 1;
    uv_close((uv_handle_t *)&l->tcp, close_cb);
    uv_close((uv_handle_t *)&l->timer, close_cb);
    uv_close((uv_handle_t *)&l->rate_timer, close_cb);
    uv_close((uv_handle_t *)&l->idle, close_cb);
}

static void write_cb(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct gm_link *l = w->l;

    l->wq_bytes -= w->b.len;
    gm_tls_out_recycle(l->tls, &w->b);
    free(w);
    if (status < 0) {
        if (!l->closing)
            gm_link_close(l, status);
        return;
    }
    if (l->closing)
        return;
    if (!l->reading && l->wq_bytes < GM_LINK_READ_STOP / 2) {
        resume_read(l); /* the peer reads again: so do we */
    }
    pump(l);
}

/* Moves pending ciphertext from the TLS engine to the kernel: in place with
 * uv_try_write when libuv's queue is empty, and what the socket does not take
 * now goes to uv_write as the engine's own buffer block (no copy), which
 * returns to the engine for reuse when written. */
static int flush(struct gm_link *l)
{
    const uint8_t *p = NULL;
    size_t n = gm_tls_out_peek(l->tls, &p);
    struct wreq *w;
    uv_buf_t b;
    int err;

    if (n == 0 || l->close_started)
        return 0;
    if (l->connected && !l->shut && l->wq_bytes == 0 &&
        uv_stream_get_write_queue_size((uv_stream_t *)&l->tcp) == 0) {
        b = uv_buf_init((char *)p, (unsigned)(n > UINT32_MAX ? UINT32_MAX : n));
        err = uv_try_write((uv_stream_t *)&l->tcp, &b, 1);
        if (err > 0) {
            gm_tls_out_consume(l->tls, (size_t)err);
            l->tx += (uint64_t)err;
            n = gm_tls_out_peek(l->tls, &p);
            if (n == 0)
                return 0;
        } else if (err != UV_EAGAIN) {
            return err;
        }
    }
    w = malloc(sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->l = l;
    err = gm_tls_out_detach(l->tls, &w->b); /* the socket is full: queue the block itself */
    if (err != 0) {
        free(w);
        return err;
    }
    b = uv_buf_init((char *)w->b.data, (unsigned)w->b.len);
    err = uv_write(&w->req, (uv_stream_t *)&l->tcp, &b, 1, write_cb);
    if (err != 0) {
        gm_tls_out_recycle(NULL, &w->b);
        free(w);
        return err;
    }
    l->wq_bytes += w->b.len;
    l->tx += w->b.len;
    return 0;
}

/* One frame of a bulk item: bytes [off, off+n) of head || data.  The frame
 * header and the head bytes go out as one small TLS record, the data as
 * records of up to 16 KiB encrypted straight from the owner's buffer. */
static int tls_write_chunk(struct gm_link *l, const struct bulk_item *b, uint16_t flags, size_t n)
{
    struct gm_frame_hdr h = {.type = b->type, .flags = flags, .len = (uint32_t)n, .req = b->req};
    uint8_t small[GM_FRAME_HDR_LEN + GM_LINK_HEAD_MAX];
    size_t hn = 0, off = b->off;
    int err;

    gm_frame_hdr_encode(&h, small);
    if (off < b->head_len) {
        hn = GM_MIN(b->head_len - off, n);
        memcpy(small + GM_FRAME_HDR_LEN, b->head + off, hn);
    }
    err = gm_tls_write(l->tls, small, GM_FRAME_HDR_LEN + hn);
    off += hn;
    if (err == 0 && n > hn)
        err = gm_tls_write(l->tls, b->data + (off - b->head_len), n - hn);
    return err;
}

static void deliver(struct gm_link *l);

static void idle_cb(uv_idle_t *h)
{
    struct gm_link *l = h->data;

    ignore(uv_idle_stop(h));
    if (!l->closing) {
        deliver(l);
        pump(l);
    }
}

/* Delivers and pumps on the next loop iteration, after its poll for I/O: user
 * callbacks (bulk done, on_writable) never run inside the call that triggered
 * them, and a bulk sender reads between its 1 MiB turns.  (An idle handle, not
 * a 0 ms timer: libuv 1.44 runs a timer that restarts itself with timeout 0
 * again in the same pass, so the loop never polled while bulk was left: a
 * sender did not read its peer's control frames until all of it was out.) */
static void kick(struct gm_link *l)
{
    if (l->started && !l->close_started)
        ignore(uv_idle_start(&l->idle, idle_cb));
}

static void rate_cb(uv_timer_t *t)
{
    pump(t->data);
}

/* The bytes of a bulk chunk of want that the cap lets go now (at least RATE_MIN_FRAME, or
 * what is left of the item, so frames stay large); 0 with the rate timer armed. */
static size_t rated_chunk(struct gm_link *l, size_t want)
{
    uint64_t now = gm_time_mono_ns(), wait;
    size_t n = gm_tbucket_take(&l->tb, want, RATE_MIN_FRAME, now);

    if (n > 0)
        return n;
    wait = gm_tbucket_wait_ns(&l->tb, want < RATE_MIN_FRAME ? want : RATE_MIN_FRAME, now);
    if (!uv_is_active((uv_handle_t *)&l->rate_timer))
        ignore(uv_timer_start(&l->rate_timer, rate_cb, (wait + 999999) / 1000000, 0));
    return 0;
}

void gm_link_set_rate(struct gm_link *l, double bytes_per_s)
{
    l->rated = bytes_per_s > 0;
    if (l->rated) /* a burst of 50 ms, at least two minimal frames */
        gm_tbucket_init(&l->tb, bytes_per_s,
                        bytes_per_s * 0.05 > 2 * RATE_MIN_FRAME ? bytes_per_s * 0.05
                                                                : 2 * RATE_MIN_FRAME,
                        gm_time_mono_ns());
    else if (l->started && !l->close_started)
        ignore(uv_timer_stop(&l->rate_timer));
    kick(l);
}

void gm_link_set_high_water(struct gm_link *l, size_t bytes)
{
    int fd = gm_link_fd(l), lowat = (int)(bytes / 2);

    l->high_water = bytes;
    /* a chunk goes out whole once the queue is below the high water: keep it a fraction */
    l->chunk = bytes / 4 < RATE_MIN_FRAME  ? RATE_MIN_FRAME
               : bytes / 4 > GM_LINK_CHUNK ? GM_LINK_CHUNK
                                           : bytes / 4;
    if (fd >= 0) /* the kernel keeps at most this much unsent: the rest waits behind control */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
}

double gm_link_rate(const struct gm_link *l)
{
    return l->rated ? l->tb.rate : 0;
}

/* Encrypts queued frames while the write queue is below the high water. */
static void pump(struct gm_link *l)
{
    int err = 0, was_bulk = l->bulk_head != NULL, fin = 0, full;
    size_t budget = l->high_water; /* bulk bytes per call: the loop gets a turn */

    if (l->close_started || !l->up)
        return;
    while (!(full = l->wq_bytes + gm_tls_out_pending(l->tls) >= l->high_water)) {
        struct ctrl_frame *c = l->ctrl_head;
        if (c != NULL) {
            l->ctrl_head = c->next;
            if (l->ctrl_head == NULL)
                l->ctrl_tail = &l->ctrl_head;
            l->ctrl_bytes -= c->len;
            if (l->rated) /* control frames never wait for the cap, but count against it */
                gm_tbucket_charge(&l->tb, c->len, gm_time_mono_ns());
            err = gm_tls_write(l->tls, c->data, c->len);
            free(c);
        } else if (l->bulk_head != NULL && !l->closing && budget == 0) {
            fin = 1; /* more next iteration (kick below) */
            break;
        } else if (l->bulk_head != NULL && !l->closing) {
            struct bulk_item *b = l->bulk_head;
            size_t n = b->len - b->off;
            if (n > l->chunk)
                n = l->chunk;
            if (l->rated && (n = rated_chunk(l, n)) == 0)
                break; /* the rate timer pumps again when the bucket holds enough */
            err = tls_write_chunk(l, b, b->off + n < b->len ? GM_FRAME_F_MORE : 0, n);
            b->off += n;
            l->bulk_bytes -= n;
            budget = budget > n ? budget - n : 0;
            if (b->off == b->len) { /* the TLS engine holds the bytes now */
                l->bulk_head = b->next;
                if (l->bulk_head == NULL)
                    l->bulk_tail = &l->bulk_head;
                b->next = NULL;
                *l->fin_tail = b;
                l->fin_tail = &b->next;
                fin = 1;
            }
        } else {
            break;
        }
        if (err != 0)
            break;
        if (gm_tls_out_pending(l->tls) >= GM_LINK_CHUNK)
            err = flush(l);
        if (err != 0)
            break;
    }
    if (err == 0)
        err = flush(l);
    if (err != 0) {
        gm_link_close(l, err);
        return;
    }
    /* stopped at the high water, and the socket took all of it: no write callback will come
     * to pump again (that happens when the queue is more than the chunks flushed in the loop) */
    if (full && l->bulk_head != NULL && l->wq_bytes == 0 && !l->closing)
        fin = 1;
    if (was_bulk && l->bulk_head == NULL)
        l->want_writable = 1;
    /* on_writable is due only once the bulk queue is empty: kicking for it
     * while bulk waits on a full socket would spin the loop (poll, nothing
     * to do, kick) until the kernel drained it */
    if (fin || (l->want_writable && l->bulk_head == NULL))
        kick(l);
}

/* Bulk completions and on_writable, outside any send call. */
static void deliver(struct gm_link *l)
{
    struct bulk_item *b;

    while ((b = l->fin_head) != NULL && !l->closing) {
        l->fin_head = b->next;
        if (l->fin_head == NULL)
            l->fin_tail = &l->fin_head;
        if (b->done != NULL)
            b->done(b->arg, 0);
        free(b);
    }
    if (l->want_writable && l->bulk_head == NULL && !l->closing) {
        l->want_writable = 0;
        if (l->ops->on_writable != NULL)
            l->ops->on_writable(l);
    }
}

int gm_link_send(struct gm_link *l, uint16_t type, uint64_t req, const void *payload, size_t len)
{
    struct gm_frame_hdr h = {.type = type, .flags = 0, .len = (uint32_t)len, .req = req};
    struct ctrl_frame *c;

    if (l->closing)
        return -EPIPE;
    if (len > l->opts.max_frame)
        return -EMSGSIZE;
    if (l->ctrl_bytes + len > GM_LINK_CTRL_MAX)
        return -ENOBUFS;
    c = malloc(sizeof(*c) + GM_FRAME_HDR_LEN + len);
    if (c == NULL)
        return -ENOMEM;
    c->next = NULL;
    c->len = GM_FRAME_HDR_LEN + len;
    gm_frame_hdr_encode(&h, c->data);
    if (len > 0)
        memcpy(c->data + GM_FRAME_HDR_LEN, payload, len);
    *l->ctrl_tail = c;
    l->ctrl_tail = &c->next;
    l->ctrl_bytes += c->len;
    pump(l);
    return 0;
}

int gm_link_send_raw(struct gm_link *l, const void *bytes, size_t len)
{
    struct ctrl_frame *c;

    if (l->closing)
        return -EPIPE;
    c = malloc(sizeof(*c) + len);
    if (c == NULL)
        return -ENOMEM;
    c->next = NULL;
    c->len = len;
    memcpy(c->data, bytes, len);
    *l->ctrl_tail = c;
    l->ctrl_tail = &c->next;
    l->ctrl_bytes += c->len;
    pump(l);
    return 0;
}

int gm_link_send_bulk2(struct gm_link *l, uint16_t type, uint64_t req, const void *head,
                       size_t head_len, const void *data, size_t len, gm_link_done_fn done,
                       void *arg)
{
    struct bulk_item *b;

    if (l->closing)
        return -EPIPE;
    if (head_len + len == 0 || head_len > GM_LINK_HEAD_MAX || (head == NULL && head_len > 0) ||
        (data == NULL && len > 0))
        return -EINVAL;
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->type = type;
    b->req = req;
    b->head = head;
    b->head_len = head_len;
    b->data = data;
    b->len = head_len + len;
    b->done = done;
    b->arg = arg;
    *l->bulk_tail = b;
    l->bulk_tail = &b->next;
    l->bulk_bytes += b->len;
    pump(l);
    return 0;
}

int gm_link_send_bulk(struct gm_link *l, uint16_t type, uint64_t req, const void *data, size_t len,
                      gm_link_done_fn done, void *arg)
{
    return gm_link_send_bulk2(l, type, req, NULL, 0, data, len, done, arg);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    struct gm_link *l = req->data;

    /* On success wait for the peer's EOF (read_cb) or the deadline (tick_cb):
     * closing now could reset the connection and lose what we just sent. */
    if (status != 0)
        close_handles(l);
}

static void start_close(struct gm_link *l)
{
    int err;

    if (l->close_started)
        return;
    /* queued control frames (an ERROR) and close_notify go out first */
    if (l->up) {
        struct ctrl_frame *c;
        while ((c = l->ctrl_head) != NULL && gm_tls_out_pending(l->tls) < GM_LINK_READ_STOP) {
            l->ctrl_head = c->next;
            ignore(gm_tls_write(l->tls, c->data, c->len));
            free(c);
        }
        if (l->ctrl_head == NULL)
            l->ctrl_tail = &l->ctrl_head;
    }
    if (gm_tls_handshake_done(l->tls))
        gm_tls_shutdown(l->tls);
    (void)flush(l);
    l->shutdown_req.data = l;
    l->shut = 1;
    err = uv_shutdown(&l->shutdown_req, (uv_stream_t *)&l->tcp, shutdown_cb);
    if (err != 0)
        close_handles(l);
    /* the timer (tick) closes the handles if the peer never drains */
}

void gm_link_close_within(struct gm_link *l, int err, unsigned linger_ms)
{
    if (l->closing) {
        /* already closing: only shorten the wait */
        if (linger_ms >= l->linger_ms || l->close_started)
            return;
    } else {
        l->closing = 1;
        l->close_err = err;
        l->t_start = gm_time_mono_ns(); /* now the close deadline's origin */
    }
    l->linger_ms = linger_ms;
    if (!l->started)
        return;
    if (linger_ms < TICK_MS)
        ignore(uv_timer_start(&l->timer, tick_cb, linger_ms, linger_ms > 0 ? linger_ms : 1));
    resume_read(l); /* lingering close: read and discard until the peer's EOF */
    start_close(l);
}

void gm_link_close(struct gm_link *l, int err)
{
    gm_link_close_within(l, err, GM_LINK_LINGER_MS);
}

void gm_link_fail(struct gm_link *l, int err, const char *message)
{
    char *json = NULL;
    size_t len = 0;

    if (!l->closing && l->up && gm_proto_error_encode(err, message, &json, &len) == 0)
        ignore(gm_link_send(l, GM_MSG_ERROR, 0, json, len));
    free(json);
    gm_link_close(l, err);
}

static uint64_t wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gm_link_ping(struct gm_link *l)
{
    uint8_t p[8];
    uint64_t now = gm_time_mono_ns();

    l->t_last_ping = now;
    gm_put_be64(p, now);
    ignore(gm_link_send(l, GM_MSG_PING, 0, p, sizeof(p)));
}

void gm_link_pong(struct gm_link *l, const uint8_t *payload, size_t len)
{
    uint8_t p[16];

    if (len != 8)
        return;
    memcpy(p, payload, 8);
    gm_put_be64(p + 8, wall_ns());
    ignore(gm_link_send(l, GM_MSG_PONG, 0, p, sizeof(p)));
}

void gm_link_rtt_sample(struct gm_link *l, const uint8_t *payload, size_t len)
{
    uint64_t t, now = gm_time_mono_ns();

    if (len != 8 && len != 16)
        return;
    t = gm_get_be64(payload);
    if (t > now)
        return;
    l->rtt_ms = (double)(now - t) / 1e6;
    if (t >= l->t_stall && l->rtt_ms > 0) { /* one that spans our own stall measures it */
        l->rtts[l->rtt_next].at = now;
        l->rtts[l->rtt_next].rtt_ms = l->rtt_ms;
        l->rtt_next = (l->rtt_next + 1) % GM_LINK_RTT_SAMPLES;
    }
    if (len == 16) {
        /* the peer read its clock about half a round trip ago */
        double peer_ms = (double)gm_get_be64(payload + 8) / 1e6;
        double mid_ms = (double)wall_ns() / 1e6 - l->rtt_ms / 2;
        l->skew_ms = peer_ms - mid_ms;
        l->have_skew = 1;
    }
}

static int frame_cb(void *arg, const struct gm_frame_hdr *h, const uint8_t *payload)
{
    struct gm_link *l = arg;
    int err;

    if (l->closing)
        return GM_ERR_ABORTED;
    err = l->ops->on_frame(l, h, payload);
    if (err == 0 && l->closing)
        return GM_ERR_ABORTED;
    l->handler_err = err != 0; /* the frame was well formed: its handler refused it */
    return err;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct gm_link *l = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)l->rxbuf, RX_BUF);
}

static void on_tls_up(struct gm_link *l)
{
    int err;

    l->up = 1;
    err = l->ops->on_up != NULL ? l->ops->on_up(l) : 0;
    if (err != 0) {
        gm_link_close(l, err);
        return;
    }
    pump(l);
}

static void process(struct gm_link *l, uv_stream_t *s, ssize_t nread);

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct gm_link *l = s->data;

    (void)buf;
    process(l, s, nread);
    /* the engine may not keep pointers into rxbuf past this callback */
    if (gm_tls_feed_end(l->tls) != 0 && !l->closing)
        gm_link_close(l, -ENOMEM);
}

static void process(struct gm_link *l, uv_stream_t *s, ssize_t nread)
{
    int err;

    if (l->closing) {
        if (nread < 0)
            close_handles(l);
        return;
    }
    if (nread == 0)
        return;
    if (nread < 0) {
        if (nread != UV_EOF)
            err = (int)nread;
        else if (l->got_close_notify && gm_frame_parser_idle(&l->parser))
            err = 0;
        else
            err = GM_ERR_ABORTED; /* closed without close_notify, maybe mid-frame */
        gm_link_close(l, err);
        return;
    }
    l->rx += (uint64_t)nread;
    l->t_last_rx = gm_time_mono_ns();
    err = gm_tls_feed_borrow(l->tls, l->rxbuf, (size_t)nread);
    if (err != 0)
        goto fail;
    if (!gm_tls_handshake_done(l->tls)) {
        err = gm_tls_handshake(l->tls);
        if (err == -EAGAIN) {
            err = flush(l);
            if (err != 0)
                goto fail;
            return;
        }
        if (err != 0) {
            (void)flush(l); /* our alert */
            goto fail;
        }
        err = flush(l);
        if (err != 0)
            goto fail;
        on_tls_up(l);
        if (l->closing)
            return;
    }
    for (;;) {
        uint8_t *dst = NULL;
        size_t room = gm_frame_parser_space(&l->parser, &dst), n = 0;
        int perr;
        if (room == 0) { /* cannot happen: a dead parser closed the link */
            err = GM_ERR_PROTO;
            goto fail;
        }
        /* decrypt straight into the frame parser: header, then payload */
        err = gm_tls_read(l->tls, dst, room, &n);
        if (err != 0)
            break;
        perr = gm_frame_parser_commit(&l->parser, n, frame_cb, l);
        if (l->closing)
            return;
        if (perr != 0) {
            gm_warn("event=bad-frame peer=%s err=%d msg=\"%s\"", l->peer, perr, gm_strerror(perr));
            gm_link_fail(l, perr,
                         l->handler_err      ? "frame refused by its handler"
                         : perr == -EMSGSIZE ? "frame longer than the maximum"
                                             : "malformed frame header (unknown type or flags)");
            return;
        }
    }
    if (err == GM_ERR_ABORTED) { /* close_notify */
        l->got_close_notify = 1;
        err = gm_frame_parser_idle(&l->parser) ? 0 : GM_ERR_PROTO;
        ignore(flush(l));
        gm_link_close(l, err);
        return;
    }
    if (err != -EAGAIN) {
        ignore(flush(l));
        goto fail;
    }
    err = flush(l);
    if (err != 0)
        goto fail;
    if ((l->wq_bytes > GM_LINK_READ_STOP || l->paused) && l->reading) {
        uv_read_stop(s); /* the peer is not reading what we owe it, or the owner is full */
        l->reading = 0;
    }
    return;
fail:
    gm_link_close(l, err);
}

static void resume_read(struct gm_link *l)
{
    if (l->reading || l->close_started || l->paused)
        return;
    if (uv_read_start((uv_stream_t *)&l->tcp, alloc_cb, read_cb) == 0)
        l->reading = 1;
}

void gm_link_pause_read(struct gm_link *l, int pause)
{
    l->paused = pause != 0;
    if (l->paused && l->reading && !l->close_started) {
        uv_read_stop((uv_stream_t *)&l->tcp);
        l->reading = 0;
    } else if (!l->paused && l->wq_bytes < GM_LINK_READ_STOP / 2) {
        resume_read(l);
    }
}

static void tick_cb(uv_timer_t *t)
{
    struct gm_link *l = t->data;
    uint64_t now = gm_time_mono_ns();
    unsigned silence;

    if (!l->closing) {
        deliver(l);
        pump(l);
    }
    if (l->closing) {
        if (now - l->t_start >= (uint64_t)l->linger_ms * 1000000ull)
            close_handles(l); /* peer never drained: give up on a clean close */
        return;
    }
    if (!l->up) {
        if (now - l->t_start > (uint64_t)GM_LINK_HANDSHAKE_MS * 1000000ull)
            gm_link_close(l, -ETIMEDOUT);
        return;
    }
    if (l->opts.ping_ms == 0)
        return;
    if (l->paused)
        l->t_last_rx = now; /* we stopped reading: the peer's silence is ours */
    if (l->t_last_tick != 0 && now - l->t_last_tick > (uint64_t)STALL_MS * 1000000ull) {
        l->t_last_rx = now; /* this process stalled: the silence is ours, not the peer's */
        l->t_stall = now;
    }
    l->t_last_tick = now;
    silence = gm_link_silence_ms(l);
    if (now - l->t_last_rx > (uint64_t)silence * 1000000ull) {
        gm_notice("event=link-silent peer=%s quiet_ms=%llu deadline_ms=%u", l->peer,
                  (unsigned long long)((now - l->t_last_rx) / 1000000ull), silence);
        gm_link_close_within(l, -ETIMEDOUT, 0); /* a silent peer sends no EOF to wait for */
        return;
    }
    if (now - l->t_last_ping >= (uint64_t)l->opts.ping_ms * 1000000ull)
        gm_link_ping(l);
}

static int socket_setup(struct gm_link *l)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), fd_i;
    uv_os_fd_t fd;
    unsigned ut = GM_LINK_USER_TIMEOUT_MS;

    l->connected = 1;
    (void)uv_tcp_nodelay(&l->tcp, 1);
    (void)uv_tcp_keepalive(&l->tcp, 1, 10);
    if (uv_fileno((uv_handle_t *)&l->tcp, &fd) == 0) {
        fd_i = fd;
        (void)setsockopt(fd_i, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
        if (l->opts.sockbuf > 0) {
            (void)setsockopt(fd_i, SOL_SOCKET, SO_SNDBUF, &l->opts.sockbuf, sizeof(int));
            (void)setsockopt(fd_i, SOL_SOCKET, SO_RCVBUF, &l->opts.sockbuf, sizeof(int));
        }
    }
    if (uv_tcp_getpeername(&l->tcp, (struct sockaddr *)&ss, &len) == 0)
        ignore(gm_proto_addr_format((struct sockaddr *)&ss, l->peer));
    l->t_last_rx = gm_time_mono_ns();
    l->t_start = l->t_last_rx;
    return uv_timer_start(&l->timer, tick_cb, TICK_MS, TICK_MS);
}

static int init_handles(struct gm_link *l)
{
    int err = uv_tcp_init(l->loop, &l->tcp);

    if (err != 0)
        return err;
    err = uv_timer_init(l->loop, &l->timer);
    if (err != 0) {
        /* tcp is initialised: it must go through uv_close */
        l->started = 1;
        l->handles_open = 1;
        l->tcp.data = l;
        l->closing = 1;
        l->close_err = err;
        l->close_started = 1;
        uv_close((uv_handle_t *)&l->tcp, close_cb);
        return 1; /* reported through on_close */
    }
    ignore(uv_idle_init(l->loop, &l->idle));        /* cannot fail (libuv returns 0) */
    ignore(uv_timer_init(l->loop, &l->rate_timer)); /* idem, once timer's succeeded */
    l->tcp.data = l;
    l->timer.data = l;
    l->rate_timer.data = l;
    l->idle.data = l;
    l->started = 1;
    l->handles_open = 4;
    l->t_start = gm_time_mono_ns();
    return 0;
}

int gm_link_accept(struct gm_link *l, uv_stream_t *server)
{
    int err = init_handles(l);

    if (err != 0)
        return err < 0 ? err : 0;
    err = uv_accept(server, (uv_stream_t *)&l->tcp);
    if (err == 0)
        err = socket_setup(l);
    if (err == 0)
        err = uv_read_start((uv_stream_t *)&l->tcp, alloc_cb, read_cb);
    if (err != 0) {
        gm_link_close(l, err);
        return 0; /* reported through on_close */
    }
    l->reading = 1;
    return 0;
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct gm_link *l = req->data;
    int err = status;

    if (l->closing)
        return;
    if (err == 0)
        err = socket_setup(l);
    if (err == 0)
        err = uv_read_start((uv_stream_t *)&l->tcp, alloc_cb, read_cb);
    if (err == 0) {
        l->reading = 1;
        err = gm_tls_handshake(l->tls); /* ClientHello */
        if (err == -EAGAIN)
            err = flush(l);
    }
    if (err != 0)
        gm_link_close(l, err);
}

int gm_link_connect(struct gm_link *l, const struct sockaddr *addr)
{
    int err = init_handles(l);

    if (err != 0)
        return err < 0 ? err : 0;
    ignore(gm_proto_addr_format(addr, l->peer));
    l->connect_req.data = l;
    err = uv_tcp_connect(&l->connect_req, &l->tcp, addr, connect_cb);
    if (err == 0)
        err = uv_timer_start(&l->timer, tick_cb, TICK_MS, TICK_MS);
    if (err != 0)
        gm_link_close(l, err);
    return 0;
}
