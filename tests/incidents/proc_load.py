#!/usr/bin/env python3
"""The load of the process-table and memory incidents (process_incidents.py),
one subcommand each, run as its own process so the test can put it in a
cgroup or on one CPU and stop it by PID. Every subcommand runs until it is
killed.

  zombies RATE MAX        forks RATE children a second that exit at once and
                          are never reaped, up to MAX; then holds them (killed,
                          init reaps them)
  spawn RATE PROGRAM...   fork and exec PROGRAM RATE times a second (0: as fast
                          as it can), reaping each
  burner MS               children that each spin MS of CPU and exit, one after
                          another
  pingpong RATE           two processes passing a byte back and forth over
                          pipes, RATE round trips a second (0: as fast as they
                          can): two context switches each
  thrash MB               touches every page of MB of anonymous memory, over
                          and over (swaps in a smaller memory cgroup)
  hold MB                 touches MB of anonymous memory once, then sleeps
  randread PATH RATE      drops the pages of file PATH, then reads random 4 KiB
                          blocks of it RATE times a second with readahead off
                          (POSIX_FADV_RANDOM): a file larger than the reader's
                          memory cgroup can cache misses on most reads
"""

import mmap
import os
import random
import sys
import time


def paced(rate):
    """Yields `rate` times per second on a schedule; 0: without pause."""
    start = time.monotonic()
    n = 0
    while True:
        n += 1
        if rate > 0:
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield n


def zombies(rate, most):
    made = 0
    for _ in paced(float(rate)):
        if made >= int(most):
            break
        if os.fork() == 0:
            os._exit(0)
        made += 1
    while True:
        time.sleep(3600)


def spawn(rate, *argv):
    for _ in paced(float(rate)):
        pid = os.fork()
        if pid == 0:
            try:
                os.execv(argv[0], list(argv))
            finally:
                os._exit(127)
        os.waitpid(pid, 0)


def burner(ms):
    spin = float(ms) / 1000
    while True:
        pid = os.fork()
        if pid == 0:
            end = time.thread_time() + spin
            while time.thread_time() < end:
                pass
            os._exit(0)
        os.waitpid(pid, 0)


def pingpong(rate):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    if os.fork() == 0:
        os.close(w1)
        while os.read(r1, 1):
            os.write(w2, b"x")
        os._exit(0)
    for _ in paced(float(rate)):
        os.write(w1, b"x")
        os.read(r2, 1)


def anonymous(mb):
    size = int(mb) << 20
    area = mmap.mmap(-1, size)
    return area, size


def thrash(mb):
    area, size = anonymous(mb)
    n = 0
    while True:
        n += 1
        for off in range(0, size, 4096):
            area[off] = n & 0xFF


def hold(mb):
    area, size = anonymous(mb)
    for off in range(0, size, 4096):
        area[off] = 1
    while True:
        time.sleep(3600)


def randread(path, rate):
    blocks = os.path.getsize(path) // 4096
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    rng = random.Random(1)
    for _ in paced(int(rate)):
        os.pread(fd, 4096, rng.randrange(blocks) * 4096)


COMMANDS = {
    "zombies": zombies,
    "spawn": spawn,
    "burner": burner,
    "pingpong": pingpong,
    "thrash": thrash,
    "hold": hold,
    "randread": randread,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
