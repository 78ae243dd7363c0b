/*
 * train/nn/zoo.c - the model families as graph builders (see zoo.h).  Every
 * name below is the PyTorch module name its parameters carry in a state_dict.
 */
#include "train/nn/zoo.h"

#include <errno.h>
#include <stdarg.h>
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

/* ---- torchvision 0.14's families ------------------------------------------ */

/* A torchvision convolution: kaiming_normal_(mode="fan_out") weights, zero bias. */
static int tv_conv(struct gm_graph *g, int x, int oc, int k, int stride, int pad, int groups,
                   int bias, const char *fmt, ...) __attribute__((format(printf, 9, 10)));

static int tv_conv(struct gm_graph *g, int x, int oc, int k, int stride, int pad, int groups,
                   int bias, const char *fmt, ...)
{
    char name[GM_GRAPH_NAME_MAX + 16];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    x = gm_graph_conv(g, x, oc, k, stride, pad, groups, bias, name);
    gm_graph_set_init(g, x, GM_GRAPH_INIT_KAIMING, GM_GRAPH_INIT_ZERO);
    return x;
}

static int bn(struct gm_graph *g, int x, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bn(struct gm_graph *g, int x, const char *fmt, ...)
{
    char name[GM_GRAPH_NAME_MAX + 16];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    return gm_graph_batchnorm(g, x, name);
}

/* torchvision.models.resnet: a 7x7 stride-2 stem, 3x3 stride-2 max-pool, four stages of
 * basic (expansion 1) or bottleneck (1x1, 3x3 with the stride, 1x1 to 4x; expansion 4)
 * blocks, a 1x1 conv + BN downsample where the shape changes, global average pool, fc. */
static int build_resnet(struct gm_graph *g, const struct gm_model_spec *s, const int blocks[4],
                        int bottleneck)
{
    int x, inplanes = 64;

    g->tiled = 1;
    x = tv_conv(g, 0, 64, 7, 2, 3, 1, 0, "conv1");
    x = bn(g, x, "bn1");
    x = gm_graph_maxpool(g, x, 3, 2, 1, 1); /* ReLU + MaxPool2d(3, 2, 1) */
    for (int st = 0; st < 4; st++) {
        const int planes = 64 << st, out = bottleneck ? planes * 4 : planes;
        for (int b = 0; b < blocks[st]; b++) {
            const int stride = st > 0 && b == 0 ? 2 : 1, in = x;
            int sc = in;
            if (bottleneck) {
                x = tv_conv(g, x, planes, 1, 1, 0, 1, 0, "layer%d.%d.conv1", st + 1, b);
                x = gm_graph_relu(g, bn(g, x, "layer%d.%d.bn1", st + 1, b));
                x = tv_conv(g, x, planes, 3, stride, 1, 1, 0, "layer%d.%d.conv2", st + 1, b);
                x = gm_graph_relu(g, bn(g, x, "layer%d.%d.bn2", st + 1, b));
                x = tv_conv(g, x, out, 1, 1, 0, 1, 0, "layer%d.%d.conv3", st + 1, b);
                x = bn(g, x, "layer%d.%d.bn3", st + 1, b);
            } else {
                x = tv_conv(g, x, planes, 3, stride, 1, 1, 0, "layer%d.%d.conv1", st + 1, b);
                x = gm_graph_relu(g, bn(g, x, "layer%d.%d.bn1", st + 1, b));
                x = tv_conv(g, x, planes, 3, 1, 1, 1, 0, "layer%d.%d.conv2", st + 1, b);
                x = bn(g, x, "layer%d.%d.bn2", st + 1, b);
            }
            if (stride != 1 || inplanes != out) {
                sc = tv_conv(g, in, out, 1, stride, 0, 1, 0, "layer%d.%d.downsample.0", st + 1, b);
                sc = bn(g, sc, "layer%d.%d.downsample.1", st + 1, b);
            }
            x = gm_graph_relu(g, gm_graph_add(g, x, sc));
            inplanes = out;
        }
    }
    x = gm_graph_avgpool(g, x);              /* AdaptiveAvgPool2d((1, 1)) */
    gm_graph_linear(g, x, s->classes, "fc"); /* nn.Linear's default init */
    return g->err;
}

static int build_resnet18(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_resnet(g, s, (const int[]){2, 2, 2, 2}, 0);
}

static int build_resnet34(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_resnet(g, s, (const int[]){3, 4, 6, 3}, 0);
}

static int build_resnet50(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_resnet(g, s, (const int[]){3, 4, 6, 3}, 1);
}

/* torchvision.models.mobilenet_v2 (width 1.0): features.0 a 3x3 stride-2 conv + BN +
 * ReLU6, 17 inverted residuals (1x1 expand + BN + ReLU6 unless t = 1, 3x3 depthwise +
 * BN + ReLU6, 1x1 project + BN, the input added when the shape stays), features.18 a 1x1
 * conv to 1280 + BN + ReLU6, global average pool, classifier (Dropout, Linear). */
static int build_mobilenet_v2(struct gm_graph *g, const struct gm_model_spec *s)
{
    static const int cfg[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}; /* t c n s */
    int x, inp = 32, f = 1;

    g->tiled = 1;
    x = tv_conv(g, 0, 32, 3, 2, 1, 1, 0, "features.0.0");
    x = gm_graph_relu6(g, bn(g, x, "features.0.1"));
    for (size_t i = 0; i < GM_ARRAY_SIZE(cfg); i++) {
        for (int r = 0; r < cfg[i][2]; r++, f++) {
            const int t = cfg[i][0], c = cfg[i][1], stride = r == 0 ? cfg[i][3] : 1;
            const int hidden = inp * t, in = x;
            int j = 0;
            if (t != 1) {
                x = tv_conv(g, x, hidden, 1, 1, 0, 1, 0, "features.%d.conv.0.0", f);
                x = gm_graph_relu6(g, bn(g, x, "features.%d.conv.0.1", f));
                j = 1;
            }
            x = tv_conv(g, x, hidden, 3, stride, 1, hidden, 0, "features.%d.conv.%d.0", f, j);
            x = gm_graph_relu6(g, bn(g, x, "features.%d.conv.%d.1", f, j));
            x = tv_conv(g, x, c, 1, 1, 0, 1, 0, "features.%d.conv.%d", f, j + 1);
            x = bn(g, x, "features.%d.conv.%d", f, j + 2);
            if (stride == 1 && inp == c)
                x = gm_graph_add(g, x, in);
            inp = c;
        }
    }
    x = tv_conv(g, x, 1280, 1, 1, 0, 1, 0, "features.18.0");
    x = gm_graph_relu6(g, bn(g, x, "features.18.1"));
    x = gm_graph_avgpool(g, x); /* adaptive_avg_pool2d(x, (1, 1)) */
    if (s->dropout > 0)
        x = gm_graph_dropout(g, x, s->dropout); /* classifier.0 */
    x = gm_graph_linear(g, x, s->classes, "classifier.1");
    gm_graph_set_init(g, x, GM_GRAPH_INIT_NORMAL01, GM_GRAPH_INIT_ZERO);
    return g->err;
}

/* torchvision.models.vgg: 3x3 convs with bias (each followed by BN when bn), ReLU,
 * 2x2 max-pools (features.<i> counts every module), AdaptiveAvgPool2d((7, 7)), classifier
 * Linear 4096, ReLU, Dropout, Linear 4096, ReLU, Dropout, Linear classes (0, 3, 6). */
static int build_vgg(struct gm_graph *g, const struct gm_model_spec *s, const int *cfg, int n,
                     int with_bn)
{
    int x = 0, seq = 0;

    g->tiled = 1;
    if (s->in_h < 32 || s->in_w < 32) {
        gm_graph_fail(g, -EINVAL,
                      "%s takes images of at least 32x32 (five 2x2 max-pools), not %dx%d", s->name,
                      s->in_h, s->in_w);
        return g->err;
    }
    for (int i = 0; i < n; i++) {
        const int pool_next = i + 1 < n && cfg[i + 1] == 0;
        if (cfg[i] == 0)
            continue;
        x = tv_conv(g, x, cfg[i], 3, 1, 1, 1, 1, "features.%d", seq++);
        if (with_bn)
            x = bn(g, x, "features.%d", seq++);
        seq++; /* ReLU */
        if (pool_next) {
            x = gm_graph_maxpool(g, x, 2, 2, 0, 1); /* ReLU + MaxPool2d(2, 2) */
            seq++;
        } else {
            x = gm_graph_relu(g, x);
        }
    }
    if (g->err == 0 && (g->values[x].h != 7 || g->values[x].w != 7)) /* else the identity */
        x = gm_graph_adaptive_avgpool(g, x, 7, 7);
    x = gm_graph_flatten(g, x);
    for (int i = 0; i < 3; i++) {
        char name[24];
        snprintf(name, sizeof(name), "classifier.%d", 3 * i);
        x = gm_graph_linear(g, x, i < 2 ? 4096 : s->classes, name);
        gm_graph_set_init(g, x, GM_GRAPH_INIT_NORMAL01, GM_GRAPH_INIT_ZERO);
        if (i < 2) {
            x = gm_graph_relu(g, x);
            if (s->dropout > 0)
                x = gm_graph_dropout(g, x, s->dropout);
        }
    }
    return g->err;
}

static const int vgg_a[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
static const int vgg_d[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                            0,  512, 512, 512, 0,   512, 512, 512, 0};

static int build_vgg11_bn(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_vgg(g, s, vgg_a, (int)GM_ARRAY_SIZE(vgg_a), 1);
}

static int build_vgg16(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_vgg(g, s, vgg_d, (int)GM_ARRAY_SIZE(vgg_d), 0);
}

static int build_vgg16_bn(struct gm_graph *g, const struct gm_model_spec *s)
{
    return build_vgg(g, s, vgg_d, (int)GM_ARRAY_SIZE(vgg_d), 1);
}

static const struct family {
    const char *name;
    int (*build)(struct gm_graph *g, const struct gm_model_spec *s);
} families[] = {
    {"mlp", build_mlp},           {"lenet5", build_lenet5},
    {"vgg7", build_vgg7},         {"resnet20", build_resnet20},
    {"resnet18", build_resnet18}, {"resnet34", build_resnet34},
    {"resnet50", build_resnet50}, {"mobilenet_v2", build_mobilenet_v2},
    {"vgg11_bn", build_vgg11_bn}, {"vgg16", build_vgg16},
    {"vgg16_bn", build_vgg16_bn},
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
