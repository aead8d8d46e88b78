//! The `bpf(2)` commands usescope issues itself rather than through
//! aya, each for a reason aya's API does not cover:
//!
//! - [`raw_tracepoint_open`]: aya keeps a link's fd private, and the probe
//!   loader process must hand that fd to the daemon;
//! - [`prog_run_stats`]: aya builds `ProgramInfo` only from a program it
//!   loaded itself or a pin, not from a handed-over fd;
//! - [`lookup_percpu`] and [`next_key`]: aya's per-CPU lookups allocate a
//!   fresh slice on every read; these fill buffers the caller keeps.
//!
//! All unsafe code of the probes' user side is here.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use aya_obj::generated::bpf_prog_info;

/// Command numbers from include/uapi/linux/bpf.h.
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
/// `attr` must be the `union bpf_attr` member that `cmd` reads, and every
/// pointer in it must be valid for what the kernel does with it.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees `attr` matches `cmd`; the kernel reads
    // exactly size_of::<T>() bytes of it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The `raw_tracepoint` member of `union bpf_attr`.
#[repr(C)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// Attaches a loaded program to a tracepoint and returns the link's fd;
/// the program stays attached as long as that fd (or a dup of it in any
/// process) is open. `name` is the tracepoint for `raw_tp` programs and
/// `None` for `tp_btf`, whose target was fixed at load time.
pub fn raw_tracepoint_open(name: Option<&CStr>, prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let attr = RawTracepointAttr {
        name: name.map_or(0, |n| n.as_ptr() as u64),
        prog_fd: prog.as_raw_fd() as u32,
        _pad: 0,
    };
    // SAFETY: RawTracepointAttr is the raw_tracepoint attr; `name`, when
    // set, points at a NUL-terminated string that outlives the call.
    let fd = unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &attr) }?;
    // SAFETY: on success the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The `info` member of `union bpf_attr`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Run time (ns) and run count of a program, from the kernel's
/// BPF_ENABLE_STATS accounting (both 0 while statistics are off).
pub fn prog_run_stats(prog: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: bpf_prog_info is plain integers and arrays; all zeros is a
    // valid value (and what the kernel expects in fields it does not fill).
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: std::mem::size_of::<bpf_prog_info>() as u32,
        info: &mut info as *mut bpf_prog_info as u64,
    };
    // SAFETY: InfoAttr is the info attr; the kernel writes at most
    // info_len bytes to `info`, which is exactly that large.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) }?;
    Ok((info.run_time_ns, info.run_cnt))
}

/// The map-element member of `union bpf_attr`.
#[repr(C)]
struct LookupAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Looks up entry 0 of a per-CPU array into `buf`.
///
/// # Safety
/// `buf` must hold at least possible_cpus * round_up(value_size, 8) bytes
/// for the map's value_size: that is what the kernel writes.
pub unsafe fn lookup_percpu(map: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<()> {
    // SAFETY: the key of a per-CPU array is a u32; the caller's guarantee
    // about `buf` is passed on.
    unsafe { lookup_percpu_key(map, &0u32, buf) }
}

/// Looks up `key` of a per-CPU map into `buf`.
///
/// # Safety
/// `K` must be exactly the map's key size, and `buf` must hold at least
/// possible_cpus * round_up(value_size, 8) bytes for the map's value_size:
/// that is what the kernel writes.
pub unsafe fn lookup_percpu_key<K>(
    map: BorrowedFd<'_>,
    key: &K,
    buf: &mut [u64],
) -> io::Result<()> {
    let attr = LookupAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key as *const K as u64,
        value: buf.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: LookupAttr is the map-element attr; the caller guarantees
    // `key` and `buf` match the map's key and value sizes.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &attr) }?;
    Ok(())
}

/// The key after `prev` in a hash map with u64 keys (the first key when
/// `prev` is None), or None past the last.
///
/// # Safety
/// The map's key size must be 8 bytes: that is what the kernel reads from
/// `prev` and writes to the returned key.
pub unsafe fn next_key(map: BorrowedFd<'_>, prev: Option<&u64>) -> io::Result<Option<u64>> {
    let mut next = 0u64;
    let attr = LookupAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: prev.map_or(0, |k| k as *const u64 as u64),
        value: &mut next as *mut u64 as u64,
        flags: 0,
    };
    // SAFETY: the map-element attr, with `value` read by the kernel as
    // next_key; both point at 8-byte keys, as the caller guarantees.
    match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &attr) } {
        Ok(_) => Ok(Some(next)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
