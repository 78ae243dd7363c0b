/*
 * agent/jobs/jobmsg.h - payloads of the job control messages (JSON, jansson,
 * duplicate keys rejected).  Decoders check every field's type, length and
 * character set and return GM_ERR_PROTO for anything else; they never trust
 * a count.  Pure functions: any thread; fuzzed by tests/fuzz/fuzz_jobmsg.c.
 *
 *   JOB_OFFER  {id, text, origin, ranks?: [node]}        coordinator -> member; ranks: the
 *                                                        nodes it will train with (it answers
 *                                                        once it has a link to each)
 *   JOB_CHECK  {id, error?, group?: "dir"|"bucket", files: [{name, size, sha256, count?}],
 *               ckpt_room?, probe?: {n: [int, int], busy_s: [number, number]}}
 *                                                        member -> coordinator; at most
 *                                                        GM_JOB_FILES_MAX entries: one per
 *                                                        file, or (group) one per top-level
 *                                                        entry or name bucket, summed
 *                                                        (gm_datahash_group); ckpt_room: the
 *                                                        bytes the member's checkpoint
 *                                                        directory of the job can take (free
 *                                                        space plus its earlier checkpoints);
 *                                                        probe: shares = auto's speed probe
 *                                                        (agent/jobs/shareprobe.h), a pass of
 *                                                        the model at n[0] > n[1] >= 1 samples
 *                                                        took busy_s (> 0) seconds
 *   JOB_GROUP  {id, text, origin, gen, ranks: [node], global_batch,
 *               comm?: {codec: a name of GM_JOB_CODECS but "auto" (train/job.h), local_steps},
 *               islands?: [int], shares?: [int]}
 *                                                        coordinator -> member; comm: the
 *                                                        codec the coordinator chose for
 *                                                        codec = auto (every rank runs it);
 *                                                        islands: per rank, the lowest rank
 *                                                        of its LAN island, or every rank the
 *                                                        hub of a star VPN (the group runs
 *                                                        the hierarchical all-reduce);
 *                                                        shares: each rank's samples of the
 *                                                        global batch (shares = auto,
 *                                                        agent/jobs/autoshare.h)
 *   JOB_REPORT {id, gen, event: "group-failed"|"exit"|"fit"|"switch-ok"|"switch-late"|"cancel",
 *               code, message, fit?: {alpha_s, bytes_per_s, ops},
 *               speed?: {samples, step_s, coll_s}, seq?, step?}
 *                                                        member -> coordinator; fit: the
 *                                                        rank's alpha-beta fit (with "fit"),
 *                                                        speed: its samples per step and a
 *                                                        step's time, of it in the
 *                                                        collective (shares = auto);
 *                                                        seq, step: the answer to JOB_SWITCH
 *                                                        seq (step: the member's last step
 *                                                        boundary); cancel: `gradmesh cancel`
 *                                                        typed on the member (message: who)
 *   JOB_SWITCH {id, gen, seq, step, comm: {codec, local_steps}}
 *                                                        coordinator -> member: group gen
 *                                                        runs comm from step on
 *   JOB_END    {id, state: "done"|"cancelled"|"failed"|"refused", message,
 *               summary?: {test_accuracy, steps, samples_per_s, weights}}
 *                                                        coordinator -> member
 *   JOB_SUBMIT {id, text, origin}                        member -> coordinator (a submit
 *                                                        typed on a member)
 */
#ifndef GM_AGENT_JOBS_JOBMSG_H
#define GM_AGENT_JOBS_JOBMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "crypto/identity.h"
#include "train/job.h"

#define GM_JOBMSG_SYNC_MAX_S 3600.0 /* REPORT fit sync_s: at most an hour */
#define GM_JOB_ID_LEN 16 /* hex digits */
#define GM_JOB_RANKS_MAX 256
#define GM_JOB_FILES_MAX 4096 /* entries in one JOB_CHECK (files or groups of them) */
#define GM_JOB_MSG_MAX 512 /* message strings, bytes */

/* How a JOB_CHECK's entries stand for the files: one each (a dataset of at most
 * GM_JOB_FILES_MAX files), one per top-level entry of the data dir (a class folder "cat/",
 * or a file), or one per bucket "#00".."#ff" of SHA-256(name)'s first byte. */
enum gm_jobfile_group {
    GM_JOBFILE_GROUP_FILE,
    GM_JOBFILE_GROUP_DIR,
    GM_JOBFILE_GROUP_BUCKET,
};

struct gm_jobfile {
    char name[256]; /* relative to the data dir; a group's: "dir/", a top-level file, "#xx" */
    uint64_t size;  /* bytes (a group: of all its files) */
    char sha256[65]; /* the file's (a group: of its files' names, sizes and hashes) */
    uint64_t count;  /* files: 1 for a file, >= 1 for a group */
};

struct gm_jobmsg {
    char id[GM_JOB_ID_LEN + 1];
    char *text; /* owned (OFFER, GROUP) */
    size_t text_len;
    char origin[256];
    uint32_t gen;                      /* GROUP, REPORT */
    char (*ranks)[GM_ID_NAME_MAX + 1]; /* owned (GROUP) */
    size_t nranks;
    int global_batch;         /* GROUP: fixed by the coordinator at submit, >= 1 */
    enum gm_job_codec codec;  /* GROUP: auto's choice (GM_JOB_CODEC_AUTO: none, the job's own
                               * [comm]); SWITCH: the codec switched to, never AUTO */
    uint32_t local_steps;     /* GROUP with codec: diloco's H, >= 1 */
    int *islands;             /* owned (GROUP, optional): nranks entries, islands[i] < nranks
                               * and islands[islands[i]] == islands[i]; NULL: none */
    int *shares;              /* owned (GROUP, optional): nranks (2..GM_JOB_SHARES_MAX) sample
                               * counts, each >= 1, summing to global_batch; NULL: none */
    struct gm_jobfile *files; /* owned (CHECK) */
    size_t nfiles;
    enum gm_jobfile_group group; /* CHECK: what the files entries stand for */
    bool have_room;              /* CHECK: ckpt_room was said */
    uint64_t ckpt_room;          /* CHECK: bytes */
    bool have_probe;             /* CHECK: the speed probe's points (shares = auto) */
    int probe_n[2];              /* samples, probe_n[0] > probe_n[1] >= 1 */
    double probe_s[2];           /* seconds a pass, finite, > 0 */
    char event[16];              /* REPORT */
    uint32_t seq;  /* SWITCH, REPORT switch-*: the switch's number in the job */
    long step;     /* SWITCH: the step it takes effect at; REPORT switch-*: where the rank is */
    bool have_fit; /* REPORT fit */
    double fit_alpha_s, fit_bytes_per_s; /* >= 0, > 0 */
    uint64_t fit_ops;
    /* REPORT fit, optional: the rank's DiLoCo sync (gm_gradsync_diloco_sync_s), seconds,
     * 0 <= sync_s <= GM_JOBMSG_SYNC_MAX_S; 0: none (not sent) */
    double fit_sync_s;
    /* REPORT fit, optional: the rank's last steps (shares = auto, agent/jobs/autoshare.h):
     * its samples per step (>= 1), a step's wall time (> 0) and the part of it in the
     * collective (>= 0, <= step_s), averaged */
    bool have_speed;
    int speed_samples;
    double speed_step_s, speed_coll_s, speed_stall_s;
    /* optional (0 when absent): the compute its collective took from its trainer a step,
     * 0 <= cpu_s < step_s (agent/jobs/rank.h cpu_taken_s; codec = auto prices it) */
    double speed_cpu_s;
    char state[16]; /* END */
    int code;
    char message[GM_JOB_MSG_MAX]; /* CHECK error, REPORT, END */
    /* END of a done job: the coordinator's summary (optional "summary" object) */
    bool have_summary;
    double test_accuracy, samples_per_s;
    long steps;
    char weights[1024]; /* path on the coordinator */
};

/* type: GM_MSG_JOB_*.  On error m is freed and zeroed. */
GM_MUST_CHECK int gm_jobmsg_decode(uint16_t type, const uint8_t *p, size_t len,
                                   struct gm_jobmsg *m);
/* A malloc'd JSON text. */
GM_MUST_CHECK int gm_jobmsg_encode(uint16_t type, const struct gm_jobmsg *m, char **out,
                                   size_t *len);
void gm_jobmsg_free(struct gm_jobmsg *m);

#endif
