#!/usr/bin/env python3
"""The fleet test: deploy/fleet's reference setup, run for real over a
simulated fleet, with the shipped rules and the fleet dashboard.

- HOSTS (200) real usescope processes, each on its own loopback port and
  its own synthetic tree (hosttree.py: 2-16 CPUs, 1-4 disks, 1-4 NICs),
  probes off (every host would see this one kernel). A ticker process makes
  their CPU, disk and network counters grow at rates of their own.
- Two hashmod shards, each an HA pair of Prometheus with a Thanos sidecar
  (replica a and b), Thanos Query deduplicating on `replica`, Thanos Ruler
  with the fleet-wide rules, an Alertmanager pair in one gossip cluster and
  a webhook receiver counting notifications. Every process runs with the
  flags of deploy/fleet/commands.yml and the configs of deploy/fleet; the
  rules' durations and the Alertmanager timings are divided by FACTOR (10)
  as in tests/incidents (scaling.py), the 15 s scrape and evaluation
  interval by INTERVAL_FACTOR (3): 5 s.
- Three hosts are made sick by editing their trees: a conntrack table at
  95% (ConntrackTableFull), one CPU at 95% iowait with a busy, queueing disk
  (HighIOWait), and /data 99% full, a tmpfs mounted under the host's root
  (FilesystemAlmostOutOfSpace). Of the shipped alerts these are the pages a
  tree can raise: DiskSaturated needs the weighted I/O time, MemoryBelow*
  zone edits, RAIDDegraded an md array; the rest are tickets or need probes.

Checks: each host is scraped by exactly the shard its address hashes to;
every query of dashboards/usescope-fleet.json, through Thanos Query, equals
the same thing computed here from the hosts' own scrapes; each sick host
pages once through the Alertmanager pair and no other host pages; one
Prometheus of a pair killed mid-test (and restarted 20 s later) loses no
page and leaves no gap in the deduplicated series; a slow host, a garbage
host and a flapping host (small HTTP servers here) cost only their own
series; a shard that dies leaves Thanos Query answering with a
partial-response warning, and the Ruler pages ShardNotReporting for it.
Rule evaluation time and Thanos Query latency of every dashboard query are
printed (docs/fleet.md keeps the figures).

Needs root (the tmpfs). The last line is "fleet: N passed, M failed".
"""

import hashlib
import http.server
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(HERE.parent / "incidents"))
import harness as h  # noqa: E402
import hosttree  # noqa: E402
import scaling  # noqa: E402
import yaml  # noqa: E402  (python3-yaml, scripts/setup.sh)

# Rule durations (for:, ranges) and Alertmanager timings are divided by
# FACTOR, so the filling filesystem's 30-minute page comes in 3 minutes.
# The scrape and evaluation interval is divided by less: 200 hosts with two
# replicas each at 1.5 s were 270 scrapes a second and four Prometheus
# servers evaluating 93 rules over 100 hosts each, more than two shared
# cores could serve (scrapes timed out, alerts flapped). At 5 s a 5-minute
# rate window (30 s here) still holds 6 samples.
FACTOR = 10
scaling.FACTOR = FACTOR
INTERVAL_FACTOR = 3
INTERVAL_S = scaling.PRODUCTION_INTERVAL_S / INTERVAL_FACTOR
HOSTS = int(os.environ.get("USESCOPE_FLEET_HOSTS", "200"))
SHARDS = 2
DEPLOY = h.REPO / "deploy" / "fleet"
DASHBOARD = h.REPO / "dashboards" / "usescope-fleet.json"
THANOS = os.environ.get("THANOS") or str(Path(os.environ.get("GOPATH", Path.home() / "go")) / "bin" / "thanos")
# Probes and timex (adjtimex(2)) would show every host this one kernel.
NO_PROBES = ["--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops", "--no-collector.timex"]
# (cpus, disks, nics) of the hosts, in turn.
SHAPES = [(2, 1, 1), (4, 2, 2), (8, 2, 1), (16, 4, 4), (4, 1, 2), (8, 4, 2)]
# The ticker rewrites 600 files a round (0.6 s on an idle machine).
# Prometheus' rate() over a 30 s window reads counters up to a round stale
# at either end: 2 s in 30 s is up to 7% of the value; a busier machine
# makes longer rounds, and the tolerance grows with the longest one seen.
TICK_S = 1.0
RATE_TOLERANCE = 0.05    # absolute, for shares computed from rates
BYTES_TOLERANCE = 0.08   # relative, for bytes per second
STARTED = time.monotonic()


def elapsed():
    return f"{time.monotonic() - STARTED:5.0f}s"


def log(msg):
    print(f"[{elapsed()}] {msg}", flush=True)


def hashmod(address, modulus):
    """Prometheus' hashmod relabelling: the low 8 bytes of the MD5 of the
    value, big-endian, modulo `modulus`."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


def free_ports(n):
    """n distinct free loopback ports: all bound at once, so the kernel
    cannot hand out one port twice (harness.free_port, called in a loop,
    can, and two hosts on one port looked like one host)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fill(text, **values):
    for k, v in values.items():
        text = text.replace("{" + k + "}", str(v))
    if re.search(r"\{[A-Z_0-9]+\}", text):
        raise RuntimeError(f"unfilled placeholder in {text}")
    return text


def interval_scaled(duration):
    return f"{scaling.duration_ms(duration) // INTERVAL_FACTOR}ms"


COMMANDS = yaml.safe_load((DEPLOY / "commands.yml").read_text())


def start(kind, name, binary, logdir, http_port, **values):
    """A process of deploy/fleet/commands.yml, its placeholders filled."""
    spec = COMMANDS[kind]
    values = {"DEPLOY": DEPLOY, "ALERTS": h.ALERTS, **values}
    argv = [binary, *(fill(a, **values) for a in spec["args"])]
    # The Ruler's own evaluation interval, scaled as the shards' is.
    argv = [f"--eval-interval={interval_scaled(a.split('=', 1)[1])}" if a.startswith("--eval-interval=") else a
            for a in argv]
    env = [f"{k}={fill(v, **values)}" for k, v in spec.get("env", {}).items()]
    if env:
        argv = ["env", *env, *argv]  # env execs the binary: the PID stays the server's
    return h.Process(name, argv, http_port, logdir)


class Query:
    """Thanos Query's (or a Prometheus') HTTP API."""

    def __init__(self, url):
        self.url = url

    def get(self, path, **params):
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def instant(self, expr, **params):
        return self.get("/api/v1/query", query=expr, **params)

    def vector(self, expr, **params):
        body = self.instant(expr, **params)
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body.get('error')}")
        return body["data"]["result"]


def parse_exposition(text):
    """{(name, frozenset(labels.items())): value} of a text-format page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def samples(page, name, **match):
    return [(dict(l), v) for (n, l), v in page.items() if n == name and all(dict(l).get(k) == w for k, w in match.items())]


def one(page, name):
    vals = samples(page, name)
    return vals[0][1] if vals else None


# Each per-host expression of the fleet dashboard (FLEET_SIGNALS in
# dashboards/generate.py), computed from two scrapes of the host. The time
# between them is the host's own: the growth of CPU 0's seconds over all
# modes, which the ticker advances with the clock it writes the counters
# for. So the values here are exact; Prometheus' rates, over the wall time
# between its scrapes, are off by up to a tick over their window.
def _rate(a, b, name, **match):
    dt = _host_seconds(a, b)
    before = {frozenset(l.items()): v for l, v in samples(a, name, **match)}
    return {frozenset(l.items()): (v - before[frozenset(l.items())]) / dt
            for l, v in samples(b, name, **match) if frozenset(l.items()) in before}


def _host_seconds(a, b):
    total = [sum(v for _, v in samples(p, "node_cpu_seconds_total", cpu="0")) for p in (a, b)]
    return total[1] - total[0]


def cpu_util(a, b):
    """1 - (idle + iowait + steal) per CPU, averaged over the CPUs."""
    idle = {}
    for labels, v in _rate(a, b, "node_cpu_seconds_total").items():
        d = dict(labels)
        idle[d["cpu"]] = idle.get(d["cpu"], 0.0) + (v if d["mode"] in ("idle", "iowait", "steal") else 0.0)
    return sum(1 - v for v in idle.values()) / len(idle)


def iowait_worst(a, b):
    return max(_rate(a, b, "node_cpu_seconds_total", mode="iowait").values())


def disk_busiest(a, b):
    return max(_rate(a, b, "node_disk_io_time_seconds_total").values())


def net_bytes(a, b):
    total = 0.0
    for name in ("node_network_receive_bytes_total", "node_network_transmit_bytes_total"):
        total += sum(r for l, r in _rate(a, b, name).items() if dict(l)["device"] != "lo")
    return total


def load_per_cpu(a, b):
    return one(b, "node_load1") / len(samples(b, "node_cpu_seconds_total", mode="idle"))


def mem_used(a, b):
    return 1 - one(b, "node_memory_MemAvailable_bytes") / one(b, "node_memory_MemTotal_bytes")


def conntrack_used(a, b):
    limit = one(b, "node_nf_conntrack_entries_limit")
    return one(b, "node_nf_conntrack_entries") / limit if limit else None


def fs_fullest(a, b):
    sizes = {frozenset(l.items()): v for l, v in samples(b, "node_filesystem_size_bytes") if l.get("fstype") and v > 0}
    used = [1 - v / sizes[frozenset(l.items())] for l, v in samples(b, "node_filesystem_avail_bytes")
            if frozenset(l.items()) in sizes]
    return max(used) if used else None


def failing_collectors(a, b):
    n = sum(1 for _, v in samples(b, "node_scrape_collector_success") if v == 0)
    return n or None  # count by (...) (x == 0) has no series for a host without failures


# Keyed by the metric (or rule) name each expression reads; tolerance:
# ("abs", x), ("rel", x) or exact.
ORACLES = {
    "instance:node_cpu_utilisation:rate5m": (cpu_util, ("abs", RATE_TOLERANCE)),
    "instance:node_load1_per_cpu:ratio": (load_per_cpu, ("abs", 1e-9)),
    "instance_cpu:node_cpu_iowait:rate5m": (iowait_worst, ("abs", RATE_TOLERANCE)),
    "instance:node_memory_utilisation:ratio": (mem_used, ("abs", 1e-9)),
    "instance:node_disk_io_time_seconds:max_rate5m": (disk_busiest, ("abs", RATE_TOLERANCE)),
    "instance:node_nf_conntrack_entries:ratio": (conntrack_used, ("abs", 1e-9)),
    # The live disk under the trees may move a little between reads.
    "node_filesystem_avail_bytes": (fs_fullest, ("abs", 1e-3)),
    "node_scrape_collector_success": (failing_collectors, ("abs", 0)),
    "instance_device:node_network_receive_bytes:rate5m": (net_bytes, ("rel", BYTES_TOLERANCE)),
}


def oracle_for(expr):
    for key, value in ORACLES.items():
        if key in expr:
            return value
    return None, None


# Added to the tolerance of rate-derived values: the largest staleness of
# the ticker's counters seen so far, over the rules' 30 s rate window.
STALENESS = [0.0]


def close(got, want, tol):
    kind, x = tol
    if x == RATE_TOLERANCE or x == BYTES_TOLERANCE:
        x += STALENESS[0]
    return abs(got - want) <= (x * abs(want) if kind == "rel" else x) + 1e-12


class Fleet:
    def __init__(self, logdir, treedir, binary):
        self.logdir = logdir
        self.treedir = treedir
        self.binary = binary
        self.hosts = {}  # address -> dict(host=Host, proc=Process, shard=int, role=str)
        self.mounts = []

    def build(self, count):
        templates = {}
        ports = free_ports(count)
        shards = [hashmod(f"127.0.0.1:{p}", SHARDS) for p in ports]
        # Sick hosts: iowait and a filling disk in shard 0, whose replica is
        # killed while their pages are pending; conntrack in shard 1.
        roles = {}
        for role, shard in (("iowait", 0), ("filesystem", 0), ("conntrack", 1)):
            i = next(i for i in range(count) if shards[i] == shard and i not in roles and
                     SHAPES[i % len(SHAPES)][0] >= 2)
            roles[i] = role
        for i, port in enumerate(ports):
            shape = SHAPES[i % len(SHAPES)]
            if shape not in templates:
                templates[shape] = hosttree.build_tree(self.treedir / f"template-{'-'.join(map(str, shape))}",
                                                       cpus=shape[0], disks=shape[1], nics=shape[2])
            root = self.treedir / f"host-{i:03d}"
            shutil.copytree(templates[shape], root, symlinks=True)
            role = roles.get(i, "healthy")
            profile = dict(
                busy=0.97 if i % 50 == 7 else 0.05 + 0.55 * ((i * 37) % 100) / 100,
                load_per_cpu=1.6 if i % 40 == 11 else 0.1 + 0.5 * ((i * 53) % 100) / 100,
                mem_used=0.95 if i % 45 == 13 else 0.2 + 0.6 * ((i * 71) % 100) / 100,
                disk_util=0.02 + 0.5 * ((i * 29) % 100) / 100,
                net_bps=1e5 * (1 + (i * 13) % 100),
            )
            if role == "iowait":
                # HighIOWait's disk term holds twice over (busy >= 60%,
                # queue >= 1); DiskSaturated's (busy >= 80%) does not.
                profile.update(busy=0.2, disk_util=0.7, disk_queue=1.5, iowait={1: 0.95})
            host = hosttree.Host(root, *shape, **profile, build=False)
            limit = 262144
            host.set_conntrack(int(limit * (0.95 if role == "conntrack" else ((i * 17) % 70) / 100)), limit)
            address = f"127.0.0.1:{port}"
            self.hosts[address] = dict(host=host, shard=shards[i], role=role, port=port, index=i)
        self.fill_filesystem(self.by_role("filesystem"))

    def by_role(self, role):
        return next(a for a, x in self.hosts.items() if x["role"] == role)

    def fill_filesystem(self, address):
        """A real 8 MiB tmpfs at the host's /data, filled to 99%: statfs is a
        system call, no file of the tree can fake it."""
        data = self.hosts[address]["host"].rootfs / "data"
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "usescope-fleet", str(data)], check=True)
        self.mounts.append(data)
        with open(data / "fill", "wb") as f:
            f.write(b"\0" * int(8 * 1024 * 1024 * 0.99))

    def unmount(self):
        for m in self.mounts:
            subprocess.run(["umount", "-l", str(m)], check=False)
        self.mounts = []

    def start_hosts(self):
        for address, x in self.hosts.items():
            host = x["host"]
            x["proc"] = h.Process(f"usescope-{x['index']:03d}", [
                str(self.binary), f"--web.listen-address={address}", f"--path.procfs={host.proc}",
                f"--path.sysfs={host.sys}", f"--path.rootfs={host.rootfs}", *NO_PROBES], x["port"], self.logdir)
        for x in self.hosts.values():
            x["proc"].wait_ready("/-/ready", timeout=120)
        dead = [x["proc"].name for x in self.hosts.values() if x["proc"].proc.poll() is not None]
        if dead:
            raise RuntimeError(f"hosts exited at start: {dead[:5]}")

    def start_ticker(self):
        """The ticker in a process of its own: in a thread it waited for
        the interpreter lock while this one parsed 200 pages, and fell
        seconds behind."""
        self._max_round = multiprocessing.Value("d", 2 * TICK_S)
        self._stop = multiprocessing.Event()
        self._ticker = multiprocessing.get_context("fork").Process(target=self.ticker, daemon=True)
        self._ticker.start()

    @property
    def max_round(self):
        return self._max_round.value

    @max_round.setter
    def max_round(self, value):
        self._max_round.value = value

    def stop_ticker(self):
        if getattr(self, "_ticker", None) and self._ticker.is_alive():
            self._stop.set()
            self._ticker.join(timeout=10)
            if self._ticker.is_alive():
                self._ticker.kill()

    def ticker(self):
        """A round every TICK_S (not TICK_S after the last round ended)."""
        # The harness's handler would run its clean-up in this copy too.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        next_round = time.monotonic()
        while not self._stop.wait(max(0.0, next_round - time.monotonic())):
            started = time.monotonic()
            now = time.time()
            for x in self.hosts.values():
                x["host"].tick(now)
            # A counter is at most this stale when read: the round's own
            # length, plus the wait until the next round starts.
            took = time.monotonic() - started
            self.max_round = max(self.max_round, took + max(TICK_S, took))
            next_round = max(next_round + TICK_S, time.monotonic())

    def scrape_all(self):
        pages = {}
        for address in self.hosts:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
                pages[address] = parse_exposition(r.read().decode())
        return pages


class BadHost:
    """A target that misbehaves: `slow` answers after twice the scrape
    timeout, `garbage` answers 200 with bytes that are no exposition,
    `flap` is up for 1.5 intervals and down (503) for as long (not a whole
    number of intervals, so the scrapes see both)."""

    def __init__(self, kind):
        self.kind = kind
        started = time.monotonic()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                status, body = 200, b"node_load1 0.5\n"
                if kind == "slow":
                    time.sleep(2 * INTERVAL_S)
                elif kind == "garbage":
                    # What a misconfigured proxy or a crashed agent returns.
                    body = b"<html><body><h1>502 Bad Gateway</h1>\n\x00\xff{{{ node_load1{ 1 2 3\n" * 50
                elif kind == "flap" and int((time.monotonic() - started) / (1.5 * INTERVAL_S)) % 2:
                    status, body = 503, b"down\n"
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the scraper gave up waiting

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *_: None
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Stack:
    """The monitoring side of deploy/fleet."""

    def __init__(self, logdir, fleet):
        self.logdir = logdir
        self.receiver = h.WebhookReceiver()
        names = ["am1", "am2", "am1_cluster", "am2_cluster", "query", "query_grpc", "rule", "rule_grpc"]
        names += [f"{k}-{shard}{replica}" for shard in range(SHARDS) for replica in "ab"
                  for k in ("http", "sidecar_http", "sidecar_grpc")]
        ports = dict(zip(names, free_ports(len(names))))
        self.ports = ports
        # The Alertmanager pair: alerts/alertmanager.yml, timings scaled.
        am_config = logdir / "alertmanager.yml"
        am_config.write_text(scaling.scale_alertmanager((h.ALERTS / "alertmanager.yml").read_text(), self.receiver.port))
        am_bin = h.require("prometheus-alertmanager", "prometheus-alertmanager")
        self.alertmanagers = []
        for n, peer in ((1, 2), (2, 1)):
            am = start("alertmanager", f"alertmanager-{n}", am_bin, logdir, ports[f"am{n}"], ALERTS=logdir,
                       DATA=h.tmpdir(f"am{n}"), HTTP=f"127.0.0.1:{ports[f'am{n}']}",
                       CLUSTER=f"127.0.0.1:{ports[f'am{n}_cluster']}", PEER=f"127.0.0.1:{ports[f'am{peer}_cluster']}")
            self.alertmanagers.append(am)
        for am in self.alertmanagers:
            am.wait_ready("/-/ready")
        # Prometheus and sidecar per shard and replica.
        prom_bin = h.require("prometheus", "prometheus")
        self.replicas = {}
        endpoints = []
        for shard in range(SHARDS):
            for replica in ("a", "b"):
                p = {k: ports[f"{k}-{shard}{replica}"] for k in ("http", "sidecar_http", "sidecar_grpc")}
                endpoints.append(f"127.0.0.1:{p['sidecar_grpc']}")
                self.replicas[(shard, replica)] = dict(ports=p, confdir=self.prometheus_dir(shard, replica, fleet),
                                                       data=h.tmpdir(f"prom-{shard}{replica}"))
        endpoints.append(f"127.0.0.1:{ports['rule_grpc']}")
        for key in self.replicas:
            self.start_replica(*key)
        # Thanos Query over deploy/fleet/thanos/endpoints.yml, addresses replaced.
        shipped = yaml.safe_load((DEPLOY / "thanos" / "endpoints.yml").read_text())["endpoints"]
        if len(shipped) != len(endpoints):
            raise RuntimeError(f"endpoints.yml lists {len(shipped)} endpoints, the test runs {len(endpoints)}")
        conf = logdir / "thanos"
        conf.mkdir()
        for e, address in zip(shipped, endpoints):
            e["address"] = address
        (conf / "endpoints.yml").write_text(yaml.safe_dump({"endpoints": shipped}))
        (conf / "fleet-rules.yml").write_text(scaling.scale_rules((DEPLOY / "thanos" / "fleet-rules.yml").read_text()))
        self.query_proc = start("thanos-query", "thanos-query", THANOS, logdir, ports["query"],
                                DEPLOY=logdir, HTTP=f"127.0.0.1:{ports['query']}",
                                GRPC=f"127.0.0.1:{ports['query_grpc']}")
        self.query_proc.wait_ready("/-/ready")
        self.query = Query(self.query_proc.url)
        self.rule_proc = start("thanos-rule", "thanos-rule", THANOS, logdir, ports["rule"],
                               DEPLOY=logdir, DATA=h.tmpdir("rule"), QUERY=f"127.0.0.1:{ports['query']}",
                               ALERTMANAGER_1=f"127.0.0.1:{ports['am1']}", ALERTMANAGER_2=f"127.0.0.1:{ports['am2']}",
                               HTTP=f"127.0.0.1:{ports['rule']}", GRPC=f"127.0.0.1:{ports['rule_grpc']}")
        self.rule_proc.wait_ready("/-/ready")

    def prometheus_dir(self, shard, replica, fleet):
        """deploy/fleet/prometheus/shard-0.yml (or -1) with its intervals scaled, the
        shipped rules scaled beside it, and the fleet's targets."""
        d = h.tmpdir(f"prom-config-{shard}{replica}")
        config = yaml.safe_load((DEPLOY / "prometheus" / f"shard-{shard}.yml").read_text())
        g = config["global"]
        for k in ("scrape_interval", "scrape_timeout", "evaluation_interval"):
            g[k] = interval_scaled(g[k])
        (d / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        (d / "rules").mkdir()
        for src in h.RULE_FILES:
            text = scaling.scale_rules(src.read_text())
            if not scaling.only_durations_differ(src.read_text(), text):
                raise RuntimeError(f"scaling {src.name} changed more than durations")
            (d / "rules" / src.name).write_text(text)
        (d / "targets").mkdir()
        (d / "targets" / "hosts.yml").write_text(yaml.safe_dump([{"targets": list(fleet.hosts)}]))
        (d / "alertmanagers.yml").write_text(yaml.safe_dump(
            [{"targets": [f"127.0.0.1:{self.ports['am1']}", f"127.0.0.1:{self.ports['am2']}"]}]))
        return d

    def start_replica(self, shard, replica):
        r = self.replicas[(shard, replica)]
        p = r["ports"]
        r["prometheus"] = start("prometheus", f"prometheus-{shard}{replica}", h.require("prometheus", "prometheus"),
                                self.logdir, p["http"], REPLICA=replica, CONFIG=r["confdir"] / "prometheus.yml",
                                DATA=r["data"], HTTP=f"127.0.0.1:{p['http']}")
        r["prometheus"].wait_ready("/-/ready", timeout=120)
        r["sidecar"] = start("thanos-sidecar", f"sidecar-{shard}{replica}", THANOS, self.logdir, p["sidecar_http"],
                             PROMETHEUS=f"127.0.0.1:{p['http']}", DATA=r["data"],
                             GRPC=f"127.0.0.1:{p['sidecar_grpc']}", HTTP=f"127.0.0.1:{p['sidecar_http']}")
        r["sidecar"].wait_ready("/-/ready", timeout=60)

    def kill_replica(self, shard, replica):
        """SIGKILL, as a crashed machine: no clean shutdown, no last flush."""
        r = self.replicas[(shard, replica)]
        for name in ("prometheus", "sidecar"):
            r[name].proc.kill()
            r[name].proc.wait()

    def live_prometheus(self):
        return [Query(r["prometheus"].url) for r in self.replicas.values() if r["prometheus"].proc.poll() is None]

    def add_targets(self, name, addresses):
        for r in self.replicas.values():
            path = r["confdir"] / "targets" / f"{name}.yml"
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text(yaml.safe_dump([{"targets": addresses}]))
            os.replace(tmp, path)


def dashboard_targets():
    d = json.loads(DASHBOARD.read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((f"{p['title']} / {t['refId']}", t["expr"].replace("$job", "usescope")))
    return out


def main():
    r = h.Results("fleet")
    if os.geteuid() != 0:
        required = os.environ.get("USESCOPE_REQUIRE_BPF") == "1" or os.environ.get("CI") == "true"
        print("fleet: needs root (a tmpfs mount for the filling filesystem)")
        line = "USESCOPE-SKIPPED test=tests/fleet needs=root"
        if not required:
            print(line)
            if os.environ.get("USESCOPE_SKIP_LOG"):
                with open(os.environ["USESCOPE_SKIP_LOG"], "a") as f:
                    f.write(line + "\n")
        print("fleet: 0 passed, 1 failed" if required else "fleet: 0 passed, 0 failed")
        return 1 if required else 0
    if not Path(THANOS).exists():
        print(f"fleet: {THANOS} missing (scripts/setup.sh builds Thanos)")
        print("fleet: 0 passed, 1 failed")
        return 1
    logdir = h.tmpdir("fleet")
    # The trees on a tmpfs where there is one: the ticker rewrites 600
    # files a second, which on a disk filesystem others are building on
    # fell seconds behind.
    shm = Path("/dev/shm")
    treedir = Path(tempfile.mkdtemp(prefix="usescope-fleet-trees-", dir=shm if shm.is_dir() else None))
    h._tmpdirs.append(treedir)
    if os.environ.get("USESCOPE_FLEET_KEEP"):  # keep the logs to look at
        h._tmpdirs.remove(logdir)
        print(f"fleet: keeping {logdir}")
    fleet = Fleet(logdir, treedir, h.usescope_bin())
    try:
        run(r, fleet, logdir)
    except Exception as e:
        import traceback
        traceback.print_exc()
        r.check("test ran without error", False, repr(e))
    finally:
        fleet.stop_ticker()
        fleet.unmount()
    print(f"fleet: took {time.monotonic() - STARTED:.0f} s with {HOSTS} hosts")
    return finish(r)


def finish(r):
    print(f"fleet: {r.passed} passed, {r.failed} failed")
    return 1 if r.failed or not r.passed else 0


def run(r, fleet, logdir):
    r.check("thanos tools rules-check deploy/fleet/thanos/fleet-rules.yml",
            subprocess.run([THANOS, "tools", "rules-check", f"--rules={DEPLOY / 'thanos' / 'fleet-rules.yml'}"],
                           capture_output=True).returncode == 0)
    for shard in range(SHARDS):
        cp = subprocess.run(["promtool", "check", "config", "--syntax-only", str(DEPLOY / "prometheus" / f"shard-{shard}.yml")],
                            capture_output=True, text=True)
        r.check(f"promtool check config deploy/fleet/prometheus/shard-{shard}.yml", cp.returncode == 0, cp.stdout + cp.stderr)
    log(f"building {HOSTS} host trees")
    fleet.build(HOSTS)
    fleet.start_ticker()
    log("starting the hosts")
    fleet.start_hosts()
    sick = {fleet.by_role(role): role for role in ("conntrack", "iowait", "filesystem")}
    log("sick hosts: " + ", ".join(f"{role} {a} (shard {fleet.hosts[a]['shard']})" for a, role in sick.items()))
    log("starting Alertmanagers, Prometheus pairs, sidecars, Thanos Query and Ruler")
    stack = Stack(logdir, fleet)
    q = fleet.query = stack.query
    t_up = time.monotonic()
    log("stack up")

    # Every target scraped: by its shard only, by both replicas.
    def all_up():
        res = q.vector('count(up{job="usescope"} == 1)', dedup="true")
        return res and int(float(res[0]["value"][1])) == HOSTS
    starved_check(r, stack, f"Thanos Query sees all {HOSTS} hosts up", h.wait_for("hosts up", all_up, 120, 1))
    def misplaced():
        """Hosts not scraped by exactly both replicas of their own shard
        (a replica's first scrapes are spread over an interval: asked
        until they agree or time is up)."""
        placement = {a: [] for a in fleet.hosts}
        for s in q.vector('up{job="usescope"}', dedup="false"):
            placement.setdefault(s["metric"]["instance"], []).append((s["metric"].get("shard"), s["metric"].get("replica")))
        return {a: p for a, p in placement.items()
                if sorted(p) != [(str(fleet.hosts[a]["shard"]), "a"), (str(fleet.hosts[a]["shard"]), "b")]}
    h.wait_for("placement", lambda: not misplaced(), 60, 2)
    wrong = misplaced()
    r.check("without dedup each host is scraped by both replicas of the shard its address hashes to, and no other",
            not wrong, dict(list(wrong.items())[:5]))
    plain = q.vector('up{job="usescope"}')  # as Grafana asks: no dedup parameter
    r.check("Thanos Query deduplicates by default: one series per host, no replica label",
            len(plain) == HOSTS and not any("replica" in s["metric"] for s in plain), len(plain))

    # One replica of shard 0 dies while its sick hosts' pages are pending,
    # and comes back 20 s later with a hole in its own TSDB.
    killed = (0, "a")
    h.wait_for("kill time", lambda: time.monotonic() - t_up > 20, 30, 1)
    log(f"killing prometheus and sidecar {killed}")
    kill_wall = time.time()
    stack.kill_replica(*killed)
    time.sleep(20)
    log(f"restarting {killed}")
    stack.start_replica(*killed)

    # Pages: each sick host once, through the pair; nobody else.
    expected_pages = {"conntrack": "ConntrackTableFull", "iowait": "HighIOWait", "filesystem": "FilesystemAlmostOutOfSpace"}

    def paged():
        got = {(a["labels"].get("alertname"), a["labels"].get("instance"))
               for _, _, status, a in stack.receiver.alerts("/page") if status == "firing"}
        return all((expected_pages[role], addr) in got for addr, role in sick.items())
    # FilesystemAlmostOutOfSpace's 30m for: is 180 s here.
    ok = h.wait_for("pages", paged, 240, 2)
    log("every sick host paged" if ok else "pages missing")
    print_notifications(stack)
    time.sleep(20)  # long enough for a second Alertmanager's duplicate to arrive (peer_timeout 15 s)
    notes = [(t, p, n) for t, p, n in stack.receiver.notifications if p == "/page"]
    for addr, role in sick.items():
        mine = [n for _, _, n in notes if n.get("status") == "firing" and
                any(a["labels"].get("instance") == addr for a in n["alerts"])]
        names = sorted({a["labels"]["alertname"] for n in mine for a in n["alerts"]})
        starved_check(r, stack, f"{role} host {addr} (shard {fleet.hosts[addr]['shard']}) paged {expected_pages[role]} exactly once",
                      len(mine) == 1 and names == [expected_pages[role]], f"{len(mine)} notifications: {names}")
    others = sorted({(a["labels"].get("alertname"), a["labels"].get("instance"))
                     for _, _, s, a in stack.receiver.alerts("/page") if a["labels"].get("instance") not in sick})
    r.check("no other host paged", not others, others)
    replicas_in_pages = [a["labels"] for _, _, _, a in stack.receiver.alerts() if "replica" in a["labels"]]
    r.check("alerts reach the Alertmanagers without the replica label", not replicas_in_pages, replicas_in_pages[:2])

    # Dashboard queries against the hosts' own scrapes.
    # The staleness that matters is the one inside the rate windows these
    # queries read: measure it from here on.
    fleet.max_round = 2 * TICK_S
    window_start = time.time()
    time.sleep(scaling.duration_ms(scaling.scaled("5m")) / 1000 - 10)
    log("scraping every host twice, 10 s apart")
    a = fleet.scrape_all()
    time.sleep(10)
    b = fleet.scrape_all()
    at = time.time()
    # A counter is up to max_round stale when read, and a sample is stamped
    # when its scrape started though the host answered up to the scrape's
    # duration later: the two ends of a 30 s rate window are each off by
    # between 0 and that much, so their difference by at most that much.
    slowest = max_scrape_duration(q, f"{time.time() - window_start:.0f}s")
    STALENESS[0] = (fleet.max_round + slowest) / (scaling.duration_ms(scaling.scaled("5m")) / 1000)
    print(f"     ticker: longest round {fleet.max_round:.2f} s; slowest scrape {slowest:.2f} s; "
          f"rate tolerances widened by {STALENESS[0]:.3f}")
    values = {}
    for expr_key, (fn, _) in ORACLES.items():
        values[expr_key] = {addr: fn(a[addr], b[addr]) for addr in fleet.hosts}
    checked = 0
    for label, expr in dashboard_targets():
        body = q.instant(expr, time=f"{at:.3f}")
        if not r.check(f"dashboard {label} runs through Thanos Query", body.get("status") == "success", body):
            continue
        result = body["data"]["result"]
        checked += 1
        check_panel(Starvable(r, stack), label, expr, result, values, fleet, sick, expected_pages)
    r.check("every query of the fleet dashboard was compared", checked == len(dashboard_targets()))

    # No gap across the replica's death and restart, with dedup.
    now = time.time()
    window = now - kill_wall + 15
    shard0 = [addr for addr, x in fleet.hosts.items() if x["shard"] == 0]

    def steps(expr, **params):
        """The largest step between samples since just before the kill, per host."""
        body = q.instant(f"{expr}[{window:.0f}s]", time=f"{now:.3f}", **params)
        out = {}
        for s in body["data"]["result"]:
            inside = [float(t) for t, _ in s["values"] if float(t) > kill_wall - 15]
            out[s["metric"]["instance"]] = max((y - x for x, y in zip(inside, inside[1:])), default=999)
        return out
    for expr in ('up{job="usescope"}', 'instance:node_cpu_utilisation:rate5m{job="usescope"}'):
        dedup = steps(expr, dedup="true")
        survivor = steps(f'{expr[:-1]}, shard="0", replica="b"}}', dedup="false")
        worst = max((dedup.get(addr, 999), addr) for addr in shard0)
        own = max(survivor.values(), default=999)
        # Thanos switches replicas only after a gap longer than its penalty
        # (about twice the interval), so a switch may skip two samples; and
        # the surviving replica's own steps (a rule evaluation it missed
        # while the machine was busy) are no gap the kill made.
        bound = max(3 * INTERVAL_S, own) + 0.5
        starved_check(r, stack, f"{expr}: no gap over the kill and restart in shard 0's {len(shard0)} hosts "
                f"(largest step between deduplicated samples {worst[0]:.1f} s; replica b's own {own:.1f} s; "
                f"interval {INTERVAL_S} s)", worst[0] <= bound, worst)

    # Costs: rule evaluation and Thanos Query latency.
    report_rule_evaluation(stack)
    report_query_latency(q)

    # Bad hosts cost only their own series.
    log("adding a slow, a garbage and a flapping host")
    bad = {kind: BadHost(kind) for kind in ("slow", "garbage", "flap")}
    stack.add_targets("bad", [b.address for b in bad.values()])
    time.sleep(8 * INTERVAL_S)
    ups = {s["metric"]["instance"]: float(s["value"][1]) for s in q.vector('up{job="usescope"}')}
    targets = {}
    for p in stack.live_prometheus():
        for t in p.get("/api/v1/targets")["data"]["activeTargets"]:
            targets.setdefault(t["labels"]["instance"], []).append((t["health"], t["lastError"]))
    for kind, bh in bad.items():
        print(f"     {kind} host {bh.address}: up {ups.get(bh.address)}, targets {targets.get(bh.address)}")
    r.check("the slow host (answering after twice the scrape timeout) is down", ups.get(bad["slow"].address) == 0, ups.get(bad["slow"].address))
    r.check("the garbage host is down", ups.get(bad["garbage"].address) == 0, ups.get(bad["garbage"].address))
    changes = q.vector(f'changes(up{{instance="{bad["flap"].address}"}}[{6 * INTERVAL_S:.0f}s])')
    r.check("the flapping host flaps", changes and float(changes[0]["value"][1]) >= 2, changes)
    starved_check(r, stack, f"all {HOSTS} real hosts still up", sum(1 for addr in fleet.hosts if ups.get(addr) == 1) == HOSTS)
    scraped = {s["metric"]["instance"]: float(s["value"][1]) for s in q.vector('scrape_samples_scraped{job="usescope"}')}
    pages_now = fleet.scrape_all()
    wrong = {addr: (scraped.get(addr), len(pages_now[addr])) for addr in fleet.hosts if scraped.get(addr) != len(pages_now[addr])}
    starved_check(r, stack, "every real host's samples per scrape (scrape_samples_scraped) equal its own page's series",
                  not wrong, dict(list(wrong.items())[:5]))
    unhealthy = [(g["name"], g.get("lastError")) for p in stack.live_prometheus()
                 for g in p.get("/api/v1/rules")["data"]["groups"] for rule in g["rules"] if rule.get("health") != "ok"]
    r.check("every rule evaluates healthily on every Prometheus", not unhealthy, unhealthy[:3])
    for bh in bad.values():
        bh.server.shutdown()

    # A shard dies: partial response, not an error; the Ruler pages.
    log("killing shard 1 (both replicas)")
    stack.kill_replica(1, "a")
    stack.kill_replica(1, "b")
    time.sleep(3)
    body = q.instant('count(up{job="usescope"})', time=f"{time.time():.3f}")
    shard0 = sum(1 for x in fleet.hosts.values() if x["shard"] == 0) + sum(
        1 for b_ in bad.values() if hashmod(b_.address, SHARDS) == 0)
    got = int(float(body["data"]["result"][0]["value"][1])) if body.get("status") == "success" and body["data"]["result"] else None
    r.check("with shard 1 dead Thanos Query answers (success) with shard 0's hosts and a partial-response warning",
            body.get("status") == "success" and got == shard0 and body.get("warnings"),
            {"status": body.get("status"), "count": got, "want": shard0, "warnings": body.get("warnings"), "error": body.get("error")})
    print(f"     warnings: {body.get('warnings')}")
    # Thanos 0.40.1 answers the same (success, with the warning) when asked
    # for partial_response=false with a strict endpoint unreachable: noted
    # in docs/fleet.md, not a property of this setup to hold it to.
    strict = q.instant('count(up{job="usescope"})', partial_response="false")
    print(f"     with partial_response=false: status {strict.get('status')}, warnings {len(strict.get('warnings') or [])}")

    def shard_page():
        return any(a["labels"].get("alertname") == "ShardNotReporting" and a["labels"].get("shard") == "1"
                   for _, _, s, a in stack.receiver.alerts("/page") if s == "firing")
    r.check("Thanos Ruler pages ShardNotReporting for shard 1 through the Alertmanager pair",
            h.wait_for("shard page", shard_page, 90, 2))
    print_notifications(stack)


class Starvable:
    """Results whose failed checks go through starved_check."""

    def __init__(self, r, stack):
        self.r, self.stack = r, stack

    def check(self, what, ok, detail=""):
        return starved_check(self.r, self.stack, what, ok, detail)


def check_panel(r, label, expr, result, values, fleet, sick, expected_pages):
    """One dashboard query's result against the hosts' own scrapes."""
    def value(res):
        return float(res[0]["value"][1]) if res else None

    def shard_ok():
        """No replica label (deduplicated), and a shard label, where the
        expression keeps it, that is the host's own shard."""
        bad = [s["metric"] for s in result if "replica" in s["metric"]
               or ("shard" in s["metric"] and s["metric"]["shard"] != str(fleet.hosts[s["metric"]["instance"]]["shard"]))]
        return not bad

    m = re.fullmatch(r"count\((.*) >= ([0-9.]+)\) or vector\(0\)", expr)
    if m:
        fn_key = next((k for k in ORACLES if k in m.group(1)), None)
        if fn_key is None:
            return r.check(f"dashboard {label}: has an oracle", False, expr)
        thr = float(m.group(2))
        want = sum(1 for v in values[fn_key].values() if v is not None and v >= thr)
        return r.check(f"dashboard {label} = {want} hosts", value(result) == want, f"{value(result)} != {want}")
    m = re.fullmatch(r"topk\((\d+), (.*)\)", expr)
    if m:
        k = int(m.group(1))
        fn_key = next((key for key in ORACLES if key in m.group(2)), None)
        if fn_key is None:
            return r.check(f"dashboard {label}: has an oracle", False, expr)
        tol = ORACLES[fn_key][1]
        want = {addr: v for addr, v in values[fn_key].items() if v is not None}
        ranked = sorted(want.values(), reverse=True)
        kth = ranked[min(k, len(ranked)) - 1] if ranked else None
        got = {s["metric"]["instance"]: float(s["value"][1]) for s in result}
        problems = []
        if len(got) != min(k, len(want)):
            problems.append(f"{len(got)} rows, want {min(k, len(want))}")
        for addr, v in got.items():
            if addr not in want or not close(v, want[addr], tol):
                problems.append(f"{addr}: {v} vs {want.get(addr)}")
            elif not close(want[addr], kth, tol) and want[addr] < kth:
                problems.append(f"{addr} ({want[addr]}) is below the {k}th ({kth})")
        for addr, v in want.items():
            if v > kth and not close(v, kth, tol) and addr not in got:
                problems.append(f"{addr} ({v}) missing")
        return r.check(f"dashboard {label}: the top {k} hosts and their values match the hosts' scrapes "
                       f"(k-th {kth:.4g})" if kth is not None else f"dashboard {label}",
                       not problems and shard_ok(), problems[:5] or result[:2])
    paging_now = {(expected_pages[role], addr) for addr, role in sick.items()}
    if expr == 'count(up{job="usescope"} == 1) or vector(0)':
        return r.check(f"dashboard {label} = {len(fleet.hosts)}", value(result) == len(fleet.hosts), value(result))
    if expr == 'count(up{job="usescope"} == 0) or vector(0)':
        return r.check(f"dashboard {label} = 0", value(result) == 0, value(result))
    if expr == 'count(count by (shard) (up{job="usescope"}))':
        return r.check(f"dashboard {label} = {SHARDS}", value(result) == SHARDS, value(result))
    if expr.startswith("count(count by (instance, job) (ALERTS{"):
        return r.check(f"dashboard {label} = {len(paging_now)} (the sick hosts)", value(result) == len(paging_now),
                       f"{value(result)}; without dedup: {alerts_detail(fleet)}")
    if expr.startswith("count by (alertname, instance, job) (ALERTS{"):
        got = {(s["metric"]["alertname"], s["metric"]["instance"]) for s in result}
        return r.check(f"dashboard {label}: the sick hosts' pages", got == paging_now and shard_ok(),
                       f"{sorted(got)}; without dedup: {alerts_detail(fleet)}")
    return r.check(f"dashboard {label}: has an oracle", False, expr)


def max_scrape_duration(q, window="5m"):
    res = q.vector(f'max(max_over_time(scrape_duration_seconds{{job="usescope"}}[{window}]))')
    return float(res[0]["value"][1]) if res else 0.0


def machine_busy(stack):
    """Why this machine could not keep the fleet's pace, or None: a scrape
    that took longer than the interval (the scraper waited for a CPU), or a
    rule group that missed an evaluation. Under such starvation alerts
    flap on their own (a replica that missed the samples resolves what the
    other fires), and the page checks cannot tell a fault from a busy
    machine."""
    reasons = []
    slowest = max_scrape_duration(stack.query, "10m")
    if slowest > INTERVAL_S:
        reasons.append(f"a scrape took {slowest:.1f} s at a {INTERVAL_S:g} s interval")
    missed = 0.0
    for p in stack.live_prometheus():
        with urllib.request.urlopen(p.url + "/metrics", timeout=30) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith("prometheus_rule_group_iterations_missed_total{"):
                    missed += float(line.rsplit(" ", 1)[1])
    if missed:
        reasons.append(f"{missed:.0f} rule group evaluations missed")
    return "; ".join(reasons) or None


def starved_check(r, stack, what, ok, detail=""):
    """A check that a CPU-starved machine can fail by itself: outside CI it
    is INCONCLUSIVE then, as tests/incidents does; in CI it fails."""
    if ok:
        return r.check(what, ok, detail)
    busy = machine_busy(stack)
    ci = os.environ.get("CI") == "true" or os.environ.get("USESCOPE_REQUIRE_BPF") == "1"
    if busy and not ci:
        print(f"INCONCLUSIVE {what}\n     (the machine is too busy: {busy})\n     {detail}")
        return False
    return r.check(what, ok, f"{detail}{f' (machine busy: {busy})' if busy else ''}")


def print_notifications(stack):
    print("     notifications (time since start, receiver, alert, instance, state):")
    for t, path, status, a in stack.receiver.alerts():
        print(f"     {t - STARTED:5.0f}s {path} {a['labels'].get('alertname')} {a['labels'].get('instance', '')} "
              f"{a['labels'].get('shard', '')} {a.get('status')}")


def alerts_detail(fleet):
    """Page-severity ALERTS as each replica has them, to tell a rule that
    stopped firing from a deduplication that lost it."""
    res = fleet.query.vector('ALERTS{severity="page"}', dedup="false")
    return sorted((s["metric"].get("alertname"), s["metric"].get("instance"), s["metric"].get("alertstate"),
                   s["metric"].get("shard"), s["metric"].get("replica")) for s in res)


def report_rule_evaluation(stack):
    print("rule evaluation per Prometheus (one shard, ~100 hosts; sum of the groups' last evaluation, "
          f"every {INTERVAL_S} s):")
    for (shard, replica), rep in stack.replicas.items():
        groups = Query(rep["prometheus"].url).get("/api/v1/rules")["data"]["groups"]
        total = sum(g["evaluationTime"] for g in groups)
        worst = max(groups, key=lambda g: g["evaluationTime"])
        with urllib.request.urlopen(rep["prometheus"].url + "/metrics", timeout=30) as resp:
            head = next((line.split()[-1] for line in resp.read().decode().splitlines()
                         if line.startswith("prometheus_tsdb_head_series ")), "?")
        print(f"  shard {shard} replica {replica}: {total * 1000:.1f} ms in {len(groups)} groups, "
              f"slowest {worst['name']} {worst['evaluationTime'] * 1000:.1f} ms; {head} head series")
    groups = Query(stack.rule_proc.url).get("/api/v1/rules")["data"]["groups"]
    print("  thanos rule: " + ", ".join(f"{g['name']} {g['evaluationTime'] * 1000:.1f} ms" for g in groups))


def report_query_latency(q):
    """Each dashboard query through Thanos Query, 3 times: instant, and a
    range over the last 5 minutes at the scrape interval (60 points; a
    1-hour panel at a 15 s step has 240)."""
    print(f"Thanos Query latency of the fleet dashboard's queries ({HOSTS} hosts, dedup; median of 3, ms):")
    print("| panel | instant | range 5 min |")
    print("|---|---:|---:|")
    tot_i, tot_r = 0.0, 0.0
    for label, expr in dashboard_targets():
        ti, tr = [], []
        for _ in range(3):
            now = time.time()
            t = time.monotonic()
            q.instant(expr, time=f"{now:.3f}")
            ti.append(time.monotonic() - t)
            t = time.monotonic()
            q.get("/api/v1/query_range", query=expr, start=f"{now - 300:.3f}", end=f"{now:.3f}", step=f"{INTERVAL_S}")
            tr.append(time.monotonic() - t)
        mi, mr = statistics.median(ti) * 1000, statistics.median(tr) * 1000
        tot_i += mi
        tot_r += mr
        print(f"| {label} | {mi:.0f} | {mr:.0f} |")
    print(f"| all {len(dashboard_targets())} queries, one after another | {tot_i:.0f} | {tot_r:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
