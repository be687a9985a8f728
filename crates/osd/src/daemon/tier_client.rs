//! The OSD's own client of the cluster: how a cache pool's primaries reach
//! the base pool (proxied ops, promotions, flushes). Connected to the
//! monitor on first use; ops in flight are bounded.

use std::sync::Arc;

use cairn_client::{ClientError, ClientOptions, Cluster};
use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError, OpOutput};
use tokio::sync::{OnceCell, Semaphore};

/// Base-pool ops in flight from one OSD, at most; more wait for a slot.
pub const TIER_OPS_MAX: usize = 256;

pub(crate) struct TierClient {
    mon_addr: String,
    cluster: OnceCell<Arc<Cluster>>,
    slots: Semaphore,
}

impl TierClient {
    pub fn new(mon_addr: String) -> Self {
        TierClient {
            mon_addr,
            cluster: OnceCell::new(),
            slots: Semaphore::new(TIER_OPS_MAX),
        }
    }

    async fn cluster(&self) -> Result<Arc<Cluster>, ClientError> {
        self.cluster
            .get_or_try_init(|| {
                Cluster::connect(ClientOptions {
                    mon_addr: self.mon_addr.clone(),
                    // A base pool that cannot serve holds the op, as a disk would.
                    op_timeout: None,
                    op_complaint_time: Some(std::time::Duration::from_secs(30)),
                    watch_timeout: std::time::Duration::from_secs(30),
                    command_timeout: std::time::Duration::from_secs(30),
                    reconfigure: None,
                })
            })
            .await
            .cloned()
    }

    /// Run `ops` on `oid` in base pool `pool`, ignoring its overlay.
    pub async fn op(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
        reqid: Option<cairn_types::ReqId>,
    ) -> Result<Vec<OpOutput>, OpError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| OpError::Io("the OSD is stopping".into()))?;
        let cluster = self
            .cluster()
            .await
            .map_err(|e| OpError::Io(format!("cannot reach the base pool: {e}")))?;
        let done = match reqid {
            Some(reqid) => cluster.op_on_behalf(pool, oid, ops, reqid).await,
            None => cluster.op_ignoring_overlay(pool, oid, ops).await,
        };
        match done {
            Ok(out) => Ok(out),
            Err(ClientError::Op(e)) => Err(e),
            Err(e) => Err(OpError::Io(format!("base pool: {e}"))),
        }
    }
}
