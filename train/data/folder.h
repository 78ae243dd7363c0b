/*
 * train/data/folder.h - the "folder" dataset reader, dir/<class>/<image> (see folder.c);
 * called by gm_dataset_load only.
 */
#ifndef GM_TRAIN_DATA_FOLDER_H
#define GM_TRAIN_DATA_FOLDER_H

#include "common/err.h"
#include "train/data/dataset.h"

/* spec->kind == "folder"; spec already validated by gm_dataset_load, outputs zeroed. Logs one
 * line on failure; the caller frees train and test. */
int gm_data_folder_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                        struct gm_dataset *test) GM_MUST_CHECK;

#endif
