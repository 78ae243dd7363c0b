/*
 * train/data.c - gm_dataset_load dispatch, the file reader, the IDX parser and loader,
 * gm_dataset_batch.  (CIFAR-10: data_cifar.c; image folders: data_folder.c; sampler:
 * data_sampler.c.)
 *
 * Reading: every data file goes through zlib's gz* functions (gzdopen + gzread), which inflate
 * gzip files and pass plain files through unchanged, so both need one code path.  A file is
 * never trusted for sizes: IDX files are read header first, then into a buffer that starts at
 * the size on disk (plain) or 16 MiB (gzip) and doubles up to the size the header claims, so a
 * short file with a huge header costs little; bytes past the claimed end are counted (up to
 * 1 GiB) for the error message.  Fashion-MNIST (26 MB of gzip) loads in about 0.3 s, nearly
 * all of it inflate.
 *
 * Error reporting: the function that detects a problem logs the one gm_err line
 * ("<path>: <problem>") and returns GM_ERR_DATA (-ENOMEM: "<path>: out of memory"); callers
 * only pass the code up.  The IDX parser itself logs nothing (it fills gm_idx.error), so the
 * fuzzer stays quiet and the loader adds the file name.
 */
#include "train/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/assert.h"
#include "common/log.h"
#include "train/data_internal.h"

#define READ_CHUNK ((size_t)1 << 30)           /* gzread takes an unsigned int length */
#define FIRST_ALLOC ((size_t)1 << 24)          /* first buffer for a stream of unknown size */
#define TRAILING_COUNT_MAX ((uint64_t)1 << 30) /* stop counting trailing garbage here */

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

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* ------------------------------------------------------------------------------------------ */
/* file source: gz* over a checked file descriptor                                            */

struct src {
    gzFile gz;        /* owned */
    const char *path; /* borrowed */
    uint64_t size;    /* on-disk size from fstat */
};

static void src_close(struct src *s)
{
    if (s->gz != NULL)
        gzclose_r(s->gz);
    s->gz = NULL;
}

static int src_open(struct src *s, const char *path)
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
static int src_is_gz(struct src *s)
{
    return gzdirect(s->gz) == 0;
}

/* Logs what gzerror reports after a short or failed read; 0 when it was a clean end of file. */
static int src_check(struct src *s)
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
static int src_read(struct src *s, uint8_t *dst, size_t want, size_t *got)
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
    struct src s;
    uint8_t *b = NULL;
    size_t cap, have = 0;
    int err;

    *buf = NULL;
    *len = 0;
    err = src_open(&s, path);
    if (err)
        return err;
    if (!src_is_gz(&s) && s.size < max)
        cap = (size_t)s.size + 1; /* + 1: see the end of file without growing */
    else
        cap = max < FIRST_ALLOC ? (size_t)max + 1 : FIRST_ALLOC;
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
        err = src_read(&s, b + have, cap - have, &got);
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
    src_close(&s);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* IDX parser (pure, in memory)                                                               */

static void idx_describe(const struct gm_idx *x, char *buf, size_t size)
{
    switch (x->ndims) {
    case 1:
        snprintf(buf, size, "%u labels", x->dims[0]);
        break;
    case 2:
        snprintf(buf, size, "%u rows of %u", x->dims[0], x->dims[1]);
        break;
    default:
        snprintf(buf, size, "%u images of %ux%u", x->dims[0], x->dims[1], x->dims[2]);
        break;
    }
}

/* Sets x->error for a file of file_len bytes whose header says otherwise. */
static int idx_length_error(struct gm_idx *x, uint64_t file_len)
{
    char what[80];

    idx_describe(x, what, sizeof(what));
    snprintf(x->error, sizeof(x->error), "%s: header says %s (%zu bytes) but file has %llu bytes",
             file_len < x->header_bytes + x->data_bytes ? "truncated" : "trailing garbage", what,
             x->header_bytes + x->data_bytes, (unsigned long long)file_len);
    return GM_ERR_DATA;
}

int gm_idx_parse_header(const uint8_t *buf, size_t len, struct gm_idx *out)
{
    uint64_t bytes = 1;

    memset(out, 0, sizeof(*out));
    if (len < 4) {
        snprintf(out->error, sizeof(out->error),
                 "truncated: %zu bytes is too short for an IDX header", len);
        return GM_ERR_DATA;
    }
    out->magic = get_be32(buf);
    if (buf[0] != 0 || buf[1] != 0) {
        snprintf(out->error, sizeof(out->error), "not an IDX file (magic 0x%08x)", out->magic);
        return GM_ERR_DATA;
    }
    if (buf[2] != GM_IDX_TYPE_UBYTE) {
        snprintf(out->error, sizeof(out->error),
                 "unsupported IDX element type 0x%02x in magic 0x%08x (only 0x08, unsigned byte)",
                 buf[2], out->magic);
        return GM_ERR_DATA;
    }
    if (buf[3] < 1 || buf[3] > GM_IDX_MAX_DIMS) {
        snprintf(out->error, sizeof(out->error),
                 "unsupported IDX dimension count %u in magic 0x%08x (1 to %d)", buf[3], out->magic,
                 GM_IDX_MAX_DIMS);
        return GM_ERR_DATA;
    }
    out->ndims = buf[3];
    out->header_bytes = 4 + 4 * (size_t)out->ndims;
    if (len < out->header_bytes) {
        snprintf(out->error, sizeof(out->error),
                 "truncated: %zu bytes is too short for an IDX header of %d dimensions", len,
                 out->ndims);
        return GM_ERR_DATA;
    }
    for (int i = 0; i < out->ndims; i++)
        out->dims[i] = get_be32(buf + 4 + 4 * i);
    for (int i = 0; i < out->ndims; i++) {
        /* Checked before multiplying: bytes <= GM_DATA_MAX_BYTES / dims[i] keeps the product
         * within the limit (and within 64 bits). */
        if (out->dims[i] != 0 && bytes > GM_DATA_MAX_BYTES / out->dims[i]) {
            char what[80];

            idx_describe(out, what, sizeof(what));
            snprintf(out->error, sizeof(out->error),
                     "header says %s: more than the limit of %llu bytes", what,
                     (unsigned long long)GM_DATA_MAX_BYTES);
            return GM_ERR_DATA;
        }
        bytes *= out->dims[i];
    }
    out->data_bytes = (size_t)bytes;
    return 0;
}

int gm_idx_parse(const uint8_t *buf, size_t len, struct gm_idx *out)
{
    int err = gm_idx_parse_header(buf, len, out);

    if (err)
        return err;
    if (len != out->header_bytes + out->data_bytes)
        return idx_length_error(out, len);
    out->data = buf + out->header_bytes;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* IDX loader                                                                                 */

static const char *magic_name(uint32_t magic)
{
    return magic == GM_IDX_MAGIC_IMAGES ? "IDX images" : "IDX labels";
}

/* Reads path, an IDX file that must have magic want; *data (owned by the caller) receives the
 * bytes after the header. */
static int idx_read(const char *path, uint32_t want, struct gm_idx *hdr, uint8_t **data)
{
    uint8_t head[4 + 4 * GM_IDX_MAX_DIMS];
    struct src s;
    uint8_t *b = NULL;
    size_t got, hlen, cap, have = 0;
    int gz, err;

    *data = NULL;
    err = src_open(&s, path);
    if (err)
        return err;
    err = src_read(&s, head, 4, &hlen);
    if (err)
        goto out;
    gz = src_is_gz(&s);
    /* A well-formed IDX magic of the other kind (labels where images belong, or
     * the reverse) says so, before its dimensions are read as the wrong shape. */
    if (hlen == 4 && head[0] == 0 && head[1] == 0 && head[2] == GM_IDX_TYPE_UBYTE &&
        get_be32(head) != want) {
        gm_err("%s: wrong magic 0x%08x, expected 0x%08x (%s)", path, get_be32(head), want,
               magic_name(want));
        err = GM_ERR_DATA;
        goto out;
    }
    if (hlen == 4 && head[3] >= 1 && head[3] <= GM_IDX_MAX_DIMS) {
        err = src_read(&s, head + 4, 4 * (size_t)head[3], &got);
        if (err)
            goto out;
        hlen += got;
    }
    err = gm_idx_parse_header(head, hlen, hdr);
    if (err) {
        gm_err("%s: %s%s", path, hdr->error, gz ? " (after decompression)" : "");
        goto out;
    }
    if (hdr->magic != want) {
        gm_err("%s: wrong magic 0x%08x, expected 0x%08x (%s)", path, hdr->magic, want,
               magic_name(want));
        err = GM_ERR_DATA;
        goto out;
    }

    /* Data: grow towards the claimed size, so memory follows what the file really holds: a
     * plain file starts at its size on disk, a gzip stream at FIRST_ALLOC, then doubling
     * (glibc moves large blocks with mremap, so growing does not copy). */
    cap = gz ? FIRST_ALLOC : (s.size > hlen ? (size_t)(s.size - hlen) : 0);
    if (cap > hdr->data_bytes)
        cap = hdr->data_bytes;
    for (;;) {
        uint8_t *nb = realloc(b, cap > 0 ? cap : 1);

        if (nb == NULL) {
            gm_err("%s: out of memory reading %zu bytes", path, cap);
            err = -ENOMEM;
            goto out;
        }
        b = nb;
        err = src_read(&s, b + have, cap - have, &got);
        if (err)
            goto out;
        have += got;
        if (have < cap || cap == hdr->data_bytes)
            break;
        cap = cap > hdr->data_bytes / 2 ? hdr->data_bytes : cap * 2 + 4096;
    }
    if (have < hdr->data_bytes) {
        err = idx_length_error(hdr, hdr->header_bytes + have);
        gm_err("%s: %s%s", path, hdr->error, gz ? " (after decompression)" : "");
        goto out;
    }

    /* Anything after the data is an error; count it for the message. */
    {
        uint8_t scratch[4096];
        uint64_t extra = 0;

        do {
            err = src_read(&s, scratch, sizeof(scratch), &got);
            if (err)
                goto out;
            extra += got;
        } while (got == sizeof(scratch) && extra < TRAILING_COUNT_MAX);
        if (extra >= TRAILING_COUNT_MAX) {
            gm_err("%s: trailing garbage: more than %llu bytes after the %zu the header describes",
                   path, (unsigned long long)TRAILING_COUNT_MAX,
                   hdr->header_bytes + hdr->data_bytes);
            err = GM_ERR_DATA;
            goto out;
        }
        if (extra > 0) {
            err = idx_length_error(hdr, hdr->header_bytes + hdr->data_bytes + extra);
            gm_err("%s: %s%s", path, hdr->error, gz ? " (after decompression)" : "");
            goto out;
        }
    }
    *data = b;
    b = NULL;
out:
    free(b);
    src_close(&s);
    return err;
}

/* path = dir/name, or dir/name.gz when only that exists. */
static int idx_find(const char *dir, const char *name, char *path, size_t size)
{
    char gzname[128];
    struct stat st;
    int err;

    err = gm_data_path_join(path, size, dir, name);
    if (err)
        return err;
    if (stat(path, &st) == 0 || errno != ENOENT)
        return 0; /* exists, or fails for another reason that opening it will report */
    snprintf(gzname, sizeof(gzname), "%s.gz", name);
    err = gm_data_path_join(path, size, dir, gzname);
    if (err)
        return err;
    if (stat(path, &st) == 0 || errno != ENOENT)
        return 0;
    gm_err("%s/%s: missing: neither it nor %s exists", dir, name, gzname);
    return GM_ERR_DATA;
}

/* One split: images + labels into d; *max_label receives the largest label. */
static int idx_load_split(const char *dir, const char *img_name, const char *lab_name,
                          struct gm_dataset *d, int *max_label, char *img_path, size_t path_size)
{
    char lab_path[PATH_MAX];
    struct gm_idx img, lab;
    int err;

    err = idx_find(dir, img_name, img_path, path_size);
    if (err)
        return err;
    err = idx_find(dir, lab_name, lab_path, sizeof(lab_path));
    if (err)
        return err;
    err = idx_read(img_path, GM_IDX_MAGIC_IMAGES, &img, &d->images);
    if (err)
        return err;
    if (img.dims[0] == 0 || img.dims[1] == 0 || img.dims[2] == 0) {
        gm_err("%s: empty: header says %u images of %ux%u", img_path, img.dims[0], img.dims[1],
               img.dims[2]);
        return GM_ERR_DATA;
    }
    if ((uint64_t)img.dims[1] * img.dims[2] > GM_DATA_MAX_SAMPLE_BYTES) {
        gm_err("%s: images of %ux%u are larger than the limit of %zu bytes", img_path, img.dims[1],
               img.dims[2], GM_DATA_MAX_SAMPLE_BYTES);
        return GM_ERR_DATA;
    }
    err = idx_read(lab_path, GM_IDX_MAGIC_LABELS, &lab, &d->labels);
    if (err)
        return err;
    if (lab.dims[0] != img.dims[0]) {
        gm_err("%s: has %u labels but %s has %u images", lab_path, lab.dims[0], img_path,
               img.dims[0]);
        return GM_ERR_DATA;
    }
    d->n = img.dims[0];
    d->c = 1;
    d->h = (int)img.dims[1];
    d->w = (int)img.dims[2];
    *max_label = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->labels[i] > *max_label)
            *max_label = d->labels[i];
    return 0;
}

static int idx_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                    struct gm_dataset *test)
{
    char train_path[PATH_MAX], test_path[PATH_MAX];
    int max_train, max_test, err;

    err = idx_load_split(spec->dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", train,
                         &max_train, train_path, sizeof(train_path));
    if (err)
        return err;
    err = idx_load_split(spec->dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", test,
                         &max_test, test_path, sizeof(test_path));
    if (err)
        return err;
    if (test->h != train->h || test->w != train->w) {
        gm_err("%s: images are %dx%d but the training images (%s) are %dx%d", test_path, test->h,
               test->w, train_path, train->h, train->w);
        return GM_ERR_DATA;
    }
    train->classes = test->classes = (max_train > max_test ? max_train : max_test) + 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* public                                                                                     */

void gm_dataset_free(struct gm_dataset *d)
{
    if (d == NULL)
        return;
    free(d->images);
    free(d->labels);
    gm_data_names_free(d->class_names);
    memset(d, 0, sizeof(*d));
}

static int spec_check(const struct gm_data_spec *spec)
{
    if (spec->kind == NULL || spec->dir == NULL || spec->dir[0] == 0) {
        gm_err("data: %s not set", spec->kind == NULL ? "kind" : "dir");
        return GM_ERR_CONFIG;
    }
    if (strcmp(spec->kind, "folder") != 0)
        return 0;
    if (!(spec->test_split >= 0.0 && spec->test_split < 1.0)) {
        gm_err("data: test_split %g is not in [0, 1)", spec->test_split);
        return GM_ERR_CONFIG;
    }
    if (spec->channels != 1 && spec->channels != 3) {
        gm_err("data: channels %d is not 1 (grayscale) or 3 (RGB)", spec->channels);
        return GM_ERR_CONFIG;
    }
    if (spec->image_size < 0 ||
        (uint64_t)spec->image_size * (uint64_t)spec->image_size * 3 > GM_DATA_MAX_SAMPLE_BYTES) {
        gm_err("data: image_size %d is out of range", spec->image_size);
        return GM_ERR_CONFIG;
    }
    return 0;
}

int gm_dataset_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                    struct gm_dataset *test)
{
    struct stat st;
    int err;

    if (train != NULL)
        memset(train, 0, sizeof(*train));
    if (test != NULL)
        memset(test, 0, sizeof(*test));
    if (spec == NULL || train == NULL || test == NULL)
        return -EINVAL;
    err = spec_check(spec);
    if (err)
        return err;
    if (stat(spec->dir, &st) != 0) {
        gm_err("%s: cannot open dataset directory: %s", spec->dir, gm_strerror(-errno));
        return GM_ERR_DATA;
    }
    if (!S_ISDIR(st.st_mode)) {
        gm_err("%s: dataset path is not a directory", spec->dir);
        return GM_ERR_DATA;
    }
    if (strcmp(spec->kind, "idx") == 0) {
        err = idx_load(spec, train, test);
    } else if (strcmp(spec->kind, "cifar10") == 0) {
        err = gm_data_cifar_load(spec, train, test);
    } else if (strcmp(spec->kind, "folder") == 0) {
        err = gm_data_folder_load(spec, train, test);
    } else {
        gm_err("data: unknown kind '%s' (idx, cifar10 or folder)", spec->kind);
        err = GM_ERR_CONFIG;
    }
    if (err) {
        gm_dataset_free(train);
        gm_dataset_free(test);
    }
    return err;
}

size_t gm_dataset_sample_bytes(const struct gm_dataset *d)
{
    return (size_t)d->c * (size_t)d->h * (size_t)d->w;
}

/* The hot loop: restrict lets the compiler vectorize (widen u8 -> i32 -> f32, one multiply). */
static void bytes_to_float(const uint8_t *restrict src, float *restrict dst, size_t n)
{
    const float scale = 1.0f / 255.0f;

    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i] * scale;
}

void gm_dataset_batch(const struct gm_dataset *d, const uint32_t *idx, size_t count, float *x,
                      int32_t *y)
{
    const size_t sz = gm_dataset_sample_bytes(d);

    for (size_t k = 0; k < count; k++) {
        GM_ASSERT(idx[k] < d->n);
        bytes_to_float(d->images + (size_t)idx[k] * sz, x + k * sz, sz);
        y[k] = d->labels[idx[k]];
    }
}
