/*
 * tests/fuzz/fuzz_cifar.c - libFuzzer target for the CIFAR-10 binary reader (through
 * gm_dataset_load, kind "cifar10").
 *
 * The first byte picks which file the rest becomes, beside valid one-record versions of the
 * others in a temp directory: 0 data_batch_1.bin, 1 test_batch.bin, 2 batches.meta.txt,
 * 3 data_batch_3.bin gzip-compressed as-is (the bytes are written to data_batch_3.bin and the
 * reader inflates them when they start with 1f 8b).  Any bytes must give 0, GM_ERR_DATA or
 * -ENOMEM; a success must hold what the reader promises (32x32x3, labels < 10, classes 10,
 * sample counts = records), every image byte is read so ASan sees a lie.  Log lines go to
 * /dev/null.  Seeds: tests/fuzz/corpus/cifar/.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "train/data/data.h"

#define RECORD 3073

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static uint8_t valid[RECORD];
static const char *const names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                    "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin",
                                    "batches.meta.txt"};

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

static void put_valid(void)
{
    static const char meta[] = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\n"
                               "truck\n";

    for (size_t i = 0; i < 6; i++)
        put_file(names[i], valid, sizeof(valid));
    put_file("batches.meta.txt", (const uint8_t *)meta, sizeof(meta) - 1);
}

static void cleanup(void)
{
    char path[128];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    int fd = open("/dev/null", O_WRONLY);

    (void)argc;
    (void)argv;
    if (fd >= 0)
        gm_log_set_fd(fd);
    snprintf(dir, sizeof(dir), "/tmp/gm_fuzz_cifar.XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    valid[0] = 7; /* label */
    for (size_t i = 1; i < RECORD; i++)
        valid[i] = (uint8_t)(i * 31);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const target[] = {"data_batch_1.bin", "test_batch.bin", "batches.meta.txt",
                                         "data_batch_3.bin"};
    struct gm_data_spec spec = {.kind = "cifar10", .dir = dir};
    struct gm_dataset train, test;
    int err;

    if (size == 0)
        return 0;
    put_valid();
    put_file(target[data[0] % 4], data + 1, size - 1);
    err = gm_dataset_load(&spec, &train, &test);
    if (err == 0) {
        size_t sz = gm_dataset_sample_bytes(&train);
        volatile uint8_t sink = 0;

        if (train.c != 3 || train.h != 32 || train.w != 32 || test.c != 3 || train.classes != 10 ||
            train.n < 5 || test.n < 1 || sz != RECORD - 1)
            abort();
        for (size_t i = 0; i < train.n; i++) {
            if (train.labels[i] >= 10)
                abort();
            sink ^= train.images[i * sz] ^ train.images[i * sz + sz - 1];
        }
        for (size_t i = 0; i < test.n * sz; i++)
            sink ^= test.images[i];
        (void)sink;
    } else if (err != GM_ERR_DATA && err != -ENOMEM) {
        abort();
    }
    gm_dataset_free(&train);
    gm_dataset_free(&test);
    return 0;
}
