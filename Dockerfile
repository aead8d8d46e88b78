# usescope container image.
#   docker build -t usescope .
# Multi-stage: the Rust toolchain, clang and libbpf headers (which compile
# the embedded eBPF programs in build.rs) stay in the builder; the runtime
# image holds one binary on debian:bookworm-slim.

FROM rust:1.95-bookworm AS build
# clang/llvm compile ebpf-probes/*.bpf.c to BPF objects; libbpf-dev provides
# bpf_helpers.h and friends. vmlinux.h is checked in, so no BTF is needed
# on the build host.
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang llvm libbpf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every workspace member's manifest must be present for cargo to resolve
# the workspace, hence bench/ as well.
COPY Cargo.toml Cargo.lock ./
COPY exporter exporter
COPY ebpf-probes ebpf-probes
COPY bench bench
RUN cargo build --release --locked -p usescope \
 && strip target/release/usescope

FROM debian:bookworm-slim
COPY --from=build /src/target/release/usescope /usr/local/bin/usescope
# Non-root with file capabilities: Docker and Kubernetes give a non-root
# process no capabilities except through the binary's file capabilities, so
# the binary carries exactly the start-up set (docs/deployment.md):
#   cap_bpf, cap_perfmon  load and attach the probes
#   cap_sys_admin         --probe.bpf-stats only (BPF_ENABLE_STATS, usescope_bpf_program_*)
#   cap_setpcap           empty the bounding set before dropping everything
# "+ep": permitted and effective from exec, because usescope does not raise
# capabilities itself.
# The runtime must still allow them (cap_add), and must NOT set
# no-new-privileges, which disables file capabilities; usescope sets
# no_new_privs itself as soon as its probes are attached and its
# capabilities are dropped (CapEff 0 afterwards).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libcap2-bin \
 && setcap cap_bpf,cap_perfmon,cap_sys_admin,cap_setpcap+ep /usr/local/bin/usescope \
 && apt-get purge -y libcap2-bin && apt-get autoremove -y \
 && rm -rf /var/lib/apt/lists/*
USER 65534:65534
EXPOSE 9200
ENTRYPOINT ["/usr/local/bin/usescope"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root", "--web.listen-address=:9200"]
