/*
 * tests/fuzz/fuzz_record.c - the TLS 1.3 record opener (crypto/record.h), the
 * parser that sees a link's bytes after every handshake.  Byte 0 picks:
 *   even: the rest is a ciphertext stream read as the engine reads it
 *         (gm_rec_size, then gm_rec_open of each whole record) with a fixed
 *         key; records the fuzzer cannot forge stop at the tag, headers and
 *         lengths do not;
 *   odd:  the rest is a list of inner plaintexts "type | pad | u16 len |
 *         content", sealed with the same key and opened again: what opens
 *         must give back the content and type (else abort), read with room
 *         for all of it, exactly the content, half of it or nothing in place
 *         (the rest spilled), record by record; with type 0
 *         the content's last non-zero byte becomes the type, and a record
 *         of zeros only must be refused.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t rec[GM_REC_HDR + GM_REC_MAX_BODY], dst[GM_REC_MAX_BODY], spill[GM_REC_MAX_BODY];

static void keys(struct gm_rec_dir *tx, struct gm_rec_dir *rx)
{
    static const uint8_t secret[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

    if (gm_rec_init(tx, EVP_aes_128_gcm(), EVP_sha256(), secret, sizeof(secret), 1) != 0 ||
        gm_rec_init(rx, EVP_aes_128_gcm(), EVP_sha256(), secret, sizeof(secret), 0) != 0)
        abort();
}

static void stream(struct gm_rec_dir *rx, const uint8_t *p, size_t n)
{
    uint8_t type;
    size_t len;

    while (n > 0) {
        long sz = gm_rec_size(p, n);
        if (sz <= 0 || (size_t)sz > n)
            return;
        /* the first half in place, the rest spilled (as a reader with a short buffer) */
        if (gm_rec_open(rx, p, (size_t)sz, dst, (size_t)sz / 2, spill, &len, &type) != 0)
            return; /* the engine closes the link here */
        if (len > GM_REC_MAX_PLAIN || len + 1 > (size_t)sz - GM_REC_HDR - GM_REC_TAG)
            abort();
        p += sz;
        n -= (size_t)sz;
    }
}

/* Opens rec with room for cap bytes in place and the rest spilled, and joins
 * the content back into one buffer (dst). */
static int open_joined(struct gm_rec_dir *rx, size_t r, size_t cap, size_t *got, uint8_t *type)
{
    int err = gm_rec_open(rx, rec, r, dst, cap, spill, got, type);

    if (err == 0 && *got > cap)
        memcpy(dst + cap, spill, *got - cap);
    return err;
}

static void sealed(struct gm_rec_dir *tx, struct gm_rec_dir *rx, const uint8_t *p, size_t n)
{
    for (size_t k = 0; n >= 4; k++) {
        uint8_t type = p[0], got_type;
        size_t pad = p[1], len = (size_t)p[2] << 8 | p[3], got, cap;
        long r;
        p += 4;
        n -= 4;
        if (len > n)
            len = n;
        r = gm_rec_seal(tx, type, p, len, pad, rec);
        if (r < 0) {
            if (len + 1 + pad + GM_REC_TAG <= GM_REC_MAX_BODY && len <= GM_REC_MAX_PLAIN)
                abort(); /* a valid record refused */
            return;
        }
        if (gm_rec_size(rec, (size_t)r) != r)
            abort();
        /* room: all, the content exactly (the type spills), half of it, none */
        cap = k % 4 == 0 ? (size_t)r : k % 4 == 1 ? len : k % 4 == 2 ? len / 2 : 0;
        if (type == 0) { /* a zero type is padding: the content's last non-zero byte is the type */
            size_t want = len;
            while (want > 0 && p[want - 1] == 0)
                want--;
            if (open_joined(rx, (size_t)r, cap, &got, &got_type) != 0) {
                if (want != 0)
                    abort();
                return; /* zeros only: refused */
            }
            if (want == 0 || got != want - 1 || got_type != p[want - 1] ||
                (got > 0 && memcmp(dst, p, got) != 0))
                abort();
        } else if (open_joined(rx, (size_t)r, cap, &got, &got_type) != 0 || got_type != type ||
                   got != len || (len > 0 && memcmp(dst, p, len) != 0)) {
            abort();
        }
        p += len;
        n -= len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gm_rec_dir tx, rx;

    if (size < 1)
        return 0;
    keys(&tx, &rx);
    if (data[0] & 1)
        sealed(&tx, &rx, data + 1, size - 1);
    else
        stream(&rx, data + 1, size - 1);
    gm_rec_free(&tx);
    gm_rec_free(&rx);
    return 0;
}
