//! A real filesystem on a loop device, for tests that need a disk-backed
//! filesystem of a known type (compat_fs_net's XFS and btrfs, the cachestat
//! oracle's ext4).
#![allow(dead_code)]

/// A real filesystem (XFS, btrfs, ext4, ...) on a loop device, mounted for
/// the test and unmounted when dropped.
pub struct LoopMount {
    dir: tempfile::TempDir,
    /// The loop device's name, e.g. `loop3`.
    pub device: String,
}

impl LoopMount {
    /// `mkfs` (`mkfs.xfs -q -f`, ...) an image of `mib` MiB and mount it;
    /// `None` after a skip (a failure in CI, through `common::skip`) when
    /// this host cannot.
    pub fn new(fstype: &str, mkfs: &[&str], mib: u64) -> Option<LoopMount> {
        let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        let has_fs = filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some(fstype));
        if !super::skip::unless_met(has_fs, &format!("a kernel with {fstype}"))
            || !super::skip::unless_root("to mount a loop device")
        {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(cmd)
                .args(args)
                .output()
                .map_err(|e| format!("{cmd}: {e}"))
                .and_then(|o| {
                    o.status.success().then_some(o.stdout).ok_or_else(|| {
                        format!("{cmd} failed: {}", String::from_utf8_lossy(&o.stderr))
                    })
                })
        };
        let mut args: Vec<&std::ffi::OsStr> = mkfs[1..].iter().map(|a| a.as_ref()).collect();
        args.push(image.as_os_str());
        if let Err(e) = run(mkfs[0], &args) {
            super::skip::unless_met(false, &format!("{e} (scripts/setup.sh installs it)"));
            return None;
        }
        if let Err(e) = run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mnt.as_os_str(),
            ],
        ) {
            super::skip::unless_met(false, &e);
            return None;
        }
        let source = run(
            "findmnt",
            &[
                "-n".as_ref(),
                "-o".as_ref(),
                "SOURCE".as_ref(),
                mnt.as_os_str(),
            ],
        )
        .expect("findmnt");
        let source = String::from_utf8(source).unwrap();
        let device = source.trim().trim_start_matches("/dev/").to_string();
        Some(LoopMount { dir, device })
    }

    pub fn mnt(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.mnt())
            .status();
    }
}
