/*
 * train/comm/codec.h - element codecs for gradients on the wire: fp32, fp16, bf16, q8.
 *
 * Chosen: fp16 conversion uses the F16C instructions (_mm256_cvtps_ph with
 * round-to-nearest-even, 8 lanes, and _cvtss_sh for tails) when the compiler
 * targets F16C; otherwise (and always, as the test reference) a portable
 * bit-exact round-to-nearest-even routine.  Both give identical bits for every
 * input: overflow rounds to +-Inf, subnormals are kept, NaN stays NaN (quiet).
 * bf16 is the top half of the fp32 bit pattern, rounded to nearest even; NaN
 * stays a quiet NaN.  Reduction always happens in fp32: codecs only translate.
 *
 * q8 (DiLoCo's 8-bit outer deltas, train/compress/diloco.h): blocks of GM_CODEC_Q8_BLOCK
 * elements, the last one shorter, each on the wire as its fp32 scale s (host byte order, as
 * every codec here) then one int8 per element, q = round-to-nearest-even(x r), r = 127 / max|x|
 * over the block (x / s when r would be Inf), s = max|x| / 127, so |x - q s| <= s / 2 (up to
 * the rounding of r) and decode is q * s.  Symmetric, no
 * zero point: deltas are centred on zero.  An all-zero block has s = 0; a block holding an
 * Inf or NaN gets s = NaN and q = 0, so it decodes to NaN everywhere (the collective's finite
 * check then fails the op rather than sum a silently clipped value).  Decoding trusts no
 * byte: any scale and any q in [-128, 127] give q * s.  Blocks start at element 0 of the
 * buffer encoded, so encoding [0, n) equals concatenating the encodings of slices that start
 * at multiples of the block (the collective's DIRECT cuts chunks there).  n + 4 ceil(n / 256)
 * bytes: 0.51x fp16's.
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
    GM_CODEC_Q8 = 3, /* int8 with an fp32 scale per block (see the top) */
    GM_CODEC_COUNT = 4,
};

#define GM_CODEC_Q8_BLOCK 256 /* q8: elements per scale */

/* Bytes per element on the wire; 0 for an invalid codec.  q8: 1, its scales not counted:
 * gm_codec_bytes counts them. */
size_t gm_codec_elem_size(enum gm_codec c);
/* Bytes that n elements take on the wire (q8: with their scales); 0 for an invalid codec. */
size_t gm_codec_bytes(enum gm_codec c, size_t n);
/* The elements a chunk of at most max_bytes holds, >= 1: a multiple of GM_CODEC_Q8_BLOCK
 * (at least one block) for q8, so that chunks cut there are whole blocks. */
size_t gm_codec_chunk_elems(enum gm_codec c, size_t max_bytes);
/* "fp32", "fp16", "bf16", "q8"; "?" if invalid. */
const char *gm_codec_name(enum gm_codec c);
/* Parses a name; returns 0 or -EINVAL. */
GM_MUST_CHECK int gm_codec_parse(const char *name, enum gm_codec *out);

/* out (gm_codec_bytes(c, n) bytes) = encode(in (n floats)). */
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
