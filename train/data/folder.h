/*
 * train/data/folder.h - the "folder" dataset, dir/<class>/<image> (see folder.c): the listing
 * and split that the eager reader (gm_dataset_load) and the streaming loader (loader.c) share.
 */
#ifndef GM_TRAIN_DATA_FOLDER_H
#define GM_TRAIN_DATA_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/data/dataset.h"

struct gm_folder_item {
    char *path; /* owned: dir/<class>/<file> */
    int label;
    int is_test;
    size_t slot; /* index inside its split (gm_data_folder_split) */
};

struct gm_folder_listing {
    char **names; /* owned, NULL-terminated: the class names, sorted */
    int classes;
    size_t *start;                /* owned: classes + 1 offsets into items */
    struct gm_folder_item *items; /* owned: sorted by (class, file name) */
    size_t n, cap;
};

/* spec->kind == "folder"; spec already validated by gm_dataset_load, outputs zeroed. Logs one
 * line on failure; the caller frees train and test. */
int gm_data_folder_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                        struct gm_dataset *test) GM_MUST_CHECK;

/* Lists dir's classes and images into l (zeroed by the caller).  No class folder, an empty
 * class, more than 256 classes: one line logged, GM_ERR_DATA; -ENOMEM.  The caller frees l
 * either way. */
int gm_data_folder_list(const char *dir, struct gm_folder_listing *l) GM_MUST_CHECK;
/* Marks each class's test images (see folder.c) and numbers each split's items in order;
 * *n_test = how many are test.  0 or -ENOMEM (logged). */
int gm_data_folder_split(struct gm_folder_listing *l, double test_split, uint64_t seed,
                         size_t *n_test) GM_MUST_CHECK;
/* NULL-safe, idempotent. */
void gm_data_folder_listing_free(struct gm_folder_listing *l);

#endif
