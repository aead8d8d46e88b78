//! Reads a one-entry per-CPU array map into a reused buffer.
//!
//! Each probe keeps all its counters in one struct-valued entry, so one
//! `BPF_MAP_LOOKUP_ELEM` returns every counter of every CPU. aya's
//! `PerCpuArray::get` would allocate a fresh boxed slice per read; this
//! reader issues the same syscall into a `Vec<u64>` it keeps, so a scrape
//! allocates nothing here.

use std::os::fd::{AsFd, OwnedFd};

use aya::maps::{MapData, MapType};

use super::sys;

pub struct PerCpuStruct {
    /// Owns the map fd; the map lives as long as this reader.
    map: MapData,
    words: usize,
    buf: Vec<u64>,
}

impl PerCpuStruct {
    /// Wraps the map behind `fd` (handed over by the probe loader), after
    /// checking with the kernel that it is a per-CPU array whose value is
    /// exactly `value_size` bytes (the Rust mirror's `size_of`).
    pub fn from_fd(name: &str, fd: OwnedFd, value_size: usize) -> Result<PerCpuStruct, String> {
        let map = MapData::from_fd(fd).map_err(|e| format!("map {name}: {e}"))?;
        let info = map
            .info()
            .map_err(|e| format!("map {name}: reading map info: {e}"))?;
        if !matches!(info.map_type(), Ok(MapType::PerCpuArray)) || info.max_entries() < 1 {
            return Err(format!("map {name} is not a per-CPU array"));
        }
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
        // SAFETY: `buf` holds possible_cpus * value_size bytes, and
        // value_size (a multiple of 8) was checked against the kernel's map
        // info in `from_fd`.
        unsafe { sys::lookup_percpu(self.map.fd().as_fd(), &mut self.buf) }
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
