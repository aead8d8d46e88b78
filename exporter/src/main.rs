//! The `usescope` daemon: parse flags, set up logging, build the collectors,
//! attach the probes, serve HTTP until SIGTERM/SIGINT, then detach and exit 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;
use usescope::cli::{self, Config, LogFormat};
use usescope::collector::Scraper;
use usescope::self_metrics::SelfMetrics;
use usescope::server::{self, Limits, WebState};
use usescope::web_config::WebConfig;
use usescope::{collectors, http, probes};

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
    if config.probe_loader {
        // The short-lived child the daemon starts to load the probes.
        return probes::loader_process::main(&config.probes);
    }
    limit_malloc_arenas();
    // Scrapes run inline on the workers (http.rs); the blocking pool only
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
    match runtime.block_on(run(config)) {
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
fn limit_malloc_arenas() {
    // SAFETY: mallopt only tunes the allocator; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
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

async fn run(config: Config) -> Result<(), String> {
    // Installed first: a signal that arrives during start-up must reach our
    // handlers, not the default action that kills the process outright.
    let signals = Signals::install()?;
    let web_config = match &config.web_config_file {
        Some(path) => WebConfig::load(path)?,
        None => WebConfig::none(),
    };
    let addr = cli::resolve_listen_address(&config.listen_address)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen_address))?;

    let mut scraper = Scraper::new(SelfMetrics::new());
    for name in &config.collectors {
        let spec = collectors::find(name).expect("collector names come from the registry");
        scraper.add(spec.name, (spec.build)(&config.settings));
    }
    let probes = probes::attach(&config.probes, &mut scraper);
    match usescope::privileges::drop_after_attach(config.runtime_user.as_deref()) {
        Ok(what) => tracing::info!("{what}"),
        Err(e) => return Err(format!("dropping privileges failed: {e}")),
    }
    tracing::info!(
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        collectors = %config.collectors.join(","),
        probes = %config.probes.enabled.join(","),
        "usescope listening"
    );

    let state = http::AppState::new(scraper, config.max_requests, &config.telemetry_path);
    let limits = Limits::default();
    let web = WebState::new(web_config, &limits);
    tokio::spawn(reload_on_sighup(
        signals.hup,
        config.web_config_file.clone(),
        web.clone(),
    ));
    let app = server::guard(http::router(state.clone()), web.clone());
    let shutdown = wait_for_shutdown(signals.term, signals.int);
    server::serve(listener, app, web, limits, shutdown, SHUTDOWN_DRAIN).await;
    // Detach every probe before exiting: dropping the scraper drops the
    // probe collectors, and dropping `probes` drops the loaded programs.
    drop(state);
    drop(probes);
    tracing::info!("usescope stopped");
    Ok(())
}

/// How long in-flight scrapes may run after SIGTERM before we exit anyway.
const SHUTDOWN_DRAIN: std::time::Duration = std::time::Duration::from_secs(4);

/// The signal streams, created before anything else so that none of
/// SIGTERM, SIGINT or SIGHUP can hit its default action after start-up.
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
