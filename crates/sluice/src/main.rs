//! The `sluice` binary: `server` (one node, [`sluice_server`]), `cli` (the HTTP API's client,
//! [`cli`]), `check` and `consume` (the tools of `sluice-sink`).
//!
//! Exit codes: 0 success; 1 a difference found (`check`) or a request refused by the server;
//! 2 bad usage, bad configuration or an error. No output carries a password: URLs are masked
//! and every line passes through `sluice_server::mask::scrub`.

mod cli;

/// Decoding wide rows allocates per value; mimalloc makes that about 1.6x cheaper than glibc's
/// allocator here (docs/capture.md, `bench_decode`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Args as ClapArgs, Parser, Subcommand};
use sluice_server::mask::{mask_url, register_url, scrub, ScrubWriter};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: change data capture from MySQL-compatible databases"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node (HTTP API, coordinator candidate, maintainers and dispatchers).
    Server(ServerArgs),
    /// Talk to a running server's HTTP API.
    Cli(cli::CliArgs),
    /// Compare an upstream and a downstream table by table.
    Check(CheckArgs),
    /// Apply a cloud-storage changefeed output to a MySQL-compatible downstream.
    Consume(ConsumeArgs),
}

#[derive(ClapArgs)]
struct ServerArgs {
    /// HTTP address for the API and node-to-node messages.
    #[arg(long)]
    addr: Option<String>,
    /// Address other nodes and clients reach this node at (default: --addr).
    #[arg(long)]
    advertise_addr: Option<String>,
    /// Directory for the event store, schema history and (single node) the meta store.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The upstream: mysql://user:pass@host:port
    #[arg(long)]
    upstream: Option<String>,
    /// etcd endpoints (comma-separated); without it the node runs alone on an embedded store.
    #[arg(long)]
    etcd: Option<String>,
    /// This node's id (default: the advertised address).
    #[arg(long)]
    node_id: Option<String>,
    /// Server TOML (kebab-case keys; see docs/configuration.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Let `/api/v2/debug/holds` switch the control plane's hold points on this node (for the
    /// failover suite; never on a production node: a hold freezes replication).
    #[arg(long)]
    enable_debug_holds: bool,
}

#[derive(ClapArgs)]
struct CheckArgs {
    /// mysql://user:pass@host:port of the upstream.
    #[arg(long)]
    upstream: String,
    /// mysql://user:pass@host:port of the downstream.
    #[arg(long)]
    downstream: String,
    /// Comma-separated `db.table` patterns with `*` (default: every non-system table).
    #[arg(long, default_value = "")]
    tables: String,
    /// Rows per compared chunk.
    #[arg(long)]
    chunk_size: Option<usize>,
}

#[derive(ClapArgs)]
struct ConsumeArgs {
    /// The storage sink URI the changefeed wrote to (file://… or s3://…, with its protocol).
    #[arg(long, conflicts_with = "kafka", required_unless_present = "kafka")]
    storage: Option<String>,
    /// The Kafka sink URI the changefeed wrote to (kafka://host:port/topic?protocol=…); read
    /// from the start of every partition until caught up.
    #[arg(long)]
    kafka: Option<String>,
    /// With --kafka and protocol=avro: the schema registry (added to the URI as its
    /// schema-registry parameter).
    #[arg(long, requires = "kafka")]
    schema_registry: Option<String>,
    /// With --kafka: how long to wait for more once every partition reached its end.
    #[arg(long, default_value = "2s")]
    idle: String,
    /// The downstream MySQL sink URI (mysql://user:pass@host:port/).
    #[arg(long)]
    downstream: String,
}

fn init_logs(level: &str) {
    let level = match level {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(|| ScrubWriter)
        .try_init();
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {}", scrub(&msg.to_string()));
    ExitCode::from(2)
}

fn server(a: ServerArgs) -> ExitCode {
    if let Some(u) = &a.upstream {
        register_url(u);
    }
    let flags = sluice_server::config::Flags {
        addr: a.addr,
        advertise_addr: a.advertise_addr,
        data_dir: a.data_dir,
        upstream: a.upstream,
        etcd: a.etcd,
        node_id: a.node_id,
        config: a.config,
        enable_debug_holds: a.enable_debug_holds,
    };
    let cfg = match sluice_server::config::ServerConfig::resolve(flags) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    init_logs(&cfg.log_level);
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    match rt.block_on(sluice_server::run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{}", scrub(&e.to_string()));
            fail(e)
        }
    }
}

fn check(a: CheckArgs) -> ExitCode {
    register_url(&a.upstream);
    register_url(&a.downstream);
    let mut args = sluice_sink::check::CheckArgs::new(&a.upstream, &a.downstream, &a.tables);
    if let Some(c) = a.chunk_size {
        args.chunk_size = c.max(1);
    }
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    match rt.block_on(sluice_sink::check::run(&args)) {
        Ok(report) => {
            println!("{}", scrub(&report.to_string()));
            ExitCode::from(report.exit_code() as u8)
        }
        Err(e) => fail(format!(
            "check {} against {}: {e}",
            mask_url(&a.upstream),
            mask_url(&a.downstream)
        )),
    }
}

fn consume(a: ConsumeArgs) -> ExitCode {
    let source = a
        .storage
        .clone()
        .or_else(|| a.kafka.clone())
        .unwrap_or_default();
    register_url(&source);
    register_url(&a.downstream);
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let done = match (&a.storage, &a.kafka) {
        (Some(storage), _) => rt.block_on(sluice_sink::consume::run(
            &sluice_sink::consume::ConsumeArgs {
                storage: storage.clone(),
                downstream: a.downstream.clone(),
            },
        )),
        (None, Some(kafka)) => {
            let kafka = match cli::with_schema_registry(kafka.clone(), a.schema_registry.as_deref())
            {
                Ok(k) => k,
                Err(e) => return fail(e),
            };
            register_url(&kafka);
            let Some(idle) = sluice_sink::uri::parse_duration(&a.idle) else {
                return fail(format!(
                    "--idle {:?}: expected a duration like 2s or 500ms",
                    a.idle
                ));
            };
            rt.block_on(sluice_sink::kafka::consume::run(
                &sluice_sink::kafka::consume::KafkaConsumeArgs {
                    kafka: kafka.clone(),
                    downstream: a.downstream.clone(),
                    idle,
                },
            ))
        }
        (None, None) => return fail("consume needs --storage or --kafka".to_string()),
    };
    match done {
        Ok(report) => {
            println!("{}", scrub(&report.to_string()));
            ExitCode::SUCCESS
        }
        Err(e) => fail(format!(
            "consume {} into {}: {e}",
            mask_url(&source),
            mask_url(&a.downstream)
        )),
    }
}

/// Transparent huge pages off for this process. mimalloc asks for them on the memory it maps,
/// and gives freed memory back to the OS in small pieces; touching such a piece again then
/// faults in (and zeroes) a whole 2 MiB page. With a stream of rows allocated on one thread and
/// freed on another (snapshot chunks, sink batches), that zeroing was 18-28% of the server's
/// CPU in `perf` profiles of `bench/snapshot.sh`; with it off the same copy used 1.2 CPU
/// seconds instead of 1.5-2.1 (docs/figures/snapshot-bench-4aae865.md). The flag covers memory
/// already mapped too: the kernel checks it at each fault.
fn no_huge_pages() {
    // A kernel without the flag (before 3.15) only costs the zeroing above: nothing to report.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

fn main() -> ExitCode {
    no_huge_pages();
    let args = Args::parse();
    match args.command {
        Command::Server(a) => server(a),
        Command::Cli(a) => cli::run(a),
        Command::Check(a) => check(a),
        Command::Consume(a) => consume(a),
    }
}
