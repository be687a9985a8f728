//! What a starting OSD tells CRUSH about itself: its location (configured,
//! `--crush-location`, or `host=<this machine>`), its device class and its
//! data device's size, read from the device the store lives on.
//!
//! Class detection: for a block device, or a file on one, find the disk in
//! `/sys/dev/block/MAJ:MIN` (a partition's parent), then `nvme*` → nvme,
//! `queue/rotational` 1 → hdd, 0 → ssd; anything unknown (tmpfs, overlay,
//! no sysfs) → ssd. Size: a block device's size from sysfs, a BlueStore
//! file's length, a FileStore's file system size, nothing for a memstore.
//! Detection never fails the start: what cannot be read is unknown.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use cairn_config::{OsdConfig, StoreKind};
use cairn_map::crush::{parse_weight, DeviceReport, Location, DEFAULT_CLASS};

use crate::osd_store;

/// The report OSD `id` boots with, from its configuration (where
/// `--crush-location` has already been applied).
pub fn report(dir: &Path, conf: &OsdConfig) -> Result<DeviceReport> {
    let location_text = if conf.crush_location.is_empty() {
        format!("host={}", short_hostname())
    } else {
        conf.crush_location.clone()
    };
    let location = Location::parse(&location_text).context("crush location")?;
    let device = data_path(dir, conf);
    let (class, class_configured) = if conf.crush_device_class.is_empty() {
        let detected = if conf.bluestore_device_emulation == "hdd" {
            "hdd"
        } else {
            detect_class(&device)
        };
        (detected.to_string(), false)
    } else {
        (conf.crush_device_class.clone(), true)
    };
    let initial_weight = if conf.crush_initial_weight.is_empty() {
        None
    } else {
        Some(parse_weight(&conf.crush_initial_weight).context("osd.crush_initial_weight")?)
    };
    Ok(DeviceReport {
        location,
        update_location: conf.crush_update_on_start,
        class,
        class_configured,
        size_bytes: size_bytes(conf.store, &device),
        initial_weight,
    })
}

/// Where the store's data lives.
fn data_path(dir: &Path, conf: &OsdConfig) -> PathBuf {
    match conf.store {
        StoreKind::Bluestore => osd_store::blue_paths(dir, conf).block,
        StoreKind::Filestore => dir.join("store"),
        StoreKind::Memstore => dir.to_path_buf(),
    }
}

/// This machine's name up to the first dot, as a bucket name
/// (`localhost` if it has none).
pub fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 {
        String::from_utf8_lossy(&buf[..len]).into_owned()
    } else {
        String::new()
    };
    let short: String = name
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let short = short.trim_start_matches('-').to_string();
    if short.is_empty() {
        "localhost".into()
    } else {
        short
    }
}

/// Major and minor numbers of a Linux `dev_t` (glibc's encoding).
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// The sysfs directory of the block device `path` is (or lives on), and
/// whether `path` is the device itself.
fn sysfs_dir(path: &Path) -> Option<(PathBuf, bool)> {
    let (dev, is_device) = device_of(path)?;
    let (major, minor) = major_minor(dev);
    if major == 0 {
        return None; // tmpfs, overlay, btrfs subvolumes: no block device
    }
    let dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some((dir, is_device))
}

/// The disk (not partition) holding the sysfs device `dir`.
fn disk_of(dir: &Path) -> PathBuf {
    if dir.join("partition").exists() {
        if let Some(parent) = dir.parent() {
            return parent.to_path_buf();
        }
    }
    dir.to_path_buf()
}

/// `nvme`, `hdd` or `ssd` for the device holding `path`.
pub fn detect_class(path: &Path) -> &'static str {
    let Some((dir, _)) = sysfs_dir(path) else {
        return DEFAULT_CLASS;
    };
    let disk = disk_of(&dir);
    let name = disk.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("nvme") {
        return "nvme";
    }
    match std::fs::read_to_string(disk.join("queue/rotational")).map(|s| s.trim().to_string()) {
        Ok(flag) if flag == "1" => "hdd",
        Ok(flag) if flag == "0" => "ssd",
        _ => DEFAULT_CLASS,
    }
}

/// Do `a` and `b` (files or directories, or the directories they would be
/// made in) live on the same disk? Two partitions of one disk count as
/// one; two paths with no block device behind them (tmpfs) are the same
/// when their file system is.
pub fn same_disk(a: &Path, b: &Path) -> bool {
    match (sysfs_dir(a), sysfs_dir(b)) {
        (Some((x, _)), Some((y, _))) => disk_of(&x) == disk_of(&y),
        (None, None) => match (device_of(a), device_of(b)) {
            (Some((x, _)), Some((y, _))) => x == y,
            _ => false,
        },
        _ => false,
    }
}

/// The device number holding `path` (or its parent if it is not made
/// yet): a block device node's own, any other file's file system's; and
/// whether `path` is the device itself.
fn device_of(path: &Path) -> Option<(u64, bool)> {
    let meta = std::fs::metadata(path)
        .or_else(|_| {
            path.parent()
                .map_or_else(|| std::fs::metadata("/"), std::fs::metadata)
        })
        .ok()?;
    let is_device = meta.file_type().is_block_device();
    Some((if is_device { meta.rdev() } else { meta.dev() }, is_device))
}

/// The size of the store's data device in bytes (0 if unknown).
fn size_bytes(kind: StoreKind, path: &Path) -> u64 {
    match kind {
        StoreKind::Memstore => 0,
        StoreKind::Filestore => filesystem_bytes(path),
        StoreKind::Bluestore => match sysfs_dir(path) {
            Some((dir, true)) => std::fs::read_to_string(dir.join("size"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map_or(0, |sectors| sectors.saturating_mul(512)),
            _ => std::fs::metadata(path).map_or(0, |m| m.len()),
        },
    }
}

/// Total bytes of the file system holding `path` (or its parent).
fn filesystem_bytes(path: &Path) -> u64 {
    let target = if path.exists() {
        path
    } else {
        path.parent().unwrap_or(Path::new("/"))
    };
    let Ok(c_path) = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and stat is a valid out-pointer.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return 0;
    }
    // The field types are u64 on 64-bit Linux but narrower elsewhere.
    #[allow(clippy::useless_conversion)]
    let (blocks, block_size) = (u64::from(stat.f_blocks), u64::from(stat.f_frsize));
    blocks.saturating_mul(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_files_of_one_directory_are_on_the_same_disk() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("block"), dir.path().join("db"));
        std::fs::write(&a, b"x").unwrap();
        // `db` is not made yet: the directory it would be made in counts.
        assert!(same_disk(&a, &b));
        assert!(same_disk(&b, &a));
    }

    #[test]
    fn dev_t_encoding() {
        // 8:1 (sda1) and 259:3 (an nvme partition) in glibc's encoding.
        assert_eq!(major_minor(0x801), (8, 1));
        assert_eq!(major_minor((259 << 8) | 3), (259, 3));
        assert_eq!(major_minor(0x0000_1000_0000_0801), (0x1008, 1));
        assert_eq!(major_minor(0x1230_0801), (8, 0x12301));
    }

    #[test]
    fn detection_never_fails() {
        let dir = tempfile::tempdir().unwrap();
        let class = detect_class(&dir.path().join("missing"));
        assert!(["hdd", "ssd", "nvme"].contains(&class), "{class}");
        assert!(filesystem_bytes(dir.path()) > 0);
        let file = dir.path().join("block");
        std::fs::write(&file, vec![0u8; 8192]).unwrap();
        assert_eq!(size_bytes(StoreKind::Bluestore, &file), 8192);
        assert_eq!(size_bytes(StoreKind::Memstore, &file), 0);
        let name = short_hostname();
        assert!(!name.is_empty() && !name.contains('.'), "{name}");
    }

    #[test]
    fn reports_follow_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let mut conf = OsdConfig {
            store: StoreKind::Memstore,
            ..OsdConfig::default()
        };
        let r = report(dir.path(), &conf).unwrap();
        assert_eq!(r.location.get("host"), Some(short_hostname().as_str()));
        assert!(!r.class_configured && r.update_location && r.initial_weight.is_none());
        conf.crush_location = "host=h2 rack=r1".into();
        conf.crush_device_class = "nvme".into();
        conf.crush_initial_weight = "0.5".into();
        conf.crush_update_on_start = false;
        let r = report(dir.path(), &conf).unwrap();
        assert_eq!(r.location.to_string(), "host=h2 rack=r1");
        assert_eq!((r.class.as_str(), r.class_configured), ("nvme", true));
        assert_eq!(r.initial_weight, Some(0x8000));
        assert!(!r.update_location);
    }
}
