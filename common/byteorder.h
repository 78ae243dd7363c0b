/*
 * common/byteorder.h - explicit byte order for wire and file formats.
 *
 * gm_put_be32(p, v) stores v at p[0..4) most significant byte first;
 * gm_get_be32(p) reads it back (likewise 16 and 64 bits, and _le for least
 * significant byte first, as safetensors' header length is).  Byte by byte,
 * so p needs no alignment and the host's own order never matters; compilers
 * fold these into one load or store plus a byte swap.  Pure; thread-safe.
 * Every parser of frames, collective messages and files uses these: no module
 * keeps a private copy.
 */
#ifndef GM_COMMON_BYTEORDER_H
#define GM_COMMON_BYTEORDER_H

#include <stdint.h>

static inline void gm_put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void gm_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void gm_put_be64(uint8_t *p, uint64_t v)
{
    gm_put_be32(p, (uint32_t)(v >> 32));
    gm_put_be32(p + 4, (uint32_t)v);
}

static inline uint16_t gm_get_be16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t gm_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t gm_get_be64(const uint8_t *p)
{
    return (uint64_t)gm_get_be32(p) << 32 | gm_get_be32(p + 4);
}

static inline void gm_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void gm_put_le64(uint8_t *p, uint64_t v)
{
    gm_put_le32(p, (uint32_t)v);
    gm_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t gm_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gm_get_le64(const uint8_t *p)
{
    return (uint64_t)gm_get_le32(p) | (uint64_t)gm_get_le32(p + 4) << 32;
}

#endif
