/*
 * agent/cluster/chief_int.h - private to the chief room's two files (as libuv's
 * src/unix/internal.h): struct gm_chief, the proposal and result records, and the
 * few functions chiefreq.c calls in chief.c.  Nothing outside agent/cluster/chief*.c
 * includes it; the room's interface is agent/cluster/chief.h.
 *
 * The two files, one way:
 *   chief.c     raft's lifecycle and I/O, the state machine's glue, the raft_apply of a
 *               proposal, the results table, the controller, hand-over and election tuning,
 *               the queries (leader, term, status); it calls nothing in chiefreq.c
 *   chiefreq.c  what is asked of the chief: revoke/role/token-use requests made here or
 *               forwarded in CHIEF_REQ and answered in CHIEF_ANS, the job and checkpoint
 *               records, the members/revoke/role/chief-result commands and the room table
 * A proposal made for a request carries its answer function (struct prop's answer): the
 * raft_apply callback in chief.c calls it, so chief.c needs no name from chiefreq.c.
 *
 * Loop thread only.
 */
#ifndef GM_AGENT_CLUSTER_CHIEF_INT_H
#define GM_AGENT_CLUSTER_CHIEF_INT_H

#include <stdint.h>
#include <string.h>

#include <raft.h>
#include <uv.h>

#include "agent/cluster/chief.h"
#include "agent/cluster/chieffsm.h"
#include "agent/core/state.h"

#define RESULTS_MAX 32
#define MSG_MAX 200

enum { RES_FREE = 0, RES_PENDING, RES_DONE, RES_REFUSED };

/* The outcome of a revoke, role or token-use request made on this node. */
struct result {
    uint64_t req;
    int state;
    int code;
    char msg[MSG_MAX];
    gm_chief_done_fn done; /* optional: runs once with the outcome */
    void *arg;
    uint64_t t0; /* made then (monotonic ns) */
};

struct gm_chief {
    struct gm_agent *a; /* borrowed */
    struct raft raft;
    struct raft_io io;
    struct raft_fsm rfsm;
    struct gm_chief_fsm fsm;
    struct gm_chiefnet *net;
    int io_ready, raft_ready, started, closing, closed;
    char dir[GM_PATH_MAX];
    /* the controller: one raft change or one proposal of its own at a time */
    struct raft_change change;
    struct raft_transfer transfer;
    int change_busy, own_busy, transfer_busy;
    /* runs the controller again on the loop's next turn once its step commits, not on the
     * next agent tick (chief.c's controller_kick); closed by gm_chief_stop */
    uv_timer_t kick;
    int kick_open;
    int handing_over;     /* the agent drains: no more changes of its own */
    unsigned election_ms; /* raft's election timeout now (tune_election) */
    /* what was last logged about the chief */
    uint64_t logged_term, restores_logged;
    char logged_chief[GM_CHIEF_NAME_MAX + 1];
    /* requests made here */
    struct result results[RESULTS_MAX];
    uint64_t next_req;
};

struct prop;

/* Tells the asker of p the outcome (code 0: committed; msg: printable). */
typedef void (*gm_chief_answer_fn)(struct gm_chief *ch, const struct prop *p, int code,
                                   const char *msg);

/* One proposal in flight. */
struct prop {
    struct raft_apply req;
    struct gm_chief *ch;
    gm_chief_answer_fn answer;          /* NULL: nobody waits (the controller's, a room's) */
    uint64_t origin_req;                /* the asker's request id */
    char origin[GM_CHIEF_NAME_MAX + 1]; /* "" : this node */
    int own;                            /* the controller's */
    char what[96];
};

/* 1 when this node is raft's leader now. */
static inline int gm_chief_leads(struct gm_chief *ch)
{
    return ch->raft_ready && raft_state(&ch->raft) == RAFT_LEADER;
}

/* node's entry in raft's configuration, or NULL. */
static inline const struct raft_server *gm_chief_server_find(const struct gm_chief *ch,
                                                             const char *node)
{
    const struct raft_configuration *c = &ch->raft.configuration;

    for (unsigned i = 0; i < c->n; i++)
        if (strcmp(c->servers[i].address, node) == 0)
            return &c->servers[i];
    return NULL;
}

static inline const char *gm_chief_raft_role_name(int role)
{
    return role == RAFT_VOTER ? "voter" : role == RAFT_STANDBY ? "standby" : "spare";
}

/* --- chief.c ---------------------------------------------------------------------------- */

/* A pending result with a fresh request id (an older pending one in its slot fails first). */
struct result *gm_chief_result_new(struct gm_chief *ch);
/* The result of request req, or NULL. */
struct result *gm_chief_result_find(struct gm_chief *ch, uint64_t req);
/* Request req's outcome: recorded, and its callback run once. */
void gm_chief_result_set(struct gm_chief *ch, uint64_t req, int code, const char *msg);
/* Proposes c, stamped with the chief's term; answer (when not NULL) runs once from the apply
 * callback with the outcome, for origin ("" : this node) and its request origin_req.  own:
 * the controller's (one at a time).  0, or an error and nothing proposed (-EAGAIN: not the
 * chief). */
GM_MUST_CHECK int gm_chief_apply(struct gm_chief *ch, struct gm_chief_cmd *c, const char *origin,
                                 uint64_t origin_req, int own, const char *what,
                                 gm_chief_answer_fn answer);
/* The RAFT frame handler of the room's table. */
int gm_chief_on_raft(struct gm_agent *a, struct gm_link *l, const struct gm_frame_hdr *h,
                     const uint8_t *p);

#endif
