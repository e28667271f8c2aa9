//! Table filters of a changefeed: `db.table` patterns with `*` and `?` wildcards; a rule starting
//! with `!` excludes. The last rule a table matches decides; no rules means every table. Sluice's
//! own schema (`sluice`, the heartbeat table) and the system schemas are never replicated.

use serde::{Deserialize, Serialize};

/// The `[filter]` section of a changefeed's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct FilterConfig {
    pub rules: Vec<String>,
    /// Event types not replicated: `insert`, `update`, `delete`, `ddl`; and `unreplicable`:
    /// changes the binlog does not carry as full rows (statement-format DML, incomplete row
    /// images) no longer stop their tables (their rows are missing downstream).
    pub ignore_event: Vec<String>,
}

/// The event types `ignore-event` accepts.
pub const EVENT_TYPES: [&str; 5] = ["insert", "update", "delete", "ddl", "unreplicable"];

impl FilterConfig {
    /// Whether rows (or DDLs) of this type are dropped.
    pub fn ignores(&self, event: &str) -> bool {
        self.ignore_event
            .iter()
            .any(|e| e.eq_ignore_ascii_case(event))
    }

    /// Whether rows of this kind are dropped.
    pub fn ignores_row(&self, kind: sluice_types::RowKind) -> bool {
        !self.ignore_event.is_empty()
            && self.ignores(match kind {
                sluice_types::RowKind::Insert => "insert",
                sluice_types::RowKind::Update => "update",
                sluice_types::RowKind::Delete => "delete",
            })
    }
}

/// Schemas never replicated.
pub const SYSTEM_SCHEMAS: [&str; 5] = [
    "mysql",
    "information_schema",
    "performance_schema",
    "sys",
    "sluice",
];

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    exclude: bool,
    db: String,
    table: String,
}

/// A compiled filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFilter {
    rules: Vec<Rule>,
}

fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    // Iterative wildcard match with backtracking on the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i].eq_ignore_ascii_case(&t[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(st) = star {
            i = st + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

impl TableFilter {
    /// Compile the rules; a rule that is not `db.table` (with wildcards) is an error that says so.
    pub fn new(config: &FilterConfig) -> Result<Self, String> {
        if let Some(e) = config
            .ignore_event
            .iter()
            .find(|e| !EVENT_TYPES.iter().any(|t| t.eq_ignore_ascii_case(e)))
        {
            return Err(format!(
                "filter ignore-event `{e}` is not one of {}",
                EVENT_TYPES.join(", ")
            ));
        }
        let mut rules = Vec::new();
        for r in &config.rules {
            let (exclude, body) = match r.trim().strip_prefix('!') {
                Some(b) => (true, b.trim()),
                None => (false, r.trim()),
            };
            let Some((db, table)) = body.split_once('.') else {
                return Err(format!("filter rule `{r}` is not `db.table` (use `*` and `?` as wildcards, `!` to exclude)"));
            };
            if db.is_empty() || table.is_empty() || table.contains('.') {
                return Err(format!("filter rule `{r}` is not `db.table` (use `*` and `?` as wildcards, `!` to exclude)"));
            }
            rules.push(Rule {
                exclude,
                db: db.to_string(),
                table: table.to_string(),
            });
        }
        Ok(TableFilter { rules })
    }

    /// A filter that keeps every (non-system) table.
    pub fn all() -> Self {
        TableFilter { rules: Vec::new() }
    }

    /// Whether the changefeed replicates `db.table` (given as one `db.table` string).
    pub fn matches_name(&self, qualified: &str) -> bool {
        let (db, table) = qualified.split_once('.').unwrap_or((qualified, ""));
        self.matches(db, table)
    }

    pub fn matches(&self, db: &str, table: &str) -> bool {
        if SYSTEM_SCHEMAS.iter().any(|s| s.eq_ignore_ascii_case(db)) {
            return false;
        }
        if self.rules.is_empty() {
            return true;
        }
        let mut keep = false;
        for r in &self.rules {
            if glob(&r.db, db) && glob(&r.table, table) {
                keep = !r.exclude;
            }
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rules: &[&str]) -> TableFilter {
        TableFilter::new(&FilterConfig {
            rules: rules.iter().map(|s| s.to_string()).collect(),
            ignore_event: Vec::new(),
        })
        .expect("valid rules")
    }

    #[test]
    fn last_matching_rule_decides() {
        let t = f(&["shop.*", "!shop.audit_*", "app.users"]);
        assert!(t.matches("shop", "orders"));
        assert!(!t.matches("shop", "audit_2024"));
        assert!(t.matches("app", "users"));
        assert!(!t.matches("app", "orders"));
        assert!(
            t.matches_name("SHOP.Orders"),
            "MySQL names compare case-insensitively here"
        );
        let t = f(&["*.*", "!test.*"]);
        assert!(t.matches("a", "b") && !t.matches("test", "x"));
        assert!(f(&["d?.t*"]).matches("d1", "tab") && !f(&["d?.t*"]).matches("d12", "tab"));
    }

    #[test]
    fn system_schemas_are_never_replicated_and_bad_rules_say_why() {
        assert!(!TableFilter::all().matches("mysql", "user"));
        assert!(!f(&["*.*"]).matches("sluice", "heartbeat"));
        assert!(TableFilter::all().matches("shop", "orders"));
        let e = TableFilter::new(&FilterConfig {
            rules: vec!["justatable".into()],
            ignore_event: Vec::new(),
        })
        .expect_err("invalid");
        assert!(e.contains("db.table"), "{e}");
        let e = TableFilter::new(&FilterConfig {
            rules: vec![],
            ignore_event: vec!["truncate".into()],
        })
        .expect_err("invalid");
        assert!(e.contains("insert, update, delete, ddl"), "{e}");
        let c = FilterConfig {
            rules: vec![],
            ignore_event: vec!["DELETE".into()],
        };
        assert!(
            c.ignores_row(sluice_types::RowKind::Delete)
                && !c.ignores_row(sluice_types::RowKind::Insert)
        );
    }
}
