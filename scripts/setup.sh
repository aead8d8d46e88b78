#!/usr/bin/env bash
# Installs what usescope needs to build, run and test on a fresh Debian 12
# machine (run as root). Idempotent: apt runs only for missing packages.
#
# Rust >= 1.95 must already be on PATH (rustup's stable): Debian 12's own
# rustc is 1.63, far too old, and no other Rust source is reachable here.
set -euo pipefail

packages=(
  clang llvm libbpf-dev bpftool   # compile the eBPF programs (build.rs)
  gcc libc6-dev                   # link Rust binaries
  nasm autoconf automake libtool make  # build ISA-L's igzip (gzip for /metrics) from the isal-sys crate
  prometheus prometheus-alertmanager  # promtool, amtool and the real servers the tests start
  docker-compose                  # docker-compose.yml: validation, and the stack in tests/container/run.sh
  docker.io debootstrap           # tests/container/run.sh: its own dockerd (with containerd, runc, ctr), a base image made locally
  iptables                        # tests/container/run.sh checks that the host has no Docker chains afterwards
  binutils                        # strip, for the image's binary
  python3-yaml                    # deploy/container/security.py reads the manifests
  python3 python3-venv curl openssl ca-certificates util-linux libcap2-bin
  systemd                         # systemd-analyze verify of the unit file
  wrk                             # the load test
  python3-fusepy                  # tests/tools/hangfs.py: a real hung FUSE mount (libfuse2)
  xfsprogs btrfs-progs            # real XFS and btrfs filesystems on loop devices (tests/compat_fs_net.rs)
  e2fsprogs                       # mkfs.ext4: the ext4 on a loop device of the cachestat oracle (tests/probe_cachestat.rs)
  mount                           # losetup: the loop device of the biolatency test (tests/probes.rs)
  nftables iproute2               # nft rules and conntrack in namespaces: the drops test's oracle (tests/drops_in_use.rs), tests/incidents
  e2fsprogs                       # tests/incidents: ext4 on a loop device
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends: the prometheus package recommends Debian's
  # node_exporter, which we do not want running beside usescope.
  # No package may start its service: a system dockerd would create the
  # docker0 bridge and iptables rules on this host, and the tests start
  # their own dockerd, Prometheus and Alertmanager where they need them.
  # policy-rc.d is how Debian's maintainer scripts are told so; one that
  # exists already is left alone.
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  status=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
  [ "$status" -eq 0 ] || exit "$status"
fi

if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust >= 1.95 (rustup) first" >&2; exit 1; }
rustc_minor=$(rustc --version | awk '{split($2, v, "."); print v[2]}')
if [ "${rustc_minor:-0}" -lt 95 ]; then
  echo "setup: rustc $(rustc --version) is older than 1.95" >&2
  exit 1
fi
for comp in rustfmt clippy; do
  if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
    command -v rustup >/dev/null && rustup component add "$comp" >/dev/null 2>&1 || true
  fi
done
# node_exporter, the oracle of the compatibility tests (scripts/compat-node-exporter.sh
# and the compat_* integration tests), built from the Go module proxy.
NODE_EXPORTER_VERSION=v1.12.1
gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if ! "$gobin/node_exporter" --help >/dev/null 2>&1; then
  command -v go >/dev/null || { echo "setup: Go is needed to build node_exporter (the compatibility oracle)" >&2; exit 1; }
  echo "setup: building node_exporter $NODE_EXPORTER_VERSION with go install"
  (cd /tmp && go install "github.com/prometheus/node_exporter@$NODE_EXPORTER_VERSION")
fi
# jsonnet renders node-mixin's alerts from node_exporter's module source
# (docs/node-mixin), which tests/incidents loads beside usescope's own.
JSONNET_VERSION=v0.20.0
if ! "$gobin/jsonnet" --version 2>/dev/null | grep -q "${JSONNET_VERSION}"; then
  echo "setup: building jsonnet $JSONNET_VERSION with go install"
  (cd /tmp && go install "github.com/google/go-jsonnet/cmd/jsonnet@$JSONNET_VERSION")
fi

# Thanos (sidecar, query, rule), the distributed query layer of the fleet
# reference setup (deploy/fleet) and its test (tests/fleet). Its go.mod has
# replace directives, which `go install pkg@version` refuses, so it is built
# from a small wrapper module that requires it and copies those replace lines
# from the module's own go.mod. v0.40.1: v0.41.0 does not build from the
# module proxy (a replacement it names is not served) and v0.42 needs a newer
# Go. About 5 minutes on 2 cores, at low priority beside other builds.
THANOS_VERSION=v0.40.1
# Built as Thanos's own release is (.promu.yml): without the slicelabels tag
# Thanos Query panics in the labels code (labels.decodeSize) at its first
# endpoint update. `go version -m` shows the tags a binary was built with.
if ! "$gobin/thanos" --version 2>&1 | grep -q "version ${THANOS_VERSION#v} " ||
  ! go version -m "$gobin/thanos" 2>/dev/null | grep -q -- "-tags=netgo,slicelabels"; then
  command -v go >/dev/null || { echo "setup: Go is needed to build Thanos (tests/fleet)" >&2; exit 1; }
  echo "setup: building thanos $THANOS_VERSION from a wrapper module (about 5 minutes)"
  thanos_mod=$(mktemp -d)
  (
    set -e
    cd "$thanos_mod"
    go mod init usescope.local/thanos-build >/dev/null 2>&1
    # The replace directives of Thanos's own go.mod (block or single-line
    # form), each as `old[@v]=new[@v]` for go mod edit.
    go mod download -json "github.com/thanos-io/thanos@$THANOS_VERSION" | python3 -c '
import json, sys
text = open(json.load(sys.stdin)["GoMod"]).read()
lines = [l.split("//")[0].strip() for l in text.splitlines()]
block, found = False, []
for l in lines:
    if l == "replace (":
        block = True
    elif block and l == ")":
        block = False
    elif (block or l.startswith("replace ")) and "=>" in l:
        old, new = (s.split() for s in l.removeprefix("replace ").split("=>"))
        found.append("@".join(old) + "=" + "@".join(new))
print("\n".join(found))' | while read -r r; do go mod edit -replace "$r"; done
    go get "github.com/thanos-io/thanos/cmd/thanos@$THANOS_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
    nice -n 19 go build -tags netgo,slicelabels -o "$gobin/thanos" \
      -ldflags "-X github.com/prometheus/common/version.Version=${THANOS_VERSION#v}" \
      github.com/thanos-io/thanos/cmd/thanos
  ) || { rm -rf "$thanos_mod"; echo "setup: building thanos $THANOS_VERSION failed" >&2; exit 1; }
  rm -rf "$thanos_mod"
fi

# cargo-machete, the unused-dependency check of scripts/check_dependencies.sh,
# from crates.io (about 2.5 minutes to build the first time).
CARGO_MACHETE_VERSION=0.9.2
if [ "$(cargo machete --version 2>/dev/null)" != "$CARGO_MACHETE_VERSION" ]; then
  echo "setup: installing cargo-machete $CARGO_MACHETE_VERSION with cargo install"
  cargo install --locked --quiet cargo-machete --version "$CARGO_MACHETE_VERSION"
fi

# grafana-foundation-sdk, which dashboards/generate.py builds the dashboards
# with (tests/e2e/run.sh checks the checked-in JSON is what it generates),
# from PyPI into a virtual environment of its own; generate.py finds it there.
# The copy of requirements.txt in the venv records what was installed.
dash_req="$(cd "$(dirname "$0")/.." && pwd)/dashboards/requirements.txt"
dash_venv="${XDG_CACHE_HOME:-$HOME/.cache}/usescope/dashboards-venv"
if ! cmp -s "$dash_req" "$dash_venv/requirements.txt"; then
  echo "setup: installing dashboards/requirements.txt into $dash_venv"
  python3 -m venv --clear "$dash_venv"
  "$dash_venv/bin/pip" install --quiet --disable-pip-version-check -r "$dash_req"
  cp "$dash_req" "$dash_venv/requirements.txt"
fi

echo "setup: ok ($(rustc --version), $(clang --version | head -1))"
