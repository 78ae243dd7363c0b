#!/usr/bin/env bash
# tests/integration/sd_notify.sh - the agent under a fake systemd (a unix datagram
# NOTIFY_SOCKET that notify_tools.py reads): READY=1 with STATUS=, WATCHDOG=1 at half of
# WATCHDOG_USEC, STOPPING=1 on SIGTERM and the process gone within 1 s.  Then the prompt stop
# with a linked peer in the middle of its throughput probe (was 1.7 s), and the exit code 78
# (no restart) for the configuration errors systemd must not retry.
#
#   alpha 127.0.0.1:PA (admitter)  <--TLS-->  beta 127.0.0.1:PB
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

PA=$(free_port); PB=$(free_port)
"$GM" init --metrics off --cluster lab --config "$WORK/alpha.conf" --state "$WORK/alpha" \
    --listen 127.0.0.1:$PA --node alpha --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init"

python3 tests/integration/notify_tools.py watch "$GM" "$WORK/alpha.conf" "$WORK/alpha.log" 400000 \
    >"$WORK/notify.out" 2>&1
rc=$?
cat "$WORK/notify.out"
[ $rc -eq 0 ] || fail "sd_notify protocol"
grep -q "Sanitizer" "$WORK/alpha.log" && fail "sanitizer report"
pass "READY, WATCHDOG cadence, STOPPING, exit within 1 s"

# --- a prompt stop while a peer is busy --------------------------------------------------
start_agent alpha
T=$("$GM" token create --config "$WORK/alpha.conf" 2>>"$WORK/cli.log") || fail "token create"
"$GM" join --metrics off "$T" --peer 127.0.0.1:$PA --config "$WORK/beta.conf" --state "$WORK/beta" \
    --listen 127.0.0.1:$PB --node beta --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "join"
start_agent beta
wait_for "beta linked" links_up beta 1
ms=$(python3 tests/integration/notify_tools.py stoptime "$PID_beta")
wait "$PID_beta"; rc=$?
[ $rc -eq 0 ] || fail "beta exited $rc"
PIDS=("$PID_alpha")
[ "$ms" -lt 1000 ] || fail "beta took $ms ms to stop with a link up"
pass "agent with a fresh link stopped in $ms ms"
stop_agents

# --- configuration errors: one line, exit 78 ----------------------------------------------
cfg_case() { # name, sed expression applied to alpha.conf, expected text
    sed "$2" "$WORK/alpha.conf" >"$WORK/$1.conf"
    "$GM" agent --config "$WORK/$1.conf" >"$WORK/$1.out" 2>&1
    rc=$?
    [ $rc -eq 78 ] || { cat "$WORK/$1.out"; fail "$1: exit $rc, want 78"; }
    [ "$(wc -l <"$WORK/$1.out")" -eq 1 ] || { cat "$WORK/$1.out"; fail "$1: more than one line"; }
    grep -qF -- "$3" "$WORK/$1.out" || { cat "$WORK/$1.out"; fail "$1: no '$3'"; }
    pass "$1: exit 78, $(cat "$WORK/$1.out")"
}
cfg_case misspelled 's/^measure = /mesure = /' "unknown key 'mesure' in [discovery] (did you mean 'measure'?)"
cfg_case badvalue 's/^threads = .*/threads = many/' "[train] threads = many: must be"
cfg_case public 's/^listen = off$/listen = 0.0.0.0:9464/' "set metrics_public = yes"
"$GM" agent --config "$WORK/absent.conf" >"$WORK/absent.out" 2>&1; rc=$?
[ $rc -eq 78 ] || fail "missing config: exit $rc"
grep -q "gradmesh init --cluster NAME" "$WORK/absent.out" || fail "missing config: $(cat "$WORK/absent.out")"
grep -q "event=" "$WORK/absent.out" && fail "missing config speaks log to a person: $(cat "$WORK/absent.out")"
pass "missing config: exit 78 and what to do"
"$GM" status --config "$WORK/absent.conf" >"$WORK/absent.out" 2>&1; rc=$?
[ $rc -eq 78 ] && grep -q "there is no config at" "$WORK/absent.out" || fail "status without config: $rc $(cat "$WORK/absent.out")"
pass "status without config: $(cat "$WORK/absent.out")"
