//! Server configuration: the `--config server.toml` file (kebab-case keys, unknown keys
//! rejected) merged with the command-line flags (flags win). Every key is documented in
//! `docs/configuration.md`; every bound the shell keeps is a named field here or a named constant
//! in the module that keeps it.

use crate::error::ServerError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Default HTTP address (API and node-to-node messages).
pub const DEFAULT_ADDR: &str = "127.0.0.1:8300";
/// Default node lease TTL in a cluster: a dead node's work is rescheduled within about one TTL
/// plus a scheduling round (see docs/operations.md for the trade-off).
pub const DEFAULT_LEASE_TTL_SECS: u64 = 5;
/// Default memory quota for rows in flight (event-store reads handed to dispatchers and not yet
/// accepted by a sink), per server.
pub const DEFAULT_MEMORY_QUOTA_BYTES: u64 = 256 << 20;
/// Default target size of a table region (the split scheduler's unit).
pub const DEFAULT_REGION_SIZE_BYTES: u64 = 96 << 20;
/// Default redb page cache of the event store.
pub const DEFAULT_STORE_CACHE_BYTES: u64 = 64 << 20;

/// The TOML file. Every key is optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileConfig {
    pub addr: Option<String>,
    /// The address other nodes and clients use to reach this one (default: `addr`).
    pub advertise_addr: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub upstream: Option<String>,
    /// Comma-separated etcd endpoints; absent: single node on the embedded meta store.
    pub etcd: Option<String>,
    /// This node's id (default: the advertised address).
    pub node_id: Option<String>,
    /// The binlog replica server id this node's reader registers with (default: derived from
    /// the node id; must be unique among the upstream's replicas).
    pub server_id: Option<u32>,
    pub lease_ttl_secs: Option<u64>,
    pub memory_quota_bytes: Option<u64>,
    pub store_cache_bytes: Option<u64>,
    /// Log filter: `error`, `warn`, `info` (default), `debug`, `trace`.
    pub log_level: Option<String>,
    /// Skip DDL statements the schema history cannot parse instead of failing capture.
    pub skip_unparseable_ddl: Option<bool>,
    /// Target bytes per table region (from the upstream's statistics) for the split scheduler.
    pub region_size_bytes: Option<u64>,
    /// How often this node writes its `sluice.heartbeat` row upstream (ms; 0: never). Commit
    /// times and lag are precise to this interval; without heartbeats, to the second.
    pub heartbeat_interval_ms: Option<u64>,
    /// How snapshot chunk reads find their binlog position: `auto` (default), `position`,
    /// `window` (see `docs/configuration.md`).
    pub snapshot_read: Option<String>,
}

/// The effective configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub addr: String,
    pub advertise_addr: String,
    pub data_dir: PathBuf,
    /// The upstream URL with its password (never printed; see [`crate::mask`]).
    pub upstream: String,
    pub etcd: Vec<String>,
    pub node_id: String,
    pub server_id: u32,
    pub lease_ttl_secs: u64,
    pub memory_quota_bytes: u64,
    pub store_cache_bytes: u64,
    pub log_level: String,
    pub skip_unparseable_ddl: bool,
    pub region_size_bytes: u64,
    /// The heartbeat writer's interval; `None`: off (`heartbeat-interval-ms = 0`).
    pub heartbeat_interval: Option<std::time::Duration>,
    /// How snapshot chunk reads find their binlog position.
    pub snapshot_read: sluice_capture::snapshot_read::SnapshotRead,
    /// `/api/v2/debug/holds` answers only when set.
    pub enable_debug_holds: bool,
}

/// Command-line values (each overrides the file).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub addr: Option<String>,
    pub advertise_addr: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub upstream: Option<String>,
    pub etcd: Option<String>,
    pub node_id: Option<String>,
    pub config: Option<PathBuf>,
    /// `--enable-debug-holds` (a flag only: never taken from a config file).
    pub enable_debug_holds: bool,
}

pub fn load_file(path: &Path) -> Result<FileConfig, ServerError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ServerError::Config(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        ServerError::Config(format!("{}: {}", path.display(), e.to_string().trim_end()))
    })
}

fn derive_server_id(node: &str) -> u32 {
    // FNV-1a of the node id, mapped into [100000, 4_000_000_000): away from small ids people
    // give real replicas.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    100_000 + (h % 3_999_900_000) as u32
}

impl ServerConfig {
    pub fn resolve(flags: Flags) -> Result<ServerConfig, ServerError> {
        let file = match &flags.config {
            Some(p) => load_file(p)?,
            None => FileConfig::default(),
        };
        let addr = flags
            .addr
            .or(file.addr)
            .unwrap_or_else(|| DEFAULT_ADDR.to_string());
        let advertise_addr = flags
            .advertise_addr
            .or(file.advertise_addr)
            .unwrap_or_else(|| addr.clone());
        let data_dir = flags.data_dir.or(file.data_dir).ok_or_else(|| {
            ServerError::Config("--data-dir is required (or data-dir in the config file)".into())
        })?;
        let upstream = flags.upstream.or(file.upstream).ok_or_else(|| {
            ServerError::Config("--upstream mysql://user:pass@host:port is required (or upstream in the config file)".into())
        })?;
        if !upstream.starts_with("mysql://") {
            return Err(ServerError::Config(format!(
                "upstream {} must be a mysql://user:pass@host:port URL",
                crate::mask::mask_url(&upstream)
            )));
        }
        url::Url::parse(&upstream).map_err(|e| {
            ServerError::Config(format!(
                "upstream {} is not a valid URL: {e}",
                crate::mask::mask_url(&upstream)
            ))
        })?;
        let etcd: Vec<String> = flags
            .etcd
            .or(file.etcd)
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let node_id = flags
            .node_id
            .or(file.node_id)
            .unwrap_or_else(|| advertise_addr.clone());
        let server_id = file.server_id.unwrap_or_else(|| derive_server_id(&node_id));
        let lease_ttl_secs = file.lease_ttl_secs.unwrap_or(DEFAULT_LEASE_TTL_SECS);
        if !(2..=60).contains(&lease_ttl_secs) {
            return Err(ServerError::Config(format!(
                "lease-ttl-secs must be within 2..=60, got {lease_ttl_secs}"
            )));
        }
        let heartbeat_ms = file
            .heartbeat_interval_ms
            .unwrap_or(sluice_capture::heartbeat::DEFAULT_HEARTBEAT_INTERVAL.as_millis() as u64);
        if heartbeat_ms != 0 && !(10..=60_000).contains(&heartbeat_ms) {
            return Err(ServerError::Config(format!(
                "heartbeat-interval-ms must be 0 (off) or within 10..=60000, got {heartbeat_ms}"
            )));
        }
        let snapshot_read = match file.snapshot_read.as_deref() {
            None => Default::default(),
            Some(s) => sluice_capture::snapshot_read::SnapshotRead::parse(s)
                .map_err(ServerError::Config)?,
        };
        let log_level = file.log_level.unwrap_or_else(|| "info".into());
        if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
            return Err(ServerError::Config(format!(
                "log-level must be one of error, warn, info, debug, trace; got {log_level:?}"
            )));
        }
        Ok(ServerConfig {
            addr,
            advertise_addr,
            data_dir,
            upstream,
            etcd,
            node_id,
            server_id,
            lease_ttl_secs,
            memory_quota_bytes: file
                .memory_quota_bytes
                .unwrap_or(DEFAULT_MEMORY_QUOTA_BYTES)
                .max(1 << 20),
            store_cache_bytes: file
                .store_cache_bytes
                .unwrap_or(DEFAULT_STORE_CACHE_BYTES)
                .max(1 << 20),
            log_level,
            skip_unparseable_ddl: file.skip_unparseable_ddl.unwrap_or(false),
            enable_debug_holds: flags.enable_debug_holds,
            region_size_bytes: file
                .region_size_bytes
                .unwrap_or(DEFAULT_REGION_SIZE_BYTES)
                .max(1),
            heartbeat_interval: (heartbeat_ms != 0)
                .then(|| std::time::Duration::from_millis(heartbeat_ms)),
            snapshot_read,
        })
    }
}

/// A changefeed's optional TOML (`--config` of `changefeed create`).
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ChangefeedToml {
    #[serde(default)]
    pub scheduler: Option<sluice_control::config::SchedulerConfig>,
    #[serde(default)]
    pub filter: Option<FilterToml>,
    #[serde(default)]
    pub sink: Option<SinkToml>,
    /// `never` (default), `initial`: copy the tables' existing rows (see docs/configuration.md).
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Rows per snapshot chunk (one consistent read each).
    #[serde(default)]
    pub snapshot_chunk_rows: Option<usize>,
}

/// The snapshot settings of a changefeed TOML (and the CLI's `--snapshot`, which wins), checked.
pub fn snapshot_config(
    t: &ChangefeedToml,
    flag: Option<&str>,
) -> Result<sluice_control::config::SnapshotConfig, ServerError> {
    use sluice_control::config::{SnapshotConfig, SnapshotMode, MAX_SNAPSHOT_CHUNK_ROWS};
    let mut c = SnapshotConfig::default();
    if let Some(m) = flag.or(t.snapshot.as_deref()) {
        c.mode = SnapshotMode::parse(m)
            .map_err(|e| ServerError::BadRequest(format!("changefeed config: snapshot: {e}")))?;
    }
    if let Some(n) = t.snapshot_chunk_rows {
        if n == 0 || n > MAX_SNAPSHOT_CHUNK_ROWS {
            return Err(ServerError::BadRequest(format!(
                "changefeed config: snapshot-chunk-rows = {n}: use 1 to {MAX_SNAPSHOT_CHUNK_ROWS}"
            )));
        }
        c.chunk_rows = n;
    }
    Ok(c)
}

/// `[sink]`: settings of the changefeed's sink beyond its URI.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SinkToml {
    /// `[[sink.dispatchers]]`: a Kafka sink's topic and partition rules (TiCDC's format).
    #[serde(default)]
    pub dispatchers: Vec<sluice_types::sink_rules::DispatchRule>,
}

/// `[filter]`: which tables and event types a changefeed replicates.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FilterToml {
    /// `db.table` patterns with `*` (default: every table).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Event types to drop: `insert`, `update`, `delete`, `ddl`.
    #[serde(default)]
    pub ignore_event: Vec<String>,
}

pub fn parse_changefeed_toml(text: &str) -> Result<ChangefeedToml, ServerError> {
    let t: ChangefeedToml = toml::from_str(text).map_err(|e| {
        ServerError::BadRequest(format!("changefeed config: {}", e.to_string().trim_end()))
    })?;
    if let Some(f) = &t.filter {
        for ev in &f.ignore_event {
            if !sluice_control::filter::EVENT_TYPES.contains(&ev.as_str()) {
                return Err(ServerError::BadRequest(format!(
                    "changefeed config: filter.ignore-event {ev:?} is not one of {}",
                    sluice_control::filter::EVENT_TYPES.join(", ")
                )));
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_rejected() {
        let e = toml::from_str::<FileConfig>("addr = \"x\"\nbogus-key = 1\n").unwrap_err();
        assert!(e.to_string().contains("bogus-key"), "{e}");
        assert!(parse_changefeed_toml("[scheduler]\nnope = true\n").is_err());
        assert!(parse_changefeed_toml("[scheduler]\nenable-table-across-nodes = true\n").is_ok());
    }

    /// The configuration `toml` resolves to, read from a file of its own (tests run in
    /// parallel threads of one process: a shared file could be another test's), removed after.
    fn resolved(toml: &str) -> Result<ServerConfig, ServerError> {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-config-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.toml");
        std::fs::write(&path, toml).unwrap();
        let resolved = ServerConfig::resolve(Flags {
            data_dir: Some(dir.clone()),
            upstream: Some("mysql://u:p@127.0.0.1:3306".into()),
            config: Some(path),
            ..Flags::default()
        });
        let _ = std::fs::remove_dir_all(&dir);
        resolved
    }

    #[test]
    fn snapshot_read_takes_its_three_values_and_refuses_others_naming_them() {
        use sluice_capture::snapshot_read::SnapshotRead;
        assert_eq!(resolved("").unwrap().snapshot_read, SnapshotRead::Auto);
        for (text, want) in [
            ("auto", SnapshotRead::Auto),
            ("position", SnapshotRead::Position),
            ("window", SnapshotRead::Window),
        ] {
            let c = resolved(&format!("snapshot-read = \"{text}\"\n")).unwrap();
            assert_eq!(c.snapshot_read, want);
        }
        let e = resolved("snapshot-read = \"watermarks\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"watermarks\"") && e.contains("\"window\""),
            "{e}"
        );
    }
}
