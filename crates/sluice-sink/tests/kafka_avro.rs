//! The Kafka sink's `protocol=avro` against a real broker (tansu) and the test schema registry
//! (`sluice_testkit::registry`): the sink contract, every column type written, registered and
//! read back through the registry, deletes as tombstones with their commit ts header, golden
//! schemas and bodies, a schema the registry refuses as incompatible, basic auth, and the
//! tables avro cannot take.
//!
//! Golden files live in tests/golden/; `UPDATE_GOLDEN=1 cargo test -p sluice-sink --test
//! kafka_avro` rewrites them.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sluice_sink::codec::avro::{self, AvroOptions, Datum};
use sluice_sink::kafka::route::DispatchRule;
use sluice_sink::testing::{
    all_types_rows, all_types_schema, golden, run_contract_suite, simple_insert, simple_schema,
};
use sluice_sink::{open_sink_routed, RowBatch, Sink};
use sluice_testkit::kafka::Broker;
use sluice_testkit::registry::Registry;
use sluice_types::{DispatcherId, RowKind, Span, TableSchema};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn per_table() -> Vec<DispatchRule> {
    vec![DispatchRule {
        matcher: vec!["*.*".into()],
        topic: Some("avro_{schema}_{table}".into()),
        partition: Some("index-value".into()),
        ..Default::default()
    }]
}

async fn avro_sink(broker: &Broker, registry: &str, extra: &str) -> Arc<dyn Sink> {
    let uri = broker.sink_uri(
        "avro-base",
        &format!("protocol=avro&partition-num=2&schema-registry={registry}{extra}"),
    );
    open_sink_routed("cf", &uri, &per_table(), None, None, None)
        .await
        .expect("sink")
}

/// One message as read: (partition, key, value, commit ts header).
type Read = (i32, Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>);

fn read_all(broker: &Broker, topic: &str, want: usize) -> Vec<Read> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("group.id", "sluice-avro-reader")
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
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                let ts = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "sluice-commit-ts")
                        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok())
                });
                out.push((
                    m.partition(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    ts,
                ));
            }
            _ if out.len() >= want => break,
            _ => {}
        }
    }
    out
}

async fn write(
    sink: &dyn Sink,
    d: DispatcherId,
    schema: &Arc<TableSchema>,
    rows: Vec<sluice_types::RowEvent>,
) -> sluice_sink::error::Result<()> {
    sink.write_rows(
        d,
        RowBatch {
            schema: schema.clone(),
            rows,
        },
    )
    .await?;
    sink.flush(d).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_keeps_the_sink_contract() {
    let broker = Broker::start().expect("broker");
    let registry = Registry::start().expect("registry");
    let sink = avro_sink(&broker, &registry.url(), "").await;
    run_contract_suite(
        sink.as_ref(),
        "db",
        "t",
        1,
        "ALTER TABLE t ADD COLUMN x INT",
    )
    .await;
    let subjects = registry.subjects();
    assert_eq!(
        subjects.keys().collect::<Vec<_>>(),
        ["avro_db_t-key", "avro_db_t-value"],
        "TopicNameStrategy subjects of the table's own topic"
    );
    // The contract's second version has the same columns: the same schema, so the registry
    // keeps one version and answers its id again.
    assert_eq!(subjects["avro_db_t-value"].len(), 1, "{subjects:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_column_type_reads_back_through_the_registry() {
    let broker = Broker::start().expect("broker");
    let registry = Registry::start().expect("registry");
    let sink = avro_sink(&broker, &registry.url(), "&enable-tidb-extension=true").await;
    let schema = Arc::new(all_types_schema("db", 4));
    let d = DispatcherId { epoch: 1, seq: 1 };
    sink.open(d, Span::whole_table(schema.table_id), 10)
        .await
        .expect("open");
    let mut rows = all_types_rows(&schema, 20, 1_700_000_000_123);
    let mut del = rows[1].clone();
    del.commit_ts = 21;
    del.kind = RowKind::Delete;
    del.before = del.after.take();
    rows.push(del);
    write(sink.as_ref(), d, &schema, rows.clone())
        .await
        .expect("written");
    let got = read_all(&broker, "avro_db_all_types", 3);
    assert_eq!(got.len(), 3, "two rows and a tombstone: {got:?}");
    let mut seen_delete = false;
    for (_, key, value, ts) in &got {
        let (key_id, key_body) = avro::unframe(key.as_deref().expect("a key")).expect("framed key");
        let key_schema = avro::parse_record_schema(&registry.schema(key_id).expect("key schema"))
            .expect("parses");
        let Datum::Long(id) = avro::decode_record(&key_schema, key_body).expect("key")[0] else {
            panic!("the key is the id")
        };
        let Some(value) = value else {
            assert_eq!(
                (id, *ts),
                (2, Some(21)),
                "the delete of row 2, with its commit ts"
            );
            seen_delete = true;
            continue;
        };
        assert_eq!(*ts, Some(20));
        let (value_id, body) = avro::unframe(value).expect("framed value");
        let value_schema =
            avro::parse_record_schema(&registry.schema(value_id).expect("value schema"))
                .expect("parses");
        let data = avro::decode_record(&value_schema, body).expect("value");
        let n = schema.columns.len();
        assert_eq!(
            data[n..],
            [
                Datum::String("c".into()),
                Datum::Long(20),
                Datum::Long(1_700_000_000_123)
            ]
        );
        let row = &rows[(id - 1) as usize];
        let want = avro::encode_value(
            &schema,
            row,
            AvroOptions {
                tidb_extension: true,
                ..Default::default()
            },
        )
        .expect("encodes")
        .expect("a value");
        assert_eq!(body, want.as_slice(), "row {id} as written");
    }
    assert!(seen_delete);
    assert_eq!(
        registry.subjects().keys().collect::<Vec<_>>(),
        ["avro_db_all_types-key", "avro_db_all_types-value"]
    );
    sink.close(d).await;
}

#[test]
fn golden_avro_schemas_and_bodies_of_every_column_type() {
    let schema = all_types_schema("db", 5);
    let rows = all_types_rows(&schema, (7 << 32) | 1234, 1_700_000_000_123);
    let mut out = String::new();
    for o in [
        AvroOptions::default(),
        AvroOptions {
            tidb_extension: true,
            decimal_as_string: true,
            bigint_unsigned_as_string: true,
        },
    ] {
        out.push_str(&format!("{o:?}\n"));
        out.push_str(&avro::key_schema(&schema, o).expect("key").to_string());
        out.push('\n');
        out.push_str(&avro::value_schema(&schema, o).expect("value").to_string());
        out.push('\n');
        for r in &rows {
            let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            out.push_str(&hex(&avro::encode_key(&schema, r, o).expect("key")));
            out.push('\n');
            out.push_str(&hex(&avro::encode_value(&schema, r, o)
                .expect("value")
                .expect("a value")));
            out.push('\n');
        }
    }
    golden("kafka_all_types_avro.txt", &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_schema_fails_the_dispatcher_clearly() {
    let broker = Broker::start().expect("broker");
    let registry = Registry::start().expect("registry");
    let sink = avro_sink(&broker, &registry.url(), "").await;
    let v1 = Arc::new(simple_schema("db", "t", 9, 1));
    let d = DispatcherId { epoch: 1, seq: 1 };
    sink.open(d, Span::whole_table(v1.table_id), 10)
        .await
        .expect("open");
    write(
        sink.as_ref(),
        d,
        &v1,
        vec![simple_insert(&v1, 1, "a", 11, 0)],
    )
    .await
    .expect("v1 rows");
    // A NOT NULL column added: its field has no default, so BACKWARD refuses the new version.
    let mut v2 = simple_schema("db", "t", 9, 2);
    let mut extra = v2.columns[0].clone();
    extra.name = "required".into();
    extra.nullable = false;
    v2.columns.push(extra);
    let v2 = Arc::new(v2);
    let mut row = simple_insert(&v1, 2, "b", 12, 0);
    row.schema_version = 2;
    if let Some(a) = row.after.as_mut() {
        a.push(sluice_types::Value::Int(5));
    }
    let err = write(sink.as_ref(), d, &v2, vec![row])
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("409") && text.contains("compatib"), "{text}");
    assert!(
        !err.is_retryable(),
        "retrying cannot make it compatible: {text}"
    );
    sink.close(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_and_tables_avro_cannot_take() {
    let broker = Broker::start().expect("broker");
    let registry = Registry::start_with_auth("cdc", "s3cret-pw").expect("registry");
    let host = registry.url().trim_start_matches("http://").to_string();
    let enc = |u: &str| {
        u.replace(':', "%3A")
            .replace('/', "%2F")
            .replace('@', "%40")
    };
    let d = DispatcherId { epoch: 1, seq: 1 };
    let schema = Arc::new(simple_schema("db", "t", 3, 1));
    // The right password: rows go through.
    let good = avro_sink(&broker, &enc(&format!("http://cdc:s3cret-pw@{host}")), "").await;
    good.open(d, Span::whole_table(schema.table_id), 10)
        .await
        .expect("open");
    write(
        good.as_ref(),
        d,
        &schema,
        vec![simple_insert(&schema, 1, "a", 11, 0)],
    )
    .await
    .expect("with auth");
    good.close(d).await;
    // A wrong one: a fatal error that names the fix and not the password.
    let bad = avro_sink(&broker, &enc(&format!("http://cdc:wrong-pw@{host}")), "").await;
    bad.open(d, Span::whole_table(schema.table_id), 10)
        .await
        .expect("open");
    let err = write(
        bad.as_ref(),
        d,
        &schema,
        vec![simple_insert(&schema, 2, "b", 12, 0)],
    )
    .await
    .expect_err("401");
    let text = err.to_string();
    assert!(
        text.contains("401") && text.contains("password") && !text.contains("wrong-pw"),
        "{text}"
    );
    assert!(!err.is_retryable());
    bad.close(d).await;
    // A table without a key, and a table no topic rule covers: refused, each alone.
    let open = Registry::start().expect("registry");
    let rules = vec![DispatchRule {
        matcher: vec!["db.*".into()],
        topic: Some("a_{schema}_{table}".into()),
        ..Default::default()
    }];
    let uri = broker.sink_uri(
        "base",
        &format!("protocol=avro&schema-registry={}", open.url()),
    );
    let sink = open_sink_routed("cf", &uri, &rules, None, None, None)
        .await
        .expect("sink");
    let mut keyless = simple_schema("db", "nokey", 4, 1);
    keyless.key_columns.clear();
    let keyless = Arc::new(keyless);
    let other = Arc::new(simple_schema("other", "t", 5, 1));
    for (n, s, want) in [(2, &keyless, "primary key"), (3, &other, "own topic")] {
        let d = DispatcherId { epoch: 1, seq: n };
        sink.open(d, Span::whole_table(s.table_id), 10)
            .await
            .expect("open");
        let err = write(sink.as_ref(), d, s, vec![simple_insert(s, 1, "a", 11, 0)])
            .await
            .expect_err("refused");
        assert!(
            err.is_table_refusal() && err.to_string().contains(want),
            "{err}"
        );
        sink.close(d).await;
    }
    assert!(
        open.subjects().is_empty(),
        "nothing registered for refused tables"
    );
}
