/*
 * train/data/folder.c - the "folder" dataset: dir/<class>/<image>, like PyTorch's ImageFolder.
 *
 * Choices (all deterministic, so every rank builds identical bytes from identical files):
 * - Classes are the subdirectories of dir (symlinks followed, names starting with '.' skipped),
 *   sorted with strcmp (not the locale); label = position.  At most 256 classes.  Inside a
 *   class: regular files named *.png, *.jpg or *.jpeg (case-insensitive), sorted with strcmp;
 *   other files are ignored.  No class folders, or a class with no image, is an error.
 * - Decoding picks the decoder from the file's first bytes, not its name.  PNG: libpng's
 *   low-level reader; palette and low bit depths expanded, 16 bits reduced to their high byte,
 *   alpha dropped (as PIL's convert("RGB") does), gAMA and other colour chunks ignored (values
 *   as stored).  JPEG: libjpeg(-turbo), grayscale kept, YCbCr/RGB to RGB, CMYK refused; a
 *   corrupt-data warning that means missing or damaged entropy data (premature end of file,
 *   of a data segment, bad Huffman code, resync) makes the image an error, other warnings are
 *   ignored.  Both libraries report errors by longjmp into the decoder; their state lives in a
 *   struct owned by the caller of the function that calls setjmp, so nothing it needs is an
 *   indeterminate local after the jump.  Images larger than 32768 on a side or 2^27 decoded
 *   bytes are refused.
 * - Channels: gray -> RGB replicates; RGB -> gray is ITU-R BT.601 luma in 16-bit fixed point,
 *   (19595 R + 38470 G + 7471 B + 32768) >> 16, as PIL's convert("L") computes it.
 * - Resizing (image_size > 0): separable bilinear (triangle) filter with pixel centres at +0.5,
 *   widened by the scale factor when shrinking, so downscaling averages every source pixel
 *   instead of aliasing (what PIL's BILINEAR resample does; upscaling is plain bilinear with
 *   edge clamping).  A same-size "resize" is an exact copy.  Float arithmetic with a fixed
 *   order of operations (C11 mode: no FMA contraction), rounded to nearest.
 * - Split: per class, with m images and k = round(m * test_split), clamped to [1, m - 1] when
 *   m >= 2 and test_split > 0 (so every class with >= 2 images is in both sets) and 0 when m is
 *   1: a partial Fisher-Yates with gm_rng(seed, SPLIT_STREAM ^ class) picks the k test images.
 *   Both sets keep the sorted (class, file) order.
 */
#include "train/data/folder.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "common/log.h"
#include "train/data/file.h"
#include "train/nn/rng.h"

#define MAX_CLASSES 256
#define MAX_SIDE 32768
#define MAX_DECODED ((size_t)1 << 27)
#define SPLIT_STREAM 0x53504c4954000000ULL /* "SPLIT" */

/* ------------------------------------------------------------------------------------------ */
/* listing                                                                                    */

struct item {
    char *path; /* owned */
    int label;
    int is_test;
    size_t slot; /* index inside its split */
};

struct listing {
    char **names; /* owned, NULL-terminated */
    int classes;
    size_t *start; /* owned: classes + 1 offsets into items */
    struct item *items;
    size_t n, cap;
};

static void listing_free(struct listing *l)
{
    gm_data_names_free(l->names);
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].path);
    free(l->items);
    free(l->start);
    memset(l, 0, sizeof(*l));
}

static int cmp_dirent(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* 1 when dir/name is a directory (want_dir) or a regular file (!want_dir); follows links. */
static int entry_is(const char *dir, const struct dirent *de, int want_dir)
{
    char path[PATH_MAX];
    struct stat st;
    int r;

    if (de->d_type == DT_DIR)
        return want_dir;
    if (de->d_type == DT_REG)
        return !want_dir;
    if (de->d_type != DT_LNK && de->d_type != DT_UNKNOWN)
        return 0;
    r = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    if (r < 0 || (size_t)r >= sizeof(path) || stat(path, &st) != 0)
        return 0;
    return want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

static int has_image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');

    return dot != NULL && dot != name &&
           (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
            strcasecmp(dot, ".jpeg") == 0);
}

static int scan(const char *dir, struct dirent ***ents, int *count)
{
    *count = scandir(dir, ents, NULL, cmp_dirent);
    if (*count < 0) {
        int e = errno;

        *ents = NULL;
        if (e == ENOMEM) {
            gm_err("%s: out of memory listing the directory", dir);
            return -ENOMEM;
        }
        gm_err("%s: cannot list directory: %s", dir, gm_strerror(-e));
        return GM_ERR_DATA;
    }
    return 0;
}

static void scan_free(struct dirent **ents, int count)
{
    for (int i = 0; i < count; i++)
        free(ents[i]);
    free(ents);
}

static int add_item(struct listing *l, const char *class_dir, const char *name, int label)
{
    char path[PATH_MAX];
    int err = gm_data_path_join(path, sizeof(path), class_dir, name);

    if (err)
        return err;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct item *p = realloc(l->items, cap * sizeof(*p));

        if (p == NULL)
            goto oom;
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n].path = strdup(path);
    if (l->items[l->n].path == NULL)
        goto oom;
    l->items[l->n].label = label;
    l->items[l->n].is_test = 0;
    l->items[l->n].slot = 0;
    l->n++;
    return 0;
oom:
    gm_err("%s: out of memory listing images", class_dir);
    return -ENOMEM;
}

static int list_folder(const char *dir, struct listing *l)
{
    struct dirent **top = NULL, **files = NULL;
    int ntop = 0, nfiles = 0, err;

    err = scan(dir, &top, &ntop);
    if (err)
        return err;
    l->names = calloc((size_t)ntop + 1, sizeof(*l->names));
    l->start = calloc((size_t)ntop + 1, sizeof(*l->start));
    if (l->names == NULL || l->start == NULL) {
        gm_err("%s: out of memory listing classes", dir);
        err = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < ntop; i++) {
        const char *name = top[i]->d_name;

        if (name[0] == '.' || !entry_is(dir, top[i], 1))
            continue;
        if (l->classes == MAX_CLASSES) {
            gm_err("%s: more than %d class folders (labels are one byte)", dir, MAX_CLASSES);
            err = GM_ERR_DATA;
            goto out;
        }
        l->names[l->classes] = strdup(name);
        if (l->names[l->classes] == NULL) {
            gm_err("%s: out of memory listing classes", dir);
            err = -ENOMEM;
            goto out;
        }
        l->classes++;
    }
    if (l->classes == 0) {
        gm_err("%s: no class folders (expected %s/<class>/<image>.png|.jpg|.jpeg)", dir, dir);
        err = GM_ERR_DATA;
        goto out;
    }
    for (int k = 0; k < l->classes; k++) {
        char class_dir[PATH_MAX];

        l->start[k] = l->n;
        err = gm_data_path_join(class_dir, sizeof(class_dir), dir, l->names[k]);
        if (err)
            goto out;
        err = scan(class_dir, &files, &nfiles);
        if (err)
            goto out;
        for (int i = 0; i < nfiles; i++) {
            const char *name = files[i]->d_name;

            if (name[0] == '.' || !has_image_ext(name) || !entry_is(class_dir, files[i], 0))
                continue;
            err = add_item(l, class_dir, name, k);
            if (err)
                goto out;
        }
        scan_free(files, nfiles);
        files = NULL;
        nfiles = 0;
        if (l->n == l->start[k]) {
            gm_err("%s: empty class folder: no .png, .jpg or .jpeg files", class_dir);
            err = GM_ERR_DATA;
            goto out;
        }
        if (l->n > GM_DATA_MAX_SAMPLES) {
            gm_err("%s: more than %llu images", dir, (unsigned long long)GM_DATA_MAX_SAMPLES);
            err = GM_ERR_DATA;
            goto out;
        }
    }
    l->start[l->classes] = l->n;
out:
    scan_free(files, nfiles);
    scan_free(top, ntop);
    return err;
}

/* Marks the test items and numbers each split's items in order; returns the test count. */
static int split(struct listing *l, double test_split, uint64_t seed, size_t *n_test)
{
    uint32_t *order = NULL;
    size_t train_slot = 0, test_slot = 0;

    for (int k = 0; k < l->classes; k++) {
        size_t m = l->start[k + 1] - l->start[k];
        size_t kt = (size_t)((double)m * test_split + 0.5);
        struct gm_rng rng;
        uint32_t *p;

        if (test_split <= 0.0 || m < 2)
            kt = 0;
        else if (kt < 1)
            kt = 1;
        else if (kt > m - 1)
            kt = m - 1;
        if (kt == 0)
            continue;
        p = realloc(order, m * sizeof(*order));
        if (p == NULL) {
            free(order);
            gm_err("%s: out of memory splitting", l->names[k]);
            return -ENOMEM;
        }
        order = p;
        for (size_t i = 0; i < m; i++)
            order[i] = (uint32_t)i;
        gm_rng_init(&rng, seed, SPLIT_STREAM ^ (uint64_t)k);
        /* Partial Fisher-Yates: order[0..kt) becomes a uniform kt-subset. */
        for (size_t i = 0; i < kt; i++) {
            size_t j = i + gm_rng_below(&rng, (uint32_t)(m - i));
            uint32_t t = order[i];

            order[i] = order[j];
            order[j] = t;
            l->items[l->start[k] + order[i]].is_test = 1;
        }
    }
    free(order);
    for (size_t i = 0; i < l->n; i++)
        l->items[i].slot = l->items[i].is_test ? test_slot++ : train_slot++;
    *n_test = test_slot;
    return 0;
}

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
    if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE || w * h * c > MAX_DECODED) {
        gm_err("%s: %s image of %llux%llu is empty or larger than the limit (%d per side, %zu "
               "bytes)",
               d->path, kind, (unsigned long long)w, (unsigned long long)h, MAX_SIDE, MAX_DECODED);
        return 0;
    }
    return 1;
}

static int alloc_pixels(struct decoder *d)
{
    d->px = malloc((size_t)d->w * (size_t)d->h * (size_t)d->c);
    if (d->px == NULL) {
        gm_err("%s: out of memory decoding a %dx%d image", d->path, d->w, d->h);
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
        gm_err("%s: out of memory creating a PNG decoder", d->path);
        return -ENOMEM;
    }
    if (setjmp(png_jmpbuf(d->png))) {
        gm_err("%s: cannot decode PNG: %s", d->path, d->msg);
        return GM_ERR_DATA;
    }
    png_init_io(d->png, f);
    png_set_user_limits(d->png, MAX_SIDE, MAX_SIDE);
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
        gm_err("%s: cannot decode PNG: unexpected layout (%d channels)", d->path, d->c);
        return GM_ERR_DATA;
    }
    err = alloc_pixels(d);
    if (err)
        return err;
    d->rows = malloc((size_t)d->h * sizeof(*d->rows));
    if (d->rows == NULL) {
        gm_err("%s: out of memory decoding", d->path);
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
        gm_err("%s: cannot decode JPEG: %s", d->path, d->jerr.msg);
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
        gm_err("%s: cannot decode JPEG: unsupported colour space %d (CMYK?)", d->path,
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
        gm_err("%s: cannot decode JPEG: %d output components", d->path, d->c);
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
        gm_err("%s: cannot decode JPEG: %s", d->path, d->jerr.msg);
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

/* Decodes path into d->px (HWC).  Logs on failure; the caller frees d either way. */
static int decode_file(const char *path, struct decoder *d)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t head[8];
    size_t got;
    FILE *f;
    int err;

    memset(d, 0, sizeof(*d));
    d->path = path;
    f = fopen(path, "rb");
    if (f == NULL) {
        gm_err("%s: cannot open: %s", path, gm_strerror(-errno));
        return GM_ERR_DATA;
    }
    got = fread(head, 1, sizeof(head), f);
    rewind(f);
    if (got == sizeof(head) && memcmp(head, png_sig, sizeof(png_sig)) == 0) {
        err = png_decode(f, d);
    } else if (got >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) {
        err = jpeg_decode(f, d);
    } else {
        gm_err("%s: not a PNG or JPEG file (%s)", path,
               ferror(f)            ? "read error"
               : got < sizeof(head) ? "too short"
                                    : "unknown signature");
        err = GM_ERR_DATA;
    }
    fclose(f);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* channels and resizing                                                                      */

/* Interleaved src (h*w*sc) -> planar dst (tc planes of h*w). */
static void to_planar(const uint8_t *src, int sc, uint8_t *dst, int tc, size_t hw)
{
    if (sc == tc) {
        for (int ch = 0; ch < tc; ch++)
            for (size_t i = 0; i < hw; i++)
                dst[(size_t)ch * hw + i] = src[i * (size_t)sc + (size_t)ch];
    } else if (sc == 1) { /* gray -> RGB */
        for (int ch = 0; ch < 3; ch++)
            memcpy(dst + (size_t)ch * hw, src, hw);
    } else { /* RGB -> gray, BT.601 luma */
        for (size_t i = 0; i < hw; i++) {
            const uint8_t *p = src + 3 * i;

            dst[i] = (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16);
        }
    }
}

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

static int taps_init(struct taps *t, int in, int out)
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
        t->first[i] = lo;
        t->count[i] = n;
    }
    return 0;
}

/* Resizes one plane src (sh x sw) to dst (dh x dw) with taps tx (columns) and ty (rows);
 * tmp holds sh * dw floats. */
static void resize_plane(const uint8_t *src, int sh, int sw, uint8_t *dst, int dh, int dw,
                         const struct taps *tx, const struct taps *ty, float *tmp)
{
    for (int y = 0; y < sh; y++) {
        const uint8_t *row = src + (size_t)y * (size_t)sw;

        for (int x = 0; x < dw; x++) {
            const float *w = tx->w + (size_t)x * (size_t)tx->stride;
            const uint8_t *p = row + tx->first[x];
            float acc = 0.0f;

            for (int k = 0; k < tx->count[x]; k++)
                acc += w[k] * (float)p[k];
            tmp[(size_t)y * (size_t)dw + (size_t)x] = acc;
        }
    }
    for (int y = 0; y < dh; y++) {
        const float *w = ty->w + (size_t)y * (size_t)ty->stride;
        const float *base = tmp + (size_t)ty->first[y] * (size_t)dw;

        for (int x = 0; x < dw; x++) {
            float acc = 0.0f;

            for (int k = 0; k < ty->count[y]; k++)
                acc += w[k] * base[(size_t)k * (size_t)dw + (size_t)x];
            acc = acc < 0.0f ? 0.0f : acc > 255.0f ? 255.0f : acc;
            dst[(size_t)y * (size_t)dw + (size_t)x] = (uint8_t)(acc + 0.5f);
        }
    }
}

/* Scratch reused across images. */
struct scratch {
    uint8_t *planes;
    size_t planes_cap;
    float *tmp;
    size_t tmp_cap;
};

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

/* d's pixels -> dst (tc planes of dh x dw). */
static int convert(const struct decoder *d, int tc, uint8_t *dst, int dh, int dw, struct scratch *s)
{
    const size_t hw = (size_t)d->h * (size_t)d->w;
    struct taps tx, ty;
    int err;

    if (d->h == dh && d->w == dw) {
        to_planar(d->px, d->c, dst, tc, hw);
        return 0;
    }
    err = grow((void **)&s->planes, &s->planes_cap, (size_t)tc * hw);
    if (err == 0)
        err = grow((void **)&s->tmp, &s->tmp_cap, (size_t)d->h * (size_t)dw * sizeof(float));
    if (err)
        return err;
    to_planar(d->px, d->c, s->planes, tc, hw);
    err = taps_init(&tx, d->w, dw);
    if (err)
        return err;
    err = taps_init(&ty, d->h, dh);
    if (err) {
        taps_free(&tx);
        return err;
    }
    for (int ch = 0; ch < tc; ch++)
        resize_plane(s->planes + (size_t)ch * hw, d->h, d->w,
                     dst + (size_t)ch * (size_t)dh * (size_t)dw, dh, dw, &tx, &ty, s->tmp);
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* loader                                                                                     */

static int alloc_split(struct gm_dataset *ds, size_t n, size_t sample, const char *dir)
{
    ds->n = n;
    if (n == 0)
        return 0;
    ds->images = malloc(n * sample);
    ds->labels = malloc(n);
    if (ds->images == NULL || ds->labels == NULL) {
        gm_err("%s: out of memory for %zu images of %zu bytes", dir, n, sample);
        return -ENOMEM;
    }
    return 0;
}

int gm_data_folder_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                        struct gm_dataset *test)
{
    struct listing l;
    struct scratch s;
    struct decoder d;
    size_t n_test = 0, sample = 0;
    const int tc = spec->channels;
    int dh = spec->image_size, dw = spec->image_size;
    const char *first_path = NULL;
    int err;

    memset(&l, 0, sizeof(l));
    memset(&s, 0, sizeof(s));
    memset(&d, 0, sizeof(d));
    err = list_folder(spec->dir, &l);
    if (err)
        goto out;
    err = split(&l, spec->test_split, spec->seed, &n_test);
    if (err)
        goto out;
    for (size_t i = 0; i < l.n; i++) {
        struct item *it = &l.items[i];
        struct gm_dataset *ds = it->is_test ? test : train;

        err = decode_file(it->path, &d);
        if (err)
            goto out;
        if (i == 0) {
            if (spec->image_size == 0) {
                dh = d.h;
                dw = d.w;
                first_path = it->path;
                if ((size_t)tc * (size_t)dh * (size_t)dw > GM_DATA_MAX_SAMPLE_BYTES) {
                    gm_err("%s: a %dx%d image is larger than the limit of %zu bytes a sample; "
                           "set image_size to resize",
                           it->path, dw, dh, GM_DATA_MAX_SAMPLE_BYTES);
                    err = GM_ERR_DATA;
                    goto out;
                }
            }
            sample = (size_t)tc * (size_t)dh * (size_t)dw;
            if ((uint64_t)sample * l.n > GM_DATA_MAX_BYTES) {
                gm_err("%s: %zu images of %zu bytes are more than the limit of %llu bytes",
                       spec->dir, l.n, sample, (unsigned long long)GM_DATA_MAX_BYTES);
                err = GM_ERR_DATA;
                goto out;
            }
            err = alloc_split(train, l.n - n_test, sample, spec->dir);
            if (err == 0)
                err = alloc_split(test, n_test, sample, spec->dir);
            if (err)
                goto out;
        } else if (spec->image_size == 0 && (d.h != dh || d.w != dw)) {
            gm_err("%s: image is %dx%d but the first image (%s) is %dx%d; set image_size to "
                   "resize",
                   it->path, d.w, d.h, first_path, dw, dh);
            err = GM_ERR_DATA;
            goto out;
        }
        err = convert(&d, tc, ds->images + it->slot * sample, dh, dw, &s);
        if (err) {
            gm_err("%s: out of memory resizing", it->path);
            goto out;
        }
        ds->labels[it->slot] = (uint8_t)it->label;
        decoder_free(&d);
    }
    train->c = test->c = tc;
    train->h = test->h = dh;
    train->w = test->w = dw;
    train->classes = test->classes = l.classes;
    err = gm_data_names_dup(l.names, l.classes, &test->class_names);
    if (err) {
        gm_err("%s: out of memory", spec->dir);
        goto out;
    }
    train->class_names = l.names; /* moved */
    l.names = NULL;
out:
    decoder_free(&d);
    free(s.planes);
    free(s.tmp);
    listing_free(&l);
    return err;
}
