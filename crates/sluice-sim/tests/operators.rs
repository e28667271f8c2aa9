//! Every operator kind in every phase, hit by duplicate, reordered, dropped and stale-epoch
//! messages while it is held in that phase: the run must stay safe, converge once released, and
//! the fault must really have landed while that operator was in that phase.

use sluice_control::maintainer::operator::{OpKind, OpPhase};
use sluice_sim::scenario;
use sluice_sim::world::Sim;

const WORLD: &str = r#"
[world]
nodes = ["n1", "n2", "n3"]
maintainer = "n1"
sink = "mysql"
[world.scheduler]
enable-table-across-nodes = true
region-threshold = 100
region-count-per-span = 2
balance = false
[[world.tables]]
id = 10
name = "db.t"
regions = 4
rows = 60
[[world.tables]]
id = 11
name = "db.u"
rows = 20
"#;

/// Steps that put one operator in one phase and keep it there (`point` held on `node`).
fn setup(kind: OpKind, phase: OpPhase) -> (&'static str, &'static str, &'static str) {
    match (kind, phase) {
        // An add waits at creation on its destination.
        (OpKind::Add, _) => (
            "[[step]]\nop = \"hold\"\npoint = \"create_dispatcher\"\n[[step]]\nop = \"ddl\"\nkind = \"create_table\"\ntable = 12\nname = \"db.v\"\n",
            "create_dispatcher",
            "",
        ),
        (OpKind::Remove, _) => (
            "[[step]]\nop = \"hold\"\npoint = \"close_dispatcher\"\n[[step]]\nop = \"ddl\"\nkind = \"drop_table\"\ntable = 11\n",
            "close_dispatcher",
            "",
        ),
        (OpKind::Move, OpPhase::Removing) => (
            "[[step]]\nop = \"hold\"\npoint = \"close_dispatcher\"\n[[step]]\nop = \"move_table\"\ntable = 11\nto = \"n3\"\n",
            "close_dispatcher",
            "",
        ),
        (OpKind::Move, _) => (
            "[[step]]\nop = \"hold\"\npoint = \"create_dispatcher\"\nnode = \"n3\"\n[[step]]\nop = \"move_table\"\ntable = 11\nto = \"n3\"\n",
            "create_dispatcher",
            "",
        ),
        (OpKind::Split, _) => (
            "[[step]]\nop = \"hold\"\npoint = \"close_dispatcher\"\n[[step]]\nop = \"split_table\"\ntable = 10\nspans = 2\n",
            "close_dispatcher",
            "",
        ),
        (OpKind::Merge, _) => (
            "[[step]]\nop = \"split_table\"\ntable = 10\nspans = 2\n[[step]]\nop = \"settle\"\n[[step]]\nop = \"move_table\"\ntable = 10\nto = \"n2\"\n[[step]]\nop = \"settle\"\n",
            "close_dispatcher",
            "[[step]]\nop = \"hold\"\npoint = \"close_dispatcher\"\n[[step]]\nop = \"merge_table\"\ntable = 10\n",
        ),
    }
}

fn fault_steps(fault: &str) -> String {
    match fault {
        "duplicate" => "[[step]]\nop = \"faults\"\nduplicate = 1.0\n[[step]]\nop = \"run\"\nms = 3000\n".into(),
        "reorder" => "[[step]]\nop = \"faults\"\nreorder = true\ndelay-ms = [0, 400]\n[[step]]\nop = \"run\"\nms = 3000\n".into(),
        "drop" => "[[step]]\nop = \"faults\"\ndrop = 0.5\n[[step]]\nop = \"run\"\nms = 3000\n".into(),
        // Stale epoch: the maintainer's node dies; the new maintainer must finish the operator
        // while the old epoch's messages are still in the network.
        _ => "[[step]]\nop = \"faults\"\ndelay-ms = [0, 1500]\nreorder = true\n[[step]]\nop = \"run\"\nms = 300\n[[step]]\nop = \"crash\"\nnode = \"n1\"\n[[step]]\nop = \"expect\"\nmaintainer-ready = true\nwithin-ms = 30000\n[[step]]\nop = \"restart\"\nnode = \"n1\"\n[[step]]\nop = \"run\"\nms = 2000\n".into(),
    }
}

fn scenario_text(kind: OpKind, phase: OpPhase, fault: &str) -> String {
    let (setup_steps, point, then) = setup(kind, phase);
    format!(
        "name = \"{}:{} under {fault}\"\n{WORLD}\n[[step]]\nop = \"create_changefeed\"\n[[step]]\nop = \"settle\"\n{setup_steps}{then}\
         [[step]]\nop = \"write\"\ntable = 10\nrows = 40\n[[step]]\nop = \"run\"\nms = 500\n{}\
         [[step]]\nop = \"faults\"\n[[step]]\nop = \"release\"\npoint = \"{point}\"\n[[step]]\nop = \"settle\"\n\
         [[step]]\nop = \"expect\"\ncheck = \"converged\"\n[[step]]\nop = \"expect\"\ncheck = \"sink-matches-upstream\"\n",
        kind.name(),
        phase,
        fault_steps(fault)
    )
}

#[test]
fn every_operator_phase_survives_duplicate_reordered_dropped_and_stale_messages() {
    let mut missing = Vec::new();
    for kind in OpKind::ALL {
        for &phase in kind.phases() {
            for fault in ["duplicate", "reorder", "drop", "stale_epoch"] {
                let text = scenario_text(kind, phase, fault);
                let sc =
                    scenario::parse_str(&format!("{}-{}-{fault}.toml", kind.name(), phase), &text)
                        .unwrap_or_else(|e| panic!("{e}\n{text}"));
                for seed in 0..3u64 {
                    let mut sim = Sim::new(sc.clone(), seed);
                    if let Err(f) = sim.run() {
                        panic!(
                            "{}:{} under {fault}, seed {seed}: step {:?}: {}\n{}",
                            kind.name(),
                            phase,
                            f.step,
                            f.message,
                            sim.recent()
                        );
                    }
                    // The fault must have hit while the operator was in flight in that phase (the
                    // crash of the maintainer's node is what makes the old epoch stale).
                    let hit = |k: &'static str| {
                        sim.coverage.get(&(kind, phase, k)).copied().unwrap_or(0) > 0
                    };
                    let landed = match fault {
                        "duplicate" => sim.fault_counts.get("duplicate").copied().unwrap_or(0) > 0,
                        "reorder" => sim.fault_counts.get("reorder").copied().unwrap_or(0) > 0,
                        "drop" => hit("drop"),
                        _ => {
                            hit("crash")
                                && sim.fault_counts.get("stale_dropped").copied().unwrap_or(0) > 0
                        }
                    };
                    if !landed {
                        missing.push(format!("{}:{} {fault} seed {seed}", kind.name(), phase));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these faults never landed while the operator was in that phase: {missing:?}"
    );
}
