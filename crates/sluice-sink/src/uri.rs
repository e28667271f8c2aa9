//! Sink URIs: parsing and validating every parameter into a typed config, with clear errors, and
//! masking secrets.
//!
//! Invariants:
//! - an unknown scheme, an unknown parameter, a missing bucket or a value out of range is an
//!   [`SinkError::InvalidUri`] (fatal) naming the offending part;
//! - no `Display` or `Debug` of a URI or config prints a password or secret key: secrets live in
//!   [`Secret`], and errors quote the masked URI ([`mask_uri`]).

use crate::error::{Result, SinkError};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use url::Url;

pub use crate::kafka::config::*;
pub use crate::mysql::config::*;
pub use crate::storage::config::*;

/// A string that never prints.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("******")
    }
}
impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("******")
    }
}

/// Query parameters whose values are secrets.
pub const SECRET_PARAMS: &[&str] = &[
    "secret-access-key",
    "access-key",
    "password",
    "session-token",
    "sasl-password",
    "sasl-gssapi-password",
    "sasl-oauth-client-secret",
];

/// The URI with the userinfo password and every secret parameter replaced by `******`. Works
/// on strings that do not parse, too (best effort), so errors can quote it.
pub fn mask_uri(raw: &str) -> String {
    // A Kafka URI lists several brokers in its authority: mask the rest, then put them back.
    if let Some((brokers, rest)) = crate::kafka::config::split_brokers(raw) {
        if !brokers.iter().any(|b| b.contains('@')) {
            let masked = mask_url_text(&rest);
            return masked.replacen(
                "kafka://brokers",
                &format!("kafka://{}", brokers.join(",")),
                1,
            );
        }
    }
    mask_url_text(raw)
}

fn mask_url_text(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("******"));
            }
            let pairs: Vec<(String, String)> = u
                .query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            if !pairs.is_empty() {
                let mut q = url::form_urlencoded::Serializer::new(String::new());
                for (k, v) in &pairs {
                    if SECRET_PARAMS.contains(&k.as_str()) {
                        q.append_pair(k, "******");
                    } else if v.contains("://") {
                        // A URL inside a parameter (schema-registry, claim-check-storage-uri)
                        // may carry its own password.
                        q.append_pair(k, &mask_url_text(v));
                    } else {
                        q.append_pair(k, v);
                    }
                }
                u.set_query(Some(&q.finish()));
            }
            u.to_string()
        }
        Err(_) => {
            // Cut everything after '?' and any userinfo: nothing secret survives.
            let no_query = raw.split('?').next().unwrap_or_default();
            match (no_query.find("://"), no_query.rfind('@')) {
                (Some(s), Some(at)) if at > s => {
                    format!("{}://******@{}", &no_query[..s], &no_query[at + 1..])
                }
                _ => no_query.to_string(),
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkConfig {
    Storage(StorageConfig),
    Mysql(MysqlConfig),
    Kafka(KafkaConfig),
    Blackhole,
}

/// A parsed sink URI: the config plus the masked text for messages.
#[derive(Clone, PartialEq, Eq)]
pub struct SinkUri {
    pub config: SinkConfig,
    masked: String,
}

impl fmt::Display for SinkUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked)
    }
}
impl fmt::Debug for SinkUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkUri({}, {:?})", self.masked, self.config)
    }
}

pub(crate) struct Params<'a> {
    map: BTreeMap<String, String>,
    uri: &'a str,
}

impl Params<'_> {
    pub(crate) fn take(&mut self, k: &str) -> Option<String> {
        self.map.remove(k)
    }
    pub(crate) fn bad(&self, k: &str, v: &str, why: &str) -> SinkError {
        let shown = if SECRET_PARAMS.contains(&k) {
            "******"
        } else {
            v
        };
        SinkError::invalid_uri(&self.uri, format!("parameter {k}={shown}: {why}"))
    }
    pub(crate) fn bool(&mut self, k: &str, default: bool) -> Result<bool> {
        match self.take(k) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                _ => Err(self.bad(k, &v, "expected true or false")),
            },
        }
    }
    pub(crate) fn uint(&mut self, k: &str, default: u64, min: u64, max: u64) -> Result<u64> {
        match self.take(k) {
            None => Ok(default),
            Some(v) => {
                let n: u64 = v
                    .parse()
                    .map_err(|_| self.bad(k, &v, "expected an integer"))?;
                if n < min || n > max {
                    return Err(self.bad(k, &v, &format!("must be within {min}..={max}")));
                }
                Ok(n)
            }
        }
    }
    pub(crate) fn duration(
        &mut self,
        k: &str,
        default: Duration,
        min: Duration,
        max: Duration,
    ) -> Result<Duration> {
        match self.take(k) {
            None => Ok(default),
            Some(v) => {
                let d = parse_duration(&v)
                    .ok_or_else(|| self.bad(k, &v, "expected a duration like 5s, 100ms or 1m"))?;
                if d < min || d > max {
                    return Err(self.bad(k, &v, &format!("must be within {min:?}..={max:?}")));
                }
                Ok(d)
            }
        }
    }
    pub(crate) fn finish(self) -> Result<()> {
        if let Some(k) = self.map.keys().next() {
            return Err(SinkError::invalid_uri(
                &self.uri,
                format!("unknown parameter {k}"),
            ));
        }
        Ok(())
    }
}

/// Parses `100ms`, `5s`, `1m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 = num.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

impl SinkUri {
    pub fn parse(raw: &str) -> Result<SinkUri> {
        let masked = mask_uri(raw);
        // Kafka lists several brokers in the authority, which a URL cannot hold.
        let (brokers, raw) = match crate::kafka::config::split_brokers(raw) {
            Some((b, rest)) => (b, rest),
            None => (Vec::new(), raw.to_string()),
        };
        let url = Url::parse(&raw)
            .map_err(|e| SinkError::invalid_uri(&masked, format!("not a URI: {e}")))?;
        let mut map = BTreeMap::new();
        for (k, v) in url.query_pairs() {
            if map.insert(k.to_string(), v.to_string()).is_some() {
                return Err(SinkError::invalid_uri(
                    &masked,
                    format!("parameter {k} given twice"),
                ));
            }
        }
        let mut p = Params { map, uri: &masked };
        let config = match url.scheme() {
            "file" | "s3" => SinkConfig::Storage(StorageConfig::from_uri(&url, &mut p, &masked)?),
            "mysql" => SinkConfig::Mysql(MysqlConfig::from_uri(&url, &mut p, &masked)?),
            "kafka" => SinkConfig::Kafka(KafkaConfig::from_uri(brokers, &url, &mut p, &masked)?),
            "blackhole" => SinkConfig::Blackhole,
            other => {
                return Err(SinkError::invalid_uri(
                    &masked,
                    format!(
                        "unknown scheme {other:?} (expected file, s3, mysql, kafka or blackhole)"
                    ),
                ))
            }
        };
        p.finish()?;
        Ok(SinkUri { config, masked })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(uri: &str) -> String {
        match SinkUri::parse(uri) {
            Ok(u) => panic!("{uri} parsed as {u:?}"),
            Err(e) => {
                assert!(!e.is_retryable());
                e.to_string()
            }
        }
    }

    #[test]
    fn bad_uris_say_what_is_wrong() {
        assert!(err("pulsar://x/y").contains("unknown scheme \"pulsar\""));
        assert!(err("kafka://127.0.0.1:9092/t").contains("protocol"));
        assert!(err("kafka://127.0.0.1:9092/?protocol=canal-json").contains("missing topic"));
        assert!(err("kafka:///t?protocol=canal-json").contains("missing broker"));
        assert!(err("kafka://host/t?protocol=canal-json").contains("host:port"));
        assert!(err("kafka://h:9092/t?protocol=avro").contains("schema-registry"));
        assert!(err("kafka://h:9092/t?protocol=simple-avro").contains("not supported yet"));
        assert!(
            err("kafka://h:9092/t?protocol=canal-json&schema-registry=http://r:1")
                .contains("only protocol=avro")
        );
        assert!(
            err("kafka://h:9092/t?protocol=avro&schema-registry=ftp://r:1")
                .contains("http://host:port")
        );
        assert!(err("kafka://h:9092/t?protocol=avro&schema-registry=http://r:1&avro-decimal-handling-mode=exact").contains("precise or string"));
        assert!(err(
            "kafka://h:9092/t?protocol=debezium&avro-bigint-unsigned-handling-mode=string"
        )
        .contains("need protocol=avro"));
        assert!(
            err("kafka://h:9092/t?protocol=canal-json&debezium-disable-schema=true")
                .contains("only protocol=debezium")
        );
        assert!(
            err("kafka://h:9092/t?protocol=debezium&debezium-disable-schema=yes")
                .contains("debezium-disable-schema")
        );
        assert!(err("kafka://h:9092/t?protocol=canal-json&compression=zstd")
            .contains("not supported yet"));
        assert!(err("kafka://h:9092/t?protocol=canal-json&sasl-mechanism=GSSAPI&sasl-user=u&sasl-password=p")
            .contains("not supported yet"));
        assert!(
            err("kafka://h:9092/t?protocol=canal-json&partition-num=0").contains("partition-num=0")
        );
        assert!(
            err("kafka://h:9092/t?protocol=canal-json&required-acks=2").contains("required-acks=2")
        );
        assert!(err("kafka://h:9092/bad%20topic?protocol=canal-json").contains("topic"));
        assert!(err("s3:///prefix").contains("missing bucket"));
        assert!(err("file:///tmp/x?flush-interval=abc").contains("flush-interval=abc"));
        assert!(err("file:///tmp/x?flush-interval=10ms").contains("must be within"));
        assert!(err("file:///tmp/x?max-buffered-bytes=100").contains("must be within"));
        assert!(err("file:///tmp/x?file-index-width=3").contains("file-index-width=3"));
        assert!(err("file:///tmp/x?protocol=avro").contains("protocol=avro"));
        assert!(err("file:///tmp/x?nope=1").contains("unknown parameter nope"));
        assert!(err("mysql://u:p@h/?worker-count=0").contains("worker-count=0"));
        assert!(err("mysql:///").contains("missing host"));
        assert!(err("not a uri").contains("not a URI"));
    }

    #[test]
    fn kafka_uris_list_brokers_and_derive_the_client_settings() {
        let u = SinkUri::parse("kafka://10.0.0.1:9092,10.0.0.2:9093/cdc?protocol=debezium&required-acks=1&compression=lz4")
            .expect("parses");
        assert_eq!(u.to_string(), "kafka://10.0.0.1:9092,10.0.0.2:9093/cdc?protocol=debezium&required-acks=1&compression=lz4");
        let SinkConfig::Kafka(c) = u.config else {
            panic!("kafka")
        };
        assert_eq!(c.brokers, ["10.0.0.1:9092", "10.0.0.2:9093"]);
        assert_eq!(
            (c.topic.as_str(), c.protocol),
            ("cdc", KafkaProtocol::Debezium)
        );
        assert_eq!(
            (c.partition_num, c.max_message_bytes, c.auto_create_topic),
            (None, 10 << 20, true)
        );
        let settings: BTreeMap<_, _> = c.client_settings().into_iter().collect();
        assert_eq!(settings["bootstrap.servers"], "10.0.0.1:9092,10.0.0.2:9093");
        assert_eq!(settings["acks"], "1");
        assert_eq!(settings["compression.codec"], "lz4");
        assert!(
            !settings.contains_key("enable.idempotence"),
            "idempotence needs acks=all"
        );
        let SinkConfig::Kafka(d) = SinkUri::parse("kafka://h:1/t?protocol=canal-json")
            .expect("parses")
            .config
        else {
            panic!("kafka")
        };
        let d: BTreeMap<_, _> = d.client_settings().into_iter().collect();
        assert_eq!(
            (d["acks"].as_str(), d["enable.idempotence"].as_str()),
            ("all", "true")
        );
        let raw = "kafka://a:1,b:2/t?protocol=canal-json&sasl-user=u&sasl-password=hunter2pw";
        assert!(!mask_uri(raw).contains("hunter2pw"), "{}", mask_uri(raw));
        let u = SinkUri::parse(raw).expect("SASL PLAIN parses");
        assert!(!u.to_string().contains("hunter2pw"), "{u}");
        assert!(!format!("{u:?}").contains("hunter2pw"), "{u:?}");
        let e = SinkUri::parse(&format!("{raw}&sasl-mechanism=gssapi"))
            .expect_err("GSSAPI is not supported yet");
        assert!(
            e.to_string().contains("not supported yet") && !e.to_string().contains("hunter2pw"),
            "{e}"
        );
        let raw =
            "kafka://a:1/t?protocol=avro&schema-registry=https%3A%2F%2Fu%3Ahunter2pw%40reg%3A8081";
        assert!(!mask_uri(raw).contains("hunter2pw"), "{}", mask_uri(raw));
        let SinkConfig::Kafka(k) = SinkUri::parse(raw).expect("parses").config else {
            panic!("kafka")
        };
        let reg = k.schema_registry.expect("a registry");
        assert_eq!((reg.username(), reg.password()), ("u", Some("hunter2pw")));
        let bad = "kafka://a:1/t?protocol=avro&schema-registry=ftp%3A%2F%2Fu%3Ahunter2pw%40reg";
        let e = SinkUri::parse(bad).expect_err("not http");
        assert!(!e.to_string().contains("hunter2pw"), "{e}");
    }

    #[test]
    fn defaults_follow_ticdc() {
        let u = SinkUri::parse("file:///tmp/out").expect("parses");
        let SinkConfig::Storage(c) = u.config else {
            panic!("storage")
        };
        assert_eq!(c.flush_interval, Duration::from_secs(5));
        assert_eq!(c.file_size, 64 << 20);
        assert_eq!(c.max_buffered_bytes, 128 << 20, "Sluice's own bound");
        assert_eq!(c.file_index_width, 20);
        assert_eq!(c.date_separator, DateSeparator::Day);
        assert_eq!(c.protocol, Protocol::Csv);
        assert_eq!(c.csv, CsvConfig::default());
    }

    #[test]
    fn secrets_never_print() {
        let raw = "s3://b/p?endpoint=http://127.0.0.1:9&access-key=AKIDSECRET1&secret-access-key=TOPSECRET2&force-path-style=true";
        let u = SinkUri::parse(raw).expect("parses");
        for shown in [u.to_string(), format!("{u:?}")] {
            assert!(
                !shown.contains("TOPSECRET2") && !shown.contains("AKIDSECRET1"),
                "{shown}"
            );
        }
        let m = SinkUri::parse("mysql://root:hunter2pw@127.0.0.1:3306/?worker-count=2")
            .expect("parses");
        for shown in [m.to_string(), format!("{m:?}")] {
            assert!(!shown.contains("hunter2pw"), "{shown}");
        }
        let SinkConfig::Mysql(c) = &m.config else {
            panic!("mysql")
        };
        assert_eq!(c.password.expose(), "hunter2pw");
        assert_eq!(c.worker_count, 2);
        assert_eq!(
            (c.timeout, c.read_timeout),
            (DEFAULT_DOWNSTREAM_TIMEOUT, DEFAULT_DOWNSTREAM_TIMEOUT)
        );
        let t = SinkUri::parse("mysql://u@h/?read-timeout=30s&timeout=5s").expect("parses");
        let SinkConfig::Mysql(t) = t.config else {
            panic!("mysql")
        };
        assert_eq!(
            (t.timeout, t.read_timeout),
            (Duration::from_secs(5), Duration::from_secs(30))
        );
        let e = SinkUri::parse("mysql://u@h/?read-timeout=1ms").expect_err("too short");
        assert!(e.to_string().contains("read-timeout"), "{e}");
        let e = SinkUri::parse("mysql://root:hunter2pw@127.0.0.1/?max-txn-row=x").expect_err("bad");
        assert!(!e.to_string().contains("hunter2pw"), "{e}");
        let e = SinkUri::parse("s3://b/p?secret-access-key=TOPSECRET2&zzz=1").expect_err("bad");
        assert!(!e.to_string().contains("TOPSECRET2"), "{e}");
    }
}
