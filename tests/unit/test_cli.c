/*
 * tests/unit/test_cli.c - what the command line shares (agent/cli/cli.h) that runs without an
 * agent: sizes and durations as people read them in the tables (gm_cli_fmt_bytes,
 * gm_cli_fmt_duration), with the unknown ("-") for negative and NaN values.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "agent/cli/cli.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void test_bytes(void)
{
    char b[16];

    GM_CHECK_STREQ(gm_cli_fmt_bytes(0, b, sizeof(b)), "0 B");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(999, b, sizeof(b)), "999 B");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(1000, b, sizeof(b)), "1.00 kB");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(84718532, b, sizeof(b)),
                   "84.7 MB"); /* the 84718532 B */
    GM_CHECK_STREQ(gm_cli_fmt_bytes(3257320, b, sizeof(b)), "3.26 MB");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(1.5e9, b, sizeof(b)), "1.50 GB");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(512e9, b, sizeof(b)), "512 GB");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(-1, b, sizeof(b)), "-");
    GM_CHECK_STREQ(gm_cli_fmt_bytes(NAN, b, sizeof(b)), "-");
}

static void test_duration(void)
{
    char d[16];

    GM_CHECK_STREQ(gm_cli_fmt_duration(0, d, sizeof(d)), "0s");
    GM_CHECK_STREQ(gm_cli_fmt_duration(44.6, d, sizeof(d)), "45s");
    GM_CHECK_STREQ(gm_cli_fmt_duration(750, d, sizeof(d)), "12m30s");
    GM_CHECK_STREQ(gm_cli_fmt_duration(600, d, sizeof(d)), "10m");
    GM_CHECK_STREQ(gm_cli_fmt_duration(5400, d, sizeof(d)), "1h30m");
    GM_CHECK_STREQ(gm_cli_fmt_duration(86400, d, sizeof(d)), "24h"); /* the 86400s */
    GM_CHECK_STREQ(gm_cli_fmt_duration(86399, d, sizeof(d)), "23h59m");
    GM_CHECK_STREQ(gm_cli_fmt_duration(36 * 3600, d, sizeof(d)), "36h");
    GM_CHECK_STREQ(gm_cli_fmt_duration(3 * 86400 + 4 * 3600, d, sizeof(d)), "3d4h");
    GM_CHECK_STREQ(gm_cli_fmt_duration(366 * 86400, d, sizeof(d)), "366d");
    GM_CHECK_STREQ(gm_cli_fmt_duration(-5, d, sizeof(d)), "-");
}

int main(void)
{
    GM_TEST_RUN(test_bytes);
    GM_TEST_RUN(test_duration);
    return gm_test_finish("test_cli");
}
