//! `cairn bench store`: benchmark one object store directly (no network, no
//! OSD, no cluster), with raw `fio` numbers for a file on the same disk
//! beside it.
//!
//! The store is made in `DIR/store` (as `cairn osd mkfs` would make it, from
//! the default configuration, `--conf` if given, and `--set` overrides) and
//! driven through a [`cairn_bench::StoreVolume`]: the volume's bytes striped
//! over 4 MiB objects, every write one transaction per object piece, complete
//! when durable. The volume is written once sequentially (1 MiB writes, not
//! measured), so writes overwrite and reads hit real data, then each point
//! of the matrix (4 KiB, 64 KiB random and 1 MiB sequential, writes and
//! reads, at iodepth 1 and 32) runs with `cairn_bench::run`. The store's own
//! caches cannot be dropped, so read numbers include them.
//!
//! Then the same points run with raw `fio` on `DIR/fio.dat` (laid out first
//! with one sequential write pass), `direct=1`, io_uring, so the table shows
//! what the disk itself does; and, when the 4 KiB random write at iodepth 1
//! is selected, once more with an fdatasync after every write (`fio+sync`),
//! the baseline of the latency target. For a BlueStore the store's counters
//! (deferred vs direct writes, key-value commits, cache hits) follow.
//!
//! This module owns the run as a whole: DIR ([`Workspace`]), the runtime,
//! and the order of the steps. The pieces are in
//! - `plan`: the arguments, the matrix of points, and the checked [`Plan`];
//! - `store`: opening the store, the store points, BlueStore counters;
//! - `fio`: the raw fio points beside them;
//! - `report`: the table rows, ratios and the JSON document.

mod fio;
mod plan;
mod report;
mod store;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use cairn_bench::{fmt_bytes, fmt_duration};
use cairn_config::StoreKind;

use crate::{conf, Context};
use fio::{fio_points, FioStatus};
use plan::Plan;
pub use plan::StoreBenchArgs;
use report::{Document, Memory, Out, Ratios};
use store::{open_store, store_points};

const MIB: u64 = 1 << 20;
/// Block size of the sequential pass that fills the volume (and lays out
/// the fio file) before the first point.
const FILL_BS: u64 = MIB;
/// Writes that pass keeps in flight.
const FILL_IODEPTH: u32 = 16;
/// Where in DIR the store goes.
const STORE_SUBDIR: &str = "store";
/// Where in DIR fio's file goes.
const FIO_FILE: &str = "fio.dat";

const CACHE_NOTE: &str = "store reads include the store's own caches (they cannot be dropped); \
                          fio reads are O_DIRECT";

/// DIR, made ready for a run, and how to tidy it afterwards.
struct Workspace {
    dir: PathBuf,
    /// Whether this run made DIR (then it is removed too, if left empty).
    created: bool,
}

impl Workspace {
    fn prepare(dir: &Path, force: bool) -> Result<Workspace> {
        let created = match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => bail!("{} is not a directory", dir.display()),
            Ok(_) => {
                let mut entries = std::fs::read_dir(dir)
                    .with_context(|| format!("cannot read {}", dir.display()))?;
                if entries.next().is_some() && !force {
                    bail!(
                        "{} is not empty (use --force to run in it anyway)",
                        dir.display()
                    );
                }
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                true
            }
            Err(e) => return Err(e).with_context(|| format!("cannot access {}", dir.display())),
        };
        let ws = Workspace {
            dir: dir.to_path_buf(),
            created,
        };
        // With --force, what an earlier run left is replaced.
        ws.remove_ours()?;
        Ok(ws)
    }

    /// Remove DIR/store and DIR/fio.dat if they exist.
    fn remove_ours(&self) -> Result<()> {
        for name in [STORE_SUBDIR, FIO_FILE] {
            let path = self.dir.join(name);
            let removed = match path.symlink_metadata() {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            removed.with_context(|| format!("cannot remove {}", path.display()))?;
        }
        Ok(())
    }

    /// Remove what the run made: the store, the fio file, and DIR itself if
    /// the run made it and nothing else is in it.
    fn remove(&self) -> Result<()> {
        self.remove_ours()?;
        if self.created {
            let _ = std::fs::remove_dir(&self.dir);
        }
        Ok(())
    }
}

pub fn run(ctx: &Context, args: StoreBenchArgs) -> Result<()> {
    let plan = Plan::new(ctx, &args)?;
    let ws = Workspace::prepare(&plan.dir, args.force)?;
    conf::init_logging("warn");
    let result = crate::daemons::runtime(plan.threads).and_then(|rt| {
        let result = rt.block_on(async {
            tokio::select! {
                r = execute(&plan) => r,
                _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
            }
        });
        // Dropping the runtime drops every task, so the store is closed
        // before its files go.
        drop(rt);
        result
    });
    let tidy = if args.keep {
        if result.is_ok() && !plan.json {
            println!(
                "kept the store in {} and fio's file in {}",
                plan.store_dir().display(),
                plan.fio_file().display()
            );
        }
        Ok(())
    } else {
        ws.remove()
    };
    let doc = result?;
    tidy?;
    if doc.fio.state == "failed" {
        bail!(
            "fio failed: {}",
            doc.fio.detail.as_deref().unwrap_or("unknown error")
        );
    }
    Ok(())
}

/// The memory a BlueStore is told it may use: its cache, or the target
/// its autotuner holds the process to.
fn store_budget(plan: &Plan) -> Option<(&'static str, u64)> {
    let conf = &plan.osd_conf;
    match plan.kind {
        StoreKind::Bluestore if conf.bluestore_cache_autotune => {
            Some(("memory_target", conf.memory_target))
        }
        StoreKind::Bluestore => Some(("cache_size", conf.bluestore_cache_size)),
        _ => None,
    }
}

/// Run the store points, then the fio points, printing as they finish;
/// print the end (or the JSON document) and return it.
async fn execute(plan: &Plan) -> Result<Document> {
    let out = Out { json: plan.json };
    let opened = open_store(plan)?;
    let made = opened.made.clone();
    let place = match plan.kind {
        StoreKind::Memstore => "in memory".to_string(),
        _ => format!("in {}", plan.store_dir().display()),
    };
    out.line(format!(
        "cairn bench store: {} {place}, volume {} in {} objects, runtime {}, ramp {}, {} thread{}",
        plan.kind,
        fmt_bytes(plan.size),
        fmt_bytes(plan.object_size),
        fmt_duration(plan.runtime),
        fmt_duration(plan.ramp),
        plan.threads,
        if plan.threads == 1 { "" } else { "s" }
    ));
    out.line(format!("made {made}"));
    out.line(format!("note: {CACHE_NOTE}"));

    let (precondition, mut rows, perf) = store_points(plan, opened, &out).await?;
    let memory = Memory::measure(store_budget(plan));

    let mut fio = FioStatus {
        state: "disabled",
        version: None,
        detail: None,
        layout: None,
    };
    if plan.fio {
        fio = fio_points(plan, &out, &mut rows).await;
    }
    let ratios = Ratios::new(&rows);
    if fio.state == "ran" {
        out.line(ratios.text());
    }
    if let Some(perf) = &perf {
        out.line("bluestore counters over the store run (precondition included):");
        out.line(perf.text());
    }
    if let Some(memory) = &memory {
        out.line(memory.text());
    }
    let doc = Document {
        store: plan.kind.to_string(),
        made,
        dir: plan.dir.clone(),
        size: plan.size,
        object_size: plan.object_size,
        bluestore_block_size: plan.block_size,
        runtime_s: plan.runtime.as_secs(),
        ramp_s: plan.ramp.as_secs(),
        threads: plan.threads,
        set: plan.set.clone(),
        note: CACHE_NOTE,
        precondition,
        points: rows,
        fio,
        ratios,
        perf,
        memory,
    };
    if plan.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(doc)
}
