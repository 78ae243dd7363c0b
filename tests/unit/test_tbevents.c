/*
 * tests/unit/test_tbevents.c - the TensorBoard event writer: CRC-32C against RFC 3720's
 * vectors, the protobuf bytes of a scalar event against a hand-assembled reference, the
 * TFRecord framing of a written file read back record by record, and the error contracts.
 * (tests/integration/tensorboard_events.sh reads real runs with the tensorboard package.)
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/test.h"
#include "train/tbevents.h"

GM_TEST_DEFINE_STATE;

static char tmpdir[256];

static void test_crc32c_vectors(void)
{
    uint8_t buf[32];

    GM_CHECK_EQ(gm_tb_crc32c("123456789", 9), 0xE3069283u);
    memset(buf, 0, sizeof(buf));
    GM_CHECK_EQ(gm_tb_crc32c(buf, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    memset(buf, 0xFF, sizeof(buf));
    GM_CHECK_EQ(gm_tb_crc32c(buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    GM_CHECK_EQ(gm_tb_crc32c(buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    GM_CHECK_EQ(gm_tb_crc32c(buf, 32), 0x113FDB5Cu);
    GM_CHECK_EQ(gm_tb_crc32c("", 0), 0u);
}

static uint32_t unmask(uint32_t m)
{
    uint32_t r = m - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}

static void test_mask(void)
{
    uint32_t v[] = {0, 1, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u};

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        GM_CHECK_EQ(unmask(gm_tb_mask_crc(v[i])), v[i]);
    /* ((c >> 15) | (c << 17)) + 0xa282ead8 by hand for c = 1 */
    GM_CHECK_EQ(gm_tb_mask_crc(1), (uint32_t)((1u << 17) + 0xa282ead8u));
}

static void test_encode_scalar(void)
{
    /* Event{wall_time=1.5, step=3, summary{value{tag="loss", simple_value=0.25}}} */
    static const uint8_t want[] = {
        0x09, 0,    0,    0,    0,    0,   0, 0xF8, 0x3F, /* 1: fixed64 1.5 */
        0x10, 0x03,                                       /* 2: varint 3 */
        0x2A, 0x0D,                                       /* 5: Summary, 13 bytes */
        0x0A, 0x0B,                                       /*   1: Value, 11 bytes */
        0x0A, 0x04, 'l',  'o',  's',  's',                /*     1: tag */
        0x15, 0x00, 0x00, 0x80, 0x3E,                     /*     2: fixed32 0.25f */
    };
    uint8_t buf[128];
    size_t n = gm_tb_encode_event(buf, sizeof(buf), 1.5, 3, NULL, "loss", 0.25f);

    GM_CHECK_EQ(n, sizeof(want));
    GM_CHECK(n == sizeof(want) && memcmp(buf, want, n) == 0);
    GM_CHECK_EQ(gm_tb_encode_event(buf, 10, 1.5, 3, NULL, "loss", 0.25f), 0); /* too small */
}

static void test_encode_version_and_big_step(void)
{
    static const uint8_t want[] = {0x09, 0,   0,   0,   0,   0,   0,   0,   0,   0x1A, 0x0D, 'b',
                                   'r',  'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't',  ':',  '2'};
    uint8_t buf[512];
    char tag[200];
    size_t n = gm_tb_encode_event(buf, sizeof(buf), 0.0, 0, "brain.Event:2", NULL, 0);

    GM_CHECK_EQ(n, sizeof(want));
    GM_CHECK(n == sizeof(want) && memcmp(buf, want, n) == 0);
    /* step 300 = varint AC 02; a 200-byte tag needs two-byte lengths everywhere */
    memset(tag, 'a', sizeof(tag) - 1);
    tag[sizeof(tag) - 1] = '\0';
    n = gm_tb_encode_event(buf, sizeof(buf), 0.0, 300, NULL, tag, 1.0f);
    GM_CHECK_EQ(n, 9 + 3 + 3 + 3 + 3 + 199 + 5);
    GM_CHECK(buf[9] == 0x10 && buf[10] == 0xAC && buf[11] == 0x02);
    /* Summary length = 3 + Value length (3 + 199 + 5 = 207 = CF 01) */
    GM_CHECK(buf[12] == 0x2A && buf[13] == (uint8_t)(0x80 | (210 & 0x7F)) && buf[14] == 210 >> 7);
    GM_CHECK(buf[15] == 0x0A && buf[16] == 0xCF && buf[17] == 0x01);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_write_and_read_back(void)
{
    char dir[512];
    struct gm_tb_writer *w = NULL;
    uint8_t *data = NULL;
    size_t len = 0, off = 0;
    int records = 0, bad = 0;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/run/a", tmpdir); /* two levels made */
    GM_CHECK_OK(gm_tb_open(dir, &w));
    if (w == NULL)
        return;
    GM_CHECK(strstr(gm_tb_path(w), "/run/a/events.out.tfevents.") != NULL);
    for (int s = 1; s <= 10; s++)
        GM_CHECK_OK(gm_tb_scalar(w, "train/loss", s, 0, 1.0f / (float)s));
    GM_CHECK_ERR(gm_tb_scalar(w, "", 1, 0, 1.0f), -EINVAL);
    f = fopen(gm_tb_path(w), "rb");
    GM_CHECK_OK(gm_tb_close(w));
    GM_CHECK(f != NULL);
    if (f == NULL)
        return;
    data = malloc(1 << 16);
    len = fread(data, 1, 1 << 16, f);
    fclose(f);
    while (off + 12 <= len) {
        uint64_t n = le64(data + off);
        if (le32(data + off + 8) != gm_tb_mask_crc(gm_tb_crc32c(data + off, 8)) ||
            off + 16 + n > len ||
            le32(data + off + 12 + n) != gm_tb_mask_crc(gm_tb_crc32c(data + off + 12, n)))
            bad++;
        off += 16 + n;
        records++;
    }
    GM_CHECK_EQ(off, len);
    GM_CHECK_EQ(records, 11); /* the version record and ten scalars */
    GM_CHECK_EQ(bad, 0);
    free(data);
}

static void test_open_errors(void)
{
    char path[512];
    struct gm_tb_writer *w = (struct gm_tb_writer *)1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/file", tmpdir);
    f = fopen(path, "w");
    GM_CHECK(f != NULL);
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof(path), "%s/file/sub", tmpdir);
    GM_CHECK_ERR(gm_tb_open(path, &w), -ENOTDIR);
    GM_CHECK(w == NULL);
    GM_CHECK_EQ(gm_tb_close(NULL), 0);
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    char cmd[600];
    int rc;

    snprintf(tmpdir, sizeof(tmpdir), "%s/gm-test-tb-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    GM_TEST_RUN(test_crc32c_vectors);
    GM_TEST_RUN(test_mask);
    GM_TEST_RUN(test_encode_scalar);
    GM_TEST_RUN(test_encode_version_and_big_step);
    GM_TEST_RUN(test_write_and_read_back);
    GM_TEST_RUN(test_open_errors);
    rc = gm_test_finish("test_tbevents");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
