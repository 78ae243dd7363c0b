/*
 * agent/cli.h - subcommand entry points of the gradmesh binary.  Each takes
 * argv starting at the subcommand name and returns the process exit code.
 * Called from main() only.
 */
#ifndef GM_AGENT_CLI_H
#define GM_AGENT_CLI_H

int gm_cli_train(int argc, char **argv);
int gm_cli_init(int argc, char **argv);
int gm_cli_join(int argc, char **argv);
int gm_cli_token(int argc, char **argv);
int gm_cli_agent(int argc, char **argv);
int gm_cli_status(int argc, char **argv);
int gm_cli_peers(int argc, char **argv);
int gm_cli_doctor(int argc, char **argv);
int gm_cli_submit(int argc, char **argv);
int gm_cli_jobs(int argc, char **argv);
int gm_cli_cancel(int argc, char **argv);

/* Sends req (consumed) to the local agent of config; *out the answer.  Prints
 * the agent's error or why it is unreachable; returns a negative code then. */
struct json_t;
int gm_cli_control(const char *cmd, const char *config, struct json_t *req, struct json_t **out);

#endif
