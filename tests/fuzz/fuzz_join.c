/*
 * tests/fuzz/fuzz_join.c - the join messages (agent/net/proto.h): JOIN_REQUEST,
 * JOIN_ACCEPT and RENEW_ACCEPT decoders (byte 0 picks which), then a round
 * trip: what decodes must encode and decode to the same fields, and the
 * proof context must fit its buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/net/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *p, size_t n)
{
    struct gm_msg_join_request rq, rq2;
    char ctx[512], *json = NULL;
    size_t len = 0, clen;

    if (gm_proto_join_request_decode(p, n, &rq) != 0)
        return;
    clen = gm_proto_join_context(&rq, ctx, sizeof(ctx));
    if (clen == 0 || clen >= sizeof(ctx) || strlen(ctx) != clen)
        abort();
    if (gm_proto_join_request_encode(&rq, &json, &len) != 0)
        abort();
    if (gm_proto_join_request_decode((const uint8_t *)json, len, &rq2) != 0 ||
        memcmp(&rq, &rq2, sizeof(rq)) != 0)
        abort();
    free(json);
}

static void accept_msg(const uint8_t *p, size_t n)
{
    struct gm_msg_join_accept ac, ac2;
    char *json = NULL;
    size_t len = 0;

    if (gm_proto_join_accept_decode(p, n, &ac) != 0)
        return;
    if (gm_proto_join_accept_encode(&ac, &json, &len) != 0)
        abort();
    if (gm_proto_join_accept_decode((const uint8_t *)json, len, &ac2) != 0 ||
        strcmp(ac.cert_pem, ac2.cert_pem) != 0 || strcmp(ac.ca_pem, ac2.ca_pem) != 0 ||
        ac.n_members != ac2.n_members || memcmp(ac.proof, ac2.proof, sizeof(ac.proof)) != 0)
        abort();
    gm_proto_join_accept_free(&ac);
    gm_proto_join_accept_free(&ac2);
    free(json);
}

static void renew(const uint8_t *p, size_t n)
{
    char *pem = NULL, *pem2 = NULL, *json = NULL;
    size_t len = 0;

    if (gm_proto_renew_decode(p, n, &pem) != 0)
        return;
    if (gm_proto_renew_encode(pem, &json, &len) != 0 ||
        gm_proto_renew_decode((const uint8_t *)json, len, &pem2) != 0 || strcmp(pem, pem2) != 0)
        abort();
    free(pem);
    free(pem2);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        request(data + 1, size - 1);
        break;
    case 1:
        accept_msg(data + 1, size - 1);
        break;
    default:
        renew(data + 1, size - 1);
        break;
    }
    return 0;
}
