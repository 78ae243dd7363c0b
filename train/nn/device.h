/*
 * train/nn/device.h - which device a run trains on: the `device` setting of the job file
 * ([job] device) and of the agent config ([train] device), parsed into one type that travels
 * unchanged to the trainer, and its resolution to a device of this machine.
 *
 *   auto       a CUDA GPU (the first) when the driver answers and the model can run on it,
 *              else the CPU; the log says which device was taken, or why not the GPU
 *   cpu        the CPU
 *   cuda       the first CUDA GPU (cuda:0); an error when none answers
 *   cuda:N     GPU N (0..GM_DEVICE_CUDA_MAX-1, as the driver numbers them)
 *   cuda:all   one rank per GPU: parsed so the setting can be named, refused when a run
 *              starts (not implemented yet)
 *
 * Precedence: a job file that sets [job] device decides; otherwise the agent's
 * [train] device (distributed jobs), otherwise auto.  Resolution probes the driver through
 * train/kernels/cuda.h, so it works in every build: without the CUDA backend auto says so
 * and takes the CPU.  Pure parsing; gm_device_choose logs one line.  Any thread.
 */
#ifndef GM_TRAIN_NN_DEVICE_H
#define GM_TRAIN_NN_DEVICE_H

#include <stddef.h>

#include "common/err.h"
#include "train/nn/tensor.h"

#define GM_DEVICE_CUDA_MAX 64
#define GM_DEVICE_SPEC_LEN 16 /* buffer for the longest spelling, "cuda:all" / "cuda:63" */

enum gm_device_want {
    GM_DEVICE_WANT_AUTO = 0,
    GM_DEVICE_WANT_CPU,
    GM_DEVICE_WANT_CUDA,     /* index */
    GM_DEVICE_WANT_CUDA_ALL, /* one rank per GPU */
};

struct gm_device_spec {
    enum gm_device_want want;
    int index; /* GM_DEVICE_WANT_CUDA: the GPU; 0 otherwise */
};

/* The device a run got. */
struct gm_device_choice {
    enum gm_device device;
    int index; /* CUDA: the GPU; -1 for the CPU */
};

/* "auto" | "cpu" | "cuda" | "cuda:N" | "cuda:all" (exact, lower case; N decimal without
 * leading zeros, < GM_DEVICE_CUDA_MAX).  0, or -EINVAL with *out set to auto. */
int gm_device_spec_parse(const char *s, struct gm_device_spec *out) GM_MUST_CHECK;
/* The canonical spelling ("cuda" is written "cuda:0"). */
void gm_device_spec_format(const struct gm_device_spec *s, char *buf, size_t len);

/* Resolves spec on this machine.  cuda_ok: whether the model can run on CUDA in this build
 * (the CUDA ops are registered); auto only takes a GPU when it can.  Logs one line naming
 * the device taken (and the GPU), or why auto fell back to the CPU.  Errors (-ENOTSUP,
 * the reason logged and written to why): cuda[:N] with no usable driver, no such GPU, or a
 * model that cannot run on CUDA; cuda:all (not implemented). */
int gm_device_choose(const struct gm_device_spec *spec, int cuda_ok, struct gm_device_choice *out,
                     char *why, size_t whylen) GM_MUST_CHECK;

#endif
