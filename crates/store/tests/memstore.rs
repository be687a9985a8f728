//! The conformance suite against [`MemStore`].

use std::sync::Arc;

use cairn_store::conformance::Harness;
use cairn_store::memstore::MemStore;
use cairn_store::ObjectStore;

struct Mem(Arc<MemStore>);

impl Harness for Mem {
    fn open(&mut self) -> Arc<dyn ObjectStore> {
        self.0.clone()
    }

    fn durable(&self) -> bool {
        false
    }
}

cairn_store::conformance_tests!(Mem(Arc::new(MemStore::new())));

#[tokio::test]
async fn run_all_covers_every_check() {
    cairn_store::conformance::run_all(&mut || Box::new(Mem(Arc::new(MemStore::new())))).await;
}
