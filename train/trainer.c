/*
 * train/trainer.c - see trainer.h.
 *
 * Choices: a trailing partial training batch is dropped (ranks stay in
 * lockstep; PyTorch's drop_last=True); evaluation covers the whole test
 * split, in batches of the training batch size, the last one partial; the
 * dropout mask of step s is seeded by (job seed, s); BLAS gets job->threads
 * threads.  Loss and accuracy logged per epoch are means over that epoch.
 *
 * Checkpoints are written off the trainer thread: at a checkpoint step rank 0 copies what
 * goes into the file (the weights in PyTorch layout, the optimizer state, the codec state)
 * and hands the copy to a writer thread, which writes, hashes, prunes and calls
 * opts->on_checkpoint, while training goes on.  One write at a time: the next checkpoint (and
 * the end of the run, and teardown) first waits for the one before, so a checkpoint that
 * takes longer than checkpoint_every steps slows training instead of piling up copies.  The
 * log line says both times: copy_ms (what the step waits for) and write_ms.
 */
#include "train/trainer.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "train/data/data.h"
#include "train/data/loader.h"
#include "train/gradsync.h"
#include "train/kernels/cuda.h"
#include "train/nn/model.h"
#include "train/nn/optim.h"
#include "train/ckpt/ckpt.h"
#include "train/ckpt/safetensors.h"
#include "train/ckpt/weights.h"

struct run {
    const struct gm_job *job;
    const struct gm_train_opts *opts;
    struct gm_loader *data; /* owned: the batches (train/data/loader.h) */
    size_t n_train, n_test;
    int in_c, in_h, in_w;
    struct gm_sampler sampler;
    struct gm_sampler sampler_next; /* the next epoch's, for the prefetch across its start */
    struct gm_model *model;
    char why[256]; /* the model's reason when gm_model_new refuses the spec */
    char data_why[400]; /* the loader's, when its check refuses an image */
    struct gm_optim optim;
    struct gm_sched sched;
    int32_t *labels;    /* owned: one batch */
    uint32_t *eval_idx; /* owned */
    float *eval_keep;   /* owned: the replica's parameters while others are evaluated */
    size_t eval_keep_n; /* floats eval_keep holds */
    float *eval_bufs;   /* owned: an evaluation's buffers, 4 sets (shared_buffers: the first
                         * 3; refresh_bn: the replica's own kept in the fourth) */
    struct gm_train_state st;
    struct gm_device_choice device; /* where the model lives */
    struct gm_cuda *cu;             /* owned: this thread's CUDA context, on a GPU */
    int epoch;                      /* of the sampler's permutation */
    int epoch_next;                 /* of sampler_next's, -1: none yet */
    int max_batch;                  /* per-rank batch buffers */
    long steps_per_epoch;
    uint64_t t_start, last_bar;
    char job_hash[65];          /* the job's identity (gm_job): checkpoints name their job by it */
    long last_checkpoint;       /* step of the last checkpoint written, -1 */
    struct ckpt_write *writing; /* owned: the checkpoint the writer thread has, or NULL */
    unsigned regroups;          /* group states taken (run_hook's resyncs) */
    struct epoch_end *defer;    /* an epoch's evaluation put off (eval_defer), or NULL */
};

/* An epoch's end, to report: its evaluation runs at once, or at step at_step when the comm
 * puts it off (eval_defer) */
struct epoch_end {
    int epoch; /* 0-based */
    long step; /* steps done at its end */
    long at_step;
    unsigned regroups; /* the run's count when it ended */
    double loss, epoch_s, sps;
    uint64_t t_end;
    bool eval;  /* an evaluation is due */
    bool armed; /* put off: r->defer points here */
};

/* A checkpoint handed to the writer thread: every byte it writes is its own copy (names are
 * borrowed: the model's and the codec's, which outlive it since the run joins it first). */
struct ckpt_write {
    pthread_t th;
    const struct gm_train_opts *opts; /* borrowed */
    struct gm_st_tensor *t;           /* owned array, nt */
    size_t nt;
    float *weights, *state; /* owned copies: weights; optimizer then codec state */
    struct gm_ckpt_info info;
    const char *job_text; /* borrowed (the job's) */
    char path[GM_JOB_PATH_MAX + 64];
    char dir[GM_JOB_PATH_MAX];
    int keep;
    uint64_t t0, copy_ns;
};

void gm_train_share(int g, int world, int rank, int *off, int *n)
{
    int base = g / world, extra = g % world;

    *n = base + (rank < extra ? 1 : 0);
    *off = rank * base + (rank < extra ? rank : extra);
}

const char *gm_train_shares_text(const struct gm_train_state *st, char *buf, size_t len)
{
    int counts[GM_JOB_SHARES_MAX];
    size_t o = 0;

    buf[0] = '\0';
    if (st->world < 1 || st->world > GM_JOB_SHARES_MAX)
        return buf;
    gm_job_split_by(st->global_batch, st->world, st->share_n == st->world ? st->share_w : NULL,
                    counts);
    for (int i = 0; i < st->world && o + 1 < len; i++) {
        int k = snprintf(buf + o, len - o, "%s%d", i ? ":" : "", counts[i]);
        if (k < 0 || (size_t)k >= len - o)
            break;
        o += (size_t)k;
    }
    return buf;
}

void gm_train_share_by(int g, int world, const uint32_t *w, int rank, int *off, int *n)
{
    int counts[GM_JOB_SHARES_MAX];

    if (w == NULL || world > GM_JOB_SHARES_MAX) {
        gm_train_share(g, world, rank, off, n);
        return;
    }
    gm_job_split_by(g, world, w, counts);
    *off = 0;
    for (int i = 0; i < rank; i++)
        *off += counts[i];
    *n = counts[rank];
}

static void progress_bar(struct run *r, long step_in_epoch, double loss, double sps, int final)
{
    char bar[31];
    const long total = r->steps_per_epoch;
    const int fill = total > 0 ? (int)(30 * step_in_epoch / total) : 30;
    const long left_steps = r->st.total_steps - r->st.step;
    const double eta = sps > 0 ? (double)left_steps * r->st.global_batch / sps : 0;
    uint64_t now = gm_time_mono_ns();

    if (!final && now - r->last_bar < 100000000ull)
        return;
    r->last_bar = now;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\repoch %d/%d [%s] %3d%% step %ld loss %.4f %6.0f samples/s ETA %d:%02d ",
            r->epoch + 1, r->job->epochs, bar, total > 0 ? (int)(100 * step_in_epoch / total) : 100,
            r->st.step, loss, sps, (int)eta / 60, (int)eta % 60);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

/* The model as it is on test samples [lo, hi): the sum of their losses and how many it got
 * right. */
static int eval_range(struct run *r, size_t lo, size_t hi, double *loss_sum, long *correct_total)
{
    const int bmax = gm_model_max_batch(r->model);
    int dev_err;

    *loss_sum = 0;
    *correct_total = 0;
    for (size_t i = lo; i < hi; i++)
        r->eval_idx[i] = (uint32_t)i;
    for (size_t off = lo; off < hi; off += (size_t)bmax) {
        int n = (int)(hi - off < (size_t)bmax ? hi - off : (size_t)bmax);
        long correct = 0;
        int err;
        if (off + (size_t)n < hi) /* the next batch decodes while this one runs */
            gm_loader_prefetch(r->data, GM_SPLIT_TEST, 0, r->eval_idx + off + (size_t)n,
                               hi - off - (size_t)n < (size_t)bmax ? hi - off - (size_t)n
                                                                   : (size_t)bmax);
        if ((err = gm_loader_batch(r->data, GM_SPLIT_TEST, 0, r->eval_idx + off, (size_t)n,
                                   gm_model_input(r->model), r->labels)) < 0)
            return err; /* logged with the file */
        if ((err = gm_model_forward(r->model, n, 0, 0)) < 0)
            return err;
        *loss_sum += gm_model_loss(r->model, n, r->labels, &correct) * n;
        *correct_total += correct;
    }
    if ((dev_err = gm_model_take_error(r->model)) < 0) /* a device error (logged) */
        return dev_err;
    return 0;
}

static int evaluate_replica(struct run *r, double *acc, double *loss)
{
    const size_t n_test = r->n_test;
    long correct_total;
    double loss_sum;
    int err;

    if ((err = eval_range(r, 0, n_test, &loss_sum, &correct_total)) < 0)
        return err;
    *acc = n_test > 0 ? 100.0 * (double)correct_total / (double)n_test : 0;
    *loss = n_test > 0 ? loss_sum / (double)n_test : 0;
    return 0;
}

static bool eval_sharded(const struct run *r)
{
    const struct gm_train_comm *comm = r->opts->comm;

    return comm != NULL && comm->eval_sum != NULL && comm->eval_bcast != NULL && r->st.world > 1;
}

/* The floats of the model's buffers (batch norm's running statistics), all together. */
static size_t buffers_len(const struct gm_model *m)
{
    size_t n = 0;

    for (size_t i = 0; i < gm_model_num_buffers(m); i++)
        n += gm_model_buffer_len(m, i);
    return n;
}

/* The model's buffers, one after another, from buf into the model (to_model) or out to it. */
static int buffers_io(struct gm_model *m, float *buf, bool to_model)
{
    int err;

    for (size_t i = 0; i < gm_model_num_buffers(m); i++) {
        err = to_model ? gm_model_import_buffer(m, i, buf) : gm_model_export_buffer(m, i, buf);
        if (err < 0)
            return err;
        buf += gm_model_buffer_len(m, i);
    }
    return 0;
}

/* r->eval_bufs: 4 sets of nb floats (the model's buffers, buffers_len). */
static int eval_bufs_alloc(struct run *r, size_t nb)
{
    if (r->eval_bufs == NULL && (r->eval_bufs = malloc(4 * nb * sizeof(float))) == NULL)
        return -ENOMEM;
    return 0;
}

/* Batch norm's running statistics refreshed for the parameters in place (an evaluation's,
 * not this replica's own: DiLoCo's outer parameters): [comm] bn_refresh training forwards,
 * this rank's share of the first steps of the sampler's epoch, their pixels as in training,
 * each moving the statistics by batch norm's momentum (0.1) toward its batch's.  The
 * statistics a replica carries follow its own parameters, which the inner steps since the
 * last outer update have moved away from the outer ones: evaluated with them, the outer
 * parameters read several points low (docs/BENCHMARKS.md, "Batch norm's statistics
 * refreshed").  No gradient, no optimizer step: the caller puts the replica's own statistics
 * back after the evaluation. */
static int refresh_bn(struct run *r)
{
    const int G = r->st.global_batch;
    const long k_n =
        r->job->comm.bn_refresh < r->steps_per_epoch ? r->job->comm.bn_refresh : r->steps_per_epoch;
    const uint64_t t0 = gm_time_mono_ns();
    int off, n, err;

    gm_train_share_by(G, r->st.world, r->st.share_n == r->st.world ? r->st.share_w : NULL,
                      r->st.rank, &off, &n);
    if (n < 1 || n > r->max_batch || r->epoch < 0)
        return 0; /* no share this rank can hold (the step would have said): nothing run */
    for (long k = 0; k < k_n; k++) {
        const uint32_t *idx = gm_sampler_indices(&r->sampler) + (size_t)k * (size_t)G + off;

        if (k + 1 < k_n) /* the next batch decodes while this one runs */
            gm_loader_prefetch(r->data, GM_SPLIT_TRAIN, r->epoch, idx + G, (size_t)n);
        if ((err = gm_loader_batch(r->data, GM_SPLIT_TRAIN, r->epoch, idx, (size_t)n,
                                   gm_model_input(r->model), r->labels)) < 0)
            return err; /* logged with the file */
        if ((err = gm_model_forward(r->model, n, 1,
                                    r->job->seed * 0x9e3779b97f4a7c15ull + 0x5bd1e995u +
                                        (uint64_t)k)) < 0)
            return err;
    }
    if ((err = gm_model_take_error(r->model)) < 0) /* a device error (logged) */
        return err;
    gm_info("event=bn-refresh rank=%d step=%ld batches=%ld samples=%ld s=%.2f", r->st.rank,
            r->st.step, k_n, k_n * n, (double)(gm_time_mono_ns() - t0) * 1e-9);
    return 0;
}

/* The buffers (batch norm's running statistics) a shared evaluation runs with, into
 * bufs[0, nb), from this rank's own in bufs[nb, 2 nb) (bufs[2 nb, 3 nb): scratch): the ranks'
 * mean, each weighted by its share of the global batch, when the comm sums floats
 * (eval_fsum), else rank 0's.  Each rank's statistics follow its own batches and, under
 * DiLoCo, its own parameters, while the evaluation is of the parameters every rank agrees on
 * (the outer ones): rank 0's alone fit them less well than the mean (docs/BENCHMARKS.md,
 * "Batch norm's statistics").  The mean is rank 0's plus the weighted sum of each rank's
 * difference from them, so that statistics alike on every rank (a frozen batch norm's) stay
 * as they are, bit for bit. */
static int shared_buffers(struct run *r, float *bufs, size_t nb)
{
    const struct gm_train_comm *comm = r->opts->comm;
    float *mean = bufs, *own = bufs + nb, *d = bufs + 2 * nb;
    double w = 1.0 / r->st.world, total = 0;
    int err;

    memcpy(mean, own, nb * sizeof(float));
    if ((err = comm->eval_bcast(comm->ctx, r->st.step, mean, nb)) < 0 || comm->eval_fsum == NULL)
        return err;
    if (r->st.share_n == r->st.world) {
        for (int i = 0; i < r->st.share_n; i++)
            total += r->st.share_w[i];
        if (total > 0)
            w = r->st.share_w[r->st.rank] / total;
    }
    for (size_t i = 0; i < nb; i++)
        d[i] = (float)(w * ((double)own[i] - (double)mean[i]));
    if ((err = comm->eval_fsum(comm->ctx, r->st.step, d, nb)) < 0)
        return err;
    for (size_t i = 0; i < nb; i++)
        mean[i] += d[i];
    return 0;
}

/* This rank's slice of a sharded evaluation (train/trainer.h eval_sum), with the ranks'
 * buffers (shared_buffers), in proportion to its share of the global batch; its sums over
 * every rank's slice.  The rank's own buffers are put back after, but at the run's end: the
 * weights then written are those evaluated, buffers and all. */
static int evaluate_shard(struct run *r, double *acc, double *loss)
{
    const struct gm_train_comm *comm = r->opts->comm;
    const size_t nb = buffers_len(r->model);
    const bool end = r->st.total_steps > 0 && r->st.step >= r->st.total_steps;
    double v[2] = {0, 0};
    long correct = 0;
    int off, cnt, err = 0, err2;

    if (r->n_test > (size_t)INT32_MAX)
        return -EINVAL;
    if (nb > 0) { /* this rank's own kept in the second set */
        if ((err = eval_bufs_alloc(r, nb)) < 0)
            return err;
        if ((err = buffers_io(r->model, r->eval_bufs + nb, false)) < 0)
            return err;
        if ((err = shared_buffers(r, r->eval_bufs, nb)) < 0 ||
            (err = buffers_io(r->model, r->eval_bufs, true)) < 0)
            goto out;
    }
    /* slices as the global batch is split (its shares follow the ranks' measured speeds):
     * a slower rank evaluates less */
    gm_train_share_by((int)r->n_test, r->st.world,
                      r->st.share_n == r->st.world ? r->st.share_w : NULL, r->st.rank, &off, &cnt);
    if ((err = eval_range(r, (size_t)off, (size_t)off + (size_t)cnt, &v[0], &correct)) < 0)
        goto out;
    v[1] = (double)correct;
    if ((err = comm->eval_sum(comm->ctx, r->st.step, v, 2)) < 0)
        goto out;
    *acc = r->n_test > 0 ? 100.0 * v[1] / (double)r->n_test : 0;
    *loss = r->n_test > 0 ? v[0] / (double)r->n_test : 0;
out:
    if (nb > 0 && (err != 0 || !end) &&
        (err2 = buffers_io(r->model, r->eval_bufs + nb, true)) < 0 && err == 0)
        err = err2;
    return err;
}

/* A test evaluation: of this replica's parameters, or of those the comm's eval_params names
 * (DiLoCo's outer parameters), put in their place for it and the replica's own put back
 * after, bit for bit: training goes on from them.  The buffers (batch norm's running
 * statistics) are this replica's alone, the ranks' mean when shared (shared_buffers).  shard: every
 * rank calls this at the same evaluation and evaluates its slice (evaluate_shard). */
static int evaluate_replica_or_shard(struct run *r, bool shard, double *acc, double *loss)
{
    return shard ? evaluate_shard(r, acc, loss) : evaluate_replica(r, acc, loss);
}

static int evaluate_as(struct run *r, bool shard, double *acc, double *loss)
{
    const struct gm_train_comm *comm = r->opts->comm;
    const size_t nb = buffers_len(r->model);
    const bool end = r->st.total_steps > 0 && r->st.step >= r->st.total_steps;
    const float *other = NULL;
    float *p = gm_model_params(r->model);
    size_t n = 0;
    bool refresh;
    int err, err2;

    if (comm != NULL && comm->eval_params != NULL)
        other = comm->eval_params(comm->ctx, &n);
    if (other == NULL || n == 0)
        return evaluate_replica_or_shard(r, shard, acc, loss);
    if (n > gm_model_num_params(r->model))
        return -EINVAL;
    if (r->eval_keep_n < n) {
        free(r->eval_keep);
        r->eval_keep_n = 0;
        if ((r->eval_keep = malloc(n * sizeof(float))) == NULL)
            return -ENOMEM;
        r->eval_keep_n = n;
    }
    if ((err = gm_model_params_to_host(r->model)) < 0)
        return err;
    memcpy(r->eval_keep, p, n * sizeof(float));
    memcpy(p, other, n * sizeof(float));
    /* batch norm's statistics for these parameters, not for this replica's own (refresh_bn);
     * the own put back after but at the run's end: the weights then written carry those
     * evaluated */
    refresh = nb > 0 && r->job->comm.bn_refresh > 0 && gm_model_bn_trainable(r->model) > 0;
    err = 0;
    if (refresh && ((err = eval_bufs_alloc(r, nb)) < 0 ||
                    (err = buffers_io(r->model, r->eval_bufs + 3 * nb, false)) < 0))
        refresh = false; /* nothing kept: nothing to put back */
    if (err == 0 && (err = gm_model_params_to_device(r->model)) == 0 &&
        (!refresh || (err = refresh_bn(r)) == 0))
        err = evaluate_replica_or_shard(r, shard, acc, loss);
    if (refresh && (err != 0 || !end) &&
        (err2 = buffers_io(r->model, r->eval_bufs + 3 * nb, true)) < 0 && err == 0)
        err = err2;
    memcpy(p, r->eval_keep, n * sizeof(float));
    err2 = gm_model_params_to_device(r->model);
    return err < 0 ? err : err2;
}

/* Rank 0's evaluation, alone. */
static int evaluate(struct run *r, double *acc, double *loss)
{
    return evaluate_as(r, false, acc, loss);
}

/* An epoch's evaluation, which every rank reaches at the same step: shared when the comm
 * shares evaluations (the ranks' slices), else rank 0's alone (the others return 0 at once,
 * acc and loss untouched).  A shared one that fails on the group (a rank lost) is rank 0's
 * alone; the group's failure reaches the next step's collective as it would have. */
static int evaluate_epoch(struct run *r, double *acc, double *loss)
{
    int err;

    if (!eval_sharded(r))
        return r->st.rank == 0 ? evaluate(r, acc, loss) : 0;
    err = evaluate_as(r, true, acc, loss);
    if (err != GM_ERR_REGROUP && err != GM_ERR_ABORTED)
        return err;
    gm_warn("event=eval-shared-failed rank=%d step=%ld err=\"%s\"%s", r->st.rank, r->st.step,
            gm_strerror(err), r->st.rank == 0 ? ": rank 0 evaluates alone" : "");
    return r->st.rank == 0 ? evaluate(r, acc, loss) : 0;
}

/* The weights as safetensors tensors in PyTorch layout: t[0..nt) point into *buf (owned by
 * the caller), which holds the exported copy.  -ENOMEM. */
/* The model's tensors as safetensors entries, t[0 .. *count): the parameters,
 * then the buffers (batch norm running statistics), under PyTorch's names.  t
 * has room for gm_model_num_tensors + gm_model_num_buffers entries; *buf
 * (owned by the caller) holds their data. */
static int weight_tensors(struct gm_model *m, struct gm_st_tensor *t, float **buf, size_t *count)
{
    const size_t nt = gm_model_num_tensors(m), nb = gm_model_num_buffers(m);
    size_t nbuf = 0, off;
    int err;

    for (size_t i = 0; i < nb; i++)
        nbuf += gm_model_buffer_len(m, i);
    if ((err = gm_model_params_to_host(m)) < 0) /* a GPU's parameters, to the host view */
        return err;
    *buf = malloc((gm_model_num_params(m) + nbuf) * sizeof(float) + 1);
    if (*buf == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < nt; i++) {
        const struct gm_param_info *pi = gm_model_tensor(m, i);
        gm_model_export_tensor(m, i, gm_model_params(m), *buf + pi->offset);
        t[i].name = pi->name;
        t[i].data = *buf + pi->offset;
        t[i].ndim = pi->ndim;
        memcpy(t[i].shape, pi->shape, sizeof(int64_t) * (size_t)pi->ndim);
    }
    off = gm_model_num_params(m);
    for (size_t i = 0; i < nb; i++) {
        const struct gm_param_info *bi = gm_model_buffer(m, i);
        if ((err = gm_model_export_buffer(m, i, *buf + off)) < 0)
            return err;
        t[nt + i].name = bi->name;
        t[nt + i].data = *buf + off;
        t[nt + i].ndim = bi->ndim;
        memcpy(t[nt + i].shape, bi->shape, sizeof(int64_t) * (size_t)bi->ndim);
        off += gm_model_buffer_len(m, i);
    }
    *count = nt + nb;
    return 0;
}

static int save_weights(struct run *r, const char *path)
{
    struct gm_model *m = r->model;
    const size_t nt = gm_model_num_tensors(m) + gm_model_num_buffers(m);
    struct gm_st_tensor *t = calloc(nt, sizeof(*t));
    size_t n = 0;
    float *buf = NULL;
    char step[32], epoch[32], params[32];
    int err;

    if (t == NULL) {
        err = -ENOMEM;
        goto out;
    }
    if ((err = weight_tensors(m, t, &buf, &n)) < 0)
        goto out;
    snprintf(step, sizeof(step), "%ld", r->st.step);
    snprintf(epoch, sizeof(epoch), "%d", r->epoch);
    snprintf(params, sizeof(params), "%zu", gm_model_num_params(m));
    const struct gm_st_meta meta[] = {
        {"format", "pt"},
        {"producer", "gradmesh"},
        {"model", gm_job_model_name(r->job->model)},
        {"job", r->job->text != NULL ? r->job->text : ""},
        {"step", step},
        {"epoch", epoch},
        {"params", params},
    };
    err = gm_safetensors_write(path, t, n, meta, sizeof(meta) / sizeof(meta[0]));
out:
    free(t);
    free(buf);
    return err;
}

#define CODEC_TENSORS_MAX 72 /* PowerSGD or DiLoCo: 2, plus a simulation's 63 other errors */

static const char *ckpt_dir(const struct run *r)
{
    return r->opts->ckpt_dir != NULL ? r->opts->ckpt_dir : r->job->checkpoint_dir;
}

static void ckpt_write_free(struct ckpt_write *w)
{
    if (w == NULL)
        return;
    free(w->t);
    free(w->weights);
    free(w->state);
    free(w);
}

/* Writer thread: writes w, prunes, tells opts->on_checkpoint.  Errors are logged: a
 * checkpoint that cannot be written (a full disk) does not stop training; the one before
 * stays the newest, and the next one is tried at its step. */
static void *ckpt_writer(void *arg)
{
    struct ckpt_write *w = arg;
    char sha[65];
    int err = gm_ckpt_write(w->path, w->t, w->nt, &w->info, w->job_text, sha);

    if (err < 0) {
        gm_warn("event=checkpoint-failed step=%ld err=\"%s\": training goes on; the previous "
                "checkpoint stays the newest",
                w->info.step, gm_strerror(err));
        if (w->opts->on_checkpoint_failed != NULL)
            w->opts->on_checkpoint_failed(w->opts->ckpt_ctx, w->path, w->info.step, err);
        return NULL;
    }
    gm_info("event=checkpoint step=%ld path=%s sha256=%s write_ms=%.1f copy_ms=%.1f", w->info.step,
            w->path, sha, (double)(gm_time_mono_ns() - w->t0) * 1e-6, (double)w->copy_ns * 1e-6);
    if (gm_ckpt_dir_prune(w->dir, w->keep) < 0)
        gm_warn("event=checkpoint-prune-failed dir=%s", w->dir); /* the new one stands */
    if (w->opts->on_checkpoint != NULL)
        w->opts->on_checkpoint(w->opts->ckpt_ctx, w->path, sha, w->info.step);
    return NULL;
}

/* Waits for the checkpoint being written, if any. */
static void checkpoint_wait(struct run *r)
{
    if (r->writing == NULL)
        return;
    pthread_join(r->writing->th, NULL);
    ckpt_write_free(r->writing);
    r->writing = NULL;
}

/* Copies the checkpoint of the current step (rank 0) and starts its write.  Errors are
 * logged. */
static int write_checkpoint(struct run *r)
{
    const struct gm_train_comm *comm = r->opts->comm;
    struct gm_model *m = r->model;
    const size_t nw = gm_model_num_tensors(m) + gm_model_num_buffers(m);
    struct ckpt_write *w = calloc(1, sizeof(*w));
    const char *codec = "";
    struct gm_st_tensor codec_t[CODEC_TENSORS_MAX];
    size_t nc = 0, nstate, off;
    int err;

    checkpoint_wait(r);
    if (w == NULL || (w->t = calloc(nw + 1 + CODEC_TENSORS_MAX, sizeof(*w->t))) == NULL) {
        ckpt_write_free(w);
        return -ENOMEM;
    }
    w->t0 = gm_time_mono_ns();
    w->opts = r->opts;
    w->job_text = r->job->text;
    w->keep = r->job->checkpoint_keep;
    w->nt = nw;
    snprintf(w->dir, sizeof(w->dir), "%s", ckpt_dir(r));
    if ((err = gm_ckpt_mkdirs(w->dir)) < 0) {
        gm_err("%s: cannot create the checkpoint directory: %s", w->dir, gm_strerror(err));
        goto fail;
    }
    if ((err = gm_ckpt_path(w->dir, r->st.step, w->path, sizeof(w->path))) < 0) {
        gm_err("%s: checkpoint directory name too long", w->dir);
        goto fail;
    }
    if ((err = weight_tensors(m, w->t, &w->weights, &w->nt)) < 0)
        goto fail;
    if ((err = gm_optim_state_to_host(&r->optim)) < 0)
        goto fail;
    if (comm != NULL && comm->codec_state != NULL)
        nc = comm->codec_state(comm->ctx, codec_t, CODEC_TENSORS_MAX, &codec);
    nstate = gm_optim_state_len(&r->optim);
    for (size_t i = 0; i < nc; i++)
        nstate += (size_t)codec_t[i].shape[0];
    w->state = malloc(nstate * sizeof(float) + 1);
    if (w->state == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    off = 0;
    if (gm_optim_state_len(&r->optim) > 0) {
        struct gm_st_tensor *t = &w->t[w->nt++];
        memcpy(w->state, gm_optim_state(&r->optim), gm_optim_state_len(&r->optim) * sizeof(float));
        t->name = GM_CKPT_OPTIM_TENSOR;
        t->data = w->state;
        t->ndim = 1;
        t->shape[0] = (int64_t)gm_optim_state_len(&r->optim);
        off = gm_optim_state_len(&r->optim);
    }
    for (size_t i = 0; i < nc; i++) { /* flat, each */
        struct gm_st_tensor *t = &w->t[w->nt++];
        *t = codec_t[i];
        memcpy(w->state + off, codec_t[i].data, (size_t)codec_t[i].shape[0] * sizeof(float));
        t->data = w->state + off;
        off += (size_t)codec_t[i].shape[0];
    }
    memcpy(w->info.job_hash, r->job_hash, sizeof(w->info.job_hash));
    snprintf(w->info.job_name, sizeof(w->info.job_name), "%s", r->job->name);
    snprintf(w->info.model, sizeof(w->info.model), "%s", gm_job_model_name(r->job->model));
    snprintf(w->info.optim, sizeof(w->info.optim), "%s", gm_job_optimizer_name(r->job->optim.name));
    snprintf(w->info.codec, sizeof(w->info.codec), "%s", codec);
    w->info.step = r->st.step;
    w->info.total_steps = r->st.total_steps;
    w->info.epoch = (int)(r->st.step / r->steps_per_epoch);
    w->info.data_offset = (r->st.step % r->steps_per_epoch) * r->st.global_batch;
    w->info.global_batch = r->st.global_batch;
    w->info.seed = r->job->seed;
    w->info.optim_step = r->optim.step;
    w->info.term = r->opts->term;
    w->info.params = gm_model_num_params(m);
    if (r->st.world > 1) /* the split of the step just taken: what the job ran on */
        gm_train_shares_text(&r->st, w->info.shares, sizeof(w->info.shares));
    w->copy_ns = gm_time_mono_ns() - w->t0;
    if ((err = pthread_create(&w->th, NULL, ckpt_writer, w)) != 0) {
        err = -err;
        gm_err("event=checkpoint-thread err=\"%s\"", gm_strerror(err));
        goto fail;
    }
    r->writing = w;
    r->last_checkpoint = r->st.step;
    return 0;
fail:
    ckpt_write_free(w);
    return err;
}

/* A checkpoint that cannot be started (no memory) does not stop training either. */
static void checkpoint(struct run *r)
{
    int err = write_checkpoint(r);

    if (err < 0) {
        gm_warn("event=checkpoint-failed step=%ld err=\"%s\": training goes on; the previous "
                "checkpoint stays the newest",
                r->st.step, gm_strerror(err));
        if (r->opts->on_checkpoint_failed != NULL)
            r->opts->on_checkpoint_failed(r->opts->ckpt_ctx, ckpt_dir(r), r->st.step, err);
    }
}

/* After a refused resume from want (a file, or a directory: its newest committed checkpoint):
 * when that checkpoint is intact and of another job, says which keys of the job it was
 * written by ("job" in its metadata) differ from this job's, so the refusal names them. */
static void explain_foreign(const struct run *r, const char *want)
{
    struct gm_ckpt_entry *v = NULL;
    struct gm_st_file f;
    struct gm_ckpt_info info;
    char path[GM_JOB_PATH_MAX + 64], diff[768];
    const char *text;
    struct stat st;
    size_t n = 0;
    int k;

    snprintf(path, sizeof(path), "%s", want);
    if (stat(want, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (gm_ckpt_dir_list(want, &v, &n) < 0)
            return;
        while (n > 0 && v[n - 1].sha256[0] == '\0')
            n--;
        if (n > 0)
            snprintf(path, sizeof(path), "%s", v[n - 1].path);
        free(v);
        if (n == 0)
            return;
    }
    if (gm_ckpt_load(path, NULL, NULL, &f, &info, NULL) != 0) /* logs why it refuses */
        return;
    text = gm_safetensors_meta(&f, "job");
    if (text != NULL && strcmp(info.job_hash, r->job_hash) != 0) {
        k = gm_job_diff(text, strlen(text), r->job->text != NULL ? r->job->text : "",
                        r->job->text != NULL ? r->job->text_len : 0, diff, sizeof(diff));
        if (k > 0)
            gm_err("%s: a checkpoint of job '%s' with other settings: %s; only [job] epochs may "
                   "change for a run to go on from its checkpoints",
                   path, info.job_name, diff);
        else if (k == 0)
            gm_err("%s: a checkpoint of job '%s' whose job file differs in comments, blank lines "
                   "or the order of lines only: use the file it was written with",
                   path, info.job_name);
    }
    gm_safetensors_free(&f);
}

/* Loads the checkpoint to resume from (opts->resume: a file, or a directory's newest valid
 * one); a refused file falls back to the newest valid one before it in its directory. */
static int load_resume(struct run *r, struct gm_st_file *f, struct gm_ckpt_info *info, char *path,
                       size_t cap)
{
    const char *want = r->opts->resume, *model = gm_job_model_name(r->job->model);
    struct stat st;
    char dir[GM_JOB_PATH_MAX];
    const char *slash;
    long step;
    int err;

    if (stat(want, &st) == 0 && S_ISDIR(st.st_mode) && r->opts->committed_only) {
        if (gm_ckpt_dir_newest_committed(want, r->opts->committed, r->opts->ncommitted, r->job_hash,
                                         model, f, info, path, cap) == 0)
            return 0;
        if (r->opts->resume_optional) {
            gm_info("event=resume-none dir=%s committed=%zu: no usable committed checkpoint of "
                    "job %s, starting at step 0",
                    want, r->opts->ncommitted, r->job->name);
            return 1;
        }
        gm_err("%s: no usable committed checkpoint of job %s to resume from", want, r->job->name);
        return GM_ERR_CONFIG;
    }
    if (stat(want, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (gm_ckpt_dir_newest(want, -1, r->job_hash, model, f, info, path, cap) == 0)
            return 0;
        if (r->opts->resume_optional) {
            gm_info("event=resume-none dir=%s: no usable checkpoint of job %s, starting at step 0",
                    want, r->job->name);
            return 1;
        }
        explain_foreign(r, want);
        gm_err("%s: no usable checkpoint of job %s to resume from", want, r->job->name);
        return GM_ERR_CONFIG;
    }
    if (r->opts->resume_optional) {
        gm_info("event=resume-none dir=%s: no checkpoints yet, starting at step 0", want);
        return 1;
    }
    snprintf(path, cap, "%s", want);
    if ((err = gm_ckpt_load(want, r->job_hash, model, f, info, NULL)) == 0)
        return 0;
    slash = strrchr(want, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash != NULL ? (int)(slash - want) : 1,
             slash != NULL ? want : ".");
    step = gm_ckpt_name_step(want);
    if (step > 0 &&
        gm_ckpt_dir_newest(dir, step - 1, r->job_hash, model, f, info, path, cap) == 0) {
        gm_warn("event=checkpoint-fallback refused=%s using=%s", want, path);
        return 0;
    }
    if (err == GM_ERR_MISMATCH) /* another job's (or model's): which keys differ */
        explain_foreign(r, want);
    gm_err("%s: cannot resume: the checkpoint is refused and no earlier one of job %s is usable",
           want, r->job->name);
    return GM_ERR_CONFIG;
}

/* Restores the weights, optimizer state and step from the checkpoint to resume from. */
static int resume(struct run *r)
{
    struct gm_model *m = r->model;
    struct gm_st_file f;
    struct gm_ckpt_info info;
    char path[GM_JOB_PATH_MAX + 64];
    float *tmp = NULL;
    const struct gm_st_entry *e;
    long spe;
    int err;

    if ((err = load_resume(r, &f, &info, path, sizeof(path))) != 0)
        return err < 0 ? err : 0; /* 1: nothing to resume from, start afresh */
    err = GM_ERR_CONFIG;
    /* total_steps may differ: [job] epochs is no part of the job's identity (extending a
     * run); the rest must match */
    if (info.global_batch != r->st.global_batch || info.params != gm_model_num_params(m) ||
        info.seed != r->job->seed) {
        gm_err("%s: cannot resume: checkpoint of global batch %d, %zu parameters, seed %llu; "
               "this run has %d, %zu, %llu",
               path, info.global_batch, info.params, (unsigned long long)info.seed,
               r->st.global_batch, gm_model_num_params(m), (unsigned long long)r->job->seed);
        goto out;
    }
    if (info.step > r->st.total_steps) {
        gm_err("%s: cannot resume: the checkpoint is at step %ld, past this run's last step %ld "
               "([job] epochs = %d): give at least the epochs it was written with",
               path, info.step, r->st.total_steps, r->job->epochs);
        goto out;
    }
    tmp = malloc(gm_model_num_params(m) * sizeof(float) + 1);
    if (tmp == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < gm_model_num_tensors(m); i++) {
        const struct gm_param_info *pi = gm_model_tensor(m, i);
        e = gm_safetensors_find(&f, pi->name);
        if (e == NULL || e->dtype != GM_ST_DTYPE_F32 || e->numel != (int64_t)pi->numel ||
            gm_safetensors_to_f32(e, tmp, pi->numel) != 0) {
            gm_err("%s: cannot resume: tensor %s is missing or not %zu F32 values", path, pi->name,
                   pi->numel);
            goto out;
        }
        gm_model_import_tensor(m, i, tmp, gm_model_params(m));
    }
    for (size_t i = 0; i < gm_model_num_buffers(m); i++) { /* batch norm running statistics */
        const struct gm_param_info *bi = gm_model_buffer(m, i);
        size_t len = gm_model_buffer_len(m, i);
        float *vals = malloc(len * sizeof(float) + 1);
        e = gm_safetensors_find(&f, bi->name);
        if (vals == NULL || e == NULL || e->dtype != GM_ST_DTYPE_F32 || e->numel != (int64_t)len ||
            gm_safetensors_to_f32(e, vals, len) != 0 || gm_model_import_buffer(m, i, vals) != 0) {
            gm_err("%s: cannot resume: buffer %s is missing or not %zu F32 values", path, bi->name,
                   len);
            free(vals);
            goto out;
        }
        free(vals);
    }
    if (gm_optim_state_len(&r->optim) > 0) {
        e = gm_safetensors_find(&f, GM_CKPT_OPTIM_TENSOR);
        if (e == NULL || e->dtype != GM_ST_DTYPE_F32 ||
            gm_safetensors_to_f32(e, gm_optim_state(&r->optim), gm_optim_state_len(&r->optim)) !=
                0) {
            gm_err("%s: cannot resume: no optimizer state of %zu F32 values (%s)", path,
                   gm_optim_state_len(&r->optim), info.optim);
            goto out;
        }
    }
    if (gm_model_params_to_device(m) < 0 || gm_optim_state_to_device(&r->optim) < 0) {
        gm_err("%s: cannot resume: the state does not reach the device", path);
        goto out;
    }
    if (r->opts->comm != NULL && r->opts->comm->codec_restore != NULL &&
        (err = r->opts->comm->codec_restore(r->opts->comm->ctx, &f, info.codec, path)) < 0)
        goto out;
    err = GM_ERR_CONFIG;
    r->optim.step = info.optim_step;
    r->st.step = info.step;
    r->last_checkpoint = info.step;
    err = 0;
    if (r->st.rank == 0)
        gm_info("event=resume path=%s step=%ld epoch=%d data_offset=%ld optim_step=%ld term=%llu "
                "shares=%s",
                path, info.step, info.epoch + 1, info.data_offset, info.optim_step,
                (unsigned long long)info.term, info.shares[0] ? info.shares : "-");
    spe = r->steps_per_epoch > 0 ? r->steps_per_epoch : 1;
    if (r->st.rank == 0 && info.total_steps != r->st.total_steps)
        gm_notice("event=resume-extend path=%s step=%ld from_steps=%ld steps=%ld from_epochs=%ld "
                  "epochs=%d: %s from %ld to %d epochs",
                  path, info.step, info.total_steps, r->st.total_steps, info.total_steps / spe,
                  r->job->epochs, info.total_steps < r->st.total_steps ? "extending" : "shortening",
                  info.total_steps / spe, r->job->epochs);
out:
    free(tmp);
    gm_safetensors_free(&f);
    return err;
}

/* Builds the model on the chosen device.  A GPU: this (the trainer) thread creates the
 * CUDA context first and owns it.  auto falls back to the CPU, saying why, when the context
 * or the model cannot be made on the GPU (out of memory: the asked and free sizes are in the
 * log line before); cuda[:N] fails with that error, exit 78 (a configuration error) when the
 * context cannot be made: a CUDA library that does not load, say. */
static int model_on_device(struct run *r, struct gm_model_spec *ms)
{
    int err = 0, no_ctx = 0;

    if (r->device.device == GM_DEVICE_CUDA) {
        ms->device = GM_DEVICE_CUDA;
        err = gm_cuda_new(r->device.index, &r->cu);
        no_ctx = err < 0; /* the device cannot be had: cuBLAS or cuDNN missing, say */
        if (err == 0)
            err = gm_model_new(ms, r->max_batch, &r->model);
        if (err < 0 && err != -EINVAL) {
            char reason[768];
            /* no context: gm_cuda_new failed; the thread's last CUDA error says why */
            const char *last = gm_cuda_last_error(r->cu);
            snprintf(reason, sizeof(reason), "%s", last[0] ? last : gm_strerror(err));
            gm_cuda_free(r->cu);
            r->cu = NULL;
            if (r->job->device.want != GM_DEVICE_WANT_AUTO) {
                gm_err("event=device device=cuda:%d: the model cannot run on the GPU: %s",
                       r->device.index, reason);
                /* like a GPU that does not answer (gm_device_choose): exit 78 */
                return no_ctx ? GM_ERR_CONFIG : err;
            }
            gm_notice("event=device device=cpu setting=auto reason=\"the model cannot run on "
                      "cuda:%d: %s\"",
                      r->device.index, reason);
            r->device.device = GM_DEVICE_CPU;
            r->device.index = -1;
        }
    }
    if (r->device.device == GM_DEVICE_CPU) {
        ms->device = GM_DEVICE_CPU;
        err = gm_model_new(ms, r->max_batch, &r->model);
    }
    if (err == -EINVAL || err == GM_ERR_CONFIG) {
        /* the family's reason names the layer, the size or the freeze prefix */
        gm_err("job: model %s on the data's %dx%dx%d images ([data] image_size, pad): %s", ms->name,
               ms->in_c, ms->in_h, ms->in_w, ms->why != NULL ? ms->why : "");
        return GM_ERR_CONFIG;
    }
    return err;
}

/* The loader's spec of the job's [data] (the run and gm_trainer_check open it alike). */
static void data_spec(const struct gm_job *job, struct gm_data_spec *ds, char *why, size_t why_len)
{
    *ds = (struct gm_data_spec){
        .kind = gm_job_data_kind_name(job->data.kind),
        .dir = job->data.dir,
        .test_split = job->data.test_split,
        .image_size = job->data.image_size,
        .channels = job->data.channels,
        .seed = job->seed,
        .pad = job->data.pad,
        .train_dir = job->data.train_dir[0] ? job->data.train_dir : NULL,
        .val_dir = job->data.val_dir[0] ? job->data.val_dir : NULL,
        .crop = job->data.augment == GM_JOB_AUGMENT_CROP ||
                job->data.augment == GM_JOB_AUGMENT_CROP_FLIP,
        .flip = job->data.augment == GM_JOB_AUGMENT_FLIP ||
                job->data.augment == GM_JOB_AUGMENT_CROP_FLIP,
        .crop_scale = {job->data.crop_scale.v[0], job->data.crop_scale.v[1]},
        .crop_ratio = {job->data.crop_ratio.v[0], job->data.crop_ratio.v[1]},
        .resize = job->data.resize,
        .cache = job->data.cache,
        .loader_threads = job->data.loader_threads,
        .prefetch = job->data.prefetch,
        .skip_bad = job->data.skip_bad,
        .why = why,
        .why_len = why_len,
    };
    if (job->data.normalize == GM_JOB_NORMALIZE_IMAGENET) {
        static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
        ds->norm_n = 3;
        memcpy(ds->mean, mean, sizeof(mean));
        memcpy(ds->std, std, sizeof(std));
    } else if (job->data.mean.n > 0) {
        ds->norm_n = job->data.mean.n;
        for (int i = 0; i < ds->norm_n; i++) {
            ds->mean[i] = (float)job->data.mean.v[i];
            ds->std[i] = (float)job->data.std.v[i];
        }
    }
}

/* The floats of the optimizer state for n trainable parameters (train/nn/optim.h layout). */
static size_t optim_floats(const struct gm_job *job, size_t n)
{
    if (job->optim.name == GM_JOB_OPTIMIZER_ADAM)
        return 2 * n;
    return job->optim.momentum > 0 ? n : 0;
}

/* About the bytes of one checkpoint of m (gm_ckpt_write): weights, buffers and optimizer
 * state as float32, a header entry for each tensor and the job's text; a little over the
 * file (a codec's state, PowerSGD's or DiLoCo's, is not known before the run and left out). */
static uint64_t ckpt_bytes(const struct gm_model *m, const struct gm_job *job)
{
    uint64_t floats = gm_model_num_params(m) + optim_floats(job, gm_model_num_trainable(m));
    uint64_t nt = gm_model_num_tensors(m) + gm_model_num_buffers(m) + 1;

    for (size_t i = 0; i < gm_model_num_buffers(m); i++)
        floats += gm_model_buffer_len(m, i);
    return 4 * floats + 192 * nt + 2 * (uint64_t)job->text_len + 4096;
}

/* Samples for at least one global batch g, else the line `train --local` prints. */
static int enough_samples(const struct gm_job *job, size_t n_train, int g)
{
    if (n_train >= (size_t)g)
        return 0;
    gm_err("%s: %zu training samples, fewer than one global batch of %d", job->data.dir, n_train,
           g);
    return GM_ERR_CONFIG;
}

int gm_trainer_ckpt_space(const char *dir, uint64_t each, int keep, uint64_t *need, uint64_t *avail)
{
    int err;

    struct gm_ckpt_entry *e = NULL;
    uint64_t held = 0;
    size_t n = 0;

    *need = each * (uint64_t)(keep + 1);    /* the newest keep, and the next one being written */
    if (gm_ckpt_dir_list(dir, &e, &n) == 0) /* a job's earlier ones give their room back */
        for (size_t i = 0; i < n && i < (size_t)keep; i++)
            held += e[i].bytes > 0 ? (uint64_t)e[i].bytes : 0;
    free(e);
    *need = *need > held ? *need - held : 0;
    if ((err = gm_ckpt_free_bytes(dir, avail)) < 0) {
        gm_warn("event=checkpoint-space dir=%s err=\"%s\": free space unknown, not checked", dir,
                gm_strerror(err));
        *avail = UINT64_MAX;
        return 0;
    }
    if (*avail >= *need)
        return 0;
    gm_err("%s: no room for the job's checkpoints: %d kept and the one being written need "
           "about %.1f MB (%.1f MB each), %.1f MB free there; free some space, lower "
           "[job] checkpoint_keep or set checkpoint_every = 0",
           dir, keep, (double)*need / 1e6, (double)each / 1e6, (double)*avail / 1e6);
    return -ENOSPC;
}

int gm_trainer_check(const struct gm_job *job, int world, struct gm_train_check *out)
{
    struct gm_data_spec ds;
    struct gm_model_spec ms = {0};
    struct gm_loader *data = NULL;
    struct gm_model *model = NULL;
    struct gm_sched sc = {0};
    char why[512] = "";
    int g, in_c, in_h, in_w, err;

    memset(out, 0, sizeof(*out));
    if ((err = gm_job_global_batch(job, world, &g)) < 0)
        return err; /* logged, with the job and the world */
    data_spec(job, &ds, NULL, 0); /* a refused image: the loader's logged line says it */
    if ((err = gm_loader_new(&ds, 1, &data)) < 0)
        return err; /* logged by the loader, with the file name */
    out->n_train = gm_loader_len(data, GM_SPLIT_TRAIN);
    out->global_batch = g;
    gm_loader_shape(data, &in_c, &in_h, &in_w);
    if ((err = enough_samples(job, out->n_train, g)) < 0)
        goto out;
    if ((err = gm_job_model_spec(job, in_c, in_h, in_w, gm_loader_classes(data), &ms)) < 0)
        goto out;
    ms.why = why;
    ms.why_len = sizeof(why);
    ms.device = GM_DEVICE_CPU; /* the shapes and sizes; the device is each rank's own */
    if ((err = gm_model_new(&ms, 1, &model)) < 0) {
        gm_err("job: model %s on the data's %dx%dx%d images ([data] image_size, pad): %s", ms.name,
               ms.in_c, ms.in_h, ms.in_w, why);
        err = err == -EINVAL ? GM_ERR_CONFIG : err;
        goto out;
    }
    out->ckpt_bytes = ckpt_bytes(model, job);
    sc.kind = job->schedule.kind == GM_JOB_SCHEDULE_KIND_STEP     ? GM_SCHED_STEP
              : job->schedule.kind == GM_JOB_SCHEDULE_KIND_COSINE ? GM_SCHED_COSINE
                                                                  : GM_SCHED_CONSTANT;
    sc.base_lr = (float)job->optim.lr;
    sc.warmup_steps = job->schedule.warmup_steps;
    sc.step_size = job->schedule.step_size;
    sc.gamma = (float)job->schedule.gamma;
    sc.min_lr = (float)job->schedule.min_lr;
    sc.total_steps = (long)(out->n_train / (size_t)g) * job->epochs;
    if (gm_sched_check(&sc) < 0) {
        gm_err("job: invalid [schedule] for %ld total steps", sc.total_steps);
        err = GM_ERR_CONFIG;
    }
out:
    gm_model_free(model);
    gm_loader_free(data);
    return err;
}

static int setup(struct run *r)
{
    const struct gm_job *job = r->job;
    struct gm_data_spec ds;
    struct gm_model_spec ms = {0};
    struct gm_optim_config oc = {0};
    int err;

    const struct gm_train_comm *comm = r->opts->comm;
    const int world = comm != NULL ? comm->world : 1;
    const int min_world = comm != NULL && comm->min_world > 0 ? comm->min_world : world;
    int g;

    if (job->shares.mode == GM_JOB_SHARES_FIXED && job->shares.n != world &&
        job->optim.global_batch > 0)
        g = job->optim.global_batch; /* the agent: its first group says the world (the
                                      * coordinator checked the shares at submit) */
    else if ((err = gm_job_global_batch(job, world, &g)) < 0)
        return err;
    r->st.global_batch = g;
    r->st.rank = comm != NULL ? comm->rank : 0;
    r->st.world = world;
    r->max_batch = (g + min_world - 1) / min_world;
    if (job->shares.mode == GM_JOB_SHARES_FIXED && job->shares.n == world) {
        int counts[GM_JOB_SHARES_MAX];
        gm_job_split(job, g, world, counts);
        for (int i = 0; i < world; i++)
            r->max_batch = counts[i] > r->max_batch ? counts[i] : r->max_batch;
    }
    data_spec(job, &ds, r->data_why, sizeof(r->data_why));
    if ((err = gm_loader_new(&ds, r->max_batch, &r->data)) < 0)
        return err; /* logged by the loader, with the file name */
    r->n_train = gm_loader_len(r->data, GM_SPLIT_TRAIN);
    r->n_test = gm_loader_len(r->data, GM_SPLIT_TEST);
    gm_loader_shape(r->data, &r->in_c, &r->in_h, &r->in_w);
    if ((err = enough_samples(job, r->n_train, g)) < 0)
        return err;
    err = gm_job_model_spec(job, r->in_c, r->in_h, r->in_w, gm_loader_classes(r->data), &ms);
    if (err < 0)
        return err;
    ms.why = r->why;
    ms.why_len = sizeof(r->why);
    /* auto takes a GPU only when the model's layers can run there (logged either way) */
    char why[400];
    if (gm_device_choose(&job->device, gm_device_available(GM_DEVICE_CUDA), &r->device, why,
                         sizeof(why)) < 0)
        return GM_ERR_CONFIG; /* logged with the reason */
    if ((err = model_on_device(r, &ms)) < 0)
        return err;
    if (job->optim.precision != GM_JOB_PRECISION_FP32) {
        /* The CPU computes in fp32 only: Debian's OpenBLAS has no bf16 GEMM (sbgemm), so bf16
         * there would be casts around fp32 arithmetic, slower and no smaller.  On CUDA the
         * bf16 convolutions and products are not written yet (the casts and the updates
         * that keep fp32 masters are: train/kernels/kfn.h). */
        if (r->device.device == GM_DEVICE_CPU)
            gm_err("job: [optim] precision = %s needs a GPU (device = cuda): the CPU trains "
                   "in fp32 only; set precision = fp32",
                   gm_job_precision_name(job->optim.precision));
        else
            gm_err("job: [optim] precision = %s on cuda:%d: not implemented yet in this "
                   "build (the bf16 convolutions and matrix products); set precision = fp32",
                   gm_job_precision_name(job->optim.precision), r->device.index);
        return GM_ERR_CONFIG;
    }
    gm_model_init_params(r->model, job->seed);
    if ((err = gm_model_take_error(r->model)) < 0)
        return err;
    /* [model] init: a refusal is one line naming the file and the tensors (exit 78) */
    if (job->init[0] != '\0' &&
        (err = gm_weights_load(r->model, ms.name, job->init, job->seed)) < 0)
        return err;

    oc.kind = job->optim.name == GM_JOB_OPTIMIZER_ADAM ? GM_OPTIM_ADAM : GM_OPTIM_SGD;
    oc.momentum = (float)job->optim.momentum;
    oc.nesterov = job->optim.nesterov;
    oc.weight_decay = (float)job->optim.weight_decay;
    oc.beta1 = (float)job->optim.beta1;
    oc.beta2 = (float)job->optim.beta2;
    oc.eps = (float)job->optim.eps;
    oc.device = r->device.device;
    /* the trainable parameters come first (model.h): frozen ones get no optimizer state */
    if ((err = gm_optim_init(&r->optim, &oc, gm_model_num_trainable(r->model))) < 0) {
        gm_err("job: invalid optimizer settings (%s)", gm_strerror(err));
        return err == -EINVAL ? GM_ERR_CONFIG : err;
    }
    /* the whole permutation: every rank cuts its share of each step's block from it */
    if ((err = gm_sampler_init(&r->sampler, r->n_train, job->seed, 0, 1)) < 0 ||
        (err = gm_sampler_init(&r->sampler_next, r->n_train, job->seed, 0, 1)) < 0)
        return err;
    r->epoch_next = -1;
    r->steps_per_epoch = (long)(r->n_train / (size_t)g);
    r->st.steps_per_epoch = r->steps_per_epoch;
    r->st.total_steps = r->steps_per_epoch * job->epochs;
    r->st.model = r->model;
    r->st.optim = &r->optim;
    r->sched.kind = job->schedule.kind == GM_JOB_SCHEDULE_KIND_STEP     ? GM_SCHED_STEP
                    : job->schedule.kind == GM_JOB_SCHEDULE_KIND_COSINE ? GM_SCHED_COSINE
                                                                        : GM_SCHED_CONSTANT;
    r->sched.base_lr = (float)job->optim.lr;
    r->sched.warmup_steps = job->schedule.warmup_steps;
    r->sched.step_size = job->schedule.step_size;
    r->sched.gamma = (float)job->schedule.gamma;
    r->sched.min_lr = (float)job->schedule.min_lr;
    r->sched.total_steps = r->steps_per_epoch * job->epochs;
    if (gm_sched_check(&r->sched) < 0) {
        gm_err("job: invalid [schedule] for %ld total steps", r->sched.total_steps);
        return GM_ERR_CONFIG;
    }
    if (comm == NULL && job->checkpoint_every > 0) { /* train --local: room for them first */
        uint64_t need, avail;
        if (gm_trainer_ckpt_space(ckpt_dir(r), ckpt_bytes(r->model, job), job->checkpoint_keep,
                                  &need, &avail) < 0)
            return GM_ERR_CONFIG; /* logged: the directory, what they need, what is free */
    }
    r->labels = calloc((size_t)r->max_batch, sizeof(int32_t));
    r->eval_idx = calloc(r->n_test + 1, sizeof(uint32_t));
    if (r->labels == NULL || r->eval_idx == NULL)
        return -ENOMEM;
    openblas_set_num_threads(job->threads);
    memcpy(r->job_hash, job->identity, sizeof(r->job_hash));
    r->last_checkpoint = -1;
    if (r->opts->resume != NULL && (err = resume(r)) < 0)
        return err;
    return 0;
}

static void teardown(struct run *r)
{
    checkpoint_wait(r); /* the writer reads the model's names */
    gm_model_free(r->model);
    gm_optim_free(&r->optim);
    gm_sampler_free(&r->sampler);
    gm_sampler_free(&r->sampler_next);
    gm_loader_free(r->data);
    r->data = NULL;
    free(r->labels);
    free(r->eval_idx);
    free(r->eval_keep);
    free(r->eval_bufs);
    gm_cuda_free(r->cu); /* last: the model and the optimizer held its memory */
    r->cu = NULL;
}

/* The replica's state (parameters, optimizer state) between the device and the host views
 * the communication hooks read and write (no-ops on the CPU). */
static int state_to_host(struct run *r)
{
    int err = gm_model_params_to_host(r->model);
    return err < 0 ? err : gm_optim_state_to_host(&r->optim);
}

static int state_to_device(struct run *r)
{
    int err = gm_model_params_to_device(r->model);
    return err < 0 ? err : gm_optim_state_to_device(&r->optim);
}

/* What a hook touches of the state, for a model on a GPU: HOOK_READS pulls the state to the
 * host views before it, HOOK_WRITES pushes them back after it.  A resync does both. */
#define HOOK_READS 1u
#define HOOK_WRITES 2u

/* Runs one communication hook.  A regroup re-synchronizes the state with the
 * new group (again if the group changes during that).  Returns 0, 1 when the
 * state was replaced (the caller restarts at st.step), or an error. */
static int run_hook(struct run *r, int (*fn)(void *, struct gm_train_state *), unsigned touches)
{
    const struct gm_train_comm *comm = r->opts->comm;
    int err;

    if (comm == NULL || fn == NULL)
        return 0;
    if ((touches & HOOK_READS) && (err = state_to_host(r)) < 0)
        return err;
    err = fn(comm->ctx, &r->st);
    if (err != GM_ERR_REGROUP) {
        int werr = err >= 0 && (touches & HOOK_WRITES) ? state_to_device(r) : 0;
        return werr < 0 ? werr : err;
    }
    if (!(touches & HOOK_READS) && (err = state_to_host(r)) < 0)
        return err;
    err = GM_ERR_REGROUP;
    while (err == GM_ERR_REGROUP) {
        if (comm->resync == NULL)
            return GM_ERR_ABORTED;
        err = comm->resync(comm->ctx, &r->st);
    }
    if (err >= 0 && (err = state_to_device(r)) >= 0) {
        r->regroups++;
        return 1;
    }
    return err;
}

static void scale(float *g, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        g[i] *= f;
}

/* The model's gradient hook: weigh the layer's gradients for unequal shares,
 * then hand them to the communication hook (overlap with the rest of backward). */
struct grad_hook_ctx {
    struct gm_model *m;
    const struct gm_train_comm *comm;
    float factor; /* this step's weight, 1 when shares are equal */
};

static void grad_hook(void *ctx, size_t first, size_t n)
{
    struct grad_hook_ctx *h = ctx;

    if (h->factor != 1.0f)
        for (size_t i = first; i < first + n; i++) {
            const struct gm_param_info *pi = gm_model_tensor(h->m, i);
            scale(gm_model_grads(h->m) + pi->offset, pi->numel, h->factor);
        }
    if (h->comm->grads_ready != NULL)
        h->comm->grads_ready(h->comm->ctx, first, n);
}

struct epoch_stats {
    int epoch;
    uint64_t t0, t_window;
    long steps, window_steps;
    double loss_sum, sps;
};

static void epoch_begin(struct epoch_stats *es, int epoch)
{
    es->epoch = epoch;
    es->t0 = es->t_window = gm_time_mono_ns();
    es->steps = es->window_steps = 0;
    es->loss_sum = 0;
    es->sps = 0;
}

/* The observer hooks (trainer.h): a step just taken (t_*: its phase boundaries), an
 * evaluation just made. */
static void step_hook(const struct run *r, int epoch, double loss, uint64_t t_step, uint64_t t_data,
                      uint64_t t_coll, uint64_t t_opt)
{
    const struct gm_train_hooks *h = r->opts->hooks;
    const uint64_t t_end = gm_time_mono_ns();

    if (h == NULL || h->on_step == NULL)
        return;
    const struct gm_train_step_info si = {
        .step = r->st.step,
        .epoch = epoch + 1,
        .loss = loss,
        .lr = gm_sched_lr(&r->sched, r->st.step - 1),
        .compute_s = (double)(t_coll - t_step) * 1e-9,
        .data_s = (double)(t_data - t_step) * 1e-9,
        .collective_s = (double)(t_opt - t_coll) * 1e-9,
        .optimizer_s = (double)(t_end - t_opt) * 1e-9,
        .samples_per_s =
            t_end > t_step ? r->st.global_batch / ((double)(t_end - t_step) * 1e-9) : 0,
        .epoch_end = r->steps_per_epoch > 0 && r->st.step % r->steps_per_epoch == 0,
        .samples = r->st.share_samples,
    };
    h->on_step(h->ctx, &si);
}

static void eval_hook(const struct run *r, long step, int epoch, double tloss, double acc,
                      double epoch_loss, double epoch_sps)
{
    const struct gm_train_hooks *h = r->opts->hooks;
    const struct gm_train_eval_info ei = {
        .step = step,
        .epoch = epoch + 1,
        .test_loss = tloss,
        .test_accuracy = acc,
        .epoch_loss = epoch_loss,
        .epoch_samples_per_s = epoch_sps,
    };

    if (h != NULL && h->on_eval != NULL)
        h->on_eval(h->ctx, &ei);
}

/* An epoch's report, rank 0's line (event=epoch) and on_eval: with its evaluation when one is
 * due (every rank's: shared, or rank 0's alone when alone is set, after a regroup). */
static int epoch_report(struct run *r, struct epoch_end *d, bool alone, double *acc, double *tloss)
{
    double delay_s = d->at_step > d->step ? (double)(gm_time_mono_ns() - d->t_end) * 1e-9 : 0;
    int err;

    if (d->armed) {
        d->armed = false;
        r->defer = NULL;
    }
    if (d->eval && alone && r->st.rank == 0 && (err = evaluate(r, acc, tloss)) < 0)
        return err;
    if (d->eval && !alone && (err = evaluate_epoch(r, acc, tloss)) < 0)
        return err;
    if (r->st.rank != 0)
        return 0;
    if (!d->eval) {
        gm_info("event=epoch epoch=%d steps=%ld train_loss=%.4f epoch_s=%.1f samples_per_s=%.0f",
                d->epoch + 1, d->step, d->loss, d->epoch_s, d->sps);
        return 0;
    }
    eval_hook(r, d->step, d->epoch, *tloss, *acc, d->loss, d->sps);
    if (delay_s > 0)
        gm_info("event=epoch epoch=%d steps=%ld train_loss=%.4f test_loss=%.4f "
                "test_accuracy=%.2f epoch_s=%.1f samples_per_s=%.0f eval_step=%ld "
                "eval_delay_s=%.2f",
                d->epoch + 1, d->step, d->loss, *tloss, *acc, d->epoch_s, d->sps, r->st.step,
                delay_s);
    else
        gm_info("event=epoch epoch=%d steps=%ld train_loss=%.4f test_loss=%.4f "
                "test_accuracy=%.2f epoch_s=%.1f samples_per_s=%.0f",
                d->epoch + 1, d->step, d->loss, *tloss, *acc, d->epoch_s, d->sps);
    return 0;
}

/* A put-off epoch's report inside the next epoch: its evaluation is not that epoch's training
 * time (epoch_s excludes evaluations, the rule for every epoch).  After a regroup since its
 * epoch ended, rank 0's alone: the new group need not share the wait (a newcomer has none). */
static int epoch_report_within(struct run *r, struct epoch_stats *es, double *acc, double *tloss)
{
    uint64_t t0 = gm_time_mono_ns(), dt;
    int err = epoch_report(r, r->defer, r->defer->regroups != r->regroups, acc, tloss);

    dt = gm_time_mono_ns() - t0;
    es->t0 += dt;
    es->t_window += dt;
    return err;
}

/* The shares of a new group (its first step, or re-formed after a loss): what a hook set
 * for this world (the agent's measured ones, shares = auto), else the job's fixed weights
 * when they list this world, else equal (logged when the job had fixed ones). */
static void shares_for_world(struct run *r)
{
    const struct gm_job_shares *sh = &r->job->shares;
    char buf[GM_JOB_SHARES_MAX * 12];

    if (r->st.share_n == r->st.world && r->st.world > 1) {
        if (r->st.rank == 0)
            gm_info("event=shares step=%ld world=%d samples=%s source=group", r->st.step,
                    r->st.world, gm_train_shares_text(&r->st, buf, sizeof(buf)));
        return;
    }
    r->st.share_n = 0;
    if (sh->mode == GM_JOB_SHARES_AUTO && r->st.world > 1 && r->st.rank == 0 &&
        (r->opts->comm == NULL || r->opts->comm->resync == NULL))
        gm_info("event=shares-auto-equal world=%d: shares = auto is measured by the agents "
                "of a cluster; in one process every simulated rank runs alike, so they split "
                "equally",
                r->st.world);
    if (sh->mode != GM_JOB_SHARES_FIXED || r->st.world == 1)
        return;
    if (sh->n == r->st.world) {
        r->st.share_n = sh->n;
        memcpy(r->st.share_w, sh->w, sizeof(uint32_t) * (size_t)sh->n);
        if (r->st.rank == 0)
            gm_info("event=shares step=%ld world=%d samples=%s", r->st.step, r->st.world,
                    gm_train_shares_text(&r->st, buf, sizeof(buf)));
        return;
    }
    if (r->st.rank == 0)
        gm_warn("event=shares-equal step=%ld world=%d shares=%d: [job] shares name %d ranks and "
                "the group now has %d; the global batch is split equally until it has %d again",
                r->st.step, r->st.world, sh->n, sh->n, r->st.world, sh->n);
}

int gm_trainer_run(const struct gm_job *job, const struct gm_train_opts *opts,
                   struct gm_train_summary *sum)
{
    struct run r = {.job = job, .opts = opts};
    double train_s = 0, epoch_loss = NAN, acc = NAN, tloss = NAN;
    const char *out = opts->out != NULL ? opts->out : job->out;
    const struct gm_train_comm *comm = opts->comm;
    struct epoch_stats es = {.epoch = -1};
    struct epoch_end ended = {0}; /* the last epoch's end, r.defer's while put off */
    struct rusage ru;
    long steps_done = 0;  /* by this replica, for samples/s */
    int shares_world = 0; /* the world st's shares were set for */
    int err;

    memset(sum, 0, sizeof(*sum));
    r.t_start = gm_time_mono_ns();
    r.epoch = -1;
    snprintf(sum->job, sizeof(sum->job), "%s", job->name);
    snprintf(sum->model, sizeof(sum->model), "%s", gm_job_model_name(job->model));
    /* one replica: nothing on a wire (train/sim.c overwrites it for its ranks) */
    snprintf(sum->codec, sizeof(sum->codec), "%s", gm_gradsync_summary_codec(NULL, 1));
    if ((err = setup(&r)) < 0) {
        snprintf(sum->error, sizeof(sum->error), "%s", r.data_why);
        goto out;
    }
    sum->params = gm_model_num_params(r.model);
    sum->trainable = gm_model_num_trainable(r.model);
    if (r.device.device == GM_DEVICE_CUDA)
        snprintf(sum->device, sizeof(sum->device), "cuda:%d", r.device.index);
    else
        snprintf(sum->device, sizeof(sum->device), "cpu");
    if (r.st.rank == 0)
        gm_info("event=start job=%s model=%s params=%zu trainable=%zu frozen=%zu train=%zu "
                "test=%zu input=%dx%dx%d classes=%d batch=%d epochs=%d steps_per_epoch=%ld "
                "optim=%s lr=%g threads=%d",
                job->name, sum->model, sum->params, sum->trainable, sum->params - sum->trainable,
                r.n_train, r.n_test, r.in_c, r.in_h, r.in_w, gm_model_classes(r.model),
                r.st.global_batch, job->epochs, r.steps_per_epoch,
                gm_job_optimizer_name(job->optim.name), job->optim.lr, job->threads);
    struct grad_hook_ctx gh = {.m = r.model, .comm = comm, .factor = 1.0f};
    if (comm != NULL)
        gm_model_set_grad_hook(r.model, grad_hook, &gh);
    if ((err = run_hook(&r, comm != NULL ? comm->start : NULL, HOOK_READS | HOOK_WRITES)) < 0)
        goto out;

    while (r.st.step < r.st.total_steps) {
        const int G = r.st.global_batch;
        const long step = r.st.step;
        const long s_in = r.st.step % r.steps_per_epoch;
        const int e = (int)(r.st.step / r.steps_per_epoch);
        int off, n, rc;

        /* an error line of an earlier step (a checkpoint that could not be written) that did
         * not stop the run is no reason for a later failure (gm_log_last_error) */
        gm_log_clear_last_error();
        if (e != r.epoch && r.epoch_next == e) { /* computed for the prefetch: swap */
            struct gm_sampler t = r.sampler;
            r.sampler = r.sampler_next;
            r.sampler_next = t;
            r.epoch_next = r.epoch;
            r.epoch = e;
        } else if (e != r.epoch) {
            gm_sampler_set_epoch(&r.sampler, e);
            r.epoch = e;
        }
        if (e != es.epoch)
            epoch_begin(&es, e);
        /* the group's state was replaced before an evaluation put off came due: rank 0's
         * alone, now (the new group need not share the wait) */
        if (r.defer != NULL && r.defer->regroups != r.regroups &&
            (err = epoch_report_within(&r, &es, &acc, &tloss)) < 0)
            goto out;
        if (opts->stop != NULL && *opts->stop) {
            sum->interrupted = 1;
            break;
        }
        const uint64_t t_step = gm_time_mono_ns();
        uint64_t t_coll, t_opt, t_data;
        if (r.st.world != shares_world) { /* the first step, or a re-formed group */
            shares_world = r.st.world;
            shares_for_world(&r);
        }
        gm_train_share_by(G, r.st.world, r.st.share_n != 0 ? r.st.share_w : NULL, r.st.rank, &off,
                          &n);
        if (n > r.max_batch || n < 1) {
            gm_err("event=share rank=%d world=%d global_batch=%d: a share of %d samples %s "
                   "(buffers for %d): %s",
                   r.st.rank, r.st.world, G, n, n < 1 ? "is empty" : "does not fit", r.max_batch,
                   n < 1 ? "the global batch is smaller than the group or a share rounds to no "
                           "sample; raise [optim] global_batch"
                         : "the shares changed beyond the buffers");
            err = n < 1 ? GM_ERR_CONFIG : -EINVAL;
            goto out;
        }
        r.st.share_samples = n;
        /* the next steps' shares decode while this one computes, across the end of the epoch
         * too: the next epoch's order follows from (seed, epoch + 1) alone */
        for (long a = 1; a <= job->data.prefetch && step + a < r.st.total_steps; a++) {
            const long t = step + a;
            const int te = (int)(t / r.steps_per_epoch);
            const struct gm_sampler *sp = &r.sampler;
            if (te > e + 1)
                break; /* epochs shorter than the prefetch: one ahead is enough */
            if (te != e && r.epoch_next != te) {
                gm_sampler_set_epoch(&r.sampler_next, te);
                r.epoch_next = te;
            }
            if (te != e)
                sp = &r.sampler_next;
            gm_loader_prefetch(r.data, GM_SPLIT_TRAIN, te,
                               gm_sampler_indices(sp) +
                                   (size_t)(t % r.steps_per_epoch) * (size_t)G + off,
                               (size_t)n);
        }
        if ((err = gm_loader_batch(r.data, GM_SPLIT_TRAIN, e,
                                   gm_sampler_indices(&r.sampler) + (size_t)s_in * (size_t)G + off,
                                   (size_t)n, gm_model_input(r.model), r.labels)) < 0)
            goto out; /* logged with the file */
        t_data = gm_time_mono_ns();
        if ((err = gm_model_forward(r.model, n, 1,
                                    job->seed * 0x9e3779b97f4a7c15ull + (uint64_t)r.st.step)) < 0)
            goto out;
        double loss = gm_model_loss(r.model, n, r.labels, NULL);
        if (!isfinite(loss) && (err = gm_model_take_error(r.model)) < 0)
            goto out; /* a device error, logged with the library's message */
        if (!isfinite(loss)) {
            gm_err("event=diverged step=%ld epoch=%d loss=%g: the loss is not finite; "
                   "lower [optim] lr",
                   r.st.step, e + 1, loss);
            err = GM_ERR_NUMERIC;
            goto out;
        }
        if ((rc = run_hook(&r, comm != NULL ? comm->backward_begin : NULL, 0)) < 0) {
            err = rc;
            goto out;
        }
        if (rc == 1)
            continue;
        /* unequal shares: weigh by samples (see trainer.h), layer by layer in grad_hook;
         * after backward_begin, which may have switched the codec */
        gh.factor = n * r.st.world != G ? (float)n * (float)r.st.world / (float)G : 1.0f;
        if (comm != NULL && comm->local_grads != NULL && comm->local_grads(comm->ctx))
            gh.factor = 1.0f; /* DiLoCo: weighted by samples at the outer sync instead */
        if ((err = gm_model_backward(r.model, n)) < 0)
            goto out;
        t_coll = gm_time_mono_ns();
        /* reduce_grads reads the gradients' host view (backward filled it through the
         * gradient hook) and may read the parameters (DiLoCo's first snapshot) */
        if ((rc = run_hook(&r, comm != NULL ? comm->reduce_grads : NULL, HOOK_READS)) < 0) {
            if (rc == GM_ERR_ABORTED && opts->stop != NULL && *opts->stop) {
                sum->interrupted = 1; /* stopped mid-step: the last finished step stands */
                break;
            }
            err = rc;
            goto out;
        }
        if (rc == 1)
            continue; /* the group's state replaced ours: take the step it says */
        /* the reduced gradients back to a GPU before its optimizer step (no-op on the CPU) */
        if (comm != NULL && (err = gm_model_grads_to_device(r.model)) < 0)
            goto out;
        t_opt = gm_time_mono_ns();
        gm_optim_step(&r.optim, gm_model_params_device(r.model), gm_model_grads_device(r.model),
                      gm_sched_lr(&r.sched, r.st.step));
        /* The step is taken: st now describes the state after it.  A group that re-forms in
         * after_step takes rank 0's state with this count, so nobody takes the step again. */
        r.st.step++;
        if ((rc = run_hook(&r, comm != NULL ? comm->after_step : NULL, HOOK_READS | HOOK_WRITES)) <
            0) {
            if (rc == GM_ERR_ABORTED && opts->stop != NULL && *opts->stop) {
                sum->interrupted = 1; /* the step is taken (counted above); its check was cut */
                break;
            }
            err = rc;
            goto out;
        }
        if (rc == 1 && r.st.step != step + 1)
            continue; /* the group's state is at another step: take the step it says */
        r.st.loss = loss;
        steps_done++;
        step_hook(&r, e, loss, t_step, t_data, t_coll, t_opt);
        es.steps++;
        es.window_steps++;
        es.loss_sum += loss;
        {
            uint64_t now = gm_time_mono_ns();
            double dt = (double)(now - es.t_window) * 1e-9;
            bool due = opts->progress || es.window_steps == job->log_every;
            if (due && dt > 0 && (!opts->progress || dt > 0.5)) {
                es.sps = (double)es.window_steps * G / dt;
                es.t_window = now;
                es.window_steps = 0;
            }
            /* every rank reports (the agent shows a member's view too; its loss is over its
             * own share of the batch); rank 0 alone logs */
            if (comm != NULL && comm->progress != NULL)
                comm->progress(comm->ctx, &r.st, e, es.loss_sum / (double)es.steps, es.sps);
            if (r.st.rank == 0 && opts->progress)
                progress_bar(&r, s_in + 1, es.loss_sum / (double)es.steps, es.sps, 0);
            else if (r.st.rank == 0 && due)
                gm_info("event=train step=%ld epoch=%d loss=%.4f lr=%.3g samples_per_s=%.0f",
                        r.st.step, e + 1, es.loss_sum / (double)es.steps,
                        gm_sched_lr(&r.sched, r.st.step - 1), es.sps);
        }
        if (job->checkpoint_every > 0 && r.st.rank == 0 && r.st.step % job->checkpoint_every == 0)
            checkpoint(&r);
        if (r.defer != NULL && r.st.step >= r.defer->at_step &&
            (err = epoch_report_within(&r, &es, &acc, &tloss)) < 0)
            goto out;
        if (r.st.step % r.steps_per_epoch != 0)
            continue;
        /* the end of epoch e */
        uint64_t t_end = gm_time_mono_ns();
        double epoch_s = (double)(t_end - es.t0) * 1e-9;
        train_s += epoch_s;
        epoch_loss = es.steps > 0 ? es.loss_sum / (double)es.steps : NAN;
        sum->epochs = e + 1;
        /* an epoch shorter than an evaluation's wait: the earlier one's evaluation now */
        if (r.defer != NULL &&
            (err = epoch_report(&r, r.defer, r.defer->regroups != r.regroups, &acc, &tloss)) < 0)
            goto out;
        if (r.st.rank == 0 && opts->progress)
            progress_bar(&r, r.steps_per_epoch, epoch_loss,
                         (double)es.steps * G / (epoch_s > 0 ? epoch_s : 1), 1);
        ended = (struct epoch_end){
            .epoch = e,
            .step = r.st.step,
            .at_step = r.st.step,
            .regroups = r.regroups,
            .loss = epoch_loss,
            .epoch_s = epoch_s,
            .sps = (double)es.steps * G / epoch_s,
            .t_end = t_end,
            .eval = (e + 1) % job->eval_every == 0 || e + 1 == job->epochs,
        };
        /* overlapped DiLoCo: the epoch's last round is not in the outer parameters until its
         * update lands a few steps on; evaluate then, not the round before's model */
        long wait = ended.eval && comm != NULL && comm->eval_defer != NULL
                        ? comm->eval_defer(comm->ctx, r.st.step, r.st.total_steps)
                        : 0;
        if (wait > 0) {
            ended.at_step += wait;
            ended.armed = true;
            r.defer = &ended;
        } else if ((err = epoch_report(&r, &ended, false, &acc, &tloss)) < 0) {
            goto out;
        }
        if (r.st.rank == 0 && comm != NULL && comm->progress != NULL)
            comm->progress(comm->ctx, &r.st, e, epoch_loss, es.sps);
    }
    if (sum->interrupted && r.defer != NULL) {
        r.defer->eval = false; /* the interrupted run's evaluation below stands in for it */
        if ((err = epoch_report(&r, r.defer, true, &acc, &tloss)) < 0)
            goto out;
    }
    if (sum->interrupted) {
        double epoch_s = (double)(gm_time_mono_ns() - es.t0) * 1e-9;
        train_s += es.epoch >= 0 ? epoch_s : 0;
        if (es.steps > 0)
            epoch_loss = es.loss_sum / (double)es.steps;
        if (opts->progress && r.st.rank == 0)
            progress_bar(&r, r.st.step % r.steps_per_epoch, epoch_loss, es.sps, 1);
        gm_notice("event=interrupted step=%ld epoch=%d: stopping, saving weights", r.st.step,
                  r.epoch + 1);
        if (r.st.rank == 0) {
            /* of the weights saved below: this replica's, mid-round under DiLoCo */
            if ((err = evaluate_replica(&r, &acc, &tloss)) < 0)
                goto out;
            eval_hook(&r, r.st.step, r.epoch, tloss, acc, epoch_loss, 0);
        }
    }
    if (!sum->interrupted && r.st.rank == 0 && isnan(acc)) {
        /* resumed from a checkpoint at the end: nothing was trained, evaluate what is there */
        if ((err = evaluate(&r, &acc, &tloss)) < 0)
            goto out;
        eval_hook(&r, r.st.step, r.epoch, tloss, acc, epoch_loss, 0);
        gm_info("event=eval step=%ld test_loss=%.4f test_accuracy=%.2f", r.st.step, tloss, acc);
    }
    if (!sum->interrupted && comm != NULL && comm->finish != NULL) {
        if ((err = state_to_host(&r)) < 0)
            goto out;
        comm->finish(comm->ctx, &r.st);
    }
    /* the last checkpoint: at the end, or where the run was stopped */
    if (job->checkpoint_every > 0 && r.st.rank == 0 && r.last_checkpoint != r.st.step)
        checkpoint(&r);
    checkpoint_wait(&r); /* the run ends with its last checkpoint on disk */
    if (r.st.rank == 0 || (sum->interrupted && opts->keep_on_stop)) {
        if ((err = save_weights(&r, out)) < 0)
            goto out;
        snprintf(sum->checkpoint, sizeof(sum->checkpoint), "%s", out);
    }
    sum->steps = r.st.step;
    sum->test_accuracy = acc;
    sum->test_loss = tloss;
    sum->train_loss = epoch_loss;
    sum->train_s = train_s;
    sum->samples_per_s = train_s > 0 ? (double)steps_done * r.st.global_batch / train_s : 0;
    sum->wall_s = gm_time_seconds_since(r.t_start);
    getrusage(RUSAGE_SELF, &ru);
    sum->peak_rss_kb = ru.ru_maxrss;
    if (r.st.rank == 0) {
        struct gm_loader_stats ls;
        gm_loader_stats(r.data, &ls);
        gm_info("event=done job=%s steps=%ld test_accuracy=%.2f test_loss=%.4f samples_per_s=%.0f "
                "wall_s=%.1f weights=%s peak_rss_mb=%.1f data_wait_s=%.2f data_decodes=%llu "
                "data_cached_mb=%.1f data_prefetched=%llu/%llu",
                job->name, r.st.step, acc, tloss, sum->samples_per_s, sum->wall_s, out,
                (double)sum->peak_rss_kb / 1024.0, (double)ls.wait_ns * 1e-9,
                (unsigned long long)ls.decodes, (double)ls.cache_bytes / 1048576.0,
                (unsigned long long)ls.train_ahead, (unsigned long long)ls.train_batches);
    }
out:
    teardown(&r);
    return err;
}

int gm_train_summary_write_json(const struct gm_train_summary *s, const char *path)
{
    json_t *o = json_object();
    int err = 0;

    if (o == NULL)
        return -ENOMEM;
    json_object_set_new(o, "job", json_string(s->job));
    json_object_set_new(o, "model", json_string(s->model));
    json_object_set_new(o, "device", json_string(s->device));
    json_object_set_new(o, "test_accuracy",
                        isfinite(s->test_accuracy) ? json_real(s->test_accuracy) : json_null());
    json_object_set_new(o, "test_loss",
                        isfinite(s->test_loss) ? json_real(s->test_loss) : json_null());
    json_object_set_new(o, "train_loss",
                        isfinite(s->train_loss) ? json_real(s->train_loss) : json_null());
    json_object_set_new(o, "epochs", json_integer(s->epochs));
    json_object_set_new(o, "steps", json_integer(s->steps));
    json_object_set_new(o, "samples_per_s", json_real(s->samples_per_s));
    json_object_set_new(o, "train_s", json_real(s->train_s));
    json_object_set_new(o, "wall_s", json_real(s->wall_s));
    json_object_set_new(o, "bytes_sent", json_integer((json_int_t)s->bytes_sent));
    json_object_set_new(o, "codec", json_string(s->codec));
    json_object_set_new(o, "params", json_integer((json_int_t)s->params));
    json_object_set_new(o, "peak_rss_mb", json_real((double)s->peak_rss_kb / 1024.0));
    json_object_set_new(o, "interrupted", json_boolean(s->interrupted));
    json_object_set_new(o, "checkpoint",
                        s->checkpoint[0] ? json_string(s->checkpoint) : json_null());
    if (json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)) != 0) {
        gm_err("%s: cannot write the summary: %s", path, strerror(errno));
        err = -EIO;
    }
    json_decref(o);
    return err;
}
