#!/usr/bin/env bash
# tests/integration/join_cli.sh - the CLI contract on loopback: init, token,
# join, agents linking, and the token refusals (reused, malformed, revoked,
# expired, wrong CA pin), each seen on both sides: the joiner's exit code and
# message, and the admitter's log line.  Then file modes and a log grep for
# secrets.  Then no silent overwrite: init and join refuse an existing config or
# identity without --force and a running agent's with it; a failed join removes the
# folders it made (never one that existed); join --force replaces an identity and keeps
# its checkpoints; `leave` is refused on the chief, and on a member has the chief revoke
# it, stops its agent, removes its identity and config and keeps its checkpoints.
#
#   alpha (init, admitter) 127.0.0.1:PA  <--TLS-->  beta (join) 127.0.0.1:PB
#         ^                                              ^
#         +----------------------TLS---------------------+-- gamma (join) 127.0.0.1:PC
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

PA=$(free_port); PB=$(free_port); PC=$(free_port)
"$GM" init --metrics off --cluster lab --config "$WORK/alpha.conf" --state "$WORK/alpha" \
    --listen 127.0.0.1:$PA --node alpha >/dev/null 2>>"$WORK/cli.log" || fail "init"
start_agent alpha
pass "init + agent"

T1=$("$GM" token create --config "$WORK/alpha.conf" 2>>"$WORK/cli.log") || fail "token create"
case "$T1" in gmtoken1_*) ;; *) fail "token has no prefix: ${T1:0:12}";; esac
ID1=$("$GM" token list --json --config "$WORK/alpha.conf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][0]["id"])')
"$GM" join --metrics off "$T1" --peer 127.0.0.1:$PA --config "$WORK/beta.conf" --state "$WORK/beta" \
    --listen 127.0.0.1:$PB --node beta >/dev/null 2>>"$WORK/cli.log" || fail "join beta"
log_has alpha "event=join-accepted token=$ID1 node=beta"
pass "token create + join"

# a second use of the single-use token
"$GM" join --metrics off "$T1" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:1 --node x 2>"$WORK/reuse.err" >/dev/null
rc=$?
[ $rc -eq 78 ] || fail "reused token: exit $rc, want 78"
grep -q "already used" "$WORK/reuse.err" || fail "reused token: joiner message: $(cat "$WORK/reuse.err")"
log_has alpha "event=join-refused token=$ID1"
[ ! -e "$WORK/x/node.crt" ] || fail "reused token produced a certificate"
# a failed join removes what it created: the state directory it made, no config
[ ! -e "$WORK/x" ] && [ ! -e "$WORK/x.conf" ] || fail "a refused join left $(ls -d "$WORK"/x* 2>/dev/null)"
pass "second use refused (exit 78, both sides)"

# a listen port of 0 cannot be dialed by the members: usage error
"$GM" join --metrics off "$T1" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:0 --node x >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "join --listen :0: exit $rc, want 2"

# malformed token: refused before any connection
"$GM" join --metrics off "${T1%?}" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:1 --node x 2>"$WORK/bad.err" >/dev/null
rc=$?
[ $rc -eq 78 ] || fail "malformed token: exit $rc"
grep -q "malformed" "$WORK/bad.err" || fail "malformed token message"
pass "malformed token refused (exit 78)"

# revoked token
T2=$("$GM" token create --uses 2 --config "$WORK/alpha.conf")
ID2=$("$GM" token list --json --config "$WORK/alpha.conf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][-1]["id"])')
"$GM" token revoke "$ID2" --config "$WORK/alpha.conf" >/dev/null || fail "token revoke"
"$GM" token list --config "$WORK/alpha.conf" | grep "$ID2" | grep -q revoked || fail "token list shows no revocation"
"$GM" join --metrics off "$T2" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:1 --node x 2>"$WORK/rev.err" >/dev/null
rc=$?
[ $rc -eq 78 ] && grep -q revoked "$WORK/rev.err" || fail "revoked token: exit $rc $(cat "$WORK/rev.err")"
log_has alpha "event=join-refused token=$ID2"
pass "revoked token refused"

# expired token (1 s lifetime: poll the clock past its expiry, then join)
T3=$("$GM" token create --ttl 1s --config "$WORK/alpha.conf")
EXP=$("$GM" token list --json --config "$WORK/alpha.conf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][-1]["expires"])')
past_expiry() { [ "$(date +%s)" -ge "$EXP" ]; }
wait_for "token expiry" past_expiry
"$GM" join --metrics off "$T3" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:1 --node x 2>"$WORK/exp.err" >/dev/null
rc=$?
[ $rc -eq 78 ] && grep -q expired "$WORK/exp.err" || fail "expired token: exit $rc $(cat "$WORK/exp.err")"
log_has alpha 'reason="expired"'
pass "expired token refused"

# wrong CA pin: a token for this cluster from another CA (a second init elsewhere)
PZ=$(free_port)
"$GM" init --metrics off --cluster lab --config "$WORK/other.conf" --state "$WORK/other" \
    --listen 127.0.0.1:$PZ --node other >/dev/null 2>>"$WORK/cli.log" || fail "init other"
start_agent other
T4=$("$GM" token create --config "$WORK/other.conf")
"$GM" join --metrics off "$T4" --peer 127.0.0.1:$PA --config "$WORK/x.conf" --state "$WORK/x" \
    --listen 127.0.0.1:1 --node x 2>"$WORK/pin.err" >/dev/null
rc=$?
[ $rc -eq 1 ] && grep -q "pin" "$WORK/pin.err" || fail "wrong pin: exit $rc $(cat "$WORK/pin.err")"
log_has alpha "err=-4008"
pass "wrong CA pin refused before anything secret was sent"

# a multi-use token admits a third machine; the three agents link up
T5=$("$GM" token create --uses 2 --config "$WORK/alpha.conf")
"$GM" join --metrics off "$T5" --peer 127.0.0.1:$PA --config "$WORK/gamma.conf" --state "$WORK/gamma" \
    --listen 127.0.0.1:$PC --node gamma >/dev/null 2>>"$WORK/cli.log" || fail "join gamma"
start_agent beta
start_agent gamma
wait_for "alpha links to beta and gamma" links_up alpha 2
wait_for "beta links" links_up beta 2
wait_for "gamma links" links_up gamma 2
# the chief adds a member to its raft configuration on its next tick: beta has a quorum then
has_quorum() { "$GM" status --json --config "$WORK/$1.conf" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["quorum"] is True else 1)'; }
wait_until 60 "beta in the chief's configuration" has_quorum beta
"$GM" status --json --config "$WORK/beta.conf" | python3 -c '
import json,sys
d=json.load(sys.stdin)
assert d["cluster"]=="lab" and d["node"]=="beta" and d["quorum"] is True, d
assert sorted(m["node"] for m in d["members"])==["alpha","gamma"], d
for m in d["members"]:
    assert m["link"] in ("lan","tunnel","wan") and m["state"]=="up" and "rtt_ms" in m, m
' || fail "status --json"
pass "three agents linked; status --json lists members and links"

# a member that restarts is linked again
kill "$PID_gamma"; wait "$PID_gamma" 2>/dev/null
wait_for "alpha sees gamma down" links_up alpha 1
start_agent gamma
wait_for "alpha relinks gamma" links_up alpha 2
pass "restarted member relinked"

# secrets: 0600 files, and no token, key or verifier in any log
for f in alpha/ca.key alpha/node.key alpha/tokens beta/node.key gamma/node.key; do
    m=$(stat -c %a "$WORK/$f")
    [ "$m" = 600 ] || fail "$f has mode $m"
done
for t in "$T1" "$T2" "$T3" "$T4" "$T5"; do
    if grep -rqF -- "${t#gmtoken1_}" "$WORK"/*.log; then fail "a token appears in a log"; fi
done
for v in $(awk '{print $3}' "$WORK/alpha/tokens"); do
    if grep -rqF -- "$v" "$WORK"/*.log; then fail "a token verifier appears in a log"; fi
done
if grep -rq "PRIVATE KEY" "$WORK"/*.log; then fail "key material in a log"; fi
grep -q "token=$ID1" "$WORK/alpha.log" || fail "logs do not name the token id (the grep could not fail)"
pass "key and token files 0600; no secret in the logs"

# --- no silent overwrite ------------------------------------------------------------------------
sum0=$(sha256sum "$WORK/alpha.conf" "$WORK/beta/node.key")
"$GM" init --metrics off --cluster lab2 --config "$WORK/alpha.conf" --state "$WORK/fresh" \
    --listen 127.0.0.1:1 --node z >/dev/null 2>"$WORK/ow1.err"
rc=$?
[ $rc -eq 78 ] && [ "$(cat "$WORK/ow1.err")" = "gradmesh init: $WORK/alpha.conf exists: give --force to replace it, or another --config FILE" ] ||
    fail "init over a config: exit $rc $(cat "$WORK/ow1.err")"
[ ! -e "$WORK/fresh" ] || fail "a refused init made its state directory"
"$GM" init --metrics off --cluster zz --config "$WORK/z.conf" --state "$WORK/z" \
    --listen 127.0.0.1:1 --node zeta >/dev/null 2>>"$WORK/cli.log" || fail "init zz"
"$GM" init --metrics off --cluster lab2 --config "$WORK/new.conf" --state "$WORK/z" \
    --listen 127.0.0.1:1 --node z >/dev/null 2>"$WORK/ow2.err"
rc=$?
[ $rc -eq 78 ] && [ "$(cat "$WORK/ow2.err")" = "gradmesh init: $WORK/z/node.key exists: $WORK/z holds a node identity; give --force to replace it (its checkpoints are kept), or another --state DIR" ] ||
    fail "init over an identity: exit $rc $(cat "$WORK/ow2.err")"
"$GM" init --force --metrics off --cluster lab2 --config "$WORK/new.conf" --state "$WORK/beta" \
    --listen 127.0.0.1:1 --node z >/dev/null 2>"$WORK/ow3.err"
rc=$?
[ $rc -eq 78 ] && grep -qF "gradmesh init: an agent (pid $PID_beta, listening on 127.0.0.1:$PB) runs on $WORK/beta: stop it first" "$WORK/ow3.err" ||
    fail "init --force over a running agent: exit $rc $(cat "$WORK/ow3.err")"
T6=$("$GM" token create --config "$WORK/alpha.conf")
"$GM" join --metrics off "$T6" --peer 127.0.0.1:$PA --config "$WORK/beta.conf" --state "$WORK/j6" \
    --listen 127.0.0.1:1 --node j6 >/dev/null 2>"$WORK/ow4.err"
rc=$?
[ $rc -eq 78 ] && grep -qF "gradmesh join: $WORK/beta.conf exists: give --force" "$WORK/ow4.err" ||
    fail "join over a config: exit $rc $(cat "$WORK/ow4.err")"
[ ! -e "$WORK/j6" ] && [ ! -e "$WORK/new.conf" ] || fail "a refused command left files"
[ "$(sha256sum "$WORK/alpha.conf" "$WORK/beta/node.key")" = "$sum0" ] || fail "a refused command changed a file"
pass "init and join refuse an existing config or identity without --force (and a running agent's with it)"

# a failed join (unreachable peer) into folders it makes removes them all; into a folder that
# was there before, keeps it
"$GM" join --metrics off "$T6" --peer 127.0.0.1:"$(free_port)" --config "$WORK/deep/j.conf" \
    --state "$WORK/deep/er/state" --listen 127.0.0.1:1 --node j7 >/dev/null 2>"$WORK/unr.err"
rc=$?
[ $rc -eq 1 ] && [ ! -e "$WORK/deep" ] || fail "unreachable peer: exit $rc, left: $(find "$WORK/deep" 2>/dev/null | xargs)"
mkdir "$WORK/keepme"
"$GM" join --metrics off "$T1" --peer 127.0.0.1:$PA --config "$WORK/k.conf" --state "$WORK/keepme" \
    --listen 127.0.0.1:1 --node k >/dev/null 2>/dev/null
rc=$?
[ $rc -eq 78 ] && [ -d "$WORK/keepme" ] && [ -z "$(ls -A "$WORK/keepme")" ] && [ ! -e "$WORK/k.conf" ] ||
    fail "a refused join into an existing folder: exit $rc, $(ls -la "$WORK/keepme" 2>&1)"
pass "a failed join removes the folders it made, never one that was there before"

# join --force over an identity that no agent runs: the new cluster's identity replaces it;
# its checkpoints stay
mkdir -p "$WORK/z/raft" "$WORK/z/checkpoints/0123456789abcdef" && echo x >"$WORK/z/checkpoints/0123456789abcdef/f"
T7=$("$GM" token create --config "$WORK/other.conf")
"$GM" join --force --metrics off "$T7" --peer 127.0.0.1:$PZ --config "$WORK/z.conf" --state "$WORK/z" \
    --listen 127.0.0.1:"$(free_port)" --node zeta >/dev/null 2>"$WORK/force.err" || fail "join --force: $(cat "$WORK/force.err")"
grep -qx "name = lab" "$WORK/z.conf" && [ ! -e "$WORK/z/ca.key" ] && [ ! -e "$WORK/z/raft" ] &&
    [ -e "$WORK/z/checkpoints/0123456789abcdef/f" ] || fail "join --force: $(ls "$WORK/z") $(grep name "$WORK/z.conf")"
pass "join --force replaced the identity of cluster zz (CA key and raft log gone), checkpoints kept"

# --- leave --------------------------------------------------------------------------------------
"$GM" leave --config "$WORK/alpha.conf" >/dev/null 2>"$WORK/leave-chief.err"
rc=$?
[ $rc -eq 1 ] && grep -q "alpha is the chief: it cannot revoke itself" "$WORK/leave-chief.err" ||
    fail "leave on the chief: exit $rc $(cat "$WORK/leave-chief.err")"
[ -e "$WORK/alpha/node.key" ] || fail "a refused leave removed the identity"
mkdir -p "$WORK/gamma/checkpoints/0123456789abcdef"
# gamma asks the chief, which it knows once the chief has added it to the raft configuration
gamma_knows_chief() { [ "$(chief_of gamma)" = alpha ]; }
wait_until 60 "gamma to know its chief" gamma_knows_chief
"$GM" leave --config "$WORK/gamma.conf" >"$WORK/leave.out" 2>"$WORK/leave.err" || fail "leave: $(cat "$WORK/leave.err")"
grep -qx "node gamma left cluster lab: revoked by the chief, its agent stopped, its identity and $WORK/gamma.conf removed" "$WORK/leave.out" &&
    grep -qx "checkpoints kept in $WORK/gamma/checkpoints (and job outputs in $WORK/gamma/jobs)" "$WORK/leave.out" ||
    fail "leave said: $(cat "$WORK/leave.out")"
wait "$PID_gamma"; rc=$?
[ $rc -eq 0 ] || fail "gamma's agent exited $rc"
for f in node.key node.crt ca.crt members raft; do [ ! -e "$WORK/gamma/$f" ] || fail "leave left gamma/$f"; done
[ ! -e "$WORK/gamma.conf" ] && [ -d "$WORK/gamma/checkpoints/0123456789abcdef" ] || fail "after leave: $(ls "$WORK/gamma")"
"$GM" members --json --config "$WORK/alpha.conf" | python3 -c '
import json, sys
m = json.load(sys.stdin)
assert "gamma" in [r["node"] for r in m["revoked"]], m["revoked"]
assert "gamma" not in [x["node"] for x in m["members"]], m["members"]' || fail "alpha does not list gamma as revoked"
# the machine can join again (under another name: gamma is revoked), without --force
"$GM" join --metrics off "$T5" --peer 127.0.0.1:$PA --config "$WORK/gamma.conf" --state "$WORK/gamma" \
    --listen 127.0.0.1:$PC --node gamma2 >/dev/null 2>"$WORK/rejoin.err" || fail "join after leave: $(cat "$WORK/rejoin.err")"
pass "leave: refused on the chief; gamma revoked by the chief, its agent stopped, identity and config removed, checkpoints kept, joins again as gamma2"
stop_agents
