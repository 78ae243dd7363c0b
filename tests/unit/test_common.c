/* tests/unit/test_common.c - error names, exit-code mapping, log line format. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/byteorder.h"
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
        if (e != GM_ERR_RETIRED_DEVICE)
            GM_CHECK(strcmp(gm_strerror(e), "unknown gradmesh error") != 0);
    GM_CHECK_STREQ(gm_strerror(GM_ERR_RETIRED_DEVICE), "unknown gradmesh error");
    GM_CHECK_STREQ(gm_strerror(-ENOTSUP), "Operation not supported");
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

/* Each thread's last error line (the reason a job is told with), also when the level hides it;
 * another thread's errors never show. */
static void *other_thread(void *arg)
{
    (void)arg;
    gm_err("event=elsewhere");
    return (void *)(gm_log_last_error()[0] ? (void *)1 : NULL);
}

static void test_last_error(void)
{
    pthread_t th;
    void *ret = NULL;
    enum gm_log_level lvl = gm_log_get_level();

    gm_log_clear_last_error();
    GM_CHECK_STREQ(gm_log_last_error(), "");
    gm_log_set_level(GM_LOG_ERR - 1); /* nothing printed */
    gm_err("%s: %d training samples, fewer than one global batch of %d", "/d", 60000, 30000000);
    gm_warn("event=not-an-error");
    GM_CHECK_STREQ(gm_log_last_error(),
                   "/d: 60000 training samples, fewer than one global batch of 30000000");
    GM_CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
    GM_CHECK(pthread_join(th, &ret) == 0);
    GM_CHECK(ret != NULL);
    GM_CHECK_STREQ(gm_log_last_error(),
                   "/d: 60000 training samples, fewer than one global batch of 30000000");
    gm_log_clear_last_error();
    GM_CHECK_STREQ(gm_log_last_error(), "");
    gm_log_set_level(lvl);
}

/* Known byte patterns both ways, at an odd (unaligned) offset. */
static void test_byteorder(void)
{
    uint8_t b[17] = {0};
    const uint8_t be[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};

    gm_put_be64(b + 1, 0x0123456789abcdefu);
    GM_CHECK(memcmp(b + 1, be, 8) == 0);
    GM_CHECK_EQ(gm_get_be64(b + 1), 0x0123456789abcdefu);
    GM_CHECK_EQ(gm_get_be32(b + 1), 0x01234567u);
    GM_CHECK_EQ(gm_get_be16(b + 1), 0x0123u);
    gm_put_be32(b + 9, 0xdeadbeefu);
    GM_CHECK(b[9] == 0xde && b[12] == 0xef);
    gm_put_be16(b + 13, 0xbeefu);
    GM_CHECK(b[13] == 0xbe && b[14] == 0xef);
    gm_put_le64(b + 1, 0x0123456789abcdefu);
    GM_CHECK(b[1] == 0xef && b[8] == 0x01);
    GM_CHECK_EQ(gm_get_le64(b + 1), 0x0123456789abcdefu);
    GM_CHECK_EQ(gm_get_le32(b + 1), 0x89abcdefu);
}

int main(void)
{
    GM_TEST_RUN(test_strerror);
    GM_TEST_RUN(test_log_lines);
    GM_TEST_RUN(test_last_error);
    GM_TEST_RUN(test_byteorder);
    return gm_test_finish("test_common");
}
