/*
 * train/job.c - job file parser; the format and the rules are in job.h.
 *
 * How it works: the text is checked as a whole first (size, NUL bytes, UTF-8), then fed to
 * inih line by line through our own reader (ini_parse_stream), which gives us what inih's
 * handler lacks: the line number, a length check instead of inih's silent split of long
 * lines, section headers as they appear (so an unknown empty section is caught too), and a
 * way to stop at the first problem (the reader returns EOF).  The handler always returns
 * "ok" to inih, so a non-zero result of ini_parse_stream is a syntax error inih found on its
 * own; the earlier of that and our first problem is the one reported.  Keys are a table
 * (section, key, type, offset into struct gm_job, range); checks that involve several keys
 * run after the last line.  Messages are built into a buffer and logged once at the end.
 */
#include "train/job.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/log.h"

_Static_assert(sizeof(enum gm_job_model) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_data_kind) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_optimizer) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_schedule_kind) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_codec) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(enum gm_job_precision) == sizeof(int), "enums are stored as int");

#define HIDDEN_SIZE_MAX 1048576

enum ktype {
    KT_STR,      /* non-empty string, fits the buffer */
    KT_NAME,     /* KT_STR restricted to [A-Za-z0-9._-], not starting with '.' */
    KT_INT,      /* int in [imin, imax] */
    KT_I64,      /* int64_t in [imin, imax] */
    KT_U64,      /* any uint64_t */
    KT_F64,      /* finite double in [fmin, fmax], ends open per flags */
    KT_BOOL,     /* true/false/yes/no/1/0 */
    KT_ENUM,     /* one of names[], stored as int */
    KT_HIDDEN,   /* comma list of ints into job->hidden / n_hidden */
    KT_CHANNELS, /* 1 or 3 */
    KT_DEVICE,   /* auto | cpu | cuda | cuda:N | cuda:all (train/nn/device.h) */
};

enum {
    K_REQUIRED = 1u << 0,
    K_FMIN_OPEN = 1u << 1,
    K_FMAX_OPEN = 1u << 2,
};

struct keydef {
    const char *section;
    const char *key;
    enum ktype type;
    size_t off;  /* offsetof(struct gm_job, field) */
    size_t size; /* KT_STR, KT_NAME: buffer size */
    long long imin, imax;
    double fmin, fmax;
    unsigned flags;
    const char *const *names; /* KT_ENUM: value names in enum order, NULL-terminated */
    const char *what;         /* KT_ENUM: what the value names, for messages */
};

static const char *const model_names[] = {"mlp", "lenet5", "vgg7", "resnet20", NULL};
static const char *const data_kind_names[] = {"idx", "cifar10", "folder", NULL};
static const char *const optimizer_names[] = {"sgd", "adam", NULL};
static const char *const precision_names[] = {"fp32", "bf16", NULL};
static const char *const schedule_kind_names[] = {"constant", "step", "cosine", NULL};
#define CODEC_NAME_(id, name, kind, wire) name,
static const char *const codec_names[] = {GM_JOB_CODECS(CODEC_NAME_) NULL};
#undef CODEC_NAME_
static const char *const section_names[] = {"job", "model", "data", "optim", "schedule", "comm"};

#define OFF(f) offsetof(struct gm_job, f)
#define FSIZE(f) sizeof(((struct gm_job *)0)->f)
#define K_STR(s, k, f, fl)                                                                         \
    {                                                                                              \
        s, k, KT_STR, OFF(f), FSIZE(f), 0, 0, 0, 0, fl, NULL, NULL                                 \
    }
#define K_INT(s, k, f, lo, hi, fl)                                                                 \
    {                                                                                              \
        s, k, KT_INT, OFF(f), 0, lo, hi, 0, 0, fl, NULL, NULL                                      \
    }
#define K_I64(s, k, f, lo, hi)                                                                     \
    {                                                                                              \
        s, k, KT_I64, OFF(f), 0, lo, hi, 0, 0, 0, NULL, NULL                                       \
    }
#define K_F64(s, k, f, lo, hi, fl)                                                                 \
    {                                                                                              \
        s, k, KT_F64, OFF(f), 0, 0, 0, lo, hi, fl, NULL, NULL                                      \
    }
#define K_ENUM(s, k, f, names, what, fl)                                                           \
    {                                                                                              \
        s, k, KT_ENUM, OFF(f), 0, 0, 0, 0, 0, fl, names, what                                      \
    }
#define K_OTHER(s, k, t, f)                                                                        \
    {                                                                                              \
        s, k, t, OFF(f), FSIZE(f), 0, 0, 0, 0, 0, NULL, NULL                                       \
    }

static const struct keydef keys[] = {
    K_OTHER("job", "name", KT_NAME, name),
    K_ENUM("job", "model", model, model_names, "model", K_REQUIRED),
    K_INT("job", "epochs", epochs, 1, INT_MAX, 0),
    K_OTHER("job", "seed", KT_U64, seed),
    K_INT("job", "threads", threads, 1, 1024, 0),
    K_INT("job", "log_every", log_every, 1, INT_MAX, 0),
    K_INT("job", "eval_every", eval_every, 1, INT_MAX, 0),
    K_STR("job", "out", out, 0),
    K_OTHER("job", "device", KT_DEVICE, device),
    K_INT("job", "checkpoint_every", checkpoint_every, 0, INT_MAX, 0),
    K_INT("job", "checkpoint_keep", checkpoint_keep, 1, 1000000, 0),
    K_STR("job", "checkpoint_dir", checkpoint_dir, 0),

    K_OTHER("model", "hidden", KT_HIDDEN, hidden),
    K_F64("model", "dropout", dropout, 0, 1, K_FMAX_OPEN),

    K_ENUM("data", "kind", data.kind, data_kind_names, "data kind", K_REQUIRED),
    K_STR("data", "dir", data.dir, K_REQUIRED),
    K_F64("data", "test_split", data.test_split, 0, 1, K_FMIN_OPEN | K_FMAX_OPEN),
    K_INT("data", "image_size", data.image_size, 0, 4096, 0),
    K_OTHER("data", "channels", KT_CHANNELS, data.channels),
    K_INT("data", "pad", data.pad, 0, 64, 0),

    K_ENUM("optim", "name", optim.name, optimizer_names, "optimizer", K_REQUIRED),
    K_F64("optim", "lr", optim.lr, 0, INFINITY, K_REQUIRED | K_FMIN_OPEN),
    K_INT("optim", "batch", optim.batch, 1, INT_MAX, 0),
    K_INT("optim", "global_batch", optim.global_batch, 1, INT_MAX, 0),
    K_F64("optim", "momentum", optim.momentum, 0, 1, K_FMAX_OPEN),
    K_OTHER("optim", "nesterov", KT_BOOL, optim.nesterov),
    K_F64("optim", "weight_decay", optim.weight_decay, 0, INFINITY, 0),
    K_F64("optim", "beta1", optim.beta1, 0, 1, K_FMAX_OPEN),
    K_F64("optim", "beta2", optim.beta2, 0, 1, K_FMAX_OPEN),
    K_F64("optim", "eps", optim.eps, 0, INFINITY, K_FMIN_OPEN),
    K_ENUM("optim", "precision", optim.precision, precision_names, "precision", 0),

    K_ENUM("schedule", "kind", schedule.kind, schedule_kind_names, "schedule kind", 0),
    K_I64("schedule", "warmup_steps", schedule.warmup_steps, 0, INT64_MAX),
    K_I64("schedule", "step_size", schedule.step_size, 1, INT64_MAX),
    K_F64("schedule", "gamma", schedule.gamma, 0, 1, K_FMIN_OPEN),
    K_F64("schedule", "min_lr", schedule.min_lr, 0, INFINITY, 0),

    K_ENUM("comm", "codec", comm.codec, codec_names, "codec", 0),
    K_INT("comm", "rank", comm.rank, 1, 1024, 0),
    K_INT("comm", "local_steps", comm.local_steps, 1, INT_MAX, 0),
    K_F64("comm", "outer_lr", comm.outer_lr, 0, INFINITY, K_FMIN_OPEN),
    K_F64("comm", "outer_momentum", comm.outer_momentum, 0, 1, K_FMAX_OPEN),
    K_OTHER("comm", "overlap", KT_BOOL, comm.overlap),
};
#define NKEYS GM_ARRAY_SIZE(keys)

/* A key that only takes effect when the int (enum) at enum_off is one of mask's bits. */
struct applies {
    const char *section, *key;
    size_t enum_off;
    unsigned mask;
    const char *when;
};

static const struct applies applies[] = {
    {"model", "hidden", OFF(model), 1u << GM_JOB_MODEL_MLP, "[job] model = mlp"},
    {"data", "test_split", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "image_size", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"data", "channels", OFF(data.kind), 1u << GM_JOB_DATA_KIND_FOLDER, "kind = folder"},
    {"optim", "momentum", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_SGD, "name = sgd"},
    {"optim", "nesterov", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_SGD, "name = sgd"},
    {"optim", "beta1", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"optim", "beta2", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"optim", "eps", OFF(optim.name), 1u << GM_JOB_OPTIMIZER_ADAM, "name = adam"},
    {"schedule", "step_size", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_STEP, "kind = step"},
    {"schedule", "gamma", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_STEP, "kind = step"},
    {"schedule", "min_lr", OFF(schedule.kind), 1u << GM_JOB_SCHEDULE_KIND_COSINE, "kind = cosine"},
    {"comm", "rank", OFF(comm.codec), (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_POWERSGD),
     "codec = powersgd or auto"},
    {"comm", "local_steps", OFF(comm.codec),
     (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_DILOCO), "codec = diloco or auto"},
    {"comm", "outer_lr", OFF(comm.codec), (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_DILOCO),
     "codec = diloco or auto"},
    {"comm", "outer_momentum", OFF(comm.codec),
     (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_DILOCO), "codec = diloco or auto"},
    {"comm", "overlap", OFF(comm.codec), (1u << GM_JOB_CODEC_AUTO) | (1u << GM_JOB_CODEC_DILOCO),
     "codec = diloco or auto"},
};

struct ctx {
    struct gm_job *job;
    const char *text; /* borrowed: job->text */
    size_t len, pos;
    int line;        /* lines handed to inih so far = inih's line number */
    bool failed;     /* msg holds the first problem */
    int err_line;    /* its line, 0 if none */
    int seen[NKEYS]; /* line where each key was set, 0 if not */
    char msg[1024];
};

/* --- messages ----------------------------------------------------------------------------- */

/* Records the first problem only; later ones are consequences or noise. */
__attribute__((format(printf, 3, 4))) static void fail(struct ctx *c, int line, const char *fmt,
                                                       ...)
{
    va_list ap;

    if (c->failed)
        return;
    c->failed = true;
    c->err_line = line;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
    va_end(ap);
}

/* Copies s for a message, control bytes shown as '?', so a value cannot forge log lines. */
static const char *printable(char *dst, size_t n, const char *s)
{
    size_t i;

    for (i = 0; i + 1 < n && s[i] != '\0'; i++)
        dst[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    dst[i] = '\0';
    return dst;
}

static void list_names(char *dst, size_t n, const char *const *names, size_t count)
{
    size_t off = 0;

    dst[0] = '\0';
    for (size_t i = 0; i < count && names[i] != NULL && off < n; i++) {
        int r = snprintf(dst + off, n - off, "%s%s", i ? ", " : "", names[i]);
        if (r < 0)
            break;
        off += (size_t)r;
    }
}

static void list_keys(char *dst, size_t n, const char *section)
{
    const char *names[NKEYS];
    size_t count = 0;

    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0)
            names[count++] = keys[i].key;
    list_names(dst, n, names, count);
}

static void describe(char *dst, size_t n, const struct keydef *k)
{
    long long top = k->type == KT_INT ? INT_MAX : INT64_MAX;

    switch (k->type) {
    case KT_INT:
    case KT_I64:
        if (k->imax != top)
            snprintf(dst, n, "an integer from %lld to %lld", k->imin, k->imax);
        else if (k->imin == 1)
            snprintf(dst, n, "a positive integer");
        else if (k->imin == 0)
            snprintf(dst, n, "a non-negative integer");
        else
            snprintf(dst, n, "an integer >= %lld", k->imin);
        break;
    case KT_U64:
        snprintf(dst, n, "an integer from 0 to %llu", (unsigned long long)UINT64_MAX);
        break;
    case KT_F64:
        if (isinf(k->fmax))
            snprintf(dst, n, "a number %s %g", (k->flags & K_FMIN_OPEN) ? ">" : ">=", k->fmin);
        else
            snprintf(dst, n, "a number in %c%g, %g%c", (k->flags & K_FMIN_OPEN) ? '(' : '[',
                     k->fmin, k->fmax, (k->flags & K_FMAX_OPEN) ? ')' : ']');
        break;
    case KT_BOOL:
        snprintf(dst, n, "true, false, yes, no, 1 or 0");
        break;
    case KT_CHANNELS:
        snprintf(dst, n, "1 or 3");
        break;
    case KT_DEVICE:
        snprintf(dst, n, "auto, cpu, cuda, cuda:N (N < %d) or cuda:all", GM_DEVICE_CUDA_MAX);
        break;
    case KT_HIDDEN:
        snprintf(dst, n, "a comma-separated list of 1 to %d integers from 1 to %d",
                 GM_JOB_HIDDEN_MAX, HIDDEN_SIZE_MAX);
        break;
    default:
        snprintf(dst, n, "valid");
        break;
    }
}

/* --- scalars ------------------------------------------------------------------------------ */

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool all_digits(const char *p)
{
    if (!is_digit(*p))
        return false;
    while (is_digit(*p))
        p++;
    return *p == '\0';
}

static bool parse_ll(const char *s, long long *out)
{
    char *end;
    long long v;

    if (!all_digits(s + (*s == '+' || *s == '-')))
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (!all_digits(s)) /* no sign: strtoull would wrap "-1" */
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    _Static_assert(sizeof(v) == sizeof(*out), "unsigned long long is 64 bits");
    *out = (uint64_t)v;
    return true;
}

/* Decimal only: [+-]digits[.digits][(e|E)[+-]digits], at least one mantissa digit; so no
 * hex, "nan", "inf" or leading blanks reach strtod.  Overflow and underflow are rejected. */
static bool parse_f64(const char *s, double *out)
{
    const char *p = s;
    int nd = 0, ne = 0;
    char *end;
    double v;

    if (*p == '+' || *p == '-')
        p++;
    for (; is_digit(*p); p++)
        nd++;
    if (*p == '.')
        for (p++; is_digit(*p); p++)
            nd++;
    if (nd == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        for (; is_digit(*p); p++)
            ne++;
        if (ne == 0)
            return false;
    }
    if (*p != '\0')
        return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "1"}, *const no[] = {"false", "no", "0"};

    for (size_t i = 0; i < GM_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_hidden(const char *s, int *sizes, int *count)
{
    int n = 0;
    const char *p = s;

    for (;;) {
        char item[32];
        size_t len = 0;
        long long v;

        while (*p == ' ' || *p == '\t')
            p++;
        while (*p != '\0' && *p != ',' && *p != ' ' && *p != '\t') {
            if (len + 1 >= sizeof(item))
                return false;
            item[len++] = *p++;
        }
        item[len] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (n >= GM_JOB_HIDDEN_MAX || !parse_ll(item, &v) || v < 1 || v > HIDDEN_SIZE_MAX)
            return false;
        sizes[n++] = (int)v;
        if (*p == '\0')
            break;
        if (*p != ',')
            return false;
        p++;
    }
    *count = n;
    return true;
}

static bool valid_name(const char *s)
{
    if (s[0] == '.')
        return false;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || is_digit(*s) || *s == '.' ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* Parses value into the field k names; records a problem on failure. */
static void set_value(struct ctx *c, const struct keydef *k, const char *value)
{
    char *field = (char *)c->job + k->off;
    char pv[256], desc[160];
    bool ok = false;

    printable(pv, sizeof(pv), value);
    if (value[0] == '\0') {
        fail(c, c->line, "[%s] %s has an empty value", k->section, k->key);
        return;
    }
    switch (k->type) {
    case KT_NAME:
    case KT_STR:
        if (strlen(value) >= k->size) {
            fail(c, c->line, "[%s] %s is longer than %zu bytes", k->section, k->key, k->size - 1);
            return;
        }
        if (k->type == KT_NAME && !valid_name(value)) {
            fail(c, c->line,
                 "[%s] %s = %s: must use only letters, digits, '.', '_' and '-', and not "
                 "start with '.'",
                 k->section, k->key, pv);
            return;
        }
        memcpy(field, value, strlen(value) + 1);
        return;
    case KT_INT:
    case KT_I64: {
        long long v;
        ok = parse_ll(value, &v) && v >= k->imin && v <= k->imax;
        if (ok && k->type == KT_INT) {
            int iv = (int)v;
            memcpy(field, &iv, sizeof(iv));
        } else if (ok) {
            int64_t lv = v;
            memcpy(field, &lv, sizeof(lv));
        }
        break;
    }
    case KT_U64: {
        uint64_t v;
        ok = parse_u64(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_F64: {
        double v;
        ok = parse_f64(value, &v) && v >= k->fmin && v <= k->fmax &&
             !((k->flags & K_FMIN_OPEN) && v == k->fmin) &&
             !((k->flags & K_FMAX_OPEN) && v == k->fmax);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_BOOL: {
        bool v;
        ok = parse_bool(value, &v);
        if (ok)
            memcpy(field, &v, sizeof(v));
        break;
    }
    case KT_DEVICE: {
        struct gm_device_spec v;
        ok = gm_device_spec_parse(value, &v) == 0;
        if (ok) {
            memcpy(field, &v, sizeof(v));
            c->job->device_set = true;
        }
        break;
    }
    case KT_CHANNELS: {
        long long v;
        ok = parse_ll(value, &v) && (v == 1 || v == 3);
        if (ok) {
            int iv = (int)v;
            memcpy(field, &iv, sizeof(iv));
        }
        break;
    }
    case KT_HIDDEN: {
        int sizes[GM_JOB_HIDDEN_MAX], n = 0;
        ok = parse_hidden(value, sizes, &n);
        if (ok) {
            memcpy(c->job->hidden, sizes, sizeof(int) * (size_t)n);
            c->job->n_hidden = n;
        }
        break;
    }
    case KT_ENUM:
        for (int i = 0; k->names[i] != NULL; i++) {
            if (strcmp(value, k->names[i]) == 0) {
                memcpy(field, &i, sizeof(i));
                return;
            }
        }
        list_names(desc, sizeof(desc), k->names, SIZE_MAX);
        fail(c, c->line, "unknown %s '%s' (known: %s)", k->what, pv, desc);
        return;
    }
    if (!ok) {
        describe(desc, sizeof(desc), k);
        fail(c, c->line, "[%s] %s = %s: must be %s", k->section, k->key, pv, desc);
    }
}

/* --- inih glue ---------------------------------------------------------------------------- */

static bool known_section(const char *s, size_t len)
{
    for (size_t i = 0; i < GM_ARRAY_SIZE(section_names); i++)
        if (strlen(section_names[i]) == len && memcmp(section_names[i], s, len) == 0)
            return true;
    return false;
}

static void fail_section(struct ctx *c, const char *s, size_t len)
{
    char name[64], known[128];
    size_t n = len < sizeof(name) - 1 ? len : sizeof(name) - 1;

    memcpy(name, s, n);
    name[n] = '\0';
    printable(name, sizeof(name), name);
    list_names(known, sizeof(known), section_names, GM_ARRAY_SIZE(section_names));
    fail(c, c->line, "unknown section [%s]%s (known: %s)", name, n < len ? "..." : "", known);
}

/* ini_reader: hands inih one line per call (so its line count is ours), without leading
 * blanks, the BOM, or '\r'; returns EOF at the end and after the first problem. */
static char *read_line(char *buf, int num, void *stream)
{
    struct ctx *c = stream;
    const char *start, *eol, *p;
    size_t n, limit;

    if (c->failed || c->pos >= c->len)
        return NULL;
    start = c->text + c->pos;
    eol = memchr(start, '\n', c->len - c->pos);
    n = eol != NULL ? (size_t)(eol - start) : c->len - c->pos;
    c->pos += n + (eol != NULL);
    c->line++;
    if (n > 0 && start[n - 1] == '\r')
        n--;
    limit = num > 3 ? (size_t)num - 3 : 0;
    if (limit > GM_JOB_LINE_MAX)
        limit = GM_JOB_LINE_MAX;
    if (n > limit) {
        fail(c, c->line, "line is longer than %zu bytes", limit);
        return NULL;
    }
    p = start;
    if (c->line == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    while (p < start + n && (*p == ' ' || *p == '\t' || *p == '\v' || *p == '\f' || *p == '\r'))
        p++;
    n -= (size_t)(p - start);
    if (n > 0 && *p == '[') {
        const char *close = memchr(p, ']', n);
        if (close != NULL && !known_section(p + 1, (size_t)(close - p - 1))) {
            fail_section(c, p + 1, (size_t)(close - p - 1));
            return NULL;
        }
    }
    memcpy(buf, p, n);
    buf[n] = '\n';
    buf[n + 1] = '\0';
    return buf;
}

static const struct keydef *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
            return &keys[i];
    return NULL;
}

/* ini_handler: always "ok" to inih; problems go to c (see the file comment). */
static int on_pair(void *user, const char *section, const char *key, const char *value)
{
    struct ctx *c = user;
    const struct keydef *k;
    char pk[64], ps[64], known[256];
    size_t i;

    if (c->failed)
        return 1;
    printable(pk, sizeof(pk), key);
    if (section[0] == '\0') {
        fail(c, c->line, "key '%s' is outside any section (put it under [job], [data], ...)", pk);
        return 1;
    }
    if (!known_section(section, strlen(section))) { /* the reader saw the header already */
        fail_section(c, section, strlen(section));
        return 1;
    }
    k = find_key(section, key);
    if (k == NULL) {
        list_keys(known, sizeof(known), section);
        fail(c, c->line, "unknown key '%s' in [%s] (known: %s)", pk,
             printable(ps, sizeof(ps), section), known);
        return 1;
    }
    i = (size_t)(k - keys);
    if (c->seen[i] != 0) {
        fail(c, c->line, "duplicate key [%s] %s (first set on line %d)", k->section, k->key,
             c->seen[i]);
        return 1;
    }
    c->seen[i] = c->line;
    set_value(c, k, value);
    return 1;
}

static int line_of(const struct ctx *c, const char *section, const char *key)
{
    const struct keydef *k = find_key(section, key);

    GM_ASSERT(k != NULL);
    return c->seen[k - keys];
}

/* Rules that involve more than one key, run after the whole file was read. */
static void check_whole(struct ctx *c)
{
    struct gm_job *job = c->job;
    int line;

    for (size_t i = 0; i < NKEYS; i++) {
        if ((keys[i].flags & K_REQUIRED) && c->seen[i] == 0) {
            fail(c, 0, "missing required key [%s] %s", keys[i].section, keys[i].key);
            return;
        }
    }
    for (size_t i = 0; i < GM_ARRAY_SIZE(applies); i++) {
        const struct applies *a = &applies[i];
        int v;

        line = line_of(c, a->section, a->key);
        memcpy(&v, (const char *)job + a->enum_off, sizeof(v));
        if (line != 0 && !(a->mask & (1u << v))) {
            fail(c, line, "[%s] %s only applies with %s", a->section, a->key, a->when);
            return;
        }
    }
    if (line_of(c, "optim", "batch") == 0 && line_of(c, "optim", "global_batch") == 0) {
        fail(c, 0, "missing required key [optim] batch (per worker) or global_batch");
        return;
    }
    if (line_of(c, "optim", "batch") != 0 && line_of(c, "optim", "global_batch") != 0) {
        fail(c, line_of(c, "optim", "global_batch"),
             "[optim] batch (per worker) and global_batch exclude each other: keep one");
        return;
    }
    line = line_of(c, "optim", "nesterov");
    if (job->optim.nesterov && job->optim.momentum <= 0) {
        fail(c, line, "[optim] nesterov = true needs momentum > 0");
        return;
    }
    if (job->schedule.kind == GM_JOB_SCHEDULE_KIND_STEP &&
        line_of(c, "schedule", "step_size") == 0) {
        fail(c, line_of(c, "schedule", "kind"), "[schedule] kind = step needs step_size");
        return;
    }
    line = line_of(c, "schedule", "min_lr");
    if (line != 0 && job->schedule.min_lr >= job->optim.lr) {
        fail(c, line, "[schedule] min_lr = %g must be below [optim] lr = %g", job->schedule.min_lr,
             job->optim.lr);
        return;
    }
    if (line_of(c, "job", "out") == 0)
        snprintf(job->out, sizeof(job->out), "%s.safetensors", job->name);
    if (line_of(c, "job", "checkpoint_dir") == 0)
        snprintf(job->checkpoint_dir, sizeof(job->checkpoint_dir), "%s.checkpoints", job->name);
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

/* Parses job->text (already set, NUL-terminated). */
static int parse_text(struct gm_job *job, const char *origin)
{
    struct ctx *c;
    size_t bad;
    bool nul;
    int r, err = 0;

    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->job = job;
    c->text = job->text;
    c->len = job->text_len;

    bad = bad_byte((const unsigned char *)c->text, c->len, &nul);
    if (bad < c->len) {
        int line = 1;
        for (size_t i = 0; i < bad; i++)
            line += c->text[i] == '\n';
        fail(c, line, nul ? "NUL byte in the text" : "text is not valid UTF-8");
    } else {
        r = ini_parse_stream(read_line, c, on_pair, c);
        if (r == -2) {
            err = -ENOMEM;
            gm_err("%s: out of memory while parsing", origin);
            goto out;
        }
        if (r > 0 && (!c->failed || r < c->err_line)) {
            c->failed = false;
            fail(c, r, "syntax error: expected '[section]' or 'key = value'");
        }
        if (!c->failed)
            check_whole(c);
    }
    if (c->failed) {
        err = GM_ERR_CONFIG;
        if (c->err_line > 0)
            gm_err("%s:%d: %s", origin, c->err_line, c->msg);
        else
            gm_err("%s: %s", origin, c->msg);
    }
out:
    free(c);
    return err;
}

/* --- public ------------------------------------------------------------------------------- */

void gm_job_defaults(struct gm_job *job)
{
    memset(job, 0, sizeof(*job));
    snprintf(job->name, sizeof(job->name), "job");
    job->model = GM_JOB_MODEL_MLP; /* placeholder: required */
    job->epochs = 5;
    job->seed = 1;
    job->threads = 1;
    job->log_every = 100;
    job->eval_every = 1;
    snprintf(job->out, sizeof(job->out), "job.safetensors");
    job->checkpoint_every = 0;
    job->checkpoint_keep = 3;
    snprintf(job->checkpoint_dir, sizeof(job->checkpoint_dir), "job.checkpoints");
    job->hidden[0] = 256;
    job->n_hidden = 1;
    job->dropout = 0;
    job->data.kind = GM_JOB_DATA_KIND_IDX; /* placeholder: required */
    job->data.test_split = 0.1;
    job->data.image_size = 0;
    job->data.channels = 3;
    job->optim.name = GM_JOB_OPTIMIZER_SGD; /* placeholder: required */
    job->optim.lr = 0;                      /* placeholder: required */
    job->optim.batch = 0;                   /* placeholder: this or global_batch required */
    job->optim.global_batch = 0;
    job->optim.momentum = 0;
    job->optim.nesterov = false;
    job->optim.weight_decay = 0;
    job->optim.beta1 = 0.9;
    job->optim.beta2 = 0.999;
    job->optim.eps = 1e-8;
    job->optim.precision = GM_JOB_PRECISION_FP32;
    job->schedule.kind = GM_JOB_SCHEDULE_KIND_CONSTANT;
    job->schedule.warmup_steps = 0;
    job->schedule.step_size = 0; /* required by kind = step */
    job->schedule.gamma = 0.1;
    job->schedule.min_lr = 0;
    job->comm.codec = GM_JOB_CODEC_AUTO;
    job->comm.rank = 2;
    job->comm.local_steps = 16;
    job->comm.outer_lr = 0.7;
    job->comm.outer_momentum = 0.9;
    job->comm.overlap = GM_JOB_OVERLAP_DEFAULT;
    job->text = NULL;
    job->text_len = 0;
}

/* Takes ownership of text (malloc'd, len bytes plus a NUL). */
static int parse_owned(char *text, size_t len, const char *origin, struct gm_job *job)
{
    int err;

    gm_job_defaults(job);
    job->text = text;
    job->text_len = len;
    err = parse_text(job, origin);
    if (err != 0)
        gm_job_free(job);
    return err;
}

int gm_job_parse(const char *text, size_t len, const char *origin, struct gm_job *job)
{
    char *copy;

    gm_job_defaults(job);
    if (origin == NULL)
        origin = "job";
    if (len > GM_JOB_TEXT_MAX) {
        gm_err("%s: larger than %d bytes", origin, GM_JOB_TEXT_MAX);
        gm_job_free(job);
        return GM_ERR_CONFIG;
    }
    copy = malloc(len + 1);
    if (copy == NULL) {
        gm_err("%s: out of memory", origin);
        gm_job_free(job);
        return -ENOMEM;
    }
    if (len > 0)
        memcpy(copy, text, len);
    copy[len] = '\0';
    return parse_owned(copy, len, origin, job);
}

int gm_job_load(const char *path, struct gm_job *job)
{
    char *buf = NULL;
    size_t len = 0;
    int fd, err;

    gm_job_defaults(job);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = -errno;
        gm_err("%s: cannot read: %s", path, gm_strerror(err));
        gm_job_free(job);
        return GM_ERR_CONFIG;
    }
    buf = malloc(GM_JOB_TEXT_MAX + 2);
    if (buf == NULL) {
        gm_err("%s: out of memory", path);
        err = -ENOMEM;
        goto out;
    }
    for (;;) { /* read one byte past the cap to tell "exactly the cap" from "more" */
        ssize_t r = read(fd, buf + len, GM_JOB_TEXT_MAX + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = -errno;
            gm_err("%s: cannot read: %s", path, gm_strerror(err));
            err = GM_ERR_CONFIG;
            goto out;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len > GM_JOB_TEXT_MAX) {
            gm_err("%s: larger than %d bytes", path, GM_JOB_TEXT_MAX);
            err = GM_ERR_CONFIG;
            goto out;
        }
    }
    buf[len] = '\0';
    close(fd);
    return parse_owned(buf, len, path, job);
out:
    free(buf);
    close(fd);
    gm_job_free(job);
    return err;
}

void gm_job_free(struct gm_job *job)
{
    if (job == NULL)
        return;
    free(job->text);
    memset(job, 0, sizeof(*job));
}

static const char *name_of(const char *const *names, size_t count, int v)
{
    return v >= 0 && (size_t)v < count && names[v] != NULL ? names[v] : "?";
}

const char *gm_job_model_name(enum gm_job_model m)
{
    return name_of(model_names, GM_ARRAY_SIZE(model_names), (int)m);
}

const char *gm_job_data_kind_name(enum gm_job_data_kind k)
{
    return name_of(data_kind_names, GM_ARRAY_SIZE(data_kind_names), (int)k);
}

const char *gm_job_optimizer_name(enum gm_job_optimizer o)
{
    return name_of(optimizer_names, GM_ARRAY_SIZE(optimizer_names), (int)o);
}

const char *gm_job_schedule_kind_name(enum gm_job_schedule_kind k)
{
    return name_of(schedule_kind_names, GM_ARRAY_SIZE(schedule_kind_names), (int)k);
}

const char *gm_job_codec_name(enum gm_job_codec c)
{
    return name_of(codec_names, GM_ARRAY_SIZE(codec_names), (int)c);
}

int gm_job_codec_parse(const char *name, enum gm_job_codec *out)
{
    for (int i = 0; name != NULL && i < GM_JOB_CODEC_COUNT; i++)
        if (strcmp(name, codec_names[i]) == 0) {
            *out = (enum gm_job_codec)i;
            return 0;
        }
    return -EINVAL;
}

const char *gm_job_precision_name(enum gm_job_precision p)
{
    return name_of(precision_names, GM_ARRAY_SIZE(precision_names), (int)p);
}

int gm_job_global_batch(const struct gm_job *job, int world, int *out)
{
    *out = 0;
    if (world < 1)
        return -EINVAL;
    if (job->optim.global_batch > 0) {
        if (job->optim.global_batch % world != 0) {
            gm_err("job %s: [optim] global_batch = %d does not divide by %d workers", job->name,
                   job->optim.global_batch, world);
            return GM_ERR_CONFIG;
        }
        *out = job->optim.global_batch;
        return 0;
    }
    if (job->optim.batch > INT_MAX / world) {
        gm_err("job %s: [optim] batch = %d times %d workers is too large", job->name,
               job->optim.batch, world);
        return GM_ERR_CONFIG;
    }
    *out = job->optim.batch * world;
    return 0;
}
