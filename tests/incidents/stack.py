"""The monitoring stack the incidents page through: usescope instances,
one Prometheus running the shipped rules scaled by scaling.FACTOR, one
Alertmanager running alerts/alertmanager.yml with its timings scaled, and a
webhook receiver standing in for the pager. Built on tests/e2e/harness.py.
"""

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import harness as h  # noqa: E402
import node_mixin  # noqa: E402
import scaling  # noqa: E402

HERE = Path(__file__).resolve().parent
# Probes whose series the alerts read are on; the rest are off to keep the
# namespace instances small.
NO_PROBES = ["--no-probe.runqlat", "--no-probe.cachestat", "--no-probe.drops"]
# What a namespace's usescope is for. Only these: it runs in the mount
# namespace `ip netns exec` makes, where mounts the host makes later are not
# visible, so its filesystem collector would stat the wrong filesystem.
NETNS_COLLECTORS = ["--collector.disable-defaults", "--collector.conntrack", "--collector.netstat",
                    "--collector.tcpsockets", "--collector.netdev"]


def usescope_in_netns(netns, logdir):
    """A usescope inside `netns`, so it reads that namespace's conntrack
    table and TcpExt counters, served on a loopback port of the host's
    namespace (where Prometheus runs) through netns_relay.py. Returns the
    host port."""
    inner = h.free_port()
    h.Process(f"usescope-{netns}", ["ip", "netns", "exec", netns, str(h.usescope_bin()),
                                    f"--web.listen-address=127.0.0.1:{inner}", *NETNS_COLLECTORS, *NO_PROBES], inner, logdir)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    relay = h.Process(f"relay-{netns}", ["ip", "netns", "exec", netns, sys.executable, str(HERE / "netns_relay.py"),
                                         str(listener.fileno()), str(inner)], port, logdir, pass_fds=(listener.fileno(),))
    listener.close()
    relay.wait_ready("/-/ready")
    return port


def without_alerts(text, names):
    """A rule file less every `- alert: NAME` block of `names`."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        m = re.match(r"^\s*- alert: (\S+)", line)
        if m:
            skipping = m.group(1) in names
        elif re.match(r"^\s*- (record|name):", line):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)


class Stack:
    """`drop_alerts` removes those alerts from every rule file, to show
    that the incident that needs one then fails."""

    def __init__(self, logdir, host_usescope_args=(), drop_alerts=()):
        self.logdir = logdir
        self.receiver = h.WebhookReceiver()
        rules = []
        for src in h.RULE_FILES:
            original = src.read_text()
            copy = scaling.scale_rules(original)
            if not scaling.only_durations_differ(original, copy):
                raise RuntimeError(f"scaling {src.name} changed more than durations")
            dest = logdir / src.name
            dest.write_text(without_alerts(copy, set(drop_alerts)))
            rules.append(dest)
        rules.append(node_mixin.render(logdir / "node-mixin-alerts.yml", set(drop_alerts)))
        am_config = logdir / "alertmanager.yml"
        am_config.write_text(scaling.scale_alertmanager((h.ALERTS / "alertmanager.yml").read_text(), self.receiver.port))
        self.alertmanager = h.start_alertmanager(am_config, logdir)
        self.usescope = h.start_usescope(list(host_usescope_args), logdir)
        self.host = f"127.0.0.1:{self.usescope.port}"
        self.netns_ports = {}
        self._rules = rules
        self.prometheus = None

    def add_netns(self, netns):
        """Call before start(): a usescope inside `netns`; returns its
        instance label."""
        port = usescope_in_netns(netns, self.logdir)
        self.netns_ports[netns] = port
        return f"127.0.0.1:{port}"

    def start(self):
        self.prometheus = h.start_prometheus(self.usescope.port, self._rules, self.logdir, self.alertmanager.port,
                                             interval=scaling.interval(), extra_ports=self.netns_ports.values())

    def value(self, expr):
        """The first sample of an instant query, or None."""
        status, result = h.query(self.prometheus, expr)
        if status != "success" or not result:
            return None
        return float(result[0]["value"][1])

    def vector(self, expr):
        """An instant query's samples as (labels, value) pairs, [] on error."""
        status, result = h.query(self.prometheus, expr)
        if status != "success":
            return []
        return [(s["metric"], float(s["value"][1])) for s in result]

    def notifications(self, alertname, since, status, **labels):
        return [
            (t, path, a) for t, path, note_status, a in self.receiver.alerts()
            if t >= since and a["status"] == status and a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def wait_notification(self, alertname, since, status, timeout, **labels):
        """Waits for Alertmanager to notify the receiver of `alertname` with
        these labels in `status` (firing, resolved); returns (seconds since
        `since`, receiver path, alert) or None."""
        found = h.wait_for(alertname, lambda: self.notifications(alertname, since, status, **labels),
                           timeout, interval=0.25)
        if not found:
            return None
        t, path, alert = found[0]
        return t - since, path, alert

    def firing_in_prometheus(self, alertname, **labels):
        matchers = ",".join([f'alertname="{alertname}"', 'alertstate="firing"', *(f'{k}="{v}"' for k, v in labels.items())])
        return self.value(f"count(ALERTS{{{matchers}}})")


def run(argv, **kw):
    """A command that must succeed; its output on failure."""
    out = subprocess.run(argv, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def now():
    return time.monotonic()
