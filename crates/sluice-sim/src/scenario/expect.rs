//! An `expect` step: exactly one condition (`EXPECT_CONDITIONS`), its fields, and `within-ms`.
//!
//! Invariant: none or more than one condition is an error naming them; a field the condition
//! does not take is reported as unknown by the step's `finish`.

use std::collections::BTreeSet;

use sluice_types::TableId;

use super::fields::{Fields, Validator};
use super::parse::{Ctx, Parser};
use super::{Check, Condition, Op, ScenarioError, SinkKind, SpanCount};

impl Parser {
    pub(super) fn expect(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
    ) -> Result<Op, ScenarioError> {
        let ctx = v.ctx;
        let key = self.expect_key(f, ctx)?;
        let within_ms = f.opt_u64("within-ms")?;
        let condition = match key {
            "spans" | "spans-at-least" | "spans-at-most" => {
                let table = self.expect_table(f, v, known, key)?;
                let n = f.req_u64(key)?;
                let count = match key {
                    "spans" => SpanCount::Exactly(n),
                    "spans-at-least" => SpanCount::AtLeast(n),
                    _ => SpanCount::AtMost(n),
                };
                Condition::Spans { table, count }
            }
            "on" => {
                let table = self.expect_table(f, v, known, key)?;
                Condition::On {
                    table,
                    node: v.node(&f.req_str("on")?, "on")?,
                }
            }
            "absent" => {
                let table = self.expect_table(f, v, known, key)?;
                self.expect_true(f, ctx, "absent")?;
                Condition::Absent { table }
            }
            "check" => Condition::Check(self.expect_check(f, v)?),
            "maintainer-not-on" => Condition::MaintainerNotOn(
                v.node(&f.req_str("maintainer-not-on")?, "maintainer-not-on")?,
            ),
            "maintainer-ready" => {
                self.expect_true(f, ctx, "maintainer-ready")?;
                Condition::MaintainerReady
            }
            "held" => self.expect_held(f, v, known)?,
            _ => {
                self.expect_true(f, ctx, "checkpoint-advanced")?;
                Condition::CheckpointAdvanced
            }
        };
        // Fields such as `table` or `node` given to a condition that does not take them are
        // reported as unknown fields by `finish`.
        Ok(Op::Expect {
            condition,
            within_ms,
        })
    }

    /// The one condition an `expect` step gives (none or more than one is an error).
    fn expect_key(&self, f: &Fields<'_>, ctx: Ctx<'_>) -> Result<&'static str, ScenarioError> {
        let present: Vec<&'static str> = EXPECT_CONDITIONS
            .iter()
            .copied()
            .filter(|k| f.has(k))
            .collect();
        match present.len() {
            0 => Err(self.err(
                ctx,
                format!(
                    "no condition (expected exactly one of {})",
                    EXPECT_CONDITIONS.join(", ")
                ),
            )),
            1 => Ok(present[0]),
            _ => Err(self.err(
                ctx,
                format!(
                    "more than one condition in one expect ({}); use one step each",
                    present.join(", ")
                ),
            )),
        }
    }

    /// The `table` a condition `key` requires.
    fn expect_table(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
        key: &str,
    ) -> Result<TableId, ScenarioError> {
        let id = f.take_u64("table")?.ok_or_else(|| {
            self.err(
                v.ctx,
                format!("missing field `table` (required with `{key}`)"),
            )
        })?;
        v.table(known, id, "table")
    }

    /// A condition `key = true` (the only value it takes).
    fn expect_true(
        &self,
        f: &mut Fields<'_>,
        ctx: Ctx<'_>,
        key: &str,
    ) -> Result<(), ScenarioError> {
        if !f.req_bool(key)? {
            return Err(self.err(ctx, format!("`{key}` must be true")));
        }
        Ok(())
    }

    /// `check = "..."`: a named global check.
    fn expect_check(&self, f: &mut Fields<'_>, v: &Validator<'_>) -> Result<Check, ScenarioError> {
        let ctx = v.ctx;
        let c = f.req_str("check")?;
        match c.as_str() {
            "converged" => Ok(Check::Converged),
            "sink-matches-upstream" => {
                if v.world.sink == SinkKind::Blackhole {
                    return Err(self.err(ctx, "check \"sink-matches-upstream\" is invalid with the blackhole sink"));
                }
                Ok(Check::SinkMatchesUpstream)
            }
            "changefeed-normal" => Ok(Check::ChangefeedNormal),
            other => Err(self.err(
                ctx,
                format!(
                    "unknown check {other:?} (one of converged, sink-matches-upstream, changefeed-normal)"
                ),
            )),
        }
    }

    /// `held` (+ optional `node`, `table`).
    fn expect_held(
        &self,
        f: &mut Fields<'_>,
        v: &Validator<'_>,
        known: &BTreeSet<TableId>,
    ) -> Result<Condition, ScenarioError> {
        let point = v.hold_point(&f.req_str("held")?, "held")?;
        let node = v.opt_node(f.opt_str("node")?, "node")?;
        let table = match f.take_u64("table")? {
            Some(t) => Some(v.table(known, t, "table")?),
            None => None,
        };
        Ok(Condition::Held { point, node, table })
    }
}

/// The conditions of an `expect` step, in the order errors list them.
const EXPECT_CONDITIONS: [&str; 10] = [
    "spans",
    "spans-at-least",
    "spans-at-most",
    "on",
    "absent",
    "check",
    "maintainer-not-on",
    "maintainer-ready",
    "held",
    "checkpoint-advanced",
];
