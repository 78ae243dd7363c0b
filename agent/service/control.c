/*
 * agent/service/control.c - see control.h.
 *
 * Server memory: the gm_control struct lives until its listener and every
 * connection are closed (counted in `open`); each connection struct is freed
 * in its own close callback.
 */
#include "agent/service/control.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"

struct conn {
    uv_pipe_t pipe;
    uv_write_t wreq;
    struct gm_control *srv;
    struct conn *next, **pprev;
    char *resp; /* owned */
    size_t len;
    char buf[GM_CONTROL_MAX];
};

struct gm_control {
    uv_pipe_t listener;
    gm_control_fn fn;
    void *arg;
    struct conn *conns;
    int open, closing;
};

static void srv_unref(struct gm_control *c)
{
    if (--c->open == 0)
        free(c);
}

static void conn_close_cb(uv_handle_t *h)
{
    struct conn *k = h->data;
    struct gm_control *c = k->srv;

    if (k->pprev != NULL) {
        *k->pprev = k->next;
        if (k->next != NULL)
            k->next->pprev = k->pprev;
    }
    free(k->resp);
    free(k);
    srv_unref(c);
}

static void conn_close(struct conn *k)
{
    if (!uv_is_closing((uv_handle_t *)&k->pipe))
        uv_close((uv_handle_t *)&k->pipe, conn_close_cb);
}

static void write_cb(uv_write_t *req, int status)
{
    struct conn *k = req->data;

    (void)status;
    conn_close(k);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *k = h->data;

    (void)suggested;
    if (k->len >= sizeof(k->buf) - 1) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(k->buf + k->len, (unsigned)(sizeof(k->buf) - 1 - k->len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct conn *k = s->data;
    char *nl;
    uv_buf_t out;

    (void)b;
    if (nread == UV_ENOBUFS || (nread < 0)) {
        conn_close(k);
        return;
    }
    k->len += (size_t)nread;
    k->buf[k->len] = '\0';
    nl = memchr(k->buf, '\n', k->len);
    if (nl == NULL) {
        if (k->len >= sizeof(k->buf) - 1)
            conn_close(k); /* over the cap */
        return;
    }
    uv_read_stop(s);
    *nl = '\0';
    k->srv->fn(k->srv->arg, k->buf, (size_t)(nl - k->buf), &k->resp);
    if (k->resp == NULL) {
        conn_close(k);
        return;
    }
    {
        size_t n = strlen(k->resp);
        char *r = realloc(k->resp, n + 2);
        if (r == NULL) {
            conn_close(k);
            return;
        }
        r[n] = '\n';
        r[n + 1] = '\0';
        k->resp = r;
        out = uv_buf_init(r, (unsigned)(n + 1));
    }
    k->wreq.data = k;
    if (uv_write(&k->wreq, s, &out, 1, write_cb) != 0)
        conn_close(k);
}

static void connection_cb(uv_stream_t *server, int status)
{
    struct gm_control *c = server->data;
    struct conn *k;

    if (status < 0 || c->closing)
        return;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return; /* the pending connection stays queued; the client times out */
    k->srv = c;
    if (uv_pipe_init(server->loop, &k->pipe, 0) != 0) {
        free(k);
        return;
    }
    k->pipe.data = k;
    c->open++;
    k->next = c->conns;
    k->pprev = &c->conns;
    if (c->conns != NULL)
        c->conns->pprev = &k->next;
    c->conns = k;
    if (uv_accept(server, (uv_stream_t *)&k->pipe) != 0 ||
        uv_read_start((uv_stream_t *)&k->pipe, alloc_cb, read_cb) != 0)
        conn_close(k);
}

static void listener_close_cb(uv_handle_t *h)
{
    srv_unref(h->data);
}

/* The socket's folder (/run/gradmesh/CLUSTER outside systemd, where no RuntimeDirectory made
 * it): made 0750 when missing, the folders above it 0755; a failure shows up as the bind's
 * error. */
static void make_parent(const char *path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *slash = strrchr(path, '/');
    size_t i, n = slash != NULL ? (size_t)(slash - path) : 0;

    if (n == 0 || n >= sizeof(dir))
        return;
    memcpy(dir, path, n);
    dir[n] = '\0';
    for (i = 1; i <= n; i++) {
        if (dir[i] != '/' && dir[i] != '\0')
            continue;
        dir[i] = '\0';
        if (mkdir(dir, i == n ? 0750 : 0755) != 0 && errno != EEXIST) {
            gm_warn("event=control-mkdir dir=%s err=%d", dir, -errno);
            return;
        }
        if (i < n)
            dir[i] = '/';
    }
}

int gm_control_start(uv_loop_t *loop, const char *path, gm_control_fn fn, void *arg,
                     struct gm_control **out)
{
    struct gm_control *c;
    mode_t old;
    int err;

    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->fn = fn;
    c->arg = arg;
    err = uv_pipe_init(loop, &c->listener, 0);
    if (err != 0) {
        free(c);
        return err;
    }
    c->listener.data = c;
    c->open = 1;
    make_parent(path);
    (void)unlink(path); /* a stale socket from a crashed agent */
    old = umask(0177);  /* the socket is born 0600 */
    err = uv_pipe_bind(&c->listener, path);
    umask(old);
    if (err == 0)
        err = uv_listen((uv_stream_t *)&c->listener, 16, connection_cb);
    if (err != 0) {
        gm_err("event=control-listen path=%s err=%d msg=\"%s\"", path, err, uv_strerror(err));
        uv_close((uv_handle_t *)&c->listener, listener_close_cb);
        return err;
    }
    *out = c;
    return 0;
}

void gm_control_close(struct gm_control *c)
{
    struct conn *k;

    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    for (k = c->conns; k != NULL; k = k->next)
        conn_close(k);
    uv_close((uv_handle_t *)&c->listener, listener_close_cb);
}

int gm_control_call(const char *path, const char *req, int timeout_ms, char **resp)
{
    struct sockaddr_un sa;
    size_t len = strlen(req), off = 0, cap = GM_CONTROL_MAX, have = 0;
    uint64_t deadline = gm_time_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    char *buf = NULL;
    int fd, err = 0;

    *resp = NULL;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        err = -errno;
        goto out;
    }
    while (off <= len) {
        const char *p = off < len ? req + off : "\n";
        size_t n = off < len ? len - off : 1;
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = w < 0 ? -errno : -EIO;
            goto out;
        }
        off += (size_t)w;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t now = gm_time_mono_ns();
        ssize_t r;
        int pr;
        if (now >= deadline) {
            err = -ETIMEDOUT;
            goto out;
        }
        pr = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        r = read(fd, buf + have, cap - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = -errno;
            goto out;
        }
        have += (size_t)r;
        buf[have] = '\0';
        if (r == 0 || memchr(buf, '\n', have) != NULL || have >= cap - 1)
            break;
    }
    if (have == 0 || memchr(buf, '\n', have) == NULL) {
        err = -EPROTO;
        goto out;
    }
    *(char *)memchr(buf, '\n', have) = '\0';
    *resp = buf;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}
