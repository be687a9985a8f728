//! The behaviour every [`ObjectStore`] backend must show.
//!
//! Each check is a `pub async fn` taking a [`Harness`] that opens (and, for
//! durable backends, reopens) one store; a check panics on the first
//! deviation. A backend's tests run them all with [`conformance_tests!`](crate::conformance_tests)
//! (one `#[tokio::test]` per check) or [`run_all`]:
//!
//! ```ignore
//! struct Mem(std::sync::Arc<MemStore>);
//! impl Harness for Mem { ... }
//! cairn_store::conformance_tests!(Mem(Arc::new(MemStore::new())));
//! ```
//!
//! The suite owns only behaviour visible through the trait; crash safety is
//! each durable backend's own test (a child process killed mid-workload),
//! using [`dump`] and [`first_difference`] to compare with a model.

mod data;
mod dump;
mod metadata;
mod moves;
mod ordering;
mod util;

use std::sync::Arc;

pub use data::*;
pub use dump::{dump, first_difference, CollectionDump, ObjectDump, StoreDump};
pub use metadata::*;
pub use moves::*;
pub use ordering::*;

use crate::{ObjectStore, Result, Transaction};

/// Opens the store under test.
pub trait Harness {
    /// The store. The first call creates it empty; for a durable backend a
    /// later call, made after every handle from the previous call has been
    /// dropped, reopens the same store from its persistent state.
    fn open(&mut self) -> Arc<dyn ObjectStore>;
    /// Whether the store survives a reopen (runs the reopen checks).
    fn durable(&self) -> bool;
}

/// Submit a transaction and wait until it is durable.
pub async fn apply(store: &dyn ObjectStore, txn: Transaction) -> Result<()> {
    store.submit(txn)?.await
}

/// Generate one `#[tokio::test]` per conformance check for a backend.
/// `$harness` is evaluated afresh for every test and must implement [`Harness`].
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@each $harness;
            write_read_round_trip,
            holes_read_as_zeros,
            short_read_at_end,
            missing_object_is_not_found,
            overwrite_replaces_bytes,
            zero_reads_as_zeros_and_extends,
            truncate_shrinks_and_grows,
            remove_drops_everything,
            attrs_set_get_rm,
            omap_set_get_list_rm_clear,
            log_append_read_trim,
            collection_attrs,
            listing_objects_and_collections,
            remove_collection_removes_everything,
            move_carries_everything_and_replaces_target,
            moves_in_one_transaction_apply_in_order,
            split_moves_objects_to_their_pgs,
            transaction_applies_atomically_in_order,
            submission_order_with_many_in_flight,
            invalid_transaction_changes_nothing,
            statfs_counts_objects,
            awkward_names_round_trip,
            huge_sparse_object,
            reopen_preserves_state,
            reopen_after_many_transactions,
        );
    };
    (@each $harness:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let mut harness = $harness;
                $crate::conformance::$check(&mut harness).await;
            }
        )*
    };
}

/// Run every check in one go, each on a fresh harness from `make`.
pub async fn run_all(make: &mut dyn FnMut() -> Box<dyn Harness>) {
    write_read_round_trip(&mut *make()).await;
    holes_read_as_zeros(&mut *make()).await;
    short_read_at_end(&mut *make()).await;
    missing_object_is_not_found(&mut *make()).await;
    overwrite_replaces_bytes(&mut *make()).await;
    zero_reads_as_zeros_and_extends(&mut *make()).await;
    truncate_shrinks_and_grows(&mut *make()).await;
    remove_drops_everything(&mut *make()).await;
    attrs_set_get_rm(&mut *make()).await;
    omap_set_get_list_rm_clear(&mut *make()).await;
    log_append_read_trim(&mut *make()).await;
    collection_attrs(&mut *make()).await;
    listing_objects_and_collections(&mut *make()).await;
    remove_collection_removes_everything(&mut *make()).await;
    move_carries_everything_and_replaces_target(&mut *make()).await;
    moves_in_one_transaction_apply_in_order(&mut *make()).await;
    split_moves_objects_to_their_pgs(&mut *make()).await;
    transaction_applies_atomically_in_order(&mut *make()).await;
    submission_order_with_many_in_flight(&mut *make()).await;
    invalid_transaction_changes_nothing(&mut *make()).await;
    statfs_counts_objects(&mut *make()).await;
    awkward_names_round_trip(&mut *make()).await;
    huge_sparse_object(&mut *make()).await;
    reopen_preserves_state(&mut *make()).await;
    reopen_after_many_transactions(&mut *make()).await;
}
