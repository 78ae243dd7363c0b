/*
 * agent/service/statelock.h - one agent per state directory.
 *
 * Two agents on one state directory (another port, another control socket) would fight over
 * one identity, one raft log and one set of checkpoints.  The agent takes an exclusive
 * flock(2) on STATE_DIR/agent.lock when it opens, before it reads or writes anything else
 * there, and holds it until its process ends (the descriptor is O_CLOEXEC: nothing it starts
 * inherits it; the kernel drops the lock when the process dies, -9 included, so a stale file
 * never blocks a restart).  The file holds the holder's record, "pid=N\nlisten=ADDR\n",
 * rewritten once the listener is bound (its real address); a second agent is refused with
 * that record.  The lock is advisory: only agents take it (the CLI's `init`, `join` and
 * `leave` read it to refuse touching a running agent's files).
 *
 * Called from the loop thread (gm_agent_open/start) and the CLI; no global state.
 */
#ifndef GM_AGENT_SERVICE_STATELOCK_H
#define GM_AGENT_SERVICE_STATELOCK_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

#define GM_STATELOCK_FILE "agent.lock"

/* Takes the lock of state_dir and records this process (listen: the configured address) in
 * it (a record that cannot be written is a warning: the lock holds all the same); *fd gets the
 * descriptor to keep (-1 on failure).  0; GM_ERR_CONFIG when another process holds it (one
 * line logged: its PID and listen address, and what to do) or when the file cannot be opened
 * for want of the directory or of permission (logged, naming the file); other -errno
 * (logged). */
int gm_statelock_take(const char *state_dir, const char *listen, int *fd) GM_MUST_CHECK;

/* Rewrites the record (listen: the bound address).  0 or -errno (not logged). */
int gm_statelock_update(int fd, const char *listen) GM_MUST_CHECK;

/* Drops the lock and closes *fd (then -1); the file stays.  NULL-safe, idempotent. */
void gm_statelock_release(int *fd);

/* Whether a live process holds state_dir's lock: 1 (*pid and listen, listen_cap bytes, from
 * its record: 0 and "" where the record says nothing), 0 when none does (no file, or nobody
 * holds it), or -errno.  Takes no lock that outlives the call. */
int gm_statelock_holder(const char *state_dir, pid_t *pid, char *listen,
                        size_t listen_cap) GM_MUST_CHECK;

#endif
