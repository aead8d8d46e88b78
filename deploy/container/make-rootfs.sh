#!/bin/sh
# Lays out the runtime image's whole file tree under ROOTFS:
#   usr/local/bin/usescope          the binary (its BPF objects are embedded)
#   the shared libraries it links   glibc, libm, libgcc_s and the loader, as ldd resolves them
#   etc/passwd, etc/group           root and nobody/nogroup (65534), for --runtime.user
#   etc/nsswitch.conf               users and groups come from those files only
# The image is then `FROM scratch` plus this tree: no shell, no package
# manager, nothing else to exploit or patch.
#
# Run by the Dockerfile's build stage and by tests/container/run.sh, so
# both images are laid out by the same code.
#   make-rootfs.sh BINARY ROOTFS
set -eu
binary=$1
rootfs=$2

install -D -m 0755 "$binary" "$rootfs/usr/local/bin/usescope"

# ldd prints "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" for each
# library and "/lib64/ld-linux-x86-64.so.2 (0x...)" for the loader; the
# vDSO has no file. Copy each library's contents (-L: not the symlink) to
# the path the binary will look it up under.
libraries=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libraries" ] || { echo "make-rootfs: ldd found no libraries for $binary" >&2; exit 1; }
for lib in $libraries; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done

mkdir -p "$rootfs/etc"
cat > "$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/:/nonexistent
nobody:x:65534:65534:nobody:/nonexistent:/nonexistent
EOF
cat > "$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
printf 'passwd: files\ngroup: files\n' > "$rootfs/etc/nsswitch.conf"
