"""tests/integration/notify_tools.py - a fake systemd for sd_notify.sh.

    notify_tools.py watch GM CONFIG LOG WATCHDOG_USEC

binds a unix datagram socket, runs `GM agent --config CONFIG` with NOTIFY_SOCKET and
WATCHDOG_USEC pointing at it (stderr to LOG), and checks what systemd would see: READY=1
(with a STATUS=), then WATCHDOG=1 at the cadence (every WATCHDOG_USEC/2, measured between
consecutive pings), then, after SIGTERM, STOPPING=1 and the process gone within 1 s with
exit 0.  Prints one line per finding; exit 0 when all hold.  Every wait has a deadline.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def main():
    gm, config, log, wd_usec = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    d = tempfile.mkdtemp(prefix="gm-notify.")
    path = os.path.join(d, "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC=str(wd_usec))
    env.pop("WATCHDOG_PID", None)
    with open(log, "ab") as lf:
        p = subprocess.Popen([gm, "agent", "--config", config], stderr=lf, env=env)
    msgs = []  # (time, message)

    def recv_until(pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            try:
                data = s.recv(4096).decode()
            except socket.timeout:
                break
            msgs.append((time.monotonic(), data))
            if pred(data):
                return data
        return None

    ok = True
    try:
        ready = recv_until(lambda m: "READY=1" in m.split("\n"), 10)
        if ready is None:
            print("FAIL: no READY=1 within 10 s; got %r" % [m for _, m in msgs])
            return 1
        status = [l for l in ready.split("\n") if l.startswith("STATUS=")]
        print("ok: READY=1 (%s)" % (status[0] if status else "no STATUS"))
        if not status:
            ok = False
        # the cadence: 8 pings after READY
        period = wd_usec / 2e6
        pings = []
        t_end = time.monotonic() + 8 * period + 2
        while len(pings) < 8 and time.monotonic() < t_end:
            m = recv_until(lambda m: "WATCHDOG=1" in m.split("\n"), t_end - time.monotonic())
            if m is None:
                break
            pings.append(msgs[-1][0])
        if len(pings) < 8:
            print("FAIL: %d WATCHDOG=1 in %.1f s, want 8 at %.0f ms" %
                  (len(pings), 8 * period + 2, period * 1e3))
            return 1
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        mean = sum(gaps) / len(gaps)
        print("ok: WATCHDOG=1 every %.0f ms on average (min %.0f, max %.0f; asked for %.0f)" %
              (mean * 1e3, min(gaps) * 1e3, max(gaps) * 1e3, period * 1e3))
        if not (0.7 * period <= mean <= 1.3 * period) or max(gaps) > 2 * period:
            print("FAIL: cadence off")
            ok = False
        if max(gaps) >= wd_usec / 1e6:
            print("FAIL: a gap reached the watchdog timeout")
            ok = False
        # stop
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        stopping = recv_until(lambda m: "STOPPING=1" in m.split("\n"), 1.0)
        if stopping is None:
            print("FAIL: no STOPPING=1 within 1 s of SIGTERM")
            ok = False
        else:
            print("ok: STOPPING=1 %.0f ms after SIGTERM" % ((msgs[-1][0] - t0) * 1e3))
        try:
            rc = p.wait(timeout=max(0.0, 1.0 - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            print("FAIL: agent still running 1 s after SIGTERM")
            p.kill()
            p.wait()
            return 1
        dt = time.monotonic() - t0
        print("ok: agent gone %.0f ms after SIGTERM, exit %d" % (dt * 1e3, rc))
        if rc != 0:
            ok = False
        return 0 if ok else 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        s.close()
        os.unlink(path)
        os.rmdir(d)


def stop_time():
    """notify_tools.py stoptime PID: SIGTERM, then ms until the process is gone (a child of
    the calling shell: gone = zombie or reaped)."""
    pid = int(sys.argv[2])
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    while time.monotonic() - t0 < 10:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except (FileNotFoundError, ProcessLookupError):  # gone; ESRCH while it is reaped
            break
        time.sleep(0.002)
    print("%.0f" % ((time.monotonic() - t0) * 1e3))


if __name__ == "__main__":
    sys.exit({"watch": main, "stoptime": stop_time}[sys.argv[1]]() or 0)
