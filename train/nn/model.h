/*
 * train/nn/model.h - models as a graph of ops over flat buffers.
 *
 * A model is a graph of ops over named activation tensors (train/nn/graph.h),
 * built by its family's builder (train/nn/zoo.c), run forward in order and
 * backward in reverse.  It owns three things: one flat float buffer of
 * parameters, one of gradients (same length and layout), and per-op activation
 * buffers sized for max_batch.  Layer weights are views into the flat buffers, so the
 * optimizer, the collective and the checkpoint each walk a single buffer.
 *
 * Internal layouts are chosen for speed (train/kernels/conv2d.h): activations
 * NHWC, conv weights (OC, KH, KW, IC), and a linear layer that follows a
 * flatten of a (C, H, W) feature map sees its inputs in H, W, C order.
 * gm_model_export_tensor / gm_model_import_tensor convert each parameter
 * to and from PyTorch's layout (conv (OC, IC, KH, KW); linear (OUT, IN) over
 * C, H, W flattening), which is what checkpoints hold, under PyTorch-style
 * names ("conv1.weight", "fc3.bias"), so a state_dict loads them as is.
 *
 * Models (by name, as in the job file):
 *   lenet5:   conv 5x5x6 pad 2, relu, pool 2, conv 5x5x16, relu, pool 2,
 *             fc 120, relu, fc 84, relu, fc classes (28x28 input -> 400 features)
 *   mlp:      flatten, [fc hidden_i, relu, (dropout)]..., fc classes
 *   vgg7:     VGG-style for 32x32 inputs (CIFAR-10, padded Fashion-MNIST):
 *             [conv 3x3 pad 1 (no bias), batch norm, relu] x2 with 32, 64 and 128
 *             channels, each pair followed by max-pool 2; flatten; one linear head.
 *             PyTorch names: features.<i>.* (i counts every module of the
 *             Sequential, ReLU and MaxPool2d included: 0,1 / 3,4 / 7,8 / 10,11 /
 *             14,15 / 17,18), classifier.*.  32x32: 0.29M parameters.
 *   resnet20: He et al.'s CIFAR ResNet-20: conv 3x3x16 + bn + relu, three stages
 *             of three basic blocks (16, 32, 64 channels; the first block of
 *             stages 2 and 3 has stride 2), global average pool, linear.
 *             Shortcuts are option A (parameter-free: subsample by 2 and pad the
 *             channels with zeros on both sides), as in the paper's CIFAR
 *             experiments.  Convolutions have no bias.  PyTorch names: conv1,
 *             bn1, layer<s>.<b>.{conv1,bn1,conv2,bn2}, linear.  0.27M parameters.
 * Dropout (p > 0) goes after each hidden activation of the MLP and after
 * fc1/fc2 of LeNet-5.
 *
 * Batch norm (BatchNorm2d over NHWC channels; PyTorch's momentum 0.1 and eps
 * 1e-5): training forwards normalize with the batch statistics and update
 * running_mean / running_var (unbiased) and num_batches_tracked; evaluation
 * forwards (train = 0) use the running statistics.  The running statistics
 * are not parameters (no gradient, not in the flat buffers the optimizer and
 * the collective see): they are the model's buffers, listed by
 * gm_model_num_buffers / gm_model_buffer under PyTorch's names
 * (x.running_mean, x.running_var, x.num_batches_tracked) and saved in
 * checkpoints beside the parameters.  In data-parallel training each rank
 * keeps its own (as PyTorch's DDP with broadcast_buffers=False); checkpoints
 * hold rank 0's.
 *
 * Initialisation is PyTorch's default for Linear and Conv2d: weights and
 * biases uniform in +-1/sqrt(fan_in), drawn from train/nn/rng.h seeded with
 * the job seed, so every rank starts identical; batch norm weight 1, bias 0.
 *
 * Device: every buffer lives on the spec's device.  A CUDA model needs the
 * calling thread's CUDA context (gm_cuda_new on the trainer thread, which then
 * owns the model; -ENOTSUP without one, or in a build without the backend).
 * Host views: gm_model_params / gm_model_grads are host memory on every
 * device.  On the CPU they are the model's buffers themselves; on a GPU they
 * are pinned host copies, refreshed with gm_model_*_to_host and written back
 * with gm_model_*_to_device (no-ops on the CPU), and the passes and the
 * optimizer use gm_model_params_device / gm_model_grads_device.  Backward with
 * a gradient hook fills the gradients' host view itself, layer by layer, before
 * it calls the hook for that layer.  gm_model_input is host memory (pinned on a
 * GPU) and gm_model_logits is on the model's device.  Used by the trainer
 * thread only.
 */
#ifndef GM_TRAIN_NN_MODEL_H
#define GM_TRAIN_NN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/nn/tensor.h"

struct gm_model;

#define GM_MODEL_MAX_HIDDEN 8

struct gm_model_spec {
    const char *name; /* a family: "mlp", "lenet5", "resnet18", ... */
    int in_c, in_h, in_w;
    int classes;
    int hidden[GM_MODEL_MAX_HIDDEN]; /* mlp hidden sizes */
    int nhidden;
    float dropout; /* 0 <= p < 1 */
    enum gm_device device;
    /* borrowed, NULL or "": nothing frozen; else space-separated module prefixes or
     * "backbone" (train/nn/graph.h gm_graph_freeze) */
    const char *freeze;
    /* borrowed, may be NULL: where gm_model_new writes the one-line reason of a refusal (a
     * shape the family cannot take, a freeze prefix that matches nothing) */
    char *why;
    size_t why_len;
};

/* One named parameter tensor, as PyTorch would name and shape it. */
struct gm_param_info {
    char name[48]; /* "layer3.2.bn2.num_batches_tracked" fits */
    int ndim;
    int64_t shape[4]; /* PyTorch layout */
    size_t offset;    /* into the flat parameter/gradient buffers, in floats */
    size_t numel;
    int rows, cols; /* the internal 2-D view (rows = output units); for PowerSGD */
};

/* Returns 1 when name is a model this build knows. */
int gm_model_known(const char *name);

int gm_model_new(const struct gm_model_spec *spec, int max_batch,
                 struct gm_model **out) GM_MUST_CHECK;
void gm_model_free(struct gm_model *m);

size_t gm_model_num_params(const struct gm_model *m);
/* Freezing (spec.freeze): the trainable tensors come first, tensors [0, n) with n =
 * gm_model_num_trainable_tensors, and fill the first gm_model_num_trainable floats of
 * the flat buffers; the frozen ones follow.  Only that prefix of the gradients is
 * written for use (the rest is scratch), reduced and stepped.  Nothing frozen: both
 * equal the totals. */
size_t gm_model_num_trainable(const struct gm_model *m);
size_t gm_model_num_trainable_tensors(const struct gm_model *m);
enum gm_device gm_model_device(const struct gm_model *m);
/* The host views (see Device above) and the device buffers, nparams floats each. */
float *gm_model_params(struct gm_model *m);
float *gm_model_grads(struct gm_model *m);
float *gm_model_params_device(struct gm_model *m);
float *gm_model_grads_device(struct gm_model *m);
/* Device -> host view and back (waits for the device; no-ops on the CPU).  0 or an error. */
int gm_model_params_to_host(struct gm_model *m) GM_MUST_CHECK;
int gm_model_params_to_device(struct gm_model *m) GM_MUST_CHECK;
int gm_model_grads_to_host(struct gm_model *m) GM_MUST_CHECK;
int gm_model_grads_to_device(struct gm_model *m) GM_MUST_CHECK;
/* The first device error recorded since the last call (0: none; always 0 on the CPU). */
int gm_model_take_error(struct gm_model *m);
int gm_model_max_batch(const struct gm_model *m);
int gm_model_classes(const struct gm_model *m);
/* Draws the parameters on the host and, on a GPU, copies them to the device (a copy
 * failure is kept for the next forward's return). */
void gm_model_init_params(struct gm_model *m, uint64_t seed);

/* The head: the tensors [*first, *first + *n) of the last linear layer (fc, classifier.6,
 * classifier.1 ...); 0, or -ENOENT for a model without one. */
int gm_model_head(const struct gm_model *m, size_t *first, size_t *n) GM_MUST_CHECK;
/* Draws tensors [first, first + n) again with their family's initialisation, from seed
 * (its own stream: the rest of the model is untouched), then copies them to a GPU. */
void gm_model_init_tensors(struct gm_model *m, uint64_t seed, size_t first, size_t n);

/* Input staging buffer: max_batch samples of in_c*in_h*in_w floats, NCHW, host memory.
 * The next forward reads it.  On a GPU it alternates between two pinned buffers once a
 * forward has used one, so fill it after each call. */
float *gm_model_input(struct gm_model *m);
/* Forward pass over the first n samples of the input; train enables dropout
 * (mask drawn from seed).  Logits (n, classes) in gm_model_logits(). */
int gm_model_forward(struct gm_model *m, int n, int train, uint64_t seed) GM_MUST_CHECK;
const float *gm_model_logits(const struct gm_model *m);
/* Softmax cross-entropy on the last forward; sets the logits' gradient.  labels: n host
 * values.  Returns the mean loss; *correct counts argmax hits (may be NULL).  A device
 * error (logged) returns NaN; gm_model_take_error says which. */
double gm_model_loss(struct gm_model *m, int n, const int32_t *labels, long *correct);
/* Backward pass of the last forward: writes every gradient (no accumulate). */
int gm_model_backward(struct gm_model *m, int n) GM_MUST_CHECK;
/* Called by backward as soon as a layer's gradients are final (layers in
 * reverse order): tensors [first, first + n) of gm_model_tensor(), so their
 * reduction can start while the rest of backward runs.  NULL: none. */
typedef void (*gm_model_grad_hook)(void *ctx, size_t first_tensor, size_t n);
void gm_model_set_grad_hook(struct gm_model *m, gm_model_grad_hook fn, void *ctx);

size_t gm_model_num_tensors(const struct gm_model *m);
const struct gm_param_info *gm_model_tensor(const struct gm_model *m, size_t i);
/* Copies parameter i from src (internal layout, e.g. the flat parameter or
 * gradient buffer) to dst in PyTorch layout, and back. */
void gm_model_export_tensor(const struct gm_model *m, size_t i, const float *src_flat, float *dst);
void gm_model_import_tensor(const struct gm_model *m, size_t i, const float *src, float *dst_flat);

/* Buffers: non-trainable state (batch norm running statistics), in PyTorch
 * layout already.  numel floats each; num_batches_tracked is a scalar
 * (ndim 0, numel 1 when exported) held as a float (exact below 2^24 steps). */
size_t gm_model_num_buffers(const struct gm_model *m);
const struct gm_param_info *gm_model_buffer(const struct gm_model *m, size_t i);
/* Elements of buffer i when exported (numel, or 1 for the scalar counter). */
size_t gm_model_buffer_len(const struct gm_model *m, size_t i);
/* Copies buffer i to / from host memory (gm_model_buffer_len floats). */
int gm_model_export_buffer(const struct gm_model *m, size_t i, float *dst) GM_MUST_CHECK;
int gm_model_import_buffer(struct gm_model *m, size_t i, const float *src) GM_MUST_CHECK;
/* Batch norms whose running statistics a training forward updates (not frozen). */
int gm_model_bn_trainable(const struct gm_model *m);

#endif
