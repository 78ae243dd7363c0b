/* train/tbevents.c - see tbevents.h: TFRecord framing and a hand protobuf encoder. */
#include "train/tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/log.h"
#include "train/trainer.h"

#define EVENT_MAX (GM_TB_TAG_MAX + 64) /* an encoded scalar event fits in this */

struct gm_tb_writer {
    FILE *f; /* owned */
    int err; /* first write error, sticky */
    char path[PATH_MAX];
};

/* --- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ------------------------------- */

static uint32_t crc_byte(uint32_t c)
{
    for (int k = 0; k < 8; k++)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    return c;
}

uint32_t gm_tb_crc32c(const void *buf, size_t len)
{
    /* The table is built on the stack per call: event records are short and rare (a few
     * per step), and a file-scope cache would be mutable global state. */
    uint32_t table[256], c = 0xFFFFFFFFu;
    const uint8_t *p = buf;

    for (uint32_t i = 0; i < 256; i++)
        table[i] = crc_byte(i);
    for (size_t i = 0; i < len; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t gm_tb_mask_crc(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

size_t gm_tb_frame(uint8_t *buf, size_t cap, const uint8_t *data, size_t len)
{
    if (cap < len + 16)
        return 0;
    gm_put_le64(buf, (uint64_t)len);
    gm_put_le32(buf + 8, gm_tb_mask_crc(gm_tb_crc32c(buf, 8)));
    memcpy(buf + 12, data, len);
    gm_put_le32(buf + 12 + len, gm_tb_mask_crc(gm_tb_crc32c(data, len)));
    return len + 16;
}

/* --- protobuf (wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) ---------- */

struct pb {
    uint8_t *p;
    size_t len, cap;
    int overflow;
};

static void pb_byte(struct pb *b, uint8_t v)
{
    if (b->len >= b->cap) {
        b->overflow = 1;
        return;
    }
    b->p[b->len++] = v;
}

static void pb_varint(struct pb *b, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(b, (uint8_t)v);
}

static void pb_key(struct pb *b, unsigned field, unsigned wire)
{
    pb_varint(b, (uint64_t)field << 3 | wire);
}

static void pb_bytes(struct pb *b, unsigned field, const void *s, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    for (size_t i = 0; i < n; i++)
        pb_byte(b, ((const uint8_t *)s)[i]);
}

static void pb_fixed(struct pb *b, unsigned field, uint64_t bits, int bytes)
{
    pb_key(b, field, bytes == 8 ? 1 : 5);
    for (int i = 0; i < bytes; i++)
        pb_byte(b, (uint8_t)(bits >> (8 * i)));
}

size_t gm_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                          const char *file_version, const char *tag, float value)
{
    struct pb b = {.p = buf, .cap = cap};
    uint64_t wbits;
    uint32_t vbits;

    memcpy(&wbits, &wall_time, sizeof(wbits));
    pb_fixed(&b, 1, wbits, 8); /* wall_time */
    if (step != 0) {           /* int64: a negative step is ten bytes of two's complement */
        pb_key(&b, 2, 0);
        pb_varint(&b, (uint64_t)step);
    }
    if (file_version != NULL) {
        pb_bytes(&b, 3, file_version, strlen(file_version));
    } else {
        /* summary (5) { value (1) { tag (1), simple_value (2) } }: sizes known up front */
        size_t tlen = strlen(tag);
        size_t vlen = 1 + (tlen < 128 ? 1 : 2) + tlen + 1 + 4;
        size_t slen = 1 + (vlen < 128 ? 1 : 2) + vlen;

        memcpy(&vbits, &value, sizeof(vbits));
        pb_key(&b, 5, 2);
        pb_varint(&b, slen);
        pb_key(&b, 1, 2);
        pb_varint(&b, vlen);
        pb_bytes(&b, 1, tag, tlen);
        pb_fixed(&b, 2, vbits, 4);
    }
    return b.overflow ? 0 : b.len;
}

/* --- the writer ---------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -errno;
        tmp[i] = dir[i];
    }
    return 0;
}

static int write_record(struct gm_tb_writer *w, const uint8_t *data, size_t len)
{
    uint8_t rec[EVENT_MAX + 16];
    size_t n = gm_tb_frame(rec, sizeof(rec), data, len);

    if (w->err != 0)
        return w->err;
    if (n == 0 || fwrite(rec, 1, n, w->f) != n) {
        w->err = n == 0 ? -EINVAL : -EIO;
        gm_err("event=tensorboard-write file=%s err=%d", w->path, w->err);
    }
    return w->err;
}

int gm_tb_open(const char *dir, struct gm_tb_writer **out)
{
    struct gm_tb_writer *w;
    char host[256];
    uint8_t ev[EVENT_MAX];
    size_t len;
    double t = now_s();
    int fd, err, n;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    for (char *p = host; *p != '\0'; p++)
        if (*p == '/')
            *p = '_';
    n = snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)t,
                 host, (long)getpid());
    err = n < 0 || (size_t)n >= sizeof(w->path) ? -ENAMETOOLONG : mkdir_p(dir);
    if (err == 0) {
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (w->f == NULL) {
            err = -errno;
            if (fd >= 0)
                close(fd);
        }
    }
    if (err != 0) {
        gm_err("event=tensorboard-open dir=%s err=%d msg=\"%s\"", dir, err, gm_strerror(err));
        free(w);
        return err;
    }
    len = gm_tb_encode_event(ev, sizeof(ev), t, 0, "brain.Event:2", NULL, 0);
    err = write_record(w, ev, len);
    if (err == 0)
        err = gm_tb_flush(w);
    if (err != 0) {
        (void)gm_tb_close(w);
        return err;
    }
    *out = w;
    return 0;
}

int gm_tb_scalar(struct gm_tb_writer *w, const char *tag, int64_t step, double wall_time,
                 float value)
{
    uint8_t ev[EVENT_MAX];
    size_t len, tlen = tag != NULL ? strlen(tag) : 0;

    if (tlen == 0 || tlen > GM_TB_TAG_MAX)
        return -EINVAL;
    len = gm_tb_encode_event(ev, sizeof(ev), wall_time > 0 ? wall_time : now_s(), step, NULL, tag,
                             value);
    return write_record(w, ev, len);
}

int gm_tb_flush(struct gm_tb_writer *w)
{
    if (w->err == 0 && fflush(w->f) != 0) {
        w->err = -errno;
        gm_err("event=tensorboard-write file=%s err=%d", w->path, w->err);
    }
    return w->err;
}

int gm_tb_close(struct gm_tb_writer *w)
{
    int err;

    if (w == NULL)
        return 0;
    err = gm_tb_flush(w);
    if (fclose(w->f) != 0 && err == 0)
        err = -errno;
    free(w);
    return err;
}

const char *gm_tb_path(const struct gm_tb_writer *w)
{
    return w->path;
}

/* --- a training run's scalars --------------------------------------------------------------- */

/* Errors stay in w->err (logged once, returned by gm_tb_close): a run is not stopped for
 * its event file. */
static void ignore(int err)
{
    (void)err;
}

static void scalar(struct gm_tb_writer *w, const char *tag, long step, double v)
{
    if (w->err == 0 && isfinite(v))
        ignore(gm_tb_scalar(w, tag, step, 0, (float)v));
}

void gm_tb_on_step(struct gm_tb_writer *w, const struct gm_train_step_info *si)
{
    scalar(w, "train/loss", si->step, si->loss);
    scalar(w, "train/learning_rate", si->step, si->lr);
    scalar(w, "train/samples_per_s", si->step, si->samples_per_s);
    scalar(w, "step_time/compute_s", si->step, si->compute_s);
    scalar(w, "step_time/collective_s", si->step, si->collective_s);
    scalar(w, "step_time/optimizer_s", si->step, si->optimizer_s);
    if (si->samples > 0) /* this rank's part of the global batch ([job] shares) */
        scalar(w, "shares/samples", si->step, si->samples);
}

void gm_tb_on_eval(struct gm_tb_writer *w, const struct gm_train_eval_info *ei)
{
    scalar(w, "test/accuracy_percent", ei->step, ei->test_accuracy);
    scalar(w, "test/loss", ei->step, ei->test_loss);
    scalar(w, "train/epoch_loss", ei->step, ei->epoch_loss);
    if (ei->epoch_samples_per_s > 0)
        scalar(w, "train/epoch_samples_per_s", ei->step, ei->epoch_samples_per_s);
    ignore(gm_tb_flush(w)); /* TensorBoard shows each epoch as it ends */
}

static void on_step(void *ctx, const struct gm_train_step_info *si)
{
    gm_tb_on_step(ctx, si);
}

static void on_eval(void *ctx, const struct gm_train_eval_info *ei)
{
    gm_tb_on_eval(ctx, ei);
}

void gm_tb_train_hooks(struct gm_tb_writer *w, struct gm_train_hooks *hooks)
{
    hooks->on_step = on_step;
    hooks->on_eval = on_eval;
    hooks->ctx = w;
}

int gm_tb_write_summary(struct gm_tb_writer *w, const struct gm_train_summary *sum)
{
    scalar(w, "summary/test_accuracy_percent", sum->steps, sum->test_accuracy);
    scalar(w, "summary/test_loss", sum->steps, sum->test_loss);
    scalar(w, "summary/train_loss", sum->steps, sum->train_loss);
    scalar(w, "summary/samples_per_s", sum->steps, sum->samples_per_s);
    scalar(w, "summary/wall_s", sum->steps, sum->wall_s);
    scalar(w, "summary/bytes_sent", sum->steps, (double)sum->bytes_sent);
    return gm_tb_flush(w);
}
