/* tests/unit/test_common.c - error names, exit-code mapping, log line format. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void test_strerror(void)
{
    GM_CHECK_STREQ(gm_strerror(0), "success");
    GM_CHECK_STREQ(gm_strerror(-ENOMEM), "Cannot allocate memory");
    GM_CHECK_STREQ(gm_strerror(GM_ERR_CONFIG), "configuration error");
    GM_CHECK_STREQ(gm_strerror(GM_ERR_ABORTED), "operation aborted");
    GM_CHECK_STREQ(gm_strerror(GM_ERR_LAST), "unknown error");
    for (int e = GM_ERR_BASE - 1; e > GM_ERR_LAST; e--)
        GM_CHECK(strcmp(gm_strerror(e), "unknown gradmesh error") != 0);
    GM_CHECK_EQ(gm_err_exit_code(GM_ERR_DATA), 78);
    GM_CHECK_EQ(gm_err_exit_code(-EIO), 1);
    GM_CHECK_EQ(gm_err_exit_code(0), 0);
}

static void test_log_lines(void)
{
    int fds[2];
    char buf[512];
    ssize_t n;

    GM_CHECK(pipe(fds) == 0);
    gm_log_set_fd(fds[1]);
    setenv("JOURNAL_STREAM", "8:1234", 1);
    gm_log_init();
    gm_warn("event=x a=%d", 1);
    unsetenv("JOURNAL_STREAM");
    gm_log_init();
    gm_err("event=y");
    gm_debug("event=hidden");
    gm_log_set_fd(2);
    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    GM_CHECK(n > 0);
    buf[n > 0 ? n : 0] = 0;
    GM_CHECK_STREQ(buf, "<4>event=x a=1\nerror: event=y\n");
}

int main(void)
{
    GM_TEST_RUN(test_strerror);
    GM_TEST_RUN(test_log_lines);
    return gm_test_finish("test_common");
}
