//! The model downstream under replays (issue 9): the window in which the changefeed checkpoint
//! lags behind a DDL the downstream applied, and the record's started / finished distinction.

mod common;

use common::{create_and_settle, expect, run, step, table, world, write};
use sluice_control::io::AppliedDdl;
use sluice_sim::scenario::{self, Op};
use sluice_sim::upstream::UEvent;
use sluice_sim::world::Sim;
use sluice_types::DdlKind;
use std::path::{Path, PathBuf};

fn features() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/features")
}

/// The commit ts of the upstream's first DDL of `kind`.
fn ddl_ts(sim: &Sim, kind: DdlKind) -> u64 {
    sim.upstream
        .history
        .iter()
        .find_map(|e| match e {
            UEvent::Ddl { ddl, .. } if ddl.kind == kind => Some(ddl.commit_ts),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {kind:?} upstream"))
}

/// Runs `file` up to (not including) its first `crash` step, then checks the window is open:
/// the downstream recorded the DDL finished while the persisted checkpoint is below it.
fn window_open_at_the_crash(file: &str, kind: DdlKind) {
    let sc = scenario::parse_file(&features().join(file)).unwrap_or_else(|e| panic!("{e}"));
    let crash = sc
        .steps
        .iter()
        .position(|s| matches!(s.op, Op::Crash { .. }))
        .expect("a crash step");
    let mut sim = Sim::new(sc, 0);
    for i in 0..crash {
        sim.run_step(i)
            .unwrap_or_else(|f| panic!("{file}: step {:?}: {}", f.step, f.message));
    }
    let ts = ddl_ts(&sim, kind);
    let cp = sim.persisted_checkpoint();
    assert!(
        cp < ts,
        "{file}: checkpoint {cp} already passed the DDL at {ts}"
    );
    assert!(
        sim.downstream.applied(cp).contains(&AppliedDdl {
            commit_ts: ts,
            finished: true
        }),
        "{file}: the downstream has not finished the DDL at {ts}: {:?}",
        sim.downstream.applied(cp)
    );
    // The rest of the file passes: the replay converges, the sink matches, no restart.
    for i in crash..sim.sc.steps.len() {
        sim.run_step(i)
            .unwrap_or_else(|f| panic!("{file}: step {:?}: {}", f.step, f.message));
    }
    assert!(
        sim.checker.restarts.is_empty(),
        "{:?}",
        sim.checker.restarts
    );
}

#[test]
fn the_truncate_is_applied_downstream_while_the_checkpoint_is_below_it_when_the_node_dies() {
    window_open_at_the_crash("replay-after-applied-truncate.toml", DdlKind::TruncateTable);
}

#[test]
fn the_drop_is_applied_downstream_while_the_checkpoint_is_below_it_when_the_node_dies() {
    window_open_at_the_crash("replay-after-applied-drop-table.toml", DdlKind::DropTable);
}

/// A slow table's own DDL (`ADD COLUMN`, written by its dispatcher right behind its rows): the
/// model MySQL records it started at once and finished only when it is acknowledged, 20 s later.
fn slow_alter(crash: bool) -> String {
    let mut parts = vec![
        world("an alter of a slow table", &["n1"], Some("n1")),
        table(1, "r.a", 5),
        table(2, "r.b", 5),
        create_and_settle(),
        "[[step]]\nop = \"x-sink_latency\"\ntable = 2\nms = 20000\n".into(),
        write(2, 3, None),
        "[[step]]\nop = \"ddl\"\nkind = \"add_column\"\ntable = 2\n".into(),
        write(1, 3, None),
        run(2000),
    ];
    if crash {
        parts.push("[[step]]\nop = \"crash\"\nnode = \"n1\"\n".into());
        parts.push("[[step]]\nop = \"x-sink_latency\"\ntable = 2\nms = 0\n".into());
        parts.push("[[step]]\nop = \"restart\"\nnode = \"n1\"\n".into());
    }
    parts.push(step("settle"));
    parts.push(expect("sink-matches-upstream"));
    parts.push(expect("changefeed-normal"));
    parts.concat()
}

fn run_until_settle(text: &str) -> (Sim, usize) {
    let sc = scenario::parse_str("inline.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let settle = sc
        .steps
        .iter()
        .rposition(|s| matches!(s.op, Op::Settle { .. }))
        .expect("settle");
    let mut sim = Sim::new(sc, 0);
    for i in 0..settle {
        sim.run_step(i)
            .unwrap_or_else(|f| panic!("step {:?}: {}", f.step, f.message));
    }
    (sim, settle)
}

#[test]
fn a_ddl_is_recorded_started_when_it_runs_and_finished_when_it_is_acknowledged() {
    let (mut sim, settle) = run_until_settle(&slow_alter(false));
    let ts = ddl_ts(&sim, DdlKind::AlterTable);
    let started = AppliedDdl {
        commit_ts: ts,
        finished: false,
    };
    assert!(sim.downstream.applied(0).contains(&started));
    for i in settle..sim.sc.steps.len() {
        sim.run_step(i)
            .unwrap_or_else(|f| panic!("step {:?}: {}", f.step, f.message));
    }
    let finished = AppliedDdl {
        commit_ts: ts,
        finished: true,
    };
    assert!(sim.downstream.applied(0).contains(&finished));
    assert_eq!(sim.checker.ddls_written, 1);
}

#[test]
fn a_ddl_whose_process_died_before_it_finished_stays_started_and_runs_again_on_replay() {
    let (mut sim, settle) = run_until_settle(&slow_alter(true));
    let ts = ddl_ts(&sim, DdlKind::AlterTable);
    assert_eq!(
        sim.downstream.applied(0),
        vec![AppliedDdl {
            commit_ts: ts,
            finished: false
        }],
        "the crash came between the record and its finish"
    );
    for i in settle..sim.sc.steps.len() {
        sim.run_step(i)
            .unwrap_or_else(|f| panic!("step {:?}: {}", f.step, f.message));
    }
    assert_eq!(
        sim.downstream.applied(0),
        vec![AppliedDdl {
            commit_ts: ts,
            finished: true
        }]
    );
    assert_eq!(sim.checker.ddls_written, 2, "an unfinished DDL runs again");
}
