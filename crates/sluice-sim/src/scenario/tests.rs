//! The parser's unit tests: the contract's and the catalog's files parse, defaults, every form of
//! every op, and each kind of invalid file rejected with the step and what is wrong.

use super::*;
use std::path::PathBuf;

/// `scenarios/contract` of the workspace: the contract's example scenarios.
fn contract_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/contract")
}

/// `scenarios/catalog` of the workspace (`SLUICE_CATALOG_DIR` overrides it).
fn catalog_dir() -> PathBuf {
    match std::env::var_os("SLUICE_CATALOG_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/catalog"),
    }
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    v.sort();
    v
}

const HEAD: &str = r#"
name = "t"
[world]
nodes = ["n1", "n2"]
sink = "mysql"
[[world.tables]]
id = 1
name = "db.a"
"#;

fn with_steps(steps: &str) -> Result<Scenario, ScenarioError> {
    parse_str("test.toml", &format!("{HEAD}\n{steps}"))
}

/// Asserts that parsing fails at `step` with a message containing `needle`.
fn fails_at(steps: &str, step: usize, needle: &str) {
    match with_steps(steps) {
        Ok(s) => panic!("expected an error at step {step}, parsed {:?}", s.steps),
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.step, Some(step), "wrong step in {text}");
            assert!(
                text.starts_with("test.toml: step "),
                "file not named: {text}"
            );
            assert!(
                text.contains(needle),
                "{text:?} does not contain {needle:?}"
            );
        }
    }
}

#[test]
fn contract_examples_parse() {
    let files = toml_files(&contract_dir());
    assert!(
        !files.is_empty(),
        "no contract scenarios in scenarios/contract"
    );
    for f in files {
        if let Err(e) = parse_file(&f) {
            panic!("{e}");
        }
    }
}

#[test]
fn catalog_files_parse() {
    let files = toml_files(&catalog_dir());
    assert!(files.len() >= 20, "catalog has {} files", files.len());
    for f in files {
        let s = match parse_file(&f) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let base = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let nn = &base[..2];
        assert!(
            base.as_bytes()[2] == b'-' && nn.bytes().all(|b| b.is_ascii_digit()),
            "{base}"
        );
        let nn: u32 = nn.parse().unwrap_or(0);
        assert!(
            s.name.starts_with(&format!("catalog #{nn}:")),
            "{base}: name {:?}",
            s.name
        );
        assert!(
            s.description.as_deref().is_some_and(|d| d.len() > 40),
            "{base}: description"
        );
        // Every catalog file ends with settle + the final checks.
        let last_settle = s
            .steps
            .iter()
            .rposition(|st| matches!(st.op, Op::Settle { .. }));
        assert!(last_settle.is_some(), "{base}: no settle");
        let has = |c: Check| {
            s.steps.iter().any(
                |st| matches!(&st.op, Op::Expect { condition: Condition::Check(x), .. } if *x == c),
            )
        };
        assert!(has(Check::Converged), "{base}: no converged check");
        if s.world.sink != SinkKind::Blackhole {
            assert!(
                has(Check::SinkMatchesUpstream),
                "{base}: no sink-matches-upstream"
            );
        }
        assert!(
            matches!(
                s.steps.last().map(|st| &st.op),
                Some(Op::Expect {
                    condition: Condition::Check(_),
                    ..
                })
            ),
            "{base}: must end with a check"
        );
    }
}

#[test]
fn defaults_applied() {
    let s = parse_str(
        "d.toml",
        r#"
name = "defaults"
[world]
nodes = ["a"]
sink = "storage"
[[world.tables]]
id = 7
name = "x.y"
[[step]]
op = "create_changefeed"
[[step]]
op = "settle"
[[step]]
op = "write"
table = 7
rows = 3
[[step]]
op = "hold"
point = "sink_flush"
[[step]]
op = "faults"
drop = 0.5
[[step]]
op = "x-sink_error"
[[step]]
op = "x-drop"
message = "heartbeat"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.world.seed, 0);
    assert_eq!(s.world.maintainer, None);
    assert_eq!(s.world.x_lease_ms, None);
    assert_eq!(s.world.scheduler, SchedulerConfig::default());
    assert!(!s.world.scheduler.enable_table_across_nodes);
    assert_eq!(s.world.scheduler.region_threshold, 10_000);
    assert_eq!(s.world.scheduler.region_count_per_span, 100);
    assert!(s.world.scheduler.balance);
    assert_eq!(s.world.tables[0].regions, 1);
    assert_eq!(s.world.tables[0].rows, 0);
    assert_eq!(s.world.tables[0].name.to_string(), "x.y");
    assert!(matches!(&s.steps[0].op, Op::CreateChangefeed { changefeed } if changefeed == "cf"));
    assert!(matches!(s.steps[1].op, Op::Settle { max_ms: 120_000 }));
    assert!(matches!(
        s.steps[2].op,
        Op::Write {
            rows: 3,
            txn_rows: 1,
            deletes: 0,
            ..
        }
    ));
    assert!(matches!(
        s.steps[3].op,
        Op::Hold {
            point: HoldPoint::SinkFlush,
            node: None
        }
    ));
    match &s.steps[4].op {
        Op::Faults(f) => {
            assert_eq!(f.drop, 0.5);
            assert_eq!(f.duplicate, 0.0);
            assert!(!f.reorder);
            assert_eq!(f.delay_ms, (0, 0));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.steps[5].op,
        Op::XSinkError {
            node: None,
            table: None,
            count: 1,
            retryable: true
        }
    ));
    assert!(matches!(
        s.steps[6].op,
        Op::XDrop {
            message: MessageKind::Heartbeat,
            from: None,
            to: None,
            count: 1
        }
    ));
    assert_eq!(s.steps[6].number, 7);
}

#[test]
fn every_form_parses() {
    let s = with_steps(
        r#"
[[step]]
op = "create_changefeed"
changefeed = "feed"
[[step]]
op = "run"
ms = 10
[[step]]
op = "settle"
max-ms = 5
[[step]]
op = "write"
table = 1
rows = 10
txn-rows = 3
deletes = 2
[[step]]
op = "ddl"
kind = "create_table"
table = 2
name = "db.b"
regions = 4
[[step]]
op = "ddl"
kind = "truncate_table"
table = 2
new-table = 3
[[step]]
op = "ddl"
kind = "rename_table"
table = 3
new-name = "db2.c"
[[step]]
op = "ddl"
kind = "add_column"
table = 3
[[step]]
op = "ddl"
kind = "drop_table"
table = 1
[[step]]
op = "ddl"
kind = "create_database"
database = "db3"
[[step]]
op = "ddl"
kind = "drop_database"
database = "db3"
[[step]]
op = "ddl"
kind = "x-create_view"
database = "db2"
[[step]]
op = "split_table"
table = 3
spans = 2
[[step]]
op = "merge_table"
table = 3
[[step]]
op = "move_table"
table = 3
to = "@maintainer"
[[step]]
op = "cordon"
node = "n1"
[[step]]
op = "uncordon"
node = "@coordinator"
[[step]]
op = "release"
point = "ddl_after_pass"
node = "n2"
[[step]]
op = "crash"
node = "@ddl-writer"
[[step]]
op = "restart"
node = "n1"
[[step]]
op = "partition"
groups = [["n1", "meta"], ["n2"]]
[[step]]
op = "heal"
[[step]]
op = "faults"
drop = 0
duplicate = 1
reorder = true
delay-ms = [1, 20]
[[step]]
op = "expect"
table = 3
spans-at-most = 4
within-ms = 100
[[step]]
op = "expect"
table = 3
on = "n2"
[[step]]
op = "expect"
table = 1
absent = true
[[step]]
op = "expect"
maintainer-not-on = "n1"
[[step]]
op = "expect"
maintainer-ready = true
[[step]]
op = "expect"
held = "create_dispatcher"
node = "n1"
table = 3
[[step]]
op = "expect"
checkpoint-advanced = true
[[step]]
op = "expect"
check = "sink-matches-upstream"
[[step]]
op = "x-move_maintainer"
to = "n2"
[[step]]
op = "x-sink_error"
node = "n2"
table = 3
count = 2
retryable = false
[[step]]
op = "x-drop"
message = "bootstrap_response"
from = "n2"
to = "@maintainer"
count = 3
[[step]]
op = "x-pause"
node = "n1"
ms = 100
[[step]]
op = "x-pause_changefeed"
[[step]]
op = "x-resume_changefeed"
[[step]]
op = "x-drain"
node = "n2"
[[step]]
op = "x-sink_latency"
table = 3
ms = 20000
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.steps.len(), 39);
    assert!(matches!(
        &s.steps[38].op,
        Op::XSinkLatency {
            node: None,
            ms: 20000,
            ..
        }
    ));
    match &s.steps[20].op {
        Op::Partition { groups } => {
            assert_eq!(groups.len(), 2);
            assert!(groups[0].meta && !groups[1].meta);
            assert_eq!(groups[0].nodes, vec!["n1".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        &s.steps[23].op,
        Op::Expect {
            condition: Condition::Spans {
                count: SpanCount::AtMost(4),
                ..
            },
            within_ms: Some(100)
        }
    ));
    assert!(matches!(
        &s.steps[18].op,
        Op::Crash {
            node: NodeRef::DdlWriter
        }
    ));
}

#[test]
fn world_x_lease_ms() {
    let s = parse_str(
            "l.toml",
            "name = \"l\"\n[world]\nnodes = [\"a\"]\nsink = \"blackhole\"\nx-lease-ms = 5000\nseed = 9\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.world.x_lease_ms, Some(5000));
    assert_eq!(s.world.seed, 9);
    assert!(s.steps.is_empty());
}

#[test]
fn unknown_op_is_an_error() {
    fails_at(
        "[[step]]\nop = \"settle\"\n[[step]]\nop = \"explode\"\n",
        2,
        "unknown op \"explode\"",
    );
    fails_at("[[step]]\nop = \"x-unknown\"\n", 1, "unknown op");
    fails_at("[[step]]\nms = 3\n", 1, "missing field `op`");
}

#[test]
fn unknown_field_is_an_error() {
    fails_at(
        "[[step]]\nop = \"run\"\nms = 3\nspeed = 2\n",
        1,
        "unknown field `speed`",
    );
    fails_at(
        "[[step]]\nop = \"heal\"\nnode = \"n1\"\n",
        1,
        "unknown field `node`",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\ncheck = \"converged\"\ntable = 1\n",
        1,
        "unknown field `table`",
    );
    fails_at(
        "[[step]]\nop = \"ddl\"\nkind = \"drop_table\"\ntable = 1\nname = \"db.a\"\n",
        1,
        "unknown field `name`",
    );
}

#[test]
fn missing_or_ill_typed_field_is_an_error() {
    fails_at("[[step]]\nop = \"run\"\n", 1, "missing field `ms`");
    fails_at(
        "[[step]]\nop = \"run\"\nms = \"10\"\n",
        1,
        "`ms` must be a non-negative integer",
    );
    fails_at("[[step]]\nop = \"run\"\nms = -1\n", 1, "non-negative");
    fails_at(
        "[[step]]\nop = \"write\"\ntable = 1\n",
        1,
        "missing field `rows`",
    );
    fails_at(
        "[[step]]\nop = \"hold\"\npoint = \"nap\"\n",
        1,
        "unknown hold point",
    );
    fails_at("[[step]]\nop = \"faults\"\ndrop = 1.5\n", 1, "ratio");
    fails_at(
        "[[step]]\nop = \"faults\"\ndelay-ms = [5, 1]\n",
        1,
        "min <= max",
    );
    fails_at(
        "[[step]]\nop = \"ddl\"\nkind = \"explode_table\"\n",
        1,
        "unknown ddl `kind`",
    );
    fails_at(
        "[[step]]\nop = \"ddl\"\nkind = \"rename_table\"\ntable = 1\nnew-name = \"nodot\"\n",
        1,
        "schema.table",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\nmaintainer-ready = false\n",
        1,
        "must be true",
    );
    fails_at(
        "[[step]]\nop = \"x-drop\"\nmessage = \"gossip\"\n",
        1,
        "unknown `message` kind",
    );
    fails_at(
        "[[step]]\nop = \"x-sink_error\"\ncount = 0\n",
        1,
        "at least 1",
    );
    fails_at("[[step]]\nop = \"x-sink_latency\"\ntable = 1\n", 1, "ms");
}

#[test]
fn expect_needs_exactly_one_condition() {
    fails_at(
        "[[step]]\nop = \"expect\"\ntable = 1\nspans = 1\non = \"n1\"\n",
        1,
        "more than one condition",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\ncheck = \"converged\"\nmaintainer-ready = true\n",
        1,
        "more than one condition",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\nwithin-ms = 5\n",
        1,
        "no condition",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\nspans = 1\n",
        1,
        "missing field `table`",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\ncheck = \"fine\"\n",
        1,
        "unknown check",
    );
}

#[test]
fn unknown_node_is_an_error() {
    fails_at(
        "[[step]]\nop = \"crash\"\nnode = \"n9\"\n",
        1,
        "\"n9\", which is not in the world",
    );
    fails_at(
        "[[step]]\nop = \"move_table\"\ntable = 1\nto = \"n3\"\n",
        1,
        "not in the world",
    );
    fails_at(
        "[[step]]\nop = \"partition\"\ngroups = [[\"n1\"], [\"n7\"]]\n",
        1,
        "not in the world",
    );
    fails_at(
        "[[step]]\nop = \"partition\"\ngroups = [[\"n1\"], [\"n1\"]]\n",
        1,
        "more than one place",
    );
    fails_at(
        "[[step]]\nop = \"crash\"\nnode = \"@leader\"\n",
        1,
        "unknown alias",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\nmaintainer-not-on = \"zz\"\n",
        1,
        "not in the world",
    );
    let e = parse_str(
        "w.toml",
        "name = \"x\"\n[world]\nnodes = [\"a\"]\nmaintainer = \"b\"\nsink = \"mysql\"\n",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("w.toml") && e.contains("not in `nodes`"), "{e}");
}

#[test]
fn undeclared_table_is_an_error() {
    fails_at(
        "[[step]]\nop = \"write\"\ntable = 2\nrows = 1\n",
        1,
        "no such table",
    );
    // Declared by an earlier ddl: fine; used before its ddl: error.
    fails_at(
            "[[step]]\nop = \"write\"\ntable = 5\nrows = 1\n[[step]]\nop = \"ddl\"\nkind = \"create_table\"\ntable = 5\nname = \"db.e\"\n",
            1,
            "no such table",
        );
    assert!(with_steps(
            "[[step]]\nop = \"ddl\"\nkind = \"truncate_table\"\ntable = 1\nnew-table = 9\n[[step]]\nop = \"write\"\ntable = 9\nrows = 1\n[[step]]\nop = \"expect\"\ntable = 1\nabsent = true\n"
        )
        .is_ok());
    fails_at(
        "[[step]]\nop = \"ddl\"\nkind = \"create_table\"\ntable = 1\nname = \"db.z\"\n",
        1,
        "already declared",
    );
    fails_at(
        "[[step]]\nop = \"expect\"\nheld = \"sink_flush\"\ntable = 4\n",
        1,
        "no such table",
    );
}

#[test]
fn sink_matches_upstream_invalid_with_blackhole() {
    let e = parse_str(
            "b.toml",
            "name = \"b\"\n[world]\nnodes = [\"a\"]\nsink = \"blackhole\"\n[[step]]\nop = \"settle\"\n[[step]]\nop = \"expect\"\ncheck = \"sink-matches-upstream\"\n",
        )
        .err();
    assert_eq!(e.as_ref().and_then(|e| e.step), Some(2), "{e:?}");
}

#[test]
fn world_errors_name_the_file() {
    for (text, needle) in [
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\n", "missing field `sink`"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"kafka\"\n", "`sink` must be"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\ncolor = 1\n", "unknown field `color`"),
            ("name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[world.scheduler]\nbalance = 1\n", "boolean"),
            (
                "name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[world.scheduler]\nregion_threshold = 1\n",
                "unknown field `region_threshold`",
            ),
            (
                "name = \"x\"\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n[[world.tables]]\nid = 1\nname = \"a.b\"\n[[world.tables]]\nid = 1\nname = \"a.c\"\n",
                "declared twice",
            ),
            ("[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n", "missing field `name`"),
            ("name = \"x\"\nextra = 1\n[world]\nnodes = [\"a\"]\nsink = \"mysql\"\n", "unknown field `extra`"),
            ("name = \"x\"\n[world\n", "not valid TOML"),
        ] {
            let e = parse_str("bad.toml", text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.starts_with("bad.toml: ") && e.contains(needle), "{e:?} lacks {needle:?}");
        }
}
