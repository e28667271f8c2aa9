//! `sluice-sim`: runs scenario files (`run`) and random explorations (`explore`) against the real
//! control plane. Exit status: 0 every step and invariant held; 1 a step or an invariant failed;
//! 2 the file is invalid.

use clap::{Parser, Subcommand};
use sluice_sim::explore;
use sluice_sim::scenario;
use sluice_sim::world::Sim;
use std::path::PathBuf;
use std::process::ExitCode;

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

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Run {
            file,
            seed,
            verbose,
            mutation,
        } => {
            if let Err(e) = enable_mutations(&mutation) {
                eprintln!("sluice-sim: {e}");
                return ExitCode::from(2);
            }
            let sc = match scenario::parse_file(&file) {
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
