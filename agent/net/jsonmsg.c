/* agent/net/jsonmsg.c - see jsonmsg.h. */
#include "agent/net/jsonmsg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool gm_jsonmsg_is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

bool gm_jsonmsg_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

json_t *gm_jsonmsg_load(const void *p, size_t len)
{
    json_error_t e;
    json_t *j;

    if (p == NULL || len == 0)
        return NULL;
    j = json_loadb(p, len, JSON_REJECT_DUPLICATES, &e);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int gm_jsonmsg_dump(json_t *j, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (j == NULL)
        return -ENOMEM;
    *out = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (*out == NULL)
        return -ENOMEM;
    *len = strlen(*out);
    return 0;
}

/* The string value of field key of o, checked as flags say and, for n > 0, exactly n hex
 * digits; NULL where it is not (or absent). */
static const char *checked(json_t *o, const char *key, size_t cap, unsigned flags, size_t n)
{
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);

    if (s == NULL || len >= cap || strlen(s) != len || (len == 0 && (flags & GM_JSONMSG_NONEMPTY)))
        return NULL;
    if (((flags & GM_JSONMSG_PRINTABLE) && !gm_jsonmsg_printable(s)) ||
        (n > 0 && !gm_jsonmsg_is_hex(s, n)))
        return NULL;
    return s;
}

int gm_jsonmsg_get_str(json_t *o, const char *key, char *out, size_t cap, unsigned flags)
{
    const char *s;

    if (cap > 0)
        out[0] = '\0';
    if ((flags & GM_JSONMSG_OPTIONAL) && json_object_get(o, key) == NULL)
        return 0;
    s = checked(o, key, cap, flags, 0);
    if (s == NULL)
        return GM_ERR_PROTO;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

int gm_jsonmsg_get_hex(json_t *o, const char *key, char *out, size_t cap, size_t n)
{
    const char *s;

    if (cap > 0)
        out[0] = '\0';
    s = n > 0 ? checked(o, key, cap, 0, n) : NULL;
    if (s == NULL)
        return GM_ERR_PROTO;
    memcpy(out, s, n + 1);
    return 0;
}

int gm_jsonmsg_get_uint(json_t *o, const char *key, uint64_t max, uint64_t *out)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return GM_ERR_PROTO;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int gm_jsonmsg_keys_only(json_t *o, const char *const *keys, size_t n)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v)
    {
        size_t i;
        for (i = 0; i < n && strcmp(keys[i], k) != 0; i++)
            ;
        if (i == n)
            return GM_ERR_PROTO;
    }
    return 0;
}
