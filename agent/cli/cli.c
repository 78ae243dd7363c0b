/*
 * agent/cli/cli.c - what every subcommand shares (see cli.h): the usage and failure exits,
 * and one request to the local agent over its control socket (agent/service/control.h).
 * The subcommand files (cli_net.c, cli_peers.c, cli_job.c, cli_chief.c, cli_ckpt.c,
 * cli_train.c) call these and never each other.
 *
 * Main thread of the gradmesh command; nothing here runs inside the agent.
 */
#include "agent/cli/cli.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

/* The config an agent process was started with (`gradmesh agent [--config X]`, else
 * $GRADMESH_CONFIG, else the default), made absolute against its working folder, into out.
 * 0, or -ENOENT when pid is not a gradmesh agent (or its command line cannot be read). */
static int agent_config_of(const char *pid, char out[PATH_MAX])
{
    char path[300], buf[4096], cwd[PATH_MAX], rel[PATH_MAX];
    const char *argv[64], *config = NULL, *base;
    size_t len = 0, i, n = 0;
    ssize_t r;
    int fd;

    snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -ENOENT;
    while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    for (i = 0; i < len && n < sizeof(argv) / sizeof(argv[0]); i += strlen(buf + i) + 1)
        argv[n++] = buf + i;
    if (n < 2 || strcmp(argv[1], "agent") != 0)
        return -ENOENT;
    base = strrchr(argv[0], '/');
    base = base != NULL ? base + 1 : argv[0];
    if (strncmp(base, "gradmesh", 8) != 0)
        return -ENOENT;
    for (i = 2; i < n; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < n)
            config = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            config = argv[i] + 9;
    }
    if (config == NULL) {
        /* its environment (readable for our own processes and root's): $GRADMESH_CONFIG */
        snprintf(path, sizeof(path), "/proc/%s/environ", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        len = 0;
        if (fd >= 0) {
            while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
                len += (size_t)r;
            close(fd);
        }
        buf[len] = '\0';
        for (i = 0; i < len; i += strlen(buf + i) + 1)
            if (strncmp(buf + i, "GRADMESH_CONFIG=", 16) == 0 && buf[i + 16] != '\0')
                config = buf + i + 16;
        if (config == NULL)
            config = GM_DEFAULT_CONFIG;
    }
    if (config[0] != '/') {
        snprintf(path, sizeof(path), "/proc/%s/cwd", pid);
        r = readlink(path, cwd, sizeof(cwd) - 1);
        if (r <= 0)
            return -ENOENT;
        cwd[r] = '\0';
        if (snprintf(rel, sizeof(rel), "%s/%s", cwd, config) >= (int)sizeof(rel))
            return -ENOENT;
        config = rel;
    }
    if (realpath(config, out) == NULL)
        snprintf(out, PATH_MAX, "%s", config);
    return 0;
}

/* The pid of a running `gradmesh agent` of config (the same file, through links), or 0. */
static long agent_running(const char *config)
{
    char want[PATH_MAX], got[PATH_MAX];
    struct dirent *e;
    long pid = 0, self = (long)getpid();
    DIR *d;

    if (realpath(config, want) == NULL)
        return 0;
    d = opendir("/proc");
    if (d == NULL)
        return 0;
    while (pid == 0 && (e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]) || atol(e->d_name) == self)
            continue;
        if (agent_config_of(e->d_name, got) == 0 && strcmp(got, want) == 0)
            pid = atol(e->d_name);
    }
    closedir(d);
    return pid;
}

/* Sends one request to the local agent; *out is the parsed answer. */
int gm_cli_control(const char *cmd, const char *config, json_t *req, json_t **out)
{
    struct gm_config c;
    json_error_t e;
    char *text = NULL, *resp = NULL;
    long pid;
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
    if ((err == -ENOENT || err == -ECONNREFUSED) &&
        (pid = agent_running(gm_config_path(config))) > 0) {
        /* an agent that lost its socket: deleted under it (an rm, a cleanup of /run), or
         * another agent's start that took the path over */
        fprintf(stderr,
                "gradmesh %s: the agent of %s is running (pid %ld) but does not answer at its "
                "control socket %s (%s): the socket was removed under it; restart the agent "
                "(systemctl restart gradmesh@%s, or stop pid %ld and run gradmesh agent "
                "--config %s)\n",
                cmd, gm_config_path(config), pid, c.control, gm_strerror(err), c.cluster, pid,
                gm_config_path(config));
        return -ENOTCONN;
    }
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
