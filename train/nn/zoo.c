/*
 * train/nn/zoo.c - the model families as graph builders (see zoo.h).  Every
 * name below is the PyTorch module name its parameters carry in a state_dict.
 */
#include "train/nn/zoo.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"

/* lenet5: conv 5x5x6 pad 2, relu + pool 2, conv 5x5x16, relu + pool 2, fc 120, fc 84, fc k */
static int build_lenet5(struct gm_graph *g, const struct gm_model_spec *s)
{
    int x = 0;

    x = gm_graph_conv(g, x, 6, 5, 1, 2, 1, 1, NULL);
    x = gm_graph_maxpool(g, x, 2, 2, 0, 1); /* relu + pool */
    x = gm_graph_conv(g, x, 16, 5, 1, 0, 1, 1, NULL);
    x = gm_graph_maxpool(g, x, 2, 2, 0, 1);
    x = gm_graph_flatten(g, x);
    x = gm_graph_linear(g, x, 120, NULL);
    x = gm_graph_relu(g, x);
    if (s->dropout > 0)
        x = gm_graph_dropout(g, x, s->dropout);
    x = gm_graph_linear(g, x, 84, NULL);
    x = gm_graph_relu(g, x);
    if (s->dropout > 0)
        x = gm_graph_dropout(g, x, s->dropout);
    gm_graph_linear(g, x, s->classes, NULL);
    return g->err;
}

static int build_mlp(struct gm_graph *g, const struct gm_model_spec *s)
{
    int x = gm_graph_flatten(g, 0);

    for (int i = 0; i < s->nhidden; i++) {
        if (s->hidden[i] < 1) {
            gm_graph_fail(g, -EINVAL, "mlp: hidden size %d", s->hidden[i]);
            return g->err;
        }
        x = gm_graph_linear(g, x, s->hidden[i], NULL);
        x = gm_graph_relu(g, x);
        if (s->dropout > 0)
            x = gm_graph_dropout(g, x, s->dropout);
    }
    gm_graph_linear(g, x, s->classes, NULL);
    return g->err;
}

/* vgg7: torchvision's VGG naming: features.<i> (i counts every module of the
 * Sequential, ReLU and MaxPool2d included), classifier. */
static int build_vgg7(struct gm_graph *g, const struct gm_model_spec *s)
{
    static const int cfg[] = {32, 32, 0, 64, 64, 0, 128, 128, 0}; /* 0: max-pool */
    char name[GM_GRAPH_NAME_MAX];
    int seq = 0, x = 0;

    for (size_t i = 0; i < GM_ARRAY_SIZE(cfg); i++) {
        const int pool_next = i + 1 < GM_ARRAY_SIZE(cfg) && cfg[i + 1] == 0;
        if (cfg[i] == 0)
            continue;
        snprintf(name, sizeof(name), "features.%d", seq++);
        x = gm_graph_conv(g, x, cfg[i], 3, 1, 1, 1, 0, name);
        snprintf(name, sizeof(name), "features.%d", seq++);
        x = gm_graph_batchnorm(g, x, name);
        seq++; /* ReLU */
        if (pool_next) {
            x = gm_graph_maxpool(g, x, 2, 2, 0, 1); /* ReLU + MaxPool2d(2) */
            seq++;
        } else {
            x = gm_graph_relu(g, x);
        }
    }
    x = gm_graph_flatten(g, x);
    gm_graph_linear(g, x, s->classes, "classifier");
    return g->err;
}

/* resnet20: He et al.'s CIFAR ResNet (3 stages of 3 basic blocks, 16/32/64
 * channels), option A shortcuts, named as the common PyTorch definition
 * (conv1, bn1, layer<s>.<i>.conv1/bn1/conv2/bn2, linear). */
static int build_resnet20(struct gm_graph *g, const struct gm_model_spec *s)
{
    char name[GM_GRAPH_NAME_MAX];
    int x;

    x = gm_graph_conv(g, 0, 16, 3, 1, 1, 1, 0, "conv1");
    x = gm_graph_batchnorm(g, x, "bn1");
    x = gm_graph_relu(g, x);
    for (int stage = 0; stage < 3; stage++) {
        for (int i = 0; i < 3; i++) {
            const int in = x; /* the block's input: the last ReLU */
            const int stride = stage > 0 && i == 0 ? 2 : 1;
            snprintf(name, sizeof(name), "layer%d.%d.conv1", stage + 1, i);
            x = gm_graph_conv(g, x, 16 << stage, 3, stride, 1, 1, 0, name);
            snprintf(name, sizeof(name), "layer%d.%d.bn1", stage + 1, i);
            x = gm_graph_batchnorm(g, x, name);
            x = gm_graph_relu(g, x);
            snprintf(name, sizeof(name), "layer%d.%d.conv2", stage + 1, i);
            x = gm_graph_conv(g, x, 16 << stage, 3, 1, 1, 1, 0, name);
            snprintf(name, sizeof(name), "layer%d.%d.bn2", stage + 1, i);
            x = gm_graph_batchnorm(g, x, name);
            x = gm_graph_add(g, x, in);
            x = gm_graph_relu(g, x);
        }
    }
    x = gm_graph_avgpool(g, x);
    gm_graph_linear(g, x, s->classes, "linear");
    return g->err;
}

static const struct family {
    const char *name;
    int (*build)(struct gm_graph *g, const struct gm_model_spec *s);
} families[] = {
    {"mlp", build_mlp},
    {"lenet5", build_lenet5},
    {"vgg7", build_vgg7},
    {"resnet20", build_resnet20},
};

static const struct family *find(const char *name)
{
    for (size_t i = 0; name != NULL && i < GM_ARRAY_SIZE(families); i++)
        if (strcmp(name, families[i].name) == 0)
            return &families[i];
    return NULL;
}

int gm_zoo_known(const char *name)
{
    return find(name) != NULL;
}

int gm_zoo_build(struct gm_graph *g, const struct gm_model_spec *spec)
{
    const struct family *f = find(spec->name);

    if (f == NULL) {
        gm_graph_fail(g, -EINVAL, "unknown model '%s'", spec->name != NULL ? spec->name : "");
        return g->err;
    }
    return f->build(g, spec);
}
