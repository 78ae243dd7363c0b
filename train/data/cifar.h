/*
 * train/data/cifar.h - the "cifar10" dataset reader, CIFAR-10 binary batches (see cifar.c);
 * called by gm_dataset_load only.
 */
#ifndef GM_TRAIN_DATA_CIFAR_H
#define GM_TRAIN_DATA_CIFAR_H

#include "common/err.h"
#include "train/data/dataset.h"

/* spec->kind == "cifar10"; spec already validated by gm_dataset_load, outputs zeroed.  Logs
 * one line on failure; the caller frees train and test. */
int gm_data_cifar_load(const struct gm_data_spec *spec, struct gm_dataset *train,
                       struct gm_dataset *test) GM_MUST_CHECK;

#endif
