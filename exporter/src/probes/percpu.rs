//! Reads per-CPU maps into reused buffers.
//!
//! [`PerCpuStruct`]: most probes keep all their counters in one
//! struct-valued entry of a per-CPU array, so one `BPF_MAP_LOOKUP_ELEM`
//! returns every counter of every CPU. [`PerCpuCounters`]: drops keeps one
//! u64 per key of a per-CPU array and reads only the keys it needs,
//! a range of keys per batch lookup. [`PerCpuHash`]: biolatency keys its
//! histograms by (device, op), which only the kernel side discovers, so it
//! uses a per-CPU hash with 8-byte keys. aya's per-CPU lookups would
//! allocate a fresh boxed slice per read; these readers issue the same
//! syscalls into `Vec<u64>`s they keep, so a scrape allocates nothing here
//! once the buffers have grown to the number of keys.

use std::os::fd::{AsFd, OwnedFd};

use aya::maps::{MapData, MapInfo, MapType};

use super::sys;
use crate::kernel::error::CollectError;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::Encoder;

pub struct PerCpuStruct {
    /// Owns the map fd; the map lives as long as this reader.
    map: MapData,
    words: usize,
    buf: Vec<u64>,
}

impl PerCpuStruct {
    /// Wraps the map behind `fd` (handed over by the probe loader), a
    /// per-CPU array whose value is `value_size` bytes (checked).
    pub fn from_fd(name: &str, fd: OwnedFd, value_size: usize) -> Result<PerCpuStruct, String> {
        let map = open_checked(name, fd, value_size, "a per-CPU array", |info| {
            matches!(info.map_type(), Ok(MapType::PerCpuArray)) && info.max_entries() >= 1
        })?;
        Ok(PerCpuStruct::shaped(map, value_size, possible_cpus()?))
    }

    /// For bench/drops-scrape: a plain one-entry array whose value is
    /// `cpus * value_size` bytes, read as a per-CPU array on a `cpus`-CPU
    /// machine is: the kernel copies as many bytes, `cpus()` yields as many
    /// values.
    pub fn simulated(
        name: &str,
        fd: OwnedFd,
        value_size: usize,
        cpus: usize,
    ) -> Result<Self, String> {
        let map = open_checked(name, fd, value_size * cpus, "an array", |info| {
            matches!(info.map_type(), Ok(MapType::Array)) && info.max_entries() >= 1
        })?;
        Ok(PerCpuStruct::shaped(map, value_size, cpus))
    }

    fn shaped(map: MapData, value_size: usize, cpus: usize) -> PerCpuStruct {
        let words = value_size / 8;
        PerCpuStruct {
            map,
            words,
            buf: vec![0; words * cpus],
        }
    }

    /// Reads entry 0 for every possible CPU; then [`Self::cpus`] iterates it.
    pub fn read(&mut self) -> std::io::Result<()> {
        // SAFETY: `buf` holds possible_cpus * value_size bytes, and
        // value_size (a multiple of 8) was checked against the kernel's map
        // info in `from_fd`.
        unsafe { sys::lookup_percpu(self.map.fd().as_fd(), &mut self.buf) }
    }

    /// Reads entry `key` instead (runqlat's overflow histogram in entry 1
    /// of its host map, its per-cgroup histograms by slot); an entry past
    /// the array's end is an error.
    pub fn read_entry(&mut self, key: u32) -> std::io::Result<()> {
        // SAFETY: as in `read`; the key of an array is a u32.
        unsafe { sys::lookup_percpu_key(self.map.fd().as_fd(), &key, &mut self.buf) }
    }

    /// The map's fd, to write to it (runqlat zeroes freed slots).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.map.fd().as_fd()
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

/// The map behind `fd` (handed over by the probe loader), after checking
/// with the kernel that it is `kind` and that its value is exactly
/// `value_size` bytes (the Rust mirror's `size_of`).
fn open_checked(
    name: &str,
    fd: OwnedFd,
    value_size: usize,
    kind: &str,
    is_kind: impl FnOnce(&MapInfo) -> bool,
) -> Result<MapData, String> {
    let map = MapData::from_fd(fd).map_err(|e| format!("map {name}: {e}"))?;
    let info = map
        .info()
        .map_err(|e| format!("map {name}: reading map info: {e}"))?;
    if !is_kind(&info) {
        return Err(format!("map {name} is not {kind}"));
    }
    let kernel = info.value_size();
    if kernel as usize != value_size || !value_size.is_multiple_of(8) {
        return Err(format!(
            "map {name}: kernel value size {kernel} != {value_size} expected by usescope \
             (ebpf-probes/usescope.h and probes/layout.rs disagree)"
        ));
    }
    Ok(map)
}

/// The kernel's possible CPUs: how many values a per-CPU lookup returns.
pub fn possible_cpus() -> Result<usize, String> {
    aya::util::nr_cpus().map_err(|(path, e)| format!("counting possible CPUs from {path}: {e}"))
}

/// A per-CPU array of single u64 counters, read by ranges of keys, so a
/// reader copies only the keys it asks for.
pub struct PerCpuCounters {
    map: MapData,
    cpus: usize,
    max_entries: u32,
    /// The values of the last read, `cpus` words per key.
    buf: Vec<u64>,
    /// Scratch for the keys a batch lookup returns.
    batch_keys: Vec<u32>,
    /// Value bytes the kernel has copied out since the last `take_bytes_read`.
    bytes_read: usize,
}

impl PerCpuCounters {
    /// Wraps the map behind `fd` after checking with the kernel that it is
    /// a per-CPU array of u64.
    pub fn from_fd(name: &str, fd: OwnedFd) -> Result<PerCpuCounters, String> {
        let map = open_checked(name, fd, 8, "a per-CPU array", |info| {
            matches!(info.map_type(), Ok(MapType::PerCpuArray))
        })?;
        PerCpuCounters::shaped(name, map, possible_cpus()?)
    }

    /// For bench/drops-scrape: a plain array with `cpus * 8`-byte values,
    /// read as a per-CPU array of u64 on a `cpus`-CPU machine is (same
    /// syscalls, same bytes copied, same per-CPU chunks).
    pub fn simulated(name: &str, fd: OwnedFd, cpus: usize) -> Result<PerCpuCounters, String> {
        let map = open_checked(name, fd, 8 * cpus, "an array", |info| {
            matches!(info.map_type(), Ok(MapType::Array))
        })?;
        PerCpuCounters::shaped(name, map, cpus)
    }

    fn shaped(name: &str, map: MapData, cpus: usize) -> Result<PerCpuCounters, String> {
        let info = map
            .info()
            .map_err(|e| format!("map {name}: reading map info: {e}"))?;
        Ok(PerCpuCounters {
            map,
            cpus,
            max_entries: info.max_entries(),
            buf: Vec::new(),
            batch_keys: Vec::new(),
            bytes_read: 0,
        })
    }

    /// The map's number of keys.
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }

    /// Reads keys `first..first + n` in one syscall; returns each key's
    /// per-CPU values (`n` chunks of one word per CPU).
    pub fn read_range(
        &mut self,
        first: u32,
        n: u32,
    ) -> std::io::Result<std::slice::Chunks<'_, u64>> {
        if first
            .checked_add(n)
            .is_none_or(|end| end > self.max_entries)
        {
            return Err(std::io::Error::other(format!(
                "keys {first}..{first}+{n} past the map's {} entries",
                self.max_entries
            )));
        }
        self.batch_keys.resize(n as usize, 0);
        self.buf.resize(n as usize * self.cpus, 0);
        let fd = self.map.fd().as_fd();
        // SAFETY (both calls): `buf` holds n values of `cpus` u64 words
        // each: what the kernel copies for a per-CPU array of u64 (value
        // size 8, checked) on `cpus` possible CPUs, or for a plain array of
        // `cpus * 8`-byte values (checked); array keys are u32.
        match n {
            0 => {}
            // The batch command allocates kernel buffers on every call:
            // for one key, the plain lookup is cheaper (0.65 against 0.9 µs
            // here, bench/drops-scrape).
            1 => unsafe { sys::lookup_percpu_key(fd, &first, &mut self.buf) }?,
            _ => {
                unsafe { sys::lookup_array_batch(fd, first, &mut self.batch_keys, &mut self.buf) }?
            }
        }
        self.bytes_read += self.buf.len() * 8;
        Ok(self.buf.chunks(self.cpus))
    }

    /// Value bytes the kernel copied out since the last call.
    pub fn take_bytes_read(&mut self) -> usize {
        std::mem::take(&mut self.bytes_read)
    }
}

/// A per-CPU hash map with u64 keys, read whole at each scrape.
pub struct PerCpuHash {
    map: MapData,
    words: usize,
    cpus: usize,
    /// The keys of the last read, in the order the kernel listed them.
    keys: Vec<u64>,
    /// Each key's per-CPU values, `cpus * words` words per key.
    values: Vec<u64>,
}

impl PerCpuHash {
    /// Wraps the map behind `fd` after checking with the kernel that it is
    /// a per-CPU hash with 8-byte keys and `value_size`-byte values.
    pub fn from_fd(name: &str, fd: OwnedFd, value_size: usize) -> Result<PerCpuHash, String> {
        let kind = "a per-CPU hash with 8-byte keys";
        let map = open_checked(name, fd, value_size, kind, |info| {
            matches!(info.map_type(), Ok(MapType::PerCpuHash)) && info.key_size() == 8
        })?;
        Ok(PerCpuHash {
            map,
            words: value_size / 8,
            cpus: possible_cpus()?,
            keys: Vec::new(),
            values: Vec::new(),
        })
    }

    /// Reads every key and its per-CPU values. A key deleted between
    /// listing and lookup is skipped.
    pub fn read(&mut self) -> std::io::Result<()> {
        self.keys.clear();
        let fd = self.map.fd().as_fd();
        let mut prev = None;
        // SAFETY: the key size was checked to be 8 in `from_fd`.
        while let Some(k) = unsafe { sys::next_key(fd, prev.as_ref()) }? {
            self.keys.push(k);
            prev = Some(k);
        }
        let per_key = self.cpus * self.words;
        self.values.resize(self.keys.len() * per_key, 0);
        let mut kept = 0;
        for i in 0..self.keys.len() {
            let key = self.keys[i];
            let buf = &mut self.values[kept * per_key..(kept + 1) * per_key];
            // SAFETY: 8-byte key (checked); `buf` holds possible_cpus *
            // value_size bytes, value_size a multiple of 8 (checked).
            match unsafe { sys::lookup_percpu_key(fd, &key, buf) } {
                Ok(()) => {
                    self.keys[kept] = key;
                    kept += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        self.keys.truncate(kept);
        Ok(())
    }

    /// The map's fd, to delete entries (biolatency's per-cgroup view
    /// deletes those of cgroups that have gone).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.map.fd().as_fd()
    }

    /// Each key of the last read with its per-CPU values (one chunk of
    /// u64 words per possible CPU).
    pub fn entries(&self) -> impl Iterator<Item = (u64, std::slice::ChunksExact<'_, u64>)> {
        let per_key = self.cpus * self.words;
        self.keys.iter().enumerate().map(move |(i, &k)| {
            (
                k,
                self.values[i * per_key..(i + 1) * per_key].chunks_exact(self.words),
            )
        })
    }
}
/// The collector of a probe whose kernel side keeps one struct of counters
/// in a per-CPU array (`map_name`): at each scrape the array is read and
/// `write` writes the families from its sums over CPUs.
pub fn counters_collector(
    map_name: &'static str,
    map: OwnedFd,
    value_size: usize,
    write: fn(&PerCpuStruct, &mut Encoder),
) -> Result<Box<dyn Collector>, String> {
    Ok(Box::new(Counters {
        map_name,
        counts: PerCpuStruct::from_fd(map_name, map, value_size)?,
        write,
    }))
}

struct Counters {
    map_name: &'static str,
    counts: PerCpuStruct,
    write: fn(&PerCpuStruct, &mut Encoder),
}

impl Collector for Counters {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        self.counts.read().map_err(|e| {
            CollectError::other(format!("bpf map {}", self.map_name), e.to_string())
        })?;
        (self.write)(&self.counts, enc);
        Ok(())
    }
}
