/*
 * tests/unit/test_statelock.c - one agent per state directory (agent/service/statelock.h):
 * the lock, its record, a second taker refused with the holder's PID and address, the holder
 * check, release, and a state directory that does not exist.
 *
 * flock(2) locks belong to an open file description, so a second open in this process
 * conflicts with the first as a second agent's would.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/service/statelock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static char dir[256];

static void read_file(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    ssize_t r = fd >= 0 ? read(fd, buf, n - 1) : -1;

    buf[r > 0 ? r : 0] = '\0';
    if (fd >= 0)
        close(fd);
}

static void test_take_refuse_release(void)
{
    char path[512], buf[256], want[256], listen[64];
    int fd = -1, fd2 = 7, devnull;
    pid_t pid;

    snprintf(path, sizeof(path), "%s/" GM_STATELOCK_FILE, dir);
    GM_CHECK_EQ(gm_statelock_holder(dir, &pid, listen, sizeof(listen)), 0); /* no file yet */
    GM_CHECK_OK(gm_statelock_take(dir, "127.0.0.1:7450", &fd));
    GM_CHECK(fd >= 0);
    read_file(path, buf, sizeof(buf));
    snprintf(want, sizeof(want), "pid=%ld\nlisten=127.0.0.1:7450\n", (long)getpid());
    GM_CHECK_STREQ(buf, want);
    GM_CHECK_OK(gm_statelock_update(fd, "127.0.0.1:40001")); /* the bound address */
    read_file(path, buf, sizeof(buf));
    snprintf(want, sizeof(want), "pid=%ld\nlisten=127.0.0.1:40001\n", (long)getpid());
    GM_CHECK_STREQ(buf, want);

    GM_CHECK_EQ(gm_statelock_holder(dir, &pid, listen, sizeof(listen)), 1);
    GM_CHECK_EQ((long)pid, (long)getpid());
    GM_CHECK_STREQ(listen, "127.0.0.1:40001");

    devnull = open("/dev/null", O_WRONLY); /* the refusal's line: checked by state_lock.sh */
    gm_log_set_fd(devnull);
    GM_CHECK_ERR(gm_statelock_take(dir, "127.0.0.1:7451", &fd2), GM_ERR_CONFIG);
    gm_log_set_fd(2);
    close(devnull);
    GM_CHECK_EQ(fd2, -1);
    read_file(path, buf, sizeof(buf));
    GM_CHECK_STREQ(buf, want); /* the refused one wrote nothing */

    gm_statelock_release(&fd);
    GM_CHECK_EQ(fd, -1);
    gm_statelock_release(&fd); /* idempotent */
    gm_statelock_release(NULL);
    GM_CHECK_EQ(gm_statelock_holder(dir, &pid, listen, sizeof(listen)), 0); /* file left */
    GM_CHECK(access(path, F_OK) == 0);
    GM_CHECK_OK(gm_statelock_take(dir, "127.0.0.1:7452", &fd2)); /* a restart takes it */
    gm_statelock_release(&fd2);
}

static void test_missing_dir(void)
{
    char missing[300];
    int fd = 5, devnull = open("/dev/null", O_WRONLY);

    snprintf(missing, sizeof(missing), "%s/nope", dir);
    gm_log_set_fd(devnull);
    GM_CHECK_ERR(gm_statelock_take(missing, "127.0.0.1:1", &fd), GM_ERR_CONFIG); /* exit 78 */
    gm_log_set_fd(2);
    close(devnull);
    GM_CHECK_EQ(fd, -1);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    char path[300];

    snprintf(dir, sizeof(dir), "%s/gm-test-statelock-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_take_refuse_release);
    GM_TEST_RUN(test_missing_dir);
    snprintf(path, sizeof(path), "%s/" GM_STATELOCK_FILE, dir);
    unlink(path);
    rmdir(dir);
    return gm_test_finish("test_statelock");
}
