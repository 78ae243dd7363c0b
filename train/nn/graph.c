/*
 * train/nn/graph.c - building a model graph: shapes, PyTorch names, parameter
 * tensors and batch norm buffers, and freezing.  See graph.h.
 */
#include "train/nn/graph.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

int gm_graph_init(struct gm_graph *g, int c, int h, int w)
{
    memset(g, 0, sizeof(*g));
    g->nodes = calloc(GM_GRAPH_MAX_NODES, sizeof(*g->nodes));
    g->values = calloc(GM_GRAPH_MAX_NODES + 1, sizeof(*g->values));
    g->tensors = calloc(GM_GRAPH_MAX_TENSORS, sizeof(*g->tensors));
    g->tinfo = calloc(GM_GRAPH_MAX_TENSORS, sizeof(*g->tinfo));
    g->buffers = calloc(GM_GRAPH_MAX_BUFFERS, sizeof(*g->buffers));
    g->buffer_bn = calloc(GM_GRAPH_MAX_BUFFERS, sizeof(*g->buffer_bn));
    if (g->nodes == NULL || g->values == NULL || g->tensors == NULL || g->tinfo == NULL ||
        g->buffers == NULL || g->buffer_bn == NULL) {
        gm_graph_free(g);
        return -ENOMEM;
    }
    g->nvalues = 1;
    snprintf(g->values[0].name, sizeof(g->values[0].name), "input");
    g->values[0].c = c;
    g->values[0].h = h;
    g->values[0].w = w;
    g->values[0].spatial = 1;
    g->values[0].producer = -1;
    return 0;
}

void gm_graph_free(struct gm_graph *g)
{
    if (g == NULL)
        return;
    free(g->nodes);
    free(g->values);
    free(g->tensors);
    free(g->tinfo);
    free(g->buffers);
    free(g->buffer_bn);
    memset(g, 0, sizeof(*g));
}

void gm_graph_fail(struct gm_graph *g, int err, const char *fmt, ...)
{
    va_list ap;

    if (g->err != 0)
        return;
    g->err = err;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof(g->msg), fmt, ap);
    va_end(ap);
}

/* dst = "module.suffix"; 0, or -1 (recorded) when it does not fit a gm_param_info name. */
static int tensor_name(struct gm_graph *g, char *dst, const char *module, const char *suffix)
{
    char full[2 * GM_GRAPH_NAME_MAX + 32];

    snprintf(full, sizeof(full), "%s.%s", module, suffix);
    if (strlen(full) >= GM_GRAPH_NAME_MAX) {
        gm_graph_fail(g, -ENAMETOOLONG, "tensor name %s is longer than %d bytes", full,
                      GM_GRAPH_NAME_MAX - 1);
        return -1;
    }
    memcpy(dst, full, strlen(full) + 1);
    return 0;
}

/* A new node reading x (and x2 >= 0), making a value of x's shape; NULL after a failure. */
static struct gm_graph_node *push(struct gm_graph *g, enum gm_graph_op op, int x, int x2,
                                  const char *name)
{
    struct gm_graph_node *n;
    struct gm_graph_value *v;

    if (g->err != 0 || x < 0 || x >= g->nvalues || x2 >= g->nvalues)
        return NULL;
    if (g->nnodes >= GM_GRAPH_MAX_NODES) {
        gm_graph_fail(g, -E2BIG, "more than %d ops", GM_GRAPH_MAX_NODES);
        return NULL;
    }
    n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof(*n));
    n->op = op;
    snprintf(n->name, sizeof(n->name), "%s", name != NULL ? name : "");
    n->in = x;
    n->in2 = x2;
    n->out = g->nvalues;
    n->w_tensor = -1;
    n->stride = 1;
    n->groups = 1;
    n->bn = -1;
    g->values[x].readers++;
    if (x2 >= 0)
        g->values[x2].readers++;
    v = &g->values[g->nvalues++];
    *v = g->values[x];
    v->readers = 0;
    v->producer = g->nnodes;
    snprintf(v->name, sizeof(v->name), "%s", name != NULL && name[0] ? name : "op");
    g->nnodes++;
    return n;
}

static struct gm_graph_value *out_of(struct gm_graph *g, const struct gm_graph_node *n)
{
    return &g->values[n->out];
}

static int add_tensor(struct gm_graph *g, const char *module, const char *suffix, int ndim,
                      const int64_t *shape, int rows, int cols, enum gm_graph_init init, int fan)
{
    struct gm_param_info *t;
    struct gm_graph_tensor *ti;
    size_t n = 1;

    if (g->ntensors >= GM_GRAPH_MAX_TENSORS) {
        gm_graph_fail(g, -E2BIG, "more than %d parameter tensors", GM_GRAPH_MAX_TENSORS);
        return -1;
    }
    t = &g->tensors[g->ntensors];
    ti = &g->tinfo[g->ntensors];
    memset(t, 0, sizeof(*t));
    memset(ti, 0, sizeof(*ti));
    if (tensor_name(g, t->name, module, suffix) < 0)
        return -1;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->numel = n;
    t->offset = g->nparams;
    t->rows = rows;
    t->cols = cols;
    ti->init = init;
    ti->fan = fan;
    ti->built = (int)g->ntensors;
    g->nparams += n;
    g->ntrainable += n;
    g->ntrainable_tensors++;
    return (int)g->ntensors++;
}

static void add_buffer(struct gm_graph *g, const char *module, const char *suffix, int c)
{
    struct gm_param_info *t;

    if (g->nbuffers >= GM_GRAPH_MAX_BUFFERS) {
        gm_graph_fail(g, -E2BIG, "more than %d buffers", GM_GRAPH_MAX_BUFFERS);
        return;
    }
    t = &g->buffers[g->nbuffers];
    memset(t, 0, sizeof(*t));
    if (tensor_name(g, t->name, module, suffix) < 0)
        return;
    g->nbuffers++;
    t->ndim = c > 0 ? 1 : 0; /* the counter is a scalar, as in PyTorch */
    t->shape[0] = c;
    t->numel = c > 0 ? (size_t)c : 0;
    t->offset = g->nstats;
    g->buffer_bn[g->nbuffers - 1] = g->nbn;
    t->rows = c;
    t->cols = 1;
    g->nstats += t->numel;
}

/* Output size of a window k, stride s, padding p over n (PyTorch's floor mode). */
static int window_out(int n, int k, int s, int p)
{
    return (n + 2 * p - k) / s + 1;
}

int gm_graph_conv(struct gm_graph *g, int x, int oc, int k, int stride, int pad, int groups,
                  int bias, const char *name)
{
    char mod[GM_GRAPH_NAME_MAX];
    struct gm_graph_node *n;
    struct gm_graph_value *v;
    int c, fan;

    if (name == NULL && g->err == 0) {
        snprintf(mod, sizeof(mod), "conv%d", g->nconv + 1);
        name = mod;
    }
    n = push(g, GM_GRAPH_OP_CONV2D, x, -1, name);
    if (n == NULL)
        return -1;
    g->nconv++;
    v = out_of(g, n);
    c = v->c;
    if (!v->spatial || k < 1 || stride < 1 || pad < 0 || groups < 1 || c % groups != 0 ||
        oc % groups != 0) {
        gm_graph_fail(g, -EINVAL,
                      "%s: a %dx%d convolution of %d groups does not apply to %d "
                      "channels",
                      name, k, k, groups, c);
        return -1;
    }
    if (v->h + 2 * pad < k || v->w + 2 * pad < k) {
        gm_graph_fail(g, -EINVAL, "%s: the %dx%d map is smaller than its %dx%d kernel", name, v->h,
                      v->w, k, k);
        return -1;
    }
    n->k = k;
    n->stride = stride;
    n->pad = pad;
    n->groups = groups;
    n->tiled = g->tiled || groups > 1;
    n->bias = bias;
    v->c = oc;
    v->h = window_out(v->h, k, stride, pad);
    v->w = window_out(v->w, k, stride, pad);
    fan = k * k * (c / groups);
    n->w_tensor = add_tensor(g, name, "weight", 4, (int64_t[]){oc, c / groups, k, k}, oc, fan,
                             GM_GRAPH_INIT_FAN_IN, fan);
    n->ntensors = 1;
    if (bias) {
        add_tensor(g, name, "bias", 1, (int64_t[]){oc}, oc, 1, GM_GRAPH_INIT_FAN_IN, fan);
        n->ntensors = 2;
    }
    return g->err == 0 ? n->out : -1;
}

void gm_graph_set_init(struct gm_graph *g, int x, enum gm_graph_init w, enum gm_graph_init b)
{
    const struct gm_graph_node *n;

    if (g->err != 0 || x < 1)
        return;
    n = &g->nodes[g->values[x].producer];
    GM_ASSERT(n->w_tensor >= 0);
    g->tinfo[n->w_tensor].init = w;
    if (w == GM_GRAPH_INIT_KAIMING) /* fan_out: output units times the kernel's window */
        g->tinfo[n->w_tensor].fan = (int)(g->tensors[n->w_tensor].shape[0] *
                                          (n->op == GM_GRAPH_OP_CONV2D ? n->k * n->k : 1));
    if (n->ntensors > 1)
        g->tinfo[n->w_tensor + 1].init = b;
}

int gm_graph_batchnorm(struct gm_graph *g, int x, const char *name)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_BATCHNORM, x, -1, name);
    int c;

    if (n == NULL)
        return -1;
    c = out_of(g, n)->c;
    n->w_tensor = add_tensor(g, name, "weight", 1, (int64_t[]){c}, c, 1, GM_GRAPH_INIT_ONE, 1);
    add_tensor(g, name, "bias", 1, (int64_t[]){c}, c, 1, GM_GRAPH_INIT_ZERO, 1);
    n->ntensors = 2;
    n->stat = g->nstats;
    n->bn = g->nbn;
    add_buffer(g, name, "running_mean", c);
    add_buffer(g, name, "running_var", c);
    add_buffer(g, name, "num_batches_tracked", 0);
    g->nbn++;
    return g->err == 0 ? n->out : -1;
}

int gm_graph_relu(struct gm_graph *g, int x)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_RELU, x, -1, NULL);
    return n != NULL ? n->out : -1;
}

int gm_graph_relu6(struct gm_graph *g, int x)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_RELU6, x, -1, NULL);
    return n != NULL ? n->out : -1;
}

int gm_graph_dropout(struct gm_graph *g, int x, float p)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_DROPOUT, x, -1, NULL);

    if (n == NULL)
        return -1;
    n->p = p;
    return n->out;
}

int gm_graph_maxpool(struct gm_graph *g, int x, int k, int stride, int pad, int relu)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_MAXPOOL, x, -1, NULL);
    struct gm_graph_value *v;

    if (n == NULL)
        return -1;
    v = out_of(g, n);
    if (!v->spatial || k < 1 || stride < 1 || pad < 0 || 2 * pad > k || v->h + 2 * pad < k ||
        v->w + 2 * pad < k) {
        gm_graph_fail(g, -EINVAL,
                      "a %dx%d max-pool (stride %d, padding %d) does not fit the "
                      "%dx%d map after %s",
                      k, k, stride, pad, v->h, v->w, g->values[x].name);
        return -1;
    }
    n->k = k;
    n->stride = stride;
    n->pad = pad;
    n->relu = relu;
    v->h = window_out(v->h, k, stride, pad);
    v->w = window_out(v->w, k, stride, pad);
    return n->out;
}

/* The residual sum x + skip; skip goes through ResNet's option-A shortcut
 * (subsample, zero-pad the channels) when the shapes differ. */
int gm_graph_add(struct gm_graph *g, int x, int skip)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_ADD, x, skip, NULL);
    const struct gm_graph_value *s;
    struct gm_graph_value *v;

    if (n == NULL)
        return -1;
    v = out_of(g, n);
    s = &g->values[skip];
    n->stride = v->h > 0 ? s->h / v->h : 0;
    if (n->stride < 1 || (s->h + n->stride - 1) / n->stride != v->h ||
        (s->w + n->stride - 1) / n->stride != v->w || v->c < s->c || (v->c - s->c) % 2 != 0 ||
        v->spatial != s->spatial) {
        gm_graph_fail(g, -EINVAL, "the residual sum after %s: %dx%dx%d and %dx%dx%d do not add",
                      g->values[x].name, v->h, v->w, v->c, s->h, s->w, s->c);
        return -1;
    }
    return n->out;
}

int gm_graph_avgpool(struct gm_graph *g, int x)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_AVGPOOL, x, -1, NULL);
    struct gm_graph_value *v;

    if (n == NULL)
        return -1;
    v = out_of(g, n);
    v->h = v->w = 1;
    v->spatial = 0;
    return n->out;
}

int gm_graph_adaptive_avgpool(struct gm_graph *g, int x, int oh, int ow)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_ADAPTIVE, x, -1, NULL);
    struct gm_graph_value *v;

    if (n == NULL)
        return -1;
    v = out_of(g, n);
    if (!v->spatial || oh < 1 || ow < 1) {
        gm_graph_fail(g, -EINVAL, "an adaptive average pool needs a map");
        return -1;
    }
    v->h = oh;
    v->w = ow;
    return n->out;
}

int gm_graph_flatten(struct gm_graph *g, int x)
{
    struct gm_graph_node *n = push(g, GM_GRAPH_OP_FLATTEN, x, -1, NULL);
    struct gm_graph_value *v;

    if (n == NULL)
        return -1;
    v = out_of(g, n);
    g->flat_c = v->c;
    g->flat_h = v->h;
    g->flat_w = v->w;
    v->c = v->c * v->h * v->w;
    v->h = v->w = 1;
    v->spatial = 0;
    return n->out;
}

int gm_graph_linear(struct gm_graph *g, int x, int out, const char *name)
{
    char mod[GM_GRAPH_NAME_MAX];
    struct gm_graph_node *n;
    struct gm_graph_value *v;
    int in;

    if (name == NULL && g->err == 0) {
        snprintf(mod, sizeof(mod), "fc%d", g->nfc + 1);
        name = mod;
    }
    n = push(g, GM_GRAPH_OP_LINEAR, x, -1, name);
    if (n == NULL)
        return -1;
    g->nfc++;
    v = out_of(g, n);
    if (v->spatial) {
        gm_graph_fail(g, -EINVAL, "%s: a linear layer needs a vector, not a map", name);
        return -1;
    }
    in = v->c;
    n->bias = 1;
    n->w_tensor =
        add_tensor(g, name, "weight", 2, (int64_t[]){out, in}, out, in, GM_GRAPH_INIT_FAN_IN, in);
    add_tensor(g, name, "bias", 1, (int64_t[]){out}, out, 1, GM_GRAPH_INIT_FAN_IN, in);
    n->ntensors = 2;
    if (g->err != 0)
        return -1;
    if (g->flat_c > 0) { /* the first linear after a flatten: remember the map for export */
        g->tinfo[n->w_tensor].flat_from[0] = g->flat_c;
        g->tinfo[n->w_tensor].flat_from[1] = g->flat_h;
        g->tinfo[n->w_tensor].flat_from[2] = g->flat_w;
        g->flat_c = 0;
    }
    v->c = out;
    return n->out;
}

/* 1 when module is the prefix p or lies under it ("layer1" covers "layer1.0.conv1"; so does
 * "layer1."; "layer1" does not cover "layer10"). */
static int covers(const char *p, size_t plen, const char *module)
{
    if (plen == 0 || strncmp(module, p, plen) != 0)
        return 0;
    return module[plen] == '\0' || module[plen] == '.' || p[plen - 1] == '.';
}

/* The node of the head: the last linear layer. */
static int head_node(const struct gm_graph *g)
{
    for (int i = g->nnodes - 1; i >= 0; i--)
        if (g->nodes[i].op == GM_GRAPH_OP_LINEAR)
            return i;
    return -1;
}

/* Puts the frozen nodes' tensors after the trainable ones, each group in build order. */
static void reorder(struct gm_graph *g)
{
    struct gm_param_info *t = calloc(g->ntensors + 1, sizeof(*t));
    struct gm_graph_tensor *ti = calloc(g->ntensors + 1, sizeof(*ti));
    int *to = calloc(g->ntensors + 1, sizeof(*to));
    size_t k = 0, off = 0;

    GM_ASSERT(t != NULL && ti != NULL && to != NULL); /* a few KiB */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            g->ntrainable_tensors = k;
            g->ntrainable = off;
        }
        for (int i = 0; i < g->nnodes; i++) {
            const struct gm_graph_node *n = &g->nodes[i];
            if (n->w_tensor < 0 || n->frozen != pass)
                continue;
            for (int j = 0; j < n->ntensors; j++) {
                const size_t src = (size_t)n->w_tensor + (size_t)j;
                to[src] = (int)k;
                t[k] = g->tensors[src];
                ti[k] = g->tinfo[src];
                t[k].offset = off;
                off += t[k].numel;
                k++;
            }
        }
    }
    GM_ASSERT(k == g->ntensors && off == g->nparams);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].w_tensor >= 0)
            g->nodes[i].w_tensor = to[g->nodes[i].w_tensor];
    memcpy(g->tensors, t, g->ntensors * sizeof(*t));
    memcpy(g->tinfo, ti, g->ntensors * sizeof(*ti));
    free(t);
    free(ti);
    free(to);
}

int gm_graph_freeze(struct gm_graph *g, const char *freeze)
{
    const char *p = freeze;
    int any = 0, head = head_node(g);

    while (p != NULL && *p != '\0') {
        size_t len;
        int hits = 0;
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        len = strcspn(p, " \t,");
        if (len == 0)
            break;
        for (int i = 0; i < g->nnodes; i++) {
            struct gm_graph_node *n = &g->nodes[i];
            if (n->w_tensor < 0)
                continue;
            if (len == 8 && strncmp(p, "backbone", 8) == 0 ? i != head : covers(p, len, n->name)) {
                n->frozen = 1;
                hits++;
            }
        }
        if (hits == 0) {
            gm_graph_fail(g, GM_ERR_CONFIG,
                          "[model] freeze: '%.*s' matches no module (a module name such as "
                          "'%s', or a dotted prefix of one, or 'backbone')",
                          (int)len, p, head >= 0 ? g->nodes[head].name : "fc");
            return g->err;
        }
        any = 1;
        p += len;
    }
    if (!any)
        return 0;
    reorder(g);
    if (g->ntrainable == 0) {
        gm_graph_fail(g, GM_ERR_CONFIG, "[model] freeze = %s leaves no parameter to train", freeze);
        return g->err;
    }
    return 0;
}
