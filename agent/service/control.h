/*
 * agent/service/control.h - the local control socket (a unix stream socket, 0600).
 *
 * One request per connection: the client writes one JSON object and a
 * newline, the server answers one JSON object and a newline and closes.
 * Requests are capped at GM_CONTROL_MAX bytes.  The server side runs on the
 * agent's loop thread; gm_control_call is a blocking client for the CLI.
 */
#ifndef GM_AGENT_SERVICE_CONTROL_H
#define GM_AGENT_SERVICE_CONTROL_H

#include <stddef.h>

#include <uv.h>

#include "common/err.h"

#define GM_CONTROL_MAX (64u << 10)

/* Answers one request: *resp is a malloc'd JSON text (no newline). */
typedef void (*gm_control_fn)(void *arg, const char *req, size_t len, char **resp);

struct gm_control; /* opaque */

GM_MUST_CHECK int gm_control_start(uv_loop_t *loop, const char *path, gm_control_fn fn, void *arg,
                                   struct gm_control **out);
/* Asynchronous: closes the listener and open connections; frees itself. */
void gm_control_close(struct gm_control *c);

/* Client: sends req, waits up to timeout_ms for the answer (*resp malloc'd). */
GM_MUST_CHECK int gm_control_call(const char *path, const char *req, int timeout_ms, char **resp);

#endif
