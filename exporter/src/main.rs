//! The `usescope` daemon: parse flags, set up logging, build the collectors,
//! attach the probes, serve HTTP until SIGTERM/SIGINT, then detach and exit 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;
use usescope::cli::{self, Config, LogFormat};
use usescope::scrape::collector::Scraper;
use usescope::scrape::self_metrics::SelfMetrics;
use usescope::web::http;
use usescope::web::log_throttle::Throttle;
use usescope::web::server::{self, Limits, WebState};
use usescope::web::web_config::WebConfig;
use usescope::{collectors, privileges, probes};

fn main() -> ExitCode {
    let config = match cli::parse(std::env::args_os()) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("usescope: {}", cli::one_line(&e));
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    log_panics_briefly();
    if config.probe_loader {
        // The short-lived child the daemon starts to load the probes.
        return probes::loader_process::main(&config.probes);
    }
    tune_malloc();
    // SIGTERM, SIGINT and SIGHUP stay pending while we start: they are
    // acted on once the handlers below exist, never by their default
    // action (which would kill us mid-attach), and no system call of the
    // start-up (the probe hand-over's recvmsg among them) sees EINTR.
    let held = HeldSignals::block();
    // Everything that needs privileges happens here, while the process has
    // one thread: capabilities are per-thread, so they must be dropped
    // before the runtime starts its workers (privileges.rs).
    let started = match start(&config) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("usescope: {msg}");
            return ExitCode::FAILURE;
        }
    };
    // Scrapes run on the workers (http.rs); the blocking pool only
    // verifies bcrypt passwords, and each extra thread would cost a stack
    // and, with glibc, a malloc arena.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("usescope: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(config, started, held));
    // A worker stuck in a read that never returns (a hung mount) must not
    // keep us from exiting: wait briefly, then leave it to process exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("usescope: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// glibc gives every thread that allocates its own arena (up to 8 per
/// core), and each keeps its freed memory. A daemon that allocates little
/// and mostly from one thread at a time needs two; this keeps peak RSS
/// flat under concurrent scrapes.
///
/// glibc also raises its mmap threshold each time a large block is freed
/// (up to 32 MiB), after which large response bodies come from the heap
/// and their pages stay with the process when slow readers leave. A fixed
/// threshold keeps every block of 256 KiB or more in its own mapping,
/// returned to the kernel on free: memory after a burst of large scrapes
/// goes back to the baseline.
fn tune_malloc() {
    // SAFETY: mallopt only tunes the allocator; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// A panic is a bug, but one a client may be able to trigger at will: the
/// default hook prints several lines per panic with no limit, and with
/// `RUST_BACKTRACE` set it loads the debug information (tens of MB, kept)
/// to print a backtrace. This hook logs one line, at most once a second
/// (counting the rest), and never symbolises a backtrace.
fn log_panics_briefly() {
    static PANICS: Throttle = Throttle::new();
    std::panic::set_hook(Box::new(|info| {
        if let Some(suppressed) = PANICS.admit() {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            tracing::error!(
                %location,
                message = ?message.chars().take(200).collect::<String>(),
                suppressed,
                "panic (a bug in usescope; please report it)"
            );
        }
    }));
}

fn init_logging(config: &Config) {
    // The level is one of clap's validated values, so the directive parses.
    let filter = EnvFilter::new(format!("usescope={}", config.log_level));
    let registry = tracing_subscriber::registry().with(filter);
    match config.log_format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Logfmt => registry
            .with(
                tracing_logfmt::builder()
                    .layer()
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
}

/// What the privileged start-up hands to the async part.
struct Started {
    web_config: WebConfig,
    listener: std::net::TcpListener,
    scraper: Scraper,
    probes: probes::Probes,
}

/// The privileged part of start-up, run on the only thread: web config,
/// listener, collectors, probes, then the privilege drop.
fn start(config: &Config) -> Result<Started, String> {
    let web_config = match &config.web_config_file {
        Some(path) => WebConfig::load(path)?,
        None => WebConfig::none(),
    };
    let addr = cli::resolve_listen_address(&config.listen_address)?;
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen_address))?;
    match privileges::raise_fd_limit() {
        Ok(n) => tracing::debug!(limit = n, "open-file limit raised to the hard limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let mut scraper = Scraper::new(
        SelfMetrics::new().with_node_exporter_build_info(config.node_exporter_build_info),
    );
    scraper.watch_for_appearing_sources(usescope::kernel::absence::Watch::new(
        &config.settings.procfs,
        &config.settings.sysfs,
    ));
    for name in &config.collectors {
        let spec = collectors::find(name).expect("collector names come from the registry");
        scraper.add(spec.name, (spec.build)(&config.settings));
    }
    let probes = probes::attach(&config.probes, &mut scraper);
    let dropped = privileges::drop_after_attach(config.runtime_user.as_deref())
        .map_err(|e| format!("dropping privileges failed: {e}"))?;
    if dropped.user_not_switched.is_some() {
        tracing::warn!("{}", dropped.describe());
    } else {
        tracing::info!("{}", dropped.describe());
    }
    if dropped.uid == 0 && dropped.user_not_switched.is_none() {
        tracing::warn!(
            "still running as root (uid 0), without capabilities: a flaw in usescope \
             would act with root's file access. Pass --runtime.user=nobody (or a \
             dedicated user) to drop to an unprivileged user after start-up"
        );
    }
    Ok(Started {
        web_config,
        listener,
        scraper,
        probes,
    })
}

async fn run(config: Config, started: Started, held: HeldSignals) -> Result<(), String> {
    let signals = Signals::install()?;
    // The handlers exist: whatever arrived during start-up is delivered now.
    held.release();
    let listener = tokio::net::TcpListener::from_std(started.listener)
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen_address))?;
    tracing::info!(
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        collectors = %config.collectors.join(","),
        probes = %config.probes.enabled.join(","),
        "usescope listening"
    );

    let state = http::AppState::new(
        started.scraper,
        http::RequestLimits {
            max_requests: config.max_requests,
            max_requests_per_peer: config.max_requests_per_peer,
            scrape_timeout: config.scrape_timeout,
        },
        &config.telemetry_path,
    );
    let limits = Limits {
        max_connections: config.max_connections,
        max_connections_per_peer: config.max_connections_per_peer,
        ..Limits::default()
    };
    let web = WebState::new(started.web_config, &limits);
    tokio::spawn(reload_on_sighup(
        signals.hup,
        config.web_config_file.clone(),
        web.clone(),
    ));
    let app = server::guard(http::router(state.clone()), web.clone());
    let shutdown = wait_for_shutdown(signals.term, signals.int);
    server::serve(listener, app, web, limits, shutdown, SHUTDOWN_DRAIN).await;
    // Detach every probe before exiting. The links live in `probes`;
    // dropping it closes them, whatever a stuck scrape still holds.
    drop(state);
    drop(started.probes);
    tracing::info!("usescope stopped");
    Ok(())
}

/// SIGTERM, SIGINT and SIGHUP blocked on the main thread during start-up
/// (threads started meanwhile inherit the mask, which is what we want: the
/// runtime's workers never take these signals, the main thread does once
/// [`HeldSignals::release`] unblocks them).
struct HeldSignals(libc::sigset_t);

impl HeldSignals {
    fn block() -> HeldSignals {
        // SAFETY: sigset operations on a zeroed set we own; pthread_sigmask
        // changes only this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            HeldSignals(set)
        }
    }

    fn release(self) {
        // SAFETY: as above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &self.0, std::ptr::null_mut());
        }
    }
}

/// How long in-flight scrapes may run after SIGTERM before we exit anyway.
const SHUTDOWN_DRAIN: std::time::Duration = std::time::Duration::from_secs(4);

/// The signal streams. Until they exist the signals are held
/// ([`HeldSignals`]), so none can hit its default action.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        let get = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot install the {name} handler: {e}"))
        };
        Ok(Signals {
            term: get(SignalKind::terminate(), "SIGTERM")?,
            int: get(SignalKind::interrupt(), "SIGINT")?,
            hup: get(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}

/// SIGHUP re-reads `--web.config.file`. A file that is bad, empty, or would
/// turn TLS, client certificates or basic auth off is refused with one
/// error line and the running configuration stays (`WebConfig::reload`);
/// the listener is never closed. Without a config file SIGHUP is logged and
/// otherwise ignored.
async fn reload_on_sighup(mut hup: Signal, path: Option<PathBuf>, web: Arc<WebState>) {
    while hup.recv().await.is_some() {
        let Some(path) = &path else {
            tracing::info!("received SIGHUP; no --web.config.file to reload");
            continue;
        };
        match web.reload(path) {
            Ok(()) => tracing::info!(file = %path.display(), "web config reloaded"),
            Err(e) => tracing::error!(
                error = %e,
                "web config reload refused; keeping the running configuration"
            ),
        }
    }
}

async fn wait_for_shutdown(mut term: Signal, mut int: Signal) {
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM, shutting down"),
        _ = int.recv() => tracing::info!("received SIGINT, shutting down"),
    }
}
