/*
 * tests/fuzz/fuzz_xport.c - the training channel's reassembly
 * (gm_xport_on_frame, agent/jobs/xport.h) against a reference model.
 *
 * An xport of world 3 (this is rank 0, generation GEN) on a libuv loop, with
 * no real link.  The input is a list of records, each one op byte and its
 * arguments:
 *   op % 5 == 0  a TRAIN frame: [flags][seq delta][gen delta][len lo][len hi]
 *                then len payload bytes (fewer if the input ends).  flags bit 0:
 *                GM_FRAME_F_MORE; bits 1-2: from peer 1, 2, 0 (this rank) or 3
 *                (no rank); seq = the peer's next sequence number + (int8)delta,
 *                gen = GEN + (int8)delta
 *   op % 5 == 1  arm a recv from peer 1 + (op >> 7)
 *   op % 5 == 2  run the loop once (queued messages reach armed recvs)
 *   op % 5 == 3  stop the recv of peer 1 + (op >> 7)
 *   op % 5 == 4  post() a callback
 * The model reassembles the same frames: a frame is valid exactly when it
 * comes from peer 1 or 2, in this generation, with that peer's next sequence
 * number, at least one byte, and the message stays <= GM_XPORT_MSG_MAX.  The
 * xport must refuse (GM_ERR_PROTO) exactly the invalid ones; after a refusal
 * the harness stops feeding, as the agent closes that link.  Every recv
 * callback must bring the peer's next complete message, byte for byte, never
 * from inside gm_transport_recv; a second armed recv is -EBUSY.  At the end
 * both peers go down (gm_xport_link_down / fail_all): recvs still get the
 * messages queued before, a recv armed at that moment gets one error without
 * a buffer, and from then on recv fails at once; every post() ran once; close frees everything
 * (LSan).
 *
 * No link: the xport touches a peer's link only to send (never here), and to
 * pause it when more than GM_XPORT_QUEUE_MAX bytes wait (never here: the
 * input is capped at 1 MiB).  It still needs a link attached to arm a recv,
 * so each peer gets the address of a byte of the harness state as its "link";
 * ASan reports it should the xport ever read one.
 *
 * The state made once (the loop) is the harness's only file-scope variable:
 * libFuzzer offers no other place to keep it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "agent/net/link.h"
#include "agent/net/proto.h"
#include "agent/jobs/xport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define GEN 0x1234u
#define WORLD 3
#define INPUT_MAX (1u << 20)
#define QMAX 64 /* messages the model keeps per peer */

static struct {
    uv_loop_t loop;
    char no_link[WORLD]; /* stand-ins for links; never read */
} st;

struct msg {
    uint8_t *data;
    size_t len;
};

/* The model of one peer, and what the harness expects of its recv. */
struct mpeer {
    uint32_t seq;  /* next sequence number */
    uint8_t *part; /* the message being reassembled */
    size_t part_len;
    struct msg q[QMAX]; /* complete messages not yet received, FIFO */
    size_t qh, qn;
    bool armed;
    int errors; /* failed recv callbacks */
};

struct h {
    struct gm_xport *x;
    struct gm_transport *t;
    struct mpeer p[WORLD];
    bool in_recv; /* inside gm_transport_recv */
    int posts, posts_ran;
};

static void need(bool ok)
{
    if (!ok)
        abort();
}

static void recv_cb(struct gm_transport *t, int peer, int status, const void *buf, size_t len,
                    void *arg)
{
    struct h *h = arg;
    struct mpeer *p;

    need(!h->in_recv && t == h->t && (peer == 1 || peer == 2));
    p = &h->p[peer];
    need(p->armed);
    p->armed = false;
    if (status != 0) {
        need(status < 0 && buf == NULL && len == 0 && p->qn == 0);
        p->errors++;
        return;
    }
    need(p->qn > 0 && buf != NULL);
    need(len == p->q[p->qh].len && memcmp(buf, p->q[p->qh].data, len) == 0);
    free(p->q[p->qh].data);
    p->qh = (p->qh + 1) % QMAX;
    p->qn--;
}

static void post_cb(struct gm_transport *t, void *arg)
{
    struct h *h = arg;

    need(t == h->t);
    h->posts_ran++;
}

static int arm(struct h *h, int peer)
{
    int err;

    h->in_recv = true;
    err = gm_transport_recv(h->t, peer, recv_cb, h);
    h->in_recv = false;
    if (err == 0) {
        need(!h->p[peer].armed);
        h->p[peer].armed = true;
    }
    return err;
}

/* One frame through the xport and the model; false once it was refused. */
static bool frame(struct h *h, const uint8_t *rec, const uint8_t *payload, size_t len)
{
    static const int peers[4] = {1, 2, 0, 3};
    int peer = peers[(rec[0] >> 1) & 3];
    bool more = rec[0] & 1;
    struct mpeer *p = peer == 1 || peer == 2 ? &h->p[peer] : NULL;
    uint32_t seq = (p != NULL ? p->seq : 0) + (uint32_t)(int32_t)(int8_t)rec[1];
    uint32_t gen = GEN + (uint32_t)(int32_t)(int8_t)rec[2];
    struct gm_frame_hdr fh = {.type = GM_MSG_TRAIN,
                              .flags = more ? GM_FRAME_F_MORE : 0,
                              .len = (uint32_t)len,
                              .req = gm_xport_req(gen, seq)};
    bool valid = p != NULL && gen == GEN && seq == p->seq && len > 0 &&
                 p->part_len + len <= GM_XPORT_MSG_MAX;
    int err;

    if (valid) { /* the model first: a direct delivery checks against it */
        uint8_t *nb = realloc(p->part, p->part_len + len);
        need(nb != NULL);
        p->part = nb;
        memcpy(p->part + p->part_len, payload, len);
        p->part_len += len;
        if (!more) {
            need(p->qn < QMAX);
            p->q[(p->qh + p->qn) % QMAX] = (struct msg){.data = p->part, .len = p->part_len};
            p->qn++;
            p->part = NULL;
            p->part_len = 0;
            p->seq++;
        }
    }
    err = gm_xport_on_frame(h->x, peer, &fh, payload);
    need(valid ? err == 0 : err == GM_ERR_PROTO);
    return valid;
}

static void drain_loop(void)
{
    while (uv_run(&st.loop, UV_RUN_NOWAIT) != 0)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct h h;
    size_t off = 0;
    int err;

    if (size > INPUT_MAX)
        return 0;
    memset(&h, 0, sizeof(h));
    need(gm_xport_new(&st.loop, GEN, 0, WORLD, &h.x) == 0);
    h.t = gm_xport_transport(h.x);
    need(arm(&h, 1) == -ENOTCONN); /* no link yet */
    gm_xport_set_link(h.x, 1, (struct gm_link *)&st.no_link[1]);
    gm_xport_set_link(h.x, 2, (struct gm_link *)&st.no_link[2]);
    need(arm(&h, 0) == -EINVAL && arm(&h, 3) == -EINVAL);

    while (off < size) {
        uint8_t op = data[off++];
        int peer = 1 + (op >> 7);
        if (op % 5 == 0) {
            size_t len;
            if (size - off < 5)
                break;
            len = (size_t)data[off + 3] | (size_t)data[off + 4] << 8;
            if (len > size - off - 5)
                len = size - off - 5;
            if (h.p[1].qn >= QMAX - 1 || h.p[2].qn >= QMAX - 1)
                break; /* the model's queue is full: enough */
            if (!frame(&h, data + off, data + off + 5, len))
                break; /* refused: the owner closes that link */
            off += 5 + len;
        } else if (op % 5 == 1) {
            bool was = h.p[peer].armed;
            err = arm(&h, peer);
            need(was ? err == -EBUSY : err == 0);
        } else if (op % 5 == 2) {
            (void)uv_run(&st.loop, UV_RUN_NOWAIT);
        } else if (op % 5 == 3) {
            gm_transport_recv_stop(h.t, peer);
            h.p[peer].armed = false;
        } else {
            need(gm_transport_post(h.t, post_cb, &h) == 0);
            h.posts++;
        }
    }
    drain_loop();
    for (int i = 1; i <= 2; i++) /* everything complete and armed-for has arrived */
        need(!h.p[i].armed || h.p[i].qn == 0);

    /* the peers go down: queued messages still reach recvs, then one error each */
    if (size % 2)
        gm_xport_link_down(h.x, 1, -ECONNRESET);
    gm_xport_fail_all(h.x, GM_ERR_ABORTED);
    for (int i = 1; i <= 2; i++) {
        struct mpeer *p = &h.p[i];
        for (;;) {
            size_t qn = p->qn;
            int errors = p->errors;
            if (!p->armed && arm(&h, i) != 0) {
                need(qn == 0 && p->errors <= 1); /* one error if a recv was armed */
                break;
            }
            drain_loop();
            need(!p->armed && (p->qn == qn - 1 || (qn == 0 && p->errors == errors + 1)));
        }
    }
    need(h.posts_ran == h.posts);
    gm_xport_close(h.x);
    drain_loop();
    for (int i = 1; i <= 2; i++)
        free(h.p[i].part);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    need(uv_loop_init(&st.loop) == 0);
    return 0;
}
