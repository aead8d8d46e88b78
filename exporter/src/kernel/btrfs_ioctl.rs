//! The three btrfs ioctls node_exporter's btrfs collector makes on a
//! mounted filesystem (through github.com/dennwc/btrfs): FS_INFO for the
//! filesystem's id and device count, then per device DEV_INFO (size, use,
//! path, uuid) and GET_DEV_STATS (the write, read, flush, corruption and
//! generation error counters `btrfs device stats` prints). None needs a
//! capability (only resetting the counters does), so they work after
//! usescope drops its privileges, on any mount point it may open.
//!
//! Not a collector: it is declared outside the `registry!` list.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `_IOC(dir, 0x94, nr, size)` of the kernel's include/uapi/linux/btrfs.h.
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0x94 << 8) | nr
}
const IOC_READ: u64 = 2;
const IOC_READ_WRITE: u64 = 3;

/// struct btrfs_ioctl_fs_info_args (1024 bytes).
#[repr(C)]
struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    rest: [u8; 1024 - 32],
}

/// struct btrfs_ioctl_dev_info_args (4096 bytes).
#[repr(C)]
struct DevInfoArgs {
    devid: u64,
    uuid: [u8; 16],
    bytes_used: u64,
    total_bytes: u64,
    unused: [u64; 379],
    path: [u8; 1024],
}

/// struct btrfs_ioctl_get_dev_stats (1032 bytes).
#[repr(C)]
struct DevStatsArgs {
    devid: u64,
    nr_items: u64,
    flags: u64,
    values: [u64; 5],
    unused: [u64; 121],
}

const FS_INFO: u64 = ioc(IOC_READ, 31, std::mem::size_of::<FsInfoArgs>());
const DEV_INFO: u64 = ioc(IOC_READ_WRITE, 30, std::mem::size_of::<DevInfoArgs>());
const GET_DEV_STATS: u64 = ioc(IOC_READ_WRITE, 52, std::mem::size_of::<DevStatsArgs>());

/// One device of a mounted filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// The last component of the device's path (`sda`, `loop0`).
    pub name: String,
    /// The device's btrfs uuid, `8-4-4-4-12` lower-case hex.
    pub uuid: String,
    pub total_bytes: u64,
    pub bytes_used: u64,
    /// Write, read, flush, corruption and generation errors.
    pub errors: [u64; 5],
}

/// A 16-byte uuid as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(u: &[u8; 16], out: &mut String) {
    use std::fmt::Write as _;
    out.clear();
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        let _ = write!(out, "{b:02x}");
    }
}

fn ioctl<T>(fd: &OwnedFd, request: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the #[repr(C)] struct, of the size encoded in
    // `request`, that the kernel reads and writes for this request.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Opens a mount point (a directory; never follows a FIFO or device) and
/// reads its filesystem id and every device's info and error counters
/// into `devices`. Returns the filesystem id, formatted as a uuid.
pub fn read(mount_point: &Path, devices: &mut Vec<Device>) -> io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string; the flags make a plain read-only open of
    // a directory.
    let raw = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor this function just opened and owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY (zeroed): plain integers and byte arrays.
    let mut info: Box<FsInfoArgs> = Box::new(unsafe { std::mem::zeroed() });
    ioctl(&fd, FS_INFO, info.as_mut())?;
    let mut fsid = String::new();
    format_uuid(&info.fsid, &mut fsid);
    devices.clear();
    let mut dev: Box<DevInfoArgs> = Box::new(unsafe { std::mem::zeroed() });
    let mut stats: Box<DevStatsArgs> = Box::new(unsafe { std::mem::zeroed() });
    let mut uuid = String::new();
    // Device ids need not start at 1 or be contiguous (a removed device
    // leaves a gap, ENODEV); stop once every device is found.
    for devid in 0..=info.max_id.min(1 << 16) {
        *dev = unsafe { std::mem::zeroed() };
        dev.devid = devid;
        match ioctl(&fd, DEV_INFO, dev.as_mut()) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
            r => r?,
        }
        *stats = unsafe { std::mem::zeroed() };
        stats.devid = devid;
        stats.nr_items = 5;
        ioctl(&fd, GET_DEV_STATS, stats.as_mut())?;
        let path_len = dev
            .path
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(dev.path.len());
        let path = String::from_utf8_lossy(&dev.path[..path_len]);
        format_uuid(&dev.uuid, &mut uuid);
        devices.push(Device {
            name: path.rsplit('/').next().unwrap_or("").to_string(),
            uuid: uuid.clone(),
            total_bytes: dev.total_bytes,
            bytes_used: dev.bytes_used,
            errors: stats.values,
        });
        if devices.len() as u64 == info.num_devices {
            break;
        }
    }
    Ok(fsid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_linux_btrfs_h() {
        // From the kernel headers (and dennwc/btrfs's generated constants).
        assert_eq!(FS_INFO, 0x8400_941f);
        assert_eq!(DEV_INFO, 0xd000_941e);
        assert_eq!(GET_DEV_STATS, 0xc408_9434);
    }

    #[test]
    fn uuid_format() {
        let mut s = String::new();
        let u = [
            0x8f, 0x0c, 0x00, 0x09, 0xc7, 0xd7, 0x48, 0xf3, 0x83, 0x0e, 0x99, 0x62, 0x33, 0x39,
            0x3f, 0x1f,
        ];
        format_uuid(&u, &mut s);
        assert_eq!(s, "8f0c0009-c7d7-48f3-830e-996233393f1f");
    }

    #[test]
    fn not_btrfs_is_an_error_not_a_panic() {
        let mut devices = Vec::new();
        assert!(read(Path::new("/proc"), &mut devices).is_err());
        assert!(read(Path::new("/nonexistent-usescope"), &mut devices).is_err());
    }
}
