/*
 * agent/cli/cli.h - subcommand entry points of the gradmesh binary.  Each takes
 * argv starting at the subcommand name and returns the process exit code.
 * Called from main() only.
 */
#ifndef GM_AGENT_CLI_CLI_H
#define GM_AGENT_CLI_CLI_H

#include <stdio.h>

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
int gm_cli_members(int argc, char **argv);
int gm_cli_revoke(int argc, char **argv);
int gm_cli_role(int argc, char **argv);
int gm_cli_checkpoint(int argc, char **argv);
int gm_cli_version(int argc, char **argv);
int gm_cli_leave(int argc, char **argv);

/* JSON for people: reals with at most 6 significant digits (83.88, not 83.879999999999995),
 * as `gradmesh jobs --json` prints them. */
#define GM_JSON_HUMAN JSON_REAL_PRECISION(6)

/* agent/cli/cli_help.c: the list of verbs; one verb's help (-1: no such verb); the synopsis
 * and a pointer to --help, on stderr, after a usage error. */
void gm_cli_usage(FILE *f);
int gm_cli_help(FILE *f, const char *verb);
void gm_cli_usage_hint(const char *verb);

/* agent/cli/cli.c: what the subcommands share. */
/* After a usage error: the verb's synopsis and a pointer to --help (gm_cli_usage_hint);
 * returns GM_EXIT_USAGE. */
int gm_cli_usage_err(const char *cmd);
/* Prints "gradmesh CMD: WHAT: why" on stderr; returns err's exit code (gm_err_exit_code). */
int gm_cli_fail(const char *cmd, int err, const char *what);
/* Sends req (consumed) to the local agent of config; *out the answer.  Prints
 * the agent's error or why it is unreachable; returns a negative code then. */
struct json_t;
int gm_cli_control(const char *cmd, const char *config, struct json_t *req, struct json_t **out);

/* On a terminal (stderr a tty, no journal, no GRADMESH_LOG_LEVEL), log only warnings and
 * errors: a person reads the command's own lines, not event=... lines before them.  Logs
 * (stderr redirected) keep every event. */
void gm_cli_quiet_log(void);
/* Sizes and durations as people read them, into out (cap >= 16): "84.7 MB", "1.2 GB", "512 B"
 * (SI units: 1 MB = 10^6 bytes); "45s", "12m30s", "1h30m", "24h", "36h", "3d4h" (seconds
 * rounded; the two largest units; days from 48h on).  Returns out.  `--json` keeps the raw numbers.
 */
const char *gm_cli_fmt_bytes(double bytes, char *out, size_t cap);
const char *gm_cli_fmt_duration(double seconds, char *out, size_t cap);

/* agent/cli/cli_state.c: the state directory and config of init, join and leave. */
/* Whether CMD may write config and an identity into state_dir: never while an agent runs on
 * it (its lock is held); without force, not over an existing config file or node identity.
 * GM_EXIT_OK, or GM_EXIT_CONFIG after one line on stderr naming the file and --force. */
int gm_cli_state_check(const char *cmd, const char *config, const char *state_dir, int force);
/* Removes a node's identity and cluster state from state_dir (node.key, node.crt, ca.*,
 * tokens, beacon.key, members, admitter, denylist, raft/); checkpoints/ and jobs/ stay. */
int gm_cli_state_wipe(const char *state_dir);
/* Folders a command made, so a failure removes them again (newest first). */
#define GM_CLI_MADE_MAX 16
struct gm_cli_made {
    int n;
    char dir[GM_CLI_MADE_MAX][1024];
};
/* mkdir -p of path's parents (0755) and, with last, of path itself (0700); each folder made
 * is recorded in made (may be NULL).  0 or -errno. */
int gm_cli_mkdirs(const char *path, int last, struct gm_cli_made *made);
/* Undoes a failed init or join: unlinks files[0..nfiles) in state_dir (NULL: none), then
 * removes the folders made records, newest first (rmdir: only when empty). */
void gm_cli_undo(struct gm_cli_made *made, const char *state_dir, const char *const *files,
                 size_t nfiles);

#endif
