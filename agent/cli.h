/*
 * agent/cli.h - subcommand entry points of the gradmesh binary.  Each takes
 * argv starting at the subcommand name and returns the process exit code.
 * Called from main() only.
 */
#ifndef GM_AGENT_CLI_H
#define GM_AGENT_CLI_H

int gm_cli_train(int argc, char **argv);

#endif
