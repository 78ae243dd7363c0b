/*
 * agent/cluster/chieffsm.h - the chief's replicated state machine: the cluster's
 * metadata that raft replicates (agent/cluster/chief.h), its commands, their wire
 * form and the snapshot form.
 *
 * State: members and their roles (voter: votes and trains; witness: votes,
 * never trains; spare: neither, follows the log), revoked nodes, token uses,
 * jobs and their state, and committed checkpoints (job, step, term, SHA-256,
 * the nodes that hold the file).  Bounded: GM_MEMBERS_MAX members and
 * revoked nodes, GM_CHIEF_TOKENS_MAX tokens, the last GM_CHIEF_JOBS_MAX jobs
 * and GM_CHIEF_CKPTS_MAX checkpoints (older ones are dropped as new ones come).
 *
 * Commands are small versioned JSON objects (jansson; duplicate keys, unknown
 * versions and unknown ops refused; every field checked for type, length and
 * character set):
 *   {"v":1, "op":"member",     "term":T, "node":N, "role":"voter|witness|spare"}
 *   {"v":1, "op":"revoke",     "term":T, "node":N, "at":UNIX_S}
 *   {"v":1, "op":"token-use",  "term":T, "token":HEX16, "limit"?:N}
 *      (limit: the token's uses; a use past it is refused with GM_ERR_TOKEN, so that
 *      two voters admitting with one token at once cannot both win: agent/cluster/admit.h)
 *   {"v":1, "op":"job",        "term":T, "job":ID, "state":S, "step":K, "name"?:NAME,
 *                              "error"?:WHY}
 *      (name: the job file's [job] name; error: why a job that ended other than done ended,
 *      the one reason every node's `gradmesh jobs` shows; both optional, kept when a later
 *      command of the job leaves them out)
 *   {"v":1, "op":"checkpoint", "term":T, "job":ID, "step":K, "sha256":HEX64,
 *                              "holders":[N, ...]}
 *   {"v":1, "op":"job-spec",   "term":T, "job":ID, "spec":TEXT, "sha256":HEX64,
 *                              "global_batch":G}
 * job-spec makes a job durable: its job file's text (at most GM_CHIEF_SPEC_MAX bytes,
 * sha256 its SHA-256, checked on decode and on restore: a spec that does not hash to it
 * is refused) and the global batch the coordinator fixed for it, so that a chief elected
 * by a cluster restarted from nothing resumes it (agent/jobs/jobresume.h).  A job's spec is
 * kept while its state is not final (done, cancelled, failed, refused drop it).
 * JSON rather than a binary format: the agent's other control payloads are
 * JSON, the commands are small and rare (metadata, not tensors), and a
 * snapshot a person can read with `jq` helps when something goes wrong.
 *
 * Term fencing: every command carries the term of the chief that proposed it.
 * The machine remembers the highest term it applied; a command from an older
 * term is refused (-ESTALE) and changes nothing.  Apply never fails as far
 * as raft is concerned: a refusal is the command's result, the same on every
 * node, so every replica stays identical.
 *
 * The chief's own frames, CHIEF_REQ and CHIEF_ANS, are link traffic, not replicated
 * state: their codec is agent/cluster/chiefmsg.h.
 *
 * Pure functions on caller-owned structs; any thread, one at a time per
 * struct.  The decoders are fuzzed (tests/fuzz/fuzz_chiefcmd.c).
 */
#ifndef GM_AGENT_CLUSTER_CHIEFFSM_H
#define GM_AGENT_CLUSTER_CHIEFFSM_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <raft.h>

#include "agent/net/proto.h"
#include "common/err.h"
#include "crypto/identity.h"

#define GM_CHIEF_CMD_VERSION 1
#define GM_CHIEF_NAME_MAX GM_ID_NAME_MAX /* node and job ids */
#define GM_CHIEF_TOKEN_HEX 16            /* a token id, hex */
#define GM_CHIEF_STATE_MAX 15            /* a job state's name */
#define GM_CHIEF_HOLDERS_MAX 16
#define GM_CHIEF_TOKENS_MAX 4096
#define GM_CHIEF_JOBS_MAX 64
#define GM_CHIEF_CKPTS_MAX 64
#define GM_CHIEF_JOB_NAME_MAX 63   /* bytes of a job's name that "job" holds */
#define GM_CHIEF_JOB_ERROR_MAX 480 /* bytes of a job's reason that "job" holds */
#define GM_CHIEF_SPEC_MAX 16384    /* bytes of a job's text that job-spec holds */
/* bytes of one encoded command: a job-spec's text JSON-escaped (at most 6 bytes a byte)
 * plus the rest */
#define GM_CHIEF_CMD_MAX (8192 + 6 * GM_CHIEF_SPEC_MAX)
#define GM_CHIEF_TOKEN_USES_MAX 10000

enum gm_chief_role {
    GM_CHIEF_ROLE_VOTER = 0,
    GM_CHIEF_ROLE_WITNESS = 1,
    GM_CHIEF_ROLE_SPARE = 2,
};

enum gm_chief_op {
    GM_CHIEF_OP_MEMBER = 1,
    GM_CHIEF_OP_REVOKE,
    GM_CHIEF_OP_TOKEN_USE,
    GM_CHIEF_OP_JOB,
    GM_CHIEF_OP_CHECKPOINT,
    GM_CHIEF_OP_JOB_SPEC,
};

typedef char gm_chief_name[GM_CHIEF_NAME_MAX + 1];

struct gm_chief_cmd {
    enum gm_chief_op op;
    uint64_t term;
    gm_chief_name node;                          /* member, revoke */
    enum gm_chief_role role;                     /* member */
    int64_t at;                                  /* revoke: the chief's wall clock, s */
    char token[GM_CHIEF_TOKEN_HEX + 1];          /* token-use */
    int64_t limit;                               /* token-use: 0 (none) or the token's uses */
    gm_chief_name job;                           /* job, checkpoint */
    char state[GM_CHIEF_STATE_MAX + 1];          /* job */
    char name[GM_CHIEF_JOB_NAME_MAX + 1];        /* job: "" when not said */
    char error[GM_CHIEF_JOB_ERROR_MAX + 1];      /* job: "" when not said */
    int64_t step;                                /* job, checkpoint */
    char sha256[65];                             /* checkpoint, job-spec: hex */
    gm_chief_name holders[GM_CHIEF_HOLDERS_MAX]; /* checkpoint */
    size_t nholders;
    char spec[GM_CHIEF_SPEC_MAX + 1]; /* job-spec: the job text, NUL-terminated */
    size_t spec_len;
    int64_t global_batch; /* job-spec */
};

struct gm_chief_member {
    gm_chief_name node;
    enum gm_chief_role role;
};

struct gm_chief_revoked {
    gm_chief_name node;
    uint64_t term;
    int64_t at;
};

struct gm_chief_token_use {
    char token[GM_CHIEF_TOKEN_HEX + 1];
    uint64_t uses;
};

struct gm_chief_job {
    gm_chief_name job;
    char state[GM_CHIEF_STATE_MAX + 1];
    char name[GM_CHIEF_JOB_NAME_MAX + 1];   /* "" when none was said */
    char error[GM_CHIEF_JOB_ERROR_MAX + 1]; /* why it ended, when not done */
    int64_t step;
    uint64_t term;
    char *spec; /* owned: the job text (spec_len bytes + NUL), NULL when none is held */
    size_t spec_len;
    char spec_sha256[65];
    int64_t global_batch;
};

struct gm_chief_ckpt {
    gm_chief_name job;
    int64_t step;
    uint64_t term;
    char sha256[65];
    gm_chief_name holders[GM_CHIEF_HOLDERS_MAX];
    size_t nholders;
};

/* Called after each command is applied (code: its result; c is zeroed when the entry
 * did not decode): what a command does outside the state (agent/cluster/chief.c). */
typedef void (*gm_chief_after_fn)(void *arg, const struct gm_chief_cmd *c, int code);

struct gm_chief_fsm {
    gm_chief_after_fn after; /* optional; kept by restore */
    void *after_arg;
    uint64_t restores;               /* snapshots restored (kept by restore) */
    uint64_t term;                   /* the highest term of an applied command */
    uint64_t applied;                /* commands applied (refused ones included) */
    struct gm_chief_member *members; /* owned, each array */
    size_t nmembers;
    struct gm_chief_revoked *revoked;
    size_t nrevoked;
    struct gm_chief_token_use *tokens;
    size_t ntokens;
    struct gm_chief_job *jobs; /* oldest first */
    size_t njobs;
    struct gm_chief_ckpt *ckpts; /* oldest first */
    size_t nckpts;
};

const char *gm_chief_role_name(enum gm_chief_role r);
/* "voter" | "witness" | "spare" -> 0, else -EINVAL. */
GM_MUST_CHECK int gm_chief_role_parse(const char *s, enum gm_chief_role *out);

/* *out malloc'd (free()), *len without the NUL. */
GM_MUST_CHECK int gm_chief_cmd_encode(const struct gm_chief_cmd *c, char **out, size_t *len);
/* GM_ERR_PROTO for anything but a well-formed command of a known version. */
GM_MUST_CHECK int gm_chief_cmd_decode(const uint8_t *p, size_t len, struct gm_chief_cmd *c);

void gm_chief_fsm_init(struct gm_chief_fsm *f);
void gm_chief_fsm_free(struct gm_chief_fsm *f);
/* Applies c: 0, -ESTALE (older term), -EPERM (a revoked node), -ENOSPC (a
 * table is full), -EINVAL (a job-spec for a job whose state is final), -ENOMEM.  A refused command
 * changes nothing but `applied`. */
int gm_chief_fsm_apply(struct gm_chief_fsm *f, const struct gm_chief_cmd *c);
/* The whole state as JSON text; *out malloc'd. */
GM_MUST_CHECK int gm_chief_fsm_snapshot(const struct gm_chief_fsm *f, char **out, size_t *len);
/* Replaces the state with a snapshot's; on error f is unchanged. */
GM_MUST_CHECK int gm_chief_fsm_restore(struct gm_chief_fsm *f, const uint8_t *p, size_t len);

/* raft's view of f: apply, snapshot (version 2: snapshot_finalize frees it) and
 * restore.  out->data is f.  Entries and snapshots are JSON padded with blanks to a
 * multiple of 8 bytes: raft's segment format misreads entries of other lengths after a
 * restart or on a follower (canonical/raft issues 189 and 304). */
void gm_chief_fsm_raft(struct gm_chief_fsm *f, struct raft_fsm *out);
/* c as one raft entry: out->base raft_malloc'd (raft_apply takes it), padded. */
GM_MUST_CHECK int gm_chief_cmd_buffer(const struct gm_chief_cmd *c, struct raft_buffer *out);

/* The member entry of node, or NULL. */
const struct gm_chief_member *gm_chief_fsm_member(const struct gm_chief_fsm *f, const char *node);
/* The recorded members that vote or stand witness (every role but spare). */
unsigned gm_chief_fsm_recorded_voters(const struct gm_chief_fsm *f);
/* 1 when node is revoked. */
int gm_chief_fsm_is_revoked(const struct gm_chief_fsm *f, const char *node);
/* 1 when a job state is final (done, cancelled, failed, refused). */
int gm_chief_job_state_final(const char *state);
/* The state as a JSON object (members, revoked, tokens, jobs, checkpoints). */
json_t *gm_chief_fsm_json(const struct gm_chief_fsm *f);

#endif
