/*
 * train/compress/powersgd.h - PowerSGD gradient compression (Vogels et al., 2019) on
 * top of the collective: rank-r factors all-reduced instead of gradients.
 *
 * The gradient is one flat buffer; the caller describes its matrices as views
 * {offset, rows, cols} (row-major, e.g. a conv weight (out, in*kh*kw)).  A view
 * with rows == 1 or cols == 1, or too small to gain (r >= min(rows, cols)), and
 * every element no view covers, is sent dense in the same all-reduce.
 *
 * Per step, per matrix (standard variant, two all-reduce rounds):
 *   M = G + E (error feedback); P = M Q; P = mean(P); P = MGS(P);
 *   Q = M^T P; Q = mean(Q); out = P Q^T; E = M - out.
 * Q persists to the next step (warm start); initial Q is N(0,1) from a seed
 * shared by all ranks (splitmix64 + Box-Muller: identical on every machine);
 * a Q column that became all zero (a zero layer) is re-drawn the same way.
 * Alternating variant (one round a step, for high-RTT links): even steps
 * all-reduce P = M Qh (out = P Qh^T, Ph = MGS(P)), odd steps Q = M^T Ph
 * (out = Ph Q^T, Qh = MGS(Q)).  The first warmup_steps steps all-reduce the
 * whole gradient dense (codec as configured, fp16 by default).
 *
 * Chosen: modified Gram-Schmidt in fp32, v /= (|v| + eps), and a column whose
 * norm drops below 1e-4 of its norm before projection (rank-deficient input:
 * what is left is rounding noise) is set to zero rather than blown up to unit
 * length, which would add a random direction to the output; local products with
 * OpenBLAS sgemm (per-rank values, reduced afterwards); everything computed
 * after a reduction (MGS, P Q^T) uses plain loops in a fixed order, so every
 * rank ends with bitwise-identical output.  Factors travel with the configured
 * codec, pre-scaled by 1/N (train/comm/collective.h).  Loop thread (or the
 * simulation's single thread); one gm_psgd per rank.
 */
#ifndef GM_TRAIN_COMPRESS_POWERSGD_H
#define GM_TRAIN_COMPRESS_POWERSGD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/comm/codec.h"
#include "train/comm/collective.h"

struct gm_view {
    size_t offset; /* in floats, into the flat buffer */
    size_t rows, cols;
};

struct gm_psgd_config {
    int rank;              /* r >= 1 */
    uint64_t warmup_steps; /* dense steps first */
    bool error_feedback;
    bool alternating;       /* one factor per step */
    uint64_t seed;          /* same on every rank */
    enum gm_codec codec;    /* wire codec of factors and dense parts */
    enum gm_coll_algo algo; /* for its all-reduces */
    float eps;              /* MGS epsilon; 0: 1e-8 */
};

struct gm_psgd;

/* Fills cfg with the defaults: rank 2, no warm-up, error feedback on, standard
 * variant, seed 1, fp16, AUTO, eps 1e-8. */
void gm_psgd_config_default(struct gm_psgd_config *cfg);

/* -EINVAL for views out of bounds or overlapping, -ENOMEM. *out NULL on error. */
GM_MUST_CHECK int gm_psgd_new(const struct gm_psgd_config *cfg, const struct gm_view *views,
                              size_t nviews, size_t nelems, struct gm_psgd **out);
void gm_psgd_free(struct gm_psgd *p);

/* Replaces grad[0..nelems) by the compressed mean over ranks (identical on all
 * ranks) and calls cb; grad is borrowed until then.  Every rank calls it with
 * the same step.  Errors as gm_coll_allreduce_start() and its callback. */
GM_MUST_CHECK int gm_psgd_reduce_start(struct gm_psgd *p, struct gm_coll *c, float *grad,
                                       uint64_t step, gm_coll_done_cb cb, void *arg);

/* Floats all-reduced at this step by the formula: warm-up: nelems; standard:
 * sum r(rows + cols) + dense; alternating: sum r*rows (even) or r*cols (odd)
 * + dense. */
size_t gm_psgd_payload_floats(const struct gm_psgd *p, uint64_t step);
/* Floats actually handed to the collective by the last completed step. */
size_t gm_psgd_last_payload_floats(const struct gm_psgd *p);
/* Number of matrices compressed and of dense floats. */
size_t gm_psgd_matrices(const struct gm_psgd *p);
size_t gm_psgd_dense_floats(const struct gm_psgd *p);
/* Error-feedback memory (nelems floats; zero outside matrices). */
const float *gm_psgd_error(const struct gm_psgd *p);
/* nelems, as given to gm_psgd_new. */
size_t gm_psgd_nelems(const struct gm_psgd *p);

/* The factors a checkpoint holds (the warm start): every matrix's Q (cols x r; Qhat in the
 * alternating variant) back to back, then every matrix's Phat (rows x r), gm_psgd_state_floats
 * floats in all.  get copies them out; set replaces them (-EINVAL for another length, -EBUSY
 * while a step is in flight).  error_set replaces the error-feedback memory (nelems floats)
 * the same way.  With the factors and the error of a rank restored, its next steps are
 * bitwise those of a run that never stopped. */
size_t gm_psgd_state_floats(const struct gm_psgd *p);
void gm_psgd_state_get(const struct gm_psgd *p, float *out);
GM_MUST_CHECK int gm_psgd_state_set(struct gm_psgd *p, const float *in, size_t n);
GM_MUST_CHECK int gm_psgd_error_set(struct gm_psgd *p, const float *e, size_t n);

/* Orthonormalizes the columns of a (rows, cols) row-major matrix in place:
 * modified Gram-Schmidt, fp32, column /= (norm + eps); columns that are
 * (numerically) dependent on earlier ones become zero. */
void gm_psgd_orthonormalize(float *m, size_t rows, size_t cols, float eps);

#endif
