/*
 * tests/unit/test_keyring.c - the KEYRING payload (agent/cluster/keyring.h): what
 * encodes decodes to the same key and token text; a wrong version, a missing
 * or extra field, a non-string, an embedded NUL and an oversized payload are
 * refused with GM_ERR_PROTO and leave nothing allocated.
 *
 * And the hand-over's decisions (gm_keyring_push_due, _ask_due, _answer_due)
 * under every interleaving of `role G witness` then `role G voter`: a model
 * of two agents, H (a voter that holds the key throughout) and G (a voter
 * holding the key, then demoted, then promoted again), each applying the two
 * log entries at its own pace, ticking, and receiving the frames in flight
 * on their link (FIFO each way), with time passing, H's token records
 * changing once and the link closing and reopening once, all at arbitrary
 * points.  Every reachable state is visited (breadth first, up to
 * MODEL_TICKS_MAX time steps); from each one a fair run (both logs applied,
 * then rounds of ticks, deliveries and time) must end with G holding the
 * key again.  The same search with the ask turned off (the push alone, as
 * before KEYRING_REQ) must find a state from which G never gets it back: the
 * model sees the loss the ask fixes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cluster/keyring.h"
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

/* --- the hand-over's decisions under every interleaving ------------------------------ */

#define MODEL_TICKS_MAX 3 /* time steps (GM_KEYRING_ASK_MS each) the search lets pass */
#define MODEL_Q_MAX 7     /* frames in flight one way (the search never needs more) */
#define MODEL_T0_NS 5000000000ull
#define MODEL_STEP_NS ((uint64_t)GM_KEYRING_ASK_MS * 1000000ull)

/* G's role after each node applied 0, 1 or 2 entries: voter, witness, voter again */
static const int g_voter_after[3] = {1, 0, 1};

struct model {
    int h_app, g_app;  /* entries applied by H and by G */
    int g_holds;       /* G holds the key */
    uint64_t gen;      /* H's keyring_gen */
    uint64_t mark;     /* H's keyring_sent on the link to G */
    int q_hg, q_gh;    /* KEYRINGs H -> G, KEYRING_REQs G -> H in flight */
    int k;             /* time steps passed */
    uint64_t asked;    /* G's keyring_asked_ns */
    uint64_t answered; /* H's keyring_answered_ns on the link */
    int bumped, reopened;
    int overflow; /* a queue passed MODEL_Q_MAX: the search is too small */
};

static uint64_t m_now(const struct model *m)
{
    return MODEL_T0_NS + (uint64_t)m->k * MODEL_STEP_NS;
}

static void m_send(struct model *m, int *q)
{
    if (*q == MODEL_Q_MAX)
        m->overflow = 1;
    else
        (*q)++;
}

/* H's tick (agent/cluster/keyring.c gm_keyring_tick on a holder that stays a voter) */
static void h_tick(struct model *m)
{
    if (gm_keyring_push_due(g_voter_after[m->h_app], m->gen, &m->mark))
        m_send(m, &m->q_hg);
}

/* G's tick: a holder drops the key when its state says it is no voter; a voter without the
 * key asks (with_ask) */
static void g_tick(struct model *m, int with_ask)
{
    int voter = g_voter_after[m->g_app];

    if (m->g_holds) {
        if (!voter)
            m->g_holds = 0;
        return; /* G's own pushes to H change nothing here: H holds the key */
    }
    if (with_ask && gm_keyring_ask_due(0, voter, m_now(m), &m->asked))
        m_send(m, &m->q_gh);
}

/* a KEYRING reaches G: taken only while G's state records it as a voter */
static void g_recv(struct model *m)
{
    m->q_hg--;
    if (g_voter_after[m->g_app])
        m->g_holds = 1;
}

/* a KEYRING_REQ reaches H */
static void h_recv(struct model *m)
{
    m->q_gh--;
    if (gm_keyring_answer_due(1, g_voter_after[m->h_app], m_now(m), &m->answered)) {
        m_send(m, &m->q_hg);
        m->mark = m->gen;
    }
}

#define MODEL_EVENTS 9

/* Applies event e when it is enabled; 0 when it is not. */
static int m_step(struct model *m, int e, int with_ask)
{
    switch (e) {
    case 0:
        if (m->h_app == 2)
            return 0;
        m->h_app++;
        return 1;
    case 1:
        if (m->g_app == 2)
            return 0;
        m->g_app++;
        return 1;
    case 2:
        h_tick(m);
        return 1;
    case 3:
        g_tick(m, with_ask);
        return 1;
    case 4:
        if (m->q_hg == 0)
            return 0;
        g_recv(m);
        return 1;
    case 5:
        if (m->q_gh == 0)
            return 0;
        h_recv(m);
        return 1;
    case 6:
        if (m->k == MODEL_TICKS_MAX)
            return 0;
        m->k++;
        return 1;
    case 7: /* a token made, used or revoked on H */
        if (m->bumped)
            return 0;
        m->bumped = 1;
        m->gen++;
        return 1;
    case 8: /* the link closes and a new one comes up: new lctx, frames in flight lost */
        if (m->reopened)
            return 0;
        m->reopened = 1;
        m->mark = 0;
        m->answered = 0;
        m->q_hg = m->q_gh = 0;
        return 1;
    }
    return 0;
}

/* From m, a fair run: both logs applied, then rounds of ticks, deliveries and time. */
static int m_recovers(struct model m, int with_ask)
{
    m.h_app = m.g_app = 2;
    for (int round = 0; round < 8 && !m.g_holds; round++) {
        m.k++;
        g_tick(&m, with_ask);
        while (m.q_gh > 0)
            h_recv(&m);
        h_tick(&m);
        while (m.q_hg > 0)
            g_recv(&m);
    }
    return m.g_holds;
}

/* Visited states: an open-addressed set of packed states. */
#define SEEN_BITS 20
static uint64_t seen[1u << SEEN_BITS];

static uint64_t slot_of(uint64_t t)
{
    return t == 0 ? 0 : (t - MODEL_T0_NS) / MODEL_STEP_NS + 1; /* 0: never */
}

static uint64_t m_pack(const struct model *m)
{
    uint64_t v = 1; /* never 0: 0 marks an empty slot */
    v = v << 2 | (uint64_t)m->h_app;
    v = v << 2 | (uint64_t)m->g_app;
    v = v << 1 | (uint64_t)m->g_holds;
    v = v << 2 | m->gen;
    v = v << 2 | m->mark;
    v = v << 3 | (uint64_t)m->q_hg;
    v = v << 3 | (uint64_t)m->q_gh;
    v = v << 3 | (uint64_t)m->k;
    v = v << 3 | slot_of(m->asked);
    v = v << 3 | slot_of(m->answered);
    v = v << 1 | (uint64_t)m->bumped;
    v = v << 1 | (uint64_t)m->reopened;
    return v;
}

/* 1 when v was not in the set (and is now). */
static int seen_add(uint64_t v)
{
    size_t i = (size_t)((v * 0x9E3779B97F4A7C15ull) >> (64 - SEEN_BITS));

    while (seen[i] != 0) {
        if (seen[i] == v)
            return 0;
        i = (i + 1) & ((1u << SEEN_BITS) - 1);
    }
    seen[i] = v;
    return 1;
}

/* Every reachable state; *lost: those from which G does not get the key back. */
static void m_search(int with_ask, size_t *states, size_t *lost, int *overflow)
{
    size_t cap = (size_t)1 << (SEEN_BITS - 1); /* the set stays at most half full */
    struct model *queue = malloc(cap * sizeof(*queue));
    struct model start = {.gen = 1, .mark = 1, .g_holds = 1}; /* G received the key as a voter */
    size_t head = 0, tail = 0;

    memset(seen, 0, sizeof(seen));
    *states = *lost = 0;
    *overflow = queue == NULL;
    if (queue == NULL)
        return;
    seen_add(m_pack(&start));
    queue[tail++] = start;
    while (head < tail) {
        struct model m = queue[head++];
        (*states)++;
        if (!m_recovers(m, with_ask))
            (*lost)++;
        for (int e = 0; e < MODEL_EVENTS; e++) {
            struct model n = m;
            if (!m_step(&n, e, with_ask))
                continue;
            if (n.overflow) {
                *overflow = 1;
                continue;
            }
            if (seen_add(m_pack(&n))) {
                if (tail == cap) {
                    *overflow = 1;
                    break;
                }
                queue[tail++] = n;
            }
        }
    }
    free(queue);
}

static void test_handover_interleavings(void)
{
    size_t states = 0, lost = 0;
    int overflow = 0;

    m_search(1, &states, &lost, &overflow);
    GM_CHECK(!overflow);
    GM_CHECK(states > 1000); /* the search did branch */
    GM_CHECK_EQ(lost, 0);
    fprintf(stderr, "push and ask: %zu states, %zu lose the key\n", states, lost);

    /* the push alone (no KEYRING_REQ) loses it from some of them */
    m_search(0, &states, &lost, &overflow);
    GM_CHECK(!overflow);
    GM_CHECK(lost > 0);
    fprintf(stderr, "push alone: %zu states, %zu lose the key\n", states, lost);
}

/* The three decisions on their own. */
static void test_decisions(void)
{
    uint64_t sent = 3, t = 0, now = MODEL_T0_NS;

    GM_CHECK(gm_keyring_push_due(1, 4, &sent) && sent == 4);
    GM_CHECK(!gm_keyring_push_due(1, 4, &sent));              /* once per generation */
    GM_CHECK(!gm_keyring_push_due(0, 4, &sent) && sent == 0); /* no voter: cleared */
    GM_CHECK(gm_keyring_push_due(1, 4, &sent));               /* a voter again: sent again */

    GM_CHECK(!gm_keyring_ask_due(1, 1, now, &t) && t == 0); /* holds it */
    GM_CHECK(!gm_keyring_ask_due(0, 0, now, &t) && t == 0); /* no voter */
    GM_CHECK(gm_keyring_ask_due(0, 1, now, &t) && t == now);
    GM_CHECK(!gm_keyring_ask_due(0, 1, now + MODEL_STEP_NS - 1, &t)); /* not twice a second */
    GM_CHECK(gm_keyring_ask_due(0, 1, now + MODEL_STEP_NS, &t));

    t = 0;
    GM_CHECK(!gm_keyring_answer_due(0, 1, now, &t) && t == 0); /* holds no key */
    GM_CHECK(!gm_keyring_answer_due(1, 0, now, &t) && t == 0); /* asker is no voter here */
    GM_CHECK(gm_keyring_answer_due(1, 1, now, &t) && t == now);
    GM_CHECK(!gm_keyring_answer_due(1, 1, now + 1, &t)); /* a flood is answered once a second */
    GM_CHECK(gm_keyring_answer_due(1, 1, now + MODEL_STEP_NS, &t));
}

int main(void)
{
    GM_TEST_RUN(test_roundtrip);
    GM_TEST_RUN(test_refusals);
    GM_TEST_RUN(test_decisions);
    GM_TEST_RUN(test_handover_interleavings);
    return gm_test_finish("test_keyring");
}
