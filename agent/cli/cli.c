/*
 * agent/cli/cli.c - what every subcommand shares (see cli.h): the usage and failure exits,
 * and one request to the local agent over its control socket (agent/service/control.h).
 * The subcommand files (cli_net.c, cli_peers.c, cli_job.c, cli_chief.c, cli_ckpt.c,
 * cli_train.c) call these and never each other.
 *
 * Main thread of the gradmesh command; nothing here runs inside the agent.
 */
#include "agent/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/service/config.h"
#include "agent/service/control.h"
#include "common/err.h"
#include "common/log.h"

#define CONTROL_TIMEOUT_MS 10000

int gm_cli_usage_err(const char *cmd)
{
    gm_cli_usage_hint(cmd); /* the synopses live in cli_help.c */
    return GM_EXIT_USAGE;
}

int gm_cli_fail(const char *cmd, int err, const char *what)
{
    fprintf(stderr, "gradmesh %s: %s: %s\n", cmd, what, gm_strerror(err));
    return gm_err_exit_code(err);
}

/* Sends one request to the local agent; *out is the parsed answer. */
int gm_cli_control(const char *cmd, const char *config, json_t *req, json_t **out)
{
    struct gm_config c;
    json_error_t e;
    char *text = NULL, *resp = NULL;
    int err;

    *out = NULL;
    err = gm_config_load(gm_config_path(config), &c);
    if (err != 0) {
        json_decref(req);
        return err;
    }
    text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (text == NULL)
        return -ENOMEM;
    err = gm_control_call(c.control, text, CONTROL_TIMEOUT_MS, &resp);
    free(text);
    if (err == -ENOENT || err == -ECONNREFUSED) { /* no socket, or a dead agent's */
        fprintf(stderr,
                "gradmesh %s: no agent is running for %s (nothing answers at %s: %s); "
                "start it with: gradmesh agent --config %s\n",
                cmd, gm_config_path(config), c.control, gm_strerror(err), gm_config_path(config));
        return err;
    }
    if (err != 0) {
        fprintf(stderr, "gradmesh %s: cannot reach the agent at %s: %s\n", cmd, c.control,
                gm_strerror(err));
        return err;
    }
    *out = json_loads(resp, 0, &e);
    if (resp != NULL)
        sodium_memzero(resp, strlen(resp)); /* may hold a token */
    free(resp);
    if (*out == NULL)
        return -EPROTO;
    if (json_object_get(*out, "error") != NULL) {
        json_int_t code = json_integer_value(json_object_get(*out, "code"));
        fprintf(stderr, "gradmesh %s: %s\n", cmd,
                json_string_value(json_object_get(*out, "error")));
        json_decref(*out);
        *out = NULL;
        return code < 0 ? (int)code : -EPROTO;
    }
    return 0;
}

const char *gm_cli_fmt_bytes(double bytes, char *out, size_t cap)
{
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    size_t u = 0;

    if (!(bytes >= 0)) { /* negative or NaN: unknown */
        snprintf(out, cap, "-");
        return out;
    }
    while (bytes >= 1000 && u + 1 < sizeof(units) / sizeof(units[0])) {
        bytes /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%.0f B", bytes);
    else
        snprintf(out, cap, "%.*f %s", bytes < 10 ? 2 : bytes < 100 ? 1 : 0, bytes, units[u]);
    return out;
}

const char *gm_cli_fmt_duration(double seconds, char *out, size_t cap)
{
    long long s, d, h, m;

    if (!(seconds >= 0)) {
        snprintf(out, cap, "-");
        return out;
    }
    s = (long long)(seconds + 0.5);
    d = s >= 2 * 86400 ? s / 86400 : 0; /* "24h", "36h": days from two on */
    h = (s - d * 86400) / 3600;
    m = s % 3600 / 60;
    s %= 60;
    if (d > 0 && h > 0)
        snprintf(out, cap, "%lldd%lldh", d, h);
    else if (d > 0)
        snprintf(out, cap, "%lldd", d);
    else if (h > 0 && m > 0)
        snprintf(out, cap, "%lldh%lldm", h, m);
    else if (h > 0)
        snprintf(out, cap, "%lldh", h);
    else if (m > 0 && s > 0)
        snprintf(out, cap, "%lldm%llds", m, s);
    else if (m > 0)
        snprintf(out, cap, "%lldm", m);
    else
        snprintf(out, cap, "%llds", s);
    return out;
}

void gm_cli_quiet_log(void)
{
    if (isatty(STDERR_FILENO) && getenv("GRADMESH_LOG_LEVEL") == NULL &&
        getenv("JOURNAL_STREAM") == NULL && gm_log_get_level() > GM_LOG_WARN)
        gm_log_set_level(GM_LOG_WARN);
}
