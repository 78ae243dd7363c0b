/*
 * common/log.c - see log.h.  Lines are formatted into a stack buffer and
 * written with a single write(2), so lines from the loop thread and the
 * trainer thread never interleave.  Over-long lines are truncated with "...".
 */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Set from main() before threads start; read-only afterwards. */
static enum gm_log_level log_level = GM_LOG_INFO;
static int log_journal;
static int log_fd = 2;
/* Per thread (no thread shares it): the last error line, for gm_log_last_error. */
static _Thread_local char last_error[512];

const char *gm_log_last_error(void)
{
    return last_error;
}

void gm_log_clear_last_error(void)
{
    last_error[0] = '\0';
}

void gm_log_init(void)
{
    const char *lvl = getenv("GRADMESH_LOG_LEVEL");

    log_journal = getenv("JOURNAL_STREAM") != NULL;
    if (lvl == NULL)
        return;
    if (strcasecmp(lvl, "err") == 0 || strcasecmp(lvl, "error") == 0)
        log_level = GM_LOG_ERR;
    else if (strcasecmp(lvl, "warn") == 0 || strcasecmp(lvl, "warning") == 0)
        log_level = GM_LOG_WARN;
    else if (strcasecmp(lvl, "notice") == 0)
        log_level = GM_LOG_NOTICE;
    else if (strcasecmp(lvl, "info") == 0)
        log_level = GM_LOG_INFO;
    else if (strcasecmp(lvl, "debug") == 0)
        log_level = GM_LOG_DEBUG;
}

void gm_log_set_level(enum gm_log_level level)
{
    log_level = level;
}

enum gm_log_level gm_log_get_level(void)
{
    return log_level;
}

void gm_log_set_fd(int fd)
{
    log_fd = fd;
}

void gm_log(enum gm_log_level level, const char *fmt, ...)
{
    char buf[2048];
    size_t n = 0;
    int r;
    va_list ap;

    if (level == GM_LOG_ERR) {
        va_start(ap, fmt);
        r = vsnprintf(last_error, sizeof(last_error), fmt, ap);
        va_end(ap);
        if (r < 0)
            last_error[0] = '\0';
    }
    if (level > log_level)
        return;
    if (log_journal) {
        r = snprintf(buf, sizeof(buf), "<%d>", (int)level);
        n = (size_t)r;
    } else if (level == GM_LOG_ERR) {
        memcpy(buf, "error: ", 7);
        n = 7;
    } else if (level == GM_LOG_WARN) {
        memcpy(buf, "warning: ", 9);
        n = 9;
    }
    va_start(ap, fmt);
    r = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    va_end(ap);
    if (r < 0)
        return;
    if ((size_t)r >= sizeof(buf) - n - 1) {
        n = sizeof(buf) - 5;
        memcpy(buf + n - 3, "...", 3);
    } else {
        n += (size_t)r;
    }
    buf[n++] = '\n';
    {
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(log_fd, buf + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return;
            off += (size_t)w;
        }
    }
}
