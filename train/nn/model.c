/*
 * train/nn/model.c - a model as a graph of ops (train/nn/graph.h, built by a
 * family's builder in train/nn/zoo.c), flat buffers, forward and backward
 * passes, PyTorch-layout export.  See model.h for the contract.
 *
 * Buffers, all owned by the model and sized for max_batch (y, gacc, dx and
 * dskip are places in one arena that several share when their lifetimes do
 * not meet: see "the activation arena" below):
 *   per value  y     activations (a flatten's value aliases its input's; the
 *                    input value is the NHWC copy of the staging buffer)
 *              gacc  the sum of the gradients of a value read by several
 *                    nodes (a residual's skip input), when it needs one
 *   per node   dx    the gradient w.r.t. its input (only when the input needs
 *                    one: a trainable parameter lies below it)
 *              dskip an option-A residual's gradient w.r.t. the skip input
 *              ws    conv: the kernel's workspace (ops->conv2d_ws_floats: im2col
 *                    of the input kept from forward for dW, and its gradient)
 *              arg   maxpool: argmax position per output
 *              mask  dropout: the mask of the last training forward
 *              save  batch norm: mean then invstd of the last training batch
 * Forward runs the nodes in order.  Backward runs them in reverse, skipping
 * every node with no trainable parameter at or below it; each reads its
 * output's gradient (g, a borrowed pointer: dlogits, a node's dx, a
 * pass-through's dy, or gacc) and hands a gradient to each input that needs
 * one: the first one handed is kept by pointer, the next ones are summed into
 * gacc.  Frozen nodes (gm_graph_freeze) compute no parameter gradient that is
 * kept: their tensors lie after the trainable ones, where the gradient buffer
 * is scratch; a frozen batch norm normalizes with its running statistics in
 * training too, and its backward is then the per-channel scale
 * gamma / sqrt(running_var + eps) (the evaluation forward of dy, mean 0, beta 0).
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
 *    alone).  With one, backward starts an asynchronous copy of each node's
 *    gradients to the pinned host view on the copy stream as soon as the node
 *    is queued, and calls the hook for a node once its copy has finished,
 *    in node order, polling between nodes and waiting at the end; so the
 *    collective reduces the last layers while the GPU still computes the
 *    first.  Backward returns with every trainable gradient in the host view.
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
#include "common/log.h"
#include "train/kernels/conv2d.h"
#include "train/kernels/cuda.h"
#include "train/nn/graph.h"
#include "train/nn/ops.h"
#include "train/nn/rng.h"
#include "train/nn/zoo.h"

#define BN_MOMENTUM 0.1f /* PyTorch's defaults */
#define BN_EPS 1e-5f

struct node_rt {
    int backward; /* runs in backward: a trainable parameter at or below it */
    int need_dx;  /* its input needs a gradient */
    float *dx;    /* in the arena: gradient w.r.t. the input */
    float *dskip; /* in the arena: option-A residual: gradient w.r.t. the skip input */
    size_t dx_floats, dskip_floats; /* their sizes (0: none) */
    float *ws;                      /* owned: conv workspace */
    float *save;  /* owned: batchnorm: mean then invstd of the last training batch (2C) */
    uint8_t *arg; /* owned: maxpool */
    float *mask;  /* owned: dropout */
};

struct value_rt {
    float *y; /* in the arena, or borrowed: the input, a flatten's view */
    int needs_grad;
    const float *g; /* borrowed, during backward: its gradient so far */
    float *gacc;    /* in the arena: where several readers' gradients are summed */
    size_t gacc_floats;
};

struct gm_model {
    struct gm_model_spec spec;
    enum gm_device device;
    const struct gm_ops *ops; /* borrowed: the device's kernels */
    int max_batch;
    struct gm_graph g;    /* owned: structure, tensors, buffers */
    struct node_rt *nrt;  /* owned, g.nnodes */
    struct value_rt *vrt; /* owned, g.nvalues */
    float *params;        /* owned, flat */
    float *grads;         /* owned, flat */
    /* non-trainable state: batch norm running statistics */
    float *stats;     /* owned, flat: per batch norm, running_mean[C] then running_var[C] */
    int64_t *tracked; /* owned: num_batches_tracked per batch norm */
    float *zeros;     /* owned: max channels of zeros (a frozen batch norm's backward) */
    float *arena;     /* owned: the activations and gradients (alloc_arena) */
    size_t arena_floats;
    float *shared_ws; /* owned: the tiled convolutions' scratch workspace */
    size_t shared_ws_floats;
    float *input;                 /* owned: NCHW staging, max_batch * in size (the CPU only) */
    float *input_t;               /* owned: NHWC copy when in_c > 1, else NULL */
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
    } * pend;                    /* owned, g.nnodes */
    int npend, pend_head;
};

/* The marks (train/kernels/cuda.h) of a model on a GPU. */
#define MARK_UPLOADED(s) (s)     /* the upload of staging buffer s is done */
#define MARK_RELEASED(s) (2 + s) /* the compute stream no longer reads in_dev[s] */
#define MARK_GRAD(j) (4 + (j))   /* the j-th gradient download of this backward is done */

void gm_model_set_grad_hook(struct gm_model *m, gm_model_grad_hook fn, void *ctx)
{
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

int gm_model_known(const char *name)
{
    return gm_zoo_known(name);
}

static size_t value_size(const struct gm_graph_value *v)
{
    return (size_t)v->c * v->h * v->w;
}

static const struct gm_graph_value *in_of(const struct gm_model *m, const struct gm_graph_node *n)
{
    return &m->g.values[n->in];
}

static const struct gm_graph_value *out_of(const struct gm_model *m, const struct gm_graph_node *n)
{
    return &m->g.values[n->out];
}

static int conv_shape(const struct gm_model *m, const struct gm_graph_node *n, int batch,
                      struct gm_conv2d_shape *s)
{
    const struct gm_graph_value *x = in_of(m, n);

    if (n->tiled) /* bounded scratch workspace, shared by the layers */
        return gm_conv2d_shape_init_groups(s, batch, x->h, x->w, x->c, out_of(m, n)->c, n->k,
                                           n->pad, n->stride, n->groups);
    return gm_conv2d_shape_init(s, batch, x->h, x->w, x->c, out_of(m, n)->c, n->k, n->pad,
                                n->stride);
}

static int pool_shape(const struct gm_model *m, const struct gm_graph_node *n, int batch,
                      struct gm_pool2d_shape *s)
{
    const struct gm_graph_value *x = in_of(m, n);
    return gm_pool2d_shape_init(s, batch, x->h, x->w, x->c, n->k, n->stride, n->pad);
}

/* The k x k max-pool path (stride k, no padding), or the general one. */
static int plain_pool(const struct gm_graph_node *n)
{
    return n->stride == n->k && n->pad == 0;
}

/* ---- building ------------------------------------------------------------ */

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
    if ((err = alloc_host(m, m->g.nparams, &m->params_host)) < 0 ||
        (err = alloc_host(m, m->g.nparams, &m->grads_host)) < 0)
        return err;
    for (int s = 0; s < 2; s++)
        if ((err = alloc_host(m, in_floats, &m->in_host[s])) < 0 ||
            (err = alloc_floats(m, in_floats, &m->in_dev[s])) < 0)
            return err;
    if ((err = gm_device_alloc(m->device, (size_t)m->max_batch * sizeof(int32_t),
                               (void **)&m->labels)) < 0)
        return err;
    return gm_cuda_marks_new(m->cu, 4 + m->g.nnodes, &m->marks);
}

/* PyTorch's initial statistics: running_mean 0, running_var 1, the counters 0.
 * Built on the host, then copied to the device in one piece; and the zeros. */
static int init_stats(struct gm_model *m)
{
    size_t nz = 0;
    float *host;
    int err;

    for (int i = 0; i < m->g.nbn; i++)
        m->tracked[i] = 0;
    for (int i = 0; i < m->g.nnodes; i++)
        if (m->g.nodes[i].op == GM_GRAPH_OP_BATCHNORM && value_size(out_of(m, &m->g.nodes[i])) > 0)
            nz = (size_t)out_of(m, &m->g.nodes[i])->c > nz ? (size_t)out_of(m, &m->g.nodes[i])->c
                                                           : nz;
    if (m->g.nstats == 0)
        return 0;
    host = calloc(m->g.nstats + nz, sizeof(float));
    if (host == NULL)
        return -ENOMEM;
    err = alloc_floats(m, nz, &m->zeros);
    if (err == 0)
        err = gm_device_copy(m->device, m->zeros, GM_DEVICE_CPU, host, nz * sizeof(float));
    for (size_t i = 0; i < m->g.nbuffers; i++) {
        const struct gm_param_info *b = &m->g.buffers[i];
        if (strstr(b->name, ".running_var") != NULL)
            for (size_t j = 0; j < b->numel; j++)
                host[b->offset + j] = 1.0f;
    }
    if (err == 0)
        err = gm_device_copy(m->device, m->stats, GM_DEVICE_CPU, host, m->g.nstats * sizeof(float));
    free(host);
    return err;
}

/* Which nodes run backward and which values need a gradient: those with a
 * trainable parameter at or below them. */
static void plan_backward(struct gm_model *m)
{
    m->vrt[0].needs_grad = 0;
    for (int i = 0; i < m->g.nnodes; i++) {
        const struct gm_graph_node *n = &m->g.nodes[i];
        struct node_rt *r = &m->nrt[i];
        const int trainable = n->w_tensor >= 0 && !n->frozen;
        r->need_dx = m->vrt[n->in].needs_grad;
        r->backward = trainable || r->need_dx || (n->in2 >= 0 && m->vrt[n->in2].needs_grad);
        m->vrt[n->out].needs_grad = r->backward;
    }
}

/* ---- the activation arena ------------------------------------------------
 * Activations and gradients live in one arena, placed by their lifetimes on a
 * clock of 2N ticks (N nodes): node i's forward is tick i, its backward tick
 * 2N-1-i.  A value's activation lives from its producer's forward to its last
 * reader's forward, or to the last backward that reads it (a convolution's,
 * linear layer's or training batch norm's input, a ReLU's own output); the
 * logits live for ever.  A gradient buffer lives from the backward that writes
 * it to the backward of the producer of the value it is handed to, through the
 * pass-throughs (a flatten, a residual add) that hand it further down.  Two
 * buffers share bytes only when their lifetimes do not meet, ends included, so
 * no kernel ever sees its input and output in the same place. */

struct slot {
    size_t floats, off;
    int start, end; /* ticks, inclusive */
    float **dst;
};

static int bwd_tick(const struct gm_model *m, int i)
{
    return 2 * m->g.nnodes - 1 - i;
}

/* The last tick the gradient handed to value v is read. */
static int grad_end(const struct gm_model *m, int v)
{
    const int p = m->g.values[v].producer;
    const struct gm_graph_node *nd;
    int e;

    if (p < 0)
        return 0; /* the input takes no gradient */
    nd = &m->g.nodes[p];
    e = bwd_tick(m, p);
    if (nd->op == GM_GRAPH_OP_FLATTEN && m->vrt[nd->in].needs_grad) {
        const int e2 = grad_end(m, nd->in);
        e = e2 > e ? e2 : e;
    } else if (nd->op == GM_GRAPH_OP_ADD) {
        if (m->vrt[nd->in].needs_grad) {
            const int e2 = grad_end(m, nd->in);
            e = e2 > e ? e2 : e;
        }
        if (m->nrt[p].dskip_floats == 0 && m->vrt[nd->in2].needs_grad) {
            const int e2 = grad_end(m, nd->in2);
            e = e2 > e ? e2 : e;
        }
    }
    return e;
}

/* The value whose buffer v's activation is (a flatten is a view of its input). */
static int root_of(const struct gm_model *m, int v)
{
    while (v > 0 && m->g.values[v].producer >= 0 &&
           m->g.nodes[m->g.values[v].producer].op == GM_GRAPH_OP_FLATTEN)
        v = m->g.nodes[m->g.values[v].producer].in;
    return v;
}

static void extend(int *end, int tick)
{
    if (tick > *end)
        *end = tick;
}

/* The activations' lifetimes: act_end[root] (ticks), -1 for values without a buffer. */
static void activation_ends(const struct gm_model *m, int *act_end)
{
    const int nn = m->g.nnodes;

    for (int v = 0; v < m->g.nvalues; v++)
        act_end[v] = -1;
    for (int i = 0; i < nn; i++) {
        const struct gm_graph_node *nd = &m->g.nodes[i];
        if (nd->op != GM_GRAPH_OP_FLATTEN)
            act_end[nd->out] = i;
    }
    for (int i = 0; i < nn; i++) {
        const struct gm_graph_node *nd = &m->g.nodes[i];
        const int bwd = m->nrt[i].backward;
        const int x = root_of(m, nd->in);
        extend(&act_end[x], i);
        if (nd->in2 >= 0)
            extend(&act_end[root_of(m, nd->in2)], i);
        if (!bwd)
            continue;
        if (nd->op == GM_GRAPH_OP_CONV2D || nd->op == GM_GRAPH_OP_LINEAR ||
            (nd->op == GM_GRAPH_OP_BATCHNORM && !nd->frozen))
            extend(&act_end[x], bwd_tick(m, i));
        if (nd->op == GM_GRAPH_OP_RELU || nd->op == GM_GRAPH_OP_RELU6)
            extend(&act_end[nd->out], bwd_tick(m, i));
    }
    extend(&act_end[root_of(m, m->g.nodes[nn - 1].out)], 2 * nn); /* the logits */
    act_end[0] = -1;                                              /* the input: its own */
}

static int cmp_slot_size(const void *a, const void *b)
{
    const struct slot *x = *(const struct slot *const *)a, *y = *(const struct slot *const *)b;
    if (x->floats != y->floats)
        return x->floats > y->floats ? -1 : 1;
    return x->start - y->start;
}

static int cmp_slot_off(const void *a, const void *b)
{
    const struct slot *x = *(const struct slot *const *)a, *y = *(const struct slot *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Places the slots, largest first, each at the lowest offset clear of the placed slots
 * whose lifetimes meet its own; returns the arena's size in floats. */
static size_t place_slots(struct slot *sl, size_t n, struct slot **order, struct slot **meet)
{
    size_t total = 0, placed = 0;

    for (size_t i = 0; i < n; i++)
        order[i] = &sl[i];
    qsort(order, n, sizeof(*order), cmp_slot_size);
    for (size_t i = 0; i < n; i++) {
        struct slot *s = order[i];
        size_t nm = 0, off = 0;
        for (size_t j = 0; j < placed; j++)
            if (order[j]->start <= s->end && s->start <= order[j]->end)
                meet[nm++] = order[j];
        qsort(meet, nm, sizeof(*meet), cmp_slot_off);
        for (size_t j = 0; j < nm; j++) {
            if (meet[j]->off >= off + s->floats)
                break;
            if (meet[j]->off + meet[j]->floats > off)
                off = meet[j]->off + meet[j]->floats;
        }
        s->off = off;
        placed++;
        if (off + s->floats > total)
            total = off + s->floats;
    }
    return total;
}

static size_t round16f(size_t floats)
{
    return (floats + 15) & ~(size_t)15; /* 64-byte aligned offsets */
}

static int alloc_arena(struct gm_model *m)
{
    const size_t nb = (size_t)m->max_batch;
    const int nn = m->g.nnodes, nv = m->g.nvalues;
    /* at most: an activation and a gradient sum per value, a dx and a dskip per node */
    struct slot *sl = calloc(2 * ((size_t)nv + (size_t)nn) + 1, sizeof(*sl));
    struct slot **order = calloc(2 * ((size_t)nv + (size_t)nn) + 1, sizeof(*order));
    struct slot **meet = calloc(2 * ((size_t)nv + (size_t)nn) + 1, sizeof(*meet));
    int *act_end = calloc((size_t)nv, sizeof(*act_end));
    size_t n = 0, total;
    int err = -ENOMEM;

    if (sl == NULL || order == NULL || meet == NULL || act_end == NULL)
        goto out;
    activation_ends(m, act_end);
    for (int i = 0; i < nn; i++) {
        const struct gm_graph_node *nd = &m->g.nodes[i];
        const struct node_rt *r = &m->nrt[i];
        const int v = nd->out;
        if (act_end[v] >= 0)
            sl[n++] = (struct slot){round16f(nb * value_size(&m->g.values[v])), 0, i, act_end[v],
                                    &m->vrt[v].y};
        if (r->dx_floats > 0)
            sl[n++] = (struct slot){round16f(r->dx_floats), 0, bwd_tick(m, i), grad_end(m, nd->in),
                                    &m->nrt[i].dx};
        if (r->dskip_floats > 0)
            sl[n++] = (struct slot){round16f(r->dskip_floats), 0, bwd_tick(m, i),
                                    grad_end(m, nd->in2), &m->nrt[i].dskip};
    }
    for (int v = 1; v < nv; v++) {
        int first = -1; /* the reader whose gradient comes first: the last in forward */
        if (m->vrt[v].gacc_floats == 0)
            continue;
        for (int i = 0; i < nn; i++)
            if (m->g.nodes[i].in == v || m->g.nodes[i].in2 == v)
                first = i;
        GM_ASSERT(first >= 0);
        sl[n++] = (struct slot){round16f(m->vrt[v].gacc_floats), 0, bwd_tick(m, first),
                                grad_end(m, v), &m->vrt[v].gacc};
    }
    total = place_slots(sl, n, order, meet);
    m->arena_floats = total;
    if (total > 0 && (err = alloc_floats(m, total, &m->arena)) < 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        *sl[i].dst = m->arena + sl[i].off;
    err = 0;
out:
    free(sl);
    free(order);
    free(meet);
    free(act_end);
    return err;
}

/* Sizes a node's buffers (the arena's are placed afterwards) and allocates its own. */
static int alloc_node(struct gm_model *m, int i)
{
    const size_t nb = (size_t)m->max_batch;
    const struct gm_graph_node *n = &m->g.nodes[i];
    struct node_rt *r = &m->nrt[i];
    struct value_rt *out = &m->vrt[n->out];
    const size_t ysz = nb * value_size(out_of(m, n));
    int err;

    if (r->need_dx && n->op != GM_GRAPH_OP_FLATTEN && n->op != GM_GRAPH_OP_ADD)
        r->dx_floats = nb * value_size(in_of(m, n));
    if (out->needs_grad && m->g.values[n->out].readers > 1)
        out->gacc_floats = ysz;
    switch (n->op) {
    case GM_GRAPH_OP_CONV2D: {
        struct gm_conv2d_shape s;
        size_t ws;
        if ((err = conv_shape(m, n, m->max_batch, &s)) < 0)
            return err;
        ws = m->ops->conv2d_ws_floats(&s, r->need_dx);
        if (n->tiled) { /* scratch: one workspace for all, allocated after the nodes */
            m->shared_ws_floats = ws > m->shared_ws_floats ? ws : m->shared_ws_floats;
            return 0;
        }
        return alloc_floats(m, ws, &r->ws);
    }
    case GM_GRAPH_OP_MAXPOOL: {
        struct gm_pool2d_shape s;
        if (!plain_pool(n) && (err = pool_shape(m, n, m->max_batch, &s)) < 0)
            return err;
        return gm_device_alloc(m->device, ysz, (void **)&r->arg);
    }
    case GM_GRAPH_OP_DROPOUT:
        return alloc_floats(m, ysz, &r->mask);
    case GM_GRAPH_OP_BATCHNORM:
        return alloc_floats(m, 2 * (size_t)out_of(m, n)->c, &r->save);
    case GM_GRAPH_OP_ADD: {
        const struct gm_graph_value *s = &m->g.values[n->in2];
        if ((n->stride > 1 || s->c != out_of(m, n)->c) && m->vrt[n->in2].needs_grad)
            r->dskip_floats = nb * value_size(s);
        return 0;
    }
    case GM_GRAPH_OP_RELU6:
    case GM_GRAPH_OP_ADAPTIVE:
    case GM_GRAPH_OP_RELU:
    case GM_GRAPH_OP_FLATTEN:
    case GM_GRAPH_OP_LINEAR:
    case GM_GRAPH_OP_AVGPOOL:
        return 0;
    }
    return 0;
}

static int alloc_buffers(struct gm_model *m)
{
    const size_t nb = (size_t)m->max_batch;
    const size_t in = (size_t)m->spec.in_c * m->spec.in_h * m->spec.in_w;
    int err;

    m->nrt = calloc((size_t)m->g.nnodes + 1, sizeof(*m->nrt));
    m->vrt = calloc((size_t)m->g.nvalues, sizeof(*m->vrt));
    m->pend = calloc((size_t)m->g.nnodes + 1, sizeof(*m->pend));
    m->tracked = calloc((size_t)m->g.nbn + 1, sizeof(*m->tracked));
    if (m->nrt == NULL || m->vrt == NULL || m->pend == NULL || m->tracked == NULL)
        return -ENOMEM;
    if ((err = alloc_floats(m, m->g.nparams, &m->params)) < 0 ||
        (err = alloc_floats(m, m->g.nparams, &m->grads)) < 0 ||
        (err = alloc_floats(m, m->g.nstats, &m->stats)) < 0 ||
        (m->cu == NULL && (err = alloc_floats(m, nb * in, &m->input)) < 0) ||
        (err = alloc_floats(m, nb * (size_t)m->spec.classes, &m->dlogits)) < 0)
        return err;
    if (m->spec.in_c > 1 && (err = alloc_floats(m, nb * in, &m->input_t)) < 0)
        return err;
    m->vrt[0].y = m->input_t != NULL ? m->input_t : m->input;
    plan_backward(m);
    for (int i = 0; i < m->g.nnodes; i++)
        if ((err = alloc_node(m, i)) < 0)
            return err;
    if ((err = alloc_arena(m)) < 0)
        return err;
    if (m->shared_ws_floats > 0 && (err = alloc_floats(m, m->shared_ws_floats, &m->shared_ws)) < 0)
        return err;
    for (int i = 0; i < m->g.nnodes; i++)
        if (m->g.nodes[i].op == GM_GRAPH_OP_CONV2D && m->g.nodes[i].tiled)
            m->nrt[i].ws = m->shared_ws;
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
    m->spec.freeze = NULL; /* borrowed by the caller; used here only */
    m->ops = gm_ops_get(spec->device);
    m->device = spec->device;
    m->cu = spec->device == GM_DEVICE_CUDA ? gm_cuda_current() : NULL;
    m->in_last = -1;
    m->max_batch = max_batch;
    if ((err = gm_graph_init(&m->g, spec->in_c, spec->in_h, spec->in_w)) < 0)
        goto fail;
    if ((err = gm_zoo_build(&m->g, spec)) < 0 || (err = gm_graph_freeze(&m->g, spec->freeze)) < 0)
        goto fail;
    if ((err = alloc_buffers(m)) < 0)
        goto fail;
    *out = m;
    return 0;
fail:
    if (spec->why != NULL && spec->why_len > 0)
        snprintf(spec->why, spec->why_len, "%s", m->g.msg[0] ? m->g.msg : gm_strerror(err));
    gm_model_free(m);
    return err;
}

void gm_model_free(struct gm_model *m)
{
    if (m == NULL)
        return;
    for (int i = 0; m->nrt != NULL && i < m->g.nnodes; i++) {
        struct node_rt *r = &m->nrt[i];
        if (r->ws != m->shared_ws)
            gm_device_free(m->device, r->ws);
        gm_device_free(m->device, r->save);
        gm_device_free(m->device, r->arg);
        gm_device_free(m->device, r->mask);
    }
    free(m->nrt);
    free(m->vrt);
    free(m->pend);
    free(m->tracked);
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
    gm_device_free(m->device, m->zeros);
    gm_device_free(m->device, m->shared_ws);
    gm_device_free(m->device, m->arena);
    gm_device_free(m->device, m->input);
    gm_device_free(m->device, m->input_t);
    gm_device_free(m->device, m->dlogits);
    gm_graph_free(&m->g);
    free(m);
}

size_t gm_model_num_params(const struct gm_model *m)
{
    return m->g.nparams;
}

size_t gm_model_num_trainable(const struct gm_model *m)
{
    return m->g.ntrainable;
}

size_t gm_model_num_trainable_tensors(const struct gm_model *m)
{
    return m->g.ntrainable_tensors;
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
    const size_t bytes = m->g.nparams * sizeof(float);

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
    return m->vrt[m->g.nodes[m->g.nnodes - 1].out].y;
}

size_t gm_model_num_tensors(const struct gm_model *m)
{
    return m->g.ntensors;
}

const struct gm_param_info *gm_model_tensor(const struct gm_model *m, size_t i)
{
    GM_ASSERT(i < m->g.ntensors);
    return &m->g.tensors[i];
}

/* A normal draw (Box-Muller on two uniforms; the second value is dropped). */
static double normal(struct gm_rng *r)
{
    const double u = 1.0 - gm_rng_double(r), v = gm_rng_double(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static void init_tensor(struct gm_model *m, size_t t, struct gm_rng *r)
{
    const struct gm_param_info *ti = &m->g.tensors[t];
    const struct gm_graph_tensor *x = &m->g.tinfo[t];
    float *p = m->params_host + ti->offset;

    for (size_t i = 0; i < ti->numel; i++) {
        switch (x->init) {
        case GM_GRAPH_INIT_ONE:
            p[i] = 1.0f;
            break;
        case GM_GRAPH_INIT_ZERO:
            p[i] = 0.0f;
            break;
        case GM_GRAPH_INIT_FAN_IN:
            p[i] = (float)((2.0 * gm_rng_double(r) - 1.0) / sqrt((double)x->fan));
            break;
        case GM_GRAPH_INIT_KAIMING:
            p[i] = (float)(normal(r) * sqrt(2.0 / (double)x->fan));
            break;
        case GM_GRAPH_INIT_NORMAL01:
            p[i] = (float)(normal(r) * 0.01);
            break;
        }
    }
}

/* The tensors in build order (init draws in that order whatever is frozen). */
static size_t *build_order(const struct gm_model *m)
{
    size_t *order = malloc((m->g.ntensors + 1) * sizeof(*order));

    if (order != NULL)
        for (size_t t = 0; t < m->g.ntensors; t++)
            order[m->g.tinfo[t].built] = t;
    return order;
}

void gm_model_init_params(struct gm_model *m, uint64_t seed)
{
    size_t *order = build_order(m);
    struct gm_rng r;

    GM_ASSERT(order != NULL);            /* a few KiB */
    gm_rng_init(&r, seed, 0x6d6f64656c); /* stream "model" */
    for (size_t k = 0; k < m->g.ntensors; k++)
        init_tensor(m, order[k], &r);
    free(order);
    /* drawn on the host, then one copy to a GPU; a failure there is logged and kept in the
     * context, and the next forward returns it */
    if (gm_model_params_to_device(m) < 0)
        return; /* kept in the context (gm_model_take_error) */
}

int gm_model_head(const struct gm_model *m, size_t *first, size_t *n)
{
    for (int i = m->g.nnodes - 1; i >= 0; i--) {
        const struct gm_graph_node *nd = &m->g.nodes[i];
        if (nd->op == GM_GRAPH_OP_LINEAR) {
            *first = (size_t)nd->w_tensor;
            *n = (size_t)nd->ntensors;
            return 0;
        }
    }
    return -ENOENT;
}

void gm_model_init_tensors(struct gm_model *m, uint64_t seed, size_t first, size_t n)
{
    struct gm_rng r;

    GM_ASSERT(first + n <= m->g.ntensors);
    gm_rng_init(&r, seed, 0x68656164); /* stream "head" */
    for (size_t t = first; t < first + n; t++)
        init_tensor(m, t, &r);
    if (gm_model_params_to_device(m) < 0)
        return; /* kept in the context (gm_model_take_error) */
}

/* ---- passes -------------------------------------------------------------- */

static float *w_of(struct gm_model *m, const struct gm_graph_node *n, float *flat)
{
    return flat + m->g.tensors[n->w_tensor].offset;
}

/* NULL for a convolution without bias */
static float *b_of(struct gm_model *m, const struct gm_graph_node *n, float *flat)
{
    return n->ntensors < 2 ? NULL : flat + m->g.tensors[n->w_tensor + 1].offset;
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
    const struct gm_param_info *a = &m->g.tensors[first], *z = &m->g.tensors[first + n - 1];
    const size_t floats = z->offset + z->numel - a->offset; /* a layer's tensors are adjacent */
    int err;

    GM_ASSERT(m->npend < m->g.nnodes);
    if ((err = gm_cuda_download_mark(m->cu, m->grads_host + a->offset, m->grads + a->offset,
                                     floats * sizeof(float), m->marks, MARK_GRAD(m->npend))) < 0)
        return err;
    m->pend[m->npend++] = (struct pending){.first = first, .n = n};
    return deliver(m, 0);
}

static int forward_node(struct gm_model *m, int i, int n, int train, uint64_t seed)
{
    const struct gm_ops *ops = m->ops;
    const struct gm_graph_node *nd = &m->g.nodes[i];
    const struct gm_graph_value *xi = in_of(m, nd), *yo = out_of(m, nd);
    const float *x = m->vrt[nd->in].y;
    float *y = m->vrt[nd->out].y;
    const size_t total = (size_t)n * value_size(yo);
    int err;

    switch (nd->op) {
    case GM_GRAPH_OP_CONV2D: {
        struct gm_conv2d_shape s;
        err = conv_shape(m, nd, n, &s);
        GM_ASSERT(err == 0);
        ops->conv2d_forward(&s, m->nrt[i].need_dx, x, w_of(m, nd, m->params),
                            b_of(m, nd, m->params), m->nrt[i].ws, y);
        break;
    }
    case GM_GRAPH_OP_MAXPOOL:
        if (plain_pool(nd)) {
            ops->maxpool_forward(n, xi->h, xi->w, xi->c, nd->k, nd->relu, x, y, m->nrt[i].arg);
        } else {
            struct gm_pool2d_shape s;
            err = pool_shape(m, nd, n, &s);
            GM_ASSERT(err == 0);
            ops->maxpool2d_forward(&s, nd->relu, x, y, m->nrt[i].arg);
        }
        break;
    case GM_GRAPH_OP_RELU:
        ops->relu_forward(total, x, y);
        break;
    case GM_GRAPH_OP_RELU6:
        ops->relu6_forward(total, x, y);
        break;
    case GM_GRAPH_OP_ADAPTIVE:
        ops->adaptive_avgpool_forward(n, xi->h, xi->w, xi->c, yo->h, yo->w, x, y);
        break;
    case GM_GRAPH_OP_FLATTEN:
        m->vrt[nd->out].y = (float *)x; /* a view: NHWC order is the flattened order */
        break;
    case GM_GRAPH_OP_LINEAR:
        ops->linear_forward(n, xi->c, yo->c, x, w_of(m, nd, m->params), b_of(m, nd, m->params), y);
        break;
    case GM_GRAPH_OP_DROPOUT:
        if (train)
            ops->dropout_forward(total, nd->p, seed ^ ((uint64_t)i << 56), x, m->nrt[i].mask, y);
        else if ((err = gm_device_copy(m->device, y, m->device, x, total * sizeof(float))) < 0)
            return err;
        break;
    case GM_GRAPH_OP_BATCHNORM: {
        const int t = train && !nd->frozen; /* a frozen batch norm uses its running statistics */
        ops->batchnorm_forward((size_t)n * yo->h * yo->w, yo->c, t, BN_MOMENTUM, BN_EPS, x,
                               w_of(m, nd, m->params), b_of(m, nd, m->params), m->stats + nd->stat,
                               m->stats + nd->stat + yo->c, m->nrt[i].save, m->nrt[i].save + yo->c,
                               y);
        if (t)
            m->tracked[nd->bn]++;
        break;
    }
    case GM_GRAPH_OP_ADD: {
        const struct gm_graph_value *sv = &m->g.values[nd->in2];
        const float *skip = m->vrt[nd->in2].y;
        if (nd->stride == 1 && sv->c == yo->c) {
            ops->add(total, x, skip, y);
        } else {
            ops->shortcut_forward(n, sv->h, sv->w, sv->c, yo->c, nd->stride, skip, y);
            ops->add(total, y, x, y);
        }
        break;
    }
    case GM_GRAPH_OP_AVGPOOL:
        ops->avgpool_forward(n, xi->h * xi->w, xi->c, x, y);
        break;
    }
    return 0;
}

int gm_model_forward(struct gm_model *m, int n, int train, uint64_t seed)
{
    const float *x;
    int err;

    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    x = m->input;
    if (m->cu != NULL && (err = upload(m, n)) < 0)
        return err;
    if (m->cu != NULL)
        x = m->in_dev[m->in_slot];
    if (m->input_t != NULL) { /* NCHW -> NHWC */
        m->ops->nchw_to_nhwc(n, m->spec.in_c, m->spec.in_h * m->spec.in_w, x, m->input_t);
        x = m->input_t;
    }
    m->vrt[0].y = (float *)x;
    for (int i = 0; i < m->g.nnodes; i++)
        if ((err = forward_node(m, i, n, train, seed)) < 0)
            return err;
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

/* Hands gradient d (n samples) to value v: kept by pointer when it is the first, else summed
 * into v's gacc. */
static void give_grad(struct gm_model *m, int v, const float *d, int n)
{
    struct value_rt *r = &m->vrt[v];

    if (!r->needs_grad)
        return;
    if (r->g == NULL) {
        r->g = d;
        return;
    }
    GM_ASSERT(r->gacc != NULL);
    m->ops->add((size_t)n * value_size(&m->g.values[v]), r->g, d, r->gacc);
    r->g = r->gacc;
}

static void backward_node(struct gm_model *m, int i, int n)
{
    const struct gm_ops *ops = m->ops;
    const struct gm_graph_node *nd = &m->g.nodes[i];
    const struct gm_graph_value *xi = in_of(m, nd), *yo = out_of(m, nd);
    struct node_rt *r = &m->nrt[i];
    const float *x = m->vrt[nd->in].y, *dy = m->vrt[nd->out].g;
    float *dx = r->need_dx ? r->dx : NULL;
    const size_t total = (size_t)n * value_size(yo);

    GM_ASSERT(dy != NULL);
    switch (nd->op) {
    case GM_GRAPH_OP_CONV2D: {
        struct gm_conv2d_shape s;
        int err = conv_shape(m, nd, n, &s);
        GM_ASSERT(err == 0);
        ops->conv2d_backward(&s, x, w_of(m, nd, m->params), dy, w_of(m, nd, m->grads),
                             b_of(m, nd, m->grads), dx, r->ws);
        break;
    }
    case GM_GRAPH_OP_MAXPOOL:
        if (plain_pool(nd)) {
            ops->maxpool_backward(n, xi->h, xi->w, xi->c, nd->k, dy, r->arg, dx);
        } else {
            struct gm_pool2d_shape s;
            int err = pool_shape(m, nd, n, &s);
            GM_ASSERT(err == 0);
            ops->maxpool2d_backward(&s, dy, r->arg, dx);
        }
        break;
    case GM_GRAPH_OP_RELU:
        ops->relu_backward(total, m->vrt[nd->out].y, dy, dx);
        break;
    case GM_GRAPH_OP_RELU6:
        ops->relu6_backward(total, m->vrt[nd->out].y, dy, dx);
        break;
    case GM_GRAPH_OP_ADAPTIVE:
        ops->adaptive_avgpool_backward(n, xi->h, xi->w, xi->c, yo->h, yo->w, dy, dx);
        break;
    case GM_GRAPH_OP_FLATTEN:
        dx = (float *)dy; /* passes through */
        break;
    case GM_GRAPH_OP_LINEAR:
        ops->linear_backward(n, xi->c, yo->c, x, w_of(m, nd, m->params), dy, w_of(m, nd, m->grads),
                             b_of(m, nd, m->grads), dx);
        break;
    case GM_GRAPH_OP_DROPOUT:
        ops->dropout_backward(total, r->mask, dy, dx);
        break;
    case GM_GRAPH_OP_BATCHNORM:
        if (nd->frozen) /* dx = dy * gamma / sqrt(running_var + eps) */
            ops->batchnorm_forward((size_t)n * yo->h * yo->w, yo->c, 0, BN_MOMENTUM, BN_EPS, dy,
                                   w_of(m, nd, m->params), m->zeros, m->zeros,
                                   m->stats + nd->stat + yo->c, r->save, r->save + yo->c, dx);
        else
            ops->batchnorm_backward((size_t)n * yo->h * yo->w, yo->c, x, w_of(m, nd, m->params),
                                    r->save, r->save + yo->c, dy, w_of(m, nd, m->grads),
                                    b_of(m, nd, m->grads), dx);
        break;
    case GM_GRAPH_OP_ADD: {
        /* both inputs get dy; the skip input through the shortcut's backward */
        const struct gm_graph_value *sv = &m->g.values[nd->in2];
        const float *dskip = dy;
        if (r->dskip != NULL) {
            ops->shortcut_backward(n, sv->h, sv->w, sv->c, yo->c, nd->stride, dy, r->dskip);
            dskip = r->dskip;
        }
        give_grad(m, nd->in, dy, n);
        give_grad(m, nd->in2, dskip, n);
        return;
    }
    case GM_GRAPH_OP_AVGPOOL:
        ops->avgpool_backward(n, xi->h * xi->w, xi->c, dy, dx);
        break;
    }
    if (r->need_dx)
        give_grad(m, nd->in, dx, n);
}

int gm_model_backward(struct gm_model *m, int n)
{
    if (n < 1 || n > m->max_batch)
        return -EINVAL;
    m->npend = m->pend_head = 0;
    for (int v = 0; v < m->g.nvalues; v++)
        m->vrt[v].g = NULL;
    m->vrt[m->g.nodes[m->g.nnodes - 1].out].g = m->dlogits;
    for (int i = m->g.nnodes - 1; i >= 0; i--) {
        const struct gm_graph_node *nd = &m->g.nodes[i];
        if (!m->nrt[i].backward)
            continue;
        backward_node(m, i, n);
        if (nd->w_tensor >= 0 && !nd->frozen && m->grad_hook != NULL) { /* gradients final */
            if (m->cu == NULL) {
                m->grad_hook(m->grad_hook_ctx, (size_t)nd->w_tensor, (size_t)nd->ntensors);
            } else {
                int err = download(m, (size_t)nd->w_tensor, (size_t)nd->ntensors);
                if (err < 0)
                    return err;
            }
        }
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
    const struct gm_param_info *ti = &m->g.tensors[t];
    const int *flat = m->g.tinfo[t].flat_from;

    if (ti->ndim == 4) { /* torch (OC, IC, KH, KW) -> internal (OC, KH, KW, IC) */
        const size_t ic = (size_t)ti->shape[1], kh = (size_t)ti->shape[2],
                     kw = (size_t)ti->shape[3];
        size_t x = j % kw, y = (j / kw) % kh, c = (j / (kw * kh)) % ic, o = j / (kw * kh * ic);
        return ((o * kh + y) * kw + x) * ic + c;
    }
    if (ti->ndim == 2 && flat[0] > 0) { /* inputs: torch (C,H,W) -> internal (H,W,C) */
        const size_t c = (size_t)flat[0], h = (size_t)flat[1], w = (size_t)flat[2],
                     in = (size_t)ti->shape[1];
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

int gm_model_bn_trainable(const struct gm_model *m)
{
    int n = 0;

    for (int i = 0; i < m->g.nnodes; i++)
        n += m->g.nodes[i].op == GM_GRAPH_OP_BATCHNORM && !m->g.nodes[i].frozen;
    return n;
}

size_t gm_model_num_buffers(const struct gm_model *m)
{
    return m->g.nbuffers;
}

const struct gm_param_info *gm_model_buffer(const struct gm_model *m, size_t i)
{
    GM_ASSERT(i < m->g.nbuffers);
    return &m->g.buffers[i];
}

size_t gm_model_buffer_len(const struct gm_model *m, size_t i)
{
    const struct gm_param_info *b = gm_model_buffer(m, i);

    return b->ndim == 0 ? 1 : b->numel;
}

int gm_model_export_buffer(const struct gm_model *m, size_t i, float *dst)
{
    const struct gm_param_info *b = gm_model_buffer(m, i);

    if (b->ndim == 0) { /* num_batches_tracked: one counter per batch norm */
        dst[0] = (float)m->tracked[m->g.buffer_bn[i]];
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
        m->tracked[m->g.buffer_bn[i]] = (int64_t)src[0];
        return 0;
    }
    return gm_device_copy(m->device, m->stats + b->offset, GM_DEVICE_CPU, src,
                          b->numel * sizeof(float));
}
