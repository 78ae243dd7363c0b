#!/usr/bin/env bash
# tests/integration/netns_selftest.sh - proves each piece of netns.bash on this
# machine: a bridge that floods IPv4 multicast, a rate-limited underlay, a real
# OpenVPN tunnel measured for throughput, forwarding from a second LAN host
# through the tunnel, and a cleanup that leaves nothing behind (on success, on
# failure and on SIGTERM).  Skips (exit 77) where namespaces cannot be made.
#
#           sw-lan: bridge "lan", multicast snooping off        10.74.1.0/24
#        +-----------------+-----------------+
#   h1 eth0 .1        h2 eth0 .2        h3 eth0 .3
#   (router, fwd)     (route 10.74.200.1 via .1)
#   h1 wan0 172.16.74.1/30 ====== tbf 20mbit each way ====== b wan0 172.16.74.2/30
#   h1 tun  10.74.200.2    <== OpenVPN 2.6, UDP 1194, TLS ==> b tun  10.74.200.1
#                                                             (route 10.74.1.0/24 dev tun)
# Multicast: h1 -> 239.192.74.50:7451 TTL 1, received on h2 and h3.
# Throughput: TCP 4 MB h1 -> b through the tunnel, within 25% of 20 Mbit/s.
# The body runs in a subshell, so its EXIT trap (nb_cleanup) has run when the
# checks for leftovers look; the failure cases run as scripts of their own.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/netns.bash

TOOLS=$PWD/tests/integration/netns_tools.py
RATE=20mbit RATE_MBIT=20 NBYTES=$((4 * 1024 * 1024))
GROUP=239.192.74.50 MPORT=7451
T0=$SECONDS

fail() {
    local f
    echo "FAIL: $*"
    for f in "${NB_WORK:-/nonexistent}"/*.log "${NB_WORK:-/nonexistent}"/*.out; do
        [ -e "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
    done
    exit 1
}
pass() { echo "ok: $* ($((SECONDS - T0))s)"; }

mcast_joined() { nb_exec "$1" ip maddr show dev eth0 | grep -F "$GROUP" >/dev/null; }
tcp_listening() { nb_exec "$1" ss -Hltn "sport = :$2" | grep . >/dev/null; }
counter() { nb_exec "$1" cat "/sys/class/net/$2/statistics/$3"; }
# ident PID...: "pid:starttime" of each live PID; a recycled pid has another start time.
ident() {
    local p st out=()
    for p in "$@"; do
        st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        st=${st##*) } # past "pid (comm) "; starttime is field 22, the 20th from here
        # shellcheck disable=SC2086
        set -- $st
        out+=("$p:${20}")
    done
    echo "${out[*]}"
}

body() {
    nb_require openvpn openssl python3 ping tc ss
    echo "prefix $NB_PREFIX, work $NB_WORK"
    echo "pids=" >>"$STATE"

    # --- (1) a LAN whose bridge floods multicast ---------------------------
    nb_bridge lan
    nb_host h1; nb_host h2; nb_host h3
    nb_lan lan h1 eth0 10.74.1.1/24
    nb_lan lan h2 eth0 10.74.1.2/24
    nb_lan lan h3 eth0 10.74.1.3/24
    pass "three hosts on bridge lan"

    local tag="gm-nb-$$-$RANDOM" h p r1 r2 out f
    nb_spawn h2 mcast-h2.out python3 "$TOOLS" mcast-recv $GROUP $MPORT 10.74.1.2 10; r1=$NB_LAST_PID
    nb_spawn h3 mcast-h3.out python3 "$TOOLS" mcast-recv $GROUP $MPORT 10.74.1.3 10; r2=$NB_LAST_PID
    nb_wait "h2 joins $GROUP" 10 mcast_joined h2
    nb_wait "h3 joins $GROUP" 10 mcast_joined h3
    nb_exec h1 python3 "$TOOLS" mcast-send $GROUP $MPORT 10.74.1.1 1 "$tag" 5 0.1 >/dev/null ||
        fail "mcast-send from h1"
    for h in h2 h3; do
        if [ $h = h2 ]; then p=$r1; else p=$r2; fi
        wait "$p" || fail "$h did not receive the multicast datagram"
        out=$(cat "$NB_WORK/mcast-$h.out")
        [ "$out" = "src=10.74.1.1 ttl=1 data=$tag" ] || fail "$h received '$out'"
    done
    pass "multicast $GROUP:$MPORT TTL 1 from h1 received on h2 and h3"

    # --- (2) two sites: rate-limited underlay, OpenVPN, forwarding ----------
    nb_host b
    nb_link h1 wan0 172.16.74.1/30 b wan0 172.16.74.2/30
    nb_rate h1 wan0 $RATE
    nb_rate b wan0 $RATE
    tc -n "$(nb_ns h1)" qdisc show dev wan0 | grep "tbf.*rate ${RATE_MBIT}Mbit" >/dev/null || fail "no tbf on h1 wan0"
    nb_ping h1 172.16.74.2 5 || fail "underlay ping h1 -> b"
    local t1=$SECONDS
    nb_openvpn b 172.16.74.2 h1 10.74.200.1 10.74.200.2
    echo "pids=$(ident "${NB_PIDS[@]}")" >>"$STATE"
    nb_exec b ip -o addr show dev "$NB_TUN_DEV" | grep "10.74.200.1 peer 10.74.200.2" >/dev/null ||
        fail "b has no tun $NB_TUN_DEV with 10.74.200.1"
    for f in server client; do
        if ! grep "Using certificate fingerprint to verify peer" "$NB_WORK/ovpn0-$f.log" >/dev/null ||
            ! grep "VERIFY OK" "$NB_WORK/ovpn0-$f.log" >/dev/null; then
            fail "openvpn $f did not check its peer's certificate fingerprint"
        fi
    done
    pass "OpenVPN tunnel $NB_TUN_DEV up, ping both ways ($((SECONDS - t1))s to connect)"

    local rx0 ul0 rx1 ul1 port=5201 res mbit
    rx0=$(counter b "$NB_TUN_DEV" rx_bytes); ul0=$(counter h1 wan0 tx_bytes)
    nb_spawn b tcp-sink.out python3 "$TOOLS" tcp-sink 10.74.200.1 $port 30; p=$NB_LAST_PID
    nb_wait "tcp-sink on b:$port" 10 tcp_listening b $port
    nb_exec h1 python3 "$TOOLS" tcp-source 10.74.200.1 $port $NBYTES || fail "tcp-source h1 -> b"
    wait "$p" || fail "tcp-sink on b"
    res=$(cat "$NB_WORK/tcp-sink.out")
    echo "throughput through the tunnel: $res (tbf $RATE on the underlay)"
    rx1=$(counter b "$NB_TUN_DEV" rx_bytes); ul1=$(counter h1 wan0 tx_bytes)
    [ "${res%% *}" = "bytes=$NBYTES" ] || fail "sink got ${res%% *}, want $NBYTES"
    [ $((rx1 - rx0)) -ge $NBYTES ] || fail "tun on b received $((rx1 - rx0)) bytes < $NBYTES: not through the tunnel"
    [ $((ul1 - ul0)) -ge $NBYTES ] || fail "underlay carried $((ul1 - ul0)) bytes < $NBYTES"
    mbit=${res##*mbit=}
    python3 -c "import sys; m=float(sys.argv[1]); sys.exit(0 if 0.75*$RATE_MBIT <= m <= 1.25*$RATE_MBIT else 1)" "$mbit" ||
        fail "throughput $mbit Mbit/s is not within 25% of $RATE_MBIT Mbit/s"
    pass "TCP through the tunnel: $mbit Mbit/s (tun +$((rx1 - rx0)) B, underlay +$((ul1 - ul0)) B)"

    nb_forward h1
    nb_route h2 10.74.200.1/32 10.74.1.1
    nb_route b 10.74.1.0/24 "$NB_TUN_DEV"
    nb_ping h2 10.74.200.1 10 || fail "no ping h2 -> b (10.74.200.1) through h1 and the tunnel"
    nb_exec h2 ping -n -c 1 -W 2 10.74.200.1 | grep "ttl=63" >/dev/null ||
        fail "h2 -> b reply did not come through one router (want ttl=63)"
    pass "h2 reaches b through h1's forwarding and the tunnel"

    # NB_HOST_CPU: a host of its own speed (a CPU cgroup) that what nb_spawn starts there joins
    if [ -d /sys/fs/cgroup/cpu ]; then
        local cg
        NB_HOST_CPU=0.25 nb_host cpu
        cg=$(NB_HOST_CPU=0.25 nb_cgroup cpu)
        [ -n "$cg" ] && [ "$(cat "$cg/cpu.cfs_quota_us")" = 2500 ] &&
            [ "$(cat "$cg/cpu.cfs_period_us")" = 10000 ] ||
            fail "host cpu: no cgroup capped at 2500 us per 10000 ($cg)"
        NB_HOST_CPU=0.25 nb_spawn cpu sleep-cpu.log sleep 60
        in_cg() { grep -x "$NB_LAST_PID" "$cg/cgroup.procs" >/dev/null; }
        nb_wait "process $NB_LAST_PID spawned on host cpu to be in $cg" 10 in_cg
        [ "$(tr '\0' ' ' <"/proc/$NB_LAST_PID/cmdline")" = "sleep 60 " ] ||
            fail "process $NB_LAST_PID in $cg is not the command"
        echo "cgroup=$cg" >>"$STATE"
        pass "NB_HOST_CPU=0.25: host cpu's processes run in $cg, capped at 0.25 cores"
    fi
}

# A builder that fails, and a shell killed by SIGTERM, clean up too, and run
# the EXIT trap that was there (lib.bash's, sourced before or after
# nb_require, or any other).  Run as its own script (bash "$0" --failing-body
# HOW STATE), as a scenario would be.
#   lib:  lib.bash, then nb_require; a builder fails (lib.bash's fail)
#   late: nb_require, then lib.bash (its trap replaces ours; the next builder
#         chains it again); a builder fails
#   term: a plain EXIT trap, nb_require, then SIGTERM
failing_body() {
    case $1 in
    lib) GM_BIN=/bin/true . tests/integration/lib.bash ;;
    term) trap 'echo prev-trap-ran >>"$STATE"' EXIT ;;
    esac
    nb_require
    if [ "$1" = late ]; then GM_BIN=/bin/true . tests/integration/lib.bash; fi
    [ -z "${WORK:-}" ] || echo "work=$WORK" >>"$STATE"
    nb_host x
    nb_spawn x sleep.log sleep 60
    echo "pids=$(ident "$NB_LAST_PID")" >>"$STATE"
    if [ "$1" = term ]; then kill -TERM $$; fi
    nb_lan nosuchbridge x eth0 10.74.9.1/24 # dies: there is no sw-nosuchbridge
    echo "nb_lan did not die"
}
if [ "${1:-}" = --failing-body ]; then
    STATE=$3
    failing_body "$2"
    exit 0
fi

STATE=$(mktemp /tmp/gm-nb-selftest.$$.XXXXXX) # what the body leaves for the checks after it
ROOT_LINKS=$(ip -o link show | awk -F': ' '{print $2}' | sort)
trap 'rm -f "$STATE" "$STATE.out"' EXIT

# ours: namespaces of this run still listed
ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NB_PREFIX" || true; }
# leftovers: namespaces of this run, live processes the body started, or new
# links in the root namespace.
leftovers() {
    local p left
    [ -s "$STATE" ] || fail "$1: $STATE is gone or empty (a subshell ran the parent's EXIT trap?)"
    left=$(ours)
    [ -z "$left" ] || fail "$1: namespaces left: $left"
    # shellcheck disable=SC2013 # words: pid:start pairs
    for p in $(sed -n 's/^pids=//p' "$STATE"); do
        [ "$(ident "${p%%:*}")" != "$p" ] || fail "$1: process ${p%%:*} ($(tr '\0' ' ' <"/proc/${p%%:*}/cmdline")) still running"
    done
    grep "^pids=[0-9]" "$STATE" >/dev/null || fail "$1: no process was recorded (the check could not fail)"
    for p in $(sed -n 's/^cgroup=//p' "$STATE"); do
        [ ! -e "$p" ] || fail "$1: cgroup $p left"
    done
    [ "$(ip -o link show | awk -F': ' '{print $2}' | sort)" = "$ROOT_LINKS" ] ||
        fail "$1: the root namespace's links changed"
}

(body)
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || fail "body exited $rc"
leftovers "after success"
pass "cleanup: no namespace with prefix $NB_PREFIX, no process, root links unchanged"

for how in lib late term; do
    : >"$STATE"
    { # (the braces keep bash's own "Terminated" report off the output)
        NB_PREFIX=${NB_PREFIX}f- bash "$PWD/tests/integration/netns_selftest.sh" \
            --failing-body $how "$STATE" >"$STATE.out" 2>&1
        rc=$?
    } 2>/dev/null
    if [ $how = term ]; then want=143 why=; else want=1 why=nosuchbridge; fi
    [ $rc -eq $want ] || fail "failing body ($how) exited $rc, want $want: $(cat "$STATE.out")"
    [ -z "$why" ] || grep -F "$why" "$STATE.out" >/dev/null || fail "failing body ($how) failed for another reason: $(cat "$STATE.out")"
    leftovers "after $how"
    if [ $how = term ]; then
        grep prev-trap-ran "$STATE" >/dev/null || fail "the EXIT trap set before nb_require did not run"
    else
        w=$(sed -n 's/^work=//p' "$STATE")
        if [ -z "$w" ] || [ -e "$w" ]; then fail "lib.bash's cleanup did not run ($how): WORK '$w'"; fi
    fi
done
pass "cleanup after a failing builder (lib.bash sourced before or after nb_require) and after SIGTERM; their EXIT traps still run"
echo "netns selftest passed in $((SECONDS - T0))s"
