//! Object data files: where each object's bytes live, the cache of open file
//! handles, and the lock stripes that keep reads consistent with applies.
//!
//! Layout: `DIR/objects/<pg>/<escaped name>`, one regular file per object
//! that has had data written; a missing file reads as zeros. A file's length
//! always equals the object's size in the metadata once a transaction has
//! been applied (replay restores it after a crash).
//!
//! Locking: objects hash onto [`STRIPES`] read-write locks. The committer holds
//! the write locks of every stripe a transaction touches while it applies that
//! transaction; a reader holds one stripe's read lock while it looks up the
//! size and reads the file. So a read sees a transaction on its object wholly
//! or not at all, and no lock is shared by unrelated objects.
//!
//! Fault model: any I/O error here is returned to the caller; the committer
//! turns apply errors into the store's failed state.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use crate::{Collection, ObjectId};

/// Number of lock stripes (and file-handle cache shards).
pub(super) const STRIPES: usize = 64;
/// Bounds on the number of open object files kept (spread over the stripes).
const MIN_OPEN_FILES: usize = 256;
const MAX_OPEN_FILES: usize = 16384;
/// Escaped names longer than this are shortened and suffixed with a hash.
const MAX_FILE_NAME: usize = 200;

/// Escape an object name into a safe file name: `[A-Za-z0-9_-]` and
/// non-leading `.` stay, every other byte becomes `%XX`. Over-long results
/// keep a prefix and end in `~` plus a 128-bit hash of the name (`~` never
/// appears otherwise).
pub(super) fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_FILE_NAME {
        let mut cut = MAX_FILE_NAME - 40;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(&format!("~{:016x}{:016x}", fnv64(name, 0), fnv64(name, 1)));
    }
    out
}

fn fnv64(text: &str, seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in text.bytes().chain(seed.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The directory name of a collection.
pub(super) fn coll_dir_name(coll: Collection) -> String {
    format!("{}.{:x}", coll.pool, coll.seed)
}

fn stripe_of(oid: &ObjectId) -> usize {
    // Fixed keys: stripes only need to spread, not resist attacks.
    let mut h = std::hash::DefaultHasher::new();
    oid.hash(&mut h);
    (h.finish() % STRIPES as u64) as usize
}

struct Stripe {
    lock: RwLock<()>,
    files: Mutex<HashMap<ObjectId, Arc<File>>>,
}

/// The object files of a store.
pub(super) struct Objects {
    root: PathBuf,
    stripes: Box<[Stripe]>,
    handles_per_stripe: usize,
}

/// Open object files to keep: a quarter of the process's descriptor limit,
/// within [`MIN_OPEN_FILES`, `MAX_OPEN_FILES`].
fn open_file_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / 4).clamp(MIN_OPEN_FILES, MAX_OPEN_FILES)
}

/// Write locks on a set of stripes, held while a transaction is applied.
pub(super) struct StripeGuard<'a> {
    _guards: Vec<RwLockWriteGuard<'a, ()>>,
}

impl Objects {
    pub fn new(root: PathBuf) -> Self {
        let stripes = (0..STRIPES)
            .map(|_| Stripe {
                lock: RwLock::new(()),
                files: Mutex::new(HashMap::new()),
            })
            .collect();
        Self {
            root,
            stripes,
            handles_per_stripe: (open_file_budget() / STRIPES).max(1),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn coll_path(&self, coll: Collection) -> PathBuf {
        self.root.join(coll_dir_name(coll))
    }

    pub fn path(&self, oid: &ObjectId) -> PathBuf {
        let mut p = self.coll_path(oid.coll);
        p.push(escape_name(&oid.name));
        p
    }

    /// Lock the stripes of `oids` for writing (all stripes if `all`), in
    /// ascending order so that lockers never deadlock.
    pub fn lock<'o>(&self, oids: impl Iterator<Item = &'o ObjectId>, all: bool) -> StripeGuard<'_> {
        let mut wanted = [false; STRIPES];
        if all {
            wanted = [true; STRIPES];
        } else {
            for oid in oids {
                wanted[stripe_of(oid)] = true;
            }
        }
        let guards = wanted
            .iter()
            .enumerate()
            .filter(|(_, w)| **w)
            .map(|(i, _)| self.stripes[i].lock.write())
            .collect();
        StripeGuard { _guards: guards }
    }

    /// Run `f` with the object's stripe read-locked.
    pub fn with_read_lock<T>(&self, oid: &ObjectId, f: impl FnOnce() -> T) -> T {
        let _guard = self.stripes[stripe_of(oid)].lock.read();
        f()
    }

    /// The object's open file; `None` if it has no file and `create` is false.
    fn file(&self, oid: &ObjectId, create: bool) -> io::Result<Option<Arc<File>>> {
        let stripe = &self.stripes[stripe_of(oid)];
        if let Some(f) = stripe.files.lock().get(oid) {
            return Ok(Some(f.clone()));
        }
        let path = self.path(oid);
        let open = |path: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .open(path)
        };
        let file = match open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                std::fs::create_dir_all(self.coll_path(oid.coll))?;
                open(&path)?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let file = Arc::new(file);
        let mut files = stripe.files.lock();
        if files.len() >= self.handles_per_stripe {
            if let Some(victim) = files.keys().next().cloned() {
                files.remove(&victim);
            }
        }
        files.insert(oid.clone(), file.clone());
        Ok(Some(file))
    }

    fn forget(&self, oid: &ObjectId) {
        self.stripes[stripe_of(oid)].files.lock().remove(oid);
    }

    /// Read `len` bytes at `offset` (already clipped to the object's size);
    /// bytes past the file's end or in holes are zeros. Call with the
    /// object's stripe read-locked.
    pub fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        let Some(file) = self.file(oid, false)? else {
            return Ok(buf);
        };
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(buf)
    }

    pub fn write(&self, oid: &ObjectId, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file(oid, true)?
            .ok_or_else(|| io::Error::other("object file vanished"))?
            .write_all_at(data, offset)
    }

    /// Zero a range inside the file: punch a hole, or write zeros where the
    /// filesystem cannot punch.
    pub fn punch(&self, oid: &ObjectId, offset: u64, len: u64) -> io::Result<()> {
        let Some(file) = self.file(oid, false)? else {
            return Ok(()); // no file: the range already reads as zeros
        };
        #[cfg(target_os = "linux")]
        {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: fallocate on a valid open fd; no memory is passed.
            let rc =
                unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as libc::off_t, len as _) };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(err);
            }
        }
        let zeros = vec![0u8; len.min(1 << 20) as usize];
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], pos)?;
            pos += n as u64;
        }
        Ok(())
    }

    pub fn set_len(&self, oid: &ObjectId, size: u64) -> io::Result<()> {
        match self.file(oid, size > 0)? {
            Some(file) => file.set_len(size),
            None => Ok(()),
        }
    }

    /// Make the file's length `size`, if the file exists (replay fix-up).
    pub fn fix_len(&self, oid: &ObjectId, size: u64) -> io::Result<()> {
        if let Some(file) = self.file(oid, false)? {
            if file.metadata()?.len() != size {
                file.set_len(size)?;
            }
        }
        Ok(())
    }

    pub fn remove(&self, oid: &ObjectId) -> io::Result<()> {
        self.forget(oid);
        match std::fs::remove_file(self.path(oid)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Remove a collection's directory. Call with every stripe write-locked.
    pub fn remove_collection(&self, coll: Collection) -> io::Result<()> {
        for stripe in self.stripes.iter() {
            stripe.files.lock().retain(|oid, _| oid.coll != coll);
        }
        match std::fs::remove_dir_all(self.coll_path(coll)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// fdatasync the object's file if it exists. Safe to call while the
    /// committer applies transactions: the handle is looked up (and cached)
    /// under the stripe's read lock, as a read would, so a handle of a file
    /// being removed is never cached; the sync itself runs without the lock
    /// (syncing a file removed meanwhile is harmless).
    pub fn sync(&self, oid: &ObjectId) -> io::Result<()> {
        let file = self.with_read_lock(oid, || self.file(oid, false))?;
        match file {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }
}

/// fsync a directory if it exists.
pub(super) fn sync_dir(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(dir) => dir.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_names_are_safe_distinct_and_bounded() {
        let names = [
            "a",
            ".",
            "..",
            "a/b",
            "a%2Fb",
            "rbd_data.1.0000",
            ".hidden",
            "ü",
            "a~b",
        ];
        let escaped: Vec<String> = names.iter().map(|n| escape_name(n)).collect();
        for e in &escaped {
            assert!(
                !e.contains('/') && !e.starts_with('.') && !e.is_empty(),
                "{e}"
            );
        }
        let mut uniq = escaped.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), names.len());
        assert_eq!(escape_name("rbd_data.1.0000"), "rbd_data.1.0000");
        let long_a = "x".repeat(1000);
        let long_b = format!("{}y", "x".repeat(999));
        assert!(escape_name(&long_a).len() <= MAX_FILE_NAME);
        assert_ne!(escape_name(&long_a), escape_name(&long_b));
        let long_utf8 = "é".repeat(300);
        assert!(escape_name(&long_utf8).len() <= MAX_FILE_NAME);
    }
}
