/*
 * crypto/tls.h - TLS 1.3 engine on memory BIOs; it never touches a socket.
 *
 * The caller moves ciphertext: gm_tls_feed() what arrived from the network,
 * gm_tls_out_take() what must be sent (after every call, the handshake and
 * reads included: TLS 1.3 reads may produce output, e.g. alerts).  For bulk
 * speed a caller may lend its read buffer (gm_tls_feed_borrow) and write the
 * pending output in place (gm_tls_out_peek/consume).
 *
 * Rules (all enforced here, not by callers):
 *  - TLS 1.3 only; no session tickets; AES-GCM / ChaCha20 suites.
 *  - After the handshake the engine seals and opens the records itself
 *    (crypto/record.h: fewer copies than OpenSSL 3.0's record layer).  It
 *    updates its write key before a key protects more records than RFC 8446
 *    5.5 allows (KeyUpdate, 4.6.3), takes the peer's KeyUpdate and answers
 *    update_requested; any other post-handshake message (a ticket) is
 *    refused.  A bad record ends the session with a fatal alert that says
 *    why; after close_notify or a fatal alert nothing more is written.
 *  - Member links: mutual authentication against the cluster CA only (an
 *    empty X509_STORE plus that CA; system roots are never loaded); the peer
 *    certificate must carry the URI SAN of this cluster; a denylist of
 *    revoked certificate serials is checked on every handshake.
 *  - Joins: a server built with accept_joins lets a client that offers ALPN
 *    "gradmesh-join/1" in without a certificate (gm_tls_is_join() then says
 *    so and the agent allows join messages only); every other client must
 *    present a certificate or the handshake fails with certificate_required.
 *    A joiner has no CA yet: it accepts the server only when the chain the
 *    server sends holds a self-signed CA whose SubjectPublicKeyInfo hashes to
 *    the pin from the token and that CA verifies the server's certificate for
 *    the token's cluster (gm_tls_pinned_ca() returns it).
 *
 * One gm_tls belongs to one link on the loop thread; a gm_tls_ctx may be
 * shared by the links of one thread.
 */
#ifndef GM_CRYPTO_TLS_H
#define GM_CRYPTO_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "crypto/identity.h"

#define GM_TLS_ALPN "gradmesh/1"
#define GM_TLS_ALPN_JOIN "gradmesh-join/1"

enum gm_tls_role {
    GM_TLS_ROLE_CLIENT = 1, /* member dialing a member */
    GM_TLS_ROLE_SERVER = 2, /* member accepting members (and joiners if allowed) */
    GM_TLS_ROLE_JOINER = 3, /* new machine with a token: no certificate, pinned CA */
};

struct gm_tls_config {
    const char *cluster;        /* required */
    const struct gm_cert *ca;   /* trust anchor; NULL only for joiners */
    const struct gm_cert *cert; /* own certificate; NULL only for joiners */
    const struct gm_key *key;
    const uint8_t *pin; /* joiners: SHA-256 SPKI pin of the CA (32 bytes) */
    int accept_joins;   /* servers: admit cert-less joiners (ALPN join) */
    /* Keep OpenSSL's record layer after the handshake instead of the
     * engine's own (crypto/record.h).  The wire is the same; tests use it to
     * check the two against each other, benchmarks to compare them. */
    int openssl_records;
    /* Records one write key protects before this side updates it: 0 is the
     * default, 2^24 (RFC 8446 5.5 allows AES-GCM 2^24.5); tests lower it.
     * GM_TLS_REKEY_AFTER=<n> in the environment lowers it too (never raises). */
    uint64_t rekey_after;
};

struct gm_tls_ctx; /* opaque */
struct gm_tls;     /* opaque */

GM_MUST_CHECK int gm_tls_ctx_new(const struct gm_tls_config *cfg, struct gm_tls_ctx **out);
void gm_tls_ctx_free(struct gm_tls_ctx *c);
/* Turns the admission of joiners on or off for handshakes that start from now on
 * (a node that receives or gives up the CA key). */
void gm_tls_ctx_set_accept_joins(struct gm_tls_ctx *c, int on);
/* Adds a revoked certificate serial (hex, either case: `openssl x509 -serial`
 * prints it upper case, gm_id_cert_serial lower case). */
GM_MUST_CHECK int gm_tls_ctx_deny(struct gm_tls_ctx *c, const char *serial);
/* 1 when serial (hex, either case) is on the denylist (beacons check it too). */
int gm_tls_ctx_denied(const struct gm_tls_ctx *c, const char *serial);

/* Replaces the certificate and key that new sessions present (renewal);
 * sessions already made keep theirs. */
GM_MUST_CHECK int gm_tls_ctx_set_identity(struct gm_tls_ctx *c, const struct gm_cert *cert,
                                          const struct gm_key *key);

/* role must fit the context: JOINER needs cfg.pin, CLIENT/SERVER need a certificate. */
GM_MUST_CHECK int gm_tls_new(struct gm_tls_ctx *c, enum gm_tls_role role, struct gm_tls **out);
void gm_tls_free(struct gm_tls *t);

/* Ciphertext in (copied). */
GM_MUST_CHECK int gm_tls_feed(struct gm_tls *t, const void *buf, size_t len);
/* Ciphertext in, without a copy: buf stays borrowed until gm_tls_feed_end,
 * which the caller must call before it reuses buf (it keeps what the engine
 * has not consumed yet; after a call returned -EAGAIN nothing is left). */
GM_MUST_CHECK int gm_tls_feed_borrow(struct gm_tls *t, const void *buf, size_t len);
GM_MUST_CHECK int gm_tls_feed_end(struct gm_tls *t);

/* Advances the handshake: 0 done, -EAGAIN needs input, GM_ERR_AUTH (peer
 * identity refused, by us or by the peer's alert), GM_ERR_PROTO (anything
 * else: garbage, wrong version). */
GM_MUST_CHECK int gm_tls_handshake(struct gm_tls *t);
/* Plaintext out: 0 with *n > 0, -EAGAIN when nothing is buffered,
 * GM_ERR_ABORTED when the peer closed cleanly (close_notify), or an error as
 * gm_tls_handshake. */
GM_MUST_CHECK int gm_tls_read(struct gm_tls *t, void *buf, size_t cap, size_t *n);
/* Plaintext in: all len bytes become records (16 KiB max each), a KeyUpdate
 * before them where one is due.  -EPIPE after this side sent close_notify
 * (gm_tls_shutdown) or a fatal alert, or received a fatal alert. */
GM_MUST_CHECK int gm_tls_write(struct gm_tls *t, const void *buf, size_t len);
size_t gm_tls_out_pending(const struct gm_tls *t);
/* Pending ciphertext in place (*p valid until the next gm_tls call), and
 * dropping n bytes of it once written: lets the caller write(2) many records
 * at once without copying them first. */
size_t gm_tls_out_peek(const struct gm_tls *t, const uint8_t **p);
void gm_tls_out_consume(struct gm_tls *t, size_t n);
/* All pending ciphertext as a block the caller now owns (no copy), e.g. for an
 * asynchronous write; hand it back with gm_tls_out_recycle (t may be NULL:
 * then it is freed) so the next detach reuses it.  -ENOENT when nothing is
 * pending. */
struct gm_tls_block {
    void *block; /* owned by the holder */
    size_t cap;
    const uint8_t *data;
    size_t len;
};
GM_MUST_CHECK int gm_tls_out_detach(struct gm_tls *t, struct gm_tls_block *b);
void gm_tls_out_recycle(struct gm_tls *t, struct gm_tls_block *b);
/* Copies up to cap bytes of pending ciphertext; returns the count. */
size_t gm_tls_out_take(struct gm_tls *t, void *buf, size_t cap);
/* Queues close_notify (take it with gm_tls_out_take); nothing after a fatal
 * alert or an earlier close_notify. */
void gm_tls_shutdown(struct gm_tls *t);

int gm_tls_handshake_done(const struct gm_tls *t);
/* 1 once the engine seals and opens the records itself (crypto/record.h),
 * 0 while OpenSSL does (before the handshake ends, or openssl_records). */
int gm_tls_own_records(const struct gm_tls *t);
int gm_tls_is_join(const struct gm_tls *t);

/* What the record layer did after the handshake (logs, tests). */
struct gm_tls_stats {
    uint64_t key_updates_sent, key_updates_received; /* both record layers */
    /* the engine's records only: under the current keys, and the most
     * records one key sealed or opened so far */
    uint64_t tx_seq, rx_seq, tx_seq_max, rx_seq_max;
    int last_alert_sent, last_alert_received; /* RFC 8446 6 descriptions, -1 none */
};
void gm_tls_get_stats(const struct gm_tls *t, struct gm_tls_stats *st);
/* Peer identity after the handshake ("" for a joiner's peer or before). */
const char *gm_tls_peer_node(const struct gm_tls *t);
const char *gm_tls_peer_serial(const struct gm_tls *t);
/* The raw Ed25519 public key of the peer's certificate (after the handshake). */
GM_MUST_CHECK int gm_tls_peer_pubkey(const struct gm_tls *t, uint8_t pub[GM_ID_PUB_LEN]);
/* Why the last call failed, for logs (alerts, verification); never secret. */
const char *gm_tls_reason(const struct gm_tls *t);
/* RFC 8446 exporter; label must start with "EXPORTER-". */
GM_MUST_CHECK int gm_tls_export(struct gm_tls *t, const char *label, uint8_t *out, size_t len);
/* Joiner: the pinned CA found in the server's chain (a new reference). */
GM_MUST_CHECK int gm_tls_pinned_ca(const struct gm_tls *t, struct gm_cert **out);

/* For adversarial tests and fuzzers only (tests/unit/test_crypto.c,
 * tests/fuzz/fuzz_tlsread.c): seal one record of any inner type with this
 * side's write key, bypassing every rule (no update, no close check), and
 * move the write key on without sending a KeyUpdate.  -EINVAL unless the
 * engine's own record layer is in use. */
GM_MUST_CHECK int gm_tls_seal_raw(struct gm_tls *t, uint8_t type, const uint8_t *content,
                                  size_t len, size_t pad);
GM_MUST_CHECK int gm_tls_update_tx_raw(struct gm_tls *t);
/* Also for tests: a new session object with t's current record keys and
 * sequence numbers and none of its other state, so a fuzzer can start many
 * inputs from one handshake.  It has no OpenSSL session: only reads, writes,
 * gm_tls_shutdown, the stats and the hooks above work on it. */
GM_MUST_CHECK int gm_tls_fork_raw(const struct gm_tls *t, struct gm_tls **out);

#endif
