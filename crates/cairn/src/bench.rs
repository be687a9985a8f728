//! `cairn bench`: drive an image through the client library and print
//! IOPS, bandwidth and latency percentiles; `cairn bench store` benchmarks
//! one object store directly (see `bench_store`).

use std::time::Duration;

use anyhow::{Context as _, Result};
use cairn_bench::{BenchSpec, RwMode};
use cairn_client::{Cluster, Image};
use clap::{Args, Subcommand};

use crate::{admin, bench_cpu, bench_matrix, bench_store, conf, Context};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: Option<BenchCmd>,
    /// The image to drive, as POOL/NAME.
    #[arg(long, required = true)]
    image: Option<String>,
    /// read | write | randread | randwrite | randrw.
    #[arg(long, default_value = "randwrite")]
    rw: String,
    /// Percentage of reads for randrw.
    #[arg(long, default_value_t = 70)]
    rwmixread: u32,
    /// Block size (e.g. 4k, 64k, 1M).
    #[arg(long, default_value = "4k")]
    bs: String,
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    #[arg(long, default_value_t = 1)]
    numjobs: u32,
    /// Measured seconds.
    #[arg(long, default_value_t = 10)]
    runtime: u64,
    /// Seconds run before measuring starts.
    #[arg(long, default_value_t = 2)]
    ramp: u64,
    /// Write the whole region sequentially first, so thin provisioning does not flatter reads.
    #[arg(long)]
    precondition: bool,
    /// Limit the tested region to the first SIZE bytes of the image.
    #[arg(long)]
    size: Option<String>,
    /// Worker threads of the client runtime.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// With --json: add each direction's latency distribution as
    /// `lat_bins` ([µs, count] per histogram bucket), so several runs can
    /// be pooled into exact percentiles.
    #[arg(long)]
    lat_bins: bool,
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Benchmark one object store directly (no network, no OSD), beside raw
    /// fio on a file of the same disk.
    Store(bench_store::StoreBenchArgs),
    /// Run a matrix of workloads from a spec against a fresh local cluster
    /// and write results.json, results.csv, report.md and charts.
    Matrix(bench_matrix::MatrixArgs),
    /// Compare two matrix runs point by point (% change of IOPS, mean and
    /// p99.99 latency).
    Compare(bench_matrix::CompareArgs),
}

pub fn run(ctx: &Context, args: BenchArgs) -> Result<()> {
    match args.cmd {
        Some(BenchCmd::Store(store_args)) => return bench_store::run(ctx, store_args),
        Some(BenchCmd::Matrix(matrix_args)) => return bench_matrix::run(matrix_args),
        Some(BenchCmd::Compare(compare_args)) => return bench_matrix::compare(compare_args),
        None => {}
    }
    let image = args
        .image
        .context("missing --image POOL/NAME (or a subcommand: store, matrix, compare)")?;
    // Slow ops (`client.op_complaint_time_ms`) are reported on stderr.
    conf::init_stderr_logging("warn");
    let (pool, name) = admin::split_image(&image)?;
    let rw: RwMode = args.rw.parse()?;
    let spec = BenchSpec {
        rw,
        rwmixread: args.rwmixread,
        bs: admin::size_arg(&args.bs)?,
        iodepth: args.iodepth,
        numjobs: args.numjobs,
        runtime: Duration::from_secs(args.runtime),
        ramp: Duration::from_secs(args.ramp),
        precondition: args.precondition,
        size: args.size.as_deref().map(admin::size_arg).transpose()?,
        seed: None,
    };
    let config = conf::load_client(ctx)?;
    let rt = crate::daemons::runtime(args.threads)?;
    let json = ctx.json;
    let lat_bins = args.lat_bins;
    rt.block_on(async move {
        let cluster = Cluster::connect(conf::client_options(&config)).await?;
        cairn_client::image::watch::set_process_role(format!("cairn bench {pool}/{name}"));
        let image = Image::open(&cluster, &pool, &name).await?;
        spec.validate(cairn_volume::Volume::size(&*image))?;
        // CPU is sampled when the measured window starts and when the run ends.
        let ramp = spec.ramp;
        let (report, before) = tokio::join!(cairn_bench::run(image.clone(), &spec), async {
            tokio::time::sleep(ramp).await;
            bench_cpu::sample(&cluster).await
        });
        let after = bench_cpu::sample(&cluster).await;
        if let Err(e) = image.close().await {
            tracing::warn!("closing the image: {e}");
        }
        let report = report.map_err(|e| match e {
            cairn_bench::BenchError::Io {
                source: cairn_volume::VolumeError::NoSpace,
                ..
            } => anyhow::anyhow!(
                "{e}: an OSD serving the image is full (see `cairn status`; remove data or add OSDs)"
            ),
            other => other.into(),
        })?;
        let cpu = bench_cpu::CpuPerOp::between(&before, &after, report.total.ops);
        if json {
            let mut v = serde_json::to_value(&report)?;
            if lat_bins {
                v["read"]["lat_bins"] = serde_json::json!(report.latency_bins(false));
                v["write"]["lat_bins"] = serde_json::json!(report.latency_bins(true));
            }
            v["cpu"] = serde_json::to_value(&cpu)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print!("{}", report.table());
            println!("{}", cpu.line());
        }
        Ok(())
    })
}
