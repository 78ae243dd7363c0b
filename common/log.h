/*
 * common/log.h - one event a line, key=value fields.
 *
 * Sink: stderr.  When JOURNAL_STREAM is set (we run under systemd with stderr
 * connected to journald) every line starts with a "<N>" syslog priority prefix
 * that journald turns into the entry's priority; otherwise lines are plain,
 * with a short level tag for warnings and errors.  The level and sink are the
 * only file-scope mutable state in the program and are set once from main()
 * (gm_log_init) before any thread starts; gm_log() itself is thread-safe (one
 * write(2) per line).  Each thread also keeps its own last error line (thread-local, so no
 * thread sees another's; gm_log_last_error).
 */
#ifndef GM_COMMON_LOG_H
#define GM_COMMON_LOG_H

enum gm_log_level {
    GM_LOG_ERR = 3,
    GM_LOG_WARN = 4,
    GM_LOG_NOTICE = 5,
    GM_LOG_INFO = 6,
    GM_LOG_DEBUG = 7,
};

/* Reads JOURNAL_STREAM and GRADMESH_LOG_LEVEL (err|warn|notice|info|debug). */
void gm_log_init(void);
void gm_log_set_level(enum gm_log_level level);
enum gm_log_level gm_log_get_level(void);
/* Redirects log lines to fd (default 2). For tests. */
void gm_log_set_fd(int fd);

/* The calling thread's last error line (level err, without prefix or newline, "" if none
 * since the thread started or since gm_log_clear_last_error).  Logged errors are also the
 * reasons told to users: the agent's trainer thread ends a job with the line its trainer
 * logged, which `train --local` would have printed.  Lines are logged even when the level
 * hides them. */
const char *gm_log_last_error(void);
void gm_log_clear_last_error(void);

__attribute__((format(printf, 2, 3))) void gm_log(enum gm_log_level level, const char *fmt, ...);

#define gm_err(...) gm_log(GM_LOG_ERR, __VA_ARGS__)
#define gm_warn(...) gm_log(GM_LOG_WARN, __VA_ARGS__)
#define gm_notice(...) gm_log(GM_LOG_NOTICE, __VA_ARGS__)
#define gm_info(...) gm_log(GM_LOG_INFO, __VA_ARGS__)
#define gm_debug(...) gm_log(GM_LOG_DEBUG, __VA_ARGS__)

#endif
