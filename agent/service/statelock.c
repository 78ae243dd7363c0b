/*
 * agent/service/statelock.c - one agent per state directory: the flock of agent.lock (see
 * statelock.h for the contract).
 */
#include "agent/service/statelock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/log.h"

static int lock_path(const char *state_dir, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/" GM_STATELOCK_FILE, state_dir);

    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Reads the record of fd: "pid=N\nlisten=ADDR\n" (either line may be missing). */
static void read_record(int fd, pid_t *pid, char *listen, size_t cap)
{
    char buf[512], *p, *save = NULL;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

    *pid = 0;
    if (cap > 0)
        listen[0] = '\0';
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (p = strtok_r(buf, "\n", &save); p != NULL; p = strtok_r(NULL, "\n", &save)) {
        if (strncmp(p, "pid=", 4) == 0)
            *pid = (pid_t)strtol(p + 4, NULL, 10);
        else if (strncmp(p, "listen=", 7) == 0 && cap > 0)
            snprintf(listen, cap, "%s", p + 7);
    }
}

int gm_statelock_update(int fd, const char *listen)
{
    char rec[320];
    int n = snprintf(rec, sizeof(rec), "pid=%ld\nlisten=%s\n", (long)getpid(), listen);

    if (n < 0 || (size_t)n >= sizeof(rec))
        return -ENAMETOOLONG;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)n, 0) != n)
        return -errno;
    return 0;
}

int gm_statelock_take(const char *state_dir, const char *listen, int *out)
{
    char path[4096], other[256];
    pid_t pid;
    int fd, err;

    *out = -1;
    if ((err = lock_path(state_dir, path, sizeof(path))) != 0) {
        gm_err("%s/" GM_STATELOCK_FILE ": %s", state_dir, strerror(-err));
        return err;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EACCES) /* another user's file (an agent run as root once): a lock */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* still, without the record */
    if (fd < 0) {
        err = -errno;
        gm_err("%s: cannot open the state directory's lock: %s (is [node] state_dir right, and "
               "this user's?)",
               path, strerror(-err));
        /* like an identity that cannot be read: the config names a state directory this
         * agent cannot use, which a restart does not fix (exit 78) */
        return err == -ENOENT || err == -ENOTDIR || err == -EACCES || err == -EPERM || err == -EROFS
                   ? GM_ERR_CONFIG
                   : err;
    }
    /* a CLI's gm_statelock_holder holds a shared lock for an instant: try for half a second */
    for (int i = 0; (err = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EWOULDBLOCK && i < 50;
         i++)
        usleep(10000);
    if (err != 0) {
        err = -errno;
        if (err == -EWOULDBLOCK) {
            read_record(fd, &pid, other, sizeof(other));
            gm_err("%s: another agent (pid %ld, listening on %s) runs on this state directory: "
                   "one agent per state directory; stop that one first, or give this one a "
                   "state directory of its own (init or join --state)",
                   state_dir, (long)pid, other[0] ? other : "an address it did not record");
            err = GM_ERR_CONFIG;
        } else {
            gm_err("%s: cannot lock: %s", path, strerror(-err));
        }
        close(fd);
        return err;
    }
    if ((err = gm_statelock_update(fd, listen)) != 0) /* locked all the same */
        gm_warn("%s: cannot write the holder's record (%s): a second agent is refused without "
                "this one's PID",
                path, strerror(-err));
    *out = fd;
    return 0;
}

void gm_statelock_release(int *fd)
{
    if (fd == NULL || *fd < 0)
        return;
    (void)flock(*fd, LOCK_UN);
    close(*fd);
    *fd = -1;
}

int gm_statelock_holder(const char *state_dir, pid_t *pid, char *listen, size_t listen_cap)
{
    char path[4096];
    int fd, err;

    *pid = 0;
    if (listen_cap > 0)
        listen[0] = '\0';
    if ((err = lock_path(state_dir, path, sizeof(path))) != 0)
        return err;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) { /* nobody holds it exclusively */
        close(fd);
        return 0;
    }
    err = errno == EWOULDBLOCK ? 1 : -errno;
    if (err == 1)
        read_record(fd, pid, listen, listen_cap);
    close(fd);
    return err;
}
