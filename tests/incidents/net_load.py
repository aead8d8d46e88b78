#!/usr/bin/env python3
"""The load of the TCP and network-receive incidents (net_incidents.py),
one subcommand each, run as its own process so the test can put it in a
network namespace and on one CPU, and stop it by PID. Every subcommand runs
until it is killed.

  sink ADDR PORT              accepts connections and reads and discards
  stream ADDR PORT RATE       one connection, RATE bytes/s in 16 KiB writes
  listener ADDR PORT BACKLOG  listens with that backlog, accepts and holds
  syn-flood DST PORT RATE     RATE SYNs/s of 54-byte frames from random
                              sources in 10.99.0.0/16 (raw socket)
  connect-churn ADDR PORT RATE   RATE connections/s: connect, write, close
  hold ADDR PORT N RATE STATS    N connections held, then RATE attempts/s
                              more; writes "held H failed F" (EADDRNOTAVAIL)
                              to the file STATS after each; reset on exit
  nagle-server ADDR PORT      reads 200-byte requests, answers 100 bytes
  nagle-client ADDR PORT NODELAY STATS   writes each request in two writes
                              of 100 bytes, reads the answer; writes
                              "requests N mean_ms M" to STATS every second
  udp-flood ADDR PORT RATE    1-byte datagrams, RATE/s (0: as fast as it can)
"""

import os
import random
import socket
import struct
import sys
import threading
import time


def paced(rate):
    """Yields `rate` times per second, on a schedule (no drift)."""
    start = time.monotonic()
    n = 0
    while True:
        n += 1
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield n


def write_stats(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def sink(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(64)

    def drain(c):
        while c.recv(1 << 16):
            pass
        c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()


def stream(addr, port, rate):
    c = socket.create_connection((addr, int(port)))
    chunk = b"x" * (16 << 10)
    for _ in paced(float(rate) / len(chunk)):
        c.sendall(chunk)


def listener(addr, port, backlog):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(int(backlog))
    held = []
    while True:
        held.append(s.accept()[0])


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def syn(src, dst, sport, dport):
    """An IPv4 + TCP SYN without options: 40 bytes, 54 on the wire."""
    seq = random.getrandbits(32)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, random.getrandbits(16), 0, 64, socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return ip + tcp


def syn_flood(dst, port, rate):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    d = socket.inet_aton(dst)
    # Made before the flood starts, so the rate is the kernel's, not
    # Python's packet building: each a new (source, port), a new handshake.
    packets = [syn(struct.pack("!BBH", 10, 99, random.getrandbits(16)), d, random.randint(1024, 65535), int(port))
               for _ in range(60000)]
    # A hundred bursts a second: Python cannot sleep 12 600 times a second.
    burst = max(1, int(float(rate) / 100))
    for n in paced(float(rate) / burst):
        for k in range(burst):
            try:
                s.sendto(packets[(n * burst + k) % len(packets)], (dst, 0))
            except OSError:
                pass


def connect_churn(addr, port, rate):
    for _ in paced(float(rate)):
        try:
            c = socket.create_connection((addr, int(port)), timeout=5)
            c.sendall(b"hello")
            c.close()
        except OSError:
            pass


def connection(addr, port):
    """A connection that is reset when this process is killed, so its port
    is free at once instead of after 60 s in TIME_WAIT."""
    c = socket.create_connection((addr, int(port)))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return c


def hold(addr, port, n, rate, stats):
    held, failed = [], 0
    for _ in range(int(n)):
        held.append(connection(addr, port))
    write_stats(stats, f"held {len(held)} failed {failed}\n")
    if float(rate) == 0:
        while True:
            time.sleep(3600)
    for _ in paced(float(rate)):
        try:
            held.append(connection(addr, port))
        except OSError as e:
            if e.errno != 99:  # EADDRNOTAVAIL
                raise
            failed += 1
        write_stats(stats, f"held {len(held)} failed {failed}\n")


def nagle_server(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(8)

    def serve(c):
        while True:
            buf = b""
            while len(buf) < 200:
                d = c.recv(200 - len(buf))
                if not d:
                    return
                buf += d
            c.sendall(b"r" * 100)

    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def nagle_client(addr, port, nodelay, stats):
    c = socket.create_connection((addr, int(port)))
    if nodelay == "1":
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n, spent, last = 0, 0.0, time.monotonic()
    while True:
        t = time.monotonic()
        c.sendall(b"a" * 100)
        c.sendall(b"b" * 100)
        got = 0
        while got < 100:
            got += len(c.recv(100 - got))
        n += 1
        spent += time.monotonic() - t
        # A few thousand requests a second with TCP_NODELAY: pace them so
        # the quiet case costs little CPU.
        if nodelay == "1":
            time.sleep(0.005)
        if time.monotonic() - last >= 1:
            write_stats(stats, f"requests {n} mean_ms {1000 * spent / n:.2f}\n")
            last = time.monotonic()


def udp_flood(addr, port, rate):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    to = (addr, int(port))
    if float(rate) == 0:
        while True:
            s.sendto(b"x", to)
    for _ in paced(float(rate)):
        s.sendto(b"x", to)


COMMANDS = {
    "sink": sink,
    "stream": stream,
    "listener": listener,
    "syn-flood": syn_flood,
    "connect-churn": connect_churn,
    "hold": hold,
    "nagle-server": nagle_server,
    "nagle-client": nagle_client,
    "udp-flood": udp_flood,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
