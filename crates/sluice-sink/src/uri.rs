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
use std::path::PathBuf;
use std::time::Duration;
use url::Url;

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
];

/// The URI with the userinfo password and every secret parameter replaced by `******`. Works
/// on strings that do not parse, too (best effort), so errors can quote it.
pub fn mask_uri(raw: &str) -> String {
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

/// Which encoding the storage sink writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Csv,
    CanalJson,
}

impl Protocol {
    pub fn extension(self) -> &'static str {
        match self {
            Protocol::Csv => "csv",
            Protocol::CanalJson => "json",
        }
    }
}

/// `date-separator`: how data files are bucketed by date under a table version directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DateSeparator {
    None,
    Year,
    Month,
    Day,
}

/// How binary values are written in csv (`binary-encoding-method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryEncoding {
    Base64,
    Hex,
}

/// csv options (TiCDC's `[sink.csv]` keys, given as URI parameters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvConfig {
    /// `delimiter` (default `,`; 1 to 3 characters).
    pub delimiter: String,
    /// `quote` (default `"`; empty for no quoting).
    pub quote: String,
    /// `null` (default `\N`).
    pub null: String,
    /// `include-commit-ts` (default false).
    pub include_commit_ts: bool,
    /// `output-old-value` (default false): an update becomes a `D` row with the old values then an
    /// `I` row with the new ones.
    pub output_old_value: bool,
    /// `binary-encoding-method` (default base64).
    pub binary_encoding: BinaryEncoding,
}

impl Default for CsvConfig {
    fn default() -> Self {
        CsvConfig {
            delimiter: ",".into(),
            quote: "\"".into(),
            null: "\\N".into(),
            include_commit_ts: false,
            output_old_value: false,
            binary_encoding: BinaryEncoding::Base64,
        }
    }
}

/// Where the storage sink writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageLocation {
    Local(PathBuf),
    S3 {
        bucket: String,
        prefix: String,
        endpoint: Option<String>,
        region: String,
        access_key: Option<Secret>,
        secret_access_key: Option<Secret>,
        force_path_style: bool,
    },
}

/// Defaults and bounds of the storage sink (TiCDC's names and values).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(5);
pub const MIN_FLUSH_INTERVAL: Duration = Duration::from_millis(100);
pub const MAX_FLUSH_INTERVAL: Duration = Duration::from_secs(600);
pub const DEFAULT_FILE_SIZE: u64 = 64 << 20;
pub const MIN_FILE_SIZE: u64 = 1 << 10;
pub const MAX_FILE_SIZE: u64 = 512 << 20;
pub const DEFAULT_FILE_INDEX_WIDTH: usize = 20;
pub const MIN_FILE_INDEX_WIDTH: usize = 6;
pub const MAX_FILE_INDEX_WIDTH: usize = 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    pub location: StorageLocation,
    /// `protocol` (csv | canal-json; default csv).
    pub protocol: Protocol,
    /// `date-separator` (none | year | month | day; default day).
    pub date_separator: DateSeparator,
    /// `file-index-width` (6..=20; default 20).
    pub file_index_width: usize,
    /// `flush-interval` (100ms..10m; default 5s).
    pub flush_interval: Duration,
    /// `file-size` in bytes (1KiB..512MiB; default 64MiB): a buffer this large is flushed.
    pub file_size: u64,
    /// `enable-table-across-nodes` (default false): dispatcher ids in every file name. Without
    /// it, ids are still used for any dispatcher whose span is not the whole table.
    pub table_across_nodes: bool,
    /// `enable-partition-separator` (default true): rows of a partitioned table go into one
    /// directory per partition (`<ver>/<partition>/…`, the partition's 0-based position).
    pub partition_separator: bool,
    /// `enable-tidb-extension` (canal-json; default false): adds `_tidb.commitTs`.
    pub tidb_extension: bool,
    pub csv: CsvConfig,
}

/// Defaults of the MySQL sink.
pub const DEFAULT_WORKER_COUNT: usize = 16;
/// Default `timeout` and `read-timeout` of the MySQL sink (TiCDC's: 2 minutes).
pub const DEFAULT_DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_WORKER_COUNT: usize = 1024;
/// Default `max-txn-row`: 512, not TiCDC's 256: against MariaDB the per-transaction cost
/// dominates small transactions (docs/sinks.md, Benchmark).
pub const DEFAULT_MAX_TXN_ROW: usize = 512;
pub const MAX_MAX_TXN_ROW: usize = 65_536;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlConfig {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Secret,
    /// `worker-count` (default 16): parallel connections; rows are routed to workers by key.
    pub worker_count: usize,
    /// `max-txn-row` (default 512; TiCDC's is 256): rows per downstream transaction (and per
    /// multi-row statement, within the 65,535 placeholders a statement may bind).
    pub max_txn_row: usize,
    /// `safe-mode` (default true in Sluice): inserts and updates are written as `REPLACE`, so a
    /// replay from the checkpoint converges to the upstream state.
    pub safe_mode: bool,
    /// `transaction-atomicity` (`none` | `table`; default none): with `table`, the rows of one
    /// upstream transaction in one span are applied in one downstream transaction (on one worker).
    pub table_atomicity: bool,
    /// `force-replicate` (default false): accept tables without a primary or not-null unique key
    /// (replays may then duplicate rows; see docs/sinks.md).
    pub force_replicate: bool,
    /// `downstream-fence` (default true): every transaction of rows checks, inside the
    /// downstream, that its dispatcher still holds its span ([`crate::mysql::fence`]), so a
    /// paused node's transaction cannot commit behind its successor's writes.
    pub downstream_fence: bool,
    /// `max-retries` (default 8) and the first backoff (`retry-backoff`, default 100ms, doubling,
    /// capped at 10s) for retryable downstream errors.
    pub max_retries: u32,
    pub retry_backoff: Duration,
    /// `timeout` (default 2m, TiCDC's name): the longest wait for a downstream connection.
    pub timeout: Duration,
    /// `read-timeout` (default 2m, TiCDC's name): the longest a downstream statement or
    /// transaction may go unanswered; it is then killed on the server (`KILL CONNECTION`, so it
    /// cannot commit later, behind newer writes) and retried like any retryable error.
    pub read_timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkConfig {
    Storage(StorageConfig),
    Mysql(MysqlConfig),
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

struct Params<'a> {
    map: BTreeMap<String, String>,
    uri: &'a str,
}

impl Params<'_> {
    fn take(&mut self, k: &str) -> Option<String> {
        self.map.remove(k)
    }
    fn bad(&self, k: &str, v: &str, why: &str) -> SinkError {
        let shown = if SECRET_PARAMS.contains(&k) {
            "******"
        } else {
            v
        };
        SinkError::invalid_uri(&self.uri, format!("parameter {k}={shown}: {why}"))
    }
    fn bool(&mut self, k: &str, default: bool) -> Result<bool> {
        match self.take(k) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                _ => Err(self.bad(k, &v, "expected true or false")),
            },
        }
    }
    fn uint(&mut self, k: &str, default: u64, min: u64, max: u64) -> Result<u64> {
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
    fn duration(
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
    fn finish(self) -> Result<()> {
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
        let url = Url::parse(raw)
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
            "file" | "s3" => SinkConfig::Storage(parse_storage(&url, &mut p, &masked)?),
            "mysql" => SinkConfig::Mysql(parse_mysql(&url, &mut p, &masked)?),
            "blackhole" => SinkConfig::Blackhole,
            other => {
                return Err(SinkError::invalid_uri(
                    &masked,
                    format!("unknown scheme {other:?} (expected file, s3, mysql or blackhole)"),
                ))
            }
        };
        p.finish()?;
        Ok(SinkUri { config, masked })
    }
}

fn parse_storage(url: &Url, p: &mut Params<'_>, masked: &str) -> Result<StorageConfig> {
    let location = if url.scheme() == "file" {
        if url.host_str().is_some_and(|h| !h.is_empty()) {
            return Err(SinkError::invalid_uri(
                &masked,
                "file URIs take an absolute path: file:///path",
            ));
        }
        let path = url.path();
        if path.is_empty() || path == "/" {
            return Err(SinkError::invalid_uri(&masked, "missing path"));
        }
        StorageLocation::Local(PathBuf::from(path))
    } else {
        let bucket = url.host_str().unwrap_or_default().to_string();
        if bucket.is_empty() {
            return Err(SinkError::invalid_uri(
                &masked,
                "missing bucket: expected s3://bucket/prefix",
            ));
        }
        StorageLocation::S3 {
            bucket,
            prefix: url.path().trim_matches('/').to_string(),
            endpoint: p.take("endpoint"),
            region: p.take("region").unwrap_or_else(|| "us-east-1".into()),
            access_key: p.take("access-key").map(Secret),
            secret_access_key: p.take("secret-access-key").map(Secret),
            force_path_style: p.bool("force-path-style", false)?,
        }
    };
    let protocol = match p.take("protocol").as_deref() {
        None | Some("csv") => Protocol::Csv,
        Some("canal-json") => Protocol::CanalJson,
        Some(other) => return Err(p.bad("protocol", other, "expected csv or canal-json")),
    };
    let date_separator = match p.take("date-separator").as_deref() {
        None | Some("day") => DateSeparator::Day,
        Some("none") => DateSeparator::None,
        Some("year") => DateSeparator::Year,
        Some("month") => DateSeparator::Month,
        Some(other) => {
            return Err(p.bad("date-separator", other, "expected none, year, month or day"))
        }
    };
    let file_index_width = p.uint(
        "file-index-width",
        DEFAULT_FILE_INDEX_WIDTH as u64,
        MIN_FILE_INDEX_WIDTH as u64,
        MAX_FILE_INDEX_WIDTH as u64,
    )? as usize;
    let flush_interval = p.duration(
        "flush-interval",
        DEFAULT_FLUSH_INTERVAL,
        MIN_FLUSH_INTERVAL,
        MAX_FLUSH_INTERVAL,
    )?;
    let file_size = p.uint("file-size", DEFAULT_FILE_SIZE, MIN_FILE_SIZE, MAX_FILE_SIZE)?;
    let table_across_nodes = p.bool("enable-table-across-nodes", false)?;
    let partition_separator = p.bool("enable-partition-separator", true)?;
    let tidb_extension = p.bool("enable-tidb-extension", false)?;
    let mut csv = CsvConfig::default();
    if let Some(d) = p.take("delimiter") {
        if d.is_empty() || d.chars().count() > 3 || d.contains(['\r', '\n']) {
            return Err(p.bad("delimiter", &d, "must be 1 to 3 characters, no line breaks"));
        }
        csv.delimiter = d;
    }
    if let Some(q) = p.take("quote") {
        if q.chars().count() > 1 || (!q.is_empty() && csv.delimiter.contains(q.as_str())) {
            return Err(p.bad(
                "quote",
                &q,
                "must be empty or one character not in the delimiter",
            ));
        }
        csv.quote = q;
    }
    if let Some(n) = p.take("null") {
        csv.null = n;
    }
    csv.include_commit_ts = p.bool("include-commit-ts", false)?;
    csv.output_old_value = p.bool("output-old-value", false)?;
    csv.binary_encoding = match p.take("binary-encoding-method").as_deref() {
        None | Some("base64") => BinaryEncoding::Base64,
        Some("hex") => BinaryEncoding::Hex,
        Some(other) => {
            return Err(p.bad("binary-encoding-method", other, "expected base64 or hex"))
        }
    };
    Ok(StorageConfig {
        location,
        protocol,
        date_separator,
        file_index_width,
        flush_interval,
        file_size,
        table_across_nodes,
        partition_separator,
        tidb_extension,
        csv,
    })
}

fn parse_mysql(url: &Url, p: &mut Params<'_>, masked: &str) -> Result<MysqlConfig> {
    let host = url.host_str().unwrap_or_default().to_string();
    if host.is_empty() {
        return Err(SinkError::invalid_uri(
            &masked,
            "missing host: expected mysql://user:pass@host:port/",
        ));
    }
    let user = if url.username().is_empty() {
        "root".to_string()
    } else {
        decode(url.username())
    };
    Ok(MysqlConfig {
        host,
        port: url.port().unwrap_or(3306),
        user,
        password: Secret(url.password().map(decode).unwrap_or_default()),
        worker_count: p.uint(
            "worker-count",
            DEFAULT_WORKER_COUNT as u64,
            1,
            MAX_WORKER_COUNT as u64,
        )? as usize,
        max_txn_row: p.uint(
            "max-txn-row",
            DEFAULT_MAX_TXN_ROW as u64,
            1,
            MAX_MAX_TXN_ROW as u64,
        )? as usize,
        safe_mode: p.bool("safe-mode", true)?,
        table_atomicity: match p.take("transaction-atomicity").as_deref() {
            None | Some("none") => false,
            Some("table") => true,
            Some(other) => {
                return Err(p.bad("transaction-atomicity", other, "expected none or table"))
            }
        },
        force_replicate: p.bool("force-replicate", false)?,
        downstream_fence: p.bool("downstream-fence", true)?,
        max_retries: p.uint("max-retries", 8, 0, 1000)? as u32,
        retry_backoff: p.duration(
            "retry-backoff",
            Duration::from_millis(100),
            Duration::from_millis(1),
            Duration::from_secs(60),
        )?,
        timeout: p.duration(
            "timeout",
            DEFAULT_DOWNSTREAM_TIMEOUT,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?,
        read_timeout: p.duration(
            "read-timeout",
            DEFAULT_DOWNSTREAM_TIMEOUT,
            Duration::from_millis(100),
            Duration::from_secs(24 * 3600),
        )?,
    })
}

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
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
        assert!(err("kafka://x/y").contains("unknown scheme \"kafka\""));
        assert!(err("s3:///prefix").contains("missing bucket"));
        assert!(err("file:///tmp/x?flush-interval=abc").contains("flush-interval=abc"));
        assert!(err("file:///tmp/x?flush-interval=10ms").contains("must be within"));
        assert!(err("file:///tmp/x?file-index-width=3").contains("file-index-width=3"));
        assert!(err("file:///tmp/x?protocol=avro").contains("protocol=avro"));
        assert!(err("file:///tmp/x?nope=1").contains("unknown parameter nope"));
        assert!(err("mysql://u:p@h/?worker-count=0").contains("worker-count=0"));
        assert!(err("mysql:///").contains("missing host"));
        assert!(err("not a uri").contains("not a URI"));
    }

    #[test]
    fn defaults_follow_ticdc() {
        let u = SinkUri::parse("file:///tmp/out").expect("parses");
        let SinkConfig::Storage(c) = u.config else {
            panic!("storage")
        };
        assert_eq!(c.flush_interval, Duration::from_secs(5));
        assert_eq!(c.file_size, 64 << 20);
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
