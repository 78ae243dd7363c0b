/*
 * agent/cli/cli_state.c - what `init`, `join` and `leave` do to a state directory and a
 * config file that may exist already: refuse to overwrite them without --force, never touch
 * a running agent's, undo what a failed init or join created, and `gradmesh leave`.
 *
 * A state directory holds a node's identity and its cluster state (the files of
 * identity_files below and raft/), and its data: checkpoints/ and jobs/ (job outputs), which
 * nothing here removes.  An agent holds STATE_DIR/agent.lock while it runs
 * (agent/service/statelock.h); these commands read it to refuse touching that agent's files.
 *
 * Called from main() only, one command per process.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/cli/cli.h"
#include "agent/service/config.h"
#include "agent/service/statelock.h"
#include "common/err.h"

#define LEAVE_STOP_WAIT_MS 15000 /* how long leave waits for the agent to stop */
#define POLL_MS 100

/* A node's identity and its cluster's state in its state directory (raft/ besides). */
static const char *const identity_files[] = {
    "node.key",   "node.crt", "ca.crt",   "ca.key",   "tokens",
    "beacon.key", "members",  "admitter", "denylist",
};

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

int gm_cli_state_check(const char *cmd, const char *config, const char *state_dir, int force)
{
    char path[GM_PATH_MAX + 32], listen[256];
    pid_t pid;
    int held = gm_statelock_holder(state_dir, &pid, listen, sizeof(listen));

    if (held > 0) {
        fprintf(stderr,
                "gradmesh %s: an agent (pid %ld, listening on %s) runs on %s: stop it first; "
                "%s never replaces a running agent's identity, --force or not\n",
                cmd, (long)pid, listen[0] ? listen : "?", state_dir, cmd);
        return GM_EXIT_CONFIG;
    }
    if (force)
        return GM_EXIT_OK;
    if (exists(config)) {
        fprintf(stderr,
                "gradmesh %s: %s exists: give --force to replace it, or another --config FILE\n",
                cmd, config);
        return GM_EXIT_CONFIG;
    }
    snprintf(path, sizeof(path), "%s/node.key", state_dir);
    if (exists(path)) {
        fprintf(stderr,
                "gradmesh %s: %s exists: %s holds a node identity; give --force to replace it "
                "(its checkpoints are kept), or another --state DIR\n",
                cmd, path, state_dir);
        return GM_EXIT_CONFIG;
    }
    return GM_EXIT_OK;
}

/* Removes dir and everything in it (raft/ holds files only; a subfolder is removed too). */
static int remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[GM_PATH_MAX + 256];
    int err = 0;

    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            int e2 = remove_tree(p);
            err = e2 != 0 ? e2 : err;
        } else if (unlink(p) != 0 && errno != ENOENT) {
            err = -errno;
        }
    }
    closedir(d);
    if (rmdir(dir) != 0 && errno != ENOENT)
        err = -errno;
    return err;
}

int gm_cli_state_wipe(const char *state_dir)
{
    char p[GM_PATH_MAX + 32];
    int err = 0;

    for (size_t i = 0; i < sizeof(identity_files) / sizeof(identity_files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", state_dir, identity_files[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            err = -errno;
    }
    snprintf(p, sizeof(p), "%s/raft", state_dir);
    {
        int e2 = remove_tree(p);
        err = err != 0 ? err : e2;
    }
    return err;
}

int gm_cli_mkdirs(const char *path, int last, struct gm_cli_made *made)
{
    char tmp[GM_PATH_MAX];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof(tmp))
        return -EINVAL;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && tmp[i] != '/')
            continue;
        if (i == n && !last)
            break;
        tmp[i] = '\0';
        if (mkdir(tmp, i == n ? 0700 : 0755) == 0) {
            if (made != NULL && made->n < GM_CLI_MADE_MAX)
                snprintf(made->dir[made->n++], sizeof(made->dir[0]), "%s", tmp);
        } else if (errno != EEXIST) {
            return -errno;
        }
        if (i < n)
            tmp[i] = '/';
    }
    return 0;
}

void gm_cli_undo(struct gm_cli_made *made, const char *state_dir, const char *const *files,
                 size_t nfiles)
{
    char p[GM_PATH_MAX + 64];

    for (size_t i = 0; state_dir != NULL && i < nfiles; i++) {
        snprintf(p, sizeof(p), "%s/%s", state_dir, files[i]);
        (void)unlink(p);
    }
    /* newest first; rmdir refuses a folder that holds something not ours */
    while (made != NULL && made->n > 0)
        (void)rmdir(made->dir[--made->n]);
}

/* Sends SIGTERM to the agent holding state_dir's lock and waits until it let go. */
static int stop_agent(const char *state_dir)
{
    struct timespec nap = {0, POLL_MS * 1000000L};
    char listen[256];
    pid_t pid;
    int held = gm_statelock_holder(state_dir, &pid, listen, sizeof(listen));

    if (held <= 0)
        return held;
    if (pid <= 0 || kill(pid, SIGTERM) != 0)
        return pid <= 0 ? -ESRCH : -errno;
    for (int k = 0; k < LEAVE_STOP_WAIT_MS / POLL_MS; k++) {
        if (gm_statelock_holder(state_dir, &pid, listen, sizeof(listen)) == 0)
            return 0;
        nanosleep(&nap, NULL);
    }
    return -ETIMEDOUT;
}

/* Waits until the chief revoked this node: the outcome of request req, or, once the members
 * cut this node off (the outcome then never arrives), the agent's status saying "revoked". */
static int await_revoked(const char *config, long long req, int wait_s)
{
    struct timespec nap = {0, POLL_MS * 1000000L};

    for (int k = 0; k < wait_s * (1000 / POLL_MS); k++) {
        json_t *r = NULL;
        const char *state = NULL;
        int revoked = 0;

        if (gm_cli_control("leave", config,
                           json_pack("{s:s, s:I}", "cmd", "chief-result", "req", (json_int_t)req),
                           &r) == 0)
            state = json_string_value(json_object_get(r, "state"));
        if (state != NULL && strcmp(state, "refused") == 0) {
            const char *msg = json_string_value(json_object_get(r, "message"));
            fprintf(stderr, "gradmesh leave: %s\n", msg != NULL ? msg : "refused by the chief");
            json_decref(r);
            return GM_EXIT_RUNTIME;
        }
        revoked = state != NULL && strcmp(state, "done") == 0;
        json_decref(r);
        r = NULL;
        if (!revoked &&
            gm_cli_control("leave", config, json_pack("{s:s}", "cmd", "status"), &r) == 0)
            revoked = json_is_true(json_object_get(r, "revoked"));
        json_decref(r);
        if (revoked)
            return GM_EXIT_OK;
        nanosleep(&nap, NULL);
    }
    fprintf(stderr,
            "gradmesh leave: no outcome from the chief within %d s (it may have lost its "
            "majority); see `gradmesh members`; nothing was removed here\n",
            wait_s);
    return GM_EXIT_RUNTIME;
}

int gm_cli_leave(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {"wait", required_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    const char *config = NULL, *path;
    struct gm_config c;
    json_t *r = NULL;
    char ckdir[GM_PATH_MAX + 32], real[PATH_MAX];
    int o, err, wait_s = 10;

    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'f') {
            config = optarg;
        } else if (o == 'w') {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end != '\0' || v < 1 || v > 3600)
                return gm_cli_usage_err("leave");
            wait_s = (int)v;
        } else {
            return gm_cli_usage_err("leave");
        }
    }
    if (optind != argc)
        return gm_cli_usage_err("leave");
    path = gm_config_path(config);
    if ((err = gm_config_load(path, &c)) != 0)
        return gm_err_exit_code(err); /* the one line naming the file is out */
    /* the chief revokes this node as `gradmesh revoke NODE` does; it must hear of it */
    err = gm_cli_control("leave", config, json_pack("{s:s, s:s}", "cmd", "revoke", "node", c.node),
                         &r);
    if (err != 0) {
        fprintf(stderr,
                "gradmesh leave: this node's agent must run to tell the chief (start it), or "
                "revoke %s from another member (gradmesh revoke %s) and remove %s here\n",
                c.node, c.node, c.state_dir);
        return gm_err_exit_code(err);
    }
    err = await_revoked(config, json_integer_value(json_object_get(r, "req")), wait_s);
    json_decref(r);
    if (err != GM_EXIT_OK)
        return err; /* refused (the chief itself, or a voter the majority needs): said why */
    err = stop_agent(c.state_dir);
    if (err != 0) {
        fprintf(stderr,
                "gradmesh leave: %s is revoked, but its agent did not stop (%s): stop it, then "
                "remove its identity from %s\n",
                c.node, gm_strerror(err), c.state_dir);
        return GM_EXIT_RUNTIME;
    }
    err = gm_cli_state_wipe(c.state_dir);
    /* the config, and the file it links to (/etc/gradmesh/gradmesh.conf -> CLUSTER.conf) */
    if (err == 0 && realpath(path, real) != NULL && strcmp(real, path) != 0 && unlink(real) != 0 &&
        errno != ENOENT)
        err = -errno;
    if (err == 0 && unlink(path) != 0 && errno != ENOENT)
        err = -errno;
    if (err != 0)
        return gm_cli_fail("leave", err, "could not remove this node's identity");
    snprintf(ckdir, sizeof(ckdir), "%s/checkpoints", c.state_dir);
    printf("node %s left cluster %s: revoked by the chief, its agent stopped, its identity "
           "and %s removed\n",
           c.node, c.cluster, path);
    if (exists(ckdir))
        printf("checkpoints kept in %s (and job outputs in %s/jobs)\n", ckdir, c.state_dir);
    if (strncmp(path, GM_CONFIG_DIR "/", strlen(GM_CONFIG_DIR) + 1) == 0) /* the unit's config */
        printf("next: systemctl disable gradmesh@%s   (its config is gone)\n", c.cluster);
    return GM_EXIT_OK;
}
