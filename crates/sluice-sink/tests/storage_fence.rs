//! The storage sink in a cluster (a write fence installed): every file name carries its
//! dispatcher's id, each dispatcher claims its span before its first data file, and `consume`
//! does not apply the rows of a dispatcher above the start ts of a later one that claimed an
//! overlapping span. Two sinks on one location stand for two nodes: a dispatcher whose node
//! froze with a flush past its fence check (its file lands after its successor took over) and
//! the successor. The downstream is a real MariaDB.

use futures::TryStreamExt;
use object_store::ObjectStore;
use sluice_sink::consume::{self, ConsumeArgs};
use sluice_sink::storage::StorageSink;
use sluice_sink::testing::{simple_insert, simple_schema};
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{RowBatch, Sink, WriteFence};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::sync::Arc;

/// A node's sink on the shared location, fenced (its lease always fresh: the pause is past
/// the check).
fn node_sink(uri: &str) -> StorageSink {
    let SinkConfig::Storage(cfg) = SinkUri::parse(uri).expect("uri").config else {
        panic!("storage")
    };
    let sink = StorageSink::open_storage(cfg).expect("sink");
    let fence: WriteFence = Arc::new(|| Some(1));
    sink.set_fence(fence).expect("fence");
    sink
}

fn rows(ids: std::ops::RangeInclusive<u64>, v: &str, ts: Ts) -> RowBatch {
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    let rows = ids.map(|i| simple_insert(&schema, i, v, ts, 0)).collect();
    RowBatch { schema, rows }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_writers_late_file_is_not_applied_over_its_successor() {
    let down = MariaDb::start().expect("down");
    down.exec("CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64))")
        .expect("seed");
    let base = std::env::temp_dir().join(format!("sluice-storage-fence-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let uri = format!(
        "file://{}?protocol=csv&include-commit-ts=true",
        base.display()
    );
    let (a, b) = (node_sink(&uri), node_sink(&uri));
    let whole = Span::whole_table(TableId(1));
    let (old, new) = (
        DispatcherId { epoch: 1, seq: 1 },
        DispatcherId { epoch: 2, seq: 1 },
    );
    // The first dispatcher writes and is acknowledged up to 10.
    a.open(old, whole.clone(), 5).await.expect("open old");
    a.write_rows(old, rows(1..=3, "a", 10))
        .await
        .expect("write");
    assert_eq!(a.flush(old).await.expect("flush"), 10);
    // Its node freezes with rows at 25 buffered; a successor takes the span over from 10.
    a.write_rows(old, rows(1..=2, "stale", 25))
        .await
        .expect("buffer");
    b.open(new, whole, 10).await.expect("open new");
    b.write_rows(new, rows(1..=2, "b", 20))
        .await
        .expect("write");
    assert_eq!(b.flush(new).await.expect("flush"), 20);
    // The frozen node wakes past its check: its file lands after the successor's.
    assert_eq!(a.flush(old).await.expect("the late put"), 25);
    let store = a.store();
    let names: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    let data: Vec<&String> = names.iter().filter(|n| n.ends_with(".csv")).collect();
    assert_eq!(data.len(), 3, "{names:?}");
    for (d, n) in [(old, 2), (new, 1)] {
        let named = data
            .iter()
            .filter(|p| p.contains(&format!("CDC_{d}_")))
            .count();
        assert_eq!(named, n, "files of {d} in {names:?}");
        let claim = format!("d/t/meta/claim_{d}.json");
        assert!(names.contains(&claim), "{claim} missing: {names:?}");
    }
    let report = consume::run(&ConsumeArgs {
        storage: uri,
        downstream: down.url(),
    })
    .await
    .expect("consume");
    assert_eq!(report.rows_superseded, 2, "{report}");
    assert_eq!(report.rows_applied, 3 + 2, "{report}");
    // The successor's versions, and the first dispatcher's row it had no reason to replay.
    assert_eq!(
        down.query_one("SELECT GROUP_CONCAT(CONCAT(id, '=', v) ORDER BY id) FROM d.t")
            .expect("query"),
        "1=b,2=b,3=a"
    );
    let _ = std::fs::remove_dir_all(&base);
}
