"""node-mixin's own alerts, rendered from node_exporter's module source
(docs/node-mixin in the Go module cache, put there by scripts/setup.sh's
`go install` of node_exporter) with jsonnet, selecting job="usescope", and
scaled like usescope's rules. They show that usescope's metrics page
through the upstream rules unchanged, not only through usescope's copies.
"""

import json
import os
import subprocess
from pathlib import Path

import scaling

NODE_EXPORTER_VERSION = "v1.12.1"
SELECTOR = 'job="usescope"'


def gopath():
    try:
        return Path(subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip())
    except OSError:
        return Path.home() / "go"


def render(dest, drop_alerts=()):
    """Writes the scaled alerts, less those named in `drop_alerts`, to
    `dest` (JSON, which Prometheus reads as YAML). Raises RuntimeError
    naming what is missing."""
    root = gopath() if os.environ.get("GOPATH") is None else Path(os.environ["GOPATH"])
    mixin = root / f"pkg/mod/github.com/prometheus/node_exporter@{NODE_EXPORTER_VERSION}/docs/node-mixin"
    jsonnet = root / "bin/jsonnet"
    for need in (mixin, jsonnet):
        if not need.exists():
            raise RuntimeError(f"{need} is missing (scripts/setup.sh installs it)")
    program = ('((import "config.libsonnet") + (import "alerts/alerts.libsonnet")'
               f' + {{_config+:: {{nodeExporterSelector: {json.dumps(SELECTOR)}}}}}).prometheusAlerts')
    out = subprocess.run([str(jsonnet), "-e", program], cwd=mixin, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"jsonnet on {mixin} failed: {out.stderr.strip()}")
    rules = json.loads(out.stdout)
    for group in rules["groups"]:
        group["rules"] = [rule for rule in group["rules"] if rule.get("alert") not in drop_alerts]
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = scaling.scaled(rule["for"])
            rule["expr"] = scaling.scale_rules(rule["expr"])
    dest.write_text(json.dumps(rules, indent=1))
    return dest
