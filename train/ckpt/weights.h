/*
 * train/ckpt/weights.h - starting a model from a weights file ([model] init): a
 * safetensors file whose tensors carry PyTorch's state_dict names and layouts
 * (tools/torchvision_weights.py writes one from a torchvision model or .pth;
 * a gradmesh checkpoint or `checkpoint export` is one as well).
 *
 * Contract:
 *  - Every parameter and buffer of the model must be in the file with its
 *    PyTorch shape, and the file must hold nothing else: otherwise the call
 *    logs one line naming the file, the missing, unexpected and mis-shaped
 *    tensors (the first few of each, and how many), changes nothing in the
 *    model (all of this is checked before any value is read) and returns
 *    GM_ERR_CONFIG.  A file that does not parse (truncated,
 *    not safetensors) is refused the same way (the reader logs its line).
 *  - One exception: the head (gm_model_head: fc, classifier.6, classifier.1)
 *    may have another number of outputs (ImageNet's 1000 classes against the
 *    data's); it is then drawn afresh from seed (gm_model_init_tensors) and
 *    the log says so.
 *  - Values are read as F32 (F16, BF16 and F64 are converted), conv weights
 *    converted from PyTorch's OIHW to the model's layout at the boundary
 *    (gm_model_import_tensor); then copied to the model's device.
 *
 * Called on the trainer thread, after gm_model_init_params; not thread-safe
 * for one model.
 */
#ifndef GM_TRAIN_CKPT_WEIGHTS_H
#define GM_TRAIN_CKPT_WEIGHTS_H

#include <stdint.h>

#include "common/err.h"
#include "train/nn/model.h"

struct gm_graph;

/* The names and shapes alone, against a model's graph (train/nn/graph.h), as the job
 * loader checks a file before anything runs: 0 or GM_ERR_CONFIG (logged as above). */
int gm_weights_check(const struct gm_graph *g, const char *model_name,
                     const char *path) GM_MUST_CHECK;
/* 0, GM_ERR_CONFIG (logged), -ENOMEM, or a device error. */
int gm_weights_load(struct gm_model *m, const char *model_name, const char *path,
                    uint64_t seed) GM_MUST_CHECK;

#endif
