/*
 * agent/cluster/keyring.h - the CA key on the voters: any voter admits (agent/cluster/admit.h).
 *
 * Who holds the key: the node that ran `init`, and every node whose role in
 * the replicated state (agent/cluster/chieffsm.h) is `voter`.  Witnesses and spares
 * never hold it: a witness votes but neither trains nor admits, a spare only
 * follows the log.  The key is the file `ca.key` (mode 0600) in the state
 * directory, next to `tokens`, the token store (crypto/token.h), as on the
 * init node.
 *
 * Handover (KEYRING, over the mutual-TLS member link; never on disk
 * elsewhere, never in the raft log): every agent tick, a node that holds the
 * key sends one KEYRING to each member with an up link that the replicated
 * state records as a voter (not revoked), once per change: the payload is
 * the key and the token records (ids, verifiers, expiry, uses), and it is
 * sent again to every voter whenever this node's records change (a token
 * made or revoked here, a use recorded, a merge that learned something), so
 * a token made on one voter is known to the others within a tick or two.
 *   {"v":1, "ca_key": PEM, "tokens": the token store's lines}
 * The receiver takes the key only if it is the private half of the
 * cluster's CA certificate (else the link closes: GM_ERR_AUTH), and only
 * while its own recorded role is voter (else it declines, logged, and keeps
 * nothing); it saves it (0600), admits joins from then on, and merges the
 * token records (crypto/token.h: union; fewer uses left and revoked win).
 *
 * Token uses are not settled here but in the replicated state: before a
 * voter admits, it commits a token-use with the token's limit through the
 * chief (agent/cluster/chief.h), so one token cannot be spent twice through two
 * voters.  The uses left in the local records only follow that.
 *
 * Asking (KEYRING_REQ, empty): the push above samples the replicated state
 * at the holder's ticks, and each node applies the log at its own pace, so
 * a push alone can be lost: a demote and a re-promote applied between two of
 * the holder's ticks leave its per-link "sent" mark set (it is cleared only
 * while a tick sees the peer as no voter), and a KEYRING that reaches a
 * node before it applied its own promotion is declined.  So the receiver
 * asks for what it lacks: every tick, a node that holds no key while its
 * own applied state records it as a voter (not revoked) sends KEYRING_REQ to
 * each member with an up link that its state records as a voter, at most
 * once per GM_KEYRING_ASK_MS, until a key arrives.  A node answers with
 * KEYRING when it holds the key and its own state records the asker as a
 * voter (at most once per GM_KEYRING_ASK_MS a link), else it ignores the
 * request: the asker asks again once the states agree.  The decisions are
 * the pure gm_keyring_*_due functions below; tests/unit/test_keyring.c runs
 * every interleaving of a demote/re-promote, both nodes' log applies and
 * ticks, and the deliveries through them.
 *
 * Dropping: a node whose recorded role becomes witness or spare, or that is
 * revoked, deletes `ca.key` and `tokens` at the next tick and stops
 * admitting (logged as event=ca-key-dropped).  Demote a voter only while
 * another voter holds the key (it does within seconds of becoming a voter),
 * or the cluster can no longer admit.  A node made a voter again gets the
 * key again (it asks, above).
 * Limit: a node that held the key may have copied it; dropping or revoking
 * cannot take that back, and there is no CA rotation yet.
 *
 * Loop thread only (the gm_keyring_*_due functions and the codec: any thread).
 * gm_keyring_decode is fuzzed (tests/fuzz/fuzz_keyring.c).
 */
#ifndef GM_AGENT_CLUSTER_KEYRING_H
#define GM_AGENT_CLUSTER_KEYRING_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GM_KEYRING_MAX (4u << 20) /* bytes of one KEYRING payload */
#define GM_KEYRING_ASK_MS 1000    /* a voter without the key asks at most this often */

struct gm_agent;
struct gm_room;

extern const struct gm_room gm_keyring_room;

/* A KEYRING payload: *pem and *tokens malloc'd, NUL-terminated (secret: the caller wipes
 * them with sodium_memzero and frees them).  GM_ERR_PROTO for anything else. */
GM_MUST_CHECK int gm_keyring_decode(const uint8_t *p, size_t len, char **pem, size_t *pem_len,
                                    char **tokens, size_t *tokens_len);
/* *out malloc'd (secret, as above). */
GM_MUST_CHECK int gm_keyring_encode(const char *pem, const char *tokens, char **out, size_t *len);
/* This node's token records changed: send them to the other voters again. */
void gm_keyring_changed(struct gm_agent *a);
/* Hands the key to voters that lack this node's latest records; drops it when this node is
 * no voter any more; asks the voters for it when this node is a voter without it. */
void gm_keyring_tick(struct gm_agent *a);

/* The hand-over's decisions (pure; the tick and the handlers act on them).
 * Push: whether KEYRING goes out now on a link whose peer the state records as a voter
 * (peer_voter) or not; *sent is the link's mark (the keyring_gen last sent), cleared while
 * the peer is no voter. */
int gm_keyring_push_due(int peer_voter, uint64_t gen, uint64_t *sent);
/* Ask: whether this node, holding the key (holds) or not, recorded as a voter (self_voter)
 * or not, sends KEYRING_REQ to its voters now; *asked_ns: when it last asked, updated. */
int gm_keyring_ask_due(int holds, int self_voter, uint64_t now_ns, uint64_t *asked_ns);
/* Answer: whether a KEYRING_REQ on a link is answered with KEYRING now; *answered_ns: when
 * that link's last request was answered, updated. */
int gm_keyring_answer_due(int holds, int peer_voter, uint64_t now_ns, uint64_t *answered_ns);

#endif
