/*
 * train/comm/codec.c - fp32/fp16/bf16/q8 wire codecs (see codec.h for the choices).
 *
 * Wire byte order is the host's (little-endian x86-64 and arm64 are all we
 * build for); the collective's message header is explicit big-endian.
 */
#include "train/comm/codec.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "train/kernels/kfn.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define HAVE_F16C 1
#else
#define HAVE_F16C 0
#endif

/* The scalar conversions are the ones the CUDA packing kernels use (train/kernels/kfn.h). */
uint16_t gm_f32_to_f16(float f)
{
    return gm_kf32_to_f16(f);
}

float gm_f16_to_f32(uint16_t h)
{
    return gm_kf16_to_f32(h);
}

uint16_t gm_f32_to_bf16(float f)
{
    return gm_kf32_to_bf16(f);
}

float gm_bf16_to_f32(uint16_t h)
{
    return gm_kbf16_to_f32(h);
}

size_t gm_codec_elem_size(enum gm_codec c)
{
    switch (c) {
    case GM_CODEC_FP32:
        return 4;
    case GM_CODEC_FP16:
    case GM_CODEC_BF16:
        return 2;
    case GM_CODEC_Q8:
        return 1;
    default:
        return 0;
    }
}

size_t gm_codec_bytes(enum gm_codec c, size_t n)
{
    if (c == GM_CODEC_Q8)
        return n + sizeof(float) * ((n + GM_CODEC_Q8_BLOCK - 1) / GM_CODEC_Q8_BLOCK);
    return n * gm_codec_elem_size(c);
}

size_t gm_codec_chunk_elems(enum gm_codec c, size_t max_bytes)
{
    const size_t block_bytes = GM_CODEC_Q8_BLOCK + sizeof(float);
    size_t esz = gm_codec_elem_size(c);

    if (c == GM_CODEC_Q8)
        return GM_CODEC_Q8_BLOCK * (max_bytes > block_bytes ? max_bytes / block_bytes : 1);
    return esz == 0 || max_bytes < esz ? 1 : max_bytes / esz;
}

const char *gm_codec_name(enum gm_codec c)
{
    switch (c) {
    case GM_CODEC_FP32:
        return "fp32";
    case GM_CODEC_FP16:
        return "fp16";
    case GM_CODEC_BF16:
        return "bf16";
    case GM_CODEC_Q8:
        return "q8";
    default:
        return "?";
    }
}

int gm_codec_parse(const char *name, enum gm_codec *out)
{
    for (int c = 0; c < GM_CODEC_COUNT; c++) {
        if (name != NULL && strcmp(name, gm_codec_name((enum gm_codec)c)) == 0) {
            *out = (enum gm_codec)c;
            return 0;
        }
    }
    return -EINVAL;
}

static void f16_encode(const float *in, size_t n, unsigned char *out)
{
    size_t i = 0;
#if HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), h);
    }
#endif
    for (; i < n; i++) {
        uint16_t h = gm_f32_to_f16(in[i]);
        memcpy(out + 2 * i, &h, sizeof(h));
    }
}

static void f16_decode_add(const unsigned char *in, const float *x, size_t n, float *out)
{
    size_t i = 0;
#if HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i)));
        if (x != NULL)
            v = _mm256_add_ps(v, _mm256_loadu_ps(x + i));
        _mm256_storeu_ps(out + i, v);
    }
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, sizeof(h));
        out[i] = x != NULL ? gm_f16_to_f32(h) + x[i] : gm_f16_to_f32(h);
    }
}

/* One q8 block of m <= GM_CODEC_Q8_BLOCK elements (codec.h): scale, then the int8s.  The max
 * of |x| as the max of the bit patterns with the sign cleared (non-negative floats order as
 * their bits do; at or above the exponent's all-ones pattern: Inf or NaN), and q from x
 * times 127 / max, so that both loops vectorise; a max so small that 127 / max is Inf takes
 * the division instead. */
static void q8_encode_block(const float *in, size_t m, unsigned char *out)
{
    uint32_t mb = 0;
    float mx, s, inv;
    int8_t q[GM_CODEC_Q8_BLOCK];

    for (size_t i = 0; i < m; i++) {
        uint32_t u;
        memcpy(&u, &in[i], sizeof(u));
        u &= 0x7fffffffu;
        mb = u > mb ? u : mb;
    }
    memcpy(&mx, &mb, sizeof(mx));
    if (mb >= 0x7f800000u) { /* Inf or NaN */
        s = NAN;
        memset(q, 0, m);
    } else if (mb == 0) {
        s = 0;
        memset(q, 0, m);
    } else {
        s = mx / 127.0f;
        inv = 127.0f / mx;
        if (isinf(inv)) {
            for (size_t i = 0; i < m; i++)
                q[i] = (int8_t)fminf(fmaxf(nearbyintf(in[i] / s), -127.0f), 127.0f);
        } else { /* |x r| <= 127 (and a rounding): + and - 1.5 x 2^23 rounds it to the
                  * nearest integer, ties to even, as nearbyintf would, in vector lanes */
            for (size_t i = 0; i < m; i++) {
                float v = (in[i] * inv + 12582912.0f) - 12582912.0f;
                v = v > 127.0f ? 127.0f : v; /* not fminf: its NaN rules stop the vectoriser */
                v = v < -127.0f ? -127.0f : v;
                q[i] = (int8_t)(int)v;
            }
        }
    }
    memcpy(out, &s, sizeof(s));
    memcpy(out + sizeof(s), q, m);
}

static void q8_encode(const float *in, size_t n, unsigned char *out)
{
    for (size_t b = 0; b < n; b += GM_CODEC_Q8_BLOCK) {
        size_t m = n - b < GM_CODEC_Q8_BLOCK ? n - b : GM_CODEC_Q8_BLOCK;
        q8_encode_block(in + b, m, out);
        out += sizeof(float) + m;
    }
}

static void q8_decode_add(const unsigned char *in, const float *x, size_t n, float *out)
{
    for (size_t b = 0; b < n; b += GM_CODEC_Q8_BLOCK) {
        size_t m = n - b < GM_CODEC_Q8_BLOCK ? n - b : GM_CODEC_Q8_BLOCK;
        float s;
        memcpy(&s, in, sizeof(s));
        in += sizeof(s);
        for (size_t i = 0; i < m; i++) {
            float v = (float)(int8_t)in[i] * s;
            out[b + i] = x != NULL ? v + x[b + i] : v;
        }
        in += m;
    }
}

void gm_codec_encode(enum gm_codec c, const float *in, size_t n, void *out)
{
    if (n == 0)
        return;
    switch (c) {
    case GM_CODEC_FP32:
        memcpy(out, in, n * sizeof(float));
        break;
    case GM_CODEC_FP16:
        f16_encode(in, n, out);
        break;
    case GM_CODEC_BF16: {
        unsigned char *o = out;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = gm_f32_to_bf16(in[i]);
            memcpy(o + 2 * i, &h, sizeof(h));
        }
        break;
    }
    case GM_CODEC_Q8:
        q8_encode(in, n, out);
        break;
    default:
        break;
    }
}

void gm_codec_decode_add(enum gm_codec c, const void *in, const float *x, size_t n, float *out)
{
    if (n == 0)
        return;
    switch (c) {
    case GM_CODEC_FP32: {
        const unsigned char *b = in;
        for (size_t i = 0; i < n; i++) { /* in may be unaligned: memcpy per element */
            float v;
            memcpy(&v, b + 4 * i, sizeof(v));
            out[i] = x != NULL ? v + x[i] : v;
        }
        break;
    }
    case GM_CODEC_FP16: {
        f16_decode_add(in, x, n, out);
        break;
    }
    case GM_CODEC_BF16: {
        const unsigned char *b = in;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, sizeof(h));
            out[i] = x != NULL ? gm_bf16_to_f32(h) + x[i] : gm_bf16_to_f32(h);
        }
        break;
    }
    case GM_CODEC_Q8:
        q8_decode_add(in, x, n, out);
        break;
    default:
        break;
    }
}

void gm_codec_decode(enum gm_codec c, const void *in, size_t n, float *out)
{
    gm_codec_decode_add(c, in, NULL, n, out);
}
