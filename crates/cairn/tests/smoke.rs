//! The smallest end-to-end check: a cluster comes up, an image takes a
//! write across an object boundary and reads it back.

mod common;

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::{pattern, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_across_an_object_boundary_reads_back() {
    let cluster = TestCluster::up(3);
    cluster.ok(&[
        "image",
        "create",
        "rbd/smoke",
        "--size",
        "64M",
        "--object-size",
        "4M",
    ]);
    let client = cluster.client().await;
    let image = Image::open(&client, "rbd", "smoke").await.expect("open");
    let offset = (4 << 20) - 6144;
    let data = pattern(7, 12288);
    image
        .write(offset, Bytes::from(data.clone()))
        .await
        .expect("write");
    let back = image.read(offset, data.len() as u64).await.expect("read");
    assert_eq!(&back[..], &data[..]);
    let hole = image.read(32 << 20, 8192).await.expect("read hole");
    assert!(hole.iter().all(|&b| b == 0));
}
