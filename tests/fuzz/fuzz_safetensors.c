/*
 * tests/fuzz/fuzz_safetensors.c - libFuzzer target for the safetensors reader
 * (gm_safetensors_parse on the whole input as a file).
 *
 * Any bytes must give 0, GM_ERR_FORMAT or -ENOMEM, never a crash or an out-of-bounds read;
 * a file that parses is walked completely: every tensor converted to float (reads all its
 * bytes), every name and metadata pair looked up again.  Error lines are suppressed.
 * Seeds: tests/fuzz/corpus/safetensors/.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "train/ckpt/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gm_st_file f;
    size_t total = 0;
    int err;

    gm_log_set_level((enum gm_log_level)(GM_LOG_ERR - 1));
    err = gm_safetensors_parse(data, size, &f);
    if (err != 0) {
        if (err != GM_ERR_FORMAT && err != -ENOMEM)
            abort();
        if (f.tensors != NULL || f.strtab != NULL)
            abort();
        return 0;
    }
    for (size_t i = 0; i < f.n_tensors; i++) {
        const struct gm_st_entry *e = &f.tensors[i];
        float *v;

        if (gm_safetensors_find(&f, e->name) != e || e->data < data ||
            e->data + e->nbytes > data + size)
            abort();
        total += e->nbytes;
        v = malloc(e->numel > 0 ? (size_t)e->numel * sizeof(float) : 1);
        if (v == NULL)
            continue;
        if (gm_safetensors_to_f32(e, v, (size_t)e->numel) != 0)
            abort();
        free(v);
    }
    for (size_t i = 0; i < f.n_meta; i++)
        if (gm_safetensors_meta(&f, f.meta[i].key) != f.meta[i].value)
            abort();
    /* the tensors tile the data section, so their sizes add up to it */
    {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | data[i];
        if (total != size - 8 - hlen)
            abort();
    }
    gm_safetensors_free(&f);
    return 0;
}
