/*
 * tests/unit/test_codec.c - wire codecs: the vectorized fp16 path equals the
 * portable round-to-nearest-even routine bit for bit (every half value, ties,
 * overflow, subnormals, NaN, random floats); bf16 rounding; decode_add order.
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

int main(void)
{
    GM_TEST_RUN(test_f16_roundtrip_all);
    GM_TEST_RUN(test_f16_rounding);
    GM_TEST_RUN(test_vector_matches_scalar);
    GM_TEST_RUN(test_bf16_fp32);
    return gm_test_finish("test_codec");
}
