//! Kafka sink tests against a real Kafka-protocol broker (tansu, started per test by
//! `sluice_testkit::kafka`): a plain produce/consume/group smoke test (so a real Kafka can be
//! swapped in), the sink contract, what lands in which partition (rows by the partition
//! dispatcher, DDLs and watermarks on every partition), golden encodings of every column type
//! per protocol, a message over `max-message-bytes`, and a broker paused mid-run.
//!
//! Golden files live in tests/golden/; `UPDATE_GOLDEN=1 cargo test -p sluice-sink --test kafka`
//! rewrites them.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sluice_sink::kafka::route::{DispatchRule, Router};
use sluice_sink::testing::{
    all_types_rows, all_types_schema, golden, run_contract_suite, simple_insert, simple_schema,
};
use sluice_sink::uri::{SinkConfig, SinkUri};
use sluice_sink::{open_sink, RowBatch};
use sluice_testkit::kafka::Broker;
use sluice_types::{DispatcherId, Epoch, RowKind, Span, TableId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every message of `topic`, per partition in offset order: (partition, key, value).
fn read_all(broker: &Broker, topic: &str, want: usize) -> Vec<(i32, Option<String>, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("group.id", "sluice-test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let mut tpl = TopicPartitionList::new();
    for t in md.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .expect("partition");
        }
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < want && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
            out.push((
                m.partition(),
                text(m.key()),
                text(m.payload()).unwrap_or_default(),
            ));
        }
    }
    // Anything more than expected shows up too.
    while let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
        out.push((
            m.partition(),
            None,
            String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
        ));
    }
    out
}

/// The Kafka sink of `uri` for changefeed "test", routed by `rules`, naming binlog files by
/// `binlog_base` in Debezium's `source.file`.
fn kafka_sink(
    uri: &str,
    rules: &[DispatchRule],
    binlog_base: Option<&str>,
) -> Arc<dyn sluice_sink::Sink> {
    let SinkConfig::Kafka(cfg) = SinkUri::parse(uri).expect("uri").config else {
        panic!("kafka")
    };
    cfg.build("test", rules, None, binlog_base).expect("sink")
}

/// A Kafka sink to `topic` (`params`) routing `db.*` by key (`index-value`), and a dispatcher of
/// table `db.t` opened on it: (sink, rules, schema, dispatcher).
async fn by_key_table(
    broker: &Broker,
    topic: &str,
    params: &str,
) -> (
    Arc<dyn sluice_sink::Sink>,
    [DispatchRule; 1],
    Arc<sluice_types::TableSchema>,
    DispatcherId,
) {
    let rules = [DispatchRule {
        matcher: vec!["db.*".into()],
        partition: Some("index-value".into()),
        ..Default::default()
    }];
    let sink = kafka_sink(&broker.sink_uri(topic, params), &rules, None);
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let d = dispatcher(1);
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    (sink, rules, schema, d)
}

fn dispatcher(seq: u64) -> DispatcherId {
    DispatcherId {
        epoch: Epoch(1).0,
        seq,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_smoke_produce_consume_and_a_group() {
    let broker = Broker::start().expect("broker");
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for i in 0..10 {
        let v = format!("v{i}");
        p.send(
            FutureRecord::<str, _>::to("smoke").payload(&v).partition(0),
            Duration::from_secs(10),
        )
        .await
        .expect("delivered");
    }
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("group.id", "smoke-group")
        .set("session.timeout.ms", "6000")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    c.subscribe(&["smoke"]).expect("subscribe");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < 10 && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    assert_eq!(got, (0..10).map(|i| format!("v{i}")).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_keeps_the_sink_contract_for_every_protocol() {
    let broker = Broker::start().expect("broker");
    for proto in [
        "canal-json&enable-tidb-extension=true",
        "debezium",
        "open-protocol",
        "simple",
    ] {
        let topic = format!("contract-{}", proto.split('&').next().unwrap_or_default());
        let sink = open_sink(&broker.sink_uri(&topic, &format!("protocol={proto}")))
            .await
            .expect("sink");
        run_contract_suite(
            sink.as_ref(),
            "db",
            "t",
            1,
            "ALTER TABLE t ADD COLUMN x INT",
        )
        .await;
        assert!(sink.applied_ddls(0).await.expect("applied").is_empty());
    }
}

/// Rows go to the partition their dispatcher rule says, every DDL to every partition, and
/// (canal-json with the TiDB extension) the checkpoint to every partition as a WATERMARK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_by_key_ddls_and_watermarks_on_every_partition() {
    let broker = Broker::start().expect("broker");
    let params = "protocol=canal-json&enable-tidb-extension=true&partition-num=4";
    let (sink, rules, schema, d) = by_key_table(&broker, "routed", params).await;
    let rows: Vec<_> = (1..=40)
        .map(|i| simple_insert(&schema, i, "x", 100 + i, 0))
        .collect();
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: rows.clone(),
        },
    )
    .await
    .expect("rows");
    let ddl =
        sluice_sink::testing::ddl_event(200, "db", "ALTER TABLE t ADD COLUMN y INT", TableId(1));
    sink.write_ddl(d, ddl, vec![schema.clone()])
        .await
        .expect("ddl");
    sink.write_checkpoint(200).await.expect("checkpoint");
    let got = read_all(&broker, "routed", 40 + 4 + 4);
    let router = Router::new("routed", &rules).expect("router");
    let mut data = 0;
    for (p, _, v) in &got {
        let j: serde_json::Value = serde_json::from_str(v).expect("json");
        if j["isDdl"] == true || j["type"] == "TIDB_WATERMARK" {
            continue;
        }
        let id: usize = j["data"][0]["id"]
            .as_str()
            .expect("id")
            .parse()
            .expect("int");
        let row = &rows[id - 1];
        assert_eq!(
            *p,
            router.partition(&schema, row, 4).expect("partition"),
            "row {id}"
        );
        data += 1;
    }
    assert_eq!(data, 40, "{got:?}");
    let partitions_of = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        let mut ps: Vec<i32> = got
            .iter()
            .filter(|(_, _, v)| pred(&serde_json::from_str(v).expect("json")))
            .map(|(p, _, _)| *p)
            .collect();
        ps.sort();
        ps
    };
    assert_eq!(
        partitions_of(&|j| j["isDdl"] == true && j["_tidb"]["commitTs"] == 200),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        partitions_of(&|j| j["type"] == "TIDB_WATERMARK" && j["_tidb"]["watermarkTs"] == 200),
        vec![0, 1, 2, 3]
    );
    let used: std::collections::BTreeSet<i32> = got.iter().map(|(p, _, _)| *p).collect();
    assert!(
        used.len() == 4,
        "40 keys over 4 partitions use them all: {used:?}"
    );
    sink.close(d).await;
}

/// A batch large enough to be encoded on several lanes at once (`kafka::lanes`): every message
/// arrives once, each key in one partition and its versions in commit order, and the flush's
/// acknowledgement covers the whole batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_on_several_lanes_keeps_each_keys_order() {
    let broker = Broker::start().expect("broker");
    let params = "protocol=canal-json&partition-num=3";
    let (sink, _, schema, d) = by_key_table(&broker, "lanes", params).await;
    let (keys, versions) = (1500u64, 3u64);
    let rows: Vec<_> = (0..versions)
        .flat_map(|n| (1..=keys).map(move |k| (n, k)))
        .enumerate()
        .map(|(i, (n, k))| simple_insert(&schema, k, &n.to_string(), 1000 + i as u64, 0))
        .collect();
    let last = rows.last().expect("rows").commit_ts;
    sink.write_rows(d, RowBatch { schema, rows })
        .await
        .expect("rows");
    let acked = sink.flush(d).await.expect("flush");
    assert!(acked >= last, "acknowledged {acked}, wrote up to {last}");
    let want = (keys * versions) as usize;
    let got = read_all(&broker, "lanes", want);
    assert_eq!(got.len(), want, "every message once");
    let mut seen: std::collections::BTreeMap<u64, (i32, Vec<u64>)> = Default::default();
    for (p, _, v) in &got {
        let j: serde_json::Value = serde_json::from_str(v).expect("json");
        let field = |name: &str| -> u64 {
            j["data"][0][name]
                .as_str()
                .expect(name)
                .parse()
                .expect("int")
        };
        let e = seen.entry(field("id")).or_insert((*p, Vec::new()));
        assert_eq!(e.0, *p, "key {} in two partitions", field("id"));
        e.1.push(field("v"));
    }
    assert_eq!(seen.len(), keys as usize);
    for (k, (_, vs)) in &seen {
        assert_eq!(
            vs,
            &(0..versions).collect::<Vec<_>>(),
            "key {k} out of order"
        );
    }
    let used: std::collections::BTreeSet<i32> = seen.values().map(|(p, _)| *p).collect();
    assert_eq!(used.len(), 3, "1500 keys over 3 partitions use them all");
    sink.close(d).await;
}

/// An update that changes the key is a delete then an insert, each in its key's partition; each
/// Debezium message names the binlog file of its commit ts by the base name the sink was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_of_the_key_is_a_delete_and_an_insert() {
    let broker = Broker::start().expect("broker");
    let uri = broker.sink_uri("keys", "protocol=debezium&partition-num=3");
    let rules = [DispatchRule {
        matcher: vec!["*.*".into()],
        partition: Some("index-value".into()),
        ..Default::default()
    }];
    let sink = kafka_sink(&uri, &rules, Some("binlog"));
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let d = dispatcher(2);
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    let ts = (5 << 32) | 10;
    let mut up = simple_insert(&schema, 1, "a", ts, 0);
    up.kind = RowKind::Update;
    up.before = simple_insert(&schema, 1, "a", ts, 0).after;
    up.after = simple_insert(&schema, 2, "b", ts, 0).after;
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![up],
        },
    )
    .await
    .expect("rows");
    assert_eq!(sink.flush(d).await.expect("flush"), ts);
    let got = read_all(&broker, "keys", 2);
    // (op, key id, partition) of each message; partitions are read in no set order.
    let mut seen: Vec<(String, i64, i32)> = got
        .iter()
        .map(|(p, k, v)| {
            let v: serde_json::Value = serde_json::from_str(v).expect("json");
            let k: serde_json::Value =
                serde_json::from_str(k.as_deref().unwrap_or("null")).expect("key json");
            let op = v["payload"]["op"].as_str().unwrap_or_default().to_string();
            let src = &v["payload"]["source"];
            assert_eq!(
                (&src["file"], &src["pos"]),
                (&"binlog.000005".into(), &10.into())
            );
            (op, k["payload"]["id"].as_i64().unwrap_or(-1), *p)
        })
        .collect();
    seen.sort();
    let router = Router::new("keys", &rules).expect("router");
    let at = |id: u64| {
        let row = simple_insert(&schema, id, "x", 10, 0);
        router.partition(&schema, &row, 3).expect("partition")
    };
    assert_eq!(
        seen,
        [("c".to_string(), 2, at(2)), ("d".to_string(), 1, at(1))],
        "the delete of key 1 in its partition, the insert of key 2 in its own: {got:?}"
    );
    sink.close(d).await;
}

/// `debezium-disable-schema=true` (TiCDC's parameter): every key and value through the broker
/// is the message with the schema minus its `schema` part, for every column type, and the
/// decoder refuses such a value clearly (its column types are not there to apply it with).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_without_schema_is_the_payload_alone() {
    use sluice_sink::codec::debezium::{encode_key, encode_row_value, Origin};
    let broker = Broker::start().expect("broker");
    let uri = broker.sink_uri(
        "noschema",
        "protocol=debezium&debezium-disable-schema=true&partition-num=1",
    );
    let sink = kafka_sink(&uri, &[], Some("mysql-bin"));
    let schema = Arc::new(all_types_schema("db", 5));
    let rows = all_types_rows(&schema, (7 << 32) | 1234, 1_700_000_000_123);
    let d = dispatcher(3);
    sink.open(d, Span::whole_table(schema.table_id), 0)
        .await
        .expect("open");
    let batch = RowBatch {
        schema: schema.clone(),
        rows: rows.clone(),
    };
    sink.write_rows(d, batch).await.expect("rows");
    sink.flush(d).await.expect("flush");
    let got = read_all(&broker, "noschema", rows.len());
    assert_eq!(got.len(), rows.len(), "one message per row: {got:?}");
    let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).expect("json");
    let origin = Origin {
        name: "noschema",
        binlog_base: Some("mysql-bin"),
    };
    for ((_, key, value), row) in got.iter().zip(&rows) {
        let mut full = json(&encode_row_value(origin, &schema, row).expect("debezium"));
        assert!(full.get("schema").is_some(), "the default keeps the schema");
        full.as_object_mut().expect("object").remove("schema");
        assert_eq!(json(value), full, "the value is the payload alone");
        let mut full_key = json(&encode_key("noschema", &schema, row).expect("a key"));
        full_key.as_object_mut().expect("object").remove("schema");
        assert_eq!(json(key.as_deref().expect("a key")), full_key);
        let refused = sluice_sink::codec::debezium::decode(value.as_bytes())
            .expect_err("no column types to decode with");
        assert!(
            refused.to_string().contains("debezium-disable-schema"),
            "{refused}"
        );
    }
    sink.close(d).await;
    // `sluice consume` refuses the topic before it reads or applies anything.
    let args = sluice_sink::kafka::consume::KafkaConsumeArgs {
        kafka: uri.clone(),
        downstream: "mysql://root@127.0.0.1:1".into(),
        idle: Duration::from_secs(1),
    };
    let refused = sluice_sink::kafka::consume::run(&args)
        .await
        .expect_err("refused");
    assert!(
        refused.to_string().contains("carry no column types"),
        "{refused}"
    );
}

#[test]
fn golden_messages_of_every_column_type() {
    let schema = all_types_schema("db", 5);
    let mut rows = all_types_rows(&schema, (7 << 32) | 1234, 1_700_000_000_123);
    // The first row once more as a snapshot read: Debezium's `op: "r"` with
    // `source.snapshot: "true"`, canal-json's `_tidb.snapshot` (the other protocols have no place
    // for it and write an insert).
    let mut read = rows[0].clone();
    assert_eq!(read.kind, sluice_types::RowKind::Insert);
    read.snapshot = true;
    rows.push(read);
    let mut canal = String::new();
    let mut dbz = String::new();
    let origin = sluice_sink::codec::debezium::Origin {
        name: "sluice",
        binlog_base: Some("mysql-bin"),
    };
    for r in &rows {
        sluice_sink::codec::canal::encode_row_message(&mut canal, true, &schema, r).expect("canal");
        canal.push('\n');
        dbz.push_str(
            &sluice_sink::codec::debezium::encode_key("sluice", &schema, r).unwrap_or_default(),
        );
        dbz.push('\n');
        dbz.push_str(
            &sluice_sink::codec::debezium::encode_row_value(origin, &schema, r).expect("debezium"),
        );
        dbz.push('\n');
    }
    let mut open = String::new();
    for r in &rows {
        let (k, v) = sluice_sink::codec::open::encode_row(&schema, r).expect("open");
        // The frames' JSON, one line each (the 8-byte lengths are checked by the decoder).
        open.push_str(&String::from_utf8_lossy(&k[16..]));
        open.push('\n');
        open.push_str(&String::from_utf8_lossy(&v[8..]));
        open.push('\n');
        let back = sluice_sink::codec::open::decode(&k, &v).expect("decodes");
        assert_eq!(back.len(), 1, "one event per message");
    }
    golden("kafka_all_types_open.json", &open);
    let mut simple = sluice_sink::codec::simple::encode_bootstrap(&schema);
    simple.push('\n');
    for r in &rows {
        simple.push_str(&sluice_sink::codec::simple::encode_row(&schema, r).expect("simple"));
        simple.push('\n');
    }
    golden("kafka_all_types_simple.json", &simple);
    golden("kafka_all_types_canal.json", &canal);
    golden("kafka_all_types_debezium.json", &dbz);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_message_bytes_fails_clearly() {
    let broker = Broker::start().expect("broker");
    let sink = open_sink(&broker.sink_uri("big", "protocol=canal-json&max-message-bytes=2048"))
        .await
        .expect("sink");
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let d = dispatcher(3);
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    let row = simple_insert(&schema, 1, &"x".repeat(4000), 10, 0);
    let e = match sink
        .write_rows(
            d,
            RowBatch {
                schema,
                rows: vec![row],
            },
        )
        .await
    {
        Err(e) => e,
        Ok(()) => sink.flush(d).await.expect_err("too large"),
    };
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("max-message-bytes=2048"), "{e}");
    assert_eq!(sink.durable_ts(d), Some(0));
    sink.close(d).await;
}

/// A broker frozen (SIGSTOP) mid-run holds the ack back; once it runs again every row is
/// delivered, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_broker_holds_the_ack_and_loses_nothing() {
    let mut broker = Broker::start().expect("broker");
    let sink = open_sink(&broker.sink_uri(
        "paused",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=2&write-timeout=60s",
    ))
    .await
    .expect("sink");
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let d = dispatcher(4);
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows: vec![simple_insert(&schema, 1, "a", 10, 0)],
        },
    )
    .await
    .expect("rows");
    assert_eq!(sink.flush(d).await.expect("flush"), 10);
    broker.pause();
    let rows: Vec<_> = (2..=50u64)
        .map(|i| simple_insert(&schema, i, "b", 10 + i, 0))
        .collect();
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows,
        },
    )
    .await
    .expect("rows buffered");
    let s2 = sink.clone();
    let flushing = tokio::spawn(async move { s2.flush(d).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        sink.durable_ts(d),
        Some(10),
        "no ack while the broker is frozen"
    );
    broker.resume();
    let ack = tokio::time::timeout(Duration::from_secs(60), flushing)
        .await
        .expect("flush returns")
        .expect("task")
        .expect("flushed");
    assert_eq!(ack, 60);
    let got = read_all(&broker, "paused", 50);
    let mut ids: Vec<i64> = got
        .iter()
        .filter_map(|(_, _, v)| {
            serde_json::from_str::<serde_json::Value>(v).ok()?["data"][0]["id"]
                .as_str()?
                .parse()
                .ok()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, (1..=50).collect::<Vec<i64>>());
    sink.close(d).await;
}

/// The ids in the `data` of every canal-json row message of `topic`, as read by a
/// `read_committed` reader.
fn committed_ids(broker: &Broker, topic: &str, want: usize) -> Vec<i64> {
    read_all(broker, topic, want)
        .iter()
        .filter_map(|(_, _, v)| {
            let j: serde_json::Value = serde_json::from_str(v).ok()?;
            j["data"][0]["id"].as_str()?.parse().ok()
        })
        .collect()
}

/// `transactional=true`: a dispatcher that dies after the broker committed its flush but before
/// the changefeed checkpoint moved is replayed from the checkpoint; its successor skips what the
/// broker holds, so every row is in the topic exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_replay_after_a_crash_adds_no_copy() {
    let broker = Broker::start().expect("broker");
    let uri = broker.sink_uri(
        "eos",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=2&transactional=true",
    );
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let rows = |ids: std::ops::RangeInclusive<u64>| -> Vec<_> {
        ids.map(|i| simple_insert(&schema, i, "v", 10 + i, 0))
            .collect()
    };
    let first = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    first
        .open(dispatcher(1), Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    first
        .write_rows(
            dispatcher(1),
            RowBatch {
                schema: schema.clone(),
                rows: rows(1..=20),
            },
        )
        .await
        .expect("rows");
    assert_eq!(first.flush(dispatcher(1)).await.expect("flush"), 30);
    drop(first); // the node dies: no close, the checkpoint never passed 0
    let second = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    second
        .open(dispatcher(2), Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    second
        .write_rows(
            dispatcher(2),
            RowBatch {
                schema: schema.clone(),
                rows: rows(1..=40),
            },
        )
        .await
        .expect("replayed rows");
    assert_eq!(second.flush(dispatcher(2)).await.expect("flush"), 50);
    let mut ids = committed_ids(&broker, "eos", 40);
    ids.sort();
    assert_eq!(ids, (1..=40).collect::<Vec<i64>>(), "each row exactly once");
    second.close(dispatcher(2)).await;
}

/// `transactional=true` and a transaction in parts (`write_part`): its parts go into one Kafka
/// transaction that the write ending it commits with a progress record at its commit ts; the
/// ack stays below it until then, and a replay of it after a crash adds no copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_transaction_in_parts_is_one_kafka_transaction() {
    let broker = Broker::start().expect("broker");
    let uri = broker.sink_uri(
        "eos-parts",
        "protocol=canal-json&enable-tidb-extension=true&partition-num=2&transactional=true",
    );
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let batch = |ids: std::ops::RangeInclusive<u64>| RowBatch {
        schema: schema.clone(),
        rows: ids.map(|i| simple_insert(&schema, i, "v", 20, 0)).collect(),
    };
    let span = Span::whole_table(TableId(1));
    let first = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    first
        .open(dispatcher(1), span.clone(), 0)
        .await
        .expect("open");
    first
        .write_part(dispatcher(1), batch(1..=5))
        .await
        .expect("part");
    assert_eq!(first.flush(dispatcher(1)).await.expect("flush"), 19);
    first
        .write_part(dispatcher(1), batch(6..=10))
        .await
        .expect("part");
    assert_eq!(first.flush(dispatcher(1)).await.expect("flush"), 19);
    first
        .write_rows(dispatcher(1), batch(11..=12))
        .await
        .expect("end");
    assert_eq!(first.flush(dispatcher(1)).await.expect("flush"), 20);
    drop(first); // the node dies before the changefeed checkpoint passed 20
    let second = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    second.open(dispatcher(2), span, 0).await.expect("open");
    second
        .write_part(dispatcher(2), batch(1..=6))
        .await
        .expect("replayed part");
    second
        .write_rows(dispatcher(2), batch(7..=12))
        .await
        .expect("replayed end");
    assert_eq!(second.flush(dispatcher(2)).await.expect("flush"), 20);
    let mut ids = committed_ids(&broker, "eos-parts", 12);
    ids.sort();
    assert_eq!(ids, (1..=12).collect::<Vec<i64>>(), "each row exactly once");
    second.close(dispatcher(2)).await;
}

/// A producer opened for a span fences the earlier producer of that span: the paused
/// dispatcher's next commit is refused as superseded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_zombie_producer_is_fenced() {
    let broker = Broker::start().expect("broker");
    let uri = broker.sink_uri(
        "zombie",
        "protocol=canal-json&enable-tidb-extension=true&transactional=true",
    );
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let span = Span::whole_table(TableId(1));
    let old = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    old.open(dispatcher(1), span.clone(), 0)
        .await
        .expect("open");
    let one = vec![simple_insert(&schema, 1, "old", 11, 0)];
    old.write_rows(
        dispatcher(1),
        RowBatch {
            schema: schema.clone(),
            rows: one,
        },
    )
    .await
    .expect("rows");
    old.flush(dispatcher(1)).await.expect("first flush");
    let new = sluice_sink::open_sink_for("cf", &uri).await.expect("sink");
    new.open(dispatcher(2), span, 11).await.expect("open");
    let two = vec![simple_insert(&schema, 2, "new", 12, 0)];
    new.write_rows(
        dispatcher(2),
        RowBatch {
            schema: schema.clone(),
            rows: two,
        },
    )
    .await
    .expect("rows");
    new.flush(dispatcher(2))
        .await
        .expect("the successor commits");
    let late = vec![simple_insert(&schema, 3, "zombie", 13, 0)];
    let e = match old
        .write_rows(dispatcher(1), RowBatch { schema, rows: late })
        .await
    {
        Err(e) => e,
        Ok(()) => old
            .flush(dispatcher(1))
            .await
            .expect_err("the zombie is fenced"),
    };
    assert!(e.to_string().contains("newer producer"), "{e}");
    assert_eq!(old.durable_ts(dispatcher(1)), Some(11));
}

/// `large-message-handle-option=claim-check`: a message over `max-message-bytes` is stored whole
/// in the claim-check location and a reference to it is sent; smaller ones travel as they are.
/// Claim-check without canal-json's TiDB extension is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_check_stores_a_large_message_and_sends_its_reference() {
    let broker = Broker::start().expect("broker");
    let dir = std::env::temp_dir().join(format!("sluice-claims-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let claims = format!(
        "large-message-handle-option=claim-check&claim-check-storage-uri=file://{}",
        dir.display()
    );
    let refused =
        open_sink(&broker.sink_uri("claims", &format!("protocol=debezium&{claims}"))).await;
    assert!(refused
        .err()
        .is_some_and(|e| e.to_string().contains("enable-tidb-extension")));
    let uri = broker.sink_uri(
        "claims",
        &format!("protocol=canal-json&enable-tidb-extension=true&max-message-bytes=2048&{claims}"),
    );
    let sink = open_sink(&uri).await.expect("sink");
    let schema = Arc::new(simple_schema("db", "t", 1, 0));
    let d = dispatcher(5);
    sink.open(d, Span::whole_table(TableId(1)), 0)
        .await
        .expect("open");
    let big = "x".repeat(4000);
    let rows = vec![
        simple_insert(&schema, 1, &big, 10, 0),
        simple_insert(&schema, 2, "small", 11, 0),
    ];
    sink.write_rows(d, RowBatch { schema, rows })
        .await
        .expect("rows");
    assert_eq!(sink.flush(d).await.expect("flush"), 11);
    let got = read_all(&broker, "claims", 2);
    assert_eq!(got.len(), 2, "{got:?}");
    let refs: Vec<serde_json::Value> = got
        .iter()
        .map(|(_, _, v)| serde_json::from_str(v).expect("json"))
        .collect();
    let location = refs
        .iter()
        .find_map(|j| j["_tidb"]["claimCheckLocation"].as_str())
        .expect("the large row is a reference");
    assert!(
        refs.iter().any(|j| j["data"][0]["v"] == "small"),
        "the small row travels whole: {refs:?}"
    );
    let stored = std::fs::read_to_string(dir.join(location)).expect("the stored message");
    let full: serde_json::Value = serde_json::from_str(&stored).expect("json");
    assert_eq!(full["data"][0]["v"], big.as_str());
    assert!(got.iter().all(|(_, _, v)| v.len() <= 2048));
    sink.close(d).await;
    let _ = std::fs::remove_dir_all(&dir);
}
