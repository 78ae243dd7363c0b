/*
 * agent/net/proto.h - message types of the wire protocol and their payloads.
 *
 * Control payloads are JSON objects (jansson, duplicate keys rejected) with
 * every field checked for type, length and character set on decode; decoders
 * return GM_ERR_PROTO for anything else and never trust a length.  Bulk
 * payloads (GM_MSG_BULK) are raw bytes, chunked with GM_FRAME_F_MORE.
 *
 *   HELLO        {node, listen, class?, mtu?, proto, version}  both sides, first frame on a
 *                member link; class/mtu: the sender's view of this link (egress interface);
 *                proto: the peer protocol version it speaks (GM_PROTO_VERSION); version: its
 *                build (agent/service/version.h).  A hello without proto is protocol 1 (builds
 *                before versioning), refused by name: a protocol-1 peer refuses our hello too.
 *   MEMBERS      {members: [{node, address}]}        gossip of the member list
 *   PING / PONG  8-byte sender timestamp (ns); PONG appends the responder's
 *                wall clock (8 bytes, ns since the epoch)  keepalive, RTT, clock skew
 *   BULK         raw chunk                           tensors, benchmark data
 *   PROBE        raw chunk (zeros)                   throughput probe on link up
 *   RATE         {req, bytes, us}                    receiver -> sender: a bulk/probe train
 *                of `bytes` (after its first chunk) took `us` microseconds to arrive
 *   LINK_STATS   {links: [{node, class, rtt_ms, throughput_mbps, reach}]}
 *                the sender's measurements of its own links (doctor's matrix)
 *   BYE          empty                               clean shutdown
 *   ERROR        {code, message}                     sent before closing on a refusal
 *   JOIN_REQUEST {token_id, node, pubkey, listen, proof}    joiner -> admitter
 *   JOIN_ACCEPT  {node, cert, ca, members, beacon_key, proof} admitter -> joiner
 *   RENEW_REQUEST empty: a member asks the admitter for a fresh certificate
 *                for the key and name of the certificate it linked with
 *   RENEW_ACCEPT {cert}                                      admitter -> member
 *   KEYRING      {v, ca_key, tokens}: the CA key and token records, to a voter
 * (agent/cluster/keyring.h) KEYRING_REQ  empty: a voter that lacks the CA key asks a voter for
 * KEYRING JOB_OFFER, JOB_CHECK, JOB_GROUP, JOB_REPORT, JOB_END, JOB_SUBMIT, JOB_SWITCH: job control
 *   (agent/jobs/jobmsg.h)
 *   TRAIN        raw chunk of a collective message; req = generation << 32 | sequence
 *                (agent/jobs/xport.h)
 *   RAFT         op byte + raft bytes of one channel; req = channel id (agent/cluster/chiefnet.h)
 *   CHIEF_REQ    {cmd, node, role?}: a change a member forwards to the chief, or
 *                {cmd: "use", token, limit}: a voter's token use (agent/cluster/chiefmsg.h)
 *   CHIEF_ANS    {code, message, index}: its outcome; req = the member's request id
 *
 * Pure functions; any thread.
 */
#ifndef GM_AGENT_NET_PROTO_H
#define GM_AGENT_NET_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/err.h"
#include "crypto/identity.h"
#include "crypto/join.h"
#include "crypto/token.h"

enum gm_msg_type {
    GM_MSG_HELLO = 1,
    GM_MSG_MEMBERS = 2,
    GM_MSG_PING = 3,
    GM_MSG_PONG = 4,
    GM_MSG_BULK = 5,
    GM_MSG_BYE = 6,
    GM_MSG_ERROR = 7,
    GM_MSG_PROBE = 8,
    GM_MSG_RATE = 9,
    GM_MSG_LINK_STATS = 10,
    GM_MSG_JOIN_REQUEST = 16,
    GM_MSG_JOIN_ACCEPT = 17,
    GM_MSG_RENEW_REQUEST = 18,
    GM_MSG_RENEW_ACCEPT = 19,
    GM_MSG_KEYRING = 20, /* the CA key and token records, to a voter (agent/cluster/keyring.h) */
    GM_MSG_KEYRING_REQ = 21, /* empty: a voter without the CA key asks a voter for it */
    GM_MSG_JOB_OFFER = 32,   /* agent/jobs/jobmsg.h: the job control messages */
    GM_MSG_JOB_CHECK = 33,
    GM_MSG_JOB_GROUP = 34,
    GM_MSG_JOB_REPORT = 35,
    GM_MSG_JOB_END = 36,
    GM_MSG_JOB_SUBMIT = 37,
    GM_MSG_JOB_SWITCH = 38, /* codec = auto changes codec at a step (agent/jobs/jobmsg.h) */
    GM_MSG_TRAIN = 40,      /* bulk: one collective message, chunked (agent/jobs/xport.h) */
    GM_MSG_RAFT = 44,       /* raft's bytes on a channel of the link (agent/cluster/chiefnet.h) */
    GM_MSG_CHIEF_REQ = 45,  /* a member asks the chief for a change (agent/cluster/chief.h) */
    GM_MSG_CHIEF_ANS = 46,  /* the chief's answer, once committed or refused */
    GM_MSG_CKPT_DATA = 48,  /* bulk: a checkpoint file with its header (agent/jobs/ckptxfer.h) */
    GM_MSG_CKPT_ACK = 49,   /* JSON: a checkpoint received (or not) */
};

#define GM_ADDR_MAX 64

/* The peer protocol: bumped when a message changes in a way an older peer cannot read.
 * Each side refuses a peer older than GM_PROTO_MIN by name ("runs an older gradmesh");
 * a newer peer decides for itself whether it can still talk to this one. */
#define GM_PROTO_VERSION 2
/* The refusal a member sends a revoked node (an error frame, GM_ERR_AUTH): the node learns
 * from it that it is revoked even when the raft entry cannot reach it any more. */
#define GM_PROTO_REVOKED_MSG "this node is revoked"
#define GM_PROTO_MIN 2
#define GM_PROTO_VERSION_MAX 64 /* a peer's version string, with its NUL */
#define GM_MEMBERS_MAX 1024
#define GM_PEM_MAX 8192

struct gm_member {
    char node[GM_ID_NAME_MAX + 1];
    char address[GM_ADDR_MAX]; /* "ip:port" or "[ip6]:port" */
};

#define GM_BEACON_KEY_BYTES 32
#define GM_CLASS_NAME_MAX 8

struct gm_msg_hello {
    char node[GM_ID_NAME_MAX + 1];
    char listen[GM_ADDR_MAX];
    char link_class[GM_CLASS_NAME_MAX]; /* "lan" | "tunnel" | "wan" | "" (unknown) */
    int mtu;                            /* 0: unknown */
    int proto;                          /* decode: 1 when absent (a build before versioning) */
    char version[GM_PROTO_VERSION_MAX]; /* "" when absent */
};

struct gm_msg_rate {
    uint64_t req, bytes, us;
};

struct gm_link_stat {
    char node[GM_ID_NAME_MAX + 1];
    char link_class[GM_CLASS_NAME_MAX];
    double rtt_ms;          /* < 0: unknown */
    double throughput_mbps; /* < 0: unknown */
    int reach;              /* 1 yes, 0 no, -1 unknown */
};

struct gm_msg_join_request {
    uint8_t token_id[GM_TOKEN_ID_LEN];
    char node[GM_ID_NAME_MAX + 1];
    uint8_t pubkey[GM_ID_PUB_LEN];
    char listen[GM_ADDR_MAX];
    uint8_t proof[GM_JOIN_PROOF_LEN];
};

struct gm_msg_join_accept {
    char node[GM_ID_NAME_MAX + 1];
    char *cert_pem;            /* owned */
    char *ca_pem;              /* owned */
    struct gm_member *members; /* owned, n_members */
    size_t n_members;
    uint8_t beacon_key[GM_BEACON_KEY_BYTES];
    uint8_t proof[GM_JOIN_PROOF_LEN];
};

int gm_proto_type_known(uint16_t type);
const char *gm_proto_type_name(uint16_t type);

/* Payload field checks shared by the JSON messages: s is exactly n lower-case hex digits;
 * s is printable ASCII (what is shown to people).  The same as gm_jsonmsg_is_hex and
 * gm_jsonmsg_printable (agent/net/jsonmsg.h), which new code calls. */
bool gm_proto_is_hex(const char *s, size_t n);
bool gm_proto_printable(const char *s);

/* "1.2.3.4:5" or "[::1]:5" (IP literals only) -> sockaddr. -EINVAL otherwise. */
GM_MUST_CHECK int gm_proto_addr_parse(const char *s, struct sockaddr_storage *out);
/* sockaddr -> "ip:port" */
GM_MUST_CHECK int gm_proto_addr_format(const struct sockaddr *sa, char out[GM_ADDR_MAX]);

/* When advertised names the wildcard address (0.0.0.0 or ::), replaces its host
 * with observed's (the address the peer connected from), keeping the port. */
void gm_proto_addr_fill_host(const char *advertised, const char *observed, char out[GM_ADDR_MAX]);

/* Encoders return a malloc'd JSON text (*len without NUL) or -ENOMEM/-EINVAL. */
GM_MUST_CHECK int gm_proto_hello_encode(const struct gm_msg_hello *m, char **out, size_t *len);
GM_MUST_CHECK int gm_proto_hello_decode(const uint8_t *p, size_t len, struct gm_msg_hello *m);
GM_MUST_CHECK int gm_proto_rate_encode(const struct gm_msg_rate *m, char **out, size_t *len);
GM_MUST_CHECK int gm_proto_rate_decode(const uint8_t *p, size_t len, struct gm_msg_rate *m);
GM_MUST_CHECK int gm_proto_link_stats_encode(const struct gm_link_stat *s, size_t n, char **out,
                                             size_t *len);
/* *s malloc'd (free()); at most GM_MEMBERS_MAX entries. */
GM_MUST_CHECK int gm_proto_link_stats_decode(const uint8_t *p, size_t len, struct gm_link_stat **s,
                                             size_t *n);
GM_MUST_CHECK int gm_proto_members_encode(const struct gm_member *m, size_t n, char **out,
                                          size_t *len);
/* *members is malloc'd (free()). */
GM_MUST_CHECK int gm_proto_members_decode(const uint8_t *p, size_t len, struct gm_member **members,
                                          size_t *n);
GM_MUST_CHECK int gm_proto_error_encode(int code, const char *message, char **out, size_t *len);
GM_MUST_CHECK int gm_proto_error_decode(const uint8_t *p, size_t len, int *code, char *message,
                                        size_t cap);
GM_MUST_CHECK int gm_proto_join_request_encode(const struct gm_msg_join_request *m, char **out,
                                               size_t *len);
GM_MUST_CHECK int gm_proto_join_request_decode(const uint8_t *p, size_t len,
                                               struct gm_msg_join_request *m);
/* The bytes the join proofs bind to (request fields, canonical): writes at most cap. */
size_t gm_proto_join_context(const struct gm_msg_join_request *m, char *out, size_t cap);
/* The bytes the admitter's proof binds to: request context | cert | beacon key
 * (hex).  *out malloc'd (NULL on no memory); returns its length. */
size_t gm_join_accept_context(const char *ctx, size_t clen, const char *cert_pem,
                              const uint8_t beacon_key[GM_BEACON_KEY_BYTES], char **out);
GM_MUST_CHECK int gm_proto_join_accept_encode(const struct gm_msg_join_accept *m, char **out,
                                              size_t *len);
GM_MUST_CHECK int gm_proto_join_accept_decode(const uint8_t *p, size_t len,
                                              struct gm_msg_join_accept *m);
void gm_proto_join_accept_free(struct gm_msg_join_accept *m);
GM_MUST_CHECK int gm_proto_renew_encode(const char *cert_pem, char **out, size_t *len);
/* *cert_pem malloc'd. */
GM_MUST_CHECK int gm_proto_renew_decode(const uint8_t *p, size_t len, char **cert_pem);

#endif
