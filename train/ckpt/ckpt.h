/*
 * train/ckpt/ckpt.h - training checkpoints: what one holds, how it is written, checked,
 * refused and kept.
 *
 * A checkpoint is one safetensors file (train/ckpt/safetensors.h) that holds everything a run
 * needs to go on from a step boundary as if it had never stopped:
 *   - the weights, under their PyTorch names and layouts ("conv1.weight", ...), so the file is
 *     also a state_dict that safetensors.numpy / PyTorch load as is;
 *   - "gradmesh.optim.state": the optimizer's flat state buffer (SGD momentum, or Adam's m
 *     then v) in the model's internal layout, absent when the optimizer has none;
 *   - "gradmesh.codec.*": codec state of the writing rank (PowerSGD's Q and error feedback,
 *     DiLoCo's anchor and outer momentum), flat, when the run has any;
 *   - __metadata__ (every value a string): "format" "pt", "producer" "gradmesh",
 *     "gradmesh.ckpt" (GM_CKPT_FORMAT, the version of this layout), "job" (the job text),
 *     "job_hash" (the job's identity: SHA-256 of the job text less its [job] epochs
 *     line, hex; struct gm_job), "job_name", "model", "params", "step" (steps
 *     taken), "total_steps", "epoch" (0-based epoch of the next step), "data_offset" (the
 *     next sample's position in that epoch's permutation: (step mod steps_per_epoch) *
 *     global_batch), "global_batch", "seed", "optim", "optim_step", "term" (the chief's term,
 *     0 without an elected chief), and "gradmesh.codec" (the codec the state belongs to).
 *
 * Writing (gm_ckpt_write): the file appears atomically (temp file, fsync, rename, fsync of the
 * directory, by gm_safetensors_write); then it is read back, its SHA-256 computed and written
 * beside it as "<file>.sha256" in sha256sum(1) format ("<hex>  <basename>\n"), atomically the
 * same way.  A kill at any point leaves, under a final name, either nothing, a complete file
 * without its .sha256 (not yet committed: listings skip it, pruning removes it), or a
 * complete file with a matching .sha256.  Never a partial file.
 *
 * Reading (gm_ckpt_load) refuses, with one log line naming the file and the reason:
 *   missing or malformed .sha256, a file whose bytes do not hash to it (GM_ERR_FORMAT:
 *   corrupt or truncated); not a valid safetensors file, or metadata missing, of the wrong
 *   format version or not a number where one is required (GM_ERR_FORMAT); another job or
 *   another model than the caller expects (GM_ERR_MISMATCH: foreign).
 * The metadata parser (gm_ckpt_info_parse) and the .sha256 line parser are fuzzed
 * (tests/fuzz/fuzz_ckpt_meta.c).
 *
 * A directory of checkpoints (one per job): files "step-NNNNNNNNNN.safetensors" (the step,
 * ten digits).  gm_ckpt_dir_newest loads the newest one that passes gm_ckpt_load, and logs
 * each newer one it refuses, so a corrupt newest checkpoint falls back to the one before;
 * gm_ckpt_dir_prune keeps the newest K committed ones.
 *
 * SHA-256 is OpenSSL's (EVP); hex is lower case.  No global state; calls on different files
 * may run on different threads.
 */
#ifndef GM_TRAIN_CKPT_CKPT_H
#define GM_TRAIN_CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "train/ckpt/safetensors.h"

#define GM_CKPT_FORMAT 1
#define GM_CKPT_SUFFIX ".safetensors"
#define GM_CKPT_SHA_SUFFIX ".sha256"
#define GM_CKPT_OPTIM_TENSOR "gradmesh.optim.state"
#define GM_CKPT_CODEC_PREFIX "gradmesh.codec."
#define GM_CKPT_PRIVATE_PREFIX "gradmesh." /* tensors that are not weights */

/* The metadata of a checkpoint, parsed. */
struct gm_ckpt_info {
    int format;
    char job_hash[65];
    char job_name[64];
    char model[16];
    char optim[16];
    char codec[16]; /* "" when no codec state is held */
    long step, total_steps;
    int epoch;
    long data_offset;
    int global_batch;
    uint64_t seed;
    long optim_step;
    uint64_t term;
    size_t params;
    /* optional ("gradmesh.shares"): each rank's samples of the global batch at that step,
     * "72:24" ([job] shares; train/trainer.h); "" when one rank or not recorded */
    char shares[512]; /* GM_JOB_SHARES_MAX ranks of up to 7 digits */
};

/* One entry of a checkpoint directory. */
struct gm_ckpt_entry {
    long step;
    char path[1024];
    char sha256[65]; /* "" when the .sha256 is missing (not committed) */
    int64_t bytes;
    int64_t mtime; /* seconds since the epoch */
};

/* The bytes an unprivileged writer may still use in dir's file system (statvfs f_bavail), dir
 * or, when it does not exist yet, the nearest directory above it that does.  0 or -errno. */
int gm_ckpt_free_bytes(const char *dir, uint64_t *out) GM_MUST_CHECK;

/* SHA-256 (lower-case hex) of len bytes. */
void gm_ckpt_sha256_hex(const void *buf, size_t len, char hex[65]);

/* The path of the checkpoint of step in dir, into buf (cap bytes).  -ENAMETOOLONG. */
int gm_ckpt_path(const char *dir, long step, char *buf, size_t cap) GM_MUST_CHECK;

/* The step in a checkpoint's file name ("DIR/step-0000000120.safetensors": 120), or -1. */
long gm_ckpt_name_step(const char *path);

/* Writes tensors t[0..nt) with info as metadata (plus "job", the job text, may be NULL) to
 * path, then path.sha256; sha256 (may be NULL) gets the file's hash.  0, -EINVAL, -errno. */
int gm_ckpt_write(const char *path, const struct gm_st_tensor *t, size_t nt,
                  const struct gm_ckpt_info *info, const char *job_text,
                  char sha256[65]) GM_MUST_CHECK;

/* Parses a file's metadata into info.  GM_ERR_FORMAT (one line naming origin) if a key is
 * missing or malformed, or the format is not GM_CKPT_FORMAT. */
int gm_ckpt_info_parse(const struct gm_st_file *f, const char *origin,
                       struct gm_ckpt_info *info) GM_MUST_CHECK;

/* Parses the len bytes of a .sha256 file: exactly "<64 lower-case hex>  <name>\n".
 * GM_ERR_FORMAT otherwise (hex then ""). */
int gm_ckpt_sha_line_parse(const char *buf, size_t len, const char *name,
                           char hex[65]) GM_MUST_CHECK;

/* Loads path after checking it against path.sha256, parses it and its metadata, and refuses
 * a checkpoint of another job (want_job_hash) or model (want_model) (either may be NULL: any).
 * On success f owns the file (gm_safetensors_free) and sha256 (may be NULL) gets its hash. */
int gm_ckpt_load(const char *path, const char *want_job_hash, const char *want_model,
                 struct gm_st_file *f, struct gm_ckpt_info *info, char sha256[65]) GM_MUST_CHECK;

/* Lists the checkpoints of dir, oldest first (*out owned by the caller, free()).  A missing
 * directory is an empty list.  -ENOMEM, -errno. */
int gm_ckpt_dir_list(const char *dir, struct gm_ckpt_entry **out, size_t *n) GM_MUST_CHECK;

/* Loads the newest checkpoint of dir at or below max_step (-1: any) that gm_ckpt_load
 * accepts; each newer one refused is logged and skipped.  path (cap bytes) gets its path.
 * -ENOENT when none is usable. */
int gm_ckpt_dir_newest(const char *dir, long max_step, const char *want_job_hash,
                       const char *want_model, struct gm_st_file *f, struct gm_ckpt_info *info,
                       char *path, size_t cap) GM_MUST_CHECK;

/* A checkpoint the cluster committed (agent/cluster/chieffsm.h: held by a majority of the voters,
 * recorded in the raft log): its step and SHA-256 (lower-case hex). */
struct gm_ckpt_ref {
    long step;
    char sha256[65];
};

/* Like gm_ckpt_dir_newest, but only the checkpoints refs[0..n) count (any order): the one of
 * the highest step whose file in dir passes gm_ckpt_load AND hashes to its ref's SHA-256.
 * Each newer committed one that is missing here, refused or of another hash is logged
 * (event=checkpoint-refused ... then event=checkpoint-fallback), so a corrupt or missing
 * newest one falls back to the committed one before it.  -ENOENT when none is usable. */
int gm_ckpt_dir_newest_committed(const char *dir, const struct gm_ckpt_ref *refs, size_t n,
                                 const char *want_job_hash, const char *want_model,
                                 struct gm_st_file *f, struct gm_ckpt_info *info, char *path,
                                 size_t cap) GM_MUST_CHECK;

/* Keeps the newest keep committed checkpoints of dir; removes older ones, files without a
 * .sha256 that are older than the newest committed one, and stale temp files.  0 or -errno
 * (logged). */
int gm_ckpt_dir_prune(const char *dir, int keep) GM_MUST_CHECK;

/* mkdir -p with mode 0700 for the directories it creates.  0 or -errno. */
int gm_ckpt_mkdirs(const char *dir) GM_MUST_CHECK;

#endif
