/*
 * train/data/cifar.c - the "cifar10" dataset: the binary version of CIFAR-10.
 *
 * data_batch_1.bin .. data_batch_5.bin are the training set, in that order, test_batch.bin the
 * test set; each is a sequence of 3073-byte records (1 label byte < 10, then 3x32x32 pixels in
 * CHW order, exactly the layout gm_dataset keeps), so a length that is not a positive multiple
 * of 3073 is an error.  Files may also be gzip-compressed (read through gm_data_read_file).
 * The optional batches.meta.txt names the classes, one a line; when it names fewer than 10 it
 * is ignored with a warning.
 */
#include "train/data/cifar.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "train/data/file.h"

#define CIFAR_SIDE 32
#define CIFAR_IMAGE (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_IMAGE)
#define CIFAR_CLASSES 10

/* Appends the records of path to d (images and labels grown with realloc). */
static int cifar_append(const char *path, struct gm_dataset *d)
{
    uint8_t *buf = NULL, *p;
    size_t len, records, total;
    int err;

    err = gm_data_read_file(path, GM_DATA_MAX_BYTES, &buf, &len);
    if (err)
        return err;
    if (len == 0 || len % CIFAR_RECORD != 0) {
        gm_err("%s: wrong size: %zu bytes is not a positive multiple of the %d-byte CIFAR-10 "
               "record (1 label + 3x32x32 pixels)",
               path, len, CIFAR_RECORD);
        err = GM_ERR_DATA;
        goto out;
    }
    records = len / CIFAR_RECORD;
    for (size_t r = 0; r < records; r++) {
        if (buf[r * CIFAR_RECORD] >= CIFAR_CLASSES) {
            gm_err("%s: record %zu has label %u, CIFAR-10 labels are 0 to 9", path, r,
                   buf[r * CIFAR_RECORD]);
            err = GM_ERR_DATA;
            goto out;
        }
    }
    total = d->n + records;
    if (total > GM_DATA_MAX_SAMPLES) {
        gm_err("%s: more than %llu samples in all", path, (unsigned long long)GM_DATA_MAX_SAMPLES);
        err = GM_ERR_DATA;
        goto out;
    }
    p = realloc(d->images, total * CIFAR_IMAGE);
    if (p == NULL)
        goto oom;
    d->images = p;
    p = realloc(d->labels, total);
    if (p == NULL)
        goto oom;
    d->labels = p;
    for (size_t r = 0; r < records; r++) {
        d->labels[d->n + r] = buf[r * CIFAR_RECORD];
        memcpy(d->images + (d->n + r) * CIFAR_IMAGE, buf + r * CIFAR_RECORD + 1, CIFAR_IMAGE);
    }
    d->n = total;
    err = 0;
    goto out;
oom:
    gm_err("%s: out of memory for %zu samples", path, total);
    err = -ENOMEM;
out:
    free(buf);
    return err;
}

/* batches.meta.txt: one class name a line; optional.  *names stays NULL when the file is
 * missing or does not name 10 classes (the latter with a warning). */
static int cifar_names(const char *dir, char ***names)
{
    char path[PATH_MAX];
    char *list[CIFAR_CLASSES];
    uint8_t *buf = NULL;
    size_t len, count = 0;
    struct stat st;
    char *line, *save = NULL;
    int err;

    *names = NULL;
    err = gm_data_path_join(path, sizeof(path), dir, "batches.meta.txt");
    if (err)
        return err;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return 0;
    err = gm_data_read_file(path, 1 << 16, &buf, &len);
    if (err)
        return err;
    buf[len] = 0; /* gm_data_read_file leaves room for it */
    for (line = strtok_r((char *)buf, "\r\n", &save); line != NULL && count < CIFAR_CLASSES;
         line = strtok_r(NULL, "\r\n", &save)) {
        size_t l = strlen(line);

        while (l > 0 && (line[l - 1] == ' ' || line[l - 1] == '\t'))
            line[--l] = 0;
        if (l > 0)
            list[count++] = line;
    }
    if (count < CIFAR_CLASSES) {
        gm_warn("%s: names %zu classes, not 10; ignoring it", path, count);
    } else {
        err = gm_data_names_dup(list, CIFAR_CLASSES, names);
        if (err)
            gm_err("%s: out of memory", path);
    }
    free(buf);
    return err;
}

int gm_data_cifar_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                       struct gm_dataset *test)
{
    char path[PATH_MAX];
    int err;

    for (int i = 1; i <= 5; i++) {
        char name[32];

        snprintf(name, sizeof(name), "data_batch_%d.bin", i);
        err = gm_data_path_join(path, sizeof(path), spec->dir, name);
        if (err)
            return err;
        err = cifar_append(path, train);
        if (err)
            return err;
    }
    err = gm_data_path_join(path, sizeof(path), spec->dir, "test_batch.bin");
    if (err)
        return err;
    err = cifar_append(path, test);
    if (err)
        return err;
    err = cifar_names(spec->dir, &train->class_names);
    if (err)
        return err;
    err = gm_data_names_dup(train->class_names, CIFAR_CLASSES, &test->class_names);
    if (err) {
        gm_err("%s: out of memory", spec->dir);
        return err;
    }
    train->c = test->c = 3;
    train->h = test->h = train->w = test->w = CIFAR_SIDE;
    train->classes = test->classes = CIFAR_CLASSES;
    return 0;
}
