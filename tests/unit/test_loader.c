/*
 * tests/unit/test_loader.c - the streaming photo loader (train/data/loader.h) and the crop
 * boxes of train/data/augment.h, without Python (the pixels against torchvision are in
 * test_augment_vs_torch.c).
 *
 * Fixtures: photo folders written here with libpng and libjpeg, of varied sizes (RGB JPEG,
 * RGB and gray PNG).  Checked:
 * - with the defaults a streamed folder gives exactly the eager reader's tensors (bytes / 255)
 *   and the same split;
 * - the tensors of a sample do not depend on the loader's thread count, the prefetch depth,
 *   the order of requests or the batch it comes in; they change with the epoch (augment);
 * - crop boxes stay in the image, have torchvision's area and ratio ranges (or its fallback)
 *   and flip about half of the samples;
 * - train_dir/val_dir; the cache (a full budget decodes nothing after the check);
 * - bad input: one log line with the path and GM_ERR_DATA / GM_ERR_CONFIG; skip_bad.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "common/log.h"
#include "common/test.h"
#include "train/data/augment.h"
#include "train/data/data.h"
#include "train/data/loader.h"
#include "train/nn/rng.h"

GM_TEST_DEFINE_STATE;

static char root[] = "/tmp/gm-test-loader-XXXXXX";
static int log_fd = -1;

/* ---- fixtures ------------------------------------------------------------------------- */

static void mkdirs(const char *rel)
{
    char path[2048], *p;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

/* A w x h picture with c channels from seed: smooth gradients plus a block, so resampling
 * has something to do. */
static void picture(uint8_t *px, int w, int h, int c, unsigned seed)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                unsigned v = (unsigned)(x * (3 + ch) + y * (5 - ch)) + seed * 37u;
                if (x > w / 3 && x < w / 2 && y > h / 4 && y < h / 2)
                    v += 100u + seed;
                px[((size_t)y * (size_t)w + (size_t)x) * (size_t)c + (size_t)ch] =
                    (uint8_t)(v & 0xff);
            }
}

static void write_png(const char *rel, int w, int h, int c, unsigned seed)
{
    png_image img;
    char path[2048];
    uint8_t *px = malloc((size_t)w * (size_t)h * (size_t)c);

    picture(px, w, h, c, seed);
    memset(&img, 0, sizeof(img));
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    GM_CHECK(png_image_write_to_file(&img, path, 0, px, 0, NULL) != 0);
    free(px);
}

static void write_jpeg(const char *rel, int w, int h, unsigned seed)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    char path[2048];
    uint8_t *px = malloc((size_t)w * (size_t)h * 3);
    FILE *f;

    picture(px, w, h, 3, seed);
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "wb");
    GM_CHECK(f != NULL);
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    jpeg_start_compress(&ci, TRUE);
    for (int y = 0; y < h; y++) {
        JSAMPROW row = px + (size_t)y * (size_t)w * 3;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
    free(px);
}

static void write_bytes(const char *rel, const void *p, size_t n)
{
    char path[2048];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "wb");
    GM_CHECK(f != NULL && fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* A folder at rel: classes a, b, c with per images each, sizes 20..60, formats mixed. */
static void make_folder(const char *rel, int per, unsigned seed)
{
    static const char *const classes[] = {"a", "b", "c"};
    char name[512];

    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof(name), "%s/%s", rel, classes[k]);
        mkdirs(name);
        for (int i = 0; i < per; i++) {
            unsigned s = seed * 1000u + (unsigned)(k * 100 + i);
            int w = 20 + (int)((s * 7u) % 41u), h = 20 + (int)((s * 13u) % 41u);

            snprintf(name, sizeof(name), "%s/%s/%03d.%s", rel, classes[k], i,
                     i % 3 == 0 ? "png" : "jpg");
            if (i % 3 == 0)
                write_png(name, w, h, i % 2 ? 3 : 1, s);
            else
                write_jpeg(name, w, h, s);
        }
    }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void log_take(char *buf, size_t size)
{
    off_t end = lseek(log_fd, 0, SEEK_CUR);
    ssize_t n = pread(log_fd, buf, (size_t)end < size - 1 ? (size_t)end : size - 1, 0);

    buf[n > 0 ? n : 0] = 0;
    GM_CHECK(ftruncate(log_fd, 0) == 0);
    lseek(log_fd, 0, SEEK_SET);
}

static struct gm_data_spec spec_of(const char *dir)
{
    struct gm_data_spec s = {.kind = "folder",
                             .dir = dir,
                             .test_split = 0.25,
                             .image_size = 16,
                             .channels = 3,
                             .seed = 7,
                             .crop_scale = {0.08, 1.0},
                             .crop_ratio = {3.0 / 4.0, 4.0 / 3.0},
                             .cache = 0,
                             .loader_threads = 2,
                             .prefetch = 2};
    return s;
}

/* Opening spec fails with want and exactly one error line naming path and problem. */
static void expect_open_error_at(int line, const struct gm_data_spec *spec, int want,
                                 const char *path, const char *problem)
{
    struct gm_loader *l = (struct gm_loader *)&l;
    char buf[4096];
    const char *nl;

    GM_CHECK_ERR(gm_loader_new(spec, 8, &l), want);
    GM_CHECK(l == NULL);
    log_take(buf, sizeof(buf));
    nl = strchr(buf, '\n');
    gm_test_state.checks++;
    if (strncmp(buf, "error: ", 7) != 0 || nl == NULL || nl[1] != 0 || strstr(buf, path) == NULL ||
        strstr(buf, problem) == NULL)
        GM_TEST_FAIL_("case at line %d: want one error line with \"%s\" and \"%s\", log was: %s",
                      line, path, problem, buf);
}
#define EXPECT_OPEN_ERROR(spec, want, path, problem)                                               \
    expect_open_error_at(__LINE__, spec, want, path, problem)

/* Every sample of a split, in batches of b, into out (n * sample floats). */
static void all_samples(struct gm_loader *l, enum gm_split split, int epoch, int b, float *out,
                        int32_t *labels)
{
    int c, h, w;
    size_t n = gm_loader_len(l, split), sample;
    uint32_t idx[64];

    gm_loader_shape(l, &c, &h, &w);
    sample = (size_t)c * (size_t)h * (size_t)w;
    for (size_t off = 0; off < n; off += (size_t)b) {
        size_t m = n - off < (size_t)b ? n - off : (size_t)b;

        for (size_t k = 0; k < m; k++)
            idx[k] = (uint32_t)(off + k);
        if (off + m < n) { /* the next batch queued ahead, as the trainer does */
            uint32_t nx[64];
            size_t mn = n - off - m < (size_t)b ? n - off - m : (size_t)b;
            for (size_t k = 0; k < mn; k++)
                nx[k] = (uint32_t)(off + m + k);
            gm_loader_prefetch(l, split, epoch, nx, mn);
        }
        GM_CHECK_OK(gm_loader_batch(l, split, epoch, idx, m, out + off * sample, labels + off));
    }
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_same_as_eager(void)
{
    char dir[256];
    struct gm_data_spec spec;
    struct gm_dataset tr, te;
    struct gm_loader *l;
    int c, h, w;

    snprintf(dir, sizeof(dir), "%s/eager", root);
    make_folder("eager", 8, 1);
    for (int ch = 1; ch <= 3; ch += 2) {
        spec = spec_of(dir);
        spec.channels = ch;
        GM_CHECK_OK(gm_dataset_load(&spec, &tr, &te));
        GM_CHECK_OK(gm_loader_new(&spec, 8, &l));
        if (l == NULL)
            return;
        gm_loader_shape(l, &c, &h, &w);
        GM_CHECK_EQ(c, ch);
        GM_CHECK_EQ(h, 16);
        GM_CHECK_EQ(w, 16);
        GM_CHECK_EQ(gm_loader_classes(l), 3);
        GM_CHECK_EQ(gm_loader_len(l, GM_SPLIT_TRAIN), tr.n);
        GM_CHECK_EQ(gm_loader_len(l, GM_SPLIT_TEST), te.n);
        for (int s = 0; s < 2; s++) {
            const struct gm_dataset *d = s == 0 ? &tr : &te;
            const size_t sz = gm_dataset_sample_bytes(d);
            float *a = malloc(d->n * sz * sizeof(float)), *b = malloc(d->n * sz * sizeof(float));
            int32_t *ya = malloc(d->n * sizeof(int32_t)), *yb = malloc(d->n * sizeof(int32_t));
            uint32_t *idx = malloc(d->n * sizeof(uint32_t));

            for (size_t i = 0; i < d->n; i++)
                idx[i] = (uint32_t)i;
            gm_dataset_batch(d, idx, d->n, a, ya);
            all_samples(l, s == 0 ? GM_SPLIT_TRAIN : GM_SPLIT_TEST, 0, 5, b, yb);
            GM_CHECK(memcmp(a, b, d->n * sz * sizeof(float)) == 0);
            GM_CHECK(memcmp(ya, yb, d->n * sizeof(int32_t)) == 0);
            free(a);
            free(b);
            free(ya);
            free(yb);
            free(idx);
        }
        gm_loader_free(l);
        gm_dataset_free(&tr);
        gm_dataset_free(&te);
    }
    /* pad and a normalisation: border = normalised black, inside = (v/255 - mean)/std */
    spec = spec_of(dir);
    spec.pad = 2;
    spec.norm_n = 3;
    spec.mean[0] = 0.5f, spec.mean[1] = 0.25f, spec.mean[2] = 0.125f;
    spec.std[0] = 0.5f, spec.std[1] = 2.0f, spec.std[2] = 0.25f;
    GM_CHECK_OK(gm_dataset_load(&spec, &tr, &te));
    GM_CHECK_OK(gm_loader_new(&spec, 8, &l));
    if (l != NULL) {
        const size_t sz = gm_dataset_sample_bytes(&tr), plane = 20 * 20;
        float *b = malloc(tr.n * sz * sizeof(float));
        int32_t *yb = malloc(tr.n * sizeof(int32_t));
        long bad = 0;

        gm_loader_shape(l, &c, &h, &w);
        GM_CHECK_EQ(h, 20);
        all_samples(l, GM_SPLIT_TRAIN, 0, 8, b, yb);
        for (size_t i = 0; i < tr.n * sz; i++) {
            size_t ch = (i / plane) % 3;
            float want = ((float)tr.images[i] * (1.0f / 255.0f) - spec.mean[ch]) / spec.std[ch];
            bad += b[i] != want;
        }
        GM_CHECK_EQ(bad, 0);
        free(b);
        free(yb);
        gm_loader_free(l);
    }
    gm_dataset_free(&tr);
    gm_dataset_free(&te);
}

static void test_deterministic(void)
{
    char dir[256];
    struct gm_data_spec spec;
    float *ref = NULL;
    size_t n = 0, sample = 0;

    snprintf(dir, sizeof(dir), "%s/det", root);
    make_folder("det", 10, 2);
    for (int threads = 1; threads <= 3; threads++) {
        struct gm_loader *l;
        float *x;
        int32_t *y;
        int c, h, w;

        spec = spec_of(dir);
        spec.crop = spec.flip = 1;
        spec.resize = 20;
        spec.loader_threads = threads;
        spec.prefetch = threads; /* 1, 2, 3 buffers ahead */
        spec.cache = threads == 2 ? (uint64_t)1 << 30 : 0;
        GM_CHECK_OK(gm_loader_new(&spec, 16, &l));
        if (l == NULL)
            return;
        gm_loader_shape(l, &c, &h, &w);
        n = gm_loader_len(l, GM_SPLIT_TRAIN);
        sample = (size_t)c * (size_t)h * (size_t)w;
        x = calloc(2 * n * sample, sizeof(float));
        y = calloc(2 * n, sizeof(int32_t));
        if (threads == 3) { /* other batches and order: one at a time, backwards, epoch 1 first */
            for (size_t i = n; i-- > 0;) {
                uint32_t k = (uint32_t)i;
                GM_CHECK_OK(
                    gm_loader_batch(l, GM_SPLIT_TRAIN, 1, &k, 1, x + (n + i) * sample, y + n + i));
                GM_CHECK_OK(gm_loader_batch(l, GM_SPLIT_TRAIN, 0, &k, 1, x + i * sample, y + i));
            }
        } else {
            all_samples(l, GM_SPLIT_TRAIN, 0, threads == 1 ? 3 : 16, x, y);
            all_samples(l, GM_SPLIT_TRAIN, 1, 7, x + n * sample, y + n);
        }
        if (ref == NULL) {
            size_t same = 0;

            ref = x;
            for (size_t i = 0; i < n; i++)
                same += memcmp(x + i * sample, x + (n + i) * sample, sample * sizeof(float)) == 0;
            GM_CHECK(same < n / 4); /* another epoch, other crops */
        } else {
            GM_CHECK(memcmp(ref, x, 2 * n * sample * sizeof(float)) == 0);
            free(x);
        }
        free(y);
        if (threads == 2) {
            struct gm_loader_stats st;
            gm_loader_stats(l, &st);
            GM_CHECK_EQ(st.decodes, 0); /* every image kept by the check */
            GM_CHECK(st.cache_bytes > 0 && st.cache_bytes == st.decoded_bytes);
        }
        gm_loader_free(l);
    }
    free(ref);
}

static void test_crop_boxes(void)
{
    struct gm_transform t = {.size = 8,
                             .crop = 1,
                             .flip = 1,
                             .scale = {0.08, 1.0},
                             .ratio = {3.0 / 4.0, 4.0 / 3.0},
                             .seed = 3};
    long flips = 0, fallback = 0, total = 0;

    for (int sz = 0; sz < 4; sz++) {
        const int w = 30 + 70 * sz, h = 200 - 40 * sz;

        for (int e = 0; e < 5; e++)
            for (uint32_t i = 0; i < 400; i++) {
                struct gm_image_box b;
                int flip;
                double area, ratio;

                gm_transform_params(&t, 1, e, i, w, h, &b, &flip);
                total++;
                flips += flip;
                GM_CHECK(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= w &&
                         b.y + b.h <= h);
                area = (double)b.w * b.h / ((double)w * h);
                ratio = (double)b.w / b.h;
                /* rounding of w and h to whole pixels moves both a little */
                if (area < 0.08 * 0.9 || area > 1.0 || ratio < 0.75 * 0.9 || ratio > 4.0 / 3 * 1.1)
                    fallback++;
            }
    }
    GM_CHECK(flips > total * 45 / 100 && flips < total * 55 / 100);
    GM_CHECK(fallback == 0);
    /* torchvision's fallback: 100 x 50 with scale (1, 1) never fits -> h 50, w round(50*4/3) */
    {
        struct gm_rng rng;
        struct gm_image_box b;
        const double scale[2] = {1.0, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};

        gm_rng_init(&rng, 1, 2);
        gm_transform_random_crop(&rng, 100, 50, scale, ratio, &b);
        GM_CHECK(b.w == 67 && b.h == 50 && b.x == 16 && b.y == 0);
        gm_transform_random_crop(&rng, 40, 100, scale, ratio, &b); /* too tall */
        GM_CHECK(b.w == 40 && b.h == 53 && b.x == 0 && b.y == 23);
    }
    /* same (seed, epoch, index): same box; another seed: another */
    {
        struct gm_image_box a, b;
        int fa, fb, differ = 0;

        for (uint32_t i = 0; i < 50; i++) {
            gm_transform_params(&t, 1, 2, i, 99, 77, &a, &fa);
            gm_transform_params(&t, 1, 2, i, 99, 77, &b, &fb);
            GM_CHECK(memcmp(&a, &b, sizeof(a)) == 0 && fa == fb);
            t.seed = 4;
            gm_transform_params(&t, 1, 2, i, 99, 77, &b, &fb);
            t.seed = 3;
            differ += memcmp(&a, &b, sizeof(a)) != 0;
        }
        GM_CHECK(differ > 40);
    }
}

static void test_train_val_dirs(void)
{
    char dir[256], buf[4096];
    struct gm_data_spec spec;
    struct gm_loader *l;

    snprintf(dir, sizeof(dir), "%s/tv", root);
    make_folder("tv/TrainData", 6, 3);
    make_folder("tv/ValidationData", 2, 4);
    spec = spec_of(dir);
    spec.train_dir = "TrainData";
    spec.val_dir = "ValidationData";
    GM_CHECK_OK(gm_loader_new(&spec, 8, &l));
    if (l != NULL) {
        GM_CHECK_EQ(gm_loader_len(l, GM_SPLIT_TRAIN), 18);
        GM_CHECK_EQ(gm_loader_len(l, GM_SPLIT_TEST), 6);
        gm_loader_free(l);
    }
    log_take(buf, sizeof(buf));
    /* a class only in one of them */
    mkdirs("tv/ValidationData/d");
    write_png("tv/ValidationData/d/0.png", 9, 9, 3, 1);
    EXPECT_OPEN_ERROR(&spec, GM_ERR_DATA, "ValidationData", "'d' is only in");
    /* outside dir */
    spec.val_dir = "../x";
    EXPECT_OPEN_ERROR(&spec, GM_ERR_CONFIG, "../x", "inside");
}

static void test_bad_input(void)
{
    static const uint8_t gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00;";
    char dir[256], path[1024], buf[8192];
    struct gm_data_spec spec;
    struct gm_loader *l;
    uint8_t *jpeg;
    FILE *f;
    long len;

    snprintf(dir, sizeof(dir), "%s/bad", root);
    make_folder("bad", 5, 5);
    spec = spec_of(dir);
    /* an unsupported format under an image name */
    write_bytes("bad/b/zz.jpg", gif, sizeof(gif) - 1);
    EXPECT_OPEN_ERROR(&spec, GM_ERR_DATA, "bad/b/zz.jpg", "not a PNG or JPEG");
    /* a truncated JPEG: the same, and skip_bad leaves both out, named */
    snprintf(path, sizeof(path), "%s/a/001.jpg", dir);
    f = fopen(path, "rb");
    GM_CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    jpeg = malloc((size_t)len);
    GM_CHECK(fread(jpeg, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    write_bytes("bad/a/001.jpg", jpeg, (size_t)len / 2);
    free(jpeg);
    EXPECT_OPEN_ERROR(&spec, GM_ERR_DATA, "bad/a/001.jpg", "JPEG");
    spec.skip_bad = 1;
    GM_CHECK_OK(gm_loader_new(&spec, 8, &l));
    log_take(buf, sizeof(buf));
    GM_CHECK(strstr(buf, "event=data_skip path=") != NULL && strstr(buf, "a/001.jpg") != NULL &&
             strstr(buf, "b/zz.jpg") != NULL && strstr(buf, "skipped=2") != NULL);
    if (l != NULL) {
        struct gm_loader_stats st;
        gm_loader_stats(l, &st);
        GM_CHECK_EQ(st.skipped, 2);
        GM_CHECK_EQ(st.train + st.test, 15 - 1);
        gm_loader_free(l);
    }
    spec.skip_bad = 0;
    snprintf(path, sizeof(path), "%s/b/zz.jpg", dir);
    unlink(path);
    make_folder("bad", 5, 5); /* a/001.jpg whole again */
    /* an empty class */
    mkdirs("bad/e");
    EXPECT_OPEN_ERROR(&spec, GM_ERR_DATA, "bad/e", "empty class folder");
    rmdir(strcat(strcpy(path, dir), "/e"));
    /* a cache above this machine's memory */
    spec.cache = UINT64_MAX / 2;
    EXPECT_OPEN_ERROR(&spec, GM_ERR_CONFIG, "cache", "more than this machine's memory");
    spec.cache = 0;
    /* image_size 0 with a crop; resize below image_size */
    spec.image_size = 0;
    spec.crop = 1;
    EXPECT_OPEN_ERROR(&spec, GM_ERR_CONFIG, "image_size 0", "needs an output size");
    spec.crop = 0;
    /* native size with photos of different sizes */
    EXPECT_OPEN_ERROR(&spec, GM_ERR_DATA, dir, "set image_size");
    spec.image_size = 16;
    spec.resize = 12;
    EXPECT_OPEN_ERROR(&spec, GM_ERR_CONFIG, "resize 12", "smaller than image_size");
    spec.resize = 0;
    /* 3 normalisation values for gray images */
    spec.channels = 1;
    spec.norm_n = 3;
    spec.std[0] = spec.std[1] = spec.std[2] = 1;
    EXPECT_OPEN_ERROR(&spec, GM_ERR_CONFIG, "mean and std", "1 channel");
    /* a file that goes bad after the check: the batch fails, naming it */
    spec.channels = 3;
    spec.norm_n = 0;
    GM_CHECK_OK(gm_loader_new(&spec, 8, &l));
    log_take(buf, sizeof(buf));
    if (l != NULL) {
        uint32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        float *x = malloc(8 * 3 * 16 * 16 * sizeof(float));
        int32_t y[8];

        snprintf(path, sizeof(path), "%s/a/000.png", dir);
        write_bytes("bad/a/000.png", gif, 4);
        GM_CHECK_ERR(gm_loader_batch(l, GM_SPLIT_TRAIN, 0, idx, 8, x, y), GM_ERR_DATA);
        log_take(buf, sizeof(buf));
        GM_CHECK(strstr(buf, "a/000.png") != NULL);
        free(x);
        gm_loader_free(l);
    }
}

int main(void)
{
    char logpath[] = "/tmp/gm-test-loader-log-XXXXXX";

    if (mkdtemp(root) == NULL)
        return 1;
    log_fd = mkstemp(logpath);
    if (log_fd < 0)
        return 1;
    unlink(logpath);
    gm_log_set_fd(log_fd);
    GM_TEST_RUN(test_crop_boxes);
    GM_TEST_RUN(test_same_as_eager);
    GM_TEST_RUN(test_deterministic);
    GM_TEST_RUN(test_train_val_dirs);
    GM_TEST_RUN(test_bad_input);
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return gm_test_finish("test_loader");
}
