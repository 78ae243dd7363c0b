/*
 * crypto/token.c - see token.h.  Store file: one line per token,
 *   "v1 <id hex> <verifier hex> <created> <expires> <uses_left> <uses_total> <revoked>"
 * rewritten atomically (tmp, fsync, rename) with mode 0600 on every change.
 */
#include "crypto/token.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/log.h"

#define TOKEN_VERSION 1
#define CHECK_LEN 4
#define PAYLOAD_MAX                                                                                \
    (2 + GM_ID_NAME_MAX + GM_ID_PIN_LEN + GM_TOKEN_ID_LEN + GM_TOKEN_SECRET_LEN + CHECK_LEN)
#define STORE_MAX_TOKENS 4096

struct gm_token {
    char cluster[GM_ID_NAME_MAX + 1];
    uint8_t pin[GM_ID_PIN_LEN];
    uint8_t id[GM_TOKEN_ID_LEN];
    uint8_t secret[GM_TOKEN_SECRET_LEN];
};

struct record {
    uint8_t id[GM_TOKEN_ID_LEN];
    uint8_t v[GM_TOKEN_VERIFIER_LEN];
    int64_t created, expires;
    int uses_left, uses_total, revoked;
    int fails;           /* in memory only */
    int64_t fail_window; /* start of the current failure window */
};

struct gm_token_store {
    char *path;          /* owned */
    struct record *recs; /* owned, n of cap */
    size_t n, cap;
};

static void check_bytes(const uint8_t *p, size_t n, uint8_t out[CHECK_LEN])
{
    uint8_t h[crypto_generichash_BYTES_MIN];

    crypto_generichash(h, sizeof(h), p, n, NULL, 0);
    memcpy(out, h, CHECK_LEN);
}

void gm_token_id_hex(const uint8_t id[GM_TOKEN_ID_LEN], char hex[2 * GM_TOKEN_ID_LEN + 1])
{
    sodium_bin2hex(hex, 2 * GM_TOKEN_ID_LEN + 1, id, GM_TOKEN_ID_LEN);
}

int gm_token_encode(const char *cluster, const uint8_t pin[GM_ID_PIN_LEN],
                    const uint8_t id[GM_TOKEN_ID_LEN], const uint8_t secret[GM_TOKEN_SECRET_LEN],
                    char out[GM_TOKEN_STR_MAX])
{
    uint8_t buf[PAYLOAD_MAX];
    size_t n = 0, clen, plen = sizeof(GM_TOKEN_PREFIX) - 1;

    out[0] = '\0';
    if (!gm_id_name_valid(cluster))
        return -EINVAL;
    clen = strlen(cluster);
    buf[n++] = TOKEN_VERSION;
    buf[n++] = (uint8_t)clen;
    memcpy(buf + n, cluster, clen);
    n += clen;
    memcpy(buf + n, pin, GM_ID_PIN_LEN);
    n += GM_ID_PIN_LEN;
    memcpy(buf + n, id, GM_TOKEN_ID_LEN);
    n += GM_TOKEN_ID_LEN;
    memcpy(buf + n, secret, GM_TOKEN_SECRET_LEN);
    n += GM_TOKEN_SECRET_LEN;
    check_bytes(buf, n, buf + n);
    n += CHECK_LEN;
    memcpy(out, GM_TOKEN_PREFIX, plen);
    sodium_bin2base64(out + plen, GM_TOKEN_STR_MAX - plen, buf, n,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

int gm_token_parse(const char *s, size_t len, struct gm_token **out)
{
    uint8_t buf[PAYLOAD_MAX + 1], check[CHECK_LEN];
    size_t plen = sizeof(GM_TOKEN_PREFIX) - 1, n = 0, clen, want;
    struct gm_token *t = NULL;
    const char *end = NULL;
    int err = GM_ERR_TOKEN;

    *out = NULL;
    while (len > 0 && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) {
        s++;
        len--;
    }
    while (len > 0 &&
           (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n' || s[len - 1] == '\r'))
        len--;
    if (len <= plen || len >= GM_TOKEN_STR_MAX || memcmp(s, GM_TOKEN_PREFIX, plen) != 0)
        return GM_ERR_TOKEN;
    if (sodium_base642bin(buf, sizeof(buf), s + plen, len - plen, NULL, &n, &end,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        end != s + len)
        goto out;
    if (n < 2 || buf[0] != TOKEN_VERSION)
        goto out;
    clen = buf[1];
    want = 2 + clen + GM_ID_PIN_LEN + GM_TOKEN_ID_LEN + GM_TOKEN_SECRET_LEN + CHECK_LEN;
    if (clen == 0 || clen > GM_ID_NAME_MAX || n != want)
        goto out;
    check_bytes(buf, n - CHECK_LEN, check);
    if (sodium_memcmp(check, buf + n - CHECK_LEN, CHECK_LEN) != 0)
        goto out;
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        err = -ENOMEM;
        goto out;
    }
    memcpy(t->cluster, buf + 2, clen);
    t->cluster[clen] = '\0';
    if (!gm_id_name_valid(t->cluster))
        goto out;
    memcpy(t->pin, buf + 2 + clen, GM_ID_PIN_LEN);
    memcpy(t->id, buf + 2 + clen + GM_ID_PIN_LEN, GM_TOKEN_ID_LEN);
    memcpy(t->secret, buf + 2 + clen + GM_ID_PIN_LEN + GM_TOKEN_ID_LEN, GM_TOKEN_SECRET_LEN);
    *out = t;
    t = NULL;
    err = 0;
out:
    sodium_memzero(buf, sizeof(buf));
    gm_token_free(t);
    return err;
}

void gm_token_free(struct gm_token *t)
{
    if (t == NULL)
        return;
    sodium_memzero(t, sizeof(*t));
    free(t);
}

const char *gm_token_cluster(const struct gm_token *t)
{
    return t->cluster;
}

const uint8_t *gm_token_pin(const struct gm_token *t)
{
    return t->pin;
}

const uint8_t *gm_token_id(const struct gm_token *t)
{
    return t->id;
}

static void verifier(const char *cluster, const uint8_t id[GM_TOKEN_ID_LEN],
                     const uint8_t secret[GM_TOKEN_SECRET_LEN], uint8_t v[GM_TOKEN_VERIFIER_LEN])
{
    static const char label[] = "gradmesh-token-v1"; /* with its NUL */
    crypto_generichash_state st;

    crypto_generichash_init(&st, secret, GM_TOKEN_SECRET_LEN, GM_TOKEN_VERIFIER_LEN);
    crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label));
    crypto_generichash_update(&st, (const uint8_t *)cluster, strlen(cluster) + 1);
    crypto_generichash_update(&st, id, GM_TOKEN_ID_LEN);
    crypto_generichash_final(&st, v, GM_TOKEN_VERIFIER_LEN);
    sodium_memzero(&st, sizeof(st));
}

void gm_token_verifier(const struct gm_token *t, uint8_t v[GM_TOKEN_VERIFIER_LEN])
{
    verifier(t->cluster, t->id, t->secret, v);
}

/* --- store ---------------------------------------------------------------- */

/* The store's lines into *out (malloc'd, *len bytes; holds verifiers: the caller wipes). */
static int store_format(const struct gm_token_store *s, char **out, size_t *len)
{
    size_t i, cap = 256 * (s->n + 1), off = 0;
    char *buf = malloc(cap);

    *out = NULL;
    *len = 0;
    if (buf == NULL)
        return -ENOMEM;
    buf[0] = '\0';
    for (i = 0; i < s->n; i++) {
        const struct record *r = &s->recs[i];
        char id[2 * GM_TOKEN_ID_LEN + 1], v[2 * GM_TOKEN_VERIFIER_LEN + 1];
        sodium_bin2hex(id, sizeof(id), r->id, sizeof(r->id));
        sodium_bin2hex(v, sizeof(v), r->v, sizeof(r->v));
        off += (size_t)snprintf(buf + off, cap - off, "v1 %s %s %" PRId64 " %" PRId64 " %d %d %d\n",
                                id, v, r->created, r->expires, r->uses_left, r->uses_total,
                                r->revoked);
        sodium_memzero(v, sizeof(v));
    }
    *out = buf;
    *len = off;
    return 0;
}

static int store_save(struct gm_token_store *s)
{
    char *buf = NULL;
    size_t len = 0;
    int err = store_format(s, &buf, &len);

    if (err != 0)
        return err;
    err = gm_id_write_file(s->path, buf, len, 0600);
    sodium_memzero(buf, len);
    free(buf);
    if (err != 0)
        gm_err("event=token-store-save path=%s err=%d msg=\"%s\"", s->path, err, gm_strerror(err));
    return err;
}

static int store_grow(struct gm_token_store *s)
{
    struct record *r;
    size_t cap;

    if (s->n < s->cap)
        return 0;
    if (s->cap >= STORE_MAX_TOKENS)
        return -ENOSPC;
    cap = s->cap ? 2 * s->cap : 16;
    r = realloc(s->recs, cap * sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    s->recs = r;
    s->cap = cap;
    return 0;
}

static int parse_line(const char *line, struct record *r)
{
    char id[64], v[128];
    size_t n = 0;

    memset(r, 0, sizeof(*r));
    if (sscanf(line, "v1 %63s %127s %" SCNd64 " %" SCNd64 " %d %d %d", id, v, &r->created,
               &r->expires, &r->uses_left, &r->uses_total, &r->revoked) != 7)
        return GM_ERR_FORMAT;
    if (sodium_hex2bin(r->id, sizeof(r->id), id, strlen(id), NULL, &n, NULL) != 0 ||
        n != sizeof(r->id))
        return GM_ERR_FORMAT;
    if (sodium_hex2bin(r->v, sizeof(r->v), v, strlen(v), NULL, &n, NULL) != 0 || n != sizeof(r->v))
        return GM_ERR_FORMAT;
    if (r->uses_left < 0 || r->uses_total < 1 || (r->revoked != 0 && r->revoked != 1))
        return GM_ERR_FORMAT;
    return 0;
}

int gm_token_store_open(const char *path, struct gm_token_store **out)
{
    struct gm_token_store *s;
    char *text = NULL, *line, *save = NULL;
    size_t len = 0;
    int err;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->path = strdup(path);
    if (s->path == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    err = gm_id_read_file(path, 4 * 1024 * 1024, &text, &len);
    if (err == -ENOENT) {
        *out = s;
        return 0;
    }
    if (err != 0)
        goto fail;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        err = store_grow(s);
        if (err != 0)
            goto fail;
        err = parse_line(line, &s->recs[s->n]);
        if (err != 0)
            goto fail;
        s->n++;
    }
    sodium_memzero(text, len);
    free(text);
    *out = s;
    return 0;
fail:
    if (text != NULL)
        sodium_memzero(text, len);
    free(text);
    gm_token_store_free(s);
    return err;
}

void gm_token_store_free(struct gm_token_store *s)
{
    if (s == NULL)
        return;
    if (s->recs != NULL)
        sodium_memzero(s->recs, s->cap * sizeof(*s->recs));
    free(s->recs);
    free(s->path);
    free(s);
}

static void info_of(const struct record *r, struct gm_token_info *info)
{
    gm_token_id_hex(r->id, info->id);
    info->created = r->created;
    info->expires = r->expires;
    info->uses_left = r->uses_left;
    info->uses_total = r->uses_total;
    info->revoked = r->revoked;
}

int gm_token_store_create(struct gm_token_store *s, const char *cluster,
                          const uint8_t pin[GM_ID_PIN_LEN], int64_t ttl_s, int uses, int64_t now,
                          char out[GM_TOKEN_STR_MAX], struct gm_token_info *info)
{
    uint8_t secret[GM_TOKEN_SECRET_LEN];
    struct record *r;
    int err;

    out[0] = '\0';
    memset(info, 0, sizeof(*info));
    if (ttl_s <= 0 || ttl_s > 366LL * 86400 || uses < 1 || uses > 10000 ||
        !gm_id_name_valid(cluster))
        return -EINVAL;
    err = store_grow(s);
    if (err != 0)
        return err;
    r = &s->recs[s->n];
    memset(r, 0, sizeof(*r));
    randombytes_buf(r->id, sizeof(r->id));
    randombytes_buf(secret, sizeof(secret));
    verifier(cluster, r->id, secret, r->v);
    r->created = now;
    r->expires = now + ttl_s;
    r->uses_left = uses;
    r->uses_total = uses;
    s->n++;
    err = store_save(s);
    if (err == 0)
        err = gm_token_encode(cluster, pin, r->id, secret, out);
    if (err == 0)
        info_of(r, info);
    else
        s->n--;
    sodium_memzero(secret, sizeof(secret));
    return err;
}

size_t gm_token_store_count(const struct gm_token_store *s)
{
    return s->n;
}

int gm_token_store_get(const struct gm_token_store *s, size_t i, struct gm_token_info *info)
{
    memset(info, 0, sizeof(*info));
    if (i >= s->n)
        return -ENOENT;
    info_of(&s->recs[i], info);
    return 0;
}

static struct record *find(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN])
{
    size_t i;

    for (i = 0; i < s->n; i++)
        if (memcmp(s->recs[i].id, id, GM_TOKEN_ID_LEN) == 0)
            return &s->recs[i];
    return NULL;
}

int gm_token_store_revoke(struct gm_token_store *s, const char *id_hex)
{
    uint8_t id[GM_TOKEN_ID_LEN];
    size_t n = 0;
    struct record *r;

    if (sodium_hex2bin(id, sizeof(id), id_hex, strlen(id_hex), NULL, &n, NULL) != 0 ||
        n != sizeof(id))
        return -ENOENT;
    r = find(s, id);
    if (r == NULL)
        return -ENOENT;
    r->revoked = 1;
    return store_save(s);
}

int gm_token_store_check(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN], int64_t now,
                         uint8_t v[GM_TOKEN_VERIFIER_LEN], const char **why)
{
    struct record *r = find(s, id);

    memset(v, 0, GM_TOKEN_VERIFIER_LEN);
    *why = "ok";
    if (r == NULL) {
        *why = "unknown token";
        return GM_ERR_TOKEN;
    }
    if (r->fails >= GM_TOKEN_MAX_FAILS && now - r->fail_window < GM_TOKEN_FAIL_WINDOW_S) {
        *why = "rate limited after failed proofs";
        return -EBUSY;
    }
    if (r->revoked) {
        *why = "revoked";
        return GM_ERR_TOKEN;
    }
    if (now >= r->expires) {
        *why = "expired";
        return GM_ERR_TOKEN;
    }
    if (r->uses_left <= 0) {
        *why = "already used";
        return GM_ERR_TOKEN;
    }
    memcpy(v, r->v, GM_TOKEN_VERIFIER_LEN);
    return 0;
}

int gm_token_store_use(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN])
{
    struct record *r = find(s, id);
    int err;

    if (r == NULL || r->uses_left <= 0)
        return GM_ERR_TOKEN;
    r->uses_left--;
    err = store_save(s);
    if (err != 0)
        r->uses_left++;
    return err;
}

void gm_token_store_fail(struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN], int64_t now)
{
    struct record *r = find(s, id);

    if (r == NULL)
        return;
    if (now - r->fail_window >= GM_TOKEN_FAIL_WINDOW_S) {
        r->fail_window = now;
        r->fails = 0;
    }
    r->fails++;
}

int gm_token_store_info(const struct gm_token_store *s, const uint8_t id[GM_TOKEN_ID_LEN],
                        struct gm_token_info *info)
{
    size_t i;

    memset(info, 0, sizeof(*info));
    for (i = 0; i < s->n; i++)
        if (memcmp(s->recs[i].id, id, GM_TOKEN_ID_LEN) == 0) {
            info_of(&s->recs[i], info);
            return 0;
        }
    return -ENOENT;
}

int gm_token_store_export(const struct gm_token_store *s, char **out, size_t *len)
{
    return store_format(s, out, len);
}

int gm_token_store_merge(struct gm_token_store *s, const char *text, size_t len, int *changed)
{
    struct record *in = NULL, *r;
    size_t n = 0, cap = 0, i, start = 0;
    char line[256];
    int err = 0;

    *changed = 0;
    /* parse everything first: a bad line changes nothing */
    for (i = 0; i <= len && err == 0; i++) {
        if (i < len && text[i] != '\n')
            continue;
        if (i == start) {
            start = i + 1;
            continue;
        }
        if (i - start >= sizeof(line) || memchr(text + start, '\0', i - start) != NULL) {
            err = GM_ERR_FORMAT;
            break;
        }
        if (n == cap) {
            struct record *g;
            if (cap >= STORE_MAX_TOKENS) {
                err = -ENOSPC;
                break;
            }
            cap = cap ? 2 * cap : 16;
            g = realloc(in, cap * sizeof(*g));
            if (g == NULL) {
                err = -ENOMEM;
                break;
            }
            in = g;
        }
        memcpy(line, text + start, i - start);
        line[i - start] = '\0';
        err = parse_line(line, &in[n]);
        if (err == 0 && in[n].uses_left > in[n].uses_total)
            err = GM_ERR_FORMAT;
        n += err == 0;
        start = i + 1;
    }
    sodium_memzero(line, sizeof(line));
    /* then: unknown ids are added; a known one keeps the fewer uses left and revoked wins */
    for (i = 0; i < n && err == 0; i++) {
        r = find(s, in[i].id);
        if (r == NULL) {
            err = store_grow(s);
            if (err != 0)
                break;
            s->recs[s->n++] = in[i];
            *changed = 1;
            continue;
        }
        if (in[i].uses_left < r->uses_left) {
            r->uses_left = in[i].uses_left;
            *changed = 1;
        }
        if (in[i].revoked && !r->revoked) {
            r->revoked = 1;
            *changed = 1;
        }
    }
    if (in != NULL)
        sodium_memzero(in, cap * sizeof(*in));
    free(in);
    if (*changed)
        err = err == 0 ? store_save(s) : err;
    return err;
}
