//! Loading and attaching: the embedded objects, run-time hook selection,
//! and errors that name their cause.
//!
//! This runs in the probe loader process (see [`super::loader_process`]).
//! Each probe's object holds its programs in several *modes* (tp_btf, then
//! raw_tp). [`attach_first`] loads and attaches one mode's programs; if the
//! kernel refuses, it unloads them and tries the next mode, so only the
//! chosen programs stay loaded. Nothing is pinned, so two usescope
//! processes on one host each get their own programs and maps.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use aya::programs::{BtfTracePoint, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader};

use super::{Loaded, sys};

// `OBJECTS`: every eBPF object build.rs compiled (each
// `ebpf-probes/NAME.bpf.c`, and the build variants a source declares), by
// name, embedded in the binary.
include!(concat!(env!("OUT_DIR"), "/objects.rs"));

/// The embedded object `name`: a `.bpf.c` file's stem, or a build variant
/// it declares. Missing is an error naming it, not a panic: a probe whose
/// object was not built is down, the others load.
pub fn object(name: &str) -> Result<&'static [u8], ProbeError> {
    OBJECTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, bytes)| bytes)
        .ok_or_else(|| {
            ProbeError(format!(
                "no eBPF object {name} in this binary (build.rs builds one per ebpf-probes/NAME.bpf.c and per usescope-build-variant line)"
            ))
        })
}

/// How a set of programs hooks the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// BTF-typed raw tracepoint (`tp_btf/NAME`): cheapest, needs BTF.
    BtfTracePoint,
    /// Raw tracepoint (`raw_tp/NAME`): older kernels, no tracing programs.
    RawTracePoint,
}

/// One way to attach a probe: a label for `usescope_probe_info{mode}` and
/// its (program name, tracepoint) pairs.
pub struct Mode {
    pub name: &'static str,
    pub kind: Kind,
    pub programs: &'static [(&'static str, &'static str)],
}

/// Why a probe is down; the message is the one warning we log for it.
#[derive(Debug, Clone)]
pub struct ProbeError(pub String);

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// "what: error: source: ..." plus a hint for the usual causes.
pub fn describe(what: &str, e: &(dyn std::error::Error + 'static)) -> ProbeError {
    let mut msg = format!("{what}: {e}");
    let mut errno = None;
    let mut cur = e.source();
    while let Some(s) = cur {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        if let Some(io) = s.downcast_ref::<io::Error>() {
            errno = io.raw_os_error();
        }
        cur = s.source();
    }
    if let Some(io) = e.downcast_ref::<io::Error>() {
        errno = errno.or(io.raw_os_error());
    }
    match errno {
        Some(libc::EPERM) | Some(libc::EACCES) => msg
            .push_str(" (permission denied: loading eBPF needs root, or CAP_BPF and CAP_PERFMON)"),
        Some(libc::ENOENT) => msg.push_str(" (this kernel lacks the hook)"),
        _ => {}
    }
    ProbeError(msg)
}

/// Loads the embedded object named `object` (see [`object`]) and attaches
/// the first of its `modes` the kernel accepts: what every probe's `load`
/// does around its own configuration. `configure` sets globals and map
/// sizes before anything reaches the kernel.
pub fn load_and_attach<'a>(
    object: &str,
    btf: &'a Btf,
    modes: &'static [Mode],
    configure: impl FnOnce(&mut EbpfLoader<'a>),
) -> Result<Loaded, ProbeError> {
    let mut ebpf = load(self::object(object)?, btf, configure)?;
    let (mode, links) = attach_first(&mut ebpf, btf, modes)?;
    Ok(Loaded {
        mode,
        ebpf,
        links,
        names: Vec::new(),
    })
}

/// Parses the object, creating its maps.
fn load<'a>(
    obj: &[u8],
    btf: &'a Btf,
    configure: impl FnOnce(&mut EbpfLoader<'a>),
) -> Result<Ebpf, ProbeError> {
    let mut loader = EbpfLoader::new();
    loader.btf(Some(btf));
    configure(&mut loader);
    loader
        .load(obj)
        .map_err(|e| describe("loading the eBPF object", &e))
}

/// Attaches the first mode the kernel accepts; returns it with the link
/// fds that keep its programs attached. On failure the error lists why
/// each mode was refused.
fn attach_first(
    ebpf: &mut Ebpf,
    btf: &Btf,
    modes: &'static [Mode],
) -> Result<(&'static Mode, Vec<OwnedFd>), ProbeError> {
    let mut why = Vec::new();
    for mode in modes {
        let mut links = Vec::new();
        match attach_mode(ebpf, btf, mode, &mut links) {
            Ok(()) => {
                if !why.is_empty() {
                    tracing::info!(mode = mode.name, skipped = %why.join("; "), "probe fell back");
                }
                return Ok((mode, links));
            }
            Err(e) => {
                drop(links);
                unload_mode(ebpf, mode);
                why.push(format!("{}: {}", mode.name, e.0));
            }
        }
    }
    Err(ProbeError(why.join("; ")))
}

/// Loads each program of `mode` and attaches it with our own
/// `BPF_RAW_TRACEPOINT_OPEN` (not aya's `attach`), so the link is an fd we
/// own and can hand to the daemon.
fn attach_mode(
    ebpf: &mut Ebpf,
    btf: &Btf,
    mode: &Mode,
    links: &mut Vec<OwnedFd>,
) -> Result<(), ProbeError> {
    for &(prog, hook) in mode.programs {
        let p = ebpf
            .program_mut(prog)
            .ok_or_else(|| ProbeError(format!("program {prog} missing from the object")))?;
        let what = format!("{prog} on {hook}");
        let tracepoint = CString::new(hook).map_err(|e| describe(&what, &e))?;
        let link = match mode.kind {
            Kind::BtfTracePoint => {
                let p: &mut BtfTracePoint = p.try_into().map_err(|e| describe(&what, &e))?;
                p.load(hook, btf).map_err(|e| describe(&what, &e))?;
                let fd = p.fd().map_err(|e| describe(&what, &e))?;
                sys::raw_tracepoint_open(None, fd.as_fd())
            }
            Kind::RawTracePoint => {
                let p: &mut RawTracePoint = p.try_into().map_err(|e| describe(&what, &e))?;
                p.load().map_err(|e| describe(&what, &e))?;
                let fd = p.fd().map_err(|e| describe(&what, &e))?;
                sys::raw_tracepoint_open(Some(&tracepoint), fd.as_fd())
            }
        };
        links.push(link.map_err(|e| describe(&format!("attaching {what}"), &e))?);
    }
    Ok(())
}

/// Detaches and unloads whatever part of a refused mode did load.
fn unload_mode(ebpf: &mut Ebpf, mode: &Mode) {
    for &(prog, _) in mode.programs {
        let Some(p) = ebpf.program_mut(prog) else {
            continue;
        };
        // Errors here only mean "was not loaded".
        let _ = match mode.kind {
            Kind::BtfTracePoint => <&mut BtfTracePoint>::try_from(p).map(|p| p.unload().is_ok()),
            Kind::RawTracePoint => <&mut RawTracePoint>::try_from(p).map(|p| p.unload().is_ok()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source in ebpf-probes/ and the runqlat variant are embedded,
    /// as ELF objects; an unknown name is an error that names it.
    #[test]
    fn objects_are_found_by_name() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf-probes");
        let mut sources: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().ok()?;
                Some(name.strip_suffix(".bpf.c")?.to_string())
            })
            .collect();
        sources.push("runqlat_lru".into());
        for name in &sources {
            let bytes = object(name).unwrap();
            assert!(bytes.starts_with(b"\x7fELF"), "{name}");
            assert_eq!(bytes.as_ptr() as usize % 8, 0, "{name} is 8-byte aligned");
        }
        assert_eq!(OBJECTS.len(), sources.len(), "no object without a source");
        let e = object("nope").unwrap_err();
        assert!(e.0.contains("no eBPF object nope"), "{e}");
    }
}
