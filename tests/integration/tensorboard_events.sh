#!/usr/bin/env bash
# tests/integration/tensorboard_events.sh - the event file of a `train --local` run, read by
# the real TensorBoard (PyPI `tensorboard`, its EventAccumulator): every scalar tag is there,
# per-step tags at steps 1..N exactly, evaluation tags at the end of each epoch, and the
# values equal the run summary (--summary-json) to float32 precision.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

need_fashion_mnist
python3 -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null ||
    { echo "no tensorboard for $(command -v python3) (pip install tensorboard)"; exit 77; }

epochs=2
[ -n "${GM_SAN:-}" ] && epochs=1 # ASan is ~4x slower; one epoch still has an evaluation
job_ini "$WORK/job.ini" tb-mlp job.epochs=$epochs job.seed=3 job.log_every=500 job.out="$WORK/tb-mlp.safetensors" \
    model.hidden=32 optim.name=sgd optim.lr=0.05 optim.batch=128 schedule.kind=cosine
"$GM" train --local "$WORK/job.ini" --summary-json "$WORK/summary.json" \
    --tensorboard "$WORK/tb" --no-progress 2>"$WORK/train.log" || fail "train exit $?"
ls "$WORK"/tb/events.out.tfevents.* >/dev/null 2>&1 || fail "no event file in $WORK/tb"
grep -q "event=tensorboard file=$WORK/tb/events.out.tfevents." "$WORK/train.log" || fail "no log line naming the file"

python3 - "$WORK/tb" "$WORK/summary.json" "$epochs" <<'PY' || fail "TensorBoard's reader disagrees"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

logdir, summary, epochs = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
ea = EventAccumulator(logdir, size_guidance={"scalars": 0})  # 0: keep every event
ea.Reload()
tags = set(ea.Tags()["scalars"])
step_tags = {"train/loss", "train/learning_rate", "train/samples_per_s",
             "step_time/compute_s", "step_time/collective_s", "step_time/optimizer_s",
             "shares/samples"}
eval_tags = {"test/accuracy_percent", "test/loss", "train/epoch_loss", "train/epoch_samples_per_s"}
sum_tags = {"summary/test_accuracy_percent", "summary/test_loss", "summary/train_loss",
            "summary/samples_per_s", "summary/wall_s", "summary/bytes_sent"}
missing = (step_tags | eval_tags | sum_tags) - tags
assert not missing, "missing tags: %s (have %s)" % (sorted(missing), sorted(tags))
extra = tags - (step_tags | eval_tags | sum_tags)
assert not extra, "unexpected tags: %s" % sorted(extra)

N = summary["steps"]
per_epoch = N // epochs
assert N > 0 and summary["epochs"] == epochs, summary
for t in step_tags:
    steps = [e.step for e in ea.Scalars(t)]
    assert steps == list(range(1, N + 1)), "%s: steps %s..%s, %d of them, want 1..%d" % (
        t, steps[:1], steps[-1:], len(steps), N)
for t in eval_tags:
    steps = [e.step for e in ea.Scalars(t)]
    assert steps == [per_epoch * (i + 1) for i in range(epochs)], "%s at steps %s" % (t, steps)
for t in sum_tags:
    steps = [e.step for e in ea.Scalars(t)]
    assert steps == [N], "%s at steps %s" % (t, steps)

def last(t):
    return ea.Scalars(t)[-1].value

# alone, the one rank's share of every step is the whole batch ([optim] batch = 128)
shares = {e.value for e in ea.Scalars("shares/samples")}
assert shares == {128.0}, "shares/samples: %s" % sorted(shares)

def same(a, b, what):
    f = float(__import__("numpy").float32(b))  # the file holds float32
    assert math.isclose(a, f, rel_tol=1e-6, abs_tol=1e-9), "%s: event %r vs summary %r" % (what, a, b)

same(last("test/accuracy_percent"), summary["test_accuracy"], "test accuracy")
same(last("summary/test_accuracy_percent"), summary["test_accuracy"], "summary accuracy")
same(last("test/loss"), summary["test_loss"], "test loss")
same(last("summary/test_loss"), summary["test_loss"], "summary test loss")
same(last("train/epoch_loss"), summary["train_loss"], "epoch loss")
same(last("summary/train_loss"), summary["train_loss"], "summary train loss")
same(last("summary/samples_per_s"), summary["samples_per_s"], "samples/s")
same(last("summary/wall_s"), summary["wall_s"], "wall_s")
same(last("summary/bytes_sent"), summary["bytes_sent"], "bytes_sent")
# plausible dynamics: the loss falls, the cosine schedule decays, a step takes time
loss = [e.value for e in ea.Scalars("train/loss")]
assert sum(loss[:50]) / 50 > sum(loss[-50:]) / 50, "loss did not fall"
lr = [e.value for e in ea.Scalars("train/learning_rate")]
assert math.isclose(lr[0], 0.05, rel_tol=1e-6) and lr[-1] < lr[0] / 10, (lr[0], lr[-1])
assert all(e.value > 0 for e in ea.Scalars("step_time/compute_s"))
# one process has no collective: the phase is empty.  A preempted step may still read
# a millisecond or more on a loaded machine, so the median is checked, not every step.
coll = sorted(e.value for e in ea.Scalars("step_time/collective_s"))
assert coll and all(v >= 0 for v in coll) and coll[len(coll) // 2] < 1e-3, coll[len(coll) // 2:]
print("ok: %d tags, %d steps, accuracy %.2f%% in the events = summary" %
      (len(tags), N, last("test/accuracy_percent")))
PY
pass "TensorBoard reads the run: tags, steps and values match the summary"
