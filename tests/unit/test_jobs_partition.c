/*
 * tests/unit/test_jobs_partition.c - the job room across a partition (agent/jobs/job.h,
 * "partitions" in agent/jobs/job.c): no majority, no training.  One room, node "alpha", with a real
 * trainer thread (an MLP on Fashion-MNIST; skipped without the data) and a fake env: no links at
 * all, and a chief the test sets.
 *  1. alpha joins a job that "boss", the chief, coordinates (JOB_GROUP, term 5): running;
 *  2. the link to boss is lost and there is no chief: the job is paused (not failed) and
 *     says why (no majority);
 *  3. alpha is elected chief: it takes the job over and trains alone (world 1: legitimate,
 *     the chief);
 *  4. alpha loses its majority: it steps down, the job is paused with the reason, and its
 *     rank takes no further step and forms no further group (the 1-rank group that thinks it
 *     is the job, stopped);
 *  5. another chief (boss, term 7) sends a group: alpha follows it (coordinator boss); a group
 *     of the older term 6 is dropped;
 *  6. alpha, chief and coordinator again, hears boss's group of a newer term before raft names
 *     boss chief (a chief that handed its role on): the group is held, then followed;
 *  7. the same with alpha already at boss's term (it voted) and no chief named yet;
 *  8. a held group whose sender is never named chief before a newer term comes is dropped.
 * And a node back from a split answers the new chief's offer in the offer's term, once raft
 * has brought it there (an answer in its old term would be dropped as stale).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "agent/jobs/job.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/proto.h"
#include "common/assert.h"
#include "common/test.h"
#include "common/time.h"

GM_TEST_DEFINE_STATE;

#define DATA "/usr/share/datasets/fashion-mnist"
#define ID "0123456789abcdef"
#define GEN(n) ((0x0123u << 16) | (n)) /* job.c: the id's first 4 hex digits, then n */

static struct {
    char chief[32]; /* "" : none, no majority */
    uint64_t term;
    char dir[64]; /* the state directory */
    int to_boss;  /* link_to(boss) calls: the room trying to send boss something */
} F;

static struct gm_link *link_to(void *agent, const char *node)
{
    (void)agent;
    F.to_boss += strcmp(node, "boss") == 0;
    return NULL;
}

static size_t members_up(void *agent, char (*nodes)[GM_ID_NAME_MAX + 1], size_t cap)
{
    (void)agent;
    (void)nodes;
    (void)cap;
    return 0;
}

static int chief(void *agent, char out[GM_ID_NAME_MAX + 1], uint64_t *term, char *why, size_t cap)
{
    (void)agent;
    *term = F.term;
    snprintf(out, GM_ID_NAME_MAX + 1, "%s", F.chief);
    if (F.chief[0] == '\0') {
        snprintf(why, cap, "no majority: 1 of 3 voters reachable (2 needed); training pauses");
        return -ENOENT;
    }
    why[0] = '\0';
    return 0;
}

static struct gm_metrics *no_metrics(void *agent)
{
    (void)agent;
    return NULL;
}

static const char job_text[] = "[job]\nname = js\nmodel = mlp\nepochs = 500\nseed = 1\n"
                               "threads = 1\nlog_every = 1000000\neval_every = 1000\n"
                               "[model]\nhidden = 16\n"
                               "[data]\nkind = idx\ndir = " DATA "\n"
                               "[optim]\nname = sgd\nlr = 0.01\nbatch = 32\n"
                               "[comm]\ncodec = fp32\n";

/* A JOB_GROUP from node of term term: generation n, ranks [node, alpha]. */
static int group(struct gm_jobs *j, const char *node, uint64_t term, uint32_t n)
{
    char ranks[2][GM_ID_NAME_MAX + 1];
    struct gm_jobmsg m = {.gen = GEN(n), .ranks = ranks, .nranks = 2, .global_batch = 64};
    struct gm_frame_hdr h = {.type = GM_MSG_JOB_GROUP, .req = term};
    char *text;
    size_t len;
    int err;

    snprintf(ranks[0], sizeof(ranks[0]), "%s", node);
    snprintf(ranks[1], sizeof(ranks[1]), "alpha");
    snprintf(m.id, sizeof(m.id), ID);
    snprintf(m.origin, sizeof(m.origin), "test");
    m.text = (char *)job_text;
    m.text_len = strlen(job_text);
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_GROUP, &m, &text, &len));
    h.len = (uint32_t)len;
    err = gm_jobs_on_frame(j, NULL, node, &h, (const uint8_t *)text);
    free(text);
    return err;
}

/* The current job's field key, as a new reference (NULL: no job). */
static json_t *field(struct gm_jobs *j, const char *key)
{
    json_t *o = gm_jobs_status_json(j), *v = NULL;

    if (json_is_object(o))
        v = json_incref(json_object_get(o, key));
    json_decref(o);
    return v;
}

static bool field_is(struct gm_jobs *j, const char *key, const char *want)
{
    json_t *v = field(j, key);
    bool ok = json_is_string(v) && strcmp(json_string_value(v), want) == 0;

    json_decref(v);
    return ok;
}

static long field_int(struct gm_jobs *j, const char *key)
{
    json_t *v = field(j, key);
    long n = json_is_integer(v) ? (long)json_integer_value(v) : -1;

    json_decref(v);
    return n;
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop for ms milliseconds (the room's 200 ms ticks and the rank's callbacks). */
static void run_for(uv_loop_t *loop, unsigned ms)
{
    uv_timer_t t;
    uint64_t end = gm_time_mono_ns() + (uint64_t)ms * 1000000ull;

    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_tick, 20, 20);
    while (gm_time_mono_ns() < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

/* Runs the loop until the current job's step passes `after` (deadline: a hung run fails). */
static bool steps_past(uv_loop_t *loop, struct gm_jobs *j, long after)
{
    for (int i = 0; i < 600; i++) {
        if (field_int(j, "step") > after)
            return true;
        run_for(loop, 100);
    }
    return false;
}

/* A job room on node alpha over the fake env, on a new loop. */
static struct gm_jobs *room_new(uv_loop_t *loop)
{
    struct gm_jobs_env env = {.loop = loop,
                              .node = "alpha",
                              .state_dir = F.dir,
                              .link_to = link_to,
                              .members_up = members_up,
                              .chief = chief,
                              .metrics = no_metrics};
    struct gm_jobs *j = NULL;

    GM_CHECK_OK(uv_loop_init(loop));
    GM_CHECK_OK(gm_jobs_new(&env, &j));
    GM_ASSERT(j != NULL);
    return j;
}

/* Stops its rank, frees the room and closes the loop clean. */
static void room_free(uv_loop_t *loop, struct gm_jobs *j)
{
    gm_jobs_stop(j);
    while (!gm_jobs_idle(j))
        uv_run(loop, UV_RUN_ONCE);
    gm_jobs_free(j);
    while (uv_run(loop, UV_RUN_DEFAULT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(loop));
}

/* A JOB_OFFER from boss of frame term term, training with alpha alone (no link to wait for). */
static void offer(struct gm_jobs *j, uint64_t term)
{
    char ranks[1][GM_ID_NAME_MAX + 1] = {"alpha"};
    struct gm_jobmsg m = {.ranks = ranks, .nranks = 1};
    struct gm_frame_hdr h = {.type = GM_MSG_JOB_OFFER, .req = term};
    char *text;
    size_t len;

    snprintf(m.id, sizeof(m.id), ID);
    snprintf(m.origin, sizeof(m.origin), "test");
    m.text = (char *)job_text;
    m.text_len = strlen(job_text);
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_OFFER, &m, &text, &len));
    h.len = (uint32_t)len;
    GM_CHECK_OK(gm_jobs_on_frame(j, NULL, "boss", &h, (const uint8_t *)text));
    free(text);
}

/* Runs the loop until the room tries to send boss something (deadline 60 s). */
static bool answered(uv_loop_t *loop)
{
    F.to_boss = 0;
    for (int i = 0; i < 600 && F.to_boss == 0; i++)
        run_for(loop, 100);
    return F.to_boss > 0;
}

/* A node back from a split, offered the job by the new chief of a newer term, answers only
 * once its own term has caught up: an answer in its old term would be dropped as stale. */
static void test_answer_in_the_offers_term(void)
{
    uv_loop_t loop;
    struct gm_jobs *j = room_new(&loop);
    F.chief[0] = '\0';
    F.term = 3;
    offer(j, 3); /* the same term: answered (this also hashes the dataset into the cache) */
    GM_CHECK(answered(&loop));
    offer(j, 5); /* newer than ours: held */
    F.to_boss = 0;
    run_for(&loop, 1000);
    GM_CHECK_EQ(F.to_boss, 0);
    F.term = 5; /* raft caught up */
    GM_CHECK(answered(&loop));

    room_free(&loop, j);
}

static void test_split(void)
{
    uv_loop_t loop;
    struct gm_jobs *j = room_new(&loop);
    json_t *v;
    long s0, g0;

    /* 1. a member of boss's job */
    snprintf(F.chief, sizeof(F.chief), "boss");
    F.term = 5;
    GM_CHECK_OK(group(j, "boss", 5, 1));
    run_for(&loop, 300);
    GM_CHECK(field_is(j, "state", "running"));
    GM_CHECK(field_is(j, "coordinator", "boss"));
    v = field(j, "paused_reason");
    GM_CHECK(json_is_null(v));
    json_decref(v);

    /* 2. cut off: no link to boss, no chief */
    F.chief[0] = '\0';
    gm_jobs_link_down(j, "boss", -ETIMEDOUT);
    run_for(&loop, 600);
    GM_CHECK(field_is(j, "state", "paused"));
    v = field(j, "paused_reason");
    GM_CHECK(json_is_string(v) && strstr(json_string_value(v), "no chief: no majority") != NULL);
    json_decref(v);

    /* 3. elected: alpha takes the job over and trains alone */
    snprintf(F.chief, sizeof(F.chief), "alpha");
    F.term = 6;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    GM_CHECK(field_is(j, "state", "running"));
    GM_CHECK(steps_past(&loop, j, field_int(j, "step")));
    GM_CHECK_EQ(field_int(j, "world"), 1);

    /* 4. no majority: alpha steps down; its rank takes no step and no group forms */
    F.chief[0] = '\0';
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "state", "paused"));
    v = field(j, "paused_reason");
    GM_CHECK(json_is_string(v) && strstr(json_string_value(v), "no majority") != NULL);
    json_decref(v);
    s0 = field_int(j, "step");
    g0 = field_int(j, "generation");
    gm_jobs_link_up(j, "boss"); /* as if boss came back: a coordinator would offer and re-form */
    gm_jobs_link_down(j, "boss", -ECONNRESET);
    run_for(&loop, 1500);
    GM_CHECK_EQ(field_int(j, "step"), s0);
    GM_CHECK_EQ(field_int(j, "generation"), g0);
    GM_CHECK(field_is(j, "state", "paused"));

    /* 5. boss is the chief of term 7: its group of term 6 (older) is dropped, then its group of
     * term 7 is followed */
    snprintf(F.chief, sizeof(F.chief), "boss");
    F.term = 7;
    GM_CHECK_OK(group(j, "boss", 6, (uint32_t)g0 + 1));
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    GM_CHECK_EQ(field_int(j, "generation"), g0);
    GM_CHECK_OK(group(j, "boss", 7, (uint32_t)g0 + 1));
    GM_CHECK(field_is(j, "coordinator", "boss"));
    GM_CHECK_EQ(field_int(j, "generation"), g0 + 1);

    /* 6. alpha, the chief again (term 8), coordinates; it hands the role to boss, whose group
     * of term 9 comes before raft tells alpha of boss's election: held, not dropped, and
     * followed once raft names boss chief (dropped, boss's group would wait for alpha for
     * ever) */
    snprintf(F.chief, sizeof(F.chief), "alpha");
    F.term = 8;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    GM_CHECK(field_is(j, "state", "running"));
    g0 = field_int(j, "generation");
    GM_CHECK_OK(group(j, "boss", 9, 1));
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    GM_CHECK_EQ(field_int(j, "generation"), g0);
    snprintf(F.chief, sizeof(F.chief), "boss");
    F.term = 9;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "boss"));
    GM_CHECK_EQ(field_int(j, "generation"), 1);
    v = field(j, "paused_reason");
    GM_CHECK(json_is_null(v));
    json_decref(v);

    /* 7. the same when raft has brought alpha to boss's term (alpha voted) but names no chief
     * yet: alpha pauses (no chief), holds boss's group of its own term, then follows it */
    snprintf(F.chief, sizeof(F.chief), "alpha");
    F.term = 10;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    g0 = field_int(j, "generation");
    F.chief[0] = '\0';
    F.term = 11;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "state", "paused"));
    GM_CHECK_OK(group(j, "boss", 11, 1));
    GM_CHECK(field_is(j, "coordinator", "alpha"));
    GM_CHECK_EQ(field_int(j, "generation"), g0);
    snprintf(F.chief, sizeof(F.chief), "boss");
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "boss"));
    GM_CHECK_EQ(field_int(j, "generation"), 1);
    GM_CHECK(field_is(j, "state", "running"));

    /* 8. a held group whose sender raft never names chief (a newer term comes, boss again) is
     * dropped: alpha stays with boss */
    GM_CHECK_OK(group(j, "carol", 12, 5));
    F.term = 13;
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "boss"));
    GM_CHECK_EQ(field_int(j, "generation"), 1);
    snprintf(F.chief, sizeof(F.chief), "carol");
    run_for(&loop, 400);
    GM_CHECK(field_is(j, "coordinator", "boss")); /* not replayed once dropped */
    GM_CHECK_EQ(field_int(j, "generation"), 1);

    room_free(&loop, j);
}

int main(void)
{
    char cmd[96];
    int rc;

    if (access(DATA "/train-images-idx3-ubyte.gz", R_OK) != 0 &&
        access(DATA "/train-images-idx3-ubyte", R_OK) != 0) {
        printf("test_jobs_partition: skip, no %s\n", DATA);
        return 77;
    }
    snprintf(F.dir, sizeof(F.dir), "/tmp/gm-test-jobs-partition-XXXXXX");
    if (mkdtemp(F.dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_split);
    GM_TEST_RUN(test_answer_in_the_offers_term);
    rc = gm_test_finish("test_jobs_partition");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", F.dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
