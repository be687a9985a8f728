//! [`MonOptions`]: the monitor's behaviour, from the `[mon]` section of
//! the configuration (with the configuration database applied while it
//! runs, see `config`).

use std::time::Duration;

use cairn_map::FullRatios;

/// Monitor behaviour, from the `[mon]` section of the configuration.
#[derive(Clone, Debug)]
pub struct MonOptions {
    pub heartbeat_grace: Duration,
    /// Distinct `reporter_subtree_level` buckets whose OSDs must report a
    /// peer silent for it to be marked down.
    pub min_down_reporters: u32,
    /// CRUSH type counting failure reporters (`osd` or a bucket type).
    pub reporter_subtree_level: String,
    pub down_on_disconnect: bool,
    /// `None`: never mark down OSDs out automatically.
    pub down_out_interval: Option<Duration>,
    /// pg_temp requests within this window of the first are published in
    /// one epoch (zero: each at once).
    pub pg_temp_batch: Duration,
    pub pool_default_pg_num: u32,
    pub pool_default_size: u32,
    pub pool_default_min_size: u32,
    /// CRUSH bucket types of a new cluster, lowest first (above `osd`).
    pub crush_bucket_types: Vec<String>,
    /// Failure domain of a new cluster's default rule.
    pub crush_chooseleaf_type: String,
    /// Usage ratios at which an OSD is nearfull, backfillfull and full.
    pub full_ratios: FullRatios,
}

impl Default for MonOptions {
    fn default() -> Self {
        Self {
            heartbeat_grace: Duration::from_secs(6),
            min_down_reporters: 2,
            reporter_subtree_level: "host".into(),
            down_on_disconnect: true,
            down_out_interval: Some(Duration::from_secs(600)),
            pg_temp_batch: Duration::from_millis(20),
            pool_default_pg_num: 32,
            pool_default_size: 3,
            pool_default_min_size: 2,
            crush_bucket_types: cairn_map::crush::DEFAULT_BUCKET_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
            crush_chooseleaf_type: "host".into(),
            full_ratios: FullRatios::default(),
        }
    }
}
