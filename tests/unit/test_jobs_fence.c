/*
 * tests/unit/test_jobs_fence.c - the job room under a chief (agent/jobs/job.h):
 *  - the coordinator is the chief the env names; with no chief there is none,
 *    and a submit is refused with the reason (no majority, no training);
 *  - JOB_* frames carry the sender's term in the request id: one from an
 *    older term is dropped before it is decoded or acted on, one of the
 *    current term (or term 0: a sender without consensus) is handled.
 * The env is a fake (no links: link_to counts its calls and returns NULL), so
 * "handled" shows as the room trying to answer its sender.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "agent/jobs/job.h"
#include "agent/jobs/jobmsg.h"
#include "agent/net/proto.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static struct {
    int have_chief;
    uint64_t term;
    int link_calls;
} F;

static struct gm_link *link_to(void *agent, const char *node)
{
    (void)agent;
    (void)node;
    F.link_calls++;
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
    if (!F.have_chief) {
        out[0] = '\0';
        snprintf(why, cap, "no majority: 1 of 3 voters reachable (2 needed); training pauses");
        return -ENOENT;
    }
    snprintf(out, GM_ID_NAME_MAX + 1, "boss");
    why[0] = '\0';
    return 0;
}

static struct gm_metrics *no_metrics(void *agent)
{
    (void)agent;
    return NULL;
}

/* A JOB_OFFER whose job text does not parse: handling it means answering JOB_CHECK. */
static int offer(struct gm_jobs *j, uint64_t term)
{
    struct gm_jobmsg m = {0};
    struct gm_frame_hdr h = {.type = GM_MSG_JOB_OFFER, .req = term};
    char *text;
    size_t len;
    int err;

    snprintf(m.id, sizeof(m.id), "0123456789abcdef");
    m.text = "not a job";
    m.text_len = strlen(m.text);
    GM_CHECK_OK(gm_jobmsg_encode(GM_MSG_JOB_OFFER, &m, &text, &len));
    h.len = (uint32_t)len;
    err = gm_jobs_on_frame(j, NULL, "boss", &h, (const uint8_t *)text);
    free(text);
    return err;
}

static void test_fence(void)
{
    uv_loop_t loop;
    struct gm_jobs_env env = {.loop = &loop,
                              .node = "alpha",
                              .state_dir = "/nonexistent",
                              .link_to = link_to,
                              .members_up = members_up,
                              .chief = chief,
                              .metrics = no_metrics};
    struct gm_jobs *j;
    char coord[GM_ID_NAME_MAX + 1], why[200];
    json_t *req, *r;
    int err;

    GM_CHECK_OK(uv_loop_init(&loop));
    GM_CHECK_OK(gm_jobs_new(&env, &j));

    /* the coordinator is the chief */
    F.have_chief = 1;
    F.term = 5;
    GM_CHECK_STREQ(gm_jobs_coordinator(j, coord, why, sizeof(why)), "boss");
    F.have_chief = 0;
    GM_CHECK_STREQ(gm_jobs_coordinator(j, coord, why, sizeof(why)), "");
    GM_CHECK(strstr(why, "no majority") != NULL);
    req = json_pack("{s:s, s:s}", "cmd", "submit", "text", "[job]\nname = x\n");
    r = gm_jobs_ctl_submit(j, req);
    GM_CHECK(r != NULL &&
             strstr(json_string_value(json_object_get(r, "error")), "no chief") != NULL);
    GM_CHECK(r != NULL &&
             strstr(json_string_value(json_object_get(r, "error")), "no majority") != NULL);
    json_decref(r);
    json_decref(req);

    /* an offer of an older term: dropped, never answered */
    F.have_chief = 1;
    F.link_calls = 0;
    GM_CHECK_OK(offer(j, 4));
    GM_CHECK_EQ(F.link_calls, 0);
    /* of the current term: handled (the answer finds no link) */
    err = offer(j, 5);
    GM_CHECK_EQ(err, -ENOTCONN);
    GM_CHECK_EQ(F.link_calls, 1);
    /* term 0, a sender without consensus: handled too */
    err = offer(j, 0);
    GM_CHECK_EQ(err, -ENOTCONN);
    GM_CHECK_EQ(F.link_calls, 2);
    /* a newer term than ours: we are behind, handled */
    err = offer(j, 9);
    GM_CHECK_EQ(err, -ENOTCONN);
    GM_CHECK_EQ(F.link_calls, 3);

    gm_jobs_stop(j);
    while (!gm_jobs_idle(j))
        uv_run(&loop, UV_RUN_ONCE);
    gm_jobs_free(j);
    while (uv_run(&loop, UV_RUN_DEFAULT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&loop));
}

int main(void)
{
    GM_TEST_RUN(test_fence);
    return gm_test_finish("test_jobs_fence");
}
