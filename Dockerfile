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
# Started as root inside the container only so that the capabilities granted
# by the runtime (see docker-compose.yml) are effective while the probes load;
# usescope then clears every capability and sets no_new_privs.
EXPOSE 9200
ENTRYPOINT ["/usr/local/bin/usescope"]
CMD ["--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--web.listen-address=:9200"]
