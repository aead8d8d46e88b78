//! Reads a one-entry per-CPU array map into a reused buffer.
//!
//! Each probe keeps all its counters in one struct-valued entry, so one
//! `BPF_MAP_LOOKUP_ELEM` returns every counter of every CPU. aya's
//! `PerCpuArray::get` would allocate a fresh boxed slice per read; this
//! reader issues the same syscall into a `Vec<u64>` it keeps, so a scrape
//! allocates nothing here.

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Map, MapData};

/// `BPF_MAP_LOOKUP_ELEM` from include/uapi/linux/bpf.h.
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;

/// The map-element part of `union bpf_attr`.
#[repr(C)]
struct LookupAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

pub struct PerCpuStruct {
    /// Owns the map fd; the map lives as long as this reader.
    map: MapData,
    words: usize,
    buf: Vec<u64>,
}

impl PerCpuStruct {
    /// Wraps `map`, which must be a per-CPU array whose value is exactly
    /// `value_size` bytes (the Rust mirror's `size_of`).
    pub fn new(name: &str, map: Map, value_size: usize) -> Result<PerCpuStruct, String> {
        let Map::PerCpuArray(map) = map else {
            return Err(format!("map {name} is not a per-CPU array"));
        };
        let info = map
            .info()
            .map_err(|e| format!("map {name}: reading map info: {e}"))?;
        if info.value_size() as usize != value_size || !value_size.is_multiple_of(8) {
            return Err(format!(
                "map {name}: kernel value size {} != {value_size} expected by usescope \
                 (ebpf-probes/usescope.h and probes/layout.rs disagree)",
                info.value_size()
            ));
        }
        let cpus = aya::util::nr_cpus()
            .map_err(|(path, e)| format!("counting possible CPUs from {path}: {e}"))?;
        let words = value_size / 8;
        Ok(PerCpuStruct {
            map,
            words,
            buf: vec![0; words * cpus],
        })
    }

    /// Reads entry 0 for every possible CPU; then [`Self::cpus`] iterates it.
    pub fn read(&mut self) -> std::io::Result<()> {
        let key: u32 = 0;
        let attr = LookupAttr {
            map_fd: self.map.fd().as_fd().as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: self.buf.as_mut_ptr() as u64,
            flags: 0,
        };
        // SAFETY: the kernel writes possible_cpus * round_up(value_size, 8)
        // bytes to `value`; `buf` holds exactly that many (value_size is a
        // multiple of 8, checked in `new`), and `key` outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_ELEM,
                &attr as *const LookupAttr,
                std::mem::size_of::<LookupAttr>(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Each possible CPU's value, as u64 words, from the last `read`.
    pub fn cpus(&self) -> std::slice::ChunksExact<'_, u64> {
        self.buf.chunks_exact(self.words)
    }

    /// Sum over CPUs of word `i`.
    pub fn sum(&self, i: usize) -> u64 {
        self.cpus()
            .map(|c| c.get(i).copied().unwrap_or(0))
            .fold(0u64, u64::wrapping_add)
    }
}
