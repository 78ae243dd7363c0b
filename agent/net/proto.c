/* agent/net/proto.c - see proto.h.  JSON via jansson. */
#include "agent/net/proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include <jansson.h>
#include <sodium.h>
#include <uv.h>

#include "agent/net/jsonmsg.h"

int gm_proto_type_known(uint16_t type)
{
    switch (type) {
    case GM_MSG_HELLO:
    case GM_MSG_MEMBERS:
    case GM_MSG_PING:
    case GM_MSG_PONG:
    case GM_MSG_BULK:
    case GM_MSG_BYE:
    case GM_MSG_ERROR:
    case GM_MSG_PROBE:
    case GM_MSG_RATE:
    case GM_MSG_LINK_STATS:
    case GM_MSG_JOIN_REQUEST:
    case GM_MSG_JOIN_ACCEPT:
    case GM_MSG_RENEW_REQUEST:
    case GM_MSG_RENEW_ACCEPT:
    case GM_MSG_KEYRING:
    case GM_MSG_KEYRING_REQ:
    case GM_MSG_JOB_OFFER:
    case GM_MSG_JOB_CHECK:
    case GM_MSG_JOB_GROUP:
    case GM_MSG_JOB_REPORT:
    case GM_MSG_JOB_END:
    case GM_MSG_JOB_SUBMIT:
    case GM_MSG_JOB_SWITCH:
    case GM_MSG_TRAIN:
    case GM_MSG_RAFT:
    case GM_MSG_CHIEF_REQ:
    case GM_MSG_CHIEF_ANS:
    case GM_MSG_CKPT_DATA:
    case GM_MSG_CKPT_ACK:
        return 1;
    default:
        return 0;
    }
}

bool gm_proto_is_hex(const char *s, size_t n)
{
    return gm_jsonmsg_is_hex(s, n);
}

bool gm_proto_printable(const char *s)
{
    return gm_jsonmsg_printable(s);
}

const char *gm_proto_type_name(uint16_t type)
{
    switch (type) {
    case GM_MSG_HELLO:
        return "hello";
    case GM_MSG_MEMBERS:
        return "members";
    case GM_MSG_PING:
        return "ping";
    case GM_MSG_PONG:
        return "pong";
    case GM_MSG_BULK:
        return "bulk";
    case GM_MSG_BYE:
        return "bye";
    case GM_MSG_ERROR:
        return "error";
    case GM_MSG_PROBE:
        return "probe";
    case GM_MSG_RATE:
        return "rate";
    case GM_MSG_LINK_STATS:
        return "link-stats";
    case GM_MSG_JOIN_REQUEST:
        return "join-request";
    case GM_MSG_JOIN_ACCEPT:
        return "join-accept";
    case GM_MSG_RENEW_REQUEST:
        return "renew-request";
    case GM_MSG_RENEW_ACCEPT:
        return "renew-accept";
    case GM_MSG_KEYRING:
        return "keyring";
    case GM_MSG_KEYRING_REQ:
        return "keyring-req";
    case GM_MSG_JOB_OFFER:
        return "job-offer";
    case GM_MSG_JOB_CHECK:
        return "job-check";
    case GM_MSG_JOB_GROUP:
        return "job-group";
    case GM_MSG_JOB_REPORT:
        return "job-report";
    case GM_MSG_JOB_END:
        return "job-end";
    case GM_MSG_JOB_SUBMIT:
        return "job-submit";
    case GM_MSG_JOB_SWITCH:
        return "job-switch";
    case GM_MSG_TRAIN:
        return "train";
    case GM_MSG_RAFT:
        return "raft";
    case GM_MSG_CHIEF_REQ:
        return "chief-req";
    case GM_MSG_CHIEF_ANS:
        return "chief-ans";
    case GM_MSG_CKPT_DATA:
        return "ckpt-data";
    case GM_MSG_CKPT_ACK:
        return "ckpt-ack";
    default:
        return "unknown";
    }
}

int gm_proto_addr_parse(const char *s, struct sockaddr_storage *out)
{
    char host[GM_ADDR_MAX];
    const char *colon;
    char *end = NULL;
    size_t hlen;
    long port;

    memset(out, 0, sizeof(*out));
    if (s == NULL || strlen(s) >= GM_ADDR_MAX)
        return -EINVAL;
    colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return -EINVAL;
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535)
        return -EINVAL;
    hlen = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hlen < 3 || s[hlen - 1] != ']')
            return -EINVAL;
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)out) == 0 ? 0 : -EINVAL;
    }
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)out) == 0 ? 0 : -EINVAL;
}

int gm_proto_addr_format(const struct sockaddr *sa, char out[GM_ADDR_MAX])
{
    char ip[48];

    out[0] = '\0';
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        if (uv_ip4_name(a, ip, sizeof(ip)) != 0)
            return -EINVAL;
        snprintf(out, GM_ADDR_MAX, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (uv_ip6_name(a, ip, sizeof(ip)) != 0)
            return -EINVAL;
        snprintf(out, GM_ADDR_MAX, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
        return 0;
    }
    return -EAFNOSUPPORT;
}

void gm_proto_addr_fill_host(const char *advertised, const char *observed, char out[GM_ADDR_MAX])
{
    struct sockaddr_storage a, o;
    const char *port = strrchr(advertised, ':'), *ocolon = strrchr(observed, ':');
    int wild = 0;

    snprintf(out, GM_ADDR_MAX, "%s", advertised);
    if (gm_proto_addr_parse(advertised, &a) != 0 || gm_proto_addr_parse(observed, &o) != 0)
        return;
    if (a.ss_family == AF_INET)
        wild = ((struct sockaddr_in *)&a)->sin_addr.s_addr == htonl(INADDR_ANY);
    else
        wild =
            memcmp(&((struct sockaddr_in6 *)&a)->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0;
    if (wild && port != NULL && ocolon != NULL)
        snprintf(out, GM_ADDR_MAX, "%.*s%s", (int)(ocolon - observed), observed, port);
}

static int get_name(json_t *o, const char *key, char out[GM_ID_NAME_MAX + 1])
{
    int err = gm_jsonmsg_get_str(o, key, out, GM_ID_NAME_MAX + 1, GM_JSONMSG_NONEMPTY);

    if (err == 0 && !gm_id_name_valid(out))
        err = GM_ERR_PROTO;
    return err;
}

static int get_addr(json_t *o, const char *key, char out[GM_ADDR_MAX])
{
    struct sockaddr_storage ss;
    int err = gm_jsonmsg_get_str(o, key, out, GM_ADDR_MAX, GM_JSONMSG_NONEMPTY);

    if (err == 0 && gm_proto_addr_parse(out, &ss) != 0)
        err = GM_ERR_PROTO;
    return err;
}

static int get_hex(json_t *o, const char *key, uint8_t *out, size_t n)
{
    char buf[2 * 64 + 1];
    size_t got = 0;

    if (n > 64 || gm_jsonmsg_get_str(o, key, buf, sizeof(buf), GM_JSONMSG_NONEMPTY) != 0 ||
        strlen(buf) != 2 * n)
        return GM_ERR_PROTO;
    if (sodium_hex2bin(out, n, buf, 2 * n, NULL, &got, NULL) != 0 || got != n)
        return GM_ERR_PROTO;
    return 0;
}

static json_t *hex(const uint8_t *p, size_t n)
{
    char buf[2 * 64 + 1];

    if (n > 64)
        return NULL;
    sodium_bin2hex(buf, sizeof(buf), p, n);
    return json_string(buf);
}

static int class_valid(const char *c)
{
    return strcmp(c, "lan") == 0 || strcmp(c, "tunnel") == 0 || strcmp(c, "wan") == 0;
}

int gm_proto_hello_encode(const struct gm_msg_hello *m, char **out, size_t *len)
{
    json_t *j = json_pack("{s:s, s:s, s:i}", "node", m->node, "listen", m->listen, "proto",
                          m->proto > 0 ? m->proto : GM_PROTO_VERSION);

    if (j != NULL && m->link_class[0] != '\0')
        json_object_set_new(j, "class", json_string(m->link_class));
    if (j != NULL && m->mtu > 0)
        json_object_set_new(j, "mtu", json_integer(m->mtu));
    if (j != NULL && m->version[0] != '\0')
        json_object_set_new(j, "version", json_string(m->version));
    return gm_jsonmsg_dump(j, out, len);
}

/* Optional integer field: *out untouched when absent; GM_ERR_PROTO when not in [lo, hi]. */
static int get_opt_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out)
{
    json_t *v = json_object_get(o, key);

    if (v == NULL)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return GM_ERR_PROTO;
    *out = json_integer_value(v);
    return 0;
}

int gm_proto_hello_decode(const uint8_t *p, size_t len, struct gm_msg_hello *m)
{
    json_t *j = gm_jsonmsg_load(p, len);
    json_int_t mtu = 0, proto = 1;
    size_t fields = 2;
    int err = GM_ERR_PROTO;

    memset(m, 0, sizeof(*m));
    if (j == NULL)
        return GM_ERR_PROTO;
    if (json_object_get(j, "class") != NULL) {
        fields++;
        if (gm_jsonmsg_get_str(j, "class", m->link_class, sizeof(m->link_class),
                               GM_JSONMSG_NONEMPTY) != 0 ||
            !class_valid(m->link_class))
            goto out;
    }
    if (json_object_get(j, "version") != NULL) {
        fields++;
        if (gm_jsonmsg_get_str(j, "version", m->version, sizeof(m->version),
                               GM_JSONMSG_NONEMPTY | GM_JSONMSG_PRINTABLE) != 0 ||
            strchr(m->version, ' ') != NULL)
            goto out;
    }
    fields += json_object_get(j, "mtu") != NULL;
    fields += json_object_get(j, "proto") != NULL;
    if (json_object_size(j) == fields && get_name(j, "node", m->node) == 0 &&
        get_addr(j, "listen", m->listen) == 0 && get_opt_int(j, "mtu", 1, 65535, &mtu) == 0 &&
        get_opt_int(j, "proto", 1, 65535, &proto) == 0) {
        m->mtu = (int)mtu;
        m->proto = (int)proto;
        err = 0;
    }
out:
    json_decref(j);
    if (err != 0)
        memset(m, 0, sizeof(*m));
    return err;
}

int gm_proto_rate_encode(const struct gm_msg_rate *m, char **out, size_t *len)
{
    return gm_jsonmsg_dump(json_pack("{s:I, s:I, s:I}", "req", (json_int_t)m->req, "bytes",
                                     (json_int_t)m->bytes, "us", (json_int_t)m->us),
                           out, len);
}

int gm_proto_rate_decode(const uint8_t *p, size_t len, struct gm_msg_rate *m)
{
    json_t *j = gm_jsonmsg_load(p, len);
    json_int_t req = -1, bytes = -1, us = -1;
    int err = GM_ERR_PROTO;

    memset(m, 0, sizeof(*m));
    if (j == NULL)
        return GM_ERR_PROTO;
    if (json_object_size(j) == 3 && get_opt_int(j, "req", 0, INT64_MAX, &req) == 0 &&
        get_opt_int(j, "bytes", 0, INT64_MAX, &bytes) == 0 &&
        get_opt_int(j, "us", 1, INT64_MAX, &us) == 0 && req >= 0 && bytes >= 0 && us >= 1) {
        m->req = (uint64_t)req;
        m->bytes = (uint64_t)bytes;
        m->us = (uint64_t)us;
        err = 0;
    }
    json_decref(j);
    return err;
}

static json_t *number_or_null(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

int gm_proto_link_stats_encode(const struct gm_link_stat *s, size_t n, char **out, size_t *len)
{
    json_t *a = json_array();
    size_t i;

    for (i = 0; a != NULL && i < n; i++) {
        json_t *e = json_pack("{s:s, s:s, s:o, s:o, s:o}", "node", s[i].node, "class",
                              s[i].link_class, "rtt_ms", number_or_null(s[i].rtt_ms),
                              "throughput_mbps", number_or_null(s[i].throughput_mbps), "reach",
                              s[i].reach < 0 ? json_null() : json_boolean(s[i].reach));
        if (json_array_append_new(a, e) != 0) {
            json_decref(a);
            a = NULL;
        }
    }
    if (a == NULL)
        return gm_jsonmsg_dump(NULL, out, len);
    return gm_jsonmsg_dump(json_pack("{s:o}", "links", a), out, len);
}

/* A non-negative finite number or null (-1). */
static int get_measure(json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);

    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || json_number_value(v) > 1e12)
        return GM_ERR_PROTO;
    *out = json_number_value(v);
    return 0;
}

static int link_stat_parse(json_t *e, struct gm_link_stat *s)
{
    json_t *r;

    if (!json_is_object(e) || json_object_size(e) != 5 || get_name(e, "node", s->node) != 0 ||
        gm_jsonmsg_get_str(e, "class", s->link_class, sizeof(s->link_class), GM_JSONMSG_NONEMPTY) !=
            0 ||
        !class_valid(s->link_class) || get_measure(e, "rtt_ms", &s->rtt_ms) != 0 ||
        get_measure(e, "throughput_mbps", &s->throughput_mbps) != 0)
        return GM_ERR_PROTO;
    r = json_object_get(e, "reach");
    if (json_is_null(r))
        s->reach = -1;
    else if (json_is_boolean(r))
        s->reach = json_is_true(r);
    else
        return GM_ERR_PROTO;
    return 0;
}

int gm_proto_link_stats_decode(const uint8_t *p, size_t len, struct gm_link_stat **s, size_t *n)
{
    json_t *j = gm_jsonmsg_load(p, len), *a;
    struct gm_link_stat *v = NULL;
    size_t i, cnt;
    int err = GM_ERR_PROTO;

    *s = NULL;
    *n = 0;
    if (j == NULL)
        return GM_ERR_PROTO;
    a = json_object_get(j, "links");
    if (json_object_size(j) != 1 || !json_is_array(a) || json_array_size(a) > GM_MEMBERS_MAX)
        goto out;
    cnt = json_array_size(a);
    v = calloc(cnt ? cnt : 1, sizeof(*v));
    if (v == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (i = 0; i < cnt; i++)
        if (link_stat_parse(json_array_get(a, i), &v[i]) != 0)
            goto out;
    *s = v;
    *n = cnt;
    v = NULL;
    err = 0;
out:
    free(v);
    json_decref(j);
    return err;
}

static json_t *members_json(const struct gm_member *m, size_t n)
{
    json_t *a = json_array();
    size_t i;

    for (i = 0; a != NULL && i < n; i++) {
        if (json_array_append_new(
                a, json_pack("{s:s, s:s}", "node", m[i].node, "address", m[i].address)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static int members_parse(json_t *a, struct gm_member **out, size_t *n)
{
    struct gm_member *m;
    size_t i, cnt;

    *out = NULL;
    *n = 0;
    if (!json_is_array(a))
        return GM_ERR_PROTO;
    cnt = json_array_size(a);
    if (cnt > GM_MEMBERS_MAX)
        return GM_ERR_PROTO;
    m = calloc(cnt ? cnt : 1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    for (i = 0; i < cnt; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_object(e) || get_name(e, "node", m[i].node) != 0 ||
            get_addr(e, "address", m[i].address) != 0) {
            free(m);
            return GM_ERR_PROTO;
        }
    }
    *out = m;
    *n = cnt;
    return 0;
}

int gm_proto_members_encode(const struct gm_member *m, size_t n, char **out, size_t *len)
{
    json_t *a = members_json(m, n);

    if (a == NULL)
        return gm_jsonmsg_dump(NULL, out, len);
    return gm_jsonmsg_dump(json_pack("{s:o}", "members", a), out, len);
}

int gm_proto_members_decode(const uint8_t *p, size_t len, struct gm_member **members, size_t *n)
{
    json_t *j = gm_jsonmsg_load(p, len);
    int err;

    *members = NULL;
    *n = 0;
    if (j == NULL)
        return GM_ERR_PROTO;
    err = members_parse(json_object_get(j, "members"), members, n);
    json_decref(j);
    return err;
}

int gm_proto_error_encode(int code, const char *message, char **out, size_t *len)
{
    return gm_jsonmsg_dump(json_pack("{s:i, s:s}", "code", code, "message", message), out, len);
}

int gm_proto_error_decode(const uint8_t *p, size_t len, int *code, char *message, size_t cap)
{
    json_t *j = gm_jsonmsg_load(p, len), *c;
    int err = GM_ERR_PROTO;

    *code = 0;
    if (cap > 0)
        message[0] = '\0';
    if (j == NULL)
        return GM_ERR_PROTO;
    c = json_object_get(j, "code");
    if (json_is_integer(c) && json_integer_value(c) < 0 && json_integer_value(c) > -100000 &&
        gm_jsonmsg_get_str(j, "message", message, cap, GM_JSONMSG_NONEMPTY) == 0) {
        *code = (int)json_integer_value(c);
        err = 0;
    }
    json_decref(j);
    return err;
}

int gm_proto_join_request_encode(const struct gm_msg_join_request *m, char **out, size_t *len)
{
    return gm_jsonmsg_dump(json_pack("{s:o, s:s, s:o, s:s, s:o}", "token_id", hex(m->token_id, 8),
                                     "node", m->node, "pubkey", hex(m->pubkey, GM_ID_PUB_LEN),
                                     "listen", m->listen, "proof",
                                     hex(m->proof, GM_JOIN_PROOF_LEN)),
                           out, len);
}

int gm_proto_join_request_decode(const uint8_t *p, size_t len, struct gm_msg_join_request *m)
{
    json_t *j = gm_jsonmsg_load(p, len);
    int err = GM_ERR_PROTO;

    memset(m, 0, sizeof(*m));
    if (j == NULL)
        return GM_ERR_PROTO;
    if (json_object_size(j) == 5 && get_hex(j, "token_id", m->token_id, GM_TOKEN_ID_LEN) == 0 &&
        get_name(j, "node", m->node) == 0 && get_hex(j, "pubkey", m->pubkey, GM_ID_PUB_LEN) == 0 &&
        get_addr(j, "listen", m->listen) == 0 &&
        get_hex(j, "proof", m->proof, GM_JOIN_PROOF_LEN) == 0)
        err = 0;
    json_decref(j);
    if (err != 0)
        memset(m, 0, sizeof(*m));
    return err;
}

size_t gm_proto_join_context(const struct gm_msg_join_request *m, char *out, size_t cap)
{
    char id[2 * GM_TOKEN_ID_LEN + 1], pub[2 * GM_ID_PUB_LEN + 1];
    int n;

    sodium_bin2hex(id, sizeof(id), m->token_id, GM_TOKEN_ID_LEN);
    sodium_bin2hex(pub, sizeof(pub), m->pubkey, GM_ID_PUB_LEN);
    n = snprintf(out, cap, "%s|%s|%s|%s", id, m->node, pub, m->listen);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

size_t gm_join_accept_context(const char *ctx, size_t clen, const char *cert_pem,
                              const uint8_t beacon_key[GM_BEACON_KEY_BYTES], char **out)
{
    char bk[2 * GM_BEACON_KEY_BYTES + 1];
    size_t n = clen + 1 + strlen(cert_pem) + 1 + 2 * GM_BEACON_KEY_BYTES;

    *out = malloc(n + 1);
    if (*out == NULL)
        return 0;
    sodium_bin2hex(bk, sizeof(bk), beacon_key, GM_BEACON_KEY_BYTES);
    snprintf(*out, n + 1, "%.*s|%s|%s", (int)clen, ctx, cert_pem, bk);
    sodium_memzero(bk, sizeof(bk));
    return n;
}

int gm_proto_join_accept_encode(const struct gm_msg_join_accept *m, char **out, size_t *len)
{
    json_t *a = members_json(m->members, m->n_members);

    if (a == NULL)
        return gm_jsonmsg_dump(NULL, out, len);
    return gm_jsonmsg_dump(json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "node", m->node, "cert",
                                     m->cert_pem, "ca", m->ca_pem, "members", a, "beacon_key",
                                     hex(m->beacon_key, GM_BEACON_KEY_BYTES), "proof",
                                     hex(m->proof, GM_JOIN_PROOF_LEN)),
                           out, len);
}

static int get_pem(json_t *o, const char *key, char **out)
{
    json_t *v = json_object_get(o, key);
    size_t n;

    *out = NULL;
    if (!json_is_string(v))
        return GM_ERR_PROTO;
    n = json_string_length(v);
    if (n == 0 || n > GM_PEM_MAX || strlen(json_string_value(v)) != n)
        return GM_ERR_PROTO;
    *out = strdup(json_string_value(v));
    return *out != NULL ? 0 : -ENOMEM;
}

int gm_proto_join_accept_decode(const uint8_t *p, size_t len, struct gm_msg_join_accept *m)
{
    json_t *j = gm_jsonmsg_load(p, len);
    int err = GM_ERR_PROTO;

    memset(m, 0, sizeof(*m));
    if (j == NULL)
        return GM_ERR_PROTO;
    if (json_object_size(j) != 6 || get_name(j, "node", m->node) != 0 ||
        get_hex(j, "beacon_key", m->beacon_key, GM_BEACON_KEY_BYTES) != 0 ||
        get_hex(j, "proof", m->proof, GM_JOIN_PROOF_LEN) != 0)
        goto out;
    err = get_pem(j, "cert", &m->cert_pem);
    if (err == 0)
        err = get_pem(j, "ca", &m->ca_pem);
    if (err == 0)
        err = members_parse(json_object_get(j, "members"), &m->members, &m->n_members);
out:
    json_decref(j);
    if (err != 0)
        gm_proto_join_accept_free(m);
    return err;
}

void gm_proto_join_accept_free(struct gm_msg_join_accept *m)
{
    if (m == NULL)
        return;
    sodium_memzero(m->beacon_key, sizeof(m->beacon_key));
    free(m->cert_pem);
    free(m->ca_pem);
    free(m->members);
    memset(m, 0, sizeof(*m));
}

int gm_proto_renew_encode(const char *cert_pem, char **out, size_t *len)
{
    return gm_jsonmsg_dump(json_pack("{s:s}", "cert", cert_pem), out, len);
}

int gm_proto_renew_decode(const uint8_t *p, size_t len, char **cert_pem)
{
    json_t *j = gm_jsonmsg_load(p, len);
    int err = GM_ERR_PROTO;

    *cert_pem = NULL;
    if (j == NULL)
        return GM_ERR_PROTO;
    if (json_object_size(j) == 1)
        err = get_pem(j, "cert", cert_pem);
    json_decref(j);
    return err;
}
