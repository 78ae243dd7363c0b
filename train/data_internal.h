/*
 * train/data_internal.h - helpers shared by train/data*.c only; not a public interface.
 */
#ifndef GM_TRAIN_DATA_INTERNAL_H
#define GM_TRAIN_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "train/data.h"

/* spec->kind == "folder"; spec already validated by gm_dataset_load, outputs zeroed. Logs one
 * line on failure; the caller frees train and test. */
int gm_data_folder_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                        struct gm_dataset *test) GM_MUST_CHECK;

/* spec->kind == "cifar10"; same contract as gm_data_folder_load. */
int gm_data_cifar_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                       struct gm_dataset *test) GM_MUST_CHECK;

/* Whole file (gzip inflated, plain passed through) into *buf, owned by the caller, which has
 * room for len + 1 bytes (so text can be NUL-terminated); more than max bytes is an error.
 * Logs one line on failure (GM_ERR_DATA or -ENOMEM). */
int gm_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len) GM_MUST_CHECK;

/* *out = NULL-terminated copy of names[0..n) (each strdup'd); *out = NULL when names is NULL.
 * 0 or -ENOMEM. */
int gm_data_names_dup(char *const *names, int n, char ***out) GM_MUST_CHECK;
/* Frees a NULL-terminated array of names and the names; NULL-safe. */
void gm_data_names_free(char **names);

/* buf = a "/" b; logs and returns GM_ERR_DATA when it does not fit. */
int gm_data_path_join(char *buf, size_t size, const char *a, const char *b) GM_MUST_CHECK;

#endif
