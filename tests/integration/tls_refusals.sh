#!/usr/bin/env bash
# tests/integration/tls_refusals.sh - an outside TLS client (openssl s_client)
# checks the agent's rules: no client certificate, TLS 1.2 only, a self-signed
# certificate and a revoked member's certificate are each refused (the alert on
# the client side, a log line on the agent's); a real member certificate is
# accepted (so the test can fail), and application data crosses both ways
# between OpenSSL's record layer and the agent's own (crypto/record.h), also
# across key updates that each side starts.
#
#   openssl s_client  --TLS-->  alpha (agent) 127.0.0.1:PA
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
command -v openssl >/dev/null || { echo "no openssl binary"; exit 77; }

PA=$(free_port); PB=$(free_port)
"$GM" init --metrics off --cluster lab --config "$WORK/alpha.conf" --state "$WORK/alpha" \
    --listen 127.0.0.1:$PA --node alpha >/dev/null 2>>"$WORK/cli.log" || fail "init"
start_agent alpha
T=$("$GM" token create --config "$WORK/alpha.conf")
"$GM" join --metrics off "$T" --peer 127.0.0.1:$PA --config "$WORK/beta.conf" --state "$WORK/beta" \
    --listen 127.0.0.1:$PB --node beta >/dev/null 2>>"$WORK/cli.log" || fail "join"

# s_client ARGS...: connects, waits for the server to end the session.
sclient() {
    timeout 10 openssl s_client -connect 127.0.0.1:$PA -ign_eof "$@" </dev/null >"$WORK/s.out" 2>&1
}
count() { grep -c -- "$1" "$WORK/alpha.log" || true; }
count_gt() { [ "$(count "$1")" -gt "$2" ]; }

# 1. no client certificate
n=$(count "err=-4008")
sclient -CAfile "$WORK/alpha/ca.crt"
grep -qi "alert certificate required" "$WORK/s.out" || fail "no cert: $(tail -5 "$WORK/s.out")"
wait_for "agent log: no cert" count_gt "err=-4008" "$n"
pass "client without a certificate refused (certificate required)"

# 2. TLS 1.2 only
n=$(count "err=-4009")
sclient -tls1_2 -cert "$WORK/beta/node.crt" -key "$WORK/beta/node.key"
grep -qi "alert protocol version" "$WORK/s.out" || fail "tls1.2: $(tail -5 "$WORK/s.out")"
wait_for "agent log: tls1.2" count_gt "err=-4009" "$n"
pass "TLS 1.2 refused (protocol version)"

# 3. a self-signed certificate naming the right cluster and node
openssl req -x509 -newkey ed25519 -nodes -keyout "$WORK/self.key" -out "$WORK/self.crt" \
    -days 1 -subj /CN=beta -addext "subjectAltName=URI:gradmesh://lab/beta" 2>/dev/null ||
    fail "openssl req"
n=$(count "peer certificate refused")
sclient -cert "$WORK/self.crt" -key "$WORK/self.key"
grep -qiE "alert (unknown ca|bad certificate)" "$WORK/s.out" || fail "self-signed: $(tail -5 "$WORK/s.out")"
wait_for "agent log: self-signed" count_gt "peer certificate refused" "$n"
pass "self-signed certificate refused (unknown CA)"

# control: a member's certificate gets through (the agent then waits for a HELLO)
timeout 10 openssl s_client -connect 127.0.0.1:$PA -brief -CAfile "$WORK/alpha/ca.crt" \
    -cert "$WORK/beta/node.crt" -key "$WORK/beta/node.key" </dev/null >"$WORK/s.out" 2>&1
grep -q "Protocol version: TLSv1.3" "$WORK/s.out" || fail "member cert: $(cat "$WORK/s.out")"
grep -q "Verification: OK" "$WORK/s.out" || fail "member cert: server not verified"
if grep -qi alert "$WORK/s.out"; then fail "member cert got an alert"; fi
pass "a member certificate is accepted (control)"

# application records both ways between OpenSSL's record layer (s_client) and
# the agent's own (crypto/record.h): the agent opens what s_client sealed (its
# frame parser then refuses the bytes as a frame), s_client opens the agent's
# HELLO and ERROR frames
n=$(count "event=bad-frame")
(printf 'NOT-A-GRADMESH-FRAME\n'; sleep 1) | timeout 10 openssl s_client -connect 127.0.0.1:$PA \
    -quiet -CAfile "$WORK/alpha/ca.crt" -cert "$WORK/beta/node.crt" -key "$WORK/beta/node.key" \
    >"$WORK/s.out" 2>&1
wait_for "agent log: the frame parser saw s_client's bytes" count_gt "event=bad-frame" "$n"
grep -a -q '"listen":"127.0.0.1:'$PA'"' "$WORK/s.out" || fail "s_client did not read the HELLO: $(tail -3 "$WORK/s.out")"
grep -a -q 'malformed frame header' "$WORK/s.out" || fail "s_client did not read the ERROR frame"
if grep -a -qi "alert\|bad record mac" "$WORK/s.out"; then fail "records: $(tail -3 "$WORK/s.out")"; fi
pass "application records cross both ways between openssl s_client and the agent"

# the agent is still serving
"$GM" status --config "$WORK/alpha.conf" >/dev/null || fail "agent died"
pass "agent still serving"

# key updates both ways with OpenSSL's record layer: the agent restarted to
# update its write key every 2 records (GM_TLS_REKEY_AFTER=3, the update
# included) and to ask its peer for one after 3 of the peer's records.
# s_client asks for an update (K: update_requested) and sends one (k), then 12
# PING frames, one record each (the agent answers each with a PONG and must
# ask s_client, which never updates on its own, for updates), then a line the
# agent opens under s_client's latest key and refuses as a frame; s_client
# reads the agent's HELLO, PONGs and ERROR across the agent's updates.
# -msg shows the KeyUpdate messages each way.
kill "$PID_alpha"; wait "$PID_alpha" 2>/dev/null
GM_TLS_REKEY_AFTER=3 start_agent alpha
n=$(count "event=bad-frame")
ping='\x00\x03\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00PINGPING'
{
    sleep 1; printf 'K\n'; sleep 0.3; printf 'k\n'; sleep 0.3
    for _ in $(seq 12); do printf "$ping"; sleep 0.1; done
    printf 'NOT-A-GRADMESH-FRAME\n'; sleep 1
} | timeout 15 openssl s_client -connect 127.0.0.1:$PA -msg -CAfile "$WORK/alpha/ca.crt" \
    -cert "$WORK/beta/node.crt" -key "$WORK/beta/node.key" >"$WORK/s.out" 2>&1
wait_for "agent log: it opened s_client's line after the updates" count_gt "event=bad-frame" "$n"
sent=$(grep -c '^>>> .*KeyUpdate' "$WORK/s.out"); got=$(grep -c '^<<< .*KeyUpdate' "$WORK/s.out")
# s_client: K, k and at least one answer to the agent's request; the agent: an
# update every 2 of its records (HELLO, MEMBERS, 12 PONGs, ERROR)
[ "$sent" -ge 3 ] || fail "s_client sent $sent KeyUpdates: $(grep KeyUpdate "$WORK/s.out")"
[ "$got" -ge 6 ] || fail "the agent sent $got KeyUpdates: $(grep KeyUpdate "$WORK/s.out")"
[ "$(grep -a -c 'PINGPING' "$WORK/s.out")" -ge 1 ] || fail "s_client read no PONG"
grep -a -q '"listen":"127.0.0.1:'$PA'"' "$WORK/s.out" || fail "s_client did not read the HELLO: $(tail -3 "$WORK/s.out")"
grep -a -q 'malformed frame header' "$WORK/s.out" || fail "s_client did not read the ERROR frame"
if grep -a -qiE "fatal|bad record mac|:error:" "$WORK/s.out"; then
    fail "key updates: $(grep -a -iE 'alert|error' "$WORK/s.out" | head -3)"
fi
pass "key updates both ways between openssl s_client and the agent ($sent sent by s_client, $got by the agent)"

# a revoked member: its serial (as openssl prints it) in the denylist, agent restarted
openssl x509 -noout -serial -in "$WORK/beta/node.crt" | sed 's/^serial=//' >"$WORK/alpha/denylist"
kill "$PID_alpha"; wait "$PID_alpha" 2>/dev/null
start_agent alpha
n=$(count "is revoked")
sclient -cert "$WORK/beta/node.crt" -key "$WORK/beta/node.key"
grep -qi "alert certificate revoked" "$WORK/s.out" || fail "revoked: $(tail -5 "$WORK/s.out")"
wait_for "agent log: revoked" count_gt "is revoked" "$n"
pass "revoked member certificate refused (certificate revoked)"
stop_agents
