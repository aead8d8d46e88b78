//! What a cgroup's path says: its label text, the container and pod it
//! belongs to, and whether it is a workload (a service, a container) the
//! cgroup collector and the per-cgroup probes report by default.

/// systemd services and scopes (`init.scope`, `session-3.scope`, and the
/// scopes of Docker, containerd, CRI-O and Podman under the systemd
/// driver); a container named by its id alone (Docker's and containerd's
/// cgroupfs drivers: `/docker/ID`, `/kubepods/burstable/podUID/ID`) or
/// with its runtime's prefix (CRI-O's cgroupfs driver: `crio-ID`).
/// The flag that chooses which cgroups get series of their own: the cgroup
/// collector's, and the per-cgroup probe views follow it.
pub const SELECT_FLAG: &str = "collector.cgroup.select";

pub const DEFAULT_SELECT: &str =
    r"\.(service|scope)$|/[0-9a-f]{64}$|/(docker|crio|cri-containerd|libpod|nerdctl)-[0-9a-f]{64}$";

/// Longest `cgroup` label, in bytes. Real paths are far shorter (a
/// Kubernetes container under the systemd driver is about 180 bytes); a
/// longer one is folded into `cgroup="other"`, so a hostile tree cannot
/// make every series carry kilobytes.
pub const MAX_LABEL_BYTES: usize = 512;

/// Writes the label of a raw cgroup path into `out`: valid UTF-8 as it is,
/// each byte of an invalid sequence as `\xHH` (systemd's own escape, so a
/// reader recognises it). The encoder escapes `\`, `"` and newlines.
pub fn escape_into(path: &[u8], out: &mut String) {
    out.clear();
    for chunk in path.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str("\\x");
            out.push(hex(b >> 4));
            out.push(hex(b & 0xf));
        }
    }
}

fn hex(n: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(n & 0xf)])
}

/// The container id and the pod UID a cgroup path names, each empty when
/// it names none:
/// - a container is the last component: 64 hex digits, bare (Docker's and
///   containerd's cgroupfs drivers: `/docker/ID`, `/kubepods/.../podUID/ID`)
///   or with a runtime's prefix, as a systemd scope or not
///   (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
///   `crio-ID`, `libpod-ID.scope`, `nerdctl-ID.scope`). CRI-O's
///   `crio-conmon-ID.scope` is the container's monitor, not the container.
/// - a pod is a component below one that names `kubepods`: `pod` and the
///   UID (cgroupfs driver: `pod0b6f...-...`), or a slice ending in `pod`,
///   the UID with `_` for `-`, and `.slice` (systemd driver:
///   `kubepods-burstable-pod0b6f..._....slice`).
pub fn workload_ids(path: &str) -> (String, String) {
    let mut components = path.split('/').filter(|c| !c.is_empty());
    let mut pod = String::new();
    let mut below_kubepods = false;
    let mut last = "";
    for c in components.by_ref() {
        if below_kubepods && let Some(uid) = pod_uid(c) {
            pod = uid;
        }
        if c.contains("kubepods") {
            below_kubepods = true;
        }
        last = c;
    }
    (container_id(last).unwrap_or_default().to_string(), pod)
}

const RUNTIME_PREFIXES: &[&str] = &["docker-", "cri-containerd-", "crio-", "libpod-", "nerdctl-"];

fn container_id(name: &str) -> Option<&str> {
    let name = name.strip_suffix(".scope").unwrap_or(name);
    let id = match RUNTIME_PREFIXES.iter().find_map(|p| name.strip_prefix(p)) {
        Some(id) => id,
        None => name,
    };
    (id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(id)
}

fn pod_uid(component: &str) -> Option<String> {
    let (uid, sep) = if let Some(slice) = component.strip_suffix(".slice") {
        (slice.rsplit_once("-pod")?.1, '_')
    } else {
        (component.strip_prefix("pod")?, '-')
    };
    let shape = [8, 4, 4, 4, 12];
    let mut parts = uid.split(sep);
    for len in shape {
        let p = parts.next()?;
        if p.len() != len || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
    }
    if parts.next().is_some() {
        return None;
    }
    Some(uid.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3b8e1a3c4f5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7";
    const UID: &str = "0b6f3c2a-1d4e-4f5a-8b9c-0d1e2f3a4b5c";

    fn ids(path: &str) -> (String, String) {
        workload_ids(path)
    }

    #[test]
    fn escapes_invalid_utf8_only() {
        let mut s = String::new();
        escape_into(b"/system.slice/a\\x2db.service", &mut s);
        assert_eq!(s, "/system.slice/a\\x2db.service");
        escape_into(b"/bad\xff\xfe/\xc3\xa9", &mut s);
        assert_eq!(s, "/bad\\xff\\xfe/\u{e9}");
        escape_into("/new\nline \"q\"".as_bytes(), &mut s);
        assert_eq!(s, "/new\nline \"q\"");
    }

    #[test]
    fn containers_of_each_runtime() {
        let none = (String::new(), String::new());
        let c = |id: &str| (id.to_string(), String::new());
        assert_eq!(ids(&format!("/docker/{ID}")), c(ID));
        assert_eq!(ids(&format!("/system.slice/docker-{ID}.scope")), c(ID));
        assert_eq!(ids(&format!("/machine.slice/libpod-{ID}.scope")), c(ID));
        assert_eq!(ids(&format!("/system.slice/crio-conmon-{ID}.scope")), none);
        assert_eq!(ids("/system.slice/ssh.service"), none);
        assert_eq!(ids(&format!("/docker/{}", &ID[..63])), none);
        assert_eq!(ids(&format!("/docker/{}", ID.to_uppercase())), none);
        assert_eq!(ids("/"), none);
        assert_eq!(ids(""), none);
    }

    #[test]
    fn kubernetes_pods_under_both_drivers() {
        let both = (ID.to_string(), UID.to_string());
        assert_eq!(ids(&format!("/kubepods/burstable/pod{UID}/{ID}")), both);
        assert_eq!(ids(&format!("/kubepods/pod{UID}/crio-{ID}")), both);
        let underscored = UID.replace('-', "_");
        assert_eq!(
            ids(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{underscored}.slice/cri-containerd-{ID}.scope"
            )),
            both
        );
        assert_eq!(
            ids(&format!("/kubepods.slice/kubepods-pod{underscored}.slice")),
            (String::new(), UID.to_string())
        );
        // Not below a kubepods component: no pod.
        assert_eq!(
            ids(&format!("/other/pod{UID}/{ID}")),
            (ID.to_string(), String::new())
        );
        // A malformed UID is none.
        assert_eq!(ids(&format!("/kubepods/pod{}/{ID}", &UID[1..])).1, "");
    }
}
