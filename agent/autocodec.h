/*
 * agent/autocodec.h - codec = auto on the job's coordinator: from the links measured between
 * the ranks and one step's compute timed here, pick the codec every rank will run
 * (train/gradsync.h, gm_gradsync_auto_choose, holds the model and the rule; this is the
 * plumbing).
 *
 * Choices:
 * - Decided once, at submit, by the coordinator, and sent to every rank in JOB_GROUP ("comm"),
 *   so every rank runs the same strategy from step 0 of every group.  A switch in the middle of
 *   a run is not made (see docs/ARCHITECTURE.md).
 * - Compute: one training step of the job's model (forward, loss, backward) at the per-rank
 *   batch on random inputs, timed here on the loop thread with the job's BLAS threads: the
 *   median of 5 after a warm-up (LeNet-5 at batch 64: about 40 ms in all).  The input shape
 *   comes from the data kind without reading the data: idx 1x28x28, CIFAR-10 3x32x32, a folder
 *   channels x image_size^2 (32 when the size is native); 10 classes (only the last layer's
 *   width, a small part of the time).
 * - Links: alpha = RTT / 2 and bytes_per_s = the probe's throughput, as measured by the link
 *   layer (agent/measure.c); a pair nobody measured gets the slowest measured link (the ring
 *   runs at its slowest hop, so this errs slow, never fast).  With no measurement at all the
 *   job runs fp32 and says why.
 *
 * Loop thread (it blocks the loop for the timing: tens of ms for the models this build has).
 */
#ifndef GM_AGENT_AUTOCODEC_H
#define GM_AGENT_AUTOCODEC_H

#include <stddef.h>

#include "common/err.h"
#include "train/comm/collective.h"
#include "train/gradsync.h"
#include "train/job.h"

/* Resolves job->comm.codec == auto for world ranks joined by links (world*world, entries with
 * bytes_per_s <= 0 unknown; NULL: none known), in LAN islands (gm_gradsync_islands; NULL:
 * none: the hierarchical all-reduce is then what the codecs are priced on).  Sets job->comm.codec
 * (and local_steps for diloco), fills *out (may be NULL) and writes one line saying why into
 * reason.  Does nothing for a job whose codec is not auto.  0, or a negative error (the job then
 * keeps fp32). */
GM_MUST_CHECK int gm_autocodec_resolve(struct gm_job *job, int world,
                                       const struct gm_coll_link *links, const int *islands,
                                       struct gm_gradsync_auto_out *out, char *reason, size_t cap);

/* The job codec named name ("fp32", ...); -EINVAL for anything else (auto included). */
GM_MUST_CHECK int gm_autocodec_parse(const char *name, enum gm_job_codec *out);

#endif
