/*
 * crypto/beacon.h - discovery beacons: sealing, signing, opening, replay filter.
 *
 * A beacon is one UDP datagram (at most GM_BEACON_MAX bytes) sent to the
 * discovery multicast group.  It is only a hint: whoever acts on it confirms
 * the peer over mutual TLS.  Three kinds share a clear 8-byte header
 *   "GMB1" | u8 kind | u8 version (1) | u16 reserved (0)
 * which is authenticated as associated data wherever a seal follows it.
 *
 *  MEMBER  sent by every agent.  Payload fields (ts, seq, flags, port, host,
 *          cluster, node, certificate DER) are signed with the node's Ed25519
 *          key; payload + signature are sealed (XChaCha20-Poly1305, random
 *          24-byte nonce in clear) with the cluster beacon key, a random
 *          32-byte secret every member holds (beacon.key, handed out in
 *          JOIN_ACCEPT).  Opening checks the seal, then that the certificate
 *          was issued by the cluster CA and names the beacon's cluster and
 *          node, then the signature.  So a beacon is ignored when it is
 *          forged or damaged (seal), from a foreign cluster (seal; and when
 *          the seal is right, the CA check), or from a key that does not match
 *          its certificate (signature).
 *  JOIN    sent by an admitter once per live invite token, sealed with
 *          jkey = BLAKE2b-256(key = v, "gradmesh-beacon-join-v1") where v is
 *          the token verifier (crypto/token.h): only holders of that token
 *          (and the admitter) can read or forge it.  A joiner trial-opens
 *          every JOIN beacon with its own jkey; it still checks the CA pin in
 *          TLS before it sends anything secret.
 *  SOLICIT "answer now": 8 header bytes + 16 random bytes, carries nothing
 *          secret; agents answer with their beacons (rate-limited).
 *
 * Replay: every beacon carries the sender's wall clock (ms) and a per-sender
 * sequence number.  gm_beacon_seen rejects beacons outside +-window of the
 * receiver's clock and any (ts, seq) not greater than the last one accepted
 * from the same node, so a captured beacon sent again is ignored.
 *
 * Pure functions plus one table; no sockets.  Thread-safe except that one
 * gm_beacon_seen belongs to one thread.
 */
#ifndef GM_CRYPTO_BEACON_H
#define GM_CRYPTO_BEACON_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "crypto/identity.h"
#include "crypto/token.h"

#define GM_BEACON_MAX 1400 /* bytes in one datagram (fits any Ethernet MTU) */
#define GM_BEACON_KEY_LEN 32
#define GM_BEACON_HOST_MAX 46 /* INET6_ADDRSTRLEN */
#define GM_BEACON_WINDOW_MS (300 * 1000)
#define GM_BEACON_F_ADMITTER 1u /* the sender admits joins */

enum gm_beacon_kind {
    GM_BEACON_MEMBER = 1,
    GM_BEACON_JOIN = 2,
    GM_BEACON_SOLICIT = 3,
};

struct gm_beacon {
    enum gm_beacon_kind kind;
    char cluster[GM_ID_NAME_MAX + 1];
    char node[GM_ID_NAME_MAX + 1];
    char host[GM_BEACON_HOST_MAX]; /* advertised IP literal, "" = the datagram's source */
    uint16_t port;                 /* TCP listen port */
    uint32_t flags;                /* GM_BEACON_F_* */
    int64_t ts_ms;                 /* sender's wall clock, ms since the epoch */
    uint64_t seq;                  /* per-sender counter, grows by one a beacon */
};

/* Kind of a datagram from its clear header; GM_ERR_FORMAT when it is none. */
GM_MUST_CHECK int gm_beacon_kind(const uint8_t *p, size_t len);

/* Random beacon key; files hold it as 64 hex digits, mode 0600 (written
 * atomically, refused on load when group/other may read it, like node.key). */
void gm_beacon_key_generate(uint8_t k[GM_BEACON_KEY_LEN]);
GM_MUST_CHECK int gm_beacon_key_save(const char *path, const uint8_t k[GM_BEACON_KEY_LEN]);
/* -ENOENT when missing, -EPERM when readable by others, GM_ERR_FORMAT when malformed. */
GM_MUST_CHECK int gm_beacon_key_load(const char *path, uint8_t k[GM_BEACON_KEY_LEN]);

/* MEMBER: b->kind is ignored.  -ENOSPC when cap is too small. */
GM_MUST_CHECK int gm_beacon_seal_member(const struct gm_beacon *b, const struct gm_cert *cert,
                                        const struct gm_key *key,
                                        const uint8_t bkey[GM_BEACON_KEY_LEN], uint8_t *out,
                                        size_t cap, size_t *len);
/* GM_ERR_FORMAT: not a MEMBER beacon, truncated, malformed inside the seal.
 * GM_ERR_AUTH: seal does not open with bkey, certificate not issued by ca or
 * naming another cluster/node, bad signature.  serial: the certificate's
 * serial (lower-case hex) for the caller's denylist. */
GM_MUST_CHECK int gm_beacon_open_member(const uint8_t *p, size_t len,
                                        const uint8_t bkey[GM_BEACON_KEY_LEN],
                                        const struct gm_cert *ca, struct gm_beacon *b,
                                        char serial[41]);

void gm_beacon_join_key(const uint8_t v[GM_TOKEN_VERIFIER_LEN], uint8_t jkey[GM_BEACON_KEY_LEN]);
GM_MUST_CHECK int gm_beacon_seal_join(const struct gm_beacon *b,
                                      const uint8_t jkey[GM_BEACON_KEY_LEN], uint8_t *out,
                                      size_t cap, size_t *len);
/* GM_ERR_FORMAT / GM_ERR_AUTH as gm_beacon_open_member. */
GM_MUST_CHECK int gm_beacon_open_join(const uint8_t *p, size_t len,
                                      const uint8_t jkey[GM_BEACON_KEY_LEN], struct gm_beacon *b);

GM_MUST_CHECK int gm_beacon_solicit(uint8_t *out, size_t cap, size_t *len);

/* Replay filter over at most max_nodes senders (oldest forgotten first). */
struct gm_beacon_seen;
GM_MUST_CHECK int gm_beacon_seen_new(size_t max_nodes, int64_t window_ms,
                                     struct gm_beacon_seen **out);
void gm_beacon_seen_free(struct gm_beacon_seen *s);
/* 0: fresh, now recorded.  -ESTALE: ts_ms further than the window from
 * now_ms.  -EEXIST: the same (ts_ms, seq) as the last accepted from b->node
 * (a copy that came by a second interface, or a replay of that one).
 * -EALREADY: (ts_ms, seq) before the last accepted from b->node (a replay). */
GM_MUST_CHECK int gm_beacon_seen_check(struct gm_beacon_seen *s, const struct gm_beacon *b,
                                       int64_t now_ms);

#endif
