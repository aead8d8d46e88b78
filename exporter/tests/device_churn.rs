//! Devices that vanish while a scrape reads them cost only their own
//! series. Against the real daemon and kernel, as root: network interfaces
//! created and deleted in a tight loop in a network namespace of the
//! test's own (netclass, netdev), and tmpfs mounts made and removed in a
//! mount namespace of the daemon's own (filesystem), while the test scrapes.
//! Every scrape must report the collectors as successful, with the series
//! of a stable interface or mount that never moved.
//!
//! The collectors that walk hardware this machine lacks (hwmon, disks,
//! power supplies, ...) are covered by unit tests over fixture trees in
//! their modules (a device directory removed between listing and read).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::host::{DeleteNetns, run};

/// Scrapes per test, and the most time they may take.
const SCRAPES: usize = 150;
const SCRAPING_FOR_AT_MOST: Duration = Duration::from_secs(90);

/// What was wrong with one scrape, or None.
type Verdict = Option<String>;

/// Every scrape's verdict, and how many scrapes saw a churned device.
struct Tally {
    bad: Vec<(usize, String)>,
    saw_churned: usize,
    scrapes: usize,
}

impl Tally {
    fn report(&self, what: &str) {
        eprintln!(
            "{what}: {} of {} scrapes bad, {} saw a churned device",
            self.bad.len(),
            self.scrapes,
            self.saw_churned
        );
    }
}

/// Scrapes `addr` until [`SCRAPES`] are done or time is up, judging each.
/// Each scrape starts once the churn has made a new round of devices
/// (`made` moved), or after 50 ms.
fn scrape_while_churning(
    addr: std::net::SocketAddr,
    made: &AtomicUsize,
    judge: impl Fn(&str) -> Verdict,
    churned: impl Fn(&str) -> bool,
) -> Tally {
    let end = Instant::now() + SCRAPING_FOR_AT_MOST;
    let mut t = Tally {
        bad: Vec::new(),
        saw_churned: 0,
        scrapes: 0,
    };
    let mut last = made.load(Ordering::Acquire);
    while t.scrapes < SCRAPES && Instant::now() < end {
        let wait = Instant::now() + Duration::from_millis(50);
        while made.load(Ordering::Acquire) == last && Instant::now() < wait {
            std::thread::sleep(Duration::from_micros(200));
        }
        last = made.load(Ordering::Acquire);
        let r = common::http_get(addr, "/metrics", &[]);
        let text = r.text();
        let verdict = if r.status != 200 {
            Some(format!("status {}", r.status))
        } else {
            judge(&text)
        };
        if let Some(v) = verdict {
            t.bad.push((t.scrapes, v));
        }
        t.saw_churned += usize::from(churned(&text));
        t.scrapes += 1;
    }
    t
}

/// `node_scrape_collector_success{collector="NAME"}` is 1, else why not
/// (the daemon's log, printed when the test fails, names the file).
fn succeeded(text: &str, collector: &str) -> Verdict {
    let series = format!(r#"node_scrape_collector_success{{collector="{collector}"}}"#);
    match common::sample(text, &series) {
        Some(1.0) => None,
        v => Some(format!("{series} is {v:?}")),
    }
}

/// Joins the network namespace `ns` on this thread only (setns affects
/// the calling thread's network namespace alone).
fn enter_netns(ns: &str) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    // SAFETY: setns on a descriptor we own; it changes only this thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

/// `ip -n NS -batch -` with `lines`, forced on past errors (a link that
/// is already gone).
fn ip_batch(ns: &str, lines: &str) {
    let mut child = Command::new("ip")
        .args(["-n", ns, "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    child.wait().unwrap();
}

/// Interfaces created and deleted in a loop until `stop`: 16 veth pairs
/// (this kernel has no dummy driver), set up, then deleted all at once
/// (`ip link del group`: one unregistration of them all, as when a
/// container's namespace goes). `made` counts the rounds whose interfaces
/// are up and about to be deleted, for the scraper to start a scrape then:
/// left to chance, on a busy 2-CPU machine most scrapes fall between
/// rounds and the test would pass on the code it must catch.
fn churn_links(ns: &str, made: &AtomicUsize, stop: &AtomicBool) -> usize {
    let mut add = String::new();
    for i in 0..16 {
        add.push_str(&format!(
            "link add churn{i} group {CHURN_GROUP} type veth peer name churn{i}p group {CHURN_GROUP}\n\
             link set churn{i} up\nlink set churn{i}p up\n"
        ));
    }
    let del = format!("link del group {CHURN_GROUP}\n");
    let mut rounds = 0;
    // Bounded by `stop`, and by time if the scraper died first.
    let end = Instant::now() + SCRAPING_FOR_AT_MOST + Duration::from_secs(10);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        ip_batch(ns, &add);
        rounds += 1;
        made.store(rounds, Ordering::Release);
        ip_batch(ns, &del);
    }
    rounds
}

/// The interface group of the churned interfaces.
const CHURN_GROUP: u32 = 77;

#[test]
fn interfaces_that_vanish_mid_scrape_cost_only_their_own_series() {
    if !common::skip::unless_root("to create a network namespace and interfaces in it") {
        return;
    }
    let ns = format!("usc{}churn", std::process::id() % 100_000);
    run("ip", &["netns", "add", &ns]);
    let _ns = DeleteNetns(ns.clone());
    run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
    run(
        "ip",
        &[
            "-n", &ns, "link", "add", "stable0", "type", "veth", "peer", "name", "stable1",
        ],
    );
    run(
        "ip",
        &["-n", &ns, "link", "set", "stable0", "mtu", "1400", "up"],
    );
    run("ip", &["-n", &ns, "link", "set", "stable1", "up"]);
    // `ip netns exec` runs the daemon in the namespace, with a sysfs of
    // that namespace mounted on /sys.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns]).arg(common::bin());
    let d = common::Daemon::try_start_with(
        cmd,
        &[
            "--collector.disable-defaults",
            "--collector.netclass",
            "--collector.netdev",
        ],
    )
    .unwrap();
    let addr = d.addr;

    let stop = AtomicBool::new(false);
    let made = AtomicUsize::new(0);
    let (tally, rounds) = std::thread::scope(|s| {
        let churn = s.spawn(|| churn_links(&ns, &made, &stop));
        let scraper = s.spawn(|| {
            enter_netns(&ns);
            // One scrape before the churn matters: the interface is there.
            let first = common::http_get(addr, "/metrics", &[]).text();
            assert!(
                first.contains(r#"node_network_mtu_bytes{device="stable0"} 1400"#),
                "{first}"
            );
            scrape_while_churning(
                addr,
                &made,
                |text| {
                    succeeded(text, "netclass")
                        .or_else(|| succeeded(text, "netdev"))
                        .or_else(|| {
                            let mtu = r#"node_network_mtu_bytes{device="stable0"}"#;
                            (common::sample(text, mtu) != Some(1400.0))
                                .then(|| format!("no {mtu} 1400"))
                        })
                        .or_else(|| {
                            let bytes = r#"node_network_receive_bytes_total{device="stable0"}"#;
                            common::sample(text, bytes)
                                .is_none()
                                .then(|| format!("no {bytes}"))
                        })
                },
                |text| text.contains(r#"{device="churn"#),
            )
        });
        let tally = scraper.join();
        stop.store(true, Ordering::Relaxed);
        (tally, churn.join().unwrap())
    });
    let tally = tally.unwrap();
    tally.report(&format!(
        "interface churn ({rounds} rounds of 16 veth pairs made and deleted)"
    ));
    assert_eq!(
        tally.scrapes, SCRAPES,
        "too few scrapes within {SCRAPING_FOR_AT_MOST:?}"
    );
    // The churn must have reached the scrapes, or this test proves nothing.
    assert!(
        tally.saw_churned >= 10,
        "only {} of {} scrapes saw a churned interface",
        tally.saw_churned,
        tally.scrapes
    );
    // The daemon logs why (file and errno) when a collector fails.
    let why: Vec<String> = d
        .log()
        .into_iter()
        .filter(|l| l.contains("collector failed"))
        .take(3)
        .collect();
    assert!(
        tally.bad.is_empty(),
        "{} of {} scrapes lost the stable interface or failed a collector; first: {:?}; {why:#?}",
        tally.bad.len(),
        tally.scrapes,
        &tally.bad[..tally.bad.len().min(5)]
    );
}

/// The PID, in this namespace, of the only child of `pid` (unshare's
/// child: the daemon).
fn only_child(pid: u32) -> u32 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().unwrap();
        }
        assert!(Instant::now() < end, "{pid} has no child");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops the churning shell (our child, by its PID) when the test ends,
/// pass or fail: its stop file first, then a kill.
struct StopChurn(std::process::Child, std::path::PathBuf);

impl Drop for StopChurn {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.1, b"");
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tmpfs_size(text: &str, mount_point: &std::path::Path) -> Option<f64> {
    let label = format!(r#"mountpoint="{}"}}"#, mount_point.display());
    text.lines()
        .find(|l| l.starts_with("node_filesystem_size_bytes{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn mounts_that_vanish_mid_scrape_cost_only_their_own_series() {
    if !common::skip::unless_root("to make a mount namespace and mount tmpfs in it") {
        return;
    }
    let tools = ["unshare", "nsenter"]
        .iter()
        .all(|t| common::skip::tool_on_path(t, "util-linux").is_some());
    if !tools {
        return;
    }
    let dir = common::temp_dir();
    let stable = dir.path().join("stable");
    let churn = dir.path().join("churn");
    std::fs::create_dir(&stable).unwrap();
    std::fs::create_dir(&churn).unwrap();
    let count_file = dir.path().join("rounds");
    let stop_file = dir.path().join("stop");
    // A mount namespace and PID namespace of the daemon's own: its
    // /proc/1/mountinfo (what the collector reads) is its own table, and
    // the host's mounts are untouched. --kill-child takes the daemon down
    // with unshare.
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ])
    .arg(common::bin());
    let d = common::Daemon::try_start_with(
        cmd,
        &["--collector.disable-defaults", "--collector.filesystem"],
    )
    .unwrap();
    let ns = format!("--mount=/proc/{}/ns/mnt", only_child(d.child.id()));
    let stable_path = stable.to_str().unwrap();
    run(
        "nsenter",
        &[
            &ns,
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=8m",
            "tmpfs",
            stable_path,
        ],
    );
    // Rounds of 8 tmpfs mounts made, counted, then unmounted and their
    // directories removed (so a statfs that comes late meets ENOENT), in
    // one shell inside the namespace, until the stop file or 100 s.
    let script = format!(
        r#"end=$(( $(date +%s) + 100 )); i=0
while [ ! -e {stop} ] && [ $(date +%s) -lt $end ]; do
  for k in 0 1 2 3 4 5 6 7; do mkdir -p {churn}/m$k && mount -t tmpfs tmpfs {churn}/m$k; done
  i=$((i+1)); echo $i > {count}
  for k in 0 1 2 3 4 5 6 7; do umount {churn}/m$k; rmdir {churn}/m$k; done
done"#,
        stop = stop_file.display(),
        churn = churn.display(),
        count = count_file.display(),
    );
    let churner = Command::new("nsenter")
        .args([&ns, "sh", "-c", &script])
        .spawn()
        .unwrap();
    let churner = StopChurn(churner, stop_file.clone());
    let made = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let tally = std::thread::scope(|s| {
        // The shell's round count, for the scraper to start a scrape while
        // a round's mounts are there.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Some(n) = std::fs::read_to_string(&count_file)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                {
                    made.store(n, Ordering::Release);
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        let tally = scrape_while_churning(
            d.addr,
            &made,
            |text| {
                succeeded(text, "filesystem").or_else(|| {
                    (tmpfs_size(text, &stable) != Some(8.0 * 1024.0 * 1024.0))
                        .then(|| format!("no 8 MiB size for {}", stable.display()))
                })
            },
            |text| text.contains(&format!(r#"mountpoint="{}/m"#, churn.display())),
        );
        stop.store(true, Ordering::Relaxed);
        tally
    });
    drop(churner);
    let rounds = made.load(Ordering::Acquire);
    tally.report(&format!("mount churn ({rounds} rounds of 8 tmpfs mounts)"));
    assert_eq!(
        tally.scrapes, SCRAPES,
        "too few scrapes within {SCRAPING_FOR_AT_MOST:?}"
    );
    assert!(
        tally.saw_churned >= 10,
        "only {} of {} scrapes saw a churned mount",
        tally.saw_churned,
        tally.scrapes
    );
    let why: Vec<String> = d
        .log()
        .into_iter()
        .filter(|l| l.contains("collector failed"))
        .take(3)
        .collect();
    assert!(
        tally.bad.is_empty(),
        "{} of {} scrapes lost the stable mount or failed the collector; first: {:?}; {why:#?}",
        tally.bad.len(),
        tally.scrapes,
        &tally.bad[..tally.bad.len().min(5)]
    );
}
