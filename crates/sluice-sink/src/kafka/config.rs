//! The Kafka sink's configuration: the `kafka://host:port[,host:port…]/topic?…` URI parameters
//! (TiCDC's names, defaults and bounds), parsed into a [`KafkaConfig`] that checks and builds the
//! sink, plus the librdkafka client settings derived from it ([`KafkaConfig::client_settings`]).
//!
//! Invariants:
//! - every parameter is validated here; a bad one is [`SinkError::InvalidUri`] naming it;
//! - a TiCDC parameter Sluice cannot honour yet (Kerberos and OAuth SASL, zstd, the simple-avro
//!   protocol) is refused with "not supported yet", never silently ignored (TLS and SASL:
//!   `kafka::security`);
//! - `protocol=avro` needs `schema-registry`, and the `avro-*` and `schema-registry` parameters
//!   need `protocol=avro`;
//! - secrets (`sasl-password`, a registry URL's password) are masked like every other URI's.

use crate::error::{Result, SinkError};
use crate::uri::{Params, SinkConfig};
use std::time::Duration;
use url::Url;

/// What the Kafka sink writes into each message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KafkaProtocol {
    /// TiCDC's canal-json (one row change or DDL per message).
    CanalJson,
    /// The Debezium JSON envelope (`schema` + `payload`).
    Debezium,
    /// TiCDC's Open Protocol (framed JSON keys and values, resolved events).
    OpenProtocol,
    /// TiCDC's Simple protocol, JSON encoding (BOOTSTRAP, DML, DDL, WATERMARK messages).
    Simple,
    /// Confluent Avro with a schema registry, TiCDC's layout (`codec::avro`): rows only, one
    /// topic per table.
    Avro,
}

impl KafkaProtocol {
    pub fn name(self) -> &'static str {
        match self {
            KafkaProtocol::CanalJson => "canal-json",
            KafkaProtocol::Debezium => "debezium",
            KafkaProtocol::OpenProtocol => "open-protocol",
            KafkaProtocol::Simple => "simple",
            KafkaProtocol::Avro => "avro",
        }
    }
}

/// `compression` (librdkafka's `compression.codec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
}

impl Compression {
    fn codec(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
        }
    }
}

/// `required-acks`: how many replicas acknowledge a produce (TiCDC's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequiredAcks {
    /// `-1`: every in-sync replica (the default; needed for the idempotent producer).
    All,
    /// `1`: the leader only.
    Leader,
    /// `0`: none (a lost message is never noticed).
    None,
}

/// The most a message may be; TiCDC's default `max-message-bytes` (10 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 10 << 20;
/// The default `partition-num` of a topic the sink creates (TiCDC's).
pub const DEFAULT_PARTITION_NUM: u64 = 3;
/// TiCDC's default `dial-timeout`, `read-timeout` and `write-timeout`.
pub const DEFAULT_KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed `kafka://` sink URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `host:port` of each bootstrap broker, in the URI's order.
    pub brokers: Vec<String>,
    /// The topic of the URI's path: every message goes there.
    pub topic: String,
    pub protocol: KafkaProtocol,
    /// `partition-num`: partitions of a topic the sink creates; with an existing topic, at most
    /// this many of its partitions are used (TiCDC's rule). `None`: 3 for a new topic, all of an
    /// existing one.
    pub partition_num: Option<u32>,
    /// `replication-factor` of a topic the sink creates (default 1).
    pub replication_factor: u32,
    /// `max-message-bytes` (default 10 MiB): a larger message fails the dispatcher, clearly.
    pub max_message_bytes: u64,
    /// `auto-create-topic` (default true).
    pub auto_create_topic: bool,
    /// `enable-tidb-extension` (default false): canal-json carries `_tidb.commitTs` and the sink
    /// sends WATERMARK messages; debezium carries the commit ts in `source`.
    pub enable_tidb_extension: bool,
    pub compression: Compression,
    /// `kafka-version` (default 2.4.0): the broker version assumed when it cannot be asked.
    pub kafka_version: String,
    pub required_acks: RequiredAcks,
    /// `dial-timeout`: connecting and metadata requests.
    pub dial_timeout: Duration,
    /// `write-timeout`: how long a message may wait for the broker's acknowledgement.
    pub write_timeout: Duration,
    /// `read-timeout`: socket reads.
    pub read_timeout: Duration,
    /// `kafka-client-id` (default `sluice`).
    pub client_id: String,
    /// `transactional` (default false): exactly-once, each flush one Kafka transaction with
    /// the span's progress (`kafka::txn`).
    pub transactional: bool,
    /// `large-message-handle-option=claim-check` with `claim-check-storage-uri`: where a
    /// message over `max-message-bytes` is stored (`kafka::claim`); `None`: it fails clearly.
    pub claim_check: Option<Box<crate::uri::StorageConfig>>,
    /// `schema-registry` (`protocol=avro`): the Confluent-compatible registry's URL.
    pub schema_registry: Option<Url>,
    /// `debezium-disable-schema` (default false, TiCDC's parameter): `protocol=debezium` messages
    /// without their `schema` part (Kafka Connect's `schemas.enable=false`; Flink's
    /// `debezium-json` reads them by default), about a fifth of their size.
    pub debezium_disable_schema: bool,
    /// `avro-decimal-handling-mode=string` (default `precise`: Avro's decimal logical type).
    pub avro_decimal_as_string: bool,
    /// `avro-bigint-unsigned-handling-mode=string` (default `long`: the value's 64 bits).
    pub avro_bigint_unsigned_as_string: bool,
    /// TLS and SASL towards the brokers (`kafka::security`).
    pub security: super::security::Security,
}

/// Splits `kafka://a:1,b:2/topic?q` into the broker list and a URI with one placeholder host
/// that [`Url`] can parse (it refuses a comma-separated authority).
pub(crate) fn split_brokers(raw: &str) -> Option<(Vec<String>, String)> {
    let rest = raw.strip_prefix("kafka://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let brokers = rest[..end]
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect();
    Some((brokers, format!("kafka://brokers{}", &rest[end..])))
}

fn check_broker(b: &str, masked: &str) -> Result<()> {
    let bad = |why: &str| SinkError::invalid_uri(&masked, format!("broker {b:?}: {why}"));
    if b.contains('@') {
        return Err(bad(
            "user names and passwords in the address are not supported (use sasl-user=…&sasl-password=…)",
        ));
    }
    let (host, port) = b
        .rsplit_once(':')
        .ok_or_else(|| bad("expected host:port"))?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad("expected host:port with a port in 1..=65535"));
    }
    Ok(())
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl KafkaConfig {
    pub(crate) fn from_uri(
        brokers: Vec<String>,
        url: &Url,
        p: &mut Params<'_>,
        masked: &str,
    ) -> Result<KafkaConfig> {
        if brokers.is_empty() {
            return Err(SinkError::invalid_uri(
                &masked,
                "missing broker address (kafka://host:port/topic)",
            ));
        }
        for b in &brokers {
            check_broker(b, masked)?;
        }
        let topic = url.path().trim_start_matches('/').to_string();
        if topic.is_empty() {
            return Err(SinkError::invalid_uri(
                &masked,
                "missing topic (kafka://host:port/topic)",
            ));
        }
        if !valid_topic(&topic) {
            return Err(SinkError::invalid_uri(
                &masked,
                format!("topic {topic:?} is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"),
            ));
        }
        Ok(KafkaConfig {
            security: super::security::Security::from_params(p)?,
            brokers,
            topic,
            protocol: protocol(p)?,
            partition_num: match p.take("partition-num") {
                None => None,
                Some(v) => Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| {
                            p.bad("partition-num", &v, "expected an integer within 1..=10000")
                        })?,
                ),
            },
            replication_factor: p.uint("replication-factor", 1, 1, 32)? as u32,
            max_message_bytes: p.uint(
                "max-message-bytes",
                DEFAULT_MAX_MESSAGE_BYTES,
                1024,
                1 << 30,
            )?,
            auto_create_topic: p.bool("auto-create-topic", true)?,
            enable_tidb_extension: p.bool("enable-tidb-extension", false)?,
            compression: compression(p)?,
            kafka_version: kafka_version(p)?,
            required_acks: required_acks(p)?,
            dial_timeout: timeout(p, "dial-timeout")?,
            write_timeout: timeout(p, "write-timeout")?,
            read_timeout: timeout(p, "read-timeout")?,
            client_id: client_id(p)?,
            transactional: p.bool("transactional", false)?,
            claim_check: claim_check(p)?,
            schema_registry: schema_registry(p)?,
            debezium_disable_schema: p.bool("debezium-disable-schema", false)?,
            avro_decimal_as_string: mode(p, "avro-decimal-handling-mode", "precise")?,
            avro_bigint_unsigned_as_string: mode(p, "avro-bigint-unsigned-handling-mode", "long")?,
        })
        .and_then(|c: KafkaConfig| c.checked(p))
    }

    /// Cross-parameter rules: claim-check stores canal-json messages with the TiDB extension;
    /// avro needs a registry, and the registry and the avro modes need avro.
    fn checked(self, p: &Params<'_>) -> Result<KafkaConfig> {
        let avro = self.protocol == KafkaProtocol::Avro;
        if avro && self.schema_registry.is_none() {
            return Err(p.bad(
                "protocol",
                "avro",
                "protocol=avro needs schema-registry=http://host:port (a Confluent-compatible schema registry)",
            ));
        }
        if !avro && self.schema_registry.is_some() {
            return Err(p.bad(
                "schema-registry",
                "",
                "only protocol=avro uses a schema registry",
            ));
        }
        if !avro && (self.avro_decimal_as_string || self.avro_bigint_unsigned_as_string) {
            return Err(p.bad(
                "protocol",
                self.protocol.name(),
                "the avro-*-handling-mode parameters need protocol=avro",
            ));
        }
        if self.debezium_disable_schema && self.protocol != KafkaProtocol::Debezium {
            return Err(p.bad(
                "debezium-disable-schema",
                "true",
                "only protocol=debezium has a schema part to leave out",
            ));
        }
        if self.claim_check.is_some()
            && !(self.protocol == KafkaProtocol::CanalJson && self.enable_tidb_extension)
        {
            return Err(p.bad(
                "large-message-handle-option",
                "claim-check",
                "claim-check needs protocol=canal-json&enable-tidb-extension=true (the reference travels in _tidb)",
            ));
        }
        Ok(self)
    }

    /// The librdkafka settings of the producer: the idempotent producer whenever every replica
    /// acknowledges (per-partition order and no duplicate across the client's own retries).
    pub fn client_settings(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| d.as_millis().to_string();
        let mut s = self.connection_settings();
        s.extend([
            ("client.id", self.client_id.clone()),
            ("compression.codec", self.compression.codec().to_string()),
            // Room for the largest message plus the batch's framing.
            (
                "message.max.bytes",
                (self.max_message_bytes + 4096).to_string(),
            ),
            ("socket.connection.setup.timeout.ms", ms(self.dial_timeout)),
            (
                "socket.timeout.ms",
                ms(self.read_timeout.max(Duration::from_secs(10))),
            ),
            ("message.timeout.ms", ms(self.write_timeout)),
            ("broker.version.fallback", self.kafka_version.clone()),
            // 10 ms, not librdkafka's 5: its broker thread polls far less (Debezium catch-up:
            // 3.2 CPU s instead of 3.6 for 300k rows, the same wall time; docs/figures).
            ("linger.ms", "10".to_string()),
        ]);
        match self.required_acks {
            RequiredAcks::All => {
                s.push(("acks", "all".into()));
                s.push(("enable.idempotence", "true".into()));
            }
            RequiredAcks::Leader => s.push(("acks", "1".into())),
            RequiredAcks::None => s.push(("acks", "0".into())),
        }
        s
    }

    /// The settings every client of this sink shares, consumers too: the brokers, TLS, SASL.
    pub fn connection_settings(&self) -> Vec<(&'static str, String)> {
        let mut s = vec![("bootstrap.servers", self.brokers.join(","))];
        s.extend(self.security.client_settings());
        s
    }
}

fn claim_check(p: &mut Params<'_>) -> Result<Option<Box<crate::uri::StorageConfig>>> {
    let option = p
        .take("large-message-handle-option")
        .unwrap_or_else(|| "none".into());
    let uri = p.take("claim-check-storage-uri");
    match (option.as_str(), uri) {
        ("none", None) => Ok(None),
        ("none", Some(u)) => Err(p.bad(
            "claim-check-storage-uri",
            &u,
            "needs large-message-handle-option=claim-check",
        )),
        ("claim-check", None) => Err(p.bad(
            "large-message-handle-option",
            &option,
            "needs claim-check-storage-uri=file://… or s3://…",
        )),
        ("claim-check", Some(u)) => match crate::uri::SinkUri::parse(&u).map(|x| x.config) {
            Ok(SinkConfig::Storage(c)) => Ok(Some(Box::new(c))),
            Ok(_) => Err(p.bad(
                "claim-check-storage-uri",
                &u,
                "must be a file:// or s3:// URI",
            )),
            Err(e) => Err(p.bad("claim-check-storage-uri", &u, &e.to_string())),
        },
        ("handle-key-only", _) => Err(p.bad(
            "large-message-handle-option",
            &option,
            "not supported yet (use claim-check)",
        )),
        (_, _) => Err(p.bad(
            "large-message-handle-option",
            &option,
            "expected none or claim-check",
        )),
    }
}

fn protocol(p: &mut Params<'_>) -> Result<KafkaProtocol> {
    match p.take("protocol") {
        None => Err(p.bad(
            "protocol",
            "",
            "required for kafka: canal-json, debezium, open-protocol, simple or avro",
        )),
        Some(v) => match v.as_str() {
            "canal-json" => Ok(KafkaProtocol::CanalJson),
            "debezium" => Ok(KafkaProtocol::Debezium),
            "open-protocol" | "default" => Ok(KafkaProtocol::OpenProtocol),
            "simple" => Ok(KafkaProtocol::Simple),
            "avro" => Ok(KafkaProtocol::Avro),
            "simple-avro" | "canal" | "maxwell" | "craft" => Err(p.bad(
                "protocol",
                &v,
                "not supported yet (use canal-json, debezium, open-protocol, simple or avro)",
            )),
            _ => Err(p.bad(
                "protocol",
                &v,
                "expected canal-json, debezium, open-protocol, simple or avro",
            )),
        },
    }
}

/// `schema-registry`: an `http://` or `https://` URL.
fn schema_registry(p: &mut Params<'_>) -> Result<Option<Url>> {
    let Some(v) = p.take("schema-registry") else {
        return Ok(None);
    };
    match Url::parse(&v) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(Some(u)),
        _ => Err(p.bad(
            "schema-registry",
            &crate::uri::mask_uri(&v),
            "expected http://host:port or https://user:password@host:port",
        )),
    }
}

/// An avro handling mode: `false` for `default_mode`, `true` for `string`.
fn mode(p: &mut Params<'_>, key: &str, default_mode: &str) -> Result<bool> {
    match p.take(key) {
        None => Ok(false),
        Some(v) if v == default_mode => Ok(false),
        Some(v) if v == "string" => Ok(true),
        Some(v) => Err(p.bad(key, &v, &format!("expected {default_mode} or string"))),
    }
}

fn compression(p: &mut Params<'_>) -> Result<Compression> {
    match p.take("compression") {
        None => Ok(Compression::None),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Err(p.bad(
                "compression",
                &v,
                "not supported yet (use gzip, snappy or lz4)",
            )),
            _ => Err(p.bad("compression", &v, "expected none, gzip, snappy or lz4")),
        },
    }
}

fn kafka_version(p: &mut Params<'_>) -> Result<String> {
    let v = p
        .take("kafka-version")
        .unwrap_or_else(|| "2.4.0".to_string());
    let parts: Vec<&str> = v.split('.').collect();
    if (2..=4).contains(&parts.len()) && parts.iter().all(|x| x.parse::<u32>().is_ok()) {
        Ok(v)
    } else {
        Err(p.bad("kafka-version", &v, "expected a version like 2.4.0"))
    }
}

fn required_acks(p: &mut Params<'_>) -> Result<RequiredAcks> {
    match p.take("required-acks") {
        None => Ok(RequiredAcks::All),
        Some(v) => match v.as_str() {
            "-1" | "all" => Ok(RequiredAcks::All),
            "1" => Ok(RequiredAcks::Leader),
            "0" => Ok(RequiredAcks::None),
            _ => Err(p.bad("required-acks", &v, "expected -1, 1 or 0")),
        },
    }
}

fn timeout(p: &mut Params<'_>, k: &str) -> Result<Duration> {
    p.duration(
        k,
        DEFAULT_KAFKA_TIMEOUT,
        Duration::from_millis(100),
        Duration::from_secs(600),
    )
}

fn client_id(p: &mut Params<'_>) -> Result<String> {
    let v = p
        .take("kafka-client-id")
        .unwrap_or_else(|| "sluice".to_string());
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Ok(v)
    } else {
        Err(p.bad(
            "kafka-client-id",
            &v,
            "expected letters, digits, '.', '_' or '-'",
        ))
    }
}
