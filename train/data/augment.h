/*
 * train/data/augment.h - the per-sample transforms of a photo folder, with torchvision's
 * semantics (torchvision 0.14, PIL images):
 *
 *   train: RandomResizedCrop(size, scale, ratio) [crop] then RandomHorizontalFlip(0.5) [flip];
 *          without crop, the eval transform below, then the flip if asked
 *   eval:  Resize(resize) (shorter side, long side truncated as torchvision computes it) then
 *          CenterCrop(size); with resize = 0, a resize of the whole image to size x size
 *          (the eager folder reader's stretch); with size = 0 as well, the image as it is
 *   then:  ToTensor (byte / 255) and Normalize(mean, std) per channel.
 *
 * Every random choice of a sample (the crop's 10 attempts, its position, the flip) comes from a
 * generator seeded by (job seed, epoch, sample index) alone (gm_rng with a stream that encodes
 * epoch and index): it is the same on every rank, in every loader thread and for any world
 * size, and costs nothing to reach (no state carried from sample to sample).
 *
 * Pure functions of their arguments; any thread.
 */
#ifndef GM_TRAIN_DATA_AUGMENT_H
#define GM_TRAIN_DATA_AUGMENT_H

#include <stdint.h>

#include "common/err.h"
#include "train/data/image.h"

struct gm_transform {
    int size;              /* output side; 0: native (no crop, no resize) */
    int resize;            /* eval: shorter side before the centre crop; 0: stretch to size */
    int crop;              /* train: random resized crop */
    int flip;              /* train: horizontal flip with probability 0.5 */
    double scale[2];       /* crop area as a fraction of the image's, torchvision (0.08, 1) */
    double ratio[2];       /* crop aspect w/h, torchvision (3/4, 4/3) */
    float mean[3], std[3]; /* per channel; (0, 1) for none */
    uint64_t seed;         /* the job's */
};

/* The crop box and the flip of one sample: train (random, from (seed, epoch, index)) or
 * eval (deterministic, epoch and index unused).  w x h is the decoded image's size. */
void gm_transform_params(const struct gm_transform *t, int train, int epoch, uint32_t index, int w,
                         int h, struct gm_image_box *box, int *flip);

/* torchvision's RandomResizedCrop.get_params with draws from rng_u01 (uniform [0, 1) doubles)
 * and rng_below (uniform integers in [0, bound)), exported for the test against torchvision's
 * fallback.  scale and ratio as in struct gm_transform. */
struct gm_rng;
void gm_transform_random_crop(struct gm_rng *rng, int w, int h, const double scale[2],
                              const double ratio[2], struct gm_image_box *box);

/* The output side of t for an image of w x h (t->size, or the image's own when 0). */
void gm_transform_out_size(const struct gm_transform *t, int w, int h, int *ow, int *oh);

/* img (c channels) -> out, c planes of ow x oh floats (gm_transform_out_size), for the box and
 * flip of gm_transform_params; u8 is scratch of at least gm_transform_scratch_bytes.
 * -ENOMEM, -EINVAL (a box outside the image: a programmer error). */
int gm_transform_apply(const struct gm_transform *t, int train, const struct gm_image *img,
                       const struct gm_image_box *box, int flip, float *out, uint8_t *u8,
                       struct gm_image_scratch *s) GM_MUST_CHECK;
/* Bytes of u8 scratch gm_transform_apply needs for an image of w x h with c channels. */
size_t gm_transform_scratch_bytes(const struct gm_transform *t, int w, int h, int c);

/* The eval resize's intermediate size (torchvision's Resize(int) for PIL): the shorter side
 * becomes t->resize, the longer int(resize * long / short). */
void gm_transform_resize_size(int resize, int w, int h, int *rw, int *rh);

#endif
