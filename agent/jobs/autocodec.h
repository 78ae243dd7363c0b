/*
 * agent/jobs/autocodec.h - codec = auto on the job's coordinator: from the links measured between
 * the ranks and one step's compute timed here, pick the codec every rank will run
 * (train/gradsync.h, gm_gradsync_auto_choose, holds the model and the rule; this is the
 * plumbing).
 *
 * Choices:
 * - Decided at submit by the coordinator, and sent to every rank in JOB_GROUP ("comm"), so
 *   every rank runs the same strategy from the start of every group.
 * - Re-decided during the run (gm_autoswitch_*): every rank reports its alpha-beta fit (rank
 *   0's is read here, the members' come in JOB_REPORT "fit" once a second); on every tick with
 *   new samples the coordinator builds the links from the slowest rank's fit
 *   (gm_gradsync_ab_hop) for the pairs that are not lan, the link layer's measurements for
 *   the lan pairs (none in one island: "Measured cost" below), adds the ranks' measured cost,
 *   and runs the same auto_choose with rank 0's measured compute per step
 *   (an average of the trainer's own step times: the timing at submit, one moment on a
 *   machine whose load changes, stands in only until steps are measured); the hysteresis is
 *   gm_gradsync_switch_decide's (train/gradsync.h).  A switch is announced
 *   (JOB_SWITCH, fenced by the group's generation and the chief's term) for rank 0's step +
 *   lead, lead = 2 + the steps that one control message needs behind a full TRAIN frame on
 *   the fitted link (RTT + 256 KiB / bandwidth, over the running codec's predicted step),
 *   at least 3, at most 50.  Rank 0 takes it only once every member has answered that it
 *   will (agent/jobs/rank.h gm_rank_switch); a member already past that step answers
 *   "switch-late" and the group is re-formed with the new codec instead (a resync from rank
 *   0's state: slower, still consistent).
 * - Measured cost (issue 21): what the running collective costs the step beyond the links, as
 *   the ranks measure it (agent/jobs/rank.h cpu_taken_s, coll_s; members send it in JOB_REPORT
 *   "fit"'s speed), is priced on every candidate in proportion to its bytes a step
 *   (gm_gradsync_auto_in.meas_s): on a host whose CPU is capped (or busy), the loop thread's
 *   TLS, summing and copies for the all-reduce run inside the same cores as the trainer, so
 *   each CPU second of it is compute the trainer does not get (gm_gradsync_cpu_taken: 0 where
 *   a spare core ran it).  The most any rank lost is added to the links' estimate, and taken
 *   out of rank 0's measured compute (which holds it).  In a group that is one LAN island
 *   (every pair lan) the links are not priced at all: the bucketed all-reduce overlaps
 *   backward, which neither the probe nor PING sees, so the codec is priced on the measured
 *   cost alone: the least wait for the collective of any rank plus the most compute taken,
 *   and only among fp32 and fp16 (gm_gradsync_auto_in.dense_only: a dense all-reduce's cost
 *   does not predict PowerSGD's, whose compression and blocking all-reduces run on the
 *   trainer).  Such a group starts at fp32 (job_codec.c) and switches only on measurements:
 *   fp32 is left when its measured cost is over the budget (20% of compute:
 *   GM_GRADSYNC_SWITCH_HYST_DENSE, no margin from fp32 to fp16), for fp16 (half the bytes:
 *   half the TLS and summing), and the same
 *   rank-0-step switch rules apply.  On an uncapped host with a spare core the compute taken
 *   is ~0 and a fast LAN's wait small: fp32 stays.  The loop's other work (heartbeats, link
 *   stats: ~7 ms a step on a 0.5-core host with no collective) is counted as the
 *   collective's: a small overestimate.
 * - Compute: one training step of the job's model (forward, loss, backward) at the per-rank
 *   batch (above 256 samples: at 256, scaled linearly, so that the loop, which the timing
 *   blocks, answers a submit well within the CLI's 10 s even for large batches) on random
 *   inputs, timed here on the loop thread with the job's BLAS threads: the
 *   median of 5 after a warm-up (LeNet-5 at batch 64: about 40 ms in all).  The input shape
 *   comes from the data kind without reading the data: idx 1x28x28, CIFAR-10 3x32x32, a folder
 *   channels x image_size^2 (32 when the size is native); 10 classes (only the last layer's
 *   width, a small part of the time).
 * - Links: alpha = RTT / 2 and bytes_per_s = the probe's throughput, as measured by the link
 *   layer (agent/mesh/measure.c); a pair nobody measured gets the slowest measured link (the ring
 *   runs at its slowest hop, so this errs slow, never fast).  With no measurement at all the
 *   job runs fp32 and says why.
 *
 * Loop thread (it blocks the loop for the timing: tens of ms for the models this build has).
 */
#ifndef GM_AGENT_JOBS_AUTOCODEC_H
#define GM_AGENT_JOBS_AUTOCODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

struct gm_model;
/* The job's model on the CPU, for max_batch samples, with the input shape its data kind implies
 * (*per: floats per sample).  0 or a negative error. */
GM_MUST_CHECK int gm_autocodec_model(const struct gm_job *job, int batch, struct gm_model **m,
                                     size_t *per);

/* Switching mid-run, on the coordinator (see above).  Opaque; loop thread. */
struct gm_autoswitch;

/* For job (codec resolved by auto) on world ranks, with the compute timed at submit (0: none
 * was: one LAN island; decisions then wait for rank 0's measured steps).  0, -EINVAL,
 * -ENOMEM (then *out is NULL and the job keeps its codec). */
GM_MUST_CHECK int gm_autoswitch_new(const struct gm_job *job, double compute_s,
                                    struct gm_autoswitch **out);
void gm_autoswitch_free(struct gm_autoswitch *a);
/* A new group of world ranks formed at rank 0's step: the fits and any pending switch are
 * dropped, and no decision is made for GM_GRADSYNC_SWITCH_DWELL steps. */
void gm_autoswitch_group(struct gm_autoswitch *a, int world, long step);
/* Rank r's fit (ops: samples so far). */
void gm_autoswitch_fit(struct gm_autoswitch *a, int r, const struct gm_coll_link *fit,
                       uint64_t ops);
/* Member rank r's DiLoCo sync as it measured it (gm_gradsync_diloco_sync_s, reported with its
 * fit; 0: none).  Each rank times a sync from when the last of its peers' data began to arrive
 * (gradsync's peers_in), not from its own boundary: a rank that arrived first would otherwise
 * time its wait for the others, which grows with H wherever the ranks' steps differ (a capped
 * host, an island's follower).  Timed so, the rank that arrived last sees the others' data
 * there already and times little more than its own part; a rank that waited for it times the
 * rest of the exchange.  H is sized from the longest of them, rank 0's included (rank 0's
 * whole wait alone swung H 8 <-> 64 ten times a run on the 3-host rows; the least, tried, went
 * to H = 8 when the island's leader arrived last). */
void gm_autoswitch_sync(struct gm_autoswitch *a, int r, double sync_s);

struct gm_autoswitch_decision {
    struct gm_gradsync_strategy to; /* algo as cur's */
    long step;                      /* rank 0's step + lead */
    uint32_t seq;                   /* the switch's number in the job, from 1 */
    int lead;
    char why[320];
};

/* One decision for a job running cur, rank 0 at step, on links (world*world: the lan pairs'
 * measurements, bytes_per_s 0 elsewhere; the fit fills those) in islands (NULL: none), with
 * compute_s: rank 0's measured compute per step (0: the one timed at submit), sync_s: what
 * rank 0's DiLoCo syncs took (gm_gradsync_diloco_sync_s; 0: none; a member's longer one,
 * gm_autoswitch_sync, counts instead), total_steps: the run's (H
 * compared as capped to a quarter of it).  Re-sizing DiLoCo's H is a switch to DiLoCo with
 * the new H, announced as any other (train/gradsync.h, "Switching").  Returns 1 with
 * *d filled when the coordinator should announce a switch (and from then on waits for the
 * members' answers), 0 to stay (no new samples, a switch pending, the hysteresis), or a
 * negative error. */
GM_MUST_CHECK int gm_autoswitch_decide(struct gm_autoswitch *a,
                                       const struct gm_gradsync_strategy *cur,
                                       const struct gm_coll_link *links, const int *islands,
                                       long step, double compute_s, double sync_s, long total_steps,
                                       struct gm_autoswitch_decision *d);
/* Rank r's measured cost of the running collective a step (averaged): wait_s, the trainer's
 * wait for it (gm_rank_progress.coll_s), and cpu_s, the compute its CPU work took from the
 * trainer (gm_rank_progress.cpu_taken_s).  Dropped with the group. */
void gm_autoswitch_cost(struct gm_autoswitch *a, int r, double wait_s, double cpu_s);
/* Whether every pair of the current group is lan (one island): its codecs are then priced on
 * the measured cost alone (above), not on links. */
void gm_autoswitch_one_island(struct gm_autoswitch *a, bool one);
/* Whether a switch is announced and waits for answers (*seq: its number). */
bool gm_autoswitch_pending(const struct gm_autoswitch *a, uint32_t *seq);
/* Member rank r's answer to switch seq: 1 when every member has now answered ok, -1 when one
 * cannot take it (the caller re-forms the group), 0 while answers are missing (or for a
 * switch that is not pending). */
int gm_autoswitch_answer(struct gm_autoswitch *a, int r, uint32_t seq, bool ok);

#endif
