/*
 * train/data/image.c - decoding and resampling of one photo (see image.h).
 *
 * Decoding (moved from folder.c, unchanged in what it accepts):
 * - PNG: libpng's low-level reader; palette and low bit depths expanded, 16 bits reduced to
 *   their high byte, alpha dropped (as PIL's convert("RGB") does), gAMA and other colour chunks
 *   ignored (values as stored).  JPEG: libjpeg(-turbo), grayscale kept, YCbCr/RGB to RGB, CMYK
 *   refused; a corrupt-data warning that means missing or damaged entropy data (premature end
 *   of file, of a data segment, bad Huffman code, resync) makes the image an error, other
 *   warnings are ignored.  Both libraries report errors by longjmp into the decoder; their
 *   state lives in a struct owned by the caller of the function that calls setjmp, so nothing
 *   it needs is an indeterminate local after the jump.  Images larger than 32768 on a side or
 *   2^27 decoded bytes are refused.
 * - Channels: gray -> RGB replicates; RGB -> gray is ITU-R BT.601 luma in 16-bit fixed point,
 *   (19595 R + 38470 G + 7471 B + 32768) >> 16, as PIL's convert("L") computes it.
 *
 * Resampling: separable bilinear (triangle) filter with pixel centres at +0.5, widened by the
 * scale factor when shrinking, so downscaling averages every source pixel instead of aliasing
 * (PIL's BILINEAR; upscaling is plain bilinear with edge clamping).  The taps cover the box
 * only (as PIL after a crop).  Float arithmetic in a fixed order (C11 mode: no FMA
 * contraction), the horizontal pass first, rounded to nearest at the end.
 */
#include "train/data/image.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

/* ------------------------------------------------------------------------------------------ */
/* decoding                                                                                   */

struct jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg sees only this */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int corrupt; /* a warning that means damaged image data */
};

/* Decoder state; lives in decode_file's frame, so it is not a local of the setjmp callers. */
struct decoder {
    const char *path;
    char *out; /* borrowed: the caller's message buffer */
    size_t out_len;
    char msg[JMSG_LENGTH_MAX];
    uint8_t *px;     /* owned: h x w x c (HWC) */
    int w, h, c;     /* c is 1 or 3 */
    uint8_t **rows;  /* owned: PNG row pointers */
    png_structp png; /* owned while decoding */
    png_infop info;
    struct jpeg_decompress_struct jpeg;
    struct jpeg_err jerr;
    int jpeg_live;
};

__attribute__((format(printf, 2, 3))) static void say(struct decoder *d, const char *fmt, ...)
{
    va_list ap;

    if (d->out == NULL || d->out_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(d->out, d->out_len, fmt, ap);
    va_end(ap);
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    struct decoder *d = png_get_error_ptr(png);

    snprintf(d->msg, sizeof(d->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static int size_ok(struct decoder *d, const char *kind, uint64_t w, uint64_t h, uint64_t c)
{
    if (w == 0 || h == 0 || w > GM_IMAGE_MAX_SIDE || h > GM_IMAGE_MAX_SIDE ||
        w * h * c > GM_IMAGE_MAX_DECODED) {
        say(d,
            "%s: %s image of %llux%llu is empty or larger than the limit (%d per side, %zu "
            "bytes)",
            d->path, kind, (unsigned long long)w, (unsigned long long)h, GM_IMAGE_MAX_SIDE,
            GM_IMAGE_MAX_DECODED);
        return 0;
    }
    return 1;
}

static int alloc_pixels(struct decoder *d)
{
    d->px = malloc((size_t)d->w * (size_t)d->h * (size_t)d->c);
    if (d->px == NULL) {
        say(d, "%s: out of memory decoding a %dx%d image", d->path, d->w, d->h);
        return -ENOMEM;
    }
    return 0;
}

static int png_decode(FILE *f, struct decoder *d)
{
    int err;

    d->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, d, png_on_error, png_on_warning);
    if (d->png != NULL)
        d->info = png_create_info_struct(d->png);
    if (d->png == NULL || d->info == NULL) {
        say(d, "%s: out of memory creating a PNG decoder", d->path);
        return -ENOMEM;
    }
    if (setjmp(png_jmpbuf(d->png))) {
        say(d, "%s: cannot decode PNG: %s", d->path, d->msg);
        return GM_ERR_DATA;
    }
    png_init_io(d->png, f);
    png_set_user_limits(d->png, GM_IMAGE_MAX_SIDE, GM_IMAGE_MAX_SIDE);
    png_read_info(d->png, d->info);
    png_set_expand(d->png);      /* palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha */
    png_set_strip_16(d->png);    /* 16 -> 8 bits: the high byte */
    png_set_strip_alpha(d->png); /* dropped, not composited */
    (void)png_set_interlace_handling(d->png);
    png_read_update_info(d->png, d->info);
    d->w = (int)png_get_image_width(d->png, d->info);
    d->h = (int)png_get_image_height(d->png, d->info);
    d->c = png_get_channels(d->png, d->info);
    if (!size_ok(d, "PNG", (uint64_t)d->w, (uint64_t)d->h, 3))
        return GM_ERR_DATA;
    if ((d->c != 1 && d->c != 3) || png_get_rowbytes(d->png, d->info) != (size_t)d->w * d->c) {
        say(d, "%s: cannot decode PNG: unexpected layout (%d channels)", d->path, d->c);
        return GM_ERR_DATA;
    }
    err = alloc_pixels(d);
    if (err)
        return err;
    d->rows = malloc((size_t)d->h * sizeof(*d->rows));
    if (d->rows == NULL) {
        say(d, "%s: out of memory decoding", d->path);
        return -ENOMEM;
    }
    for (int y = 0; y < d->h; y++)
        d->rows[y] = d->px + (size_t)y * (size_t)d->w * (size_t)d->c;
    png_read_image(d->png, d->rows);
    return 0;
}

static void jpeg_on_error(j_common_ptr cinfo)
{
    struct jpeg_err *e = (struct jpeg_err *)cinfo->err;

    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    struct jpeg_err *e = (struct jpeg_err *)cinfo->err;
    int code = cinfo->err->msg_code;

    if (level >= 0)
        return; /* trace messages */
    cinfo->err->num_warnings++;
    if (!e->corrupt && (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER ||
                        code == JWRN_HUFF_BAD_CODE || code == JWRN_MUST_RESYNC)) {
        cinfo->err->format_message(cinfo, e->msg);
        e->corrupt = 1;
    }
}

static int jpeg_decode(FILE *f, struct decoder *d)
{
    int err;

    d->jpeg.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = jpeg_on_error;
    d->jerr.pub.emit_message = jpeg_on_message;
    if (setjmp(d->jerr.jb)) {
        say(d, "%s: cannot decode JPEG: %s", d->path, d->jerr.msg);
        return GM_ERR_DATA;
    }
    jpeg_create_decompress(&d->jpeg);
    d->jpeg_live = 1;
    jpeg_stdio_src(&d->jpeg, f);
    (void)jpeg_read_header(&d->jpeg, TRUE);
    switch (d->jpeg.jpeg_color_space) {
    case JCS_GRAYSCALE:
        d->jpeg.out_color_space = JCS_GRAYSCALE;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        d->jpeg.out_color_space = JCS_RGB;
        break;
    default:
        say(d, "%s: cannot decode JPEG: unsupported colour space %d (CMYK?)", d->path,
            (int)d->jpeg.jpeg_color_space);
        return GM_ERR_DATA;
    }
    if (!size_ok(d, "JPEG", d->jpeg.image_width, d->jpeg.image_height, 3))
        return GM_ERR_DATA;
    (void)jpeg_start_decompress(&d->jpeg);
    d->w = (int)d->jpeg.output_width;
    d->h = (int)d->jpeg.output_height;
    d->c = d->jpeg.output_components;
    if (d->c != 1 && d->c != 3) {
        say(d, "%s: cannot decode JPEG: %d output components", d->path, d->c);
        return GM_ERR_DATA;
    }
    err = alloc_pixels(d);
    if (err)
        return err;
    while (d->jpeg.output_scanline < d->jpeg.output_height) {
        JSAMPROW row = d->px + (size_t)d->jpeg.output_scanline * (size_t)d->w * (size_t)d->c;

        (void)jpeg_read_scanlines(&d->jpeg, &row, 1);
    }
    (void)jpeg_finish_decompress(&d->jpeg);
    if (d->jerr.corrupt) {
        say(d, "%s: cannot decode JPEG: %s", d->path, d->jerr.msg);
        return GM_ERR_DATA;
    }
    return 0;
}

static void decoder_free(struct decoder *d)
{
    if (d->png != NULL)
        png_destroy_read_struct(&d->png, d->info != NULL ? &d->info : NULL, NULL);
    if (d->jpeg_live)
        jpeg_destroy_decompress(&d->jpeg);
    free(d->rows);
    free(d->px);
    memset(d, 0, sizeof(*d));
}

/* Decodes path into d->px (HWC, the file's channels); the caller frees d either way. */
static int decode_file(const char *path, struct decoder *d, char *msg, size_t msg_len)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t head[8];
    size_t got;
    FILE *f;
    int err;

    memset(d, 0, sizeof(*d));
    d->path = path;
    d->out = msg;
    d->out_len = msg_len;
    f = fopen(path, "rb");
    if (f == NULL) {
        say(d, "%s: cannot open: %s", path, gm_strerror(-errno));
        return GM_ERR_DATA;
    }
    got = fread(head, 1, sizeof(head), f);
    rewind(f);
    if (got == sizeof(head) && memcmp(head, png_sig, sizeof(png_sig)) == 0) {
        err = png_decode(f, d);
    } else if (got >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) {
        err = jpeg_decode(f, d);
    } else {
        say(d, "%s: not a PNG or JPEG file (%s)", path,
            ferror(f)            ? "read error"
            : got < sizeof(head) ? "too short"
                                 : "unknown signature");
        err = GM_ERR_DATA;
    }
    fclose(f);
    return err;
}

/* Interleaved src (hw pixels of sc channels) -> interleaved dst of tc channels. */
static void convert_channels(const uint8_t *src, int sc, uint8_t *dst, int tc, size_t hw)
{
    if (sc == 1) { /* gray -> RGB */
        for (size_t i = 0; i < hw; i++)
            dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
        return;
    }
    (void)tc; /* RGB -> gray, BT.601 luma */
    for (size_t i = 0; i < hw; i++) {
        const uint8_t *p = src + 3 * i;

        dst[i] = (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16);
    }
}

int gm_image_decode(const char *path, int channels, struct gm_image *img, char *msg, size_t msg_len)
{
    struct decoder d;
    int err;

    memset(img, 0, sizeof(*img));
    if (msg != NULL && msg_len > 0)
        msg[0] = '\0';
    if (channels != 1 && channels != 3)
        return -EINVAL;
    err = decode_file(path, &d, msg, msg_len);
    if (err)
        goto out;
    img->w = d.w;
    img->h = d.h;
    img->c = channels;
    if (d.c == channels) {
        img->px = d.px; /* moved */
        d.px = NULL;
        goto out;
    }
    img->px = malloc((size_t)d.w * (size_t)d.h * (size_t)channels);
    if (img->px == NULL) {
        say(&d, "%s: out of memory converting a %dx%d image", path, d.w, d.h);
        err = -ENOMEM;
        goto out;
    }
    convert_channels(d.px, d.c, img->px, channels, (size_t)d.w * (size_t)d.h);
out:
    decoder_free(&d);
    if (err)
        gm_image_free(img);
    return err;
}

void gm_image_free(struct gm_image *img)
{
    if (img == NULL)
        return;
    free(img->px);
    memset(img, 0, sizeof(*img));
}

/* ------------------------------------------------------------------------------------------ */
/* resampling                                                                                 */

/* Filter taps for one axis: output i reads in[first[i] .. first[i] + count[i]) with weights
 * w[i * stride ..]. */
struct taps {
    int *first;
    int *count;
    float *w;
    int stride;
};

static void taps_free(struct taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
    memset(t, 0, sizeof(*t));
}

/* Taps from in samples starting at offset to out samples. */
static int taps_init(struct taps *t, int offset, int in, int out)
{
    const double scale = (double)in / (double)out;
    const double fs = scale > 1.0 ? scale : 1.0; /* filter widened when shrinking */

    memset(t, 0, sizeof(*t));
    t->stride = (int)ceil(fs) * 2 + 2;
    t->first = malloc((size_t)out * sizeof(*t->first));
    t->count = malloc((size_t)out * sizeof(*t->count));
    t->w = malloc((size_t)out * (size_t)t->stride * sizeof(*t->w));
    if (t->first == NULL || t->count == NULL || t->w == NULL) {
        taps_free(t);
        return -ENOMEM;
    }
    for (int i = 0; i < out; i++) {
        const double center = ((double)i + 0.5) * scale;
        float *w = t->w + (size_t)i * (size_t)t->stride;
        int lo = (int)floor(center - fs), hi = (int)ceil(center + fs);
        double wsum = 0.0;
        int n = 0;

        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        for (int j = lo; j < hi && n < t->stride; j++) {
            double x = fabs(((double)j + 0.5 - center) / fs);
            double v = x < 1.0 ? 1.0 - x : 0.0;

            w[n++] = (float)v;
            wsum += v;
        }
        /* wsum >= 0.5: the source pixel under the centre is always within the taps. */
        for (int k = 0; k < n; k++)
            w[k] = (float)((double)w[k] / wsum);
        t->first[i] = lo + offset;
        t->count[i] = n;
    }
    return 0;
}

static int grow(void **p, size_t *cap, size_t need)
{
    void *np;

    if (need <= *cap)
        return 0;
    np = realloc(*p, need);
    if (np == NULL)
        return -ENOMEM;
    *p = np;
    *cap = need;
    return 0;
}

/* The exact copy: a box of the output's size. */
static void copy_box(const struct gm_image *src, const struct gm_image_box *b, int flip,
                     uint8_t *dst)
{
    const size_t c = (size_t)src->c, plane = (size_t)b->w * (size_t)b->h;

    for (int y = 0; y < b->h; y++) {
        const uint8_t *row = src->px + ((size_t)(b->y + y) * (size_t)src->w + (size_t)b->x) * c;

        for (int x = 0; x < b->w; x++) {
            const size_t ox = (size_t)(flip ? b->w - 1 - x : x);

            for (size_t ch = 0; ch < c; ch++)
                dst[ch * plane + (size_t)y * (size_t)b->w + ox] = row[(size_t)x * c + ch];
        }
    }
}

int gm_image_resample(const struct gm_image *src, const struct gm_image_box *box, int dw, int dh,
                      int flip, uint8_t *dst, struct gm_image_scratch *s)
{
    const size_t c = (size_t)src->c, plane = (size_t)dw * (size_t)dh;
    struct taps tx, ty;
    int err;

    if (dw < 1 || dh < 1 || box->w < 1 || box->h < 1 || box->x < 0 || box->y < 0 ||
        box->x > src->w - box->w || box->y > src->h - box->h)
        return -EINVAL;
    if (box->w == dw && box->h == dh) {
        copy_box(src, box, flip, dst);
        return 0;
    }
    err = grow((void **)&s->tmp, &s->tmp_cap, (size_t)box->h * (size_t)dw * c * sizeof(float));
    if (err)
        return err;
    err = taps_init(&tx, box->x, box->w, dw);
    if (err)
        return err;
    err = taps_init(&ty, 0, box->h, dh); /* rows of tmp, which starts at box->y */
    if (err) {
        taps_free(&tx);
        return err;
    }
    for (int y = 0; y < box->h; y++) {
        const uint8_t *row = src->px + (size_t)(box->y + y) * (size_t)src->w * c;
        float *out = s->tmp + (size_t)y * (size_t)dw * c;

        for (int x = 0; x < dw; x++) {
            const float *w = tx.w + (size_t)x * (size_t)tx.stride;
            const uint8_t *p = row + (size_t)tx.first[x] * c;

            for (size_t ch = 0; ch < c; ch++) {
                float acc = 0.0f;

                for (int k = 0; k < tx.count[x]; k++)
                    acc += w[k] * (float)p[(size_t)k * c + ch];
                out[(size_t)x * c + ch] = acc;
            }
        }
    }
    for (int y = 0; y < dh; y++) {
        const float *w = ty.w + (size_t)y * (size_t)ty.stride;
        const float *base = s->tmp + (size_t)ty.first[y] * (size_t)dw * c;

        for (int x = 0; x < dw; x++) {
            const size_t ox = (size_t)(flip ? dw - 1 - x : x);

            for (size_t ch = 0; ch < c; ch++) {
                float acc = 0.0f;

                for (int k = 0; k < ty.count[y]; k++)
                    acc += w[k] * base[((size_t)k * (size_t)dw + (size_t)x) * c + ch];
                acc = acc < 0.0f ? 0.0f : acc > 255.0f ? 255.0f : acc;
                dst[ch * plane + (size_t)y * (size_t)dw + ox] = (uint8_t)(acc + 0.5f);
            }
        }
    }
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

void gm_image_scratch_free(struct gm_image_scratch *s)
{
    if (s == NULL)
        return;
    free(s->tmp);
    memset(s, 0, sizeof(*s));
}
