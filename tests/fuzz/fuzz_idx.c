/*
 * tests/fuzz/fuzz_idx.c - libFuzzer target for IDX dataset files.
 *
 * Even first byte: the rest goes to the pure parsers gm_idx_parse and gm_idx_parse_header, and
 * a success must keep its promises (lengths add up, data inside the input: every data byte is
 * read so ASan sees a lie).  Odd first byte: the rest becomes train-images-idx3-ubyte in a
 * temp directory beside valid labels and test files and goes through gm_dataset_load, which
 * covers the file reader (gzip inflated when the bytes start with 1f 8b, growing buffers,
 * trailing-byte counting).  Everything loaded is freed; log lines go to /dev/null.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "train/data/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static char images[128];

static void put_file(const char *name, const uint8_t *p, size_t n)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL)
        abort();
    if (n > 0 && fwrite(p, 1, n, f) != n)
        abort();
    fclose(f);
}

static void cleanup(void)
{
    static const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char path[128];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* Labels for 2 training images; a valid 1-image 2x2 test set. */
    static const uint8_t labels2[] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 0};
    static const uint8_t labels1[] = {0, 0, 8, 1, 0, 0, 0, 1, 3};
    static const uint8_t test1[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4};
    int fd = open("/dev/null", O_WRONLY);

    (void)argc;
    (void)argv;
    if (fd >= 0)
        gm_log_set_fd(fd);
    snprintf(dir, sizeof(dir), "/tmp/gm_fuzz_idx.XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(images, sizeof(images), "%s/train-images-idx3-ubyte", dir);
    put_file("train-labels-idx1-ubyte", labels2, sizeof(labels2));
    put_file("t10k-images-idx3-ubyte", test1, sizeof(test1));
    put_file("t10k-labels-idx1-ubyte", labels1, sizeof(labels1));
    atexit(cleanup);
    return 0;
}

static void parse(const uint8_t *data, size_t size)
{
    struct gm_idx x, h;
    int err = gm_idx_parse(data, size, &x);
    int herr = gm_idx_parse_header(data, size, &h);

    if (strnlen(x.error, sizeof(x.error)) == sizeof(x.error))
        abort();
    if (err == 0) {
        uint64_t prod = 1;
        volatile uint8_t sink = 0;

        if (herr != 0 || x.data != data + x.header_bytes || x.header_bytes + x.data_bytes != size ||
            x.header_bytes != 4 + 4 * (size_t)x.ndims)
            abort();
        for (int i = 0; i < x.ndims; i++)
            prod *= x.dims[i];
        if (prod != x.data_bytes || x.error[0] != 0)
            abort();
        for (size_t i = 0; i < x.data_bytes; i++)
            sink ^= x.data[i];
        (void)sink;
    } else if (err != GM_ERR_DATA || x.error[0] == 0) {
        abort();
    }
    if (herr == 0 && (h.header_bytes > size || h.data != NULL))
        abort();
}

static void load(const uint8_t *data, size_t size)
{
    struct gm_data_spec spec = {.kind = "idx", .dir = dir};
    struct gm_dataset train, test;
    int err;

    put_file("train-images-idx3-ubyte", data, size);
    err = gm_dataset_load(&spec, &train, &test);
    if (err == 0) {
        size_t sz = gm_dataset_sample_bytes(&train);
        volatile uint8_t sink = 0;

        if (train.n != 2 || train.c != 1 || train.h != 2 || train.w != 2 || test.n != 1 ||
            train.classes != 4)
            abort();
        for (size_t i = 0; i < train.n * sz; i++)
            sink ^= train.images[i];
        (void)sink;
    } else if (err != GM_ERR_DATA && err != -ENOMEM) {
        abort();
    }
    gm_dataset_free(&train);
    gm_dataset_free(&test);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        load(data + 1, size - 1);
    else
        parse(data + 1, size - 1);
    return 0;
}
