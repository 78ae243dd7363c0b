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

    /* The streaming loader (train/data/loader.h); gm_dataset_load reads none of these. */
    const char *train_dir; /* folder: train and validation folders inside dir (relative), */
    const char *val_dir;   /* both or neither; then test_split is unused */
    int crop, flip;        /* folder, train split: RandomResizedCrop, RandomHorizontalFlip */
    double crop_scale[2], crop_ratio[2]; /* torchvision's (0.08, 1) and (3/4, 4/3) */
    int resize; /* folder, eval: shorter side before the centre crop; 0: stretch */
    int norm_n; /* 0: no normalisation; 1 or 3: mean/std values (every kind) */
    float mean[3], std[3];
    uint64_t cache;     /* folder: bytes of decoded images kept between epochs */
    int loader_threads; /* folder: decoding threads; 0: from the cores */
    int prefetch;       /* folder: batches decoded ahead (>= 1; 0: 2) */
    int skip_bad;       /* folder: skip undecodable images (named, counted) instead of failing */
    char *why;          /* optional, borrowed during gm_loader_new: its error line, when the
                         * check refuses an image (the file and the reason), why_len bytes */
    size_t why_len;
};

/* Limits that keep a bad header from asking for absurd memory. */
#define GM_DATA_MAX_SAMPLE_BYTES ((size_t)1 << 26) /* c*h*w of one sample */
#define GM_DATA_MAX_BYTES ((uint64_t)1 << 36)      /* all samples of one file or split */
#define GM_DATA_MAX_SAMPLES ((uint64_t)UINT32_MAX) /* sampler indices are uint32_t */
#define GM_DATA_MAX_PAD 64

#endif
