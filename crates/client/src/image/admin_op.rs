//! Resize, removal and status: the admin operations that must not pull an
//! image away from under the clients that have it open.
//!
//! Removing and shrinking first record `admin_op` on the header (so no new
//! watch registers), then list the watches: any live one refuses the
//! operation and clears the record; an expired one is evicted only with
//! `force`. Only then are objects removed. A shrink trims the objects past
//! the new end *before* it writes the new size, so the size never claims
//! less than what the cluster holds: a grow after an interrupted shrink
//! cannot bring old data back. An interrupted operation leaves `admin_op`
//! behind, which keeps the image from being opened until it is run again.

use std::sync::Arc;

use bytes::Bytes;
use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError};
use serde::Serialize;

use super::watch::{self, AdminOp, Watcher, ADMIN_OP_KEY};
use super::{
    data_oid, header_oid, omap_of, remove_objects, validate_size, Image, ImageInfo, DIRECTORY,
};
use crate::{ClientError, Cluster};

/// What a resize may do to data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkPolicy {
    /// Shrinking discards data: it must be asked for (rbd's `--allow-shrink`).
    pub allow_shrink: bool,
    /// Evict watches whose holder is dead (their lease ran out).
    pub force: bool,
}

/// `cairn image status`: who has the image open, and any admin operation.
#[derive(Clone, Debug, Serialize)]
pub struct ImageStatus {
    pub image: ImageInfo,
    pub watchers: Vec<Watcher>,
    pub admin_op: Option<AdminOp>,
}

fn guard_name(name: &str) -> ObjOp {
    ObjOp::OmapCmp {
        key: "name".into(),
        value: Some(Bytes::copy_from_slice(name.as_bytes())),
    }
}

async fn read_admin_op(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
) -> Result<Option<AdminOp>, ClientError> {
    let ops = vec![ObjOp::OmapGet {
        keys: vec![ADMIN_OP_KEY.into()],
    }];
    let out = match cluster.op(pool, header, ops).await {
        Ok(out) => omap_of(out),
        Err(ClientError::Op(OpError::NotFound)) => return Ok(None),
        Err(e) => return Err(e),
    };
    match out.first() {
        None => Ok(None),
        Some((_, raw)) => serde_json::from_slice(raw).map(Some).map_err(|e| {
            ClientError::Protocol(format!("{header}: undecodable {ADMIN_OP_KEY}: {e}"))
        }),
    }
}

/// Why a watch could not register on `header` (its guard failed).
pub(super) async fn why_not_watchable(
    cluster: &Arc<Cluster>,
    pool: PoolId,
    pool_name: &str,
    name: &str,
    header: &str,
) -> ClientError {
    match read_admin_op(cluster, pool, header).await {
        Ok(Some(op)) => ClientError::Busy(format!(
            "image {pool_name}/{name}: a {} by {} is under way (or was interrupted: run it again)",
            op.op, op.by
        )),
        Ok(None) => ClientError::NoSuchImage(format!("{pool_name}/{name}")),
        Err(e) => e,
    }
}

/// Record `op` on the header, then make sure no live watch holds the
/// image. On refusal the record is cleared again.
async fn begin(
    cluster: &Arc<Cluster>,
    pool: PoolId,
    info: &ImageInfo,
    op: &str,
    force: bool,
) -> Result<(), ClientError> {
    let header = header_oid(&info.id);
    let record = AdminOp {
        op: op.into(),
        by: watch::describe_process(),
        started_ms: watch::unix_ms(),
    };
    let value = Bytes::from(serde_json::to_vec(&record).unwrap_or_default());
    let set = vec![
        guard_name(&info.name),
        ObjOp::OmapSet {
            entries: vec![(ADMIN_OP_KEY.into(), value)],
        },
    ];
    match cluster.op(pool, &header, set).await {
        Ok(_) => {}
        Err(ClientError::Op(OpError::Mismatch(_) | OpError::NotFound)) => {
            return Err(ClientError::NoSuchImage(format!(
                "{}/{}",
                info.pool, info.name
            )))
        }
        Err(e) => return Err(e),
    }
    let refusal = match check_watchers(cluster, pool, &header, force).await {
        Ok(None) => return Ok(()),
        Ok(Some(why)) => ClientError::Busy(format!(
            "cannot {op} image {}/{}: {why}",
            info.pool, info.name
        )),
        Err(e) => e,
    };
    end(cluster, pool, info).await?;
    Err(refusal)
}

/// `None` if no live watch remains (expired ones evicted with `force`),
/// else why not.
async fn check_watchers(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    force: bool,
) -> Result<Option<String>, ClientError> {
    let watchers = watch::list(cluster, pool, header).await?;
    let describe = |w: &Watcher| {
        format!(
            "{} ({}, renewed {:.1} s ago, timeout {:.1} s)",
            w.entry.client,
            w.entry.desc,
            w.age_ms as f64 / 1000.0,
            w.entry.timeout_ms as f64 / 1000.0
        )
    };
    if let Some(live) = watchers.iter().find(|w| !w.expired) {
        return Ok(Some(format!(
            "it is open by {}; close it there first",
            describe(live)
        )));
    }
    if let Some(dead) = watchers.first() {
        if !force {
            return Ok(Some(format!(
                "it is watched by {}, whose lease ran out: if that client is dead, \
                 run again with --force",
                describe(dead)
            )));
        }
    }
    for w in &watchers {
        if !watch::evict(cluster, pool, header, w).await? {
            return Ok(Some(format!(
                "{} renewed its watch just now: it is alive",
                w.entry.client
            )));
        }
        tracing::warn!("evicted the expired watch of {}", describe(w));
    }
    Ok(None)
}

/// Clear the admin-op record (the header still exists).
async fn end(cluster: &Cluster, pool: PoolId, info: &ImageInfo) -> Result<(), ClientError> {
    let ops = vec![
        guard_name(&info.name),
        ObjOp::OmapRm {
            keys: vec![ADMIN_OP_KEY.into()],
        },
    ];
    match cluster.op(pool, &header_oid(&info.id), ops).await {
        Ok(_) | Err(ClientError::Op(OpError::Mismatch(_) | OpError::NotFound)) => Ok(()),
        Err(e) => Err(e),
    }
}

impl Image {
    /// Grow or shrink. A shrink needs `policy.allow_shrink`, is refused
    /// while the image is open anywhere, and removes or trims the objects
    /// past the new end. A grow exposes zeros and reaches the clients that
    /// have the image open at their next watch renewal.
    pub async fn resize(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
        new_size: u64,
        policy: ShrinkPolicy,
    ) -> Result<ImageInfo, ClientError> {
        validate_size(new_size)?;
        let mut info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let shrink = new_size < info.size;
        if shrink && !policy.allow_shrink {
            return Err(ClientError::Invalid(format!(
                "shrinking {pool_name}/{name} from {} to {new_size} bytes discards the data past \
                 the new end: add --allow-shrink",
                info.size
            )));
        }
        if shrink {
            begin(cluster, pool, &info, "shrink", policy.force).await?;
            let first_gone = new_size.div_ceil(info.object_size);
            remove_objects(cluster, pool, &info.id, first_gone..info.objects()).await?;
            let tail = new_size % info.object_size;
            if tail != 0 {
                let oid = data_oid(&info.id, new_size / info.object_size);
                let zero = ObjOp::Zero {
                    offset: tail,
                    len: info.object_size - tail,
                };
                match cluster.op(pool, &oid, vec![zero]).await {
                    Ok(_) | Err(ClientError::Op(OpError::NotFound)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let entries = vec![(
            "size".into(),
            Bytes::copy_from_slice(&new_size.to_le_bytes()),
        )];
        let ops = vec![guard_name(name), ObjOp::OmapSet { entries }];
        match cluster.op(pool, &header_oid(&info.id), ops).await {
            Ok(_) => {}
            Err(ClientError::Op(OpError::Mismatch(_))) => {
                return Err(ClientError::NoSuchImage(format!("{pool_name}/{name}")))
            }
            Err(e) => return Err(e),
        }
        if shrink {
            end(cluster, pool, &info).await?;
        }
        info.size = new_size;
        Ok(info)
    }

    /// Remove an image and its data; refused while it is open anywhere
    /// (`force` evicts watches whose holder is dead).
    pub async fn remove(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
        force: bool,
    ) -> Result<(), ClientError> {
        let info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        begin(cluster, pool, &info, "remove", force).await?;
        remove_objects(cluster, pool, &info.id, 0..info.objects()).await?;
        match cluster
            .op(pool, &header_oid(&info.id), vec![ObjOp::Remove])
            .await
        {
            Ok(_) | Err(ClientError::Op(OpError::NotFound)) => {}
            Err(e) => return Err(e),
        }
        let keys = vec![format!("name_{name}"), format!("id_{}", info.id)];
        cluster
            .op(pool, DIRECTORY, vec![ObjOp::OmapRm { keys }])
            .await?;
        Ok(())
    }

    /// Who has the image open, and any admin operation on it.
    pub async fn status(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<ImageStatus, ClientError> {
        let image = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let header = header_oid(&image.id);
        let watchers = watch::list(cluster, pool, &header).await?;
        let admin_op = read_admin_op(cluster, pool, &header).await?;
        Ok(ImageStatus {
            image,
            watchers,
            admin_op,
        })
    }
}
