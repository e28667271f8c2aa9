//! Where a message goes: its topic (the URI's, or a rule's expression over `{schema}` and
//! `{table}`) and its partition (TiCDC's partition dispatchers `default`, `table`,
//! `index-value`, `ts`, `columns`).
//!
//! Invariants:
//! - routing is a pure function of (rules, table, row, partition count): every node and every
//!   replay puts a row in the same partition, so per-key order holds within a partition;
//! - the first rule whose matcher matches the table decides; no rule: the URI's topic and the
//!   `table` dispatcher;
//! - a topic expression gives a valid Kafka topic name: characters Kafka refuses become `_`.

use super::config::valid_topic;
use crate::error::{Result, SinkError};
use crate::storage::layout::crc32;
use sluice_types::{RowEvent, RowKind, TableSchema, Value};

/// A partition dispatcher (TiCDC's names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partitioner {
    /// `default` and `table`: every row of a table in one partition (by its name's hash).
    Table,
    /// `index-value`: by the hash of the key columns' values (a table without a key: `table`).
    IndexValue,
    /// `ts`: by the commit ts.
    Ts,
    /// `columns`: by the hash of the named columns' values.
    Columns(Vec<String>),
}

pub use sluice_types::sink_rules::DispatchRule;

struct Rule {
    patterns: Vec<(String, String)>,
    topic: Option<String>,
    partitioner: Partitioner,
}

/// The routing of one changefeed's messages.
pub struct Router {
    default_topic: String,
    rules: Vec<Rule>,
}

/// `*` matches any run of characters; everything else itself (case-sensitive, like the filter).
pub(crate) fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

fn parse_partitioner(rule: &DispatchRule) -> std::result::Result<Partitioner, String> {
    match rule.partition.as_deref().unwrap_or("default") {
        "default" | "table" => Ok(Partitioner::Table),
        "index-value" => Ok(Partitioner::IndexValue),
        "ts" => Ok(Partitioner::Ts),
        "columns" if rule.columns.is_empty() => {
            Err("partition = \"columns\" needs columns = [...]".into())
        }
        "columns" => Ok(Partitioner::Columns(rule.columns.clone())),
        other => Err(format!(
            "partition {other:?} is not one of default, table, index-value, ts, columns"
        )),
    }
}

/// Checks a topic expression: only `{schema}` and `{table}` placeholders.
fn check_expression(e: &str) -> std::result::Result<(), String> {
    let stripped = e.replace("{schema}", "").replace("{table}", "");
    if stripped.contains(['{', '}']) {
        return Err(format!(
            "topic {e:?}: only {{schema}} and {{table}} may appear in braces"
        ));
    }
    if e.is_empty() {
        return Err("topic expression is empty".into());
    }
    Ok(())
}

impl Router {
    /// The routing of `rules` over the URI's topic; a bad rule is an error naming it.
    pub fn new(default_topic: &str, rules: &[DispatchRule]) -> std::result::Result<Router, String> {
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let at = |e: String| format!("sink.dispatchers[{i}]: {e}");
            if r.matcher.is_empty() {
                return Err(at("matcher is empty".into()));
            }
            let patterns = r
                .matcher
                .iter()
                .map(|m| {
                    m.split_once('.')
                        .map(|(d, t)| (d.to_string(), t.to_string()))
                        .ok_or_else(|| at(format!("matcher {m:?} is not db.table")))
                })
                .collect::<std::result::Result<_, _>>()?;
            if let Some(t) = &r.topic {
                check_expression(t).map_err(at)?;
            }
            out.push(Rule {
                patterns,
                topic: r.topic.clone(),
                partitioner: parse_partitioner(r).map_err(at)?,
            });
        }
        Ok(Router {
            default_topic: default_topic.to_string(),
            rules: out,
        })
    }

    /// `protocol=avro` keeps one table per topic (a topic's subjects hold one record schema):
    /// there must be a rule, and every rule must name a topic with `{schema}` and `{table}`.
    pub fn check_topic_per_table(&self) -> std::result::Result<(), String> {
        const FIX: &str = "protocol=avro writes each table to its own topic: give every [[sink.dispatchers]] rule a topic with {schema} and {table}, e.g. matcher = ['*.*'] and topic = 'cdc_{schema}_{table}'";
        if self.rules.is_empty() {
            return Err(format!("no [[sink.dispatchers]] rule: {FIX}"));
        }
        for (i, r) in self.rules.iter().enumerate() {
            let per_table = r
                .topic
                .as_deref()
                .is_some_and(|t| t.contains("{schema}") && t.contains("{table}"));
            if !per_table {
                return Err(format!("sink.dispatchers[{i}]: {FIX}"));
            }
        }
        Ok(())
    }

    /// True when a rule gives the table a topic of its own expression.
    pub fn has_topic_rule(&self, db: &str, table: &str) -> bool {
        self.rule(db, table).is_some_and(|r| r.topic.is_some())
    }

    fn rule(&self, db: &str, table: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            r.patterns
                .iter()
                .any(|(d, t)| glob(d, db) && glob(t, table))
        })
    }

    /// The URI's topic: where database-level DDLs and watermarks go.
    pub fn default_topic(&self) -> &str {
        &self.default_topic
    }

    /// The topic of a table's rows and DDLs.
    pub fn topic(&self, db: &str, table: &str) -> String {
        match self.rule(db, table).and_then(|r| r.topic.as_deref()) {
            None => self.default_topic.clone(),
            Some(e) => {
                let t: String = e
                    .replace("{schema}", db)
                    .replace("{table}", table)
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                            c
                        } else {
                            '_'
                        }
                    })
                    .take(249)
                    .collect();
                if valid_topic(&t) {
                    t
                } else {
                    self.default_topic.clone()
                }
            }
        }
    }

    /// The partition (of `partitions`) of one row change.
    pub fn partition(&self, schema: &TableSchema, row: &RowEvent, partitions: i32) -> Result<i32> {
        let n = partitions.max(1) as u64;
        let p = self
            .rule(&schema.database, &schema.name)
            .map_or(&Partitioner::Table, |r| &r.partitioner);
        let values = match row.kind {
            RowKind::Delete => row.before.as_deref(),
            _ => row.after.as_deref(),
        }
        .unwrap_or_default();
        let hash = match p {
            Partitioner::Ts => return Ok((row.commit_ts % n) as i32),
            Partitioner::Table => table_hash(schema),
            Partitioner::IndexValue if schema.key_columns.is_empty() => table_hash(schema),
            Partitioner::IndexValue => values_hash(schema, values, &schema.key_columns),
            Partitioner::Columns(names) => {
                let idx = names
                    .iter()
                    .map(|c| schema.columns.iter().position(|x| x.name.eq_ignore_ascii_case(c)).ok_or_else(|| SinkError::TableRefused {
                        table: schema.qualified_name(),
                        reason: format!("the columns partition dispatcher names column {c:?}, which the table does not have"),
                    }))
                    .collect::<Result<Vec<_>>>()?;
                values_hash(schema, values, &idx)
            }
        };
        Ok((u64::from(hash) % n) as i32)
    }
}

fn table_hash(schema: &TableSchema) -> u32 {
    crc32(format!("{}\0{}", schema.database, schema.name).as_bytes())
}

fn values_hash(schema: &TableSchema, values: &[Value], idx: &[usize]) -> u32 {
    let mut buf = format!("{}\0{}", schema.database, schema.name).into_bytes();
    for &i in idx {
        buf.push(0);
        // The value's canonical serialization: equal values hash equally on every node.
        buf.extend(serde_json::to_vec(&values.get(i)).unwrap_or_default());
    }
    crc32(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_the_filter() {
        assert!(glob("*", "anything"));
        assert!(glob("sb*", "sbtest1"));
        assert!(glob("*_log", "app_log"));
        assert!(!glob("*_log", "app_logs"));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("abc", "abcd"));
    }

    #[test]
    fn bad_rules_are_named() {
        let r = |p: &str| DispatchRule {
            matcher: vec!["*.*".into()],
            partition: Some(p.into()),
            ..Default::default()
        };
        assert!(Router::new("t", &[r("rowid")])
            .err()
            .is_some_and(|e| e.contains("dispatchers[0]") && e.contains("rowid")));
        assert!(Router::new("t", &[r("columns")])
            .err()
            .is_some_and(|e| e.contains("columns = [...]")));
        let bad_topic = DispatchRule {
            matcher: vec!["*.*".into()],
            topic: Some("x_{db}".into()),
            ..Default::default()
        };
        assert!(Router::new("t", &[bad_topic])
            .err()
            .is_some_and(|e| e.contains("{schema}")));
        let no_dot = DispatchRule {
            matcher: vec!["nodot".into()],
            ..Default::default()
        };
        assert!(Router::new("t", &[no_dot]).is_err());
    }

    #[test]
    fn topics_follow_the_first_matching_rule() {
        let rules = [
            DispatchRule {
                matcher: vec!["app.*".into()],
                topic: Some("cdc_{schema}_{table}".into()),
                ..Default::default()
            },
            DispatchRule {
                matcher: vec!["*.*".into()],
                topic: Some("all-{schema}".into()),
                ..Default::default()
            },
        ];
        let r = Router::new("base", &rules).expect("valid");
        assert_eq!(r.topic("app", "orders"), "cdc_app_orders");
        assert_eq!(r.topic("other", "x"), "all-other");
        assert_eq!(r.topic("other", "x y"), "all-other");
        assert_eq!(r.topic("a b", "x"), "all-a_b");
        assert_eq!(
            Router::new("base", &[])
                .expect("valid")
                .topic("app", "orders"),
            "base"
        );
    }
}
