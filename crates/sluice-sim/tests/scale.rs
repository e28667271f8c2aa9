//! The scale run (`sluice-sim scale`) at a small size: every span of the maintainer's map ends
//! replicating, their count is the one asked for, the world converges (every table covered once
//! by working dispatchers), the run is deterministic, and bad sizes are refused. No timing is
//! asserted.

use sluice_sim::scale::{self, Outcome, ScaleSpec};
use std::process::Command;

/// Runs `spec` to its end; returns the outcome, the final progress and the trace hash.
fn run(spec: &ScaleSpec) -> (Outcome, scale::Progress, u64) {
    let mut sim = spec.build().expect("a valid spec builds");
    let outcome = scale::run(&mut sim, spec, |_| true).expect("no failure");
    if outcome == Outcome::AllReplicating {
        sim.converged()
            .expect("converged once every span replicates");
        // Every span has its dispatcher, plus the table trigger.
        assert_eq!(sim.dispatcher_count() as u64, spec.spans + 1);
    }
    (outcome, scale::progress(&sim), sim.trace_hash())
}

#[test]
fn two_thousand_spans_on_three_nodes_all_replicate() {
    let spec = ScaleSpec::new(2_000, 3, None).expect("valid");
    assert_eq!(spec.tables, 20);
    let (outcome, p, _) = run(&spec);
    assert_eq!(outcome, Outcome::AllReplicating);
    assert_eq!(p.spans, Some(2_000));
    assert_eq!(p.replicating, 2_000);
}

#[test]
fn uneven_tables_and_one_span_per_table_give_the_exact_count() {
    for (spans, tables) in [(300, 7), (250, 250), (97, 1)] {
        let spec = ScaleSpec::new(spans, 2, Some(tables)).expect("valid");
        let (outcome, p, _) = run(&spec);
        assert_eq!(
            outcome,
            Outcome::AllReplicating,
            "{spans} spans, {tables} tables"
        );
        assert_eq!(p.spans, Some(spans as usize));
        assert_eq!(p.replicating, spans as usize);
    }
}

#[test]
fn a_scale_run_is_deterministic() {
    let spec = ScaleSpec::new(500, 4, Some(50)).expect("valid");
    let (_, a, ha) = run(&spec);
    let (_, b, hb) = run(&spec);
    assert_eq!((a, ha), (b, hb));
}

#[test]
fn a_run_told_to_stop_says_so() {
    let spec = ScaleSpec::new(1_000, 2, None).expect("valid");
    let mut sim = spec.build().expect("builds");
    let mut ticks = 0;
    let outcome = scale::run(&mut sim, &spec, |_| {
        ticks += 1;
        ticks <= 3
    })
    .expect("runs");
    assert_eq!(outcome, Outcome::Stopped);
    assert!(scale::progress(&sim).replicating < 1_000);
}

#[test]
fn bad_sizes_are_refused() {
    assert!(ScaleSpec::new(0, 10, None)
        .expect_err("refused")
        .contains("--spans"));
    assert!(ScaleSpec::new(10, 0, None)
        .expect_err("refused")
        .contains("--nodes"));
    assert!(ScaleSpec::new(10, 2, Some(0))
        .expect_err("refused")
        .contains("--tables"));
    assert!(ScaleSpec::new(10, 2, Some(11))
        .expect_err("refused")
        .contains("--tables"));
}

#[test]
fn the_command_prints_the_figures_and_refuses_bad_input() {
    let bin = env!("CARGO_BIN_EXE_sluice-sim");
    let out = Command::new(bin)
        .args(["scale", "--spans", "200", "--nodes", "2"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in ["replicating: 200", "nodes: 2", "peak RSS:", "events:"] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    assert!(
        text.contains("wall seconds until all replicating"),
        "{text}"
    );
    for bad in [
        ["--spans", "0"],
        ["--nodes", "0"],
        ["--add-table-batch-size", "0"],
    ] {
        let out = Command::new(bin)
            .arg("scale")
            .args(bad)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(bad[0]), "{err}");
    }
}
