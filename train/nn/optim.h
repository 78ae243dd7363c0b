/*
 * train/nn/optim.h - optimizers (SGD, Adam) and learning-rate schedules over flat buffers.
 *
 * Parameters, gradients and optimizer state are each ONE flat float buffer, so the
 * collective reduces one buffer and a checkpoint saves one buffer plus `step`.
 *
 * Semantics follow PyTorch exactly (torch.optim.SGD / torch.optim.Adam, checked
 * against torch 1.13 in tests/unit/test_optim.c):
 *   SGD:  d = g + wd*p;  if momentum: buf = mu*buf + d (dampening 0; the buffer
 *         starts at zero, so the first step gives buf = d, as torch's clone does);
 *         d = nesterov ? d + mu*buf : buf;  p -= lr*d.
 *   Adam: t = ++step;  d = g + wd*p (L2 decay added to the gradient, not AdamW);
 *         m = b1*m + (1-b1)*d;  v = b2*v + (1-b2)*d*d;
 *         p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
 * Configuration is validated like torch's constructors: momentum, weight_decay,
 * eps >= 0 and finite, 0 <= beta < 1, Nesterov needs momentum > 0. Fields that do
 * not belong to the chosen kind are ignored.
 *
 * State layout (gm_optim_state, gm_optim_state_len floats):
 *   SGD, momentum > 0:  buf[n];   SGD, momentum == 0:  none (NULL, length 0);
 *   Adam:               m[n] then v[n].
 * A checkpoint saves the state buffer and `step`; restoring both and continuing gives
 * bitwise the same parameters as never stopping.
 *
 * Schedules (gm_sched_lr, step counts from 0). Warm-up is a linear ramp
 *     lr = base_lr * (step + 1) / warmup_steps      for step < warmup_steps,
 * so the first step already trains (base/warmup) and step warmup-1 reaches base_lr.
 * From then on t = step - warmup_steps:
 *   CONSTANT: base_lr;
 *   STEP:     base_lr * gamma^floor(t / step_size);
 *   COSINE:   min_lr + (base_lr - min_lr) * (1 + cos(pi * t / T)) / 2 with
 *             T = total_steps - warmup_steps, and min_lr for t >= T.
 * (torch's StepLR / CosineAnnealingLR closed forms, shifted by the warm-up.)
 *
 * Threads: a struct gm_optim belongs to the trainer thread; no global state.
 */
#ifndef GM_TRAIN_NN_OPTIM_H
#define GM_TRAIN_NN_OPTIM_H

#include <stddef.h>

#include "common/err.h"
#include "train/nn/tensor.h"

struct gm_ops;

enum gm_optim_kind {
    GM_OPTIM_SGD,
    GM_OPTIM_ADAM,
};

struct gm_optim_config {
    enum gm_optim_kind kind;
    float momentum;          /* SGD: 0 = plain SGD, no state */
    int nesterov;            /* SGD: nonzero = Nesterov momentum (needs momentum > 0) */
    float weight_decay;      /* both: L2 term added to the gradient */
    float beta1, beta2, eps; /* Adam */
    enum gm_device device;   /* where params, grads and the state live (default CPU) */
};

struct gm_optim {
    struct gm_optim_config cfg;
    const struct gm_ops *ops; /* borrowed: the device's kernels (train/nn/ops.h) */
    size_t n;                 /* parameters */
    long step;                /* steps taken; Adam's t of the last step */
    float *state; /* owned: SGD momentum: n floats (NULL if momentum == 0); Adam: m then v */
    float *host;  /* the state's host view: == state on the CPU; owned pinned memory on a GPU */
};

/* Fills cfg with torch's defaults for kind: SGD momentum 0, no decay; Adam betas
 * (0.9, 0.999), eps 1e-8, no decay. */
void gm_optim_config_default(struct gm_optim_config *cfg, enum gm_optim_kind kind);

/* Zeroes *o, then checks cfg (-EINVAL if invalid or n == 0; -ENOTSUP when this build
 * has no kernels for cfg->device) and allocates zeroed state on that device (-ENOMEM). On failure
 * *o is left zeroed and gm_optim_free(o) is safe. */
int gm_optim_init(struct gm_optim *o, const struct gm_optim_config *cfg, size_t n) GM_MUST_CHECK;

/* Releases the state and zeroes *o. NULL-safe, idempotent. */
void gm_optim_free(struct gm_optim *o);

/* One update of params[n] from grads[n] with learning rate lr. params, grads and the
 * state must not overlap. One pass over memory; increments o->step. */
void gm_optim_step(struct gm_optim *o, float *params, const float *grads, float lr);

/* Length in floats of the state buffer (0 for SGD without momentum). */
size_t gm_optim_state_len(const struct gm_optim *o);

/* The state's host view (borrowed; NULL when the length is 0), for checkpoints and the
 * group's resynchronization.  On the CPU it is the state itself.  On a GPU it is a pinned
 * host copy, current after gm_optim_state_to_host; what is written into it reaches the
 * device with gm_optim_state_to_device (gm_optim_step uses the device's copy only). */
float *gm_optim_state(struct gm_optim *o);
/* Device -> host view, host view -> device; no-ops (0) on the CPU.  0 or an error. */
int gm_optim_state_to_host(struct gm_optim *o) GM_MUST_CHECK;
int gm_optim_state_to_device(struct gm_optim *o) GM_MUST_CHECK;

/* Zeroes the state (both copies) and the step counter: the next step behaves like the
 * first.  0, or the device's copy error. */
int gm_optim_reset(struct gm_optim *o) GM_MUST_CHECK;

enum gm_sched_kind {
    GM_SCHED_CONSTANT,
    GM_SCHED_STEP,
    GM_SCHED_COSINE,
};

struct gm_sched {
    enum gm_sched_kind kind;
    float base_lr;
    long warmup_steps; /* 0 = no warm-up */
    long step_size;    /* STEP: decay every step_size steps after warm-up */
    float gamma;       /* STEP: factor per decay */
    float min_lr;      /* COSINE: final lr */
    long total_steps;  /* COSINE: warm-up included */
};

/* 0, or -EINVAL when s is not a usable schedule: base_lr, min_lr not finite or < 0,
 * warmup_steps < 0, STEP with step_size <= 0 or gamma not finite or <= 0, COSINE
 * with total_steps <= warmup_steps, unknown kind. */
int gm_sched_check(const struct gm_sched *s) GM_MUST_CHECK;

/* Learning rate for step (counting from 0; negative counts as 0). Defined for every
 * input: a schedule that gm_sched_check rejects degrades to no decay (STEP) or to
 * min_lr right after the warm-up (COSINE), never a division by zero. */
float gm_sched_lr(const struct gm_sched *s, long step);

#endif
