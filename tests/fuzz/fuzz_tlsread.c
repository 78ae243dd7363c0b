/*
 * tests/fuzz/fuzz_tlsread.c - the TLS engine's read path after a real
 * handshake (crypto/tls.c: record framing, the record opener, alerts,
 * KeyUpdate, the bounds on empty runs, close_notify), which fuzz_record
 * cannot reach.  A CA and two nodes are made once (random keys) and a real
 * handshake runs once between a client (the fuzzer's side, c) and a server
 * (the engine under test, s), both on the engine's own record layer; every
 * input starts from copies of the two sessions as the handshake left them
 * (gm_tls_fork_raw: the same keys, sequence numbers 0), so an input does the
 * same in every run of the process.  GM_FUZZ_TLSREAD_HANDSHAKE=1 makes a new
 * handshake for every input instead (about 50 times slower).
 *
 * Byte 0 is the mode: bit 0 picks how the rest reaches s; bits 1-3 the size
 * of the pieces s is fed (1, 2, 3, 5, 16, 100, 1000 bytes or all at once);
 * bits 4-7 the room of each read (1, 2, 5, 16, 100, 1000, 16384, 16385 or
 * 65536 bytes).
 *   bit 0 clear, raw: the rest is the peer's ciphertext as it stands (headers
 *     and lengths are reached; no tag verifies);
 *   bit 0 set, sealed: the rest is a list of entries "op | type | arg | u16
 *     len | content[len]" that c turns into records with the session's real
 *     write key, so the fuzzer gets past the tag: op % 4 == 0 seals content
 *     as inner type `type` with arg % 32 zero bytes of padding (a record that
 *     is a whole KeyUpdate also moves c's key on, as a real peer does); 1
 *     seals it and flips bit arg % 8 of byte (arg * 37) of the record; 2
 *     repeats the last record sent (replay); 3 writes content as data through
 *     gm_tls_write (the engine's own framing and key updates).
 * After the bytes, s writes a little data and c must read it whole while s
 * is healthy (s's answers to KeyUpdate requests keep the two in step).
 *
 * Checked: reads return 0, -EAGAIN, GM_ERR_ABORTED, GM_ERR_PROTO or
 * GM_ERR_AUTH, and keep returning the same error; after an error other than
 * -EAGAIN and close_notify s writes nothing more (-EPIPE); in sealed mode the
 * data s returns is a prefix of the data records c sealed unchanged (a
 * changed, replayed or zero-typed record is never delivered); s never opens
 * more records under one key than its limit (here 2^24) allows.
 *
 * The state made once is the harness's only file-scope variable: libFuzzer
 * offers no other place to keep it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "crypto/identity.h"
#include "crypto/record.h"
#include "crypto/tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define EXPECT_MAX (1u << 20)
#define WIRE_MAX (1u << 20)

static struct {
    struct gm_key *cakey, *ka, *kb;
    struct gm_cert *ca, *ca_b, *cert_a, *cert_b;
    struct gm_tls_ctx *cs, *cc; /* server (s), client (c) */
    struct gm_tls *c0, *s0;     /* the sessions every input starts from */
    int per_input;              /* GM_FUZZ_TLSREAD_HANDSHAKE: a handshake per input */
    uint8_t buf[4 * (GM_REC_HDR + GM_REC_MAX_BODY)];
    uint8_t last[GM_REC_HDR + GM_REC_MAX_BODY]; /* the last record c sent, for replays */
    size_t last_len;
    uint8_t expect[EXPECT_MAX]; /* the data c sealed unchanged, in order */
    size_t expect_len, got_len;
    int expect_valid;
    uint8_t wire[WIRE_MAX]; /* what reaches s */
    size_t wire_len;
    uint8_t rd[65536];
    int verbose; /* GM_FUZZ_TLSREAD_VERBOSE set: each input's outcome on stderr */
} st;

static void need(int ok)
{
    if (!ok)
        abort();
}

static void node(const char *name, struct gm_key **k, struct gm_cert **cert)
{
    uint8_t pub[GM_ID_PUB_LEN];

    need(gm_id_key_generate(k) == 0);
    need(gm_id_key_public(*k, pub) == 0);
    need(gm_id_cert_issue(st.ca, st.cakey, "lab", name, pub, 10, cert) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct gm_tls_config cfg = {.cluster = "lab"};

    (void)argc;
    (void)argv;
    need(gm_id_key_generate(&st.cakey) == 0);
    need(gm_id_ca_create("lab", st.cakey, 30, &st.ca) == 0);
    node("n1", &st.ka, &st.cert_a);
    node("n2", &st.kb, &st.cert_b);
    cfg.ca = st.ca;
    cfg.cert = st.cert_a;
    cfg.key = st.ka;
    need(gm_tls_ctx_new(&cfg, &st.cs) == 0);
    cfg.cert = st.cert_b;
    cfg.key = st.kb;
    need(gm_tls_ctx_new(&cfg, &st.cc) == 0);
    st.verbose = getenv("GM_FUZZ_TLSREAD_VERBOSE") != NULL;
    st.per_input = getenv("GM_FUZZ_TLSREAD_HANDSHAKE") != NULL;
    return 0;
}

/* Everything `from` has to send, fed to `to`. */
static void move(struct gm_tls *from, struct gm_tls *to)
{
    size_t n;

    while ((n = gm_tls_out_take(from, st.buf, sizeof(st.buf))) > 0)
        need(gm_tls_feed(to, st.buf, n) == 0);
}

static void handshake(struct gm_tls **c, struct gm_tls **s)
{
    int ec = -EAGAIN, es = -EAGAIN;
    size_t n;

    need(gm_tls_new(st.cc, GM_TLS_ROLE_CLIENT, c) == 0);
    need(gm_tls_new(st.cs, GM_TLS_ROLE_SERVER, s) == 0);
    for (int i = 0; i < 10 && (ec == -EAGAIN || es == -EAGAIN); i++) {
        if (ec == -EAGAIN)
            ec = gm_tls_handshake(*c);
        move(*c, *s);
        if (es == -EAGAIN)
            es = gm_tls_handshake(*s);
        move(*s, *c);
    }
    need(ec == 0 && es == 0);
    need(gm_tls_read(*s, st.rd, sizeof(st.rd), &n) == -EAGAIN);
    need(gm_tls_own_records(*c) && gm_tls_own_records(*s));
}

static int valid_err(int err)
{
    return err == 0 || err == -EAGAIN || err == GM_ERR_ABORTED || err == GM_ERR_PROTO ||
           err == GM_ERR_AUTH;
}

/* Reads all s has with room `cap` a call; the data must continue the expected
 * stream (sealed mode).  Returns the last result. */
static int drain(struct gm_tls *s, size_t cap)
{
    size_t n;
    int err;

    for (;;) {
        err = gm_tls_read(s, st.rd, cap, &n);
        need(valid_err(err));
        if (err != 0)
            return err;
        need(n > 0 && n <= cap);
        if (st.expect_valid) {
            need(st.got_len + n <= st.expect_len);
            need(memcmp(st.rd, st.expect + st.got_len, n) == 0);
        }
        st.got_len += n;
    }
}

/* Appends k bytes to the wire for s (what does not fit is dropped: a long
 * run of replays could otherwise grow it without bound). */
static void to_wire(const uint8_t *p, size_t k)
{
    if (k > WIRE_MAX - st.wire_len)
        k = WIRE_MAX - st.wire_len;
    memcpy(st.wire + st.wire_len, p, k);
    st.wire_len += k;
}

static void expect_data(const uint8_t *p, size_t len)
{
    if (st.expect_len + len > EXPECT_MAX) {
        st.expect_valid = 0;
        return;
    }
    memcpy(st.expect + st.expect_len, p, len);
    st.expect_len += len;
}

/* The sealed entries (see the top comment) as c's records onto the wire. */
static void sealed(struct gm_tls *c, const uint8_t *p, size_t n)
{
    while (n >= 5) {
        uint8_t op = p[0] % 4, type = p[1], arg = p[2];
        size_t len = (size_t)p[3] << 8 | p[4], pad = arg % 32, k;
        p += 5;
        n -= 5;
        if (len > n)
            len = n;
        if (op == 2) { /* replay */
            to_wire(st.last, st.last_len);
            p += len;
            n -= len;
            continue;
        }
        if (op == 3) {
            need(gm_tls_write(c, p, len) == 0);
            expect_data(p, len);
        } else {
            if (len > GM_REC_MAX_PLAIN)
                len = GM_REC_MAX_PLAIN;
            need(gm_tls_seal_raw(c, type, p, len, pad) == 0);
            if (op == 0 && type == GM_REC_TYPE_HANDSHAKE && len == 5 && p[0] == 24 && p[1] == 0 &&
                p[2] == 0 && p[3] == 1 && p[4] <= 1)
                need(gm_tls_update_tx_raw(c) == 0); /* a whole KeyUpdate: next key */
            if (op == 0 && type == GM_REC_TYPE_DATA)
                expect_data(p, len);
            else if (type != GM_REC_TYPE_DATA && type != GM_REC_TYPE_ALERT &&
                     type != GM_REC_TYPE_HANDSHAKE)
                st.expect_valid = 0; /* type 0: the content's last non-zero byte is the type */
        }
        k = gm_tls_out_take(c, st.buf, sizeof(st.buf));
        if (op == 1 && k > 0)
            st.buf[(size_t)arg * 37 % k] ^= (uint8_t)(1u << (arg % 8));
        if (k <= sizeof(st.last)) {
            memcpy(st.last, st.buf, k);
            st.last_len = k;
        }
        to_wire(st.buf, k);
        p += len;
        n -= len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t pieces[8] = {1, 2, 3, 5, 16, 100, 1000, WIRE_MAX};
    static const size_t rooms[16] = {1,     2,     5,     16,    100,   1000,  16384, 16385,
                                     65536, 65536, 65536, 65536, 65536, 65536, 65536, 65536};
    struct gm_tls *c = NULL, *s = NULL;
    struct gm_tls_stats ss;
    size_t piece, cap, off = 0, n;
    int err = -EAGAIN;

    if (size < 1)
        return 0;
    piece = pieces[(data[0] >> 1) & 7];
    cap = rooms[data[0] >> 4];
    if (st.per_input) {
        handshake(&c, &s);
    } else {
        if (st.c0 == NULL)
            handshake(&st.c0, &st.s0);
        need(gm_tls_fork_raw(st.c0, &c) == 0);
        need(gm_tls_fork_raw(st.s0, &s) == 0);
    }
    st.wire_len = st.expect_len = st.got_len = st.last_len = 0;
    st.expect_valid = data[0] & 1;
    if (data[0] & 1)
        sealed(c, data + 1, size - 1);
    else
        to_wire(data + 1, size - 1);
    while (off < st.wire_len && (err == 0 || err == -EAGAIN)) {
        size_t k = st.wire_len - off < piece ? st.wire_len - off : piece;
        need(gm_tls_feed(s, st.wire + off, k) == 0);
        off += k;
        err = drain(s, cap);
    }
    /* an error stays, and after it (close_notify aside) s writes nothing */
    if (err != -EAGAIN) {
        need(gm_tls_read(s, st.rd, cap, &n) == err);
        if (err != GM_ERR_ABORTED)
            need(gm_tls_write(s, "x", 1) == -EPIPE);
    }
    gm_tls_get_stats(s, &ss);
    if (st.verbose)
        fprintf(stderr, "err=%d data=%zu/%zu%s key_updates=%llu alert_sent=%d reason=\"%s\"\n", err,
                st.got_len, st.expect_len, st.expect_valid ? "" : "(unchecked)",
                (unsigned long long)ss.key_updates_received, ss.last_alert_sent, gm_tls_reason(s));
    need(ss.rx_seq_max <= (UINT64_C(1) << 24) + 1);
    /* a healthy s (or one whose peer only closed) still talks to c: its
     * answers to KeyUpdate requests kept the keys in step */
    if (err == -EAGAIN || err == GM_ERR_ABORTED) {
        size_t got = 0;
        int e;
        need(gm_tls_write(s, "ping", 4) == 0);
        move(s, c);
        while ((e = gm_tls_read(c, st.rd + got, sizeof(st.rd) - got, &n)) == 0)
            got += n;
        need(e == -EAGAIN && got == 4 && memcmp(st.rd, "ping", 4) == 0);
    }
    gm_tls_free(c);
    gm_tls_free(s);
    return 0;
}
