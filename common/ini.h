/*
 * common/ini.h - the table-driven INI reader of the agent's config (agent/service/config.c)
 * and the job file (train/job.c), over inih (libinih-dev).
 *
 * What it adds to inih: each key's line number (inih's handler is not told it), a length
 * check instead of inih's silent split of a line longer than its buffer, section headers
 * checked as they appear (so an unknown empty section is caught too), every key looked up
 * in one table {section, key, type, offset, ...} with the line that set it (so a key set
 * twice is refused, and whole-file checks can name a line), and a stop at the first problem.
 * The first problem is kept as one sentence and logged once, at the end, as
 * "ORIGIN:LINE: problem" (or "ORIGIN: problem" where no line applies).
 *
 * What stays with the caller: the key table and what each type means (spec->set stores a
 * value and checks it), the checks across keys (spec->whole), and the words of the four
 * messages about what the table does not hold (a key outside any section, an unknown
 * section, an unknown key, a key set twice): the two files word them differently.
 *
 * Per line, before inih sees it: a "\r" before the "\n" is dropped; a NUL byte or a line
 * longer than spec->line_max (or inih's buffer less "\r\n" and NUL) is a problem; leading
 * spaces and tabs are dropped (so inih never reads an indented line as the continuation of
 * the previous value), and with GM_INI_ALL_BLANKS also a UTF-8 BOM on line 1 and a leading
 * \v, \f or \r.  No global state; one parse at a time per struct gm_ini.
 */
#ifndef GM_COMMON_INI_H
#define GM_COMMON_INI_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

/* One key of a table.  The reader matches section and key and hands the entry to spec->set;
 * the other fields mean what the caller's set makes of them. */
struct gm_ini_key {
    const char *section;
    const char *key;
    int type;                 /* the caller's enum: what the value is */
    size_t off;               /* offsetof(the caller's struct, field) */
    size_t size;              /* sizeof the field (string buffers: their capacity) */
    long long imin, imax;     /* integer types: the range */
    double fmin, fmax;        /* number types: the range */
    unsigned flags;           /* the caller's bits (required, open ends...) */
    const char *const *names; /* enum types: value names in enum order, NULL-terminated */
    const char *what;         /* enum types: what a value names, for messages */
};

struct gm_ini;

enum {
    /* The whole text must be UTF-8 without a NUL byte; checked before the first line, the
     * problem is "NUL byte in the text" or "text is not valid UTF-8" on its line. */
    GM_INI_UTF8 = 1u << 0,
    /* The reader drops a BOM on line 1 and a leading \v, \f or \r as well, so it checks
     * every section header inih will see, and a key under a section it did not check is
     * refused as an unknown section (job files).  Without it (the agent's config, as it always
     * was), such a line reaches inih as it is: inih drops the BOM itself, reads a line indented
     * by \v, \f or \r as the continuation of the previous value, and a header behind them is
     * not checked. */
    GM_INI_ALL_BLANKS = 1u << 1,
};

struct gm_ini_spec {
    const struct gm_ini_key *keys; /* nkeys entries */
    size_t nkeys;
    const char *const *sections; /* the known section names, nsections of them */
    size_t nsections;
    size_t line_max; /* bytes a line at most, "\r\n" not counted */
    unsigned flags;  /* GM_INI_* */
    /* Checks one value of k and stores it into ini->dest + k->off, or records a problem with
     * gm_ini_fail.  Called once per key: a second setting is refused before. */
    void (*set)(struct gm_ini *ini, const struct gm_ini_key *k, const char *value);
    /* After the last line when no problem was found: checks across keys, defaults that
     * depend on others.  May be NULL. */
    void (*whole)(struct gm_ini *ini);
    /* The words for what the table does not hold; each records one problem (gm_ini_fail on
     * ini->line).  name is not NUL-terminated (len bytes); key and section are. */
    void (*outside)(struct gm_ini *ini, const char *key);
    void (*unknown_section)(struct gm_ini *ini, const char *name, size_t len);
    void (*unknown_key)(struct gm_ini *ini, const char *section, const char *key);
    void (*twice)(struct gm_ini *ini, const struct gm_ini_key *k, int first_line);
};

/* One parse, as the hooks see it.  Read dest, line and seen; write through gm_ini_fail. */
struct gm_ini {
    const struct gm_ini_spec *spec; /* borrowed */
    void *dest;                     /* borrowed: the struct the keys' offsets point into */
    const char *text;               /* borrowed, len bytes */
    size_t len, pos;
    int line;     /* lines handed to inih so far: the current line's number */
    int *seen;    /* owned, spec->nkeys: the line that set each key, 0 if none */
    bool failed;  /* msg holds the first problem */
    int err_line; /* its line, 0 if none */
    char msg[1024];
};

/* Parses len bytes of text into dest (whose defaults the caller has set).  0; GM_ERR_CONFIG
 * after logging the first problem as "origin:LINE: problem"; -ENOMEM (not logged). */
int gm_ini_parse(const struct gm_ini_spec *spec, const char *text, size_t len, const char *origin,
                 void *dest) GM_MUST_CHECK;

/* Records a problem on line (0: none) unless one was recorded before: later ones are
 * consequences or noise. */
__attribute__((format(printf, 3, 4))) void gm_ini_fail(struct gm_ini *ini, int line,
                                                       const char *fmt, ...);

/* The line that set [section] key, 0 if none.  The key must be in the table. */
int gm_ini_line_of(const struct gm_ini *ini, const char *section, const char *key);

/* Copies s into dst (n bytes, n > 0) for a message, control bytes shown as '?' so a value
 * cannot forge log lines; truncated to n - 1 bytes. */
const char *gm_ini_printable(char *dst, size_t n, const char *s);

#endif
