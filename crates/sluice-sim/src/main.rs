//! `sluice-sim`: runs scenario files (`run`) and random explorations (`explore`) against the real
//! control plane, and scale runs (`scale`: many spans, checkers off, timed). Exit status: 0 every
//! step and invariant held (`scale`: every span replicating); 1 a step or an invariant failed
//! (`scale`: not every span replicating in time); 2 the file (or a `scale` option) is invalid.
//!
//! Wall time and peak RSS are measured here only: the simulator itself never reads a clock.

/// The allocator the server runs the control plane with (`sluice`'s `main.rs`): a scale run
/// allocates per span and per report, and glibc's allocator took a fifth of its CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use sluice_sim::explore;
use sluice_sim::scale::{self, Outcome, ScaleSpec};
use sluice_sim::scenario;
use sluice_sim::world::Sim;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "sluice-sim",
    version,
    about = "Deterministic simulator of Sluice's control plane"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scenario file.
    Run {
        file: PathBuf,
        /// Overrides the file's `world.seed`.
        #[arg(long)]
        seed: Option<u64>,
        /// Print every event.
        #[arg(long)]
        verbose: bool,
        /// Switch on a named mutation (needs a build with the `mutations` feature).
        #[arg(long)]
        mutation: Vec<String>,
    },
    /// Run many seeds of random worlds (or of one scenario with random faults and timings).
    Explore {
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        #[arg(long, default_value_t = 0)]
        start: u64,
        #[arg(long)]
        scenario: Option<PathBuf>,
        /// Do not fail when a cell of the coverage matrix was hit fewer than this many times
        /// (0 turns the coverage requirement off).
        #[arg(long, default_value_t = explore::MIN_COVERAGE)]
        min_coverage: u64,
        #[arg(long)]
        verbose: bool,
        #[arg(long)]
        mutation: Vec<String>,
        /// Print the scenario file each seed runs instead of running it.
        #[arg(long)]
        print: bool,
        /// Random worlds without sink faults: every seed runs what it ran before explore
        /// injected them (seeds that draw no sink fault run the same either way).
        #[arg(long)]
        no_sink_faults: bool,
    },
    /// Time the scheduler alone: one changefeed over SPANS spans on NODES nodes, checkers off,
    /// until every span is replicating.
    Scale {
        #[arg(long, default_value_t = scale::DEFAULT_SPANS)]
        spans: u64,
        #[arg(long, default_value_t = scale::DEFAULT_NODES)]
        nodes: u64,
        /// Tables the spans are split over (default: one per 100 spans); a table of several
        /// spans is split by its regions.
        #[arg(long)]
        tables: Option<u64>,
        /// Give up after this many seconds of wall time (0: never) and say how far it got.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// The changefeed's `[scheduler] add-table-batch-size`: absent spans given an add per
        /// maintainer tick (default: the changefeed default).
        #[arg(long)]
        add_table_batch_size: Option<u64>,
    },
}

/// Peak resident set size of this process in KiB (`VmHWM` of /proc/self/status), if known.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `scale`: builds the world, runs it with a wall-clock timeout and a progress line on stderr
/// every 10 s, and prints the figures.
fn scale_command(
    (spans, nodes, tables): (u64, u64, Option<u64>),
    batch: Option<u64>,
    timeout_secs: u64,
) -> ExitCode {
    let spec = ScaleSpec::new(spans, nodes, tables).and_then(|s| match batch {
        Some(n) => s.with_add_table_batch_size(n),
        None => Ok(s),
    });
    let spec = match spec {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice-sim scale: {e}");
            return ExitCode::from(2);
        }
    };
    let per = spec.spans as f64 / spec.tables as f64;
    println!(
        "scale: {} spans in {} tables ({per:.1} spans each) on {} nodes, checkers off, \
         add-table-batch-size {}",
        spec.spans, spec.tables, spec.nodes, spec.add_table_batch_size
    );
    let t0 = Instant::now();
    let mut sim = match spec.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice-sim scale: {e}");
            return ExitCode::from(1);
        }
    };
    let built = t0.elapsed();
    let timeout = Duration::from_secs(timeout_secs);
    let mut last_line = Instant::now();
    let result = scale::run(&mut sim, &spec, |sim| {
        if last_line.elapsed() >= Duration::from_secs(10) {
            last_line = Instant::now();
            let p = scale::progress(sim);
            eprintln!(
                "  {:.0} s: {} of {} replicating, simulated {} ms, {} events",
                t0.elapsed().as_secs_f64(),
                p.replicating,
                p.spans.unwrap_or(0),
                p.sim_ms,
                p.events
            );
        }
        timeout_secs == 0 || t0.elapsed() < timeout
    });
    let wall = t0.elapsed();
    let code = print_scale(&sim, &spec, result, built, wall);
    // The process ends here: freeing a world of 1,000,000 spans one allocation at a time
    // would take seconds of CPU for nothing.
    std::mem::forget(sim);
    code
}

fn print_scale(
    sim: &Sim,
    spec: &ScaleSpec,
    result: Result<Outcome, String>,
    built: Duration,
    wall: Duration,
) -> ExitCode {
    let p = scale::progress(sim);
    let secs = wall.as_secs_f64();
    println!(
        "spans: {} (maintainer's map: {})",
        spec.spans,
        p.spans.unwrap_or(0)
    );
    println!("nodes: {}", spec.nodes);
    println!("replicating: {}", p.replicating);
    println!("world built in: {:.2} s", built.as_secs_f64());
    println!("simulated ms: {}", p.sim_ms);
    println!("events: {}", p.events);
    match peak_rss_kib() {
        Some(k) => println!("peak RSS: {:.1} MiB", k as f64 / 1024.0),
        None => println!("peak RSS: unknown"),
    }
    let rate = p.replicating as f64 / secs.max(1e-9);
    match result {
        Ok(Outcome::AllReplicating) => {
            println!("wall seconds until all replicating: {secs:.2} ({rate:.0} spans/s)");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Stopped) => {
            println!(
                "TIMEOUT after {secs:.1} s wall: {} of {} spans replicating ({rate:.0} spans/s)",
                p.replicating, spec.spans
            );
            ExitCode::from(1)
        }
        Ok(Outcome::SimBound) => {
            println!(
                "STUCK: {} simulated ms passed with {} of {} spans replicating ({secs:.1} s wall)",
                p.sim_ms, p.replicating, spec.spans
            );
            ExitCode::from(1)
        }
        Err(e) => {
            println!("FAILED after {secs:.1} s wall: {e}");
            ExitCode::from(1)
        }
    }
}

fn enable_mutations(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    #[cfg(feature = "mutations")]
    {
        for n in names {
            if !sluice_control::mutations::ALL.contains(&n.as_str()) {
                return Err(format!(
                    "unknown mutation `{n}`; known: {}",
                    sluice_control::mutations::ALL.join(", ")
                ));
            }
            sluice_control::mutations::enable(n);
        }
        Ok(())
    }
    #[cfg(not(feature = "mutations"))]
    Err("this sluice-sim was built without the `mutations` feature (cargo build -p sluice-sim --features mutations)".into())
}

/// Transparent huge pages off for this process, as the server does (`sluice`'s `main`):
/// mimalloc hands freed memory back in small pieces, and touching one again faulted in and
/// zeroed a whole 2 MiB page. `scale` of 300,000 spans: 0.8 s of system time instead of 2.8-3.2
/// (docs/figures/sim-scale-3380334.md).
fn no_huge_pages() {
    // A kernel without the flag (before 3.15) only costs the zeroing: nothing to report.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

fn main() -> ExitCode {
    no_huge_pages();
    let args = Args::parse();
    match args.command {
        Command::Scale {
            spans,
            nodes,
            tables,
            timeout_secs,
            add_table_batch_size,
        } => scale_command((spans, nodes, tables), add_table_batch_size, timeout_secs),
        Command::Run {
            file,
            seed,
            verbose,
            mutation,
        } => run_command(&file, seed, verbose, &mutation),
        Command::Explore {
            seeds,
            start,
            scenario,
            min_coverage,
            verbose,
            mutation,
            print,
            no_sink_faults,
        } => {
            if print {
                for seed in start..start + seeds {
                    let text = if no_sink_faults {
                        explore::random_scenario_text_without_sink_faults(seed)
                    } else {
                        explore::random_scenario_text(seed)
                    };
                    println!("# seed {seed}\n{text}");
                }
                return ExitCode::SUCCESS;
            }
            if let Err(e) = enable_mutations(&mutation) {
                eprintln!("sluice-sim: {e}");
                return ExitCode::from(2);
            }
            let base = match &scenario {
                Some(p) => match scenario::parse_file(p) {
                    Ok(sc) => Some(sc),
                    Err(e) => {
                        eprintln!("sluice-sim: invalid scenario: {e}");
                        return ExitCode::from(2);
                    }
                },
                None => None,
            };
            let report =
                explore::explore_with(start, seeds, base.as_ref(), verbose, !no_sink_faults);
            print!("{}", report.render(min_coverage));
            if report.failed.is_empty()
                && (min_coverage == 0 || report.coverage_ok(min_coverage) || base.is_some())
            {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// `run`: one scenario file, its trace hash and figures, and the events before a failure.
fn run_command(
    file: &std::path::Path,
    seed: Option<u64>,
    verbose: bool,
    mutation: &[String],
) -> ExitCode {
    if let Err(e) = enable_mutations(mutation) {
        eprintln!("sluice-sim: {e}");
        return ExitCode::from(2);
    }
    let sc = match scenario::parse_file(file) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("sluice-sim: invalid scenario: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::from(2);
        }
    };
    let seed = seed.unwrap_or(sc.world.seed);
    let name = sc.name.clone();
    let mut sim = Sim::new(sc, seed);
    sim.verbose = verbose;
    let result = sim.run();
    println!("scenario: {name}");
    println!("file: {}", file.display());
    println!("seed: {seed}");
    println!("trace hash: {:016x}", sim.trace_hash());
    println!("events: {}, simulated ms: {}", sim.events, sim.now);
    match result {
        Ok(()) => {
            println!("1 passed, 0 failed");
            ExitCode::SUCCESS
        }
        Err(f) => {
            match f.step {
                Some(s) => println!("FAILED at step {s} (seed {seed}): {}", f.message),
                None => println!("FAILED (seed {seed}): {}", f.message),
            }
            println!("events that led to it:\n{}", sim.recent());
            println!("0 passed, 1 failed");
            ExitCode::from(1)
        }
    }
}
