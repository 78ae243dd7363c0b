/*
 * train/ckpt/safetensors.c - safetensors writer and validating reader; see safetensors.h.
 *
 * JSON is jansson's job both ways.  The reader works in two passes over the parsed header:
 * the first checks every field and sums the string bytes, the second copies names and
 * metadata into one string table, so a file needs three allocations whatever it holds.
 * Contiguity is checked on an index sorted by (begin, end).
 */
#include "train/ckpt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/file.h"
#include "common/log.h"

#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__) || !defined(__ORDER_BIG_ENDIAN__)
#error "need __BYTE_ORDER__ (GCC or clang)"
#endif
#define HOST_LE (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

#define META_KEY "__metadata__"

static const char *const dtype_names[] = {"F32", "F16", "BF16", "F64"};
static const size_t dtype_sizes[] = {4, 2, 2, 8};

const char *gm_safetensors_dtype_name(enum gm_st_dtype d)
{
    return (unsigned)d < 4 ? dtype_names[d] : "?";
}

size_t gm_safetensors_dtype_size(enum gm_st_dtype d)
{
    return (unsigned)d < 4 ? dtype_sizes[d] : 0;
}

/* Copies s for a message: control bytes become '?', long strings are cut with "...". */
static const char *printable(char *dst, size_t n, const char *s)
{
    size_t i;

    for (i = 0; i + 1 < n && s[i] != '\0'; i++)
        dst[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    dst[i] = '\0';
    if (s[i] != '\0' && n >= 4)
        memcpy(dst + n - 4, "...", 4);
    return dst;
}

/* --- writer ------------------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes n floats little-endian. */
static int write_f32(int fd, const float *data, size_t n)
{
#if HOST_LE
    return write_all(fd, data, n * sizeof(float));
#else
    uint8_t chunk[16384];
    int err;

    while (n > 0) {
        size_t m = n < sizeof(chunk) / 4 ? n : sizeof(chunk) / 4;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            for (int b = 0; b < 4; b++)
                chunk[4 * i + (size_t)b] = (uint8_t)(u >> (8 * b));
        }
        err = write_all(fd, chunk, m * 4);
        if (err != 0)
            return err;
        data += m;
        n -= m;
    }
    return 0;
#endif
}

/* Builds the header JSON; *nbytes gets the data section size.  -EINVAL with a log line. */
static int build_header(const char *path, const struct gm_st_tensor *t, size_t nt,
                        const struct gm_st_meta *meta, size_t nm, json_t **out, uint64_t *nbytes)
{
    json_t *root = json_object(), *md = NULL, *shape = NULL, *info = NULL;
    uint64_t off = 0;
    char pn[128];
    int err = -EINVAL;

    *out = NULL;
    if (root == NULL)
        return -ENOMEM;
    if (nm > 0) {
        md = json_object();
        if (md == NULL || json_object_set_new(root, META_KEY, md) != 0) {
            err = -ENOMEM;
            goto fail;
        }
    }
    for (size_t i = 0; i < nm; i++) {
        json_t *v;

        if (meta[i].key == NULL || meta[i].value == NULL) {
            gm_err("%s: cannot write: metadata %zu has a NULL key or value", path, i);
            goto fail;
        }
        printable(pn, sizeof(pn), meta[i].key);
        if (json_object_get(md, meta[i].key) != NULL) {
            gm_err("%s: cannot write: duplicate metadata key '%s'", path, pn);
            goto fail;
        }
        v = json_string(meta[i].value); /* NULL for invalid UTF-8 */
        if (v == NULL || json_object_set_new(md, meta[i].key, v) != 0) {
            gm_err("%s: cannot write: metadata '%s' is not valid UTF-8", path, pn);
            goto fail;
        }
    }
    for (size_t i = 0; i < nt; i++) {
        uint64_t numel = 1, bytes;

        if (t[i].name == NULL || t[i].name[0] == '\0' || strcmp(t[i].name, META_KEY) == 0) {
            gm_err("%s: cannot write: tensor %zu has an empty or reserved name", path, i);
            goto fail;
        }
        printable(pn, sizeof(pn), t[i].name);
        if (json_object_get(root, t[i].name) != NULL) {
            gm_err("%s: cannot write: duplicate tensor name '%s'", path, pn);
            goto fail;
        }
        if (t[i].ndim < 0 || t[i].ndim > GM_ST_WRITE_MAX_DIMS) {
            gm_err("%s: cannot write: tensor '%s' has %d dims (0 to %d allowed)", path, pn,
                   t[i].ndim, GM_ST_WRITE_MAX_DIMS);
            goto fail;
        }
        shape = json_array();
        if (shape == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0 ||
                __builtin_mul_overflow(numel, (uint64_t)t[i].shape[d], &numel)) {
                gm_err("%s: cannot write: tensor '%s' has a bad shape", path, pn);
                goto fail;
            }
            if (json_array_append_new(shape, json_integer(t[i].shape[d])) != 0) {
                err = -ENOMEM;
                goto fail;
            }
        }
        if (__builtin_mul_overflow(numel, (uint64_t)sizeof(float), &bytes) ||
            __builtin_add_overflow(off, bytes, &off) || off > (uint64_t)INT64_MAX ||
            bytes > SIZE_MAX) {
            gm_err("%s: cannot write: tensor '%s' is too large", path, pn);
            goto fail;
        }
        if (t[i].data == NULL && numel > 0) {
            gm_err("%s: cannot write: tensor '%s' has no data", path, pn);
            goto fail;
        }
        info = json_pack("{s:s, s:o, s:[I,I]}", "dtype", "F32", "shape", shape, "data_offsets",
                         (json_int_t)(off - bytes), (json_int_t)off);
        shape = NULL; /* "o" stole the reference, even on failure */
        if (info == NULL) {
            err = -ENOMEM;
            goto fail;
        }
        if (json_object_set_new(root, t[i].name, info) != 0) {
            info = NULL;
            gm_err("%s: cannot write: tensor name '%s' is not valid UTF-8", path, pn);
            goto fail;
        }
        info = NULL;
    }
    *out = root;
    *nbytes = off;
    return 0;
fail:
    if (err == -ENOMEM)
        gm_err("%s: cannot write: out of memory", path);
    json_decref(shape);
    json_decref(root);
    return err;
}

int gm_safetensors_write(const char *path, const struct gm_st_tensor *t, size_t nt,
                         const struct gm_st_meta *meta, size_t nm)
{
    json_t *root = NULL;
    char *json = NULL, *tmp = NULL;
    uint8_t *head = NULL;
    uint64_t nbytes = 0;
    size_t jlen, hlen;
    const char *what = "";
    int fd = -1, err;

    if (path == NULL || (t == NULL && nt > 0) || (meta == NULL && nm > 0)) {
        gm_err("safetensors: cannot write: bad arguments");
        return -EINVAL;
    }
    err = build_header(path, t, nt, meta, nm, &root, &nbytes);
    if (err != 0)
        return err;
    json = json_dumps(root, JSON_COMPACT);
    if (json == NULL) {
        err = -ENOMEM;
        what = "out of memory";
        goto fail;
    }
    jlen = strlen(json);
    hlen = (jlen + 7) & ~(size_t)7; /* spaces up to a multiple of 8: data starts aligned */
    head = malloc(8 + hlen);
    if (head == NULL) {
        err = -ENOMEM;
        what = "out of memory";
        goto fail;
    }
    gm_put_le64(head, hlen);
    memcpy(head + 8, json, jlen);
    memset(head + 8 + jlen, ' ', hlen - jlen);

    if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        tmp = NULL;
        err = -ENOMEM;
        what = "out of memory";
        goto fail;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        err = -errno;
        what = "create";
        free(tmp); /* nothing to remove */
        tmp = NULL;
        goto fail;
    }
    what = "write";
    err = write_all(fd, head, 8 + hlen);
    for (size_t i = 0; i < nt && err == 0; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel *= (size_t)t[i].shape[d]; /* checked in build_header */
        err = write_f32(fd, t[i].data, numel);
    }
    if (err != 0)
        goto fail;
    what = "fsync";
    if (fsync(fd) != 0) {
        err = -errno;
        goto fail;
    }
    what = "close";
    err = close(fd) != 0 ? -errno : 0;
    fd = -1;
    if (err != 0)
        goto fail;
    what = "rename";
    if (rename(tmp, path) != 0) {
        err = -errno;
        goto fail;
    }
    free(tmp);
    tmp = NULL;
    what = "fsync directory";
    err = gm_file_sync_dir(path);
    if (err != 0)
        goto fail;
    goto out;
fail:
    gm_err("%s: cannot write: %s: %s", path, what,
           err == -ENOMEM ? "out of memory" : gm_strerror(err));
    if (fd >= 0)
        close(fd);
    if (tmp != NULL)
        unlink(tmp);
out:
    free(tmp);
    free(head);
    free(json);
    json_decref(root);
    return err;
}

/* --- reader ------------------------------------------------------------------------------- */

struct reader {
    const char *origin;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static int bad(struct reader *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (!r->failed) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        gm_err("%s: not a valid safetensors file: %s", r->origin, msg);
        r->failed = true;
    }
    return GM_ERR_FORMAT;
}

static int parse_dtype(const char *s, enum gm_st_dtype *d)
{
    for (unsigned i = 0; i < 4; i++) {
        if (strcmp(s, dtype_names[i]) == 0) {
            *d = (enum gm_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* Non-negative JSON integer, or -1. */
static int64_t get_count(const json_t *v)
{
    json_int_t i;

    if (!json_is_integer(v))
        return -1;
    i = json_integer_value(v);
    return i < 0 ? -1 : (int64_t)i;
}

/* Checks one tensor's info object and fills e (but not its name or data pointer). */
static int parse_info(struct reader *r, const char *name, const json_t *info, uint64_t data_len,
                      struct gm_st_entry *e, uint64_t *begin)
{
    const json_t *dtype, *shape, *offs;
    char pn[96];
    int64_t b, end, numel = 1, nbytes;

    printable(pn, sizeof(pn), name);
    if (!json_is_object(info))
        return bad(r, "tensor '%s': not an object", pn);
    dtype = json_object_get(info, "dtype");
    shape = json_object_get(info, "shape");
    offs = json_object_get(info, "data_offsets");
    if (dtype == NULL || shape == NULL || offs == NULL || json_object_size(info) != 3)
        return bad(r, "tensor '%s': needs exactly dtype, shape and data_offsets", pn);
    if (!json_is_string(dtype))
        return bad(r, "tensor '%s': dtype is not a string", pn);
    if (parse_dtype(json_string_value(dtype), &e->dtype) != 0) {
        char pd[32];
        return bad(r, "tensor '%s': unsupported dtype '%s' (F32, F16, BF16, F64 are)", pn,
                   printable(pd, sizeof(pd), json_string_value(dtype)));
    }
    if (!json_is_array(shape))
        return bad(r, "tensor '%s': shape is not an array", pn);
    if (json_array_size(shape) > GM_ST_MAX_DIMS)
        return bad(r, "tensor '%s': %zu dims, at most %d supported", pn, json_array_size(shape),
                   GM_ST_MAX_DIMS);
    e->ndim = (int)json_array_size(shape);
    for (int d = 0; d < e->ndim; d++) {
        e->shape[d] = get_count(json_array_get(shape, (size_t)d));
        if (e->shape[d] < 0)
            return bad(r, "tensor '%s': shape[%d] is not a non-negative integer", pn, d);
        if (__builtin_mul_overflow(numel, e->shape[d], &numel))
            return bad(r, "tensor '%s': shape overflows", pn);
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return bad(r, "tensor '%s': data_offsets is not an array of two integers", pn);
    b = get_count(json_array_get(offs, 0));
    end = get_count(json_array_get(offs, 1));
    if (b < 0 || end < 0)
        return bad(r, "tensor '%s': data_offsets are not non-negative integers", pn);
    if (b > end || (uint64_t)end > data_len)
        return bad(r, "tensor '%s': data_offsets [%lld, %lld] outside the %llu data bytes", pn,
                   (long long)b, (long long)end, (unsigned long long)data_len);
    if (__builtin_mul_overflow(numel, (int64_t)dtype_sizes[e->dtype], &nbytes))
        return bad(r, "tensor '%s': shape is too large", pn);
    if (nbytes != end - b)
        return bad(r, "tensor '%s': %lld %s elements need %lld bytes, data_offsets give %lld", pn,
                   (long long)numel, dtype_names[e->dtype], (long long)nbytes,
                   (long long)(end - b));
    e->numel = numel;
    e->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    return 0;
}

struct span {
    uint64_t begin, end;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int parse_in(struct reader *r, const uint8_t *buf, size_t len, struct gm_st_file *out)
{
    json_t *root = NULL, *md = NULL, *v;
    json_error_t jerr;
    const char *key;
    uint64_t hlen, data_len, *begins = NULL;
    struct span *spans = NULL;
    size_t nt = 0, strbytes = 0, ti = 0, mi = 0;
    char *sp;
    int err = 0;

    memset(out, 0, sizeof(*out));
    if (len < 8)
        return bad(r, "%zu bytes, shorter than the 8-byte header length", len);
    hlen = gm_get_le64(buf);
    if (hlen > GM_ST_HEADER_MAX)
        return bad(r, "header length %llu is over the %u-byte limit", (unsigned long long)hlen,
                   GM_ST_HEADER_MAX);
    if (hlen > len - 8)
        return bad(r, "header length %llu runs past the end of the %zu-byte file",
                   (unsigned long long)hlen, len);
    if (hlen < 2 || buf[8] != '{')
        return bad(r, "header does not start with '{'");
    data_len = len - 8 - hlen;

    root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        char pt[128];
        err = bad(r, "header is not JSON: %s (at byte %d)", printable(pt, sizeof(pt), jerr.text),
                  jerr.position);
        goto out;
    }
    if (!json_is_object(root)) {
        err = bad(r, "header is not a JSON object");
        goto out;
    }

    /* pass 1: types, counts and string bytes */
    json_object_foreach(root, key, v)
    {
        strbytes += strlen(key) + 1;
        if (strcmp(key, META_KEY) == 0) {
            const char *mk;
            json_t *mv;

            if (!json_is_object(v)) {
                err = bad(r, "__metadata__ is not an object");
                goto out;
            }
            md = v;
            json_object_foreach(md, mk, mv)
            {
                if (!json_is_string(mv)) {
                    char pk[96];
                    err =
                        bad(r, "__metadata__ '%s' is not a string", printable(pk, sizeof(pk), mk));
                    goto out;
                }
                strbytes += strlen(mk) + 1 + json_string_length(mv) + 1;
                out->n_meta++;
            }
        } else {
            nt++;
        }
    }

    out->tensors = calloc(nt ? nt : 1, sizeof(*out->tensors));
    out->meta = calloc(out->n_meta ? out->n_meta : 1, sizeof(*out->meta));
    out->strtab = malloc(strbytes ? strbytes : 1);
    begins = calloc(nt ? nt : 1, sizeof(*begins));
    spans = calloc(nt ? nt : 1, sizeof(*spans));
    if (out->tensors == NULL || out->meta == NULL || out->strtab == NULL || begins == NULL ||
        spans == NULL) {
        gm_err("%s: out of memory reading safetensors", r->origin);
        err = -ENOMEM;
        goto out;
    }

    /* pass 2: tensors checked and copied */
    sp = out->strtab;
    json_object_foreach(root, key, v)
    {
        size_t kl = strlen(key) + 1;

        if (strcmp(key, META_KEY) == 0)
            continue;
        err = parse_info(r, key, v, data_len, &out->tensors[ti], &begins[ti]);
        if (err != 0)
            goto out;
        memcpy(sp, key, kl);
        out->tensors[ti].name = sp;
        sp += kl;
        out->tensors[ti].data = buf + 8 + hlen + begins[ti];
        spans[ti].begin = begins[ti];
        spans[ti].end = begins[ti] + out->tensors[ti].nbytes;
        ti++;
    }
    out->n_tensors = nt;
    if (md != NULL) {
        const char *mk;
        json_t *mv;

        json_object_foreach(md, mk, mv)
        {
            size_t kl = strlen(mk) + 1, vl = json_string_length(mv) + 1;

            memcpy(sp, mk, kl);
            out->meta[mi].key = sp;
            sp += kl;
            memcpy(sp, json_string_value(mv), vl);
            out->meta[mi].value = sp;
            sp += vl;
            mi++;
        }
    }

    /* the tensors must tile [0, data_len) exactly */
    qsort(spans, nt, sizeof(*spans), cmp_span);
    {
        uint64_t at = 0;
        for (size_t i = 0; i < nt; i++) {
            if (spans[i].begin != at) {
                err = bad(r, "tensor data %s at byte %llu of the data section",
                          spans[i].begin > at ? "has a gap" : "overlaps", (unsigned long long)at);
                goto out;
            }
            at = spans[i].end;
        }
        if (at != data_len) {
            err = bad(r, "%llu bytes after the last tensor", (unsigned long long)(data_len - at));
            goto out;
        }
    }
    out->len = len;
out:
    free(spans);
    free(begins);
    json_decref(root);
    if (err != 0)
        gm_safetensors_free(out);
    return err;
}

int gm_safetensors_parse(const uint8_t *buf, size_t len, struct gm_st_file *out)
{
    struct reader r = {.origin = "<memory>", .failed = false};

    if (buf == NULL && len > 0) {
        memset(out, 0, sizeof(*out));
        return -EINVAL;
    }
    return parse_in(&r, buf, len, out);
}

int gm_safetensors_load(const char *path, struct gm_st_file *out)
{
    struct reader r = {.origin = path, .failed = false};
    struct stat st;
    uint8_t *buf = NULL;
    size_t len = 0;
    int fd, err;

    memset(out, 0, sizeof(*out));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = -errno;
        gm_err("%s: cannot read: %s", path, gm_strerror(err));
        return err;
    }
    if (fstat(fd, &st) != 0) {
        err = -errno;
        gm_err("%s: cannot read: %s", path, gm_strerror(err));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        err = -EINVAL;
        gm_err("%s: cannot read: not a regular file", path);
        goto fail;
    }
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (buf == NULL) {
        err = -ENOMEM;
        gm_err("%s: cannot read: out of memory (%lld bytes)", path, (long long)st.st_size);
        goto fail;
    }
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            err = n < 0 ? -errno : -EIO;
            gm_err("%s: cannot read: %s", path,
                   n < 0 ? gm_strerror(err) : "file shrank while reading");
            goto fail;
        }
        len += (size_t)n;
    }
    close(fd);
    fd = -1;
    err = parse_in(&r, buf, len, out);
    if (err != 0)
        goto fail;
    out->buf = buf;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    free(buf);
    return err;
}

const struct gm_st_entry *gm_safetensors_find(const struct gm_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *gm_safetensors_meta(const struct gm_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

static float half_to_float(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;

    if (exp == 0)
        v = ldexpf((float)mant, -24); /* zero and subnormals */
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexpf((float)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

int gm_safetensors_to_f32(const struct gm_st_entry *e, float *dst, size_t n)
{
    const uint8_t *p = e->data;

    if (e->numel < 0 || n != (uint64_t)e->numel)
        return -EINVAL;
    if (n == 0)
        return 0;
    switch (e->dtype) {
    case GM_ST_DTYPE_F32:
#if HOST_LE
        memcpy(dst, p, n * 4);
        return 0;
#endif
        for (size_t i = 0; i < n; i++, p += 4) {
            uint32_t u =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&dst[i], &u, 4);
        }
        return 0;
    case GM_ST_DTYPE_F16:
        for (size_t i = 0; i < n; i++, p += 2)
            dst[i] = half_to_float((uint16_t)(p[0] | p[1] << 8));
        return 0;
    case GM_ST_DTYPE_BF16:
        for (size_t i = 0; i < n; i++, p += 2) {
            uint32_t u = ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
            memcpy(&dst[i], &u, 4);
        }
        return 0;
    case GM_ST_DTYPE_F64:
        for (size_t i = 0; i < n; i++, p += 8) {
            uint64_t u = gm_get_le64(p);
            double d;
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
        }
        return 0;
    }
    return -EINVAL;
}

void gm_safetensors_free(struct gm_st_file *f)
{
    if (f == NULL)
        return;
    free(f->tensors);
    free(f->meta);
    free(f->strtab);
    free(f->buf);
    memset(f, 0, sizeof(*f));
}
