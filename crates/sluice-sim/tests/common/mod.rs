//! Inline scenarios for the simulator's tests, written from parts: each part is the TOML text it
//! stood for, so a scenario put together here reads exactly as the file written out by hand.
#![allow(dead_code)] // each test binary uses its own share

/// A scenario's head: its name, a world of `nodes` with a mysql sink, and where the maintainer
/// starts, if anywhere in particular.
pub fn world(name: &str, nodes: &[&str], maintainer: Option<&str>) -> String {
    let maintainer = maintainer
        .map(|m| format!("maintainer = \"{m}\"\n"))
        .unwrap_or_default();
    format!("\nname = \"{name}\"\n[world]\nnodes = {nodes:?}\n{maintainer}sink = \"mysql\"\n")
}

/// The scheduler does not balance tables on its own: they stay where the steps put them.
pub const NO_BALANCE: &str = "[world.scheduler]\nbalance = false\n";

/// A table with `rows` rows before the changefeed starts.
pub fn table(id: u64, name: &str, rows: u64) -> String {
    format!("[[world.tables]]\nid = {id}\nname = \"{name}\"\nrows = {rows}\n")
}

/// A step with no fields.
pub fn step(op: &str) -> String {
    format!("[[step]]\nop = \"{op}\"\n")
}

/// Create the changefeed and let it settle.
pub fn create_and_settle() -> String {
    format!("{}{}", step("create_changefeed"), step("settle"))
}

/// Move `table` to node `to` and let it settle.
pub fn move_table(table: u64, to: &str) -> String {
    format!(
        "[[step]]\nop = \"move_table\"\ntable = {table}\nto = \"{to}\"\n{}",
        step("settle")
    )
}

/// The next write to `table` (on `node`, or wherever it runs) fails for good.
pub fn fatal_sink_error(node: Option<&str>, table: u64) -> String {
    let node = node
        .map(|n| format!("node = \"{n}\"\n"))
        .unwrap_or_default();
    format!("[[step]]\nop = \"x-sink_error\"\n{node}table = {table}\nretryable = false\n")
}

/// Write `rows` rows to `table`, `txn_rows` to a transaction if given.
pub fn write(table: u64, rows: u64, txn_rows: Option<u64>) -> String {
    let txn = txn_rows
        .map(|n| format!("txn-rows = {n}\n"))
        .unwrap_or_default();
    format!("[[step]]\nop = \"write\"\ntable = {table}\nrows = {rows}\n{txn}")
}

/// Let `ms` of simulated time pass.
pub fn run(ms: u64) -> String {
    format!("[[step]]\nop = \"run\"\nms = {ms}\n")
}

/// Check `check` at this point of the run.
pub fn expect(check: &str) -> String {
    format!("{}check = \"{check}\"\n", step("expect"))
}

/// One node whose loop stalls for 15 s (longer than a maintainer may stay silent, shorter than
/// its lease: the embedded store's case), e.g. while reading a huge transaction in one piece.
const STALL: &str = r#"
name = "stalled-node"
[world]
nodes = ["n1"]
sink = "mysql"
x-lease-ms = 60000
[[world.tables]]
id = 1
name = "a.t"
rows = 20
[[step]]
op = "create_changefeed"
[[step]]
op = "write"
table = 1
rows = 50
[[step]]
op = "settle"
[[step]]
op = "x-pause"
node = "n1"
ms = 15000
[[step]]
op = "write"
table = 1
rows = 50
[[step]]
op = "settle"
"#;

/// The changefeed's epoch before and after the stall of [`STALL`] (the changefeed is normal
/// again at the end).
pub fn epoch_after_a_stall() -> (u64, u64) {
    use sluice_sim::{scenario, world::Sim};
    let sc = scenario::parse_str("stall.toml", STALL).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Sim::new(sc, 5);
    let mut before = None;
    for i in 0..sim.sc.steps.len() {
        if i == 3 {
            before = sim.changefeed_info("cf").map(|c| c.epoch);
        }
        sim.run_step(i).unwrap_or_else(|f| panic!("{}", f.message));
    }
    let after = sim.changefeed_info("cf").expect("info");
    assert_eq!(after.state, sluice_control::coordinator::FeedState::Normal);
    (before.expect("created"), after.epoch)
}
