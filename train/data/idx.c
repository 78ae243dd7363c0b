/*
 * train/data/idx.c - the IDX format (see idx.h): the pure in-memory parser and the loader of
 * the four standard Fashion-MNIST/MNIST files.
 *
 * IDX files are read header first, then into a buffer that starts at the size on disk (plain)
 * or 16 MiB (gzip) and doubles up to the size the header claims, so a short file with a huge
 * header costs little; bytes past the claimed end are counted (up to 1 GiB) for the error
 * message.  Fashion-MNIST (26 MB of gzip) loads in about 0.3 s, nearly all of it inflate.
 * The parser logs nothing (it fills gm_idx.error), so the fuzzer stays quiet and the loader
 * adds the file name.
 */
#include "train/data/idx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/byteorder.h"
#include "common/log.h"
#include "train/data/file.h"

#define TRAILING_COUNT_MAX ((uint64_t)1 << 30) /* stop counting trailing garbage here */

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
    out->magic = gm_get_be32(buf);
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
        out->dims[i] = gm_get_be32(buf + 4 + 4 * i);
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
    struct gm_data_src s;
    uint8_t *b = NULL;
    size_t got, hlen, cap, have = 0;
    int gz, err;

    *data = NULL;
    err = gm_data_src_open(&s, path);
    if (err)
        return err;
    err = gm_data_src_read(&s, head, 4, &hlen);
    if (err)
        goto out;
    gz = gm_data_src_is_gz(&s);
    /* A well-formed IDX magic of the other kind (labels where images belong, or
     * the reverse) says so, before its dimensions are read as the wrong shape. */
    if (hlen == 4 && head[0] == 0 && head[1] == 0 && head[2] == GM_IDX_TYPE_UBYTE &&
        gm_get_be32(head) != want) {
        gm_err("%s: wrong magic 0x%08x, expected 0x%08x (%s)", path, gm_get_be32(head), want,
               magic_name(want));
        err = GM_ERR_DATA;
        goto out;
    }
    if (hlen == 4 && head[3] >= 1 && head[3] <= GM_IDX_MAX_DIMS) {
        err = gm_data_src_read(&s, head + 4, 4 * (size_t)head[3], &got);
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
     * plain file starts at its size on disk, a gzip stream at GM_DATA_FIRST_ALLOC, then doubling
     * (glibc moves large blocks with mremap, so growing does not copy). */
    cap = gz ? GM_DATA_FIRST_ALLOC : (s.size > hlen ? (size_t)(s.size - hlen) : 0);
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
        err = gm_data_src_read(&s, b + have, cap - have, &got);
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
            err = gm_data_src_read(&s, scratch, sizeof(scratch), &got);
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
    gm_data_src_close(&s);
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

int gm_data_idx_load(const struct gm_data_spec *spec, struct gm_dataset *train,
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
