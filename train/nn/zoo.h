/*
 * train/nn/zoo.h - the model families: one builder function each, over the
 * graph of train/nn/graph.h, with PyTorch's state_dict names.
 *
 * The list of families, their architectures and input sizes is model.h's
 * comment and docs/MODELS.md.  Used by train/nn/model.c; no state.
 */
#ifndef GM_TRAIN_NN_ZOO_H
#define GM_TRAIN_NN_ZOO_H

#include "common/err.h"
#include "train/nn/graph.h"
#include "train/nn/model.h"

/* 1 when name is a family this build knows. */
int gm_zoo_known(const char *name);
/* Builds spec's family into g (initialised with the input's shape).  0, -EINVAL for an
 * unknown family or a spec it cannot take (g->msg says why), -E2BIG, -ENOMEM. */
int gm_zoo_build(struct gm_graph *g, const struct gm_model_spec *spec) GM_MUST_CHECK;

#endif
