//! The `sluice` binary. Each subcommand lives in its own module; the issues that own them fill
//! them in (`server`, `cli`, `check`, `consume`).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Sluice: change data capture from MySQL-compatible databases")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one node (HTTP API, coordinator candidate, maintainers and dispatchers).
    Server,
    /// Talk to a running server's HTTP API.
    Cli,
    /// Compare an upstream and a downstream table by table.
    Check,
    /// Apply a cloud-storage changefeed output to a MySQL-compatible downstream.
    Consume,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let name = match args.command {
        Command::Server => "server",
        Command::Cli => "cli",
        Command::Check => "check",
        Command::Consume => "consume",
    };
    eprintln!("sluice {name}: not available in this build yet");
    ExitCode::from(2)
}
