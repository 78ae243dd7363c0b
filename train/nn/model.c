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
 */
#include "train/nn/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "train/kernels/conv2d.h"
#include "train/nn/ops.h"
#include "train/nn/rng.h"

enum layer_kind {
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_RELU,
    LAYER_FLATTEN,
    LAYER_LINEAR,
    LAYER_DROPOUT,
};

struct layer {
    enum layer_kind kind;
    int in_c, in_h, in_w; /* per sample; dense layers use in_c only */
    int out_c, out_h, out_w;
    int k, pad;   /* conv kernel and padding; pool window */
    int relu;     /* maxpool: fused ReLU before the pool */
    float p;      /* dropout probability */
    int w_tensor; /* index into m->tensors of the weight (bias = +1), or -1 */
    float *y;     /* owned, or borrowed (flatten) */
    float *dx;    /* owned; NULL for layer 0 */
    float *ws;    /* owned: conv workspace */
    int need_dx;  /* conv: dx is computed (dx != NULL) */
    uint8_t *arg; /* owned: maxpool */
    float *mask;  /* owned: dropout */
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
    struct gm_param_info tensors[16];
    /* export permutation for a linear layer after a spatial flatten */
    int flat_from[16][3]; /* per tensor: c, h, w of the flattened map, or 0 */
    size_t ntensors;
    float *input;                 /* owned: NCHW staging, max_batch * in size */
    float *input_t;               /* owned: NHWC copy when in_c > 1, else NULL */
    float *dlogits;               /* owned */
    gm_model_grad_hook grad_hook; /* borrowed; NULL: none */
    void *grad_hook_ctx;
};

void gm_model_set_grad_hook(struct gm_model *m, gm_model_grad_hook fn, void *ctx)
{
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

int gm_model_known(const char *name)
{
    return strcmp(name, "mlp") == 0 || strcmp(name, "lenet5") == 0;
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
    l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->in_c = b->c;
    l->in_h = b->h;
    l->in_w = b->w;
    l->w_tensor = -1;
    return l;
}

static void add_tensor(struct builder *b, const char *name, int ndim, const int64_t *shape,
                       int rows, int cols)
{
    struct gm_model *m = b->m;
    struct gm_param_info *t = &m->tensors[m->ntensors];
    size_t n = 1;

    GM_ASSERT(m->ntensors < GM_ARRAY_SIZE(m->tensors));
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
    m->nparams += n;
    m->ntensors++;
}

static void conv(struct builder *b, int oc, int k, int pad)
{
    struct layer *l = push(b, LAYER_CONV2D);
    char name[32];

    if (l == NULL)
        return;
    if (!b->spatial || b->h + 2 * pad < k || b->w + 2 * pad < k) {
        b->err = -EINVAL;
        return;
    }
    l->k = k;
    l->pad = pad;
    l->out_c = oc;
    l->out_h = b->h + 2 * pad - k + 1;
    l->out_w = b->w + 2 * pad - k + 1;
    l->w_tensor = (int)b->m->ntensors;
    b->nconv++;
    snprintf(name, sizeof(name), "conv%d.weight", b->nconv);
    add_tensor(b, name, 4, (int64_t[]){oc, b->c, k, k}, oc, k * k * b->c);
    snprintf(name, sizeof(name), "conv%d.bias", b->nconv);
    add_tensor(b, name, 1, (int64_t[]){oc}, oc, 1);
    b->c = oc;
    b->h = l->out_h;
    b->w = l->out_w;
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

static void fc(struct builder *b, int out)
{
    struct layer *l = push(b, LAYER_LINEAR);
    struct gm_model *m = b->m;
    char name[32];

    if (l == NULL)
        return;
    if (b->spatial) {
        b->err = -EINVAL;
        return;
    }
    l->out_c = out;
    l->out_h = l->out_w = 1;
    l->w_tensor = (int)m->ntensors;
    b->nfc++;
    if (b->flat_c > 0) { /* first fc after a flatten: remember the map for export */
        m->flat_from[m->ntensors][0] = b->flat_c;
        m->flat_from[m->ntensors][1] = b->flat_h;
        m->flat_from[m->ntensors][2] = b->flat_w;
        b->flat_c = 0;
    }
    snprintf(name, sizeof(name), "fc%d.weight", b->nfc);
    add_tensor(b, name, 2, (int64_t[]){out, b->c}, out, b->c);
    snprintf(name, sizeof(name), "fc%d.bias", b->nfc);
    add_tensor(b, name, 1, (int64_t[]){out}, out, 1);
    b->c = out;
}

static int build(struct gm_model *m)
{
    const struct gm_model_spec *s = &m->spec;
    struct builder b = {.m = m, .c = s->in_c, .h = s->in_h, .w = s->in_w, .spatial = 1};

    if (strcmp(s->name, "lenet5") == 0) {
        conv(&b, 6, 5, 2);
        pool(&b, 2, 1); /* relu + pool */
        conv(&b, 16, 5, 0);
        pool(&b, 2, 1); /* relu + pool */
        flatten(&b);
        fc(&b, 120);
        same_shape(&b, LAYER_RELU, 0);
        if (s->dropout > 0)
            same_shape(&b, LAYER_DROPOUT, s->dropout);
        fc(&b, 84);
        same_shape(&b, LAYER_RELU, 0);
        if (s->dropout > 0)
            same_shape(&b, LAYER_DROPOUT, s->dropout);
        fc(&b, s->classes);
    } else if (strcmp(s->name, "mlp") == 0) {
        flatten(&b);
        for (int i = 0; i < s->nhidden; i++) {
            if (s->hidden[i] < 1)
                return -EINVAL;
            fc(&b, s->hidden[i]);
            same_shape(&b, LAYER_RELU, 0);
            if (s->dropout > 0)
                same_shape(&b, LAYER_DROPOUT, s->dropout);
        }
        fc(&b, s->classes);
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

static int alloc_buffers(struct gm_model *m)
{
    const size_t nb = (size_t)m->max_batch;
    const size_t in = (size_t)m->spec.in_c * m->spec.in_h * m->spec.in_w;
    int err;

    if ((err = alloc_floats(m, m->nparams, &m->params)) < 0 ||
        (err = alloc_floats(m, m->nparams, &m->grads)) < 0 ||
        (err = alloc_floats(m, nb * in, &m->input)) < 0 ||
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
                                            l->k, l->pad, 1)) < 0)
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
    }
    return 0;
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
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->spec = *spec;
    m->ops = gm_ops_get(spec->device);
    m->device = spec->device;
    m->max_batch = max_batch;
    m->layers = calloc(32, sizeof(*m->layers));
    if (m->layers == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    if ((err = build(m)) < 0)
        goto fail;
    if ((err = alloc_buffers(m)) < 0)
        goto fail;
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
        gm_device_free(m->device, l->arg);
        gm_device_free(m->device, l->mask);
    }
    free(m->layers);
    gm_device_free(m->device, m->params);
    gm_device_free(m->device, m->grads);
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
    return m->params;
}

float *gm_model_grads(struct gm_model *m)
{
    return m->grads;
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
    return m->input;
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
        /* fan_in of the layer: the weight's elements per output unit; a bias
         * uses its weight's fan_in (PyTorch's default init). */
        const struct gm_param_info *w = ti->ndim == 1 && t > 0 ? &m->tensors[t - 1] : ti;
        const double bound = 1.0 / sqrt((double)w->cols);
        float *p = m->params + ti->offset;
        for (size_t i = 0; i < ti->numel; i++)
            p[i] = (float)((2.0 * gm_rng_double(&r) - 1.0) * bound);
    }
}

/* ---- passes -------------------------------------------------------------- */

static float *w_of(struct gm_model *m, const struct layer *l, float *flat)
{
    return flat + m->tensors[l->w_tensor].offset;
}

static float *b_of(struct gm_model *m, const struct layer *l, float *flat)
{
    return flat + m->tensors[l->w_tensor + 1].offset;
}

int gm_model_forward(struct gm_model *m, int n, int train, uint64_t seed)
{
    const struct gm_ops *ops = m->ops;
    const float *x;
    int err;

    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    x = m->input;
    if (m->input_t != NULL) { /* NCHW -> NHWC */
        ops->nchw_to_nhwc(n, m->spec.in_c, m->spec.in_h * m->spec.in_w, m->input, m->input_t);
        x = m->input_t;
    }
    for (int i = 0; i < m->nlayers; i++) {
        struct layer *l = &m->layers[i];
        const size_t total = (size_t)n * out_size(l);
        switch (l->kind) {
        case LAYER_CONV2D: {
            struct gm_conv2d_shape s;
            err = gm_conv2d_shape_init(&s, n, l->in_h, l->in_w, l->in_c, l->out_c, l->k, l->pad, 1);
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
        }
        x = l->y;
    }
    return 0;
}

double gm_model_loss(struct gm_model *m, int n, const int32_t *labels, long *correct)
{
    GM_ASSERT(n >= 1 && n <= m->max_batch);
    return m->ops->xent(n, m->spec.classes, gm_model_logits(m), labels, m->dlogits, correct);
}

int gm_model_backward(struct gm_model *m, int n)
{
    const struct gm_ops *ops = m->ops;
    const float *dy = m->dlogits;

    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct layer *l = &m->layers[i];
        const float *x = i > 0 ? m->layers[i - 1].y : (m->input_t ? m->input_t : m->input);
        const size_t total = (size_t)n * out_size(l);
        switch (l->kind) {
        case LAYER_CONV2D: {
            struct gm_conv2d_shape s;
            int err =
                gm_conv2d_shape_init(&s, n, l->in_h, l->in_w, l->in_c, l->out_c, l->k, l->pad, 1);
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
        }
        if (l->w_tensor >= 0 && m->grad_hook != NULL) /* this layer's gradients are final */
            m->grad_hook(m->grad_hook_ctx, (size_t)l->w_tensor, 2);
        dy = l->dx;
    }
    return 0;
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
