/*
 * tests/fuzz/fuzz_folder.c - libFuzzer target for the image-folder reader (through
 * gm_dataset_load, kind "folder"): the PNG (libpng) and JPEG (libjpeg) decoders, channel
 * conversion, resizing and the split.
 *
 * The first byte picks the options: bit 0 channels 1 or 3, bit 1 image_size 0 (native: all
 * images must match the first) or 5 (bilinear resize), bits 2-3 test_split 0, 0.25, 0.5 or
 * 0.9; bit 4 the streaming loader (train/data/loader.h: the check on its threads, then every
 * sample of both splits through the transforms) instead of the eager reader, with bit 5
 * augment crop_flip, bit 6 resize 6 (shorter side, then the centre crop), bit 7 skip_bad.  The rest
 * becomes dir/a/0.png (the decoder is chosen by magic bytes, not by the name) beside three valid
 * 4x4 PNG and JPEG images in dir/a and dir/b made at start.  Any bytes must give 0, GM_ERR_DATA or
 * -ENOMEM, never a crash or a sanitizer report; a success must hold 2 classes, the asked channels
 * and size, and 4 samples in all.  Log lines go to /dev/null.  Seeds: tests/fuzz/corpus/folder/ (a
 * PNG, a gray PNG, a JPEG).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "common/log.h"
#include "train/data/data.h"
#include "train/data/loader.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void path_of(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", dir, rel);
}

static void write_png(const char *rel, unsigned fmt, const uint8_t *px)
{
    png_image img;
    char path[128];

    memset(&img, 0, sizeof(img));
    img.version = PNG_IMAGE_VERSION;
    img.width = 4;
    img.height = 4;
    img.format = fmt;
    path_of(path, sizeof(path), rel);
    if (png_image_write_to_file(&img, path, 0, px, 0, NULL) == 0)
        abort();
}

static void write_jpeg(const char *rel, const uint8_t *rgb)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    char path[128];
    FILE *f;

    path_of(path, sizeof(path), rel);
    f = fopen(path, "wb");
    if (f == NULL)
        abort();
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = 4;
    ci.image_height = 4;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_start_compress(&ci, TRUE);
    for (int y = 0; y < 4; y++) {
        JSAMPROW row = (JSAMPROW)(rgb + y * 12);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

static void cleanup(void)
{
    static const char *const files[] = {"a/0.png", "a/1.png", "b/0.jpg", "b/1.png"};
    char path[128];

    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        path_of(path, sizeof(path), files[i]);
        unlink(path);
    }
    path_of(path, sizeof(path), "a");
    rmdir(path);
    path_of(path, sizeof(path), "b");
    rmdir(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    uint8_t rgb[48], gray[16];
    char path[128];
    int fd = open("/dev/null", O_WRONLY);

    (void)argc;
    (void)argv;
    if (fd >= 0)
        gm_log_set_fd(fd);
    snprintf(dir, sizeof(dir), "/tmp/gm_fuzz_folder.XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    path_of(path, sizeof(path), "a");
    mkdir(path, 0755);
    path_of(path, sizeof(path), "b");
    mkdir(path, 0755);
    for (int i = 0; i < 48; i++)
        rgb[i] = (uint8_t)(i * 5);
    for (int i = 0; i < 16; i++)
        gray[i] = (uint8_t)(i * 16);
    write_png("a/1.png", PNG_FORMAT_RGB, rgb);
    write_jpeg("b/0.jpg", rgb);
    write_png("b/1.png", PNG_FORMAT_GRAY, gray);
    atexit(cleanup);
    return 0;
}

/* The streaming loader on the same folder: every sample of both splits, one batch each. */
static void stream(const uint8_t *data, struct gm_data_spec *spec)
{
    struct gm_loader *l;
    int err;

    spec->image_size = (data[0] & 2) || (data[0] & 0x60) ? 5 : 0;
    spec->crop = spec->flip = (data[0] & 0x20) != 0;
    spec->crop_scale[0] = 0.08, spec->crop_scale[1] = 1;
    spec->crop_ratio[0] = 0.75, spec->crop_ratio[1] = 4.0 / 3.0;
    spec->resize = (data[0] & 0x40) ? 6 : 0;
    spec->skip_bad = (data[0] & 0x80) != 0;
    spec->loader_threads = 2;
    spec->prefetch = 1;
    spec->cache = (data[0] & 1) ? 1u << 20 : 0;
    err = gm_loader_new(spec, 4, &l);
    if (err == 0) {
        int c, h, w;
        uint32_t idx[4] = {0, 1, 2, 3};
        float x[4 * 3 * 5 * 5];
        int32_t y[4];

        gm_loader_shape(l, &c, &h, &w);
        if (c != spec->channels || h != (spec->image_size ? 5 : 4) || h != w ||
            gm_loader_classes(l) != 2 ||
            gm_loader_len(l, GM_SPLIT_TRAIN) + gm_loader_len(l, GM_SPLIT_TEST) < 3)
            abort();
        for (int s = 0; s < 2; s++) {
            size_t n = gm_loader_len(l, (enum gm_split)s);
            if (gm_loader_batch(l, (enum gm_split)s, 1, idx, n, x, y) != 0)
                abort(); /* the check decoded every file: nothing may fail now */
            for (size_t k = 0; k < n; k++)
                if (y[k] < 0 || y[k] > 1)
                    abort();
        }
        gm_loader_free(l);
    } else if (err != GM_ERR_DATA && err != -ENOMEM) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const double splits[] = {0, 0.25, 0.5, 0.9};
    struct gm_data_spec spec = {.kind = "folder", .dir = dir, .seed = 1};
    struct gm_dataset train, test;
    char path[128];
    FILE *f;
    int err;

    if (size == 0)
        return 0;
    spec.channels = (data[0] & 1) ? 3 : 1;
    spec.image_size = (data[0] & 2) ? 5 : 0;
    spec.test_split = splits[(data[0] >> 2) & 3];
    path_of(path, sizeof(path), "a/0.png");
    f = fopen(path, "wb");
    if (f == NULL)
        abort();
    if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1)
        abort();
    fclose(f);
    if (data[0] & 0x10) {
        stream(data, &spec);
        return 0;
    }
    err = gm_dataset_load(&spec, &train, &test);
    if (err == 0) {
        size_t sz = gm_dataset_sample_bytes(&train);
        int side = spec.image_size ? 5 : 4;
        volatile uint8_t sink = 0;

        if (train.classes != 2 || train.c != spec.channels || train.h != side || train.w != side ||
            train.n + test.n != 4 || train.n == 0)
            abort();
        for (size_t i = 0; i < train.n * sz; i++)
            sink ^= train.images[i];
        for (size_t i = 0; i < test.n * sz; i++)
            sink ^= test.images[i];
        (void)sink;
    } else if (err != GM_ERR_DATA && err != -ENOMEM) {
        abort();
    }
    gm_dataset_free(&train);
    gm_dataset_free(&test);
    return 0;
}
