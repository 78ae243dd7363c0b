/*
 * train/data/loader.c - batches for the trainer: in memory (idx, cifar10) or streamed from a
 * photo folder by loader threads (see loader.h for the contract).
 *
 * The stream's state, all under mu:
 * - a ring of slots (prefetch + 2), each one batch: its name (split, epoch, indices), its
 *   output buffers, next (the next sample to hand to a worker), inflight (samples being made),
 *   done, and the first error by sample position (so the error reported does not depend on
 *   thread timing);
 * - workers take one sample at a time from the wanted slot first (the one the trainer waits
 *   for), else from the oldest queued slot, so several threads fill one batch together;
 * - a cancelled slot hands out no more samples and is free once its inflight samples are done.
 * The cache (decoded images, HWC) is filled by the check and by workers while the budget
 * lasts and never evicted, so a full budget costs nothing per sample; its entries are
 * immutable once set (a pointer set under mu).
 */
#include "train/data/loader.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/log.h"
#include "common/time.h"
#include "train/data/augment.h"
#include "train/data/data.h"
#include "train/data/file.h"
#include "train/data/folder.h"
#include "train/data/image.h"

#define MAX_THREADS 64

struct entry {
    const char *path; /* borrowed: the listing's */
    int label;
    int w, h;
    struct gm_image img; /* owned: the cached decode, px NULL when not kept */
    char *bad;           /* owned: why it cannot be decoded, NULL when good */
};

enum slot_state {
    SLOT_FREE,
    SLOT_QUEUED, /* samples to make or being made */
};

struct slot {
    enum slot_state state;
    int split, epoch;
    uint32_t *idx; /* owned: max_batch */
    size_t n, next, done, inflight;
    int cancelled;
    uint64_t seq;
    int err;
    size_t err_pos;
    char msg[GM_IMAGE_MSG_MAX];
    float *x;   /* owned: max_batch samples */
    int32_t *y; /* owned: max_batch */
};

struct worker {
    struct gm_loader *l;
    pthread_t th;
    struct gm_image_scratch s;
    uint8_t *u8; /* owned scratch */
    size_t u8_cap;
    float *pad_tmp; /* owned: one unpadded sample when pad > 0 */
};

struct gm_loader {
    /* in memory */
    struct gm_dataset mem[2];
    int in_memory;

    /* streamed */
    struct gm_folder_listing lists[2]; /* [1] only with val_dir */
    int nlists;
    struct entry *ents; /* owned: every listed image */
    size_t nents;
    struct entry **split[2]; /* owned arrays of borrowed entries */
    size_t n[2];
    struct gm_transform tf;
    int channels, pad;
    int out_c, out_h, out_w; /* before pad */
    int skip_bad;
    char *why; /* borrowed from the spec, during gm_loader_new only (NULL afterwards) */
    size_t why_len;
    size_t sample; /* floats of one (padded) sample */
    int max_batch;
    struct slot *slots; /* owned: nslots */
    int nslots;
    uint64_t seq;
    struct worker *workers; /* owned: nthreads */
    int nthreads, started;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int stop;
    uint64_t cache_budget, cache_bytes;
    uint64_t decodes;
    uint64_t train_batches, train_ahead; /* asked for; of them, queued by a prefetch */

    /* both */
    int c, h, w, classes;
    float lut[3][256]; /* byte -> normalised float, per channel */
    uint64_t wait_ns;
    uint64_t decoded_bytes;
    size_t skipped;
    double check_s;
};

int gm_loader_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (n < 2)
        return 1;
    return n / 2 > 8 ? 8 : (int)(n / 2);
}

/* ------------------------------------------------------------------------------------------ */
/* shared                                                                                     */

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void log_samples(const struct gm_loader *l, enum gm_split split, int epoch,
                        const uint32_t *idx, size_t n, const float *x)
{
    for (size_t k = 0; k < n; k++)
        gm_debug("event=sample split=%s epoch=%d index=%u hash=%016llx",
                 split == GM_SPLIT_TRAIN ? "train" : "test", epoch, idx[k],
                 (unsigned long long)fnv1a(x + k * l->sample, l->sample * sizeof(float)));
}

static int set_norm(struct gm_loader *l, const struct gm_data_spec *spec, int c)
{
    float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};

    if (spec->norm_n == 3 && c != 3) {
        gm_err("data: mean and std have 3 values but the images have %d channel%s", c,
               c == 1 ? "" : "s");
        return GM_ERR_CONFIG;
    }
    if (spec->norm_n != 0 && spec->norm_n != 1 && spec->norm_n != 3)
        return GM_ERR_CONFIG;
    for (int ch = 0; ch < 3 && spec->norm_n > 0; ch++) {
        int k = spec->norm_n == 1 ? 0 : ch;

        if (!(spec->std[k] > 0)) {
            gm_err("data: std %g is not positive", (double)spec->std[k]);
            return GM_ERR_CONFIG;
        }
        mean[ch] = spec->mean[k];
        std[ch] = spec->std[k];
    }
    for (int ch = 0; ch < 3; ch++) {
        l->tf.mean[ch] = mean[ch];
        l->tf.std[ch] = std[ch];
        for (int v = 0; v < 256; v++)
            l->lut[ch][v] = ((float)v * (1.0f / 255.0f) - mean[ch]) / std[ch];
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* workers                                                                                    */

static int grow(void **p, size_t *cap, size_t need)
{
    void *np;

    if (need <= *cap)
        return 0;
    np = realloc(*p, need);
    if (np == NULL)
        return -ENOMEM;
    *p = np;
    *cap = need;
    return 0;
}

/* Keeps img in e when the budget allows (takes it: img is cleared); under mu. */
static void cache_offer(struct gm_loader *l, struct entry *e, struct gm_image *img)
{
    const uint64_t bytes = (uint64_t)img->w * (uint64_t)img->h * (uint64_t)img->c;

    if (e->img.px != NULL || l->cache_bytes + bytes > l->cache_budget)
        return;
    e->img = *img;
    memset(img, 0, sizeof(*img));
    l->cache_bytes += bytes;
}

/* Makes sample k of slot: decode (or the cache), transform, pad.  Outside mu. */
static int make_sample(struct worker *wk, struct slot *sl, size_t k, char *msg, size_t msg_len)
{
    struct gm_loader *l = wk->l;
    struct entry *e = l->split[sl->split][sl->idx[k]];
    struct gm_image own = {0};
    const struct gm_image *img;
    struct gm_image_box box;
    float *out = sl->x + k * l->sample;
    int flip, err;

    pthread_mutex_lock(&l->mu);
    img = e->img.px != NULL ? &e->img : NULL;
    pthread_mutex_unlock(&l->mu);
    if (img == NULL) {
        err = gm_image_decode(e->path, l->channels, &own, msg, msg_len);
        if (err)
            return err;
        img = &own;
        pthread_mutex_lock(&l->mu);
        l->decodes++;
        pthread_mutex_unlock(&l->mu);
    }
    gm_transform_params(&l->tf, sl->split == GM_SPLIT_TRAIN, sl->epoch, sl->idx[k], img->w, img->h,
                        &box, &flip);
    err = grow((void **)&wk->u8, &wk->u8_cap,
               gm_transform_scratch_bytes(&l->tf, img->w, img->h, img->c));
    if (err == 0)
        err = gm_transform_apply(&l->tf, sl->split == GM_SPLIT_TRAIN, img, &box, flip,
                                 l->pad > 0 ? wk->pad_tmp : out, wk->u8, &wk->s);
    if (err == 0 && l->pad > 0) {
        const size_t ph = (size_t)l->h, pw = (size_t)l->w, p = (size_t)l->pad;
        const size_t ih = (size_t)l->out_h, iw = (size_t)l->out_w;

        for (size_t ch = 0; ch < (size_t)l->c; ch++) {
            float *o = out + ch * ph * pw;

            for (size_t i = 0; i < ph * pw; i++)
                o[i] = l->lut[ch][0];
            for (size_t y = 0; y < ih; y++)
                memcpy(o + (y + p) * pw + p, wk->pad_tmp + (ch * ih + y) * iw, iw * sizeof(float));
        }
    }
    if (err == -ENOMEM)
        snprintf(msg, msg_len, "%s: out of memory transforming", e->path);
    else if (err)
        snprintf(msg, msg_len, "%s: cannot transform (%s)", e->path, gm_strerror(err));
    if (err == 0)
        sl->y[k] = e->label;
    if (own.px != NULL) {
        pthread_mutex_lock(&l->mu);
        cache_offer(l, e, &own);
        pthread_mutex_unlock(&l->mu);
        gm_image_free(&own);
    }
    return err;
}

/* The slot a worker should serve next, or NULL; under mu. */
static struct slot *pick(struct gm_loader *l)
{
    struct slot *best = NULL;

    for (int i = 0; i < l->nslots; i++) {
        struct slot *s = &l->slots[i];

        if (s->state != SLOT_QUEUED || s->cancelled || s->next >= s->n)
            continue;
        if (best == NULL || s->seq < best->seq)
            best = s;
    }
    return best;
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct gm_loader *l = wk->l;
    char msg[GM_IMAGE_MSG_MAX];

    pthread_mutex_lock(&l->mu);
    for (;;) {
        struct slot *s;
        size_t k;
        int err;

        while (!l->stop && (s = pick(l)) == NULL)
            pthread_cond_wait(&l->work, &l->mu);
        if (l->stop)
            break;
        k = s->next++;
        s->inflight++;
        pthread_mutex_unlock(&l->mu);
        msg[0] = '\0';
        err = make_sample(wk, s, k, msg, sizeof(msg));
        pthread_mutex_lock(&l->mu);
        s->inflight--;
        s->done++;
        if (err && (s->err == 0 || k < s->err_pos)) {
            s->err = err;
            s->err_pos = k;
            snprintf(s->msg, sizeof(s->msg), "%s", msg);
        }
        if (s->cancelled && s->inflight == 0)
            s->state = SLOT_FREE;
        if (s->done == s->n || s->state == SLOT_FREE)
            pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* the check                                                                                  */

struct check {
    struct gm_loader *l;
    size_t next;
    pthread_mutex_t mu;
};

static void *check_main(void *arg)
{
    struct check *c = arg;
    struct gm_loader *l = c->l;
    char msg[GM_IMAGE_MSG_MAX];

    for (;;) {
        struct gm_image img;
        struct entry *e;
        size_t i;
        int err;

        pthread_mutex_lock(&c->mu);
        i = c->next++;
        pthread_mutex_unlock(&c->mu);
        if (i >= l->nents)
            break;
        e = &l->ents[i];
        err = gm_image_decode(e->path, l->channels, &img, msg, sizeof(msg));
        if (err) {
            e->bad = strdup(msg[0] ? msg : e->path); /* NULL only without memory: then good */
            if (e->bad == NULL)
                e->w = -1; /* out of memory: reported by the caller */
            continue;
        }
        e->w = img.w;
        e->h = img.h;
        pthread_mutex_lock(&l->mu);
        l->decoded_bytes += (uint64_t)img.w * (uint64_t)img.h * (uint64_t)img.c;
        cache_offer(l, e, &img);
        pthread_mutex_unlock(&l->mu);
        gm_image_free(&img);
    }
    return NULL;
}

/* Decodes every entry on nthreads threads. */
static int check_all(struct gm_loader *l)
{
    pthread_t th[MAX_THREADS];
    struct check c = {.l = l};
    int started = 0, err = 0;

    pthread_mutex_init(&c.mu, NULL);
    for (int i = 0; i < l->nthreads; i++) {
        if (pthread_create(&th[i], NULL, check_main, &c) != 0)
            break;
        started++;
    }
    if (started == 0)
        check_main(&c);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.mu);
    for (size_t i = 0; i < l->nents; i++)
        if (l->ents[i].w < 0 && l->ents[i].bad == NULL) {
            gm_err("%s: out of memory checking the images", l->ents[i].path);
            err = -ENOMEM;
            break;
        }
    return err;
}

/* Leaves out the bad entries of listing li (entries [first, first + count) of l->ents, in the
 * listing's order); a class left without images is an error. */
static int drop_bad(struct gm_loader *l, int li, size_t first, size_t *count, const char *root)
{
    struct gm_folder_listing *ls = &l->lists[li];
    size_t out = 0;

    for (int k = 0; k < ls->classes; k++) {
        const size_t begin = ls->start[k], end = ls->start[k + 1];

        ls->start[k] = out;
        for (size_t i = begin; i < end; i++) {
            struct entry *e = &l->ents[first + i];

            if (e->bad == NULL) {
                if (out != i) { /* moved: the old places own nothing */
                    ls->items[out] = ls->items[i];
                    ls->items[i].path = NULL;
                    l->ents[first + out] = *e;
                    memset(e, 0, sizeof(*e));
                }
                out++;
                continue;
            }
            if (!l->skip_bad) {
                gm_err("%s (set [data] skip_bad = true to leave bad images out)", e->bad);
                if (l->why != NULL)
                    snprintf(l->why, l->why_len, "%s", e->bad);
                return GM_ERR_DATA;
            }
            gm_warn("event=data_skip path=%s reason=\"%s\"", e->path, e->bad);
            l->skipped++;
            free(e->bad);
            e->bad = NULL;
            free(ls->items[i].path);
            ls->items[i].path = NULL;
        }
        if (out == ls->start[k]) {
            gm_err("%s/%s: no image left in the class after skipping bad ones", root, ls->names[k]);
            return GM_ERR_DATA; /* listing_free skips the NULL paths */
        }
    }
    ls->start[ls->classes] = out;
    ls->n = out;
    *count = out;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* creation                                                                                   */

static uint64_t phys_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : UINT64_MAX;
}

/* dir/sub, with sub relative and free of "..": checked here too (the job parser checks it
 * first), since the spec may come from elsewhere. */
static int sub_path(char *buf, size_t n, const char *dir, const char *sub)
{
    if (sub[0] == '/' || strcmp(sub, "..") == 0 || strncmp(sub, "../", 3) == 0 ||
        strstr(sub, "/../") != NULL ||
        (strlen(sub) >= 3 && strcmp(sub + strlen(sub) - 3, "/..") == 0)) {
        gm_err("data: %s must be a folder inside %s (relative, without '..')", sub, dir);
        return GM_ERR_CONFIG;
    }
    return gm_data_path_join(buf, n, dir, sub);
}

/* The classes of train and val must be the same names. */
static int same_classes(const struct gm_folder_listing *a, const char *adir,
                        const struct gm_folder_listing *b, const char *bdir)
{
    int i = 0, j = 0;

    while (i < a->classes || j < b->classes) {
        int c = i == a->classes ? 1 : j == b->classes ? -1 : strcmp(a->names[i], b->names[j]);

        if (c == 0) {
            i++;
            j++;
            continue;
        }
        gm_err("%s: the class folders differ from %s's: '%s' is only in %s (%d classes there, "
               "%d here)",
               bdir, adir, c < 0 ? a->names[i] : b->names[j], c < 0 ? adir : bdir, a->classes,
               b->classes);
        return GM_ERR_DATA;
    }
    return 0;
}

static int open_stream(struct gm_loader *l, const struct gm_data_spec *spec)
{
    char dirs[2][PATH_MAX];
    size_t first[2] = {0, 0}, count[2] = {0, 0}, n_test = 0;
    uint64_t t0 = gm_time_mono_ns();
    int err;

    l->channels = spec->channels;
    l->skip_bad = spec->skip_bad;
    l->why = spec->why_len > 0 ? spec->why : NULL;
    l->why_len = spec->why_len;
    l->cache_budget = spec->cache;
    if (spec->cache > phys_memory()) {
        gm_err("data: cache = %llu bytes is more than this machine's memory (%llu bytes)",
               (unsigned long long)spec->cache, (unsigned long long)phys_memory());
        return GM_ERR_CONFIG;
    }
    if ((spec->crop || spec->resize > 0) && spec->image_size <= 0) {
        gm_err("data: image_size %d: %s needs an output size (image_size >= 1)", spec->image_size,
               spec->crop ? "a random resized crop" : "resize");
        return GM_ERR_CONFIG;
    }
    if (spec->resize > 0 && spec->resize < spec->image_size) {
        gm_err("data: resize %d is smaller than image_size %d (the centre crop must fit)",
               spec->resize, spec->image_size);
        return GM_ERR_CONFIG;
    }
    if ((spec->train_dir == NULL) != (spec->val_dir == NULL)) {
        gm_err("data: train_dir and val_dir go together");
        return GM_ERR_CONFIG;
    }
    l->nlists = spec->train_dir != NULL ? 2 : 1;
    if (l->nlists == 2) {
        if ((err = sub_path(dirs[0], sizeof(dirs[0]), spec->dir, spec->train_dir)) < 0 ||
            (err = sub_path(dirs[1], sizeof(dirs[1]), spec->dir, spec->val_dir)) < 0)
            return err;
    } else {
        snprintf(dirs[0], sizeof(dirs[0]), "%s", spec->dir);
    }
    for (int i = 0; i < l->nlists; i++)
        if ((err = gm_data_folder_list(dirs[i], &l->lists[i])) < 0)
            return err;
    if (l->nlists == 2 && (err = same_classes(&l->lists[0], dirs[0], &l->lists[1], dirs[1])) < 0)
        return err;
    l->nents = l->lists[0].n + (l->nlists == 2 ? l->lists[1].n : 0);
    l->ents = calloc(l->nents, sizeof(*l->ents));
    if (l->ents == NULL) {
        gm_err("%s: out of memory for %zu images", spec->dir, l->nents);
        return -ENOMEM;
    }
    for (int i = 0; i < l->nlists; i++) {
        first[i] = i == 0 ? 0 : l->lists[0].n;
        count[i] = l->lists[i].n;
        for (size_t k = 0; k < count[i]; k++) {
            l->ents[first[i] + k].path = l->lists[i].items[k].path;
            l->ents[first[i] + k].label = l->lists[i].items[k].label;
        }
    }
    if ((err = check_all(l)) < 0)
        return err;
    for (int i = 0; i < l->nlists; i++)
        if ((err = drop_bad(l, i, first[i], &count[i], dirs[i])) < 0)
            return err;
    if (l->nlists == 2) { /* compact listing 1's entries after listing 0's */
        memmove(l->ents + count[0], l->ents + first[1], count[1] * sizeof(*l->ents));
        first[1] = count[0];
    }
    l->nents = count[0] + count[1];
    if (l->nlists == 1) {
        if ((err = gm_data_folder_split(&l->lists[0], spec->test_split, spec->seed, &n_test)) < 0)
            return err;
        l->n[GM_SPLIT_TEST] = n_test;
        l->n[GM_SPLIT_TRAIN] = count[0] - n_test;
    } else {
        l->n[GM_SPLIT_TRAIN] = count[0];
        l->n[GM_SPLIT_TEST] = count[1];
    }
    for (int s = 0; s < 2; s++) {
        l->split[s] = calloc(l->n[s] + 1, sizeof(*l->split[s]));
        if (l->split[s] == NULL) {
            gm_err("%s: out of memory", spec->dir);
            return -ENOMEM;
        }
    }
    if (l->nlists == 1) {
        for (size_t k = 0; k < count[0]; k++) {
            const struct gm_folder_item *it = &l->lists[0].items[k];

            l->split[it->is_test ? GM_SPLIT_TEST : GM_SPLIT_TRAIN][it->slot] = &l->ents[k];
        }
    } else {
        for (size_t k = 0; k < count[0]; k++)
            l->split[GM_SPLIT_TRAIN][k] = &l->ents[k];
        for (size_t k = 0; k < count[1]; k++)
            l->split[GM_SPLIT_TEST][k] = &l->ents[first[1] + k];
    }
    if (spec->image_size == 0) { /* native: every image must be the first one's size */
        const struct entry *e0 = &l->ents[0];

        for (size_t i = 1; i < l->nents; i++)
            if (l->ents[i].w != e0->w || l->ents[i].h != e0->h) {
                gm_err("%s: image is %dx%d but the first image (%s) is %dx%d; set image_size "
                       "to resize",
                       l->ents[i].path, l->ents[i].w, l->ents[i].h, e0->path, e0->w, e0->h);
                return GM_ERR_DATA;
            }
    }
    l->classes = l->lists[0].classes;
    l->tf.size = spec->image_size;
    l->tf.resize = spec->resize;
    l->tf.crop = spec->crop;
    l->tf.flip = spec->flip;
    l->tf.scale[0] = spec->crop_scale[0];
    l->tf.scale[1] = spec->crop_scale[1];
    l->tf.ratio[0] = spec->crop_ratio[0];
    l->tf.ratio[1] = spec->crop_ratio[1];
    if (spec->crop &&
        !(l->tf.scale[0] > 0 && l->tf.scale[0] <= l->tf.scale[1] && l->tf.scale[1] <= 1 &&
          l->tf.ratio[0] > 0 && l->tf.ratio[0] <= l->tf.ratio[1])) {
        gm_err("data: crop_scale (%g, %g) or crop_ratio (%g, %g) is not a range of positive "
               "numbers (scale at most 1)",
               l->tf.scale[0], l->tf.scale[1], l->tf.ratio[0], l->tf.ratio[1]);
        return GM_ERR_CONFIG;
    }
    l->tf.seed = spec->seed;
    gm_transform_out_size(&l->tf, l->ents[0].w, l->ents[0].h, &l->out_w, &l->out_h);
    l->out_c = spec->channels;
    l->check_s = (double)(gm_time_mono_ns() - t0) * 1e-9;
    gm_info("event=data_check dir=%s images=%zu train=%zu test=%zu classes=%d skipped=%zu "
            "decoded_mb=%.1f cached_mb=%.1f threads=%d check_s=%.2f",
            spec->dir, l->nents, l->n[GM_SPLIT_TRAIN], l->n[GM_SPLIT_TEST], l->classes, l->skipped,
            (double)l->decoded_bytes / 1048576.0, (double)l->cache_bytes / 1048576.0, l->nthreads,
            l->check_s);
    return 0;
}

static int start_workers(struct gm_loader *l, int prefetch)
{
    /* prefetch for the train split, one the trainer waits on, and one more so an evaluation
     * between two epochs (its batch and its own prefetch) leaves the next epoch's prefetched
     * batches queued */
    l->nslots = prefetch + 2;
    l->slots = calloc((size_t)l->nslots, sizeof(*l->slots));
    l->workers = calloc((size_t)l->nthreads, sizeof(*l->workers));
    if (l->slots == NULL || l->workers == NULL)
        goto oom;
    for (int i = 0; i < l->nslots; i++) {
        struct slot *s = &l->slots[i];

        s->idx = malloc((size_t)l->max_batch * sizeof(*s->idx));
        s->x = malloc((size_t)l->max_batch * l->sample * sizeof(float));
        s->y = malloc((size_t)l->max_batch * sizeof(*s->y));
        if (s->idx == NULL || s->x == NULL || s->y == NULL)
            goto oom;
    }
    for (int i = 0; i < l->nthreads; i++) {
        struct worker *w = &l->workers[i];

        w->l = l;
        if (l->pad > 0) {
            w->pad_tmp =
                malloc((size_t)l->out_c * (size_t)l->out_h * (size_t)l->out_w * sizeof(float));
            if (w->pad_tmp == NULL)
                goto oom;
        }
    }
    for (int i = 0; i < l->nthreads; i++) {
        int e = pthread_create(&l->workers[i].th, NULL, worker_main, &l->workers[i]);

        if (e != 0) {
            gm_err("data: cannot start loader thread %d: %s", i, strerror(e));
            return -e;
        }
        l->started++;
    }
    return 0;
oom:
    gm_err("data: out of memory for %d batch buffers of %d samples", l->nslots, l->max_batch);
    return -ENOMEM;
}

int gm_loader_new(const struct gm_data_spec *spec, int max_batch, struct gm_loader **out)
{
    struct gm_loader *l;
    int err;

    *out = NULL;
    if (spec == NULL || spec->kind == NULL || max_batch < 1)
        return -EINVAL;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    l->max_batch = max_batch;
    if (strcmp(spec->kind, "folder") != 0) {
        l->in_memory = 1;
        if ((err = gm_dataset_load(spec, &l->mem[0], &l->mem[1])) < 0)
            goto fail;
        l->c = l->mem[0].c;
        l->h = l->mem[0].h;
        l->w = l->mem[0].w;
        l->classes = l->mem[0].classes > l->mem[1].classes ? l->mem[0].classes : l->mem[1].classes;
        l->n[0] = l->mem[0].n;
        l->n[1] = l->mem[1].n;
        l->sample = gm_dataset_sample_bytes(&l->mem[0]);
        if ((err = set_norm(l, spec, l->c)) < 0)
            goto fail;
        *out = l;
        return 0;
    }
    if (spec->dir == NULL || spec->dir[0] == '\0' || (spec->channels != 1 && spec->channels != 3) ||
        spec->image_size < 0 || spec->pad < 0 || spec->pad > GM_DATA_MAX_PAD ||
        spec->loader_threads < 0 || spec->prefetch < 0 ||
        (spec->train_dir == NULL && !(spec->test_split >= 0 && spec->test_split < 1))) {
        gm_err("data: invalid folder settings");
        err = GM_ERR_CONFIG;
        goto fail;
    }
    l->nthreads = spec->loader_threads > 0 ? spec->loader_threads : gm_loader_default_threads();
    if (l->nthreads > MAX_THREADS)
        l->nthreads = MAX_THREADS;
    l->pad = spec->pad;
    if ((err = set_norm(l, spec, spec->channels)) < 0)
        goto fail;
    if ((err = open_stream(l, spec)) < 0)
        goto fail;
    l->c = l->out_c;
    l->h = l->out_h + 2 * l->pad;
    l->w = l->out_w + 2 * l->pad;
    l->sample = (size_t)l->c * (size_t)l->h * (size_t)l->w;
    if (l->sample * sizeof(float) > GM_DATA_MAX_SAMPLE_BYTES * 4) {
        gm_err("%s: samples of %dx%dx%d are larger than the limit", spec->dir, l->c, l->h, l->w);
        err = GM_ERR_DATA;
        goto fail;
    }
    if ((err = start_workers(l, spec->prefetch > 0 ? spec->prefetch : 2)) < 0)
        goto fail;
    l->why = NULL; /* the spec's buffer is the caller's again */
    *out = l;
    return 0;
fail:
    gm_loader_free(l);
    return err;
}

void gm_loader_free(struct gm_loader *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->started; i++)
        pthread_join(l->workers[i].th, NULL);
    for (int i = 0; l->workers != NULL && i < l->nthreads; i++) {
        gm_image_scratch_free(&l->workers[i].s);
        free(l->workers[i].u8);
        free(l->workers[i].pad_tmp);
    }
    free(l->workers);
    for (int i = 0; l->slots != NULL && i < l->nslots; i++) {
        free(l->slots[i].idx);
        free(l->slots[i].x);
        free(l->slots[i].y);
    }
    free(l->slots);
    for (size_t i = 0; l->ents != NULL && i < l->nents; i++) {
        gm_image_free(&l->ents[i].img);
        free(l->ents[i].bad);
    }
    free(l->ents);
    free(l->split[0]);
    free(l->split[1]);
    for (int i = 0; i < 2; i++)
        gm_data_folder_listing_free(&l->lists[i]);
    gm_dataset_free(&l->mem[0]);
    gm_dataset_free(&l->mem[1]);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->done);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ------------------------------------------------------------------------------------------ */
/* requests                                                                                   */

size_t gm_loader_len(const struct gm_loader *l, enum gm_split split)
{
    return l->n[split];
}

void gm_loader_shape(const struct gm_loader *l, int *c, int *h, int *w)
{
    *c = l->c;
    *h = l->h;
    *w = l->w;
}

int gm_loader_classes(const struct gm_loader *l)
{
    return l->classes;
}

void gm_loader_stats(const struct gm_loader *l, struct gm_loader_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->train = l->n[0];
    st->test = l->n[1];
    st->skipped = l->skipped;
    st->decoded_bytes = l->decoded_bytes;
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    st->cache_bytes = l->cache_bytes;
    st->decodes = l->decodes;
    st->train_batches = l->train_batches;
    st->train_ahead = l->train_ahead;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
    st->wait_ns = l->wait_ns;
    st->check_s = l->check_s;
    st->threads = l->in_memory ? 0 : l->nthreads;
}

static void check_request(const struct gm_loader *l, enum gm_split split, const uint32_t *idx,
                          size_t n)
{
    GM_ASSERT(split == GM_SPLIT_TRAIN || split == GM_SPLIT_TEST);
    GM_ASSERT(n <= (size_t)l->max_batch);
    for (size_t k = 0; k < n; k++)
        GM_ASSERT(idx[k] < l->n[split]);
}

static struct slot *find(struct gm_loader *l, enum gm_split split, int epoch, const uint32_t *idx,
                         size_t n)
{
    for (int i = 0; i < l->nslots; i++) {
        struct slot *s = &l->slots[i];

        if (s->state == SLOT_QUEUED && !s->cancelled && s->split == (int)split &&
            s->epoch == epoch && s->n == n && memcmp(s->idx, idx, n * sizeof(*idx)) == 0)
            return s;
    }
    return NULL;
}

static struct slot *free_slot(struct gm_loader *l)
{
    for (int i = 0; i < l->nslots; i++)
        if (l->slots[i].state == SLOT_FREE)
            return &l->slots[i];
    return NULL;
}

static void cancel(struct slot *s)
{
    s->cancelled = 1;
    if (s->inflight == 0)
        s->state = SLOT_FREE;
}

static void fill(struct gm_loader *l, struct slot *s, enum gm_split split, int epoch,
                 const uint32_t *idx, size_t n)
{
    s->state = SLOT_QUEUED;
    s->split = (int)split;
    s->epoch = epoch;
    memcpy(s->idx, idx, n * sizeof(*idx));
    s->n = n;
    s->next = s->done = s->inflight = 0;
    s->cancelled = 0;
    s->err = 0;
    s->err_pos = 0;
    s->msg[0] = '\0';
    s->seq = ++l->seq;
    pthread_cond_broadcast(&l->work);
}

void gm_loader_prefetch(struct gm_loader *l, enum gm_split split, int epoch, const uint32_t *idx,
                        size_t n)
{
    struct slot *s;

    check_request(l, split, idx, n);
    if (l->in_memory || n == 0)
        return;
    pthread_mutex_lock(&l->mu);
    if (find(l, split, epoch, idx, n) == NULL && (s = free_slot(l)) != NULL)
        fill(l, s, split, epoch, idx, n);
    pthread_mutex_unlock(&l->mu);
}

int gm_loader_batch(struct gm_loader *l, enum gm_split split, int epoch, const uint32_t *idx,
                    size_t n, float *x, int32_t *y)
{
    const uint64_t t0 = gm_time_mono_ns();
    struct slot *s;
    int err;

    check_request(l, split, idx, n);
    if (l->in_memory) {
        const struct gm_dataset *d = &l->mem[split];

        for (size_t k = 0; k < n; k++) {
            const uint8_t *src = d->images + (size_t)idx[k] * l->sample;
            const size_t plane = (size_t)l->h * (size_t)l->w;

            for (size_t i = 0; i < l->sample; i++)
                x[k * l->sample + i] = l->lut[i / plane][src[i]];
            y[k] = d->labels[idx[k]];
        }
        if (gm_log_get_level() >= GM_LOG_DEBUG)
            log_samples(l, split, epoch, idx, n, x);
        return 0;
    }
    if (n == 0)
        return 0;
    pthread_mutex_lock(&l->mu);
    s = find(l, split, epoch, idx, n);
    l->train_batches += split == GM_SPLIT_TRAIN;
    l->train_ahead += split == GM_SPLIT_TRAIN && s != NULL;
    if (s != NULL) { /* the ones of this split queued before it will not be asked for */
        for (int i = 0; i < l->nslots; i++) {
            struct slot *o = &l->slots[i];

            if (o != s && o->state == SLOT_QUEUED && !o->cancelled && o->split == (int)split &&
                o->seq < s->seq)
                cancel(o);
        }
    } else {
        while ((s = free_slot(l)) == NULL) {
            struct slot *oldest = NULL;

            for (int i = 0; i < l->nslots; i++) {
                struct slot *o = &l->slots[i];

                if (!o->cancelled && (oldest == NULL || o->seq < oldest->seq))
                    oldest = o;
            }
            if (oldest != NULL)
                cancel(oldest);
            if (free_slot(l) == NULL)
                pthread_cond_wait(&l->done, &l->mu);
        }
        fill(l, s, split, epoch, idx, n);
    }
    s->seq = 0; /* the one waited for comes first */
    pthread_cond_broadcast(&l->work);
    while (s->done < s->n)
        pthread_cond_wait(&l->done, &l->mu);
    pthread_mutex_unlock(&l->mu);
    /* inflight is 0 and nobody writes s until it is freed below */
    err = s->err;
    if (err)
        gm_err("%s", s->msg);
    else {
        memcpy(x, s->x, n * l->sample * sizeof(float));
        memcpy(y, s->y, n * sizeof(*y));
    }
    pthread_mutex_lock(&l->mu);
    s->state = SLOT_FREE;
    pthread_mutex_unlock(&l->mu);
    l->wait_ns += gm_time_mono_ns() - t0;
    if (err == 0 && gm_log_get_level() >= GM_LOG_DEBUG)
        log_samples(l, split, epoch, idx, n, x);
    return err == -ENOMEM ? err : err ? GM_ERR_DATA : 0;
}
