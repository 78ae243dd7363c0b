/* agent/cluster/chieffsm.c - the chief's replicated state machine (see chieffsm.h). */
#include "agent/cluster/chieffsm.h"

#include <stdio.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/jsonmsg.h"
#include "train/ckpt/ckpt.h"

static const char *const role_names[] = {"voter", "witness", "spare"};

static const struct {
    enum gm_chief_op op;
    const char *name;
} op_names[] = {
    {GM_CHIEF_OP_MEMBER, "member"},         {GM_CHIEF_OP_REVOKE, "revoke"},
    {GM_CHIEF_OP_TOKEN_USE, "token-use"},   {GM_CHIEF_OP_JOB, "job"},
    {GM_CHIEF_OP_CHECKPOINT, "checkpoint"}, {GM_CHIEF_OP_JOB_SPEC, "job-spec"},
};

const char *gm_chief_role_name(enum gm_chief_role r)
{
    return (unsigned)r < 3 ? role_names[r] : "?";
}

int gm_chief_role_parse(const char *s, enum gm_chief_role *out)
{
    for (unsigned i = 0; i < 3; i++) {
        if (s != NULL && strcmp(s, role_names[i]) == 0) {
            *out = (enum gm_chief_role)i;
            return 0;
        }
    }
    return -EINVAL;
}

static const char *op_name(enum gm_chief_op op)
{
    for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
        if (op_names[i].op == op)
            return op_names[i].name;
    return NULL;
}

/* --- field checks ------------------------------------------------------------ */

/* Job states: short lower-case words. */
static bool state_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > GM_CHIEF_STATE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '-'))
            return false;
    return true;
}

static int get_name(json_t *o, const char *key, char out[GM_CHIEF_NAME_MAX + 1])
{
    int err = gm_jsonmsg_get_str(o, key, out, GM_CHIEF_NAME_MAX + 1, 0);

    return err == 0 && gm_id_name_valid(out) ? 0 : GM_ERR_PROTO;
}

/* A job's text: a string of at most GM_CHIEF_SPEC_MAX bytes without NUL whose SHA-256 is
 * sha (checked here, on every replica). */
static int get_spec(json_t *o, const char *key, const char *sha, char *out, size_t *len)
{
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    char got[65];

    *len = 0;
    if (s == NULL || json_string_length(v) > GM_CHIEF_SPEC_MAX ||
        strlen(s) != json_string_length(v))
        return GM_ERR_PROTO;
    gm_ckpt_sha256_hex(s, strlen(s), got);
    if (strcmp(got, sha) != 0)
        return GM_ERR_PROTO;
    memcpy(out, s, strlen(s) + 1);
    *len = strlen(s);
    return 0;
}

/* A non-negative integer field (JSON integers only). */
static int get_u64(json_t *o, const char *key, uint64_t *out)
{
    return gm_jsonmsg_get_uint(o, key, UINT64_MAX, out);
}

static int get_i64(json_t *o, const char *key, int64_t *out)
{
    uint64_t u = 0;
    int err = get_u64(o, key, &u);

    *out = (int64_t)u;
    return err;
}

static int get_holders(json_t *o, gm_chief_name *holders, size_t *n)
{
    json_t *a = json_object_get(o, "holders"), *v;
    size_t i;

    *n = 0;
    if (!json_is_array(a) || json_array_size(a) > GM_CHIEF_HOLDERS_MAX)
        return GM_ERR_PROTO;
    json_array_foreach(a, i, v)
    {
        const char *s = json_string_value(v);
        if (s == NULL || strlen(s) != json_string_length(v) || !gm_id_name_valid(s))
            return GM_ERR_PROTO;
        snprintf(holders[i], sizeof(holders[i]), "%s", s);
        for (size_t k = 0; k < i; k++)
            if (strcmp(holders[k], holders[i]) == 0)
                return GM_ERR_PROTO; /* each holder once */
    }
    *n = json_array_size(a);
    return 0;
}

static json_t *holders_json(const gm_chief_name *h, size_t n)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, json_string(h[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* --- commands ------------------------------------------------------------------ */

int gm_chief_cmd_encode(const struct gm_chief_cmd *c, char **out, size_t *len)
{
    const char *name = op_name(c->op);
    json_t *o;
    int err = 0;

    *out = NULL;
    *len = 0;
    if (name == NULL)
        return -EINVAL;
    o = json_pack("{s:i, s:s, s:I}", "v", GM_CHIEF_CMD_VERSION, "op", name, "term",
                  (json_int_t)c->term);
    if (o == NULL)
        return -ENOMEM;
    switch (c->op) {
    case GM_CHIEF_OP_MEMBER:
        err |= json_object_set_new(o, "node", json_string(c->node));
        err |= json_object_set_new(o, "role", json_string(gm_chief_role_name(c->role)));
        break;
    case GM_CHIEF_OP_REVOKE:
        err |= json_object_set_new(o, "node", json_string(c->node));
        err |= json_object_set_new(o, "at", json_integer(c->at));
        break;
    case GM_CHIEF_OP_TOKEN_USE:
        err |= json_object_set_new(o, "token", json_string(c->token));
        if (c->limit > 0)
            err |= json_object_set_new(o, "limit", json_integer(c->limit));
        break;
    case GM_CHIEF_OP_JOB:
        err |= json_object_set_new(o, "job", json_string(c->job));
        err |= json_object_set_new(o, "state", json_string(c->state));
        err |= json_object_set_new(o, "step", json_integer(c->step));
        if (c->name[0])
            err |= json_object_set_new(o, "name", json_string(c->name));
        if (c->error[0])
            err |= json_object_set_new(o, "error", json_string(c->error));
        break;
    case GM_CHIEF_OP_CHECKPOINT:
        err |= json_object_set_new(o, "job", json_string(c->job));
        err |= json_object_set_new(o, "step", json_integer(c->step));
        err |= json_object_set_new(o, "sha256", json_string(c->sha256));
        err |= json_object_set_new(o, "holders", holders_json(c->holders, c->nholders));
        break;
    case GM_CHIEF_OP_JOB_SPEC:
        err |= json_object_set_new(o, "job", json_string(c->job));
        err |= json_object_set_new(o, "spec", json_stringn(c->spec, c->spec_len));
        err |= json_object_set_new(o, "sha256", json_string(c->sha256));
        err |= json_object_set_new(o, "global_batch", json_integer(c->global_batch));
        break;
    }
    if (err != 0) {
        json_decref(o);
        return -ENOMEM;
    }
    return gm_jsonmsg_dump(o, out, len);
}

static int decode_fields(json_t *o, struct gm_chief_cmd *c)
{
    static const char *const k_member[] = {"v", "op", "term", "node", "role"};
    static const char *const k_revoke[] = {"v", "op", "term", "node", "at"};
    static const char *const k_token[] = {"v", "op", "term", "token", "limit"};
    static const char *const k_job[] = {"v", "op", "term", "job", "state", "step", "name", "error"};
    static const char *const k_ckpt[] = {"v", "op", "term", "job", "step", "sha256", "holders"};
    static const char *const k_spec[] = {"v",      "op",   "term",        "job",
                                         "sha256", "spec", "global_batch"};
    char role[16];
    int err;

    switch (c->op) {
    case GM_CHIEF_OP_MEMBER:
        err = gm_jsonmsg_keys_only(o, k_member, 5);
        if (err == 0)
            err = get_name(o, "node", c->node);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "role", role, sizeof(role), 0);
        if (err == 0 && gm_chief_role_parse(role, &c->role) != 0)
            err = GM_ERR_PROTO;
        return err;
    case GM_CHIEF_OP_REVOKE:
        err = gm_jsonmsg_keys_only(o, k_revoke, 5);
        if (err == 0)
            err = get_name(o, "node", c->node);
        return err == 0 ? get_i64(o, "at", &c->at) : err;
    case GM_CHIEF_OP_TOKEN_USE:
        err = gm_jsonmsg_keys_only(o, k_token, 5);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "token", c->token, sizeof(c->token), 0);
        if (err == 0 && json_object_get(o, "limit") != NULL &&
            (get_i64(o, "limit", &c->limit) != 0 || c->limit < 1 ||
             c->limit > GM_CHIEF_TOKEN_USES_MAX))
            err = GM_ERR_PROTO;
        return err == 0 && gm_jsonmsg_is_hex(c->token, GM_CHIEF_TOKEN_HEX) ? 0 : GM_ERR_PROTO;
    case GM_CHIEF_OP_JOB:
        err = gm_jsonmsg_keys_only(o, k_job, 8);
        if (err == 0)
            err = get_name(o, "job", c->job);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "name", c->name, sizeof(c->name), GM_JSONMSG_OPTIONAL);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "error", c->error, sizeof(c->error), GM_JSONMSG_OPTIONAL);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "state", c->state, sizeof(c->state), 0);
        if (err == 0 && !state_ok(c->state))
            err = GM_ERR_PROTO;
        return err == 0 ? get_i64(o, "step", &c->step) : err;
    case GM_CHIEF_OP_CHECKPOINT:
        err = gm_jsonmsg_keys_only(o, k_ckpt, 7);
        if (err == 0)
            err = get_name(o, "job", c->job);
        if (err == 0)
            err = get_i64(o, "step", &c->step);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "sha256", c->sha256, sizeof(c->sha256), 0);
        if (err == 0 && !gm_jsonmsg_is_hex(c->sha256, 64))
            err = GM_ERR_PROTO;
        return err == 0 ? get_holders(o, c->holders, &c->nholders) : err;
    case GM_CHIEF_OP_JOB_SPEC:
        err = gm_jsonmsg_keys_only(o, k_spec, 7);
        if (err == 0)
            err = get_name(o, "job", c->job);
        if (err == 0)
            err = gm_jsonmsg_get_str(o, "sha256", c->sha256, sizeof(c->sha256), 0);
        if (err == 0 && !gm_jsonmsg_is_hex(c->sha256, 64))
            err = GM_ERR_PROTO;
        if (err == 0)
            err = get_spec(o, "spec", c->sha256, c->spec, &c->spec_len);
        if (err == 0)
            err = get_i64(o, "global_batch", &c->global_batch);
        return err == 0 && c->global_batch >= 1 && c->global_batch <= INT32_MAX ? 0 : GM_ERR_PROTO;
    }
    return GM_ERR_PROTO;
}

int gm_chief_cmd_decode(const uint8_t *p, size_t len, struct gm_chief_cmd *c)
{
    json_t *o;
    const char *op;
    uint64_t v = 0;
    int err = GM_ERR_PROTO;

    memset(c, 0, sizeof(*c));
    if (len == 0 || len > GM_CHIEF_CMD_MAX)
        return GM_ERR_PROTO;
    o = gm_jsonmsg_load(p, len);
    if (!json_is_object(o))
        goto out;
    if (get_u64(o, "v", &v) != 0 || v != GM_CHIEF_CMD_VERSION)
        goto out;
    if (get_u64(o, "term", &c->term) != 0)
        goto out;
    op = json_string_value(json_object_get(o, "op"));
    for (size_t i = 0; op != NULL && i < sizeof(op_names) / sizeof(op_names[0]); i++)
        if (strcmp(op, op_names[i].name) == 0)
            c->op = op_names[i].op;
    if (c->op == 0)
        goto out;
    err = decode_fields(o, c);
out:
    json_decref(o);
    if (err != 0)
        memset(c, 0, sizeof(*c));
    return err;
}

/* --- the state machine ---------------------------------------------------------- */

void gm_chief_fsm_init(struct gm_chief_fsm *f)
{
    memset(f, 0, sizeof(*f));
}

void gm_chief_fsm_free(struct gm_chief_fsm *f)
{
    if (f == NULL)
        return;
    free(f->members);
    free(f->revoked);
    free(f->tokens);
    for (size_t i = 0; f->jobs != NULL && i < f->njobs; i++)
        free(f->jobs[i].spec);
    free(f->jobs);
    free(f->ckpts);
    memset(f, 0, sizeof(*f));
}

/* Room for one more element in *arr (n used), at most max: 0, -ENOSPC, -ENOMEM. */
static int grow(void **arr, size_t n, size_t size, size_t max)
{
    void *p;

    if (n >= max)
        return -ENOSPC;
    p = realloc(*arr, (n + 1) * size);
    if (p == NULL)
        return -ENOMEM;
    *arr = p;
    return 0;
}

const struct gm_chief_member *gm_chief_fsm_member(const struct gm_chief_fsm *f, const char *node)
{
    for (size_t i = 0; i < f->nmembers; i++)
        if (strcmp(f->members[i].node, node) == 0)
            return &f->members[i];
    return NULL;
}

unsigned gm_chief_fsm_recorded_voters(const struct gm_chief_fsm *f)
{
    unsigned n = 0;

    for (size_t i = 0; i < f->nmembers; i++)
        n += f->members[i].role != GM_CHIEF_ROLE_SPARE;
    return n;
}

int gm_chief_fsm_is_revoked(const struct gm_chief_fsm *f, const char *node)
{
    for (size_t i = 0; i < f->nrevoked; i++)
        if (strcmp(f->revoked[i].node, node) == 0)
            return 1;
    return 0;
}

static int apply_member(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    struct gm_chief_member *m = (struct gm_chief_member *)gm_chief_fsm_member(f, c->node);
    int err;

    if (gm_chief_fsm_is_revoked(f, c->node))
        return -EPERM;
    if (m == NULL) {
        err = grow((void **)&f->members, f->nmembers, sizeof(*m), GM_MEMBERS_MAX);
        if (err != 0)
            return err;
        m = &f->members[f->nmembers++];
        snprintf(m->node, sizeof(m->node), "%s", c->node);
    }
    m->role = c->role;
    return 0;
}

static int apply_revoke(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    struct gm_chief_revoked *r;
    int err;

    if (gm_chief_fsm_is_revoked(f, c->node))
        return 0; /* idempotent */
    err = grow((void **)&f->revoked, f->nrevoked, sizeof(*r), GM_MEMBERS_MAX);
    if (err != 0)
        return err;
    r = &f->revoked[f->nrevoked++];
    snprintf(r->node, sizeof(r->node), "%s", c->node);
    r->term = c->term;
    r->at = c->at;
    for (size_t i = 0; i < f->nmembers; i++) {
        if (strcmp(f->members[i].node, c->node) == 0) {
            f->members[i] = f->members[--f->nmembers];
            break;
        }
    }
    return 0;
}

static int apply_token(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    int err;

    for (size_t i = 0; i < f->ntokens; i++) {
        if (strcmp(f->tokens[i].token, c->token) == 0) {
            if (c->limit > 0 && f->tokens[i].uses >= (uint64_t)c->limit)
                return GM_ERR_TOKEN; /* used up: the same refusal on every node */
            f->tokens[i].uses++;
            return 0;
        }
    }
    err = grow((void **)&f->tokens, f->ntokens, sizeof(*f->tokens), GM_CHIEF_TOKENS_MAX);
    if (err != 0)
        return err;
    snprintf(f->tokens[f->ntokens].token, sizeof(f->tokens[0].token), "%s", c->token);
    f->tokens[f->ntokens++].uses = 1;
    return 0;
}

/* Drops the oldest element of an array of n (>= 1) when it is full. */
static void drop_oldest(void *arr, size_t *n, size_t size, size_t max)
{
    if (*n < max)
        return;
    memmove(arr, (char *)arr + size, (*n - 1) * size);
    (*n)--;
}

int gm_chief_job_state_final(const char *state)
{
    static const char *const final[] = {"done", "cancelled", "failed", "refused"};

    for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
        if (strcmp(state, final[i]) == 0)
            return 1;
    return 0;
}

/* The entry of job id, a new one (state "checking", step 0; the oldest dropped when the
 * table is full) when there is none: 0, -ENOMEM. */
static int job_entry(struct gm_chief_fsm *f, const char *id, struct gm_chief_job **out)
{
    struct gm_chief_job *jb = NULL;
    int err;

    for (size_t i = 0; i < f->njobs && jb == NULL; i++)
        if (strcmp(f->jobs[i].job, id) == 0)
            jb = &f->jobs[i];
    if (jb == NULL) {
        if (f->njobs >= GM_CHIEF_JOBS_MAX) {
            free(f->jobs[0].spec);
            drop_oldest(f->jobs, &f->njobs, sizeof(*jb), GM_CHIEF_JOBS_MAX);
        }
        err = grow((void **)&f->jobs, f->njobs, sizeof(*jb), GM_CHIEF_JOBS_MAX);
        if (err != 0)
            return err;
        jb = &f->jobs[f->njobs++];
        memset(jb, 0, sizeof(*jb));
        snprintf(jb->job, sizeof(jb->job), "%s", id);
        snprintf(jb->state, sizeof(jb->state), "checking");
    }
    *out = jb;
    return 0;
}

static int apply_job(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    struct gm_chief_job *jb;
    int err = job_entry(f, c->job, &jb);

    if (err != 0)
        return err;
    snprintf(jb->state, sizeof(jb->state), "%s", c->state);
    if (c->name[0])
        memcpy(jb->name, c->name, sizeof(jb->name));
    if (c->error[0])
        memcpy(jb->error, c->error, sizeof(jb->error));
    jb->step = c->step;
    jb->term = c->term;
    if (gm_chief_job_state_final(jb->state)) { /* nothing left to resume */
        free(jb->spec);
        jb->spec = NULL;
        jb->spec_len = 0;
        jb->spec_sha256[0] = '\0';
        jb->global_batch = 0;
    }
    return 0;
}

static int apply_job_spec(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    struct gm_chief_job *jb;
    char *spec;
    int err;

    for (size_t i = 0; i < f->njobs; i++)
        if (strcmp(f->jobs[i].job, c->job) == 0 && gm_chief_job_state_final(f->jobs[i].state))
            return -EINVAL; /* a finished job is not resumed */
    spec = malloc(c->spec_len + 1);
    if (spec == NULL)
        return -ENOMEM;
    if ((err = job_entry(f, c->job, &jb)) != 0) {
        free(spec);
        return err;
    }
    memcpy(spec, c->spec, c->spec_len);
    spec[c->spec_len] = '\0';
    free(jb->spec);
    jb->spec = spec;
    jb->spec_len = c->spec_len;
    memcpy(jb->spec_sha256, c->sha256, sizeof(jb->spec_sha256));
    jb->global_batch = c->global_batch;
    jb->term = c->term;
    return 0;
}

static int apply_ckpt(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    struct gm_chief_ckpt *k = NULL;
    int err;

    for (size_t i = 0; i < f->nckpts && k == NULL; i++)
        if (strcmp(f->ckpts[i].job, c->job) == 0 && f->ckpts[i].step == c->step)
            k = &f->ckpts[i]; /* the same checkpoint: newer holders */
    if (k == NULL) {
        if (f->nckpts > 0)
            drop_oldest(f->ckpts, &f->nckpts, sizeof(*k), GM_CHIEF_CKPTS_MAX);
        err = grow((void **)&f->ckpts, f->nckpts, sizeof(*k), GM_CHIEF_CKPTS_MAX);
        if (err != 0)
            return err;
        k = &f->ckpts[f->nckpts++];
        memset(k, 0, sizeof(*k));
        snprintf(k->job, sizeof(k->job), "%s", c->job);
        k->step = c->step;
    }
    k->term = c->term;
    memcpy(k->sha256, c->sha256, sizeof(k->sha256));
    memcpy(k->holders, c->holders, sizeof(k->holders));
    k->nholders = c->nholders;
    return 0;
}

int gm_chief_fsm_apply(struct gm_chief_fsm *f, const struct gm_chief_cmd *c)
{
    int err;

    f->applied++;
    if (c->term < f->term)
        return -ESTALE;
    switch (c->op) {
    case GM_CHIEF_OP_MEMBER:
        err = apply_member(f, c);
        break;
    case GM_CHIEF_OP_REVOKE:
        err = apply_revoke(f, c);
        break;
    case GM_CHIEF_OP_TOKEN_USE:
        err = apply_token(f, c);
        break;
    case GM_CHIEF_OP_JOB:
        err = apply_job(f, c);
        break;
    case GM_CHIEF_OP_CHECKPOINT:
        err = apply_ckpt(f, c);
        break;
    case GM_CHIEF_OP_JOB_SPEC:
        err = apply_job_spec(f, c);
        break;
    default:
        err = -EINVAL;
    }
    if (err == 0)
        f->term = c->term;
    return err;
}

/* --- snapshots and views --------------------------------------------------------- */

json_t *gm_chief_fsm_json(const struct gm_chief_fsm *f)
{
    json_t *o = json_object(), *mem = json_array(), *rev = json_array(), *tok = json_array(),
           *jobs = json_array(), *ck = json_array();
    int err = o == NULL || mem == NULL || rev == NULL || tok == NULL || jobs == NULL || ck == NULL;

    for (size_t i = 0; !err && i < f->nmembers; i++)
        err = json_array_append_new(mem, json_pack("{s:s, s:s}", "node", f->members[i].node, "role",
                                                   gm_chief_role_name(f->members[i].role)));
    for (size_t i = 0; !err && i < f->nrevoked; i++)
        err = json_array_append_new(rev, json_pack("{s:s, s:I, s:I}", "node", f->revoked[i].node,
                                                   "term", (json_int_t)f->revoked[i].term, "at",
                                                   (json_int_t)f->revoked[i].at));
    for (size_t i = 0; !err && i < f->ntokens; i++)
        err = json_array_append_new(tok, json_pack("{s:s, s:I}", "token", f->tokens[i].token,
                                                   "uses", (json_int_t)f->tokens[i].uses));
    for (size_t i = 0; !err && i < f->njobs; i++) {
        const struct gm_chief_job *jb = &f->jobs[i];
        json_t *e = json_pack("{s:s, s:s, s:I, s:I}", "job", jb->job, "state", jb->state, "step",
                              (json_int_t)jb->step, "term", (json_int_t)jb->term);
        if (e != NULL && jb->name[0])
            err |= json_object_set_new(e, "name", json_string(jb->name));
        if (e != NULL && jb->error[0])
            err |= json_object_set_new(e, "error", json_string(jb->error));
        if (e != NULL && jb->spec != NULL)
            err |= json_object_set_new(e, "spec", json_stringn(jb->spec, jb->spec_len)) |
                   json_object_set_new(e, "spec_sha256", json_string(jb->spec_sha256)) |
                   json_object_set_new(e, "global_batch", json_integer(jb->global_batch));
        err |= json_array_append_new(jobs, e);
    }
    for (size_t i = 0; !err && i < f->nckpts; i++) {
        const struct gm_chief_ckpt *k = &f->ckpts[i];
        err = json_array_append_new(
            ck, json_pack("{s:s, s:I, s:I, s:s, s:o}", "job", k->job, "step", (json_int_t)k->step,
                          "term", (json_int_t)k->term, "sha256", k->sha256, "holders",
                          holders_json(k->holders, k->nholders)));
    }
    if (!err)
        err = json_object_set_new(o, "members", mem) | json_object_set_new(o, "revoked", rev) |
              json_object_set_new(o, "tokens", tok) | json_object_set_new(o, "jobs", jobs) |
              json_object_set_new(o, "checkpoints", ck);
    else {
        json_decref(mem);
        json_decref(rev);
        json_decref(tok);
        json_decref(jobs);
        json_decref(ck);
    }
    if (err) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int gm_chief_fsm_snapshot(const struct gm_chief_fsm *f, char **out, size_t *len)
{
    json_t *o = gm_chief_fsm_json(f);

    *out = NULL;
    *len = 0;
    if (o == NULL || json_object_set_new(o, "v", json_integer(GM_CHIEF_CMD_VERSION)) != 0 ||
        json_object_set_new(o, "term", json_integer((json_int_t)f->term)) != 0 ||
        json_object_set_new(o, "applied", json_integer((json_int_t)f->applied)) != 0) {
        json_decref(o);
        return -ENOMEM;
    }
    return gm_jsonmsg_dump(o, out, len);
}

/* Reads one array of the snapshot into a fresh array of elements of size,
 * at most max, with fn parsing each element. */
static int restore_array(json_t *o, const char *key, size_t max, size_t size, void **arr, size_t *n,
                         int (*fn)(json_t *e, void *out))
{
    json_t *a = json_object_get(o, key), *e;
    size_t i;

    if (!json_is_array(a) || json_array_size(a) > max)
        return GM_ERR_PROTO;
    if (json_array_size(a) == 0)
        return 0;
    *arr = calloc(json_array_size(a), size);
    if (*arr == NULL)
        return -ENOMEM;
    json_array_foreach(a, i, e)
    {
        int err = json_is_object(e) ? fn(e, (char *)*arr + i * size) : GM_ERR_PROTO;
        if (err != 0)
            return err;
        (*n)++;
    }
    return 0;
}

static int r_member(json_t *e, void *out)
{
    static const char *const keys[] = {"node", "role"};
    struct gm_chief_member *m = out;
    char role[16];
    int err = gm_jsonmsg_keys_only(e, keys, 2);

    if (err == 0)
        err = get_name(e, "node", m->node);
    if (err == 0)
        err = gm_jsonmsg_get_str(e, "role", role, sizeof(role), 0);
    return err == 0 && gm_chief_role_parse(role, &m->role) == 0 ? 0 : GM_ERR_PROTO;
}

static int r_revoked(json_t *e, void *out)
{
    static const char *const keys[] = {"node", "term", "at"};
    struct gm_chief_revoked *r = out;
    int err = gm_jsonmsg_keys_only(e, keys, 3);

    if (err == 0)
        err = get_name(e, "node", r->node);
    if (err == 0)
        err = get_u64(e, "term", &r->term);
    return err == 0 ? get_i64(e, "at", &r->at) : err;
}

static int r_token(json_t *e, void *out)
{
    static const char *const keys[] = {"token", "uses"};
    struct gm_chief_token_use *t = out;
    int err = gm_jsonmsg_keys_only(e, keys, 2);

    if (err == 0)
        err = gm_jsonmsg_get_str(e, "token", t->token, sizeof(t->token), 0);
    if (err == 0 && !gm_jsonmsg_is_hex(t->token, GM_CHIEF_TOKEN_HEX))
        err = GM_ERR_PROTO;
    return err == 0 ? get_u64(e, "uses", &t->uses) : err;
}

/* A job's spec in a snapshot: all three keys or none. */
static int r_job_spec(json_t *e, struct gm_chief_job *jb)
{
    size_t n = 0;
    char *p;
    int err;

    if (json_object_get(e, "spec") == NULL && json_object_get(e, "spec_sha256") == NULL &&
        json_object_get(e, "global_batch") == NULL)
        return 0;
    err = gm_jsonmsg_get_str(e, "spec_sha256", jb->spec_sha256, sizeof(jb->spec_sha256), 0);
    if (err == 0 && !gm_jsonmsg_is_hex(jb->spec_sha256, 64))
        err = GM_ERR_PROTO;
    if (err == 0)
        err = get_i64(e, "global_batch", &jb->global_batch);
    if (err == 0 && (jb->global_batch < 1 || jb->global_batch > INT32_MAX ||
                     gm_chief_job_state_final(jb->state)))
        err = GM_ERR_PROTO;
    if (err != 0)
        return err;
    p = malloc(GM_CHIEF_SPEC_MAX + 1);
    if (p == NULL)
        return -ENOMEM;
    if ((err = get_spec(e, "spec", jb->spec_sha256, p, &n)) != 0) {
        free(p);
        return err;
    }
    jb->spec = realloc(p, n + 1);
    if (jb->spec == NULL)
        jb->spec = p; /* keeping the larger block is fine */
    jb->spec_len = n;
    return 0;
}

static int r_job(json_t *e, void *out)
{
    static const char *const keys[] = {"job",         "state",        "step", "term", "spec",
                                       "spec_sha256", "global_batch", "name", "error"};
    struct gm_chief_job *jb = out;
    int err = gm_jsonmsg_keys_only(e, keys, 9);

    if (err == 0)
        err = get_name(e, "job", jb->job);
    if (err == 0)
        err = gm_jsonmsg_get_str(e, "name", jb->name, sizeof(jb->name), GM_JSONMSG_OPTIONAL);
    if (err == 0)
        err = gm_jsonmsg_get_str(e, "error", jb->error, sizeof(jb->error), GM_JSONMSG_OPTIONAL);
    if (err == 0)
        err = gm_jsonmsg_get_str(e, "state", jb->state, sizeof(jb->state), 0);
    if (err == 0 && !state_ok(jb->state))
        err = GM_ERR_PROTO;
    if (err == 0)
        err = get_i64(e, "step", &jb->step);
    if (err == 0)
        err = get_u64(e, "term", &jb->term);
    return err == 0 ? r_job_spec(e, jb) : err;
}

static int r_ckpt(json_t *e, void *out)
{
    static const char *const keys[] = {"job", "step", "term", "sha256", "holders"};
    struct gm_chief_ckpt *k = out;
    int err = gm_jsonmsg_keys_only(e, keys, 5);

    if (err == 0)
        err = get_name(e, "job", k->job);
    if (err == 0)
        err = get_i64(e, "step", &k->step);
    if (err == 0)
        err = get_u64(e, "term", &k->term);
    if (err == 0)
        err = gm_jsonmsg_get_str(e, "sha256", k->sha256, sizeof(k->sha256), 0);
    if (err == 0 && !gm_jsonmsg_is_hex(k->sha256, 64))
        err = GM_ERR_PROTO;
    return err == 0 ? get_holders(e, k->holders, &k->nholders) : err;
}

int gm_chief_fsm_restore(struct gm_chief_fsm *f, const uint8_t *p, size_t len)
{
    static const char *const keys[] = {"v",       "term",   "applied", "members",
                                       "revoked", "tokens", "jobs",    "checkpoints"};
    struct gm_chief_fsm n;
    json_t *o = gm_jsonmsg_load(p, len);
    uint64_t v = 0;
    int err = GM_ERR_PROTO;

    gm_chief_fsm_init(&n);
    if (!json_is_object(o) || gm_jsonmsg_keys_only(o, keys, 8) != 0 || get_u64(o, "v", &v) != 0 ||
        v != GM_CHIEF_CMD_VERSION)
        goto out;
    err = get_u64(o, "term", &n.term);
    if (err == 0)
        err = get_u64(o, "applied", &n.applied);
    if (err == 0)
        err = restore_array(o, "members", GM_MEMBERS_MAX, sizeof(*n.members), (void **)&n.members,
                            &n.nmembers, r_member);
    if (err == 0)
        err = restore_array(o, "revoked", GM_MEMBERS_MAX, sizeof(*n.revoked), (void **)&n.revoked,
                            &n.nrevoked, r_revoked);
    if (err == 0)
        err = restore_array(o, "tokens", GM_CHIEF_TOKENS_MAX, sizeof(*n.tokens), (void **)&n.tokens,
                            &n.ntokens, r_token);
    if (err == 0)
        err = restore_array(o, "jobs", GM_CHIEF_JOBS_MAX, sizeof(*n.jobs), (void **)&n.jobs,
                            &n.njobs, r_job);
    if (err == 0)
        err = restore_array(o, "checkpoints", GM_CHIEF_CKPTS_MAX, sizeof(*n.ckpts),
                            (void **)&n.ckpts, &n.nckpts, r_ckpt);
out:
    json_decref(o);
    if (err != 0) {
        gm_chief_fsm_free(&n);
        return err;
    }
    n.after = f->after;
    n.after_arg = f->after_arg;
    n.restores = f->restores + 1;
    gm_chief_fsm_free(f);
    *f = n;
    return 0;
}

/* --- raft's view ------------------------------------------------------------------- */

/* text (malloc'd, len bytes) padded with blanks to a multiple of 8; NULL: no memory
 * (text freed). */
static char *pad8(char *text, size_t len, size_t *padded)
{
    char *p;

    *padded = (len + 7) & ~(size_t)7;
    p = realloc(text, *padded == 0 ? 8 : *padded);
    if (p == NULL) {
        free(text);
        return NULL;
    }
    memset(p + len, ' ', *padded - len); /* JSON ignores trailing blanks */
    return p;
}

int gm_chief_cmd_buffer(const struct gm_chief_cmd *c, struct raft_buffer *out)
{
    char *text;
    size_t len;
    int err = gm_chief_cmd_encode(c, &text, &len);

    out->base = NULL;
    out->len = 0;
    if (err != 0)
        return err;
    text = pad8(text, len, &out->len);
    out->base = text != NULL ? raft_malloc(out->len) : NULL;
    if (out->base == NULL) {
        free(text);
        return -ENOMEM;
    }
    memcpy(out->base, text, out->len);
    free(text);
    return 0;
}

static int r_apply(struct raft_fsm *rf, const struct raft_buffer *buf, void **result)
{
    struct gm_chief_fsm *f = rf->data;
    struct gm_chief_cmd c;
    int code = gm_chief_cmd_decode(buf->base, buf->len, &c);

    if (code == 0)
        code = gm_chief_fsm_apply(f, &c);
    else
        f->applied++; /* a malformed entry is refused the same way everywhere */
    if (f->after != NULL)
        f->after(f->after_arg, &c, code);
    *result = (void *)(intptr_t)code;
    return 0; /* refusals are results: the replicas stay identical */
}

static int r_snapshot(struct raft_fsm *rf, struct raft_buffer *bufs[], unsigned *n)
{
    struct gm_chief_fsm *f = rf->data;
    char *text;
    size_t len;

    *bufs = NULL;
    *n = 0;
    if (gm_chief_fsm_snapshot(f, &text, &len) != 0)
        return RAFT_NOMEM;
    *bufs = raft_malloc(sizeof(**bufs));
    if (*bufs == NULL) {
        free(text);
        return RAFT_NOMEM;
    }
    (*bufs)[0].base = pad8(text, len, &(*bufs)[0].len); /* freed by r_finalize */
    if ((*bufs)[0].base == NULL) {
        raft_free(*bufs);
        *bufs = NULL;
        return RAFT_NOMEM;
    }
    *n = 1;
    return 0;
}

static int r_finalize(struct raft_fsm *rf, struct raft_buffer *bufs[], unsigned *n)
{
    (void)rf;
    for (unsigned i = 0; *bufs != NULL && i < *n; i++)
        free((*bufs)[i].base);
    raft_free(*bufs);
    *bufs = NULL;
    *n = 0;
    return 0;
}

static int r_restore(struct raft_fsm *rf, struct raft_buffer *buf)
{
    struct gm_chief_fsm *f = rf->data;

    if (gm_chief_fsm_restore(f, buf->base, buf->len) != 0)
        return RAFT_CORRUPT;
    raft_free(buf->base); /* ours on success */
    return 0;
}

void gm_chief_fsm_raft(struct gm_chief_fsm *f, struct raft_fsm *out)
{
    memset(out, 0, sizeof(*out));
    out->version = 2;
    out->data = f;
    out->apply = r_apply;
    out->snapshot = r_snapshot;
    out->snapshot_finalize = r_finalize;
    out->restore = r_restore;
}
