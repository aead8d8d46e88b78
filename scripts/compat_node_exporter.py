#!/usr/bin/env python3
"""node_exporter compatibility check.

Runs usescope and node_exporter side by side on this machine's real /proc
(both on 127.0.0.1), scrapes each once, and compares every metric family
that both emit: same type and same label names. Exits non-zero on any
mismatch. Families only one side emits are listed for information.

usage: compat_node_exporter.py [--usescope PATH] [--node-exporter PATH]
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request



def usescope_collectors(binary):
    """The registered collectors, from usescope's registry-generated --help."""
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"--collector\.([a-z_]+)\b(?![.-])", help_text)) - {"disable"})


def node_exporter_collectors(ours):
    """The same sources as node_exporter collector names: usescope's stat
    collector is node_exporter's cpu and stat."""
    return sorted(set(ours) | {"cpu"})

# Widen node_exporter's default field filters to the extra fields usescope
# exports by default, so those families are compared too.
VMSTAT_FIELDS = r"^(oom_kill|pgpg|pswp|pg.*fault|pgscan.*|pgsteal.*|allocstall.*|compact_stall).*"
NETSTAT_FIELDS = (r"^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)"
                  r"|TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts|TCPOFOQueue|TCPRcvQDrop|TW.*)"
                  r"|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab)"
                  r"|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_scrape(url, proc, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{url}: process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{url}: no answer within {timeout}s")


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def families(text):
    """family name -> (type, frozenset of label names over all samples)"""
    types, labels = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            labels.setdefault(name, set())
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            if not m:
                continue
            name = m.group(1)
            fam = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in types and types[name[: -len(suffix)]] in ("histogram", "summary"):
                    fam = name[: -len(suffix)]
            names = set(LABEL.findall(m.group(3) or ""))
            names.discard("le")
            labels.setdefault(fam, set()).update(names)
    return {n: (types.get(n, "untyped"), frozenset(labels.get(n, ()))) for n in types}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--usescope", default="target/release/usescope")
    ap.add_argument("--node-exporter", default=os.path.expanduser("~/go/bin/node_exporter"))
    a = ap.parse_args()
    ne_collectors = node_exporter_collectors(usescope_collectors(a.usescope))
    up, np_ = free_port(), free_port()
    us = subprocess.Popen([a.usescope, f"--web.listen-address=127.0.0.1:{up}", "--collector.interrupts", "--collector.processes",
                           "--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"],
                          stderr=subprocess.DEVNULL)
    ne_args = [a.node_exporter, f"--web.listen-address=127.0.0.1:{np_}", "--collector.disable-defaults",
               f"--collector.vmstat.fields={VMSTAT_FIELDS}", f"--collector.netstat.fields={NETSTAT_FIELDS}"]
    ne_args += [f"--collector.{c}" for c in ne_collectors]
    ne = subprocess.Popen(ne_args, stderr=subprocess.DEVNULL)
    try:
        u = families(wait_scrape(f"http://127.0.0.1:{up}/metrics", us))
        n = families(wait_scrape(f"http://127.0.0.1:{np_}/metrics", ne))
    finally:
        for p in (us, ne):
            p.terminate()
            p.wait(timeout=10)
    ignore = re.compile(r"^(go_|promhttp_|process_|node_exporter_build_info|usescope_)")
    both = sorted(f for f in u if f in n and not ignore.match(f))
    bad = []
    for f in both:
        (ut, ul), (nt, nl) = u[f], n[f]
        status = "ok"
        if ut != nt or ul != nl:
            status = "MISMATCH"
            bad.append(f)
        print(f"{status:8} {f:60} type={ut}/{nt} labels={','.join(sorted(ul))}" + ("" if ul == nl else f" vs {','.join(sorted(nl))}"))
    only_u = sorted(f for f in u if f not in n and not ignore.match(f))
    only_n = sorted(f for f in n if f not in u and not ignore.match(f))
    print(f"\nfamilies both emit: {len(both)}; same type and label names: {len(both) - len(bad)}; mismatched: {len(bad)}")
    print(f"only usescope ({len(only_u)}): {' '.join(only_u) or '-'}")
    print(f"only node_exporter ({len(only_n)}): {' '.join(only_n) or '-'}")
    print(f"compat: {len(both) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
