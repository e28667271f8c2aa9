//! Named, deliberately wrong behaviours that tests switch on to prove that each invariant checker
//! of the simulator fires. Compiled only with the `mutations` feature (never in a release), and
//! switched per thread at run time so one test binary can try them one by one.
//!
//! | name | the bug it plants | the invariant that must fire |
//! |---|---|---|
//! | `bootstrap-ignores-unknown-tables` | bootstrap takes its table set from the start-point schema only and ignores working dispatchers and journaled creates of tables outside it (TiCDC's behaviour in the seed) | one-writer (with `dm-admits-overlap`) |
//! | `dm-admits-overlap` | a dispatcher manager admits a dispatcher overlapping another one | one-writer |
//! | `dm-ignores-epoch` | a dispatcher manager applies scheduling messages of any epoch | stale-epoch |
//! | `checkpoint-ignores-absent` | the checkpoint ignores spans that are not replicating | checkpoint-sound |
//! | `checkpoint-regress` | the coordinator persists a lower checkpoint | checkpoint-monotonic |
//! | `drop-rows` | a dispatcher silently skips one row in every 50 | no-row-lost |
//! | `shift-key` | the feed corrupts the key of one row in every 50 it hands a sink (the dispatchers see only handles, so a row's content can go wrong only there) | no-row-invented |
//! | `reverse-batch` | a dispatcher writes each batch of rows in reverse order | per-key-order |
//! | `pass-before-write` | the barrier sends Pass before the writer reported Written | ddl-order |
//! | `create-dropped-table` | a dropped table's spans come back, starting at the drop | dropped-table-stays-dropped |
//! | `epoch-no-bump` | the coordinator places a new maintainer without bumping the epoch | epoch-monotonic |
//! | `bootstrap-without-all-nodes` | a maintainer finishes its bootstrap before every alive node answered | one-maintainer |
//! | `sink-error-restarts-changefeed` | a retryable sink error restarts the whole changefeed | error-acted-once (a restart no failed dispatcher caused; changefeed-normal would see it too) |
//! | `requests-not-recovered` | a new maintainer ignores the table requests and user-split marks kept in the meta store (as if they lived only in its predecessor's memory): a failover loses an accepted request and lets the merge scheduler undo a user's split | request-lost (at a settle), user-split-kept; the span counts of `features/request-survives-failover.toml` |
//! | `error-restart-without-close` | the coordinator records an error and forgets the maintainer without closing the changefeed (as a coordinator failover or a failed close bump did) | error-acted-once |
//! | `feed-cuts-transactions` | the feed cuts a batch at its row bound even inside a transaction (and resolves up to that transaction) | whole-transactions (a batch holds part of a transaction) |
//! | `parts-written-closed` | a dispatcher writes the parts of a transaction too large for one batch as if each ended it (never `open`), so the sink acknowledges a transaction of which it has only a part | sink-contract (the next part continues a transaction the sink was told had ended) |
//! | `feed-resolves-past-source` | the feed resolves a batch one ts past what the source has completed | resolved-within-source |
//! | `feed-ignores-quota` | the feed reads on when the rows in flight reach the memory quota | inflight-within-quota |
//! | `feed-leaks-rows` | when a sink takes a write, its bytes stay counted in flight (the rows are gone; the quota shrinks for ever) | row-handle-leak |
//! | `feed-duplicates-rows` | the third sink write of each dispatcher carries its first row twice | row-once-per-session |
//! | `replay-ignores-applied-ddls` | a bootstrap ignores what the downstream recorded: every table replays from the checkpoint, also across a `TRUNCATE` or `DROP TABLE` the downstream already applied (issue 9, reproductions 1 and 2) | sink-state (a truncated table's rows come back), no-needless-restart (rows into a dropped table fail, the changefeed restarts) |
//! | `replacement-ignores-floor` | a dispatcher that replaces another starts at the checkpoint it was given, below a DDL of its table the downstream already recorded (seed 7681 of the `02b631d` soak) | sink-state (a replay cut short by a crash leaves older versions of rows over newer ones; `features/replacement-starts-at-the-floor.toml`) |
//! | `feed-stream-passes-reads` | while a snapshot chunk is held, the chunk reads under way do not hold the span's stream (as when a copy had one read at a time, asked after the chunks held): the stream and a held chunk go past the position of a parallel read asked earlier | snapshot-chunk-behind-stream (that read's chunk comes back behind the stream; the feed refuses it rather than put it after newer changes, and it is read again) |
//! | `copy-progress-skips-ranges` | a copy's durable progress moves past an acknowledged key range although a range before it (read in parallel) is not acknowledged yet | sink-state (a successor after a crash, move or split resumes past rows never written) |
//! | `rest-ends-silently` | a dispatcher that stops resting (rows to write) is not reported until the next complete heartbeat, so its owner goes on raising its span with the rest ts of the idle ones | checkpoint-sound (the checkpoint passes rows of the woken table not yet written) |
//! | `coordinator-counts-own-stall` | the coordinator counts a stall of its own loop as its maintainers' silence | none (a liveness bug): a stalled single node places its maintainer again with a new epoch (`sluice-sim/tests/mutations.rs`) |

use std::cell::RefCell;
use std::collections::BTreeSet;

thread_local! {
    static ON: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

pub const ALL: &[&str] = &[
    "bootstrap-ignores-unknown-tables",
    "dm-admits-overlap",
    "dm-ignores-epoch",
    "checkpoint-ignores-absent",
    "checkpoint-regress",
    "shift-key",
    "reverse-batch",
    "pass-before-write",
    "create-dropped-table",
    "epoch-no-bump",
    "bootstrap-without-all-nodes",
    "sink-error-restarts-changefeed",
    "error-restart-without-close",
    "drop-rows",
    "requests-not-recovered",
    "replay-ignores-applied-ddls",
    "replacement-ignores-floor",
    "feed-cuts-transactions",
    "parts-written-closed",
    "feed-resolves-past-source",
    "feed-ignores-quota",
    "feed-leaks-rows",
    "feed-duplicates-rows",
    "feed-chunk-late",
    "feed-window-keeps-changed-rows",
    "feed-stream-passes-reads",
    "copy-progress-skips-ranges",
    "rest-ends-silently",
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
