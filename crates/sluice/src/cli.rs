//! `sluice cli`: the HTTP API's client. Human-readable tables by default, the API's JSON with
//! `--output json`. Exit codes: 0 done, 1 the server refused (its JSON error is printed with its
//! code), 2 bad usage or the server could not be reached. Nothing printed carries a password
//! (the server masks; the client scrubs what it was given too).

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};
use sluice_server::client;
use sluice_server::mask::{register_url, scrub};
use std::process::ExitCode;
use std::time::Duration;

/// How long one API call may take (create probes the sink and the upstream).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct CliArgs {
    /// The server's API address.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8300")]
    server: String,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value = "table")]
    output: Output,
    #[command(subcommand)]
    command: CliCommand,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum CliCommand {
    /// Changefeeds: create, list, query, pause, resume, update, remove, and their tables.
    #[command(subcommand)]
    Changefeed(Changefeed),
    /// Captures (nodes): list, cordon, uncordon, drain.
    #[command(subcommand)]
    Capture(Capture),
    /// Test-only switches of a node started with --enable-debug-holds.
    #[command(subcommand)]
    Debug(Debug),
}

#[derive(Subcommand)]
enum Debug {
    /// The control plane's hold points on the node --server names.
    #[command(subcommand)]
    Holds(Holds),
}

#[derive(Subcommand)]
enum Holds {
    /// The hold points that are on (and every point's name).
    List,
    /// Switch a hold point on (`--off`: off), e.g. create_dispatcher, ddl_after_write.
    Set {
        /// The hold point's name (as in the simulator's scenario format).
        point: String,
        /// Switch it off instead.
        #[arg(long)]
        off: bool,
    },
    /// Switch every hold point off.
    Clear,
}

/// The API call a `debug holds` command makes.
fn holds_call(s: &str, h: Holds) -> Result<Value, CliError> {
    let path = "/api/v2/debug/holds";
    match h {
        Holds::List => call(s, "GET", path, None),
        Holds::Set { point, off } => {
            call(s, "POST", path, Some(json!({"point": point, "on": !off})))
        }
        Holds::Clear => call(s, "POST", path, Some(json!({"clear": true}))),
    }
}

#[derive(Args)]
struct CfId {
    /// The changefeed id.
    #[arg(short = 'c', long = "changefeed-id")]
    changefeed_id: String,
}

#[derive(Subcommand)]
enum Changefeed {
    /// Create a changefeed.
    Create {
        #[command(flatten)]
        id: CfId,
        /// Where to write: file:///dir?protocol=canal-json, s3://bucket/prefix?…, mysql://user:pass@host:port/
        #[arg(long)]
        sink_uri: String,
        /// Start after this commit ts (default: now).
        #[arg(long, conflicts_with_all = ["start_position", "start_gtid"])]
        start_ts: Option<u64>,
        /// Start at this binlog position, FILE:POS.
        #[arg(long, conflicts_with = "start_gtid")]
        start_position: Option<String>,
        /// Start after this MariaDB GTID (domain-server-seq).
        #[arg(long)]
        start_gtid: Option<String>,
        /// Changefeed TOML ([scheduler] …; see docs/configuration.md).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Copy the tables' existing rows: never (default), initial (copy, then stream),
        /// initial-only (copy, then stop).
        /// Overrides `snapshot` of the --config file.
        #[arg(long)]
        snapshot: Option<String>,
        /// The schema registry of a kafka:// sink with protocol=avro (TiCDC's flag): added to
        /// the sink URI as its schema-registry parameter.
        #[arg(long)]
        schema_registry: Option<String>,
    },
    /// Copy tables of a running changefeed again (their rows as they are now), while it streams.
    Snapshot {
        #[command(flatten)]
        id: CfId,
        /// `db.table` patterns with `*` and `?`, comma-separated.
        #[arg(long)]
        tables: String,
    },
    /// List changefeeds.
    List,
    /// Show one changefeed.
    Query(CfId),
    /// Pause a changefeed.
    Pause(CfId),
    /// Resume a paused or failed changefeed.
    Resume(CfId),
    /// Update a paused changefeed.
    Update {
        #[command(flatten)]
        id: CfId,
        /// The new sink URI (checked like at create).
        #[arg(long)]
        sink_uri: Option<String>,
        /// Changefeed TOML replacing the [scheduler] and [filter] sections given.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Remove a changefeed.
    Remove(CfId),
    /// Which node replicates which table (ids and names).
    Tables(CfId),
    /// Every span of the changefeed (table, key range, node, state, operator), then the table
    /// requests queued at its maintainer.
    Spans(CfId),
    /// The dispatchers the nodes report running.
    Dispatchers(CfId),
    /// Move a table to another node.
    MoveTable {
        #[command(flatten)]
        id: CfId,
        /// The table's id, as `changefeed tables` or `changefeed spans` lists it.
        #[arg(long)]
        table_id: u64,
        /// The node to move it to, as `capture list` lists it.
        #[arg(long)]
        target_node_id: String,
    },
    /// Split a table into several spans.
    SplitTable {
        #[command(flatten)]
        id: CfId,
        /// The table's id, as `changefeed tables` or `changefeed spans` lists it. It must be in
        /// one span and have a primary or not-null unique key.
        #[arg(long)]
        table_id: u64,
        /// How many spans to cut it into (2..=1024), at region boundaries: at most as many as
        /// the table has regions (see region-size-bytes in docs/configuration.md).
        #[arg(long, default_value_t = 2)]
        spans: usize,
    },
    /// Merge a table's spans back into one.
    MergeTable {
        #[command(flatten)]
        id: CfId,
        /// The table's id, as `changefeed tables` or `changefeed spans` lists it.
        #[arg(long)]
        table_id: u64,
    },
}

#[derive(Subcommand)]
enum Capture {
    /// List the nodes.
    List,
    /// Place no new work on a node.
    Cordon { capture_id: String },
    /// Undo cordon or drain.
    Uncordon { capture_id: String },
    /// Move every piece of work off a node.
    Drain { capture_id: String },
}

enum CliError {
    Usage(String),
    Refused(Value),
}

fn read_config(p: &Option<std::path::PathBuf>) -> Result<Option<String>, CliError> {
    match p {
        None => Ok(None),
        Some(p) => std::fs::read_to_string(p)
            .map(Some)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", p.display()))),
    }
}

fn call(server: &str, method: &str, path: &str, body: Option<Value>) -> Result<Value, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let body = body.map(|b| b.to_string().into_bytes());
    let r = rt
        .block_on(client::request(
            server,
            method,
            path,
            body.as_deref(),
            CALL_TIMEOUT,
        ))
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let v: Value = if r.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| json!({"error_msg": String::from_utf8_lossy(&r.body)}))
    };
    if r.status >= 400 {
        return Err(CliError::Refused(v));
    }
    Ok(v)
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Object(o) if o.contains_key("message") => cell(&o["message"]),
        other => other.to_string(),
    }
}

fn table(rows: &[Value], cols: &[&str]) -> String {
    let mut grid: Vec<Vec<String>> = vec![cols.iter().map(|c| c.to_uppercase()).collect()];
    for r in rows {
        grid.push(cols.iter().map(|c| cell(&r[*c])).collect());
    }
    let widths: Vec<usize> = (0..cols.len())
        .map(|i| grid.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in grid {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

const FEED_COLS: &[&str] = &[
    "id",
    "state",
    "checkpoint_ts",
    "checkpoint_time",
    "resolved_ts",
    "maintainer_addr",
    "restarts",
    "error",
];

/// The columns of a maintainer's queued table requests (`changefeed spans`).
const REQUEST_COLS: &[&str] = &[
    "request",
    "table_id",
    "spans",
    "target_node_id",
    "by",
    "persisted",
];

fn render(v: &Value, cols: &[&str]) -> String {
    if let Some(items) = v["items"].as_array() {
        let mut out = table(items, cols);
        if let Some(p) = v["pending_requests"].as_array().filter(|p| !p.is_empty()) {
            out.push_str(&format!("\npending requests ({}):\n", p.len()));
            out.push_str(&table(p, REQUEST_COLS));
        }
        return out;
    }
    if v.as_object().map(|o| o.is_empty()).unwrap_or(true) {
        return "ok\n".into();
    }
    if v.get("accepted").is_some() {
        return "accepted\n".into();
    }
    if v.get("id").is_some() && cols == FEED_COLS {
        let mut out = table(std::slice::from_ref(v), cols);
        if let Some(s) = v["sink_uri"].as_str() {
            out.push_str(&format!("sink: {s}\n"));
        }
        out.push_str(&snapshot_line(&v["snapshot"]));
        return out;
    }
    table(std::slice::from_ref(v), cols)
}

/// The snapshot copy's progress line of `changefeed query` (empty without a snapshot).
fn snapshot_line(s: &Value) -> String {
    let Some(state) = s["state"].as_str() else {
        return String::new();
    };
    let mut line = format!("snapshot: {state}");
    if state == "copying" {
        line.push_str(&format!(
            ", {} table(s) left, {} rows copied, {} rows/s",
            s["tables_pending"].as_u64().unwrap_or(0),
            s["rows_copied"].as_u64().unwrap_or(0),
            s["rows_per_second"].as_u64().unwrap_or(0)
        ));
        if let Some(left) = s["rows_left_estimate"].as_u64() {
            line.push_str(&format!(", about {left} rows left"));
        }
        if let Some(secs) = s["seconds_left_estimate"].as_u64() {
            line.push_str(&format!(" ({} left at this rate)", duration_text(secs)));
        }
    }
    if let Some(e) = s["error"].as_str() {
        line.push_str(&format!(" (retrying: {e})"));
    }
    line + "\n"
}

/// `3h 02m`, `4m 10s`, `12s`.
fn duration_text(secs: u64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The columns a command's answer is shown with (in table output).
type Cols = &'static [&'static str];

pub fn run(a: CliArgs) -> ExitCode {
    let result = match a.command {
        CliCommand::Changefeed(c) => changefeed_call(&a.server, c),
        CliCommand::Debug(Debug::Holds(h)) => holds_call(&a.server, h).map(|v| {
            let cols: Cols = &["node", "holds"];
            (v, cols)
        }),
        CliCommand::Capture(c) => capture_call(&a.server, c),
    };
    match result {
        Ok((v, cols)) => print_answer(a.output, &v, cols),
        Err(CliError::Refused(v)) => print_refusal(a.output, &v),
        Err(CliError::Usage(m)) => {
            eprintln!("error: {}", scrub(&m));
            ExitCode::from(2)
        }
    }
}

fn cf_path(id: &CfId, tail: &str) -> String {
    format!("/api/v2/changefeeds/{}{tail}", id.changefeed_id)
}

/// The API call a `changefeed` command makes, and the columns of its answer.
fn changefeed_call(s: &str, c: Changefeed) -> Result<(Value, Cols), CliError> {
    match c {
        Changefeed::Create {
            id,
            sink_uri,
            start_ts,
            start_position,
            start_gtid,
            config,
            snapshot,
            schema_registry,
        } => {
            let sink_uri = with_schema_registry(sink_uri, schema_registry.as_deref())
                .map_err(CliError::Usage)?;
            register_url(&sink_uri);
            let cfg = read_config(&config)?;
            let body = json!({
                "changefeed_id": id.changefeed_id, "sink_uri": sink_uri, "start_ts": start_ts,
                "start_position": start_position, "start_gtid": start_gtid, "config": cfg,
                "snapshot": snapshot,
            });
            Ok((
                call(s, "POST", "/api/v2/changefeeds", Some(body))?,
                FEED_COLS,
            ))
        }
        Changefeed::Snapshot { id, tables } => {
            let body = json!({ "tables": tables });
            Ok((
                call(s, "POST", &cf_path(&id, "/snapshot"), Some(body))?,
                &["accepted", "tables"],
            ))
        }
        Changefeed::List => Ok((call(s, "GET", "/api/v2/changefeeds", None)?, FEED_COLS)),
        Changefeed::Query(id) => Ok((call(s, "GET", &cf_path(&id, ""), None)?, FEED_COLS)),
        Changefeed::Pause(id) => Ok((call(s, "POST", &cf_path(&id, "/pause"), None)?, FEED_COLS)),
        Changefeed::Resume(id) => Ok((call(s, "POST", &cf_path(&id, "/resume"), None)?, FEED_COLS)),
        Changefeed::Remove(id) => Ok((call(s, "DELETE", &cf_path(&id, ""), None)?, FEED_COLS)),
        Changefeed::Update {
            id,
            sink_uri,
            config,
        } => update_call(s, &id, sink_uri, &config),
        Changefeed::Tables(id) => Ok((
            call(s, "GET", &cf_path(&id, "/tables"), None)?,
            &["node_id", "table_ids", "table_names"][..],
        )),
        Changefeed::Spans(id) => Ok((call(s, "GET", &cf_path(&id, "/spans"), None)?, SPAN_COLS)),
        Changefeed::Dispatchers(id) => Ok((
            call(s, "GET", &cf_path(&id, "/dispatchers"), None)?,
            DISPATCHER_COLS,
        )),
        Changefeed::MoveTable {
            id,
            table_id,
            target_node_id,
        } => table_request(
            s,
            &id,
            "/move_table",
            json!({"table_id": table_id, "target_node_id": target_node_id}),
        ),
        Changefeed::SplitTable {
            id,
            table_id,
            spans,
        } => table_request(
            s,
            &id,
            "/split_table",
            json!({"table_id": table_id, "spans": spans}),
        ),
        Changefeed::MergeTable { id, table_id } => {
            table_request(s, &id, "/merge_table", json!({"table_id": table_id}))
        }
    }
}

/// The columns of `changefeed spans`.
const SPAN_COLS: &[&str] = &[
    "table_id",
    "table_name",
    "node_id",
    "state",
    "checkpoint_ts",
    "operator",
    "start_key",
    "end_key",
];

/// The columns of `changefeed dispatchers`.
const DISPATCHER_COLS: &[&str] = &[
    "node_id",
    "dispatcher_id",
    "table_id",
    "state",
    "checkpoint_ts",
    "is_trigger",
];

/// `--schema-registry URL` as the sink URI's `schema-registry` parameter (percent-encoded).
pub fn with_schema_registry(sink_uri: String, registry: Option<&str>) -> Result<String, String> {
    let Some(r) = registry else {
        return Ok(sink_uri);
    };
    if sink_uri.contains("schema-registry=") {
        return Err(
            "--schema-registry and a schema-registry parameter in the sink URI: give one".into(),
        );
    }
    let enc: String = r
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let sep = if sink_uri.contains('?') { '&' } else { '?' };
    Ok(format!("{sink_uri}{sep}schema-registry={enc}"))
}

/// `changefeed update`: a new sink URI and/or changefeed TOML.
fn update_call(
    s: &str,
    id: &CfId,
    sink_uri: Option<String>,
    config: &Option<std::path::PathBuf>,
) -> Result<(Value, Cols), CliError> {
    if let Some(u) = &sink_uri {
        register_url(u);
    }
    let cfg = read_config(config)?;
    let body = json!({"sink_uri": sink_uri, "config": cfg});
    Ok((call(s, "PUT", &cf_path(id, ""), Some(body))?, FEED_COLS))
}

/// A move, split or merge request for one table (`tail`: its path under the changefeed).
fn table_request(s: &str, id: &CfId, tail: &str, body: Value) -> Result<(Value, Cols), CliError> {
    Ok((call(s, "POST", &cf_path(id, tail), Some(body))?, &[][..]))
}

/// The API call a `capture` command makes, and the columns of its answer.
fn capture_call(s: &str, c: Capture) -> Result<(Value, Cols), CliError> {
    let cols: Cols = &["id", "address", "is_owner", "cordoned", "draining"];
    let (method, path) = match c {
        Capture::List => ("GET", "/api/v2/captures".to_string()),
        Capture::Cordon { capture_id } => ("POST", format!("/api/v2/captures/{capture_id}/cordon")),
        Capture::Uncordon { capture_id } => {
            ("POST", format!("/api/v2/captures/{capture_id}/uncordon"))
        }
        Capture::Drain { capture_id } => ("POST", format!("/api/v2/captures/{capture_id}/drain")),
    };
    Ok((call(s, method, &path, None)?, cols))
}

/// Prints the server's answer: its JSON, or rendered as a table.
fn print_answer(output: Output, v: &Value, cols: Cols) -> ExitCode {
    let text = if output == Output::Json {
        format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default())
    } else {
        render(v, cols)
    };
    print!("{}", scrub(&text));
    ExitCode::SUCCESS
}

/// Prints the server's refusal (its JSON too, with `--output json`) and exits 1.
fn print_refusal(output: Output, v: &Value) -> ExitCode {
    if output == Output::Json {
        println!(
            "{}",
            scrub(&serde_json::to_string_pretty(v).unwrap_or_default())
        );
    }
    eprintln!(
        "error: {} ({})",
        scrub(&cell(&v["error_msg"])),
        cell(&v["error_code"])
    );
    ExitCode::from(1)
}
