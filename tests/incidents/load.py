#!/usr/bin/env python3
"""The load each incident applies, one subcommand each, run as its own
process so the test can put it in a network namespace (`ip netns exec`), a
cgroup or on one CPU (taskset), and stop it by PID. Every subcommand runs
until it is killed unless it says otherwise.

  udp-new-flows RATE          UDP datagrams to a local sink, each from a new
                              source port: one new conntrack entry each
  udp-hold-flows N            the same N flows to the sink, refreshed every 2 s
  udp-to-port PORT RATE       datagrams to one port (closed, or dropped by nft)
  listen-flood PORT RATE      a listener with backlog 1 that never accepts,
                              and RATE connection attempts per second to it
  busy DUTY                   one CPU-bound loop busy DUTY of every 100 ms
  direct-writer DEVICE IDLE   4 KiB O_DIRECT|O_DSYNC writes to DEVICE; after
                              each write, sleeps IDLE times the write's duration
  fill-fs DIR                 files until the inodes run out, then one file until
                              the space runs out; exits (the files stay)
  memory-hog MB               reads a MB-sized file twice (page-cache reclaim),
                              then touches MB of anonymous memory (OOM in a
                              smaller cgroup)
"""

import mmap
import os
import socket
import sys
import threading
import time


def send(s, port):
    """One datagram to 127.0.0.1:port. A packet the kernel drops on the way
    out (conntrack table full, an nft drop rule) fails with EPERM; an ICMP
    port unreachable from the previous one fails with ECONNREFUSED. Both
    are the incident, not a reason to stop."""
    try:
        s.sendto(b"x", ("127.0.0.1", port))
    except OSError:
        pass


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


SINK_PORT = 5000


def sink():
    """A UDP socket on SINK_PORT that reads and discards: the flows'
    datagrams are delivered, never dropped (no NO_SOCKET, no full receive
    buffer), and never answered (so their conntrack entries stay
    unreplied and time out)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", SINK_PORT))

    def drain():
        while True:
            s.recv(64)

    threading.Thread(target=drain, daemon=True).start()


def udp_new_flows(rate):
    """Each datagram from a new socket (a new source port): a new flow."""
    sink()
    for _ in paced(float(rate)):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            send(s, SINK_PORT)


def udp_hold_flows(count):
    sink()
    flows = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(int(count))]
    while True:
        for s in flows:
            send(s, SINK_PORT)
        time.sleep(2)


def udp_to_port(port, rate):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in paced(float(rate)):
        send(s, int(port))


def listen_flood(port, rate):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", int(port)))
    server.listen(1)
    clients = []
    for n in paced(float(rate)):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", int(port)))
        except BlockingIOError:
            pass
        clients.append(c)
        if len(clients) > 200:  # keep the fd count bounded
            clients.pop(0).close()


def busy(duty):
    duty = float(duty)
    while True:
        end = time.monotonic() + 0.1 * duty
        while time.monotonic() < end:
            pass
        if duty < 1:
            time.sleep(0.1 * (1 - duty))


def direct_writer(device, idle):
    idle = float(idle)
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    block = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    size = os.lseek(fd, 0, os.SEEK_END)
    offset = 0
    while True:
        t = time.monotonic()
        os.pwrite(fd, block, offset)
        offset = (offset + 4096) % size
        if idle:
            time.sleep(idle * (time.monotonic() - t))


def fill_fs(directory):
    # The big file first: once the inodes are gone no file can be created.
    big = open(os.path.join(directory, "big"), "wb", buffering=0)
    n = 0
    try:
        while True:
            open(os.path.join(directory, f"f{n}"), "w").close()
            n += 1
    except OSError:
        pass
    chunk = b"\0" * (1 << 20)
    try:
        while True:
            big.write(chunk)
    except OSError:
        pass
    big.close()
    print(f"{n} files, then the space", flush=True)


def memory_hog(mb):
    size = int(mb) << 20
    path = f"/var/tmp/usescope-incident-hog-{os.getpid()}"
    try:
        with open(path, "wb") as f:
            for _ in range(int(mb)):
                f.write(b"\1" * (1 << 20))
        for _ in range(2):
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
    finally:
        os.unlink(path)
    hog = mmap.mmap(-1, size)
    for off in range(0, size, 4096):
        hog[off] = 1
    time.sleep(3600)


COMMANDS = {
    "udp-new-flows": udp_new_flows,
    "udp-hold-flows": udp_hold_flows,
    "udp-to-port": udp_to_port,
    "listen-flood": listen_flood,
    "busy": busy,
    "direct-writer": direct_writer,
    "fill-fs": fill_fs,
    "memory-hog": memory_hog,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
