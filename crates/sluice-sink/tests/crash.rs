//! `kill -9` of a process writing through the storage sink, in the middle of its flushes, then a
//! restart from the checkpoint in the root `metadata` file: the consumer's result must equal the
//! upstream. The writer is this test binary run again as a child (`crash_child`, ignored unless
//! started by the parent with `SLUICE_CRASH_DIR` set).

use futures::TryStreamExt;
use object_store::ObjectStore;
use sluice_sink::check::{self, CheckArgs};
use sluice_sink::consume::{self, ConsumeArgs};
use sluice_sink::storage::StorageSink;
use sluice_sink::testing::simple_schema;
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{RowBatch, Sink};
use sluice_testkit::mariadb::MariaDb;
use sluice_types::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EVENTS: usize = 3000;
const BATCH: usize = 5;

fn uri(dir: &str) -> String {
    format!("file://{dir}?protocol=csv&include-commit-ts=true&file-size=1024&flush-interval=100ms&date-separator=none")
}

/// A deterministic workload over 300 keys: (events, upstream SQL).
fn workload() -> (Vec<RowEvent>, Vec<String>) {
    let s = simple_schema("d", "t", 1, 1);
    let mut state: BTreeMap<i64, String> = BTreeMap::new();
    let (mut events, mut sql) = (Vec::new(), Vec::new());
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..EVENTS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = (x % 300) as i64;
        let ts = i as u64 + 1;
        let v = format!("v{i}");
        let img = |id: i64, v: &str| vec![Value::Int(id), Value::Text(v.into())];
        let (kind, before, after) = match state.get(&id).cloned() {
            None => {
                sql.push(format!("INSERT INTO d.t VALUES ({id}, '{v}')"));
                state.insert(id, v.clone());
                (RowKind::Insert, None, Some(img(id, &v)))
            }
            Some(old) if x.is_multiple_of(4) => {
                sql.push(format!("DELETE FROM d.t WHERE id = {id}"));
                state.remove(&id);
                (RowKind::Delete, Some(img(id, &old)), None)
            }
            Some(old) => {
                sql.push(format!("UPDATE d.t SET v = '{v}' WHERE id = {id}"));
                state.insert(id, v.clone());
                (RowKind::Update, Some(img(id, &old)), Some(img(id, &v)))
            }
        };
        events.push(RowEvent {
            table_id: s.table_id,
            schema_version: 1,
            commit_ts: ts,
            commit_time_ms: 0,
            kind,
            key: Key::row_u64(s.table_id, id as u64),
            before,
            after,
            snapshot: false,
            gtid: None,
        });
    }
    (events, sql)
}

/// Writes every event after `from` with dispatcher `d`, flushing and recording the checkpoint
/// every few batches; `pace` slows the writer so a kill lands mid-stream.
async fn write_from(dir: &str, d: DispatcherId, from: Ts, pace: Duration) {
    let SinkConfig::Storage(cfg) = SinkUri::parse(&uri(dir)).expect("uri").config else {
        panic!("storage")
    };
    let sink = StorageSink::open_storage(cfg).expect("sink");
    let schema = Arc::new(simple_schema("d", "t", 1, 1));
    sink.open(d, Span::whole_table(TableId(1)), from)
        .await
        .expect("open");
    let (events, _) = workload();
    let rest: Vec<RowEvent> = events.into_iter().filter(|e| e.commit_ts > from).collect();
    for (i, chunk) in rest.chunks(BATCH).enumerate() {
        sink.write_rows(
            d,
            RowBatch {
                schema: schema.clone(),
                rows: chunk.to_vec(),
            },
        )
        .await
        .expect("write");
        if i % 4 == 3 {
            let ack = sink.flush(d).await.expect("flush");
            sink.write_checkpoint(ack).await.expect("checkpoint");
        }
        tokio::time::sleep(pace).await;
    }
    let ack = sink.close(d).await.durable_ts;
    sink.write_checkpoint(ack).await.expect("checkpoint");
}

#[test]
#[ignore = "run by kill_9_mid_flush_then_restart_from_checkpoint_converges as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var("SLUICE_CRASH_DIR") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(write_from(
        &dir,
        DispatcherId { epoch: 1, seq: 1 },
        0,
        Duration::from_millis(3),
    ));
}

async fn checkpoint(store: &Arc<dyn ObjectStore>) -> Option<u64> {
    use object_store::ObjectStoreExt;
    let r = store
        .get(&object_store::path::Path::from("metadata"))
        .await
        .ok()?;
    let b = r.bytes().await.ok()?;
    serde_json::from_slice::<serde_json::Value>(&b)
        .ok()?
        .get("checkpoint-ts")?
        .as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_flush_then_restart_from_checkpoint_converges() {
    let dir = std::env::temp_dir().join(format!("sluice-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let dir_s = dir.display().to_string();
    let (up, down) = (
        MariaDb::start().expect("up"),
        MariaDb::start().expect("down"),
    );
    let seed = "CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v VARCHAR(64));";
    up.exec(seed).expect("seed");
    down.exec(seed).expect("seed");
    let (_, sql) = workload();
    up.exec(&sql.join(";\n")).expect("upstream workload");

    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "crash_child", "--ignored", "--nocapture"])
        .env("SLUICE_CRASH_DIR", &dir_s)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let SinkConfig::Storage(cfg) = SinkUri::parse(&uri(&dir_s)).expect("uri").config else {
        panic!("storage")
    };
    let store = sluice_sink::storage::build_store(&cfg).expect("store");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if checkpoint(&store)
            .await
            .is_some_and(|c| c >= EVENTS as u64 / 3)
        {
            break;
        }
        assert!(Instant::now() < deadline, "child made no progress");
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "child exited early"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().expect("kill -9"); // SIGKILL
    let status = child.wait().expect("wait");
    assert!(status.code().is_none(), "child was not killed: {status:?}");
    let cp = checkpoint(&store).await.expect("checkpoint");
    assert!(
        cp < EVENTS as u64,
        "the child finished before the kill ({cp})"
    );

    // Restart from the checkpoint with a new dispatcher (a new epoch), as a failover would.
    write_from(
        &dir_s,
        DispatcherId { epoch: 2, seq: 1 },
        cp,
        Duration::ZERO,
    )
    .await;
    assert_eq!(checkpoint(&store).await, Some(EVENTS as u64));
    let files: Vec<String> = store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    assert!(
        files.iter().any(|f| f.contains("CDC_"))
            || files.iter().filter(|f| f.ends_with(".csv")).count() > 10,
        "{files:?}"
    );

    let report = consume::run(&ConsumeArgs {
        storage: uri(&dir_s),
        downstream: down.url(),
    })
    .await
    .expect("consume");
    let cmp = check::run(&CheckArgs::new(&up.url(), &down.url(), "d.*"))
        .await
        .expect("check");
    assert!(cmp.equal(), "{cmp}\n{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
