//! The os collector stats os-release only when an inotify watch on its
//! directories, or the absence epoch, says something may have changed
//! (exporter/src/kernel/file_watch.rs). Against the real daemon on a rootfs of our
//! own: each way an upgrade or an administrator changes the file must show
//! at the next scrape.

use std::os::unix::fs::symlink;
use std::path::Path;

fn os_id(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("node_os_info{"))?;
    let at = line.find(",id=\"")? + 5;
    Some(line[at..].split('"').next()?.to_string())
}

fn write(path: &Path, id: &str) {
    std::fs::write(path, format!("NAME=\"Test\"\nID={id}\nVERSION_ID=\"1\"\n")).unwrap();
}

#[test]
fn every_kind_of_change_to_os_release_shows_at_the_next_scrape() {
    let root = crate::common::temp_dir();
    let etc = root.path().join("etc");
    let usr_lib = root.path().join("usr/lib");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&usr_lib).unwrap();
    // As on Debian: /etc/os-release → ../usr/lib/os-release.
    write(&usr_lib.join("os-release"), "one");
    symlink("../usr/lib/os-release", etc.join("os-release")).unwrap();
    let d = crate::common::Daemon::start(&[
        "--collector.disable-defaults",
        "--collector.os",
        &format!("--path.rootfs={}", root.path().display()),
    ]);
    let id = || os_id(&d.scrape());
    for _ in 0..3 {
        assert_eq!(id().as_deref(), Some("one"));
    }

    // Edited in place, same length.
    write(&usr_lib.join("os-release"), "two");
    assert_eq!(id().as_deref(), Some("two"), "edited in place");
    assert_eq!(id().as_deref(), Some("two"));

    // Replaced by a rename, as a package upgrade does.
    write(&usr_lib.join("os-release.dpkg-new"), "three");
    std::fs::rename(
        usr_lib.join("os-release.dpkg-new"),
        usr_lib.join("os-release"),
    )
    .unwrap();
    assert_eq!(id().as_deref(), Some("three"), "renamed over");

    // The link pointed elsewhere, to a directory not watched so far.
    let other = root.path().join("opt/release");
    std::fs::create_dir_all(&other).unwrap();
    write(&other.join("os-release"), "four");
    std::fs::remove_file(etc.join("os-release")).unwrap();
    symlink(other.join("os-release"), etc.join("os-release")).unwrap();
    assert_eq!(id().as_deref(), Some("four"), "link moved");
    write(&other.join("os-release"), "five");
    assert_eq!(
        id().as_deref(),
        Some("five"),
        "edited where the link now leads"
    );

    // /etc's file gone: /usr/lib's is reported.
    std::fs::remove_file(etc.join("os-release")).unwrap();
    assert_eq!(id().as_deref(), Some("three"), "fell back to usr/lib");

    // Both gone: no series.
    std::fs::remove_file(usr_lib.join("os-release")).unwrap();
    assert_eq!(id(), None, "no os-release at all");
    write(&etc.join("os-release"), "six");
    assert_eq!(id().as_deref(), Some("six"), "created again");
}
