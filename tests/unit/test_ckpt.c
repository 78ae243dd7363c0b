/*
 * tests/unit/test_ckpt.c - train/ckpt/ckpt.h: a checkpoint's round trip (tensors, every
 * metadata field, the .sha256 beside it matching sha256sum's format), refusals (a flipped
 * byte, a truncated file, a missing or swapped .sha256, another job, another model, a newer
 * format, bad metadata), the fallback to the one before in a directory, pruning to the newest
 * K, and crash safety: a child process writing checkpoints is killed with SIGKILL at random
 * points, and afterwards every file under a final name is a complete, valid safetensors file
 * and every committed one (with its .sha256) loads.  Leaves nothing behind in $TMPDIR.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "common/log.h"
#include "common/test.h"
#include "train/ckpt/ckpt.h"

GM_TEST_DEFINE_STATE;

static char tmpdir[256];

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static void info_for(struct gm_ckpt_info *in, const char *hash, long step)
{
    memset(in, 0, sizeof(*in));
    snprintf(in->job_hash, sizeof(in->job_hash), "%s", hash);
    snprintf(in->job_name, sizeof(in->job_name), "unit");
    snprintf(in->model, sizeof(in->model), "mlp");
    snprintf(in->optim, sizeof(in->optim), "adam");
    snprintf(in->codec, sizeof(in->codec), "powersgd");
    in->step = step;
    in->total_steps = 1000;
    in->epoch = (int)(step / 100);
    in->data_offset = (step % 100) * 32;
    in->global_batch = 32;
    in->seed = 18446744073709551615ull;
    in->optim_step = step;
    in->term = 7;
    in->params = 6;
}

/* Writes a checkpoint of step with weights w[0..6) = step + i and an optimizer tensor. */
static int write_step(const char *dir, const char *hash, const char *model, long step,
                      char path[1024], char sha[65])
{
    static float w[6], opt[12];
    struct gm_ckpt_info in;

    for (int i = 0; i < 6; i++)
        w[i] = (float)step + (float)i * 0.25f;
    for (int i = 0; i < 12; i++)
        opt[i] = -(float)step - (float)i;
    const struct gm_st_tensor t[] = {
        {.name = "fc1.weight", .data = w, .ndim = 2, .shape = {2, 2}},
        {.name = "fc1.bias", .data = w + 4, .ndim = 1, .shape = {2}},
        {.name = GM_CKPT_OPTIM_TENSOR, .data = opt, .ndim = 1, .shape = {12}},
    };
    info_for(&in, hash, step);
    snprintf(in.model, sizeof(in.model), "%s", model);
    if (gm_ckpt_path(dir, step, path, 1024) != 0)
        return -ENAMETOOLONG;
    return gm_ckpt_write(path, t, 3, &in, "[job]\nname = unit\n", sha);
}

static void flip_byte(const char *path, long at)
{
    int fd = open(path, O_RDWR);
    unsigned char c;

    GM_CHECK(fd >= 0);
    GM_CHECK(pread(fd, &c, 1, at) == 1);
    c ^= 0x40;
    GM_CHECK(pwrite(fd, &c, 1, at) == 1);
    close(fd);
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1100];

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void test_round_trip(void)
{
    char dir[512], path[1024], sha[65], sha2[65], want[65], line[200];
    struct gm_st_file f;
    struct gm_ckpt_info in, out;
    char *buf = NULL;
    size_t len = 0;
    float v[12];

    snprintf(dir, sizeof(dir), "%s/rt/job", tmpdir);
    GM_CHECK_OK(gm_ckpt_mkdirs(dir));
    GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 120, path, sha));
    GM_CHECK_EQ(gm_ckpt_name_step(path), 120);
    GM_CHECK(strstr(path, "/step-0000000120.safetensors") != NULL);
    /* the .sha256 is sha256sum's line for the file */
    GM_CHECK_OK(gm_file_read(path, 1 << 20, &buf, &len));
    gm_ckpt_sha256_hex(buf, len, want);
    free(buf);
    GM_CHECK_STREQ(sha, want);
    snprintf(line, sizeof(line), "%s  step-0000000120.safetensors\n", want);
    strcat(path, ".sha256");
    GM_CHECK_OK(gm_file_read(path, 4096, &buf, &len));
    GM_CHECK_STREQ(buf, line);
    free(buf);
    path[strlen(path) - 7] = '\0';

    GM_CHECK_OK(gm_ckpt_load(path, HASH_A, "mlp", &f, &out, sha2));
    GM_CHECK_STREQ(sha2, sha);
    info_for(&in, HASH_A, 120);
    GM_CHECK_EQ(out.format, GM_CKPT_FORMAT);
    GM_CHECK_STREQ(out.job_hash, in.job_hash);
    GM_CHECK_STREQ(out.job_name, "unit");
    GM_CHECK_STREQ(out.model, "mlp");
    GM_CHECK_STREQ(out.optim, "adam");
    GM_CHECK_STREQ(out.codec, "powersgd");
    GM_CHECK_EQ(out.step, 120);
    GM_CHECK_EQ(out.total_steps, 1000);
    GM_CHECK_EQ(out.epoch, 1);
    GM_CHECK_EQ(out.data_offset, 20 * 32);
    GM_CHECK_EQ(out.global_batch, 32);
    GM_CHECK(out.seed == 18446744073709551615ull);
    GM_CHECK_EQ(out.optim_step, 120);
    GM_CHECK_EQ(out.term, 7);
    GM_CHECK_EQ(out.params, 6);
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "format"), "pt");
    GM_CHECK_STREQ(gm_safetensors_meta(&f, "job"), "[job]\nname = unit\n");
    GM_CHECK_EQ(f.n_tensors, 3);
    GM_CHECK_OK(gm_safetensors_to_f32(gm_safetensors_find(&f, GM_CKPT_OPTIM_TENSOR), v, 12));
    GM_CHECK(v[0] == -120.0f && v[11] == -131.0f);
    GM_CHECK_OK(gm_safetensors_to_f32(gm_safetensors_find(&f, "fc1.bias"), v, 2));
    GM_CHECK(v[0] == 121.0f && v[1] == 121.25f);
    gm_safetensors_free(&f);
    /* any job and model when the caller does not care */
    GM_CHECK_OK(gm_ckpt_load(path, NULL, NULL, &f, &out, NULL));
    gm_safetensors_free(&f);
    /* the same step written again (a resumed run) with other content: committed anew */
    GM_CHECK_OK(write_step(dir, HASH_B, "mlp", 120, path, sha2));
    GM_CHECK(strcmp(sha2, sha) != 0);
    GM_CHECK_OK(gm_ckpt_load(path, HASH_B, "mlp", &f, &out, sha));
    GM_CHECK_STREQ(sha, sha2);
    gm_safetensors_free(&f);
    rm_tree(dir);
    snprintf(dir, sizeof(dir), "%s/rt", tmpdir);
    rmdir(dir);
}

static void test_refusals(void)
{
    char dir[512], p10[1024], p20[1024], p30[1024], p40[1024], p50[1024], sha[65], got[1024];
    struct gm_st_file f;
    struct gm_ckpt_info out;
    struct stat st;

    snprintf(dir, sizeof(dir), "%s/ref", tmpdir);
    GM_CHECK_OK(gm_ckpt_mkdirs(dir));
    GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 10, p10, sha));
    GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 20, p20, sha));
    GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 30, p30, sha));
    GM_CHECK_OK(write_step(dir, HASH_B, "mlp", 40, p40, sha));    /* another job */
    GM_CHECK_OK(write_step(dir, HASH_A, "lenet5", 50, p50, sha)); /* another model */

    GM_CHECK_ERR(gm_ckpt_load(p40, HASH_A, "mlp", &f, &out, NULL), GM_ERR_MISMATCH);
    GM_CHECK(f.tensors == NULL && f.buf == NULL);
    GM_CHECK_ERR(gm_ckpt_load(p50, HASH_A, "mlp", &f, &out, NULL), GM_ERR_MISMATCH);
    /* newest usable of job A, model mlp: 30 (40 and 50 are foreign) */
    GM_CHECK_OK(gm_ckpt_dir_newest(dir, -1, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p30);
    GM_CHECK_EQ(out.step, 30);
    gm_safetensors_free(&f);

    /* a flipped byte in the data section: corrupt, refused; the one before is used */
    GM_CHECK_OK(stat(p30, &st));
    flip_byte(p30, (long)st.st_size - 3);
    GM_CHECK_ERR(gm_ckpt_load(p30, HASH_A, "mlp", &f, &out, NULL), GM_ERR_FORMAT);
    GM_CHECK_OK(gm_ckpt_dir_newest(dir, -1, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p20);
    gm_safetensors_free(&f);

    /* truncated: refused; then 10 */
    GM_CHECK_OK(stat(p20, &st));
    GM_CHECK_OK(truncate(p20, st.st_size - 10));
    GM_CHECK_ERR(gm_ckpt_load(p20, HASH_A, "mlp", &f, &out, NULL), GM_ERR_FORMAT);
    GM_CHECK_OK(gm_ckpt_dir_newest(dir, -1, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p10);
    gm_safetensors_free(&f);
    /* max_step: nothing at or below 5 */
    GM_CHECK_ERR(gm_ckpt_dir_newest(dir, 5, HASH_A, "mlp", &f, &out, got, sizeof(got)), -ENOENT);

    /* a .sha256 naming another file, and a missing one */
    {
        char s10[1100], s50[1100], *buf = NULL;
        size_t len;
        snprintf(s10, sizeof(s10), "%s.sha256", p10);
        snprintf(s50, sizeof(s50), "%s.sha256", p50);
        GM_CHECK_OK(gm_file_read(s50, 4096, &buf, &len));
        GM_CHECK_OK(gm_file_write_atomic(s10, buf, len, 0644));
        free(buf);
        GM_CHECK_ERR(gm_ckpt_load(p10, NULL, NULL, &f, &out, NULL), GM_ERR_FORMAT);
        GM_CHECK_OK(unlink(s10));
        GM_CHECK_ERR(gm_ckpt_load(p10, NULL, NULL, &f, &out, NULL), GM_ERR_FORMAT);
    }
    GM_CHECK_ERR(gm_ckpt_dir_newest(dir, -1, HASH_A, "mlp", &f, &out, got, sizeof(got)), -ENOENT);
    rm_tree(dir);
}

/* gm_ckpt_dir_newest_committed: only the cluster's committed checkpoints count, newest first;
 * one missing here, corrupt, or of another hash than the committed one falls back to the
 * committed one before it; a newer valid file that was never committed is not taken. */
static void test_committed(void)
{
    char dir[512], p[5][1024], sha[5][65], got[1024];
    struct gm_ckpt_ref refs[4];
    struct gm_st_file f;
    struct gm_ckpt_info out;
    struct stat st;

    snprintf(dir, sizeof(dir), "%s/com", tmpdir);
    GM_CHECK_OK(gm_ckpt_mkdirs(dir));
    for (int i = 0; i < 5; i++) /* steps 10..50, all valid on disk */
        GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 10L * (i + 1), p[i], sha[i]));
    /* committed: 10, 20, 30 and 40 (listed out of order); 50 was never committed */
    const long steps[] = {30, 10, 40, 20};
    for (int i = 0; i < 4; i++) {
        refs[i].step = steps[i];
        memcpy(refs[i].sha256, sha[steps[i] / 10 - 1], 65);
    }
    GM_CHECK_OK(
        gm_ckpt_dir_newest_committed(dir, refs, 4, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p[3]);
    GM_CHECK_EQ(out.step, 40);
    gm_safetensors_free(&f);

    /* 40 corrupt (its own .sha256 catches it): 30 */
    GM_CHECK_OK(stat(p[3], &st));
    flip_byte(p[3], (long)st.st_size - 3);
    GM_CHECK_OK(
        gm_ckpt_dir_newest_committed(dir, refs, 4, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p[2]);
    gm_safetensors_free(&f);

    /* 30 valid here but not what the cluster committed (another hash): 20 */
    refs[0].sha256[0] = refs[0].sha256[0] == 'f' ? '0' : 'f';
    GM_CHECK_OK(
        gm_ckpt_dir_newest_committed(dir, refs, 4, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p[1]);
    gm_safetensors_free(&f);

    /* 20 missing here: 10 */
    GM_CHECK_OK(unlink(p[1]));
    GM_CHECK_OK(
        gm_ckpt_dir_newest_committed(dir, refs, 4, HASH_A, "mlp", &f, &out, got, sizeof(got)));
    GM_CHECK_STREQ(got, p[0]);
    GM_CHECK_EQ(out.step, 10);
    gm_safetensors_free(&f);

    /* nothing committed, or only unusable ones: -ENOENT, f and got empty */
    GM_CHECK_ERR(
        gm_ckpt_dir_newest_committed(dir, refs, 0, HASH_A, "mlp", &f, &out, got, sizeof(got)),
        -ENOENT);
    GM_CHECK_ERR(
        gm_ckpt_dir_newest_committed(dir, refs, 1, HASH_A, "mlp", &f, &out, got, sizeof(got)),
        -ENOENT);
    GM_CHECK(f.tensors == NULL && f.buf == NULL && got[0] == '\0');
    /* another job's: refused as foreign */
    GM_CHECK_ERR(
        gm_ckpt_dir_newest_committed(dir, refs + 1, 1, HASH_B, "mlp", &f, &out, got, sizeof(got)),
        -ENOENT);
    rm_tree(dir);
}

/* A committed checkpoint whose metadata is wrong in one way each: refused as malformed. */
static void test_bad_metadata(void)
{
    static const struct {
        const char *key, *value;
    } cases[] = {
        {"gradmesh.ckpt", "2"}, {"step", "-1"},
        {"step", "12x"},        {"seed", "18446744073709551616"},
        {"job_hash", "abc"},    {"global_batch", "0"},
        {"step", "1001"},       {"model", "a\tb"},
        {"params", ""},
    };
    char path[1024];
    float w[1] = {1};
    struct gm_st_tensor t = {.name = "w", .data = w, .ndim = 1, .shape = {1}};
    struct gm_st_file f;
    struct gm_ckpt_info out;

    snprintf(path, sizeof(path), "%s/meta.safetensors", tmpdir);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *keys[] = {"gradmesh.ckpt", "job_hash",     "job_name",      "model",
                              "params",        "step",         "total_steps",   "epoch",
                              "data_offset",   "global_batch", "seed",          "optim",
                              "optim_step",    "term",         "gradmesh.codec"};
        const char *vals[] = {"1", HASH_A, "j", "mlp", "1", "5", "1000", "0",
                              "0", "8",    "1", "sgd", "0", "0", ""};
        struct gm_st_meta m[15];
        for (int i = 0; i < 15; i++) {
            m[i].key = keys[i];
            m[i].value = strcmp(keys[i], cases[c].key) == 0 ? cases[c].value : vals[i];
        }
        GM_CHECK_OK(gm_safetensors_write(path, &t, 1, m, 15));
        GM_CHECK_OK(gm_safetensors_load(path, &f));
        GM_CHECK_ERR(gm_ckpt_info_parse(&f, path, &out), GM_ERR_FORMAT);
        gm_safetensors_free(&f);
    }
    /* and the unchanged set parses */
    {
        const struct gm_st_meta m[] = {
            {"gradmesh.ckpt", "1"},  {"job_hash", HASH_A}, {"job_name", "j"},
            {"model", "mlp"},        {"params", "1"},      {"step", "5"},
            {"total_steps", "1000"}, {"epoch", "0"},       {"data_offset", "0"},
            {"global_batch", "8"},   {"seed", "1"},        {"optim", "sgd"},
            {"optim_step", "0"},     {"term", "0"},        {"gradmesh.codec", ""},
        };
        GM_CHECK_OK(gm_safetensors_write(path, &t, 1, m, 15));
        GM_CHECK_OK(gm_safetensors_load(path, &f));
        GM_CHECK_OK(gm_ckpt_info_parse(&f, path, &out));
        GM_CHECK_EQ(out.step, 5);
        GM_CHECK_STREQ(out.shares, ""); /* optional: files before shares have none */
        gm_safetensors_free(&f);
        /* the shares of the step ([job] shares): read back; anything but counts refused */
        static const char *const sh[] = {"72:24", "72;24", "a:b"};
        for (int k = 0; k < 3; k++) {
            struct gm_st_meta m2[16];
            memcpy(m2, m, sizeof(m));
            m2[15] = (struct gm_st_meta){"gradmesh.shares", sh[k]};
            GM_CHECK_OK(gm_safetensors_write(path, &t, 1, m2, 16));
            GM_CHECK_OK(gm_safetensors_load(path, &f));
            if (k == 0) {
                GM_CHECK_OK(gm_ckpt_info_parse(&f, path, &out));
                GM_CHECK_STREQ(out.shares, "72:24");
            } else {
                GM_CHECK_ERR(gm_ckpt_info_parse(&f, path, &out), GM_ERR_FORMAT);
            }
            gm_safetensors_free(&f);
        }
        /* a missing key */
        GM_CHECK_OK(gm_safetensors_write(path, &t, 1, m, 13));
        GM_CHECK_OK(gm_safetensors_load(path, &f));
        GM_CHECK_ERR(gm_ckpt_info_parse(&f, path, &out), GM_ERR_FORMAT);
        gm_safetensors_free(&f);
    }
    unlink(path);
}

static void test_prune(void)
{
    char dir[512], path[1024], sha[65], stale[1100];
    struct gm_ckpt_entry *v = NULL;
    size_t n = 0;

    snprintf(dir, sizeof(dir), "%s/prune", tmpdir);
    GM_CHECK_OK(gm_ckpt_mkdirs(dir));
    for (long s = 1; s <= 6; s++)
        GM_CHECK_OK(write_step(dir, HASH_A, "mlp", s * 10, path, sha));
    /* step 35 was renamed but its .sha256 never written (killed): older than the newest
     * committed one, so pruning removes it; a temp file of a dead writer goes too */
    GM_CHECK_OK(write_step(dir, HASH_A, "mlp", 35, path, sha));
    snprintf(stale, sizeof(stale), "%s.sha256", path);
    GM_CHECK_OK(unlink(stale));
    snprintf(stale, sizeof(stale), "%s/step-0000000070.safetensors.tmp.999999999", dir);
    GM_CHECK_OK(gm_file_write_atomic(stale, "x", 1, 0644));

    GM_CHECK_OK(gm_ckpt_dir_list(dir, &v, &n));
    GM_CHECK_EQ(n, 7);
    GM_CHECK(n == 7 && v[0].step == 10 && v[3].step == 35 && v[3].sha256[0] == '\0' &&
             v[6].step == 60 && v[6].sha256[0] != '\0' && v[6].bytes > 0);
    free(v);
    GM_CHECK_OK(gm_ckpt_dir_prune(dir, 3));
    GM_CHECK_OK(gm_ckpt_dir_list(dir, &v, &n));
    GM_CHECK_EQ(n, 3);
    GM_CHECK(n == 3 && v[0].step == 40 && v[1].step == 50 && v[2].step == 60);
    free(v);
    GM_CHECK(access(stale, F_OK) != 0);
    snprintf(stale, sizeof(stale), "%s/step-0000000010.safetensors.sha256", dir);
    GM_CHECK(access(stale, F_OK) != 0);
    rm_tree(dir);
    /* a directory that does not exist is an empty list */
    GM_CHECK_OK(gm_ckpt_dir_list(dir, &v, &n));
    GM_CHECK_EQ(n, 0);
}

/* The writer the crash test kills: checkpoints of a 1 MiB tensor, steps 1, 2, ..., newest 3
 * kept, until killed. */
static void crash_child(const char *dir)
{
    const size_t n = 1u << 18;
    float *w = malloc(n * sizeof(float));
    struct gm_ckpt_info in;
    char path[1024];

    if (w == NULL)
        _exit(3);
    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    for (long s = 1;; s++) {
        for (size_t i = 0; i < n; i++)
            w[i] = (float)(s * 7 + (long)i);
        const struct gm_st_tensor t = {.name = "w", .data = w, .ndim = 1, .shape = {(int64_t)n}};
        info_for(&in, HASH_A, s);
        in.total_steps = 1000000;
        in.params = n;
        if (gm_ckpt_path(dir, s, path, sizeof(path)) != 0 ||
            gm_ckpt_write(path, &t, 1, &in, NULL, NULL) != 0 || gm_ckpt_dir_prune(dir, 3) != 0)
            _exit(2);
    }
}

/* Every final-named file is a whole, valid safetensors file with all its steps' values;
 * every committed one loads.  Returns how many temp files were left (writes cut short). */
static int check_dir_after_kill(const char *dir, int *committed)
{
    struct gm_ckpt_entry *v = NULL;
    size_t n = 0;
    int temps = 0;
    DIR *d;
    struct dirent *de;

    GM_CHECK_OK(gm_ckpt_dir_list(dir, &v, &n));
    for (size_t i = 0; i < n; i++) {
        struct gm_st_file f;
        struct gm_ckpt_info in;
        int err = gm_safetensors_load(v[i].path, &f);
        GM_CHECK_OK(err);
        if (err == 0) {
            const struct gm_st_entry *e = gm_safetensors_find(&f, "w");
            float last = 0;
            GM_CHECK(e != NULL && e->numel == (1 << 18));
            if (e != NULL && e->numel == (1 << 18)) {
                memcpy(&last, e->data + (size_t)e->nbytes - 4, 4);
                GM_CHECK(last == (float)(v[i].step * 7 + (1 << 18) - 1));
            }
            gm_safetensors_free(&f);
        }
        if (v[i].sha256[0] != '\0') {
            GM_CHECK_OK(gm_ckpt_load(v[i].path, HASH_A, "mlp", &f, &in, NULL));
            gm_safetensors_free(&f);
            (*committed)++;
        }
    }
    free(v);
    d = opendir(dir);
    while (d != NULL && (de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".tmp.") != NULL)
            temps++;
    if (d != NULL)
        closedir(d);
    return temps;
}

static void test_kill_mid_write(void)
{
    char dir[512];
    int cut = 0, committed = 0, rounds = 0;
    unsigned seed = (unsigned)time(NULL);

    fprintf(stderr, "test_kill_mid_write: seed %u\n", seed);
    srand(seed);
    snprintf(dir, sizeof(dir), "%s/crash", tmpdir);
    GM_CHECK_OK(gm_ckpt_mkdirs(dir));
    for (rounds = 0; rounds < 30 || (cut == 0 && rounds < 200); rounds++) {
        pid_t pid = fork();
        int status;
        struct timespec ts = {0, (long)(rand() % 150000) * 1000L}; /* 0-150 ms */

        GM_CHECK(pid >= 0);
        if (pid < 0)
            break;
        if (pid == 0)
            crash_child(dir);
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        GM_CHECK(waitpid(pid, &status, 0) == pid);
        GM_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        cut += check_dir_after_kill(dir, &committed) > 0;
    }
    fprintf(stderr,
            "test_kill_mid_write: %d kills, %d left a temp file (cut mid-write), %d "
            "committed checkpoints checked\n",
            rounds, cut, committed);
    GM_CHECK(cut > 0);       /* the kills did land inside writes */
    GM_CHECK(committed > 0); /* and between them */
    /* the next writer's pruning removes the dead writers' temp files */
    GM_CHECK_OK(gm_ckpt_dir_prune(dir, 3));
    GM_CHECK_EQ(check_dir_after_kill(dir, &committed), 0);
    rm_tree(dir);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    int rc;

    snprintf(tmpdir, sizeof(tmpdir), "%s/gm-test-ckpt-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_round_trip);
    GM_TEST_RUN(test_refusals);
    GM_TEST_RUN(test_committed);
    GM_TEST_RUN(test_bad_metadata);
    GM_TEST_RUN(test_prune);
    GM_TEST_RUN(test_kill_mid_write);
    rc = gm_test_finish("test_ckpt");
    if (rmdir(tmpdir) != 0) {
        fprintf(stderr, "test_ckpt: %s left behind: %s\n", tmpdir, strerror(errno));
        rc = 1;
    }
    return rc;
}
