/*
 * train/nn/device.c - the device setting and its resolution (see device.h).
 */
#include "train/nn/device.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "train/kernels/cuda.h"

int gm_device_spec_parse(const char *s, struct gm_device_spec *out)
{
    out->want = GM_DEVICE_WANT_AUTO;
    out->index = 0;
    if (s == NULL)
        return -EINVAL;
    if (strcmp(s, "auto") == 0)
        return 0;
    if (strcmp(s, "cpu") == 0) {
        out->want = GM_DEVICE_WANT_CPU;
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        out->want = GM_DEVICE_WANT_CUDA;
        return 0;
    }
    if (strncmp(s, "cuda:", 5) != 0)
        return -EINVAL;
    s += 5;
    if (strcmp(s, "all") == 0) {
        out->want = GM_DEVICE_WANT_CUDA_ALL;
        return 0;
    }
    /* decimal, no sign, no leading zero (so each GPU has one spelling) */
    int v = 0;
    size_t n = strlen(s);
    if (n == 0 || n > 2 || (n > 1 && s[0] == '0'))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    if (v >= GM_DEVICE_CUDA_MAX)
        return -EINVAL;
    out->want = GM_DEVICE_WANT_CUDA;
    out->index = v;
    return 0;
}

void gm_device_spec_format(const struct gm_device_spec *s, char *buf, size_t len)
{
    switch (s->want) {
    case GM_DEVICE_WANT_AUTO:
        snprintf(buf, len, "auto");
        return;
    case GM_DEVICE_WANT_CPU:
        snprintf(buf, len, "cpu");
        return;
    case GM_DEVICE_WANT_CUDA:
        snprintf(buf, len, "cuda:%d", s->index);
        return;
    case GM_DEVICE_WANT_CUDA_ALL:
        snprintf(buf, len, "cuda:all");
        return;
    }
    snprintf(buf, len, "?");
}

static void take_cpu(struct gm_device_choice *out)
{
    out->device = GM_DEVICE_CPU;
    out->index = -1;
}

static int refuse(const char *name, const char *reason, char *why, size_t whylen)
{
    snprintf(why, whylen, "device = %s: %s", name, reason);
    gm_err("%s", why);
    return -ENOTSUP;
}

int gm_device_choose(const struct gm_device_spec *spec, int cuda_ok, struct gm_device_choice *out,
                     char *why, size_t whylen)
{
    char name[GM_DEVICE_SPEC_LEN], probe[320], desc[160];
    int count, index;

    take_cpu(out);
    if (whylen > 0)
        why[0] = '\0';
    gm_device_spec_format(spec, name, sizeof(name));
    switch (spec->want) {
    case GM_DEVICE_WANT_CPU:
        gm_info("event=device device=cpu setting=cpu");
        return 0;
    case GM_DEVICE_WANT_CUDA_ALL:
        return refuse(name, "one rank per GPU is not implemented yet; use cuda or cuda:N (one GPU)",
                      why, whylen);
    case GM_DEVICE_WANT_AUTO:
    case GM_DEVICE_WANT_CUDA:
        break;
    }
    index = spec->want == GM_DEVICE_WANT_CUDA ? spec->index : 0;
    count = gm_cuda_device_count(probe, sizeof(probe));
    if (count >= 1 && index >= count)
        snprintf(probe, sizeof(probe), "there is no GPU %d: the driver reports %d", index, count);
    if (count >= 1 && index < count) {
        if (gm_cuda_device_describe(index, desc, sizeof(desc)) < 0)
            snprintf(desc, sizeof(desc), "?");
        if (cuda_ok) {
            out->device = GM_DEVICE_CUDA;
            out->index = index;
            gm_info("event=device device=cuda:%d setting=%s name=\"%s\"", index, name, desc);
            return 0;
        }
        snprintf(probe, sizeof(probe),
                 "GPU %d (%s) answers, but this build's model layers have no CUDA "
                 "implementation yet",
                 index, desc);
    }
    if (spec->want == GM_DEVICE_WANT_CUDA)
        return refuse(name, probe, why, whylen);
    snprintf(why, whylen, "%s", probe);
    gm_notice("event=device device=cpu setting=auto reason=\"%s\"", probe);
    return 0;
}
