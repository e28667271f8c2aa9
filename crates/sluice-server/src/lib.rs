//! The Sluice server: one process per node. It runs this node's control plane
//! ([`sluice_control::node::NodeState`], unchanged) inside a thin tokio shell ([`shell`]), the
//! data path (capture into the event store in [`upstream`], event batches to dispatchers, sink
//! workers in [`sinkwork`]), the meta store ([`meta`]: embedded on a single node;
//! [`metabackend`] says where membership and leadership come from), node-to-node messages
//! ([`net`]) and the HTTP API ([`api`]) with Prometheus [`metrics`].
//!
//! Invariants kept across the crate: the state machines are driven only through
//! `NodeState::handle`; every queue has a named bound; no secret is logged or returned
//! ([`mask`]); errors are typed ([`error::ServerError`]) and say what to do.

pub mod api;
pub mod client;
pub mod config;
pub mod error;
pub mod mask;
pub mod meta;
pub mod metabackend;
pub mod metrics;
pub mod net;
pub mod shell;
pub mod sinkwork;
pub mod upstream;

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::mask::scrub;
use sluice_types::NodeId;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Bump and return this data dir's incarnation counter (a restarted node is a new incarnation).
fn next_incarnation(dir: &std::path::Path) -> Result<u64, ServerError> {
    let p = dir.join("incarnation");
    let cur: u64 = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let next = cur + 1;
    let tmp = dir.join("incarnation.tmp");
    std::fs::write(&tmp, next.to_string())?;
    std::fs::rename(&tmp, &p)?;
    Ok(next)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Runs a node until SIGTERM / SIGINT.
pub async fn run(cfg: ServerConfig) -> Result<(), ServerError> {
    mask::register_url(&cfg.upstream);
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| ServerError::Config(format!("cannot create data dir {}: {e}", cfg.data_dir.display())))?;
    if !cfg.etcd.is_empty() {
        return Err(ServerError::Config(
            "--etcd: the etcd meta store is not available in this build; run without --etcd for a single node".into(),
        ));
    }
    tracing::info!(node = %cfg.node_id, addr = %cfg.addr, upstream = %mask::mask_url(&cfg.upstream), data_dir = %cfg.data_dir.display(), "starting");
    match sluice_capture::check_upstream(&cfg.upstream).await {
        Ok(_) => {}
        // A node with a schema history can start while the upstream is unreachable: capture
        // retries. Wrong settings, or a first start (the snapshot needs the upstream), are fatal.
        Err(e) if e.is_retryable() && cfg.data_dir.join("schema-history.json").exists() => {
            tracing::warn!("upstream not reachable now, capture will retry: {}", scrub(&e.to_string()));
        }
        Err(e) => return Err(ServerError::Upstream(scrub(&e.to_string()))),
    }
    let listener = tokio::net::TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| ServerError::Config(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let capture = upstream::open(&cfg.data_dir, &cfg.upstream, cfg.store_cache_bytes, cfg.skip_unparseable_ddl).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let capture_thread = upstream::spawn(capture.clone(), cfg.data_dir.clone(), cfg.upstream.clone(), cfg.server_id, stop_rx);
    let incarnation = next_incarnation(&cfg.data_dir)?;
    let node_id = NodeId::new(cfg.node_id.clone());
    let meta = metabackend::MetaBackend::embedded(&cfg.data_dir, &node_id, &cfg.advertise_addr)?;
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let (_meta_tx, meta_rx) = mpsc::unbounded_channel();
    let mut net = net::Net::default();
    net.incarnation = incarnation;
    let metrics = Arc::new(metrics::Metrics::default());
    let mut shell = shell::Shell::new(
        node_id.clone(),
        incarnation,
        cfg.advertise_addr.clone(),
        capture.clone(),
        meta,
        net,
        cfg.memory_quota_bytes,
        metrics,
        report_tx,
    );
    shell.store_path = cfg.data_dir.join("events.redb");
    shell.upstream_masked = mask::mask_url(&cfg.upstream);
    let (tx, rx) = mpsc::channel(shell::MAX_QUEUED_INPUTS);
    let shell_task = tokio::spawn(shell::run(shell, rx, report_rx, meta_rx));
    let state = api::AppState {
        tx: tx.clone(),
        capture: capture.clone(),
        upstream: Arc::new(cfg.upstream.clone()),
        node_id,
        addr: cfg.advertise_addr.clone(),
    };
    tracing::info!(incarnation, "serving the API on http://{}", cfg.addr);
    let app = api::router(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| ServerError::Internal(format!("http server: {e}")))?;
    tracing::info!("shutting down");
    let (done_tx, done_rx) = oneshot::channel();
    if tx.send(ShellMsgShutdown::msg(done_tx)).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(10), done_rx).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), shell_task).await;
    let _ = stop_tx.send(true);
    let _ = tokio::task::spawn_blocking(move || capture_thread.join()).await;
    let _ = capture.store.persist();
    tracing::info!("stopped");
    Ok(())
}

struct ShellMsgShutdown;
impl ShellMsgShutdown {
    fn msg(done: oneshot::Sender<()>) -> shell::ShellMsg {
        shell::ShellMsg::Shutdown(done)
    }
}
