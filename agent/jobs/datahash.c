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
            if (cap > GM_DATAHASH_FILES_MAX) {
                snprintf(w->error, sizeof(w->error), "%.300s: more than %u files", w->dir,
                         GM_DATAHASH_FILES_MAX);
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
        f->count = 1;
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

/* A group's key for file name: "dir/" or the top-level file's name; "#xx" for a bucket. */
static int group_key(const char *name, enum gm_jobfile_group g, char key[256])
{
    static const char hex[] = "0123456789abcdef";
    const char *slash;

    if (g == GM_JOBFILE_GROUP_BUCKET) {
        unsigned char md[32];
        unsigned int len = 0;
        if (EVP_Digest(name, strlen(name), md, &len, EVP_sha256(), NULL) != 1)
            return -ENOMEM;
        key[0] = '#';
        key[1] = hex[md[0] >> 4];
        key[2] = hex[md[0] & 15];
        key[3] = 0;
        return 0;
    }
    slash = g == GM_JOBFILE_GROUP_DIR ? strchr(name, '/') : NULL;
    snprintf(key, 256, "%.*s", slash ? (int)(slash - name + 1) : 255, name);
    return 0;
}

enum gm_jobfile_group gm_datahash_pick(const struct gm_jobfile *files, size_t n)
{
    size_t tops = 0;
    char prev[256] = "", key[256];

    if (n <= GM_JOB_FILES_MAX)
        return GM_JOBFILE_GROUP_FILE;
    for (size_t i = 0; i < n; i++) { /* sorted: a folder's files are together */
        (void)group_key(files[i].name, GM_JOBFILE_GROUP_DIR, key); /* cannot fail */
        if (i == 0 || strcmp(key, prev) != 0)
            tops++;
        memcpy(prev, key, sizeof(prev));
    }
    return tops <= GM_JOB_FILES_MAX ? GM_JOBFILE_GROUP_DIR : GM_JOBFILE_GROUP_BUCKET;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct gm_jobfile *)a)->name, ((const struct gm_jobfile *)b)->name);
}

int gm_datahash_group(const struct gm_jobfile *files, size_t n, enum gm_jobfile_group g,
                      struct gm_jobfile **out, size_t *n_out)
{
    static const char hex[] = "0123456789abcdef";
    struct gm_jobfile *gs = calloc(n + 1, sizeof(*gs));
    EVP_MD_CTX **ctx = NULL;
    size_t ng = 0;
    int err = -ENOMEM;

    *out = NULL;
    *n_out = 0;
    if (gs == NULL)
        return -ENOMEM;
    if (g == GM_JOBFILE_GROUP_FILE) {
        for (size_t i = 0; i < n; i++) {
            gs[i] = files[i];
            gs[i].count = 1;
        }
        *out = gs;
        *n_out = n;
        return 0;
    }
    /* one context per group; files visit them in name order, so every group's digest covers
     * its files in name order whether groups are contiguous (DIR) or not (BUCKET) */
    ctx = calloc(n + 1, sizeof(*ctx));
    if (ctx == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        char key[256], line[400];
        size_t k;
        int len;
        if (group_key(files[i].name, g, key) < 0)
            goto out;
        if (g == GM_JOBFILE_GROUP_DIR)
            k = ng > 0 && strcmp(gs[ng - 1].name, key) == 0 ? ng - 1 : ng;
        else
            for (k = 0; k < ng && strcmp(gs[k].name, key) != 0; k++)
                ; /* 256 buckets at most */
        if (k == ng) {
            snprintf(gs[ng].name, sizeof(gs[ng].name), "%s", key);
            ctx[ng] = EVP_MD_CTX_new();
            if (ctx[ng] == NULL || EVP_DigestInit_ex(ctx[ng], EVP_sha256(), NULL) != 1)
                goto out;
            ng++;
        }
        gs[k].count++;
        gs[k].size += files[i].size;
        len = snprintf(line, sizeof(line), "%s%c%llu%c%s\n", files[i].name, 0,
                       (unsigned long long)files[i].size, 0, files[i].sha256);
        if (EVP_DigestUpdate(ctx[k], line, (size_t)len) != 1)
            goto out;
    }
    for (size_t k = 0; k < ng; k++) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        if (EVP_DigestFinal_ex(ctx[k], md, &mdlen) != 1 || mdlen != 32)
            goto out;
        for (int i = 0; i < 32; i++) {
            gs[k].sha256[2 * i] = hex[md[i] >> 4];
            gs[k].sha256[2 * i + 1] = hex[md[i] & 15];
        }
        gs[k].sha256[64] = 0;
    }
    if (ng > 1)
        qsort(gs, ng, sizeof(*gs), by_key);
    *out = gs;
    *n_out = ng;
    gs = NULL;
    err = 0;
out:
    for (size_t k = 0; ctx != NULL && k <= ng; k++) /* ctx[ng]: one whose init failed */
        EVP_MD_CTX_free(ctx[k]);
    free(ctx);
    free(gs);
    return err;
}
