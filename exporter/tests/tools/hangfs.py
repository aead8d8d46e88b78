#!/usr/bin/python3
"""A FUSE filesystem whose file reads never return: a hung mount, for tests.

Usage: hangfs.py MOUNTPOINT

Every name in the root is a regular file of 64 bytes whose getattr and open
answer at once (as a stuck NFS or FUSE server's cached attributes would)
but whose read blocks until the filesystem is unmounted or this process is
killed. Runs in the foreground; the test kills it by PID and unmounts.
Needs Debian's python3-fusepy (libfuse2) and root.
"""
import errno
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations


class HangFS(Operations):
    def __init__(self):
        self.never = threading.Event()
        self.now = time.time()

    def getattr(self, path, fh=None):
        if path == "/":
            mode, size = stat.S_IFDIR | 0o755, 0
        else:
            mode, size = stat.S_IFREG | 0o444, 64
        return dict(st_mode=mode, st_size=size, st_nlink=1, st_uid=0, st_gid=0,
                    st_atime=self.now, st_mtime=self.now, st_ctime=self.now)

    def readdir(self, path, fh):
        return [".", ".."]

    def open(self, path, flags):
        return 0

    def read(self, path, size, offset, fh):
        self.never.wait()
        raise FuseOSError(errno.EIO)

    def statfs(self, path):
        self.never.wait()
        raise FuseOSError(errno.EIO)


if __name__ == "__main__":
    FUSE(HangFS(), sys.argv[1], foreground=True, nothreads=False, allow_other=True,
         direct_io=True)
