//! The HTTP API (TiCDC v2 names) and the node-to-node endpoint, on one port.
//!
//! Invariants:
//! - every response body passes through [`crate::mask::scrub`]; sink URIs are masked
//!   structurally too: no password leaves the process;
//! - errors are JSON `{"error_code", "error_msg"}` with a stable code and a message that says
//!   what to do ([`ServerError`]);
//! - a request that fails validation changes nothing: every check (id, sink URI and its
//!   reachability, upstream settings, start point, changefeed TOML) runs before the request
//!   reaches the coordinator;
//! - requests that need the coordinator are forwarded to the leader's address when this node
//!   does not lead; table views are answered where the maintainer runs.

use crate::config::parse_changefeed_toml;
use crate::error::ServerError;
use crate::mask::{mask_url, scrub};
use crate::net::Envelope;
use crate::shell::{Shell, ShellMsg};
use crate::upstream::CaptureShared;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use sluice_capture::BinlogPos;
use sluice_control::config::{ChangefeedConfig, SchedulerConfig};
use sluice_control::coordinator::FeedState;
use sluice_control::io::UserRequest;
use sluice_control::msg::TableRequest;
use sluice_control::Input;
use sluice_sink::HoldAt;
use sluice_types::{ChangefeedId, NodeId, TableId, Ts};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a request waits for the coordinator to take a change before answering "accepted".
pub const ACCEPT_WAIT: Duration = Duration::from_secs(10);
/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 4 << 20;
/// Timeout of forwarded calls and of the sink probe at create.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct AppState {
    pub tx: mpsc::Sender<ShellMsg>,
    pub capture: Arc<CaptureShared>,
    pub upstream: Arc<String>,
    /// The server's `snapshot-read` (what a snapshot's check at create asks of the upstream).
    pub snapshot_read: sluice_capture::snapshot_read::SnapshotRead,
    pub node_id: NodeId,
    pub addr: String,
    /// `--enable-debug-holds`: `/api/v2/debug/holds` may switch hold points.
    pub debug_holds: bool,
}

pub struct ApiError(pub ServerError);

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error_code": self.0.code(), "error_msg": scrub(&self.0.to_string()) });
        json_response(self.0.status(), &body)
    }
}

fn json_response(status: StatusCode, v: &Json) -> Response {
    let text = scrub(&v.to_string());
    let mut r = (status, text).into_response();
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

fn ok(v: Json) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &v))
}

type ApiResult = Result<Response, ApiError>;

impl AppState {
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Shell) -> T + Send + 'static,
    ) -> Result<T, ServerError> {
        let (tx, rx) = oneshot::channel();
        let q: crate::shell::QueryFn = Box::new(move |s: &mut Shell| {
            let _ = tx.send(f(s));
        });
        self.tx
            .send_timeout(ShellMsg::Query(q), Duration::from_secs(5))
            .await
            .map_err(|_| ServerError::NotReady("the node is busy or shutting down".into()))?;
        rx.await
            .map_err(|_| ServerError::NotReady("the node is shutting down".into()))
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/v2/health", get(health))
        .route("/api/v2/status", get(status))
        .route("/api/v2/captures", get(captures))
        .route("/api/v2/captures/{id}/cordon", post(cordon))
        .route("/api/v2/captures/{id}/uncordon", post(uncordon))
        .route("/api/v2/captures/{id}/drain", post(drain))
        .route(
            "/api/v2/changefeeds",
            get(list_changefeeds).post(create_changefeed),
        )
        .route(
            "/api/v2/changefeeds/{id}",
            get(get_changefeed)
                .put(update_changefeed)
                .delete(remove_changefeed),
        )
        .route("/api/v2/changefeeds/{id}/pause", post(pause_changefeed))
        .route("/api/v2/changefeeds/{id}/resume", post(resume_changefeed))
        .route("/api/v2/changefeeds/{id}/tables", get(tables))
        .route("/api/v2/changefeeds/{id}/spans", get(spans))
        .route("/api/v2/changefeeds/{id}/dispatchers", get(dispatchers))
        .route("/api/v2/changefeeds/{id}/move_table", post(move_table))
        .route("/api/v2/changefeeds/{id}/split_table", post(split_table))
        .route("/api/v2/changefeeds/{id}/snapshot", post(snapshot_tables))
        .route("/api/v2/changefeeds/{id}/merge_table", post(merge_table))
        .route("/api/v2/debug/holds", get(list_holds).post(set_holds))
        .route("/metrics", get(metrics))
        .route("/internal/v1/message", post(message))
        .route("/internal/v1/dispatchers/{id}", get(local_dispatchers))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiResult {
    Err(ServerError::BadRequest(format!(
        "no route {}; see docs/api.md for the routes",
        uri.path()
    ))
    .into())
}

// ---------------------------------------------------------------------- forwarding

enum Where {
    Here,
    There(String),
}

/// Where the coordinator runs: here, at another node's address, or nowhere yet.
async fn coordinator_at(st: &AppState) -> Result<Where, ServerError> {
    st.query(|s| {
        if s.node().coordinator().is_some() {
            return Ok(Where::Here);
        }
        match s.node().leader() {
            Some(l) => Ok(Where::There(
                s.addr_of(l)
                    .cloned()
                    .unwrap_or_else(|| l.as_str().to_string()),
            )),
            None => Err(ServerError::NotReady(
                "no coordinator is elected yet".into(),
            )),
        }
    })
    .await?
}

async fn forward(addr: &str, method: &Method, uri: &Uri, body: &[u8]) -> ApiResult {
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let r = crate::client::request(addr, method.as_str(), path, Some(body), FORWARD_TIMEOUT)
        .await
        .map_err(|e| ServerError::NotReady(format!("forwarding to {addr}: {e}")))?;
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = (status, r.body).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    Ok(resp)
}

macro_rules! at_coordinator {
    ($st:expr, $method:expr, $uri:expr, $body:expr) => {
        if let Where::There(addr) = coordinator_at(&$st).await? {
            return forward(&addr, &$method, &$uri, &$body).await;
        }
    };
}

// ---------------------------------------------------------------------- views

fn rfc3339_ms(ms: u64) -> String {
    let micros = i64::try_from(ms)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    let (y, m, d, h, mi, s, us) = sluice_types::civil::utc_parts(micros);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
        us / 1000
    )
}

fn state_name(s: FeedState) -> &'static str {
    match s {
        FeedState::Normal => "normal",
        FeedState::Paused => "stopped",
        FeedState::Error => "warning",
        FeedState::Failed => "failed",
        FeedState::Removed => "removed",
    }
}

/// The state users see: a running changefeed whose progress is stopped reads `warning`.
pub fn feed_state_name(f: &sluice_control::coordinator::FeedView) -> &'static str {
    if f.warning.is_some() {
        "warning"
    } else {
        state_name(f.state)
    }
}

fn feed_json(s: &Shell, f: &sluice_control::coordinator::FeedView) -> Json {
    let time = s.capture().time_of(f.checkpoint).map(rfc3339_ms);
    let resolved = s
        .node()
        .maintainer(&f.id)
        .map(|m| m.status().resolved)
        .unwrap_or(f.resolved)
        .max(f.resolved)
        .max(f.checkpoint);
    let maintainer_addr = f.maintainer.as_ref().map(|n| {
        s.addr_of(n)
            .cloned()
            .unwrap_or_else(|| n.as_str().to_string())
    });
    json!({
        "id": f.id.as_str(),
        "state": feed_state_name(f),
        "checkpoint_ts": f.checkpoint,
        "checkpoint_time": time,
        "resolved_ts": resolved,
        "maintainer_addr": maintainer_addr,
        "error": f.warning.as_ref().or(f.error.as_ref()).map(|e| json!({"message": scrub(e)})),
        "restarts": f.restarts,
        "sink_uri": mask_url(&f.sink_uri),
        "epoch": f.epoch.0,
        "snapshot": snapshot_json(f),
    })
}

/// The snapshot copy of a changefeed that has one: `copying` or `finished`, tables left, rows.
fn snapshot_json(f: &sluice_control::coordinator::FeedView) -> Json {
    use sluice_control::config::SnapshotMode;
    let mode = f.config.snapshot.mode;
    match &f.snapshot {
        Some(s) => json!({
            "mode": mode.as_str(),
            "state": if s.finished { "finished" } else { "copying" },
            "tables_pending": s.tables_pending,
            "rows_copied": s.rows,
            "rows_per_second": f.snapshot_rows_per_sec,
            "rows_left_estimate": s.rows_left,
            "seconds_left_estimate": seconds_left(s.rows_left, f.snapshot_rows_per_sec),
            "error": s.error.as_ref().map(|e| scrub(e)),
        }),
        None if mode == SnapshotMode::Never => Json::Null,
        None => json!({ "mode": mode.as_str(), "state": "pending" }),
    }
}

/// The copy's time left at its current rate (`None` without statistics or while nothing moves).
fn seconds_left(rows_left: Option<u64>, rows_per_second: u64) -> Option<u64> {
    let left = rows_left?;
    (rows_per_second > 0).then(|| left.div_ceil(rows_per_second))
}

async fn health(State(st): State<AppState>) -> ApiResult {
    let (ready, capture_error) = st
        .query(|s| (s.node().leader().is_some(), s.capture().error()))
        .await?;
    if !ready {
        return Err(ServerError::NotReady("no coordinator elected yet".into()).into());
    }
    // Alive either way (200): a node whose capture is failing says so rather than "ok".
    let status = if capture_error.is_some() {
        "degraded"
    } else {
        "ok"
    };
    ok(json!({"status": status, "capture_error": capture_error}))
}

async fn status(State(st): State<AppState>) -> ApiResult {
    let v = st
        .query(|s| {
            json!({
                "version": env!("CARGO_PKG_VERSION"),
                "id": s.node_id().as_str(),
                "address": s.advertise_addr(),
                "pid": std::process::id(),
                "is_owner": s.node().coordinator().is_some(),
                "liveness": if s.is_stopping() { 1 } else { 0 },
                "upstream": mask_url(s.upstream_masked()),
                "meta_store": if s.is_cluster() { "etcd" } else { "embedded" },
                "captured_ts": s.capture().captured(),
                "capture_error": s.capture().error(),
                "dispatchers": s.dispatcher_count(),
                "inflight_bytes": s.inflight_bytes(),
                "memory_quota_bytes": s.quota_bytes(),
            })
        })
        .await?;
    ok(v)
}

async fn captures(State(st): State<AppState>) -> ApiResult {
    let v = st
        .query(|s| {
            let (cordoned, draining) = match s.node().coordinator() {
                Some(c) => (c.cordoned(), c.draining()),
                None => (Vec::new(), Vec::new()),
            };
            let leader = s.node().leader().cloned();
            let items: Vec<Json> = s
                .members()
                .iter()
                .map(|(n, addr)| {
                    json!({
                        "id": n.as_str(),
                        "address": addr,
                        "is_owner": leader.as_ref() == Some(n),
                        "cordoned": cordoned.contains(n) || draining.contains(n),
                        "draining": draining.contains(n),
                    })
                })
                .collect();
            json!({"items": items, "total": items.len()})
        })
        .await?;
    ok(v)
}

async fn capture_request(
    st: AppState,
    method: Method,
    uri: Uri,
    id: String,
    req: fn(NodeId) -> UserRequest,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    let node = NodeId::new(id.clone());
    let known = st
        .query({
            let node = node.clone();
            move |s| s.members().contains_key(&node)
        })
        .await?;
    if !known {
        return Err(ServerError::CaptureNotFound(id).into());
    }
    let r = req(node);
    st.query(move |s| s.deliver(Input::Request(r))).await?;
    ok(json!({}))
}

/// The hold points of this node (`--enable-debug-holds` only): the very switches the
/// simulator's scenarios flip (`Input::Hold`), so a test on real processes freezes the same
/// piece of work the simulator does.
async fn list_holds(State(st): State<AppState>) -> ApiResult {
    holds_allowed(&st)?;
    let (on, held) = st
        .query(|s| {
            let mut on = sluice_control::hold::HoldPoint::ALL
                .iter()
                .filter(|p| s.node().holds().is_on(**p))
                .map(|p| p.name())
                .collect::<Vec<_>>();
            let sink = s.registry().write_holds();
            on.extend(
                HoldAt::ALL
                    .iter()
                    .filter(|h| sink.is_on(**h))
                    .map(|h| h.name()),
            );
            let mut held = held_items(s);
            held.extend(
                HoldAt::ALL
                    .iter()
                    .filter(|h| sink.waiting(**h) > 0)
                    .map(|h| json!({"point": h.name(), "transactions": sink.waiting(*h)})),
            );
            (on, held)
        })
        .await?;
    let points = hold_names();
    ok(json!({"node": st.node_id.as_str(), "holds": on, "points": points, "held": held}))
}

/// The work waiting at a hold point on this node now, per changefeed (what a test waits for
/// before it kills a node).
fn held_items(s: &Shell) -> Vec<Json> {
    let holds = s.node().holds();
    s.node()
        .dispatcher_managers()
        .flat_map(|(cf, dm)| {
            dm.held(holds).into_iter().map(move |h| {
                json!({
                    "changefeed": cf.as_str(),
                    "point": h.point.name(),
                    "table_id": h.table.0,
                    "dispatcher_id": h.id.to_string(),
                })
            })
        })
        .collect()
}

/// Every hold point's name: the control plane's, then the MySQL sink's (`HoldAt`: a
/// transaction of rows frozen after the node's fence check, or before its commit).
fn hold_names() -> Vec<&'static str> {
    let control = sluice_control::hold::HoldPoint::ALL
        .iter()
        .map(|p| p.name());
    control
        .chain(HoldAt::ALL.iter().map(|h| h.name()))
        .collect()
}

/// Body: `{"point": NAME, "on": BOOL}` or `{"clear": true}` (every point off). Answers the holds
/// that are on afterwards.
async fn set_holds(State(st): State<AppState>, body: Bytes) -> ApiResult {
    holds_allowed(&st)?;
    let body: Json = parse_body(&body)?;
    let sink_hold = body["point"].as_str().and_then(HoldAt::from_name);
    if body["clear"] == true || sink_hold.is_some() {
        let on = body["clear"] != true && body["on"].as_bool().unwrap_or(true);
        st.query(move |s| {
            let holds = s.registry().write_holds();
            for h in HoldAt::ALL
                .into_iter()
                .filter(|h| sink_hold.is_none_or(|p| p == *h))
            {
                holds.set(h, on);
            }
        })
        .await?;
        if sink_hold.is_some() {
            return list_holds(State(st)).await;
        }
    }
    let switches: Vec<(sluice_control::hold::HoldPoint, bool)> = if body["clear"] == true {
        sluice_control::hold::HoldPoint::ALL
            .iter()
            .map(|p| (*p, false))
            .collect()
    } else {
        let name = body["point"].as_str().ok_or_else(|| {
            ServerError::BadRequest(
                "body must be {\"point\": NAME, \"on\": true|false} or {\"clear\": true}".into(),
            )
        })?;
        let point: sluice_control::hold::HoldPoint = name.parse().map_err(|e: String| {
            ServerError::BadRequest(format!("{e}; hold points: {}", hold_names().join(", ")))
        })?;
        vec![(point, body["on"].as_bool().unwrap_or(true))]
    };
    for (point, on) in switches {
        st.tx
            .send_timeout(
                ShellMsg::Input(Input::Hold { point, on }),
                Duration::from_secs(5),
            )
            .await
            .map_err(|_| ServerError::NotReady("the node is busy or shutting down".into()))?;
    }
    list_holds(State(st)).await
}

fn holds_allowed(st: &AppState) -> Result<(), ServerError> {
    if st.debug_holds {
        return Ok(());
    }
    Err(ServerError::Forbidden(
        "debug holds are off on this node: they freeze replication, so only a server started with \
         --enable-debug-holds (a test node, never a production one) accepts them"
            .into(),
    ))
}

async fn cordon(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    capture_request(st, method, uri, id, |node| UserRequest::Cordon {
        node,
        on: true,
    })
    .await
}
async fn uncordon(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    capture_request(st, method, uri, id, |node| UserRequest::Cordon {
        node,
        on: false,
    })
    .await
}
async fn drain(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    capture_request(st, method, uri, id, |node| UserRequest::Drain { node }).await
}

async fn list_changefeeds(State(st): State<AppState>, method: Method, uri: Uri) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    let v = st
        .query(|s| {
            let c = s
                .node()
                .coordinator()
                .ok_or_else(|| ServerError::NotReady("the coordinator is starting".into()))?;
            if !c.is_ready() {
                return Err(ServerError::NotReady("the coordinator is loading".into()));
            }
            let items: Vec<Json> = c
                .feeds()
                .iter()
                .filter(|f| f.state != FeedState::Removed)
                .map(|f| feed_json(s, f))
                .collect();
            Ok(json!({"items": items, "total": items.len()}))
        })
        .await??;
    ok(v)
}

/// The changefeed's view, or not found / not ready.
async fn feed_view(st: &AppState, id: &str) -> Result<Json, ServerError> {
    let cf = ChangefeedId::new(id);
    st.query(move |s| {
        let c = s
            .node()
            .coordinator()
            .ok_or_else(|| ServerError::NotReady("the coordinator is starting".into()))?;
        if !c.is_ready() {
            return Err(ServerError::NotReady("the coordinator is loading".into()));
        }
        match c
            .feeds()
            .into_iter()
            .find(|f| f.id == cf && f.state != FeedState::Removed)
        {
            Some(f) => Ok(feed_json(s, &f)),
            None => Err(ServerError::ChangefeedNotFound(cf.to_string())),
        }
    })
    .await?
}

async fn get_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    ok(feed_view(&st, &id).await?)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(alias = "id")]
    changefeed_id: Option<String>,
    sink_uri: Option<String>,
    start_ts: Option<u64>,
    start_position: Option<String>,
    start_gtid: Option<String>,
    /// The changefeed TOML (same keys as the `--config` file).
    config: Option<String>,
    /// `never` / `initial` (overrides the TOML's `snapshot`).
    snapshot: Option<String>,
}

fn parse_body<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, ServerError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ServerError::BadRequest(format!("request body: {e}")))
}

fn valid_id(id: &str) -> Result<(), ServerError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ServerError::BadRequest(format!(
            "changefeed id {id:?} is invalid: use 1 to 128 characters among letters, digits, '-' and '_'"
        )))
    }
}

async fn upstream_conn(url: &str) -> Result<mysql_async::Conn, ServerError> {
    let opts = mysql_async::Opts::from_url(url)
        .map_err(|e| ServerError::Upstream(scrub(&format!("bad upstream URL: {e}"))))?;
    let (addr, user) = (
        format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port()),
        opts.user().unwrap_or("").to_string(),
    );
    mysql_async::Conn::new(opts).await.map_err(|e| {
        ServerError::Upstream(scrub(
            &sluice_capture::CaptureError::from_connect(&addr, &user, e).to_string(),
        ))
    })
}

/// Resolves the start point to a commit ts and checks the upstream still has it and this node's
/// schema history and event store reach back to it.
async fn resolve_start(st: &AppState, body: &CreateBody) -> Result<Ts, ServerError> {
    use mysql_async::prelude::Queryable;
    let given = [
        body.start_ts.is_some(),
        body.start_position.is_some(),
        body.start_gtid.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if given > 1 {
        return Err(ServerError::InvalidStartPoint(
            "give at most one of start_ts, start_position and start_gtid".into(),
        ));
    }
    let mut conn = upstream_conn(&st.upstream).await?;
    let head = sluice_capture::binlog::master_position(&mut conn)
        .await
        .map_err(|e| ServerError::Upstream(scrub(&e.to_string())))?;
    let logs: Vec<(String, u64)> = conn
        .query::<mysql_async::Row, _>("SHOW BINARY LOGS")
        .await
        .map_err(|e| {
            ServerError::Upstream(scrub(&format!(
                "upstream SHOW BINARY LOGS failed: {}",
                sluice_capture::error::mysql_text(&e)
            )))
        })?
        .into_iter()
        .filter_map(|r| r.get::<String, usize>(0).map(|f| (f, 0)))
        .collect();
    let pos: BinlogPos = if let Some(ts) = body.start_ts {
        BinlogPos::from_ts(head.base(), ts)
    } else if let Some(p) = &body.start_position {
        let (file, off) = p.rsplit_once(':').ok_or_else(|| {
            ServerError::InvalidStartPoint(format!(
                "{p:?} is not FILE:POS (e.g. mysql-bin.000003:4)"
            ))
        })?;
        let off: u64 = off.parse().map_err(|_| {
            ServerError::InvalidStartPoint(format!("position {off:?} in {p:?} is not a number"))
        })?;
        BinlogPos::new(file, off)
    } else if let Some(g) = &body.start_gtid {
        gtid_position(&mut conn, g, &logs).await?
    } else {
        head.clone()
    };
    let _ = conn.disconnect().await;
    let ts = pos.ts().ok_or_else(|| {
        ServerError::InvalidStartPoint(format!("{pos} is not a binlog position of this upstream"))
    })?;
    if !logs.is_empty() && !logs.iter().any(|(f, _)| *f == pos.file) {
        let first = logs.first().map(|l| l.0.clone()).unwrap_or_default();
        let in_range =
            sluice_capture::pos::file_index(&pos.file) > sluice_capture::pos::file_index(&first);
        if !in_range {
            return Err(ServerError::InvalidStartPoint(format!(
                "binlog file {} was already purged upstream (the oldest is {first}); start at or after {first}:4, or omit the start point to start now",
                pos.file
            )));
        }
        return Err(ServerError::InvalidStartPoint(format!(
            "binlog file {} does not exist upstream",
            pos.file
        )));
    }
    let head_ts = head.ts().unwrap_or(u64::MAX);
    if ts > head_ts {
        return Err(ServerError::InvalidStartPoint(format!("{pos} is after the upstream's current position {head}; omit the start point to start now")));
    }
    let history = st.capture.history();
    let floor = history.snapshot_ts.max(st.capture.store.gc_ts());
    if ts < floor {
        return Err(ServerError::InvalidStartPoint(format!(
            "{pos} is older than this server's schema history and event store, which start at {}; start at or after it, or omit the start point to start now",
            BinlogPos::from_ts(head.base(), floor)
        )));
    }
    Ok(ts)
}

/// The position right after the transaction of MariaDB GTID `gtid` (`domain-server-seq`).
async fn gtid_position(
    conn: &mut mysql_async::Conn,
    gtid: &str,
    logs: &[(String, u64)],
) -> Result<BinlogPos, ServerError> {
    use mysql_async::prelude::Queryable;
    let parts: Vec<&str> = gtid.split('-').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u64>().is_err()) {
        return Err(ServerError::InvalidStartPoint(format!(
            "{gtid:?} is not a MariaDB GTID domain-server-seq (e.g. 0-1-42)"
        )));
    }
    for (file, _) in logs {
        let rows: Vec<mysql_async::Row> = conn
            .query(format!(
                "SHOW BINLOG EVENTS IN '{}'",
                file.replace('\'', "")
            ))
            .await
            .map_err(|e| {
                ServerError::Upstream(scrub(&format!(
                    "upstream SHOW BINLOG EVENTS failed: {}",
                    sluice_capture::error::mysql_text(&e)
                )))
            })?;
        let mut inside = false;
        for r in rows {
            let ty: String = r.get("Event_type").unwrap_or_default();
            let info: String = r.get("Info").unwrap_or_default();
            let end: u64 = r.get("End_log_pos").unwrap_or_default();
            if ty == "Gtid" {
                if inside {
                    break;
                }
                inside = info.split_whitespace().any(|w| w == gtid);
            } else if inside
                && (ty == "Xid"
                    || ty == "Query" && !info.eq_ignore_ascii_case("BEGIN")
                    || ty == "Query" && info.eq_ignore_ascii_case("COMMIT"))
            {
                return Ok(BinlogPos::new(file.clone(), end));
            }
        }
    }
    Err(ServerError::InvalidStartPoint(format!(
        "GTID {gtid} is not in the upstream's binlog (purged or not yet written)"
    )))
}

/// Parses a sink URI, then checks it once (reachability, credentials, writable storage). The
/// message is the sink's own (a parse error already says "invalid sink URI"), secrets scrubbed.
async fn check_sink_uri(uri: &str) -> Result<(), ServerError> {
    let refused = |e: sluice_sink::SinkError| match e {
        e @ sluice_sink::SinkError::InvalidUri { .. } => {
            ServerError::InvalidSinkUri(scrub(&e.to_string()))
        }
        e => ServerError::InvalidSinkUri(scrub(&format!(
            "sink {} cannot be used: {e}",
            mask_url(uri)
        ))),
    };
    sluice_sink::SinkUri::parse(uri).map_err(refused)?;
    match tokio::time::timeout(FORWARD_TIMEOUT, sluice_sink::check_sink(uri)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(refused(e)),
        Err(_) => Err(ServerError::InvalidSinkUri(format!(
            "sink {} did not answer within {} s",
            mask_url(uri),
            FORWARD_TIMEOUT.as_secs()
        ))),
    }
}

/// [`sluice_sink::prepare_new_changefeed`], bounded like the sink check.
async fn prepare_sink(id: &str, uri: &str, start_ts: u64) -> Result<(), ServerError> {
    let prepared = sluice_sink::prepare_new_changefeed(id, uri, start_ts);
    match tokio::time::timeout(FORWARD_TIMEOUT, prepared).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ServerError::InvalidSinkUri(scrub(&format!(
            "sink {} cannot be used: {e}",
            mask_url(uri)
        )))),
        Err(_) => Err(ServerError::InvalidSinkUri(format!(
            "sink {} did not answer within {} s",
            mask_url(uri),
            FORWARD_TIMEOUT.as_secs()
        ))),
    }
}

/// A snapshot's rows are upserts: a MySQL sink must be in safe mode to write them over rows
/// the stream wrote first.
fn check_snapshot_sink(uri: &str) -> Result<(), ServerError> {
    if let Ok(sluice_sink::SinkConfig::Mysql(m)) =
        sluice_sink::SinkUri::parse(uri).map(|u| u.config)
    {
        if !m.safe_mode {
            return Err(ServerError::BadRequest(
                "a changefeed with a snapshot needs its MySQL sink in safe mode (the snapshot's rows \
                 are written over rows the stream may have written first): drop safe-mode=false"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// The upstream can give a snapshot of every table the changefeed covers: it names the
/// snapshot's binlog position and the user may read each table. Refused with every problem named.
async fn check_snapshot_upstream(
    st: &AppState,
    filter: &sluice_control::filter::FilterConfig,
) -> Result<(), ServerError> {
    let f = sluice_control::filter::TableFilter::new(filter)
        .map_err(|e| ServerError::BadRequest(format!("changefeed config: {e}")))?;
    let tables: Vec<(String, String)> = st
        .query(move |s| {
            s.capture()
                .history()
                .tables_at(Ts::MAX)
                .into_iter()
                .filter(|t| f.matches(&t.database, &t.name))
                .map(|t| (t.database.clone(), t.name.clone()))
                .collect()
        })
        .await?;
    let opts = mysql_async::Opts::from_url(&st.upstream)
        .map_err(|e| ServerError::Upstream(format!("upstream URL: {e}")))?;
    let problems = async {
        let mut c = mysql_async::Conn::new(opts)
            .await
            .map_err(|e| e.to_string())?;
        let p = sluice_capture::snapshot_read::check_readable(&mut c, &tables, st.snapshot_read)
            .await
            .map_err(|e| e.to_string());
        let _ = c.disconnect().await;
        p
    }
    .await
    .map_err(|e| ServerError::Upstream(scrub(&format!("checking the snapshot: {e}"))))?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(ServerError::BadRequest(scrub(&format!(
        "the snapshot cannot read every table: {}; grant SELECT on them (or leave them out with \
         [filter] rules); nothing was created",
        problems.join("; ")
    ))))
}

async fn create_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> ApiResult {
    at_coordinator!(st, method, uri, body);
    let b: CreateBody = parse_body(&body)?;
    let id = b
        .changefeed_id
        .clone()
        .ok_or_else(|| ServerError::BadRequest("changefeed_id is required".into()))?;
    valid_id(&id)?;
    let sink_uri = b
        .sink_uri
        .clone()
        .ok_or_else(|| ServerError::BadRequest("sink_uri is required".into()))?;
    crate::mask::register_url(&sink_uri);
    let cfg_toml = match &b.config {
        Some(t) => parse_changefeed_toml(t)?,
        None => Default::default(),
    };
    let filter = filter_config(cfg_toml.filter.as_ref())?;
    let snapshot = crate::config::snapshot_config(&cfg_toml, b.snapshot.as_deref())?;
    // Exists already?
    let cf = ChangefeedId::new(id.clone());
    match feed_view(&st, &id).await {
        Ok(_) => return Err(ServerError::ChangefeedExists(id).into()),
        Err(ServerError::ChangefeedNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // The rules first: a static check, before the sink is probed over the network.
    let sink_dispatchers = cfg_toml.sink.map(|s| s.dispatchers).unwrap_or_default();
    sluice_sink::check_dispatchers(&sink_uri, &sink_dispatchers)
        .map_err(|e| ServerError::BadRequest(format!("changefeed config: {e}")))?;
    check_sink_uri(&sink_uri).await?;
    // Upstream settings.
    sluice_capture::check_upstream(&st.upstream)
        .await
        .map_err(|e| ServerError::Upstream(scrub(&e.to_string())))?;
    let start_ts = resolve_start(&st, &b).await?;
    if snapshot.mode != sluice_control::config::SnapshotMode::Never {
        check_snapshot_sink(&sink_uri)?;
        check_snapshot_upstream(&st, &filter).await?;
    }
    // A removed changefeed of the same id left its records downstream: not this one's progress.
    prepare_sink(&id, &sink_uri, start_ts).await?;
    let scheduler = cfg_toml.scheduler.unwrap_or_else(SchedulerConfig::default);
    let config = ChangefeedConfig {
        snapshot,
        sink_dispatchers,
        sink_uri,
        start_ts,
        scheduler,
        preferred_node: None,
        filter,
    };
    let req = UserRequest::CreateChangefeed {
        cf: cf.clone(),
        config,
    };
    st.query(move |s| s.deliver(Input::Request(req))).await?;
    let deadline = tokio::time::Instant::now() + ACCEPT_WAIT;
    loop {
        match feed_view(&st, &id).await {
            Ok(v) => return ok(v),
            Err(ServerError::ChangefeedNotFound(_)) if tokio::time::Instant::now() < deadline => {}
            Err(ServerError::ChangefeedNotFound(_)) => {
                return Err(ServerError::NotReady(format!(
                    "changefeed {id} was not created within {} s",
                    ACCEPT_WAIT.as_secs()
                ))
                .into())
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    sink_uri: Option<String>,
    config: Option<String>,
}

async fn update_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    at_coordinator!(st, method, uri, body);
    let b: UpdateBody = parse_body(&body)?;
    let v = feed_view(&st, &id).await?;
    if v["state"] != "stopped" && v["state"] != "failed" {
        return Err(ServerError::Conflict(format!("changefeed {id} must be paused before it is updated: run `sluice cli changefeed pause -c {id}` first")).into());
    }
    if let Some(u) = &b.sink_uri {
        crate::mask::register_url(u);
        check_sink_uri(u).await?;
    }
    let toml = match &b.config {
        Some(t) => Some(parse_changefeed_toml(t)?),
        None => None,
    };
    let filter = match toml.as_ref().and_then(|t| t.filter.as_ref()) {
        Some(f) => Some(filter_config(Some(f))?),
        None => None,
    };
    let sink_dispatchers = toml
        .as_ref()
        .and_then(|t| t.sink.as_ref())
        .map(|s| s.dispatchers.clone());
    // A new `snapshot` mode (e.g. `initial` after an `initial-only` copy finished, to stream).
    let snapshot = match toml.as_ref().filter(|t| t.snapshot.is_some()) {
        Some(t) => Some(crate::config::snapshot_config(t, None)?),
        None => None,
    };
    let cf = ChangefeedId::new(id.clone());
    let want = {
        let cf = cf.clone();
        st.query(move |s| {
            let c = s
                .node()
                .coordinator()
                .ok_or_else(|| ServerError::NotReady("the coordinator is starting".into()))?;
            let f = c
                .feeds()
                .into_iter()
                .find(|f| f.id == cf)
                .ok_or_else(|| ServerError::ChangefeedNotFound(cf.to_string()))?;
            let mut config = f.config.clone();
            if let Some(u) = b.sink_uri {
                config.sink_uri = u;
            }
            if let Some(sched) = toml.and_then(|t| t.scheduler) {
                config.scheduler = sched;
            }
            if let Some(snap) = snapshot {
                config.snapshot.mode = snap.mode;
            }
            if let Some(f) = filter {
                config.filter = f;
            }
            if let Some(d) = sink_dispatchers {
                config.sink_dispatchers = d;
            }
            sluice_sink::check_dispatchers(&config.sink_uri, &config.sink_dispatchers)
                .map_err(|e| ServerError::BadRequest(format!("changefeed config: {e}")))?;
            s.deliver(Input::Request(UserRequest::UpdateChangefeed {
                cf: cf.clone(),
                config: config.clone(),
            }));
            Ok::<_, ServerError>(config)
        })
        .await??
    };
    let deadline = tokio::time::Instant::now() + ACCEPT_WAIT;
    loop {
        let done = {
            let (cf, want) = (cf.clone(), want.clone());
            st.query(move |s| {
                s.node()
                    .coordinator()
                    .and_then(|c| c.feeds().into_iter().find(|f| f.id == cf))
                    .map(|f| f.config == want)
                    .unwrap_or(false)
            })
            .await?
        };
        if done {
            return ok(feed_view(&st, &id).await?);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(json_response(
                StatusCode::ACCEPTED,
                &json!({"accepted": true}),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn state_request(
    st: &AppState,
    id: &str,
    req: UserRequest,
    want: &'static [&'static str],
) -> ApiResult {
    feed_view(st, id).await?;
    st.query(move |s| s.deliver(Input::Request(req))).await?;
    let deadline = tokio::time::Instant::now() + ACCEPT_WAIT;
    loop {
        match feed_view(st, id).await {
            Ok(v) if want.iter().any(|w| v["state"] == *w) => return ok(v),
            Err(ServerError::ChangefeedNotFound(_)) if want.contains(&"removed") => {
                return ok(json!({}))
            }
            Err(e) if !matches!(e, ServerError::ChangefeedNotFound(_)) => return Err(e.into()),
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(json_response(
                StatusCode::ACCEPTED,
                &json!({"accepted": true}),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn pause_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    state_request(
        &st,
        &id,
        UserRequest::PauseChangefeed {
            cf: ChangefeedId::new(id.clone()),
        },
        &["stopped"],
    )
    .await
}
async fn resume_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    state_request(
        &st,
        &id,
        UserRequest::ResumeChangefeed {
            cf: ChangefeedId::new(id.clone()),
        },
        &["normal"],
    )
    .await
}
async fn remove_changefeed(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    state_request(
        &st,
        &id,
        UserRequest::RemoveChangefeed {
            cf: ChangefeedId::new(id.clone()),
        },
        &["removed"],
    )
    .await
}

// ---------------------------------------------------------------------- table views and requests

/// Where the changefeed's maintainer runs: here, there, or not placed.
async fn maintainer_at(st: &AppState, id: &str) -> Result<Where, ServerError> {
    let cf = ChangefeedId::new(id);
    let here = {
        let cf = cf.clone();
        st.query(move |s| {
            s.node()
                .maintainer(&cf)
                .map(|m| m.is_bootstrapped())
                .unwrap_or(false)
        })
        .await?
    };
    if here {
        return Ok(Where::Here);
    }
    let v = match coordinator_at(st).await? {
        Where::Here => feed_view(st, id).await?,
        Where::There(addr) => {
            let r = crate::client::request(
                &addr,
                "GET",
                &format!("/api/v2/changefeeds/{id}"),
                None,
                FORWARD_TIMEOUT,
            )
            .await
            .map_err(|e| ServerError::NotReady(e.to_string()))?;
            if r.status == 404 {
                return Err(ServerError::ChangefeedNotFound(id.to_string()));
            }
            serde_json::from_slice(&r.body).map_err(|e| ServerError::Internal(e.to_string()))?
        }
    };
    match v["maintainer_addr"].as_str() {
        Some(a) if a != st.addr => Ok(Where::There(a.to_string())),
        _ => Err(ServerError::NotReady(format!(
            "the maintainer of changefeed {id} is not ready (state {})",
            v["state"]
        ))),
    }
}

macro_rules! at_maintainer {
    ($st:expr, $id:expr, $method:expr, $uri:expr, $body:expr) => {
        if let Where::There(addr) = maintainer_at(&$st, &$id).await? {
            return forward(&addr, &$method, &$uri, &$body).await;
        }
    };
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn tables(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_maintainer!(st, id, method, uri, Bytes::new());
    let cf = ChangefeedId::new(id.clone());
    let v = st
        .query(move |s| {
            let m = s.node().maintainer(&cf).ok_or_else(|| ServerError::ChangefeedNotFound(cf.to_string()))?;
            // Per node, each table once (a split table has several spans), with its name.
            let mut by: std::collections::BTreeMap<Option<String>, std::collections::BTreeMap<u64, String>> = Default::default();
            for sp in m.spans() {
                by.entry(sp.node.map(|n| n.to_string())).or_default().insert(sp.span.table.0, sp.table_name);
            }
            let items: Vec<Json> = by
                .into_iter()
                .map(|(n, t)| json!({"node_id": n, "table_ids": t.keys().collect::<Vec<_>>(), "table_names": t.values().collect::<Vec<_>>()}))
                .collect();
            Ok::<_, ServerError>(json!({"items": items, "total": items.len()}))
        })
        .await??;
    ok(v)
}

async fn spans(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_maintainer!(st, id, method, uri, Bytes::new());
    let cf = ChangefeedId::new(id.clone());
    let v = st
        .query(move |s| {
            let m = s
                .node()
                .maintainer(&cf)
                .ok_or_else(|| ServerError::ChangefeedNotFound(cf.to_string()))?;
            let items: Vec<Json> = m
                .spans()
                .into_iter()
                .map(|sp| {
                    json!({
                        "table_id": sp.span.table.0,
                        "table_name": sp.table_name,
                        "start_key": hex(&sp.span.start.0),
                        "end_key": hex(&sp.span.end.0),
                        "node_id": sp.node.map(|n| n.to_string()),
                        "state": sp.state,
                        "checkpoint_ts": sp.checkpoint,
                        "operator": sp.operator,
                        "snapshot_rows": sp.snapshot_rows,
                    })
                })
                .collect();
            Ok::<_, ServerError>(json!({
                "items": items,
                "total": items.len(),
                "pending_requests": pending_request_items(m),
                "user_split_table_ids": m.user_split_tables().iter().map(|t| t.0).collect::<Vec<_>>(),
                "user_placed_tables": m
                    .user_placed_tables()
                    .into_iter()
                    .map(|(t, n)| json!({"table_id": t.0, "node_id": n.to_string()}))
                    .collect::<Vec<_>>(),
            }))
        })
        .await??;
    ok(v)
}

/// The maintainer's queued table requests, oldest first: a user's are kept in the meta store
/// (`persisted` once written) and survive a maintainer failover; the merge scheduler's are not.
fn pending_request_items(m: &sluice_control::maintainer::Maintainer) -> Vec<Json> {
    m.pending_requests()
        .into_iter()
        .map(|r| {
            let (kind, table, spans, to) = match r.req {
                TableRequest::Move { table, to } => ("move", table, None, Some(to.to_string())),
                TableRequest::Split { table, spans } => ("split", table, Some(spans), None),
                TableRequest::Merge { table } => ("merge", table, None, None),
                TableRequest::Snapshot { table } => ("snapshot", table, None, None),
            };
            json!({
                "request": kind,
                "table_id": table.0,
                "spans": spans,
                "target_node_id": to,
                "by": if r.by_user { "user" } else { "scheduler" },
                "persisted": r.persisted,
            })
        })
        .collect()
}

fn local_dispatcher_items(s: &Shell, cf: &ChangefeedId) -> Vec<Json> {
    s.node()
        .dispatcher_manager(cf)
        .map(|dm| {
            dm.dispatchers()
                .into_iter()
                .map(|d| {
                    let block = dm.block_of(d.id).map(|(ts, stage)| {
                        json!({"commit_ts": ts, "stage": format!("{stage:?}").to_lowercase()})
                    });
                    json!({
                        "node_id": s.node_id().as_str(),
                        "dispatcher_id": d.id.to_string(),
                        "table_id": d.span.table.0,
                        "start_key": hex(&d.span.start.0),
                        "end_key": hex(&d.span.end.0),
                        "is_trigger": d.is_trigger,
                        "state": d.state,
                        "checkpoint_ts": d.checkpoint,
                        "block": block,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn local_dispatchers(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let cf = ChangefeedId::new(id);
    let items = st.query(move |s| local_dispatcher_items(s, &cf)).await?;
    ok(json!({"items": items}))
}

async fn dispatchers(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
) -> ApiResult {
    at_coordinator!(st, method, uri, Bytes::new());
    feed_view(&st, &id).await?;
    let cf = ChangefeedId::new(id.clone());
    let (mut items, others) = st
        .query(move |s| {
            let others: Vec<String> = s
                .members()
                .iter()
                .filter(|(n, _)| *n != s.node_id())
                .map(|(_, a)| a.clone())
                .collect();
            (local_dispatcher_items(s, &cf), others)
        })
        .await?;
    let mut unreachable = Vec::new();
    for addr in others {
        match crate::client::request(
            &addr,
            "GET",
            &format!("/internal/v1/dispatchers/{id}"),
            None,
            Duration::from_secs(5),
        )
        .await
        {
            Ok(r) if r.status == 200 => {
                if let Ok(v) = serde_json::from_slice::<Json>(&r.body) {
                    if let Some(a) = v["items"].as_array() {
                        items.extend(a.iter().cloned());
                    }
                }
            }
            _ => unreachable.push(addr),
        }
    }
    ok(json!({"items": items, "total": items.len(), "unreachable": unreachable}))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TableBody {
    table_id: Option<u64>,
    target_node_id: Option<String>,
    spans: Option<usize>,
}

async fn table_request(
    st: AppState,
    method: Method,
    uri: Uri,
    id: String,
    body: Bytes,
    kind: &'static str,
) -> ApiResult {
    let b: TableBody = parse_body(&body)?;
    at_maintainer!(st, id, method, uri, body);
    let table = TableId(
        b.table_id
            .ok_or_else(|| ServerError::BadRequest("table_id is required".into()))?,
    );
    let req = match kind {
        "move" => {
            let to = b
                .target_node_id
                .clone()
                .ok_or_else(|| ServerError::BadRequest("target_node_id is required".into()))?;
            TableRequest::Move {
                table,
                to: NodeId::new(to),
            }
        }
        "split" => {
            let n = b.spans.unwrap_or(2);
            if !(2..=1024).contains(&n) {
                return Err(ServerError::BadRequest(format!(
                    "spans must be within 2..=1024, got {n}"
                ))
                .into());
            }
            TableRequest::Split { table, spans: n }
        }
        _ => TableRequest::Merge { table },
    };
    let cf = ChangefeedId::new(id.clone());
    st.query(move |s| {
        let m = s.node().maintainer(&cf).ok_or_else(|| ServerError::ChangefeedNotFound(cf.to_string()))?;
        if !m.spans().iter().any(|sp| sp.span.table == table) {
            return Err(ServerError::BadRequest(format!("table {} is not replicated by changefeed {cf}; list its tables with `sluice cli changefeed tables -c {cf}`", table.0)));
        }
        if let TableRequest::Move { to, .. } = &req {
            if !s.members().contains_key(to) {
                return Err(ServerError::CaptureNotFound(to.to_string()));
            }
        }
        if let TableRequest::Split { spans, .. } = &req {
            split_refusal(s, &cf, table, *spans, m.spans().iter().filter(|sp| sp.span.table == table).count())?;
        }
        s.deliver(Input::Request(UserRequest::Table { cf, req }));
        Ok(())
    })
    .await??;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"accepted": true}),
    ))
}

/// Why a split of `table` into `want` spans would be rejected by the maintainer, decided here
/// from the same facts (its spans now, its key, this node's regions of it) so that the caller
/// hears it instead of a 202; the maintainer still decides at its turn (the facts may change in
/// between: a DDL, new region statistics), and logs that outcome.
fn split_refusal(
    s: &Shell,
    cf: &ChangefeedId,
    table: TableId,
    want: usize,
    spans_now: usize,
) -> Result<(), ServerError> {
    let name = s
        .capture()
        .history()
        .table_by_id_at(table, Ts::MAX)
        .map(|t| (t.qualified_name(), t.key_columns.is_empty()));
    let (label, keyless) = match name {
        Some((n, keyless)) => (format!("table {n} (id {})", table.0), keyless),
        None => (format!("table {}", table.0), false),
    };
    if spans_now == want {
        return Ok(());
    }
    if spans_now > 1 {
        return Err(ServerError::Conflict(format!(
            "{label} is already in {spans_now} spans; merge it first with `sluice cli changefeed merge-table -c {cf} --table-id {}`",
            table.0
        )));
    }
    if keyless {
        return Err(ServerError::BadRequest(format!(
            "{label} has no primary key and no not-null unique key: its rows cannot be cut into key ranges, so it stays in one span"
        )));
    }
    let regions = s.regions_of(table).map(|r| r.len() + 1).unwrap_or(1);
    if regions < want {
        return Err(ServerError::BadRequest(format!(
            "{label} has {regions} region(s) and a split cuts only at region boundaries, so it cannot become {want} spans; \
             ask for at most {regions} spans, or lower region-size-bytes in the server configuration (regions are computed \
             from the upstream's table statistics every 60 s)"
        )));
    }
    Ok(())
}

async fn move_table(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    table_request(st, method, uri, id, body, "move").await
}
async fn split_table(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    table_request(st, method, uri, id, body, "split").await
}
async fn merge_table(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    table_request(st, method, uri, id, body, "merge").await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SnapshotBody {
    /// `db.table` patterns (`*`, `?`), comma-separated.
    tables: Option<String>,
}

/// `POST …/snapshot {"tables": "db.t*"}`: copy those tables of the changefeed again while it
/// streams. Every pattern must name tables the changefeed replicates; nothing is asked otherwise.
async fn snapshot_tables(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let b: SnapshotBody = parse_body(&body)?;
    at_maintainer!(st, id, method, uri, body);
    let patterns = b.tables.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        ServerError::BadRequest("tables is required (`db.table` patterns)".into())
    })?;
    let rules: Vec<String> = patterns.split(',').map(|p| p.trim().to_string()).collect();
    let matcher = sluice_control::filter::TableFilter::new(&sluice_control::filter::FilterConfig {
        rules,
        ignore_event: Vec::new(),
    })
    .map_err(|e| ServerError::BadRequest(format!("tables: {e}")))?;
    let cf = ChangefeedId::new(id.clone());
    let tables = st
        .query(move |s| {
            let m = s.node().maintainer(&cf).ok_or_else(|| ServerError::ChangefeedNotFound(cf.to_string()))?;
            let history = s.capture().history();
            let mine: std::collections::BTreeSet<TableId> = m.spans().iter().map(|sp| sp.span.table).collect();
            let mut chosen = Vec::new();
            let mut outside = Vec::new();
            for t in history.tables_at(Ts::MAX) {
                if !matcher.matches(&t.database, &t.name) {
                    continue;
                }
                match mine.contains(&t.table_id) {
                    true => chosen.push((t.table_id, t.qualified_name())),
                    false => outside.push(t.qualified_name()),
                }
            }
            if !outside.is_empty() {
                return Err(ServerError::BadRequest(format!(
                    "{} outside changefeed {cf}'s filter: {}; nothing was asked",
                    if outside.len() == 1 { "this table is" } else { "these tables are" },
                    outside.join(", ")
                )));
            }
            if chosen.is_empty() {
                return Err(ServerError::BadRequest(format!(
                    "no table of changefeed {cf} matches {patterns:?}; list its tables with `sluice cli changefeed tables -c {cf}`"
                )));
            }
            for (table, _) in &chosen {
                let req = TableRequest::Snapshot { table: *table };
                s.deliver(Input::Request(UserRequest::Table { cf: cf.clone(), req }));
            }
            Ok(chosen.into_iter().map(|(_, n)| n).collect::<Vec<_>>())
        })
        .await??;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"accepted": true, "tables": tables}),
    ))
}

async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let text = st.query(|s| crate::metrics::render(s)).await?;
    let mut r = (StatusCode::OK, scrub(&text)).into_response();
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    Ok(r)
}

async fn message(State(st): State<AppState>, body: Bytes) -> ApiResult {
    let env: Envelope = serde_json::from_slice(&body)
        .map_err(|e| ServerError::BadRequest(format!("message: {e}")))?;
    match st.tx.try_send(ShellMsg::Input(Input::Message {
        from: env.from,
        msg: env.msg,
    })) {
        Ok(()) => Ok(json_response(StatusCode::ACCEPTED, &json!({}))),
        Err(_) => Err(ServerError::NotReady("the node's input queue is full".into()).into()),
    }
}

/// The `[filter]` section: table rules (applied by the maintainer) and event types to drop
/// (applied by the dispatchers), validated here so a bad one changes nothing.
fn filter_config(
    f: Option<&crate::config::FilterToml>,
) -> Result<sluice_control::filter::FilterConfig, ServerError> {
    let Some(f) = f else {
        return Ok(Default::default());
    };
    let config = sluice_control::filter::FilterConfig {
        rules: f.rules.clone(),
        ignore_event: f.ignore_event.clone(),
    };
    sluice_control::filter::TableFilter::new(&config)
        .map_err(|e| ServerError::BadRequest(format!("changefeed config: {e}")))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_ms_is_utc_with_milliseconds() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339_ms(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            super::rfc3339_ms(951_782_400_007),
            "2000-02-29T00:00:00.007Z"
        );
    }
}
