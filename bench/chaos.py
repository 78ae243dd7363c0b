#!/usr/bin/env python3
"""bench/chaos.py - the driver of bench/chaos.sh (read that first): runs one job undisturbed and
once more under a disturbance on a running 4-agent cluster, follows every agent's log with a
timestamp per line, and prints what the job lost.

  chaos.py MODE GM AGENTS JOBFILE OUTJSON [SEED]
    MODE    kill | freeze-member | freeze-chief | partition
    AGENTS  a file of lines "NAME CONF LOG NETNS PID" (NETNS "-": none), agents already running
    JOBFILE the job (its name is suffixed -ref for the undisturbed run, so other checkpoints)

Figures (one disturbed run):
  completed   the job ended done with every step
  accuracy    its test accuracy against the undisturbed run's
  goodput     undisturbed wall / disturbed wall (submit to the job's end on its coordinator;
              the undisturbed job runs before and after the disturbed one: their mean)
  recomputed  steps rank 0 took more than once (every step is logged, log_every = 1: lines
              `event=train step=S` on any agent, minus the distinct S)
  recovery    per failure: from the disturbance to the first step the survivors take in a
              group formed after it
  detect      per failure: from the disturbance to the first survivor's link-down naming it
  chiefs      (term, chief) pairs elected during the run; a term with two chiefs is an error
The disturbances: kill: every PERIOD s (20) one agent drawn at random (the chief included) gets
SIGKILL and is restarted DOWN s (4) later; freeze-member / freeze-chief: at START s (10) a member
that is not the chief / the chief gets SIGSTOP, and SIGCONT FREEZE s (20) later; partition: at
START s the eth0 of a member that is not the chief goes down in its namespace for FREEZE s.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

PERIOD = float(os.environ.get("PERIOD", 20))
DOWN = float(os.environ.get("DOWN", 4))
START = float(os.environ.get("START", 10))
FREEZE = float(os.environ.get("FREEZE", 20))
JOB_TIMEOUT = float(os.environ.get("JOB_TIMEOUT", 900))
KEEP = int(os.environ.get("CHECKPOINT_KEEP", 3))  # the job's checkpoint_keep (the default)
AGENTS = []


class Agent:
    def __init__(self, name, conf, log, ns, pid):
        self.name, self.conf, self.log, self.ns, self.pid = name, conf, log, ns, int(pid)
        self.proc = None  # a restart of ours
        self.stopped = False


class Logs:
    """Follows every agent's log; each new line gets the time it was seen (50 ms polls)."""

    def __init__(self, agents):
        self.agents = agents
        self.lines = []  # (t, name, line)
        self.pos = {a.name: os.path.getsize(a.log) for a in agents}
        self.lock = threading.Lock()
        self.done = False
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.done:
            for a in self.agents:
                try:
                    with open(a.log, "rb") as f:
                        f.seek(self.pos[a.name])
                        data = f.read()
                except OSError:
                    continue
                if not data:
                    continue
                cut = data.rfind(b"\n") + 1
                self.pos[a.name] += cut
                t = time.time()
                with self.lock:
                    for ln in data[:cut].decode(errors="replace").splitlines():
                        self.lines.append((t, a.name, ln))
            time.sleep(0.05)

    def since(self, t0, t1=None):
        with self.lock:
            return [x for x in self.lines if x[0] >= t0 and (t1 is None or x[0] <= t1)]


def gm(gmbin, a, *args, timeout=20):
    try:
        r = subprocess.run([gmbin, *args, "--config", a.conf], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else None


def jobs_of(gmbin, a):
    out = gm(gmbin, a, "jobs", "--json", timeout=5)
    try:
        return {j["id"]: j for j in json.loads(out)["jobs"]} if out else {}
    except (ValueError, KeyError):
        return {}


def chief_of(gmbin, a):
    out = gm(gmbin, a, "members", "--json", timeout=5)
    try:
        return json.loads(out)["chief"] if out else None
    except (ValueError, KeyError):
        return None


def run_job(gmbin, agents, jobfile, on_start=None, stop=None):
    """Submits jobfile on the chief, returns (info, t_submit, t_end)."""
    chief = None
    while chief is None:
        for a in agents:
            if not a.stopped:
                c = chief_of(gmbin, a)
                if c:
                    chief = next(x for x in agents if x.name == c)
                    break
        time.sleep(0.2)
    t0 = time.time()
    out = gm(gmbin, chief, "submit", jobfile, timeout=60)
    m = re.search(r"^job ([0-9a-f]+) submitted", out or "", re.M)
    if not m:
        raise SystemExit("submit failed on %s: %r" % (chief.name, out))
    jid = m.group(1)
    th = None
    if on_start is not None:
        th = threading.Thread(target=on_start, args=(t0,), daemon=True)
        th.start()
    info = None
    while time.time() - t0 < JOB_TIMEOUT:
        for a in agents:
            if a.stopped:
                continue
            j = jobs_of(gmbin, a).get(jid)
            if j and j.get("coordinator") == a.name and j["state"] not in ("running", "checking", "paused"):
                info = j
                break
        if info is not None:
            break
        time.sleep(0.25)
    t1 = time.time()
    if th is not None:  # the disturbances end with the job (an agent killed is restarted)
        stop.set()
        th.join()
    return jid, info, t0, t1


def restart(gmbin, a):
    cmd = [gmbin, "agent", "--config", a.conf]
    if a.ns != "-":
        cmd = ["ip", "netns", "exec", a.ns] + cmd
    a.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(a.log, "ab"))
    a.pid = a.proc.pid
    a.stopped = False


def main():
    mode, gmbin, agents_file, jobfile, outjson = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    rng = random.Random(seed)
    agents = [Agent(*ln.split()) for ln in open(agents_file) if ln.strip()]
    AGENTS.extend(agents)
    logs = Logs(agents)
    events = []  # (t, kind, name)
    stop = threading.Event()

    def target(kind):
        c = chief_of(gmbin, agents[0]) or chief_of(gmbin, agents[1])
        if kind == "chief":
            return next(a for a in agents if a.name == c)
        return rng.choice([a for a in agents if a.name != c])

    def disturb(t0):
        if mode == "kill":
            k = 1
            while not stop.is_set():
                if stop.wait(max(0, t0 + k * PERIOD - time.time())):
                    return
                a = rng.choice(agents)
                os.kill(a.pid, signal.SIGKILL)
                if a.proc is not None:
                    a.proc.wait()
                a.stopped = True
                events.append((time.time(), "kill", a.name))
                time.sleep(DOWN)
                restart(gmbin, a)
                events.append((time.time(), "restart", a.name))
                k += 1
            return
        if stop.wait(max(0, t0 + START - time.time())):
            return
        a = target("chief" if mode == "freeze-chief" else "member")
        if mode == "partition":
            subprocess.run(["ip", "-n", a.ns, "link", "set", "eth0", "down"], check=True)
        else:
            os.kill(a.pid, signal.SIGSTOP)
        a.stopped = True
        events.append((time.time(), mode, a.name))
        stop.wait(FREEZE)
        if mode == "partition":
            subprocess.run(["ip", "-n", a.ns, "link", "set", "eth0", "up"], check=True)
        else:
            os.kill(a.pid, signal.SIGCONT)
        a.stopped = False
        events.append((time.time(), "resume", a.name))

    base = open(jobfile).read()
    jobname = re.search(r"^name = (.*)$", base, re.M).group(1).strip()
    ref = os.path.join(os.path.dirname(outjson), "chaos-ref.ini")
    ref2 = ref.replace("-ref.ini", "-ref2.ini")  # another name: its own checkpoints, no resume
    with open(ref, "w") as f:
        f.write(re.sub(r"^name = (.*)$", r"name = \1-ref", base, count=1, flags=re.M))
    with open(ref2, "w") as f:
        f.write(re.sub(r"^name = (.*)$", r"name = \1-ref2", base, count=1, flags=re.M))
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        rid, rinfo, r0, r1 = run_job(gmbin, agents, ref)
        did, dinfo, d0, d1 = run_job(gmbin, agents, jobfile, disturb, stop)
        time.sleep(DOWN + 1)  # an agent killed last is back and linked
        # the undisturbed run again (its own job id, same training): load on a shared machine
        # drifts, so goodput is against the mean of the runs before and after
        rid2, rinfo2, q0, q1 = run_job(gmbin, agents, ref2)
    finally:
        stop.set()
        for a in agents:  # nothing stays frozen or cut off
            if a.ns != "-":
                subprocess.run(["ip", "-n", a.ns, "link", "set", "eth0", "up"], check=False)
            try:
                os.kill(a.pid, signal.SIGCONT)
            except OSError:
                pass
    load1 = open("/proc/loadavg").read().split()[:3]
    time.sleep(0.5)
    logs.done = True
    lines = logs.since(d0, d1 + 0.5)

    def ckpt_audit():
        """No committed checkpoint lost or corrupt: every checkpoint of the disturbed job that a
        log says was written (`event=checkpoint`, its writer) or replicated
        (`event=checkpoint-replicated peer=X`) and that is among the newest KEEP steps written
        (older ones are pruned by design) must be listed `ok` with the same sha256 on that
        node by `gradmesh checkpoint list --json`, which verifies each file against its
        .sha256; any `refused` (corrupt, truncated) entry of the job on any node is counted."""
        claims = []  # (node, step, sha256)
        for _, n, ln in logs.since(d0, q0):  # up to the next job: late replications too
            m = re.search(r"event=checkpoint step=(\d+) .*sha256=([0-9a-f]{64})", ln)
            if m:
                claims.append((n, int(m.group(1)), m.group(2)))
            m = re.search(r"event=checkpoint-replicated peer=(\S+) key=\S+ step=(\d+) sha256=([0-9a-f]{64})", ln)
            if m:
                claims.append((m.group(1), int(m.group(2)), m.group(3)))
        newest = sorted({s for _, s, _ in claims})[-KEEP:]
        listed, refused, missing = {}, 0, []
        for a in agents:
            out = gm(gmbin, a, "checkpoint", "list", "--json", timeout=30)
            try:
                items = json.loads(out) if out else None
            except ValueError:
                items = None
            if items is None:
                missing.append("%s: no list" % a.name)
                continue
            for it in items:
                if it.get("job") != jobname:
                    continue
                if it["state"] == "refused":
                    refused += 1
                elif it["state"] == "ok":
                    listed[(a.name, it["step"], it["sha256"])] = True
        checked = sorted({c for c in claims if c[1] in newest})
        missing += ["%s step %d" % (n, s) for n, s, h in checked if (n, s, h) not in listed]
        return {"newest_steps": newest, "checked": len(checked), "lost": missing,
                "refused": refused}

    def stalled(t0, t1):
        """Seconds in gaps of more than 1 s between steps (rank 0 logs each): the time
        training stood still, which the machine's load alone also causes."""
        ts = [x[0] for x in logs.since(t0, t1) if "event=train step=" in x[2]]
        return sum(b - a for a, b in zip(ts, ts[1:]) if b - a > 1.0)
    steps = [int(m.group(1)) for _, _, ln in lines for m in [re.search(r"event=train step=(\d+) ", ln)] if m]
    failures = [e for e in events if e[1] not in ("restart", "resume")]
    detect, recover = [], []
    for t, kind, name in failures:
        later = [x for x in lines if x[0] >= t and x[1] != name]
        d = next((x[0] - t for x in later if ("event=link-down peer=%s " % name) in x[2]), None)
        detect.append(d)
        g = next((x[0] for x in later if "event=group generation=" in x[2]), None)
        s = None
        if g is not None:
            s = next((x[0] - t for x in later if x[0] >= g and "event=train step=" in x[2]), None)
        recover.append(s)
    chiefs = set()  # every agent's whole log: the first chief was elected before the runs
    for a in agents:
        for ln in open(a.log, errors="replace"):
            m = re.search(r"event=chief-elected node=(\S+) term=(\d+)", ln)
            if m:
                chiefs.add((int(m.group(2)), m.group(1)))
    chiefs = sorted(chiefs)
    elect = [int(m.group(1)) for a in agents for ln in open(a.log, errors="replace")
             for m in [re.search(r"event=chief-election-timeout ms=(\d+)", ln)] if m]
    terms = [t for t, _ in chiefs]
    total = rinfo["total_steps"] if rinfo and "total_steps" in rinfo else None
    done = bool(dinfo and dinfo["state"] == "done")
    res = {
        "mode": mode, "seed": seed, "load_before": load0, "load_after": load1,
        "ref": {"id": rid, "state": rinfo and rinfo["state"], "wall_s": r1 - r0,
                "wall_s_after": q1 - q0, "accuracy_after": rinfo2 and (rinfo2.get("summary") or {}).get("test_accuracy"),
                "accuracy": rinfo and (rinfo.get("summary") or {}).get("test_accuracy")},
        "run": {"id": did, "state": dinfo and dinfo["state"], "wall_s": d1 - d0,
                "error": dinfo and dinfo.get("error"),
                "accuracy": dinfo and (dinfo.get("summary") or {}).get("test_accuracy"),
                "steps": dinfo and (dinfo.get("summary") or {}).get("steps")},
        "completed": done, "goodput": ((r1 - r0) + (q1 - q0)) / 2 / (d1 - d0),
        "recomputed": len(steps) - len(set(steps)), "total_steps": total,
        "stalled_s": {"ref_before": round(stalled(r0, r1), 1), "run": round(stalled(d0, d1), 1),
                      "ref_after": round(stalled(q0, q1), 1)},
        "failures": [{"at_s": round(t - d0, 1), "kind": k, "node": n,
                      "detect_s": None if d is None else round(d, 2),
                      "recover_s": None if s is None else round(s, 2)}
                     for (t, k, n), d, s in zip(failures, detect, recover)],
        "checkpoints": ckpt_audit(),
        "chiefs": chiefs, "one_chief_per_term": len(terms) == len(set(terms)),
        "election_timeout_max_ms": max(elect) if elect else 1000,
        # where the time goes: the disturbances and what the agents said about groups and links
        "timeline": [[round(t - d0, 2), n, ln[:160]] for t, n, ln in lines if re.search(
            r"event=(group |job-group |link-silent|link-down|link-up|chief-elected|job-takeover|"
            r"job-member-quiet|agent-stalled|job-group-fenced|job-paused|job-coordinator-new|"
            r"job-offer|done )", ln)] + [[round(t - d0, 2), n, k] for t, k, n in events],
    }
    res["timeline"].sort(key=lambda x: x[0])
    json.dump(res, open(outjson, "w"), indent=1)
    acc_r, acc_d = res["ref"]["accuracy"], res["run"]["accuracy"]
    print("mode=%s seed=%d completed=%s state=%s%s" % (
        mode, seed, "yes" if done else "no", res["run"]["state"],
        "" if done else " error=%r" % res["run"]["error"]))
    print("  accuracy %s%% vs %s%% undisturbed (%s points)" % (
        acc_d, acc_r, "%+.2f" % (acc_d - acc_r) if acc_d is not None and acc_r is not None else "?"))
    print("  goodput %.3f (undisturbed %.1f s before and %.1f s after, disturbed %.1f s)" % (
        res["goodput"], r1 - r0, q1 - q0, d1 - d0))
    print("  steps recomputed %d" % res["recomputed"])
    print("  training stood still (gaps > 1 s between steps) %.1f s, undisturbed %.1f s and %.1f s" % (
        res["stalled_s"]["run"], res["stalled_s"]["ref_before"], res["stalled_s"]["ref_after"]))
    for f in res["failures"]:
        print("  %s %s at %.1f s: detected after %s s, survivors' next step after %s s" % (
            f["kind"], f["node"], f["at_s"], f["detect_s"], f["recover_s"]))
    ck = res["checkpoints"]
    print("  checkpoints: %d committed copies of steps %s checked on their nodes, lost %s, corrupt %d" % (
        ck["checked"], ",".join(map(str, ck["newest_steps"])), ", ".join(ck["lost"]) or "none",
        ck["refused"]))
    print("  chiefs seen %s (one per term: %s)" % (
        " ".join("%d:%s" % c for c in chiefs), "yes" if res["one_chief_per_term"] else "NO"))
    print("  election timeout at most %d ms (any agent, whole run)" % res["election_timeout_max_ms"])
    print("  load %s before, %s after" % (" ".join(load0), " ".join(load1)))


if __name__ == "__main__":
    try:
        main()
    finally:
        for a in AGENTS:  # the agents restarted here are ours to stop (chaos.sh stops its own)
            if a.proc is not None and a.proc.poll() is None:
                os.kill(a.proc.pid, signal.SIGCONT)
                a.proc.terminate()
                try:
                    a.proc.wait(30)
                except subprocess.TimeoutExpired:
                    a.proc.kill()
                    a.proc.wait()
