/*
 * common/ini.c - see ini.h.
 *
 * How it works: inih's ini_parse_stream reads through our reader (read_line), which hands it
 * one line per call, so inih's line count is ours, and returns EOF at the end and after the
 * first problem.  The handler (on_pair) always returns "ok" to inih, so a non-zero result
 * of ini_parse_stream is a syntax error inih found on its own; the earlier of that and our
 * first problem is the one reported.
 */
#include "common/ini.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"

void gm_ini_fail(struct gm_ini *ini, int line, const char *fmt, ...)
{
    va_list ap;

    if (ini->failed)
        return;
    ini->failed = true;
    ini->err_line = line;
    va_start(ap, fmt);
    vsnprintf(ini->msg, sizeof(ini->msg), fmt, ap);
    va_end(ap);
}

const char *gm_ini_printable(char *dst, size_t n, const char *s)
{
    size_t i;

    for (i = 0; i + 1 < n && s[i] != '\0'; i++)
        dst[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    dst[i] = '\0';
    return dst;
}

static bool known_section(const struct gm_ini_spec *spec, const char *s, size_t len)
{
    for (size_t i = 0; i < spec->nsections; i++)
        if (strlen(spec->sections[i]) == len && memcmp(spec->sections[i], s, len) == 0)
            return true;
    return false;
}

static const struct gm_ini_key *find_key(const struct gm_ini_spec *spec, const char *section,
                                         const char *key)
{
    for (size_t i = 0; i < spec->nkeys; i++)
        if (strcmp(spec->keys[i].section, section) == 0 && strcmp(spec->keys[i].key, key) == 0)
            return &spec->keys[i];
    return NULL;
}

int gm_ini_line_of(const struct gm_ini *ini, const char *section, const char *key)
{
    const struct gm_ini_key *k = find_key(ini->spec, section, key);

    GM_ASSERT(k != NULL);
    return ini->seen[k - ini->spec->keys];
}

/* ini_reader: hands inih one line per call (so its line count is ours), without leading
 * blanks (see GM_INI_ALL_BLANKS) or the '\r' before '\n'; returns EOF at the end and after
 * the first problem. */
static char *read_line(char *buf, int num, void *stream)
{
    struct gm_ini *ini = stream;
    const char *start, *eol, *p;
    size_t n, limit;
    const bool all = ini->spec->flags & GM_INI_ALL_BLANKS;

    if (ini->failed || ini->pos >= ini->len)
        return NULL;
    start = ini->text + ini->pos;
    eol = memchr(start, '\n', ini->len - ini->pos);
    n = eol != NULL ? (size_t)(eol - start) : ini->len - ini->pos;
    ini->pos += n + (eol != NULL);
    ini->line++;
    if (n > 0 && start[n - 1] == '\r')
        n--;
    if (memchr(start, '\0', n) != NULL) {
        gm_ini_fail(ini, ini->line, "NUL byte in the line");
        return NULL;
    }
    limit = num > 3 ? (size_t)num - 3 : 0; /* inih's buffer less "\r\n" and the NUL */
    if (limit > ini->spec->line_max)
        limit = ini->spec->line_max;
    if (n > limit) {
        gm_ini_fail(ini, ini->line, "line is longer than %zu bytes", limit);
        return NULL;
    }
    p = start;
    if (all && ini->line == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    while (p < start + n &&
           (*p == ' ' || *p == '\t' || (all && (*p == '\v' || *p == '\f' || *p == '\r'))))
        p++;
    n -= (size_t)(p - start);
    if (n > 0 && *p == '[') {
        const char *close = memchr(p, ']', n);
        if (close != NULL && !known_section(ini->spec, p + 1, (size_t)(close - p - 1))) {
            ini->spec->unknown_section(ini, p + 1, (size_t)(close - p - 1));
            return NULL;
        }
    }
    memcpy(buf, p, n);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    return buf;
}

/* ini_handler: always "ok" to inih; problems go to ini (see the file comment). */
static int on_pair(void *user, const char *section, const char *key, const char *value)
{
    struct gm_ini *ini = user;
    const struct gm_ini_spec *spec = ini->spec;
    const struct gm_ini_key *k;
    size_t i;

    if (ini->failed)
        return 1;
    if (section[0] == '\0') {
        spec->outside(ini, key);
        return 1;
    }
    /* with GM_INI_ALL_BLANKS the reader checked every header; this catches what slips by */
    if ((spec->flags & GM_INI_ALL_BLANKS) && !known_section(spec, section, strlen(section))) {
        spec->unknown_section(ini, section, strlen(section));
        return 1;
    }
    k = find_key(spec, section, key);
    if (k == NULL) {
        spec->unknown_key(ini, section, key);
        return 1;
    }
    i = (size_t)(k - spec->keys);
    if (ini->seen[i] != 0) {
        spec->twice(ini, k, ini->seen[i]);
        return 1;
    }
    ini->seen[i] = ini->line;
    spec->set(ini, k, value);
    return 1;
}

/* Offset of the first byte that is not well-formed UTF-8 or is NUL, or len if none. */
static size_t bad_byte(const unsigned char *s, size_t len, bool *is_nul)
{
    size_t i = 0;

    *is_nul = false;
    while (i < len) {
        unsigned char b = s[i];
        size_t need;
        uint32_t cp, min;

        if (b == 0) {
            *is_nul = true;
            return i;
        }
        if (b < 0x80) {
            i++;
            continue;
        }
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1, cp = b & 0x1F, min = 0x80;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2, cp = b & 0x0F, min = 0x800;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3, cp = b & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (len - i <= need)
            return i;
        for (size_t j = 1; j <= need; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += need + 1;
    }
    return len;
}

int gm_ini_parse(const struct gm_ini_spec *spec, const char *text, size_t len, const char *origin,
                 void *dest)
{
    struct gm_ini *ini;
    size_t bad;
    bool nul;
    int r, err = 0;

    ini = calloc(1, sizeof(*ini));
    if (ini == NULL)
        return -ENOMEM;
    ini->seen = calloc(spec->nkeys > 0 ? spec->nkeys : 1, sizeof(*ini->seen));
    if (ini->seen == NULL) {
        free(ini);
        return -ENOMEM;
    }
    ini->spec = spec;
    ini->dest = dest;
    ini->text = text;
    ini->len = len;

    bad = (spec->flags & GM_INI_UTF8) ? bad_byte((const unsigned char *)text, len, &nul) : len;
    if (bad < len) {
        int line = 1;
        for (size_t i = 0; i < bad; i++)
            line += text[i] == '\n';
        gm_ini_fail(ini, line, nul ? "NUL byte in the text" : "text is not valid UTF-8");
    } else {
        r = ini_parse_stream(read_line, ini, on_pair, ini);
        if (r == -2) {
            err = -ENOMEM;
            goto out;
        }
        if (r > 0 && (!ini->failed || r < ini->err_line)) {
            ini->failed = false;
            gm_ini_fail(ini, r, "syntax error: expected '[section]' or 'key = value'");
        }
        if (!ini->failed && spec->whole != NULL)
            spec->whole(ini);
    }
    if (ini->failed) {
        err = GM_ERR_CONFIG;
        if (ini->err_line > 0)
            gm_err("%s:%d: %s", origin, ini->err_line, ini->msg);
        else
            gm_err("%s: %s", origin, ini->msg);
    }
out:
    free(ini->seen);
    free(ini);
    return err;
}
