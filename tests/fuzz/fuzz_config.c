/*
 * tests/fuzz/fuzz_config.c - libFuzzer target for the agent's config parser
 * (gm_config_parse).
 *
 * Any bytes must give 0 or GM_ERR_CONFIG, never a crash, leak or sanitizer report.  A config
 * that parses must hold what the parser promises: valid names, absolute paths, parsable
 * listen address, a loopback metrics address unless metrics_public, every string
 * NUL-terminated in its buffer; and it must survive gm_config_save + reload unchanged in
 * those fields.  Error lines are suppressed.  Seeds: tests/fuzz/corpus/config/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/service/config.h"
#include "common/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gm_config c, d;
    struct sockaddr_storage ss;
    char path[64];
    int err;

    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    err = gm_config_parse((const char *)data, size, "fuzz.conf", &c);
    if (err != 0 && err != GM_ERR_CONFIG)
        abort();
    if (err != 0)
        return 0;
    if (!terminated(c.cluster, sizeof(c.cluster)) || !terminated(c.node, sizeof(c.node)) ||
        !terminated(c.listen, sizeof(c.listen)) || !terminated(c.state_dir, sizeof(c.state_dir)) ||
        !terminated(c.control, sizeof(c.control)) || !terminated(c.peers, sizeof(c.peers)) ||
        !terminated(c.multicast, sizeof(c.multicast)) ||
        !terminated(c.tunnels, sizeof(c.tunnels)) ||
        !terminated(c.interfaces, sizeof(c.interfaces)) ||
        !terminated(c.metrics, sizeof(c.metrics)))
        abort();
    /* the device is one of device.h's spellings */
    if (c.device.want < GM_DEVICE_WANT_AUTO || c.device.want > GM_DEVICE_WANT_CUDA_ALL ||
        c.device.index < 0 || c.device.index >= GM_DEVICE_CUDA_MAX ||
        (c.device.want != GM_DEVICE_WANT_CUDA && c.device.index != 0))
        abort();
    if (!gm_id_name_valid(c.cluster) || !gm_id_name_valid(c.node) || c.state_dir[0] != '/' ||
        c.control[0] != '/' || gm_proto_addr_parse(c.listen, &ss) != 0 || c.threads < 0 ||
        c.threads > 4096 || (c.measure != 0 && c.measure != 1) || c.peer_timeout_s < 5 ||
        c.peer_timeout_s > 3600)
        abort();
    if (c.metrics[0] != '\0' && !c.metrics_public && !gm_config_addr_is_loopback(c.metrics))
        abort();
    /* round trip through the writer, unless a value holds what INI cannot carry */
    if (strpbrk(c.peers, ";#") != NULL || strpbrk(c.tunnels, ";#") != NULL ||
        strpbrk(c.interfaces, ";#") != NULL || strpbrk(c.control, ";#") != NULL ||
        strpbrk(c.state_dir, ";#") != NULL)
        return 0;
    snprintf(path, sizeof(path), "/tmp/fuzz_config.%ld.conf", (long)getpid());
    if (gm_config_save(path, &c) != 0)
        return 0;
    err = gm_config_load(path, &d);
    unlink(path);
    if (err != 0 || strcmp(c.cluster, d.cluster) != 0 || strcmp(c.node, d.node) != 0 ||
        strcmp(c.listen, d.listen) != 0 || strcmp(c.metrics, d.metrics) != 0 ||
        c.metrics_public != d.metrics_public || c.measure != d.measure || c.threads != d.threads ||
        c.peer_timeout_s != d.peer_timeout_s || c.device.want != d.device.want ||
        c.device.index != d.device.index)
        abort();
    return 0;
}
