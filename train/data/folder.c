/*
 * train/data/folder.c - the "folder" dataset: dir/<class>/<image>, like PyTorch's ImageFolder:
 * the listing and the train/test split (shared with the streaming loader, loader.c) and the
 * eager reader that decodes every image into memory (gm_dataset_load; the trainer streams).
 *
 * Choices (all deterministic, so every rank builds identical bytes from identical files):
 * - Classes are the subdirectories of dir (symlinks followed, names starting with '.' skipped),
 *   sorted with strcmp (not the locale); label = position.  At most 256 classes.  Inside a
 *   class: regular files named *.png, *.jpg or *.jpeg (case-insensitive), sorted with strcmp;
 *   other files are ignored.  No class folders, or a class with no image, is an error.
 * - Decoding, channel conversion and resizing: train/data/image.h (PIL's BILINEAR with
 *   antialiasing; a same-size "resize" is an exact copy).
 * - Split: per class, with m images and k = round(m * test_split), clamped to [1, m - 1] when
 *   m >= 2 and test_split > 0 (so every class with >= 2 images is in both sets) and 0 when m is
 *   1: a partial Fisher-Yates with gm_rng(seed, SPLIT_STREAM ^ class) picks the k test images.
 *   Both sets keep the sorted (class, file) order.
 */
#include "train/data/folder.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/log.h"
#include "train/data/file.h"
#include "train/data/image.h"
#include "train/nn/rng.h"

#define MAX_CLASSES 256
#define SPLIT_STREAM 0x53504c4954000000ULL /* "SPLIT" */

/* ------------------------------------------------------------------------------------------ */
/* listing                                                                                    */

void gm_data_folder_listing_free(struct gm_folder_listing *l)
{
    if (l == NULL)
        return;
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

static int add_item(struct gm_folder_listing *l, const char *class_dir, const char *name, int label)
{
    char path[PATH_MAX];
    int err = gm_data_path_join(path, sizeof(path), class_dir, name);

    if (err)
        return err;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct gm_folder_item *p = realloc(l->items, cap * sizeof(*p));

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

int gm_data_folder_list(const char *dir, struct gm_folder_listing *l)
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
int gm_data_folder_split(struct gm_folder_listing *l, double test_split, uint64_t seed,
                         size_t *n_test)
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
    struct gm_folder_listing l;
    struct gm_image_scratch s;
    struct gm_image img;
    size_t n_test = 0, sample = 0;
    const int tc = spec->channels;
    int dh = spec->image_size, dw = spec->image_size;
    const char *first_path = NULL;
    char msg[GM_IMAGE_MSG_MAX];
    int err;

    memset(&l, 0, sizeof(l));
    memset(&s, 0, sizeof(s));
    memset(&img, 0, sizeof(img));
    err = gm_data_folder_list(spec->dir, &l);
    if (err)
        goto out;
    err = gm_data_folder_split(&l, spec->test_split, spec->seed, &n_test);
    if (err)
        goto out;
    for (size_t i = 0; i < l.n; i++) {
        struct gm_folder_item *it = &l.items[i];
        struct gm_dataset *ds = it->is_test ? test : train;
        struct gm_image_box box;

        err = gm_image_decode(it->path, tc, &img, msg, sizeof(msg));
        if (err) {
            gm_err("%s", msg);
            goto out;
        }
        if (i == 0) {
            if (spec->image_size == 0) {
                dh = img.h;
                dw = img.w;
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
        } else if (spec->image_size == 0 && (img.h != dh || img.w != dw)) {
            gm_err("%s: image is %dx%d but the first image (%s) is %dx%d; set image_size to "
                   "resize",
                   it->path, img.w, img.h, first_path, dw, dh);
            err = GM_ERR_DATA;
            goto out;
        }
        box = (struct gm_image_box){0, 0, img.w, img.h};
        err = gm_image_resample(&img, &box, dw, dh, 0, ds->images + it->slot * sample, &s);
        if (err) {
            gm_err("%s: out of memory resizing", it->path);
            goto out;
        }
        ds->labels[it->slot] = (uint8_t)it->label;
        gm_image_free(&img);
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
    gm_image_free(&img);
    gm_image_scratch_free(&s);
    gm_data_folder_listing_free(&l);
    return err;
}
