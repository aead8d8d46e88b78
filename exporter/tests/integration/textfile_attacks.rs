//! Attacks on the textfile collector through the files it reads, against
//! the real binary (docs/security.md, docs/collectors/textfile.md): a
//! small file that costs quadratic time and memory, families that would
//! write one sample name twice (in either exposition format), files that
//! another user planted for a daemon running as root, and the memory a
//! large file leaves behind once it is gone.

use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Daemon, sample};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0";

/// The daemon with only the textfile collector (plus `extra`) on `dir`.
fn daemon(dir: &Path, extra: &[&str]) -> Daemon {
    let dir = format!("--collector.textfile.directory={}", dir.display());
    let mut args = vec![
        "--collector.disable-defaults",
        "--collector.textfile",
        &dir,
        "--no-probe.runqlat",
        "--no-probe.cachestat",
        "--no-probe.drops",
    ];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// A field of /proc/PID/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// User and system CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15; `after` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The log lines about `file` being skipped.
/// The "textfile skipped" lines logged so far for `file`.
fn skip_lines(d: &Daemon, file: &str) -> Vec<String> {
    d.log()
        .into_iter()
        .filter(|l| l.contains("textfile skipped") && l.contains(&format!("{file} ")))
        .collect()
}

/// The "textfile skipped" lines for `file`, once there is one: the daemon
/// logs it during the scrape, but this process's log reader may take it
/// after the scrape's answer has arrived (a run with all tests at once
/// found none there). Empty after 5 s.
fn skipped(d: &Daemon, file: &str) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let lines = skip_lines(d, file);
        if !lines.is_empty() || Instant::now() >= end {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The 29 KB file of the report: one family, each series with a label
/// name of its own. node_exporter gives every series every name, so N
/// series hold N² label pairs; it took 12.8 s of CPU and 359 MB.
fn one_name_per_series(series: usize) -> String {
    (0..series)
        .map(|i| format!("x{{l{i}=\"1\"}} 1\n"))
        .collect()
}

#[test]
fn label_names_of_their_own_cost_neither_time_nor_memory() {
    let dir = crate::common::temp_dir();
    let attack = one_name_per_series(2000);
    assert!(attack.len() < 30_000, "{}", attack.len());
    write(dir.path(), "attack.prom", &attack);
    // 128 names is the bound; 20,000 series each with one of them would
    // write 2.56 M label pairs (20 MB) from 300 KB.
    let spread: String = (0..20_000)
        .map(|i| format!("y{{l{}=\"{i}\"}} 1\n", i % 128))
        .collect();
    write(dir.path(), "spread.prom", &spread);
    // What a real family looks like at the bound: every series with all
    // 128 labels.
    let labels: Vec<String> = (0..128).map(|i| format!("l{i}=\"v\"")).collect();
    let wide: String = (0..50)
        .map(|s| format!("wide{{{},s=\"{s}\"}} 1\n", labels[..127].join(",")))
        .collect();
    write(dir.path(), "wide.prom", &wide);
    write(dir.path(), "ok.prom", "ok_value 1\n");

    let d = daemon(dir.path(), &[]);
    let pid = d.child.id();
    let (cpu, hwm) = (cpu_seconds(pid), status_kb(pid, "VmHWM"));
    let started = Instant::now();
    let r = d.get("/metrics");
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let expo = r.text();
    let (cpu_used, grew_kb) = (cpu_seconds(pid) - cpu, status_kb(pid, "VmHWM") - hwm);
    assert!(
        took < Duration::from_secs(5) && cpu_used < 2.0 && grew_kb < 48 << 10,
        "the scrape took {took:?}, {cpu_used:.2} s of CPU, and VmHWM grew by {grew_kb} kB"
    );
    assert_eq!(sample(&expo, "node_textfile_scrape_error"), Some(1.0));
    assert_eq!(sample(&expo, "ok_value"), Some(1.0));
    assert!(
        !expo.contains("\nx{") && !expo.contains("\ny{"),
        "{expo:.2000}"
    );
    assert!(expo.contains("wide{l0=\"v\","), "{expo:.2000}");

    let attack_log = skipped(&d, "/attack.prom");
    assert!(
        attack_log.len() == 1 && attack_log[0].contains("more than 128 label names"),
        "{attack_log:?}"
    );
    let spread_log = skipped(&d, "/spread.prom");
    assert!(
        spread_log.len() == 1 && spread_log[0].contains("more label pairs than the file may"),
        "{spread_log:?}"
    );
    assert!(skip_lines(&d, "/wide.prom").is_empty());
    assert!(d.stop().success());
}

/// `promtool check metrics` on `expo`: it must parse (exit 0, or 3 for
/// lint problems), and every lint problem must be in `allowed`.
fn promtool_accepts(expo: &str, allowed: &[&str]) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(expo.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(3),
        "promtool could not parse the exposition (exit {code:?}):\n{report}\n{expo}"
    );
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty() && !allowed.contains(&l.trim()))
        .collect();
    assert!(
        problems.is_empty(),
        "promtool lint problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn families_that_would_write_one_name_are_refused_in_every_format() {
    let runs = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !crate::common::skip::unless_met(
        runs,
        "promtool (Debian package prometheus; scripts/setup.sh installs it)",
    ) {
        return;
    }
    let dir = crate::common::temp_dir();
    let p = dir.path();
    // In OpenMetrics a counter jobs_total is the family `jobs`.
    write(
        p,
        "a_jobs.prom",
        "# HELP jobs_total Jobs run.\n# TYPE jobs_total counter\njobs_total 1\n",
    );
    write(
        p,
        "b_jobs.prom",
        "# HELP jobs Jobs queued.\n# TYPE jobs gauge\njobs 2\n",
    );
    // ... and a counter `req` writes the samples `req_total`.
    write(
        p,
        "c_req.prom",
        "# HELP req Requests.\n# TYPE req counter\nreq 3\n",
    );
    write(
        p,
        "d_req.prom",
        "# HELP req_total Other.\n# TYPE req_total gauge\nreq_total 4\n",
    );
    // The daemon's own family, written after every collector.
    write(
        p,
        "e_build.prom",
        "node_exporter_build_info{version=\"forged\"} 1\n",
    );
    // Both in one file: the file is refused whole.
    write(
        p,
        "g_hits.prom",
        "# TYPE hits counter\nhits 1\n# TYPE hits_total gauge\nhits_total 2\nhits_other 3\n",
    );
    // A built-in counter (node_context_switches_total, the family
    // node_context_switches in OpenMetrics).
    write(
        p,
        "h_builtin.prom",
        "# HELP node_context_switches Mine.\n# TYPE node_context_switches gauge\nnode_context_switches 7\n",
    );
    // What Python's client library writes: a counter and its creation
    // time as a gauge family of its own. Taken.
    write(
        p,
        "f_python.prom",
        "# HELP py_calls_total Calls.\n# TYPE py_calls_total counter\npy_calls_total 5\n\
         # HELP py_calls_created Calls.\n# TYPE py_calls_created gauge\npy_calls_created 1.7e+09\n",
    );
    write(
        p,
        "ok.prom",
        "# HELP ok_value Fine.\n# TYPE ok_value gauge\nok_value 1\n",
    );
    let d = daemon(p, &["--collector.stat"]);

    let text = d.scrape();
    let om = d.get_with("/metrics", &[("Accept", OPENMETRICS)]);
    assert_eq!(om.status, 200);
    assert!(
        om.header("content-type")
            .is_some_and(|c| c.contains("openmetrics"))
    );
    let om = om.text();
    for (format, expo) in [("text", &text), ("OpenMetrics", &om)] {
        assert_eq!(
            sample(expo, "node_textfile_scrape_error"),
            Some(1.0),
            "{format}"
        );
        for kept in [
            "jobs_total 1",
            "ok_value 1",
            "py_calls_total 5",
            "py_calls_created 1700000000",
        ] {
            assert!(
                expo.contains(&format!("\n{kept}\n")),
                "{format}: {kept} missing\n{expo}"
            );
        }
        for refused in [
            "jobs 2",
            "req_total 4",
            "hits_total 2",
            "hits_other 3",
            "node_context_switches 7",
        ] {
            assert!(
                !expo.contains(&format!("\n{refused}\n")),
                "{format}: {refused} served\n{expo}"
            );
        }
        assert!(!expo.contains("forged"), "{format}");
        assert_eq!(
            expo.matches("# TYPE node_exporter_build_info ").count(),
            1,
            "{format}"
        );
    }
    assert!(text.contains("\nreq 3\n") && om.contains("\nreq_total 3\n"));

    // Each refused file is logged once, naming it, both families and the
    // file the other family is in.
    let log = |f: &str| {
        let l = skipped(&d, f);
        assert_eq!(l.len(), 1, "{f}: {:?}", d.log());
        l[0].clone()
    };
    let b = log("/b_jobs.prom");
    assert!(
        b.contains("gauge jobs collides with the counter jobs_total") && b.contains("a_jobs.prom"),
        "{b}"
    );
    let dl = log("/d_req.prom");
    assert!(
        dl.contains("gauge req_total collides with the counter req") && dl.contains("c_req.prom"),
        "{dl}"
    );
    let e = log("/e_build.prom");
    assert!(e.contains("node_exporter_build_info"), "{e}");
    let g = log("/g_hits.prom");
    assert!(
        g.contains("hits_total collides with the counter hits in the same file"),
        "{g}"
    );
    let h = log("/h_builtin.prom");
    assert!(
        h.contains("node_context_switches collides with the family node_context_switches"),
        "{h}"
    );
    for taken in ["/a_jobs.prom", "/c_req.prom", "/f_python.prom", "/ok.prom"] {
        assert!(skip_lines(&d, taken).is_empty(), "{taken}");
    }

    // Both pages pass Prometheus' own linter. Allowed: the name the file
    // gave its counter (`req` lacks `_total`), and, in OpenMetrics (which
    // promtool reads as the text format), counter samples apart from
    // their family's HELP.
    let counter_suffix = "req counter metrics should have \"_total\" suffix";
    promtool_accepts(&text, &[counter_suffix]);
    let om_counters: Vec<String> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .map(|name| format!("{name}_total no help text"))
        .collect();
    let mut allowed: Vec<&str> = om_counters.iter().map(String::as_str).collect();
    allowed.push(counter_suffix);
    promtool_accepts(&om, &allowed);
    assert!(d.stop().success());
}

/// What a root-only file holds: a shadow line, which does not parse.
const SECRET: &str = "root:$6$s3cr3tSalt$Zm9vYmFyYmF6cXV4cXV1eA:19000:0:99999:7:::\n";

#[test]
fn as_root_a_planted_link_or_another_users_file_is_refused() {
    if !crate::common::skip::unless_root("to run the daemon as uid 0 and chown files") {
        return;
    }
    let dir = crate::common::temp_dir();
    let elsewhere = crate::common::temp_dir();
    let p = dir.path();
    // Root-only files another user may not read, but may link to.
    let private = |name: &str, text: &str| {
        let f = elsewhere.path().join(name);
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        f
    };
    symlink(private("shadow", SECRET), p.join("shadow.prom")).unwrap();
    symlink(
        private("secret.prom", "secret_value 42\n"),
        p.join("secret.prom"),
    )
    .unwrap();
    // A file of another user, readable by anyone (a 0600 one stays
    // unread anyway: uid 0 has no capability left).
    for (name, text) in [
        ("other.prom", "other_value 1\n"),
        ("other_bad.prom", SECRET),
    ] {
        write(p, name, text);
        std::os::unix::fs::chown(p.join(name), Some(65534), Some(65534)).unwrap();
    }
    write(p, "ok.prom", "ok_value 1\n");
    let d = daemon(p, &[]);
    let expo = d.scrape();
    assert_eq!(sample(&expo, "node_textfile_scrape_error"), Some(1.0));
    assert_eq!(sample(&expo, "ok_value"), Some(1.0));
    assert!(
        !expo.contains("secret_value") && !expo.contains("other_value"),
        "{expo}"
    );
    for link in ["/shadow.prom", "/secret.prom"] {
        let l = skipped(&d, link);
        assert!(
            l.len() == 1 && l[0].contains("is a symbolic link"),
            "{link}: {l:?}"
        );
    }
    for other in ["/other.prom", "/other_bad.prom"] {
        let l = skipped(&d, other);
        assert!(
            l.len() == 1 && l[0].contains("is owned by uid 65534, not by uid 0"),
            "{other}: {l:?}"
        );
    }
    let log = d.log().join("\n");
    for part in ["s3cr3t", "$6$", "Zm9v"] {
        assert!(!log.contains(part), "{part} of the secret logged:\n{log}");
    }
    assert!(d.stop().success());
}

#[test]
fn a_file_of_another_owner_is_never_quoted() {
    if !crate::common::skip::unless_root("to chown files and run the daemon as nobody") {
        return;
    }
    let dir = crate::common::temp_dir();
    let elsewhere = crate::common::temp_dir();
    let p = dir.path();
    // A file only nobody may read, linked into a directory of root's: the
    // daemon, running as nobody, follows the link (as node_exporter does)
    // and reads it, but must not quote it.
    let secret = elsewhere.path().join("key");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&secret, Some(65534), Some(65534)).unwrap();
    symlink(&secret, p.join("key.prom")).unwrap();
    // The directory owner's own broken file is quoted, to help fix it.
    write(p, "mine.prom", "mine_value one_two\n");
    write(p, "ok.prom", "ok_value 1\n");
    let d = daemon(p, &["--runtime.user=nobody"]);
    let expo = d.scrape();
    assert_eq!(sample(&expo, "node_textfile_scrape_error"), Some(1.0));
    assert_eq!(sample(&expo, "ok_value"), Some(1.0));
    let key = skipped(&d, "/key.prom");
    assert!(
        key.len() == 1 && key[0].contains("line=1") && key[0].contains("its cause is not shown"),
        "{key:?}"
    );
    let mine = skipped(&d, "/mine.prom");
    assert!(mine.len() == 1 && mine[0].contains("one_two"), "{mine:?}");
    let log = d.log().join("\n");
    for part in ["s3cr3t", "$6$", "Zm9v"] {
        assert!(!log.contains(part), "{part} of the secret logged:\n{log}");
    }
    assert!(d.stop().success());
}

/// A 10 MB file (130,000 series) parsed, served, then removed: the memory
/// its parse took must go back, not stay with the process as free heap.
/// Plain scrapes: gzip's buffers are not the collector's.
#[test]
fn memory_goes_back_once_a_large_file_is_removed() {
    let dir = crate::common::temp_dir();
    write(dir.path(), "ok.prom", "ok_value 1\n");
    let d = daemon(dir.path(), &[]);
    let pid = d.child.id();
    d.scrape();
    let baseline = status_kb(pid, "RssAnon");

    let big: String = (0..130_000)
        .map(|i| {
            format!(
                "big_metric{{host=\"host{:05}\",path=\"/var/lib/data/{i:07}\",kind=\"k{}\"}} {i}.5\n",
                i % 5000,
                i % 7
            )
        })
        .collect();
    assert!(big.len() > 9_000_000, "{}", big.len());
    write(dir.path(), "big.prom", &big);
    drop(big);
    for _ in 0..2 {
        assert!(d.scrape().contains("big_metric{host=\"host00001\""));
    }
    let loaded = status_kb(pid, "RssAnon");
    // The load is real: the parse holds several times the file.
    assert!(
        loaded > baseline + (40 << 10),
        "RssAnon {baseline} → {loaded} kB"
    );

    std::fs::remove_file(dir.path().join("big.prom")).unwrap();
    let bound = baseline + (16 << 10);
    let end = Instant::now() + Duration::from_secs(20);
    let mut rss = Vec::new();
    for _ in 0..20 {
        let expo = d.scrape();
        assert!(!expo.contains("big_metric"));
        rss.push(status_kb(pid, "RssAnon"));
        if *rss.last().unwrap() <= bound || Instant::now() > end {
            break;
        }
    }
    assert!(
        *rss.last().unwrap() <= bound,
        "RssAnon {baseline} kB before, {loaded} kB with the file, then after it was removed: {rss:?} kB"
    );
    assert!(d.stop().success());
}
