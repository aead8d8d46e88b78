//! A real hung mount for tests: tests/tools/hangfs.py, a FUSE filesystem
//! (Debian's python3-fusepy) whose reads and statfs never answer. Stop its
//! server (SIGSTOP) and every request waits in the kernel, killably; leave
//! it running and the request it has taken waits uninterruptibly.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HANGFS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/hangfs.py");

pub const SIGSTOP: i32 = 19;
pub const SIGTERM: i32 = 15;

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Sends `sig` to `pid` (a child of the test).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: signalling a child of ours by its pid.
    unsafe { kill(pid as i32, sig) };
}

/// A mounted hangfs and its server process; unmounted and killed on drop,
/// also when the test fails.
pub struct HungMount {
    pub dir: PathBuf,
    pub server: Child,
    /// Holds `dir`; removed after the unmount (fields drop after `drop`).
    _base: tempfile::TempDir,
}

impl HungMount {
    /// A fresh temporary directory to mount in: [`HungMount::mount`]
    /// mounts at its `mnt`, which a test may name before mounting.
    pub fn base() -> tempfile::TempDir {
        super::temp_dir()
    }

    /// Mounts hangfs at `base`/mnt. None after a skip (a failure in CI)
    /// when not root: mounting FUSE needs it.
    pub fn mount(base: tempfile::TempDir) -> Option<HungMount> {
        if !super::skip::unless_root("to mount a FUSE filesystem") {
            return None;
        }
        let dir = base.path().join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let server = Command::new("/usr/bin/python3")
            .arg(HANGFS)
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "start hangfs.py (needs Debian's python3-fusepy; scripts/setup.sh installs it)",
            );
        let m = HungMount {
            dir,
            server,
            _base: base,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while !m.is_mounted_for("self") {
            assert!(
                Instant::now() < end,
                "hangfs did not mount {} (python3-fusepy, /dev/fuse and root are needed)",
                m.dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    /// Whether the mount shows in /proc/PID/mountinfo (`self`, `1`).
    pub fn is_mounted_for(&self, pid: &str) -> bool {
        let target = self.dir.to_string_lossy().into_owned();
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(target.as_str()))
    }

    pub fn signal(&self, sig: i32) {
        signal(self.server.id(), sig);
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        // SIGKILL ends a stopped server too; its connection closes and every
        // request still waiting on it fails, so nothing stays stuck.
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Sends SIGTERM to `d`, which has a call stuck in `mount` that does not
/// return: its shutdown must finish within 5 s all the same, and once the
/// mount is released (which ends the stuck call) the process must exit
/// successfully within 5 s.
pub fn assert_sigterm_exits_past(d: &mut super::Daemon, mount: HungMount) {
    signal(d.child.id(), SIGTERM);
    assert!(
        d.wait_for_log("usescope stopped", Duration::from_secs(5))
            .is_some(),
        "shutdown did not finish within 5 s:\n{}",
        d.log().join("\n")
    );
    drop(mount);
    let end = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "still running after the mount was released"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}
