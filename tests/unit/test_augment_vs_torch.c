/*
 * tests/unit/test_augment_vs_torch.c - gradmesh's photo transforms give torchvision's pixels.
 *
 * Photos from tests/tools/make_photos.py (JPEG and PNG, 96-300 px, both orientations) go
 * through train/data/augment.h: RandomResizedCrop + flip (the box and the flip drawn by
 * gradmesh from (seed, epoch, index), then handed to torchvision's resized_crop and hflip),
 * Resize + CenterCrop, the plain resize, with and without ImageNet normalisation; the
 * fallback box of RandomResizedCrop (no attempt fits) against get_params.  Bound: one level
 * (1/255) per value before normalisation: PIL's BILINEAR rounds its horizontal pass to 8
 * bits and uses 22-bit fixed-point weights, gradmesh keeps floats
 * (tests/unit/torchvision_augment_ref.py prints the largest difference).  JPEGs decode alike (both
 * use the system's libjpeg-turbo). Skips (77) without /usr/bin/python3 with torchvision, PIL and
 * numpy, or without Fashion-MNIST (dataset-fashion-mnist).
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test.h"
#include "train/data/augment.h"
#include "train/data/folder.h"
#include "train/data/image.h"
#include "train/nn/rng.h"

GM_TEST_DEFINE_STATE;

static char dir[] = "/tmp/gm-aug-torch-XXXXXX";

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void imagenet(struct gm_transform *t, int on)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};

    for (int i = 0; i < 3; i++) {
        t->mean[i] = on ? mean[i] : 0.0f;
        t->std[i] = on ? std[i] : 1.0f;
    }
}

/* One transform of img into the output file and its case line. */
static void emit(FILE *cases, FILE *out, const char *kind, const char *path,
                 const struct gm_transform *t, int train, const struct gm_image *img, int epoch,
                 uint32_t index, int norm)
{
    struct gm_image_scratch s = {0};
    struct gm_image_box box;
    int flip, ow, oh;
    uint8_t *u8 = malloc(gm_transform_scratch_bytes(t, img->w, img->h, img->c));
    float *x;

    gm_transform_out_size(t, img->w, img->h, &ow, &oh);
    x = malloc((size_t)img->c * (size_t)ow * (size_t)oh * sizeof(float));
    gm_transform_params(t, train, epoch, index, img->w, img->h, &box, &flip);
    GM_CHECK_OK(gm_transform_apply(t, train, img, &box, flip, x, u8, &s));
    fwrite(x, sizeof(float), (size_t)img->c * (size_t)ow * (size_t)oh, out);
    if (strcmp(kind, "crop") == 0)
        fprintf(cases, "crop %s %d %d %d %d %d %d %s\n", path, t->size, box.y, box.x, box.h, box.w,
                flip, norm ? "imagenet" : "none");
    else if (strcmp(kind, "eval") == 0)
        fprintf(cases, "eval %s %d %d %s\n", path, t->size, t->resize, norm ? "imagenet" : "none");
    else
        fprintf(cases, "stretch %s %d %s\n", path, t->size, norm ? "imagenet" : "none");
    gm_image_scratch_free(&s);
    free(u8);
    free(x);
}

static void test_vs_torchvision(void)
{
    struct gm_folder_listing l = {0};
    char path[512], cmd[1024];
    FILE *cases, *out;
    int flips = 0, ncrop = 0;

    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 tests/tools/make_photos.py %s/photos "
             "--per-class 9 --classes 3 --seed 11 >/dev/null",
             dir);
    GM_CHECK(system(cmd) == 0);
    snprintf(path, sizeof(path), "%s/photos", dir);
    GM_CHECK_OK(gm_data_folder_list(path, &l));
    snprintf(path, sizeof(path), "%s/cases.txt", dir);
    cases = fopen(path, "w");
    snprintf(path, sizeof(path), "%s/ours.f32", dir);
    out = fopen(path, "wb");
    GM_CHECK(cases != NULL && out != NULL && l.n == 27);
    for (size_t i = 0; i < l.n && cases != NULL && out != NULL; i++) {
        struct gm_transform t = {.scale = {0.08, 1.0}, .ratio = {3.0 / 4.0, 4.0 / 3.0}, .seed = 5};
        struct gm_image img;
        char msg[GM_IMAGE_MSG_MAX];
        const int norm = (int)(i % 2);

        GM_CHECK_OK(gm_image_decode(l.items[i].path, 3, &img, msg, sizeof(msg)));
        if (img.px == NULL)
            continue;
        imagenet(&t, norm);
        t.size = i % 3 == 0 ? 64 : 48;
        t.crop = t.flip = 1;
        for (int e = 0; e < 3; e++) { /* three epochs: other boxes and flips */
            struct gm_image_box b;
            int f;
            gm_transform_params(&t, 1, e, (uint32_t)i, img.w, img.h, &b, &f);
            flips += f;
            ncrop++;
            emit(cases, out, "crop", l.items[i].path, &t, 1, &img, e, (uint32_t)i, norm);
        }
        t.crop = t.flip = 0;
        t.resize = t.size + (int)(i % 4) * 9; /* also resize == size: the crop is the middle */
        emit(cases, out, "eval", l.items[i].path, &t, 0, &img, 0, (uint32_t)i, norm);
        t.resize = 0;
        t.size = 40;
        imagenet(&t, !norm);
        emit(cases, out, "stretch", l.items[i].path, &t, 0, &img, 0, (uint32_t)i, !norm);
        gm_image_free(&img);
    }
    GM_CHECK(flips > 0 && flips < ncrop);
    /* RandomResizedCrop's fallback (every attempt too big): wide, tall, in the ratio range */
    {
        static const int wh[][2] = {{100, 50}, {40, 100}, {90, 80}, {300, 97}, {97, 300}};
        const double scale[2] = {1.0, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};

        for (size_t k = 0; k < sizeof(wh) / sizeof(wh[0]); k++) {
            struct gm_rng rng;
            struct gm_image_box b;

            gm_rng_init(&rng, 9, k);
            gm_transform_random_crop(&rng, wh[k][0], wh[k][1], scale, ratio, &b);
            if (wh[k][0] * 3 > wh[k][1] * 4 || wh[k][1] * 3 > wh[k][0] * 4)
                fprintf(cases, "fallback %d %d 1 1 %d %d %d %d\n", wh[k][0], wh[k][1], b.x, b.y,
                        b.w, b.h);
        }
    }
    if (cases != NULL)
        fclose(cases);
    if (out != NULL)
        fclose(out);
    gm_data_folder_listing_free(&l);
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/unit/torchvision_augment_ref.py %s", dir);
    GM_CHECK(system(cmd) == 0);
}

int main(void)
{
    if (system("/usr/bin/python3 -c 'import torchvision, PIL, numpy' 2>/dev/null") != 0) {
        printf("skip: /usr/bin/python3 cannot import torchvision, PIL and numpy (Debian: "
               "python3-torchvision)\n");
        return 77;
    }
    if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) {
        printf("skip: no /usr/share/datasets/fashion-mnist (Debian: dataset-fashion-mnist)\n");
        return 77;
    }
    if (mkdtemp(dir) == NULL)
        return 1;
    GM_TEST_RUN(test_vs_torchvision);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return gm_test_finish("test_augment_vs_torch");
}
