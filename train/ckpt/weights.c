/*
 * train/ckpt/weights.c - [model] init: torchvision-named weights into a model.
 * See weights.h for the contract.
 */
#include "train/ckpt/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/ckpt/safetensors.h"
#include "train/nn/graph.h"

#define LIST_SHOWN 4 /* names shown per list in the error line */

/* A list of names for the error line: the first LIST_SHOWN, then a count. */
struct names {
    char text[512];
    size_t len;
    int n;
};

static void names_add(struct names *l, const char *name, const char *extra)
{
    int w;

    if (l->n++ >= LIST_SHOWN || l->len >= sizeof(l->text))
        return;
    w = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s%s%s", l->n > 1 ? ", " : "", name,
                 extra);
    if (w > 0)
        l->len += (size_t)w;
    if (l->len >= sizeof(l->text))
        l->len = sizeof(l->text) - 1;
}

/* "[a, b, c]" of a shape */
static void shape_str(char *dst, size_t cap, int ndim, const int64_t *shape)
{
    size_t len = 0;

    len += (size_t)snprintf(dst, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(dst + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap)
        snprintf(dst + len, cap - len, "]");
}

static int same_shape(const struct gm_param_info *pi, int ndim, const struct gm_st_entry *e)
{
    if (e->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (e->shape[i] != pi->shape[i])
            return 0;
    return 1;
}

/* The head's tensor with only its output count differing. */
static int head_outputs_differ(const struct gm_param_info *pi, const struct gm_st_entry *e)
{
    if (e->ndim != pi->ndim || e->shape[0] == pi->shape[0] || e->shape[0] < 1)
        return 0;
    for (int i = 1; i < pi->ndim; i++)
        if (e->shape[i] != pi->shape[i])
            return 0;
    return 1;
}

static void list_line(char *dst, size_t cap, const char *what, const struct names *l)
{
    if (l->n == 0) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, cap, "; %d %s: %.*s%s", l->n, what, (int)l->len, l->text,
             l->n > LIST_SHOWN ? ", ..." : "");
}

/* The tensors a file must hold: parameters [0, nt) then buffers [nt, nt + nb) of either a
 * model or a graph; len: exported floats (the counter: 1). */
struct want {
    const struct gm_param_info *(*info)(const void *src, size_t i);
    size_t (*len)(const void *src, size_t i);
    const void *src;
    size_t nt, nb, head, nhead;
};

/* Compares f's names and shapes with w; logs the one-line refusal and returns GM_ERR_CONFIG,
 * or 0 with *head_differs / *file_classes set and *maxn the largest tensor. */
static int compare(const struct want *w, const struct gm_st_file *f, const char *path,
                   const char *model_name, int *head_differs, int *file_classes, size_t *maxn)
{
    struct names missing = {0}, unexpected = {0}, misshaped = {0};
    char s1[64], s2[64], extra[160];

    *head_differs = 0;
    *file_classes = 0;
    *maxn = 1;
    for (size_t i = 0; i < w->nt + w->nb; i++) {
        const struct gm_param_info *pi = w->info(w->src, i);
        const struct gm_st_entry *e = gm_safetensors_find(f, pi->name);
        const size_t len = w->len(w->src, i);
        *maxn = len > *maxn ? len : *maxn;
        if (e == NULL) {
            names_add(&missing, pi->name, "");
            continue;
        }
        if (same_shape(pi, pi->ndim, e))
            continue;
        if (i >= w->head && i < w->head + w->nhead && head_outputs_differ(pi, e)) {
            *head_differs = 1;
            *file_classes = (int)e->shape[0];
            continue;
        }
        shape_str(s1, sizeof(s1), pi->ndim, pi->shape);
        shape_str(s2, sizeof(s2), e->ndim, e->shape);
        snprintf(extra, sizeof(extra), " %s, file %s", s1, s2);
        names_add(&misshaped, pi->name, extra);
    }
    for (size_t j = 0; j < f->n_tensors; j++) {
        const char *name = f->tensors[j].name;
        int known = 0;
        for (size_t i = 0; i < w->nt + w->nb && !known; i++)
            known = strcmp(name, w->info(w->src, i)->name) == 0;
        if (!known)
            names_add(&unexpected, name, "");
    }
    if (missing.n + unexpected.n + misshaped.n > 0) {
        char a[600], b[600], c[600];
        list_line(a, sizeof(a), "missing", &missing);
        list_line(b, sizeof(b), "unexpected", &unexpected);
        list_line(c, sizeof(c), "mis-shaped", &misshaped);
        gm_err("%s: [model] init: the file does not fit %s (PyTorch names and shapes)%s%s%s", path,
               model_name, a, b, c);
        return GM_ERR_CONFIG;
    }
    return 0;
}

static const struct gm_param_info *model_info(const void *src, size_t i)
{
    const struct gm_model *m = src;
    const size_t nt = gm_model_num_tensors(m);
    return i < nt ? gm_model_tensor(m, i) : gm_model_buffer(m, i - nt);
}

static size_t model_len(const void *src, size_t i)
{
    const struct gm_model *m = src;
    const size_t nt = gm_model_num_tensors(m);
    return i < nt ? gm_model_tensor(m, i)->numel : gm_model_buffer_len(m, i - nt);
}

static const struct gm_param_info *graph_info(const void *src, size_t i)
{
    const struct gm_graph *g = src;
    return i < g->ntensors ? &g->tensors[i] : &g->buffers[i - g->ntensors];
}

static size_t graph_len(const void *src, size_t i)
{
    const struct gm_param_info *pi = graph_info(src, i);
    return pi->ndim == 0 ? 1 : pi->numel;
}

int gm_weights_check(const struct gm_graph *g, const char *model_name, const char *path)
{
    struct want w = {.info = graph_info,
                     .len = graph_len,
                     .src = g,
                     .nt = g->ntensors,
                     .nb = g->nbuffers,
                     .head = (size_t)-1};
    struct gm_st_file f;
    size_t maxn;
    int hd, fc, err;

    for (int i = g->nnodes - 1; i >= 0; i--)
        if (g->nodes[i].op == GM_GRAPH_OP_LINEAR) {
            w.head = (size_t)g->nodes[i].w_tensor;
            w.nhead = (size_t)g->nodes[i].ntensors;
            break;
        }
    if (gm_safetensors_load(path, &f) != 0) /* logged by the reader, with the path */
        return GM_ERR_CONFIG;
    err = compare(&w, &f, path, model_name, &hd, &fc, &maxn);
    gm_safetensors_free(&f);
    return err;
}

int gm_weights_load(struct gm_model *m, const char *model_name, const char *path, uint64_t seed)
{
    const size_t nt = gm_model_num_tensors(m), nb = gm_model_num_buffers(m);
    struct want w = {
        .info = model_info, .len = model_len, .src = m, .nt = nt, .nb = nb, .head = (size_t)-1};
    size_t maxn = 1;
    int head_differs = 0, file_classes = 0, err;
    struct gm_st_file f;
    float *tmp = NULL;

    if (gm_model_head(m, &w.head, &w.nhead) < 0)
        w.nhead = 0;
    if (gm_safetensors_load(path, &f) != 0) /* logged by the reader, with the path */
        return GM_ERR_CONFIG;
    if ((err = compare(&w, &f, path, model_name, &head_differs, &file_classes, &maxn)) < 0)
        goto out;
    tmp = malloc(maxn * sizeof(float) + 1);
    if (tmp == NULL) {
        err = -ENOMEM;
        goto out;
    }
    /* checked above: every tensor is there with its shape (the differing head is skipped) */
    for (size_t i = 0; i < nt + nb; i++) {
        const struct gm_param_info *pi = model_info(m, i);
        const struct gm_st_entry *e = gm_safetensors_find(&f, pi->name);
        const size_t len = model_len(m, i);
        if (head_differs && i >= w.head && i < w.head + w.nhead)
            continue;
        if (gm_safetensors_to_f32(e, tmp, len) != 0) {
            gm_err("%s: [model] init: tensor %s cannot be read as %zu floats", path, pi->name, len);
            err = GM_ERR_CONFIG;
            goto out;
        }
        if (i < nt) {
            gm_model_import_tensor(m, i, tmp, gm_model_params(m));
        } else if (gm_model_import_buffer(m, i - nt, tmp) != 0) {
            gm_err("%s: [model] init: buffer %s holds an impossible value", path, pi->name);
            err = GM_ERR_CONFIG;
            goto out;
        }
    }
    if ((err = gm_model_params_to_device(m)) < 0)
        goto out;
    if (head_differs) {
        gm_model_init_tensors(m, seed, w.head, w.nhead);
        gm_info("event=init-head file=%s head=%s file_classes=%d classes=%d seed=%llu: the "
                "head is drawn afresh from the job seed",
                path, gm_model_tensor(m, w.head)->name, file_classes, gm_model_classes(m),
                (unsigned long long)seed);
        if ((err = gm_model_take_error(m)) < 0)
            goto out;
    }
    gm_info("event=init file=%s model=%s tensors=%zu buffers=%zu", path, model_name, nt, nb);
    err = 0;
out:
    free(tmp);
    gm_safetensors_free(&f);
    return err;
}
