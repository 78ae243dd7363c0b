/* agent/cli_train.c - `gradmesh train --local JOB.ini`: placeholder until the trainer lands. */
#include <stdio.h>

#include "agent/cli.h"
#include "common/err.h"

int gm_cli_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradmesh train: not built yet\n");
    return GM_EXIT_RUNTIME;
}
