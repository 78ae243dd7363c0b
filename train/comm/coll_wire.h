/*
 * train/comm/coll_wire.h - the collective's message header on the wire and the
 * parameter hash.  Pure functions; thread-safe.  A leaf: the state machine
 * (collective.c) and the phase engines (coll_phase.c) use it, it uses neither;
 * collective.h includes it, so tests and fuzzers see it there too.
 *
 * Every message is a fixed 56-byte big-endian header (common/byteorder.h)
 * followed by payload_bytes of encoded elements (train/comm/codec.h).
 */
#ifndef GM_TRAIN_COMM_COLL_WIRE_H
#define GM_TRAIN_COMM_COLL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_COLL_HDR_BYTES 56
#define GM_COLL_MAGIC 0x474d4331u /* "GMC1" */

enum gm_coll_msg { GM_COLL_MSG_DATA = 1, GM_COLL_MSG_ABORT = 2 };

struct gm_coll_hdr {
    uint8_t type;  /* enum gm_coll_msg */
    uint8_t kind;  /* op kind and algorithm */
    uint8_t codec; /* enum gm_codec */
    uint8_t phase; /* phase of the op (HIER has 3) */
    uint32_t generation;
    uint32_t seq; /* op sequence number in this gm_coll */
    uint64_t step;
    uint64_t total; /* elements in the whole buffer */
    uint32_t stage; /* ring stage */
    uint32_t chunk;
    uint64_t offset; /* element offset of this chunk */
    uint32_t count;  /* elements in this chunk (ABORT: the error, negated) */
    uint32_t payload_bytes;
};

/* Big-endian, GM_COLL_HDR_BYTES bytes. */
void gm_coll_hdr_encode(const struct gm_coll_hdr *h, unsigned char *out);
/* 0, or GM_ERR_PROTO: short, bad magic or type, payload_bytes != len - header. */
GM_MUST_CHECK int gm_coll_hdr_decode(const void *buf, size_t len, struct gm_coll_hdr *h);

/* 64-bit hash of bytes (not cryptographic; cheap: ~memory bandwidth). */
uint64_t gm_coll_hash(const void *buf, size_t nbytes);

#endif
