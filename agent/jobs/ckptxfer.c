/*
 * agent/jobs/ckptxfer.c - the checkpoint room (see ckptxfer.h): CKPT_DATA / CKPT_ACK, the
 * receiving side's temp file and running hash, the sender's holder table.
 */
#include "agent/jobs/ckptxfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "agent/cluster/chief.h"
#include "agent/cluster/chieffsm.h"
#include "agent/net/jsonmsg.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/core/state.h"
#include "common/byteorder.h"
#include "common/file.h"
#include "common/log.h"
#include "common/time.h"
#include "train/ckpt/ckpt.h"

#define NODE_LEN (GM_ID_NAME_MAX + 1)

struct rx {
    struct rx *next;
    char node[NODE_LEN];
    uint64_t req;
    struct gm_ckptx_hdr h;
    int fd;
    char final[1100], tmp[1200];
    EVP_MD_CTX *md; /* owned */
    uint64_t got;
    bool skip; /* nothing to write into (refused here, answered): swallow its chunks */
};

struct sendbuf {
    struct gm_ckptx *x;
    unsigned refs;
    uint8_t *data; /* owned: header then the file */
    size_t len;
};

struct gm_ckptx {
    struct gm_ckptx_env env;
    struct rx *rx; /* transfers being received, one per peer at most */
    uint64_t req_seq;
    struct gm_ckpt_held held[GM_CKPTX_HELD_MAX]; /* ring, oldest overwritten */
    size_t nheld, held_next;
    uint64_t held_order[GM_CKPTX_HELD_MAX], order_seq;
    void (*on_held)(void *arg, const struct gm_ckpt_held *h);
    void *held_arg;
    struct gm_ckptx_disk disk;
    struct gm_ckptx_refusal refusals[GM_CKPTX_REFUSALS_MAX]; /* one per node at most */
    size_t nrefusals;
};

/* --- payloads ----------------------------------------------------------------------------- */

int gm_ckptx_hdr_encode(const struct gm_ckptx_hdr *h, uint8_t *buf, size_t cap, size_t *len)
{
    json_t *o;
    char *s;
    size_t n;
    int err;

    *len = 0;
    if (!gm_jsonmsg_is_hex(h->key, GM_CKPTX_KEY_LEN) || !gm_jsonmsg_is_hex(h->sha256, 64) ||
        h->step < 0 || h->bytes > GM_CKPTX_FILE_MAX || h->keep < 1 || h->term > (uint64_t)INT64_MAX)
        return -EINVAL;
    o = json_pack("{s:s,s:I,s:s,s:I,s:i,s:I}", "key", h->key, "step", (json_int_t)h->step, "sha256",
                  h->sha256, "bytes", (json_int_t)h->bytes, "keep", h->keep, "term",
                  (json_int_t)h->term);
    if ((err = gm_jsonmsg_dump(o, &s, &n)) < 0)
        return err;
    if (n > GM_CKPTX_HDR_MAX || 4 + n > cap) {
        free(s);
        return -ENOBUFS;
    }
    gm_put_be32(buf, (uint32_t)n);
    memcpy(buf + 4, s, n);
    free(s);
    *len = 4 + n;
    return 0;
}

int gm_ckptx_hdr_decode(const uint8_t *p, size_t len, struct gm_ckptx_hdr *h, size_t *used)
{
    json_t *o;
    uint32_t n;
    uint64_t step, keep;
    int err;

    memset(h, 0, sizeof(*h));
    *used = 0;
    if (len < 4)
        return GM_ERR_PROTO;
    n = gm_get_be32(p);
    if (n == 0 || n > GM_CKPTX_HDR_MAX || n > len - 4)
        return GM_ERR_PROTO;
    o = gm_jsonmsg_load(p + 4, n);
    if (o == NULL || json_object_size(o) != 6) {
        json_decref(o);
        return GM_ERR_PROTO;
    }
    err = gm_jsonmsg_get_hex(o, "key", h->key, sizeof(h->key), GM_CKPTX_KEY_LEN);
    if (err == 0)
        err = gm_jsonmsg_get_hex(o, "sha256", h->sha256, sizeof(h->sha256), 64);
    if (err == 0)
        err = gm_jsonmsg_get_uint(o, "step", 9999999999ull, &step);
    if (err == 0)
        err = gm_jsonmsg_get_uint(o, "bytes", GM_CKPTX_FILE_MAX, &h->bytes);
    if (err == 0)
        err = gm_jsonmsg_get_uint(o, "keep", 1000000, &keep);
    if (err == 0)
        err = gm_jsonmsg_get_uint(o, "term", (uint64_t)INT64_MAX, &h->term);
    json_decref(o);
    if (err == 0 && keep < 1)
        err = GM_ERR_PROTO;
    if (err != 0) {
        memset(h, 0, sizeof(*h));
        return err;
    }
    h->step = (long)step;
    h->keep = (int)keep;
    *used = 4 + n;
    return 0;
}

int gm_ckptx_ack_encode(const struct gm_ckptx_ack *a, char **json, size_t *len)
{
    json_t *o;

    *json = NULL;
    *len = 0;
    if (!gm_jsonmsg_is_hex(a->key, GM_CKPTX_KEY_LEN) || !gm_jsonmsg_is_hex(a->sha256, 64) ||
        a->step < 0 || !gm_jsonmsg_printable(a->error))
        return -EINVAL;
    o = json_pack("{s:s,s:I,s:s,s:b}", "key", a->key, "step", (json_int_t)a->step, "sha256",
                  a->sha256, "ok", a->ok);
    if (o == NULL)
        return -ENOMEM;
    if (!a->ok && json_object_set_new(o, "error", json_string(a->error)) != 0) {
        json_decref(o);
        return -ENOMEM;
    }
    return gm_jsonmsg_dump(o, json, len);
}

int gm_ckptx_ack_decode(const uint8_t *p, size_t len, struct gm_ckptx_ack *a)
{
    json_t *o = gm_jsonmsg_load(p, len);
    uint64_t step;
    json_t *ok;
    int err;

    memset(a, 0, sizeof(*a));
    if (o == NULL)
        return GM_ERR_PROTO;
    ok = json_object_get(o, "ok");
    err = json_is_boolean(ok) ? 0 : GM_ERR_PROTO;
    if (err == 0)
        err = gm_jsonmsg_get_hex(o, "key", a->key, sizeof(a->key), GM_CKPTX_KEY_LEN);
    if (err == 0)
        err = gm_jsonmsg_get_hex(o, "sha256", a->sha256, sizeof(a->sha256), 64);
    if (err == 0)
        err = gm_jsonmsg_get_uint(o, "step", 9999999999ull, &step);
    if (err == 0) {
        a->ok = json_is_true(ok);
        if (a->ok)
            err = json_object_size(o) == 4 ? 0 : GM_ERR_PROTO;
        else if (json_object_size(o) != 5)
            err = GM_ERR_PROTO;
        else
            err = gm_jsonmsg_get_str(o, "error", a->error, sizeof(a->error), GM_JSONMSG_PRINTABLE);
    }
    json_decref(o);
    if (err != 0) {
        memset(a, 0, sizeof(*a));
        return err;
    }
    a->step = (long)step;
    return 0;
}

/* --- holders ------------------------------------------------------------------------------- */

static struct gm_ckpt_held *held_find(struct gm_ckptx *x, const char *key, long step,
                                      const char *sha)
{
    for (size_t i = 0; i < x->nheld; i++)
        if (x->held[i].step == step && strcmp(x->held[i].key, key) == 0 &&
            strcmp(x->held[i].sha256, sha) == 0)
            return &x->held[i];
    return NULL;
}

static void held_add(struct gm_ckptx *x, const char *key, long step, const char *sha, uint64_t term,
                     const char *node)
{
    struct gm_ckpt_held *h = held_find(x, key, step, sha);

    if (h == NULL) {
        size_t i = x->nheld < GM_CKPTX_HELD_MAX ? x->nheld++ : x->held_next;
        x->held_next = (i + 1) % GM_CKPTX_HELD_MAX;
        h = &x->held[i];
        memset(h, 0, sizeof(*h));
        snprintf(h->key, sizeof(h->key), "%s", key);
        snprintf(h->sha256, sizeof(h->sha256), "%s", sha);
        h->step = step;
        h->term = term;
        h->t_ns = gm_time_mono_ns();
        x->held_order[i] = ++x->order_seq;
    }
    for (size_t i = 0; i < h->nholders; i++)
        if (strcmp(h->holders[i], node) == 0)
            return;
    if (h->nholders == GM_CKPTX_HOLDERS_MAX)
        return;
    snprintf(h->holders[h->nholders++], NODE_LEN, "%s", node);
    if (x->on_held != NULL)
        x->on_held(x->held_arg, h);
}

size_t gm_ckptx_held(const struct gm_ckptx *x, struct gm_ckpt_held *out, size_t cap)
{
    size_t idx[GM_CKPTX_HELD_MAX], n = x->nheld;

    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = 1; i < n; i++) { /* newest first: step, then arrival */
        size_t k = idx[i], j = i;
        while (j > 0 && (x->held[idx[j - 1]].step < x->held[k].step ||
                         (x->held[idx[j - 1]].step == x->held[k].step &&
                          x->held_order[idx[j - 1]] < x->held_order[k]))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = k;
    }
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = x->held[idx[i]];
    return n;
}

double gm_ckptx_newest_age_s(const struct gm_ckptx *x)
{
    uint64_t newest = 0;

    for (size_t i = 0; i < x->nheld; i++)
        if (x->held[i].t_ns > newest)
            newest = x->held[i].t_ns;
    return x->nheld == 0 ? -1 : (double)(gm_time_mono_ns() - newest) * 1e-9;
}

void gm_ckptx_set_on_held(struct gm_ckptx *x, void (*fn)(void *arg, const struct gm_ckpt_held *h),
                          void *arg)
{
    x->on_held = fn;
    x->held_arg = arg;
}

/* --- sending ------------------------------------------------------------------------------ */

static void sendbuf_unref(struct sendbuf *b)
{
    if (b != NULL && --b->refs == 0) {
        free(b->data);
        free(b);
    }
}

static void send_done(void *arg, int err)
{
    struct sendbuf *b = arg;

    if (err != 0)
        gm_warn("event=checkpoint-send-failed err=\"%s\"", gm_strerror(err));
    sendbuf_unref(b);
}

void gm_ckptx_send(struct gm_ckptx *x, const char *key, const char *path, const char *sha256,
                   long step, int keep, uint64_t term, const char (*nodes)[GM_ID_NAME_MAX + 1],
                   size_t n)
{
    struct gm_ckptx_hdr h = {.step = step, .keep = keep, .term = term};
    uint8_t hdr[4 + GM_CKPTX_HDR_MAX];
    struct sendbuf *b = NULL;
    char *file = NULL;
    size_t flen = 0, hlen = 0;
    int err;

    held_add(x, key, step, sha256, term, x->env.node);
    x->disk.full = false; /* this node's own one fit */
    if (n == 0)
        return;
    err = gm_file_read(path, GM_CKPTX_FILE_MAX, &file, &flen);
    if (err != 0) {
        gm_err("event=checkpoint-send-failed path=%s err=\"%s\"", path, gm_strerror(err));
        return;
    }
    snprintf(h.key, sizeof(h.key), "%s", key);
    snprintf(h.sha256, sizeof(h.sha256), "%s", sha256);
    h.bytes = flen;
    b = calloc(1, sizeof(*b));
    if (b == NULL || (err = gm_ckptx_hdr_encode(&h, hdr, sizeof(hdr), &hlen)) != 0 ||
        (b->data = malloc(hlen + flen + 1)) == NULL) {
        gm_err("event=checkpoint-send-failed path=%s err=\"%s\"", path,
               gm_strerror(b == NULL  ? -ENOMEM
                           : err != 0 ? err
                                      : -ENOMEM));
        free(b);
        free(file);
        return;
    }
    memcpy(b->data, hdr, hlen);
    memcpy(b->data + hlen, file, flen);
    free(file);
    b->len = hlen + flen;
    b->x = x;
    b->refs = 1; /* ours, dropped below */
    for (size_t i = 0; i < n; i++) {
        struct gm_link *l = x->env.link_to(x->env.agent, nodes[i]);
        if (l == NULL) {
            gm_warn("event=checkpoint-send-skipped peer=%s step=%ld: no link", nodes[i], step);
            continue;
        }
        b->refs++;
        err = gm_link_send_bulk(l, GM_MSG_CKPT_DATA, ++x->req_seq, b->data, b->len, send_done, b);
        if (err != 0) {
            b->refs--;
            gm_warn("event=checkpoint-send-failed peer=%s step=%ld err=\"%s\"", nodes[i], step,
                    gm_strerror(err));
            continue;
        }
        gm_info("event=checkpoint-send peer=%s key=%s step=%ld bytes=%zu", nodes[i], key, step,
                flen);
    }
    sendbuf_unref(b);
}

/* --- receiving ---------------------------------------------------------------------------- */

static struct rx *rx_find(struct gm_ckptx *x, const char *node)
{
    for (struct rx *r = x->rx; r != NULL; r = r->next)
        if (strcmp(r->node, node) == 0)
            return r;
    return NULL;
}

static void rx_drop(struct gm_ckptx *x, struct rx *r)
{
    for (struct rx **pp = &x->rx; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    if (r->fd >= 0) {
        close(r->fd);
        unlink(r->tmp);
    }
    EVP_MD_CTX_free(r->md);
    free(r);
}

static void send_ack(struct gm_ckptx *x, const char *node, const struct gm_ckptx_hdr *h,
                     const char *error)
{
    struct gm_ckptx_ack a = {.step = h->step, .ok = error == NULL};
    struct gm_link *l = x->env.link_to(x->env.agent, node);
    char *json = NULL;
    size_t len;

    snprintf(a.key, sizeof(a.key), "%s", h->key);
    snprintf(a.sha256, sizeof(a.sha256), "%s", h->sha256);
    snprintf(a.error, sizeof(a.error), "%s", error != NULL ? error : "");
    if (l == NULL || gm_ckptx_ack_encode(&a, &json, &len) != 0 ||
        gm_link_send(l, GM_MSG_CKPT_ACK, 0, json, len) != 0)
        gm_warn("event=checkpoint-ack-unsent peer=%s step=%ld", node, h->step);
    free(json);
}

/* Whether err is a file system out of room (space, or the user's quota). */
static bool no_space(int err)
{
    return err == -ENOSPC || err == -EDQUOT;
}

/* A replica of peer's checkpoint could not be stored here (err, at path): said once, and as a
 * full disk when it is one. */
/* A full disk: remembered for status and the metrics. */
static void note_full(struct gm_ckptx *x, const char *peer, long step, const char *path)
{
    x->disk.full = true;
    x->disk.enospc++;
    snprintf(x->disk.path, sizeof(x->disk.path), "%s", path);
    snprintf(x->disk.peer, sizeof(x->disk.peer), "%s", peer);
    x->disk.step = step;
    x->disk.t_ns = gm_time_mono_ns();
}

static void rx_note_failure(struct gm_ckptx *x, const char *peer, long step, const char *path,
                            int err)
{
    if (!no_space(err)) {
        gm_err("event=checkpoint-receive-failed peer=%s step=%ld path=%s err=\"%s\"", peer, step,
               path, gm_strerror(err));
        return;
    }
    note_full(x, peer, step, path);
    gm_err("event=disk-full path=%s what=checkpoint-replica peer=%s step=%ld err=\"%s\": this "
           "node holds no copy of that checkpoint and stays in the job; free space in %s",
           path, peer, step, gm_strerror(err), x->env.state_dir);
}

void gm_ckptx_write_failed(struct gm_ckptx *x, const char *path, long step, int err)
{
    if (!no_space(err))
        return; /* the writer logged it (event=checkpoint-failed) */
    note_full(x, x->env.node, step, path);
    gm_err("event=disk-full path=%s what=checkpoint step=%ld err=\"%s\": this node's checkpoint "
           "was not written; the one before stays the newest and training goes on; free space "
           "in %s",
           path, step, gm_strerror(err), x->env.state_dir);
}

/* A transfer that cannot be stored: the temp file goes, the sender hears why, and the rest of
 * its chunks are swallowed (the link is fine). */
static void rx_fail(struct gm_ckptx *x, struct rx *r, int err)
{
    rx_note_failure(x, r->node, r->h.step, r->tmp[0] ? r->tmp : r->final, err);
    send_ack(x, r->node, &r->h, gm_strerror(err));
    if (r->fd >= 0) {
        close(r->fd);
        unlink(r->tmp);
        r->fd = -1;
    }
    r->skip = true;
}

/* A header arrived: make the temp file. */
static int rx_begin(struct gm_ckptx *x, const char *node, uint64_t req,
                    const struct gm_ckptx_hdr *h, struct rx **out)
{
    struct rx *r = calloc(1, sizeof(*r));
    char dir[1100];
    int err;

    *out = NULL;
    if (r == NULL)
        return -ENOMEM;
    r->fd = -1;
    snprintf(r->node, sizeof(r->node), "%s", node);
    r->req = req;
    r->h = *h;
    snprintf(dir, sizeof(dir), "%s/checkpoints/%s", x->env.state_dir, h->key);
    if ((err = gm_ckpt_mkdirs(dir)) != 0 ||
        (err = gm_ckpt_path(dir, h->step, r->final, sizeof(r->final))) != 0) {
        rx_note_failure(x, node, h->step, dir, err);
        free(r);
        return err;
    }
    snprintf(r->tmp, sizeof(r->tmp), "%s.tmp.%ld", r->final, (long)getpid());
    (void)unlink(r->tmp);
    r->md = EVP_MD_CTX_new();
    if (r->md == NULL || EVP_DigestInit_ex(r->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(r->md);
        free(r);
        return -ENOMEM;
    }
    r->fd = open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (r->fd < 0) {
        err = -errno;
        rx_note_failure(x, node, h->step, r->tmp, err);
        EVP_MD_CTX_free(r->md);
        free(r);
        return err;
    }
    r->next = x->rx;
    x->rx = r;
    *out = r;
    return 0;
}

static int rx_write(struct rx *r, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(r->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        if (EVP_DigestUpdate(r->md, p, (size_t)w) != 1)
            return -ENOMEM;
        p += w;
        n -= (size_t)w;
        r->got += (uint64_t)w;
    }
    return 0;
}

/* The last chunk: check, commit, prune, answer. */
static void rx_finish(struct gm_ckptx *x, struct rx *r)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char hex[65], line[1300], shapath[1300];
    const char *why = NULL;
    const char *slash = strrchr(r->final, '/');
    int err = 0;

    if (r->got != r->h.bytes)
        why = "length differs from the announced one";
    if (why == NULL && (EVP_DigestFinal_ex(r->md, md, &mdlen) != 1 || mdlen != 32))
        why = "cannot hash";
    if (why == NULL) {
        for (unsigned i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
        if (strcmp(hex, r->h.sha256) != 0)
            why = "SHA-256 differs from the announced one";
    }
    if (why == NULL && fsync(r->fd) != 0)
        err = -errno;
    snprintf(shapath, sizeof(shapath), "%s" GM_CKPT_SHA_SUFFIX, r->final);
    if (why == NULL && err == 0) {
        err = close(r->fd) != 0 ? -errno : 0;
        r->fd = -1;
        /* an older copy of this step is uncommitted first (see gm_ckpt_write) */
        if (err == 0 && unlink(shapath) != 0 && errno != ENOENT)
            err = -errno;
        if (err == 0 && rename(r->tmp, r->final) != 0)
            err = -errno;
        if (err != 0)
            unlink(r->tmp);
    }
    if (why == NULL && err == 0) {
        snprintf(line, sizeof(line), "%s  %s\n", hex, slash != NULL ? slash + 1 : r->final);
        err = gm_file_sync_dir(r->final);
        if (err == 0)
            err = gm_file_write_atomic(shapath, line, strlen(line), 0644);
    }
    if (why == NULL && err != 0) {
        why = gm_strerror(err);
        rx_note_failure(x, r->node, r->h.step, r->final, err);
        (void)unlink(r->final); /* no .sha256 beside it: not committed; it only takes room */
    } else if (why != NULL) {
        gm_err("event=checkpoint-receive-failed peer=%s step=%ld path=%s reason=\"%s\"", r->node,
               r->h.step, r->final, why);
    }
    if (why == NULL) {
        x->disk.full = false; /* this one fit */
        char dir[1200];
        gm_info("event=checkpoint-received peer=%s key=%s step=%ld bytes=%llu sha256=%s path=%s",
                r->node, r->h.key, r->h.step, (unsigned long long)r->got, r->h.sha256, r->final);
        held_add(x, r->h.key, r->h.step, r->h.sha256, r->h.term, r->node);
        held_add(x, r->h.key, r->h.step, r->h.sha256, r->h.term, x->env.node);
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - r->final), r->final);
        if (gm_ckpt_dir_prune(dir, r->h.keep) != 0)
            gm_warn("event=checkpoint-prune-failed dir=%s", dir);
    }
    send_ack(x, r->node, &r->h, why);
    rx_drop(x, r);
}

static int on_data(struct gm_ckptx *x, const char *node, const struct gm_frame_hdr *fh,
                   const uint8_t *p)
{
    struct rx *r = rx_find(x, node);
    size_t used = 0;
    uint64_t got0;
    int err;

    if (r != NULL && r->req != fh->req) {
        gm_warn("event=checkpoint-receive-failed peer=%s: a new transfer inside another", node);
        rx_drop(x, r);
        return GM_ERR_PROTO;
    }
    if (r == NULL) {
        struct gm_ckptx_hdr h;
        if (gm_ckptx_hdr_decode(p, fh->len, &h, &used) != 0)
            return GM_ERR_PROTO;
        err = rx_begin(x, node, fh->req, &h, &r);
        if (err != 0) {
            /* nothing to write into: say so, and swallow the rest of it (the link is fine) */
            send_ack(x, node, &h, gm_strerror(err));
            if ((r = calloc(1, sizeof(*r))) == NULL)
                return -ENOMEM;
            r->fd = -1;
            r->skip = true;
            r->req = fh->req;
            r->h = h;
            snprintf(r->node, sizeof(r->node), "%s", node);
            r->next = x->rx;
            x->rx = r;
        }
    }
    if (r->got + (fh->len - used) > r->h.bytes) {
        rx_drop(x, r);
        return GM_ERR_PROTO;
    }
    if (r->skip) {
        r->got += fh->len - used;
        if (!(fh->flags & GM_FRAME_F_MORE))
            rx_drop(x, r);
        return 0;
    }
    got0 = r->got;
    err = rx_write(r, p + used, fh->len - used);
    if (err != 0) {
        rx_fail(x, r, err);
        r->got = got0 + (fh->len - used);
        if (!(fh->flags & GM_FRAME_F_MORE))
            rx_drop(x, r);
        return 0;
    }
    if (!(fh->flags & GM_FRAME_F_MORE))
        rx_finish(x, r);
    return 0;
}

/* A member's answer: a refusal is remembered (the last per node), a copy of one of ours it
 * stored clears its refusal of that job's. */
static void refusal_set(struct gm_ckptx *x, const char *node, const struct gm_ckptx_ack *a)
{
    size_t i;

    for (i = 0; i < x->nrefusals; i++)
        if (strcmp(x->refusals[i].node, node) == 0)
            break;
    if (a->ok) {
        if (i < x->nrefusals && strcmp(x->refusals[i].key, a->key) == 0)
            x->refusals[i] = x->refusals[--x->nrefusals];
        return;
    }
    if (i == x->nrefusals) {
        if (x->nrefusals == GM_CKPTX_REFUSALS_MAX)
            i = 0; /* the first one's place: a bounded list */
        else
            x->nrefusals++;
    }
    snprintf(x->refusals[i].node, sizeof(x->refusals[i].node), "%s", node);
    snprintf(x->refusals[i].key, sizeof(x->refusals[i].key), "%s", a->key);
    x->refusals[i].step = a->step;
    snprintf(x->refusals[i].error, sizeof(x->refusals[i].error), "%s", a->error);
}

static int on_ack(struct gm_ckptx *x, const char *node, const struct gm_frame_hdr *fh,
                  const uint8_t *p)
{
    struct gm_ckptx_ack a;
    struct gm_ckpt_held *h;

    if (gm_ckptx_ack_decode(p, fh->len, &a) != 0)
        return GM_ERR_PROTO;
    if (!a.ok) {
        refusal_set(x, node, &a);
        gm_warn("event=checkpoint-not-replicated peer=%s key=%s step=%ld reason=\"%s\": it holds "
                "no copy of it",
                node, a.key, a.step, a.error);
        return 0;
    }
    h = held_find(x, a.key, a.step, a.sha256);
    if (h == NULL) { /* not one we sent (or one long gone): nothing to record */
        gm_debug("event=checkpoint-ack-unknown peer=%s key=%s step=%ld", node, a.key, a.step);
        return 0;
    }
    refusal_set(x, node, &a); /* it holds one of the job's again */
    held_add(x, a.key, a.step, a.sha256, h->term, node);
    gm_info("event=checkpoint-replicated peer=%s key=%s step=%ld sha256=%s holders=%zu", node,
            a.key, a.step, a.sha256, h->nholders);
    return 0;
}

int gm_ckptx_on_frame(struct gm_ckptx *x, const char *node, const struct gm_frame_hdr *h,
                      const uint8_t *p)
{
    switch (h->type) {
    case GM_MSG_CKPT_DATA:
        return on_data(x, node, h, p);
    case GM_MSG_CKPT_ACK:
        return on_ack(x, node, h, p);
    default:
        return GM_ERR_PROTO;
    }
}

void gm_ckptx_link_down(struct gm_ckptx *x, const char *node)
{
    struct rx *r = rx_find(x, node);

    if (r != NULL) {
        gm_warn("event=checkpoint-receive-aborted peer=%s step=%ld: link down", node, r->h.step);
        rx_drop(x, r);
    }
}

int gm_ckptx_new(const struct gm_ckptx_env *env, struct gm_ckptx **out)
{
    struct gm_ckptx *x = calloc(1, sizeof(*x));

    *out = NULL;
    if (x == NULL)
        return -ENOMEM;
    x->env = *env;
    *out = x;
    return 0;
}

void gm_ckptx_free(struct gm_ckptx *x)
{
    if (x == NULL)
        return;
    while (x->rx != NULL)
        rx_drop(x, x->rx);
    free(x);
}

json_t *gm_ckptx_ctl_list(struct gm_ckptx *x)
{
    struct gm_ckpt_held held[GM_CKPTX_HELD_MAX];
    size_t n = gm_ckptx_held(x, held, GM_CKPTX_HELD_MAX);
    json_t *arr = json_array(), *o;
    char dir[1100];

    if (arr == NULL)
        return NULL;
    for (size_t i = 0; i < n && i < GM_CKPTX_HELD_MAX; i++) {
        json_t *hs = json_array();
        for (size_t k = 0; hs != NULL && k < held[i].nholders; k++)
            json_array_append_new(hs, json_string(held[i].holders[k]));
        json_array_append_new(arr, json_pack("{s:s,s:I,s:s,s:I,s:o}", "key", held[i].key, "step",
                                             (json_int_t)held[i].step, "sha256", held[i].sha256,
                                             "term", (json_int_t)held[i].term, "holders",
                                             hs != NULL ? hs : json_array()));
    }
    snprintf(dir, sizeof(dir), "%s/checkpoints", x->env.state_dir);
    o = json_pack("{s:s,s:s,s:o}", "node", x->env.node, "dir", dir, "held", arr);
    if (o == NULL)
        return NULL;
    arr = json_array();
    for (size_t i = 0; arr != NULL && i < x->nrefusals; i++)
        json_array_append_new(arr,
                              json_pack("{s:s,s:s,s:I,s:s}", "node", x->refusals[i].node, "key",
                                        x->refusals[i].key, "step", (json_int_t)x->refusals[i].step,
                                        "error", x->refusals[i].error));
    json_object_set_new(o, "not_held", arr != NULL ? arr : json_array());
    json_object_set_new(o, "disk", gm_ckptx_disk_json(x));
    return o;
}

void gm_ckptx_disk(const struct gm_ckptx *x, struct gm_ckptx_disk *out)
{
    *out = x->disk;
}

json_t *gm_ckptx_disk_json(const struct gm_ckptx *x)
{
    const struct gm_ckptx_disk *d = &x->disk;

    if (d->enospc == 0)
        return json_pack("{s:b,s:I}", "full", 0, "enospc_total", (json_int_t)0);
    return json_pack("{s:b,s:I,s:s,s:s,s:s,s:I,s:f}", "full", d->full, "enospc_total",
                     (json_int_t)d->enospc, "error", strerror(ENOSPC), "path", d->path, "peer",
                     d->peer, "step", (json_int_t)d->step, "age_s",
                     (double)(gm_time_mono_ns() - d->t_ns) * 1e-9);
}

/* --- the room ------------------------------------------------------------------------------ */

static struct gm_link *link_to(void *agent, const char *node)
{
    return gm_agent_up_link(agent, node);
}

static int on_frame(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                    const uint8_t *p)
{
    struct gm_lctx *c = gm_link_data(l);
    int err = gm_ckptx_on_frame(a->ckptx, c->node, h, p);

    return err < 0 ? gm_agent_refuse(l, err, "malformed or unexpected checkpoint message") : 0;
}

static json_t *cmd_checkpoints(struct gm_agent *a, json_t *req)
{
    (void)req;
    return gm_ckptx_ctl_list(a->ckptx);
}

static const struct gm_room_frame frames[] = {
    {GM_MSG_CKPT_DATA, GM_LSTATE_UP, on_frame},
    {GM_MSG_CKPT_ACK, GM_LSTATE_UP, on_frame},
};

static const struct gm_room_command commands[] = {
    {"checkpoints", cmd_checkpoints},
};

static void room_link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    (void)err;
    gm_ckptx_link_down(a->ckptx, p->node);
}

const struct gm_room gm_ckpt_room = {
    .name = "checkpoint",
    .frames = frames,
    .nframes = sizeof(frames) / sizeof(frames[0]),
    .commands = commands,
    .ncommands = sizeof(commands) / sizeof(commands[0]),
    .link_down = room_link_down,
};

/*
 * The commit rule.  A checkpoint gained a holder: on the chief, once the voters (and
 * witnesses) holding it are a majority of the recorded ones, it is committed to the
 * replicated state: job key, step, SHA-256, the chief's term and its holders.  Each later
 * holder updates the record.  A jobs rule, kept here in the checkpoint room: the consensus
 * room below only stores what it is given (gm_chief_propose).
 */
static void on_ckpt_held(void *arg, const struct gm_ckpt_held *h)
{
    struct gm_agent *a = arg;
    const struct gm_chief_fsm *f = gm_chief_state(a);
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_CHECKPOINT};
    unsigned voters, held = 0;
    char what[96];
    int err;

    if (f == NULL || !gm_chief_is_leader(a))
        return;
    voters = gm_chief_fsm_recorded_voters(f);
    for (size_t i = 0; i < h->nholders; i++) {
        const struct gm_chief_member *m = gm_chief_fsm_member(f, h->holders[i]);
        held += m != NULL && m->role != GM_CHIEF_ROLE_SPARE;
        if (c.nholders < GM_CHIEF_HOLDERS_MAX)
            snprintf(c.holders[c.nholders++], sizeof(c.holders[0]), "%s", h->holders[i]);
    }
    if (voters == 0 || 2 * held <= voters)
        return; /* not yet held by a majority */
    c.term = gm_chief_term(a);
    c.step = h->step;
    snprintf(c.job, sizeof(c.job), "%s", h->key);
    snprintf(c.sha256, sizeof(c.sha256), "%s", h->sha256);
    snprintf(what, sizeof(what), "checkpoint %s step %ld (%u of %u voters)", h->key, h->step, held,
             voters);
    if ((err = gm_chief_propose(a, &c, what)) != 0)
        gm_info("event=chief-checkpoint-unrecorded key=%s step=%ld err=%d", h->key, h->step, err);
}

int gm_ckptroom_open(struct gm_agent *a)
{
    struct gm_ckptx_env env = {
        .node = a->cfg.node, .state_dir = a->cfg.state_dir, .link_to = link_to, .agent = a};
    int err = gm_ckptx_new(&env, &a->ckptx);

    if (err == 0)
        gm_ckptx_set_on_held(a->ckptx, on_ckpt_held, a);
    return err;
}
