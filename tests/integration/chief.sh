#!/usr/bin/env bash
# tests/integration/chief.sh - the elected chief on three real agents on loopback (issue 13):
#
#   alpha (init: the first voter) --TLS-- beta --TLS-- gamma, raft inside the member links
#
#  1. a chief is elected and the other two become voters; `members` lists the roles
#  2. `role gamma witness` is committed and shown everywhere
#  3. kill -9 of the chief: the other two elect a new chief (term grows; the time against the
#     5 s goal is printed); if the witness won, it hands the chief to the voter; the killed
#     agent restarts and follows
#  4. with one voter down, a role change that would leave no majority is refused
#  5. `revoke gamma` (asked on a member that is not the chief, so it is forwarded): every
#     agent closes its link to gamma, refuses gamma's links from then on (logged), and
#     gamma leaves the raft configuration
#  6. the voter that is not the chief killed: the chief steps down; status and members say
#     there is no chief and why (no majority), and a submit is refused with that reason
#  7. from every log: exactly one chief per term
# Every wait polls a condition with a deadline; nothing is timed (tests do not fail on a slow
# machine).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

make_cluster chief alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done

# --- 1. election and membership --------------------------------------------------------------
ALL3='sorted((m["node"], m["role"], m["raft"]) for m in d["members"]) == [("alpha","voter","voter"), ("beta","voter","voter"), ("gamma","voter","voter")]'
for n in alpha beta gamma; do
    wait_for "$n: three voters and a chief" members_is $n "d['chief'] == 'alpha' and $ALL3"
done
"$GM" members --config "$WORK/beta.conf" >"$WORK/members.txt" || fail "members exit $?"
grep -q "^chief alpha, term " "$WORK/members.txt" || fail "members: $(cat "$WORK/members.txt")"
[ "$(grep -c ' voter  *voter ' "$WORK/members.txt")" = 3 ] || fail "members table: $(cat "$WORK/members.txt")"
"$GM" status --json --config "$WORK/gamma.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["chief"] == "alpha" and d["quorum"] is True and d["term"] >= 1 and d["chief_reason"] is None, d
assert d["member_role"] == "voter" and d["raft_role"] == "voter", d' || fail "status --json chief fields"
pass "alpha is the chief; beta and gamma were added as voters (raft over the member links)"

# --- 2. a role change ------------------------------------------------------------------------
"$GM" role gamma witness --config "$WORK/alpha.conf" >"$WORK/role.out" 2>&1 || fail "role gamma witness: $(cat "$WORK/role.out")"
grep -q "committed" "$WORK/role.out" || fail "role: $(cat "$WORK/role.out")"
for n in alpha beta gamma; do
    wait_for "$n: gamma is a witness" members_is $n '[m["role"] for m in d["members"] if m["node"] == "gamma"] == ["witness"]'
done
"$GM" role gamma captain --config "$WORK/alpha.conf" 2>"$WORK/role.err"; rc=$?
[ $rc = 2 ] && grep -q "voter, witness or spare" "$WORK/role.err" || fail "role captain: exit $rc $(cat "$WORK/role.err")"
pass "role gamma witness committed on every agent; a bad role is a usage error"

# --- 3. kill -9 of the chief -----------------------------------------------------------------
T1=$(members_get beta 'd["term"]')
# the election is timed from the agents' own logs (grep is cheap; a CLI poll would time the
# CLI on a loaded machine): the first event=chief-elected of a newer term on beta or gamma
elected() { grep -h "event=chief-elected node=" "$WORK/beta.log" "$WORK/gamma.log" |
    awk -v t="$T1" '{ for (i = 1; i <= NF; i++) if ($i ~ /^term=/) { split($i, a, "="); if (a[2] > t) { print; exit } } }'; }
kill9_agent alpha
START=$(date +%s.%N)
for i in $(seq 1200); do [ -n "$(elected)" ] && break; sleep 0.025; done
END=$(date +%s.%N)
[ -n "$(elected)" ] || fail "no new chief within 30 s of killing alpha"
ELAPSED=$(python3 -c "print(round($END - $START, 2))")
echo "new chief ${ELAPSED}s after the kill ($(python3 -c "print('within' if $ELAPSED < 5 else 'OVER')") the 5 s goal; printed, not asserted)"
# both survivors agree on it
wait_for "beta and gamma agree on a new chief" bash -c '
    c=$("'"$GM"'" status --json --config "'"$WORK"'/beta.conf" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"chief\"] or \"\")")
    d=$("'"$GM"'" status --json --config "'"$WORK"'/gamma.conf" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"chief\"] or \"\")")
    [ -n "$c" ] && [ "$c" != alpha ] && [ "$c" = "$d" ]'
NEW=$(chief_of beta)
T2=$(members_get beta 'd["term"]')
[ "$T2" -gt "$T1" ] || fail "term did not grow: $T1 -> $T2"
pass "chief alpha killed (-9): $NEW is the chief of term $T2 after ${ELAPSED}s"
if [ "$NEW" = gamma ]; then # a witness that won hands over to the voter beta
    wait_for "gamma (witness) hands the chief to beta" members_is beta 'd["chief"] == "beta"'
    log_has gamma 'event=chief-transfer to=beta reason="this node is a witness"'
    NEW=beta T2=$(members_get beta 'd["term"]')
    pass "gamma, a witness, handed the chief to beta (term $T2)"
fi
start_agent alpha
wait_for "alpha follows $NEW" members_is alpha "d['chief'] == '$NEW' and d['term'] == $T2"
pass "alpha restarted and follows $NEW in term $T2 (pre-vote: no disruption)"

# --- 4. no change that leaves no majority ---------------------------------------------------
# voters alpha, beta, gamma (witness); kill gamma, then ask to make the up voter that is not
# the chief a spare: the voters left (the chief and gamma) would have 1 of 2 reachable.
kill9_agent gamma
OTHER=$( [ "$NEW" = beta ] && echo alpha || echo beta )
[ "$NEW" = gamma ] && fail "gamma, a witness, became the chief"
wait_for "$NEW sees gamma down" members_is "$NEW" '[m["link"] for m in d["members"] if m["node"] == "gamma"] == ["down"]'
"$GM" role "$OTHER" spare --config "$WORK/$NEW.conf" >"$WORK/refuse.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "would leave no majority" "$WORK/refuse.out" || fail "role $OTHER spare with gamma down: exit $rc $(cat "$WORK/refuse.out")"
members_is "$NEW" '[m["role"] for m in d["members"] if m["node"] == "'"$OTHER"'"] == ["voter"]' || fail "$OTHER's role changed"
pass "role $OTHER spare with gamma down refused: $(cat "$WORK/refuse.out")"
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done

# --- 5. revoke ------------------------------------------------------------------------------
"$GM" revoke gamma --config "$WORK/$OTHER.conf" >"$WORK/revoke.out" 2>&1 || fail "revoke gamma via $OTHER: $(cat "$WORK/revoke.out")"
for n in alpha beta; do
    wait_for "$n: gamma revoked" members_is $n '[r["node"] for r in d["revoked"]] == ["gamma"] and "gamma" not in [m["node"] for m in d["members"]]'
    wait_for "$n: no link to gamma" links_up $n 1
done
log_has "$NEW" "event=node-revoked node=gamma"
# gamma keeps dialing (it is not told to stop); every attempt is refused and logged
wait_for "a refused link from gamma" grep -qE 'peer=gamma .*(this node is revoked|revoked)' "$WORK/alpha.log" "$WORK/beta.log"
"$GM" members --json --config "$WORK/$NEW.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert "gamma" not in [m["node"] for m in d["members"]], d' || fail "gamma still listed"
pass "gamma revoked (asked on $OTHER, forwarded to $NEW): links closed, new ones refused"
# doctor and status count only members: gamma is in neither, nor in the link matrix
for n in alpha beta; do
    "$GM" doctor --json --config "$WORK/$n.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert "gamma" not in [m["node"] for m in d["members"]], d["members"]
assert "gamma" not in d["matrix"]["nodes"] and len(d["matrix"]["rtt_ms"]) == 2, d["matrix"]' ||
        fail "$n: doctor lists the revoked gamma"
    "$GM" doctor --config "$WORK/$n.conf" >"$WORK/doctor.$n" || fail "doctor on $n"
    grep -q "gamma" "$WORK/doctor.$n" && fail "$n: doctor shows gamma: $(cat "$WORK/doctor.$n")"
    grep -q "^gradient codecs (communication per step, lenet5, 2 members)$" "$WORK/doctor.$n" ||
        fail "$n: doctor counts $(grep "^gradient codecs" "$WORK/doctor.$n")"
    grep -q "^  codec = auto would pick " "$WORK/doctor.$n" || fail "$n: doctor names no pick: $(cat "$WORK/doctor.$n")"
done
pass "doctor leaves the revoked gamma out: $(grep "codec = auto would pick" "$WORK/doctor.alpha" | sed 's/^ *//')"

# --- 6. no majority, no chief, no training ----------------------------------------------------
# the voters are now alpha and beta; with the one that is not the chief killed, the chief
# steps down (it hears from no majority) and says why; a submit is refused with that reason
LEFT=$NEW
[ "$NEW" = alpha ] && GONE=beta || GONE=alpha
kill9_agent "$GONE"
wait_for "$LEFT: no chief" members_is "$LEFT" 'd["chief"] is None and d["quorum"] is False'
"$GM" status --json --config "$WORK/$LEFT.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["chief"] is None and d["quorum"] is False, d
assert "no majority: 1 of 2 voters reachable" in d["chief_reason"], d["chief_reason"]' ||
    fail "status of $LEFT without a majority"
"$GM" members --config "$WORK/$LEFT.conf" | head -1 | grep -q "^no chief (term [0-9]*): no majority" ||
    fail "members without a majority: $("$GM" members --config "$WORK/$LEFT.conf")"
if have_fashion_mnist; then
    job_ini "$WORK/job.ini" nm optim.name=sgd optim.lr=0.1 optim.batch=32
    "$GM" submit "$WORK/job.ini" --config "$WORK/$LEFT.conf" >"$WORK/nm.out" 2>&1; rc=$?
    [ $rc = 1 ] && grep -q "no chief, so no training: no majority" "$WORK/nm.out" ||
        fail "submit without a majority: exit $rc $(cat "$WORK/nm.out")"
    pass "$LEFT alone: no chief (\"$(members_get "$LEFT" 'd["chief_reason"]')\"); submit refused"
else
    pass "$LEFT alone: no chief (\"$(members_get "$LEFT" 'd["chief_reason"]')\") (no dataset: submit not tried)"
fi

# --- 7. one chief per term --------------------------------------------------------------------
grep -h "event=chief-elected" "$WORK"/*.log | sed 's/.*node=\([^ ]*\) term=\([0-9]*\).*/\2 \1/' | sort -u >"$WORK/chiefs"
[ -s "$WORK/chiefs" ] || fail "no chief-elected lines"
dup=$(awk '{print $1}' "$WORK/chiefs" | uniq -d)
[ -z "$dup" ] || fail "more than one chief in term(s) $dup: $(cat "$WORK/chiefs")"
pass "one chief per term: $(tr '\n' ' ' <"$WORK/chiefs")"

stop_agents
