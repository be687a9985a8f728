//! The benchmark matrix: `cairn bench matrix` and `cairn bench compare`.
//!
//! The source documents judge a storage system by a matrix of fio-style
//! workloads, aggregated and tabulated in a fixed way. This crate owns that
//! method, apart from running anything:
//!
//! - [`spec`]: the TOML spec, checked before anything runs (errors name
//!   the line), and its expansion into points.
//! - [`results`]: raw per-client, per-repetition measurements and their
//!   reduction (sums over clients, merged histograms, medians over
//!   repetitions, IOPS per daemon CPU-second).
//! - [`fio`]: fio's `json+` output read into the same raw form.
//! - [`report`]: `results.json`, `results.csv` and `report.md`.
//! - [`plot`]: the SVG charts.
//! - [`compare`]: two runs' matching points side by side.
//!
//! The runner (clusters, clients, fio processes, /proc) lives in the
//! `cairn` binary; nothing here starts a process or touches the network.

pub mod compare;
pub mod fio;
pub mod plot;
pub mod report;
pub mod results;
pub mod spec;

pub use results::{PointResult, Results};
pub use spec::{MatrixSpec, Point, SpecError};
