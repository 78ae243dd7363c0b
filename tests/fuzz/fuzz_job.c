/*
 * tests/fuzz/fuzz_job.c - libFuzzer target for the job file parser (gm_job_parse).
 *
 * Any bytes must give 0 or GM_ERR_CONFIG, never a crash, leak or sanitizer report; a file that
 * parses must hold values inside the documented ranges, its text verbatim and its identity; the
 * same bytes as a checkpoint's stored job text (gm_job_diff) against a valid job and against
 * themselves (no key differs).  Error lines are
 * suppressed (log level below "err") to keep the output small.  Seeds: tests/fuzz/corpus/job/.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gm_job job;
    int err;

    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    err = gm_job_parse((const char *)data, size, "fuzz.ini", &job);
    if (err != 0 && err != GM_ERR_CONFIG)
        abort();
    if (err == 0) {
        if (job.text == NULL || job.text_len != size || memcmp(job.text, data, size) != 0)
            abort();
        if (job.epochs < 1 || job.threads < 1 || job.optim.batch < 1 || !(job.optim.lr > 0) ||
            job.n_hidden < 1 || job.n_hidden > GM_JOB_HIDDEN_MAX || job.name[0] == '\0' ||
            job.out[0] == '\0' || job.data.dir[0] == '\0' ||
            (job.optim.nesterov && !(job.optim.momentum > 0)))
            abort();
        if (job.device.index < 0 || job.device.index >= GM_DEVICE_CUDA_MAX ||
            (job.device.want != GM_DEVICE_WANT_CUDA && job.device.index != 0) ||
            (!job.device_set && job.device.want != GM_DEVICE_WANT_AUTO))
            abort();
        if (strlen(job.identity) != 64) /* the identity is always set on success */
            abort();
    } else if (job.text != NULL) {
        abort(); /* freed on failure */
    }
    gm_job_free(&job);
    /* gm_job_diff reads a checkpoint's stored job text: against a valid job and itself */
    {
        static const char base[] = "[job]\nmodel = mlp\nepochs = 2\n[data]\nkind = idx\n"
                                   "dir = /d\n[optim]\nname = sgd\nlr = 0.1\nbatch = 8\n";
        char out[96];
        int d = gm_job_diff((const char *)data, size, base, sizeof(base) - 1, out, sizeof(out));
        if ((d < 0 && d != GM_ERR_CONFIG && d != -ENOMEM) || memchr(out, '\0', sizeof(out)) == NULL)
            abort();
        if (err == 0 &&
            gm_job_diff((const char *)data, size, (const char *)data, size, out, sizeof(out)) !=
                0) /* a text parsed: no key differs from itself */
            abort();
    }
    return 0;
}
