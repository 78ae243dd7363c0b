/*
 * train/nn/model.c - layer graph (a straight sequence), flat buffers, forward and
 * backward passes, PyTorch-layout export.  See model.h for the contract.
 *
 * Buffers per layer, all owned by the model and sized for max_batch:
 *   y     output activations (flatten aliases its input instead)
 *   dx    gradient w.r.t. the layer input (NULL, and not computed, when only
 *         the input data lies below: the first layer's input gradient)
 *   ws    conv: the kernel's workspace (ops->conv2d_ws_floats: im2col of the
 *         input kept from forward for dW, and its gradient; or packed weights)
 *   arg   maxpool: argmax position per output
 *   mask  dropout: the mask of the last training forward
 * Backward walks the layers in reverse; each takes dy (the next layer's dx,
 * or dlogits) and writes its dx and its parameter gradients.
 *
 * Every kernel is called through the device's op table (train/nn/ops.h),
 * fetched once in gm_model_new; a device without a table is -ENOTSUP.
 *
 * On a GPU (m->cu: the calling thread's context, train/kernels/cuda.h) every
 * buffer above lives on the device and the passes only queue work on the
 * compute stream; the host waits for the GPU only where it needs a result (the
 * loss) or a copy.  Choices:
 *  - Batches: gm_model_input hands out one of two pinned staging buffers
 *    (in_host); forward uploads it to its device slot (in_dev) on the upload
 *    stream, and the compute stream waits for that copy alone.  The copy waits
 *    only until the compute stream released that slot, so while step k's
 *    backward and optimizer step still run on the GPU, the host fills the
 *    other buffer and its upload starts at once.  A staging buffer is handed
 *    out again only once its last upload finished (MARK_UPLOADED), and the
 *    same buffer stays handed out until a forward has used it, so a caller
 *    that forwards twice without refilling sees the CPU's semantics.
 *  - Gradients: without a gradient hook they stay on the device (one replica
 *    alone).  With one, backward starts an asynchronous copy of each layer's
 *    gradients to the pinned host view on the copy stream as soon as the layer
 *    is queued, and calls the hook for a layer once its copy has finished,
 *    in layer order, polling between layers and waiting at the end; so the
 *    collective reduces the last layers while the GPU still computes the
 *    first.  Backward returns with every gradient in the host view.
 *  - Host views: params_host / grads_host are the only host copies; they are
 *    filled and written back only on request (gm_model_*_to_host/_to_device),
 *    which the trainer does where the communication hooks or a checkpoint need
 *    them.  All of these copies wait for the compute stream (synchronous), so
 *    a host view is never read or written while a copy of it is in flight.
 *  - Errors: op-table entries record their first failure in the context;
 *    forward and backward return it (gm_model_take_error), the loss returns
 *    NaN after logging it.
 */
#include "train/nn/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "train/kernels/conv2d.h"
#include "train/kernels/cuda.h"
#include "train/nn/ops.h"
#include "train/nn/rng.h"

enum layer_kind {
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_RELU,
    LAYER_FLATTEN,
    LAYER_LINEAR,
    LAYER_DROPOUT,
    LAYER_BATCHNORM,
    LAYER_RESADD,  /* y = x + shortcut(layers[src].y) */
    LAYER_AVGPOOL, /* global average pool; the map becomes a vector */
};

#define MAX_LAYERS 128
#define MAX_TENSORS 128
#define MAX_BUFFERS 96
#define BN_MOMENTUM 0.1f /* PyTorch's defaults */
#define BN_EPS 1e-5f

/* How gm_model_init_params fills a tensor (PyTorch's defaults). */
enum init_kind {
    INIT_FAN_IN, /* U(+-1/sqrt(fan_in)), fan_in = the tensor's cols */
    INIT_BIAS,   /* U(+-1/sqrt(fan_in)) with the weight's (previous tensor's) fan_in */
    INIT_ONE,    /* batch norm weight */
    INIT_ZERO,   /* batch norm bias */
};

struct layer {
    enum layer_kind kind;
    int in_c, in_h, in_w; /* per sample; dense layers use in_c only */
    int out_c, out_h, out_w;
    int k, pad;        /* conv kernel and padding; pool window */
    int stride;        /* conv; resadd: the shortcut's subsampling */
    int relu;          /* maxpool: fused ReLU before the pool */
    float p;           /* dropout probability */
    int w_tensor;      /* index into m->tensors of the weight (bias = +1), or -1 */
    int bias;          /* conv: has a bias tensor (w_tensor + 1) */
    int src;           /* resadd: the layer whose output is the skip input */
    size_t stat;       /* batchnorm: running_mean at m->stats + stat, running_var after it */
    float *save;       /* owned: batchnorm: mean then invstd of the last training batch (2C) */
    float *dskip;      /* owned: resadd with a subsampling shortcut: gradient of the skip input */
    const float *skip; /* borrowed, set in backward: gradient to add into dx (resadd) */
    float *y;          /* owned, or borrowed (flatten) */
    float *dx;         /* owned; NULL for layer 0 */
    float *ws;         /* owned: conv workspace */
    int need_dx;       /* conv: dx is computed (dx != NULL) */
    uint8_t *arg;      /* owned: maxpool */
    float *mask;       /* owned: dropout */
    int owns_y;
};

struct gm_model {
    struct gm_model_spec spec;
    enum gm_device device;
    const struct gm_ops *ops; /* borrowed: the device's kernels */
    int max_batch;
    struct layer *layers; /* owned */
    int nlayers;
    float *params; /* owned, flat */
    float *grads;  /* owned, flat */
    size_t nparams;
    struct gm_param_info tensors[MAX_TENSORS];
    /* export permutation for a linear layer after a spatial flatten */
    int flat_from[MAX_TENSORS][3]; /* per tensor: c, h, w of the flattened map, or 0 */
    enum init_kind init[MAX_TENSORS];
    size_t ntensors;
    /* non-trainable state: batch norm running statistics */
    float *stats; /* owned, flat: per batch norm, running_mean[C] then running_var[C] */
    size_t nstats;
    struct gm_param_info buffers[MAX_BUFFERS]; /* offset into stats; numel 0 for the counter */
    size_t nbuffers;
    int64_t batches_tracked;      /* num_batches_tracked: training forwards with a batch norm */
    float *input;                 /* owned: NCHW staging, max_batch * in size (the CPU only) */
    float *input_t;               /* owned: NHWC copy when in_c > 1, else NULL */
    const float *x0;              /* borrowed: the last forward's input to layer 0 */
    float *dlogits;               /* owned */
    gm_model_grad_hook grad_hook; /* borrowed; NULL: none */
    void *grad_hook_ctx;
    /* host views (model.h): == params / grads on the CPU; owned pinned copies on a GPU */
    float *params_host, *grads_host;
    /* a GPU (NULL / unused on the CPU): see "On a GPU" above */
    struct gm_cuda *cu;          /* borrowed: the trainer thread's context */
    struct gm_cuda_marks *marks; /* owned: MARK_* */
    float *in_host[2];           /* owned, pinned: the batch staging buffers (NCHW) */
    float *in_dev[2];            /* owned: where each is uploaded */
    int in_slot;                 /* the staging buffer gm_model_input hands out */
    int in_used;                 /* a forward has uploaded in_slot since it was handed out */
    int in_last;                 /* the slot the last forward read, -1 before the first */
    int32_t *labels;             /* owned: the loss's labels on the device */
    struct pending {             /* gradient downloads not yet handed to the hook */
        size_t first, n;         /* tensors */
    } pend[MAX_LAYERS];
    int npend, pend_head;
};

/* The marks (train/kernels/cuda.h) of a model on a GPU. */
#define MARK_UPLOADED(s) (s)     /* the upload of staging buffer s is done */
#define MARK_RELEASED(s) (2 + s) /* the compute stream no longer reads in_dev[s] */
#define MARK_GRAD(j) (4 + (j))   /* the j-th gradient download of this backward is done */
#define NMARKS (4 + MAX_LAYERS)

void gm_model_set_grad_hook(struct gm_model *m, gm_model_grad_hook fn, void *ctx)
{
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

static const char *const known_models[] = {"mlp", "lenet5", "vgg7", "resnet20"};

int gm_model_known(const char *name)
{
    for (size_t i = 0; i < GM_ARRAY_SIZE(known_models); i++)
        if (strcmp(name, known_models[i]) == 0)
            return 1;
    return 0;
}

/* ---- building ------------------------------------------------------------ */

struct builder {
    struct gm_model *m;
    int c, h, w; /* current per-sample shape */
    int spatial; /* 1 while the map is (H, W, C); 0 after flatten */
    int flat_c, flat_h, flat_w;
    int nconv, nfc;
    int err;
};

static struct layer *push(struct builder *b, enum layer_kind kind)
{
    struct gm_model *m = b->m;
    struct layer *l;

    if (b->err)
        return NULL;
    GM_ASSERT(m->nlayers < MAX_LAYERS);
    l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->in_c = b->c;
    l->in_h = b->h;
    l->in_w = b->w;
    l->w_tensor = -1;
    l->src = -1;
    l->stride = 1;
    return l;
}

static void add_tensor(struct builder *b, const char *name, int ndim, const int64_t *shape,
                       int rows, int cols, enum init_kind init)
{
    struct gm_model *m = b->m;
    struct gm_param_info *t = &m->tensors[m->ntensors];
    size_t n = 1;

    GM_ASSERT(m->ntensors < MAX_TENSORS);
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->numel = n;
    t->offset = m->nparams;
    t->rows = rows;
    t->cols = cols;
    m->init[m->ntensors] = init;
    m->nparams += n;
    m->ntensors++;
}

static void add_buffer(struct builder *b, const char *prefix, const char *suffix, int c)
{
    struct gm_model *m = b->m;
    struct gm_param_info *t = &m->buffers[m->nbuffers++];

    GM_ASSERT(m->nbuffers <= MAX_BUFFERS);
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s.%s", prefix, suffix);
    t->ndim = c > 0 ? 1 : 0; /* the counter is a scalar, as in PyTorch */
    t->shape[0] = c;
    t->numel = c > 0 ? (size_t)c : 0;
    t->offset = m->nstats;
    t->rows = c;
    t->cols = 1;
    m->nstats += t->numel;
}

/* name: the module's PyTorch name ("features.0"), or NULL for "conv<n>". */
static void conv(struct builder *b, int oc, int k, int pad, int stride, int bias, const char *name)
{
    struct layer *l = push(b, LAYER_CONV2D);
    char tn[48], mod[24];

    if (l == NULL)
        return;
    if (!b->spatial || b->h + 2 * pad < k || b->w + 2 * pad < k) {
        b->err = -EINVAL;
        return;
    }
    l->k = k;
    l->pad = pad;
    l->stride = stride;
    l->bias = bias;
    l->out_c = oc;
    l->out_h = (b->h + 2 * pad - k) / stride + 1;
    l->out_w = (b->w + 2 * pad - k) / stride + 1;
    l->w_tensor = (int)b->m->ntensors;
    b->nconv++;
    if (name == NULL) {
        snprintf(mod, sizeof(mod), "conv%d", b->nconv);
        name = mod;
    }
    snprintf(tn, sizeof(tn), "%s.weight", name);
    add_tensor(b, tn, 4, (int64_t[]){oc, b->c, k, k}, oc, k * k * b->c, INIT_FAN_IN);
    if (bias) {
        snprintf(tn, sizeof(tn), "%s.bias", name);
        add_tensor(b, tn, 1, (int64_t[]){oc}, oc, 1, INIT_BIAS);
    }
    b->c = oc;
    b->h = l->out_h;
    b->w = l->out_w;
}

/* Batch norm over the channels of the current map (BatchNorm2d), or of the
 * vector after a flatten (BatchNorm1d). */
static void batchnorm(struct builder *b, const char *name)
{
    struct layer *l = push(b, LAYER_BATCHNORM);
    char tn[48];

    if (l == NULL)
        return;
    l->out_c = b->c;
    l->out_h = b->h;
    l->out_w = b->w;
    l->w_tensor = (int)b->m->ntensors;
    snprintf(tn, sizeof(tn), "%s.weight", name);
    add_tensor(b, tn, 1, (int64_t[]){b->c}, b->c, 1, INIT_ONE);
    snprintf(tn, sizeof(tn), "%s.bias", name);
    add_tensor(b, tn, 1, (int64_t[]){b->c}, b->c, 1, INIT_ZERO);
    l->stat = b->m->nstats;
    add_buffer(b, name, "running_mean", b->c);
    add_buffer(b, name, "running_var", b->c);
    add_buffer(b, name, "num_batches_tracked", 0);
}

static void same_shape(struct builder *b, enum layer_kind kind, float p)
{
    struct layer *l = push(b, kind);

    if (l == NULL)
        return;
    l->p = p;
    l->out_c = b->c;
    l->out_h = b->h;
    l->out_w = b->w;
}

/* relu = 1: a ReLU followed by the pool, as one layer (same values and
 * gradients as the two layers; one pass over the activations less). */
static void pool(struct builder *b, int k, int relu)
{
    struct layer *l = push(b, LAYER_MAXPOOL);

    if (l == NULL)
        return;
    l->relu = relu;
    if (!b->spatial || b->h < k || b->w < k) {
        b->err = -EINVAL;
        return;
    }
    l->k = k;
    l->out_c = b->c;
    l->out_h = b->h / k;
    l->out_w = b->w / k;
    b->h = l->out_h;
    b->w = l->out_w;
}

/* The residual sum: the current map plus the output of layer src, through
 * ResNet's option-A shortcut when the shapes differ. */
static void resadd(struct builder *b, int src)
{
    struct layer *l = push(b, LAYER_RESADD);
    const struct layer *s;

    if (l == NULL)
        return;
    s = &b->m->layers[src];
    l->src = src;
    l->out_c = b->c;
    l->out_h = b->h;
    l->out_w = b->w;
    l->stride = s->out_h / b->h;
    if (l->stride < 1 || (s->out_h + l->stride - 1) / l->stride != b->h ||
        (s->out_w + l->stride - 1) / l->stride != b->w || b->c < s->out_c ||
        (b->c - s->out_c) % 2 != 0)
        b->err = -EINVAL;
}

static void avgpool(struct builder *b)
{
    struct layer *l = push(b, LAYER_AVGPOOL);

    if (l == NULL)
        return;
    l->out_c = b->c;
    l->out_h = l->out_w = 1;
    b->h = b->w = 1;
    b->spatial = 0;
}

static void flatten(struct builder *b)
{
    struct layer *l = push(b, LAYER_FLATTEN);

    if (l == NULL)
        return;
    b->flat_c = b->c;
    b->flat_h = b->h;
    b->flat_w = b->w;
    b->c = b->c * b->h * b->w;
    b->h = b->w = 1;
    b->spatial = 0;
    l->out_c = b->c;
    l->out_h = l->out_w = 1;
}

/* name: the module's PyTorch name, or NULL for "fc<n>". */
static void fc(struct builder *b, int out, const char *name)
{
    struct layer *l = push(b, LAYER_LINEAR);
    struct gm_model *m = b->m;
    char tn[48], mod[24];

    if (l == NULL)
        return;
    if (b->spatial) {
        b->err = -EINVAL;
        return;
    }
    l->out_c = out;
    l->out_h = l->out_w = 1;
    l->w_tensor = (int)m->ntensors;
    l->bias = 1;
    b->nfc++;
    if (b->flat_c > 0) { /* first fc after a flatten: remember the map for export */
        m->flat_from[m->ntensors][0] = b->flat_c;
        m->flat_from[m->ntensors][1] = b->flat_h;
        m->flat_from[m->ntensors][2] = b->flat_w;
        b->flat_c = 0;
    }
    if (name == NULL) {
        snprintf(mod, sizeof(mod), "fc%d", b->nfc);
        name = mod;
    }
    snprintf(tn, sizeof(tn), "%s.weight", name);
    add_tensor(b, tn, 2, (int64_t[]){out, b->c}, out, b->c, INIT_FAN_IN);
    snprintf(tn, sizeof(tn), "%s.bias", name);
    add_tensor(b, tn, 1, (int64_t[]){out}, out, 1, INIT_BIAS);
    b->c = out;
}

/* vgg7: torchvision's VGG naming: features.<i> (i counts every module of the
 * Sequential, ReLU and MaxPool2d included), classifier. */
static void build_vgg7(struct builder *b, int classes)
{
    static const int cfg[] = {32, 32, 0, 64, 64, 0, 128, 128, 0}; /* 0: max-pool */
    char name[24];
    int seq = 0;

    for (size_t i = 0; i < GM_ARRAY_SIZE(cfg); i++) {
        const int pool_next = i + 1 < GM_ARRAY_SIZE(cfg) && cfg[i + 1] == 0;
        if (cfg[i] == 0)
            continue;
        snprintf(name, sizeof(name), "features.%d", seq++);
        conv(b, cfg[i], 3, 1, 1, 0, name);
        snprintf(name, sizeof(name), "features.%d", seq++);
        batchnorm(b, name);
        seq++; /* ReLU */
        if (pool_next) {
            pool(b, 2, 1); /* ReLU + MaxPool2d(2) */
            seq++;
        } else {
            same_shape(b, LAYER_RELU, 0);
        }
    }
    flatten(b);
    fc(b, classes, "classifier");
}

/* resnet20: He et al.'s CIFAR ResNet (3 stages of 3 basic blocks, 16/32/64
 * channels), option A shortcuts, named as the common PyTorch definition
 * (conv1, bn1, layer<s>.<i>.conv1/bn1/conv2/bn2, linear). */
static void build_resnet20(struct builder *b, int classes)
{
    char name[32];

    conv(b, 16, 3, 1, 1, 0, "conv1");
    batchnorm(b, "bn1");
    same_shape(b, LAYER_RELU, 0);
    for (int stage = 0; stage < 3; stage++) {
        for (int i = 0; i < 3; i++) {
            const int in = b->m->nlayers - 1; /* the block's input: the last ReLU */
            const int stride = stage > 0 && i == 0 ? 2 : 1;
            snprintf(name, sizeof(name), "layer%d.%d.conv1", stage + 1, i);
            conv(b, 16 << stage, 3, 1, stride, 0, name);
            snprintf(name, sizeof(name), "layer%d.%d.bn1", stage + 1, i);
            batchnorm(b, name);
            same_shape(b, LAYER_RELU, 0);
            snprintf(name, sizeof(name), "layer%d.%d.conv2", stage + 1, i);
            conv(b, 16 << stage, 3, 1, 1, 0, name);
            snprintf(name, sizeof(name), "layer%d.%d.bn2", stage + 1, i);
            batchnorm(b, name);
            resadd(b, in);
            same_shape(b, LAYER_RELU, 0);
        }
    }
    avgpool(b);
    fc(b, classes, "linear");
}

static int build(struct gm_model *m)
{
    const struct gm_model_spec *s = &m->spec;
    struct builder b = {.m = m, .c = s->in_c, .h = s->in_h, .w = s->in_w, .spatial = 1};

    if (strcmp(s->name, "lenet5") == 0) {
        conv(&b, 6, 5, 2, 1, 1, NULL);
        pool(&b, 2, 1); /* relu + pool */
        conv(&b, 16, 5, 0, 1, 1, NULL);
        pool(&b, 2, 1); /* relu + pool */
        flatten(&b);
        fc(&b, 120, NULL);
        same_shape(&b, LAYER_RELU, 0);
        if (s->dropout > 0)
            same_shape(&b, LAYER_DROPOUT, s->dropout);
        fc(&b, 84, NULL);
        same_shape(&b, LAYER_RELU, 0);
        if (s->dropout > 0)
            same_shape(&b, LAYER_DROPOUT, s->dropout);
        fc(&b, s->classes, NULL);
    } else if (strcmp(s->name, "mlp") == 0) {
        flatten(&b);
        for (int i = 0; i < s->nhidden; i++) {
            if (s->hidden[i] < 1)
                return -EINVAL;
            fc(&b, s->hidden[i], NULL);
            same_shape(&b, LAYER_RELU, 0);
            if (s->dropout > 0)
                same_shape(&b, LAYER_DROPOUT, s->dropout);
        }
        fc(&b, s->classes, NULL);
    } else if (strcmp(s->name, "vgg7") == 0) {
        build_vgg7(&b, s->classes);
    } else if (strcmp(s->name, "resnet20") == 0) {
        build_resnet20(&b, s->classes);
    } else {
        return -EINVAL;
    }
    return b.err;
}

static size_t out_size(const struct layer *l)
{
    return (size_t)l->out_c * l->out_h * l->out_w;
}

static size_t in_size(const struct layer *l)
{
    return (size_t)l->in_c * l->in_h * l->in_w;
}

static int alloc_floats(struct gm_model *m, size_t n, float **out)
{
    return gm_device_alloc(m->device, n * sizeof(float), (void **)out);
}

static int alloc_host(struct gm_model *m, size_t n, float **out)
{
    return gm_device_host_alloc(m->device, n * sizeof(float), (void **)out);
}

/* The host views and, on a GPU, the upload staging, the labels and the marks. */
static int alloc_host_side(struct gm_model *m, size_t in_floats)
{
    int err;

    if (m->cu == NULL) {
        m->params_host = m->params;
        m->grads_host = m->grads;
        m->in_host[0] = m->in_host[1] = m->input;
        return 0;
    }
    if ((err = alloc_host(m, m->nparams, &m->params_host)) < 0 ||
        (err = alloc_host(m, m->nparams, &m->grads_host)) < 0)
        return err;
    for (int s = 0; s < 2; s++)
        if ((err = alloc_host(m, in_floats, &m->in_host[s])) < 0 ||
            (err = alloc_floats(m, in_floats, &m->in_dev[s])) < 0)
            return err;
    if ((err = gm_device_alloc(m->device, (size_t)m->max_batch * sizeof(int32_t),
                               (void **)&m->labels)) < 0)
        return err;
    return gm_cuda_marks_new(m->cu, NMARKS, &m->marks);
}

/* PyTorch's initial statistics: running_mean 0, running_var 1, the counter 0.
 * Built on the host, then copied to the device in one piece. */
static int init_stats(struct gm_model *m)
{
    float *host;
    int err;

    m->batches_tracked = 0;
    if (m->nstats == 0)
        return 0;
    host = calloc(m->nstats, sizeof(float));
    if (host == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m->nbuffers; i++) {
        const struct gm_param_info *b = &m->buffers[i];
        if (strstr(b->name, ".running_var") != NULL)
            for (size_t j = 0; j < b->numel; j++)
                host[b->offset + j] = 1.0f;
    }
    err = gm_device_copy(m->device, m->stats, GM_DEVICE_CPU, host, m->nstats * sizeof(float));
    free(host);
    return err;
}

static int alloc_buffers(struct gm_model *m)
{
    const size_t nb = (size_t)m->max_batch;
    const size_t in = (size_t)m->spec.in_c * m->spec.in_h * m->spec.in_w;
    int err;

    if ((err = alloc_floats(m, m->nparams, &m->params)) < 0 ||
        (err = alloc_floats(m, m->nparams, &m->grads)) < 0 ||
        (err = alloc_floats(m, m->nstats, &m->stats)) < 0 ||
        (m->cu == NULL && (err = alloc_floats(m, nb * in, &m->input)) < 0) ||
        (err = alloc_floats(m, nb * (size_t)m->spec.classes, &m->dlogits)) < 0)
        return err;
    if (m->spec.in_c > 1 && (err = alloc_floats(m, nb * in, &m->input_t)) < 0)
        return err;
    int below = 0; /* a layer with compute sits below: dx is needed */
    for (int i = 0; i < m->nlayers; i++) {
        struct layer *l = &m->layers[i];
        const size_t ysz = nb * out_size(l);
        const int need_dx = below;
        if (l->kind == LAYER_FLATTEN) {
            l->y = i == 0 ? (m->input_t != NULL ? m->input_t : m->input) : m->layers[i - 1].y;
        } else {
            if ((err = alloc_floats(m, ysz, &l->y)) < 0)
                return err;
            l->owns_y = 1;
        }
        if (l->kind != LAYER_FLATTEN)
            below = 1;
        if (need_dx && l->kind != LAYER_FLATTEN &&
            (err = alloc_floats(m, nb * in_size(l), &l->dx)) < 0)
            return err;
        if (l->kind == LAYER_CONV2D) {
            struct gm_conv2d_shape s;
            if ((err = gm_conv2d_shape_init(&s, m->max_batch, l->in_h, l->in_w, l->in_c, l->out_c,
                                            l->k, l->pad, l->stride)) < 0)
                return err;
            l->need_dx = need_dx;
            if ((err = alloc_floats(m, m->ops->conv2d_ws_floats(&s, need_dx), &l->ws)) < 0)
                return err;
        }
        if (l->kind == LAYER_MAXPOOL) {
            if ((err = gm_device_alloc(m->device, ysz, (void **)&l->arg)) < 0)
                return err;
        }
        if (l->kind == LAYER_DROPOUT && (err = alloc_floats(m, ysz, &l->mask)) < 0)
            return err;
        if (l->kind == LAYER_BATCHNORM &&
            (err = alloc_floats(m, 2 * (size_t)l->out_c, &l->save)) < 0)
            return err;
        if (l->kind == LAYER_RESADD) {
            const struct layer *src = &m->layers[l->src];
            GM_ASSERT(l->src + 1 < i && m->layers[l->src + 1].dx != NULL);
            if (l->stride > 1 || src->out_c != l->out_c) {
                if ((err = alloc_floats(m, nb * out_size(src), &l->dskip)) < 0)
                    return err;
            }
        }
    }
    /* after the activations: a model too large for the GPU fails there, before any large
     * pinned host memory is taken */
    if ((err = alloc_host_side(m, nb * in)) < 0)
        return err;
    return init_stats(m);
}

int gm_model_new(const struct gm_model_spec *spec, int max_batch, struct gm_model **out)
{
    struct gm_model *m;
    int err;

    *out = NULL;
    if (spec->name == NULL || !gm_model_known(spec->name) || max_batch < 1 || spec->in_c < 1 ||
        spec->in_h < 1 || spec->in_w < 1 || spec->classes < 2 || spec->nhidden < 0 ||
        spec->nhidden > GM_MODEL_MAX_HIDDEN || !(spec->dropout >= 0 && spec->dropout < 1))
        return -EINVAL;
    if (!gm_device_available(spec->device) || gm_ops_get(spec->device) == NULL)
        return -ENOTSUP;
    /* a GPU model needs the calling (trainer) thread's CUDA context */
    if (spec->device == GM_DEVICE_CUDA && gm_cuda_current() == NULL)
        return -ENOTSUP;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->spec = *spec;
    m->ops = gm_ops_get(spec->device);
    m->device = spec->device;
    m->cu = spec->device == GM_DEVICE_CUDA ? gm_cuda_current() : NULL;
    m->in_last = -1;
    m->max_batch = max_batch;
    m->layers = calloc(MAX_LAYERS, sizeof(*m->layers));
    if (m->layers == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    if ((err = build(m)) < 0)
        goto fail;
    if ((err = alloc_buffers(m)) < 0)
        goto fail;
    m->x0 = m->input_t != NULL ? m->input_t : m->input;
    *out = m;
    return 0;
fail:
    gm_model_free(m);
    return err;
}

void gm_model_free(struct gm_model *m)
{
    if (m == NULL)
        return;
    for (int i = 0; m->layers != NULL && i < m->nlayers; i++) {
        struct layer *l = &m->layers[i];
        if (l->owns_y)
            gm_device_free(m->device, l->y);
        gm_device_free(m->device, l->dx);
        gm_device_free(m->device, l->ws);
        gm_device_free(m->device, l->save);
        gm_device_free(m->device, l->dskip);
        gm_device_free(m->device, l->arg);
        gm_device_free(m->device, l->mask);
    }
    free(m->layers);
    if (m->cu != NULL) {
        if (gm_cuda_sync(m->cu) < 0)   /* nothing in flight reads what is freed below */
            gm_cuda_take_error(m->cu); /* logged; freeing goes on */
        gm_device_host_free(m->device, m->params_host);
        gm_device_host_free(m->device, m->grads_host);
        for (int s = 0; s < 2; s++) {
            gm_device_host_free(m->device, m->in_host[s]);
            gm_device_free(m->device, m->in_dev[s]);
        }
        gm_device_free(m->device, m->labels);
        gm_cuda_marks_free(m->marks);
    }
    gm_device_free(m->device, m->params);
    gm_device_free(m->device, m->grads);
    gm_device_free(m->device, m->stats);
    gm_device_free(m->device, m->input);
    gm_device_free(m->device, m->input_t);
    gm_device_free(m->device, m->dlogits);
    free(m);
}

size_t gm_model_num_params(const struct gm_model *m)
{
    return m->nparams;
}

float *gm_model_params(struct gm_model *m)
{
    return m->params_host;
}

float *gm_model_grads(struct gm_model *m)
{
    return m->grads_host;
}

float *gm_model_params_device(struct gm_model *m)
{
    return m->params;
}

float *gm_model_grads_device(struct gm_model *m)
{
    return m->grads;
}

enum gm_device gm_model_device(const struct gm_model *m)
{
    return m->device;
}

static int sync_view(struct gm_model *m, float *host, float *dev, int to_device)
{
    const size_t bytes = m->nparams * sizeof(float);

    if (host == dev) /* the CPU: the buffer is its own host view */
        return 0;
    return to_device ? gm_device_copy(m->device, dev, GM_DEVICE_CPU, host, bytes)
                     : gm_device_copy(GM_DEVICE_CPU, host, m->device, dev, bytes);
}

int gm_model_params_to_host(struct gm_model *m)
{
    return sync_view(m, m->params_host, m->params, 0);
}

int gm_model_params_to_device(struct gm_model *m)
{
    return sync_view(m, m->params_host, m->params, 1);
}

int gm_model_grads_to_host(struct gm_model *m)
{
    return sync_view(m, m->grads_host, m->grads, 0);
}

int gm_model_grads_to_device(struct gm_model *m)
{
    return sync_view(m, m->grads_host, m->grads, 1);
}

int gm_model_take_error(struct gm_model *m)
{
    return m->cu != NULL ? gm_cuda_take_error(m->cu) : 0;
}

int gm_model_max_batch(const struct gm_model *m)
{
    return m->max_batch;
}

int gm_model_classes(const struct gm_model *m)
{
    return m->spec.classes;
}

float *gm_model_input(struct gm_model *m)
{
    if (m->cu != NULL && m->in_used) {
        /* the next batch goes into the other staging buffer, once its last upload is done
         * (a failure is kept in the context and reported by the next forward) */
        m->in_slot ^= 1;
        m->in_used = 0;
        if (gm_cuda_mark_wait(m->cu, m->marks, MARK_UPLOADED(m->in_slot)) < 0)
            return m->in_host[m->in_slot]; /* kept in the context for the next forward */
    }
    return m->in_host[m->in_slot];
}

const float *gm_model_logits(const struct gm_model *m)
{
    return m->layers[m->nlayers - 1].y;
}

size_t gm_model_num_tensors(const struct gm_model *m)
{
    return m->ntensors;
}

const struct gm_param_info *gm_model_tensor(const struct gm_model *m, size_t i)
{
    GM_ASSERT(i < m->ntensors);
    return &m->tensors[i];
}

void gm_model_init_params(struct gm_model *m, uint64_t seed)
{
    struct gm_rng r;

    gm_rng_init(&r, seed, 0x6d6f64656c); /* stream "model" */
    for (size_t t = 0; t < m->ntensors; t++) {
        const struct gm_param_info *ti = &m->tensors[t];
        float *p = m->params_host + ti->offset;
        if (m->init[t] == INIT_ONE || m->init[t] == INIT_ZERO) {
            for (size_t i = 0; i < ti->numel; i++)
                p[i] = m->init[t] == INIT_ONE ? 1.0f : 0.0f;
            continue;
        }
        /* fan_in of the layer: the weight's elements per output unit; a bias
         * uses its weight's fan_in (PyTorch's default init). */
        const struct gm_param_info *w = m->init[t] == INIT_BIAS ? &m->tensors[t - 1] : ti;
        const double bound = 1.0 / sqrt((double)w->cols);
        for (size_t i = 0; i < ti->numel; i++)
            p[i] = (float)((2.0 * gm_rng_double(&r) - 1.0) * bound);
    }
    /* drawn on the host, then one copy to a GPU; a failure there is logged and kept in the
     * context, and the next forward returns it */
    if (gm_model_params_to_device(m) < 0)
        return; /* kept in the context (gm_model_take_error) */
}

/* ---- passes -------------------------------------------------------------- */

static float *w_of(struct gm_model *m, const struct layer *l, float *flat)
{
    return flat + m->tensors[l->w_tensor].offset;
}

/* NULL for a convolution without bias */
static float *b_of(struct gm_model *m, const struct layer *l, float *flat)
{
    return l->kind == LAYER_CONV2D && !l->bias ? NULL : flat + m->tensors[l->w_tensor + 1].offset;
}

/* Tensors a layer owns: weight, and bias unless a bias-free convolution. */
static size_t layer_tensors(const struct layer *l)
{
    return l->kind == LAYER_CONV2D && !l->bias ? 1 : 2;
}

/* A GPU: uploads the first n samples of the staging buffer to its device slot on the
 * upload stream.  The compute stream waits for the copy; the copy waits only until the
 * compute stream is done with that slot (the forward and backward two batches ago, or the
 * last forward when the caller refilled the same buffer), so it overlaps the step that is
 * still computing. */
static int upload(struct gm_model *m, int n)
{
    const size_t in = (size_t)m->spec.in_c * m->spec.in_h * m->spec.in_w;
    const int s = m->in_slot;
    int err;

    if (m->in_last >= 0 &&
        (err = gm_cuda_mark_compute(m->cu, m->marks, MARK_RELEASED(m->in_last))) < 0)
        return err;
    if ((err = gm_cuda_upload(m->cu, m->in_dev[s], m->in_host[s], (size_t)n * in * sizeof(float),
                              m->marks, MARK_RELEASED(s), MARK_UPLOADED(s))) < 0)
        return err;
    m->in_last = s;
    m->in_used = 1;
    return 0;
}

/* A GPU: hands the finished gradient downloads to the hook, in order; block: wait for all. */
static int deliver(struct gm_model *m, int block)
{
    while (m->pend_head < m->npend) {
        const int mk = MARK_GRAD(m->pend_head);
        int done =
            block ? gm_cuda_mark_wait(m->cu, m->marks, mk) : gm_cuda_mark_done(m->cu, m->marks, mk);
        if (done < 0)
            return done;
        if (!block && done == 0)
            return 0;
        m->grad_hook(m->grad_hook_ctx, m->pend[m->pend_head].first, m->pend[m->pend_head].n);
        m->pend_head++;
    }
    return 0;
}

/* A GPU: starts copying tensors [first, first + n) of the gradients to the host view on
 * the copy stream (after the compute stream's work so far: the layer's backward) and hands
 * every download already finished to the hook. */
static int download(struct gm_model *m, size_t first, size_t n)
{
    const struct gm_param_info *a = &m->tensors[first], *z = &m->tensors[first + n - 1];
    const size_t floats = z->offset + z->numel - a->offset; /* a layer's tensors are adjacent */
    int err;

    GM_ASSERT(m->npend < MAX_LAYERS);
    if ((err = gm_cuda_download_mark(m->cu, m->grads_host + a->offset, m->grads + a->offset,
                                     floats * sizeof(float), m->marks, MARK_GRAD(m->npend))) < 0)
        return err;
    m->pend[m->npend++] = (struct pending){.first = first, .n = n};
    return deliver(m, 0);
}

int gm_model_forward(struct gm_model *m, int n, int train, uint64_t seed)
{
    const struct gm_ops *ops = m->ops;
    const float *x;
    int err, has_bn = 0;

    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    x = m->input;
    if (m->cu != NULL && (err = upload(m, n)) < 0)
        return err;
    if (m->cu != NULL)
        x = m->in_dev[m->in_slot];
    if (m->input_t != NULL) { /* NCHW -> NHWC */
        ops->nchw_to_nhwc(n, m->spec.in_c, m->spec.in_h * m->spec.in_w, x, m->input_t);
        x = m->input_t;
    }
    m->x0 = x;
    for (int i = 0; i < m->nlayers; i++) {
        struct layer *l = &m->layers[i];
        const size_t total = (size_t)n * out_size(l);
        switch (l->kind) {
        case LAYER_CONV2D: {
            struct gm_conv2d_shape s;
            err = gm_conv2d_shape_init(&s, n, l->in_h, l->in_w, l->in_c, l->out_c, l->k, l->pad,
                                       l->stride);
            GM_ASSERT(err == 0);
            ops->conv2d_forward(&s, l->need_dx, x, w_of(m, l, m->params), b_of(m, l, m->params),
                                l->ws, l->y);
            break;
        }
        case LAYER_MAXPOOL:
            ops->maxpool_forward(n, l->in_h, l->in_w, l->in_c, l->k, l->relu, x, l->y, l->arg);
            break;
        case LAYER_RELU:
            ops->relu_forward(total, x, l->y);
            break;
        case LAYER_FLATTEN:
            l->y = (float *)x; /* a view: NHWC order is the flattened order */
            break;
        case LAYER_LINEAR:
            ops->linear_forward(n, l->in_c, l->out_c, x, w_of(m, l, m->params),
                                b_of(m, l, m->params), l->y);
            break;
        case LAYER_DROPOUT:
            if (train)
                ops->dropout_forward(total, l->p, seed ^ ((uint64_t)i << 56), x, l->mask, l->y);
            else if ((err = gm_device_copy(m->device, l->y, m->device, x, total * sizeof(float))) <
                     0)
                return err;
            break;
        case LAYER_BATCHNORM:
            ops->batchnorm_forward((size_t)n * l->out_h * l->out_w, l->out_c, train, BN_MOMENTUM,
                                   BN_EPS, x, w_of(m, l, m->params), b_of(m, l, m->params),
                                   m->stats + l->stat, m->stats + l->stat + l->out_c, l->save,
                                   l->save + l->out_c, l->y);
            has_bn = 1;
            break;
        case LAYER_RESADD: {
            const struct layer *src = &m->layers[l->src];
            if (l->dskip == NULL) {
                ops->add(total, x, src->y, l->y);
            } else {
                ops->shortcut_forward(n, src->out_h, src->out_w, src->out_c, l->out_c, l->stride,
                                      src->y, l->y);
                ops->add(total, l->y, x, l->y);
            }
            break;
        }
        case LAYER_AVGPOOL:
            ops->avgpool_forward(n, l->in_h * l->in_w, l->in_c, x, l->y);
            break;
        }
        x = l->y;
    }
    if (train && has_bn)
        m->batches_tracked++;
    return gm_model_take_error(m);
}

double gm_model_loss(struct gm_model *m, int n, const int32_t *labels, long *correct)
{
    GM_ASSERT(n >= 1 && n <= m->max_batch);
    if (m->cu != NULL) { /* the labels go to the device (the loss waits for the GPU anyway) */
        if (gm_device_copy(m->device, m->labels, GM_DEVICE_CPU, labels,
                           (size_t)n * sizeof(int32_t)) < 0) {
            if (correct != NULL)
                *correct = 0;
            return NAN; /* logged, and kept for gm_model_take_error */
        }
        labels = m->labels;
    }
    return m->ops->xent(n, m->spec.classes, gm_model_logits(m), labels, m->dlogits, correct);
}

int gm_model_backward(struct gm_model *m, int n)
{
    const struct gm_ops *ops = m->ops;
    const float *dy = m->dlogits;

    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    m->npend = m->pend_head = 0;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct layer *l = &m->layers[i];
        const float *x = i > 0 ? m->layers[i - 1].y : m->x0;
        const size_t total = (size_t)n * out_size(l);
        switch (l->kind) {
        case LAYER_CONV2D: {
            struct gm_conv2d_shape s;
            int err = gm_conv2d_shape_init(&s, n, l->in_h, l->in_w, l->in_c, l->out_c, l->k, l->pad,
                                           l->stride);
            GM_ASSERT(err == 0);
            ops->conv2d_backward(&s, x, w_of(m, l, m->params), dy, w_of(m, l, m->grads),
                                 b_of(m, l, m->grads), l->dx, l->ws);
            break;
        }
        case LAYER_MAXPOOL:
            if (l->dx != NULL)
                ops->maxpool_backward(n, l->in_h, l->in_w, l->in_c, l->k, dy, l->arg, l->dx);
            break;
        case LAYER_RELU:
            if (l->dx != NULL)
                ops->relu_backward(total, l->y, dy, l->dx);
            break;
        case LAYER_FLATTEN:
            continue; /* dy passes through unchanged */
        case LAYER_LINEAR:
            ops->linear_backward(n, l->in_c, l->out_c, x, w_of(m, l, m->params), dy,
                                 w_of(m, l, m->grads), b_of(m, l, m->grads), l->dx);
            break;
        case LAYER_DROPOUT:
            if (l->dx != NULL)
                ops->dropout_backward(total, l->mask, dy, l->dx);
            break;
        case LAYER_BATCHNORM:
            ops->batchnorm_backward((size_t)n * l->out_h * l->out_w, l->out_c, x,
                                    w_of(m, l, m->params), l->save, l->save + l->out_c, dy,
                                    w_of(m, l, m->grads), b_of(m, l, m->grads), l->dx);
            break;
        case LAYER_RESADD: {
            /* dx = dy: passed on as is; the skip input's gradient goes to the
             * layer after src, which adds it into its dx (src's dy) */
            const struct layer *src = &m->layers[l->src];
            struct layer *after = &m->layers[l->src + 1];
            if (l->dskip == NULL) {
                after->skip = dy;
            } else {
                ops->shortcut_backward(n, src->out_h, src->out_w, src->out_c, l->out_c, l->stride,
                                       dy, l->dskip);
                after->skip = l->dskip;
            }
            continue;
        }
        case LAYER_AVGPOOL:
            if (l->dx != NULL)
                ops->avgpool_backward(n, l->in_h * l->in_w, l->in_c, dy, l->dx);
            break;
        }
        if (l->skip != NULL) {
            ops->add((size_t)n * in_size(l), l->dx, l->skip, l->dx);
            l->skip = NULL;
        }
        if (l->w_tensor >= 0 && m->grad_hook != NULL) { /* this layer's gradients are final */
            if (m->cu == NULL) {
                m->grad_hook(m->grad_hook_ctx, (size_t)l->w_tensor, layer_tensors(l));
            } else {
                int err = download(m, (size_t)l->w_tensor, layer_tensors(l));
                if (err < 0)
                    return err;
            }
        }
        dy = l->dx;
    }
    if (m->cu != NULL) {
        int err = deliver(m, 1); /* the downloads still in flight, in order */
        if (err < 0)
            return err;
    }
    return gm_model_take_error(m);
}

/* ---- PyTorch layout ------------------------------------------------------- */

/* Index in the internal layout of PyTorch-layout element j of tensor t. */
static size_t internal_index(const struct gm_model *m, size_t t, size_t j)
{
    const struct gm_param_info *ti = &m->tensors[t];

    if (ti->ndim == 4) { /* torch (OC, IC, KH, KW) -> internal (OC, KH, KW, IC) */
        const size_t ic = (size_t)ti->shape[1], kh = (size_t)ti->shape[2],
                     kw = (size_t)ti->shape[3];
        size_t x = j % kw, y = (j / kw) % kh, c = (j / (kw * kh)) % ic, o = j / (kw * kh * ic);
        return ((o * kh + y) * kw + x) * ic + c;
    }
    if (ti->ndim == 2 && m->flat_from[t][0] > 0) { /* inputs: torch (C,H,W) -> internal (H,W,C) */
        const size_t c = (size_t)m->flat_from[t][0], h = (size_t)m->flat_from[t][1],
                     w = (size_t)m->flat_from[t][2], in = (size_t)ti->shape[1];
        size_t o = j / in, f = j % in;
        size_t x = f % w, y = (f / w) % h, ch = f / (w * h);
        return o * in + (y * w + x) * c + ch;
    }
    return j;
}

void gm_model_export_tensor(const struct gm_model *m, size_t i, const float *src_flat, float *dst)
{
    const struct gm_param_info *ti = gm_model_tensor(m, i);
    const float *src = src_flat + ti->offset;

    for (size_t j = 0; j < ti->numel; j++)
        dst[j] = src[internal_index(m, i, j)];
}

void gm_model_import_tensor(const struct gm_model *m, size_t i, const float *src, float *dst_flat)
{
    const struct gm_param_info *ti = gm_model_tensor(m, i);
    float *dst = dst_flat + ti->offset;

    for (size_t j = 0; j < ti->numel; j++)
        dst[internal_index(m, i, j)] = src[j];
}

/* ---- buffers ---------------------------------------------------------------- */

size_t gm_model_num_buffers(const struct gm_model *m)
{
    return m->nbuffers;
}

const struct gm_param_info *gm_model_buffer(const struct gm_model *m, size_t i)
{
    GM_ASSERT(i < m->nbuffers);
    return &m->buffers[i];
}

size_t gm_model_buffer_len(const struct gm_model *m, size_t i)
{
    const struct gm_param_info *b = gm_model_buffer(m, i);

    return b->ndim == 0 ? 1 : b->numel;
}

int gm_model_export_buffer(const struct gm_model *m, size_t i, float *dst)
{
    const struct gm_param_info *b = gm_model_buffer(m, i);

    if (b->ndim == 0) { /* num_batches_tracked */
        dst[0] = (float)m->batches_tracked;
        return 0;
    }
    return gm_device_copy(GM_DEVICE_CPU, dst, m->device, m->stats + b->offset,
                          b->numel * sizeof(float));
}

int gm_model_import_buffer(struct gm_model *m, size_t i, const float *src)
{
    const struct gm_param_info *b = gm_model_buffer(m, i);

    if (b->ndim == 0) {
        if (!(src[0] >= 0 && src[0] <= 16777216.0f))
            return -EINVAL;
        m->batches_tracked = (int64_t)src[0];
        return 0;
    }
    return gm_device_copy(m->device, m->stats + b->offset, GM_DEVICE_CPU, src,
                          b->numel * sizeof(float));
}
