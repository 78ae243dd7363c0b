/*
 * agent/cluster/chiefmsg.h - the payloads of the chief's own frames, CHIEF_REQ and CHIEF_ANS:
 * link traffic between a member and the chief (agent/cluster/chief.c), not replicated
 * state, so they live beside the state machine (chieffsm.h) rather than in it.
 *
 * JSON objects checked like the machine's commands: only the keys a form names, every field
 * for type, length and character set; decoders return GM_ERR_PROTO for anything else and
 * leave the struct zeroed.  Pure functions; any thread.  Fuzzed by tests/fuzz/fuzz_chiefcmd.c.
 */
#ifndef GM_AGENT_CLUSTER_CHIEFMSG_H
#define GM_AGENT_CLUSTER_CHIEFMSG_H

#include <stddef.h>
#include <stdint.h>

#include "agent/cluster/chieffsm.h"
#include "common/err.h"

/* CHIEF_REQ: a revoke or role change a member forwards to the chief,
 * {"cmd": "revoke"|"role", "node": N, "role"?: R} (role only, and required, for "role"),
 * or a token use a voter records before it admits a joiner,
 * {"cmd": "use", "token": HEX16, "limit": N} (no node). */
struct gm_chief_req {
    char cmd[8];
    gm_chief_name node;
    enum gm_chief_role role;            /* cmd "role" */
    char token[GM_CHIEF_TOKEN_HEX + 1]; /* cmd "use" */
    int64_t limit;                      /* cmd "use": 1..GM_CHIEF_TOKEN_USES_MAX */
};

/* CHIEF_ANS: its outcome, {"code": 0 or a negative error, "message": printable text}. */
#define GM_CHIEF_MSG_MAX 200
struct gm_chief_ans {
    int code;
    char message[GM_CHIEF_MSG_MAX];
};

GM_MUST_CHECK int gm_chief_req_encode(const struct gm_chief_req *r, char **out, size_t *len);
GM_MUST_CHECK int gm_chief_req_decode(const uint8_t *p, size_t len, struct gm_chief_req *r);
GM_MUST_CHECK int gm_chief_ans_encode(const struct gm_chief_ans *a, char **out, size_t *len);
GM_MUST_CHECK int gm_chief_ans_decode(const uint8_t *p, size_t len, struct gm_chief_ans *a);

#endif
