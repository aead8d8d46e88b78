//! The kernel's recursion misses of a daemon's BPF programs: runs the
//! kernel skipped because the same program was already running on that
//! CPU (a softirq interrupting it in process context). What such a run
//! would have counted is lost, so a probe's oracle test allows for it.

#![allow(dead_code)]

/// BPF_PROG_GET_FD_BY_ID and BPF_OBJ_GET_INFO_BY_FD (include/uapi/linux/bpf.h).
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// Offset of `recursion_misses` in struct bpf_prog_info (Linux 5.12+).
const RECURSION_MISSES: usize = 208;

/// The sum of recursion misses over the programs process `pid` holds.
pub fn recursion_misses(pid: u32) -> u64 {
    super::common::bpf_objects::fdinfo_ids(pid, "prog_id")
        .into_iter()
        .map(prog_misses)
        .sum()
}

fn prog_misses(id: u32) -> u64 {
    // SAFETY: bpf(2) with attribute unions laid out as the kernel reads
    // them (zeroed past the fields set), and an info buffer whose length
    // is passed; the fd is closed here.
    unsafe {
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        let fd = libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_GET_FD_BY_ID,
            attr.as_ptr(),
            attr.len(),
        );
        if fd < 0 {
            return 0;
        }
        let mut info = [0u8; 256];
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        let rc = libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_ptr(),
            attr.len(),
        );
        libc::close(fd as i32);
        if rc < 0 {
            return 0;
        }
        u64::from_ne_bytes(
            info[RECURSION_MISSES..RECURSION_MISSES + 8]
                .try_into()
                .unwrap(),
        )
    }
}
