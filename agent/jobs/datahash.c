/* agent/jobs/datahash.c - dataset file hashes (see datahash.h). */
#include "agent/jobs/datahash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

struct centry {
    struct centry *next;
    char path[2048];
    uint64_t size;
    int64_t mtime_ns;
    char sha256[65];
};

struct gm_datahash {
    uv_loop_t *loop;
    pthread_mutex_t mu;
    struct centry *cache; /* owned */
    unsigned inflight;
    bool freeing;
};

struct work {
    uv_work_t req;
    struct gm_datahash *d;
    char dir[1024];
    int recursive;
    gm_datahash_cb cb;
    void *arg;
    struct gm_jobfile *files;
    size_t n, cap;
    char error[GM_JOB_MSG_MAX];
};

static int hash_file(const char *path, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE], *buf;
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
    ssize_t r;

    buf = malloc(1 << 20);
    if (ctx == NULL || buf == NULL || fd < 0 || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        err = fd < 0 ? -errno : -ENOMEM;
        goto out;
    }
    while ((r = read(fd, buf, 1 << 20)) > 0)
        if (EVP_DigestUpdate(ctx, buf, (size_t)r) != 1) {
            err = -EIO;
            goto out;
        }
    if (r < 0 || EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32) {
        err = r < 0 ? -errno : -EIO;
        goto out;
    }
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = 0;
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    EVP_MD_CTX_free(ctx);
    return err;
}

static int cached(struct gm_datahash *d, const char *path, const struct stat *st, char out[65])
{
    int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    struct centry *e;
    int err;

    pthread_mutex_lock(&d->mu);
    for (e = d->cache; e != NULL; e = e->next)
        if (strcmp(e->path, path) == 0 && e->size == (uint64_t)st->st_size && e->mtime_ns == mt) {
            memcpy(out, e->sha256, 65);
            pthread_mutex_unlock(&d->mu);
            return 0;
        }
    pthread_mutex_unlock(&d->mu);
    if ((err = hash_file(path, out)) < 0)
        return err;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return 0; /* hashed, just not cached */
    snprintf(e->path, sizeof(e->path), "%s", path);
    e->size = (uint64_t)st->st_size;
    e->mtime_ns = mt;
    memcpy(e->sha256, out, 65);
    pthread_mutex_lock(&d->mu);
    e->next = d->cache;
    d->cache = e;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

static int walk(struct work *w, const char *rel)
{
    char path[2048];
    DIR *dir;
    struct dirent *de;
    int err = 0;

    snprintf(path, sizeof(path), "%s%s%s", w->dir, rel[0] ? "/" : "", rel);
    dir = opendir(path);
    if (dir == NULL)
        return -errno;
    while ((de = readdir(dir)) != NULL && err == 0) {
        char r2[1024], full[2048];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if ((size_t)snprintf(r2, sizeof(r2), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
            sizeof(w->files[0].name))
            continue; /* too long to name on the wire: not part of a dataset we read */
        snprintf(full, sizeof(full), "%s/%s", w->dir, r2);
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (w->recursive)
                err = walk(w, r2);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if (w->n == w->cap) {
            size_t cap = w->cap ? w->cap * 2 : 16;
            struct gm_jobfile *nf;
            if (cap > GM_JOB_FILES_MAX) {
                snprintf(w->error, sizeof(w->error), "%.300s: more than %d files", w->dir,
                         GM_JOB_FILES_MAX);
                err = -E2BIG;
                break;
            }
            nf = realloc(w->files, cap * sizeof(*nf));
            if (nf == NULL) {
                err = -ENOMEM;
                break;
            }
            w->files = nf;
            w->cap = cap;
        }
        struct gm_jobfile *f = &w->files[w->n];
        memset(f, 0, sizeof(*f));
        snprintf(f->name, sizeof(f->name), "%.255s", r2);
        f->size = (uint64_t)st.st_size;
        if ((err = cached(w->d, full, &st, f->sha256)) < 0) {
            snprintf(w->error, sizeof(w->error), "%.400s: %s", full, strerror(-err));
            break;
        }
        w->n++;
    }
    closedir(dir);
    return err;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct gm_jobfile *)a)->name, ((const struct gm_jobfile *)b)->name);
}

static void work_cb(uv_work_t *req)
{
    struct work *w = req->data;
    int err = walk(w, "");

    if (err < 0 && w->error[0] == 0)
        snprintf(w->error, sizeof(w->error), "%.300s: %s", w->dir, strerror(-err));
    if (err == 0 && w->n == 0)
        snprintf(w->error, sizeof(w->error), "%.300s: no data files", w->dir);
    if (w->n > 1)
        qsort(w->files, w->n, sizeof(*w->files), by_name);
}

static void free_all(struct gm_datahash *d)
{
    struct centry *e;

    while ((e = d->cache) != NULL) {
        d->cache = e->next;
        free(e);
    }
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static void after_cb(uv_work_t *req, int status)
{
    struct work *w = req->data;
    struct gm_datahash *d = w->d;

    if (status < 0 && w->error[0] == 0)
        snprintf(w->error, sizeof(w->error), "%.300s: %s", w->dir, uv_strerror(status));
    d->inflight--;
    w->cb(w->arg, w->files, w->n, w->error);
    free(w);
    if (d->freeing && d->inflight == 0)
        free_all(d);
}

int gm_datahash_new(uv_loop_t *loop, struct gm_datahash **out)
{
    struct gm_datahash *d = calloc(1, sizeof(*d));

    *out = NULL;
    if (d == NULL)
        return -ENOMEM;
    d->loop = loop;
    pthread_mutex_init(&d->mu, NULL);
    *out = d;
    return 0;
}

void gm_datahash_free(struct gm_datahash *d)
{
    if (d == NULL)
        return;
    d->freeing = true;
    if (d->inflight == 0)
        free_all(d);
}

int gm_datahash_start(struct gm_datahash *d, const char *dir, int recursive, gm_datahash_cb cb,
                      void *arg)
{
    struct work *w = calloc(1, sizeof(*w));
    int err;

    if (w == NULL)
        return -ENOMEM;
    w->req.data = w;
    w->d = d;
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    w->recursive = recursive;
    w->cb = cb;
    w->arg = arg;
    if ((err = uv_queue_work(d->loop, &w->req, work_cb, after_cb)) < 0) {
        free(w);
        return err;
    }
    d->inflight++;
    return 0;
}
