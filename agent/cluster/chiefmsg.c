/* agent/cluster/chiefmsg.c - CHIEF_REQ and CHIEF_ANS payloads (see chiefmsg.h). */
#include "agent/cluster/chiefmsg.h"

#include <string.h>

#include <jansson.h>

#include "agent/net/jsonmsg.h"
#include "crypto/identity.h"

int gm_chief_req_encode(const struct gm_chief_req *r, char **out, size_t *len)
{
    json_t *o =
        strcmp(r->cmd, "role") == 0  ? json_pack("{s:s, s:s, s:s}", "cmd", r->cmd, "node", r->node,
                                                 "role", gm_chief_role_name(r->role))
        : strcmp(r->cmd, "use") == 0 ? json_pack("{s:s, s:s, s:I}", "cmd", r->cmd, "token",
                                                 r->token, "limit", (json_int_t)r->limit)
                                     : json_pack("{s:s, s:s}", "cmd", r->cmd, "node", r->node);

    return gm_jsonmsg_dump(o, out, len);
}

int gm_chief_req_decode(const uint8_t *p, size_t len, struct gm_chief_req *r)
{
    static const char *const keys[] = {"cmd", "node", "role", "token", "limit"};
    json_t *o;
    char role[16];
    uint64_t limit = 0;
    int err = GM_ERR_PROTO;

    memset(r, 0, sizeof(*r));
    if (len > GM_CHIEF_CMD_MAX)
        return GM_ERR_PROTO;
    o = gm_jsonmsg_load(p, len);
    if (!json_is_object(o) || gm_jsonmsg_keys_only(o, keys, 5) != 0 ||
        gm_jsonmsg_get_str(o, "cmd", r->cmd, sizeof(r->cmd), 0) != 0)
        goto out;
    if (strcmp(r->cmd, "use") == 0) { /* a voter records a token use before it admits */
        err = json_object_get(o, "node") == NULL && json_object_get(o, "role") == NULL &&
                      gm_jsonmsg_get_str(o, "token", r->token, sizeof(r->token), 0) == 0 &&
                      gm_jsonmsg_is_hex(r->token, GM_CHIEF_TOKEN_HEX) &&
                      gm_jsonmsg_get_uint(o, "limit", GM_CHIEF_TOKEN_USES_MAX, &limit) == 0 &&
                      limit >= 1
                  ? 0
                  : GM_ERR_PROTO;
        r->limit = (int64_t)limit;
        goto out;
    }
    if (gm_jsonmsg_get_str(o, "node", r->node, sizeof(r->node), 0) != 0 ||
        !gm_id_name_valid(r->node) || json_object_get(o, "token") != NULL ||
        json_object_get(o, "limit") != NULL)
        goto out;
    if (strcmp(r->cmd, "revoke") == 0)
        err = json_object_get(o, "role") == NULL ? 0 : GM_ERR_PROTO;
    else if (strcmp(r->cmd, "role") == 0)
        err = gm_jsonmsg_get_str(o, "role", role, sizeof(role), 0) == 0 &&
                      gm_chief_role_parse(role, &r->role) == 0
                  ? 0
                  : GM_ERR_PROTO;
out:
    json_decref(o);
    if (err != 0)
        memset(r, 0, sizeof(*r));
    return err;
}

int gm_chief_ans_encode(const struct gm_chief_ans *a, char **out, size_t *len)
{
    return gm_jsonmsg_dump(json_pack("{s:i, s:s}", "code", a->code, "message", a->message), out,
                           len);
}

int gm_chief_ans_decode(const uint8_t *p, size_t len, struct gm_chief_ans *a)
{
    static const char *const keys[] = {"code", "message"};
    json_t *o, *code;
    int err = GM_ERR_PROTO;

    memset(a, 0, sizeof(*a));
    if (len > GM_CHIEF_CMD_MAX)
        return GM_ERR_PROTO;
    o = gm_jsonmsg_load(p, len);
    code = json_object_get(o, "code");
    if (json_is_object(o) && gm_jsonmsg_keys_only(o, keys, 2) == 0 && json_is_integer(code) &&
        json_integer_value(code) <= 0 && json_integer_value(code) >= -100000 &&
        gm_jsonmsg_get_str(o, "message", a->message, sizeof(a->message), GM_JSONMSG_PRINTABLE) ==
            0) { /* shown to people */
        err = 0;
        a->code = (int)json_integer_value(code);
    }
    json_decref(o);
    if (err != 0)
        memset(a, 0, sizeof(*a));
    return err;
}
