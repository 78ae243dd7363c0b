/*
 * agent/cli/cli_version.c - `gradmesh version` and `gradmesh --version`: what this binary is
 * (agent/service/version.h) and the peer protocol it speaks (agent/net/proto.h), without an
 * agent or a config.  The same values label the gradmesh_build_info series and travel in
 * the HELLO, so `status` can show each member's.
 *
 * Main thread of the gradmesh command.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "agent/cli/cli.h"
#include "agent/net/proto.h"
#include "agent/service/version.h"
#include "common/err.h"

int gm_cli_version(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    int o, as_json = 0;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'j')
            as_json = 1;
        else
            return gm_cli_usage_err("version");
    }
    if (optind != argc)
        return gm_cli_usage_err("version");
    if (as_json) {
        json_t *j = json_pack("{s:s, s:s, s:b, s:s, s:i}", "version", gm_version_string(), "commit",
                              gm_version_commit(), "cuda", gm_version_cuda(), "options",
                              gm_version_options(), "proto", GM_PROTO_VERSION);
        char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;

        json_decref(j);
        if (s == NULL)
            return gm_cli_fail("version", -ENOMEM, "cannot print");
        printf("%s\n", s);
        free(s);
        return GM_EXIT_OK;
    }
    printf("gradmesh %s\n", gm_version_string());
    printf("commit %s\n", gm_version_commit());
    printf("build %s (CUDA backend %s)\n", gm_version_options(), gm_version_cuda() ? "on" : "off");
    printf("peer protocol %d (talks to peers of protocol %d and newer)\n", GM_PROTO_VERSION,
           GM_PROTO_MIN);
    return GM_EXIT_OK;
}
