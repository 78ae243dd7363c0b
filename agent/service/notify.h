/*
 * agent/service/notify.h - the agent's side of systemd's notification protocol (sd_notify(3)):
 * READY=1 once it listens, STATUS= lines, WATCHDOG=1 from the loop, STOPPING=1 on drain.
 *
 * Uses sd_notify() from Debian's libsystemd-dev rather than our own datagram code: it
 * handles abstract and filesystem sockets, credentials and the environment rules, and is the
 * reference for the protocol.  Outside systemd (no $NOTIFY_SOCKET) every call is a no-op.
 *
 * The watchdog is fed by a uv timer on the loop (agent.c), at half of $WATCHDOG_USEC, so a
 * loop that hangs stops feeding it and systemd restarts the agent.  Loop thread only.
 */
#ifndef GM_AGENT_SERVICE_NOTIFY_H
#define GM_AGENT_SERVICE_NOTIFY_H

#include <stdint.h>

/* The interval at which to send WATCHDOG=1, in ms (half of $WATCHDOG_USEC, at least 1),
 * or 0 when systemd asked for no watchdog for this process. */
uint64_t gm_notify_watchdog_ms(void);

void gm_notify_ready(const char *status);
/* STATUS=<text> (the caller sends only changes). */
void gm_notify_status(const char *text);
void gm_notify_watchdog(void);
void gm_notify_stopping(void);

#endif
