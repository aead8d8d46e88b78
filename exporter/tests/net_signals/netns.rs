//! Network namespaces of the net_signals tests' own: made with `ip netns
//! add` (named `usescope-ns-<pid>-<n>`), deleted when dropped, pass or
//! fail; code runs in one on a thread of its own (setns(2) moves only the
//! calling thread), so sockets the closure makes live there. Two may be
//! joined by a veth pair with addresses 10.<subnet>.0.1 and .2.

#![allow(dead_code)]

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `cmd args`, failing the test with its stderr unless it succeeds;
/// returns stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub struct Netns {
    pub name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Netns {
    pub fn new() -> Netns {
        let name = format!(
            "usescope-ns-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME args`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// A command run inside the namespace (`ip netns exec`).
    pub fn exec(&self, cmd: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", self.name.as_str(), cmd];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Loads an nft ruleset (text) into the namespace.
    pub fn nft(&self, ruleset: &str) {
        nft_in(&self.name, ruleset);
    }

    /// Writes a sysctl of the namespace (`net.ipv4...` as a /proc/sys path
    /// relative to /proc/sys).
    pub fn sysctl(&self, path: &str, value: &str) {
        let path = format!("/proc/sys/{path}");
        let value = value.to_string();
        self.run(move || std::fs::write(&path, value))
            .unwrap_or_else(|e| panic!("writing a sysctl: {e}"));
    }

    /// The namespace's inode number, as `--probe.*.netns` takes it.
    pub fn inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/run/netns/{}", self.name))
            .unwrap()
            .ino()
    }

    fn enter(name: &str) {
        let f = File::open(format!("/run/netns/{name}")).unwrap();
        // SAFETY: setns on an fd we own; it moves only this thread.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {name}: {}", std::io::Error::last_os_error());
    }

    /// Runs `f` in the namespace, on a thread of its own, and returns its
    /// result (a panic in `f` is the test's).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn(f).join().unwrap()
    }

    /// Starts `f` in the namespace on a thread of its own.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let name = self.name.clone();
        std::thread::spawn(move || {
            Netns::enter(&name);
            f()
        })
    }

    /// A file of the namespace's /proc/net (`netstat`, `snmp`, `tcp`).
    pub fn proc_net(&self, file: &str) -> String {
        let path = format!("/proc/thread-self/net/{file}");
        self.run(move || std::fs::read_to_string(&path).unwrap())
    }

    /// A counter of /proc/net/netstat or /proc/net/snmp (`TcpExt`,
    /// `DelayedACKs`), read in the namespace.
    pub fn counter(&self, group: &str, name: &str) -> u64 {
        let file = if group == "TcpExt" || group == "IpExt" {
            "netstat"
        } else {
            "snmp"
        };
        netstat_counter(&self.proc_net(file), group, name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Loads an nft ruleset (text) into the namespace called `name`.
pub fn nft_in(name: &str, ruleset: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", name, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ruleset.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft in {name}: {}\n{ruleset}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `group`'s counter `name` in the text of /proc/net/netstat or snmp
/// (pairs of header and value lines).
pub fn netstat_counter(text: &str, group: &str, name: &str) -> u64 {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [head, values] = pair else { continue };
        let head: Vec<&str> = head.split_whitespace().collect();
        if head.first() != Some(&format!("{group}:").as_str()) {
            continue;
        }
        if let Some(i) = head.iter().position(|h| *h == name) {
            return values.split_whitespace().nth(i).unwrap().parse().unwrap();
        }
    }
    panic!("no {group} {name} in:\n{text}")
}

/// Joins two namespaces by a veth pair: `a` gets 10.`subnet`.0.1/24,
/// `b` 10.`subnet`.0.2/24. Returns the two addresses.
pub fn veth(a: &Netns, b: &Netns, subnet: u8) -> (String, String) {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (va, vb) = (
        format!("usa{}x{id}", std::process::id() % 100000),
        format!("usb{}x{id}", std::process::id() % 100000),
    );
    run(
        "ip",
        &[
            "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns",
            &b.name,
        ],
    );
    let (ip_a, ip_b) = (format!("10.{subnet}.0.1"), format!("10.{subnet}.0.2"));
    a.ip(&["addr", "add", &format!("{ip_a}/24"), "dev", &va]);
    b.ip(&["addr", "add", &format!("{ip_b}/24"), "dev", &vb]);
    a.ip(&["link", "set", &va, "up"]);
    b.ip(&["link", "set", &vb, "up"]);
    (ip_a, ip_b)
}
