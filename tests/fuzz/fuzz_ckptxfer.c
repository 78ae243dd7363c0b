/*
 * tests/fuzz/fuzz_ckptxfer.c - libFuzzer target for the checkpoint room's decoders
 * (agent/jobs/ckptxfer.h).
 *
 * Byte 0 picks the mode:
 *   0: the rest is a CKPT_DATA header: what decodes holds only what ckptxfer.h promises (a
 *      16-hex-digit key, 64 hex digits, bytes <= GM_CKPTX_FILE_MAX, keep >= 1), takes at most
 *      the input, and encodes and decodes again to the same fields;
 *   1: the rest is a CKPT_ACK payload: likewise (a printable error, empty when ok);
 *   else: the rest is a stream of frames from peers into a gm_ckptx whose state directory is a
 *      temp dir (records: flags byte (bit 0 MORE, bit 1 CKPT_ACK instead of CKPT_DATA, bits
 *      2-3 the peer, bit 4 the link goes down after it), request id byte, length u16 LE,
 *      payload); a valid header is built from the first record's bytes when its bit 5 is set,
 *      so the writing, the length and hash checks and the commit are reached.  Whatever the
 *      frames, the result is 0, GM_ERR_PROTO or -ENOMEM; afterwards every file under a final
 *      name has a .sha256 that matches it (nothing partial is ever committed), and freeing the
 *      room leaves no temp file.
 * Error lines are suppressed.  Seeds: tests/fuzz/corpus/ckptxfer/.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/jobs/ckptxfer.h"
#include "agent/net/proto.h"
#include "common/file.h"
#include "common/log.h"
#include "train/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char statedir[256];

static struct gm_link *no_link(void *agent, const char *node)
{
    (void)agent;
    (void)node;
    return NULL;
}

static void check_hdr(const uint8_t *p, size_t n)
{
    struct gm_ckptx_hdr h, h2;
    uint8_t buf[4 + GM_CKPTX_HDR_MAX];
    size_t used = 0, len = 0, used2 = 0;
    int err = gm_ckptx_hdr_decode(p, n, &h, &used);

    if (err != 0) {
        if (err != GM_ERR_PROTO || used != 0 || h.key[0] != '\0')
            abort();
        return;
    }
    if (used > n || !gm_proto_is_hex(h.key, 16) || !gm_proto_is_hex(h.sha256, 64) ||
        h.bytes > GM_CKPTX_FILE_MAX || h.keep < 1 || h.step < 0)
        abort();
    if (gm_ckptx_hdr_encode(&h, buf, sizeof(buf), &len) != 0 ||
        gm_ckptx_hdr_decode(buf, len, &h2, &used2) != 0 || used2 != len ||
        memcmp(&h, &h2, sizeof(h)) != 0)
        abort();
}

static void check_ack(const uint8_t *p, size_t n)
{
    struct gm_ckptx_ack a, a2;
    char *json = NULL;
    size_t len = 0;
    int err = gm_ckptx_ack_decode(p, n, &a);

    if (err != 0) {
        if (err != GM_ERR_PROTO || a.key[0] != '\0')
            abort();
        return;
    }
    if (!gm_proto_is_hex(a.key, 16) || !gm_proto_is_hex(a.sha256, 64) || a.step < 0 ||
        !gm_proto_printable(a.error) || (a.ok && a.error[0] != '\0'))
        abort();
    if (gm_ckptx_ack_encode(&a, &json, &len) != 0 ||
        gm_ckptx_ack_decode((const uint8_t *)json, len, &a2) != 0 ||
        memcmp(&a, &a2, sizeof(a)) != 0)
        abort();
    free(json);
}

/* Every file under a final name is committed and matches its .sha256; no temp file is left;
 * then the tree is removed. */
static void check_and_clean(void)
{
    char ck[512], sub[1024], p[1400];
    DIR *d, *e;
    struct dirent *de, *fe;

    snprintf(ck, sizeof(ck), "%s/checkpoints", statedir);
    d = opendir(ck);
    while (d != NULL && (de = readdir(d)) != NULL) {
        struct gm_ckpt_entry *v = NULL;
        size_t nv = 0;

        if (de->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", ck, de->d_name);
        if (gm_ckpt_dir_list(sub, &v, &nv) != 0)
            abort();
        for (size_t i = 0; i < nv; i++) {
            char *buf = NULL, hex[65];
            size_t len = 0;
            if (v[i].sha256[0] == '\0' || gm_file_read(v[i].path, 1 << 26, &buf, &len) != 0)
                abort(); /* a final name without its hash: a partial commit */
            gm_ckpt_sha256_hex(buf, len, hex);
            free(buf);
            if (strcmp(hex, v[i].sha256) != 0)
                abort();
        }
        free(v);
        e = opendir(sub);
        while (e != NULL && (fe = readdir(e)) != NULL) {
            if (fe->d_name[0] == '.')
                continue;
            if (strstr(fe->d_name, ".tmp.") != NULL)
                abort(); /* a transfer's temp file outlived the room */
            snprintf(p, sizeof(p), "%s/%s", sub, fe->d_name);
            unlink(p);
        }
        if (e != NULL)
            closedir(e);
        rmdir(sub);
    }
    if (d != NULL)
        closedir(d);
}

static void run_frames(const uint8_t *p, size_t n)
{
    static const char *const nodes[] = {"alpha", "beta", "gamma", "delta"};
    struct gm_ckptx_env env = {.node = "self", .state_dir = statedir, .link_to = no_link};
    struct gm_ckptx *x = NULL;
    bool first = true;

    if (gm_ckptx_new(&env, &x) != 0)
        return;
    while (n >= 4) {
        uint8_t flags = p[0], req = p[1];
        size_t len = (size_t)p[2] | (size_t)p[3] << 8;
        struct gm_frame_hdr h = {.type = (flags & 2) ? GM_MSG_CKPT_ACK : GM_MSG_CKPT_DATA,
                                 .flags = (flags & 1) ? GM_FRAME_F_MORE : 0,
                                 .req = req};
        uint8_t *frame;
        size_t flen;
        int err;

        p += 4;
        n -= 4;
        if (len > n)
            len = n;
        frame = malloc(len + 4 + GM_CKPTX_HDR_MAX + 1);
        if (frame == NULL)
            break;
        flen = len;
        memcpy(frame, p, len);
        if (first && (flags & 0x20) && h.type == GM_MSG_CKPT_DATA) {
            /* a valid header announcing what follows: the file is this payload and the
             * rest of the input's DATA payloads, or not (the fuzzer picks the sha and bytes) */
            struct gm_ckptx_hdr hd = {.step = req, .keep = 1 + (flags >> 6), .bytes = len};
            size_t hl = 0;
            char hex[65];
            gm_ckpt_sha256_hex(p, len, hex);
            snprintf(hd.key, sizeof(hd.key), "0123456789abcdef");
            memcpy(hd.sha256, hex, sizeof(hd.sha256));
            if (gm_ckptx_hdr_encode(&hd, frame, 4 + GM_CKPTX_HDR_MAX, &hl) == 0) {
                memcpy(frame + hl, p, len);
                flen = hl + len;
            }
        }
        first = false;
        h.len = (uint32_t)flen;
        err = gm_ckptx_on_frame(x, nodes[(flags >> 2) & 3], &h, frame);
        free(frame);
        if (err != 0 && err != GM_ERR_PROTO && err != -ENOMEM)
            abort();
        if (err != 0 || (flags & 0x10))
            gm_ckptx_link_down(x, nodes[(flags >> 2) & 3]); /* a refused frame closes the link */
        p += len;
        n -= len;
    }
    gm_ckptx_free(x);
    check_and_clean();
}

static void remove_statedir(void)
{
    char ck[512];

    check_and_clean();
    snprintf(ck, sizeof(ck), "%s/checkpoints", statedir);
    rmdir(ck);
    rmdir(statedir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    if (statedir[0] == '\0') {
        snprintf(statedir, sizeof(statedir), "/tmp/gm-fuzz-ckptx-%ld", (long)getpid());
        if (mkdir(statedir, 0700) != 0 && errno != EEXIST)
            abort();
        atexit(remove_statedir);
    }
    if (size < 1)
        return 0;
    if (data[0] == 0)
        check_hdr(data + 1, size - 1);
    else if (data[0] == 1)
        check_ack(data + 1, size - 1);
    else
        run_frames(data + 1, size - 1);
    return 0;
}
