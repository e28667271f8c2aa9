//! The storage sink's configuration: the `file://` and `s3://` URI parameters (TiCDC's names,
//! defaults and bounds), parsed into a [`StorageConfig`] that checks, prepares and builds the
//! sink.
//!
//! Invariant: every parameter is validated here; a bad one is [`SinkError::InvalidUri`] naming
//! it (secrets masked).

use crate::error::{Result, SinkError};
use crate::fence::WriteFence;
use crate::uri::{Params, Secret};
use crate::Sink;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

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
/// Default `max-buffered-bytes`: the rows one storage sink (a changefeed on a node) holds
/// encoded and not yet written, all its dispatchers together.
pub const DEFAULT_MAX_BUFFERED_BYTES: u64 = 128 << 20;
pub const MIN_MAX_BUFFERED_BYTES: u64 = 1 << 10;
pub const MAX_MAX_BUFFERED_BYTES: u64 = 16 << 30;
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
    /// `max-buffered-bytes` (1KiB..16GiB; default 128MiB): a dispatcher that writes while the
    /// sink's buffers hold more than this together flushes its own.
    pub max_buffered_bytes: u64,
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

impl CsvConfig {
    /// The csv parameters (TiCDC's `[sink.csv]` keys) of a storage URI.
    fn from_params(p: &mut Params<'_>) -> Result<CsvConfig> {
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
        Ok(csv)
    }
}

impl StorageConfig {
    /// The config a `file://` or `s3://` URI names (`p`: its parameters, each taken once).
    pub(crate) fn from_uri(url: &Url, p: &mut Params<'_>, masked: &str) -> Result<StorageConfig> {
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
                access_key: p.take("access-key").map(Secret::new),
                secret_access_key: p.take("secret-access-key").map(Secret::new),
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
        let max_buffered_bytes = p.uint(
            "max-buffered-bytes",
            DEFAULT_MAX_BUFFERED_BYTES,
            MIN_MAX_BUFFERED_BYTES,
            MAX_MAX_BUFFERED_BYTES,
        )?;
        let table_across_nodes = p.bool("enable-table-across-nodes", false)?;
        let partition_separator = p.bool("enable-partition-separator", true)?;
        let tidb_extension = p.bool("enable-tidb-extension", false)?;
        let csv = CsvConfig::from_params(p)?;
        Ok(StorageConfig {
            location,
            protocol,
            date_separator,
            file_index_width,
            flush_interval,
            file_size,
            max_buffered_bytes,
            table_across_nodes,
            partition_separator,
            tidb_extension,
            csv,
        })
    }

    /// Builds the sink (`fence`: every put checks it first).
    pub fn build(self, fence: Option<WriteFence>) -> Result<Arc<dyn Sink>> {
        let s = super::StorageSink::open_storage(self)?;
        if let Some(f) = fence {
            s.set_fence(f)?;
        }
        Ok(Arc::new(s))
    }

    /// A changefeed created now from `start_ts` must not find table versions written after it
    /// (the replay rule would read them as its progress): use an empty location, or a later
    /// start.
    pub async fn prepare(self, masked: &str, start_ts: sluice_types::Ts) -> Result<()> {
        let s = super::StorageSink::open_storage(self)?;
        let later = s.applied_ddls(start_ts).await?;
        match later.first() {
            None => Ok(()),
            Some(r) => Err(SinkError::invalid_uri(
                &masked,
                format!(
                    "the location already holds table versions written after the start ts {start_ts} \
                     (the first at {}, {} in all): use an empty location, or a start ts after {}",
                    r.commit_ts,
                    later.len(),
                    later.last().map(|l| l.commit_ts).unwrap_or(r.commit_ts)
                ),
            )),
        }
    }
}
