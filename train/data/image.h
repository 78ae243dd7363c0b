/*
 * train/data/image.h - one photo: decoding a PNG or JPEG file into 8-bit pixels, and the one
 * resampler (a box of the image to an output size, optionally mirrored).  Used by the eager
 * folder reader (folder.c) and the streaming loader (loader.c, through augment.c).
 *
 * Choices (the detail is in image.c):
 * - The decoder is picked from the file's first bytes, not its name; libpng and libjpeg(-turbo).
 *   Pixels come out HWC (interleaved) with the asked number of channels: gray -> RGB
 *   replicates, RGB -> gray is BT.601 luma as PIL's convert("L").
 * - Failures never log: they return GM_ERR_DATA (-ENOMEM for allocation) and write a one-line
 *   reason "<path>: <problem>" into the caller's buffer, so a caller that decodes on several
 *   threads can report the first bad file in a fixed order.
 * - Resampling is PIL's BILINEAR (a triangle filter widened by the scale when shrinking, so it
 *   antialiases as torchvision's PIL path does), separable, horizontal pass first, in float;
 *   PIL rounds its horizontal pass to 8 bits and uses 22-bit fixed-point weights, so the two
 *   differ by at most one level (1/255) per pixel.
 *
 * Threads: no shared state; a struct gm_image_scratch belongs to one thread.
 */
#ifndef GM_TRAIN_DATA_IMAGE_H
#define GM_TRAIN_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_IMAGE_MAX_SIDE 32768
#define GM_IMAGE_MAX_DECODED ((size_t)1 << 27) /* bytes of one decoded image */
#define GM_IMAGE_MSG_MAX 512

struct gm_image {
    uint8_t *px; /* owned: h x w x c bytes, HWC */
    int w, h, c; /* c is 1 or 3 */
};

/* A rectangle of an image, in pixels: columns [x, x + w), rows [y, y + h). */
struct gm_image_box {
    int x, y, w, h;
};

/* Reused buffers of one thread's resampling; zero it before first use. */
struct gm_image_scratch {
    float *tmp; /* owned: the horizontal pass */
    size_t tmp_cap;
};

/* Decodes the PNG or JPEG file at path into img (cleared on entry) with `channels` (1 or 3)
 * channels.  GM_ERR_DATA with msg = "<path>: <problem>" (no log), -ENOMEM. */
int gm_image_decode(const char *path, int channels, struct gm_image *img, char *msg,
                    size_t msg_len) GM_MUST_CHECK;
/* Releases img->px and zeroes img; NULL-safe, idempotent. */
void gm_image_free(struct gm_image *img);

/* Resamples box of src to dst, c planes of dh x dw bytes (CHW); flip mirrors the columns of
 * the output (torchvision's hflip after the resize).  A box the size of the output is an exact
 * copy.  The box must lie inside src and dw, dh >= 1 (-EINVAL otherwise); -ENOMEM. */
int gm_image_resample(const struct gm_image *src, const struct gm_image_box *box, int dw, int dh,
                      int flip, uint8_t *dst, struct gm_image_scratch *s) GM_MUST_CHECK;
void gm_image_scratch_free(struct gm_image_scratch *s);

#endif
