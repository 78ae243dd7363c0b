/*
 * train/nn/graph.h - a model's structure: a small graph of ops over named
 * activation tensors ("values"), and the parameter tensors and buffers the
 * ops own.  No memory for activations and no passes here: train/nn/model.c
 * builds a graph with a family's builder (train/nn/zoo.h), then allocates
 * per node and per value and runs the nodes forward in order and backward in
 * reverse.
 *
 * Invariants:
 *  - Nodes are appended in execution order and every node reads only values
 *    made before it (value 0 is the input, NHWC), so the node order is a
 *    topological order and the last node's output is the logits.
 *  - A node makes exactly one value; a value may be read by several nodes
 *    (a residual's skip), whose gradients the model sums.
 *  - Parameter tensors are appended as their node is built, weight then bias,
 *    with offsets into one flat buffer in that order: the four original models
 *    keep the layout they always had.  gm_graph_reorder puts the frozen tensors
 *    last afterwards.
 *  - Every builder call returns the new value's id, or -1 once any call failed
 *    (g->err and g->msg hold the first failure: a shape that does not fit, with
 *    the module's name); calls after a failure do nothing, so a builder chains
 *    calls and checks once at the end.
 *
 * Used by the model (trainer thread) and the builders; no global state.
 */
#ifndef GM_TRAIN_NN_GRAPH_H
#define GM_TRAIN_NN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/nn/model.h"

#define GM_GRAPH_NAME_MAX 48 /* == sizeof(struct gm_param_info.name) */

enum gm_graph_op {
    GM_GRAPH_OP_CONV2D,
    GM_GRAPH_OP_MAXPOOL, /* window k, stride, -inf padding; optional fused ReLU */
    GM_GRAPH_OP_RELU,
    GM_GRAPH_OP_RELU6,
    GM_GRAPH_OP_FLATTEN, /* a view: NHWC order is the flattened order */
    GM_GRAPH_OP_LINEAR,
    GM_GRAPH_OP_DROPOUT,
    GM_GRAPH_OP_BATCHNORM,
    GM_GRAPH_OP_ADD,      /* y = in + shortcut(in2): option A when the shapes differ */
    GM_GRAPH_OP_AVGPOOL,  /* global average pool; the map becomes a vector */
    GM_GRAPH_OP_ADAPTIVE, /* adaptive average pool to (out_h, out_w) */
};

/* How gm_model_init_params fills a tensor. */
enum gm_graph_init {
    GM_GRAPH_INIT_FAN_IN,   /* U(+-1/sqrt(fan)): PyTorch's default for Linear and Conv2d */
    GM_GRAPH_INIT_ONE,      /* batch norm weight */
    GM_GRAPH_INIT_ZERO,     /* batch norm bias; torchvision's conv and linear biases */
    GM_GRAPH_INIT_KAIMING,  /* N(0, 2/fan): torchvision's kaiming_normal_(mode="fan_out") */
    GM_GRAPH_INIT_NORMAL01, /* N(0, 0.01^2): torchvision's VGG / MobileNetV2 linear weights */
};

struct gm_graph_value {
    char name[GM_GRAPH_NAME_MAX]; /* the module that made it ("layer1.0.relu"), or "input" */
    int c, h, w;                  /* per sample */
    int spatial;                  /* 1: a (H, W, C) map; 0: a vector after flatten / pool */
    int producer;                 /* node index, -1 for the input */
    int readers;                  /* nodes that read it */
};

struct gm_graph_node {
    enum gm_graph_op op;
    char name[GM_GRAPH_NAME_MAX]; /* the PyTorch module ("features.0"); "" for unnamed */
    int in, in2;                  /* value ids; in2 = -1 unless ADD */
    int out;
    int k, stride, pad, groups; /* conv and pools */
    int relu;                   /* maxpool: fused ReLU before the pool */
    int tiled;                  /* conv: the bounded-workspace path (g->tiled when built) */
    int bias;                   /* conv: has a bias tensor (after the weight) */
    float p;                    /* dropout probability */
    int w_tensor;               /* index of the first parameter tensor, -1 when none */
    int ntensors;               /* parameter tensors (adjacent from w_tensor) */
    int bn;                     /* batch norm: index among the graph's batch norms */
    size_t stat;                /* batch norm: running_mean at stat, running_var at stat + C */
    int frozen;                 /* its parameters do not train (gm_graph_reorder) */
};

/* Per parameter tensor, beside its gm_param_info. */
struct gm_graph_tensor {
    enum gm_graph_init init;
    int fan;          /* fan_in or fan_out, as init needs */
    int flat_from[3]; /* a linear weight after a spatial flatten: c, h, w of the map, else 0 */
    int built;        /* position in build order (init draws in this order) */
};

struct gm_graph {
    struct gm_graph_node *nodes; /* owned, cap GM_GRAPH_MAX_NODES */
    int nnodes;
    struct gm_graph_value *values; /* owned */
    int nvalues;
    struct gm_param_info *tensors; /* owned: PyTorch names and shapes, flat offsets */
    struct gm_graph_tensor *tinfo; /* owned, beside tensors */
    size_t ntensors, nparams;
    size_t ntrainable_tensors, ntrainable; /* the first ones (gm_graph_reorder) */
    struct gm_param_info *buffers;         /* owned: batch norm statistics, offsets into stats */
    int *buffer_bn;                        /* owned, beside buffers: the batch norm's index */
    size_t nbuffers, nstats;
    int nbn;
    int flat_c, flat_h, flat_w; /* the last flatten's map, for the next linear */
    int nconv, nfc;             /* for the default names conv<n>, fc<n> */
    int tiled;                  /* new convolutions take the tiled path (kernels/conv2d.h) */
    int err;                    /* first failure (negative), 0 */
    char msg[192];              /* its one-line reason */
};

#define GM_GRAPH_MAX_NODES 512
#define GM_GRAPH_MAX_TENSORS 512
#define GM_GRAPH_MAX_BUFFERS 512

/* Empties g and adds the input value (c, h, w); 0 or -ENOMEM. */
int gm_graph_init(struct gm_graph *g, int c, int h, int w) GM_MUST_CHECK;
void gm_graph_free(struct gm_graph *g);
/* Records the first failure; later calls keep the first. */
void gm_graph_fail(struct gm_graph *g, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Builders: each returns the output value, or -1 (see above).  name: the
 * PyTorch module name of the node's parameters; NULL picks conv<n> / fc<n>. */
int gm_graph_conv(struct gm_graph *g, int x, int oc, int k, int stride, int pad, int groups,
                  int bias, const char *name);
/* init for a conv's / linear's tensors: weight and bias */
void gm_graph_set_init(struct gm_graph *g, int x, enum gm_graph_init w, enum gm_graph_init b);
int gm_graph_batchnorm(struct gm_graph *g, int x, const char *name);
int gm_graph_relu(struct gm_graph *g, int x);
int gm_graph_relu6(struct gm_graph *g, int x);
/* relu: a ReLU fused before the pool (same values and gradients, one pass less) */
int gm_graph_maxpool(struct gm_graph *g, int x, int k, int stride, int pad, int relu);
int gm_graph_add(struct gm_graph *g, int x, int skip);
int gm_graph_avgpool(struct gm_graph *g, int x);
int gm_graph_adaptive_avgpool(struct gm_graph *g, int x, int oh, int ow);
int gm_graph_flatten(struct gm_graph *g, int x);
int gm_graph_linear(struct gm_graph *g, int x, int out, const char *name);
int gm_graph_dropout(struct gm_graph *g, int x, float p);

/* Marks the nodes whose module matches a prefix of freeze (space-separated: a
 * module name or a dotted prefix of one, "layer1" or "features.0"; or
 * "backbone": every module but the head, the module of the last linear) as
 * frozen, and lays out their tensors after the trainable ones.  A prefix that
 * matches no module is GM_ERR_CONFIG with g->msg naming it.  NULL or "": none. */
int gm_graph_freeze(struct gm_graph *g, const char *freeze) GM_MUST_CHECK;

#endif
