/*
 * tests/fuzz/fuzz_jobmsg.c - the job control payloads (agent/jobs/jobmsg.h):
 * gm_jobmsg_decode for every JOB_* type (byte 0 picks JOB_OFFER, _CHECK,
 * _GROUP, _REPORT, _END or a type that is none of them), the rest is the
 * payload.  Checks:
 *   - the result is 0, GM_ERR_PROTO or -ENOMEM; on an error the message is
 *     zeroed (nothing owned is left);
 *   - what decodes holds only what the decoder promises (a 16-hex-digit id,
 *     text of 1..GM_JOB_TEXT_MAX bytes with no NUL, distinct valid rank names,
 *     64-hex-digit digests, known events and states, printable messages);
 *   - what decodes encodes and decodes again to the same fields.
 *
 * Seeds: GM_FUZZ_JOBMSG_SEEDS=<dir> build-fuzz/fuzz_jobmsg -runs=0 writes
 * real encoded messages of every type (gm_jobmsg_encode), each behind its
 * type byte, into dir (tests/fuzz/corpus/jobmsg/ holds them).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/jobs/jobmsg.h"
#include "agent/net/proto.h"
#include "crypto/identity.h"
#include "train/job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const uint16_t types[] = {GM_MSG_JOB_OFFER,  GM_MSG_JOB_CHECK, GM_MSG_JOB_GROUP,
                                 GM_MSG_JOB_REPORT, GM_MSG_JOB_END,   GM_MSG_JOB_SUBMIT,
                                 GM_MSG_JOB_SWITCH, GM_MSG_TRAIN};
#define NTYPES (sizeof(types) / sizeof(types[0]))

static void need(bool ok)
{
    if (!ok)
        abort();
}

static bool hexn(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool printable(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);

    if (n == cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static void check_fields(uint16_t type, const struct gm_jobmsg *m)
{
    need(hexn(m->id, GM_JOB_ID_LEN));
    need(printable(m->origin, sizeof(m->origin)) && printable(m->message, sizeof(m->message)));
    need(printable(m->event, sizeof(m->event)) && printable(m->state, sizeof(m->state)));
    if (type == GM_MSG_JOB_OFFER || type == GM_MSG_JOB_GROUP || type == GM_MSG_JOB_SUBMIT) {
        need(m->text != NULL && m->text_len >= 1 && m->text_len <= GM_JOB_TEXT_MAX);
        need(strlen(m->text) == m->text_len);
    } else {
        need(m->text == NULL && m->text_len == 0);
    }
    if (type == GM_MSG_JOB_GROUP)
        need(m->gen > 0 && m->global_batch >= 1 && m->nranks >= 1 && m->ranks != NULL);
    if ((type == GM_MSG_JOB_GROUP || type == GM_MSG_JOB_SWITCH) &&
        m->codec != GM_JOB_CODEC_AUTO) /* auto's choice: a concrete codec */
        need(m->codec > GM_JOB_CODEC_AUTO && m->codec < GM_JOB_CODEC_COUNT && m->local_steps >= 1 &&
             m->local_steps <= 1000000);
    else
        need(m->codec == GM_JOB_CODEC_AUTO && m->local_steps == 0);
    if (m->islands != NULL) { /* GROUP only; labels are leaders that lead themselves */
        need(type == GM_MSG_JOB_GROUP && m->nranks >= 1);
        for (size_t i = 0; i < m->nranks; i++)
            need(m->islands[i] >= 0 && (size_t)m->islands[i] < m->nranks &&
                 m->islands[m->islands[i]] == m->islands[i]);
    }
    if (type == GM_MSG_JOB_GROUP || (type == GM_MSG_JOB_OFFER && m->nranks > 0)) {
        need(m->nranks >= 1 && m->nranks <= GM_JOB_RANKS_MAX && m->ranks != NULL);
        for (size_t i = 0; i < m->nranks; i++) {
            need(gm_id_name_valid(m->ranks[i]));
            for (size_t k = 0; k < i; k++)
                need(strcmp(m->ranks[i], m->ranks[k]) != 0);
        }
    } else {
        need(m->ranks == NULL && m->nranks == 0);
    }
    if (type == GM_MSG_JOB_CHECK) {
        need(m->files != NULL && m->nfiles <= GM_JOB_FILES_MAX);
        for (size_t i = 0; i < m->nfiles; i++) {
            need(m->files[i].name[0] != 0 && printable(m->files[i].name, sizeof(m->files[i].name)));
            need(hexn(m->files[i].sha256, 64) && m->files[i].size <= (UINT64_MAX >> 1));
            need(m->files[i].count >= 1 && m->files[i].count <= (UINT64_MAX >> 1));
            need(m->group != GM_JOBFILE_GROUP_FILE || m->files[i].count == 1);
            need(m->group != GM_JOBFILE_GROUP_BUCKET ||
                 (m->files[i].name[0] == '#' && hexn(m->files[i].name + 1, 2)));
        }
        need(m->group == GM_JOBFILE_GROUP_FILE || m->group == GM_JOBFILE_GROUP_DIR ||
             m->group == GM_JOBFILE_GROUP_BUCKET);
    } else {
        need(m->files == NULL && m->nfiles == 0 && m->group == GM_JOBFILE_GROUP_FILE);
    }
    if (m->have_probe) /* CHECK only: two counts, the larger first, and their times */
        need(type == GM_MSG_JOB_CHECK && m->probe_n[0] > m->probe_n[1] && m->probe_n[1] >= 1 &&
             isfinite(m->probe_s[0]) && m->probe_s[0] > 0 && isfinite(m->probe_s[1]) &&
             m->probe_s[1] > 0);
    else
        need(m->probe_n[0] == 0 && m->probe_n[1] == 0 && m->probe_s[0] == 0 && m->probe_s[1] == 0);
    if (type == GM_MSG_JOB_REPORT) {
        need(strcmp(m->event, "group-failed") == 0 || strcmp(m->event, "exit") == 0 ||
             strcmp(m->event, "fit") == 0 || strcmp(m->event, "switch-ok") == 0 ||
             strcmp(m->event, "switch-late") == 0);
        need(m->code <= 0 && m->code >= -100000);
        need(m->have_fit == (strcmp(m->event, "fit") == 0));
        need((m->seq > 0) == (strncmp(m->event, "switch-", 7) == 0));
    }
    if (m->have_fit)
        need(isfinite(m->fit_alpha_s) && m->fit_alpha_s >= 0 && isfinite(m->fit_bytes_per_s) &&
             m->fit_bytes_per_s > 0 && m->fit_sync_s >= 0 &&
             m->fit_sync_s <= GM_JOBMSG_SYNC_MAX_S);
    else
        need(m->fit_sync_s == 0);
    if (type == GM_MSG_JOB_SWITCH)
        need(m->gen > 0 && m->seq > 0 && m->step >= 0 && m->codec != GM_JOB_CODEC_AUTO &&
             m->local_steps > 0);
    if (type == GM_MSG_JOB_END)
        need(strcmp(m->state, "done") == 0 || strcmp(m->state, "cancelled") == 0 ||
             strcmp(m->state, "failed") == 0 || strcmp(m->state, "refused") == 0);
    if (m->have_summary) {
        need(type == GM_MSG_JOB_END && m->test_accuracy >= 0 && m->test_accuracy <= 100);
        need(m->samples_per_s >= 0 && m->steps >= 0 && printable(m->weights, sizeof(m->weights)));
    }
}

static void same(const struct gm_jobmsg *a, const struct gm_jobmsg *b)
{
    need(strcmp(a->id, b->id) == 0 && strcmp(a->origin, b->origin) == 0);
    need(a->text_len == b->text_len && (a->text == NULL) == (b->text == NULL));
    need(a->text == NULL || memcmp(a->text, b->text, a->text_len) == 0);
    need(a->gen == b->gen && a->code == b->code && a->nranks == b->nranks);
    need(a->global_batch == b->global_batch && a->have_summary == b->have_summary);
    need(!a->have_summary || (a->steps == b->steps && strcmp(a->weights, b->weights) == 0));
    need(a->nfiles == b->nfiles && a->group == b->group && strcmp(a->event, b->event) == 0);
    need(a->seq == b->seq && a->step == b->step && a->have_fit == b->have_fit);
    need(!a->have_fit || (a->fit_ops == b->fit_ops && a->fit_alpha_s == b->fit_alpha_s &&
                          a->fit_bytes_per_s == b->fit_bytes_per_s &&
                          a->fit_sync_s == b->fit_sync_s));
    need(a->codec == b->codec && a->local_steps == b->local_steps);
    need(a->have_probe == b->have_probe && a->probe_n[0] == b->probe_n[0] &&
         a->probe_n[1] == b->probe_n[1] && a->probe_s[0] == b->probe_s[0] &&
         a->probe_s[1] == b->probe_s[1]);
    need(strcmp(a->state, b->state) == 0 && strcmp(a->message, b->message) == 0);
    for (size_t i = 0; i < a->nranks; i++)
        need(strcmp(a->ranks[i], b->ranks[i]) == 0);
    for (size_t i = 0; i < a->nfiles; i++)
        need(strcmp(a->files[i].name, b->files[i].name) == 0 &&
             a->files[i].size == b->files[i].size &&
             strcmp(a->files[i].sha256, b->files[i].sha256) == 0 &&
             a->files[i].count == b->files[i].count);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct gm_jobmsg zero;
    struct gm_jobmsg m, again;
    uint16_t type;
    char *json = NULL;
    size_t len = 0;
    int err;

    if (size < 1)
        return 0;
    type = types[data[0] % NTYPES];
    err = gm_jobmsg_decode(type, data + 1, size - 1, &m);
    if (err != 0) {
        need(err == GM_ERR_PROTO || err == -ENOMEM);
        need(memcmp(&m, &zero, sizeof(m)) == 0);
        return 0;
    }
    need(type != GM_MSG_TRAIN);
    check_fields(type, &m);
    need(gm_jobmsg_encode(type, &m, &json, &len) == 0 && json != NULL && strlen(json) == len);
    need(gm_jobmsg_decode(type, (const uint8_t *)json, len, &again) == 0);
    same(&m, &again);
    gm_jobmsg_free(&again);
    gm_jobmsg_free(&m);
    need(memcmp(&m, &zero, sizeof(m)) == 0); /* free zeroes */
    gm_jobmsg_free(&m);                      /* and is safe twice */
    free(json);
    return 0;
}

/* --- seeds ------------------------------------------------------------------- */

static void write_seed(const char *dir, const char *name, uint16_t type, const struct gm_jobmsg *m)
{
    char path[1024], *json = NULL;
    size_t len = 0, k;
    FILE *f;

    for (k = 0; k < NTYPES && types[k] != type; k++)
        ;
    need(gm_jobmsg_encode(type, m, &json, &len) == 0);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    need(f != NULL);
    need(fputc((int)k, f) != EOF && fwrite(json, 1, len, f) == len && fclose(f) == 0);
    free(json);
}

static void write_seeds(const char *dir)
{
    static const char job[] = "[job]\nname = fmnist-mlp\nmodel = mlp\nepochs = 2\n\n"
                              "[data]\nkind = idx\ndir = /usr/share/datasets/fashion-mnist\n\n"
                              "[optim]\nname = adam\nlr = 0.001\nglobal_batch = 192\n\n"
                              "[comm]\ncodec = powersgd\nrank = 4\n";
    char ranks[3][GM_ID_NAME_MAX + 1] = {"alpha", "beta", "gamma"};
    struct gm_jobfile files[2] = {
        {.name = "t10k-labels-idx1-ubyte.gz", .size = 5148, .count = 1},
        {.name = "train-images-idx3-ubyte.gz", .size = 26421880, .count = 1},
    };
    struct gm_jobmsg m = {.text = (char *)job, .text_len = sizeof(job) - 1, .gen = 1};

    memset(files[0].sha256, 'a', 64);
    memcpy(files[0].sha256, "67da17c76eaffca5446c3361aaab5c3c", 32);
    memset(files[1].sha256, '0', 64);
    memcpy(files[1].sha256, "3aede38d61863908ad78613f6a32ed27", 32);
    snprintf(m.id, sizeof(m.id), "0123456789abcdef");
    snprintf(m.origin, sizeof(m.origin), "docs/jobs/fmnist-mlp.ini");
    write_seed(dir, "offer", GM_MSG_JOB_OFFER, &m);
    m.ranks = ranks;
    m.nranks = 3;
    write_seed(dir, "group", GM_MSG_JOB_GROUP, &m);
    m.gen = 4;
    m.nranks = 2;
    write_seed(dir, "group-regen", GM_MSG_JOB_GROUP, &m);
    m = (struct gm_jobmsg){.files = files, .nfiles = 2};
    snprintf(m.id, sizeof(m.id), "0123456789abcdef");
    write_seed(dir, "check", GM_MSG_JOB_CHECK, &m);
    m.have_probe = true; /* shares = auto's speed probe */
    m.probe_n[0] = 32;
    m.probe_n[1] = 16;
    m.probe_s[0] = 0.0123;
    m.probe_s[1] = 0.0071;
    write_seed(dir, "check-probe", GM_MSG_JOB_CHECK, &m);
    m.have_probe = false;
    memset(m.probe_n, 0, sizeof(m.probe_n));
    memset(m.probe_s, 0, sizeof(m.probe_s));
    /* a folder of more than GM_JOB_FILES_MAX files: one entry per class folder, or per bucket */
    snprintf(files[0].name, sizeof(files[0].name), "cat/");
    files[0].count = 2500;
    snprintf(files[1].name, sizeof(files[1].name), "dog/");
    files[1].count = 2400;
    m.group = GM_JOBFILE_GROUP_DIR;
    write_seed(dir, "check-dir", GM_MSG_JOB_CHECK, &m);
    snprintf(files[0].name, sizeof(files[0].name), "#00");
    snprintf(files[1].name, sizeof(files[1].name), "#9f");
    m.group = GM_JOBFILE_GROUP_BUCKET;
    write_seed(dir, "check-bucket", GM_MSG_JOB_CHECK, &m);
    m.group = GM_JOBFILE_GROUP_FILE;
    m.nfiles = 0;
    snprintf(m.message, sizeof(m.message), "cannot open /data/fmnist: No such file or directory");
    write_seed(dir, "check-error", GM_MSG_JOB_CHECK, &m);
    m = (struct gm_jobmsg){.gen = 2, .code = GM_ERR_ABORTED};
    snprintf(m.id, sizeof(m.id), "fedcba9876543210");
    snprintf(m.event, sizeof(m.event), "group-failed");
    snprintf(m.message, sizeof(m.message), "operation aborted");
    write_seed(dir, "report-group-failed", GM_MSG_JOB_REPORT, &m);
    m.code = GM_ERR_MISMATCH;
    snprintf(m.event, sizeof(m.event), "exit");
    snprintf(m.message, sizeof(m.message), "parameter hashes differ between ranks");
    write_seed(dir, "report-exit", GM_MSG_JOB_REPORT, &m);
    m.code = 0;
    snprintf(m.event, sizeof(m.event), "fit");
    snprintf(m.message, sizeof(m.message), "%s", "");
    m.have_fit = true;
    m.fit_alpha_s = 0.03125;
    m.fit_bytes_per_s = 2500000;
    m.fit_ops = 40;
    write_seed(dir, "report-fit", GM_MSG_JOB_REPORT, &m);
    m.fit_sync_s = 0.1875; /* a DiLoCo member's sync */
    write_seed(dir, "report-fit-sync", GM_MSG_JOB_REPORT, &m);
    m.fit_sync_s = 0;
    m.have_fit = false;
    snprintf(m.event, sizeof(m.event), "switch-late");
    m.seq = 3;
    m.step = 212;
    write_seed(dir, "report-switch-late", GM_MSG_JOB_REPORT, &m);
    m = (struct gm_jobmsg){.gen = 2, .seq = 3, .step = 215, .local_steps = 16};
    snprintf(m.id, sizeof(m.id), "fedcba9876543210");
    m.codec = GM_JOB_CODEC_DILOCO;
    write_seed(dir, "switch", GM_MSG_JOB_SWITCH, &m);
    m = (struct gm_jobmsg){0};
    snprintf(m.id, sizeof(m.id), "fedcba9876543210");
    snprintf(m.state, sizeof(m.state), "done");
    snprintf(m.message, sizeof(m.message), "finished");
    write_seed(dir, "end-done", GM_MSG_JOB_END, &m);
    snprintf(m.state, sizeof(m.state), "failed");
    snprintf(m.message, sizeof(m.message), "rank on beta stopped: data mismatch");
    write_seed(dir, "end-failed", GM_MSG_JOB_END, &m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *seeds = getenv("GM_FUZZ_JOBMSG_SEEDS");

    (void)argc;
    (void)argv;
    if (seeds != NULL)
        write_seeds(seeds);
    return 0;
}
