/*
 * tests/unit/test_keyring.c - the KEYRING payload (agent/keyring.h): what
 * encodes decodes to the same key and token text; a wrong version, a missing
 * or extra field, a non-string, an embedded NUL and an oversized payload are
 * refused with GM_ERR_PROTO and leave nothing allocated.
 */
#include <stdlib.h>
#include <string.h>

#include "agent/keyring.h"
#include "common/err.h"
#include "common/test.h"

GM_TEST_DEFINE_STATE;

static void test_roundtrip(void)
{
    const char *pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE "
                      "KEY-----\n";
    const char *tok = "v1 00112233aabbccdd 00 1 2 1 1 0\n";
    char *text = NULL, *p = NULL, *t = NULL;
    size_t len = 0, pl = 0, tl = 0;

    GM_CHECK_OK(gm_keyring_encode(pem, tok, &text, &len));
    GM_CHECK_OK(gm_keyring_decode((const uint8_t *)text, len, &p, &pl, &t, &tl));
    GM_CHECK_STREQ(p, pem);
    GM_CHECK_STREQ(t, tok);
    GM_CHECK_EQ(pl, strlen(pem));
    GM_CHECK_EQ(tl, strlen(tok));
    free(text);
    free(p);
    free(t);
    GM_CHECK_OK(gm_keyring_encode(pem, "", &text, &len)); /* no tokens yet */
    GM_CHECK_OK(gm_keyring_decode((const uint8_t *)text, len, &p, &pl, &t, &tl));
    GM_CHECK_EQ(tl, 0);
    free(text);
    free(p);
    free(t);
}

static void test_refusals(void)
{
    static const char *const bad[] = {
        "",
        "[]",
        "{\"v\":2,\"ca_key\":\"k\",\"tokens\":\"\"}",
        "{\"v\":1,\"ca_key\":\"k\"}",
        "{\"v\":1,\"ca_key\":\"k\",\"tokens\":\"\",\"x\":1}",
        "{\"v\":1,\"ca_key\":1,\"tokens\":\"\"}",
        "{\"v\":1,\"ca_key\":\"k\\u0000x\",\"tokens\":\"\"}",
        "{\"v\":1,\"ca_key\":\"k\",\"ca_key\":\"k\",\"tokens\":\"\"}",
    };
    char *p = (char *)1, *t = (char *)1, *big;
    size_t pl = 1, tl = 1;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        GM_CHECK_ERR(gm_keyring_decode((const uint8_t *)bad[i], strlen(bad[i]), &p, &pl, &t, &tl),
                     GM_ERR_PROTO);
        GM_CHECK(p == NULL && t == NULL && pl == 0 && tl == 0);
    }
    big = malloc(GM_KEYRING_MAX + 1);
    GM_CHECK(big != NULL);
    memset(big, ' ', GM_KEYRING_MAX + 1);
    GM_CHECK_ERR(gm_keyring_decode((const uint8_t *)big, GM_KEYRING_MAX + 1, &p, &pl, &t, &tl),
                 GM_ERR_PROTO);
    free(big);
}

int main(void)
{
    GM_TEST_RUN(test_roundtrip);
    GM_TEST_RUN(test_refusals);
    return gm_test_finish("test_keyring");
}
