/*
 * tests/unit/test_chief.c - the chief's replicated state machine
 * (agent/cluster/chieffsm.h) on its own and inside deterministic raft clusters
 * (raft/fixture.h: in-memory I/O, simulated time and network, no threads).
 *
 *  - commands: every op encodes and decodes to the same fields; malformed,
 *    unknown-version, unknown-op, extra-key and bad-field commands are
 *    refused; blanks after the JSON (raft's 8-byte padding) are accepted;
 *  - the machine: member/revoke/token-use/job/checkpoint apply; term fencing
 *    (an older term is -ESTALE and changes nothing); a revoked node cannot be
 *    made a member again; the job and checkpoint tables keep the newest;
 *    snapshot -> restore gives the same state, and a bad snapshot leaves the
 *    state as it was;
 *  - job-spec: a job's text round-trips (quotes, newlines, tabs), a text that does not
 *    hash to its sha256 or is over GM_CHIEF_SPEC_MAX is refused, apply keeps it with the
 *    job, a final state drops it, a finished job takes no spec, and a snapshot carries it
 *    (and a snapshot whose spec does not hash to its spec_sha256 is refused);
 *  - election: 3 voters elect exactly one leader; after it is deposed (cut
 *    off) the others elect one of a higher term, and the old leader can no
 *    longer commit;
 *  - term fencing in a cluster: a command carrying the old chief's term,
 *    proposed after a newer term's command was applied, is refused on every
 *    replica with the same result, and the replicas stay identical;
 *  - membership and roles: a new server is added (spare), promoted to voter,
 *    demoted to standby, and removed, each change committed on every server;
 *  - snapshots keep the log bounded: with a threshold of 8, 60 commands leave
 *    at most threshold + trailing + 1 entries in memory, and a server cut off
 *    meanwhile catches up through a snapshot install (its machine restored)
 *    to the same state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <raft.h>
#include <raft/fixture.h>

#include "agent/cluster/chiefmsg.h"
#include "agent/cluster/chieffsm.h"
#include "common/test.h"
#include "train/ckpt/ckpt.h"

GM_TEST_DEFINE_STATE;

/* --- commands ------------------------------------------------------------------- */

static struct gm_chief_cmd cmd_member(uint64_t term, const char *node, enum gm_chief_role r)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_MEMBER, .term = term, .role = r};

    snprintf(c.node, sizeof(c.node), "%s", node);
    return c;
}

static struct gm_chief_cmd cmd_ckpt(uint64_t term, const char *job, int64_t step, char hexdigit)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_CHECKPOINT, .term = term, .step = step};

    snprintf(c.job, sizeof(c.job), "%s", job);
    memset(c.sha256, hexdigit, 64);
    snprintf(c.holders[0], sizeof(c.holders[0]), "alpha");
    snprintf(c.holders[1], sizeof(c.holders[1]), "beta");
    c.nholders = 2;
    return c;
}

static int decode_str(const char *s, struct gm_chief_cmd *c)
{
    return gm_chief_cmd_decode((const uint8_t *)s, strlen(s), c);
}

static void roundtrip(const struct gm_chief_cmd *c)
{
    struct gm_chief_cmd d;
    char *text;
    size_t len;

    GM_CHECK_OK(gm_chief_cmd_encode(c, &text, &len));
    GM_CHECK_OK(gm_chief_cmd_decode((const uint8_t *)text, len, &d));
    GM_CHECK(memcmp(c, &d, sizeof(d)) == 0);
    free(text);
}

static void test_commands(void)
{
    struct gm_chief_cmd c, d;
    struct raft_buffer b;

    c = cmd_member(3, "beta", GM_CHIEF_ROLE_WITNESS);
    roundtrip(&c);
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_REVOKE;
    c.term = 4;
    c.at = 1700000000;
    snprintf(c.node, sizeof(c.node), "gamma");
    roundtrip(&c);
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_TOKEN_USE;
    c.term = 4;
    snprintf(c.token, sizeof(c.token), "0123456789abcdef");
    roundtrip(&c);
    c.limit = 5; /* with the token's limit */
    roundtrip(&c);
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_JOB;
    c.term = 5;
    c.step = 120;
    snprintf(c.job, sizeof(c.job), "00112233aabbccdd");
    snprintf(c.state, sizeof(c.state), "running");
    roundtrip(&c);
    /* with its name and the reason it ended (UTF-8 and quotes travel as they are) */
    snprintf(c.state, sizeof(c.state), "failed");
    snprintf(c.name, sizeof(c.name), "fmnist");
    snprintf(c.error, sizeof(c.error), "rank on b\xc3\xa9ta stopped: \"DIR\": 60000 samples");
    roundtrip(&c);
    c = cmd_ckpt(6, "00112233aabbccdd", 200, 'e');
    roundtrip(&c);

    /* raft's padding: blanks after the object */
    c = cmd_member(7, "alpha", GM_CHIEF_ROLE_SPARE);
    GM_CHECK_OK(gm_chief_cmd_buffer(&c, &b));
    GM_CHECK_EQ(b.len % 8, 0);
    GM_CHECK_OK(gm_chief_cmd_decode(b.base, b.len, &d));
    GM_CHECK(memcmp(&c, &d, sizeof(d)) == 0);
    raft_free(b.base);

    /* refusals, and a refused decode leaves the command zeroed */
    GM_CHECK_ERR(decode_str("", &d), GM_ERR_PROTO);
    GM_CHECK_ERR(decode_str("not json", &d), GM_ERR_PROTO);
    GM_CHECK_ERR(decode_str("[1]", &d), GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":2,\"op\":\"member\",\"term\":1,\"node\":\"a\",\"role\":\"voter\"}", &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(decode_str("{\"v\":1,\"op\":\"crown\",\"term\":1,\"node\":\"a\"}", &d),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"member\",\"term\":1,\"node\":\"a\",\"role\":\"voter\","
                   "\"extra\":1}",
                   &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"member\",\"term\":-1,\"node\":\"a\",\"role\":\"voter\"}", &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"member\",\"term\":1,\"node\":\"A B\",\"role\":\"voter\"}",
                   &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"member\",\"term\":1,\"node\":\"a\",\"role\":\"king\"}", &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str(
            "{\"v\":1,\"op\":\"member\",\"term\":1,\"term\":2,\"node\":\"a\",\"role\":\"voter\"}",
            &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"token-use\",\"term\":1,\"token\":\"0123456789ABCDEF\"}", &d),
        GM_ERR_PROTO);
    GM_CHECK_ERR(decode_str("{\"v\":1,\"op\":\"checkpoint\",\"term\":1,\"job\":\"j\",\"step\":1,"
                            "\"sha256\":\"00\",\"holders\":[]}",
                            &d),
                 GM_ERR_PROTO);
    GM_CHECK_ERR(
        decode_str("{\"v\":1,\"op\":\"checkpoint\",\"term\":1,\"job\":\"j\",\"step\":1,\"sha256\":"
                   "\"000000000000000000000000000000000000000000000000000000000000000"
                   "0\",\"holders\":[\"a\",\"a\"]}",
                   &d),
        GM_ERR_PROTO);
    GM_CHECK_EQ(d.op, 0);
    GM_CHECK_EQ(d.term, 0);
}

/* --- the machine ------------------------------------------------------------------ */

static void test_machine(void)
{
    struct gm_chief_fsm f, g;
    struct gm_chief_cmd c;
    char *s1, *s2;
    size_t n1, n2;

    gm_chief_fsm_init(&f);
    c = cmd_member(2, "alpha", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    c = cmd_member(2, "beta", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    c = cmd_member(3, "beta", GM_CHIEF_ROLE_WITNESS);
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_EQ(f.nmembers, 2);
    GM_CHECK_EQ(gm_chief_fsm_member(&f, "beta")->role, GM_CHIEF_ROLE_WITNESS);
    GM_CHECK_EQ(f.term, 3);

    /* fencing: term 2 after term 3 changes nothing */
    GM_CHECK_OK(gm_chief_fsm_snapshot(&f, &s1, &n1));
    c = cmd_member(2, "beta", GM_CHIEF_ROLE_SPARE);
    GM_CHECK_ERR(gm_chief_fsm_apply(&f, &c), -ESTALE);
    GM_CHECK_EQ(gm_chief_fsm_member(&f, "beta")->role, GM_CHIEF_ROLE_WITNESS);
    GM_CHECK_EQ(f.term, 3);
    GM_CHECK_EQ(f.applied, 4);

    /* revoke: out of the members, and never back */
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_REVOKE;
    c.term = 3;
    snprintf(c.node, sizeof(c.node), "beta");
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c)); /* idempotent */
    GM_CHECK(gm_chief_fsm_is_revoked(&f, "beta"));
    GM_CHECK(gm_chief_fsm_member(&f, "beta") == NULL);
    GM_CHECK_EQ(f.nrevoked, 1);
    c = cmd_member(4, "beta", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_ERR(gm_chief_fsm_apply(&f, &c), -EPERM);
    GM_CHECK(gm_chief_fsm_member(&f, "beta") == NULL);

    /* token uses count */
    memset(&c, 0, sizeof(c));
    c.op = GM_CHIEF_OP_TOKEN_USE;
    c.term = 4;
    snprintf(c.token, sizeof(c.token), "00000000000000aa");
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_EQ(f.ntokens, 1);
    GM_CHECK_EQ(f.tokens[0].uses, 2);
    /* with the token's limit: two voters spending one single-use token, one wins */
    snprintf(c.token, sizeof(c.token), "00000000000000bb");
    c.limit = 1;
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_ERR(gm_chief_fsm_apply(&f, &c), GM_ERR_TOKEN);
    GM_CHECK_EQ(f.ntokens, 2);
    GM_CHECK_EQ(f.tokens[1].uses, 1);
    c.limit = 3; /* a three-use token: two more, then no more */
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_ERR(gm_chief_fsm_apply(&f, &c), GM_ERR_TOKEN);
    GM_CHECK_EQ(f.tokens[1].uses, 3);
    c.limit = 0;

    /* checkpoints: the same (job, step) updates; the table keeps the newest */
    for (int i = 0; i < GM_CHIEF_CKPTS_MAX + 5; i++) {
        c = cmd_ckpt(4, "jobx", 10 * i, 'a');
        GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    }
    GM_CHECK_EQ(f.nckpts, GM_CHIEF_CKPTS_MAX);
    GM_CHECK_EQ(f.ckpts[0].step, 50);
    GM_CHECK_EQ(f.ckpts[f.nckpts - 1].step, 10 * (GM_CHIEF_CKPTS_MAX + 4));
    c = cmd_ckpt(5, "jobx", 100, 'b');
    c.nholders = 1;
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_EQ(f.nckpts, GM_CHIEF_CKPTS_MAX);
    GM_CHECK_EQ(f.ckpts[5].step, 100);
    GM_CHECK_EQ(f.ckpts[5].term, 5);
    GM_CHECK_EQ(f.ckpts[5].nholders, 1);
    GM_CHECK_EQ(f.ckpts[5].sha256[0], 'b');

    /* snapshot -> restore: the same state */
    free(s1);
    GM_CHECK_OK(gm_chief_fsm_snapshot(&f, &s1, &n1));
    gm_chief_fsm_init(&g);
    GM_CHECK_OK(gm_chief_fsm_restore(&g, (const uint8_t *)s1, n1));
    GM_CHECK_OK(gm_chief_fsm_snapshot(&g, &s2, &n2));
    GM_CHECK(n1 == n2 && memcmp(s1, s2, n1) == 0);
    GM_CHECK_EQ(g.restores, 1);
    free(s2);
    /* a bad snapshot: refused, state kept */
    GM_CHECK_ERR(gm_chief_fsm_restore(&g, (const uint8_t *)"{\"v\":1}", 7), GM_ERR_PROTO);
    s1[n1 / 2] = '\0';
    GM_CHECK_ERR(gm_chief_fsm_restore(&g, (const uint8_t *)s1, n1 / 2), GM_ERR_PROTO);
    GM_CHECK_EQ(g.nckpts, GM_CHIEF_CKPTS_MAX);
    GM_CHECK(gm_chief_fsm_is_revoked(&g, "beta"));
    free(s1);
    gm_chief_fsm_free(&g);
    gm_chief_fsm_free(&f);
}

/* --- clusters ----------------------------------------------------------------------- */

#define NMAX 5

struct cluster {
    struct raft_fixture f;
    struct gm_chief_fsm fsm[NMAX];
    struct raft_fsm rfsm[NMAX];
    unsigned n;
};

static void cluster_init(struct cluster *k, unsigned n, unsigned voters)
{
    struct raft_configuration conf;

    memset(k, 0, sizeof(*k));
    k->n = n;
    GM_CHECK_OK(raft_fixture_initialize(&k->f));
    for (unsigned i = 0; i < n; i++) {
        gm_chief_fsm_init(&k->fsm[i]);
        gm_chief_fsm_raft(&k->fsm[i], &k->rfsm[i]);
        GM_CHECK_OK(raft_fixture_grow(&k->f, &k->rfsm[i]));
    }
    GM_CHECK_OK(raft_fixture_configuration(&k->f, voters, &conf));
    GM_CHECK_OK(raft_fixture_bootstrap(&k->f, &conf));
    raft_configuration_close(&conf);
    GM_CHECK_OK(raft_fixture_start(&k->f));
}

/* Adds one server (not in the configuration yet). */
static unsigned cluster_grow(struct cluster *k)
{
    unsigned i = k->n++;

    gm_chief_fsm_init(&k->fsm[i]);
    gm_chief_fsm_raft(&k->fsm[i], &k->rfsm[i]);
    GM_CHECK_OK(raft_fixture_grow(&k->f, &k->rfsm[i]));
    GM_CHECK_OK(raft_start(raft_fixture_get(&k->f, i)));
    return i;
}

static void cluster_close(struct cluster *k)
{
    raft_fixture_close(&k->f);
    for (unsigned i = 0; i < k->n; i++)
        gm_chief_fsm_free(&k->fsm[i]);
}

static unsigned leaders(struct cluster *k)
{
    unsigned n = 0;

    for (unsigned i = 0; i < k->n; i++)
        n += raft_fixture_alive(&k->f, i) && raft_state(raft_fixture_get(&k->f, i)) == RAFT_LEADER;
    return n;
}

struct applied {
    int done, status, result;
};

static void apply_cb(struct raft_apply *req, int status, void *result)
{
    struct applied *a = req->data;

    a->done = 1;
    a->status = status;
    a->result = (int)(intptr_t)result;
}

/* Proposes c on server i and steps until every live server applied it; the command's
 * result on i. */
static int propose(struct cluster *k, unsigned i, const struct gm_chief_cmd *c)
{
    struct raft *r = raft_fixture_get(&k->f, i);
    struct raft_apply req;
    struct applied a = {0};
    struct raft_buffer b;

    req.data = &a;
    GM_CHECK_OK(gm_chief_cmd_buffer(c, &b));
    if (raft_apply(r, &req, &b, 1, apply_cb) != 0) {
        raft_free(b.base);
        return -EAGAIN;
    }
    for (unsigned s = 0; s < k->n; s++) /* every live server applied it */
        if (raft_fixture_alive(&k->f, s))
            GM_CHECK(raft_fixture_step_until_applied(&k->f, s, req.index, 5000));
    GM_CHECK(a.done);
    GM_CHECK_EQ(a.status, 0);
    return a.result;
}

/* Every live server's machine says the same. */
static void check_identical(struct cluster *k)
{
    char *s0 = NULL, *s;
    size_t n0 = 0, n;

    for (unsigned i = 0; i < k->n; i++) {
        if (!raft_fixture_alive(&k->f, i))
            continue;
        GM_CHECK_OK(gm_chief_fsm_snapshot(&k->fsm[i], &s, &n));
        if (s0 == NULL) {
            s0 = s;
            n0 = n;
            continue;
        }
        GM_CHECK(n == n0 && memcmp(s, s0, n) == 0);
        free(s);
    }
    free(s0);
}

static struct gm_chief_cmd *cmd_spec(uint64_t term, const char *job, const char *text, int gb)
{
    struct gm_chief_cmd *c = calloc(1, sizeof(*c));

    GM_CHECK(c != NULL);
    c->op = GM_CHIEF_OP_JOB_SPEC;
    c->term = term;
    snprintf(c->job, sizeof(c->job), "%s", job);
    c->spec_len = strlen(text);
    memcpy(c->spec, text, c->spec_len + 1);
    gm_ckpt_sha256_hex(text, c->spec_len, c->sha256);
    c->global_batch = gb;
    return c;
}

static void test_job_spec(void)
{
    static const char text[] = "[job]\nname = \"q\"\tx\nepochs = 2\n[optim]\nbatch = 64\n";
    struct gm_chief_cmd *c = cmd_spec(3, "00112233aabbccdd", text, 192), *d, *big;
    struct gm_chief_cmd j = {.op = GM_CHIEF_OP_JOB, .term = 3, .step = 40};
    struct gm_chief_fsm f, g;
    char *enc, *s1, *s2;
    size_t len, n1, n2;

    d = calloc(1, sizeof(*d));
    GM_CHECK(d != NULL);
    GM_CHECK_OK(gm_chief_cmd_encode(c, &enc, &len));
    GM_CHECK_OK(gm_chief_cmd_decode((const uint8_t *)enc, len, d));
    GM_CHECK(memcmp(c, d, sizeof(*d)) == 0);
    GM_CHECK_STREQ(d->spec, text);
    /* one byte of the text changed: it no longer hashes to sha256, refused */
    char *q = strstr(enc, "epochs = 2");
    GM_CHECK(q != NULL);
    q[9] = '3';
    GM_CHECK_ERR(gm_chief_cmd_decode((const uint8_t *)enc, len, d), GM_ERR_PROTO);
    GM_CHECK_EQ(d->op, 0);
    free(enc);
    /* over GM_CHIEF_SPEC_MAX: refused */
    big = calloc(1, sizeof(*big));
    GM_CHECK(big != NULL);
    {
        char *t = malloc(GM_CHIEF_SPEC_MAX + 2);
        GM_CHECK(t != NULL);
        memset(t, 'x', GM_CHIEF_SPEC_MAX + 1);
        t[GM_CHIEF_SPEC_MAX + 1] = '\0';
        char sha[65];
        gm_ckpt_sha256_hex(t, GM_CHIEF_SPEC_MAX + 1, sha);
        char *o = NULL;
        GM_CHECK(asprintf(&o,
                          "{\"v\":1,\"op\":\"job-spec\",\"term\":1,\"job\":\"j1\",\"spec\":\"%s\","
                          "\"sha256\":\"%s\",\"global_batch\":8}",
                          t, sha) > 0);
        GM_CHECK_ERR(gm_chief_cmd_decode((const uint8_t *)o, strlen(o), big), GM_ERR_PROTO);
        free(o);
        free(t);
    }
    free(big);

    /* apply: the job gets its spec; a snapshot carries it */
    gm_chief_fsm_init(&f);
    snprintf(j.job, sizeof(j.job), "00112233aabbccdd");
    snprintf(j.state, sizeof(j.state), "running");
    GM_CHECK_OK(gm_chief_fsm_apply(&f, c));
    GM_CHECK_EQ(f.njobs, 1);
    GM_CHECK_STREQ(f.jobs[0].state, "checking");
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &j));
    GM_CHECK_STREQ(f.jobs[0].state, "running");
    GM_CHECK(f.jobs[0].spec != NULL && f.jobs[0].spec_len == strlen(text));
    GM_CHECK_STREQ(f.jobs[0].spec, text);
    GM_CHECK_STREQ(f.jobs[0].spec_sha256, c->sha256);
    GM_CHECK_EQ(f.jobs[0].global_batch, 192);
    GM_CHECK_OK(gm_chief_fsm_snapshot(&f, &s1, &n1));
    gm_chief_fsm_init(&g);
    GM_CHECK_OK(gm_chief_fsm_restore(&g, (const uint8_t *)s1, n1));
    GM_CHECK(g.njobs == 1 && g.jobs[0].spec != NULL);
    GM_CHECK_STREQ(g.jobs[0].spec, text);
    GM_CHECK_EQ(g.jobs[0].global_batch, 192);
    GM_CHECK_OK(gm_chief_fsm_snapshot(&g, &s2, &n2));
    GM_CHECK(n1 == n2 && memcmp(s1, s2, n1) == 0);
    free(s2);
    /* a snapshot whose spec does not hash to spec_sha256: refused, g unchanged */
    q = strstr(s1, "epochs = 2");
    GM_CHECK(q != NULL);
    q[9] = '5';
    GM_CHECK_ERR(gm_chief_fsm_restore(&g, (const uint8_t *)s1, n1), GM_ERR_PROTO);
    GM_CHECK_STREQ(g.jobs[0].spec, text);
    free(s1);
    gm_chief_fsm_free(&g);

    /* done: the spec goes; a spec for a finished job is refused */
    snprintf(j.state, sizeof(j.state), "done");
    j.term = 4;
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &j));
    GM_CHECK(f.jobs[0].spec == NULL && f.jobs[0].spec_len == 0 && f.jobs[0].global_batch == 0);
    c->term = 4;
    GM_CHECK_ERR(gm_chief_fsm_apply(&f, c), -EINVAL);
    GM_CHECK(f.jobs[0].spec == NULL);
    /* the table keeps the newest GM_CHIEF_JOBS_MAX, specs of dropped ones freed (ASan) */
    for (int i = 0; i < GM_CHIEF_JOBS_MAX + 3; i++) {
        snprintf(c->job, sizeof(c->job), "job%d", i);
        GM_CHECK_OK(gm_chief_fsm_apply(&f, c));
    }
    GM_CHECK_EQ(f.njobs, GM_CHIEF_JOBS_MAX);
    GM_CHECK_STREQ(f.jobs[GM_CHIEF_JOBS_MAX - 1].job, "job66");
    GM_CHECK_STREQ(f.jobs[GM_CHIEF_JOBS_MAX - 1].spec, text);
    gm_chief_fsm_free(&f);
    free(c);
    free(d);
}

/* CHIEF_REQ: revoke, role, and a voter's token use. */
static void test_requests(void)
{
    struct gm_chief_req r = {0}, d;
    char *text = NULL;
    size_t len = 0;

    snprintf(r.cmd, sizeof(r.cmd), "use");
    snprintf(r.token, sizeof(r.token), "0123456789abcdef");
    r.limit = 3;
    GM_CHECK_OK(gm_chief_req_encode(&r, &text, &len));
    GM_CHECK_OK(gm_chief_req_decode((const uint8_t *)text, len, &d));
    GM_CHECK(memcmp(&r, &d, sizeof(r)) == 0);
    free(text);
    memset(&r, 0, sizeof(r));
    snprintf(r.cmd, sizeof(r.cmd), "role");
    snprintf(r.node, sizeof(r.node), "gamma");
    r.role = GM_CHIEF_ROLE_WITNESS;
    GM_CHECK_OK(gm_chief_req_encode(&r, &text, &len));
    GM_CHECK_OK(gm_chief_req_decode((const uint8_t *)text, len, &d));
    GM_CHECK(memcmp(&r, &d, sizeof(r)) == 0);
    free(text);
    static const char *const bad[] = {
        "{\"cmd\":\"use\",\"token\":\"0123456789abcdef\"}",             /* no limit */
        "{\"cmd\":\"use\",\"token\":\"0123456789abcdef\",\"limit\":0}", /* out of range */
        "{\"cmd\":\"use\",\"token\":\"0123456789abcdef\",\"limit\":10001}",
        "{\"cmd\":\"use\",\"token\":\"0123\",\"limit\":1}", /* short id */
        "{\"cmd\":\"use\",\"token\":\"0123456789abcdef\",\"limit\":1,\"node\":\"a\"}",
        "{\"cmd\":\"revoke\",\"node\":\"beta\",\"token\":\"0123456789abcdef\"}",
        "{\"cmd\":\"revoke\",\"node\":\"beta\",\"limit\":1}",
        "{\"cmd\":\"revoke\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        GM_CHECK_ERR(gm_chief_req_decode((const uint8_t *)bad[i], strlen(bad[i]), &d),
                     GM_ERR_PROTO);
        GM_CHECK(d.cmd[0] == '\0' && d.limit == 0);
    }
    {
        static const char ok[] = "{\"cmd\":\"revoke\",\"node\":\"beta\"}";
        GM_CHECK_OK(gm_chief_req_decode((const uint8_t *)ok, strlen(ok), &d));
    }
    GM_CHECK_STREQ(d.node, "beta");
}

static void test_election(void)
{
    struct cluster k;
    unsigned l1, l2;
    raft_term t1;
    struct gm_chief_cmd c;

    cluster_init(&k, 3, 3);
    GM_CHECK(raft_fixture_step_until_has_leader(&k.f, 10000));
    GM_CHECK_EQ(leaders(&k), 1);
    l1 = raft_fixture_leader_index(&k.f);
    t1 = raft_fixture_get(&k.f, l1)->current_term;
    c = cmd_member(t1, "alpha", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_OK(propose(&k, l1, &c));
    check_identical(&k);
    GM_CHECK(gm_chief_fsm_member(&k.fsm[(l1 + 1) % 3], "alpha") != NULL);

    /* the leader is cut off: the others elect one of a higher term */
    for (unsigned i = 0; i < 3; i++)
        if (i != l1) {
            raft_fixture_disconnect(&k.f, l1, i);
            raft_fixture_disconnect(&k.f, i, l1);
        }
    raft_fixture_step_until_elapsed(&k.f, 5000);
    l2 = 3;
    for (unsigned i = 0; i < 3; i++)
        if (i != l1 && raft_state(raft_fixture_get(&k.f, i)) == RAFT_LEADER)
            l2 = i;
    GM_CHECK(l2 < 3);
    if (l2 < 3) {
        GM_CHECK(raft_fixture_get(&k.f, l2)->current_term > t1);
        /* the old leader stepped down (no majority for an election timeout) */
        GM_CHECK(raft_state(raft_fixture_get(&k.f, l1)) != RAFT_LEADER);
    }
    /* one leader per term, over every server */
    for (unsigned i = 0; i < 3; i++)
        for (unsigned j = i + 1; j < 3; j++) {
            struct raft *a = raft_fixture_get(&k.f, i), *b = raft_fixture_get(&k.f, j);
            GM_CHECK(!(raft_state(a) == RAFT_LEADER && raft_state(b) == RAFT_LEADER &&
                       a->current_term == b->current_term));
        }
    cluster_close(&k);
}

static void test_term_fencing(void)
{
    struct cluster k;
    unsigned l1, l2;
    raft_term t1, t2;
    struct gm_chief_cmd c;

    cluster_init(&k, 3, 3);
    GM_CHECK(raft_fixture_step_until_has_leader(&k.f, 10000));
    l1 = raft_fixture_leader_index(&k.f);
    t1 = raft_fixture_get(&k.f, l1)->current_term;
    c = cmd_member(t1, "alpha", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_OK(propose(&k, l1, &c));

    /* depose: a new leader, a newer term */
    raft_fixture_depose(&k.f);
    GM_CHECK(raft_fixture_step_until_has_leader(&k.f, 10000));
    l2 = raft_fixture_leader_index(&k.f);
    t2 = raft_fixture_get(&k.f, l2)->current_term;
    GM_CHECK(t2 > t1);
    c = cmd_member(t2, "beta", GM_CHIEF_ROLE_VOTER);
    GM_CHECK_OK(propose(&k, l2, &c));
    /* a command the old chief made in t1 (its job controller was slow) arrives now:
     * refused everywhere, with the same result, nothing changed */
    c = cmd_member(t1, "alpha", GM_CHIEF_ROLE_SPARE);
    GM_CHECK_ERR(propose(&k, l2, &c), -ESTALE);
    for (unsigned i = 0; i < 3; i++) {
        GM_CHECK_EQ(gm_chief_fsm_member(&k.fsm[i], "alpha")->role, GM_CHIEF_ROLE_VOTER);
        GM_CHECK_EQ(k.fsm[i].term, t2);
    }
    check_identical(&k);
    /* the deposed leader, if it is not the leader again, cannot propose */
    if (l1 != l2) {
        struct raft_apply req;
        struct raft_buffer b;
        c = cmd_member(t1, "gamma", GM_CHIEF_ROLE_VOTER);
        GM_CHECK_OK(gm_chief_cmd_buffer(&c, &b));
        GM_CHECK_EQ(raft_apply(raft_fixture_get(&k.f, l1), &req, &b, 1, apply_cb), RAFT_NOTLEADER);
        raft_free(b.base);
    }
    cluster_close(&k);
}

struct change {
    int done, status;
};

static void change_cb(struct raft_change *req, int status)
{
    struct change *c = req->data;

    c->done = 1;
    c->status = status;
}

static bool change_done(struct raft_fixture *f, void *arg)
{
    (void)f;
    return ((struct change *)arg)->done;
}

static int role_on(struct cluster *k, unsigned i, raft_id id)
{
    const struct raft_configuration *c = &raft_fixture_get(&k->f, i)->configuration;

    for (unsigned s = 0; s < c->n; s++)
        if (c->servers[s].id == id)
            return c->servers[s].role;
    return -1;
}

static void test_membership(void)
{
    struct cluster k;
    struct raft *lr;
    struct raft_change req;
    struct change ch;
    unsigned l, x;
    raft_id xid;

    cluster_init(&k, 3, 3);
    GM_CHECK(raft_fixture_step_until_has_leader(&k.f, 10000));
    l = raft_fixture_leader_index(&k.f);
    lr = raft_fixture_get(&k.f, l);
    x = cluster_grow(&k);
    xid = raft_fixture_get(&k.f, x)->id;
    req.data = &ch;

    /* add (spare), promote to voter, demote to standby, remove: each committed everywhere */
    const int roles[] = {RAFT_SPARE, RAFT_VOTER, RAFT_STANDBY, -1};
    for (unsigned step = 0; step < 4; step++) {
        memset(&ch, 0, sizeof(ch));
        int err = step == 0   ? raft_add(lr, &req, xid, "4", change_cb)
                  : step == 3 ? raft_remove(lr, &req, xid, change_cb)
                              : raft_assign(lr, &req, xid, roles[step], change_cb);
        GM_CHECK_OK(err);
        GM_CHECK(raft_fixture_step_until(&k.f, change_done, &ch, 10000));
        GM_CHECK_EQ(ch.status, 0);
        raft_fixture_step_until_elapsed(&k.f, 1000); /* the followers learn the commit */
        for (unsigned i = 0; i < 3; i++)
            GM_CHECK_EQ(role_on(&k, i, xid), roles[step]);
        if (step == 1) { /* as a voter it holds the log: the machine too */
            struct gm_chief_cmd c = cmd_member(lr->current_term, "delta", GM_CHIEF_ROLE_VOTER);
            GM_CHECK_OK(propose(&k, l, &c));
            GM_CHECK(gm_chief_fsm_member(&k.fsm[x], "delta") != NULL);
            check_identical(&k);
        }
    }
    /* one change at a time: a second while one is pending is refused */
    memset(&ch, 0, sizeof(ch));
    GM_CHECK_OK(raft_add(lr, &req, xid, "4", change_cb));
    struct raft_change req2;
    struct change ch2 = {0};
    req2.data = &ch2;
    GM_CHECK_EQ(raft_remove(lr, &req2, xid, change_cb), RAFT_CANTCHANGE);
    GM_CHECK(raft_fixture_step_until(&k.f, change_done, &ch, 10000));
    cluster_close(&k);
}

static void test_snapshots(void)
{
    struct cluster k;
    unsigned l, lag;
    struct gm_chief_cmd c;
    char job[32];

    cluster_init(&k, 3, 3);
    for (unsigned i = 0; i < 3; i++) {
        raft_set_snapshot_threshold(raft_fixture_get(&k.f, i), 8);
        raft_set_snapshot_trailing(raft_fixture_get(&k.f, i), 2);
    }
    GM_CHECK(raft_fixture_step_until_has_leader(&k.f, 10000));
    l = raft_fixture_leader_index(&k.f);
    lag = (l + 1) % 3;
    raft_fixture_kill(&k.f, lag);
    for (int i = 0; i < 60; i++) {
        c = (struct gm_chief_cmd){
            .op = GM_CHIEF_OP_JOB, .term = raft_fixture_get(&k.f, l)->current_term, .step = i};
        snprintf(job, sizeof(job), "job%d", i % 5);
        snprintf(c.job, sizeof(c.job), "%s", job);
        snprintf(c.state, sizeof(c.state), "running");
        GM_CHECK_OK(propose(&k, l, &c));
    }
    /* the leader's in-memory log is bounded by threshold + trailing */
    struct raft *lr = raft_fixture_get(&k.f, l);
    GM_CHECK(raft_last_index(lr) >= 60);
    GM_CHECK(raft_last_index(lr) - lr->log.offset <= 8 + 2 + 1); /* entries held */
    GM_CHECK(lr->log.snapshot.last_index > 0);
    /* the lagging server comes back and gets the snapshot */
    raft_fixture_revive(&k.f, lag);
    GM_CHECK(raft_fixture_step_until_applied(&k.f, lag, raft_last_index(lr), 10000));
    GM_CHECK(k.fsm[lag].restores >= 1);
    check_identical(&k);
    GM_CHECK_EQ(k.fsm[lag].njobs, 5);
    cluster_close(&k);
}

/* A job's name and reason (issue 23): kept by later commands that leave them out, in the
 * state's JSON and across a snapshot; a reason over the limit is refused. */
static void test_job_reason(void)
{
    struct gm_chief_cmd c = {.op = GM_CHIEF_OP_JOB, .term = 2, .step = 0};
    struct gm_chief_fsm f, g;
    char *snap, *o = NULL, big[GM_CHIEF_JOB_ERROR_MAX + 2];
    size_t len;
    json_t *j;

    gm_chief_fsm_init(&f);
    snprintf(c.job, sizeof(c.job), "00112233aabbccdd");
    snprintf(c.state, sizeof(c.state), "running");
    snprintf(c.name, sizeof(c.name), "lenet");
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    c.name[0] = '\0';
    snprintf(c.state, sizeof(c.state), "failed");
    snprintf(c.error, sizeof(c.error), "rank on beta stopped: the loss is not finite");
    c.step = 7;
    GM_CHECK_OK(gm_chief_fsm_apply(&f, &c));
    GM_CHECK_EQ(f.njobs, 1);
    GM_CHECK_STREQ(f.jobs[0].name, "lenet"); /* kept: the later command left it out */
    GM_CHECK_STREQ(f.jobs[0].error, "rank on beta stopped: the loss is not finite");
    j = gm_chief_fsm_json(&f);
    GM_CHECK_STREQ(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "jobs"), 0), "error")),
        "rank on beta stopped: the loss is not finite");
    json_decref(j);
    GM_CHECK_OK(gm_chief_fsm_snapshot(&f, &snap, &len));
    gm_chief_fsm_init(&g);
    GM_CHECK_OK(gm_chief_fsm_restore(&g, (const uint8_t *)snap, len));
    GM_CHECK_EQ(g.njobs, 1);
    GM_CHECK_STREQ(g.jobs[0].name, "lenet");
    GM_CHECK_STREQ(g.jobs[0].error, f.jobs[0].error);
    GM_CHECK_STREQ(g.jobs[0].state, "failed");
    free(snap);
    gm_chief_fsm_free(&g);
    gm_chief_fsm_free(&f);
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    GM_CHECK(asprintf(&o,
                      "{\"v\":1,\"op\":\"job\",\"term\":1,\"job\":\"j1\",\"state\":\"failed\","
                      "\"step\":0,\"error\":\"%s\"}",
                      big) > 0);
    GM_CHECK_ERR(gm_chief_cmd_decode((const uint8_t *)o, strlen(o), &c), GM_ERR_PROTO);
    free(o);
}

int main(void)
{
    GM_TEST_RUN(test_commands);
    GM_TEST_RUN(test_machine);
    GM_TEST_RUN(test_job_spec);
    GM_TEST_RUN(test_job_reason);
    GM_TEST_RUN(test_requests);
    GM_TEST_RUN(test_election);
    GM_TEST_RUN(test_term_fencing);
    GM_TEST_RUN(test_membership);
    GM_TEST_RUN(test_snapshots);
    return gm_test_finish("test_chief");
}
