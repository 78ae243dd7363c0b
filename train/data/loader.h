/*
 * train/data/loader.h - the trainer's source of batches: float tensors for given sample
 * indices, whatever the dataset kind.
 *
 * - idx and cifar10 (and nothing else but them): the eager in-memory dataset of data.h, then
 *   the normalisation (mean/std) if one is set.
 * - folder: streamed.  At creation every image of the folder is decoded once on the loader
 *   threads (the check: the same files give the same decisions on every rank): a bad image
 *   fails the creation with its path (GM_ERR_DATA), or with skip_bad is named in a warning,
 *   counted and left out of the listing before the split, so every rank leaves out the same
 *   ones.  Decoded images are kept while their bytes fit spec->cache.  Then loader threads
 *   decode and transform (augment.h) the samples of requested batches into a bounded ring of
 *   prefetch + 2 batch buffers while the trainer computes: memory is the ring, the cache
 *   budget and one image per thread, whatever the folder's size.  Every random choice comes
 *   from (seed, epoch, sample index), so the tensor of a sample does not depend on which
 *   thread or rank makes it.
 *
 * Requests: gm_loader_prefetch names a batch the trainer expects to ask for soon (a hint: it is
 * queued when a buffer is free and dropped otherwise); gm_loader_batch asks for one and waits.
 * A batch is named by (split, epoch, indices); asking for a queued batch drops the batches of
 * that split queued before it (they will not be asked for: the trainer asks in order), and a
 * batch not queued takes the oldest buffer.  With GRADMESH_LOG_LEVEL=debug every sample handed
 * to the trainer is logged: event=sample split= epoch= index= hash= (FNV-1a of its floats), so
 * runs with different world sizes can be compared.
 *
 * Errors: gm_loader_new logs one line (the file, or the key) and returns GM_ERR_DATA,
 * GM_ERR_CONFIG (a spec that cannot work: a cache above this machine's memory, a
 * normalisation for other channels, ...) or -ENOMEM.  gm_loader_batch logs and returns
 * GM_ERR_DATA when a file went bad after the check.
 *
 * Threads: one caller thread (the trainer's) for every function; the loader's own threads live
 * from gm_loader_new to gm_loader_free.
 */
#ifndef GM_TRAIN_DATA_LOADER_H
#define GM_TRAIN_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/data/dataset.h"

enum gm_split {
    GM_SPLIT_TRAIN,
    GM_SPLIT_TEST,
};

struct gm_loader;

struct gm_loader_stats {
    size_t train, test;     /* samples */
    size_t skipped;         /* bad images left out (skip_bad) */
    uint64_t decoded_bytes; /* all decoded images of the folder (the check's sum) */
    uint64_t cache_bytes;   /* kept now */
    uint64_t decodes;       /* images decoded after the check */
    uint64_t train_batches; /* train batches asked for (gm_loader_batch) */
    uint64_t train_ahead;   /* of them, the ones a gm_loader_prefetch had queued */
    uint64_t wait_ns;       /* the trainer's wait in gm_loader_batch */
    double check_s;         /* the check's wall time */
    int threads;            /* loader threads (0: in memory) */
};

/* Loads or opens spec for batches of at most max_batch samples. */
int gm_loader_new(const struct gm_data_spec *spec, int max_batch,
                  struct gm_loader **out) GM_MUST_CHECK;
/* Stops the threads and frees; NULL-safe. */
void gm_loader_free(struct gm_loader *l);

size_t gm_loader_len(const struct gm_loader *l, enum gm_split split);
/* The shape of one sample's tensor, c x h x w. */
void gm_loader_shape(const struct gm_loader *l, int *c, int *h, int *w);
int gm_loader_classes(const struct gm_loader *l);
void gm_loader_stats(const struct gm_loader *l, struct gm_loader_stats *st);

/* idx[0..n) < gm_loader_len(split), n <= max_batch (a violation aborts: programmer error). */
void gm_loader_prefetch(struct gm_loader *l, enum gm_split split, int epoch, const uint32_t *idx,
                        size_t n);
/* x: n * c*h*w floats, y: n labels. */
int gm_loader_batch(struct gm_loader *l, enum gm_split split, int epoch, const uint32_t *idx,
                    size_t n, float *x, int32_t *y) GM_MUST_CHECK;

/* The loader threads a spec of loader_threads = 0 gets on this machine. */
int gm_loader_default_threads(void);

#endif
