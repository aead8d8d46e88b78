//! The `bpf(2)` commands usescope issues itself rather than through
//! aya, each for a reason aya's API does not cover:
//!
//! - [`raw_tracepoint_open`]: aya keeps a link's fd private, and the probe
//!   loader process must hand that fd to the daemon;
//! - [`prog_run_stats`]: aya builds `ProgramInfo` only from a program it
//!   loaded itself, a pin or by walking every program on the host (which
//!   needs CAP_SYS_ADMIN), not from a handed-over fd;
//! - [`lookup_percpu`], [`next_key`] and [`lookup_array_batch`]: aya's
//!   per-CPU lookups allocate a fresh slice on every read (and aya has no
//!   batch lookup); these fill buffers the caller keeps.
//!
//! All unsafe code of the probes' user side is here.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Command numbers from include/uapi/linux/bpf.h.
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

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

/// The head of `struct bpf_prog_info` (include/uapi/linux/bpf.h) up to the
/// three statistics fields, the only ones read. The kernel copies
/// min(info_len, its own size) bytes and the uapi struct only ever grows at
/// the end, so this prefix is valid on every kernel that has the fields
/// (run time and count 5.1+, recursion misses 5.12+; an older kernel leaves
/// the later ones 0, and accepts the longer buffer because its tail is
/// zero). The 24 words before them (type, id, tag, ... prog_tags) are not
/// needed, so they are not spelt out; the unit test below checks the offsets
/// against the kernel's own /proc/self/fdinfo.
#[repr(C)]
struct ProgInfoHead {
    _before_stats: [u64; 24],
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
}

// The uapi offsets (include/uapi/linux/bpf.h): run_time_ns at 192, run_cnt
// at 200, recursion_misses at 208. The fdinfo test checks the first two
// against the kernel; the third follows run_cnt in the header.
const _: () = assert!(std::mem::offset_of!(ProgInfoHead, run_time_ns) == 192);
const _: () = assert!(std::mem::offset_of!(ProgInfoHead, recursion_misses) == 208);

/// What the kernel counts of one program's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgStats {
    /// Time spent running it (0 while BPF_ENABLE_STATS is off).
    pub run_ns: u64,
    /// Runs (0 while BPF_ENABLE_STATS is off).
    pub runs: u64,
    /// Runs the kernel skipped because the program was already running on
    /// that CPU: events the probe never saw. Always counted.
    pub recursion_misses: u64,
}

/// A program's run time and run count, from the kernel's BPF_ENABLE_STATS
/// accounting, and its recursion misses.
///
/// One syscall, about 1 µs; reading /proc/self/fdinfo/<fd>, which shows the
/// same two numbers, took about 12 µs per program (ARCHITECTURE.md,
/// "Dependencies").
pub fn prog_run_stats(prog: BorrowedFd<'_>) -> io::Result<ProgStats> {
    let mut info = ProgInfoHead {
        _before_stats: [0; 24],
        run_time_ns: 0,
        run_cnt: 0,
        recursion_misses: 0,
    };
    let attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: std::mem::size_of::<ProgInfoHead>() as u32,
        info: &mut info as *mut ProgInfoHead as u64,
    };
    // SAFETY: InfoAttr is the info attr; the kernel writes at most
    // info_len bytes to `info`, which is exactly that large.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) }?;
    Ok(ProgStats {
        run_ns: info.run_time_ns,
        runs: info.run_cnt,
        recursion_misses: info.recursion_misses,
    })
}

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_ITER_CREATE: libc::c_long = 33;
/// enum bpf_attach_type
const BPF_TRACE_ITER: u32 = 28;

/// The link_create member of `union bpf_attr`, as far as an iterator
/// without parameters needs it.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u64; 4],
}

/// Attaches an `iter/*` program: the link [`iter_create`] runs it from.
pub fn iter_link_create(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        _rest: [0; 4],
    };
    // SAFETY: a link_create attr with no iterator parameters (zeroed).
    let fd = unsafe { bpf(BPF_LINK_CREATE, &attr) }?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The id of a BPF link (`struct bpf_link_info`'s second field).
pub fn link_id(link: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = [0u32; 4];
    let attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: the kernel writes at most info_len bytes to `info`.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) }?;
    Ok(info[1])
}

/// The id of a BPF map: `struct bpf_map_info` starts as `bpf_link_info`
/// does, type then id.
pub fn map_id(map: BorrowedFd<'_>) -> io::Result<u32> {
    link_id(map)
}

/// A new fd for the link with this id (needs CAP_SYS_ADMIN).
pub fn link_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    fd_by_id(BPF_LINK_GET_FD_BY_ID, id)
}

/// A new read-write fd for the map with this id (needs CAP_SYS_ADMIN).
pub fn map_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    fd_by_id(BPF_MAP_GET_FD_BY_ID, id)
}

fn fd_by_id(cmd: libc::c_long, id: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct IdAttr {
        id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let attr = IdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: the get_fd_by_id attr.
    let fd = unsafe { bpf(cmd, &attr) }?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A fresh iterator over an iterator link: reading it runs the program.
pub fn iter_create(link: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct IterAttr {
        link_fd: u32,
        flags: u32,
    }
    let attr = IterAttr {
        link_fd: link.as_raw_fd() as u32,
        flags: 0,
    };
    // SAFETY: the iter_create attr.
    let fd = unsafe { bpf(BPF_ITER_CREATE, &attr) }?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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

/// Deletes `key` from a hash map with u64 keys; Ok(false) if it was not
/// there.
///
/// # Safety
/// The map's key size must be 8 bytes: that is what the kernel reads.
pub unsafe fn delete_u64_key(map: BorrowedFd<'_>, key: u64) -> io::Result<bool> {
    let attr = LookupAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u64 as u64,
        value: 0,
        flags: 0,
    };
    // SAFETY: the map-element attr; the kernel reads 8 bytes at `key`.
    match unsafe { bpf(BPF_MAP_DELETE_ELEM, &attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The value of `key` in a hash map with u64 keys and plain-integer values
/// (`V` = u32 or u64); None if the key is not there.
///
/// # Safety
/// The map's key size must be 8 bytes and its value size that of `V`, a
/// type every bit pattern of which is valid.
pub unsafe fn lookup_u64<V: Copy + Default>(
    map: BorrowedFd<'_>,
    key: u64,
) -> io::Result<Option<V>> {
    let mut value = V::default();
    let attr = LookupAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u64 as u64,
        value: &mut value as *mut V as u64,
        flags: 0,
    };
    // SAFETY: the map-element attr; an 8-byte key and a value of V's size
    // (the caller's promise).
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &attr) } {
        Ok(_) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `value` to `key` of an array (per-CPU or not), or pushes it
/// onto a queue (`key` None).
///
/// # Safety
/// `key` must be the map's key size and `value` what the kernel reads for
/// its value: value_size bytes, times possible CPUs (each rounded up to 8)
/// for a per-CPU map.
pub unsafe fn update<K, V: ?Sized>(
    map: BorrowedFd<'_>,
    key: Option<&K>,
    value: &V,
) -> io::Result<()> {
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    let attr = LookupAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key.map_or(0, |k| k as *const K as u64),
        value: value as *const V as *const u8 as u64,
        flags: 0,
    };
    // SAFETY: the map-element attr; the caller guarantees the sizes.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &attr) }?;
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

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Looks up keys `first..first + n` of an array map (per-CPU or not),
/// `n = keys.len()`, in one BPF_MAP_LOOKUP_BATCH into `buf`, key after
/// key; the kernel also writes the keys it read to `keys`. `first + n`
/// must not exceed the map's max_entries (the kernel then stops with
/// ENOENT, returned as an error).
///
/// # Safety
/// `buf` must hold at least `n` values as the kernel copies them out:
/// `n * possible_cpus * round_up(value_size, 8)` bytes for a per-CPU array,
/// `n * value_size` for a plain one.
pub unsafe fn lookup_array_batch(
    map: BorrowedFd<'_>,
    first: u32,
    keys: &mut [u32],
    buf: &mut [u64],
) -> io::Result<()> {
    // The kernel starts after the key `in_batch` points at (at key 0 when
    // it is null), writes the n keys it read to `keys` and the last one to
    // `out_batch`.
    let before_first = first.wrapping_sub(1);
    let mut last = 0u32;
    let attr = BatchAttr {
        in_batch: if first == 0 {
            0
        } else {
            &before_first as *const u32 as u64
        },
        out_batch: &mut last as *mut u32 as u64,
        keys: keys.as_mut_ptr() as u64,
        values: buf.as_mut_ptr() as u64,
        count: keys.len() as u32,
        map_fd: map.as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: BatchAttr is the batch attr; `keys` holds n u32 keys (array
    // keys are u32), `last` one, and the caller guarantees `buf` holds n
    // values.
    unsafe { bpf(BPF_MAP_LOOKUP_BATCH, &attr) }?;
    Ok(())
}

/// Maps for tests that check readers against what they wrote.
#[cfg(test)]
pub(crate) mod test_maps {
    use super::*;

    /// A per-CPU array of `entries` u64 values (root or CAP_BPF).
    pub fn percpu_u64_array(entries: u32) -> io::Result<OwnedFd> {
        const BPF_MAP_CREATE: libc::c_long = 0;
        const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
        // map_type, key_size, value_size, max_entries, then zeros.
        let mut attr = [0u32; 32];
        attr[..4].copy_from_slice(&[BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, entries]);
        // SAFETY: the map-create attr, zero past max_entries.
        let fd = unsafe { bpf(BPF_MAP_CREATE, &attr) }?;
        // SAFETY: a new fd nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The same, or None after a skip (a failure in CI) when the kernel
    /// refuses.
    pub fn percpu_u64_array_or_skip(entries: u32) -> Option<OwnedFd> {
        let map = percpu_u64_array(entries);
        let needs = format!(
            "BPF_MAP_CREATE of a per-CPU array (root or CAP_BPF): {:?}",
            map.as_ref().err()
        );
        crate::test_skip::unless_met(map.is_ok(), &needs).then(|| map.unwrap())
    }

    /// Sets `key` of a per-CPU u64 array to `per_cpu` (one value per
    /// possible CPU).
    pub fn update(map: BorrowedFd<'_>, key: u32, per_cpu: &[u64]) -> io::Result<()> {
        const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
        let attr = LookupAttr {
            map_fd: map.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: per_cpu.as_ptr() as u64,
            flags: 0,
        };
        // SAFETY: the map-element attr; the caller passes one u64 per
        // possible CPU, the value a per-CPU u64 array reads.
        unsafe { bpf(BPF_MAP_UPDATE_ELEM, &attr) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_ENABLE_STATS: libc::c_long = 32;

    /// The program-load member of `union bpf_attr`, zero past `prog_flags`.
    #[repr(C)]
    struct LoadAttr {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        _zero: [u64; 12],
    }

    /// Loads `r0 = 0; exit` as a socket filter (drops every packet).
    fn load_drop_all_filter() -> io::Result<OwnedFd> {
        const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
        let insns: [u64; 2] = [0xb7, 0x95]; // mov r0, 0; exit
        let attr = LoadAttr {
            prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
            insn_cnt: 2,
            insns: insns.as_ptr() as u64,
            license: c"GPL".as_ptr() as u64,
            log_level: 0,
            log_size: 0,
            log_buf: 0,
            kern_version: 0,
            prog_flags: 0,
            _zero: [0; 12],
        };
        // SAFETY: LoadAttr is the prog-load attr; insns and license outlive
        // the call.
        let fd = unsafe { bpf(BPF_PROG_LOAD, &attr) }?;
        // SAFETY: a new fd nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// A batch from the middle of an array returns exactly the keys asked
    /// for (the kernel starts *after* `in_batch`), checked against plain
    /// lookups of each key.
    #[test]
    fn array_batch_reads_the_keys_asked_for() {
        let Some(map) = test_maps::percpu_u64_array_or_skip(16) else {
            return;
        };
        let cpus = crate::probes::percpu::possible_cpus().unwrap();
        for key in 0u32..16 {
            // key * 100 + cpu on each CPU
            let value: Vec<u64> = (0..cpus as u64).map(|c| key as u64 * 100 + c).collect();
            test_maps::update(map.as_fd(), key, &value).unwrap();
        }
        for (first, n) in [(0u32, 3usize), (5, 4), (14, 2)] {
            let mut keys = vec![0u32; n];
            let mut batch = vec![0u64; n * cpus];
            // SAFETY: `batch` holds n values of `cpus` u64 words.
            unsafe { lookup_array_batch(map.as_fd(), first, &mut keys, &mut batch) }.unwrap();
            assert_eq!(keys, (first..first + n as u32).collect::<Vec<_>>());
            for (i, got) in batch.chunks(cpus).enumerate() {
                let mut one = vec![0u64; cpus];
                let key = first + i as u32;
                // SAFETY: `one` holds one value of `cpus` words.
                unsafe { lookup_percpu_key(map.as_fd(), &key, &mut one) }.unwrap();
                assert_eq!(got, one, "key {key}");
                assert_eq!(got[0], key as u64 * 100);
            }
        }
        // Past the end: an error, not a short read taken for a full one.
        let mut keys = vec![0u32; 3];
        let mut batch = vec![0u64; 3 * cpus];
        // SAFETY: as above.
        assert!(unsafe { lookup_array_batch(map.as_fd(), 15, &mut keys, &mut batch) }.is_err());
    }

    /// Statistics stay on while the returned fd is open.
    fn enable_run_stats() -> io::Result<OwnedFd> {
        let attr: u32 = 0; // BPF_STATS_RUN_TIME
        // SAFETY: the enable_stats attr is one u32.
        let fd = unsafe { bpf(BPF_ENABLE_STATS, &attr) }?;
        // SAFETY: a new fd nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The kernel's own text rendering of the same statistics.
    fn fdinfo_stats(prog: BorrowedFd<'_>) -> ProgStats {
        let path = format!("/proc/self/fdinfo/{}", prog.as_raw_fd());
        let text = std::fs::read_to_string(&path).unwrap();
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("{path}: no {name} line in {text:?}"))
                .trim()
                .parse()
                .unwrap()
        };
        ProgStats {
            run_ns: field("run_time_ns:"),
            runs: field("run_cnt:"),
            recursion_misses: field("recursion_misses:"),
        }
    }

    /// `prog_run_stats` reads the right words of bpf_prog_info: a filter
    /// that ran once per packet sent shows that many runs, and the same
    /// numbers as /proc/self/fdinfo.
    #[test]
    fn prog_run_stats_agrees_with_fdinfo() {
        let prog = load_drop_all_filter();
        let needs = format!(
            "BPF_PROG_LOAD of a socket filter (root or CAP_BPF): {:?}",
            prog.as_ref().err()
        );
        if !crate::test_skip::unless_met(prog.is_ok(), &needs) {
            return;
        }
        let prog = prog.unwrap();
        let _stats = enable_run_stats().expect("BPF_ENABLE_STATS");
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let prog_fd = prog.as_raw_fd();
        // SAFETY: SO_ATTACH_BPF reads one int, the program fd.
        let r = unsafe {
            libc::setsockopt(
                rx.as_fd().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_BPF,
                &prog_fd as *const i32 as *const libc::c_void,
                4,
            )
        };
        assert_eq!(r, 0, "SO_ATTACH_BPF: {}", io::Error::last_os_error());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent = 300;
        for _ in 0..sent {
            tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        }
        let stats = prog_run_stats(prog.as_fd()).unwrap();
        assert!(stats.runs >= sent, "{stats:?} after {sent} packets");
        assert!(stats.run_ns > 0);
        assert_eq!(stats, fdinfo_stats(prog.as_fd()));
    }
}
