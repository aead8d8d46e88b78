//! Where a probe's per-cgroup view finds its cgroups: the v1 hierarchy of
//! one controller where it is mounted, else the cgroup2 mount, as the
//! probes' `Hierarchy::find` chooses.

use std::path::PathBuf;

/// The mount point of the v1 hierarchy with `controller` (true), else of
/// the first cgroup2 mount (false), from /proc/self/mountinfo.
pub fn root_of(controller: &str) -> Option<(PathBuf, bool)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v2 = None;
    for line in text.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let (fstype, options) = (r.next()?, r.nth(1).unwrap_or(""));
        if fstype == "cgroup" && options.split(',').any(|o| o == controller) {
            return Some((PathBuf::from(mount), true));
        }
        if fstype == "cgroup2" && v2.is_none() {
            v2 = Some((PathBuf::from(mount), false));
        }
    }
    v2
}
