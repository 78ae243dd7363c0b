/*
 * train/comm/codec.h - element codecs for gradients on the wire: fp32, fp16, bf16.
 *
 * Chosen: fp16 conversion uses the F16C instructions (_mm256_cvtps_ph with
 * round-to-nearest-even, 8 lanes, and _cvtss_sh for tails) when the compiler
 * targets F16C; otherwise (and always, as the test reference) a portable
 * bit-exact round-to-nearest-even routine.  Both give identical bits for every
 * input: overflow rounds to +-Inf, subnormals are kept, NaN stays NaN (quiet).
 * bf16 is the top half of the fp32 bit pattern, rounded to nearest even; NaN
 * stays a quiet NaN.  Reduction always happens in fp32: codecs only translate.
 *
 * Higher-level compressors (train/compress/powersgd.h, train/compress/diloco.h) put their factors
 * and deltas on the wire through these codecs.  Pure functions; thread-safe.
 */
#ifndef GM_TRAIN_COMM_CODEC_H
#define GM_TRAIN_COMM_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum gm_codec {
    GM_CODEC_FP32 = 0,
    GM_CODEC_FP16 = 1,
    GM_CODEC_BF16 = 2,
    GM_CODEC_COUNT = 3,
};

/* Bytes per element on the wire; 0 for an invalid codec. */
size_t gm_codec_elem_size(enum gm_codec c);
/* "fp32", "fp16", "bf16"; "?" if invalid. */
const char *gm_codec_name(enum gm_codec c);
/* Parses a name; returns 0 or -EINVAL. */
GM_MUST_CHECK int gm_codec_parse(const char *name, enum gm_codec *out);

/* out (n elements of the codec) = encode(in (n floats)). */
void gm_codec_encode(enum gm_codec c, const float *in, size_t n, void *out);
/* out (n floats) = decode(in). */
void gm_codec_decode(enum gm_codec c, const void *in, size_t n, float *out);
/* out[i] = decode(in)[i] + x[i], in that order (out may alias x). */
void gm_codec_decode_add(enum gm_codec c, const void *in, const float *x, size_t n, float *out);

/* Scalar conversions (portable, bit-exact round-to-nearest-even). */
uint16_t gm_f32_to_f16(float f);
float gm_f16_to_f32(uint16_t h);
uint16_t gm_f32_to_bf16(float f);
float gm_bf16_to_f32(uint16_t h);

#endif
