//! Named, deliberately wrong behaviours that tests switch on to prove that each invariant checker
//! of the simulator fires. Compiled only with the `mutations` feature (never in a release), and
//! switched per thread at run time so one test binary can try them one by one.
//!
//! | name | the bug it plants |
//! |---|---|
//! | `bootstrap-ignores-unknown-tables` | bootstrap takes its table set from the start-point schema only and ignores working dispatchers and journaled creates of tables outside it (TiCDC's behaviour in the seed) |
//! | `dm-admits-overlap` | a dispatcher manager admits a dispatcher overlapping another one |
//! | `maintainer-ignores-overlap` | the maintainer requests a dispatcher over keys another known dispatcher may still write |
//! | `dm-ignores-epoch` | a dispatcher manager applies scheduling messages of any epoch |
//! | `checkpoint-ignores-absent` | the checkpoint ignores spans that are not replicating |
//! | `checkpoint-regress` | the coordinator persists a lower checkpoint |
//! | `skip-flush-before-block` | a dispatcher reports Waiting at a DDL before its earlier rows are durable |
//! | `pass-before-write` | the barrier sends Pass before the writer reported Written |
//! | `create-dropped-table` | a CREATE TABLE replay re-adds a table whose spans exist, and drops are not applied |
//! | `sink-error-restarts-changefeed` | a retryable sink error restarts the whole changefeed |
//! | `drop-rows` | a dispatcher silently skips one row in every 50 |

use std::cell::RefCell;
use std::collections::BTreeSet;

thread_local! {
    static ON: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

pub const ALL: &[&str] = &[
    "bootstrap-ignores-unknown-tables",
    "dm-admits-overlap",
    "maintainer-ignores-overlap",
    "dm-ignores-epoch",
    "checkpoint-ignores-absent",
    "checkpoint-regress",
    "skip-flush-before-block",
    "pass-before-write",
    "create-dropped-table",
    "sink-error-restarts-changefeed",
    "drop-rows",
];

pub fn enable(name: &str) {
    ON.with(|s| s.borrow_mut().insert(name.to_string()));
}

pub fn clear() {
    ON.with(|s| s.borrow_mut().clear());
}

pub fn on(name: &str) -> bool {
    ON.with(|s| s.borrow().contains(name))
}
