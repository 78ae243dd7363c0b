#!/usr/bin/env python3
"""tests/integration/netns_tools.py - tiny traffic tools for the namespace tests.

Run inside a namespace with nb_exec / nb_spawn (tests/integration/netns.bash).
Standard library only.  Each command prints one line of key=value results on
success and exits 0; on a timeout or error it says why on stderr and exits 1.

  mcast-recv GROUP PORT IFADDR TIMEOUT   join GROUP on the interface with
        address IFADDR, wait for one datagram; prints src= ttl= data=
  mcast-send GROUP PORT IFADDR TTL DATA COUNT INTERVAL
        send DATA to GROUP:PORT out of IFADDR's interface COUNT times
  tcp-sink ADDR PORT TIMEOUT             accept one connection, read to EOF;
        prints bytes= seconds= mbit= (first byte to last byte)
  tcp-source ADDR PORT NBYTES            connect, send NBYTES, close
"""
import socket
import struct
import sys
import time

# Linux values; Python only names IP_RECVTTL from 3.12 on.
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL = getattr(socket, "IP_TTL", 2)


def mcast_recv(group, port, ifaddr, timeout):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((group, int(port)))  # only this group's datagrams, not other traffic to PORT
    mreq = socket.inet_aton(group) + socket.inet_aton(ifaddr)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
    s.settimeout(float(timeout))
    try:
        data, anc, _, src = s.recvmsg(2048, socket.CMSG_SPACE(4))
    except socket.timeout:
        sys.exit(f"mcast-recv: nothing on {group}:{port} via {ifaddr} in {timeout}s")
    ttl = -1
    for level, typ, val in anc:
        if level == socket.IPPROTO_IP and typ == IP_TTL:
            ttl = struct.unpack("i", val[:4])[0]
    print(f"src={src[0]} ttl={ttl} data={data.decode(errors='replace')}", flush=True)


def mcast_send(group, port, ifaddr, ttl, data, count, interval):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, int(ttl))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ifaddr))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    for i in range(int(count)):
        if i:
            time.sleep(float(interval))
        s.sendto(data.encode(), (group, int(port)))
    print(f"sent={count}", flush=True)


def tcp_sink(addr, port, timeout):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, int(port)))
    ls.listen(1)
    ls.settimeout(float(timeout))
    try:
        c, _ = ls.accept()
    except socket.timeout:
        sys.exit(f"tcp-sink: no connection on {addr}:{port} in {timeout}s")
    c.settimeout(float(timeout))
    total = first_len = 0
    t_first = t_last = None
    buf = bytearray(1 << 16)
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        t_last = time.monotonic()
        if t_first is None:
            t_first, first_len = t_last, n
        total += n
    if t_first is None or t_last == t_first:
        sys.exit(f"tcp-sink: too little data ({total} bytes)")
    # The first read's bytes arrived at t_first: the rate is what came after it.
    secs = t_last - t_first
    mbit = (total - first_len) * 8 / secs / 1e6
    print(f"bytes={total} seconds={secs:.3f} mbit={mbit:.2f}", flush=True)


def tcp_source(addr, port, nbytes):
    s = socket.create_connection((addr, int(port)), timeout=30)
    chunk = b"\xa5" * (1 << 16)
    left = int(nbytes)
    while left > 0:
        n = min(left, len(chunk))
        s.sendall(chunk[:n])
        left -= n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the sink closes after EOF: every byte was received
    s.close()


CMDS = {
    "mcast-recv": (mcast_recv, 4),
    "mcast-send": (mcast_send, 7),
    "tcp-sink": (tcp_sink, 3),
    "tcp-source": (tcp_source, 3),
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CMDS or len(sys.argv) - 2 != CMDS[sys.argv[1]][1]:
        sys.exit(__doc__)
    CMDS[sys.argv[1]][0](*sys.argv[2:])
