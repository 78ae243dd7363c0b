/*
 * train/data/dataset.h - the in-memory dataset and the spec it is loaded from: types and limits
 * only, shared by data.c and every format reader (see data.h for the choices).
 */
#ifndef GM_TRAIN_DATA_DATASET_H
#define GM_TRAIN_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

struct gm_dataset {
    uint8_t *images; /* owned: n samples, each c*h*w bytes, CHW order (NULL when n == 0) */
    uint8_t *labels; /* owned: n labels, each < classes */
    size_t n;
    int c, h, w;
    int classes;        /* 1..256 */
    char **class_names; /* owned: NULL, or `classes` names followed by a NULL pointer */
};

struct gm_data_spec {
    const char *kind; /* "idx" | "cifar10" | "folder" */
    const char *dir;
    double test_split; /* folder only: fraction held out for test, [0, 1) (caller default 0.1) */
    int image_size;    /* folder only: resize (bilinear) to image_size x image_size; 0 = keep the
                          size of the first image and require all the same */
    int channels;      /* folder only: 1 (grayscale) or 3 (RGB) */
    uint64_t seed;     /* folder only: which samples go to test */
    int pad;           /* every kind: zero border of pad pixels around each image, 0..64
                          (Fashion-MNIST's 28x28 -> 32x32 with pad = 2, for CIFAR models) */
};

/* Limits that keep a bad header from asking for absurd memory. */
#define GM_DATA_MAX_SAMPLE_BYTES ((size_t)1 << 26) /* c*h*w of one sample */
#define GM_DATA_MAX_BYTES ((uint64_t)1 << 36)      /* all samples of one file or split */
#define GM_DATA_MAX_SAMPLES ((uint64_t)UINT32_MAX) /* sampler indices are uint32_t */
#define GM_DATA_MAX_PAD 64

#endif
