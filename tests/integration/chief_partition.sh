#!/usr/bin/env bash
# tests/integration/chief_partition.sh - the chief across a 2|1 split, in network namespaces
# (issue 13):
#
#   a (init: the chief) --- sw-lan --- b        three hosts on one bridge, 10.74.13.0/24,
#                              |                each agent in its own namespace
#                              c   <- eth0 down: the split; eth0 up: it heals
#
#  1. the three agents link, a is the chief and b and c voters
#  2. c is cut off: the majority (a, b) keeps its chief in the same term; c has no chief,
#     says so (quorum false) and, once its links time out, why: no majority
#  3. while split, the majority commits a change (`role c witness`)
#  4. the split heals: c follows the same chief in the same term (pre-vote: its failed
#     elections never raised the term) and has caught up with the change
#  5. one chief per term over every log; the agents stop cleanly
# Every wait polls a condition with a deadline; nothing is timed.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require python3

nb_bridge lan
i=1
for h in a b c; do
    nb_host $h
    nb_lan lan $h eth0 10.74.13.$i/24
    i=$((i + 1))
done
nb_exec a "$GM" init --cluster split --node a --config "$WORK/a.conf" --state "$WORK/a" \
    --listen 10.74.13.1:7450 --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init a"
ns_agent a
wait_for "agent a" "$GM" status --config "$WORK/a.conf"
i=2
for h in b c; do
    TOKEN=$("$GM" token create --config "$WORK/a.conf" 2>>"$WORK/cli.log") || fail "token for $h"
    nb_exec $h "$GM" join "$TOKEN" --peer 10.74.13.1:7450 --node $h --config "$WORK/$h.conf" \
        --state "$WORK/$h" --listen 10.74.13.$i:7450 --multicast off >/dev/null 2>>"$WORK/cli.log" ||
        fail "join $h"
    ns_agent $h
    i=$((i + 1))
done
for h in a b c; do wait_until 60 "$h's links" links_up $h 2; done

# --- 1. ---------------------------------------------------------------------------------
VOTERS='sorted((m["node"], m["raft"]) for m in d["members"]) == [("a","voter"), ("b","voter"), ("c","voter")]'
for h in a b c; do wait_until 60 "$h: chief a, three voters" members_is $h "d['chief'] == 'a' and $VOTERS"; done
T1=$(members_get a 'd["term"]')
pass "a is the chief of term $T1; b and c are voters"

# --- 2. the split -------------------------------------------------------------------------------
nb_exec c ip link set eth0 down || fail "cutting c off"
wait_until 60 "c: no chief" members_is c 'd["chief"] is None and d["quorum"] is False and d["chief_reason"]'
for h in a b; do
    members_is $h "d['chief'] == 'a' and d['term'] == $T1 and d['quorum'] is True" ||
        fail "$h lost its chief or term in the split: $(members_get $h 'd["chief"], d["term"]')"
done
pass "split 2|1: a and b keep chief a in term $T1; c has none ($(members_get c 'd["chief_reason"]'))"
wait_until 90 "c: no majority" members_is c '"no majority: 1 of 3 voters reachable" in d["chief_reason"]'
"$GM" status --config "$WORK/c.conf" | grep "^no chief: no majority" >/dev/null ||
    fail "status on c: $("$GM" status --config "$WORK/c.conf")"
pass "c, alone, says why: $(members_get c 'd["chief_reason"]')"

# --- 3. the majority goes on -------------------------------------------------------------------
"$GM" role c witness --config "$WORK/b.conf" >"$WORK/role.out" 2>&1 || fail "role c witness while split: $(cat "$WORK/role.out")"
for h in a b; do
    wait_for "$h: c is a witness" members_is $h '[m["role"] for m in d["members"] if m["node"] == "c"] == ["witness"]'
done
members_is c '[m["role"] for m in d["members"] if m["node"] == "c"] == ["voter"]' || fail "c learned the change while cut off"
pass "the majority committed 'role c witness' while c was cut off"

# --- 4. the split heals ---------------------------------------------------------------------------
nb_exec c ip link set eth0 up || fail "healing the split"
wait_until 90 "c catches up" members_is c "d['chief'] == 'a' and d['term'] == $T1 and [m['role'] for m in d['members'] if m['node'] == 'c'] == ['witness']"
members_is a "d['chief'] == 'a' and d['term'] == $T1" || fail "the heal disturbed a: $(members_get a 'd["chief"], d["term"]')"
pass "healed: c follows chief a in term $T1 again and holds the change it missed"

# --- 5. ------------------------------------------------------------------------------------------
check_one_chief_per_term
ns_stop_agents a b c
