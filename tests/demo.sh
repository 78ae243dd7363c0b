#!/usr/bin/env bash
# make demo: real distributed training on loopback.  Three agents, each with
# its own config and state directory (init, token create, two joins), link
# up over mutual TLS; `gradmesh submit --follow` trains LeNet-5 on
# Fashion-MNIST for 2 epochs across all three (synchronous data-parallel,
# global batch 192), shows live progress, the final test accuracy and where
# the weights are; an independent NumPy forward pass checks the weights; then
# all three agents stop cleanly.  Everything lives under runs/demo/.
#
#   alpha (init, coordinator, rank 0) --TLS-- beta (rank 1)
#        \                                    /
#         +--------------TLS------- gamma (rank 2)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
out=$PWD/runs/demo
rm -rf "$out"
mkdir -p "$out"
pids=()
stop() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
until_ok() { # until_ok DESC CMD...: polls for up to 20 s
    local desc=$1 i; shift
    for i in $(seq 400); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "demo: timed out waiting for $desc (logs in $out)" >&2; exit 1
}
up() { "$bin" status --json --config "$out/$1.conf" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if sum(m["state"]=="up" for m in d["members"])==2 else 1)'; }
agent() {
    "$bin" agent --config "$out/$1.conf" 2>>"$out/$1.log" &
    pids+=($!)
    until_ok "agent $1" "$bin" status --config "$out/$1.conf"
}

echo "== three agents on loopback: init, token create, join, join"
"$bin" init --metrics off --cluster demo --node alpha --config "$out/alpha.conf" --state "$out/alpha" \
    --listen 127.0.0.1:"$(port)" --multicast off
agent alpha
for n in beta gamma; do
    tok=$("$bin" token create --config "$out/alpha.conf")
    "$bin" join --metrics off "$tok" --node $n --peer "$(sed -n '/^\[node\]/,/^\[/s/^listen *= *//p' "$out/alpha.conf")" \
        --config "$out/$n.conf" --state "$out/$n" --listen 127.0.0.1:"$(port)" --multicast off
    agent $n
done
for n in alpha beta gamma; do until_ok "$n's links" up $n; done
"$bin" peers --config "$out/alpha.conf"

echo
echo "== gradmesh submit --follow: LeNet-5, Fashion-MNIST, 2 epochs, 3 ranks"
sed -e 's/^epochs .*/epochs  = 2/' -e '/^out /d' -e 's/^batch .*/global_batch = 192 ; split over the agents/' \
    -e 's/^lr .*/lr    = 0.003 ; 3x the one-machine lr for a 3x larger global batch/' \
    docs/jobs/fmnist-lenet5.ini >"$out/job.ini"
# fp32 every step, so that the accuracy is the same on every run (README quotes it): auto, the
# default, may move the all-reduce to fp16 mid-run when the agents measure that it slows their
# trainers (three agents on two cores do), at a step that depends on the machine's load
printf '[comm]\ncodec = fp32\n' >>"$out/job.ini"
"$bin" submit "$out/job.ini" --follow --config "$out/alpha.conf" | tee "$out/submit.out"
weights=$(sed -n 's/^weights: //p' "$out/submit.out")

echo
echo "== the weights in Python (safetensors + NumPy forward pass)"
python3 tests/integration/eval_checkpoint.py "$weights" /usr/share/datasets/fashion-mnist

echo
echo "== stopping the agents"
stop
pids=()
echo "demo: done (configs, state and logs under $out)"
