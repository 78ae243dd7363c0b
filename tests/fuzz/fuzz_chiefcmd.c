/*
 * tests/fuzz/fuzz_chiefcmd.c - the chief's replicated state machine's parsers
 * (agent/cluster/chieffsm.h), which read raft log entries and snapshots that came
 * from other nodes, and the CHIEF_REQ / CHIEF_ANS payloads (agent/cluster/chiefmsg.h):
 * byte 0 % 4 picks the parser, the rest is its input.
 *   0: gm_chief_cmd_decode (one command), then gm_chief_fsm_apply on a
 *      machine that already holds a little state;
 *   1: gm_chief_fsm_restore (a whole snapshot) over that machine;
 *   2: gm_chief_req_decode (revoke, role, and a voter's token "use");
 *   3: gm_chief_ans_decode (each: zeroed on error,
 *      valid fields, encode and decode again to the same).
 * Checks:
 *   - the result is 0, GM_ERR_PROTO or -ENOMEM; a refused command is zeroed,
 *     a refused snapshot leaves the machine as it was (same snapshot text);
 *   - what decodes holds only what the decoder promises (valid node and job
 *     ids, a known op and role, hex token and digest, distinct holders);
 *   - what decodes encodes and decodes again to the same fields; a restored
 *     machine snapshots and restores again to the same text;
 *   - apply returns 0 or one of its documented refusals, never raises the
 *     term on a refusal.
 *
 * Seeds: GM_FUZZ_CHIEFCMD_SEEDS=<dir> build-fuzz/fuzz_chiefcmd -runs=0 writes
 * encoded commands of every op (and a token use with a limit), a snapshot, three
 * requests and an answer, each
 * behind its selector byte,
 * into dir (tests/fuzz/corpus/chiefcmd/ holds them).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cluster/chiefmsg.h"
#include "agent/cluster/chieffsm.h"
#include "crypto/identity.h"
#include "train/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void need(bool ok)
{
    if (!ok)
        abort();
}

static bool hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static void check_cmd(const struct gm_chief_cmd *c)
{
    switch (c->op) {
    case GM_CHIEF_OP_MEMBER:
        need(gm_id_name_valid(c->node) && (unsigned)c->role <= GM_CHIEF_ROLE_SPARE);
        break;
    case GM_CHIEF_OP_REVOKE:
        need(gm_id_name_valid(c->node) && c->at >= 0);
        break;
    case GM_CHIEF_OP_TOKEN_USE:
        need(hex(c->token, GM_CHIEF_TOKEN_HEX) && c->limit >= 0 &&
             c->limit <= GM_CHIEF_TOKEN_USES_MAX);
        break;
    case GM_CHIEF_OP_JOB:
        need(gm_id_name_valid(c->job) && c->state[0] != '\0' && c->step >= 0);
        break;
    case GM_CHIEF_OP_CHECKPOINT:
        need(gm_id_name_valid(c->job) && hex(c->sha256, 64) && c->step >= 0 &&
             c->nholders <= GM_CHIEF_HOLDERS_MAX);
        for (size_t i = 0; i < c->nholders; i++) {
            need(gm_id_name_valid(c->holders[i]));
            for (size_t k = 0; k < i; k++)
                need(strcmp(c->holders[i], c->holders[k]) != 0);
        }
        break;
    case GM_CHIEF_OP_JOB_SPEC: {
        char sha[65];
        need(gm_id_name_valid(c->job) && hex(c->sha256, 64) && c->spec_len <= GM_CHIEF_SPEC_MAX &&
             strlen(c->spec) == c->spec_len && c->global_batch >= 1);
        gm_ckpt_sha256_hex(c->spec, c->spec_len, sha);
        need(strcmp(sha, c->sha256) == 0);
        break;
    }
    default:
        need(false);
    }
}

/* A machine with a member, a revoked node, a job and a checkpoint. */
static void base_machine(struct gm_chief_fsm *f)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_MEMBER, .term = 2};

    gm_chief_fsm_init(f);
    snprintf(c.node, sizeof(c.node), "alpha");
    need(gm_chief_fsm_apply(f, &c) == 0);
    c.op = GM_CHIEF_OP_REVOKE;
    snprintf(c.node, sizeof(c.node), "mallory");
    need(gm_chief_fsm_apply(f, &c) == 0);
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_CHECKPOINT;
    c.term = 2;
    c.step = 10;
    snprintf(c.job, sizeof(c.job), "job1");
    memset(c.sha256, 'a', 64);
    snprintf(c.holders[0], sizeof(c.holders[0]), "alpha");
    c.nholders = 1;
    need(gm_chief_fsm_apply(f, &c) == 0);
    memset(&c, 0, sizeof(c)); /* a running job with its spec, and a finished one */
    c.op = GM_CHIEF_OP_JOB_SPEC;
    c.term = 2;
    snprintf(c.job, sizeof(c.job), "job2");
    snprintf(c.spec, sizeof(c.spec), "[job]\nname = j\n");
    c.spec_len = strlen(c.spec);
    gm_ckpt_sha256_hex(c.spec, c.spec_len, c.sha256);
    c.global_batch = 8;
    need(gm_chief_fsm_apply(f, &c) == 0);
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_JOB;
    c.term = 2;
    snprintf(c.job, sizeof(c.job), "job3");
    snprintf(c.state, sizeof(c.state), "done");
    need(gm_chief_fsm_apply(f, &c) == 0);
}

static void fuzz_cmd(const uint8_t *p, size_t n)
{
    struct gm_chief_cmd c, d;
    struct gm_chief_fsm f;
    char *text;
    size_t len;
    uint64_t term;
    int err = gm_chief_cmd_decode(p, n, &c);

    need(err == 0 || err == GM_ERR_PROTO || err == -ENOMEM);
    if (err != 0) {
        static const struct gm_chief_cmd zero;
        need(memcmp(&c, &zero, sizeof(c)) == 0);
        return;
    }
    check_cmd(&c);
    need(gm_chief_cmd_encode(&c, &text, &len) == 0);
    need(gm_chief_cmd_decode((const uint8_t *)text, len, &d) == 0);
    need(memcmp(&c, &d, sizeof(c)) == 0);
    free(text);
    base_machine(&f);
    term = f.term;
    err = gm_chief_fsm_apply(&f, &c);
    need(err == 0 || err == -ESTALE || err == -EPERM || err == -ENOSPC || err == -ENOMEM ||
         err == -EINVAL || (err == GM_ERR_TOKEN && c.op == GM_CHIEF_OP_TOKEN_USE && c.limit > 0));
    need(err == 0 ? f.term == c.term : f.term == term);
    gm_chief_fsm_free(&f);
}

static void fuzz_snapshot(const uint8_t *p, size_t n)
{
    struct gm_chief_fsm f;
    char *before, *after, *again;
    size_t nb, na, ng;
    int err;

    base_machine(&f);
    need(gm_chief_fsm_snapshot(&f, &before, &nb) == 0);
    err = gm_chief_fsm_restore(&f, p, n);
    need(err == 0 || err == GM_ERR_PROTO || err == -ENOMEM);
    need(gm_chief_fsm_snapshot(&f, &after, &na) == 0);
    if (err != 0) {
        need(na == nb && memcmp(before, after, na) == 0);
    } else {
        for (size_t i = 0; i < f.nmembers; i++)
            need(gm_id_name_valid(f.members[i].node));
        need(gm_chief_fsm_restore(&f, (const uint8_t *)after, na) == 0);
        need(gm_chief_fsm_snapshot(&f, &again, &ng) == 0);
        need(ng == na && memcmp(again, after, na) == 0);
        free(again);
    }
    free(before);
    free(after);
    gm_chief_fsm_free(&f);
}

static void fuzz_req(const uint8_t *p, size_t n)
{
    static const struct gm_chief_req zero;
    struct gm_chief_req r, s;
    char *text;
    size_t len;
    int err = gm_chief_req_decode(p, n, &r);

    need(err == 0 || err == GM_ERR_PROTO || err == -ENOMEM);
    if (err != 0) {
        need(memcmp(&r, &zero, sizeof(r)) == 0);
        return;
    }
    if (strcmp(r.cmd, "use") == 0) {
        need(r.node[0] == '\0' && r.role == GM_CHIEF_ROLE_VOTER);
        need(hex(r.token, GM_CHIEF_TOKEN_HEX) && r.limit >= 1 &&
             r.limit <= GM_CHIEF_TOKEN_USES_MAX);
    } else {
        need((strcmp(r.cmd, "revoke") == 0 && r.role == GM_CHIEF_ROLE_VOTER) ||
             (strcmp(r.cmd, "role") == 0 && (unsigned)r.role <= GM_CHIEF_ROLE_SPARE));
        need(gm_id_name_valid(r.node) && r.token[0] == '\0' && r.limit == 0);
    }
    need(gm_chief_req_encode(&r, &text, &len) == 0);
    need(gm_chief_req_decode((const uint8_t *)text, len, &s) == 0);
    need(memcmp(&r, &s, sizeof(r)) == 0);
    free(text);
}

static void fuzz_ans(const uint8_t *p, size_t n)
{
    static const struct gm_chief_ans zero;
    struct gm_chief_ans a, b;
    char *text;
    size_t len;
    int err = gm_chief_ans_decode(p, n, &a);

    need(err == 0 || err == GM_ERR_PROTO || err == -ENOMEM);
    if (err != 0) {
        need(memcmp(&a, &zero, sizeof(a)) == 0);
        return;
    }
    need(a.code <= 0 && strlen(a.message) < sizeof(a.message));
    for (const char *s = a.message; *s; s++)
        need((unsigned char)*s >= 0x20 && (unsigned char)*s <= 0x7e);
    need(gm_chief_ans_encode(&a, &text, &len) == 0);
    need(gm_chief_ans_decode((const uint8_t *)text, len, &b) == 0);
    need(memcmp(&a, &b, sizeof(a)) == 0);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_cmd(data + 1, size - 1);
        break;
    case 1:
        fuzz_snapshot(data + 1, size - 1);
        break;
    case 2:
        fuzz_req(data + 1, size - 1);
        break;
    default:
        fuzz_ans(data + 1, size - 1);
    }
    return 0;
}

static void seed(const char *dir, const char *name, uint8_t sel, const char *text, size_t len)
{
    char path[512];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "wb");
    need(fp != NULL);
    need(fwrite(&sel, 1, 1, fp) == 1 && fwrite(text, 1, len, fp) == len);
    need(fclose(fp) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("GM_FUZZ_CHIEFCMD_SEEDS");
    struct gm_chief_cmd c = {.term = 3};
    struct gm_chief_fsm f;
    char *text, name[32];
    size_t len;

    (void)argc;
    (void)argv;
    if (dir == NULL)
        return 0;
    snprintf(c.node, sizeof(c.node), "beta");
    snprintf(c.token, sizeof(c.token), "0123456789abcdef");
    snprintf(c.job, sizeof(c.job), "00112233aabbccdd");
    snprintf(c.state, sizeof(c.state), "running");
    c.step = 42;
    c.at = 1700000000;
    memset(c.sha256, 'c', 64);
    snprintf(c.holders[0], sizeof(c.holders[0]), "alpha");
    snprintf(c.holders[1], sizeof(c.holders[1]), "beta");
    c.nholders = 2;
    c.role = GM_CHIEF_ROLE_WITNESS;
    c.global_batch = 192;
    for (int op = GM_CHIEF_OP_MEMBER; op <= GM_CHIEF_OP_JOB_SPEC; op++) {
        c.op = (enum gm_chief_op)op;
        if (op == GM_CHIEF_OP_JOB_SPEC) {
            snprintf(c.spec, sizeof(c.spec), "[job]\nname = \"x\"\nepochs = 2\n");
            c.spec_len = strlen(c.spec);
            gm_ckpt_sha256_hex(c.spec, c.spec_len, c.sha256);
        }
        need(gm_chief_cmd_encode(&c, &text, &len) == 0);
        snprintf(name, sizeof(name), "cmd-%d", op);
        seed(dir, name, 0, text, len);
        free(text);
    }
    base_machine(&f);
    need(gm_chief_fsm_snapshot(&f, &text, &len) == 0);
    seed(dir, "snapshot", 1, text, len);
    free(text);
    gm_chief_fsm_free(&f);
    {
        struct gm_chief_req r = {.cmd = "role", .node = "gamma", .role = GM_CHIEF_ROLE_SPARE};
        struct gm_chief_ans a = {.code = -16, .message = "role gamma spare: refused"};
        need(gm_chief_req_encode(&r, &text, &len) == 0);
        seed(dir, "req-role", 2, text, len);
        free(text);
        snprintf(r.cmd, sizeof(r.cmd), "revoke");
        r.role = GM_CHIEF_ROLE_VOTER;
        need(gm_chief_req_encode(&r, &text, &len) == 0);
        seed(dir, "req-revoke", 2, text, len);
        free(text);
        need(gm_chief_ans_encode(&a, &text, &len) == 0);
        seed(dir, "ans", 3, text, len);
        free(text);
        memset(&r, 0, sizeof(r));
        snprintf(r.cmd, sizeof(r.cmd), "use");
        snprintf(r.token, sizeof(r.token), "0123456789abcdef");
        r.limit = 2;
        need(gm_chief_req_encode(&r, &text, &len) == 0);
        seed(dir, "req-use", 2, text, len);
        free(text);
        c.op = GM_CHIEF_OP_TOKEN_USE;
        c.limit = 1;
        need(gm_chief_cmd_encode(&c, &text, &len) == 0);
        seed(dir, "cmd-token-limit", 0, text, len);
        free(text);
    }
    return 0;
}
