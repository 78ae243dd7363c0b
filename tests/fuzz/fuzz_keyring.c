/*
 * tests/fuzz/fuzz_keyring.c - the KEYRING payload (agent/cluster/keyring.h), which a
 * voter reads from another member: gm_keyring_decode, then the token records
 * it carries merged into a store (crypto/token.h gm_token_store_merge), the
 * key parsed (gm_id_key_from_pem).
 * Checks:
 *   - decode returns 0, GM_ERR_PROTO or -ENOMEM; on error both outputs are NULL;
 *     what decodes encodes and decodes again to the same two strings;
 *   - the merge returns 0, GM_ERR_FORMAT, -ENOSPC or -ENOMEM; a refused merge
 *     changes nothing (the store exports the same text as before); an accepted
 *     one exports text that merges into a copy of itself with no change;
 *   - the key parser returns 0 or GM_ERR_FORMAT (or -ENOMEM).
 * The store lives in a temporary directory (merge saves it).
 *
 * Seeds: GM_FUZZ_KEYRING_SEEDS=<dir> build-fuzz/fuzz_keyring -runs=0 writes a payload
 * with a fresh key and two token records into dir (tests/fuzz/corpus/keyring/ holds it).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "agent/cluster/keyring.h"
#include "crypto/identity.h"
#include "crypto/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char store_path[256];

static void need(int ok)
{
    if (!ok)
        abort();
}

/* A store with one token of its own, at store_path (rewritten each run). */
static struct gm_token_store *base_store(void)
{
    struct gm_token_store *s = NULL;
    struct gm_token_info info;
    uint8_t pin[GM_ID_PIN_LEN] = {1};
    char tok[GM_TOKEN_STR_MAX];

    unlink(store_path);
    need(gm_token_store_open(store_path, &s) == 0);
    need(gm_token_store_create(s, "lab", pin, 3600, 2, 1700000000, tok, &info) == 0);
    return s;
}

static void export(const struct gm_token_store *s, char **out, size_t *len)
{
    need(gm_token_store_export(s, out, len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *pem = NULL, *tok = NULL, *again = NULL, *pem2 = NULL, *tok2 = NULL;
    char *before, *after, *after2;
    size_t pem_len, tok_len, alen, nb, na, na2, pl2, tl2;
    struct gm_token_store *s;
    struct gm_key *key = NULL;
    int err, changed;

    err = gm_keyring_decode(data, size, &pem, &pem_len, &tok, &tok_len);
    need(err == 0 || err == GM_ERR_PROTO || err == -ENOMEM);
    if (err != 0) {
        need(pem == NULL && tok == NULL);
        return 0;
    }
    need(strlen(pem) == pem_len && strlen(tok) == tok_len);
    need(gm_keyring_encode(pem, tok, &again, &alen) == 0);
    need(gm_keyring_decode((const uint8_t *)again, alen, &pem2, &pl2, &tok2, &tl2) == 0);
    need(pl2 == pem_len && tl2 == tok_len && memcmp(pem, pem2, pl2) == 0 &&
         memcmp(tok, tok2, tl2) == 0);

    err = gm_id_key_from_pem(pem, pem_len, &key);
    need(err == 0 || err == GM_ERR_FORMAT || err == -ENOMEM);
    gm_id_key_free(key);

    s = base_store();
    export(s, &before, &nb);
    err = gm_token_store_merge(s, tok, tok_len, &changed);
    need(err == 0 || err == GM_ERR_FORMAT || err == -ENOSPC || err == -ENOMEM);
    export(s, &after, &na);
    if (err != 0) {
        need(!changed && na == nb && memcmp(before, after, na) == 0);
    } else {
        need(changed || (na == nb && memcmp(before, after, na) == 0));
        need(gm_token_store_merge(s, after, na, &changed) == 0 && !changed);
        export(s, &after2, &na2);
        need(na2 == na && memcmp(after, after2, na) == 0);
        free(after2);
    }
    gm_token_store_free(s);
    free(before);
    free(after);
    free(again);
    free(pem);
    free(tok);
    free(pem2);
    free(tok2);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("GM_FUZZ_KEYRING_SEEDS");
    struct gm_token_store *s;
    struct gm_token_info info;
    struct gm_key *key = NULL;
    uint8_t pin[GM_ID_PIN_LEN] = {2};
    char tok[GM_TOKEN_STR_MAX], *pem, *lines, *text, path[512];
    size_t pem_len, len, tlen;
    FILE *fp;

    (void)argc;
    (void)argv;
    need(sodium_init() >= 0);
    snprintf(store_path, sizeof(store_path), "/dev/shm/fuzz_keyring.%d.tokens", (int)getpid());
    if (dir == NULL)
        return 0;
    s = base_store();
    need(gm_token_store_create(s, "lab", pin, 7200, 1, 1700000100, tok, &info) == 0);
    need(gm_token_store_export(s, &lines, &tlen) == 0);
    need(gm_id_key_generate(&key) == 0 && gm_id_key_to_pem(key, &pem, &pem_len) == 0);
    need(gm_keyring_encode(pem, lines, &text, &len) == 0);
    snprintf(path, sizeof(path), "%s/keyring", dir);
    fp = fopen(path, "wb");
    need(fp != NULL && fwrite(text, 1, len, fp) == len && fclose(fp) == 0);
    free(text);
    free(pem);
    free(lines);
    gm_id_key_free(key);
    gm_token_store_free(s);
    return 0;
}
