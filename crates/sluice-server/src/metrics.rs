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
    let node = esc(shell.node_id().as_str());
    let now = crate::upstream::now_ms();
    let cap = &shell.capture();
    let m = &shell.metrics();
    let _ = writeln!(o, "# HELP sluice_changefeed_checkpoint_lag_seconds Upstream commit time minus the changefeed checkpoint's commit time.");
    let _ = writeln!(o, "# TYPE sluice_changefeed_checkpoint_lag_seconds gauge");
    let mut resolved_lines = String::new();
    let mut ops_lines = String::new();
    let mut state_lines = String::new();
    if let Some(c) = shell.node().coordinator() {
        for f in c.feeds() {
            let t = cap.time_of(f.checkpoint).unwrap_or(0);
            let lag = if t == 0 {
                0.0
            } else {
                now.saturating_sub(t) as f64 / 1000.0
            };
            let _ = writeln!(
                o,
                "sluice_changefeed_checkpoint_lag_seconds{{changefeed=\"{}\"}} {lag:.3}",
                esc(f.id.as_str())
            );
            let _ = writeln!(
                state_lines,
                "sluice_changefeed_state{{changefeed=\"{}\",state=\"{}\"}} 1",
                esc(f.id.as_str()),
                crate::api::feed_state_name(&f)
            );
        }
    }
    if !state_lines.is_empty() {
        let _ = writeln!(o, "# HELP sluice_changefeed_state The changefeed's state as the API shows it (normal, warning, stopped, failed), on the coordinator's node.");
        let _ = writeln!(o, "# TYPE sluice_changefeed_state gauge");
        o.push_str(&state_lines);
    }
    for mt in shell.node().maintainers() {
        let st = mt.status();
        let t = cap.time_of(st.resolved).unwrap_or(0);
        let lag = if t == 0 {
            0.0
        } else {
            now.saturating_sub(t) as f64 / 1000.0
        };
        let _ = writeln!(
            resolved_lines,
            "sluice_changefeed_resolved_lag_seconds{{changefeed=\"{}\"}} {lag:.3}",
            esc(mt.cf().as_str())
        );
        let _ = writeln!(
            ops_lines,
            "sluice_changefeed_operators_in_flight{{changefeed=\"{}\"}} {}",
            esc(mt.cf().as_str()),
            mt.operators().len()
        );
    }
    let _ = writeln!(o, "# HELP sluice_changefeed_resolved_lag_seconds Upstream commit time minus the changefeed resolved ts's commit time (maintainers on this node).");
    let _ = writeln!(o, "# TYPE sluice_changefeed_resolved_lag_seconds gauge");
    o.push_str(&resolved_lines);
    let _ = writeln!(o, "# HELP sluice_changefeed_operators_in_flight Scheduling operators in flight (maintainers on this node).");
    let _ = writeln!(o, "# TYPE sluice_changefeed_operators_in_flight gauge");
    o.push_str(&ops_lines);
    let _ = writeln!(
        o,
        "# HELP sluice_capture_rows_total Rows captured from the upstream binlog by this node."
    );
    let _ = writeln!(o, "# TYPE sluice_capture_rows_total counter");
    let _ = writeln!(
        o,
        "sluice_capture_rows_total{{node=\"{node}\"}} {}",
        cap.rows_captured.load(Ordering::Relaxed)
    );
    let _ = writeln!(o, "# HELP sluice_capture_transactions_total Transactions captured from the upstream binlog by this node.");
    let _ = writeln!(o, "# TYPE sluice_capture_transactions_total counter");
    let _ = writeln!(
        o,
        "sluice_capture_transactions_total{{node=\"{node}\"}} {}",
        cap.txns_captured.load(Ordering::Relaxed)
    );
    let _ = writeln!(o, "# HELP sluice_capture_ddls_total DDL statements captured from the upstream binlog by this node.");
    let _ = writeln!(o, "# TYPE sluice_capture_ddls_total counter");
    let _ = writeln!(
        o,
        "sluice_capture_ddls_total{{node=\"{node}\"}} {}",
        cap.ddls_captured.load(Ordering::Relaxed)
    );
    let _ = writeln!(o, "# HELP sluice_dispatcher_rows_read_total Rows read from the event store for dispatchers, per changefeed.");
    let _ = writeln!(o, "# TYPE sluice_dispatcher_rows_read_total counter");
    for (cf, n) in lock(&m.delivered).iter() {
        let _ = writeln!(
            o,
            "sluice_dispatcher_rows_read_total{{changefeed=\"{}\"}} {n}",
            esc(cf)
        );
    }
    let _ = writeln!(
        o,
        "# HELP sluice_sink_rows_total Rows handed to the sink, per changefeed."
    );
    let _ = writeln!(o, "# TYPE sluice_sink_rows_total counter");
    for (cf, n) in lock(&m.written_rows).iter() {
        let _ = writeln!(
            o,
            "sluice_sink_rows_total{{changefeed=\"{}\"}} {n}",
            esc(cf)
        );
    }
    let _ = writeln!(o, "# HELP sluice_sink_bytes_total Approximate in-memory bytes of the rows handed to the sink, per changefeed.");
    let _ = writeln!(o, "# TYPE sluice_sink_bytes_total counter");
    for (cf, n) in lock(&m.written_bytes).iter() {
        let _ = writeln!(
            o,
            "sluice_sink_bytes_total{{changefeed=\"{}\"}} {n}",
            esc(cf)
        );
    }
    let _ = writeln!(
        o,
        "# HELP sluice_dispatchers Dispatchers running on this node."
    );
    let _ = writeln!(o, "# TYPE sluice_dispatchers gauge");
    let _ = writeln!(
        o,
        "sluice_dispatchers{{node=\"{node}\"}} {}",
        shell.dispatcher_count()
    );
    let _ = writeln!(
        o,
        "# HELP sluice_event_store_bytes Size of this node's event store file."
    );
    let _ = writeln!(o, "# TYPE sluice_event_store_bytes gauge");
    let size = std::fs::metadata(shell.store_path())
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = writeln!(o, "sluice_event_store_bytes{{node=\"{node}\"}} {size}");
    let _ = writeln!(o, "# HELP sluice_memory_inflight_bytes Rows read from the event store and not yet accepted by a sink (bounded by memory-quota-bytes).");
    let _ = writeln!(o, "# TYPE sluice_memory_inflight_bytes gauge");
    let _ = writeln!(
        o,
        "sluice_memory_inflight_bytes{{node=\"{node}\"}} {}",
        shell.inflight_bytes()
    );
    let _ = writeln!(o, "# HELP sluice_memory_quota_bytes The node's memory-quota-bytes: the bound of sluice_memory_inflight_bytes.");
    let _ = writeln!(o, "# TYPE sluice_memory_quota_bytes gauge");
    let _ = writeln!(
        o,
        "sluice_memory_quota_bytes{{node=\"{node}\"}} {}",
        shell.quota_bytes()
    );
    let _ = writeln!(o, "# HELP sluice_stale_writes_refused_total Downstream writes of this node refused because a later dispatcher had taken their span over (MySQL sink downstream fence).");
    let _ = writeln!(o, "# TYPE sluice_stale_writes_refused_total counter");
    let _ = writeln!(
        o,
        "sluice_stale_writes_refused_total{{node=\"{node}\"}} {}",
        shell.registry().write_holds().refused()
    );
    let _ = writeln!(o, "# HELP sluice_errors_total Errors by kind.");
    let _ = writeln!(o, "# TYPE sluice_errors_total counter");
    let mut errors = m.errors();
    if cap.error().is_some() {
        errors.entry("capture").or_insert(1);
    }
    for (k, n) in errors {
        let _ = writeln!(o, "sluice_errors_total{{kind=\"{k}\"}} {n}");
    }
    o
}
