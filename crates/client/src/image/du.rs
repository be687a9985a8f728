//! `image du`: how much of an image is provisioned and how much is used.
//!
//! Used is the sum of its data objects' sizes (one copy): each object is
//! asked for its size, since Cairn keeps no object map. An object exists
//! only where something was written, and its size is the end of the last
//! write in it, so a zeroed or discarded range inside it still counts;
//! what the cluster stores is this times the pool's size.

use std::sync::Arc;

use cairn_wire::{ObjOp, OpError, OpOutput};
use futures::future::try_join_all;
use serde::Serialize;

use super::{data_oid, Image, REMOVE_PARALLELISM};
use crate::{ClientError, Cluster};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageUsage {
    pub pool: String,
    pub name: String,
    /// The image's size.
    pub provisioned_bytes: u64,
    /// Bytes in its data objects (one copy).
    pub used_bytes: u64,
    /// Data objects that exist, of `objects_max`.
    pub objects: u64,
    pub objects_max: u64,
}

impl Image {
    /// Provisioned and used bytes of `pool_name/name`.
    pub async fn du(
        cluster: &Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<ImageUsage, ClientError> {
        let info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let numbers: Vec<u64> = (0..info.objects()).collect();
        let id = info.id.as_str();
        let (mut used, mut objects) = (0u64, 0u64);
        for chunk in numbers.chunks(REMOVE_PARALLELISM) {
            let sizes = try_join_all(chunk.iter().map(|&no| async move {
                match cluster.op(pool, &data_oid(id, no), vec![ObjOp::Stat]).await {
                    Ok(out) => match out.first() {
                        Some(OpOutput::Stat { size }) => Ok(Some(*size)),
                        other => Err(ClientError::Protocol(format!(
                            "stat of {} answered {other:?}",
                            data_oid(id, no)
                        ))),
                    },
                    Err(ClientError::Op(OpError::NotFound)) => Ok(None),
                    Err(e) => Err(e),
                }
            }))
            .await?;
            for size in sizes.into_iter().flatten() {
                objects += 1;
                used += size.min(info.object_size);
            }
        }
        Ok(ImageUsage {
            pool: pool_name.to_string(),
            name: name.to_string(),
            provisioned_bytes: info.size,
            used_bytes: used,
            objects,
            objects_max: info.objects(),
        })
    }
}
