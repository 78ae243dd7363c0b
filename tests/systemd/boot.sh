#!/usr/bin/env bash
# tests/systemd/boot.sh - the README's install under a real systemd (issue 23): two Debian 12
# machines booted with systemd-nspawn run the README's "Distributed training" block as
# written (tests/systemd/readme_steps.py extracts it from README.md), then a 2-agent job
# through the two gradmesh@lab services; then what the README's install got wrong before:
#   - the state directory's files are user gradmesh's (init and join ran as root);
#   - a second cluster's instance on machine a has its own state and runtime directories, and
#     stopping it leaves lab's control socket alone;
#   - a root-owned key: the service exits 77 naming the file, systemd retries, a chown fixes it;
#   - the CLI says "running but its socket is gone" when the socket is removed.
#
#   netns gmsd-a-PID                                  netns gmsd-b-PID
#   nspawn -b machine a (systemd)                     nspawn -b machine b (systemd)
#   eth0 10.231.$$.1/24  <-------- veth, multicast -------->  eth0 10.231.$$.2/24
#   both: the cached Debian root read-only with a tmpfs overlay (--volatile=overlay),
#   this source tree (a copy, as a fresh clone would have it) at /usr/src/gradmesh,
#   /usr/share/datasets/fashion-mnist read-only.
#
# The root is built once with debootstrap and cached (tests/systemd/root.bash).  Skips (77)
# where nspawn, namespaces or debootstrap are missing, or the dataset is not installed.
# Everything it makes is undone on exit, failure included: machines powered off (then
# killed), namespaces deleted, the copy removed.  Run with `make test-systemd`.
set -uo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
. tests/systemd/root.bash

skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (nspawn, namespaces)"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (apt-get install systemd-container)"
command -v ip >/dev/null || skip "no ip (apt-get install iproute2)"
command -v nsenter >/dev/null || skip "no nsenter (util-linux)"
command -v pgrep >/dev/null || skip "no pgrep (procps)"
DATA=/usr/share/datasets/fashion-mnist
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
    skip "no Fashion-MNIST at $DATA"

T0=$SECONDS
WORK=$(mktemp -d /tmp/gm-sd.$$.XXXXXX)
NS_A=gmsd-a-$$ NS_B=gmsd-b-$$
NET=10.231.$(($$ % 250)).
declare -A NSPAWN=() LEADER=()

cleanup() {
    local m p i
    for m in "${!NSPAWN[@]}"; do
        p=${NSPAWN[$m]}
        # a clean poweroff first (SIGRTMIN+4 to nspawn's container init: poweroff), then kill
        [ -n "${LEADER[$m]:-}" ] && kill -s SIGRTMIN+4 "${LEADER[$m]}" 2>/dev/null
        for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill "$p" 2>/dev/null
        for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    ip netns del "$NS_A" 2>/dev/null
    ip netns del "$NS_B" 2>/dev/null
    # nspawn's mounts live in its own mount namespace and went with it; nothing of ours is
    # mounted in this one.  Say so if that ever stops being true.
    if grep -q "$WORK" /proc/self/mounts; then echo "warning: mounts left under $WORK"; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

fail() {
    local m
    echo "FAIL: $*"
    for m in a b; do
        [ -n "${LEADER[$m]:-}" ] || continue
        echo "--- journal of gradmesh@lab on $m"
        in_m "$m" journalctl -u 'gradmesh@*' --no-pager -n 30 -o cat 2>/dev/null
    done
    for m in a b; do [ -e "$WORK/$m.console" ] && { echo "--- console $m"; tail -n 15 "$WORK/$m.console"; }; done
    exit 1
}
pass() { echo "ok: $* ($((SECONDS - T0)) s)"; }

# in_m M CMD...: runs CMD inside machine M (all its namespaces), as root, in the source tree,
# with a plain environment.  MAKEFLAGS passes through: `make install` may build in parallel.
in_m() {
    local m=$1; shift
    nsenter --all -t "${LEADER[$m]}" -- /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 ${MAKEFLAGS:+MAKEFLAGS="$MAKEFLAGS"} \
        /bin/bash -c 'cd /usr/src/gradmesh && eval "$1"' in_m "$*"
}

# --- the root, the copy of this tree, the network -------------------------------------------
sdroot_get
rc=$?
[ $rc -eq 77 ] && skip "no cached root and no debootstrap"
[ $rc -eq 0 ] || fail "could not build the Debian root"
pass "Debian 12 root $SDROOT"

# What a fresh clone has: the tracked files and new ones not ignored (no build outputs).
mkdir -p "$WORK/src"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$SRC" ls-files -z --cached --others --exclude-standard |
        (cd "$SRC" && xargs -0 cp --parents -a -t "$WORK/src" 2>/dev/null)
else # a release tarball: everything but what a build makes
    tar -C "$SRC" --exclude='./build*' --exclude=./gradmesh --exclude=./gradmesh-san -cf - . |
        tar -C "$WORK/src" -xf -
fi
[ -f "$WORK/src/Makefile" ] && [ ! -e "$WORK/src/build" ] || fail "copy of the tree"
# the job the README's `gradmesh submit job.ini` sends: small (one epoch of an MLP)
cat >"$WORK/src/job.ini" <<EOF
[job]
name   = readme-systemd
model  = mlp
epochs = 1
seed   = 1
[model]
hidden = 64
[data]
kind = idx
dir  = $DATA
[optim]
name  = adam
lr    = 0.002
global_batch = 256
EOF

ip netns add "$NS_A" && ip netns add "$NS_B" || skip "cannot make network namespaces"
ip -n "$NS_A" link add eth0 type veth peer name eth0 netns "$NS_B" || fail "veth"
ip -n "$NS_A" addr add "${NET}1/24" dev eth0 && ip -n "$NS_B" addr add "${NET}2/24" dev eth0 || fail "addresses"
for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up && ip -n "$ns" link set eth0 multicast on up || fail "links up"
done

# --- boot ----------------------------------------------------------------------------------
boot() {
    local m=$1 ns=$2 i p
    systemd-nspawn -b -D "$SDROOT" --volatile=overlay -M "gm$m-$$" --hostname="$m" \
        --register=no --keep-unit --network-namespace-path="/run/netns/$ns" --console=pipe \
        --bind="$WORK/src:/usr/src/gradmesh" --bind-ro="$DATA" \
        >"$WORK/$m.console" 2>&1 </dev/null &
    NSPAWN[$m]=$!
    # the container's PID 1: the process under nspawn named systemd
    for i in $(seq 200); do
        for p in $(pgrep -P "${NSPAWN[$m]}" 2>/dev/null) $(pgrep -P "$(pgrep -d, -P "${NSPAWN[$m]}" 2>/dev/null)" 2>/dev/null); do
            [ "$(cat /proc/$p/comm 2>/dev/null)" = systemd ] && { LEADER[$m]=$p; return 0; }
        done
        kill -0 "${NSPAWN[$m]}" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "${NSPAWN[$m]}" 2>/dev/null; then return 1; fi # running, no systemd under it
    if grep -qiE "operation not permitted|not supported|failed to (mount|create)" "$WORK/$m.console"; then
        cat "$WORK/$m.console"
        skip "systemd-nspawn cannot boot a machine here"
    fi
    return 1
}
boot a "$NS_A" || fail "machine a did not boot"
boot b "$NS_B" || fail "machine b did not boot"
for m in a b; do
    # PID 1's bus first (until it exists systemctl cannot even ask), then the boot's end
    for i in $(seq 600); do in_m "$m" test -S /run/systemd/private && break; sleep 0.1; done
    st=$(in_m "$m" timeout 90 systemctl is-system-running --wait 2>&1)
    case "$st" in running|degraded) ;; *) fail "machine $m: systemd says '$st'" ;; esac
    [ "$st" = degraded ] && in_m "$m" systemctl --failed --no-legend --plain | sed "s/^/  $m failed unit: /"
done
pass "two machines booted with systemd ($(in_m a 'systemctl --version | head -n 1'))"

# --- the README's block, verbatim -----------------------------------------------------------
python3 tests/systemd/readme_steps.py README.md >"$WORK/steps" || fail "README block"
TOKEN=
n=0
while IFS=$'\t' read -r m cmd; do
    [ "$m" = skip ] && { echo "  (skipped) $cmd"; continue; }
    run=$cmd
    if [[ "$cmd" == *gmtoken1_...* ]]; then
        [ -n "$TOKEN" ] || fail "the README joins before it creates a token"
        run=${cmd//gmtoken1_.../$TOKEN}
    fi
    if [[ "$cmd" == "gradmesh submit"* ]]; then
        # as a person would: the job once a sees b's link up (`gradmesh peers` shows it)
        for i in $(seq 150); do
            in_m a gradmesh status --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if sum(m["state"]=="up" for m in d["members"])==1 else 1)' && break
            sleep 0.2
        done
    fi
    echo "  [$m] $cmd"
    t=$SECONDS
    in_m "$m" "$run" >"$WORK/step.out" 2>&1; rc=$?
    [ $rc -eq 0 ] || { tail -n 30 "$WORK/step.out"; fail "README step on $m exited $rc: $cmd"; }
    echo "      ok, $((SECONDS - t)) s"
    case "$cmd" in
    "gradmesh token create"*) TOKEN=$(grep -o 'gmtoken1_[A-Za-z0-9_-]*' "$WORK/step.out" | head -n 1)
        [ -n "$TOKEN" ] || fail "token create printed no token" ;;
    "gradmesh submit"*) cp "$WORK/step.out" "$WORK/submit.out" ;;
    "systemctl enable --now"*)
        in_m "$m" systemctl is-active "${cmd##* }" >/dev/null || fail "${cmd##* } not active on $m" ;;
    esac
    n=$((n + 1))
done <"$WORK/steps"
pass "the README's $n commands ran as written on a and b"

grep -qi "accuracy" "$WORK/submit.out" || { cat "$WORK/submit.out"; fail "submit --follow shows no accuracy"; }
in_m a gradmesh jobs --json >"$WORK/jobs.json" || fail "jobs --json"
python3 - "$WORK/jobs.json" <<'EOF' || fail "the job: $(cat "$WORK/jobs.json")"
import json, sys
d = json.load(open(sys.argv[1]))
jobs = d["jobs"] if isinstance(d, dict) else d
j = jobs[-1]
assert j["state"] == "done", j
assert j.get("world") == 2, j
EOF
pass "the job ran on both services and is done: $(grep -i accuracy "$WORK/submit.out" | tail -n 1)"

# --- who owns what --------------------------------------------------------------------------
for m in a b; do
    bad=$(in_m "$m" "find /var/lib/gradmesh/lab ! -user gradmesh -printf '%p %u\n'")
    [ -z "$bad" ] || fail "on $m, files in the state directory not gradmesh's: $bad"
    in_m "$m" test -S /run/gradmesh/lab/control.sock || fail "no control socket /run/gradmesh/lab/control.sock on $m"
done
pass "the state directories are gradmesh's on both machines (init and join ran as root)"

# --- a second cluster on machine a: its own directories; its stop leaves lab's socket -------
in_m a gradmesh init --cluster lab2 --listen 0.0.0.0:7460 --metrics 127.0.0.1:9465 \
    >"$WORK/lab2.out" 2>&1 || { cat "$WORK/lab2.out"; fail "init lab2"; }
in_m a systemctl start gradmesh@lab2 || fail "start gradmesh@lab2"
in_m a test -S /run/gradmesh/lab2/control.sock || fail "lab2 has no socket of its own"
in_m a test -e /var/lib/gradmesh/lab2/node.key || fail "lab2 has no state directory of its own"
in_m a gradmesh status --config /etc/gradmesh/lab2.conf >/dev/null || fail "status lab2"
in_m a systemctl stop gradmesh@lab2 || fail "stop gradmesh@lab2"
in_m a test -S /run/gradmesh/lab/control.sock || fail "stopping gradmesh@lab2 removed lab's socket"
in_m a gradmesh status >/dev/null || fail "status of lab after gradmesh@lab2 stopped"
pass "gradmesh@lab2 beside gradmesh@lab: own state and runtime directories; its stop left lab's socket"

# --- a root-owned key: exit 77, named, retried; a chown fixes it ----------------------------
in_m b chown root:root /var/lib/gradmesh/lab/node.key
in_m b systemctl restart gradmesh@lab >"$WORK/restart.out" 2>&1 # fails (exit 77): wanted
for i in $(seq 100); do
    in_m b "journalctl -u gradmesh@lab -o cat --no-pager | grep -q 'cannot read /var/lib/gradmesh/lab/node.key'" && break
    sleep 0.2
done
in_m b "journalctl -u gradmesh@lab -o cat --no-pager" >"$WORK/b.journal"
grep -q "cannot read /var/lib/gradmesh/lab/node.key: Permission denied; it belongs to root:root (mode 600) and must be gradmesh:gradmesh's" "$WORK/b.journal" ||
    { tail -n 20 "$WORK/b.journal"; fail "no line naming node.key and its owner"; }
grep -q "status=77" "$WORK/b.journal" || in_m b "systemctl show gradmesh@lab -p ExecMainStatus" | grep -q "=77" ||
    { tail -n 20 "$WORK/b.journal"; fail "the service did not exit 77"; }
# not a configuration error: systemd schedules a restart (78 would leave it failed)
in_m b "systemctl show gradmesh@lab -p NRestarts --value" >"$WORK/nrestarts"
for i in $(seq 50); do
    [ "$(in_m b systemctl show gradmesh@lab -p NRestarts --value)" -ge 1 ] && break
    sleep 0.2
done
[ "$(in_m b systemctl show gradmesh@lab -p NRestarts --value)" -ge 1 ] || fail "systemd did not retry after exit 77"
in_m b chown gradmesh:gradmesh /var/lib/gradmesh/lab/node.key
in_m b systemctl reset-failed gradmesh@lab 2>/dev/null
in_m b systemctl start gradmesh@lab
for i in $(seq 100); do in_m b systemctl is-active -q gradmesh@lab && break; sleep 0.2; done
in_m b systemctl is-active -q gradmesh@lab || fail "gradmesh@lab on b not active after the chown"
pass "root-owned node.key: exit 77 naming the file and owner, restarted by systemd; active after the chown"

# --- the socket removed under a running agent -----------------------------------------------
in_m a rm /run/gradmesh/lab/control.sock
in_m a gradmesh status >"$WORK/gone.out" 2>&1 && fail "status answered without a socket"
grep -q "is running (pid [0-9]*) but does not answer at its control socket /run/gradmesh/lab/control.sock" "$WORK/gone.out" ||
    fail "socket gone: $(cat "$WORK/gone.out")"
in_m a systemctl restart gradmesh@lab || fail "restart lab on a"
in_m a gradmesh status >/dev/null || fail "status after the restart"
in_m a systemctl stop gradmesh@lab
in_m a gradmesh status >"$WORK/none.out" 2>&1
grep -q "no agent is running" "$WORK/none.out" || fail "stopped: $(cat "$WORK/none.out")"
pass "CLI: 'running but its socket is gone' vs 'no agent is running'"

echo "systemd test: $((SECONDS - T0)) s"
