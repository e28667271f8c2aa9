//! Prometheus metrics, rendered in the text exposition format at `GET /metrics`: per
//! changefeed checkpoint and resolved lag, rows and bytes captured and written per sink,
//! operators in flight, dispatchers per node, event-store size and in-flight memory, errors by
//! kind. Counters are monotonic for the life of the process.
//!
//! Invariant: label values never carry secrets (changefeed ids and error kinds only).

use crate::shell::Shell;
use sluice_types::ChangefeedId;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

#[derive(Default)]
pub struct Metrics {
    delivered: Mutex<BTreeMap<String, u64>>,
    written_rows: Mutex<BTreeMap<String, u64>>,
    written_bytes: Mutex<BTreeMap<String, u64>>,
    row_lag: Mutex<BTreeMap<String, crate::rowlag::Histogram>>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub fn add_delivered(&self, cf: &ChangefeedId, n: u64) {
        *lock(&self.delivered).entry(cf.to_string()).or_default() += n;
    }
    pub fn add_written(&self, cf: &ChangefeedId, rows: u64, bytes: u64) {
        *lock(&self.written_rows).entry(cf.to_string()).or_default() += rows;
        *lock(&self.written_bytes).entry(cf.to_string()).or_default() += bytes;
    }
    /// Rows acknowledged by a sink, with their lags in ms (see [`crate::rowlag`]).
    pub fn add_row_lags(&self, cf: &ChangefeedId, lags: &[(u64, u64)]) {
        let mut m = lock(&self.row_lag);
        let h = m.entry(cf.to_string()).or_default();
        for (ms, rows) in lags {
            h.observe(*ms, *rows);
        }
    }
    pub fn error(&self, kind: &'static str) {
        *lock(&self.errors).entry(kind).or_default() += 1;
    }
    pub fn errors(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.errors).clone()
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn render(shell: &Shell) -> String {
    let mut o = String::new();
    changefeed_metrics(shell, &mut o);
    capture_metrics(shell, &mut o);
    let m = shell.metrics();
    let per_cf = |map: &Mutex<BTreeMap<String, u64>>, name: &str| -> String {
        lock(map)
            .iter()
            .map(|(cf, n)| format!("{name}{{changefeed=\"{}\"}} {n}\n", esc(cf)))
            .collect()
    };
    let rows_read = per_cf(&m.delivered, "sluice_dispatcher_rows_read_total");
    metric(
        &mut o,
        "sluice_dispatcher_rows_read_total",
        "counter",
        "Rows read from the event store for dispatchers, per changefeed.",
        &rows_read,
    );
    let rows = per_cf(&m.written_rows, "sluice_sink_rows_total");
    metric(
        &mut o,
        "sluice_sink_rows_total",
        "counter",
        "Rows handed to the sink, per changefeed.",
        &rows,
    );
    let mut lags = String::new();
    for (cf, h) in lock(&m.row_lag).iter() {
        h.render(
            "sluice_sink_row_lag_seconds",
            &format!("changefeed=\"{}\"", esc(cf)),
            &mut lags,
        );
    }
    metric(
        &mut o,
        "sluice_sink_row_lag_seconds",
        "histogram",
        "Rows from their upstream commit time to the sink's acknowledgement that they are durable, per changefeed.",
        &lags,
    );
    let bytes = per_cf(&m.written_bytes, "sluice_sink_bytes_total");
    metric(
        &mut o,
        "sluice_sink_bytes_total",
        "counter",
        "Approximate in-memory bytes of the rows handed to the sink, per changefeed.",
        &bytes,
    );
    node_metrics(shell, &mut o);
    let mut errors = m.errors();
    if shell.capture().error().is_some() {
        errors.entry("capture").or_insert(1);
    }
    let lines: String = errors
        .into_iter()
        .map(|(k, n)| format!("sluice_errors_total{{kind=\"{k}\"}} {n}\n"))
        .collect();
    metric(
        &mut o,
        "sluice_errors_total",
        "counter",
        "Errors by kind.",
        &lines,
    );
    o
}

/// One metric: its HELP and TYPE lines, then its samples (each ending in a newline).
fn metric(o: &mut String, name: &str, kind: &str, help: &str, samples: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
    o.push_str(samples);
}

/// A sample of a metric labelled with this node.
fn node_sample(name: &str, node: &str, v: impl std::fmt::Display) -> String {
    format!("{name}{{node=\"{node}\"}} {v}\n")
}

/// Lag of a commit ts behind the upstream's newest commit time, in seconds (0 if unknown).
fn lag_of(shell: &Shell, ts: sluice_types::Ts, now: u64) -> f64 {
    match shell.capture().time_of(ts).unwrap_or(0) {
        0 => 0.0,
        t => now.saturating_sub(t) as f64 / 1000.0,
    }
}

/// Checkpoint lag and state (on the coordinator's node), resolved lag and operators in flight
/// (maintainers on this node).
fn changefeed_metrics(shell: &Shell, o: &mut String) {
    let now = crate::upstream::now_ms();
    let (mut lag_lines, mut state_lines) = (String::new(), String::new());
    if let Some(c) = shell.node().coordinator() {
        for f in c.feeds() {
            let lag = lag_of(shell, f.checkpoint, now);
            let cf = esc(f.id.as_str());
            let _ = writeln!(
                lag_lines,
                "sluice_changefeed_checkpoint_lag_seconds{{changefeed=\"{cf}\"}} {lag:.3}"
            );
            let _ = writeln!(
                state_lines,
                "sluice_changefeed_state{{changefeed=\"{cf}\",state=\"{}\"}} 1",
                crate::api::feed_state_name(&f)
            );
        }
    }
    metric(
        o,
        "sluice_changefeed_checkpoint_lag_seconds",
        "gauge",
        "Upstream commit time minus the changefeed checkpoint's commit time.",
        &lag_lines,
    );
    if !state_lines.is_empty() {
        metric(o, "sluice_changefeed_state", "gauge", "The changefeed's state as the API shows it (normal, warning, stopped, failed), on the coordinator's node.", &state_lines);
    }
    let (mut resolved_lines, mut ops_lines) = (String::new(), String::new());
    let (mut snap_rows, mut snap_tables, mut snap_left) =
        (String::new(), String::new(), String::new());
    for mt in shell.node().maintainers() {
        if let Some(snap) = mt.status().snapshot {
            let cf = esc(mt.cf().as_str());
            let _ = writeln!(
                snap_rows,
                "sluice_snapshot_rows_copied{{changefeed=\"{cf}\"}} {}",
                snap.rows
            );
            let _ = writeln!(
                snap_tables,
                "sluice_snapshot_tables_pending{{changefeed=\"{cf}\"}} {}",
                snap.tables_pending
            );
            if let Some(left) = snap.rows_left {
                let _ = writeln!(
                    snap_left,
                    "sluice_snapshot_rows_left_estimate{{changefeed=\"{cf}\"}} {left}"
                );
            }
        }
        let lag = lag_of(shell, mt.status().resolved, now);
        let cf = esc(mt.cf().as_str());
        let _ = writeln!(
            resolved_lines,
            "sluice_changefeed_resolved_lag_seconds{{changefeed=\"{cf}\"}} {lag:.3}"
        );
        let _ = writeln!(
            ops_lines,
            "sluice_changefeed_operators_in_flight{{changefeed=\"{cf}\"}} {}",
            mt.operators().len()
        );
    }
    metric(o, "sluice_changefeed_resolved_lag_seconds", "gauge", "Upstream commit time minus the changefeed resolved ts's commit time (maintainers on this node).", &resolved_lines);
    metric(
        o,
        "sluice_changefeed_operators_in_flight",
        "gauge",
        "Scheduling operators in flight (maintainers on this node).",
        &ops_lines,
    );
    if !snap_rows.is_empty() {
        metric(o, "sluice_snapshot_rows_copied", "gauge", "Rows the running dispatchers copied for the changefeed's snapshot (maintainers on this node).", &snap_rows);
        metric(
            o,
            "sluice_snapshot_tables_pending",
            "gauge",
            "Tables whose snapshot copy is not durable yet (0: finished).",
            &snap_tables,
        );
    }
    if !snap_left.is_empty() {
        metric(
            o,
            "sluice_snapshot_rows_left_estimate",
            "gauge",
            "Rows the snapshot has left by the upstream's statistics (TABLE_ROWS of the pending tables less the rows copied).",
            &snap_left,
        );
    }
}

/// Rows, transactions and DDLs this node captured.
fn capture_metrics(shell: &Shell, o: &mut String) {
    let node = esc(shell.node_id().as_str());
    let cap = shell.capture();
    for (name, help, n) in [
        (
            "sluice_capture_rows_total",
            "Rows captured from the upstream binlog by this node.",
            &cap.rows_captured,
        ),
        (
            "sluice_capture_transactions_total",
            "Transactions captured from the upstream binlog by this node.",
            &cap.txns_captured,
        ),
        (
            "sluice_capture_ddls_total",
            "DDL statements captured from the upstream binlog by this node.",
            &cap.ddls_captured,
        ),
    ] {
        let v = n.load(Ordering::Relaxed);
        metric(o, name, "counter", help, &node_sample(name, &node, v));
    }
}

/// Dispatchers, the event store's size, memory in flight and its quota, stale writes refused.
fn node_metrics(shell: &Shell, o: &mut String) {
    let node = esc(shell.node_id().as_str());
    let size = std::fs::metadata(shell.store_path())
        .map(|m| m.len())
        .unwrap_or(0);
    let rows: [(&str, &str, &str, u64); 5] = [
        ("sluice_dispatchers", "gauge", "Dispatchers running on this node.", shell.dispatcher_count() as u64),
        ("sluice_event_store_bytes", "gauge", "Size of this node's event store file.", size),
        ("sluice_memory_inflight_bytes", "gauge", "Rows read from the event store and not yet accepted by a sink (bounded by memory-quota-bytes).", shell.inflight_bytes()),
        ("sluice_memory_quota_bytes", "gauge", "The node's memory-quota-bytes: the bound of sluice_memory_inflight_bytes.", shell.quota_bytes()),
        ("sluice_stale_writes_refused_total", "counter", "Downstream writes of this node refused because a later dispatcher had taken their span over (MySQL sink downstream fence).", shell.registry().write_holds().refused()),
    ];
    for (name, kind, help, v) in rows {
        metric(o, name, kind, help, &node_sample(name, &node, v));
    }
}
