/*
 * train/data/data.c - gm_dataset_load (checks the spec, dispatches to the format readers
 * idx.c, cifar.c, folder.c), gm_dataset_free, gm_dataset_batch.  The readers share file.c;
 * none of them calls back into this file.
 *
 * Error reporting: the function that detects a problem logs the one gm_err line
 * ("<path>: <problem>") and returns GM_ERR_DATA (-ENOMEM: "<path>: out of memory"); callers
 * only pass the code up.
 */
#include "train/data/data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/assert.h"
#include "common/log.h"
#include "train/data/cifar.h"
#include "train/data/file.h"
#include "train/data/folder.h"

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

/* Surrounds every image of d with a zero border of pad pixels (all channels):
 * (c, h, w) -> (c, h + 2 pad, w + 2 pad).  Zero is black, the background of
 * Fashion-MNIST, so padded 28x28 images are the 32x32 inputs CIFAR models
 * expect without resampling. */
static int pad_images(struct gm_dataset *d, int pad, const char *dir)
{
    const size_t h = (size_t)d->h, w = (size_t)d->w, c = (size_t)d->c;
    const size_t ph = h + 2 * (size_t)pad, pw = w + 2 * (size_t)pad;
    uint8_t *out;

    if (c * ph * pw > GM_DATA_MAX_SAMPLE_BYTES ||
        (d->n > 0 && (uint64_t)d->n * c * ph * pw > GM_DATA_MAX_BYTES)) {
        gm_err("%s: padded samples would be too large", dir);
        return GM_ERR_DATA;
    }
    if (d->n == 0) {
        d->h = (int)ph;
        d->w = (int)pw;
        return 0;
    }
    out = calloc(d->n, c * ph * pw);
    if (out == NULL) {
        gm_err("%s: out of memory", dir);
        return -ENOMEM;
    }
    for (size_t i = 0; i < d->n; i++)
        for (size_t ch = 0; ch < c; ch++)
            for (size_t y = 0; y < h; y++)
                memcpy(out + ((i * c + ch) * ph + y + (size_t)pad) * pw + (size_t)pad,
                       d->images + ((i * c + ch) * h + y) * w, w);
    free(d->images);
    d->images = out;
    d->h = (int)ph;
    d->w = (int)pw;
    return 0;
}

static int spec_check(const struct gm_data_spec *spec)
{
    if (spec->kind == NULL || spec->dir == NULL || spec->dir[0] == 0) {
        gm_err("data: %s not set", spec->kind == NULL ? "kind" : "dir");
        return GM_ERR_CONFIG;
    }
    if (spec->pad < 0 || spec->pad > GM_DATA_MAX_PAD) {
        gm_err("data: pad %d is not in 0..%d", spec->pad, GM_DATA_MAX_PAD);
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
        err = gm_data_idx_load(spec, train, test);
    } else if (strcmp(spec->kind, "cifar10") == 0) {
        err = gm_data_cifar_load(spec, train, test);
    } else if (strcmp(spec->kind, "folder") == 0) {
        err = gm_data_folder_load(spec, train, test);
    } else {
        gm_err("data: unknown kind '%s' (idx, cifar10 or folder)", spec->kind);
        err = GM_ERR_CONFIG;
    }
    if (err == 0 && spec->pad > 0 && (err = pad_images(train, spec->pad, spec->dir)) == 0)
        err = pad_images(test, spec->pad, spec->dir);
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
