/*
 * tests/unit/test_collective.c - collectives over the in-memory transport
 * against a naive serial sum: N in {1,2,3,4,7}, sizes {0, 1, primes,
 * non-multiples of N, 64 MB}, every algorithm and codec; bitwise identity
 * across ranks; exact ring byte counts; bad input and link failure; the cost
 * model and bucketing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/test.h"
#include "train/comm/collective.h"
#include "train/comm/transport_mem.h"

GM_TEST_DEFINE_STATE;

#define MAXW 8

struct slot {
    int status;
    int calls;
};

struct world {
    int n;
    struct gm_memnet *net;
    struct gm_coll *c[MAXW];
    struct slot s[MAXW];
};

static void done_cb(struct gm_coll *c, int status, void *arg)
{
    struct slot *s = arg;

    (void)c;
    s->status = status;
    s->calls++;
}

static int world_init(struct world *w, int n, const struct gm_coll_config *cfg_in)
{
    struct gm_coll_config cfg = {0};

    memset(w, 0, sizeof(*w));
    if (cfg_in != NULL)
        cfg = *cfg_in;
    w->n = n;
    w->net = gm_memnet_new(n);
    if (w->net == NULL)
        return -ENOMEM;
    for (int r = 0; r < n; r++) {
        w->c[r] = gm_coll_new(gm_memnet_transport(w->net, r), &cfg);
        if (w->c[r] == NULL)
            return -ENOMEM;
    }
    return 0;
}

static void world_reset_slots(struct world *w)
{
    memset(w->s, 0, sizeof(w->s));
}

static void world_free(struct world *w)
{
    gm_memnet_run(w->net); /* drain anything left (kicks, ABORTs) */
    for (int r = 0; r < w->n; r++)
        gm_coll_free(w->c[r]);
    gm_memnet_free(w->net);
}

static float small_int(int r, size_t i)
{
    return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8);
}

static uint64_t rng_state = 0x1234567;
static float urand(void) /* uniform [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Runs one all-reduce on every rank; bufs[r] in place.  Returns 0 if all ok. */
static void run_allreduce(struct world *w, float **bufs, size_t n, const struct gm_coll_opts *o)
{
    world_reset_slots(w);
    for (int r = 0; r < w->n; r++)
        GM_CHECK_OK(gm_coll_allreduce_start(w->c[r], bufs[r], n, o, done_cb, &w->s[r]));
    gm_memnet_run(w->net);
    for (int r = 0; r < w->n; r++) {
        GM_CHECK_EQ(w->s[r].calls, 1);
        GM_CHECK(!gm_coll_busy(w->c[r]));
    }
}

static void check_identical(struct world *w, float **bufs, size_t n)
{
    for (int r = 1; r < w->n; r++)
        GM_CHECK(n == 0 || memcmp(bufs[0], bufs[r], n * sizeof(float)) == 0);
}

static const int worlds[] = {1, 2, 3, 4, 7};
static const size_t sizes[] = {0, 1, 2, 13, 1009, 4099, 65537};
static const enum gm_coll_algo algos[] = {GM_COLL_RING, GM_COLL_DIRECT, GM_COLL_HIER, GM_COLL_AUTO};

/* fp32 SUM of small integers: exact, whatever the algorithm and chunking. */
static void test_sum_exact(void)
{
    for (size_t wi = 0; wi < GM_ARRAY_SIZE(worlds); wi++) {
        int n = worlds[wi];
        int groups[MAXW];
        for (int r = 0; r < n; r++)
            groups[r] = r / 2; /* islands of two */
        for (int chunked = 0; chunked < 2; chunked++) {
            struct gm_coll_config cfg = {
                .generation = 7, .chunk_bytes = chunked ? 64 : 0, .groups = groups};
            struct world w;
            GM_CHECK_OK(world_init(&w, n, &cfg));
            for (size_t si = 0; si < GM_ARRAY_SIZE(sizes); si++) {
                size_t sz = sizes[si];
                float *bufs[MAXW], *ref = calloc(sz + 1, sizeof(float));
                for (int r = 0; r < n; r++) {
                    bufs[r] = malloc((sz + 1) * sizeof(float));
                    for (size_t i = 0; i < sz; i++) {
                        bufs[r][i] = small_int(r, i);
                        ref[i] += small_int(r, i);
                    }
                }
                for (size_t ai = 0; ai < GM_ARRAY_SIZE(algos); ai++) {
                    struct gm_coll_opts o = {.algo = algos[ai],
                                             .codec = GM_CODEC_FP32,
                                             .reduce = GM_COLL_SUM,
                                             .step = si};
                    for (int r = 0; r < n; r++)
                        for (size_t i = 0; i < sz; i++)
                            bufs[r][i] = small_int(r, i);
                    run_allreduce(&w, bufs, sz, &o);
                    for (int r = 0; r < n; r++) {
                        GM_CHECK_OK(w.s[r].status);
                        GM_CHECK(sz == 0 || memcmp(bufs[r], ref, sz * sizeof(float)) == 0);
                    }
                    check_identical(&w, bufs, sz);
                }
                for (int r = 0; r < n; r++)
                    free(bufs[r]);
                free(ref);
            }
            world_free(&w);
        }
    }
}

/* MEAN with fp32/fp16/bf16 on the wire against a double-precision mean.
 * Bound: each wire rounding costs at most 2^-p relative (p = 11 fp16, 8 bf16)
 * of a partial sum whose magnitude is <= max|x| (inputs pre-scaled by 1/N);
 * a value passes through at most N+1 roundings, so |err| <= (N+1) 2^-p max|x|.
 * fp32: sum then one division, |err| <= N * 2^-23 * max|x|. */
static void test_mean_codecs(void)
{
    const enum gm_codec codecs[] = {GM_CODEC_FP32, GM_CODEC_FP16, GM_CODEC_BF16};
    const double unit[] = {0x1p-23, 0x1p-11, 0x1p-8};

    for (size_t wi = 0; wi < GM_ARRAY_SIZE(worlds); wi++) {
        int n = worlds[wi];
        int groups[MAXW];
        for (int r = 0; r < n; r++)
            groups[r] = r % 2;
        struct gm_coll_config cfg = {.chunk_bytes = 256, .groups = groups};
        struct world w;
        size_t sz = 1031;
        double *ref = calloc(sz, sizeof(double));
        float *in[MAXW], *bufs[MAXW];
        GM_CHECK_OK(world_init(&w, n, &cfg));
        for (int r = 0; r < n; r++) {
            in[r] = malloc(sz * sizeof(float));
            bufs[r] = malloc(sz * sizeof(float));
            for (size_t i = 0; i < sz; i++) {
                in[r][i] = urand();
                ref[i] += in[r][i] / n;
            }
        }
        for (size_t ci = 0; ci < GM_ARRAY_SIZE(codecs); ci++) {
            for (size_t ai = 0; ai < 3; ai++) {
                struct gm_coll_opts o = {
                    .algo = algos[ai], .codec = codecs[ci], .reduce = GM_COLL_MEAN};
                double bound = (n + 1) * unit[ci] * 1.0;
                double worst = 0;
                for (int r = 0; r < n; r++)
                    memcpy(bufs[r], in[r], sz * sizeof(float));
                run_allreduce(&w, bufs, sz, &o);
                for (int r = 0; r < n; r++)
                    GM_CHECK_OK(w.s[r].status);
                for (size_t i = 0; i < sz; i++) {
                    double e = bufs[0][i] - ref[i];
                    if (e < 0)
                        e = -e;
                    if (e > worst)
                        worst = e;
                }
                GM_CHECK(worst <= bound);
                check_identical(&w, bufs, sz);
            }
        }
        for (int r = 0; r < n; r++) {
            free(in[r]);
            free(bufs[r]);
        }
        free(ref);
        world_free(&w);
    }
}

/* q8 MEAN: DIRECT gives, on every rank, exactly the reference (each rank's buffer encoded
 * once from element 0, the decoded contributions summed in rank order in fp32, then x 1/N),
 * whole blocks per chunk (chunks of 256 bytes hold one), and (N-1) encodings' bytes a rank;
 * the ring and HIER re-encode partial sums: identical bits everywhere, within a looser bound. */
static void test_q8(void)
{
    const size_t szs[] = {1, 255, 1031, 70000};

    for (size_t wi = 0; wi < GM_ARRAY_SIZE(worlds); wi++) {
        int n = worlds[wi];
        int groups[MAXW];
        for (int r = 0; r < n; r++)
            groups[r] = r % 2;
        for (size_t si = 0; si < GM_ARRAY_SIZE(szs); si++) {
            size_t sz = szs[si];
            struct gm_coll_config cfg = {.chunk_bytes = si % 2 ? 256 : 0, .groups = groups};
            struct world w;
            float *in[MAXW], *bufs[MAXW], *ref = malloc(sz * sizeof(float)),
                                          *dec = malloc(sz * sizeof(float));
            double *exact = calloc(sz, sizeof(double));
            unsigned char *wire = malloc(gm_codec_bytes(GM_CODEC_Q8, sz));
            GM_CHECK_OK(world_init(&w, n, &cfg));
            for (int r = 0; r < n; r++) {
                in[r] = malloc(sz * sizeof(float));
                bufs[r] = malloc(sz * sizeof(float));
                for (size_t i = 0; i < sz; i++) {
                    in[r][i] = urand() * (i % 512 < 256 ? 1.0f : 1e-3f);
                    exact[i] += in[r][i] / n;
                }
                gm_codec_encode(GM_CODEC_Q8, in[r], sz, wire);
                gm_codec_decode(GM_CODEC_Q8, wire, sz, dec);
                for (size_t i = 0; i < sz; i++)
                    ref[i] = n == 1 ? in[r][i] : r == 0 ? dec[i] : dec[i] + ref[i];
            }
            for (size_t i = 0; i < sz; i++)
                ref[i] *= 1.0f / (float)n;
            for (size_t ai = 0; ai < 3; ai++) {
                struct gm_coll_opts o = {
                    .algo = algos[ai], .codec = GM_CODEC_Q8, .reduce = GM_COLL_MEAN};
                double worst = 0;
                gm_coll_traffic_reset(w.c[0]);
                for (int r = 0; r < n; r++)
                    memcpy(bufs[r], in[r], sz * sizeof(float));
                run_allreduce(&w, bufs, sz, &o);
                for (int r = 0; r < n; r++)
                    GM_CHECK_OK(w.s[r].status);
                check_identical(&w, bufs, sz);
                for (size_t i = 0; i < sz; i++)
                    worst = fmax(worst, fabs(bufs[0][i] - exact[i]));
                if (algos[ai] == GM_COLL_DIRECT) {
                    struct gm_coll_traffic t;
                    GM_CHECK_EQ(memcmp(bufs[0], ref, sz * sizeof(float)), 0);
                    gm_coll_traffic_codec(w.c[0], GM_CODEC_Q8, &t, NULL);
                    GM_CHECK_EQ(t.payload_bytes,
                                (uint64_t)(n - 1) * gm_codec_bytes(GM_CODEC_Q8, sz));
                    GM_CHECK(worst <= 0.5 / 127 * 1.0001); /* each a half step of <= 1/127 */
                } else {
                    GM_CHECK(worst <= n * 1.0 / 127);
                }
            }
            for (int r = 0; r < n; r++) {
                free(in[r]);
                free(bufs[r]);
            }
            free(ref), free(dec), free(exact), free(wire);
            world_free(&w);
        }
    }
}

/* q8 with opts.loss: DIRECT writes each rank's buffer minus the decoding of its encoding;
 * HIER (islands r % 2) runs DIRECT between the leaders, each sending its encoding of its
 * island's fp32 sum (members added in rank order), writes that sum's loss on the leader and
 * zeros on the others; every rank ends with the same bits, the leaders' decoded encodings
 * summed in leader order, x 1/N.  So the losses add up to what the wire dropped.  A loss with
 * the ring or another codec is refused. */
static void test_q8_loss(void)
{
    const size_t sz = 1031;

    for (size_t wi = 0; wi < GM_ARRAY_SIZE(worlds); wi++) {
        int n = worlds[wi];
        int groups[MAXW];
        for (int r = 0; r < n; r++)
            groups[r] = r % 2;
        for (int hier = 0; hier < 2; hier++) {
            struct gm_coll_config cfg = {.chunk_bytes = 256, .groups = groups};
            struct gm_coll_opts o = {.algo = hier ? GM_COLL_HIER : GM_COLL_DIRECT,
                                     .codec = GM_CODEC_Q8,
                                     .reduce = GM_COLL_MEAN};
            struct world w;
            float *in[MAXW], *bufs[MAXW], *loss[MAXW], *want_loss[MAXW];
            float *ref = calloc(sz, sizeof(float)), *dec = malloc(sz * sizeof(float));
            float *sum = malloc(sz * sizeof(float));
            unsigned char *wire = malloc(gm_codec_bytes(GM_CODEC_Q8, sz));
            int first = 1;
            GM_CHECK_OK(world_init(&w, n, &cfg));
            for (int r = 0; r < n; r++) {
                in[r] = malloc(sz * sizeof(float));
                bufs[r] = malloc(sz * sizeof(float));
                loss[r] = malloc(sz * sizeof(float));
                want_loss[r] = calloc(sz, sizeof(float));
                for (size_t i = 0; i < sz; i++) {
                    in[r][i] = urand() * (i % 512 < 256 ? 1.0f : 1e-3f);
                    loss[r][i] = 99.0f; /* overwritten: zeros where nothing was encoded */
                }
                memcpy(bufs[r], in[r], sz * sizeof(float));
            }
            /* what each sender encodes: its buffer (DIRECT), its island's sum (HIER leaders) */
            for (int r = 0; r < n && n > 1; r++) {
                if (hier && r >= 2)
                    break; /* leaders: ranks 0 and 1 */
                memcpy(sum, in[r], sz * sizeof(float));
                for (int q = r + 2; hier && q < n; q += 2)
                    for (size_t i = 0; i < sz; i++)
                        sum[i] += in[q][i];
                gm_codec_encode(GM_CODEC_Q8, sum, sz, wire);
                gm_codec_decode(GM_CODEC_Q8, wire, sz, dec);
                for (size_t i = 0; i < sz; i++) {
                    want_loss[r][i] = sum[i] - dec[i];
                    ref[i] = first ? dec[i] : ref[i] + dec[i];
                }
                first = 0;
            }
            if (n == 1)
                memcpy(ref, in[0], sz * sizeof(float));
            for (size_t i = 0; i < sz; i++)
                ref[i] *= 1.0f / (float)n;
            world_reset_slots(&w);
            for (int r = 0; r < n; r++) {
                struct gm_coll_opts mine = o;
                mine.loss = loss[r];
                GM_CHECK_OK(gm_coll_allreduce_start(w.c[r], bufs[r], sz, &mine, done_cb, &w.s[r]));
            }
            gm_memnet_run(w.net);
            for (int r = 0; r < n; r++) {
                GM_CHECK_EQ(w.s[r].calls, 1);
                GM_CHECK_OK(w.s[r].status);
                GM_CHECK_EQ(memcmp(bufs[r], ref, sz * sizeof(float)), 0);
                GM_CHECK_EQ(memcmp(loss[r], want_loss[r], sz * sizeof(float)), 0);
            }
            if (n > 1) { /* refused: the ring, and a loss of fp16 */
                o.loss = loss[0];
                o.algo = GM_COLL_RING;
                GM_CHECK_EQ(gm_coll_allreduce_start(w.c[0], bufs[0], sz, &o, done_cb, &w.s[0]),
                            -EINVAL);
                o.algo = GM_COLL_DIRECT;
                o.codec = GM_CODEC_FP16;
                GM_CHECK_EQ(gm_coll_allreduce_start(w.c[0], bufs[0], sz, &o, done_cb, &w.s[0]),
                            -EINVAL);
            }
            for (int r = 0; r < n; r++) {
                free(in[r]);
                free(bufs[r]);
                free(loss[r]);
                free(want_loss[r]);
            }
            free(ref), free(dec), free(sum), free(wire);
            world_free(&w);
        }
    }
}

/* Ring payload per rank: 2S - seg(r+1) - seg(r+2); = 2(N-1)/N S when N | n.
 * Framing counted apart: one 56-byte header per message. */
static void test_ring_bytes(void)
{
    for (size_t wi = 1; wi < GM_ARRAY_SIZE(worlds); wi++) {
        int n = worlds[wi];
        const size_t szs[] = {(size_t)n * 1000, (size_t)n * 1000 + 3, 5};
        for (size_t k = 0; k < GM_ARRAY_SIZE(szs); k++) {
            size_t sz = szs[k];
            struct gm_coll_config cfg = {.chunk_bytes = 1000};
            struct world w;
            float *bufs[MAXW];
            struct gm_coll_opts o = {
                .algo = GM_COLL_RING, .codec = GM_CODEC_FP16, .reduce = GM_COLL_MEAN};
            GM_CHECK_OK(world_init(&w, n, &cfg));
            for (int r = 0; r < n; r++) {
                bufs[r] = calloc(sz, sizeof(float));
            }
            run_allreduce(&w, bufs, sz, &o);
            for (int r = 0; r < n; r++) {
                struct gm_coll_traffic s, rv, sc;
                size_t seg1 = sz / (size_t)n + ((size_t)((r + 1) % n) < sz % (size_t)n);
                size_t seg2 = sz / (size_t)n + ((size_t)((r + 2) % n) < sz % (size_t)n);
                uint64_t want = (2 * sz - seg1 - (n > 1 ? seg2 : 0)) * 2; /* fp16: 2 bytes */
                gm_coll_traffic_total(w.c[r], &s, &rv);
                gm_coll_traffic_codec(w.c[r], GM_CODEC_FP16, &sc, NULL);
                GM_CHECK_OK(w.s[r].status);
                GM_CHECK_EQ(s.payload_bytes, want);
                if (sz % (size_t)n == 0)
                    GM_CHECK_EQ(s.payload_bytes * (uint64_t)n, 2 * (uint64_t)(n - 1) * sz * 2);
                GM_CHECK_EQ(s.frame_bytes, s.msgs * GM_COLL_HDR_BYTES);
                GM_CHECK_EQ(sc.payload_bytes, s.payload_bytes);
            }
            for (int r = 0; r < n; r++) { /* what r received is what its left neighbour sent */
                struct gm_coll_traffic s, rv;
                gm_coll_traffic_total(w.c[(r + n - 1) % n], &s, NULL);
                gm_coll_traffic_total(w.c[r], NULL, &rv);
                GM_CHECK_EQ(rv.payload_bytes, s.payload_bytes);
                GM_CHECK_EQ(rv.frame_bytes, s.frame_bytes);
                free(bufs[r]);
            }
            world_free(&w);
        }
    }
}

/* 64 MB (16 Mi floats) ring sum over 4 ranks, exact and identical. */
static void test_64mb(void)
{
    const int n = 4;
    const size_t sz = (size_t)16 * 1024 * 1024;
    struct world w;
    float *bufs[MAXW];
    struct gm_coll_config cfg = {.chunk_bytes = 1 << 20};
    struct gm_coll_opts o = {.algo = GM_COLL_RING, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM};
    long bad = 0;

    GM_CHECK_OK(world_init(&w, n, &cfg));
    for (int r = 0; r < n; r++) {
        bufs[r] = malloc(sz * sizeof(float));
        for (size_t i = 0; i < sz; i++)
            bufs[r][i] = small_int(r, i);
    }
    run_allreduce(&w, bufs, sz, &o);
    for (size_t i = 0; i < sz; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
            want += small_int(r, i);
        bad += bufs[0][i] != want;
    }
    GM_CHECK_EQ(bad, 0);
    check_identical(&w, bufs, sz);
    for (int r = 0; r < n; r++) {
        struct gm_coll_traffic s;
        gm_coll_traffic_total(w.c[r], &s, NULL);
        GM_CHECK_EQ(s.payload_bytes, 2 * (uint64_t)(n - 1) * sz * 4 / (uint64_t)n);
        GM_CHECK_OK(w.s[r].status);
        free(bufs[r]);
    }
    world_free(&w);
}

/* --- bad input -------------------------------------------------------- */

struct tamper {
    int target_msg; /* 0-based index of the data message to tamper with */
    int seen;
    int field_off; /* header byte to flip, or -1: truncate by 2, -2: fail link */
};

static enum gm_memnet_verdict tamper_hook(void *arg, int src, int dst, unsigned char *msg,
                                          size_t *len)
{
    struct tamper *t = arg;

    (void)src;
    (void)dst;
    if (t->seen++ != t->target_msg)
        return GM_MEMNET_DELIVER;
    if (t->field_off == -2)
        return GM_MEMNET_FAIL_LINK;
    if (t->field_off == -1)
        *len -= 2;
    else
        msg[t->field_off] ^= 1;
    return GM_MEMNET_DELIVER;
}

/* Runs one fp32 all-reduce on every rank with an optional per-rank twist and
 * returns how many ranks reported `want` (others must report some error). */
static int run_bad(int n, enum gm_coll_algo algo, struct tamper *t, int bad_rank, size_t bad_n,
                   uint64_t bad_step, int bad_codec, uint32_t bad_gen, int want)
{
    struct world w;
    float *bufs[MAXW];
    size_t sz = 100;
    int hits = 0;

    memset(&w, 0, sizeof(w));
    w.n = n;
    w.net = gm_memnet_new(n);
    for (int r = 0; r < n; r++) {
        struct gm_coll_config cfg = {.chunk_bytes = 64, .generation = r == bad_rank ? bad_gen : 0};
        w.c[r] = gm_coll_new(gm_memnet_transport(w.net, r), &cfg);
        bufs[r] = calloc(sz + 1, sizeof(float));
        for (size_t i = 0; i < sz + 1; i++)
            bufs[r][i] = 0.5f;
    }
    if (t != NULL)
        gm_memnet_set_hook(w.net, tamper_hook, t);
    for (int r = 0; r < n; r++) {
        struct gm_coll_opts o = {.algo = algo, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM};
        if (r == bad_rank) {
            o.step = bad_step;
            o.codec = (enum gm_codec)bad_codec;
        }
        GM_CHECK_OK(gm_coll_allreduce_start(w.c[r], bufs[r], r == bad_rank ? bad_n : sz, &o,
                                            done_cb, &w.s[r]));
    }
    gm_memnet_run(w.net);
    for (int r = 0; r < n; r++) {
        GM_CHECK_EQ(w.s[r].calls, 1); /* no hang: every rank completes */
        /* A rank may finish before the fault reaches it (it got every byte it
         * needed, validated); then its sum is right.  Never a wrong sum. */
        if (w.s[r].status == 0) {
            GM_CHECK(r != bad_rank);
            for (size_t i = 0; i < sz; i++)
                GM_CHECK(bufs[r][i] == (float)n * 0.5f);
        } else {
            /* the group is broken: later operations fail at once, no callback */
            GM_CHECK_ERR(gm_coll_barrier_start(w.c[r], 0, done_cb, &w.s[r]), GM_ERR_ABORTED);
        }
        hits += w.s[r].status == want;
        GM_CHECK(!gm_coll_busy(w.c[r]));
    }
    world_free(&w);
    for (int r = 0; r < n; r++)
        free(bufs[r]);
    return hits;
}

static void test_bad_input(void)
{
    for (size_t ai = 0; ai < 2; ai++) {
        enum gm_coll_algo a = algos[ai];
        for (int n = 2; n <= 4; n++) {
            struct tamper t;
            GM_CHECK(run_bad(n, a, NULL, 1, 101, 0, GM_CODEC_FP32, 0, GM_ERR_MISMATCH) >= 1);
            GM_CHECK(run_bad(n, a, NULL, 1, 0, 0, GM_CODEC_FP32, 0, GM_ERR_MISMATCH) >= 1);
            GM_CHECK(run_bad(n, a, NULL, 1, 100, 5, GM_CODEC_FP32, 0, GM_ERR_MISMATCH) >= 1);
            GM_CHECK(run_bad(n, a, NULL, 1, 100, 0, GM_CODEC_FP16, 0, GM_ERR_MISMATCH) >= 1);
            GM_CHECK(run_bad(n, a, NULL, 1, 100, 0, GM_CODEC_FP32, 9, GM_ERR_MISMATCH) >= 1);
            /* a chunk of the wrong length (truncated) */
            t = (struct tamper){.target_msg = 3, .field_off = -1};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_PROTO) >= 1);
            /* wrong element count in the header (byte 51: low byte of count) */
            t = (struct tamper){.target_msg = 2, .field_off = 51};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_PROTO) >= 1);
            /* wrong codec, step, generation in flight */
            t = (struct tamper){.target_msg = 1, .field_off = 6};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_MISMATCH) >= 1);
            t = (struct tamper){.target_msg = 4, .field_off = 23};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_MISMATCH) >= 1);
            t = (struct tamper){.target_msg = 0, .field_off = 11};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_MISMATCH) >= 1);
            /* bad magic */
            t = (struct tamper){.target_msg = 2, .field_off = 0};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, GM_ERR_PROTO) >= 1);
            /* link failure mid-collective */
            t = (struct tamper){.target_msg = 5, .field_off = -2};
            GM_CHECK(run_bad(n, a, &t, -1, 0, 0, 0, 0, -ECONNRESET) >= 1);
        }
    }
}

/* NaN/Inf: every rank reports GM_ERR_NUMERIC; the group stays usable. */
static void test_nonfinite(void)
{
    for (size_t ai = 0; ai < 3; ai++) {
        int n = 4;
        struct world w;
        float *bufs[MAXW];
        size_t sz = 300;
        struct gm_coll_opts o = {.algo = algos[ai], .codec = GM_CODEC_FP32};
        GM_CHECK_OK(world_init(&w, n, NULL));
        for (int r = 0; r < n; r++)
            bufs[r] = calloc(sz, sizeof(float));
        bufs[2][17] = NAN;
        run_allreduce(&w, bufs, sz, &o);
        for (int r = 0; r < n; r++)
            GM_CHECK_ERR(w.s[r].status, GM_ERR_NUMERIC);
        /* every place a check can look: lane 0, the last lane, the tail of a
         * segment and of the buffer, both infinities */
        {
            const size_t at[] = {0, 7, 8, 74, 75, 149, sz - 1};
            for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
                for (int r = 0; r < n; r++)
                    memset(bufs[r], 0, sz * sizeof(float));
                bufs[(int)k % n][at[k]] = k % 2 ? -INFINITY : INFINITY;
                run_allreduce(&w, bufs, sz, &o);
                for (int r = 0; r < n; r++)
                    GM_CHECK_ERR(w.s[r].status, GM_ERR_NUMERIC);
            }
        }
        /* fp16 SUM overflow: the ring re-encodes partial sums (60000 * 2 -> Inf ->
         * error); direct and hier encode only inputs and sum in fp32 (exact). */
        o.codec = GM_CODEC_FP16;
        for (int r = 0; r < n; r++) {
            memset(bufs[r], 0, sz * sizeof(float));
            bufs[r][3] = 60000.0f;
        }
        run_allreduce(&w, bufs, sz, &o);
        for (int r = 0; r < n; r++) {
            if (algos[ai] == GM_COLL_RING)
                GM_CHECK_ERR(w.s[r].status, GM_ERR_NUMERIC);
            else
                GM_CHECK(w.s[r].status == 0 && bufs[r][3] == 240000.0f);
        }
        /* and the group still works */
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < sz; i++)
                bufs[r][i] = 1.0f;
        o.codec = GM_CODEC_FP32;
        run_allreduce(&w, bufs, sz, &o);
        for (int r = 0; r < n; r++) {
            GM_CHECK_OK(w.s[r].status);
            GM_CHECK(bufs[r][sz - 1] == 4.0f);
            free(bufs[r]);
        }
        world_free(&w);
    }
}

/* --- broadcast, barrier, queueing, hash check ------------------------- */

static void test_broadcast_barrier(void)
{
    const int n = 7;
    struct world w;
    float *bufs[MAXW];
    size_t sz = 5003;
    struct gm_coll_config cfg = {.chunk_bytes = 4096};

    GM_CHECK_OK(world_init(&w, n, &cfg));
    for (int r = 0; r < n; r++) {
        bufs[r] = malloc(sz * sizeof(float));
        for (size_t i = 0; i < sz; i++)
            bufs[r][i] = r == 3 ? urand() : 0.0f;
    }
    world_reset_slots(&w);
    for (int r = 0; r < n; r++)
        GM_CHECK_OK(gm_coll_broadcast_start(w.c[r], bufs[r], sz, 3, 9, done_cb, &w.s[r]));
    gm_memnet_run(w.net);
    for (int r = 0; r < n; r++) {
        GM_CHECK_EQ(w.s[r].calls, 1);
        GM_CHECK_OK(w.s[r].status);
    }
    check_identical(&w, bufs, sz);

    /* a barrier completes nowhere until every rank entered it */
    world_reset_slots(&w);
    for (int r = 0; r < n - 1; r++)
        GM_CHECK_OK(gm_coll_barrier_start(w.c[r], 10, done_cb, &w.s[r]));
    gm_memnet_run(w.net);
    for (int r = 0; r < n; r++)
        GM_CHECK_EQ(w.s[r].calls, 0);
    GM_CHECK_OK(gm_coll_barrier_start(w.c[n - 1], 10, done_cb, &w.s[n - 1]));
    gm_memnet_run(w.net);
    for (int r = 0; r < n; r++) {
        GM_CHECK_EQ(w.s[r].calls, 1);
        GM_CHECK_OK(w.s[r].status);
    }

    /* queued operations run in order: three buckets back to back */
    {
        struct slot s3[MAXW][3];
        struct gm_coll_opts o = {.algo = GM_COLL_AUTO, .codec = GM_CODEC_FP32};
        memset(s3, 0, sizeof(s3));
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < sz; i++)
                bufs[r][i] = 1.0f;
            for (int b = 0; b < 3; b++)
                GM_CHECK_OK(gm_coll_allreduce_start(w.c[r], bufs[r] + b * 1000, 1000, &o, done_cb,
                                                    &s3[r][b]));
        }
        gm_memnet_run(w.net);
        for (int r = 0; r < n; r++) {
            for (int b = 0; b < 3; b++) {
                GM_CHECK_EQ(s3[r][b].calls, 1);
                GM_CHECK_OK(s3[r][b].status);
            }
            GM_CHECK(bufs[r][2999] == (float)n && bufs[r][3000] == 1.0f);
        }
    }

    /* hash check: equal everywhere -> 0; one flipped bit on one rank -> all MISMATCH */
    for (int flip = 0; flip < 2; flip++) {
        world_reset_slots(&w);
        for (int r = 0; r < n; r++)
            memcpy(bufs[r], bufs[0], sz * sizeof(float));
        if (flip) {
            uint32_t u;
            memcpy(&u, &bufs[5][77], 4);
            u ^= 1;
            memcpy(&bufs[5][77], &u, 4);
        }
        for (int r = 0; r < n; r++)
            GM_CHECK_OK(
                gm_coll_hashcheck_start(w.c[r], bufs[r], sz * sizeof(float), 11, done_cb, &w.s[r]));
        gm_memnet_run(w.net);
        for (int r = 0; r < n; r++) {
            GM_CHECK_EQ(w.s[r].calls, 1);
            GM_CHECK_ERR(w.s[r].status, flip ? GM_ERR_MISMATCH : 0);
        }
    }
    GM_CHECK(gm_coll_hash("abc", 3) != gm_coll_hash("abd", 3));
    for (int r = 0; r < n; r++)
        free(bufs[r]);
    world_free(&w);
}

static void test_contracts(void)
{
    struct world w;
    float x[4] = {0};
    struct gm_coll_opts o = {.algo = GM_COLL_RING, .codec = GM_CODEC_FP32};
    struct gm_coll_opts bad = {.algo = (enum gm_coll_algo)9, .codec = GM_CODEC_FP32};
    struct gm_coll_hdr h = {.type = GM_COLL_MSG_DATA,
                            .kind = 0x11,
                            .codec = 1,
                            .phase = 2,
                            .generation = 3,
                            .seq = 4,
                            .step = 5,
                            .total = 6,
                            .stage = 7,
                            .chunk = 8,
                            .offset = 9,
                            .count = 10,
                            .payload_bytes = 4},
                       h2;
    unsigned char msg[GM_COLL_HDR_BYTES + 4] = {0};

    GM_CHECK_OK(world_init(&w, 2, NULL));
    GM_CHECK_ERR(gm_coll_allreduce_start(w.c[0], x, 4, &bad, done_cb, &w.s[0]), -EINVAL);
    GM_CHECK_ERR(gm_coll_allreduce_start(w.c[0], NULL, 4, &o, done_cb, &w.s[0]), -EINVAL);
    GM_CHECK_ERR(gm_coll_broadcast_start(w.c[0], x, 4, 2, 0, done_cb, &w.s[0]), -EINVAL);
    GM_CHECK_EQ(w.s[0].calls, 0);
    /* the callback never runs inside *_start() */
    GM_CHECK_OK(gm_coll_barrier_start(w.c[0], 0, done_cb, &w.s[0]));
    GM_CHECK_EQ(w.s[0].calls, 0);
    GM_CHECK_OK(gm_coll_barrier_start(w.c[1], 0, done_cb, &w.s[1]));
    gm_memnet_run(w.net);
    GM_CHECK_EQ(w.s[0].calls + w.s[1].calls, 2);
    world_free(&w);
    gm_coll_free(NULL);

    gm_coll_hdr_encode(&h, msg);
    GM_CHECK_OK(gm_coll_hdr_decode(msg, sizeof(msg), &h2));
    {
        unsigned char again[GM_COLL_HDR_BYTES];
        gm_coll_hdr_encode(&h2, again);
        GM_CHECK(memcmp(again, msg, GM_COLL_HDR_BYTES) == 0);
        GM_CHECK_EQ(h2.step, 5);
        GM_CHECK_EQ(h2.payload_bytes, 4);
    }
    GM_CHECK_ERR(gm_coll_hdr_decode(msg, sizeof(msg) - 1, &h2), GM_ERR_PROTO);
    GM_CHECK_ERR(gm_coll_hdr_decode(msg, 10, &h2), GM_ERR_PROTO);
    msg[4] = 9;
    GM_CHECK_ERR(gm_coll_hdr_decode(msg, sizeof(msg), &h2), GM_ERR_PROTO);
}

/* --- cost model --------------------------------------------------------- */

static void test_cost_model(void)
{
    struct gm_coll_link links[16];
    int groups[4] = {0, 0, 1, 1};
    size_t layer_end[] = {10, 30, 100, 101}, off[4], len[4], nb;

    /* two LAN islands (1 GB/s, 0.1 ms) joined by a 5 MB/s, 30 ms tunnel */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            links[i * 4 + j] = groups[i] == groups[j] ? (struct gm_coll_link){1e-4, 1e9}
                                                      : (struct gm_coll_link){3e-2, 5e6};
    GM_CHECK_EQ(gm_coll_choose(4, links, groups, 25000000, GM_CODEC_FP32), GM_COLL_HIER);
    GM_CHECK(gm_coll_cost(GM_COLL_HIER, 4, links, groups, 25000000, GM_CODEC_FP16) <
             gm_coll_cost(GM_COLL_HIER, 4, links, groups, 25000000, GM_CODEC_FP32));
    /* uniform LAN: tiny payloads go direct (one round), big ones ring */
    GM_CHECK_EQ(gm_coll_choose(7, NULL, NULL, 16, GM_CODEC_FP32), GM_COLL_DIRECT);
    GM_CHECK_EQ(gm_coll_choose(7, NULL, NULL, 10000000, GM_CODEC_FP32), GM_COLL_RING);
    GM_CHECK_EQ(gm_coll_choose(2, NULL, NULL, 10000000, GM_CODEC_FP32), GM_COLL_DIRECT);
    /* ring time matches the formula: 2(N-1)(alpha + S/N/B) */
    GM_CHECK_NEAR(gm_coll_cost(GM_COLL_RING, 4, NULL, NULL, 1000000, GM_CODEC_FP32),
                  6 * (2e-4 + 1e6 / 125e6), 1e-12, 1e-9);

    GM_CHECK_EQ(gm_coll_bucket_bytes(&(struct gm_coll_link){2e-4, 125e6}), 256 * 1024);
    GM_CHECK_EQ(gm_coll_bucket_bytes(&(struct gm_coll_link){0.1, 6.25e6}), 6250000);
    GM_CHECK_EQ(gm_coll_bucket_bytes(&(struct gm_coll_link){1.0, 1e9}), 64 * 1024 * 1024);

    nb = gm_coll_buckets(layer_end, 4, 50 * sizeof(float), off, len);
    GM_CHECK_EQ(nb, 2);
    GM_CHECK_EQ(off[0], 30);
    GM_CHECK_EQ(len[0], 71);
    GM_CHECK_EQ(off[1], 0);
    GM_CHECK_EQ(len[1], 30);
    nb = gm_coll_buckets(layer_end, 4, 1, off, len);
    GM_CHECK_EQ(nb, 4);
    GM_CHECK_EQ(off[0], 100);
    GM_CHECK_EQ(len[0], 1);
}

/* A star VPN reduced at its hub: HIER with one group labelled by the hub (any rank, not only the
 * lowest) gathers and sums at the hub and broadcasts from it.  Its result is the ring's: exact
 * for small integers, bitwise identical on every rank, and a fp32 MEAN within the ring's
 * rounding of it; the cost model prices it as one reduce to the hub and one broadcast. */
static void test_star_hub(void)
{
    const int ns[] = {3, 4, 7};

    for (size_t wi = 0; wi < GM_ARRAY_SIZE(ns); wi++)
        for (int hub = 0; hub<ns[wi]; hub += ns[wi] - 1> 1 ? ns[wi] - 2 : 1) {
            int n = ns[wi], groups[MAXW];
            for (int r = 0; r < n; r++)
                groups[r] = hub;
            GM_CHECK_EQ(gm_coll_group_leader(groups, n, 0), hub);
            GM_CHECK_EQ(gm_coll_group_leader(groups, n, n - 1), hub);
            struct gm_coll_config cfg = {.chunk_bytes = 64, .groups = groups};
            struct gm_coll_config ring_cfg = {.chunk_bytes = 64};
            struct world w, wr;
            size_t sz = 1009;
            float *bufs[MAXW], *rbufs[MAXW], *ref = calloc(sz, sizeof(float));
            GM_CHECK_OK(world_init(&w, n, &cfg));
            GM_CHECK_OK(world_init(&wr, n, &ring_cfg));
            for (int r = 0; r < n; r++) {
                bufs[r] = malloc(sz * sizeof(float));
                rbufs[r] = malloc(sz * sizeof(float));
                for (size_t i = 0; i < sz; i++) {
                    bufs[r][i] = rbufs[r][i] = small_int(r, i);
                    ref[i] += small_int(r, i);
                }
            }
            struct gm_coll_opts o = {
                .algo = GM_COLL_HIER, .codec = GM_CODEC_FP32, .reduce = GM_COLL_SUM, .step = 3};
            run_allreduce(&w, bufs, sz, &o);
            o.algo = GM_COLL_RING;
            run_allreduce(&wr, rbufs, sz, &o);
            for (int r = 0; r < n; r++) {
                GM_CHECK_OK(w.s[r].status);
                GM_CHECK(memcmp(bufs[r], ref, sz * sizeof(float)) == 0);
                GM_CHECK(memcmp(bufs[r], rbufs[r], sz * sizeof(float)) == 0);
            }
            check_identical(&w, bufs, sz);
            /* MEAN of random floats: the same as the ring's within fp32 rounding */
            for (int r = 0; r < n; r++)
                for (size_t i = 0; i < sz; i++)
                    bufs[r][i] = rbufs[r][i] = urand();
            o.reduce = GM_COLL_MEAN;
            o.step = 4;
            run_allreduce(&wr, rbufs, sz, &o);
            o.algo = GM_COLL_HIER;
            run_allreduce(&w, bufs, sz, &o);
            for (int r = 0; r < n; r++)
                GM_CHECK_OK(w.s[r].status);
            check_identical(&w, bufs, sz);
            for (size_t i = 0; i < sz; i++)
                GM_CHECK_NEAR(bufs[0][i], rbufs[0][i], 2 * n * 0x1p-23, 0);
            for (int r = 0; r < n; r++) {
                free(bufs[r]);
                free(rbufs[r]);
            }
            free(ref);
            world_free(&w);
            world_free(&wr);
        }
}

int main(void)
{
    GM_TEST_RUN(test_contracts);
    GM_TEST_RUN(test_sum_exact);
    GM_TEST_RUN(test_star_hub);
    GM_TEST_RUN(test_mean_codecs);
    GM_TEST_RUN(test_q8);
    GM_TEST_RUN(test_q8_loss);
    GM_TEST_RUN(test_ring_bytes);
    GM_TEST_RUN(test_bad_input);
    GM_TEST_RUN(test_nonfinite);
    GM_TEST_RUN(test_broadcast_barrier);
    GM_TEST_RUN(test_cost_model);
    GM_TEST_RUN(test_64mb);
    return gm_test_finish("test_collective");
}
