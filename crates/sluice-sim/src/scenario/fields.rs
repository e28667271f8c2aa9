//! Reading a TOML table field by field (`Fields`: typed getters, leftovers are unknown fields)
//! and cross-checking values against the world and the tables declared so far (`Validator`).

use std::collections::BTreeSet;

use sluice_types::TableId;
use toml::{Table, Value};

use super::parse::{Ctx, Parser};
use super::{HoldPoint, NodeRef, ScenarioError, World};

/// Cross-checks of values against the world and the tables declared so far.
pub(super) struct Validator<'a> {
    pub(super) parser: &'a Parser,
    pub(super) ctx: Ctx<'a>,
    pub(super) world: &'a World,
}

impl Validator<'_> {
    /// [`Self::node`] of an optional field.
    pub(super) fn opt_node(
        &self,
        s: Option<String>,
        field: &str,
    ) -> Result<Option<NodeRef>, ScenarioError> {
        s.map(|s| self.node(&s, field)).transpose()
    }

    pub(super) fn node(&self, s: &str, field: &str) -> Result<NodeRef, ScenarioError> {
        match s {
            "@maintainer" => Ok(NodeRef::Maintainer),
            "@coordinator" => Ok(NodeRef::Coordinator),
            "@ddl-writer" => Ok(NodeRef::DdlWriter),
            _ if s.starts_with('@') => Err(self.parser.err(
                self.ctx,
                format!("`{field}`: unknown alias {s:?} (one of @maintainer, @coordinator, @ddl-writer)"),
            )),
            _ if self.world.nodes.iter().any(|n| n == s) => Ok(NodeRef::Name(s.to_string())),
            _ => Err(self.parser.err(
                self.ctx,
                format!("`{field}` names node {s:?}, which is not in the world ({})", self.world.nodes.join(", ")),
            )),
        }
    }

    pub(super) fn table(
        &self,
        known: &BTreeSet<TableId>,
        id: u64,
        field: &str,
    ) -> Result<TableId, ScenarioError> {
        let t = TableId(id);
        if known.contains(&t) {
            Ok(t)
        } else {
            Err(self.parser.err(
                self.ctx,
                format!("`{field}` = {id}: no such table (neither the world nor an earlier ddl step declares it)"),
            ))
        }
    }

    pub(super) fn hold_point(&self, s: &str, field: &str) -> Result<HoldPoint, ScenarioError> {
        HoldPoint::parse(s).ok_or_else(|| {
            let names: Vec<&str> = HoldPoint::ALL.iter().map(|(_, n)| *n).collect();
            self.parser.err(
                self.ctx,
                format!(
                    "`{field}`: unknown hold point {s:?} (one of {})",
                    names.join(", ")
                ),
            )
        })
    }
}

/// A TOML table whose fields are consumed one by one; leftovers are unknown fields.
pub(super) struct Fields<'a> {
    parser: &'a Parser,
    ctx: Ctx<'a>,
    tbl: Table,
}

impl<'a> Fields<'a> {
    pub(super) fn new(parser: &'a Parser, ctx: Ctx<'a>, tbl: Table) -> Self {
        Fields { parser, ctx, tbl }
    }

    fn err(&self, m: String) -> ScenarioError {
        self.parser.err(self.ctx, m)
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.tbl.contains_key(key)
    }

    pub(super) fn take(&mut self, key: &str) -> Option<Value> {
        self.tbl.remove(key)
    }

    pub(super) fn finish(self) -> Result<(), ScenarioError> {
        if self.tbl.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = self.tbl.keys().map(|k| format!("`{k}`")).collect();
        let plural = if list.len() > 1 { "s" } else { "" };
        Err(self.err(format!("unknown field{plural} {}", list.join(", "))))
    }

    pub(super) fn take_u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Integer(i)) if i >= 0 => Ok(Some(i as u64)),
            Some(Value::Integer(i)) => {
                Err(self.err(format!("`{key}` must be a non-negative integer, not {i}")))
            }
            Some(other) => Err(self.err(format!(
                "`{key}` must be a non-negative integer, not a {}",
                other.type_str()
            ))),
        }
    }

    pub(super) fn opt_u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        self.take_u64(key)
    }

    pub(super) fn req_u64_list(&mut self, key: &str) -> Result<Vec<u64>, ScenarioError> {
        match self.take(key) {
            None => Err(self.err(format!("missing field `{key}`"))),
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|i| match i {
                    Value::Integer(n) if n >= 0 => Ok(n as u64),
                    other => Err(self.err(format!(
                        "`{key}` must be an array of non-negative integers, not one holding {other}"
                    ))),
                })
                .collect(),
            Some(other) => Err(self.err(format!(
                "`{key}` must be an array of non-negative integers, not a {}",
                other.type_str()
            ))),
        }
    }

    pub(super) fn req_u64(&mut self, key: &str) -> Result<u64, ScenarioError> {
        self.take_u64(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    pub(super) fn opt_str(&mut self, key: &str) -> Result<Option<String>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a string, not a {}",
                other.type_str()
            ))),
        }
    }

    pub(super) fn req_str(&mut self, key: &str) -> Result<String, ScenarioError> {
        self.opt_str(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    pub(super) fn opt_bool(&mut self, key: &str) -> Result<Option<bool>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(b)),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a boolean, not a {}",
                other.type_str()
            ))),
        }
    }

    pub(super) fn req_bool(&mut self, key: &str) -> Result<bool, ScenarioError> {
        self.opt_bool(key)?
            .ok_or_else(|| self.err(format!("missing field `{key}`")))
    }

    pub(super) fn opt_ratio(&mut self, key: &str) -> Result<Option<f64>, ScenarioError> {
        let x = match self.take(key) {
            None => return Ok(None),
            Some(Value::Float(x)) => x,
            Some(Value::Integer(i)) => i as f64,
            Some(other) => {
                return Err(self.err(format!(
                    "`{key}` must be a ratio between 0 and 1, not a {}",
                    other.type_str()
                )))
            }
        };
        if !(0.0..=1.0).contains(&x) {
            return Err(self.err(format!("`{key}` must be a ratio between 0 and 1, not {x}")));
        }
        Ok(Some(x))
    }

    pub(super) fn req_table(&mut self, key: &str) -> Result<Table, ScenarioError> {
        match self.take(key) {
            None => Err(self.err(format!("missing table `[{key}]`"))),
            Some(Value::Table(t)) => Ok(t),
            Some(other) => Err(self.err(format!(
                "`{key}` must be a table, not a {}",
                other.type_str()
            ))),
        }
    }
}
