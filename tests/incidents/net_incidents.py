"""The TCP and network-receive incidents, each with a quiet neighbour:

  tcp_retrans     a stream through 5% loss (nft numgen at the receiver)
                  pages TCPRetransmissionsHigh; the same stream without
                  loss stays quiet
  syn_flood       12 600 SYNs/s of 54-byte frames from spoofed sources at a
                  listener with backlog 256 pages TCPSynFlood (SYN queue,
                  SYN cookies); 100 real connections/s stay quiet
  ports           a 10-port ip_local_port_range: 9 held raise the ticket,
                  10 held and connect() failing page; 10 of 20 stay quiet
  nagle           write-write-read with Nagle raises DelayedAckStalls; with
                  TCP_NODELAY it stays quiet
  softirq_rps     a UDP flood over a veth whose receive queue RPS steers to
                  CPU 0 raises SoftirqNetRxHot for CPU 0; a paced flood
                  steered to CPU 1 stays quiet there

Each checks an independent kernel counter against what usescope reported
(the namespace's /proc/net/snmp and netstat, /proc/net/tcp, /proc/stat and
/proc/softirqs, connect()'s own errors). run.py calls setup() once the
namespaces exist and runs phases() with its own.
"""

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import incidents as i
import scaling
from stack import HERE, now, run

NET_LOAD = [sys.executable, str(HERE / "net_load.py")]
# Per run, so that two runs on one machine do not collide.
NETNS = {key: f"usescope-{key}-{os.getpid()}" for key in (
    "retrans", "retrans_quiet", "retrans_peer", "syn", "syn_quiet", "syn_src", "ports", "ports_quiet",
    "nagle", "nagle_quiet", "rps_tx", "rps_rx", "rps_quiet_tx", "rps_quiet_rx")}
# The namespaces whose own usescope Prometheus scrapes (stack.add_netns).
USESCOPE_IN = ("retrans", "retrans_quiet", "syn", "syn_quiet", "ports", "ports_quiet", "nagle", "nagle_quiet")

LOSS = """table inet usescope_loss {
  chain input {
    type filter hook input priority 0;
    ip saddr 10.81.0.1 tcp dport 5001 meta length > 100 numgen random mod 100 < 5 counter drop
  }
}
"""
SINK = """table inet usescope_sink {
  chain input {
    type filter hook input priority 0;
    udp dport 9999 counter drop
  }
}
"""
# The hot flood's receiver walks a long firewall chain first (none of these
# match), so that one sender on a shared CPU makes enough receive work.
SLOW_SINK = SINK.replace("    udp dport 9999 counter drop\n", "".join(
    f"    udp sport {p} counter\n" for p in range(1, 401)) + "    udp dport 9999 counter drop\n")
FLOOD_RATE = 12600  # the source's low end, packets/s
PORT_RANGE = (20000, 20009)  # outside the default range the namespace's usescope took its port from


def ip(netns, *args):
    run(["ip", "-n", netns, *args])


def sysctl(netns, name, value):
    run(["ip", "netns", "exec", netns, "sysctl", "-qw", f"{name}={value}"])


def veth(a, b, subnet, name):
    """a gets 10.SUBNET.0.1/24, b .2; returns b's interface name."""
    ia, ib = f"{name}a{os.getpid() % 10000}", f"{name}b{os.getpid() % 10000}"
    run(["ip", "link", "add", ia, "netns", a, "type", "veth", "peer", "name", ib, "netns", b])
    ip(a, "addr", "add", f"10.{subnet}.0.1/24", "dev", ia)
    ip(b, "addr", "add", f"10.{subnet}.0.2/24", "dev", ib)
    ip(a, "link", "set", ia, "up")
    ip(b, "link", "set", ib, "up")
    return ib


DEVICES = {}


def setup():
    """Links, addresses, rules and sysctls, once the namespaces exist."""
    n = NETNS
    veth(n["retrans"], n["retrans_peer"], 81, "rt")
    # The quiet stream reaches the same receiver over a link of its own.
    veth(n["retrans_quiet"], n["retrans_peer"], 82, "rq")
    run(["ip", "netns", "exec", n["retrans_peer"], "nft", "-f", "-"], input=LOSS)
    DEVICES["syn"] = veth(n["syn_src"], n["syn"], 83, "sy")
    # SYN-ACKs to the spoofed sources go back to the flood's namespace,
    # which does not forward and drops them at IP input: no reset ever
    # comes back, and no NO_SOCKET or NETFILTER_DROP drop (other incidents
    # count those) is added. (This kernel has no dummy device.)
    ip(n["syn"], "route", "add", "10.99.0.0/16", "via", "10.83.0.1")
    sysctl(n["syn_src"], "net.ipv4.ip_forward", 0)
    for conf in ("all", "default", DEVICES["syn"]):
        sysctl(n["syn"], f"net.ipv4.conf.{conf}.rp_filter", 0)
    # Half-open connections give up after 1 + 2 + 4 s instead of 63 s (a
    # runbook action under a flood, too), so the queue drains and the page
    # resolves within the suite's time; the kernel's timers do not scale.
    sysctl(n["syn"], "net.ipv4.tcp_synack_retries", 2)
    for key, rps_cpus, subnet in (("rps", 1, 84), ("rps_quiet", 2, 85)):
        rx = veth(n[f"{key}_tx"], n[f"{key}_rx"], subnet, key[:3] + ("q" if "quiet" in key else "h"))
        run(["ip", "netns", "exec", n[f"{key}_rx"], "sh", "-c",
             f"echo {rps_cpus} > /sys/class/net/{rx}/queues/rx-0/rps_cpus"])
        run(["ip", "netns", "exec", n[f"{key}_rx"], "nft", "-f", "-"], input=SINK if "quiet" in key else SLOW_SINK)


@contextlib.contextmanager
def load(*argv, netns=None, cpu=None):
    """A net_load.py subcommand, stopped (by PID) when the block ends."""
    cmd = [*NET_LOAD, *argv]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def snmp(netns):
    """The namespace's Tcp and TcpExt counters by name."""
    text = i.ns_read(netns, "/proc/net/snmp") + i.ns_read(netns, "/proc/net/netstat")
    out = {}
    lines = [line.split() for line in text.splitlines()]
    for head, values in zip(lines[::2], lines[1::2]):
        for k, v in zip(head[1:], values[1:]):
            out[f"{head[0][:-1]}_{k}"] = int(v)
    return out


def stats_file(name):
    return Path(f"/run/usescope-incident-{name}-{os.getpid()}")


def read_stats(path):
    """`key value ...` written by net_load.py, as a dict of floats."""
    try:
        words = path.read_text().split()
    except FileNotFoundError:
        return {}
    return {k: float(v) for k, v in zip(words[::2], words[1::2])}


# --- retransmissions ------------------------------------------------------------

def tcp_retrans(st, report, instance):
    incident = "TCP stream through 5% loss"
    netns, peer = NETNS["retrans"], NETNS["retrans_peer"]
    labels = {"instance": instance}
    host_probe = f'sum(usescope_tcp_retransmitted_segments_total{{instance="{st.host}"}})'
    k0, probe0 = snmp(netns), st.value(host_probe) or 0.0
    started = now()
    with load("sink", "10.81.0.2", "5001", netns=peer, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("stream", "10.81.0.2", "5001", "2000000", netns=netns, cpu=i.NOISE_CPU):
            i.expect_page(st, report, incident, "TCPRetransmissionsHigh", started, labels, severity="ticket")
            recorded = st.value(f'instance:node_netstat_Tcp_RetransSegs:ratio_rate5m{{instance="{instance}"}}')
    ended = now()
    time.sleep(2)
    k1, probe1 = snmp(netns), st.value(host_probe) or 0.0
    retrans, out = k1["Tcp_RetransSegs"] - k0["Tcp_RetransSegs"], k1["Tcp_OutSegs"] - k0["Tcp_OutSegs"]
    scraped = st.value(f'node_netstat_Tcp_RetransSegs{{instance="{instance}"}}')
    report.check(f"{incident}: node_netstat_Tcp_RetransSegs ({scraped}) equals the namespace's RetransSegs "
                 f"({k1['Tcp_RetransSegs']}); {retrans} of {out} segments retransmitted ({retrans / max(out, 1):.1%}), "
                 f"the recorded ratio {recorded}", scraped == k1["Tcp_RetransSegs"] and retrans > 0.01 * out)
    kinds = {k: k1[f"TcpExt_{k}"] - k0[f"TcpExt_{k}"] for k in ("TCPFastRetrans", "TCPTimeouts", "TCPLossProbes")}
    # RetransSegs also counts segments whose retransmission then failed
    # locally (TCPRetransFail): the probe counts what was sent. The probe's
    # value is Prometheus's last sample, which may miss the stream's last
    # few retransmissions: 1% of slack (exact equality is the Rust test's).
    failed = k1.get("TcpExt_TCPRetransFail", 0) - k0.get("TcpExt_TCPRetransFail", 0)
    report.check(f"{incident}: the host's tcpretrans probe (every namespace) counts at least the namespace's "
                 f"retransmissions: +{probe1 - probe0:.0f} against +{retrans} less {failed} failed ({kinds})",
                 probe1 - probe0 >= 0.99 * (retrans - failed))
    i.expect_resolved(st, report, incident, "TCPRetransmissionsHigh", ended, labels)


def tcp_retrans_quiet(st, report, instance):
    incident = "TCP stream without loss"
    netns = NETNS["retrans_quiet"]
    k0 = snmp(netns)
    started = now()

    def measured():
        k = snmp(netns)
        out = k["Tcp_OutSegs"] - k0["Tcp_OutSegs"]
        return (f"{k['Tcp_RetransSegs'] - k0['Tcp_RetransSegs']} of {out} segments retransmitted, "
                f"{out / max(now() - started, 1):.0f} segments/s")

    with load("sink", "10.82.0.2", "5001", netns=NETNS["retrans_peer"], cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("stream", "10.82.0.2", "5001", "2000000", netns=netns, cpu=i.NOISE_CPU):
            i.expect_quiet(st, report, incident, ["TCPRetransmissionsHigh"], started, {"instance": instance}, measured)
            out = snmp(netns)["Tcp_OutSegs"] - k0["Tcp_OutSegs"]
            report.check(f"{incident}: the stream sent more than the rule's floor (100 segments/s): "
                         f"{out / (now() - started):.0f}/s", out / (now() - started) > 100)


# --- SYN flood --------------------------------------------------------------------

def syn_recv_in(netns):
    return sum(1 for f in ("/proc/net/tcp", "/proc/net/tcp6")
               for line in i.ns_read(netns, f).splitlines()[1:] if line.split()[3] == "03")


def syn_flood(st, report, instance):
    incident = f"SYN flood, {FLOOD_RATE} SYNs/s of 54 bytes, backlog 256"
    netns = NETNS["syn"]
    labels = {"instance": instance}
    cookies0 = snmp(netns)["TcpExt_SyncookiesSent"]
    started = now()
    with load("listener", "10.83.0.2", "8080", "256", netns=netns, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("syn-flood", "10.83.0.2", "8080", str(FLOOD_RATE), netns=NETNS["syn_src"], cpu=i.NOISE_CPU):
            queue = threading.Thread(target=i.expect_page, args=(st, report, incident, "TCPSynFlood", started,
                                                                   {**labels, "signal": "syn_queue"}))
            queue.start()
            i.expect_page(st, report, incident, "TCPSynFlood", started, {**labels, "signal": "syncookies"})
            queue.join()
            # The queue stays full while the flood lasts: compare a
            # scrape with /proc/net/tcp read around it.
            before = syn_recv_in(netns)
            time.sleep(2 * scaling.PRODUCTION_INTERVAL_S / scaling.FACTOR)
            scraped = st.value(f'usescope_tcp_syn_recv_sockets{{instance="{instance}"}}')
            after = syn_recv_in(netns)
            ratio = st.value(f'usescope_tcp_syn_queue_fullest_ratio{{instance="{instance}"}}')
            size = st.value(f'instance_device:node_network_receive_bytes_per_packet:ratio_rate5m'
                            f'{{instance="{instance}",device="{DEVICES["syn"]}"}}')
            packets = st.value(f'instance_device:node_network_receive_packets:rate5m'
                               f'{{instance="{instance}",device="{DEVICES["syn"]}"}}')
            report.check(f"{incident}: usescope_tcp_syn_recv_sockets ({scraped}) matches /proc/net/tcp's SYN_RECV "
                         f"({before}, {after}), the queue full (ratio {ratio})",
                         scraped is not None and min(before, after) - 3 <= scraped <= max(before, after) + 3
                         and ratio is not None and ratio >= 0.95)
            report.check(f"{incident}: the receive rules show the flood: {packets} packets/s of {size} bytes",
                         size is not None and 50 <= size <= 60 and packets is not None and packets > 0.5 * FLOOD_RATE)
    ended = now()
    time.sleep(2)
    cookies = snmp(netns)["TcpExt_SyncookiesSent"]
    scraped = st.value(f'node_netstat_TcpExt_SyncookiesSent{{instance="{instance}"}}')
    report.check(f"{incident}: node_netstat_TcpExt_SyncookiesSent ({scraped}) equals the namespace's "
                 f"SyncookiesSent ({cookies}, +{cookies - cookies0})", scraped == cookies and cookies > cookies0)
    for signal in ("syn_queue", "syncookies"):
        i.expect_resolved(st, report, incident, "TCPSynFlood", ended, {**labels, "signal": signal})


def syn_quiet(st, report, instance):
    incident = "100 real connections/s"
    netns = NETNS["syn_quiet"]
    k0 = snmp(netns)
    started = now()

    def measured():
        k = snmp(netns)
        return (f"{(k['Tcp_PassiveOpens'] - k0['Tcp_PassiveOpens']) / (now() - started):.0f} accepted/s, "
                f"SYN_RECV now {syn_recv_in(netns)}, SYN cookies +{k['TcpExt_SyncookiesSent'] - k0['TcpExt_SyncookiesSent']}")

    with load("listener", "127.0.0.1", "8080", "256", netns=netns, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("connect-churn", "127.0.0.1", "8080", "100", netns=netns, cpu=i.NOISE_CPU):
            i.expect_quiet(st, report, incident, ["TCPSynFlood"], started, {"instance": instance}, measured)


# --- ephemeral ports ----------------------------------------------------------------

def ports_toward(netns, port, low=PORT_RANGE[0], high=PORT_RANGE[1]):
    """Sockets with a local port in low..high toward 127.0.0.1:port."""
    count = 0
    for line in i.ns_read(netns, "/proc/net/tcp").splitlines()[1:]:
        f = line.split()
        local, remote, state = f[1], f[2], f[3]
        if state not in ("0A", "07") and low <= int(local.split(":")[1], 16) <= high \
                and remote == f"0100007F:{port:04X}":
            count += 1
    return count


def ports(st, report, instance):
    incident = f"ephemeral ports: a {PORT_RANGE[1] - PORT_RANGE[0] + 1}-port range"
    netns = NETNS["ports"]
    sysctl(netns, "net.ipv4.ip_local_port_range", f"{PORT_RANGE[0]} {PORT_RANGE[1]}")
    labels = {"instance": instance}
    failures = f'usescope_tcp_connect_no_local_port_total{{instance="{st.host}"}}'
    first, second = stats_file("ports-9"), stats_file("ports-1")
    started = now()
    with load("listener", "127.0.0.1", "7000", "128", netns=netns, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("hold", "127.0.0.1", "7000", "9", "0", str(first), netns=netns, cpu=i.NOISE_CPU):
            i.expect_page(st, report, incident, "EphemeralPortsNearlyExhausted", started, labels, severity="ticket")
            probe0 = st.value(failures) or 0.0
            exhausted = now()
            with load("hold", "127.0.0.1", "7000", "1", "2", str(second), netns=netns, cpu=i.NOISE_CPU):
                page = threading.Thread(target=i.expect_page, args=(st, report, incident, "EphemeralPortsExhausted",
                                                                      exhausted, {**labels, "signal": "ports"}))
                page.start()
                i.expect_page(st, report, incident, "EphemeralPortsExhausted", exhausted,
                              {"instance": st.host, "signal": "connect_failures"})
                page.join()
                kernel = ports_toward(netns, 7000)
                scraped = st.value(f'usescope_tcp_ephemeral_ports_used_max{{instance="{instance}"}}')
                report.check(f"{incident}: usescope_tcp_ephemeral_ports_used_max ({scraped}) equals the sockets "
                             f"/proc/net/tcp lists toward the listener ({kernel}), the whole range",
                             scraped == kernel == PORT_RANGE[1] - PORT_RANGE[0] + 1)
            # The attempts have stopped: two scrapes later the probe's count
            # stands still, and must equal what connect() returned.
            time.sleep(4 * scaling.PRODUCTION_INTERVAL_S / scaling.FACTOR)
            failed = read_stats(second).get("failed", 0) + read_stats(first).get("failed", 0)
            counted = (st.value(failures) or 0.0) - probe0
            report.check(f"{incident}: the host's tcpconnect probe counted {counted:.0f} connect() failures, "
                         f"connect() returned EADDRNOTAVAIL {failed:.0f} times",
                         failed > 0 and failed <= counted <= failed + 2)
    ended = now()
    for f in (first, second):
        f.unlink(missing_ok=True)
    i.expect_resolved(st, report, incident, "EphemeralPortsExhausted", ended, {**labels, "signal": "ports"})
    i.expect_resolved(st, report, incident, "EphemeralPortsExhausted", ended,
                      {"instance": st.host, "signal": "connect_failures"})


def ports_quiet(st, report, instance):
    incident = "ephemeral ports: 10 of a 20-port range"
    netns = NETNS["ports_quiet"]
    sysctl(netns, "net.ipv4.ip_local_port_range", f"{PORT_RANGE[0]} {PORT_RANGE[0] + 19}")
    stats = stats_file("ports-quiet")
    started = now()
    with load("listener", "127.0.0.1", "7000", "128", netns=netns, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("hold", "127.0.0.1", "7000", "10", "0", str(stats), netns=netns, cpu=i.NOISE_CPU):
            used = f'usescope_tcp_ephemeral_ports_used_max{{instance="{instance}"}}'
            i.expect_quiet(st, report, incident, ["EphemeralPortsNearlyExhausted", "EphemeralPortsExhausted"],
                           started, {"instance": instance},
                           lambda: f"{ports_toward(netns, 7000, PORT_RANGE[0], PORT_RANGE[0] + 19)} sockets toward the listener, "
                                   f"usescope {st.value(used)}")
    stats.unlink(missing_ok=True)


# --- Nagle and delayed ACKs ------------------------------------------------------------

def nagle(st, report, instance, nodelay):
    netns = NETNS["nagle_quiet" if nodelay else "nagle"]
    incident = "write-write-read " + ("with TCP_NODELAY" if nodelay else "with Nagle (delayed ACKs)")
    labels = {"instance": instance}
    stats = stats_file(f"nagle-{int(nodelay)}")
    k0 = snmp(netns)
    started = now()

    def ratio():
        k = snmp(netns)
        d, n = k["TcpExt_DelayedACKs"] - k0["TcpExt_DelayedACKs"], k["Tcp_InSegs"] - k0["Tcp_InSegs"]
        s = read_stats(stats)
        return d / max(n, 1), (f"DelayedACKs +{d} of InSegs +{n} ({d / max(n, 1):.3f}), "
                               f"{n / max(now() - started, 1):.0f} segments/s, a request took {s.get('mean_ms')} ms")

    with load("nagle-server", "127.0.0.1", "7100", netns=netns, cpu=i.NOISE_CPU):
        time.sleep(0.3)
        with load("nagle-client", "127.0.0.1", "7100", "1" if nodelay else "0", str(stats), netns=netns,
                  cpu=i.NOISE_CPU):
            if nodelay:
                i.expect_quiet(st, report, incident, ["DelayedAckStalls"], started, labels, lambda: ratio()[1])
                report.check(f"{incident}: requests took under 5 ms ({ratio()[1]})",
                             read_stats(stats).get("mean_ms", 99) < 5)
            else:
                i.expect_page(st, report, incident, "DelayedAckStalls", started, labels, severity="ticket")
                recorded = st.value(f'instance:node_netstat_TcpExt_DelayedACKs:ratio_rate5m{{instance="{instance}"}}')
                kernel, text = ratio()
                report.check(f"{incident}: {text}; the recorded ratio {recorded} within 25% of the kernel's",
                             i.close(recorded, kernel, 0.25) and read_stats(stats).get("mean_ms", 0) >= 30)
    ended = now()
    stats.unlink(missing_ok=True)
    if not nodelay:
        time.sleep(2)
        kernel = snmp(netns)["TcpExt_DelayedACKs"]
        scraped = st.value(f'node_netstat_TcpExt_DelayedACKs{{instance="{instance}"}}')
        report.check(f"{incident}: node_netstat_TcpExt_DelayedACKs ({scraped}) equals the namespace's "
                     f"DelayedACKs ({kernel})", scraped == kernel)
        i.expect_resolved(st, report, incident, "DelayedAckStalls", ended, labels)


# --- NET_RX softirq on one CPU -----------------------------------------------------------

def cpu_softirq_ticks(cpu):
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] == f"cpu{cpu}":
            return int(f[7]), sum(map(int, f[1:9]))
    raise KeyError(cpu)


def net_rx(cpu):
    for line in Path("/proc/softirqs").read_text().splitlines():
        if line.split()[0] == "NET_RX:":
            return int(line.split()[1 + cpu])
    raise KeyError("NET_RX")


def softirq_rps(st, report):
    """The flood's sender runs on CPU 1, RPS hands its receive work to
    CPU 0; the quiet flood runs the other way round, paced."""
    incident = "UDP flood over a veth, RPS to CPU 0"
    quiet = "paced UDP over a veth, RPS to CPU 1"
    labels = {"instance": st.host, "cpu": "0"}
    ticks0, rx0 = cpu_softirq_ticks(0), net_rx(0)
    started = now()
    with load("udp-flood", "10.84.0.2", "9999", "0", netns=NETNS["rps_tx"], cpu=1), \
            load("udp-flood", "10.85.0.2", "9999", "2000", netns=NETNS["rps_quiet_tx"], cpu=0):
        i.expect_page(st, report, incident, "SoftirqNetRxHot", started, labels, severity="ticket")
        (s1, t1), rx1 = cpu_softirq_ticks(0), net_rx(0)
        share = (s1 - ticks0[0]) / max(1, t1 - ticks0[1])
        recorded = st.value(f'instance_cpu:node_cpu_softirq:rate5m{{instance="{st.host}",cpu="0"}}')
        rx_rate = st.value(f'instance_cpu:node_softirqs_net_rx:rate5m{{instance="{st.host}",cpu="0"}}')
        report.check(f"{incident}: CPU 0 softirq {recorded} (recorded) against /proc/stat's {share:.2f} since the "
                     f"start; NET_RX {rx_rate}/s (recorded), /proc/softirqs {(rx1 - rx0) / (now() - started):.0f}/s",
                     share >= 0.3 and recorded is not None and recorded >= 0.3)

        def measured():
            v = st.value(f'instance_cpu:node_cpu_softirq:rate5m{{instance="{st.host}",cpu="1"}}')
            return f"CPU 1 softirq {v}"

        i.expect_quiet(st, report, quiet, ["SoftirqNetRxHot"], started, {"instance": st.host, "cpu": "1"}, measured)
    ended = now()
    i.expect_resolved(st, report, incident, "SoftirqNetRxHot", ended, labels)


def phases(st, report, ns):
    """Incident name -> callable for run.py's phases 1 and 2, and a phase of
    its own for the softirq flood (it needs both CPUs)."""
    return (
        {
            "tcp_retrans": lambda: tcp_retrans(st, report, ns["retrans"]),
            "tcp_retrans_quiet": lambda: tcp_retrans_quiet(st, report, ns["retrans_quiet"]),
            "ports": lambda: ports(st, report, ns["ports"]),
            "ports_quiet": lambda: ports_quiet(st, report, ns["ports_quiet"]),
            "nagle": lambda: nagle(st, report, ns["nagle"], False),
            "nagle_quiet": lambda: nagle(st, report, ns["nagle_quiet"], True),
        },
        {
            "syn_flood": lambda: syn_flood(st, report, ns["syn"]),
            "syn_quiet": lambda: syn_quiet(st, report, ns["syn_quiet"]),
        },
        {
            "softirq_rps": lambda: softirq_rps(st, report),
        },
    )
