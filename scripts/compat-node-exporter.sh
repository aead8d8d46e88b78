#!/usr/bin/env bash
# One command: install node_exporter v1.12.1 (go install, from the Go module
# proxy) if missing, build usescope, and compare both exporters' default
# output on this machine and on the fixture trees (scripts/compat_node_exporter.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ne="${NODE_EXPORTER:-$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/node_exporter}"
if [ ! -x "$ne" ]; then
  command -v go >/dev/null || { echo "compat: needs Go to install node_exporter (apt-get install golang-go, or a newer Go)"; exit 1; }
  echo "installing node_exporter with go install ..."
  (cd /tmp && go install github.com/prometheus/node_exporter@v1.12.1)
fi
"$ne" --version 2>&1 | head -1 || true
go version -m "$ne" 2>/dev/null | awk '$1=="mod" && $2 ~ /node_exporter/ {print "node_exporter module version:", $3}' || true
scripts/build-release.sh -q
exec python3 scripts/compat_node_exporter.py --usescope target/release/usescope --node-exporter "$ne"
