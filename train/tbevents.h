/*
 * train/tbevents.h - TensorBoard event files: scalars that TensorBoard (and anything that
 * reads its event files) plots, written by `gradmesh train --local` and by jobs.
 *
 * Format.  An event file is a TFRecord stream: each record is
 *     uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *     length bytes of data          | uint32 masked CRC-32C of the data
 * where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.  The data is a serialized
 * tensorflow.Event protobuf: the first record carries file_version "brain.Event:2", the
 * others a Summary with one Value {tag, simple_value}:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 *
 * Choices.  The protobuf is encoded by hand (about 60 lines, below) instead of with Debian's
 * protobuf-c: we write three fixed messages and read none, and protobuf-c would add a code
 * generator to the build plus copies of TensorFlow's .proto files (not packaged in Debian)
 * for those seven fields.  tests/integration/tensorboard_events.sh reads our files with the
 * real `tensorboard` package, which is the check that the encoding is right.  CRC-32C is a
 * table-driven loop for the same kind of reason: zlib has only CRC-32, and Debian 12
 * packages no CRC-32C library; it is checked against RFC 3720's vectors.
 *
 * Files.  gm_tb_open() makes DIR (mkdir -p, 0755) and creates
 * DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid> (O_EXCL).  An event file is an
 * append-only stream that TensorBoard reads while it grows, so it is not written with the
 * temp-file-and-rename of checkpoints; a crash loses at most the unflushed tail, and the
 * reader skips a truncated last record.  Records are buffered (stdio) and flushed by
 * gm_tb_flush() and gm_tb_close().
 *
 * One writer per thread at a time; no global state.
 */
#ifndef GM_TRAIN_TBEVENTS_H
#define GM_TRAIN_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_TB_TAG_MAX 256 /* bytes of a tag, at most */

struct gm_tb_writer;

/* Makes dir if needed and opens a new event file in it; writes the file_version record.
 * -errno on failure (logged with the path); NULL *out then. */
int gm_tb_open(const char *dir, struct gm_tb_writer **out) GM_MUST_CHECK;

/* Appends one scalar event.  wall_time: seconds since the epoch (0: now).  -EINVAL for an
 * empty or too long tag, -EIO (logged once) after a failed write. */
int gm_tb_scalar(struct gm_tb_writer *w, const char *tag, int64_t step, double wall_time,
                 float value) GM_MUST_CHECK;

/* Pushes buffered records to the file (fflush; not fsync). */
int gm_tb_flush(struct gm_tb_writer *w) GM_MUST_CHECK;

/* Flushes and closes; NULL-safe.  Returns the first write error seen, if any. */
int gm_tb_close(struct gm_tb_writer *w);

/* The file's path (owned by w). */
const char *gm_tb_path(const struct gm_tb_writer *w);

/*
 * A training run's scalars.  gm_tb_train_hooks fills hooks that write, from the trainer
 * (train/trainer.h), for every step:
 *     train/loss  train/learning_rate  train/samples_per_s
 *     step_time/compute_s  step_time/collective_s  step_time/optimizer_s
 *     shares/samples (the writing rank's samples of the step's global batch: [job] shares)
 * and for every test evaluation, at the step it ran after:
 *     test/accuracy_percent  test/loss  train/epoch_loss  train/epoch_samples_per_s
 * gm_tb_write_summary writes the run summary at its last step (the numbers of
 * --summary-json): summary/test_accuracy_percent  summary/test_loss  summary/train_loss
 *     summary/samples_per_s  summary/wall_s  summary/bytes_sent
 * A job adds link/<peer>/bytes_sent per step through its own hook (the job runtime).
 * Write errors are sticky: the hooks stop writing, gm_tb_close() returns the error.
 */
struct gm_train_hooks;
struct gm_train_summary;
void gm_tb_train_hooks(struct gm_tb_writer *w, struct gm_train_hooks *hooks);
/* What those hooks do, for a caller with hooks of its own (the agent's rank). */
struct gm_train_step_info;
struct gm_train_eval_info;
void gm_tb_on_step(struct gm_tb_writer *w, const struct gm_train_step_info *si);
void gm_tb_on_eval(struct gm_tb_writer *w, const struct gm_train_eval_info *ei);
int gm_tb_write_summary(struct gm_tb_writer *w, const struct gm_train_summary *sum) GM_MUST_CHECK;

/* Exposed for tests. */
uint32_t gm_tb_crc32c(const void *buf, size_t len);
uint32_t gm_tb_mask_crc(uint32_t crc);
/* Serializes an Event into buf (cap bytes); returns its length, or 0 if it does not fit.
 * file_version != NULL: the version event (tag ignored); else a scalar Summary. */
size_t gm_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                          const char *file_version, const char *tag, float value);
/* Frames data as one TFRecord into buf (cap >= len + 16); returns len + 16. */
size_t gm_tb_frame(uint8_t *buf, size_t cap, const uint8_t *data, size_t len);

#endif
