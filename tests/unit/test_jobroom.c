/*
 * tests/unit/test_jobroom.c - bad input to the job room (agent/jobs/job.h) of a
 * real agent: it closes that member's link with an ERROR frame and keeps
 * serving; the job it runs goes on.
 *
 *   test thread: member clients zz, yy, ... (own uv loops, certificates from
 *   the agent's CA)  --TLS 127.0.0.1-->  agent thread: alpha, coordinating a
 *   job on a tiny IDX dataset written here (the trainer is alpha's own thread)
 *
 *  - garbage JOB_OFFER / _CHECK / _GROUP / _REPORT / _END payloads (no JSON,
 *    wrong types, a bad id, a group of another coordinator): ERROR
 *    GM_ERR_PROTO, the link closes, the agent logs why;
 *  - a TRAIN frame from a member that is not a rank of the running job (it was
 *    offered the job and did not answer), of the generation another member
 *    ranks in: the same;
 *  - a member that passed the dataset check and became rank 1 of a new
 *    generation sends a TRAIN frame out of order (another sends an empty one):
 *    the same, and the job re-forms without it and keeps stepping; a frame of
 *    a retired generation before that is only dropped (the link stays up);
 *  - after all that: status answers, a new member links up, the job is
 *    cancelled cleanly, and the agent stops cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/cli/cli.h"
#include "agent/service/control.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/jobs/xport.h"
#include "common/log.h"
#include "common/test.h"
#include "common/time.h"
#include "crypto/identity.h"
#include "crypto/tls.h"

GM_TEST_DEFINE_STATE;

#define NTRAIN 256
#define NTEST 64

/* The test's setup, made once in main() (single-threaded test code: the agent
 * runs on its own thread and is reached only through sockets). */
static struct {
    char dir[256], cfg[300], state[300], logpath[300], control[400], data[300];
    struct sockaddr_storage agent_addr;
    struct gm_cert *ca;
    struct gm_key *cakey;
    struct gm_jobfile files[4];
    char job_id[GM_JOB_ID_LEN + 1];
} T;

/* --- the agent's log -------------------------------------------------------- */

static int log_count(const char *needle)
{
    char *text = NULL, *p;
    size_t len = 0;
    int n = 0;

    if (gm_id_read_file(T.logpath, 16 << 20, &text, &len) != 0)
        return 0;
    for (p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    free(text);
    return n;
}

static int log_wait(const char *needle, int before)
{
    uint64_t deadline = gm_time_mono_ns() + 20000000000ull;

    while (gm_time_mono_ns() < deadline) {
        if (log_count(needle) > before)
            return 1;
        usleep(5000);
    }
    fprintf(stderr, "log line not seen: %s\n", needle);
    return 0;
}

/* --- control ------------------------------------------------------------------ */

static json_t *control(json_t *req)
{
    char *text = json_dumps(req, JSON_COMPACT), *resp = NULL;
    json_t *r = NULL;

    json_decref(req);
    if (text != NULL && gm_control_call(T.control, text, 5000, &resp) == 0)
        r = json_loads(resp, 0, NULL);
    free(text);
    free(resp);
    return r;
}

static const char *str_of(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return s != NULL ? s : "";
}

/* The current job's record on alpha (a new reference), or NULL. */
static json_t *job_record(void)
{
    json_t *r = control(json_pack("{s:s}", "cmd", "jobs")), *o, *found = NULL;
    size_t i;

    json_array_foreach(json_object_get(r, "jobs"), i, o)
    {
        if (strcmp(str_of(o, "id"), T.job_id) == 0) {
            found = json_incref(o);
            break;
        }
    }
    json_decref(r);
    return found;
}

static long long job_int(const char *key)
{
    json_t *o = job_record();
    long long v = o != NULL ? json_integer_value(json_object_get(o, key)) : -1;

    json_decref(o);
    return v;
}

static int job_state_is(const char *state)
{
    json_t *o = job_record();
    int ok = o != NULL && strcmp(str_of(o, "state"), state) == 0;

    json_decref(o);
    return ok;
}

/* Polls (up to 60 s: the trainer shares two CPUs with sanitizers) until the job's key > after. */
static int job_wait_above(const char *key, long long after)
{
    uint64_t deadline = gm_time_mono_ns() + 60000000000ull;

    while (gm_time_mono_ns() < deadline) {
        if (job_int(key) > after)
            return 1;
        usleep(20000);
    }
    fprintf(stderr, "job %s stayed at %lld\n", key, job_int(key));
    return 0;
}

static int job_wait_equal(const char *key, long long want)
{
    uint64_t deadline = gm_time_mono_ns() + 60000000000ull;

    while (gm_time_mono_ns() < deadline) {
        if (job_int(key) == want)
            return 1;
        usleep(20000);
    }
    fprintf(stderr, "job %s is %lld, want %lld\n", key, job_int(key), want);
    return 0;
}

/* --- a member-mode client -------------------------------------------------------- */

struct cl {
    const char *node;
    struct gm_link *l;
    struct gm_cert *cert;
    struct gm_key *key;
    struct gm_tls_ctx *ctx;
    uv_loop_t loop;
    int up, got_members, closed, close_err, err_code, trains, pongs;
    int offers, groups;
    char offer_id[GM_JOB_ID_LEN + 1];
    uint32_t group_gen;
    size_t group_world;
    int group_rank;
};

static int cl_up(struct gm_link *l)
{
    struct cl *c = gm_link_data(l);
    struct gm_msg_hello hi = {.listen = "127.0.0.1:1"};
    char *json = NULL;
    size_t len = 0;
    int err;

    c->up = 1;
    snprintf(hi.node, sizeof(hi.node), "%s", c->node);
    err = gm_proto_hello_encode(&hi, &json, &len);
    if (err == 0)
        err = gm_link_send(l, GM_MSG_HELLO, 0, json, len);
    free(json);
    return err;
}

static int cl_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    struct cl *c = gm_link_data(l);
    struct gm_jobmsg m;
    char msg[200];

    switch (h->type) {
    case GM_MSG_MEMBERS:
        c->got_members = 1;
        break;
    case GM_MSG_ERROR:
        if (gm_proto_error_decode(p, h->len, &c->err_code, msg, sizeof(msg)) != 0)
            c->err_code = 1;
        break;
    case GM_MSG_PING:
        gm_link_pong(l, p, h->len);
        break;
    case GM_MSG_PONG:
        c->pongs++;
        break;
    case GM_MSG_TRAIN:
        c->trains++;
        break;
    case GM_MSG_JOB_OFFER:
        if (gm_jobmsg_decode(h->type, p, h->len, &m) == 0) {
            c->offers++;
            snprintf(c->offer_id, sizeof(c->offer_id), "%s", m.id);
            gm_jobmsg_free(&m);
        }
        break;
    case GM_MSG_JOB_GROUP:
        if (gm_jobmsg_decode(h->type, p, h->len, &m) == 0) {
            c->groups++;
            c->group_gen = m.gen;
            c->group_world = m.nranks;
            c->group_rank = -1;
            for (size_t i = 0; i < m.nranks; i++)
                if (strcmp(m.ranks[i], c->node) == 0)
                    c->group_rank = (int)i;
            gm_jobmsg_free(&m);
        }
        break;
    default:
        break;
    }
    return 0;
}

static void cl_close(struct gm_link *l, int err)
{
    struct cl *c = gm_link_data(l);

    c->closed = 1;
    c->close_err = err;
    c->l = NULL;
}

static const struct gm_link_ops cl_ops = {
    .on_up = cl_up, .on_frame = cl_frame, .on_close = cl_close};

static void wake_cb(uv_timer_t *t)
{
    (void)t;
}

/* Runs the client's loop until *flag or 20 s. */
static int run_until(struct cl *c, const int *flag)
{
    uint64_t deadline = gm_time_mono_ns() + 20000000000ull;
    uv_timer_t t;

    uv_timer_init(&c->loop, &t);
    uv_timer_start(&t, wake_cb, 10, 10);
    while (!*flag && gm_time_mono_ns() < deadline)
        uv_run(&c->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&c->loop, UV_RUN_NOWAIT);
    return *flag;
}

/* A member "node" (certificate from alpha's CA) linked up to alpha. */
static void cl_open(struct cl *c, const char *node)
{
    uint8_t pub[GM_ID_PUB_LEN];
    struct gm_tls_config tc = {.cluster = "lab", .ca = T.ca};
    struct gm_link_opts o = {.role = GM_TLS_ROLE_CLIENT};

    memset(c, 0, sizeof(*c));
    c->node = node;
    GM_CHECK_OK(gm_id_key_generate(&c->key));
    GM_CHECK_OK(gm_id_key_public(c->key, pub));
    GM_CHECK_OK(gm_id_cert_issue(T.ca, T.cakey, "lab", node, pub, 30, &c->cert));
    tc.cert = c->cert;
    tc.key = c->key;
    GM_CHECK_OK(uv_loop_init(&c->loop));
    GM_CHECK_OK(gm_tls_ctx_new(&tc, &c->ctx));
    GM_CHECK_OK(gm_link_new(&c->loop, c->ctx, &o, &cl_ops, c, &c->l));
    GM_CHECK_OK(gm_link_connect(c->l, (struct sockaddr *)&T.agent_addr));
    GM_CHECK(run_until(c, &c->got_members));
}

static void cl_finish(struct cl *c)
{
    if (c->l != NULL)
        gm_link_close(c->l, 0);
    run_until(c, &c->closed);
    while (uv_run(&c->loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&c->loop));
    gm_tls_ctx_free(c->ctx);
    gm_id_cert_free(c->cert);
    gm_id_key_free(c->key);
}

/* The client sends one frame; alpha must answer ERROR want and close, and log needle. */
static void expect_refused(struct cl *c, uint16_t type, uint64_t req, const void *p, size_t len,
                           const char *needle, int before)
{
    GM_CHECK_OK(gm_link_send(c->l, type, req, p, len));
    GM_CHECK(run_until(c, &c->closed));
    GM_CHECK_EQ(c->err_code, GM_ERR_PROTO);
    GM_CHECK(log_wait(needle, before));
}

/* --- tests ------------------------------------------------------------------------------- */

static void garbage_case(uint16_t type, const char *payload)
{
    struct cl c;
    int before = log_count("reason=\"malformed job message\"");

    cl_open(&c, "garbage1");
    if (c.l != NULL)
        expect_refused(&c, type, 0, payload, strlen(payload), "reason=\"malformed job message\"",
                       before);
    cl_finish(&c);
}

static void test_garbage_job_messages(void)
{
    static const uint16_t types[] = {GM_MSG_JOB_OFFER, GM_MSG_JOB_CHECK, GM_MSG_JOB_GROUP,
                                     GM_MSG_JOB_REPORT, GM_MSG_JOB_END};

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        garbage_case(types[i], "\x01\xff not json");
        garbage_case(types[i], "[1,2,3]");
        garbage_case(types[i], "{\"id\":\"not-hex-at-all!\"}");
        garbage_case(types[i], "{\"id\":7}");
    }
    garbage_case(GM_MSG_JOB_OFFER, "{\"id\":\"0123456789abcdef\",\"text\":\"\",\"origin\":\"x\"}");
    garbage_case(GM_MSG_JOB_CHECK,
                 "{\"id\":\"0123456789abcdef\",\"files\":[{\"name\":\"a\",\"size\":-1,"
                 "\"sha256\":\"00\"}]}");
    garbage_case(GM_MSG_JOB_GROUP, "{\"id\":\"0123456789abcdef\",\"text\":\"x\",\"origin\":\"x\","
                                   "\"gen\":1,\"ranks\":[\"a\",\"a\"]}");
    garbage_case(GM_MSG_JOB_REPORT, "{\"id\":\"0123456789abcdef\",\"gen\":1,\"event\":\"boom\","
                                    "\"code\":1,\"message\":\"m\"}");
    garbage_case(GM_MSG_JOB_END,
                 "{\"id\":\"0123456789abcdef\",\"state\":\"exploded\",\"message\":\"m\"}");
}

static const char job_fmt[] = "[job]\n"
                              "name = tiny\n"
                              "model = mlp\n"
                              "epochs = 1000000\n"
                              "eval_every = 1000000\n"
                              "log_every = 1000000\n"
                              "\n[model]\nhidden = 16\n"
                              "\n[data]\nkind = idx\ndir = %s\n"
                              "\n[optim]\nname = sgd\nlr = 0.01\nglobal_batch = 32\n"
                              "\n[comm]\ncodec = fp32\n";

/* alpha, alone, coordinates and runs a job that trains until it is cancelled. */
static void test_submit(void)
{
    char text[1024];
    json_t *r;

    snprintf(text, sizeof(text), job_fmt, T.data);
    r = control(json_pack("{s:s,s:s,s:s}", "cmd", "submit", "text", text, "origin", "tiny.ini"));
    GM_CHECK(r != NULL && json_is_string(json_object_get(r, "id")));
    if (r != NULL && json_is_string(json_object_get(r, "id")))
        snprintf(T.job_id, sizeof(T.job_id), "%s", json_string_value(json_object_get(r, "id")));
    GM_CHECK_EQ(json_integer_value(json_object_get(r, "world")), 1);
    json_decref(r);
    GM_CHECK(job_wait_above("step", 2));
    GM_CHECK(job_state_is("running"));
}

/* A group of another coordinator, and a report from a stranger, sent to the coordinator. */
static void test_out_of_place_job_messages(void)
{
    struct cl c;
    struct gm_jobmsg m = {.gen = 9, .text = (char *)"[job]\n", .text_len = 6};
    char ranks[1][GM_ID_NAME_MAX + 1] = {"zx"};
    char *json = NULL;
    size_t len = 0;
    int before = log_count("reason=\"malformed job message\"");

    snprintf(m.id, sizeof(m.id), "fedcba9876543210");
    snprintf(m.origin, sizeof(m.origin), "elsewhere.ini");
    m.ranks = ranks;
    m.nranks = 1;
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_GROUP, &m, &json, &len));
    cl_open(&c, "zx");
    if (c.l != NULL && json != NULL)
        expect_refused(&c, GM_MSG_JOB_GROUP, 0, json, len, "reason=\"malformed job message\"",
                       before);
    cl_finish(&c);
    free(json);
    GM_CHECK(job_state_is("running"));
}

/* SHA-256 of a file, hex. */
static int sha256_file(const char *path, char hex[65], uint64_t *size)
{
    char *text = NULL;
    size_t len = 0;
    unsigned char md[32];
    unsigned int mdlen = 0;

    if (gm_id_read_file(path, 64 << 20, &text, &len) != 0)
        return -1;
    if (EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
        free(text);
        return -1;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    *size = len;
    free(text);
    return 0;
}

/* Member c answers the job's offer with the same files: it becomes rank 1 of a new group. */
static void become_rank(struct cl *c, long long gen0)
{
    struct gm_jobmsg m = {.files = T.files, .nfiles = 4};
    char *json = NULL;
    size_t jlen = 0;

    GM_CHECK(run_until(c, &c->offers));
    GM_CHECK_STREQ(c->offer_id, T.job_id);
    snprintf(m.id, sizeof(m.id), "%s", c->offer_id);
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_CHECK, &m, &json, &jlen));
    if (c->l != NULL && json != NULL)
        GM_CHECK_OK(gm_link_send(c->l, GM_MSG_JOB_CHECK, 0, json, jlen));
    free(json);
    GM_CHECK(run_until(c, &c->groups)); /* it passed: a new generation with it as rank 1 */
    GM_CHECK_EQ(c->group_world, 2);
    GM_CHECK_EQ(c->group_rank, 1);
    GM_CHECK(job_wait_above("generation", gen0));
}

/* Frames that are merely late are dropped, not refused: a retired generation's
 * TRAIN frame, then a PING; the PONG comes back on a link that stays up. */
static void stale_frame_kept_up(struct cl *c, uint32_t gen)
{
    uint8_t junk[16] = {0};

    if (c->l == NULL)
        return;
    GM_CHECK_OK(gm_link_send(c->l, GM_MSG_TRAIN, gm_xport_req(gen, 0), junk, sizeof(junk)));
    c->pongs = 0;
    gm_link_ping(c->l);
    GM_CHECK(run_until(c, &c->pongs)); /* frames are handled in order: the TRAIN went first */
    GM_CHECK(!c->closed && c->err_code == 0);
}

/* Members that are not ranks, and ranks that break the order, on the training channel. */
static void test_train_refusals(void)
{
    struct cl zz, yy, yx;
    uint8_t junk[32] = {0};
    long long gen0 = job_int("generation");
    const char *needle = "reason=\"malformed or unexpected training message\"";
    int before = log_count(needle);

    GM_CHECK(gen0 >= 1);
    cl_open(&zz, "zz"); /* offered the job; never answers, so it is no rank */
    GM_CHECK(run_until(&zz, &zz.offers));
    cl_open(&yy, "yy");
    become_rank(&yy, gen0);
    GM_CHECK_EQ(zz.groups, 0);
    /* zz sends a message of the group yy is in: not a rank of it */
    if (zz.l != NULL)
        expect_refused(&zz, GM_MSG_TRAIN, gm_xport_req(yy.group_gen, 0), junk, sizeof(junk), needle,
                       before);
    cl_finish(&zz);
    GM_CHECK(job_state_is("running"));
    GM_CHECK_EQ(job_int("generation"), gen0 + 1); /* a non-rank leaving changes no group */

    /* yy: a retired generation's frame is dropped quietly; sequence number 5 first is not */
    stale_frame_kept_up(&yy, yy.group_gen - 1);
    before = log_count(needle);
    if (yy.l != NULL)
        expect_refused(&yy, GM_MSG_TRAIN, gm_xport_req(yy.group_gen, 5), junk, 16, needle, before);
    cl_finish(&yy);
    /* the coordinator re-forms without it and the job goes on */
    GM_CHECK(job_wait_above("generation", gen0 + 1));
    GM_CHECK(job_wait_equal("world", 1));
    GM_CHECK(job_wait_above("step", job_int("step")));
    GM_CHECK(job_state_is("running"));

    /* yx: an empty training message */
    gen0 = job_int("generation");
    cl_open(&yx, "yx");
    become_rank(&yx, gen0);
    before = log_count(needle);
    if (yx.l != NULL)
        expect_refused(&yx, GM_MSG_TRAIN, gm_xport_req(yx.group_gen, 0), junk, 0, needle, before);
    cl_finish(&yx);
    GM_CHECK(job_wait_above("generation", gen0 + 1));
    GM_CHECK(job_wait_equal("world", 1));
    GM_CHECK(job_wait_above("step", job_int("step")));
    GM_CHECK(job_state_is("running"));
}

/* After all of it: status answers, a new member links up, the job cancels cleanly. */
static void test_still_serving(void)
{
    struct cl c;
    json_t *r = control(json_pack("{s:s}", "cmd", "status"));
    long long step;

    GM_CHECK(r != NULL && json_object_get(r, "error") == NULL);
    json_decref(r);
    cl_open(&c, "late");
    GM_CHECK(c.got_members && !c.closed);
    cl_finish(&c);
    step = job_int("step");
    GM_CHECK(job_wait_above("step", step));
    r = control(json_pack("{s:s,s:s}", "cmd", "cancel", "id", T.job_id));
    GM_CHECK(r != NULL && json_object_get(r, "error") == NULL);
    json_decref(r);
    for (int i = 0; i < 3000 && !job_state_is("cancelled"); i++)
        usleep(20000);
    GM_CHECK(job_state_is("cancelled"));
}

/* --- setup --------------------------------------------------------------------- */

static void *agent_main(void *arg)
{
    struct gm_agent *a = arg;

    while (uv_run(gm_agent_loop(a), UV_RUN_DEFAULT) != 0)
        ;
    return NULL;
}

static int write_be32(FILE *f, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};

    return fwrite(b, 1, 4, f) == 4 ? 0 : -1;
}

/* IDX files of n 28x28 images and n labels, pseudo-random. */
static int write_idx(const char *images, const char *labels, uint32_t n, uint32_t seed)
{
    FILE *fi = fopen(images, "wb"), *fl = fopen(labels, "wb");
    int err = fi != NULL && fl != NULL ? 0 : -1;
    uint32_t x = seed;

    if (err == 0)
        err = write_be32(fi, 0x803) | write_be32(fi, n) | write_be32(fi, 28) | write_be32(fi, 28) |
              write_be32(fl, 0x801) | write_be32(fl, n);
    for (uint32_t i = 0; i < n * 784 && err == 0; i++) {
        x = x * 1664525u + 1013904223u;
        err = fputc((int)(x >> 24), fi) == EOF;
    }
    for (uint32_t i = 0; i < n && err == 0; i++)
        err = fputc((int)(i % 10), fl) == EOF;
    if (fi != NULL && fclose(fi) != 0)
        err = -1;
    if (fl != NULL && fclose(fl) != 0)
        err = -1;
    return err;
}

/* The dataset and what a member holding the same files answers (sorted by name). */
static int make_dataset(void)
{
    static const char *names[4] = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
                                   "train-images-idx3-ubyte", "train-labels-idx1-ubyte"};
    char p[4][400];

    snprintf(T.data, sizeof(T.data), "%s/data", T.dir);
    if (mkdir(T.data, 0700) != 0)
        return -1;
    for (int i = 0; i < 4; i++)
        snprintf(p[i], sizeof(p[i]), "%s/%s", T.data, names[i]);
    if (write_idx(p[0], p[1], NTEST, 7) != 0 || write_idx(p[2], p[3], NTRAIN, 11) != 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        snprintf(T.files[i].name, sizeof(T.files[i].name), "%s", names[i]);
        if (sha256_file(p[i], T.files[i].sha256, &T.files[i].size) != 0)
            return -1;
    }
    return 0;
}

int main(void)
{
    char *init_argv[] = {"init",  "--cluster", "lab",         "--config", T.cfg,   "--state",
                         T.state, "--listen",  "127.0.0.1:0", "--node",   "alpha", "--multicast",
                         "off",   "--metrics", "off",         NULL};
    char path[400], cmd[400];
    struct gm_agent *a = NULL;
    pthread_t th;
    int logfd, rc;

    if (sodium_init() < 0)
        return 1;
    snprintf(T.dir, sizeof(T.dir), "/tmp/gm-test-jobroom-XXXXXX");
    if (mkdtemp(T.dir) == NULL)
        return 1;
    snprintf(T.cfg, sizeof(T.cfg), "%s/alpha.conf", T.dir);
    snprintf(T.state, sizeof(T.state), "%s/alpha", T.dir);
    snprintf(T.logpath, sizeof(T.logpath), "%s/agent.log", T.dir);
    snprintf(T.control, sizeof(T.control), "%s/control.sock", T.state);
    logfd = open(T.logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0 || make_dataset() != 0)
        return 1;
    gm_log_set_fd(logfd);
    gm_log_set_level(GM_LOG_DEBUG);
    if (gm_cli_init(15, init_argv) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/ca.crt", T.state);
    if (gm_id_cert_load(path, &T.ca) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/ca.key", T.state);
    if (gm_id_key_load(path, &T.cakey) != 0)
        return 1;
    if (gm_agent_open(T.cfg, &a) != 0 || gm_agent_start(a) != 0)
        return 1;
    if (gm_proto_addr_parse(gm_agent_listen_addr(a), &T.agent_addr) != 0)
        return 1;
    if (pthread_create(&th, NULL, agent_main, a) != 0)
        return 1;

    GM_TEST_RUN(test_garbage_job_messages);
    GM_TEST_RUN(test_submit);
    GM_TEST_RUN(test_out_of_place_job_messages);
    GM_TEST_RUN(test_train_refusals);
    GM_TEST_RUN(test_still_serving);

    kill(getpid(), SIGTERM); /* the agent's signal watcher stops it */
    pthread_join(th, NULL);
    gm_agent_free(a);
    gm_id_cert_free(T.ca);
    gm_id_key_free(T.cakey);
    GM_CHECK(log_count("event=agent-started") == 1);
    rc = gm_test_finish("test_jobroom");
    if (rc != 0) {
        snprintf(cmd, sizeof(cmd), "cat '%s' >&2", T.logpath);
        if (system(cmd) != 0)
            rc = 1;
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", T.dir);
    if (system(cmd) != 0)
        rc = 1;
    close(logfd);
    return rc;
}
