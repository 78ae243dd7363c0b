/*
 * tests/unit/test_safetensors.c - checkpoint files: write/load round trip (bytes, shapes,
 * metadata, 8-aligned header), atomic replacement (no temp left, old file intact on a failed
 * write), every class of malformed header refused with GM_ERR_FORMAT, dtype conversion, and,
 * when the Python safetensors package is importable, interoperability both ways (otherwise
 * that part prints SKIP and the rest still runs).  Leaves nothing behind in $TMPDIR.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/test.h"
#include "train/ckpt/safetensors.h"

GM_TEST_DEFINE_STATE;

static char tmpdir[256];

static void tmp_path(char *dst, size_t n, const char *name)
{
    snprintf(dst, n, "%s/%s", tmpdir, name);
}

/* Reads a whole file; caller frees. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;

    *len = 0;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n)
            *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

/* Entries of tmpdir whose name contains s. */
static int count_entries(const char *s)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL)
        n += strstr(de->d_name, s) != NULL;
    closedir(d);
    return n;
}

/* Runs fn with the log captured into log (one buffer for the whole call). */
struct capture {
    int fds[2];
};

static void capture_start(struct capture *c)
{
    if (pipe(c->fds) != 0) {
        c->fds[0] = c->fds[1] = -1;
        return;
    }
    fcntl(c->fds[0], F_SETFL, O_NONBLOCK);
    gm_log_set_fd(c->fds[1]);
}

static void capture_end(struct capture *c, char *log, size_t n)
{
    size_t off = 0;

    gm_log_set_fd(2);
    log[0] = '\0';
    if (c->fds[0] < 0)
        return;
    close(c->fds[1]);
    for (;;) {
        ssize_t r = read(c->fds[0], log + off, n - 1 - off);
        if (r <= 0)
            break;
        off += (size_t)r;
    }
    log[off] = '\0';
    close(c->fds[0]);
}

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static const char job_text[] =
    "[job]\nname = \"quoted\" \\ back\\slash\nmodel = mlp ; caf\xc3\xa9\n"
    "[optim]\nlr = 0.1\ttab\n";

static void test_round_trip(void)
{
    float w[6] = {1.5f, -2.25f, 3e-38f, 1e30f, -0.0f, 7.0f};
    float b[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    float s = 42.0f;
    struct gm_st_tensor t[] = {
        {"layer1.weight", w, 2, {2, 3}}, {"layer1.bias", b, 1, {4}},  {"step_scalar", &s, 0, {0}},
        {"empty", NULL, 2, {0, 5}},      {"w4d", w, 4, {1, 2, 3, 1}},
    };
    struct gm_st_meta meta[] = {{"job", job_text}, {"step", "1200"}, {"term", "3"}};
    struct gm_st_file f;
    const struct gm_st_entry *e;
    char path[512];
    uint8_t *raw;
    size_t len;
    uint64_t hlen = 0;
    float out[6];

    tmp_path(path, sizeof(path), "rt.safetensors");
    GM_CHECK_OK(gm_safetensors_write(path, t, 5, meta, 3));
    GM_CHECK_EQ(count_entries(".tmp."), 0);

    /* the raw layout: 8-aligned, space-padded header, data packed in order */
    raw = slurp(path, &len);
    GM_CHECK(raw != NULL && len > 8);
    if (raw == NULL)
        return;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    GM_CHECK_EQ(hlen % 8, 0);
    GM_CHECK_EQ(len, 8 + hlen + (6 + 4 + 1 + 0 + 6) * 4);
    GM_CHECK_EQ(raw[8], '{');
    {
        size_t end = 8 + (size_t)hlen;
        while (end > 8 && raw[end - 1] == ' ')
            end--;
        GM_CHECK_EQ(raw[end - 1], '}');
        GM_CHECK(8 + hlen - end < 8);
    }
    GM_CHECK(memcmp(raw + 8 + hlen, w, sizeof(w)) == 0); /* little-endian host */
    GM_CHECK(memcmp(raw + 8 + hlen + 24, b, sizeof(b)) == 0);
    free(raw);

    GM_CHECK_OK(gm_safetensors_load(path, &f));
    GM_CHECK_EQ(f.n_tensors, 5);
    GM_CHECK_EQ(f.n_meta, 3);
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "job"), job_text);
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "step"), "1200");
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "term"), "3");
    GM_CHECK(gm_safetensors_meta(&f, "absent") == NULL);
    GM_CHECK(gm_safetensors_find(&f, "absent") == NULL);

    e = gm_safetensors_find(&f, "layer1.weight");
    GM_CHECK(e != NULL);
    if (e != NULL) {
        GM_CHECK_EQ(e->dtype, GM_ST_DTYPE_F32);
        GM_CHECK_EQ(e->ndim, 2);
        GM_CHECK_EQ(e->shape[0], 2);
        GM_CHECK_EQ(e->shape[1], 3);
        GM_CHECK_EQ(e->numel, 6);
        GM_CHECK_EQ(e->nbytes, 24);
        GM_CHECK_OK(gm_safetensors_to_f32(e, out, 6));
        GM_CHECK(memcmp(out, w, sizeof(w)) == 0); /* bit-exact, -0.0 included */
        GM_CHECK_ERR(gm_safetensors_to_f32(e, out, 5), -EINVAL);
    }
    e = gm_safetensors_find(&f, "layer1.bias");
    GM_CHECK(e != NULL && e->ndim == 1 && e->shape[0] == 4 && memcmp(e->data, b, 16) == 0);
    e = gm_safetensors_find(&f, "step_scalar");
    GM_CHECK(e != NULL && e->ndim == 0 && e->numel == 1 && memcmp(e->data, &s, 4) == 0);
    e = gm_safetensors_find(&f, "empty");
    GM_CHECK(e != NULL && e->ndim == 2 && e->numel == 0 && e->nbytes == 0);
    if (e != NULL)
        GM_CHECK_OK(gm_safetensors_to_f32(e, NULL, 0));
    e = gm_safetensors_find(&f, "w4d");
    GM_CHECK(e != NULL && e->ndim == 4 && e->shape[2] == 3 && memcmp(e->data, w, 24) == 0);
    gm_safetensors_free(&f);
    GM_CHECK(f.tensors == NULL && f.buf == NULL);
    gm_safetensors_free(&f);
    gm_safetensors_free(NULL);

    /* no metadata, no tensors: still a valid file */
    GM_CHECK_OK(gm_safetensors_write(path, NULL, 0, NULL, 0));
    GM_CHECK_OK(gm_safetensors_load(path, &f));
    GM_CHECK_EQ(f.n_tensors, 0);
    GM_CHECK_EQ(f.n_meta, 0);
    gm_safetensors_free(&f);
    unlink(path);
}

static void test_atomic(void)
{
    float a[2] = {1, 2}, big[65536] = {0};
    struct gm_st_tensor ta = {"a", a, 1, {2}}, tb = {"b", a, 2, {1, 2}};
    struct gm_st_tensor tbig = {"big", big, 1, {65536}};
    struct gm_st_file f;
    struct capture cap;
    struct rlimit old, small;
    char path[512], log[1024], want[1024];
    int err;

    tmp_path(path, sizeof(path), "atomic.safetensors");
    GM_CHECK_OK(gm_safetensors_write(path, &ta, 1, NULL, 0));
    GM_CHECK_OK(gm_safetensors_write(path, &tb, 1, NULL, 0)); /* replaces */
    GM_CHECK_OK(gm_safetensors_load(path, &f));
    GM_CHECK(gm_safetensors_find(&f, "a") == NULL);
    GM_CHECK(gm_safetensors_find(&f, "b") != NULL);
    gm_safetensors_free(&f);
    GM_CHECK_EQ(count_entries("atomic"), 1);

    /* A write that fails half-way (file size limit) leaves the old file and no temp file. */
    signal(SIGXFSZ, SIG_IGN);
    GM_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 4096;
    GM_CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    capture_start(&cap);
    err = gm_safetensors_write(path, &tbig, 1, NULL, 0);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_DFL);
    GM_CHECK_ERR(err, -EFBIG);
    snprintf(want, sizeof(want), "error: %s: cannot write: write: File too large\n", path);
    GM_CHECK_STREQ(log, want);
    GM_CHECK_EQ(count_entries(".tmp."), 0);
    GM_CHECK_OK(gm_safetensors_load(path, &f));
    GM_CHECK(gm_safetensors_find(&f, "b") != NULL);
    gm_safetensors_free(&f);

    /* a directory that does not exist: one line, nothing created */
    tmp_path(path, sizeof(path), "no/such/dir.safetensors");
    capture_start(&cap);
    err = gm_safetensors_write(path, &ta, 1, NULL, 0);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, -ENOENT);
    snprintf(want, sizeof(want), "error: %s: cannot write: create: No such file or directory\n",
             path);
    GM_CHECK_STREQ(log, want);

    /* a relative path (directory ".") works too */
    {
        char cwd[512];
        GM_CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
        GM_CHECK(chdir(tmpdir) == 0);
        GM_CHECK_OK(gm_safetensors_write("rel.safetensors", &ta, 1, NULL, 0));
        GM_CHECK(access("rel.safetensors", F_OK) == 0);
        unlink("rel.safetensors");
        GM_CHECK(chdir(cwd) == 0);
    }
    tmp_path(path, sizeof(path), "atomic.safetensors");
    unlink(path);
}

static void test_write_bad_input(void)
{
    float a[2] = {1, 2};
    struct gm_st_tensor dup[] = {{"x", a, 1, {2}}, {"x", a, 1, {2}}};
    struct gm_st_tensor reserved = {"__metadata__", a, 1, {2}};
    struct gm_st_tensor empty_name = {"", a, 1, {2}};
    struct gm_st_tensor five = {"x", a, 5, {1, 1, 1, 1}};
    struct gm_st_tensor negative = {"x", a, 2, {-1, 2}};
    struct gm_st_tensor nodata = {"x", NULL, 1, {2}};
    struct gm_st_tensor badname = {"bad\xff", a, 1, {2}};
    struct gm_st_tensor ok = {"x", a, 1, {2}};
    struct gm_st_meta dupmeta[] = {{"k", "1"}, {"k", "2"}};
    struct gm_st_meta badmeta = {"k", "\xc3"};
    struct {
        const struct gm_st_tensor *t;
        size_t nt;
        const struct gm_st_meta *m;
        size_t nm;
        const char *want; /* after "error: <path>: cannot write: " */
    } cases[] = {
        {dup, 2, NULL, 0, "duplicate tensor name 'x'"},
        {&reserved, 1, NULL, 0, "tensor 0 has an empty or reserved name"},
        {&empty_name, 1, NULL, 0, "tensor 0 has an empty or reserved name"},
        {&five, 1, NULL, 0, "tensor 'x' has 5 dims (0 to 4 allowed)"},
        {&negative, 1, NULL, 0, "tensor 'x' has a bad shape"},
        {&nodata, 1, NULL, 0, "tensor 'x' has no data"},
        {&badname, 1, NULL, 0, "tensor name 'bad\xff' is not valid UTF-8"},
        {&ok, 1, dupmeta, 2, "duplicate metadata key 'k'"},
        {&ok, 1, &badmeta, 1, "metadata 'k' is not valid UTF-8"},
    };
    char path[512], log[1024], want[1024];
    struct capture cap;

    tmp_path(path, sizeof(path), "bad.safetensors");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int err;

        capture_start(&cap);
        err = gm_safetensors_write(path, cases[i].t, cases[i].nt, cases[i].m, cases[i].nm);
        capture_end(&cap, log, sizeof(log));
        GM_CHECK_ERR(err, -EINVAL);
        snprintf(want, sizeof(want), "error: %s: cannot write: %s\n", path, cases[i].want);
        GM_CHECK_STREQ(log, want);
        GM_CHECK(access(path, F_OK) != 0); /* nothing touched */
    }
    GM_CHECK_EQ(count_entries("bad"), 0);
}

/* Builds "<u64 len><header padded to pad><data_len zero bytes>" into buf; returns its size. */
static size_t make_file(uint8_t *buf, const char *header, size_t data_len)
{
    size_t h = strlen(header);

    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, 0, data_len);
    return 8 + h + data_len;
}

/* header + data_len bytes must be refused with GM_ERR_FORMAT and one log line with want. */
static void expect_format(const char *header, size_t data_len, const char *want)
{
    static uint8_t buf[4096];
    char log[2048], line[1024];
    struct gm_st_file f;
    struct capture cap;
    size_t len = make_file(buf, header, data_len);
    int err;

    memset(&f, 0xAB, sizeof(f)); /* out is cleared on entry */
    capture_start(&cap);
    err = gm_safetensors_parse(buf, len, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, GM_ERR_FORMAT);
    GM_CHECK_EQ(count_lines(log), 1);
    snprintf(line, sizeof(line), "error: <memory>: not a valid safetensors file: %s\n", want);
    GM_CHECK_STREQ(log, line);
    GM_CHECK(f.tensors == NULL && f.meta == NULL && f.strtab == NULL && f.n_tensors == 0);
    gm_safetensors_free(&f);
}

#define T4(name, b, e)                                                                             \
    "\"" name "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" #b "," #e "]}"

static void test_malformed(void)
{
    uint8_t buf[64];
    struct gm_st_file f;
    struct capture cap;
    char log[1024];
    int err;

    /* too short for the length field */
    for (size_t n = 0; n < 8; n++) {
        memset(buf, 0, sizeof(buf));
        capture_start(&cap);
        err = gm_safetensors_parse(buf, n, &f);
        capture_end(&cap, log, sizeof(log));
        GM_CHECK_ERR(err, GM_ERR_FORMAT);
        GM_CHECK_EQ(count_lines(log), 1);
    }
    /* header length beyond the file, and huge (no allocation attempted) */
    memset(buf, 0, sizeof(buf));
    buf[0] = 100;
    memcpy(buf + 8, "{}", 2);
    capture_start(&cap);
    err = gm_safetensors_parse(buf, 10, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, GM_ERR_FORMAT);
    GM_CHECK_STREQ(log, "error: <memory>: not a valid safetensors file: header length 100 runs "
                        "past the end of the 10-byte file\n");
    memset(buf, 0xff, 8);
    capture_start(&cap);
    err = gm_safetensors_parse(buf, 10, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, GM_ERR_FORMAT);
    GM_CHECK_STREQ(log, "error: <memory>: not a valid safetensors file: header length "
                        "18446744073709551615 is over the 104857600-byte limit\n");

    expect_format("", 0, "header does not start with '{'");
    expect_format(" {}", 0, "header does not start with '{'");
    expect_format("[]", 0, "header does not start with '{'");
    expect_format("{\"a\":", 0,
                  "header is not JSON: unexpected token near end of file "
                  "(at byte 5)");
    expect_format("{} x", 0, "header is not JSON: end of file expected near 'x' (at byte 4)");
    expect_format("{}\n\x1b[2J", 0,
                  "header is not JSON: end of file expected near '?' (at byte 4)");
    expect_format("{" T4("a", 0, 4) "," T4("a", 4, 8) "}", 8,
                  "header is not JSON: duplicate object key near '\"a\"' (at byte 57)");
    /* wrong types */
    expect_format("{\"a\":5}", 0, "tensor 'a': not an object");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                  "tensor 'a': needs exactly dtype, shape and data_offsets");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                  "tensor 'a': needs exactly dtype, shape and data_offsets");
    expect_format("{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': dtype is not a string");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': shape is not an array");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': shape[0] is not a non-negative integer");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': shape[0] is not a non-negative integer");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                  "\"data_offsets\":[0,4]}}",
                  4, "tensor 'a': 9 dims, at most 8 supported");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                  "\"data_offsets\":[0,4]}}",
                  4, "tensor 'a': shape overflows");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],"
                  "\"data_offsets\":[0,4]}}",
                  4, "tensor 'a': shape is too large");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                  "tensor 'a': data_offsets is not an array of two integers");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", 4,
                  "tensor 'a': data_offsets is not an array of two integers");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4,
                  "tensor 'a': data_offsets are not non-negative integers");
    expect_format("{\"__metadata__\":[],\"a\":{}}", 0, "__metadata__ is not an object");
    expect_format("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k' is not a string");
    expect_format("{\"__metadata__\":{\"k\":null}}", 0, "__metadata__ 'k' is not a string");
    /* dtypes */
    expect_format("{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': unsupported dtype 'F31' (F32, F16, BF16, F64 are)");
    expect_format("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
                  "tensor 'a': unsupported dtype 'I64' (F32, F16, BF16, F64 are)");
    /* offsets */
    expect_format("{" T4("a", 0, 8) "}", 4,
                  "tensor 'a': data_offsets [0, 8] outside the 4 data bytes");
    expect_format("{" T4("a", 4, 0) "}", 4,
                  "tensor 'a': data_offsets [4, 0] outside the 4 data bytes");
    expect_format("{" T4("a", 0, 4) "," T4("b", 2, 6) "}", 8,
                  "tensor data overlaps at byte 4 of the data section");
    expect_format("{" T4("a", 0, 4) "," T4("b", 0, 4) "}", 8,
                  "tensor data overlaps at byte 4 of the data section");
    expect_format("{" T4("a", 0, 4) "," T4("b", 8, 12) "}", 12,
                  "tensor data has a gap at byte 4 of the data section");
    expect_format("{" T4("a", 4, 8) "}", 8, "tensor data has a gap at byte 0 of the data section");
    expect_format("{" T4("a", 0, 4) "}", 6, "2 bytes after the last tensor");
    expect_format("{}", 1, "1 bytes after the last tensor");
    /* shape vs size */
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                  "tensor 'a': 3 F32 elements need 12 bytes, data_offsets give 8");
    expect_format("{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", 4,
                  "tensor 'a': 4 F16 elements need 8 bytes, data_offsets give 4");

    /* a valid hand-made file: order in the header is not data order, tensors of size 0 */
    {
        static uint8_t file[512];
        size_t len = make_file(file,
                               "{" T4("b", 4, 8) ",\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],"
                                                 "\"data_offsets\":[4,4]}," T4("a", 0, 4) "}  ",
                               8);
        GM_CHECK_OK(gm_safetensors_parse(file, len, &f));
        GM_CHECK_EQ(f.n_tensors, 3);
        GM_CHECK(f.buf == NULL); /* borrowed */
        GM_CHECK(gm_safetensors_find(&f, "b") != NULL &&
                 gm_safetensors_find(&f, "b")->data == file + len - 4);
        gm_safetensors_free(&f);
    }
}

static void test_dtypes(void)
{
    /* F16: 1, -2, 65504, smallest subnormal, -0, inf, nan; BF16: 1.5, -inf; F64: 0.1, 1e300 */
    static const char header[] =
        "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[14,18]},"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[18,34]}}";
    static const uint8_t data[34] = {
        0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80, 0x00, 0x7c, 0x01,
        0x7e, 0xc0, 0x3f, 0x80, 0xff, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f, /* 0.1 */
        0x9c, 0x75, 0x88, 0x3c, 0xe4, 0x37, 0x7e, 0x7e,                               /* 1e300 */
    };
    static uint8_t file[512];
    struct gm_st_file f;
    float v[7];
    size_t len = make_file(file, header, 0);

    memcpy(file + len, data, sizeof(data));
    len += sizeof(data);
    GM_CHECK_OK(gm_safetensors_parse(file, len, &f));
    if (f.n_tensors != 3)
        return;
    GM_CHECK_OK(gm_safetensors_to_f32(gm_safetensors_find(&f, "h"), v, 7));
    GM_CHECK(v[0] == 1.0f && v[1] == -2.0f && v[2] == 65504.0f);
    GM_CHECK(v[3] == ldexpf(1.0f, -24));
    GM_CHECK(v[4] == 0.0f && signbit(v[4]));
    GM_CHECK(isinf(v[5]) && v[5] > 0);
    GM_CHECK(isnan(v[6]));
    GM_CHECK_OK(gm_safetensors_to_f32(gm_safetensors_find(&f, "b"), v, 2));
    GM_CHECK(v[0] == 1.5f && isinf(v[1]) && v[1] < 0);
    GM_CHECK_OK(gm_safetensors_to_f32(gm_safetensors_find(&f, "d"), v, 2));
    GM_CHECK(v[0] == 0.1f && isinf(v[1]));
    GM_CHECK_STREQ(gm_safetensors_dtype_name(GM_ST_DTYPE_BF16), "BF16");
    GM_CHECK_STREQ(gm_safetensors_dtype_name((enum gm_st_dtype)9), "?");
    GM_CHECK_EQ(gm_safetensors_dtype_size(GM_ST_DTYPE_F64), 8);
    gm_safetensors_free(&f);
}

static void test_load_errors(void)
{
    struct gm_st_file f;
    struct capture cap;
    char path[512], log[1024], want[1024];
    int err;

    tmp_path(path, sizeof(path), "absent.safetensors");
    capture_start(&cap);
    err = gm_safetensors_load(path, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, -ENOENT);
    snprintf(want, sizeof(want), "error: %s: cannot read: No such file or directory\n", path);
    GM_CHECK_STREQ(log, want);

    capture_start(&cap);
    err = gm_safetensors_load(tmpdir, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, -EINVAL);
    GM_CHECK_EQ(count_lines(log), 1);

    /* a malformed file names the path */
    tmp_path(path, sizeof(path), "trunc.safetensors");
    {
        FILE *fp = fopen(path, "wb");
        GM_CHECK(fp != NULL);
        if (fp != NULL) {
            fwrite("\x10\0\0\0\0\0\0\0{}", 1, 10, fp);
            fclose(fp);
        }
    }
    capture_start(&cap);
    err = gm_safetensors_load(path, &f);
    capture_end(&cap, log, sizeof(log));
    GM_CHECK_ERR(err, GM_ERR_FORMAT);
    snprintf(want, sizeof(want),
             "error: %s: not a valid safetensors file: header length 16 runs past the end of "
             "the 10-byte file\n",
             path);
    GM_CHECK_STREQ(log, want);
    unlink(path);
}

/* --- Python interop (safetensors package), both directions ------------------------------- */

static int run_python(const char *script)
{
    char path[512], cmd[1024];
    FILE *f;
    int rc;

    tmp_path(path, sizeof(path), "check.py");
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s'", path, tmpdir);
    rc = system(cmd);
    unlink(path);
    return rc;
}

static const char py_reads_ours[] =
    "import sys, numpy as np\n"
    "from safetensors import safe_open\n"
    "from safetensors.numpy import load_file\n"
    "p = sys.argv[1] + '/c.safetensors'\n"
    "t = load_file(p)\n"
    "assert sorted(t) == ['bias', 'empty', 'scalar', 'weight'], sorted(t)\n"
    "w = np.arange(12, dtype=np.float32).reshape(3, 4) / 8 - 0.5\n"
    "assert t['weight'].dtype == np.float32 and t['weight'].shape == (3, 4)\n"
    "assert np.array_equal(t['weight'], w), t['weight']\n"
    "assert np.array_equal(t['bias'], np.array([1e-3, -7.25], dtype=np.float32))\n"
    "assert t['scalar'].shape == () and t['scalar'] == np.float32(3.5)\n"
    "assert t['empty'].shape == (0, 2)\n"
    "with safe_open(p, framework='np') as f:\n"
    "    m = f.metadata()\n"
    "assert m == {'job': '[job]\\nname = \"x\"\\tcaf\\u00e9\\n', 'step': '77'}, m\n";

static const char py_writes_theirs[] =
    "import sys, numpy as np\n"
    "from safetensors.numpy import save_file\n"
    "save_file({'f32': np.array([[1.5, -2], [3, 4]], dtype=np.float32),\n"
    "           'f16': np.array([0.5, -65504, 1e-7], dtype=np.float16),\n"
    "           'f64': np.array([0.1], dtype=np.float64),\n"
    "           'zero': np.zeros((0, 4), dtype=np.float32)},\n"
    "          sys.argv[1] + '/py.safetensors', metadata={'framework': 'numpy'})\n";

static void test_python(void)
{
    float w[12], bias[2] = {1e-3f, -7.25f}, sc = 3.5f, v[4];
    struct gm_st_tensor t[] = {
        {"weight", w, 2, {3, 4}},
        {"bias", bias, 1, {2}},
        {"scalar", &sc, 0, {0}},
        {"empty", NULL, 2, {0, 2}},
    };
    struct gm_st_meta meta[] = {{"job", "[job]\nname = \"x\"\tcaf\xc3\xa9\n"}, {"step", "77"}};
    struct gm_st_file f;
    const struct gm_st_entry *e;
    char path[512];
    int rc;

    if (system("python3 -c 'import numpy, safetensors.numpy' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP test_python: python3 with numpy and safetensors not found\n");
        return;
    }
    for (int i = 0; i < 12; i++)
        w[i] = (float)i / 8 - 0.5f;
    tmp_path(path, sizeof(path), "c.safetensors");
    GM_CHECK_OK(gm_safetensors_write(path, t, 4, meta, 2));
    rc = run_python(py_reads_ours);
    GM_CHECK_EQ(rc, 0);
    unlink(path);

    rc = run_python(py_writes_theirs);
    GM_CHECK_EQ(rc, 0);
    tmp_path(path, sizeof(path), "py.safetensors");
    GM_CHECK_OK(gm_safetensors_load(path, &f));
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "framework"), "numpy");
    GM_CHECK_EQ(f.n_tensors, 4);
    e = gm_safetensors_find(&f, "f32");
    GM_CHECK(e != NULL && e->dtype == GM_ST_DTYPE_F32 && e->ndim == 2 && e->shape[1] == 2);
    if (e != NULL && e->numel == 4) {
        GM_CHECK_OK(gm_safetensors_to_f32(e, v, 4));
        GM_CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.0f && v[3] == 4.0f);
    }
    e = gm_safetensors_find(&f, "f16");
    GM_CHECK(e != NULL && e->dtype == GM_ST_DTYPE_F16);
    if (e != NULL && e->numel == 3) {
        GM_CHECK_OK(gm_safetensors_to_f32(e, v, 3));
        GM_CHECK(v[0] == 0.5f && v[1] == -65504.0f);
        GM_CHECK(v[2] == ldexpf(1.0f, -23)); /* 1e-7 rounds to the float16 subnormal 2^-23 */
    }
    e = gm_safetensors_find(&f, "f64");
    GM_CHECK(e != NULL && e->dtype == GM_ST_DTYPE_F64);
    if (e != NULL && e->numel == 1) {
        GM_CHECK_OK(gm_safetensors_to_f32(e, v, 1));
        GM_CHECK(v[0] == 0.1f);
    }
    e = gm_safetensors_find(&f, "zero");
    GM_CHECK(e != NULL && e->numel == 0 && e->shape[1] == 4);
    gm_safetensors_free(&f);
    unlink(path);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    int rc;

    snprintf(tmpdir, sizeof(tmpdir), "%s/gm-test-st-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_round_trip);
    GM_TEST_RUN(test_atomic);
    GM_TEST_RUN(test_write_bad_input);
    GM_TEST_RUN(test_malformed);
    GM_TEST_RUN(test_dtypes);
    GM_TEST_RUN(test_load_errors);
    GM_TEST_RUN(test_python);
    rc = gm_test_finish("test_safetensors");
    if (rmdir(tmpdir) != 0) {
        fprintf(stderr, "test_safetensors: %s left behind: %s\n", tmpdir, strerror(errno));
        rc = 1;
    }
    return rc;
}
