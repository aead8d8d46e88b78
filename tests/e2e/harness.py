"""Shared pieces of the end-to-end tests (Python 3 stdlib only).

Starts the real binaries on 127.0.0.1 with random free ports and temporary
storage, talks to their HTTP APIs, and kills every process it started, by
PID, when the test ends, whether it passed, failed or raised.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"
RULE_FILES = [ALERTS / "usescope-rules.yml", ALERTS / "usescope-alerts.yml"]

_children = []
_tmpdirs = []


def _cleanup():
    for proc in _children:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 5
    for proc in _children:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)
# SIGTERM (e.g. from a CI timeout) runs the same clean-up via SystemExit.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def tmpdir(prefix):
    d = Path(tempfile.mkdtemp(prefix=f"usescope-e2e-{prefix}-"))
    _tmpdirs.append(d)
    return d


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """One started binary: its PID, its log file and its base URL."""

    def __init__(self, name, argv, port, logdir, pass_fds=()):
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = logdir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     pass_fds=pass_fds)
        _children.append(self.proc)

    def wait_ready(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines=30):
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def usescope_bin():
    path = Path(os.environ.get("USESCOPE_BIN", "target/debug/usescope"))
    if not path.is_absolute():
        path = REPO / path
    if not path.exists():
        raise SystemExit(f"usescope binary not found at {path} (cargo build, or set USESCOPE_BIN)")
    return path


def require(binary, package):
    path = shutil.which(binary)
    if not path:
        raise SystemExit(f"{binary} not found: apt-get install {package}")
    return path


def start_usescope(args, logdir):
    port = free_port()
    p = Process("usescope", [str(usescope_bin()), f"--web.listen-address=127.0.0.1:{port}", *args], port, logdir)
    p.wait_ready("/-/ready")
    return p


def start_alertmanager(config, logdir):
    binary = require("prometheus-alertmanager", "prometheus-alertmanager")
    port = free_port()
    storage = tmpdir("alertmanager")
    p = Process(
        "alertmanager",
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        port,
        logdir,
    )
    p.wait_ready("/-/ready")
    return p


def start_prometheus(usescope_port, rule_files, logdir, alertmanager_port=None, storage=None,
                     interval="1s", extra_ports=()):
    """Prometheus scraping usescope every `interval` (1 s unless told) and
    evaluating the rules as often. Returns the process; each usescope target
    (usescope_port, then extra_ports) has job="usescope" and
    instance="127.0.0.1:<port>"."""
    binary = require("prometheus", "prometheus")
    port = free_port()
    storage = storage or tmpdir("prometheus")
    confdir = tmpdir("prometheus-config")
    alerting = ""
    if alertmanager_port:
        alerting = (
            "alerting:\n  alertmanagers:\n    - static_configs:\n"
            f"        - targets: ['127.0.0.1:{alertmanager_port}']\n"
        )
    rules = "".join(f"  - {f}\n" for f in rule_files)
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in (usescope_port, *extra_ports))
    config = confdir / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: {interval}\n"
        f"rule_files:\n{rules}{alerting}"
        "scrape_configs:\n  - job_name: usescope\n    static_configs:\n"
        f"      - targets: [{targets}]\n"
    )
    p = Process(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        port,
        logdir,
    )
    p.wait_ready("/-/ready")
    return p


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def query(prom, expr):
    """Instant query; returns (status, result list or error string)."""
    url = prom.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(url)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        return "error", f"{body.get('errorType')}: {body.get('error')}"
    return "success", body["data"]["result"]


def wait_for(what, fn, timeout, interval=1.0):
    """Polls fn() until it returns something truthy; returns it or None."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


class Results:
    """Counts checks and prints the closing `e2e: N passed, M failed` line."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {what}")
        else:
            self.failed += 1
            print(f"FAIL {what}")
            if detail:
                print("     " + str(detail).replace("\n", "\n     "))
        return ok

    def finish(self):
        print(f"e2e: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed or not self.passed else 0


class WebhookReceiver:
    """Alertmanager's webhook receiver on 127.0.0.1: records every
    notification as (monotonic arrival time, URL path, the posted JSON).
    The path is the receiver's name in alertmanager.yml's URLs (/page,
    /ticket)."""

    def __init__(self):
        import http.server
        import threading

        self.notifications = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with receiver._lock:
                    receiver.notifications.append((time.monotonic(), self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def alerts(self, path=None):
        """Every alert of every notification so far, as (time, path,
        notification status, alert) tuples."""
        with self._lock:
            notes = list(self.notifications)
        return [(t, p, n.get("status"), a) for t, p, n in notes if path in (None, p) for a in n.get("alerts", [])]
