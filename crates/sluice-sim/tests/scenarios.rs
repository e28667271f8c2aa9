//! The simulator against every scenario file: the contract examples (as they are), the
//! project's catalog scenarios (one per failure-catalog entry), determinism of the trace hash,
//! a random exploration, and the command line's results and exit codes.

use sluice_sim::explore;
use sluice_sim::scenario;
use sluice_sim::world::Sim;
use sluice_testkit::scratch::ScratchDir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The contract scenarios: copies, kept byte-identical, of the example scenarios that come with
/// the scenario format (`scenarios/contract/`, beside their `FORMAT.md`).
fn contract_dir() -> PathBuf {
    root().join("scenarios/contract")
}

/// Every contract scenario by name: a copy that goes missing fails the test below.
const CONTRACT_SCENARIOS: [&str; 4] = [
    "ddl-writer-crash-after-write.toml",
    "seed-duplicate-create-after-failover.toml",
    "smoke-three-tables.toml",
    "truncate-while-move-held.toml",
];

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().map(|x| x == "toml").unwrap_or(false))
        .collect();
    v.sort();
    v
}

fn run_file(path: &Path, seed: Option<u64>) -> (Result<(), String>, u64) {
    let sc = scenario::parse_file(path).unwrap_or_else(|e| panic!("{e}"));
    let seed = seed.unwrap_or(sc.world.seed);
    let mut sim = Sim::new(sc, seed);
    let r = sim.run().map_err(|f| {
        format!(
            "{} step {:?}: {}\n{}",
            path.display(),
            f.step,
            f.message,
            sim.recent()
        )
    });
    (r, sim.trace_hash())
}

#[test]
fn contract_scenarios_are_all_present_and_pass_as_they_are() {
    let dir = contract_dir();
    assert!(
        dir.join("FORMAT.md").is_file(),
        "{}/FORMAT.md is missing: the scenario format is part of the contract",
        dir.display()
    );
    for name in CONTRACT_SCENARIOS {
        assert!(
            dir.join(name).is_file(),
            "contract scenario {name} is missing from {}",
            dir.display()
        );
    }
    let files = toml_files(&dir);
    assert!(files.len() >= CONTRACT_SCENARIOS.len());
    for f in files {
        let (r, _) = run_file(&f, None);
        if let Err(e) = r {
            panic!("{e}");
        }
    }
}

#[test]
fn catalog_scenarios_pass_and_name_their_entry() {
    let files = toml_files(&root().join("scenarios/catalog"));
    assert!(
        files.len() >= 30,
        "one scenario per catalog entry expected, found {}",
        files.len()
    );
    for f in files {
        let sc = scenario::parse_file(&f).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            sc.name.starts_with("catalog #"),
            "{} does not name its catalog number",
            f.display()
        );
        let (r, _) = run_file(&f, None);
        if let Err(e) = r {
            panic!("{e}");
        }
    }
}

#[test]
fn feature_scenarios_pass() {
    let files = toml_files(&root().join("scenarios/features"));
    assert!(!files.is_empty());
    for f in files {
        let (r, _) = run_file(&f, None);
        if let Err(e) = r {
            panic!("{e}");
        }
    }
}

#[test]
fn contract_scenarios_pass_under_other_seeds() {
    for f in toml_files(&contract_dir()) {
        for seed in 1..4 {
            let (r, _) = run_file(&f, Some(seed));
            if let Err(e) = r {
                panic!("seed {seed}: {e}");
            }
        }
    }
}

#[test]
fn same_file_and_seed_give_the_same_trace_hash() {
    let seedfile = contract_dir().join("seed-duplicate-create-after-failover.toml");
    let mut hashes = Vec::new();
    for seed in 0..10u64 {
        let (r1, h1) = run_file(&seedfile, Some(seed));
        let (r2, h2) = run_file(&seedfile, Some(seed));
        assert_eq!(r1.is_ok(), r2.is_ok());
        assert_eq!(h1, h2, "seed {seed}: trace hash differs between two runs");
        hashes.push(h1);
    }
    // Different seeds draw different runs.
    hashes.sort();
    hashes.dedup();
    assert!(hashes.len() > 1, "every seed gave the same trace");
    // Random worlds too.
    for seed in 0..10u64 {
        let a = explore::random_scenario(seed);
        let b = explore::random_scenario(seed);
        let mut sa = Sim::new(a, seed);
        let mut sb = Sim::new(b, seed);
        let ra = sa.run().is_ok();
        let rb = sb.run().is_ok();
        assert_eq!(ra, rb);
        assert_eq!(
            sa.trace_hash(),
            sb.trace_hash(),
            "explore seed {seed}: trace hash mismatch"
        );
    }
}

#[test]
fn exploration_passes_and_covers_every_operator_phase_under_every_fault() {
    let rep = explore::explore(0, 2000, None, false);
    let text = rep.render(explore::MIN_COVERAGE);
    assert!(rep.failed.is_empty(), "{text}");
    assert!(rep.coverage_ok(explore::MIN_COVERAGE), "{text}");
    assert!(
        rep.faults.get("crash").copied().unwrap_or(0) > 0
            && rep.faults.get("drop").copied().unwrap_or(0) > 0,
        "{text}"
    );
    // Sink faults of every kind fired, and errored changefeeds restarted and converged (every
    // seed passed its final liveness check).
    let n = |k: &str| rep.faults.get(k).copied().unwrap_or(0);
    assert!(n("sink_error_fatal") > 0, "{text}");
    assert!(n("sink_error") > n("sink_error_fatal"), "{text}");
    assert!(n("changefeed_error") > 0, "{text}");
}

#[test]
fn sink_faults_come_from_their_own_stream() {
    // A seed that draws no sink fault runs the scenario it ran before explore injected them; a
    // seed that draws some runs the same scenario with the sink-fault steps added.
    let (mut with, mut without) = (0, 0);
    for seed in 0..300u64 {
        let a = explore::random_scenario_text(seed);
        let b = explore::random_scenario_text_without_sink_faults(seed);
        assert!(!b.contains("x-sink_error"));
        if a.contains("x-sink_error") {
            with += 1;
            assert_ne!(a, b);
        } else {
            without += 1;
            assert_eq!(a, b, "seed {seed}");
        }
    }
    assert!(with > 40 && without > 150, "{with} with, {without} without");
}

#[test]
fn explore_with_a_scenario_adds_faults_and_keeps_safety() {
    let base = scenario::parse_file(&contract_dir().join("ddl-writer-crash-after-write.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let rep = explore::explore(0, 20, Some(&base), false);
    assert!(rep.failed.is_empty(), "{}", rep.render(0));
}

fn sim_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice-sim"))
}

#[test]
fn cli_run_prints_seed_hash_and_summary() {
    let out = sim_bin()
        .arg("run")
        .arg(contract_dir().join("smoke-three-tables.toml"))
        .arg("--seed")
        .arg("7")
        .output()
        .expect("run sluice-sim");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("seed: 7"), "{text}");
    assert!(text.contains("trace hash: "), "{text}");
    assert!(text.trim_end().ends_with("1 passed, 0 failed"), "{text}");
}

#[test]
fn cli_invalid_file_exits_2_naming_file_and_step() {
    let dir = ScratchDir::new("sluice-sim-test", "invalid").expect("scratch dir");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\n[world]\nnodes = [\"n1\"]\nsink = \"storage\"\n[[step]]\nop = \"create_changefeed\"\n[[step]]\nop = \"crash\"\nnode = \"n9\"\n",
    )
    .expect("write");
    let out = sim_bin()
        .arg("run")
        .arg(&bad)
        .output()
        .expect("run sluice-sim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml") && err.contains("step 2"), "{err}");
}

#[test]
fn cli_failed_expect_exits_1_with_step_and_seed() {
    let dir = ScratchDir::new("sluice-sim-test", "failed-expect").expect("scratch dir");
    let f = dir.join("fails.toml");
    std::fs::write(
        &f,
        "name = \"fails\"\n[world]\nnodes = [\"n1\", \"n2\"]\nsink = \"mysql\"\n[[world.tables]]\nid = 1\nname = \"a.b\"\n\
         [[step]]\nop = \"create_changefeed\"\n[[step]]\nop = \"settle\"\n[[step]]\nop = \"expect\"\ntable = 1\nspans = 3\n",
    )
    .expect("write");
    let out = sim_bin()
        .arg("run")
        .arg(&f)
        .output()
        .expect("run sluice-sim");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("step 3") && text.contains("seed 0"), "{text}");
    assert!(text.trim_end().ends_with("0 passed, 1 failed"), "{text}");
}

#[test]
fn cli_explore_reports_and_replays_a_seed() {
    let out = sim_bin()
        .args(["explore", "--seeds", "30", "--min-coverage", "0"])
        .output()
        .expect("run sluice-sim");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("faults injected by kind"), "{text}");
    assert!(text.trim_end().ends_with("30 passed, 0 failed"), "{text}");
    let one = sim_bin()
        .args([
            "explore",
            "--start",
            "12",
            "--seeds",
            "1",
            "--min-coverage",
            "0",
        ])
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&one.stdout)
        .trim_end()
        .ends_with("1 passed, 0 failed"));
}
