/*
 * agent/cli/cli_ckpt.c - `gradmesh checkpoint list [--json]` and `gradmesh checkpoint export ID
 * PATH
 * [--full]`: the local agent's checkpoints (STATE_DIR/checkpoints/KEY/, train/ckpt/ckpt.h).
 *
 * The agent answers the control command "checkpoints" with where they are and who holds which
 * (agent/jobs/ckptxfer.h); the files themselves are read and verified here, in this process (each
 * one whole: its SHA-256 against its .sha256, then its metadata), so the agent's loop never
 * hashes a file for a listing.  An ID is KEY-STEP (KEY: the job's 16 hex digits, the name of
 * its directory), or "latest": the newest valid checkpoint of the job whose newest checkpoint
 * is the most recent.
 *
 * Export writes PATH atomically: by default the weights only (every tensor whose name does not
 * start with "gradmesh.", with the checkpoint's metadata), a state_dict that
 * safetensors.numpy.load_file and PyTorch's load_state_dict take as is; --full copies the whole
 * checkpoint (optimizer and codec state too), byte for byte.  Exit codes: 0, 1 (no agent, no
 * such checkpoint, a refused one: corrupt, truncated), 2 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/cli/cli.h"
#include "agent/net/proto.h"
#include "common/err.h"
#include "common/file.h"
#include "common/log.h"
#include "train/ckpt/ckpt.h"

struct item {
    char id[40];
    char key[17];
    struct gm_ckpt_entry e;
    struct gm_ckpt_info info;
    const char *state; /* "ok", "refused", "uncommitted" */
};

/* Every checkpoint under dir/KEY/, verified; *items owned by the caller. */
static int scan(const char *dir, struct item **items, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t cap = 0;

    *items = NULL;
    *n = 0;
    if (d == NULL)
        return 0; /* no checkpoints yet */
    while ((de = readdir(d)) != NULL) {
        char sub[1100];
        struct gm_ckpt_entry *v = NULL;
        size_t nv = 0;

        if (!gm_proto_is_hex(de->d_name, 16))
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        if (gm_ckpt_dir_list(sub, &v, &nv) != 0)
            continue;
        for (size_t i = 0; i < nv; i++) {
            struct item *it;
            struct gm_st_file f;

            if (*n == cap) {
                struct item *ni = realloc(*items, (cap = cap ? 2 * cap : 16) * sizeof(**items));
                if (ni == NULL) {
                    free(v);
                    closedir(d);
                    return -ENOMEM;
                }
                *items = ni;
            }
            it = &(*items)[(*n)++];
            memset(it, 0, sizeof(*it));
            it->e = v[i];
            snprintf(it->key, sizeof(it->key), "%.16s", de->d_name);
            snprintf(it->id, sizeof(it->id), "%.16s-%ld", de->d_name, v[i].step);
            if (v[i].sha256[0] == '\0') {
                it->state = "uncommitted";
            } else if (gm_ckpt_load(v[i].path, NULL, NULL, &f, &it->info, NULL) == 0) {
                it->state = "ok";
                gm_safetensors_free(&f);
            } else {
                it->state = "refused";
            }
        }
        free(v);
    }
    closedir(d);
    return 0;
}

/* The members whose last answer to a checkpoint of it's job was a refusal (a full disk): a new
 * array of {node, step, error}. */
static json_t *not_held_of(json_t *refused, const struct item *it)
{
    json_t *out = json_array(), *r;
    size_t i;

    json_array_foreach(refused, i, r)
    {
        const char *k = json_string_value(json_object_get(r, "key"));
        if (k != NULL && strcmp(k, it->key) == 0)
            json_array_append_new(
                out, json_pack("{s:O,s:O,s:O}", "node", json_object_get(r, "node"), "step",
                               json_object_get(r, "step"), "error", json_object_get(r, "error")));
    }
    return out;
}

/* The holders the agent knows of for it (a JSON array, borrowed), or NULL. */
static json_t *holders_of(json_t *held, const struct item *it)
{
    size_t i;
    json_t *h;

    json_array_foreach(held, i, h)
    {
        const char *k = json_string_value(json_object_get(h, "key"));
        const char *s = json_string_value(json_object_get(h, "sha256"));
        if (k != NULL && s != NULL && strcmp(k, it->key) == 0 &&
            json_integer_value(json_object_get(h, "step")) == it->e.step &&
            strcmp(s, it->e.sha256) == 0)
            return json_object_get(h, "holders");
    }
    return NULL;
}

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    int c = strcmp(x->key, y->key);

    return c != 0 ? c : (x->e.step > y->e.step) - (x->e.step < y->e.step);
}

static int list(json_t *ans, bool as_json)
{
    const char *dir = json_string_value(json_object_get(ans, "dir"));
    json_t *held = json_object_get(ans, "held"), *out;
    struct item *items = NULL;
    size_t n = 0;
    int err;

    if (dir == NULL) {
        fprintf(stderr, "gradmesh checkpoint: the agent did not say where its checkpoints are\n");
        return GM_EXIT_RUNTIME;
    }
    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1)); /* refusals become the state column */
    err = scan(dir, &items, &n);
    gm_log_set_level(GM_LOG_INFO);
    if (err != 0) {
        fprintf(stderr, "gradmesh checkpoint: %s: %s\n", dir, gm_strerror(err));
        return GM_EXIT_RUNTIME;
    }
    if (n > 0)
        qsort(items, n, sizeof(*items), cmp_item);
    out = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct item *it = &items[i];
        json_t *hs = holders_of(held, it);
        json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:I,s:s}", "id", it->id, "job_key", it->key,
                              "step", (json_int_t)it->e.step, "state", it->state, "path",
                              it->e.path, "bytes", (json_int_t)it->e.bytes, "mtime",
                              (json_int_t)it->e.mtime, "sha256", it->e.sha256);
        if (strcmp(it->state, "ok") == 0) {
            json_object_set_new(o, "job", json_string(it->info.job_name));
            json_object_set_new(o, "model", json_string(it->info.model));
            json_object_set_new(o, "epoch", json_integer(it->info.epoch));
            json_object_set_new(o, "total_steps", json_integer(it->info.total_steps));
            json_object_set_new(o, "term", json_integer((json_int_t)it->info.term));
        }
        json_object_set(o, "holders", hs != NULL ? hs : json_null());
        json_object_set_new(o, "not_held", not_held_of(json_object_get(ans, "not_held"), it));
        json_array_append_new(out, o);
    }
    if (as_json) {
        json_dumpf(out, stdout, JSON_INDENT(2) | GM_JSON_HUMAN);
        fputc('\n', stdout);
    } else if (n == 0) {
        printf("no checkpoints in %s\n", dir);
    } else {
        printf("%-27s %-16s %-7s %9s %6s %10s %-11s %s\n", "ID", "JOB", "MODEL", "STEP", "EPOCH",
               "SIZE", "STATE", "HOLDERS");
        for (size_t i = 0; i < n; i++) {
            const struct item *it = &items[i];
            json_t *hs = holders_of(held, it), *h;
            char hold[256] = "-";
            size_t k, used = 0;
            bool ok = strcmp(it->state, "ok") == 0;

            json_array_foreach(hs, k, h)
            {
                int w = snprintf(hold + used, sizeof(hold) - used, "%s%s", k ? "," : "",
                                 json_string_value(h));
                if (w < 0 || (size_t)w >= sizeof(hold) - used)
                    break;
                used += (size_t)w;
            }
            char epoch[16] = "?";
            if (ok) /* 1-based, of the next step */
                snprintf(epoch, sizeof(epoch), "%d", it->info.epoch + 1);
            char size[16];
            printf("%-27s %-16s %-7s %9ld %6s %10s %-11s %s\n", it->id,
                   ok ? it->info.job_name : "?", ok ? it->info.model : "?", it->e.step, epoch,
                   gm_cli_fmt_bytes((double)it->e.bytes, size, sizeof(size)), it->state, hold);
        }
        json_t *r;
        size_t k;
        json_array_foreach(json_object_get(ans, "not_held"), k, r)
        {
            printf("member %s holds no copy: its last answer (job %s, step %lld) was: %s\n",
                   json_string_value(json_object_get(r, "node")),
                   json_string_value(json_object_get(r, "key")),
                   (long long)json_integer_value(json_object_get(r, "step")),
                   json_string_value(json_object_get(r, "error")));
        }
    }
    json_decref(out);
    free(items);
    return GM_EXIT_OK;
}

/* Writes the weights (tensors not named gradmesh.*) of f, with its metadata, to path. */
static int export_weights(const struct gm_st_file *f, const char *path)
{
    struct gm_st_tensor *t = calloc(f->n_tensors + 1, sizeof(*t));
    float **bufs = calloc(f->n_tensors + 1, sizeof(*bufs));
    size_t nt = 0;
    int err = 0;

    if (t == NULL || bufs == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct gm_st_entry *e = &f->tensors[i];
        if (strncmp(e->name, GM_CKPT_PRIVATE_PREFIX, strlen(GM_CKPT_PRIVATE_PREFIX)) == 0)
            continue;
        if (e->ndim > GM_ST_WRITE_MAX_DIMS) {
            err = GM_ERR_FORMAT;
            goto out;
        }
        bufs[nt] = malloc((size_t)e->numel * sizeof(float) + 1);
        if (bufs[nt] == NULL) {
            err = -ENOMEM;
            goto out;
        }
        if ((err = gm_safetensors_to_f32(e, bufs[nt], (size_t)e->numel)) != 0)
            goto out;
        t[nt].name = e->name;
        t[nt].data = bufs[nt];
        t[nt].ndim = e->ndim;
        memcpy(t[nt].shape, e->shape, sizeof(int64_t) * (size_t)e->ndim);
        nt++;
    }
    err = gm_safetensors_write(path, t, nt, f->meta, f->n_meta);
out:
    for (size_t i = 0; bufs != NULL && i < nt + 1 && i <= f->n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    free(t);
    return err;
}

static int export(json_t *ans, const char *id, const char *path, bool full)
{
    const char *dir = json_string_value(json_object_get(ans, "dir"));
    struct item *items = NULL, *pick = NULL;
    struct gm_st_file f;
    struct gm_ckpt_info info;
    char sha[65];
    size_t n = 0;
    int err;

    if (dir == NULL)
        return GM_EXIT_RUNTIME;
    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    err = scan(dir, &items, &n);
    gm_log_set_level(GM_LOG_INFO);
    if (err != 0) {
        fprintf(stderr, "gradmesh checkpoint: %s: %s\n", dir, gm_strerror(err));
        return GM_EXIT_RUNTIME;
    }
    if (strcmp(id, "latest") == 0) {
        /* the job whose newest file is the most recent; its newest valid checkpoint */
        const char *key = NULL;
        int64_t t = -1;
        for (size_t i = 0; i < n; i++)
            if (items[i].e.mtime > t) {
                t = items[i].e.mtime;
                key = items[i].key;
            }
        for (size_t i = 0; key != NULL && i < n; i++)
            if (strcmp(items[i].key, key) == 0 && strcmp(items[i].state, "ok") == 0 &&
                (pick == NULL || items[i].e.step > pick->e.step))
                pick = &items[i];
    } else {
        for (size_t i = 0; i < n; i++)
            if (strcmp(items[i].id, id) == 0)
                pick = &items[i];
    }
    if (pick == NULL) {
        fprintf(stderr,
                "gradmesh checkpoint: no checkpoint %s in %s (see gradmesh checkpoint "
                "list)\n",
                id, dir);
        free(items);
        return GM_EXIT_RUNTIME;
    }
    err = gm_ckpt_load(pick->e.path, NULL, NULL, &f, &info, sha); /* logs why it refuses */
    if (err != 0) {
        fprintf(stderr, "gradmesh checkpoint: %s is not usable: %s\n", pick->id, gm_strerror(err));
        free(items);
        return GM_EXIT_RUNTIME;
    }
    err = full ? gm_file_write_atomic(path, f.buf, f.len, 0644) : export_weights(&f, path);
    if (err != 0) {
        fprintf(stderr, "gradmesh checkpoint: cannot write %s: %s\n", path, gm_strerror(err));
    } else {
        char *buf = NULL;
        size_t len = 0;
        char out_sha[65] = "";
        if (gm_file_read(path, (size_t)1 << 40, &buf, &len) == 0)
            gm_ckpt_sha256_hex(buf, len, out_sha);
        free(buf);
        printf("exported %s (job %s, model %s, step %ld of %ld%s) to %s (sha256 %s)\n", pick->id,
               info.job_name, info.model, info.step, info.total_steps,
               full ? ", full checkpoint" : ", weights", path, out_sha);
    }
    gm_safetensors_free(&f);
    free(items);
    return err != 0 ? GM_EXIT_RUNTIME : GM_EXIT_OK;
}

int gm_cli_checkpoint(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"full", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL, *sub;
    bool as_json = false, full = false;
    json_t *ans = NULL;
    int c, rc;

    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'j':
            as_json = true;
            break;
        case 'f':
            full = true;
            break;
        case 'h':
            gm_cli_help(stdout, "checkpoint");
            return GM_EXIT_OK;
        default:
            return gm_cli_usage_err("checkpoint");
        }
    }
    sub = optind < argc ? argv[optind] : NULL;
    if (sub == NULL || !((strcmp(sub, "list") == 0 && optind + 1 == argc && !full) ||
                         (strcmp(sub, "export") == 0 && optind + 3 == argc && !as_json))) {
        return gm_cli_usage_err("checkpoint");
    }
    if (gm_cli_control("checkpoints", config, json_pack("{s:s}", "cmd", "checkpoints"), &ans) != 0)
        return GM_EXIT_RUNTIME;
    if (strcmp(sub, "list") == 0)
        rc = list(ans, as_json);
    else
        rc = export(ans, argv[optind + 1], argv[optind + 2], full);
    json_decref(ans);
    return rc;
}
