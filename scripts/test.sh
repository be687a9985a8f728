#!/usr/bin/env bash
# The whole test suite: unit tests, the object-store conformance suite,
# crash tests, integration tests on real processes and interop with real
# NBD clients (qemu-io, nbdcopy, fio). Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --workspace --all-targets
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  # The cluster tests again on the other durable backend (BlueStore is the
  # default); the benchmark tests choose their store themselves.
  CAIRN_TEST_STORE=filestore cargo nextest run -p cairn --no-fail-fast \
    -E 'not (binary(bench_matrix) | binary(bench_store))'
else
  cargo test --workspace --no-fail-fast
  CAIRN_TEST_STORE=filestore cargo test -p cairn --no-fail-fast
fi
cargo test --workspace --doc
