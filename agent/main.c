/*
 * agent/main.c - the gradmesh command line: a table of subcommands, each a
 * function (argc, argv) -> exit code.  Exit codes: 0 success, 1 runtime
 * failure, 2 usage, 78 configuration error (../shared/DESIGN.md).
 */
#include <stdio.h>
#include <string.h>

#include "agent/cli.h"
#include "common/err.h"
#include "common/log.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *synopsis;
};

static const struct subcommand commands[] = {
    {"init", gm_cli_init,
     "init --cluster NAME [--config FILE] [--state DIR] [--listen HOST:PORT] [--multicast "
     "G:P|off]"},
    {"join", gm_cli_join,
     "join TOKEN [--peer HOST:PORT] [--config FILE] [--state DIR] [--listen HOST:PORT] [--wait S]"},
    {"agent", gm_cli_agent, "agent --config FILE"},
    {"token", gm_cli_token, "token create [--ttl 24h] [--uses 1] | list | revoke ID --config FILE"},
    {"status", gm_cli_status, "status [--json] --config FILE"},
    {"peers", gm_cli_peers, "peers [--json] --config FILE"},
    {"doctor", gm_cli_doctor, "doctor [--json] [--model lenet5|mlp] --config FILE"},
    {"submit", gm_cli_submit, "submit JOB.ini [--follow] --config FILE"},
    {"jobs", gm_cli_jobs, "jobs [--json] --config FILE"},
    {"cancel", gm_cli_cancel, "cancel ID --config FILE"},
    {"train", gm_cli_train,
     "train --local JOB.ini [--summary-json FILE] [--out FILE] [--simulate-workers N]"},
};

static void usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: gradmesh COMMAND [ARGS]\n\ncommands:\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  gradmesh %s\n", commands[i].synopsis);
    fprintf(f, "\n'gradmesh COMMAND --help' describes one command.\n");
}

int main(int argc, char **argv)
{
    size_t i;

    gm_log_init();
    if (argc < 2) {
        usage(stderr);
        return GM_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return GM_EXIT_OK;
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "gradmesh: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return GM_EXIT_USAGE;
}
