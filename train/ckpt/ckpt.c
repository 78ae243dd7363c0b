/*
 * train/ckpt/ckpt.c - checkpoints: content, atomic write with a .sha256 beside the file,
 * validating load, directory listing, fallback and pruning.  See ckpt.h.
 *
 * Choices: the hash is computed from the file as read back after the rename (what is on disk
 * is what gets recorded, and the writer stays the one in safetensors.c); numbers in metadata
 * are decimal strings (safetensors metadata is string to string) parsed strictly (no sign
 * where none is allowed, no junk, no overflow); the .sha256 names the file's basename, and a
 * .sha256 naming another file is refused, so swapped or copied sidecars are caught.
 */
#include "train/ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/file.h"
#include "common/log.h"

#define FILE_MAX ((size_t)1 << 40) /* bytes a checkpoint may have */
#define SHA_FILE_MAX 4096

void gm_ckpt_sha256_hex(const void *buf, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;

    if (EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
        hex[0] = '\0'; /* never matches a recorded hash */
        return;
    }
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

int gm_ckpt_path(const char *dir, long step, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/step-%010ld" GM_CKPT_SUFFIX, dir, step);

    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');

    return s != NULL ? s + 1 : path;
}

/* --- writing ------------------------------------------------------------------------------ */

int gm_ckpt_write(const char *path, const struct gm_st_tensor *t, size_t nt,
                  const struct gm_ckpt_info *info, const char *job_text, char sha256[65])
{
    char fmt[16], params[32], step[32], total[32], epoch[32], off[32], gb[32], seed[32], ostep[32],
        term[32], hex[65], line[1200];
    char *shapath = NULL, *buf = NULL;
    size_t len = 0;
    int err;

    if (sha256 != NULL)
        sha256[0] = '\0';
    snprintf(fmt, sizeof(fmt), "%d", GM_CKPT_FORMAT);
    snprintf(params, sizeof(params), "%zu", info->params);
    snprintf(step, sizeof(step), "%ld", info->step);
    snprintf(total, sizeof(total), "%ld", info->total_steps);
    snprintf(epoch, sizeof(epoch), "%d", info->epoch);
    snprintf(off, sizeof(off), "%ld", info->data_offset);
    snprintf(gb, sizeof(gb), "%d", info->global_batch);
    snprintf(seed, sizeof(seed), "%" PRIu64, info->seed);
    snprintf(ostep, sizeof(ostep), "%ld", info->optim_step);
    snprintf(term, sizeof(term), "%" PRIu64, info->term);
    const struct gm_st_meta meta[] = {
        {"format", "pt"},
        {"producer", "gradmesh"},
        {"gradmesh.ckpt", fmt},
        {"job", job_text != NULL ? job_text : ""},
        {"job_hash", info->job_hash},
        {"job_name", info->job_name},
        {"model", info->model},
        {"params", params},
        {"step", step},
        {"total_steps", total},
        {"epoch", epoch},
        {"data_offset", off},
        {"global_batch", gb},
        {"seed", seed},
        {"optim", info->optim},
        {"optim_step", ostep},
        {"term", term},
        {"gradmesh.codec", info->codec},
        {"gradmesh.shares", info->shares},
    };

    if (asprintf(&shapath, "%s" GM_CKPT_SHA_SUFFIX, path) < 0)
        return -ENOMEM;
    /* a checkpoint of this step written before (a resumed run) is uncommitted from here on,
     * so no moment pairs the new file with the old hash */
    if (unlink(shapath) != 0 && errno != ENOENT) {
        err = -errno;
        gm_err("%s: cannot remove: %s", shapath, gm_strerror(err));
        free(shapath);
        return err;
    }
    err = gm_safetensors_write(path, t, nt, meta, sizeof(meta) / sizeof(meta[0]));
    if (err != 0) {
        free(shapath);
        return err; /* logged */
    }
    err = gm_file_read(path, FILE_MAX, &buf, &len);
    if (err != 0) {
        gm_err("%s: cannot read back the checkpoint: %s", path, gm_strerror(err));
        free(shapath);
        return err;
    }
    gm_ckpt_sha256_hex(buf, len, hex);
    free(buf);
    snprintf(line, sizeof(line), "%s  %s\n", hex, base_name(path));
    err = gm_file_write_atomic(shapath, line, strlen(line), 0644);
    if (err != 0)
        gm_err("%s: cannot write: %s", shapath, gm_strerror(err));
    else if (sha256 != NULL)
        memcpy(sha256, hex, 65);
    free(shapath);
    return err;
}

/* --- metadata ----------------------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0' || strlen(s) > 20)
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

static int copy_str(const char *s, char *dst, size_t cap)
{
    size_t n;

    if (s == NULL || (n = strlen(s)) >= cap)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return -1;
    memcpy(dst, s, n + 1);
    return 0;
}

static bool is_hex64(const char *s)
{
    if (s == NULL || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

int gm_ckpt_info_parse(const struct gm_st_file *f, const char *origin, struct gm_ckpt_info *info)
{
    static const struct {
        const char *key;
        uint64_t max;
    } nums[] = {
        {"gradmesh.ckpt", INT_MAX}, {"params", SIZE_MAX}, {"step", LONG_MAX},
        {"total_steps", LONG_MAX},  {"epoch", INT_MAX},   {"data_offset", LONG_MAX},
        {"global_batch", INT_MAX},  {"seed", UINT64_MAX}, {"optim_step", LONG_MAX},
        {"term", UINT64_MAX},
    };
    uint64_t v[sizeof(nums) / sizeof(nums[0])];
    const char *s;

    memset(info, 0, sizeof(*info));
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        s = gm_safetensors_meta(f, nums[i].key);
        if (s == NULL) {
            gm_err("%s: not a gradmesh checkpoint: no metadata '%s'", origin, nums[i].key);
            return GM_ERR_FORMAT;
        }
        if (parse_u64(s, nums[i].max, &v[i]) != 0) {
            gm_err("%s: bad checkpoint metadata: '%s' is not a number in range", origin,
                   nums[i].key);
            return GM_ERR_FORMAT;
        }
    }
    info->format = (int)v[0];
    if (info->format != GM_CKPT_FORMAT) {
        gm_err("%s: checkpoint format %d, this gradmesh reads format %d", origin, info->format,
               GM_CKPT_FORMAT);
        return GM_ERR_FORMAT;
    }
    info->params = (size_t)v[1];
    info->step = (long)v[2];
    info->total_steps = (long)v[3];
    info->epoch = (int)v[4];
    info->data_offset = (long)v[5];
    info->global_batch = (int)v[6];
    info->seed = v[7];
    info->optim_step = (long)v[8];
    info->term = v[9];
    s = gm_safetensors_meta(f, "job_hash");
    if (!is_hex64(s)) {
        gm_err("%s: bad checkpoint metadata: 'job_hash' is not 64 hex digits", origin);
        return GM_ERR_FORMAT;
    }
    memcpy(info->job_hash, s, 65);
    if (copy_str(gm_safetensors_meta(f, "job_name"), info->job_name, sizeof(info->job_name)) ||
        copy_str(gm_safetensors_meta(f, "model"), info->model, sizeof(info->model)) ||
        copy_str(gm_safetensors_meta(f, "optim"), info->optim, sizeof(info->optim)) ||
        copy_str(gm_safetensors_meta(f, "gradmesh.codec"), info->codec, sizeof(info->codec))) {
        gm_err("%s: bad checkpoint metadata: job_name, model, optim or gradmesh.codec missing, "
               "too long or not printable",
               origin);
        return GM_ERR_FORMAT;
    }
    s = gm_safetensors_meta(f, "gradmesh.shares"); /* optional: older files have none */
    if (s != NULL && (copy_str(s, info->shares, sizeof(info->shares)) != 0 ||
                      strspn(s, "0123456789:") != strlen(s))) {
        gm_err("%s: bad checkpoint metadata: gradmesh.shares is not a list of sample counts",
               origin);
        return GM_ERR_FORMAT;
    }
    if (info->global_batch < 1 || info->step > info->total_steps) {
        gm_err("%s: bad checkpoint metadata: global_batch %d, step %ld of %ld", origin,
               info->global_batch, info->step, info->total_steps);
        return GM_ERR_FORMAT;
    }
    return 0;
}

/* --- reading ------------------------------------------------------------------------------ */

int gm_ckpt_sha_line_parse(const char *buf, size_t len, const char *name, char hex[65])
{
    size_t bl = strlen(name);

    hex[0] = '\0';
    if (len != 64 + 2 + bl + 1 || memcmp(buf + 64, "  ", 2) != 0 ||
        memcmp(buf + 66, name, bl) != 0 || buf[len - 1] != '\n')
        return GM_ERR_FORMAT;
    memcpy(hex, buf, 64);
    hex[64] = '\0';
    if (!is_hex64(hex)) {
        hex[0] = '\0';
        return GM_ERR_FORMAT;
    }
    return 0;
}

/* The hash recorded in path.sha256, checked to name path's basename. */
static int read_sha_file(const char *path, char hex[65])
{
    char *shapath = NULL, *buf = NULL;
    size_t len = 0;
    int err;

    hex[0] = '\0';
    if (asprintf(&shapath, "%s" GM_CKPT_SHA_SUFFIX, path) < 0)
        return -ENOMEM;
    err = gm_file_read(shapath, SHA_FILE_MAX, &buf, &len);
    if (err == 0)
        err = gm_ckpt_sha_line_parse(buf, len, base_name(path), hex);
    free(buf);
    free(shapath);
    return err;
}

int gm_ckpt_load(const char *path, const char *want_job_hash, const char *want_model,
                 struct gm_st_file *f, struct gm_ckpt_info *info, char sha256[65])
{
    char want[65], got[65];
    char *buf = NULL;
    size_t len = 0;
    int err;

    memset(f, 0, sizeof(*f));
    memset(info, 0, sizeof(*info));
    if (sha256 != NULL)
        sha256[0] = '\0';
    err = read_sha_file(path, want);
    if (err != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"%s%s\"", path,
               err == GM_ERR_FORMAT ? "malformed " : "no readable ",
               err == GM_ERR_FORMAT ? GM_CKPT_SHA_SUFFIX " file"
                                    : GM_CKPT_SHA_SUFFIX " file (not committed)");
        return err == GM_ERR_FORMAT || err == -ENOENT ? GM_ERR_FORMAT : err;
    }
    err = gm_file_read(path, FILE_MAX, &buf, &len);
    if (err != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"cannot read: %s\"", path,
               gm_strerror(err));
        return err;
    }
    gm_ckpt_sha256_hex(buf, len, got);
    if (strcmp(want, got) != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"corrupt or truncated: SHA-256 %.16s... "
               "of its %zu bytes, %.16s... recorded\"",
               path, got, len, want);
        free(buf);
        return GM_ERR_FORMAT;
    }
    err = gm_safetensors_parse((const uint8_t *)buf, len, f);
    if (err != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"not a valid safetensors file\"", path);
        free(buf);
        return err;
    }
    f->buf = (uint8_t *)buf; /* f owns the bytes from now on */
    err = gm_ckpt_info_parse(f, path, info);
    if (err != 0)
        goto fail;
    if (want_job_hash != NULL && strcmp(want_job_hash, info->job_hash) != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"foreign: job '%s' (hash %.16s...), not "
               "this job (hash %.16s...)\"",
               path, info->job_name, info->job_hash, want_job_hash);
        err = GM_ERR_MISMATCH;
        goto fail;
    }
    if (want_model != NULL && strcmp(want_model, info->model) != 0) {
        gm_err("event=checkpoint-refused path=%s reason=\"foreign: model %s, not %s\"", path,
               info->model, want_model);
        err = GM_ERR_MISMATCH;
        goto fail;
    }
    if (sha256 != NULL)
        memcpy(sha256, got, 65);
    return 0;
fail:
    gm_safetensors_free(f);
    return err;
}

/* --- directories -------------------------------------------------------------------------- */

/* The step of a name "step-NNNNNNNNNN.safetensors", or -1. */
static long name_step(const char *name)
{
    uint64_t v;
    char digits[11];

    if (strlen(name) != 5 + 10 + strlen(GM_CKPT_SUFFIX) || strncmp(name, "step-", 5) != 0 ||
        strcmp(name + 15, GM_CKPT_SUFFIX) != 0)
        return -1;
    memcpy(digits, name + 5, 10);
    digits[10] = '\0';
    if (parse_u64(digits, LONG_MAX, &v) != 0)
        return -1;
    return (long)v;
}

long gm_ckpt_name_step(const char *path)
{
    return name_step(base_name(path));
}

static int cmp_entry(const void *a, const void *b)
{
    const struct gm_ckpt_entry *x = a, *y = b;

    return x->step < y->step ? -1 : x->step > y->step;
}

int gm_ckpt_dir_list(const char *dir, struct gm_ckpt_entry **out, size_t *n)
{
    DIR *d;
    struct dirent *de;
    struct gm_ckpt_entry *v = NULL;
    size_t cap = 0;
    int err = 0;

    *out = NULL;
    *n = 0;
    d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    while ((de = readdir(d)) != NULL) {
        long step = name_step(de->d_name);
        struct gm_ckpt_entry *e;
        struct stat st;

        if (step < 0)
            continue;
        if (*n == cap) {
            struct gm_ckpt_entry *nv;
            cap = cap ? cap * 2 : 16;
            nv = realloc(v, cap * sizeof(*v));
            if (nv == NULL) {
                err = -ENOMEM;
                break;
            }
            v = nv;
        }
        e = &v[*n];
        memset(e, 0, sizeof(*e));
        e->step = step;
        if (snprintf(e->path, sizeof(e->path), "%s/%s", dir, de->d_name) >= (int)sizeof(e->path) ||
            stat(e->path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        e->bytes = (int64_t)st.st_size;
        e->mtime = (int64_t)st.st_mtime;
        if (read_sha_file(e->path, e->sha256) != 0)
            e->sha256[0] = '\0';
        (*n)++;
    }
    closedir(d);
    if (err != 0) {
        free(v);
        *n = 0;
        return err;
    }
    if (*n > 0)
        qsort(v, *n, sizeof(*v), cmp_entry);
    *out = v;
    return 0;
}

int gm_ckpt_dir_newest(const char *dir, long max_step, const char *want_job_hash,
                       const char *want_model, struct gm_st_file *f, struct gm_ckpt_info *info,
                       char *path, size_t cap)
{
    struct gm_ckpt_entry *v = NULL;
    size_t n = 0;
    int err;

    memset(f, 0, sizeof(*f));
    memset(info, 0, sizeof(*info));
    if (cap > 0)
        path[0] = '\0';
    if ((err = gm_ckpt_dir_list(dir, &v, &n)) != 0) {
        gm_err("%s: cannot list checkpoints: %s", dir, gm_strerror(err));
        return err;
    }
    err = -ENOENT;
    for (size_t i = n; i-- > 0;) {
        if (max_step >= 0 && v[i].step > max_step)
            continue;
        if (gm_ckpt_load(v[i].path, want_job_hash, want_model, f, info, NULL) == 0) {
            snprintf(path, cap, "%s", v[i].path);
            err = 0;
            break;
        }
        gm_warn("event=checkpoint-fallback refused=%s: trying the one before", v[i].path);
    }
    free(v);
    return err;
}

static int cmp_ref_desc(const void *a, const void *b)
{
    const struct gm_ckpt_ref *x = a, *y = b;

    return x->step > y->step ? -1 : x->step < y->step;
}

int gm_ckpt_dir_newest_committed(const char *dir, const struct gm_ckpt_ref *refs, size_t n,
                                 const char *want_job_hash, const char *want_model,
                                 struct gm_st_file *f, struct gm_ckpt_info *info, char *path,
                                 size_t cap)
{
    struct gm_ckpt_ref *v = NULL;
    char p[1100], sha[65];
    int err = -ENOENT;

    memset(f, 0, sizeof(*f));
    memset(info, 0, sizeof(*info));
    if (cap > 0)
        path[0] = '\0';
    if (n == 0)
        return -ENOENT;
    v = malloc(n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    memcpy(v, refs, n * sizeof(*v));
    qsort(v, n, sizeof(*v), cmp_ref_desc);
    for (size_t i = 0; i < n; i++) {
        struct stat st;

        if (i > 0 && v[i].step == v[i - 1].step)
            continue;
        if (gm_ckpt_path(dir, v[i].step, p, sizeof(p)) != 0)
            continue;
        if (stat(p, &st) != 0) {
            gm_err("event=checkpoint-refused path=%s reason=\"missing: committed step %ld "
                   "(SHA-256 %.16s...) is not held here\"",
                   p, v[i].step, v[i].sha256);
        } else if (gm_ckpt_load(p, want_job_hash, want_model, f, info, sha) == 0) {
            if (strcmp(sha, v[i].sha256) == 0) {
                snprintf(path, cap, "%s", p);
                err = 0;
                break;
            }
            gm_err("event=checkpoint-refused path=%s reason=\"not the committed checkpoint: "
                   "SHA-256 %.16s..., the cluster committed %.16s...\"",
                   p, sha, v[i].sha256);
            gm_safetensors_free(f);
            memset(info, 0, sizeof(*info));
        } /* else: gm_ckpt_load logged why */
        gm_warn("event=checkpoint-fallback refused=%s: trying the committed one before", p);
    }
    free(v);
    return err;
}

/* Removes path.sha256, then path. */
static int remove_ckpt(const char *path)
{
    char sp[1100];
    int err = 0;

    snprintf(sp, sizeof(sp), "%s" GM_CKPT_SHA_SUFFIX, path);
    if (unlink(sp) != 0 && errno != ENOENT)
        err = -errno;
    if (err == 0 && unlink(path) != 0 && errno != ENOENT)
        err = -errno;
    if (err != 0)
        gm_err("%s: cannot remove an old checkpoint: %s", path, gm_strerror(err));
    return err;
}

/* Removes "*.tmp.PID" files of processes that are gone (a writer killed mid-write). */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1100];

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        const char *t = strstr(de->d_name, ".tmp.");
        uint64_t pid;

        if (t == NULL || strncmp(de->d_name, "step-", 5) != 0 ||
            parse_u64(t + 5, INT_MAX, &pid) != 0 || (pid_t)pid == getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer may still be at work */
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (unlink(p) == 0)
            gm_info("event=checkpoint-temp-removed path=%s", p);
    }
    closedir(d);
}

int gm_ckpt_dir_prune(const char *dir, int keep)
{
    struct gm_ckpt_entry *v = NULL;
    size_t n = 0;
    long newest = -1;
    int kept = 0, err;

    if ((err = gm_ckpt_dir_list(dir, &v, &n)) != 0) {
        gm_err("%s: cannot list checkpoints: %s", dir, gm_strerror(err));
        return err;
    }
    for (size_t i = n; i-- > 0;) {
        if (v[i].sha256[0] == '\0') {
            if (newest >= 0 && v[i].step < newest && remove_ckpt(v[i].path) != 0)
                err = -EIO;
            continue;
        }
        if (newest < 0)
            newest = v[i].step;
        if (kept < keep) {
            kept++;
            continue;
        }
        if (remove_ckpt(v[i].path) != 0)
            err = -EIO;
    }
    free(v);
    remove_stale_temps(dir);
    return err;
}

int gm_ckpt_free_bytes(const char *dir, uint64_t *out)
{
    char p[1024];
    struct statvfs sv;
    size_t n = strlen(dir);

    *out = 0;
    if (n == 0 || n >= sizeof(p))
        return -ENAMETOOLONG;
    memcpy(p, dir, n + 1);
    for (;;) {
        char *slash;
        if (statvfs(p, &sv) == 0) {
            *out = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
            return 0;
        }
        if (errno != ENOENT)
            return -errno;
        slash = strrchr(p, '/');
        if (slash == NULL) /* a relative name: the working directory holds it */
            return statvfs(".", &sv) == 0
                       ? (*out = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize, 0)
                       : -errno;
        if (slash == p) {
            p[1] = '\0';
        } else {
            *slash = '\0';
        }
    }
}

int gm_ckpt_mkdirs(const char *dir)
{
    char p[1024];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof(p))
        return -ENAMETOOLONG;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        p[i] = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return -errno;
        p[i] = dir[i];
    }
    return 0;
}
