/*
 * train/data/file.c - reading data files for every format reader (see file.h): gz* over a
 * checked file descriptor, whole files into memory, and small path and name helpers.
 *
 * Reading: every data file goes through zlib's gz* functions (gzdopen + gzread), which inflate
 * gzip files and pass plain files through unchanged, so both need one code path.  A file is
 * never trusted for sizes: a buffer starts at the size on disk (plain) or 16 MiB (gzip) and
 * doubles up to the limit the caller gives.
 */
#include "train/data/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

#define READ_CHUNK ((size_t)1 << 30) /* gzread takes an unsigned int length */

/* ------------------------------------------------------------------------------------------ */
/* small shared helpers                                                                       */

int gm_data_path_join(char *buf, size_t size, const char *a, const char *b)
{
    int r = snprintf(buf, size, "%s/%s", a, b);

    if (r < 0 || (size_t)r >= size) {
        gm_err("%s/%s: path too long", a, b);
        return GM_ERR_DATA;
    }
    return 0;
}

void gm_data_names_free(char **names)
{
    if (names == NULL)
        return;
    for (size_t i = 0; names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

int gm_data_names_dup(char *const *names, int n, char ***out)
{
    char **copy;

    *out = NULL;
    if (names == NULL || n <= 0)
        return 0;
    copy = calloc((size_t)n + 1, sizeof(*copy)); /* NULL-terminated */
    if (copy == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        copy[i] = strdup(names[i]);
        if (copy[i] == NULL) {
            gm_data_names_free(copy);
            return -ENOMEM;
        }
    }
    *out = copy;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* file source: gz* over a checked file descriptor                                            */

void gm_data_src_close(struct gm_data_src *s)
{
    if (s->gz != NULL)
        gzclose_r(s->gz);
    s->gz = NULL;
}

int gm_data_src_open(struct gm_data_src *s, const char *path)
{
    struct stat st;
    int fd;

    memset(s, 0, sizeof(*s));
    s->path = path;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        gm_err("%s: cannot open: %s", path, gm_strerror(-errno));
        return GM_ERR_DATA;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        gm_err("%s: not a regular file", path);
        close(fd);
        return GM_ERR_DATA;
    }
    s->size = (uint64_t)st.st_size;
    s->gz = gzdopen(fd, "rb");
    if (s->gz == NULL) {
        close(fd);
        gm_err("%s: out of memory opening the file", path);
        return -ENOMEM;
    }
    gzbuffer(s->gz, 1u << 17);
    return 0;
}

/* 1 when the file is gzip-compressed (zlib looks ahead when nothing was read yet). */
int gm_data_src_is_gz(struct gm_data_src *s)
{
    return gzdirect(s->gz) == 0;
}

/* Logs what gzerror reports after a short or failed read; 0 when it was a clean end of file. */
static int src_check(struct gm_data_src *s)
{
    int errnum = Z_OK;
    const char *msg = gzerror(s->gz, &errnum);

    /* zlib prefixes the name it was opened with, "<fd:N>" for gzdopen: drop it. */
    if (strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ") != NULL)
        msg = strstr(msg, ": ") + 2;

    switch (errnum) {
    case Z_OK:
        return 0;
    case Z_BUF_ERROR:
        gm_err("%s: truncated gzip stream (%s)", s->path, msg);
        return GM_ERR_DATA;
    case Z_MEM_ERROR:
        gm_err("%s: out of memory decompressing", s->path);
        return -ENOMEM;
    case Z_ERRNO:
        gm_err("%s: read error: %s", s->path, gm_strerror(-errno));
        return GM_ERR_DATA;
    default:
        gm_err("%s: corrupt gzip data (%s)", s->path, msg);
        return GM_ERR_DATA;
    }
}

/* Reads up to want bytes; *got < want only at end of file.  Logs on error. */
int gm_data_src_read(struct gm_data_src *s, uint8_t *dst, size_t want, size_t *got)
{
    *got = 0;
    while (*got < want) {
        size_t chunk = want - *got < READ_CHUNK ? want - *got : READ_CHUNK;
        int r = gzread(s->gz, dst + *got, (unsigned)chunk);

        if (r < 0) {
            int err = src_check(s);

            if (err == 0) {
                gm_err("%s: read error", s->path);
                err = GM_ERR_DATA;
            }
            return err;
        }
        *got += (size_t)r;
        if ((size_t)r < chunk)
            return src_check(s);
    }
    return 0;
}

int gm_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len)
{
    struct gm_data_src s;
    uint8_t *b = NULL;
    size_t cap, have = 0;
    int err;

    *buf = NULL;
    *len = 0;
    err = gm_data_src_open(&s, path);
    if (err)
        return err;
    if (!gm_data_src_is_gz(&s) && s.size < max)
        cap = (size_t)s.size + 1; /* + 1: see the end of file without growing */
    else
        cap = max < GM_DATA_FIRST_ALLOC ? (size_t)max + 1 : GM_DATA_FIRST_ALLOC;
    for (;;) {
        size_t got;

        if (have == cap) {
            uint8_t *nb;

            if (cap > max) {
                gm_err("%s: larger than the limit of %llu bytes", path, (unsigned long long)max);
                err = GM_ERR_DATA;
                goto out;
            }
            cap = cap * 2;
            nb = realloc(b, cap);
            if (nb == NULL) {
                gm_err("%s: out of memory reading %zu bytes", path, cap);
                err = -ENOMEM;
                goto out;
            }
            b = nb;
        } else if (b == NULL) {
            b = malloc(cap);
            if (b == NULL) {
                gm_err("%s: out of memory reading %zu bytes", path, cap);
                err = -ENOMEM;
                goto out;
            }
        }
        err = gm_data_src_read(&s, b + have, cap - have, &got);
        if (err)
            goto out;
        have += got;
        if (have < cap)
            break;
    }
    if (have > max) {
        gm_err("%s: larger than the limit of %llu bytes", path, (unsigned long long)max);
        err = GM_ERR_DATA;
        goto out;
    }
    *buf = b;
    *len = have;
    b = NULL;
out:
    free(b);
    gm_data_src_close(&s);
    return err;
}
