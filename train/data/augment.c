/*
 * train/data/augment.c - torchvision's photo transforms on our decoder and resampler (see
 * augment.h).
 *
 * Rounding follows torchvision's Python: round() is round-half-to-even (nearbyint in the
 * default rounding mode), int() truncates, // floors (non-negative here).  The crop's uniform
 * draws are doubles from gm_rng (torchvision draws float32 from torch's generator: the same
 * distribution, not the same numbers; a test gives both the same box).
 */
#include "train/data/augment.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "train/nn/rng.h"

#define AUG_STREAM 0x4155474d00000000ULL /* "AUGM": keeps these streams apart from others */

static int py_round(double v)
{
    return (int)nearbyint(v);
}

void gm_transform_random_crop(struct gm_rng *rng, int w, int h, const double scale[2],
                              const double ratio[2], struct gm_image_box *box)
{
    const double area = (double)w * (double)h;
    const double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    const double in_ratio = (double)w / (double)h;
    const double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
    const double rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
    int cw, ch;

    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * gm_rng_double(rng));
        double ar = exp(lr0 + (lr1 - lr0) * gm_rng_double(rng));

        cw = py_round(sqrt(target * ar));
        ch = py_round(sqrt(target / ar));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            box->y = (int)gm_rng_below(rng, (uint32_t)(h - ch + 1));
            box->x = (int)gm_rng_below(rng, (uint32_t)(w - cw + 1));
            box->w = cw;
            box->h = ch;
            return;
        }
    }
    /* torchvision's fallback: a central crop of the whole image clamped to the ratio range */
    if (in_ratio < rmin) {
        cw = w;
        ch = py_round((double)cw / rmin);
    } else if (in_ratio > rmax) {
        ch = h;
        cw = py_round((double)ch * rmax);
    } else {
        cw = w;
        ch = h;
    }
    if (cw > w) /* rounding can pass the side by one when the ratio is almost the image's */
        cw = w;
    if (ch > h)
        ch = h;
    box->y = (h - ch) / 2;
    box->x = (w - cw) / 2;
    box->w = cw;
    box->h = ch;
}

void gm_transform_resize_size(int resize, int w, int h, int *rw, int *rh)
{
    const int small = w <= h ? w : h, large = w <= h ? h : w;
    const int long_side = (int)((double)resize * (double)large / (double)small);

    *rw = w <= h ? resize : long_side;
    *rh = w <= h ? long_side : resize;
}

void gm_transform_out_size(const struct gm_transform *t, int w, int h, int *ow, int *oh)
{
    *ow = t->size > 0 ? t->size : w;
    *oh = t->size > 0 ? t->size : h;
}

/* Eval with a resize: the box is the centre crop inside the resized image. */
static int uses_resize(const struct gm_transform *t, int train)
{
    return t->resize > 0 && t->size > 0 && !(train && t->crop);
}

void gm_transform_params(const struct gm_transform *t, int train, int epoch, uint32_t index, int w,
                         int h, struct gm_image_box *box, int *flip)
{
    struct gm_rng rng;
    const int random = train && (t->crop || t->flip);

    if (random)
        gm_rng_init(&rng, t->seed, AUG_STREAM ^ ((uint64_t)(uint32_t)epoch << 32 | index));
    *flip = 0;
    if (train && t->crop && t->size > 0) {
        gm_transform_random_crop(&rng, w, h, t->scale, t->ratio, box);
    } else if (uses_resize(t, train)) {
        int rw, rh;

        gm_transform_resize_size(t->resize, w, h, &rw, &rh);
        box->w = t->size;
        box->h = t->size;
        box->y = py_round((double)(rh - t->size) / 2.0);
        box->x = py_round((double)(rw - t->size) / 2.0);
    } else {
        *box = (struct gm_image_box){0, 0, w, h};
    }
    if (train && t->flip)
        *flip = gm_rng_double(&rng) < 0.5;
}

size_t gm_transform_scratch_bytes(const struct gm_transform *t, int w, int h, int c)
{
    int ow, oh;

    gm_transform_out_size(t, w, h, &ow, &oh);
    if (t->resize > 0 && t->size > 0) {
        int rw, rh;

        gm_transform_resize_size(t->resize, w, h, &rw, &rh);
        if ((size_t)rw * (size_t)rh > (size_t)ow * (size_t)oh)
            return (size_t)c * (size_t)rw * (size_t)rh;
    }
    return (size_t)c * (size_t)ow * (size_t)oh;
}

int gm_transform_apply(const struct gm_transform *t, int train, const struct gm_image *img,
                       const struct gm_image_box *box, int flip, float *out, uint8_t *u8,
                       struct gm_image_scratch *s)
{
    const size_t c = (size_t)img->c;
    float lut[3][256];
    int ow, oh, err;
    size_t plane;

    gm_transform_out_size(t, img->w, img->h, &ow, &oh);
    plane = (size_t)ow * (size_t)oh;
    /* ToTensor then Normalize, as one table per channel: ((v * (1/255)) - mean) / std */
    for (size_t ch = 0; ch < c; ch++)
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ((float)v * (1.0f / 255.0f) - t->mean[ch]) / t->std[ch];
    if (uses_resize(t, train)) {
        int rw, rh;
        struct gm_image_box whole = {0, 0, img->w, img->h};

        gm_transform_resize_size(t->resize, img->w, img->h, &rw, &rh);
        if (box->x < 0 || box->y < 0 || box->x + box->w > rw || box->y + box->h > rh ||
            box->w != ow || box->h != oh)
            return -EINVAL;
        err = gm_image_resample(img, &whole, rw, rh, 0, u8, s);
        if (err)
            return err;
        for (size_t ch = 0; ch < c; ch++)
            for (int y = 0; y < oh; y++) {
                const uint8_t *row =
                    u8 + ch * (size_t)rw * (size_t)rh + (size_t)(box->y + y) * (size_t)rw + box->x;
                float *o = out + ch * plane + (size_t)y * (size_t)ow;

                for (int x = 0; x < ow; x++)
                    o[flip ? ow - 1 - x : x] = lut[ch][row[x]];
            }
        return 0;
    }
    err = gm_image_resample(img, box, ow, oh, flip, u8, s);
    if (err)
        return err;
    for (size_t ch = 0; ch < c; ch++)
        for (size_t i = 0; i < plane; i++)
            out[ch * plane + i] = lut[ch][u8[ch * plane + i]];
    return 0;
}
