/*
 * tests/unit/test_members.c - the members room (agent/mesh/members.h) on an agent built by
 * hand: no gm_agent_open, no listener, no peer process.  The rooms' table (a->rooms) holds
 * fake rooms that count the hooks of agent/core/state.h (link_up, link_down, may_link).
 *
 *  - the member table and its file: upsert, save, load (and a bad file refused);
 *  - who dials whom: the smaller node id dials, and the tick asks only for those;
 *  - a room's may_link veto stops gm_members_dial; without it the dial goes out (a real
 *    link to a closed loopback port: refused, closed through the test's on_close);
 *  - HELLO (the room's frame handler, on links made with gm_link_new and never connected:
 *    what h_hello sends stays queued): the member entry is made and linked, and every room
 *    with a link_up hook hears of it once, with that member and that link, after the entry
 *    is up; rooms without hooks are skipped.
 *
 * Loop thread only, like the agent: the test's thread is the loop's.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <uv.h>

#include "agent/core/state.h"
#include "agent/mesh/members.h"
#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "common/assert.h"
#include "common/log.h"
#include "common/test.h"
#include "crypto/identity.h"
#include "crypto/tls.h"
#include "world.h"

GM_TEST_DEFINE_STATE;

static char dir[256];
static struct world W;
static struct gm_tls_ctx *tls;

/* --- fake rooms ---------------------------------------------------------------- */

/* What one fake room saw.  The hooks find their room by name: the hooks have no argument
 * of their own, as in agent.c's rooms[]. */
struct seen {
    int link_up, link_down, may_link;
    char up_node[GM_ID_NAME_MAX + 1];  /* the member of the last link_up */
    struct gm_lctx *up_ctx;            /* and its link context */
    int up_linked;                     /* at that call: p->link was c's link, state UP */
    int up_pointer_ok;                 /* p was the table's entry for that node */
    char asked[8][GM_ID_NAME_MAX + 1]; /* may_link's nodes, in order */
    const char *veto;                  /* may_link refuses this node ("*": every node) */
};

static struct seen seen_a, seen_c;

static struct seen *seen_of(struct gm_agent *a, const char *room)
{
    (void)a;
    return strcmp(room, "fake-a") == 0 ? &seen_a : &seen_c;
}

static void up(struct gm_agent *a, const char *room, struct gm_peer *p, struct gm_lctx *c)
{
    struct seen *s = seen_of(a, room);

    s->link_up++;
    snprintf(s->up_node, sizeof(s->up_node), "%s", p->node);
    s->up_ctx = c;
    s->up_linked = p->link == c->link && gm_link_state(c->link) == GM_LSTATE_UP;
    s->up_pointer_ok = gm_agent_peer_find(a, p->node) == p;
}

static int may(struct gm_agent *a, const char *room, const char *node)
{
    struct seen *s = seen_of(a, room);

    if (s->may_link < 8)
        snprintf(s->asked[s->may_link], sizeof(s->asked[0]), "%s", node);
    s->may_link++;
    return s->veto == NULL || (strcmp(s->veto, "*") != 0 && strcmp(s->veto, node) != 0);
}

static void a_link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    up(a, "fake-a", p, c);
}

static void c_link_up(struct gm_agent *a, struct gm_peer *p, struct gm_lctx *c)
{
    up(a, "fake-c", p, c);
}

static void c_link_down(struct gm_agent *a, struct gm_peer *p, int err)
{
    (void)p;
    (void)err;
    seen_of(a, "fake-c")->link_down++;
}

static int a_may_link(struct gm_agent *a, const char *node)
{
    return may(a, "fake-a", node);
}

static int c_may_link(struct gm_agent *a, const char *node)
{
    return may(a, "fake-c", node);
}

static const struct gm_room fake_a = {
    .name = "fake-a", .link_up = a_link_up, .may_link = a_may_link};
static const struct gm_room fake_b = {.name = "fake-b"}; /* no hooks */
static const struct gm_room fake_c = {
    .name = "fake-c", .link_up = c_link_up, .link_down = c_link_down, .may_link = c_may_link};
static const struct gm_room *const rooms[] = {&gm_members_room, &fake_a, &fake_b, &fake_c};

/* --- the agent, by hand ----------------------------------------------------------- */

static int closed, close_err;

static int t_on_up(struct gm_link *l)
{
    (void)l;
    return -EPROTO; /* no test link is meant to come up */
}

static int t_on_frame(struct gm_link *l, const struct gm_frame_hdr *h, const uint8_t *p)
{
    (void)l;
    (void)h;
    (void)p;
    return -EPROTO;
}

/* A dial's end, as agent.c's on_close does it for a member dial. */
static void t_on_close(struct gm_link *l, int err)
{
    struct gm_lctx *c = gm_link_data(l);
    struct gm_peer *p = gm_agent_peer_find(c->a, c->node);

    if (p != NULL)
        gm_members_dial_ended(p);
    gm_agent_lctx_free(c);
    closed++;
    close_err = err;
}

static const struct gm_link_ops t_ops = {
    .on_up = t_on_up, .on_frame = t_on_frame, .on_close = t_on_close};

/* Agent node with its state in DIR/node, the fake rooms registered. */
static void agent_make(struct gm_agent *a, const char *node)
{
    memset(a, 0, sizeof(*a));
    gm_config_defaults(&a->cfg);
    snprintf(a->cfg.node, sizeof(a->cfg.node), "%s", node);
    snprintf(a->cfg.state_dir, sizeof(a->cfg.state_dir), "%s/%s", dir, node);
    (void)mkdir(a->cfg.state_dir, 0700);
    snprintf(a->listen_addr, sizeof(a->listen_addr), "127.0.0.1:7002");
    a->tls = tls;
    a->link_ops = &t_ops;
    a->rooms = rooms;
    a->nrooms = GM_ARRAY_SIZE(rooms);
    GM_CHECK_OK(uv_loop_init(&a->loop));
    memset(&seen_a, 0, sizeof(seen_a));
    memset(&seen_c, 0, sizeof(seen_c));
}

static void agent_free(struct gm_agent *a)
{
    for (size_t i = 0; i < a->npeers; i++)
        a->peers[i].link = NULL; /* borrowed: the test frees its links itself */
    gm_members_free(a);
    while (uv_run(&a->loop, UV_RUN_NOWAIT) != 0)
        ;
    GM_CHECK_OK(uv_loop_close(&a->loop));
}

static char *read_text(const char *path)
{
    char *text = NULL;
    size_t len = 0;

    return gm_id_read_file(path, 1 << 16, &text, &len) == 0 ? text : NULL;
}

static void write_text(const char *path, const char *text)
{
    GM_CHECK_OK(gm_id_write_file(path, text, strlen(text), 0644));
}

/* --- tests -------------------------------------------------------------------------- */

static void test_table_and_file(void)
{
    struct gm_agent a, b;
    struct gm_peer *p;
    char path[GM_PATH_MAX + 16], *text;
    int changed = -1;

    agent_make(&a, "bravo");
    p = gm_members_upsert(&a, "alpha", "127.0.0.1:7001", &changed);
    GM_CHECK(p != NULL);
    GM_CHECK_EQ(changed, 1);
    GM_CHECK(gm_members_upsert(&a, "alpha", "127.0.0.1:7001", &changed) == p);
    GM_CHECK_EQ(changed, 0); /* the same entry, nothing new */
    GM_CHECK(gm_members_upsert(&a, "alpha", "127.0.0.1:7011", &changed) != NULL);
    GM_CHECK_EQ(changed, 1); /* a new address */
    GM_CHECK(gm_members_upsert(&a, "bravo", "127.0.0.1:7002", &changed) == NULL);
    GM_CHECK_EQ(changed, 0);       /* never this node */
    for (int i = 0; i < 20; i++) { /* the table grows past its first allocation */
        char node[16];
        snprintf(node, sizeof(node), "n%02d", i);
        GM_CHECK(gm_members_upsert(&a, node, "[::1]:7100", &changed) != NULL);
    }
    GM_CHECK_EQ(a.npeers, 21);
    GM_CHECK_STREQ(gm_agent_peer_find(&a, "alpha")->address, "127.0.0.1:7011");
    GM_CHECK_OK(gm_members_save(&a));

    snprintf(path, sizeof(path), "%s/members", a.cfg.state_dir);
    text = read_text(path);
    GM_CHECK(text != NULL);
    if (text != NULL) {
        GM_CHECK(strncmp(text, "alpha 127.0.0.1:7011\nn00 [::1]:7100\nn01 [::1]:7100\n", 51) == 0);
        GM_CHECK(strstr(text, "bravo") == NULL); /* not its own entry */
        GM_CHECK_EQ(strlen(text),
                    strlen("alpha 127.0.0.1:7011\n") + 20 * strlen("n00 [::1]:7100\n"));
    }
    free(text);

    /* another agent of the same state directory reads the same table back */
    agent_make(&b, "bravo");
    GM_CHECK_OK(gm_members_load(&b));
    GM_CHECK_EQ(b.npeers, 21);
    GM_CHECK(gm_agent_peer_find(&b, "alpha") != NULL &&
             strcmp(gm_agent_peer_find(&b, "alpha")->address, "127.0.0.1:7011") == 0);
    GM_CHECK(gm_agent_peer_find(&b, "n19") != NULL);
    gm_members_free(&b);

    /* a line that is not "node address": refused, as a configuration error */
    write_text(path, "alpha 127.0.0.1:7011\nbeta nowhere\n");
    GM_CHECK_ERR(gm_members_load(&b), GM_ERR_CONFIG);
    gm_members_free(&b);
    /* no file: an empty table */
    GM_CHECK_EQ(unlink(path), 0);
    GM_CHECK_OK(gm_members_load(&b));
    GM_CHECK_EQ(b.npeers, 0);
    agent_free(&b);
    agent_free(&a);
}

static void test_who_dials(void)
{
    struct gm_agent a;
    int changed;

    agent_make(&a, "bravo");
    GM_CHECK(gm_members_upsert(&a, "alpha", "127.0.0.1:7001", &changed) != NULL);
    GM_CHECK(gm_members_upsert(&a, "charlie", "127.0.0.1:7003", &changed) != NULL);
    GM_CHECK_EQ(gm_members_should_dial(&a, gm_agent_peer_find(&a, "alpha")), 0);
    GM_CHECK_EQ(gm_members_should_dial(&a, gm_agent_peer_find(&a, "charlie")), 1);

    /* the tick asks to dial charlie only (alpha dials bravo); a veto keeps it a question */
    seen_c.veto = "*";
    gm_members_tick(&a, UINT64_MAX);
    GM_CHECK_EQ(seen_c.may_link, 1);
    GM_CHECK_STREQ(seen_c.asked[0], "charlie");
    GM_CHECK(a.links == NULL);
    agent_free(&a);
}

static void test_may_link_veto(void)
{
    struct gm_agent a;
    struct gm_peer *p;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t slen = sizeof(sin);
    char addr[GM_ADDR_MAX];
    int fd, changed;

    /* a loopback port where nothing listens: bound, then closed */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    GM_CHECK(fd >= 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    GM_CHECK_EQ(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    GM_CHECK_EQ(getsockname(fd, (struct sockaddr *)&sin, &slen), 0);
    close(fd);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));

    agent_make(&a, "bravo");
    p = gm_members_upsert(&a, "charlie", addr, &changed);
    GM_CHECK(p != NULL);
    if (p == NULL)
        return;

    seen_c.veto = "charlie"; /* one room refuses: no dial */
    gm_members_dial(&a, p);
    GM_CHECK_EQ(seen_c.may_link, 1);
    GM_CHECK(a.links == NULL);
    GM_CHECK_EQ(p->dialing, 0);

    seen_c.veto = NULL; /* nobody refuses: the dial goes out */
    gm_members_dial(&a, p);
    GM_CHECK_EQ(seen_a.may_link, 2);
    GM_CHECK_EQ(seen_c.may_link, 2);
    GM_CHECK_EQ(p->dialing, 1);
    GM_CHECK(a.links != NULL && a.links->dialed && strcmp(a.links->node, "charlie") == 0);
    GM_CHECK_EQ(gm_members_dialing_to(&a, "charlie"), 1);
    gm_members_dial(&a, p); /* under way: not twice */
    GM_CHECK(a.links != NULL && a.links->next == NULL);

    /* refused by the closed port: the link closes, the dial ends with a backoff */
    for (int i = 0; i < 1000 && closed == 0; i++)
        uv_run(&a.loop, UV_RUN_ONCE);
    GM_CHECK_EQ(closed, 1);
    GM_CHECK(close_err < 0);
    GM_CHECK(a.links == NULL);
    GM_CHECK_EQ(p->dialing, 0);
    GM_CHECK(p->backoff_ms > 0);
    closed = 0;
    agent_free(&a);
}

/* A link that never connects, whose context names node (as agent.c's on_up sets it from
 * the certificate), in the HELLO state. */
static struct gm_lctx *hello_link(struct gm_agent *a, const char *node)
{
    struct gm_link_opts o = gm_agent_link_opts(a, GM_TLS_ROLE_SERVER);
    struct gm_lctx *c = gm_agent_lctx_new(a);

    GM_CHECK(c != NULL);
    if (c == NULL)
        return NULL;
    snprintf(c->node, sizeof(c->node), "%s", node);
    c->cls = GM_CLASS_LAN;
    c->mtu = 1500;
    GM_CHECK_OK(gm_link_new(&a->loop, a->tls, &o, a->link_ops, c, &c->link));
    if (c->link != NULL)
        gm_link_set_state(c->link, GM_LSTATE_HELLO);
    return c;
}

/* node's HELLO through the members room's frame table. */
static int hello(struct gm_agent *a, struct gm_lctx *c, const char *node, const char *listen)
{
    struct gm_msg_hello m = {.mtu = 1500};
    struct gm_frame_hdr h = {.type = GM_MSG_HELLO};
    const struct gm_room_frame *f = NULL;
    char *json = NULL;
    size_t len = 0;
    int err;

    for (size_t i = 0; i < gm_members_room.nframes; i++)
        if (gm_members_room.frames[i].type == GM_MSG_HELLO)
            f = &gm_members_room.frames[i];
    GM_CHECK(f != NULL && (f->states & GM_LSTATE_HELLO) != 0);
    if (f == NULL)
        return -ENOENT;
    snprintf(m.node, sizeof(m.node), "%s", node);
    snprintf(m.listen, sizeof(m.listen), "%s", listen);
    snprintf(m.link_class, sizeof(m.link_class), "lan");
    snprintf(m.version, sizeof(m.version), "9.8.7-%s", node);
    GM_CHECK_OK(gm_proto_hello_encode(&m, &json, &len));
    h.len = (uint32_t)len;
    err = f->fn(a, c->link, &h, (const uint8_t *)json);
    free(json);
    return err;
}

static void test_hello_announces_link_up(void)
{
    struct gm_agent a;
    struct gm_lctx *c1, *c2;
    struct gm_peer *p;
    char path[GM_PATH_MAX + 16], *text;

    agent_make(&a, "bravo");
    c1 = hello_link(&a, "charlie");
    c2 = hello_link(&a, "delta");
    if (c1 == NULL || c2 == NULL || c1->link == NULL || c2->link == NULL)
        return;

    GM_CHECK_OK(hello(&a, c1, "charlie", "127.0.0.1:7003"));
    p = gm_agent_peer_find(&a, "charlie");
    GM_CHECK(p != NULL && p->link == c1->link && strcmp(p->address, "127.0.0.1:7003") == 0);
    /* the build it runs, from its hello (status shows it) */
    GM_CHECK(p != NULL && strcmp(p->version, "9.8.7-charlie") == 0 && p->proto == GM_PROTO_VERSION);
    GM_CHECK_EQ(gm_link_state(c1->link), GM_LSTATE_UP);
    GM_CHECK_EQ(a.stats.links_up, 1);
    /* every room with the hook, once, with this member and this link, after it is up */
    GM_CHECK_EQ(seen_a.link_up, 1);
    GM_CHECK_EQ(seen_c.link_up, 1);
    GM_CHECK_STREQ(seen_a.up_node, "charlie");
    GM_CHECK_STREQ(seen_c.up_node, "charlie");
    GM_CHECK(seen_a.up_ctx == c1 && seen_c.up_ctx == c1);
    GM_CHECK_EQ(seen_a.up_linked, 1);
    GM_CHECK_EQ(seen_a.up_pointer_ok, 1);
    GM_CHECK_EQ(seen_c.link_down, 0);
    /* the new member is in the file */
    snprintf(path, sizeof(path), "%s/members", a.cfg.state_dir);
    text = read_text(path);
    GM_CHECK(text != NULL && strcmp(text, "charlie 127.0.0.1:7003\n") == 0);
    free(text);

    /* a second member: one more call each, with that member */
    GM_CHECK_OK(hello(&a, c2, "delta", "127.0.0.1:7004"));
    GM_CHECK_EQ(seen_a.link_up, 2);
    GM_CHECK_EQ(seen_c.link_up, 2);
    GM_CHECK_STREQ(seen_a.up_node, "delta");
    GM_CHECK(seen_c.up_ctx == c2);
    GM_CHECK_EQ(seen_c.up_linked, 1);
    GM_CHECK(gm_agent_peer_find(&a, "delta") != NULL &&
             gm_agent_peer_find(&a, "delta")->link == c2->link);
    GM_CHECK_EQ(gm_agent_members_up(&a), 2);

    gm_link_free_unstarted(c1->link); /* with the frames h_hello queued (PING, MEMBERS) */
    gm_link_free_unstarted(c2->link);
    gm_agent_lctx_free(c1);
    gm_agent_lctx_free(c2);
    agent_free(&a);
}

int main(void)
{
    struct gm_tls_config tc = {.cluster = "lab"};
    char cmd[300];

    if (sodium_init() < 0)
        return 1;
    gm_log_set_level(GM_LOG_WARN);
    snprintf(dir, sizeof(dir), "/tmp/gm-test-members-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    world_make(&W, "lab", "bravo");
    tc.ca = W.ca;
    tc.cert = W.cert;
    tc.key = W.key;
    GM_CHECK_OK(gm_tls_ctx_new(&tc, &tls));
    if (tls == NULL)
        return gm_test_finish("test_members");

    GM_TEST_RUN(test_table_and_file);
    GM_TEST_RUN(test_who_dials);
    GM_TEST_RUN(test_may_link_veto);
    GM_TEST_RUN(test_hello_announces_link_up);

    gm_tls_ctx_free(tls);
    world_free(&W);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return gm_test_finish("test_members");
}
