# usescope container image.
#   docker build -t usescope .
# Two stages: the Rust toolchain, clang and the libbpf headers (which
# compile the embedded eBPF programs in build.rs) stay in the build stage;
# the runtime image is `FROM scratch` with one binary, the four shared
# libraries it links and two lines of passwd (deploy/container/make-rootfs.sh).
# How to run it, and the capabilities to give it: docs/containers.md.

FROM rust:1.95-bookworm AS build
# clang/llvm compile ebpf-probes/*.bpf.c to BPF objects; libbpf-dev provides
# bpf_helpers.h and friends. vmlinux.h is checked in, so no BTF is needed
# on the build host. nasm and the autotools build ISA-L's igzip (gzip for
# /metrics), which is linked statically.
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang llvm libbpf-dev \
    nasm autoconf automake libtool make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every workspace member's manifest must be present for cargo to resolve
# the workspace, hence bench/ as well.
COPY Cargo.toml Cargo.lock ./
COPY exporter exporter
COPY ebpf-probes ebpf-probes
COPY bench bench
# Optimised with the execution profile in exporter/pgo (scripts/build-release.sh).
COPY scripts/build-release.sh scripts/
RUN scripts/build-release.sh \
 && install -D -m 0755 target/release/usescope /out/usescope \
 && strip /out/usescope
COPY deploy/container/make-rootfs.sh /usr/local/bin/make-rootfs.sh
RUN make-rootfs.sh /out/usescope /rootfs

# The runtime stage. tests/container/run.sh builds everything from the next
# line to the end of this file as it is, on a build stage of its own that
# runs the same make-rootfs.sh on a binary built on the host.
FROM scratch AS runtime
COPY --from=build /rootfs/ /
# No file capabilities: a binary with effective file capabilities cannot
# even be executed unless the container's bounding set holds all of them.
# Instead usescope starts as uid 0 with exactly the capabilities the
# container configuration grants (cap_drop ALL plus cap_add), loads and
# attaches its probes, then switches to uid 65534 and drops every
# capability, with no_new_privs, on every thread. With no capabilities at
# all it still starts and serves the /proc metrics, with
# usescope_probe_up 0 and the reason in its log.
USER 0:0
EXPOSE 9200
# SIGTERM (docker stop) detaches the probes and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/usescope", "--runtime.user=65534"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root", "--web.listen-address=:9200"]
