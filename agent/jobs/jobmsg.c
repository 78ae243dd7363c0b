/* agent/jobs/jobmsg.c - job control payloads (see jobmsg.h). */
#include "agent/jobs/jobmsg.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/jsonmsg.h"
#include "agent/net/proto.h"
#include "train/job.h"

void gm_jobmsg_free(struct gm_jobmsg *m)
{
    if (m == NULL)
        return;
    free(m->text);
    free(m->ranks);
    free(m->files);
    free(m->islands);
    free(m->shares);
    memset(m, 0, sizeof(*m));
}

static bool id_ok(const char *s)
{
    return gm_jsonmsg_is_hex(s, GM_JOB_ID_LEN);
}

/* A printable string field; absent is an error unless optional. */
static int get_str(json_t *o, const char *key, char *out, size_t cap, bool required)
{
    return gm_jsonmsg_get_str(o, key, out, cap,
                              GM_JSONMSG_PRINTABLE | (required ? 0 : GM_JSONMSG_OPTIONAL));
}

static int get_text(json_t *o, struct gm_jobmsg *m)
{
    json_t *v = json_object_get(o, "text");
    size_t n;

    if (!json_is_string(v))
        return GM_ERR_PROTO;
    n = json_string_length(v);
    if (n == 0 || n > GM_JOB_TEXT_MAX || strlen(json_string_value(v)) != n)
        return GM_ERR_PROTO;
    m->text = malloc(n + 1);
    if (m->text == NULL)
        return -ENOMEM;
    memcpy(m->text, json_string_value(v), n + 1);
    m->text_len = n;
    return get_str(o, "origin", m->origin, sizeof(m->origin), true);
}

/* GROUP's optional comm: {codec, local_steps}; codec one of GM_JOB_CODECS but auto. */
static int get_comm(json_t *o, struct gm_jobmsg *m)
{
    json_t *c = json_object_get(o, "comm");
    char name[16];
    uint64_t u;
    int err;

    if (c == NULL)
        return 0;
    if (!json_is_object(c) || json_object_size(c) != 2)
        return GM_ERR_PROTO;
    if ((err = get_str(c, "codec", name, sizeof(name), true)) < 0)
        return err;
    if (gm_job_codec_parse(name, &m->codec) < 0 || m->codec == GM_JOB_CODEC_AUTO ||
        (err = gm_jsonmsg_get_uint(c, "local_steps", 1000000, &u)) < 0 || u == 0)
        return GM_ERR_PROTO;
    m->local_steps = (uint32_t)u;
    return 0;
}

/* GROUP's optional islands (after the ranks): one label per rank, each the rank that leads its
 * group (a LAN island's lowest rank, or a star's hub), which carries its own label. */
static int get_islands(json_t *o, struct gm_jobmsg *m)
{
    json_t *a = json_object_get(o, "islands"), *v;
    size_t i;

    if (a == NULL)
        return 0;
    if (!json_is_array(a) || json_array_size(a) != m->nranks || m->nranks == 0)
        return GM_ERR_PROTO;
    m->islands = calloc(m->nranks, sizeof(*m->islands));
    if (m->islands == NULL)
        return -ENOMEM;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (json_int_t)m->nranks)
            return GM_ERR_PROTO;
        m->islands[i] = (int)json_integer_value(v);
    }
    for (i = 0; i < m->nranks; i++)
        if (m->islands[m->islands[i]] != m->islands[i]) /* its leader leads itself */
            return GM_ERR_PROTO;
    return 0;
}

/* GROUP's optional shares (after the ranks and the global batch): one sample count per rank,
 * each >= 1, summing to the global batch. */
static int get_shares(json_t *o, struct gm_jobmsg *m)
{
    json_t *a = json_object_get(o, "shares"), *v;
    long long sum = 0;
    size_t i;

    if (a == NULL)
        return 0;
    if (!json_is_array(a) || json_array_size(a) != m->nranks || m->nranks < 2 ||
        m->nranks > GM_JOB_SHARES_MAX)
        return GM_ERR_PROTO;
    m->shares = calloc(m->nranks, sizeof(*m->shares));
    if (m->shares == NULL)
        return -ENOMEM;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > m->global_batch)
            return GM_ERR_PROTO;
        m->shares[i] = (int)json_integer_value(v);
        sum += m->shares[i];
    }
    return sum == m->global_batch ? 0 : GM_ERR_PROTO;
}

static int get_ranks(json_t *o, struct gm_jobmsg *m)
{
    json_t *a = json_object_get(o, "ranks");
    size_t n = json_array_size(a);

    if (!json_is_array(a) || n == 0 || n > GM_JOB_RANKS_MAX)
        return GM_ERR_PROTO;
    m->ranks = calloc(n, sizeof(*m->ranks));
    if (m->ranks == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        const char *s = json_string_value(v);
        if (s == NULL || strlen(s) != json_string_length(v) || !gm_id_name_valid(s))
            return GM_ERR_PROTO;
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->ranks[k], s) == 0)
                return GM_ERR_PROTO; /* a node twice */
        memcpy(m->ranks[i], s, strlen(s) + 1);
    }
    m->nranks = n;
    return 0;
}

static bool hex64(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* CHECK's files; with a group, entries carry count (>= 1) and names fit their kind. */
static int get_files(json_t *o, struct gm_jobmsg *m)
{
    json_t *a = json_object_get(o, "files"), *g = json_object_get(o, "group");
    size_t n = json_array_size(a);
    int err;

    if (g != NULL) {
        const char *gs = json_string_value(g);
        if (gs != NULL && strcmp(gs, "dir") == 0)
            m->group = GM_JOBFILE_GROUP_DIR;
        else if (gs != NULL && strcmp(gs, "bucket") == 0)
            m->group = GM_JOBFILE_GROUP_BUCKET;
        else
            return GM_ERR_PROTO;
    }
    if (!json_is_array(a) || n > GM_JOB_FILES_MAX)
        return GM_ERR_PROTO;
    m->files = calloc(n + 1, sizeof(*m->files));
    if (m->files == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(a, i);
        struct gm_jobfile *jf = &m->files[i];
        bool grouped = m->group != GM_JOBFILE_GROUP_FILE;
        if (!json_is_object(f) || json_object_size(f) != (grouped ? 4u : 3u))
            return GM_ERR_PROTO;
        if ((err = get_str(f, "name", jf->name, sizeof(jf->name), true)) < 0 ||
            (err = gm_jsonmsg_get_uint(f, "size", UINT64_MAX >> 1, &jf->size)) < 0 ||
            (err = get_str(f, "sha256", jf->sha256, sizeof(jf->sha256), true)) < 0)
            return err;
        jf->count = 1;
        if (grouped && (err = gm_jsonmsg_get_uint(f, "count", UINT64_MAX >> 1, &jf->count)) < 0)
            return err;
        if (jf->name[0] == 0 || !hex64(jf->sha256) || jf->count == 0)
            return GM_ERR_PROTO;
        if (m->group == GM_JOBFILE_GROUP_BUCKET &&
            (strlen(jf->name) != 3 || jf->name[0] != '#' || !gm_jsonmsg_is_hex(jf->name + 1, 2)))
            return GM_ERR_PROTO;
    }
    m->nfiles = n;
    return 0;
}

/* REPORT fit's {alpha_s, bytes_per_s, ops, and optionally sync_s}: finite, alpha >= 0,
 * bytes_per_s > 0, 0 <= sync_s <= GM_JOBMSG_SYNC_MAX_S (0 when absent). */
static int get_fit(json_t *o, struct gm_jobmsg *m)
{
    json_t *f = json_object_get(o, "fit"), *a, *b, *c;
    uint64_t u;
    int err;

    if (!json_is_object(f))
        return GM_ERR_PROTO;
    c = json_object_get(f, "sync_s");
    if (json_object_size(f) != (c != NULL ? 4u : 3u))
        return GM_ERR_PROTO;
    if (c != NULL && (!json_is_number(c) || !isfinite(json_number_value(c)) ||
                      json_number_value(c) < 0 || json_number_value(c) > GM_JOBMSG_SYNC_MAX_S))
        return GM_ERR_PROTO;
    a = json_object_get(f, "alpha_s");
    b = json_object_get(f, "bytes_per_s");
    if (!json_is_number(a) || !json_is_number(b) || !isfinite(json_number_value(a)) ||
        !isfinite(json_number_value(b)) || json_number_value(a) < 0 || json_number_value(b) <= 0)
        return GM_ERR_PROTO;
    if ((err = gm_jsonmsg_get_uint(f, "ops", UINT32_MAX, &u)) < 0)
        return err;
    m->have_fit = true;
    m->fit_sync_s = c != NULL ? json_number_value(c) : 0;
    m->fit_alpha_s = json_number_value(a);
    m->fit_bytes_per_s = json_number_value(b);
    m->fit_ops = u;
    return 0;
}

/* REPORT fit's optional speed {samples >= 1, step_s > 0, 0 <= coll_s <= step_s, and optionally
 * 0 <= stall_s <= coll_s and 0 <= cpu_s < step_s (each 0 when absent)}. */
static int get_speed(json_t *o, struct gm_jobmsg *m)
{
    json_t *f = json_object_get(o, "speed"), *a, *b, *c, *p;
    uint64_t u;
    int err;

    if (f == NULL)
        return 0;
    if (!json_is_object(f))
        return GM_ERR_PROTO;
    c = json_object_get(f, "stall_s");
    p = json_object_get(f, "cpu_s");
    if (json_object_size(f) != 3u + (c != NULL) + (p != NULL))
        return GM_ERR_PROTO;
    a = json_object_get(f, "step_s");
    b = json_object_get(f, "coll_s");
    if (!json_is_number(a) || !json_is_number(b) || !isfinite(json_number_value(a)) ||
        !isfinite(json_number_value(b)) || json_number_value(a) <= 0 || json_number_value(b) < 0 ||
        json_number_value(b) > json_number_value(a))
        return GM_ERR_PROTO;
    if (c != NULL && (!json_is_number(c) || !isfinite(json_number_value(c)) ||
                      json_number_value(c) < 0 || json_number_value(c) > json_number_value(b)))
        return GM_ERR_PROTO;
    if (p != NULL && (!json_is_number(p) || !isfinite(json_number_value(p)) ||
                      json_number_value(p) < 0 || json_number_value(p) >= json_number_value(a)))
        return GM_ERR_PROTO;
    if ((err = gm_jsonmsg_get_uint(f, "samples", INT_MAX, &u)) < 0)
        return err;
    if (u == 0)
        return GM_ERR_PROTO;
    m->have_speed = true;
    m->speed_stall_s = c != NULL ? json_number_value(c) : 0;
    m->speed_cpu_s = p != NULL ? json_number_value(p) : 0;
    m->speed_samples = (int)u;
    m->speed_step_s = json_number_value(a);
    m->speed_coll_s = json_number_value(b);
    return 0;
}

/* CHECK's optional probe: {n: [n0, n1], busy_s: [t0, t1]}, n0 > n1 >= 1, each t finite > 0. */
static int get_probe(json_t *o, struct gm_jobmsg *m)
{
    json_t *p = json_object_get(o, "probe"), *n, *t;

    if (p == NULL)
        return 0;
    if (!json_is_object(p) || json_object_size(p) != 2)
        return GM_ERR_PROTO;
    n = json_object_get(p, "n");
    t = json_object_get(p, "busy_s");
    if (!json_is_array(n) || !json_is_array(t) || json_array_size(n) != 2 ||
        json_array_size(t) != 2)
        return GM_ERR_PROTO;
    for (size_t i = 0; i < 2; i++) {
        json_t *a = json_array_get(n, i), *b = json_array_get(t, i);
        if (!json_is_integer(a) || json_integer_value(a) < 1 || json_integer_value(a) > INT_MAX ||
            !json_is_number(b) || !isfinite(json_number_value(b)) || !(json_number_value(b) > 0))
            return GM_ERR_PROTO;
        m->probe_n[i] = (int)json_integer_value(a);
        m->probe_s[i] = json_number_value(b);
    }
    if (m->probe_n[0] <= m->probe_n[1]) {
        memset(m->probe_n, 0, sizeof(m->probe_n));
        memset(m->probe_s, 0, sizeof(m->probe_s));
        return GM_ERR_PROTO;
    }
    m->have_probe = true;
    return 0;
}

/* SWITCH's and its answers' seq (>= 1) and step. */
static int get_seq_step(json_t *o, struct gm_jobmsg *m)
{
    uint64_t u;
    int err;

    if ((err = gm_jsonmsg_get_uint(o, "seq", UINT32_MAX, &u)) < 0)
        return err;
    if (u == 0)
        return GM_ERR_PROTO;
    m->seq = (uint32_t)u;
    if ((err = gm_jsonmsg_get_uint(o, "step", INT32_MAX, &u)) < 0)
        return err;
    m->step = (long)u;
    return 0;
}

static int get_summary(json_t *o, struct gm_jobmsg *m)
{
    json_t *sum = json_object_get(o, "summary"), *acc, *sps;
    uint64_t steps;
    int err;

    if (sum == NULL)
        return 0;
    acc = json_object_get(sum, "test_accuracy");
    sps = json_object_get(sum, "samples_per_s");
    if (!json_is_object(sum) || !json_is_number(acc) || !json_is_number(sps) ||
        json_number_value(sps) < 0 || json_number_value(acc) < 0 || json_number_value(acc) > 100)
        return GM_ERR_PROTO;
    if ((err = gm_jsonmsg_get_uint(sum, "steps", INT32_MAX, &steps)) < 0 ||
        (err = get_str(sum, "weights", m->weights, sizeof(m->weights), true)) < 0)
        return err;
    m->have_summary = true;
    m->test_accuracy = json_number_value(acc);
    m->samples_per_s = json_number_value(sps);
    m->steps = (long)steps;
    return 0;
}

static int decode(uint16_t type, json_t *o, struct gm_jobmsg *m)
{
    uint64_t u;
    int err;

    if ((err = get_str(o, "id", m->id, sizeof(m->id), true)) < 0)
        return err;
    if (!id_ok(m->id))
        return GM_ERR_PROTO;
    switch (type) {
    case GM_MSG_JOB_OFFER:
        if ((err = get_text(o, m)) < 0)
            return err;
        return json_object_get(o, "ranks") != NULL ? get_ranks(o, m) : 0;
    case GM_MSG_JOB_SUBMIT:
        return get_text(o, m);
    case GM_MSG_JOB_CHECK:
        if ((err = get_str(o, "error", m->message, sizeof(m->message), false)) < 0)
            return err;
        if (json_object_get(o, "ckpt_room") != NULL) {
            if ((err = gm_jsonmsg_get_uint(o, "ckpt_room", INT64_MAX, &m->ckpt_room)) < 0)
                return err;
            m->have_room = true;
        }
        if ((err = get_probe(o, m)) < 0)
            return err;
        return get_files(o, m);
    case GM_MSG_JOB_GROUP:
        if ((err = get_text(o, m)) < 0 || (err = gm_jsonmsg_get_uint(o, "gen", UINT32_MAX, &u)) < 0)
            return err;
        m->gen = (uint32_t)u;
        if (m->gen == 0)
            return GM_ERR_PROTO;
        if ((err = gm_jsonmsg_get_uint(o, "global_batch", INT_MAX, &u)) < 0)
            return err;
        if (u == 0)
            return GM_ERR_PROTO;
        m->global_batch = (int)u;
        if ((err = get_comm(o, m)) < 0 || (err = get_ranks(o, m)) < 0 ||
            (err = get_islands(o, m)) < 0)
            return err;
        return get_shares(o, m);
    case GM_MSG_JOB_REPORT:
        if ((err = gm_jsonmsg_get_uint(o, "gen", UINT32_MAX, &u)) < 0)
            return err;
        m->gen = (uint32_t)u;
        if ((err = get_str(o, "event", m->event, sizeof(m->event), true)) < 0)
            return err;
        if (strcmp(m->event, "group-failed") != 0 && strcmp(m->event, "exit") != 0 &&
            strcmp(m->event, "fit") != 0 && strcmp(m->event, "switch-ok") != 0 &&
            strcmp(m->event, "switch-late") != 0 && strcmp(m->event, "cancel") != 0)
            return GM_ERR_PROTO;
        if ((err = gm_jsonmsg_get_uint(o, "code", 100000, &u)) < 0)
            return err;
        m->code = -(int)u;
        if ((err = get_str(o, "message", m->message, sizeof(m->message), true)) < 0)
            return err;
        if (strcmp(m->event, "fit") == 0 && (err = get_fit(o, m)) < 0)
            return err;
        if (strcmp(m->event, "fit") == 0)
            return get_speed(o, m);
        if (strncmp(m->event, "switch-", 7) == 0)
            return get_seq_step(o, m);
        return 0;
    case GM_MSG_JOB_SWITCH:
        if ((err = gm_jsonmsg_get_uint(o, "gen", UINT32_MAX, &u)) < 0)
            return err;
        m->gen = (uint32_t)u;
        if (m->gen == 0)
            return GM_ERR_PROTO;
        if ((err = get_seq_step(o, m)) < 0 || (err = get_comm(o, m)) < 0)
            return err;
        return m->codec != GM_JOB_CODEC_AUTO ? 0 : GM_ERR_PROTO; /* comm is required here */
    case GM_MSG_JOB_END:
        if ((err = get_str(o, "state", m->state, sizeof(m->state), true)) < 0)
            return err;
        if (strcmp(m->state, "done") != 0 && strcmp(m->state, "cancelled") != 0 &&
            strcmp(m->state, "failed") != 0 && strcmp(m->state, "refused") != 0)
            return GM_ERR_PROTO;
        if ((err = get_str(o, "message", m->message, sizeof(m->message), true)) < 0)
            return err;
        return get_summary(o, m);
    default:
        return GM_ERR_PROTO;
    }
}

int gm_jobmsg_decode(uint16_t type, const uint8_t *p, size_t len, struct gm_jobmsg *m)
{
    json_t *o;
    int err;

    memset(m, 0, sizeof(*m));
    o = gm_jsonmsg_load(p, len);
    if (o == NULL)
        return GM_ERR_PROTO;
    err = decode(type, o, m);
    json_decref(o);
    if (err < 0)
        gm_jobmsg_free(m);
    return err;
}

int gm_jobmsg_encode(uint16_t type, const struct gm_jobmsg *m, char **out, size_t *len)
{
    json_t *o = json_pack("{s:s}", "id", m->id), *a;

    *out = NULL;
    *len = 0;
    if (o == NULL)
        return -ENOMEM;
    switch (type) {
    case GM_MSG_JOB_GROUP:
        json_object_set_new(o, "gen", json_integer(m->gen));
        json_object_set_new(o, "global_batch", json_integer(m->global_batch));
        if (m->islands != NULL && m->nranks > 0) {
            a = json_array();
            for (size_t i = 0; i < m->nranks && a != NULL; i++)
                json_array_append_new(a, json_integer(m->islands[i]));
            json_object_set_new(o, "islands", a);
        }
        if (m->shares != NULL && m->nranks > 0) {
            a = json_array();
            for (size_t i = 0; i < m->nranks && a != NULL; i++)
                json_array_append_new(a, json_integer(m->shares[i]));
            json_object_set_new(o, "shares", a);
        }
        if (m->codec != GM_JOB_CODEC_AUTO)
            json_object_set_new(o, "comm",
                                json_pack("{s:s,s:I}", "codec", gm_job_codec_name(m->codec),
                                          "local_steps", (json_int_t)m->local_steps));
        /* fall through */
    case GM_MSG_JOB_OFFER:
        if (m->nranks > 0) {
            a = json_array();
            for (size_t i = 0; i < m->nranks && a != NULL; i++)
                json_array_append_new(a, json_string(m->ranks[i]));
            json_object_set_new(o, "ranks", a);
        }
        /* fall through */
    case GM_MSG_JOB_SUBMIT:
        json_object_set_new(o, "text", json_stringn(m->text, m->text_len));
        json_object_set_new(o, "origin", json_string(m->origin));
        break;
    case GM_MSG_JOB_CHECK:
        a = json_array();
        for (size_t i = 0; i < m->nfiles && a != NULL; i++) {
            const struct gm_jobfile *f = &m->files[i];
            if (m->group == GM_JOBFILE_GROUP_FILE)
                json_array_append_new(a, json_pack("{s:s,s:I,s:s}", "name", f->name, "size",
                                                   (json_int_t)f->size, "sha256", f->sha256));
            else
                json_array_append_new(a, json_pack("{s:s,s:I,s:s,s:I}", "name", f->name, "size",
                                                   (json_int_t)f->size, "sha256", f->sha256,
                                                   "count", (json_int_t)f->count));
        }
        json_object_set_new(o, "files", a);
        if (m->group != GM_JOBFILE_GROUP_FILE)
            json_object_set_new(o, "group", json_string(m->group == GM_JOBFILE_GROUP_DIR
                                                            ? "dir"
                                                            : "bucket"));
        if (m->message[0])
            json_object_set_new(o, "error", json_string(m->message));
        if (m->have_room)
            json_object_set_new(o, "ckpt_room", json_integer((json_int_t)m->ckpt_room));
        if (m->have_probe)
            json_object_set_new(o, "probe",
                                json_pack("{s:[I,I],s:[f,f]}", "n", (json_int_t)m->probe_n[0],
                                          (json_int_t)m->probe_n[1], "busy_s", m->probe_s[0],
                                          m->probe_s[1]));
        break;
    case GM_MSG_JOB_REPORT:
        json_object_set_new(o, "gen", json_integer(m->gen));
        json_object_set_new(o, "event", json_string(m->event));
        json_object_set_new(o, "code", json_integer(m->code < 0 ? -m->code : m->code));
        json_object_set_new(o, "message", json_string(m->message));
        if (m->have_fit) {
            json_t *f = json_pack("{s:f,s:f,s:I}", "alpha_s", m->fit_alpha_s, "bytes_per_s",
                                  m->fit_bytes_per_s, "ops", (json_int_t)m->fit_ops);
            if (f != NULL && m->fit_sync_s > 0)
                json_object_set_new(f, "sync_s", json_real(m->fit_sync_s));
            json_object_set_new(o, "fit", f);
        }
        if (m->have_fit && m->have_speed)
            json_object_set_new(o, "speed",
                                json_pack("{s:I,s:f,s:f,s:f,s:f}", "samples",
                                          (json_int_t)m->speed_samples, "step_s", m->speed_step_s,
                                          "coll_s", m->speed_coll_s, "stall_s", m->speed_stall_s,
                                          "cpu_s", m->speed_cpu_s));
        if (m->seq > 0) {
            json_object_set_new(o, "seq", json_integer(m->seq));
            json_object_set_new(o, "step", json_integer(m->step));
        }
        break;
    case GM_MSG_JOB_SWITCH:
        json_object_set_new(o, "gen", json_integer(m->gen));
        json_object_set_new(o, "seq", json_integer(m->seq));
        json_object_set_new(o, "step", json_integer(m->step));
        json_object_set_new(o, "comm",
                            json_pack("{s:s,s:I}", "codec", gm_job_codec_name(m->codec),
                                      "local_steps", (json_int_t)m->local_steps));
        break;
    case GM_MSG_JOB_END:
        json_object_set_new(o, "state", json_string(m->state));
        json_object_set_new(o, "message", json_string(m->message));
        if (m->have_summary && isfinite(m->test_accuracy) && isfinite(m->samples_per_s))
            json_object_set_new(o, "summary",
                                json_pack("{s:f,s:I,s:f,s:s}", "test_accuracy", m->test_accuracy,
                                          "steps", (json_int_t)m->steps, "samples_per_s",
                                          m->samples_per_s, "weights", m->weights));
        break;
    default:
        json_decref(o);
        return -EINVAL;
    }
    return gm_jsonmsg_dump(o, out, len);
}
