//! Images: thin-provisioned virtual disks stored as objects in a pool.
//!
//! | object                         | holds                                        |
//! |--------------------------------|----------------------------------------------|
//! | `rbd_directory`                | omap `name_<name>` → id, `id_<id>` → name    |
//! | `rbd_header.<id>`              | omap `size`, `object_size` (u64 LE), `name`  |
//! | `rbd_data.<id>.<object no:016x>` | bytes `[k·object_size, (k+1)·object_size)` |
//!
//! Data objects exist only where something was written; a missing object
//! or the part past an object's end reads as zeros. Nothing about an image
//! is kept on a client's disk.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use cairn_types::PoolId;
use cairn_volume::{check_range, Volume, VolumeError};
use cairn_wire::{ObjOp, OpError, OpOutput};
use futures::future::try_join_all;
use parking_lot::RwLock;
use serde::Serialize;

use crate::striper::{map_extents, Extent};
use crate::{ClientError, Cluster};

mod admin_op;
mod du;
pub mod lock;
pub mod watch;

pub use admin_op::{ImageStatus, ShrinkPolicy};
pub use du::ImageUsage;
use watch::Lease;

const DIRECTORY: &str = "rbd_directory";
pub const MIN_OBJECT_SIZE: u64 = 4 << 10;
pub const MAX_OBJECT_SIZE: u64 = 64 << 20;
/// Largest image: 1 PiB.
pub const MAX_IMAGE_SIZE: u64 = 1 << 50;
/// Objects removed concurrently by resize and remove.
const REMOVE_PARALLELISM: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageInfo {
    pub pool: String,
    pub name: String,
    pub id: String,
    pub size: u64,
    pub object_size: u64,
    /// `exclusive-lock`, or none.
    pub features: Vec<String>,
}

impl ImageInfo {
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.object_size)
    }
}

fn header_oid(id: &str) -> String {
    format!("rbd_header.{id}")
}

fn data_oid(id: &str, object_no: u64) -> String {
    format!("rbd_data.{id}.{object_no:016x}")
}

pub fn validate_image_name(name: &str) -> Result<(), ClientError> {
    let ok = !name.is_empty()
        && name.len() <= 96
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !ok {
        return Err(ClientError::Invalid(format!(
            "invalid image name '{name}': use 1-96 characters of A-Z a-z 0-9 _ . -"
        )));
    }
    Ok(())
}

pub fn validate_size(size: u64) -> Result<(), ClientError> {
    if size == 0 || size % 512 != 0 || size > MAX_IMAGE_SIZE {
        return Err(ClientError::Invalid(format!(
            "invalid size {size}: must be a non-zero multiple of 512 bytes, at most 1 PiB"
        )));
    }
    Ok(())
}

fn u64_value(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

fn omap_of(outputs: Vec<OpOutput>) -> Vec<(String, Bytes)> {
    match outputs.into_iter().next() {
        Some(OpOutput::Omap(entries)) => entries,
        _ => Vec::new(),
    }
}

/// An open image. Cheap to share; many operations may be in flight. It
/// holds a watch on its header for as long as it lives ([`watch`]).
pub struct Image {
    cluster: Arc<Cluster>,
    pool: PoolId,
    info: RwLock<ImageInfo>,
    header: String,
    lease: Lease,
    /// The image has the exclusive-lock feature and this handle has not
    /// taken the lock yet ([`lock`]).
    needs_lock: std::sync::atomic::AtomicBool,
    /// One lock acquisition at a time per handle.
    locking: tokio::sync::Mutex<()>,
    /// This handle counts as one of its client's holders of the lock.
    holds_lock: parking_lot::Mutex<bool>,
}

impl Image {
    pub async fn create(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
        size: u64,
        object_size: u64,
        features: Vec<String>,
    ) -> Result<ImageInfo, ClientError> {
        validate_image_name(name)?;
        validate_size(size)?;
        if !object_size.is_power_of_two()
            || !(MIN_OBJECT_SIZE..=MAX_OBJECT_SIZE).contains(&object_size)
        {
            return Err(ClientError::Invalid(format!(
                "invalid object size {object_size}: must be a power of two from 4K to 64M"
            )));
        }
        let pool = cluster.pool_id(pool_name)?;
        if Self::lookup_id(cluster, pool, name).await?.is_some() {
            return Err(ClientError::ImageExists(format!("{pool_name}/{name}")));
        }
        let id = format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let header = vec![
            ObjOp::Create { exclusive: true },
            ObjOp::OmapSet {
                entries: vec![
                    ("size".into(), Bytes::copy_from_slice(&size.to_le_bytes())),
                    (
                        "object_size".into(),
                        Bytes::copy_from_slice(&object_size.to_le_bytes()),
                    ),
                    ("name".into(), Bytes::copy_from_slice(name.as_bytes())),
                    (
                        lock::FEATURES_KEY.into(),
                        Bytes::from(features.join(",").into_bytes()),
                    ),
                ],
            },
        ];
        cluster.op(pool, &header_oid(&id), header).await?;
        // The directory insert is the commit point: it fails if the name exists.
        let entry = vec![ObjOp::OmapInsert {
            entries: vec![
                (
                    format!("name_{name}"),
                    Bytes::copy_from_slice(id.as_bytes()),
                ),
                (format!("id_{id}"), Bytes::copy_from_slice(name.as_bytes())),
            ],
        }];
        match cluster.op(pool, DIRECTORY, entry).await {
            Ok(_) => {}
            Err(ClientError::Op(OpError::Exists)) => {
                let _ = cluster
                    .op(pool, &header_oid(&id), vec![ObjOp::Remove])
                    .await;
                return Err(ClientError::ImageExists(format!("{pool_name}/{name}")));
            }
            Err(e) => return Err(e),
        }
        Ok(ImageInfo {
            pool: pool_name.into(),
            name: name.into(),
            id,
            size,
            object_size,
            features,
        })
    }

    async fn lookup_id(
        cluster: &Cluster,
        pool: PoolId,
        name: &str,
    ) -> Result<Option<String>, ClientError> {
        let key = format!("name_{name}");
        match cluster
            .op(pool, DIRECTORY, vec![ObjOp::OmapGet { keys: vec![key] }])
            .await
        {
            Ok(out) => Ok(omap_of(out)
                .into_iter()
                .next()
                .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())),
            Err(ClientError::Op(OpError::NotFound)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Names of the images in a pool, sorted.
    pub async fn list(cluster: &Arc<Cluster>, pool_name: &str) -> Result<Vec<String>, ClientError> {
        let pool = cluster.pool_id(pool_name)?;
        let mut names = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let ops = vec![ObjOp::OmapList {
                start_after: after.clone(),
                max: 1024,
            }];
            let entries = match cluster.op(pool, DIRECTORY, ops).await {
                Ok(out) => omap_of(out),
                Err(ClientError::Op(OpError::NotFound)) => Vec::new(),
                Err(e) => return Err(e),
            };
            let Some((last, _)) = entries.last() else {
                break;
            };
            after = Some(last.clone());
            names.extend(
                entries
                    .iter()
                    .filter_map(|(k, _)| k.strip_prefix("name_").map(String::from)),
            );
        }
        Ok(names)
    }

    pub async fn info(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<ImageInfo, ClientError> {
        let pool = cluster.pool_id(pool_name)?;
        let missing = || ClientError::NoSuchImage(format!("{pool_name}/{name}"));
        let id = Self::lookup_id(cluster, pool, name)
            .await?
            .ok_or_else(missing)?;
        let keys = vec![
            "size".to_string(),
            "object_size".to_string(),
            lock::FEATURES_KEY.to_string(),
        ];
        let out = match cluster
            .op(pool, &header_oid(&id), vec![ObjOp::OmapGet { keys }])
            .await
        {
            Ok(out) => omap_of(out),
            Err(ClientError::Op(OpError::NotFound)) => return Err(missing()),
            Err(e) => return Err(e),
        };
        let get = |key: &str| {
            out.iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| u64_value(v))
        };
        let (Some(size), Some(object_size)) = (get("size"), get("object_size")) else {
            return Err(ClientError::Protocol(format!(
                "image {pool_name}/{name}: corrupt header"
            )));
        };
        let features = match out.iter().find(|(k, _)| k == lock::FEATURES_KEY) {
            None => Vec::new(),
            Some((_, v)) => {
                let text = std::str::from_utf8(v).map_err(|_| {
                    ClientError::Protocol(format!("image {pool_name}/{name}: corrupt features"))
                })?;
                lock::parse_features(text)
                    .map_err(|e| ClientError::Protocol(format!("image {pool_name}/{name}: {e}")))?
            }
        };
        Ok(ImageInfo {
            pool: pool_name.into(),
            name: name.into(),
            id,
            size,
            object_size,
            features,
        })
    }

    /// Open for I/O: registers a watch on the header, renewed in the
    /// background until the image is closed or dropped.
    pub async fn open(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<Arc<Image>, ClientError> {
        let info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let header = header_oid(&info.id);
        let timeout = cluster.options().watch_timeout;
        let lease = match Lease::register(cluster, pool, &header, name, timeout).await {
            Ok(lease) => lease,
            Err(ClientError::Op(OpError::Mismatch(_))) => {
                return Err(
                    admin_op::why_not_watchable(cluster, pool, pool_name, name, &header).await,
                )
            }
            Err(e) => return Err(e),
        };
        // The size may have changed between the first look and the watch.
        let info = match Self::info(cluster, pool_name, name).await {
            Ok(info) => info,
            Err(e) => {
                // No handle will renew it: drop the watch rather than leave
                // it to block `image rm` until it lapses.
                let _ = unwatch(cluster, pool, &header, &lease).await;
                return Err(e);
            }
        };
        let locked = info.features.iter().any(|f| f == lock::EXCLUSIVE_LOCK);
        let image = Arc::new(Image {
            cluster: cluster.clone(),
            pool,
            info: RwLock::new(info),
            header,
            lease,
            needs_lock: std::sync::atomic::AtomicBool::new(locked),
            locking: tokio::sync::Mutex::new(()),
            holds_lock: parking_lot::Mutex::new(false),
        });
        tokio::spawn(keep_watch(Arc::downgrade(&image), timeout / 3));
        Ok(image)
    }

    /// Stop I/O and drop the watch. Later I/O on this handle fails.
    pub async fn close(&self) -> Result<(), ClientError> {
        if self.lease.is_lost() {
            return Ok(());
        }
        self.lease.lose("the image was closed".into());
        if let Some(mine) = self.let_go() {
            lock::give_back(&self.cluster, self.pool, &self.header, mine).await?;
        }
        unwatch(&self.cluster, self.pool, &self.header, &self.lease).await
    }

    /// Re-read the size from the header (another client may have grown
    /// the image).
    async fn refresh_size(&self) -> Result<(), ClientError> {
        let keys = vec!["size".to_string()];
        let out = self
            .cluster
            .op(self.pool, &self.header, vec![ObjOp::OmapGet { keys }])
            .await?;
        let Some(size) = omap_of(out).first().and_then(|(_, v)| u64_value(v)) else {
            return Err(ClientError::Protocol(format!("{}: no size", self.header)));
        };
        let mut info = self.info.write();
        if info.size != size {
            tracing::info!(
                "image {}/{}: size {} -> {size}",
                info.pool,
                info.name,
                info.size
            );
            info.size = size;
        }
        Ok(())
    }

    pub fn info_now(&self) -> ImageInfo {
        self.info.read().clone()
    }

    fn data_oid(&self, object_no: u64) -> String {
        data_oid(&self.info.read().id, object_no)
    }

    fn object_size(&self) -> u64 {
        self.info.read().object_size
    }

    async fn read_extent(&self, e: Extent) -> Result<Bytes, ClientError> {
        let ops = vec![ObjOp::Read {
            offset: e.offset,
            len: e.len,
        }];
        match self
            .cluster
            .op(self.pool, &self.data_oid(e.object_no), ops)
            .await
        {
            Ok(out) => match out.into_iter().next() {
                Some(OpOutput::Data(data)) if data.len() as u64 == e.len => Ok(data),
                Some(OpOutput::Data(data)) => {
                    let mut full = BytesMut::with_capacity(e.len as usize);
                    full.extend_from_slice(&data[..data.len().min(e.len as usize)]);
                    full.resize(e.len as usize, 0);
                    Ok(full.freeze())
                }
                _ => Err(ClientError::Protocol("read returned no data".into())),
            },
            Err(ClientError::Op(OpError::NotFound)) => Ok(Bytes::from(vec![0; e.len as usize])),
            Err(e) => Err(e),
        }
    }

    async fn zero_extent(&self, e: Extent) -> Result<(), ClientError> {
        let oid = self.data_oid(e.object_no);
        if e.is_whole_object(self.object_size()) {
            return match self.cluster.op(self.pool, &oid, vec![ObjOp::Remove]).await {
                Ok(_) | Err(ClientError::Op(OpError::NotFound)) => Ok(()),
                Err(e) => Err(e),
            };
        }
        let ops = vec![ObjOp::Zero {
            offset: e.offset,
            len: e.len,
        }];
        self.cluster.op(self.pool, &oid, ops).await.map(|_| ())
    }

    async fn zero_range(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.lease.hold().await.map_err(VolumeError::Io)?;
        check_range(offset, len, self.size())?;
        self.ensure_lock().await.map_err(|e| self.fail(e))?;
        let extents = map_extents(offset, len, self.object_size());
        try_join_all(extents.into_iter().map(|e| self.zero_extent(e)))
            .await
            .map_err(|e| self.fail(e))?;
        Ok(())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let release = self.let_go();
        if self.lease.is_lost() && release.is_none() {
            return;
        }
        // Best effort: a watch not dropped here expires after its timeout,
        // and a lock left behind is taken over (with fencing) after that.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (cluster, pool, header) = (self.cluster.clone(), self.pool, self.header.clone());
            let watch =
                (!self.lease.is_lost()).then(|| (self.lease.key.clone(), self.lease.value()));
            rt.spawn(async move {
                if let Some(mine) = release {
                    let _ = lock::give_back(&cluster, pool, &header, mine).await;
                }
                if let Some((key, value)) = watch {
                    let _ = watch::drop_watch(&cluster, pool, &header, key, value).await;
                }
            });
        }
    }
}

/// Renew `image`'s watch every `interval` while it lives.
async fn keep_watch(image: std::sync::Weak<Image>, interval: std::time::Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(image) = image.upgrade() else {
            return;
        };
        if image.lease.is_lost() {
            return;
        }
        match image
            .lease
            .renew(&image.cluster, image.pool, &image.header)
            .await
        {
            Ok(true) => {
                if let Err(e) = image.refresh_size().await {
                    tracing::warn!("{}: cannot re-read the size: {e}", image.header);
                }
            }
            Ok(false) => {
                tracing::error!(
                    "{}: watch lost; every further I/O on this image fails",
                    image.header
                );
                return;
            }
            Err(e) => tracing::warn!("{}: renewing the watch failed: {e}; retrying", image.header),
        }
    }
}

async fn unwatch(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    lease: &Lease,
) -> Result<(), ClientError> {
    watch::drop_watch(cluster, pool, header, lease.key.clone(), lease.value()).await
}

async fn remove_objects(
    cluster: &Arc<Cluster>,
    pool: PoolId,
    id: &str,
    range: std::ops::Range<u64>,
) -> Result<(), ClientError> {
    let objects: Vec<u64> = range.collect();
    for chunk in objects.chunks(REMOVE_PARALLELISM) {
        try_join_all(chunk.iter().map(|&no| async move {
            match cluster
                .op(pool, &data_oid(id, no), vec![ObjOp::Remove])
                .await
            {
                Ok(_) | Err(ClientError::Op(OpError::NotFound)) => Ok(()),
                Err(e) => Err(e),
            }
        }))
        .await?;
    }
    Ok(())
}

impl Image {
    /// A failed op as the volume's error; a fenced client loses the image.
    fn fail(&self, e: ClientError) -> VolumeError {
        if matches!(e, ClientError::Op(OpError::Blocklisted)) {
            self.lease.lose(format!(
                "{}: this client was fenced (blocklisted): another writer took the image's \
                 exclusive lock",
                self.header
            ));
        }
        volume_error(e)
    }
}

fn volume_error(e: ClientError) -> VolumeError {
    match e {
        ClientError::Op(OpError::NoSpace) => VolumeError::NoSpace,
        ClientError::Op(OpError::Invalid(m)) | ClientError::Invalid(m) => VolumeError::Invalid(m),
        other => VolumeError::Io(other.to_string()),
    }
}

impl Volume for Image {
    fn size(&self) -> u64 {
        self.info.read().size
    }

    async fn read(&self, offset: u64, len: u64) -> Result<Bytes, VolumeError> {
        self.lease.hold().await.map_err(VolumeError::Io)?;
        check_range(offset, len, self.size())?;
        let extents = map_extents(offset, len, self.object_size());
        if extents.len() == 1 {
            return self.read_extent(extents[0]).await.map_err(|e| self.fail(e));
        }
        let parts = try_join_all(extents.into_iter().map(|e| self.read_extent(e)))
            .await
            .map_err(|e| self.fail(e))?;
        let mut out = BytesMut::with_capacity(len as usize);
        for part in parts {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    async fn write(&self, offset: u64, data: Bytes) -> Result<(), VolumeError> {
        self.lease.hold().await.map_err(VolumeError::Io)?;
        check_range(offset, data.len() as u64, self.size())?;
        self.ensure_lock().await.map_err(|e| self.fail(e))?;
        let extents = map_extents(offset, data.len() as u64, self.object_size());
        try_join_all(extents.into_iter().map(|e| {
            let piece = data.slice(e.buf_offset as usize..(e.buf_offset + e.len) as usize);
            let ops = vec![ObjOp::Write {
                offset: e.offset,
                data: piece,
            }];
            let oid = self.data_oid(e.object_no);
            async move { self.cluster.op(self.pool, &oid, ops).await }
        }))
        .await
        .map_err(|e| self.fail(e))?;
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.zero_range(offset, len).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.zero_range(offset, len).await
    }

    /// Every completed write is already durable on all replicas.
    async fn flush(&self) -> Result<(), VolumeError> {
        Ok(())
    }
}
