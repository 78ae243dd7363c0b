/*
 * tests/unit/test_codec.c - wire codecs: the vectorized fp16 path equals the
 * portable round-to-nearest-even routine bit for bit (every half value, ties,
 * overflow, subnormals, NaN, random floats); bf16 rounding; decode_add order; q8 (int8
 * blocks with an fp32 scale): its byte count, its error bound per block against a plain
 * reference, zero and non-finite blocks, slices at block multiples, any bytes decodable.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "train/comm/codec.h"

GM_TEST_DEFINE_STATE;

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Naive reference: nearest half by exhaustive comparison over neighbours. */
static void test_f16_roundtrip_all(void)
{
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gm_f16_to_f32((uint16_t)h);
        uint16_t back = gm_f32_to_f16(f);
        if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0) /* NaN: stays NaN */
            bad += !(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
        else
            bad += back != h;
    }
    GM_CHECK_EQ(bad, 0);
    GM_CHECK(gm_f16_to_f32(0x3c00) == 1.0f);
    GM_CHECK(gm_f16_to_f32(0x7bff) == 65504.0f);
    GM_CHECK(gm_f16_to_f32(0x0001) == 0x1p-24f);
}

static void test_f16_rounding(void)
{
    /* 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even (1) */
    GM_CHECK_EQ(gm_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    GM_CHECK_EQ(gm_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even, up */
    GM_CHECK_EQ(gm_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    GM_CHECK_EQ(gm_f32_to_f16(65520.0f), 0x7c00); /* rounds to Inf */
    GM_CHECK_EQ(gm_f32_to_f16(65519.0f), 0x7bff);
    GM_CHECK_EQ(gm_f32_to_f16(-1e30f), 0xfc00);
    GM_CHECK_EQ(gm_f32_to_f16(0x1p-25f), 0x0000); /* tie to even: 0 */
    GM_CHECK_EQ(gm_f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);
    GM_CHECK_EQ(gm_f32_to_f16(3 * 0x1p-25f), 0x0002);
    GM_CHECK_EQ(gm_f32_to_f16(-0.0f), 0x8000);
}

/* The codec path (F16C when built for it) equals the scalar routine. */
static void test_vector_matches_scalar(void)
{
    const size_t n = 1 << 20;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    uint16_t *h = malloc(n * sizeof(uint16_t));
    uint64_t s = 3;
    long bad = 0;

    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        uint32_t u = (uint32_t)(s >> 32);
        if (i % 4 == 0) /* focus on the half range, ties included */
            u = (u & 0x80000000u) | (((u >> 23) % 40 + 100) << 23) | (u & 0x7fe000u) |
                ((i & 8) ? 0x1000u : 0);
        x[i] = u2f(u);
    }
    gm_codec_encode(GM_CODEC_FP16, x, n, h);
    for (size_t i = 0; i < n; i++) {
        uint16_t want = gm_f32_to_f16(x[i]);
        if (isnan(x[i]))
            bad += (h[i] & 0x7c00) != 0x7c00 || (h[i] & 0x3ff) == 0;
        else
            bad += h[i] != want;
    }
    GM_CHECK_EQ(bad, 0);
    gm_codec_decode(GM_CODEC_FP16, h, n, y);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isnan(y[i]) && f2u(y[i]) != f2u(gm_f16_to_f32(h[i]));
    GM_CHECK_EQ(bad, 0);
    /* decode_add: out = decode(in) + x, odd length (vector body + tail) */
    gm_codec_decode_add(GM_CODEC_FP16, h, x, 1001, y);
    bad = 0;
    for (size_t i = 0; i < 1001; i++)
        bad += !isnan(y[i]) && f2u(y[i]) != f2u(gm_f16_to_f32(h[i]) + x[i]);
    GM_CHECK_EQ(bad, 0);
    free(x);
    free(y);
    free(h);
}

static void test_bf16_fp32(void)
{
    float in[5] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, NAN}, out[5];
    uint16_t h[5];
    unsigned char raw[20];

    gm_codec_encode(GM_CODEC_BF16, in, 5, h);
    GM_CHECK_EQ(h[0], 0x3f80);
    GM_CHECK_EQ(h[1], 0x3f80); /* tie to even */
    GM_CHECK_EQ(h[2], 0x3f82);
    gm_codec_decode(GM_CODEC_BF16, h, 5, out);
    GM_CHECK(out[3] == -2.5f);
    GM_CHECK(isnan(out[4]));
    gm_codec_encode(GM_CODEC_FP32, in, 5, raw);
    gm_codec_decode(GM_CODEC_FP32, raw, 4, out);
    GM_CHECK(memcmp(in, out, 16) == 0);
    GM_CHECK_EQ(gm_codec_elem_size(GM_CODEC_FP16), 2);
    GM_CHECK_EQ(gm_codec_elem_size(GM_CODEC_COUNT), 0);
    {
        enum gm_codec c;
        GM_CHECK_OK(gm_codec_parse("bf16", &c));
        GM_CHECK_EQ(c, GM_CODEC_BF16);
        GM_CHECK_ERR(gm_codec_parse("fp8", &c), -EINVAL);
        GM_CHECK_STREQ(gm_codec_name(GM_CODEC_FP16), "fp16");
    }
}

/* q8's reference, from its definition (codec.h): per block, s = max|x| / 127, q = round to
 * nearest even of x (127 / max|x|), decoded q * s. */
static void q8_ref(const float *x, size_t n, float *out)
{
    for (size_t b = 0; b < n; b += GM_CODEC_Q8_BLOCK) {
        size_t m = n - b < GM_CODEC_Q8_BLOCK ? n - b : GM_CODEC_Q8_BLOCK;
        float mx = 0, s;
        for (size_t i = 0; i < m; i++)
            mx = fabsf(x[b + i]) > mx ? fabsf(x[b + i]) : mx;
        s = mx / 127.0f;
        for (size_t i = 0; i < m; i++)
            out[b + i] = s == 0 ? 0 : (float)(int)rint((double)(x[b + i] * (127.0f / mx))) * s;
    }
}

static void test_q8(void)
{
    const size_t n = 3 * GM_CODEC_Q8_BLOCK + 77; /* a short last block */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *ref = malloc(n * sizeof(float)), *acc = malloc(n * sizeof(float));
    unsigned char *w = malloc(gm_codec_bytes(GM_CODEC_Q8, n)), *w2 = malloc(n + 64);
    uint64_t rng = 7;
    enum gm_codec c;

    GM_CHECK_EQ(gm_codec_bytes(GM_CODEC_Q8, 0), 0u);
    GM_CHECK_EQ(gm_codec_bytes(GM_CODEC_Q8, 1), 5u);
    GM_CHECK_EQ(gm_codec_bytes(GM_CODEC_Q8, 256), 260u);
    GM_CHECK_EQ(gm_codec_bytes(GM_CODEC_Q8, 257), 265u);
    GM_CHECK_EQ(gm_codec_bytes(GM_CODEC_FP16, 257), 514u);
    GM_CHECK_EQ(gm_codec_chunk_elems(GM_CODEC_Q8, 1000), 768u); /* 3 blocks of 260 bytes */
    GM_CHECK_EQ(gm_codec_chunk_elems(GM_CODEC_Q8, 32), 256u);   /* at least one block */
    GM_CHECK_EQ(gm_codec_chunk_elems(GM_CODEC_FP16, 1000), 500u);
    GM_CHECK_OK(gm_codec_parse("q8", &c));
    GM_CHECK_EQ(c, GM_CODEC_Q8);
    GM_CHECK_STREQ(gm_codec_name(GM_CODEC_Q8), "q8");

    /* blocks of very different magnitudes: the bound is each block's own */
    for (size_t i = 0; i < n; i++) {
        float mag = (i / GM_CODEC_Q8_BLOCK) % 2 ? 1e-4f : 3.0f;
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        x[i] = mag * ((float)(rng >> 40) / (float)(1u << 24) * 2 - 1);
        acc[i] = (float)i;
    }
    gm_codec_encode(GM_CODEC_Q8, x, n, w);
    gm_codec_decode(GM_CODEC_Q8, w, n, y);
    q8_ref(x, n, ref);
    for (size_t b = 0; b < n; b += GM_CODEC_Q8_BLOCK) {
        size_t m = n - b < GM_CODEC_Q8_BLOCK ? n - b : GM_CODEC_Q8_BLOCK;
        float mx = 0, s, worst = 0;
        for (size_t i = 0; i < m; i++)
            mx = fabsf(x[b + i]) > mx ? fabsf(x[b + i]) : mx;
        s = mx / 127.0f;
        for (size_t i = 0; i < m; i++) {
            float e = fabsf(x[b + i] - y[b + i]);
            worst = e > worst ? e : worst;
            GM_CHECK_EQ(f2u(y[b + i]), f2u(ref[b + i])); /* the definition, bit for bit */
        }
        /* round to nearest: half a step, plus the roundings of x r and q * s */
        GM_CHECK(worst <= s * 0.5f * (1 + 1e-5f));
        GM_CHECK(worst > 0); /* random values do not all land on the grid */
    }
    /* decode_add: decode, then + x, in that order; in place */
    gm_codec_decode_add(GM_CODEC_Q8, w, acc, n, acc);
    for (size_t i = 0; i < n; i++)
        GM_CHECK_EQ(f2u(acc[i]), f2u(y[i] + (float)i));
    /* a slice starting at a block multiple encodes as the whole buffer's bytes there (the
     * collective's DIRECT cuts chunks there) */
    gm_codec_encode(GM_CODEC_Q8, x + 2 * GM_CODEC_Q8_BLOCK, n - 2 * GM_CODEC_Q8_BLOCK, w2);
    GM_CHECK_EQ(memcmp(w2, w + gm_codec_bytes(GM_CODEC_Q8, 2 * GM_CODEC_Q8_BLOCK),
                       gm_codec_bytes(GM_CODEC_Q8, n - 2 * GM_CODEC_Q8_BLOCK)),
                0);
    /* zero block: scale 0, exact zeros; a max at the block's end maps to +-127 */
    memset(x, 0, GM_CODEC_Q8_BLOCK * sizeof(float));
    x[GM_CODEC_Q8_BLOCK - 1] = -2.5f;
    x[GM_CODEC_Q8_BLOCK] = x[GM_CODEC_Q8_BLOCK + 1] = 0; /* block 1 now partly zero */
    gm_codec_encode(GM_CODEC_Q8, x, n, w);
    GM_CHECK_EQ((int8_t)w[4 + GM_CODEC_Q8_BLOCK - 1], -127);
    GM_CHECK_EQ(w[4], 0);
    gm_codec_decode(GM_CODEC_Q8, w, n, y);
    GM_CHECK_EQ(f2u(y[0]), 0u);
    GM_CHECK_NEAR(y[GM_CODEC_Q8_BLOCK - 1], -2.5f, 1e-6, 0);
    for (size_t i = 0; i < GM_CODEC_Q8_BLOCK; i++)
        x[i] = 0;
    gm_codec_encode(GM_CODEC_Q8, x, GM_CODEC_Q8_BLOCK, w);
    gm_codec_decode(GM_CODEC_Q8, w, GM_CODEC_Q8_BLOCK, y);
    for (size_t i = 0; i < GM_CODEC_Q8_BLOCK; i++)
        GM_CHECK_EQ(f2u(y[i]), 0u);
    /* a subnormal max: no Inf or NaN from its scale */
    x[3] = u2f(0x00000005);
    gm_codec_encode(GM_CODEC_Q8, x, GM_CODEC_Q8_BLOCK, w);
    gm_codec_decode(GM_CODEC_Q8, w, GM_CODEC_Q8_BLOCK, y);
    for (size_t i = 0; i < GM_CODEC_Q8_BLOCK; i++)
        GM_CHECK(isfinite(y[i]) && fabsf(y[i]) <= u2f(0x00000005));
    /* Inf or NaN in a block: that block decodes to NaN, the next one is unharmed */
    for (size_t i = 0; i < 2 * GM_CODEC_Q8_BLOCK; i++)
        x[i] = 1.0f;
    x[17] = INFINITY;
    gm_codec_encode(GM_CODEC_Q8, x, 2 * GM_CODEC_Q8_BLOCK, w);
    gm_codec_decode(GM_CODEC_Q8, w, 2 * GM_CODEC_Q8_BLOCK, y);
    for (size_t i = 0; i < GM_CODEC_Q8_BLOCK; i++)
        GM_CHECK(isnan(y[i]));
    GM_CHECK_EQ(f2u(y[GM_CODEC_Q8_BLOCK]), f2u(1.0f));
    x[17] = NAN;
    gm_codec_encode(GM_CODEC_Q8, x, GM_CODEC_Q8_BLOCK, w);
    gm_codec_decode(GM_CODEC_Q8, w, GM_CODEC_Q8_BLOCK, y);
    GM_CHECK(isnan(y[0]) && isnan(y[17]));
    /* any bytes decode (peers' bytes: any scale, q = -128) without trouble */
    for (size_t i = 0; i < gm_codec_bytes(GM_CODEC_Q8, n); i++)
        w[i] = (unsigned char)(i * 37 + 11);
    gm_codec_decode(GM_CODEC_Q8, w, n, y);
    w[4] = 0x80; /* -128 */
    memcpy(w, &(float){2.0f}, 4);
    gm_codec_decode(GM_CODEC_Q8, w, 1, y);
    GM_CHECK_EQ(f2u(y[0]), f2u(-256.0f));
    free(x), free(y), free(ref), free(acc), free(w), free(w2);
}

int main(void)
{
    GM_TEST_RUN(test_f16_roundtrip_all);
    GM_TEST_RUN(test_f16_rounding);
    GM_TEST_RUN(test_vector_matches_scalar);
    GM_TEST_RUN(test_bf16_fp32);
    GM_TEST_RUN(test_q8);
    return gm_test_finish("test_codec");
}
