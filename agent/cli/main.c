/*
 * agent/cli/main.c - the gradmesh command line: a table of subcommands, each a
 * function (argc, argv) -> exit code.  Exit codes: 0 success, 1 runtime
 * failure, 2 usage, 78 configuration error (gradmesh(1), EXIT STATUS).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent/cli/cli.h"
#include "common/err.h"
#include "common/log.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
};

/* Synopses and help text: agent/cli/cli_help.c (one table, checked against the man page). */
static const struct subcommand commands[] = {
    {"init", gm_cli_init},       {"join", gm_cli_join},     {"agent", gm_cli_agent},
    {"token", gm_cli_token},     {"status", gm_cli_status}, {"peers", gm_cli_peers},
    {"doctor", gm_cli_doctor},   {"submit", gm_cli_submit}, {"jobs", gm_cli_jobs},
    {"cancel", gm_cli_cancel},   {"train", gm_cli_train},   {"members", gm_cli_members},
    {"revoke", gm_cli_revoke},   {"role", gm_cli_role},     {"checkpoint", gm_cli_checkpoint},
    {"version", gm_cli_version}, {"leave", gm_cli_leave},
};

/* "--help" or "-h" anywhere after the verb (before a "--"). */
static int wants_help(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t i;

    gm_log_init();
    /* a closed socket (control client, peer link) is an error return, never a
     * fatal signal */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        gm_cli_usage(stderr);
        return GM_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2)) {
        gm_cli_usage(stdout);
        return GM_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 && argc == 2) /* the same as `gradmesh version` */
        return gm_cli_version(argc - 1, argv + 1);
    if (strcmp(argv[1], "help") == 0 && argc == 3) /* gradmesh help VERB */
        return gm_cli_help(stdout, argv[2]) == 0 ? GM_EXIT_OK : GM_EXIT_USAGE;
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        if (wants_help(argc, argv))
            return gm_cli_help(stdout, argv[1]) == 0 ? GM_EXIT_OK : GM_EXIT_USAGE;
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "gradmesh: unknown command '%s'\n", argv[1]);
    gm_cli_usage(stderr);
    return GM_EXIT_USAGE;
}
