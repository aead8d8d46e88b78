#!/usr/bin/env python3
"""The container security rules, in one place, for every way usescope ships.

The capability sets below are the ones docs/containers.md gives; the
Kubernetes DaemonSet, docker-compose.yml and tests/container/run.sh all
take them from here, so they cannot drift apart.

  security.py caps ENGINE_VERSION      the set for a Docker engine, one per line
  security.py daemonset FILE           check the DaemonSet's pod and container
  security.py compose FILE             check the compose file's usescope service

The rules: not privileged; every capability dropped and exactly the
documented ones added; a read-only root filesystem; no_new_privs from the
start (nothing is gained through exec: usescope needs no file
capabilities); the host's /proc, /sys and / mounted read-only and passed
with --path.procfs, --path.sysfs and --path.rootfs.
"""

import sys

import yaml

# Load and attach the probes (kernel >= 5.8), then switch to uid 65534 and
# empty the bounding set. For engines that know CAP_BPF and CAP_PERFMON
# (Docker >= 23.0, containerd, CRI-O) and Kubernetes.
CURRENT = ["BPF", "PERFMON", "SETUID", "SETGID", "SETPCAP"]
# Docker 20.10 rejects the names BPF and PERFMON ("unknown capability");
# CAP_SYS_ADMIN includes both for everything BPF does.
DOCKER_20_10 = ["SYS_ADMIN", "SETUID", "SETGID", "SETPCAP"]
# --probe.bpf-stats (BPF_ENABLE_STATS) needs CAP_SYS_ADMIN on any engine,
# which covers BPF and PERFMON as well: the compose stack, which turns the
# statistics on, therefore uses DOCKER_20_10 and runs on every engine.
BPF_STATS = DOCKER_20_10

# The host paths usescope reads, where they are mounted, and the flag that
# points usescope there.
HOST_MOUNTS = {"/proc": ("/host/proc", "--path.procfs"),
               "/sys": ("/host/sys", "--path.sysfs"),
               "/": ("/host/root", "--path.rootfs")}


def caps_for_engine(version):
    """The documented set for a Docker engine version such as 20.10.24."""
    major = int(version.split(".")[0])
    return CURRENT if major >= 23 else DOCKER_20_10


def expected_caps(args):
    return BPF_STATS if "--probe.bpf-stats" in args else CURRENT


def check_caps(problems, what, drop, add, args):
    if [c.upper() for c in drop or []] != ["ALL"]:
        problems.append(f"{what}: capabilities must drop ALL, not {drop}")
    want = expected_caps(args)
    if sorted(c.upper() for c in add or []) != sorted(want):
        problems.append(f"{what}: capabilities added are {add}, the documented set is {want}")


def check_paths(problems, what, args, mounts):
    """mounts: container path -> (host path, read-only)."""
    for host, (inside, flag) in HOST_MOUNTS.items():
        found = [m for m in mounts.items() if m[1][0] == host and m[0] == inside]
        if not found:
            problems.append(f"{what}: the host's {host} is not mounted at {inside}")
        elif not found[0][1][1]:
            problems.append(f"{what}: the host's {host} at {inside} is not read-only")
        if f"{flag}={inside}" not in args:
            problems.append(f"{what}: {flag}={inside} is missing from the arguments")


def check_daemonset(path):
    problems = []
    docs = [d for d in yaml.safe_load_all(open(path)) if d and d.get("kind") == "DaemonSet"]
    if len(docs) != 1:
        return [f"{path}: expected one DaemonSet, found {len(docs)}"]
    pod = docs[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in pod.get("volumes", [])}
    for c in pod["containers"]:
        what = f"{path}: container {c['name']}"
        sc = c.get("securityContext", {})
        args = c.get("args", [])
        if sc.get("privileged"):
            problems.append(f"{what}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{what}: allowPrivilegeEscalation must be false (no_new_privs)")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{what}: readOnlyRootFilesystem must be true")
        if sc.get("runAsUser", pod.get("securityContext", {}).get("runAsUser")) != 0:
            problems.append(f"{what}: must start as uid 0 (capabilities from the container "
                            "config reach only uid 0; usescope switches to 65534 itself)")
        caps = sc.get("capabilities", {})
        check_caps(problems, what, caps.get("drop"), caps.get("add"), args)
        mounts = {m["mountPath"]: (volumes.get(m["name"]), m.get("readOnly") is True)
                  for m in c.get("volumeMounts", [])}
        check_paths(problems, what, args, mounts)
    return problems


def check_compose(path):
    problems = []
    svc = yaml.safe_load(open(path))["services"]["usescope"]
    what = f"{path}: service usescope"
    args = svc.get("command", [])
    if svc.get("privileged"):
        problems.append(f"{what}: privileged")
    if "no-new-privileges:true" not in svc.get("security_opt", []):
        problems.append(f"{what}: security_opt must hold no-new-privileges:true")
    if svc.get("read_only") is not True:
        problems.append(f"{what}: read_only must be true")
    if str(svc.get("user", "0")).split(":")[0] not in ("0", "root"):
        problems.append(f"{what}: must start as uid 0, not user {svc['user']}")
    check_caps(problems, what, svc.get("cap_drop"), svc.get("cap_add"), args)
    mounts = {}
    for v in svc.get("volumes", []):
        host, inside, *opts = v.split(":")
        mounts[inside] = (host, "ro" in ",".join(opts).split(","))
    check_paths(problems, what, args, mounts)
    return problems


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("caps", "daemonset", "compose"):
        sys.exit(__doc__)
    command, arg = sys.argv[1:]
    if command == "caps":
        print("\n".join(caps_for_engine(arg)))
        return
    problems = check_daemonset(arg) if command == "daemonset" else check_compose(arg)
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        sys.exit(1)
    print(f"ok   {arg}: not privileged, the documented capabilities, read-only root, "
          "no_new_privs, host paths read-only with --path.*")


if __name__ == "__main__":
    main()
