#!/usr/bin/env python3
"""tests/integration/disc_tools.py - checks and packet tools for the discovery scenarios.

Standard library only.  Exit 0 when the check holds, 1 otherwise (with the
reason on stderr), so shell loops can poll them.

  links CLASS NODE... < status.json
        every NODE is listed, state up, link CLASS, and has an RTT
  down NODE... < status.json        every NODE is absent or not up
  absent NODE < status.json         NODE is not listed at all
  field NODE KEY < status.json      prints member NODE's KEY (e.g. throughput_mbps)
  capture GROUP PORT IFADDR SRC OUT TIMEOUT
        joins GROUP on IFADDR's interface, saves the first MEMBER beacon
        ("GMB1", kind 1) whose source address is SRC into OUT
  send GROUP PORT IFADDR IN [FLIP]
        sends the datagram in file IN to GROUP:PORT (TTL 1) out of IFADDR's
        interface; with FLIP, byte FLIP is xor-ed with 0x40 first
"""
import json
import socket
import sys
import time


def status():
    return json.load(sys.stdin)


def member(st, node):
    for m in st.get("members", []):
        if m.get("node") == node:
            return m
    return None


def cmd_links(cls, *nodes):
    st = status()
    for n in nodes:
        m = member(st, n)
        if m is None:
            sys.exit(f"{st.get('node')}: {n} not listed")
        if m.get("state") != "up":
            sys.exit(f"{st.get('node')}: {n} is {m.get('state')}")
        if m.get("link") != cls:
            sys.exit(f"{st.get('node')}: {n} is {m.get('link')}, want {cls}")
        if not isinstance(m.get("rtt_ms"), (int, float)) or m["rtt_ms"] <= 0:
            sys.exit(f"{st.get('node')}: {n} has no RTT yet ({m.get('rtt_ms')})")


def cmd_down(*nodes):
    st = status()
    for n in nodes:
        m = member(st, n)
        if m is not None and m.get("state") == "up":
            sys.exit(f"{st.get('node')}: {n} is up")


def cmd_absent(node):
    if member(status(), node) is not None:
        sys.exit(f"{node} is listed")


def cmd_field(node, key):
    m = member(status(), node)
    if m is None or m.get(key) is None:
        sys.exit(f"{node}: no {key}")
    print(m[key])


def mcast_socket(group, port, ifaddr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((group, int(port)))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(group) + socket.inet_aton(ifaddr))
    return s


def cmd_capture(group, port, ifaddr, src, out, timeout):
    s = mcast_socket(group, port, ifaddr)
    deadline = time.monotonic() + float(timeout)
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            data, addr = s.recvfrom(2048)
        except socket.timeout:
            break
        if addr[0] == src and data[:5] == b"GMB1\x01":
            with open(out, "wb") as f:
                f.write(data)
            print(f"captured bytes={len(data)} from={addr[0]}")
            return
    sys.exit(f"no member beacon from {src} on {group}:{port} in {timeout}s")


def cmd_send(group, port, ifaddr, path, flip=None):
    data = bytearray(open(path, "rb").read())
    if flip is not None:
        data[int(flip)] ^= 0x40
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ifaddr))
    s.sendto(bytes(data), (group, int(port)))


COMMANDS = {"links": cmd_links, "down": cmd_down, "absent": cmd_absent, "field": cmd_field,
            "capture": cmd_capture, "send": cmd_send}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
