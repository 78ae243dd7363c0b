/*
 * tests/fuzz/fuzz_coll_msg.c - peer bytes into a running collective.
 *
 * Ranks 0 and 1 run a real ring all-reduce over the in-memory transport;
 * rank 2 is the attacker: the input is a list of messages [dst: u8][len:
 * u16 le][bytes] it sends to rank 0 or 1.  Then rank 2's links break.  Every
 * honest rank must complete exactly once (no crash, no hang, no leak), with
 * either an error or a finite result.  Each input runs twice: the fp32 ring, then a
 * DIRECT all-reduce of q8 (int8 blocks with an fp32 scale: DiLoCo's 8-bit deltas), whose
 * payloads are decoded from whatever bytes arrive.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "train/comm/collective.h"
#include "train/comm/transport_mem.h"

static int calls[2];

static void done_cb(struct gm_coll *c, int status, void *arg)
{
    (void)status;
    (void)arg;
    calls[gm_coll_rank(c)]++;
}

static void sent_cb(struct gm_transport *t, int peer, int status, void *arg)
{
    (void)t;
    (void)peer;
    (void)status;
    (void)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *data, size_t size, const struct gm_coll_opts *op)
{
    struct gm_memnet *net = gm_memnet_new(3);
    struct gm_coll *c[2];
    struct gm_coll_config cfg = {.chunk_bytes = 32};
    struct gm_coll_opts o = *op;
    float buf[2][37];
    size_t at = 0;

    GM_ASSERT(net != NULL);
    calls[0] = calls[1] = 0;
    for (int r = 0; r < 2; r++) {
        c[r] = gm_coll_new(gm_memnet_transport(net, r), &cfg);
        GM_ASSERT(c[r] != NULL);
        for (int i = 0; i < 37; i++)
            buf[r][i] = (float)i;
        GM_ASSERT(gm_coll_allreduce_start(c[r], buf[r], 37, &o, done_cb, NULL) == 0);
    }
    while (at + 3 <= size) {
        int dst = data[at] & 1;
        size_t len = (size_t)data[at + 1] | ((size_t)data[at + 2] << 8);
        at += 3;
        if (len > size - at)
            len = size - at;
        (void)gm_transport_send(gm_memnet_transport(net, 2), dst, data + at, len, sent_cb, NULL);
        at += len;
        gm_memnet_run(net);
    }
    gm_memnet_run(net);
    gm_memnet_fail_link(net, 2, 0);
    gm_memnet_fail_link(net, 2, 1);
    gm_memnet_run(net);
    GM_ASSERT(calls[0] == 1 && calls[1] == 1);
    for (int r = 0; r < 2; r++)
        gm_coll_free(c[r]);
    gm_memnet_free(net);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct gm_coll_opts ring = {.algo = GM_COLL_RING, .codec = GM_CODEC_FP32};
    const struct gm_coll_opts q8 = {
        .algo = GM_COLL_DIRECT, .codec = GM_CODEC_Q8, .reduce = GM_COLL_MEAN};

    one(data, size, &ring);
    one(data, size, &q8);
    return 0;
}
