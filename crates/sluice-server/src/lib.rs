//! The Sluice server: one process per node. It runs this node's control plane
//! ([`sluice_control::node::NodeState`], unchanged) inside a thin tokio shell ([`shell`]), the
//! data path (capture into the event store in [`upstream`], event batches to dispatchers, sink
//! workers in [`sinkwork`]), the meta store ([`meta`]: embedded on a single node;
//! [`metabackend`] says where membership and leadership come from), node-to-node messages
//! ([`net`]) and the HTTP API ([`api`]) with Prometheus [`metrics`]. A data dir serves one
//! process at a time ([`datadir`]).
//!
//! Invariants kept across the crate: the state machines are driven only through
//! `NodeState::handle`; every queue has a named bound; no secret is logged or returned
//! ([`mask`]); errors are typed ([`error::ServerError`]) and say what to do.
//!
//! Layout rule: one concern per file (the shell that drives the node, the API, the sink workers,
//! the meta backends, capture's tasks, metrics); the shell's fields are private and the other
//! modules read it through accessors or give it inputs; each file opens with what it owns.

pub mod api;
pub mod applied;
pub mod client;
pub mod config;
pub mod datadir;
pub mod error;
pub mod etcdmeta;
pub mod mask;
pub mod meta;
pub mod metabackend;
pub mod metrics;
pub mod net;
pub mod rowlag;
pub mod shell;
pub mod sinkwork;
pub mod snapshot;
pub mod source;
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
    let cur: u64 = std::fs::read_to_string(&p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
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

/// The etcd client and lease view of a cluster node (for its write fence and its resignation).
type EtcdHandle = (etcd_client::Client, Arc<std::sync::Mutex<etcdmeta::View>>);

/// Capture's shared view, the sender that stops the capture thread, and that thread.
type Capturing = (
    Arc<upstream::CaptureShared>,
    watch::Sender<bool>,
    std::thread::JoinHandle<()>,
);

/// Runs a node until SIGTERM / SIGINT.
pub async fn run(cfg: ServerConfig) -> Result<(), ServerError> {
    mask::register_url(&cfg.upstream);
    // Before anything in the dir is opened; held until the process ends.
    let _data_dir = lock_data_dir(&cfg)?;
    tracing::info!(node = %cfg.node_id, addr = %cfg.addr, upstream = %mask::mask_url(&cfg.upstream), data_dir = %cfg.data_dir.display(), "starting");
    check_upstream_at_start(&cfg).await?;
    let listener = tokio::net::TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| ServerError::Config(format!("cannot listen on {}: {e}", cfg.addr)))?;
    let (capture, stop_tx, capture_thread) = start_capture(&cfg).await?;
    // Incarnations grow across restarts; a fenced process counts up within its block.
    let incarnation = next_incarnation(&cfg.data_dir)? * 1_000_000;
    let node_id = NodeId::new(cfg.node_id.clone());
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let (meta_tx, meta_rx) = mpsc::unbounded_channel();
    let meta = open_meta(&cfg, &node_id, incarnation, meta_tx).await?;
    let cluster = meta.is_cluster();
    let etcd_client = etcd_handle(&meta);
    let mut shell = new_shell(&cfg, &node_id, incarnation, &capture, meta, report_tx);
    shell.set_snapshot_read(cfg.snapshot_read);
    shell
        .registry()
        .set_binlog_base(capture.history().snapshot_pos.base());
    if let Some((_, view)) = &etcd_client {
        set_lease_fence(&shell, view, cfg.lease_ttl_secs);
    }
    let (tx, rx) = mpsc::channel(shell::MAX_QUEUED_INPUTS);
    let shell_task = tokio::spawn(shell::run(shell, rx, report_rx, meta_rx));
    let regions = tokio::spawn(upstream::regions_task(
        capture.clone(),
        cfg.upstream.clone(),
        cfg.region_size_bytes,
        tx.clone(),
    ));
    let state = api::AppState {
        tx: tx.clone(),
        capture: capture.clone(),
        upstream: Arc::new(cfg.upstream.clone()),
        snapshot_read: cfg.snapshot_read,
        node_id,
        addr: cfg.advertise_addr.clone(),
        debug_holds: cfg.enable_debug_holds,
    };
    tracing::info!(
        incarnation,
        cluster,
        "serving the API on http://{}",
        cfg.addr
    );
    let (stop_http_tx, server) = serve_api(listener, &state);
    if cluster {
        tokio::spawn(undrain_on_start(state.clone()));
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    if cluster {
        leave_cluster(&state, &etcd_client).await;
    }
    stop_serving(stop_http_tx, regions, server).await;
    stop_shell(&tx, shell_task).await;
    let _ = stop_tx.send(true);
    let _ = tokio::task::spawn_blocking(move || capture_thread.join()).await;
    let _ = capture.store.persist();
    tracing::info!("stopped");
    Ok(())
}

/// Opens the event store and the schema history and starts the capture thread, which stops
/// when the returned sender turns true.
async fn start_capture(cfg: &ServerConfig) -> Result<Capturing, ServerError> {
    let capture = upstream::open(
        &cfg.data_dir,
        &cfg.upstream,
        cfg.store_cache_bytes,
        cfg.skip_unparseable_ddl,
        &cfg.etcd,
    )
    .await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let capture_thread = upstream::spawn(
        capture.clone(),
        cfg.data_dir.clone(),
        cfg.upstream.clone(),
        cfg.server_id,
        cfg.heartbeat_interval.map(|i| (cfg.node_id.clone(), i)),
        stop_rx,
    );
    Ok((capture, stop_tx, capture_thread))
}

/// Stops the HTTP API (waiting for it) and the regions task.
async fn stop_serving(
    stop_http_tx: oneshot::Sender<()>,
    regions: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let _ = stop_http_tx.send(());
    regions.abort();
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("http server: {e}"),
        Err(e) => tracing::warn!("http server task: {e}"),
    }
}

/// Creates the data dir if needed and locks it for this process.
fn lock_data_dir(cfg: &ServerConfig) -> Result<datadir::DataDirLock, ServerError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        ServerError::Config(format!(
            "cannot create data dir {}: {e}",
            cfg.data_dir.display()
        ))
    })?;
    datadir::lock(&cfg.data_dir, &cfg.addr)
}

/// Checks the upstream's settings before anything starts.
async fn check_upstream_at_start(cfg: &ServerConfig) -> Result<(), ServerError> {
    match sluice_capture::check_upstream(&cfg.upstream).await {
        Ok(_) => Ok(()),
        // A node with a schema history can start while the upstream is unreachable: capture
        // retries. Wrong settings, or a first start (the snapshot needs the upstream), are fatal.
        Err(e) if e.is_retryable() && cfg.data_dir.join("schema-history.json").exists() => {
            tracing::warn!(
                "upstream not reachable now, capture will retry: {}",
                scrub(&e.to_string())
            );
            Ok(())
        }
        Err(e) => Err(ServerError::Upstream(scrub(&e.to_string()))),
    }
}

/// The meta store: embedded on a single node, etcd (with this incarnation's lease) in a cluster.
async fn open_meta(
    cfg: &ServerConfig,
    node_id: &NodeId,
    incarnation: u64,
    meta_tx: mpsc::UnboundedSender<sluice_control::Input>,
) -> Result<metabackend::MetaBackend, ServerError> {
    if cfg.etcd.is_empty() {
        return metabackend::MetaBackend::embedded(&cfg.data_dir, node_id, &cfg.advertise_addr);
    }
    let m = etcdmeta::EtcdMeta::connect(
        &cfg.etcd,
        node_id.clone(),
        cfg.advertise_addr.clone(),
        incarnation,
        cfg.lease_ttl_secs,
        meta_tx,
    )
    .await?;
    Ok(metabackend::MetaBackend::Etcd {
        meta: Box::new(m),
        known_alive: None,
        known_leader: None,
        fences: 0,
    })
}

fn etcd_handle(meta: &metabackend::MetaBackend) -> Option<EtcdHandle> {
    match meta {
        metabackend::MetaBackend::Etcd { meta, .. } => {
            Some((meta.client.clone(), meta.view.clone()))
        }
        _ => None,
    }
}

fn new_shell(
    cfg: &ServerConfig,
    node_id: &NodeId,
    incarnation: u64,
    capture: &Arc<upstream::CaptureShared>,
    meta: metabackend::MetaBackend,
    report_tx: mpsc::UnboundedSender<sinkwork::SinkReport>,
) -> shell::Shell {
    let mut net = net::Net::default();
    net.incarnation = incarnation;
    let metrics = Arc::new(metrics::Metrics::default());
    shell::Shell::new(
        node_id.clone(),
        incarnation,
        cfg.advertise_addr.clone(),
        capture.clone(),
        meta,
        net,
        cfg.memory_quota_bytes,
        metrics,
        report_tx,
        (cfg.data_dir.join("events.redb"), cfg.upstream.clone()),
    )
}

/// Sinks write only while the node's lease is fresh (renewed within its TTL, less two ticks) and
/// held by this incarnation.
fn set_lease_fence(
    shell: &shell::Shell,
    view: &Arc<std::sync::Mutex<etcdmeta::View>>,
    lease_ttl_secs: u64,
) {
    let view = view.clone();
    let limit = Duration::from_secs(lease_ttl_secs)
        .saturating_sub(Duration::from_millis(2 * shell::TICK_MS));
    shell.registry().set_guard(Arc::new(move || {
        let v = view.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = v.renewed.map(|r| r.elapsed() < limit).unwrap_or(false);
        (fresh && v.want_incarnation == v.incarnation).then_some(v.incarnation)
    }));
}

/// Serves the HTTP API on `listener` until the returned sender fires.
fn serve_api(
    listener: tokio::net::TcpListener,
    state: &api::AppState,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let app = api::router(state.clone());
    let (stop_http_tx, stop_http_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_http_rx.await;
            })
            .await
    });
    (stop_http_tx, server)
}

/// Hands the node's work over while still serving node-to-node messages, then resigns.
async fn leave_cluster(state: &api::AppState, etcd_client: &Option<EtcdHandle>) {
    handover(state).await;
    if let Some((client, view)) = etcd_client {
        let m = etcdmeta::resign_with(client.clone(), view.clone(), &state.node_id);
        m.await;
    }
}

/// Asks the shell to shut down and waits for it (bounded).
async fn stop_shell(tx: &mpsc::Sender<shell::ShellMsg>, shell_task: tokio::task::JoinHandle<()>) {
    let (done_tx, done_rx) = oneshot::channel();
    if tx.send(ShellMsgShutdown::msg(done_tx)).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(10), done_rx).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), shell_task).await;
}

struct ShellMsgShutdown;
impl ShellMsgShutdown {
    fn msg(done: oneshot::Sender<()>) -> shell::ShellMsg {
        shell::ShellMsg::Shutdown(done)
    }
}

/// Drain this node through the coordinator and wait (bounded by [`HANDOVER_TIMEOUT`]) until no
/// maintainer and no dispatcher runs here.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(30);

async fn handover(st: &api::AppState) {
    let me = st.node_id.clone();
    let deadline = tokio::time::Instant::now() + HANDOVER_TIMEOUT;
    let path = format!("/api/v2/captures/{}/drain", me.as_str());
    loop {
        let leader = st
            .query(|s| {
                s.node().leader().map(|l| {
                    s.addr_of(l)
                        .cloned()
                        .unwrap_or_else(|| l.as_str().to_string())
                })
            })
            .await
            .ok()
            .flatten();
        if let Some(addr) = leader {
            match client::request(&addr, "POST", &path, None, Duration::from_secs(5)).await {
                Ok(r) if r.status < 300 => break,
                _ => {}
            }
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("could not drain through the coordinator; leaving without a handover");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        let busy = st
            .query(|s| {
                let others = s.members().len() > 1;
                (
                    s.node().maintainers().count() + s.dispatcher_count(),
                    others,
                )
            })
            .await
            .unwrap_or((0, false));
        if busy.0 == 0 || !busy.1 {
            tracing::info!(left = busy.0, "handover done");
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                left = busy.0,
                "handover incomplete after {} s",
                HANDOVER_TIMEOUT.as_secs()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A node that was drained before it stopped takes work again once it is back.
async fn undrain_on_start(st: api::AppState) {
    let me = st.node_id.clone();
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let leader = st
            .query(|s| {
                s.node().leader().map(|l| {
                    s.addr_of(l)
                        .cloned()
                        .unwrap_or_else(|| l.as_str().to_string())
                })
            })
            .await
            .ok()
            .flatten();
        let Some(addr) = leader else { continue };
        let Ok(r) = client::request(
            &addr,
            "GET",
            "/api/v2/captures",
            None,
            Duration::from_secs(5),
        )
        .await
        else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) else {
            continue;
        };
        let Some(items) = v["items"].as_array() else {
            continue;
        };
        let Some(mine) = items.iter().find(|i| i["id"] == me.as_str()) else {
            continue;
        };
        if mine["draining"] == true {
            let _ = client::request(
                &addr,
                "POST",
                &format!("/api/v2/captures/{}/uncordon", me.as_str()),
                None,
                Duration::from_secs(5),
            )
            .await;
            tracing::info!("this node was drained before it stopped: uncordoned");
        }
        return;
    }
}
