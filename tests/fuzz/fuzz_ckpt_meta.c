/*
 * tests/fuzz/fuzz_ckpt_meta.c - libFuzzer target for the checkpoint parsers of
 * train/ckpt/ckpt.h that sit on top of the safetensors reader.
 *
 * Byte 0 picks the mode:
 *   even: the rest is the JSON of a checkpoint's __metadata__ object; it is wrapped into a
 *         safetensors file with one F32 tensor ({"__metadata__": REST, "w": ...}) and, if the
 *         safetensors reader accepts it, gm_ckpt_info_parse runs on it;
 *   odd:  the rest is a .sha256 file for "step-0000000001.safetensors"
 *         (gm_ckpt_sha_line_parse).
 * Any bytes must give 0 or GM_ERR_FORMAT (-ENOMEM from the reader), never a crash; what parses
 * holds only what ckpt.h promises (format GM_CKPT_FORMAT, a 64-hex-digit job hash, strings
 * without control bytes and NUL-terminated inside their buffers, step <= total_steps, a global
 * batch >= 1; a hash line's hex is 64 lower-case hex digits).  Error lines are suppressed.
 * Seeds: tests/fuzz/corpus/ckpt_meta/.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);

    if (n >= cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();
}

static void fuzz_meta(const uint8_t *data, size_t size)
{
    static const char pre[] = "{\"__metadata__\":";
    static const char post[] = ",\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t hlen = sizeof(pre) - 1 + size + sizeof(post) - 1;
    uint8_t *buf = malloc(8 + hlen + 4);
    struct gm_st_file f;
    struct gm_ckpt_info info;
    int err;

    if (buf == NULL)
        return;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, pre, sizeof(pre) - 1);
    memcpy(buf + 8 + sizeof(pre) - 1, data, size);
    memcpy(buf + 8 + sizeof(pre) - 1 + size, post, sizeof(post) - 1);
    memset(buf + 8 + hlen, 0, 4);
    err = gm_safetensors_parse(buf, 8 + hlen + 4, &f);
    if (err != 0) {
        if (err != GM_ERR_FORMAT && err != -ENOMEM)
            abort();
        free(buf);
        return;
    }
    err = gm_ckpt_info_parse(&f, "fuzz", &info);
    if (err != 0 && err != GM_ERR_FORMAT)
        abort();
    if (err == 0) {
        if (info.format != GM_CKPT_FORMAT || strlen(info.job_hash) != 64 || info.global_batch < 1 ||
            info.step > info.total_steps || info.step < 0 || info.epoch < 0 ||
            info.data_offset < 0 || info.optim_step < 0)
            abort();
        for (int i = 0; i < 64; i++)
            if (strchr("0123456789abcdef", info.job_hash[i]) == NULL)
                abort();
        check_str(info.job_name, sizeof(info.job_name));
        check_str(info.model, sizeof(info.model));
        check_str(info.optim, sizeof(info.optim));
        check_str(info.codec, sizeof(info.codec));
    }
    gm_safetensors_free(&f);
    free(buf);
}

static void fuzz_sha_line(const uint8_t *data, size_t size)
{
    char hex[65];
    char *copy = malloc(size + 1);
    int err;

    if (copy == NULL)
        return;
    memcpy(copy, data, size);
    err = gm_ckpt_sha_line_parse(copy, size, "step-0000000001.safetensors", hex);
    if (err != 0 && err != GM_ERR_FORMAT)
        abort();
    if (err == 0) {
        if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64 ||
            memcmp(copy, hex, 64) != 0)
            abort();
    } else if (hex[0] != '\0') {
        abort();
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        fuzz_meta(data + 1, size - 1);
    else
        fuzz_sha_line(data + 1, size - 1);
    return 0;
}
