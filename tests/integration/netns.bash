# tests/integration/netns.bash - a network-namespace testbed for the integration
# tests: hosts, bridges (LANs), point-to-point links, rate limits, an OpenVPN
# tunnel and routes, all made and torn down by the test itself.
#
# Sourced, not run.  Stands alone: it does not source lib.bash, because
# lib.bash skips (exit 77) when there is no gradmesh binary, and the testbed is
# useful (and self-tested) without one.  It composes with lib.bash when both
# are sourced: source lib.bash FIRST, then this file, then call nb_require,
# which chains its cleanup in front of lib.bash's EXIT trap (never replaces it).
#
#   . tests/integration/lib.bash       # optional: WORK, PIDS, fail, wait_for, ...
#   . tests/integration/netns.bash
#   nb_require openvpn                 # root + `ip netns add` works, else exit 77
#   nb_host a; nb_host b; nb_bridge lan
#   nb_lan lan a eth0 10.74.1.1/24
#   nb_spawn a agent.log "$GM" agent --config "$WORK/a.conf"
#
# Invariants:
# - Nothing is ever created in the root network namespace: every bridge lives
#   in its own "switch" namespace (host name sw-BR), every veth is created with
#   both ends already in their namespaces (`ip -n A link add ... netns B`), so
#   deleting the namespaces deletes every device, address, route and qdisc.
# - Names are unique per run: namespace "HOST" is "$NB_PREFIX""HOST" with
#   NB_PREFIX=gmnb<pid>- (override NB_PREFIX before nb_require if needed).
#   Interface names live inside the namespaces, so they cannot collide across
#   runs.  `nb_ns HOST` prints the real namespace name (for `ip -n`, `tc -n`).
# - Addresses are only the ones the caller gives; use private ranges
#   (10.0.0.0/8 etc.) - the namespaces have no route to the outside anyway.
# - nb_cleanup kills every process still inside one of our namespaces (not
#   only those started by nb_spawn/nb_openvpn: `nb_exec h cmd &` too, but
#   never by a remembered pid whose process may be gone) and deletes the
#   namespaces; it is
#   idempotent and runs from the EXIT trap, which bash also runs on SIGINT,
#   SIGTERM and SIGHUP.
# - Setup failures are fatal: the nb_* builders call lib.bash's `fail` when it
#   is defined, else print "FAIL: ..." and exit 1.  Do not call them inside
#   $(...) or a pipeline: an exit there only leaves the subshell.
# - Every wait polls a condition with a deadline (nb_wait); none sleeps and
#   hopes.
# - Scripts run with `set -o pipefail`: never end a pipeline with `grep -q`
#   (it exits at the first match, the writer dies of SIGPIPE, and the pipeline
#   fails although the line was there); use `grep ... >/dev/null`.
#
# Globals (all NB_*): NB_PREFIX; NB_WORK (logs, configs, certificates: lib.bash's
# $WORK when that exists, so its fail shows our logs and its cleanup removes
# them, else a directory of our own); NB_NS (namespaces made); NB_PIDS
# (processes started); NB_LAST_PID (set by nb_spawn); NB_TUN_DEV (set by
# nb_openvpn).

# tc, ip and openvpn live in /usr/sbin, which a non-login PATH may lack.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

NB_PREFIX=${NB_PREFIX:-gmnb$$-}
NB_WORK=${NB_WORK:-}
NB_OWN_WORK=0
NB_NS=()
NB_PIDS=()
NB_CGROUPS=()
NB_LAST_PID=
NB_TUN_DEV=
NB_NPORT=0
NB_NVPN=0
NB_PREV_EXIT_TRAP=
NB_TRAP_PID=
NB_DELAY_MS=0
NB_RELAY_PID=

# nb__die MSG: a setup step failed; lib.bash's fail (prints logs) or our own.
nb__die() {
    local f
    if declare -F fail >/dev/null; then fail "$*"; fi # prints $WORK/*.log = ours
    echo "FAIL: $*"
    for f in "${NB_WORK:-/nonexistent}"/*.log; do
        [ -e "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
    done
    exit 1
}

# nb__skip MSG: the environment cannot run this test; one line, exit 77.
nb__skip() { echo "SKIP: $*"; exit 77; }

# nb__run CMD...: runs a setup command; on failure dies naming it and its stderr.
nb__run() {
    local err
    if ! err=$("$@" 2>&1); then nb__die "$* : $err"; fi
}

# nb_ns HOST: prints the namespace name of HOST (for `ip -n`, `tc -n`, ...).
nb_ns() { printf '%s%s\n' "$NB_PREFIX" "$1"; }

# nb__trap: makes nb__on_exit this shell's EXIT trap, keeping the EXIT trap
# that was there (lib.bash's `cleanup`) to run after ours.  Called again by
# every builder, so a trap set later in the same shell (lib.bash sourced after
# nb_require) is chained too instead of silently dropping our cleanup.
# Subshells: bash shows the parent's traps in a (subshell) but does not run
# them there, so the first install in a subshell chains nothing (an EXIT trap
# set in the subshell before nb_require is lost: set it after) and starts
# with empty NB_NS/NB_PIDS and a borrowed NB_WORK: the subshell's cleanup
# deletes only what the subshell made; the parent's stays the parent's.
nb__trap() {
    local cur words
    cur=$(trap -p EXIT)
    if [ "${NB_TRAP_PID:-}" = "$BASHPID" ]; then
        case $cur in *nb__on_exit*) return 0 ;; esac
    elif [ "$BASHPID" != "$$" ]; then
        cur='' NB_NS=() NB_PIDS=() NB_CGROUPS=() NB_OWN_WORK=0
    fi
    NB_PREV_EXIT_TRAP=
    if [ -n "$cur" ]; then
        eval "words=($cur)" # trap -- 'CMD' EXIT
        NB_PREV_EXIT_TRAP=${words[2]}
    fi
    trap nb__on_exit EXIT
    NB_TRAP_PID=$BASHPID
}

nb__on_exit() {
    local rc=$?
    nb_cleanup
    if [ -n "$NB_PREV_EXIT_TRAP" ]; then eval "$NB_PREV_EXIT_TRAP"; fi
    return $rc
}

# nb_require [CMD...]: checks that namespaces can be made here (root, `ip`,
# and a probe `ip netns add`/`del` that works) and that each CMD is on PATH
# (openvpn: also /dev/net/tun); otherwise prints one "SKIP: ..." line and
# exits 77.  Then registers the cleanup trap (see nb__trap) and makes
# NB_WORK.  Call it once per shell, before any other nb_* builder.
nb_require() {
    local c err probe
    [ "$(id -u)" -eq 0 ] || nb__skip "network namespaces need root (running as uid $(id -u))"
    command -v ip >/dev/null || nb__skip "no 'ip' command (install iproute2)"
    for c in "$@"; do
        command -v "$c" >/dev/null || nb__skip "no '$c' command (.ci/deps.sh installs it)"
        if [ "$c" = openvpn ] && [ ! -c /dev/net/tun ]; then
            nb__skip "no /dev/net/tun, so no tun device for openvpn"
        fi
    done
    probe=${NB_PREFIX}probe
    if ! err=$(ip netns add "$probe" 2>&1); then
        nb__skip "cannot create a network namespace: ip netns add: ${err//$'\n'/ }"
    fi
    ip netns del "$probe" 2>/dev/null
    nb__trap
    if [ -z "$NB_WORK" ]; then
        if [ -n "${WORK:-}" ] && [ -d "${WORK:-}" ]; then
            NB_WORK=$WORK # lib.bash's: its fail prints our logs, its cleanup removes them
        else
            NB_WORK=$(mktemp -d "/tmp/gm-nb.$$.XXXXXX")
            NB_OWN_WORK=1
        fi
    fi
    mkdir -p "$NB_WORK"
}

# nb_wait [--pid PID] DESC SECONDS CMD...: polls CMD every 50 ms until it
# succeeds; dies naming DESC after SECONDS, or at once when process PID (the
# daemon being waited for, e.g. $NB_LAST_PID) has exited.
nb_wait() {
    local pid='' desc secs t0=$SECONDS
    if [ "$1" = --pid ]; then pid=$2; shift 2; fi
    desc=$1 secs=$2; shift 2
    until "$@" >/dev/null 2>&1; do
        [ -z "$pid" ] || nb__alive "$pid" || nb__die "process $pid exited while waiting for $desc"
        [ $((SECONDS - t0)) -lt "$secs" ] || nb__die "timed out after ${secs}s waiting for $desc"
        sleep 0.05
    done
}

# nb__newns NAME: makes namespace NAME (short name) with lo up.
nb__newns() {
    local ns
    ns=$(nb_ns "$1")
    nb__trap
    [ -n "$NB_WORK" ] || nb__die "nb_require was not called"
    ip netns add "$ns" 2>/dev/null ||
        nb__die "cannot add namespace $ns (left over from a killed run? ip netns del $ns)"
    NB_NS+=("$ns")
    nb__run ip -n "$ns" link set lo up
}

# nb_host HOST: a host: a namespace with only lo, up.  With NB_HOST_CPU set (cores, e.g. 0.6)
# the host also gets a CPU cgroup (v1 cpu controller, /sys/fs/cgroup/cpu) capped at that many
# cores, which every process nb_spawn starts there joins: hosts of equal speed, as separate
# machines would be, whatever else shares this machine's cores (the namespaces share its
# CPUs otherwise, so a third host would add no compute to two that fill two cores).  The quota
# is enforced over 10 ms periods, not the kernel's default 100 ms: a rank throttled for half of a
# 100 ms period stalls a synchronous step of 16 ms that its peers then wait for, which a slower
# CPU would not do (2 agents on a LAN ran 1.2x one agent with 100 ms periods).
nb_host() {
    local cg
    nb__newns "$1"
    [ -n "${NB_HOST_CPU:-}" ] || return 0
    [ -d /sys/fs/cgroup/cpu ] || nb__die "NB_HOST_CPU: no cgroup v1 cpu controller at /sys/fs/cgroup/cpu"
    cg=/sys/fs/cgroup/cpu/$(nb_ns "$1")
    mkdir "$cg" || nb__die "cannot make cgroup $cg"
    NB_CGROUPS+=("$cg")
    echo 10000 >"$cg/cpu.cfs_period_us" &&
        awk -v c="$NB_HOST_CPU" 'BEGIN { printf "%d\n", c * 10000 }' >"$cg/cpu.cfs_quota_us" ||
        nb__die "cannot cap $cg at $NB_HOST_CPU cores"
}

# nb_cgroup HOST: the host's CPU cgroup directory, or nothing without NB_HOST_CPU.
nb_cgroup() {
    local cg=/sys/fs/cgroup/cpu/$(nb_ns "$1")
    [ -n "${NB_HOST_CPU:-}" ] && [ -d "$cg" ] && echo "$cg"
    return 0
}

# nb_bridge BR: a LAN switch: bridge device BR inside its own namespace (host
# name sw-BR), never in the root namespace.  STP off (ports forward at once)
# and multicast snooping off, so multicast floods to every port like on a
# dumb switch, whether or not anyone sent an IGMP report.
nb_bridge() {
    local ns
    nb__newns "sw-$1"
    ns=$(nb_ns "sw-$1")
    nb__run ip -n "$ns" link add "$1" type bridge stp_state 0 mcast_snooping 0
    nb__run ip -n "$ns" link set "$1" up
}

# nb__link_ready HOST IF: IF is up with carrier.
nb__link_ready() { ip -n "$(nb_ns "$1")" link show "$2" | grep LOWER_UP >/dev/null; }

# nb__ifup HOST IF CIDR: address, multicast on, up.
nb__ifup() {
    local ns
    ns=$(nb_ns "$1")
    nb__run ip -n "$ns" addr add "$3" dev "$2"
    nb__run ip -n "$ns" link set "$2" multicast on up
}

# nb_lan BR HOST IFNAME CIDR: plugs HOST into bridge BR with a veth whose host
# end is IFNAME with address CIDR (e.g. 10.74.1.1/24), multicast on, up.  The
# switch end is port pN (alias HOST:IFNAME) in sw-BR.
nb_lan() {
    local br=$1 host=$2 ifn=$3 cidr=$4 sw hns port
    sw=$(nb_ns "sw-$br"); hns=$(nb_ns "$host")
    port=p$NB_NPORT; NB_NPORT=$((NB_NPORT + 1))
    nb__trap
    nb__run ip -n "$hns" link add "$ifn" type veth peer name "$port" netns "$sw"
    nb__run ip -n "$sw" link set "$port" alias "$host:$ifn"
    nb__run ip -n "$sw" link set "$port" master "$br" up
    nb__ifup "$host" "$ifn" "$cidr"
    nb_wait "$host:$ifn carrier" 10 nb__link_ready "$host" "$ifn"
}

# nb_link HOSTA IFA CIDR_A HOSTB IFB CIDR_B: a point-to-point veth between two
# hosts (a WAN link, a tunnel's underlay), addressed on both ends, up.
nb_link() {
    local ans bns
    ans=$(nb_ns "$1"); bns=$(nb_ns "$4")
    nb__trap
    nb__run ip -n "$ans" link add "$2" type veth peer name "$5" netns "$bns"
    nb__ifup "$1" "$2" "$3"
    nb__ifup "$4" "$5" "$6"
    nb_wait "$1:$2 carrier" 10 nb__link_ready "$1" "$2"
    nb_wait "$4:$5 carrier" 10 nb__link_ready "$4" "$5"
}

# nb__bits RATE: prints RATE (tc syntax: 20mbit, 500kbit, 1gbit, 8000bit) in bit/s.
nb__bits() {
    local n=${1%%[a-zA-Z]*} u=${1##*[0-9.]}
    case $u in
    bit) echo "$n" ;;
    kbit) echo "$((n * 1000))" ;;
    mbit) echo "$((n * 1000000))" ;;
    gbit) echo "$((n * 1000000000))" ;;
    *) return 1 ;;
    esac
}

# nb_rate HOST IFNAME RATE [BURST_BYTES [LATENCY]]: limits what leaves IFNAME
# (egress only: call it on both ends of a link for both directions) to RATE
# with a token bucket:
#   tc qdisc replace dev IF root tbf rate RATE burst B latency L
# RATE is an integer with bit|kbit|mbit|gbit (tc's units, 1000-based).
# Burst B defaults to max(rate x 2 ms, 4 KiB): at least two full 1514-byte
# frames plus encapsulation (tbf drops any packet bigger than the bucket), and
# enough tokens to ride over ~2 ms of timer/softirq lateness on a busy machine
# (tokens beyond the bucket are lost, which would make the link slower than
# RATE), yet small against a 1 MB transfer (20mbit: 5000 B = 0.5% of 1 MB,
# the only part that leaves faster than RATE).
# Latency L (default 20ms) sizes the queue (limit = rate x L + burst, 55 KB at
# 20mbit): enough to keep the link busy after a TCP window halving when the
# base RTT is a few ms, short enough not to add 100s of ms of bufferbloat.
nb_rate() {
    local host=$1 ifn=$2 rate=$3 burst=${4:-} lat=${5:-20ms} bits
    bits=$(nb__bits "$rate") || nb__die "nb_rate: rate '$rate' is not <int>bit|kbit|mbit|gbit"
    if [ -z "$burst" ]; then
        burst=$((bits / 8 / 500))
        [ "$burst" -ge 4096 ] || burst=4096
    fi
    nb__run tc -n "$(nb_ns "$host")" qdisc replace dev "$ifn" root tbf \
        rate "$rate" burst "$burst" latency "$lat"
}

# nb_exec HOST CMD...: runs CMD inside HOST (ip netns exec); returns its status.
nb_exec() {
    local ns
    ns=$(nb_ns "$1"); shift
    ip netns exec "$ns" "$@"
}

# nb_spawn HOST LOG CMD...: starts CMD in the background inside HOST, stdout
# and stderr appended to LOG (relative names go under NB_WORK), registered for
# cleanup; its pid is in NB_LAST_PID (and NB_PIDS).  `ip netns exec` execs
# CMD, so the pid is CMD's own.  With NB_HOST_CPU, CMD runs in HOST's CPU cgroup
# (nb_host).
nb_spawn() {
    local host=$1 log=$2 ns cg; shift 2
    ns=$(nb_ns "$host")
    case $log in /*) ;; *) log=$NB_WORK/$log ;; esac
    nb__trap
    cg=$(nb_cgroup "$host")
    if [ -n "$cg" ]; then # join the host's cgroup (outside: `ip netns exec` remounts /sys), then exec
        sh -c 'echo $$ >"$0/cgroup.procs" && exec ip netns exec "$@"' "$cg" "$ns" "$@" >>"$log" 2>&1 &
    else
        ip netns exec "$ns" "$@" >>"$log" 2>&1 &
    fi
    NB_LAST_PID=$!
    NB_PIDS+=("$NB_LAST_PID")
}

# nb_ping HOST DEST [SECONDS]: succeeds once DEST answers one ping from HOST
# (pings every 0.2 s, gives up after SECONDS, default 10).  Does not die:
# test it (`nb_ping a 10.74.2.1 || fail ...`).
nb_ping() {
    nb_exec "$1" ping -n -q -c 1 -i 0.2 -W 1 -w "${3:-10}" "$2" >/dev/null 2>&1
}

# nb_route HOST DEST VIA_OR_DEV: route DEST (CIDR or "default") in HOST via
# a gateway address, or out of a device when the third word is not an IPv4
# address (a tun device: "$NB_TUN_DEV").  Replaces an existing route.
nb_route() {
    local ns
    ns=$(nb_ns "$1")
    if [[ $3 =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
        nb__run ip -n "$ns" route replace "$2" via "$3"
    else
        nb__run ip -n "$ns" route replace "$2" dev "$3"
    fi
}

# nb_forward HOST: HOST routes between its interfaces (net.ipv4.ip_forward=1
# inside that namespace only; the root namespace's setting is untouched).
nb_forward() {
    nb__run ip netns exec "$(nb_ns "$1")" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
}

# nb__cert NAME: a self-signed P-256 certificate NAME.crt / NAME.key in DIR
# ($1 is DIR/NAME); prints its SHA-256 fingerprint (AA:BB:...).
nb__cert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1.key" -out "$1.crt" -days 2 -subj "/CN=${1##*/}" 2>/dev/null || return 1
    chmod 600 "$1.key"
    openssl x509 -in "$1.crt" -noout -fingerprint -sha256 | sed 's/^.*=//'
}

# nb__udp_bound HOST PORT: something in HOST listens on UDP PORT.
nb__udp_bound() { ip netns exec "$(nb_ns "$1")" ss -Hlun "sport = :$2" | grep . >/dev/null; }

# nb_delay MS: the next nb_openvpn tunnels get MS ms of added one-way delay in each direction
# (RTT + 2 MS), from a userspace UDP relay (tests/tools/udp_delay: netem is not available on
# every machine).  The relay runs in the client's host, on 127.0.0.1:PORT, and the client's
# OpenVPN talks to it instead of the server: every underlay datagram of the tunnel, both
# ways, waits MS ms in the relay, in order, none dropped; the veth and its tbf are crossed as
# before (after the relay towards the server, before it towards the client).  0 turns it
# off.  The relay binary: NB_UDP_DELAY, default ${GM_BUILD:-build}/tools/udp_delay (`make
# tools`).  Its per-direction counts and lateness go to NB_WORK/ovpnN-relay.log on exit.
nb_delay() {
    [[ $1 =~ ^[0-9]+$ ]] || nb__die "nb_delay: '$1' is not a whole number of ms"
    NB_DELAY_MS=$1
}

# nb_openvpn SERVERHOST SERVER_UNDERLAY_IP CLIENTHOST TUN_SERVER_IP TUN_CLIENT_IP [PORT]
# A real OpenVPN 2.6 point-to-point tunnel over UDP (port default 1194)
# between two hosts that can already reach each other (nb_link): TLS with a
# fresh self-signed certificate per end, each end pinning the other's with
# --peer-fingerprint (no CA, no static key), `--dev tun` with device
# NB_TUN_DEV (nbt<pid>x<n>, the same name on both ends) addressed with
# --ifconfig (TUN_SERVER_IP peer TUN_CLIENT_IP and the reverse).  DCO is off
# (--disable-dco): a plain tun device that tc, tcpdump and the counters see.
# With nb_delay MS set, the client reaches the server through the delay relay (NB_RELAY_PID).
# Returns once a ping crosses the tunnel both ways (dies after 20 s).
# Configs, keys and logs: NB_WORK/ovpnN/, NB_WORK/ovpnN-{server,client}.log.
nb_openvpn() {
    local srv=$1 sip=$2 cli=$3 tsrv=$4 tcli=$5 port=${6:-1194}
    local n=$NB_NVPN dir fps fpc common spid remote=$sip relay
    NB_NVPN=$((NB_NVPN + 1))
    NB_TUN_DEV=nbt$$x$n
    dir=$NB_WORK/ovpn$n
    mkdir -p "$dir" && chmod 700 "$dir"
    fps=$(nb__cert "$dir/server") || nb__die "openssl: server certificate"
    fpc=$(nb__cert "$dir/client") || nb__die "openssl: client certificate"
    common="dev $NB_TUN_DEV
dev-type tun
disable-dco
proto udp
verb 3
mute-replay-warnings
keepalive 2 10
data-ciphers AES-256-GCM:CHACHA20-POLY1305
tls-version-min 1.2"
    cat >"$dir/server.conf" <<EOF
$common
local $sip
lport $port
ifconfig $tsrv $tcli
tls-server
dh none
cert $dir/server.crt
key $dir/server.key
peer-fingerprint $fpc
EOF
    if [ "$NB_DELAY_MS" -gt 0 ]; then
        relay=${NB_UDP_DELAY:-$PWD/${GM_BUILD:-build}/tools/udp_delay}
        [ -x "$relay" ] || nb__die "no UDP delay relay at $relay (make tools)"
        nb_spawn "$cli" "ovpn$n-relay.log" "$relay" --listen "127.0.0.1:$port" \
            --to "$sip:$port" --delay-ms "$NB_DELAY_MS"
        NB_RELAY_PID=$NB_LAST_PID
        nb_wait --pid "$NB_RELAY_PID" "delay relay on $cli udp/$port" 10 nb__udp_bound "$cli" "$port"
        remote=127.0.0.1
    fi
    cat >"$dir/client.conf" <<EOF
$common
remote $remote $port
nobind
connect-retry 1
ifconfig $tcli $tsrv
tls-client
cert $dir/client.crt
key $dir/client.key
peer-fingerprint $fps
EOF
    nb_spawn "$srv" "ovpn$n-server.log" openvpn --config "$dir/server.conf"
    spid=$NB_LAST_PID
    nb_wait --pid "$spid" "openvpn server on $srv udp/$port" 10 nb__udp_bound "$srv" "$port"
    nb_spawn "$cli" "ovpn$n-client.log" openvpn --config "$dir/client.conf"
    nb_wait --pid "$NB_LAST_PID" "openvpn client on $cli to connect" 20 \
        grep 'Initialization Sequence Completed' "$NB_WORK/ovpn$n-client.log"
    nb__alive "$spid" || nb__die "openvpn server on $srv exited"
    nb_ping "$cli" "$tsrv" 10 || nb__die "no ping $cli -> $tsrv through the tunnel"
    nb_ping "$srv" "$tcli" 10 || nb__die "no ping $srv -> $tcli through the tunnel"
}

# nb__alive PID: PID exists and is not a zombie.
nb__alive() {
    local st
    st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

# nb__ours SHELLPID: prints the pids of every process inside one of our
# namespaces, and of those nb_spawn started that are still running as
# children of SHELLPID (a spawned `ip netns exec` not yet in its namespace).
# A pid in NB_PIDS whose process is gone is never printed: its number may
# belong to somebody else's process by now.
nb__ours() {
    local ns p
    for ns in "${NB_NS[@]}"; do ip netns pids "$ns" 2>/dev/null; done
    for p in "${NB_PIDS[@]}"; do
        [ "$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null)" = "$1" ] && echo "$p"
    done
    return 0
}

# nb_cleanup: SIGTERM to every process in one of our namespaces (whoever
# started it) and to our spawned children, SIGKILL to those left after 3 s,
# then deletes the namespaces (and with them every bridge, veth, tun,
# address, route and tc qdisc).  Removes NB_WORK when this file made it
# (KEEP=1 keeps it).  Idempotent; safe before nb_require.
nb_cleanup() {
    local me=$BASHPID ns p left sig t0
    for sig in TERM KILL; do
        left=$(nb__ours "$me")
        [ -n "$left" ] || break
        # shellcheck disable=SC2086
        kill -"$sig" $left 2>/dev/null
        t0=$SECONDS
        while [ -n "$(nb__ours "$me")" ] && [ $((SECONDS - t0)) -lt 3 ]; do sleep 0.05; done
    done
    # Reap our children (bash may have already); never block on one still alive.
    for p in "${NB_PIDS[@]}"; do nb__alive "$p" || wait "$p" 2>/dev/null; done
    for ns in "${NB_NS[@]}"; do ip netns del "$ns" 2>/dev/null; done
    NB_NS=()
    for p in "${NB_CGROUPS[@]}"; do rmdir "$p" 2>/dev/null; done
    NB_CGROUPS=()
    NB_PIDS=()
    if [ "$NB_OWN_WORK" = 1 ] && [ -n "$NB_WORK" ]; then
        if [ "${KEEP:-0}" = 1 ]; then echo "kept $NB_WORK"; else rm -rf "$NB_WORK"; fi
        NB_OWN_WORK=0
    fi
}
