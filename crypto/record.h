/*
 * crypto/record.h - TLS 1.3 record protection (RFC 8446 sections 5.2-5.3 and
 * 7.3) for the application traffic of one direction, done by gradmesh on top
 * of OpenSSL's AEAD ciphers and HKDF once OpenSSL has finished the handshake.
 *
 * Why not OpenSSL's own record layer: OpenSSL 3.0 copies every byte twice on
 * each side on top of the cipher (plaintext into its write buffer, then the
 * record out through the BIO; ciphertext into its read buffer, then the
 * plaintext out to the caller).  On a 64 MiB all-reduce that was a sixth of
 * the CPU (perf: memmove and OpenSSL's per-record bookkeeping).  Here a record
 * is sealed straight from the caller's data into the link's output buffer and
 * opened straight from the socket's read buffer into the caller's.  This is
 * what Linux kernel TLS does in the kernel; the wire is the same TLS 1.3, and
 * a peer that keeps OpenSSL's record layer reads it (tests/unit/test_crypto.c
 * checks both directions, tests/integration/tls_refusals.sh against
 * `openssl s_client`).
 *
 * Only application traffic after the handshake comes here: the handshake,
 * its alerts and the exporter stay with OpenSSL.  A record of any inner type
 * is sealed and opened; the caller decides what the type means (tls.c: data,
 * alerts, KeyUpdate; tls.c reads and answers those).  gm_rec_update moves one
 * direction to its next traffic secret (RFC 8446 section 7.2) after a
 * KeyUpdate.
 *
 * Layout of a protected record: type 23 | version 0x0303 | u16 length |
 * AEAD(content | inner type | zero padding) | 16-byte tag.  The nonce is the
 * 12-byte IV from the traffic secret XOR the 64-bit record sequence number,
 * the additional data is the 5-byte header.
 */
#ifndef GM_CRYPTO_RECORD_H
#define GM_CRYPTO_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "common/err.h"

#define GM_REC_HDR 5
#define GM_REC_TAG 16
#define GM_REC_MAX_PLAIN 16384                        /* 2^14 bytes of content */
#define GM_REC_MAX_BODY (GM_REC_MAX_PLAIN + 256)      /* the length field's limit */
#define GM_REC_OVERHEAD (GM_REC_HDR + 1 + GM_REC_TAG) /* unpadded */
#define GM_REC_TYPE_ALERT 21
#define GM_REC_TYPE_HANDSHAKE 22
#define GM_REC_TYPE_DATA 23

/* One direction's keys and sequence number, and the traffic secret they come
 * from (kept for gm_rec_update; wiped by gm_rec_free). */
struct gm_rec_dir {
    EVP_CIPHER_CTX *ctx; /* owned; key set, the nonce set per record */
    uint8_t iv[12];
    uint64_t seq;
    int seal; /* 1: this side writes with it, 0: reads */
    const EVP_CIPHER *cipher;
    const EVP_MD *md;
    uint8_t secret[EVP_MAX_MD_SIZE];
    size_t secret_len;
};

/* Keys from a TLS 1.3 traffic secret (HKDF-Expand-Label "key" and "iv" with
 * the suite's hash md).  cipher: AES-128/256-GCM or ChaCha20-Poly1305. */
GM_MUST_CHECK int gm_rec_init(struct gm_rec_dir *d, const EVP_CIPHER *cipher, const EVP_MD *md,
                              const uint8_t *secret, size_t secret_len, int seal);
void gm_rec_free(struct gm_rec_dir *d);
/* The next generation of keys (RFC 8446 7.2): secret = HKDF-Expand-Label(
 * secret, "traffic upd", "", Hash.length), key and IV from it, sequence 0.
 * On failure (GM_ERR_PROTO, -ENOMEM) d is freed and unusable. */
GM_MUST_CHECK int gm_rec_update(struct gm_rec_dir *d);

/* Seals content[len] (len <= GM_REC_MAX_PLAIN) of inner type `type`, followed
 * by pad zero bytes (len + pad + 1 <= GM_REC_MAX_BODY - GM_REC_TAG), as one
 * record at out, which has room for GM_REC_OVERHEAD + len + pad bytes.
 * Returns the record's size, or -EINVAL, -EOVERFLOW (sequence exhausted),
 * GM_ERR_PROTO (cipher failure). */
GM_MUST_CHECK long gm_rec_seal(struct gm_rec_dir *d, uint8_t type, const uint8_t *content,
                               size_t len, size_t pad, uint8_t *out);

/* The size of the record that starts at p (header and body), once avail >=
 * GM_REC_HDR: 0 while the header is incomplete, GM_ERR_PROTO for a header no
 * protected TLS 1.3 record has (outer type, version, length). */
GM_MUST_CHECK long gm_rec_size(const uint8_t *p, size_t avail);
/* The alert (RFC 8446 6.2) for a whole header that gm_rec_size refused:
 * record_overflow for a length past GM_REC_MAX_BODY, decode_error for one too
 * short to hold a type and a tag or a wrong version, unexpected_message for an
 * outer type other than application_data. */
uint8_t gm_rec_header_alert(const uint8_t *p);

/* Opens the whole record rec[rec_len] (rec_len == gm_rec_size).  Its inner
 * plaintext (content, type, padding: rec_len - GM_REC_HDR - GM_REC_TAG bytes)
 * goes to dst, at most dst_cap bytes of it, and the rest to spill (which may
 * be NULL when dst_cap covers it all).  A reader whose buffer ends exactly at
 * the content thus gets the content in place and only the type byte spilled.
 * On success *len is the content's length (its first min(*len, dst_cap)
 * bytes in dst, the rest at the start of spill) and *type the inner type.
 * GM_ERR_PROTO when the tag does not verify (the sequence number then stays
 * where it was: bad_record_mac), or, past the tag (the sequence number moved
 * on), when the inner plaintext holds no type (*type 0: unexpected_message)
 * or more than GM_REC_MAX_PLAIN bytes of content (*len says how many:
 * record_overflow); -EINVAL when spill is needed and NULL.  After a failure
 * the output bytes (dst[min(dst_cap, inner)] and what went to spill) are
 * wiped: decryption happens in place before the tag is checked, and no
 * unauthenticated plaintext may stay in the caller's buffer. */
GM_MUST_CHECK int gm_rec_open(struct gm_rec_dir *d, const uint8_t *rec, size_t rec_len,
                              uint8_t *dst, size_t dst_cap, uint8_t *spill, size_t *len,
                              uint8_t *type);

#endif
