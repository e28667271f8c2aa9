//! Character sets and collations of string columns, resolved as the server resolves them, from
//! the schema history alone (so every node derives the same answer).
//!
//! Rules (MariaDB's, checked against a live server by `tests/charset.rs`):
//! - a string column (CHAR, VARCHAR, TEXT types, ENUM, SET) takes its own `COLLATE y` (the
//!   charset is the collation's), else its own `CHARACTER SET x` with `x`'s default collation,
//!   else the table's default; NCHAR/NVARCHAR mean `CHARACTER SET utf8mb3`; MariaDB's JSON is
//!   `LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin` unless it says otherwise;
//! - a table's default is its `[DEFAULT] COLLATE = y`, else its `[DEFAULT] CHARSET = x` with
//!   `x`'s default collation, else its database's default; a database's default is its
//!   `COLLATE`, else its `CHARACTER SET` with that charset's default collation, else the server's
//!   (`@@collation_server` at the snapshot);
//! - a charset's default collation is `information_schema.COLLATIONS.IS_DEFAULT`, overridden by
//!   `@@character_set_collations` (MariaDB 11.2+);
//! - `CHARACTER SET binary` makes CHAR/VARCHAR/TEXT the binary types (BINARY, VARBINARY, BLOB),
//!   which, as in `information_schema.COLUMNS`, have no charset;
//! - names are stored as the server reports them: lower case, `utf8` spelled as the server
//!   spells it (`utf8mb3` on MariaDB 10.6+ and MySQL 8.0.30+, `utf8` before), collation names
//!   (`utf8mb4_general_ci`), never collation ids.
//!
//! Anything the history does not know (a history persisted before these fields existed, a
//! charset missing from the snapshot's collation list) stays `None` rather than being guessed,
//! except the compiled-in default collations of MariaDB < 11.2 for a history without its own.

use serde::{Deserialize, Serialize};
use sluice_types::{ColumnDef, ColumnType, TableId};
use std::collections::BTreeMap;

/// A charset and (when known) its collation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharsetCollation {
    pub charset: String,
    pub collation: Option<String>,
}

impl CharsetCollation {
    pub fn new(charset: &str, collation: &str) -> Self {
        CharsetCollation {
            charset: charset.to_string(),
            collation: Some(collation.to_string()),
        }
    }
}

/// What the history needs to resolve charsets and collations: read at the snapshot, then kept
/// current by the DDLs (databases and tables).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharsetDefaults {
    /// `@@character_set_server` / `@@collation_server` at the snapshot (the default of a database
    /// created without one).
    #[serde(default)]
    pub server: Option<CharsetCollation>,
    /// The default collation of every charset (charset → collation).
    #[serde(default)]
    pub charset_collations: BTreeMap<String, String>,
    /// Charset aliases → the name the server reports (`utf8` → `utf8mb3`; `utf8mb3` → `utf8` on
    /// servers that still call it `utf8`). Empty: `utf8` → `utf8mb3`.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// What a JSON column without CHARACTER SET/COLLATE is (MariaDB: utf8mb4, utf8mb4_bin;
    /// MySQL: no charset, `None`).
    #[serde(default)]
    pub json: Option<CharsetCollation>,
    /// Each database's default (database name → default).
    #[serde(default)]
    pub databases: BTreeMap<String, CharsetCollation>,
    /// Each live table's default (table id → default).
    #[serde(default)]
    pub tables: BTreeMap<TableId, CharsetCollation>,
}

// MariaDB's compiled-in default collation of each charset (before 11.2): used only by a history
// whose snapshot did not record `charset_collations`. One table for Sluice, in
// `sluice_partition::collation`.
use sluice_partition::collation::BUILTIN_DEFAULTS;

/// A name as written in SQL (`latin1`, `'latin1'`, `` `LATIN1` ``) in the form compared here.
fn bare(name: &str) -> String {
    name.trim()
        .trim_matches(|c| c == '`' || c == '\'' || c == '"')
        .to_ascii_lowercase()
}

/// The charset part of a collation name (`utf8mb4_general_ci` → `utf8mb4`, `binary` →
/// `binary`): no charset name contains `_`.
pub fn charset_prefix(collation: &str) -> &str {
    collation.split('_').next().unwrap_or(collation)
}

/// True for the types that have a charset (ENUM and SET included); JSON only where it is a
/// LONGTEXT alias (the caller decides).
pub fn is_character_type(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Char
            | ColumnType::VarChar
            | ColumnType::Text
            | ColumnType::Enum
            | ColumnType::Set
    )
}

/// True for a column declared NCHAR/NVARCHAR (the national charset, utf8mb3).
pub fn is_national(sql_type: &str) -> bool {
    let t = sql_type.trim_start().to_ascii_lowercase();
    t.starts_with("nchar") || t.starts_with("nvarchar") || t.starts_with("national")
}

impl CharsetDefaults {
    /// What a snapshot of a MariaDB 10.6–11.1 server records, given `@@collation_server`
    /// (for tests and tools without a server).
    pub fn mariadb(collation_server: &str) -> CharsetDefaults {
        let mut d = CharsetDefaults {
            aliases: [("utf8".to_string(), "utf8mb3".to_string())].into(),
            json: Some(CharsetCollation::new("utf8mb4", "utf8mb4_bin")),
            ..Default::default()
        };
        for (cs, c) in BUILTIN_DEFAULTS {
            d.charset_collations.insert(cs.to_string(), c.to_string());
        }
        d.server = d.resolve(None, Some(collation_server), None);
        d
    }

    /// A charset name as the server reports it.
    pub fn charset(&self, name: &str) -> String {
        let n = bare(name);
        match self.aliases.get(&n) {
            Some(a) => a.clone(),
            None if self.aliases.is_empty() && n == "utf8" => "utf8mb3".to_string(),
            None => n,
        }
    }

    /// A collation name as the server reports it (`utf8_bin` → `utf8mb3_bin`).
    pub fn collation(&self, name: &str) -> String {
        let n = bare(name);
        match n.split_once('_') {
            Some((cs, rest)) => format!("{}_{rest}", self.charset(cs)),
            None => n,
        }
    }

    fn knows_charset(&self, cs: &str) -> bool {
        self.charset_collations.contains_key(cs) || BUILTIN_DEFAULTS.iter().any(|(c, _)| *c == cs)
    }

    /// The default collation of a charset (already normalised).
    pub fn default_collation(&self, cs: &str) -> Option<String> {
        if let Some(c) = self.charset_collations.get(cs) {
            return Some(c.clone());
        }
        if !self.charset_collations.is_empty() {
            return None;
        }
        let mb3 = self.charset("utf8mb3");
        let builtin = if cs == mb3 { "utf8mb3" } else { cs };
        BUILTIN_DEFAULTS
            .iter()
            .find(|(c, _)| *c == builtin)
            .map(|(_, d)| self.collation(d))
    }

    /// `CHARACTER SET cs COLLATE coll` as written (either may be absent), falling back to
    /// `context` (the enclosing table's or database's default). `DEFAULT` counts as absent.
    pub fn resolve(
        &self,
        cs: Option<&str>,
        coll: Option<&str>,
        context: Option<&CharsetCollation>,
    ) -> Option<CharsetCollation> {
        let cs = cs.filter(|c| bare(c) != "default").map(|c| self.charset(c));
        // `COLLATE DEFAULT`: the default collation of the charset in effect.
        let default_collation = coll.is_some_and(|c| bare(c) == "default");
        if let Some(coll) = coll.filter(|c| bare(c) != "default") {
            let mut coll = self.collation(coll);
            // MariaDB 11.2+: a collation named without its charset (`uca1400_ai_ci`) belongs
            // to the charset of its context.
            if coll != "binary" && !self.knows_charset(charset_prefix(&coll)) {
                if let Some(c) = cs.as_deref().or(context.map(|c| c.charset.as_str())) {
                    coll = format!("{c}_{coll}");
                }
            }
            return Some(CharsetCollation {
                charset: charset_prefix(&coll).to_string(),
                collation: Some(coll),
            });
        }
        if let Some(cs) = cs {
            return Some(CharsetCollation {
                collation: self.default_collation(&cs),
                charset: cs,
            });
        }
        match context {
            Some(c) if default_collation => Some(CharsetCollation {
                collation: self.default_collation(&c.charset),
                charset: c.charset.clone(),
            }),
            _ => context.cloned(),
        }
    }

    /// The national charset (NCHAR, NVARCHAR): utf8mb3 with its compiled-in general_ci.
    pub fn national(&self) -> CharsetCollation {
        let cs = self.charset("utf8mb3");
        CharsetCollation {
            collation: Some(format!("{cs}_general_ci")),
            charset: cs,
        }
    }

    /// A database's default (the server's for a database the history does not know).
    pub fn database(&self, db: &str) -> Option<&CharsetCollation> {
        self.databases.get(db).or(self.server.as_ref())
    }

    /// `@@character_set_collations` (`utf8mb4=utf8mb4_uca1400_ai_ci,…`) over the defaults.
    pub fn apply_character_set_collations(&mut self, value: &str) {
        for pair in value.split(',') {
            let Some((cs, coll)) = pair.split_once('=') else {
                continue;
            };
            let cs = self.charset(cs);
            let coll = bare(coll);
            if cs.is_empty() || coll.is_empty() {
                continue;
            }
            let coll = if coll.starts_with(&format!("{cs}_")) {
                coll
            } else {
                format!("{cs}_{coll}")
            };
            self.charset_collations.insert(cs, coll);
        }
    }

    /// Gives a string column the charset and collation the server gives it, from the options
    /// written on it (`cs`, `coll`) and the table default `table`. Columns without a charset
    /// (numbers, BINARY, VARBINARY, BLOB, ...) are left alone; `CHARACTER SET binary` turns
    /// CHAR/VARCHAR/TEXT into their binary types.
    pub fn resolve_column(
        &self,
        col: &mut ColumnDef,
        cs: Option<&str>,
        coll: Option<&str>,
        table: Option<&CharsetCollation>,
    ) {
        let declared_json = col.sql_type.trim().eq_ignore_ascii_case("json");
        let context = if declared_json {
            // MariaDB's JSON is LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin.
            match &self.json {
                Some(j) => Some(j),
                None if cs.is_none() && coll.is_none() => return,
                None => table,
            }
        } else if is_character_type(col.ty) || col.ty == ColumnType::Json {
            table
        } else {
            return;
        };
        let national;
        let context = if is_national(&col.sql_type) && cs.is_none() {
            national = self.national();
            Some(&national)
        } else {
            context
        };
        set_charset(col, self.resolve(cs, coll, context));
    }

    /// `ALTER TABLE … CONVERT TO CHARACTER SET`: every column with a charset other than
    /// `binary` (BLOBs and `CHARACTER SET binary` ENUMs stay) takes `to`.
    pub fn convert_columns(&self, columns: &mut [ColumnDef], to: &CharsetCollation) {
        for c in columns.iter_mut() {
            let has_charset =
                is_character_type(c.ty) || (c.ty == ColumnType::Json && c.charset.is_some());
            if has_charset && c.charset.as_deref() != Some("binary") {
                set_charset(c, Some(to.clone()));
            }
        }
    }
}

/// Sets a string column's charset and collation; `binary` turns CHAR/VARCHAR/TEXT into their
/// binary types, which have no charset (as `information_schema.COLUMNS` shows them).
fn set_charset(col: &mut ColumnDef, cc: Option<CharsetCollation>) {
    let Some(cc) = cc else {
        col.charset = None;
        col.collation = None;
        return;
    };
    if cc.charset == "binary" {
        let to = match col.ty {
            ColumnType::Char => Some(ColumnType::Binary),
            ColumnType::VarChar => Some(ColumnType::VarBinary),
            ColumnType::Text | ColumnType::Json => Some(ColumnType::Blob),
            _ => None,
        };
        if let Some(ty) = to {
            col.sql_type = binary_sql_type(col.ty, &col.sql_type);
            col.ty = ty;
            col.charset = None;
            col.collation = None;
            return;
        }
    }
    col.charset = Some(cc.charset);
    col.collation = cc.collation;
}

/// `char(3)` → `binary(3)`, `varchar(3)` → `varbinary(3)`, `mediumtext` → `mediumblob`, ...
fn binary_sql_type(ty: ColumnType, sql_type: &str) -> String {
    let lower = sql_type.trim().to_ascii_lowercase();
    let args = lower.find('(').map(|i| &lower[i..]).unwrap_or("");
    match ty {
        ColumnType::Char => format!("binary{args}"),
        ColumnType::VarChar => format!("varbinary{args}"),
        _ => {
            let word: String = lower
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            match word.as_str() {
                "long" => "mediumblob".to_string(),
                "json" => "longblob".to_string(),
                w => match w.strip_suffix("text") {
                    Some(size) => format!("{size}blob{args}"),
                    None => format!("blob{args}"),
                },
            }
        }
    }
}

/// Charset options of a table or database, as written (`None`: not mentioned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CharsetOptions {
    pub charset: Option<String>,
    pub collation: Option<String>,
}

impl CharsetOptions {
    pub fn is_empty(&self) -> bool {
        self.charset.is_none() && self.collation.is_none()
    }
}

/// The charset options of an ALTER TABLE: `[DEFAULT] CHARSET/CHARACTER SET/COLLATE` (the table
/// default) and `CONVERT TO CHARACTER SET x [COLLATE y]` (every column too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlterCharset {
    pub default: CharsetOptions,
    pub convert: Option<CharsetOptions>,
}

impl AlterCharset {
    pub fn is_empty(&self) -> bool {
        self.default.is_empty() && self.convert.is_none()
    }
}

/// Reads charset options from the words of table or database options (`DEFAULT CHARSET=x
/// COLLATE y ENGINE=InnoDB ...`, `CONVERT TO CHARACTER SET x COLLATE y`), as a list of
/// `(upper-cased word or None for other tokens, raw text)`. Values may be quoted.
pub fn scan_charset_options(tokens: &[(Option<String>, String)]) -> AlterCharset {
    let mut out = AlterCharset::default();
    let word = |i: usize| tokens.get(i).and_then(|t| t.0.as_deref());
    let mut i = 0;
    // After the name of an option, an optional `=`, then the value.
    let value = |mut j: usize| -> (Option<String>, usize) {
        if tokens.get(j).is_some_and(|t| t.0.is_none() && t.1 == "=") {
            j += 1;
        }
        (tokens.get(j).map(|t| t.1.clone()), j + 1)
    };
    while i < tokens.len() {
        match word(i) {
            Some("CONVERT") if word(i + 1) == Some("TO") => {
                let mut conv = CharsetOptions::default();
                let mut j = i + 2;
                if word(j) == Some("CHARACTER") && word(j + 1) == Some("SET") {
                    j += 2;
                } else if word(j) == Some("CHARSET") {
                    j += 1;
                } else {
                    i += 1;
                    continue;
                }
                let (v, next) = value(j);
                conv.charset = v;
                j = next;
                if word(j) == Some("COLLATE") {
                    let (v, next) = value(j + 1);
                    conv.collation = v;
                    j = next;
                }
                out.convert = Some(conv);
                i = j;
            }
            Some("CHARACTER") if word(i + 1) == Some("SET") => {
                let (v, next) = value(i + 2);
                out.default.charset = v;
                i = next;
            }
            Some("CHARSET") => {
                let (v, next) = value(i + 1);
                out.default.charset = v;
                i = next;
            }
            Some("COLLATE") => {
                let (v, next) = value(i + 1);
                out.default.collation = v;
                i = next;
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> CharsetDefaults {
        CharsetDefaults::mariadb("utf8mb4_general_ci")
    }

    #[test]
    fn names_are_normalised() {
        let d = defaults();
        assert_eq!(d.charset("UTF8"), "utf8mb3");
        assert_eq!(d.charset("`latin1`"), "latin1");
        assert_eq!(d.collation("'utf8_unicode_ci'"), "utf8mb3_unicode_ci");
        assert_eq!(d.collation("binary"), "binary");
        // A server that still calls utf8mb3 `utf8`.
        let old = CharsetDefaults {
            aliases: [("utf8mb3".to_string(), "utf8".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(old.collation("utf8mb3_bin"), "utf8_bin");
        assert_eq!(
            old.default_collation("utf8").as_deref(),
            Some("utf8_general_ci")
        );
        // Without a snapshot's list: MariaDB's compiled-in defaults.
        let none = CharsetDefaults::default();
        assert_eq!(none.charset("utf8"), "utf8mb3");
        assert_eq!(
            none.default_collation("latin1").as_deref(),
            Some("latin1_swedish_ci")
        );
    }

    #[test]
    fn resolution_order() {
        let d = defaults();
        let table = CharsetCollation::new("latin1", "latin1_german1_ci");
        let r = |cs: Option<&str>, coll: Option<&str>| d.resolve(cs, coll, Some(&table));
        assert_eq!(r(None, None), Some(table.clone()), "the table default");
        assert_eq!(
            r(Some("utf8mb4"), None),
            Some(CharsetCollation::new("utf8mb4", "utf8mb4_general_ci")),
            "a charset takes its default collation"
        );
        assert_eq!(
            r(Some("latin1"), None),
            Some(CharsetCollation::new("latin1", "latin1_swedish_ci")),
            "the charset's default, not the table's collation of the same charset"
        );
        assert_eq!(
            r(None, Some("utf8mb4_bin")),
            Some(CharsetCollation::new("utf8mb4", "utf8mb4_bin")),
            "a collation brings its charset"
        );
        assert_eq!(
            r(Some("utf8"), Some("utf8_bin")),
            Some(CharsetCollation::new("utf8mb3", "utf8mb3_bin"))
        );
        assert_eq!(r(Some("DEFAULT"), None), Some(table.clone()));
        // MariaDB 11.2+ charset-less collation names take the context's charset.
        let mut d11 = defaults();
        d11.apply_character_set_collations("utf8mb4=utf8mb4_uca1400_ai_ci,utf8mb3=uca1400_ai_ci");
        assert_eq!(
            d11.default_collation("utf8mb4").as_deref(),
            Some("utf8mb4_uca1400_ai_ci")
        );
        assert_eq!(
            d11.default_collation("utf8mb3").as_deref(),
            Some("utf8mb3_uca1400_ai_ci")
        );
        assert_eq!(
            d11.resolve(Some("utf8mb4"), Some("uca1400_as_ci"), None),
            Some(CharsetCollation::new("utf8mb4", "utf8mb4_uca1400_as_ci"))
        );
    }

    fn col(name: &str, sql_type: &str) -> ColumnDef {
        crate::schema::column_from_sql_type(name, sql_type)
    }

    #[test]
    fn columns_binary_national_json() {
        let d = defaults();
        let t = CharsetCollation::new("latin1", "latin1_swedish_ci");
        let mut c = col("a", "VARCHAR(3)");
        d.resolve_column(&mut c, Some("binary"), None, Some(&t));
        assert_eq!(
            (c.ty, c.sql_type.as_str(), c.charset.clone()),
            (ColumnType::VarBinary, "varbinary(3)", None)
        );
        let mut c = col("a", "MEDIUMTEXT");
        d.resolve_column(
            &mut c,
            None,
            None,
            Some(&CharsetCollation::new("binary", "binary")),
        );
        assert_eq!(
            (c.ty, c.sql_type.as_str()),
            (ColumnType::Blob, "mediumblob")
        );
        let mut c = col("a", "ENUM('x')");
        d.resolve_column(&mut c, Some("binary"), None, Some(&t));
        assert_eq!(
            (c.ty, c.collation.as_deref()),
            (ColumnType::Enum, Some("binary"))
        );
        let mut c = col("a", "BLOB");
        d.resolve_column(&mut c, None, None, Some(&t));
        assert_eq!(
            (c.charset, c.collation),
            (None, None),
            "binary types have no charset"
        );
        let mut c = col("a", "INT");
        d.resolve_column(&mut c, None, None, Some(&t));
        assert_eq!(c.charset, None);
        let mut c = col("a", "NVARCHAR(3)");
        d.resolve_column(&mut c, None, None, Some(&t));
        assert_eq!(c.collation.as_deref(), Some("utf8mb3_general_ci"));
        let mut c = col("a", "NCHAR(3)");
        d.resolve_column(&mut c, None, Some("utf8mb3_bin"), Some(&t));
        assert_eq!(c.collation.as_deref(), Some("utf8mb3_bin"));
        let mut c = col("a", "JSON");
        d.resolve_column(&mut c, None, None, Some(&t));
        assert_eq!(c.collation.as_deref(), Some("utf8mb4_bin"), "MariaDB JSON");
        let mut c = col("a", "JSON");
        d.resolve_column(&mut c, None, Some("utf8mb4_general_ci"), Some(&t));
        assert_eq!(c.collation.as_deref(), Some("utf8mb4_general_ci"));
        let mysql = CharsetDefaults {
            json: None,
            ..defaults()
        };
        let mut c = col("a", "JSON");
        mysql.resolve_column(&mut c, None, None, Some(&t));
        assert_eq!(c.charset, None, "MySQL JSON has no charset");
        // CONVERT TO: every charset-bearing column but binary ones.
        let mut cols = vec![
            col("a", "CHAR(2)"),
            col("b", "BLOB"),
            col("c", "ENUM('x')"),
            col("d", "TEXT"),
        ];
        d.resolve_column(&mut cols[0], None, None, Some(&t));
        d.resolve_column(&mut cols[2], Some("binary"), None, Some(&t));
        d.convert_columns(&mut cols, &CharsetCollation::new("utf8mb4", "utf8mb4_bin"));
        let got: Vec<Option<&str>> = cols.iter().map(|c| c.collation.as_deref()).collect();
        assert_eq!(
            got,
            vec![
                Some("utf8mb4_bin"),
                None,
                Some("binary"),
                Some("utf8mb4_bin")
            ]
        );
    }

    #[test]
    fn option_words() {
        let toks = |s: &str| -> Vec<(Option<String>, String)> {
            s.split_whitespace()
                .map(|w| {
                    let is_word = w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    (is_word.then(|| w.to_ascii_uppercase()), w.to_string())
                })
                .collect()
        };
        let a = scan_charset_options(&toks(
            "ENGINE = InnoDB DEFAULT CHARSET = latin1 COLLATE latin1_bin",
        ));
        assert_eq!(a.default.charset.as_deref(), Some("latin1"));
        assert_eq!(a.default.collation.as_deref(), Some("latin1_bin"));
        assert!(a.convert.is_none());
        let a = scan_charset_options(&toks(
            "CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        ));
        assert!(a.default.is_empty());
        let c = a.convert.expect("convert");
        assert_eq!(
            (c.charset.as_deref(), c.collation.as_deref()),
            (Some("utf8mb4"), Some("utf8mb4_bin"))
        );
        let a = scan_charset_options(&toks("CONVERT TO CHARSET DEFAULT"));
        assert_eq!(
            a.convert.and_then(|c| c.charset).as_deref(),
            Some("DEFAULT")
        );
    }
}
