/* train/comm/bucket.c - gradient bucketing over gm_coll (see bucket.h). */
#include "train/comm/bucket.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

struct gm_bucketer {
    size_t nlayers, nbuckets;
    size_t *off, *len; /* owned, per bucket */
    size_t *bucket_of; /* owned, per layer */
    size_t *layers_in; /* owned, per bucket: layers it holds */
    size_t *missing;   /* owned, per bucket: layers not yet ready */
    bool *ready;       /* owned, per layer */
    /* the step */
    bool active, abandoned;
    struct gm_coll *c; /* borrowed */
    float *grad;       /* borrowed */
    struct gm_coll_opts opts;
    size_t started, finished;
    int status;
    gm_coll_done_cb cb;
    void *arg;
};

int gm_bucketer_new(const size_t *layer_end, size_t nlayers, size_t bucket_bytes,
                    struct gm_bucketer **out)
{
    struct gm_bucketer *b;

    *out = NULL;
    if (layer_end == NULL || nlayers == 0)
        return -EINVAL;
    for (size_t i = 1; i < nlayers; i++)
        if (layer_end[i] < layer_end[i - 1])
            return -EINVAL;
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->nlayers = nlayers;
    b->off = calloc(nlayers, sizeof(size_t));
    b->len = calloc(nlayers, sizeof(size_t));
    b->bucket_of = calloc(nlayers, sizeof(size_t));
    b->layers_in = calloc(nlayers, sizeof(size_t));
    b->missing = calloc(nlayers, sizeof(size_t));
    b->ready = calloc(nlayers, sizeof(bool));
    if (b->off == NULL || b->len == NULL || b->bucket_of == NULL || b->layers_in == NULL ||
        b->missing == NULL || b->ready == NULL) {
        gm_bucketer_free(b);
        return -ENOMEM;
    }
    b->nbuckets = gm_coll_buckets(layer_end, nlayers, bucket_bytes, b->off, b->len);
    for (size_t l = 0; l < nlayers; l++) {
        size_t start = l > 0 ? layer_end[l - 1] : 0;
        for (size_t k = 0; k < b->nbuckets; k++) {
            if (start >= b->off[k] && layer_end[l] <= b->off[k] + b->len[k]) {
                b->bucket_of[l] = k;
                b->layers_in[k]++;
                break;
            }
        }
    }
    *out = b;
    return 0;
}

void gm_bucketer_free(struct gm_bucketer *b)
{
    if (b == NULL)
        return;
    GM_ASSERT(!b->active || b->abandoned);
    free(b->off);
    free(b->len);
    free(b->bucket_of);
    free(b->layers_in);
    free(b->missing);
    free(b->ready);
    free(b);
}

size_t gm_bucketer_count(const struct gm_bucketer *b)
{
    return b->nbuckets;
}

void gm_bucketer_range(const struct gm_bucketer *b, size_t i, size_t *off, size_t *len)
{
    GM_ASSERT(i < b->nbuckets);
    *off = b->off[i];
    *len = b->len[i];
}

int gm_bucketer_begin(struct gm_bucketer *b, struct gm_coll *c, float *grad,
                      const struct gm_coll_opts *o, gm_coll_done_cb cb, void *arg)
{
    if (c == NULL || grad == NULL || o == NULL || cb == NULL)
        return -EINVAL;
    if (b->active && !b->abandoned)
        return -EBUSY;
    b->active = true;
    b->abandoned = false;
    b->c = c;
    b->grad = grad;
    b->opts = *o;
    b->started = b->finished = 0;
    b->status = 0;
    b->cb = cb;
    b->arg = arg;
    memcpy(b->missing, b->layers_in, b->nbuckets * sizeof(size_t));
    memset(b->ready, 0, b->nlayers * sizeof(bool));
    return 0;
}

static void on_bucket(struct gm_coll *c, int status, void *arg)
{
    struct gm_bucketer *b = arg;

    b->finished++;
    if (status != 0 && b->status == 0)
        b->status = status;
    if (b->abandoned || b->finished < b->nbuckets)
        return;
    b->active = false;
    b->cb(c, b->status, b->arg);
}

int gm_bucketer_ready(struct gm_bucketer *b, size_t layer)
{
    size_t k;
    int err;

    if (!b->active || b->abandoned || layer >= b->nlayers || b->ready[layer])
        return -EINVAL;
    b->ready[layer] = true;
    k = b->bucket_of[layer];
    if (--b->missing[k] > 0)
        return 0;
    err = gm_coll_allreduce_start(b->c, b->grad + b->off[k], b->len[k], &b->opts, on_bucket, b);
    if (err < 0) {
        b->abandoned = true;
        return err;
    }
    b->started++;
    return 0;
}
