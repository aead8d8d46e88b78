#!/usr/bin/env python3
"""Relays connections from a listening socket of the host's network
namespace (inherited as file descriptor argv[1]) to 127.0.0.1:argv[2] in
the namespace this process runs in (started with `ip netns exec`). This is
how Prometheus, on the host's loopback, scrapes a usescope that must run
inside a test namespace to see its conntrack table; nothing leaves
loopback."""

import socket
import sys
import threading


def pipe(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(client, port):
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    pipe(upstream, client)
    client.close()
    upstream.close()


def main():
    listener = socket.socket(fileno=int(sys.argv[1]))
    port = int(sys.argv[2])
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, port), daemon=True).start()


if __name__ == "__main__":
    main()
