//! Column definitions, keys and constraints as the history records them: types from their SQL
//! text, column options (nullability, keys, generation, JSON checks), charset options, the
//! routing key, and where an added or changed column goes.

use super::*;
use crate::charset::CharsetOptions;
use sluice_types::{ColumnDef, ColumnType};
use sqlparser::ast::{ColumnOption, CreateTableOptions, SqlOption, TableConstraint};

/// Parses a column type as MariaDB prints it (`int(11) unsigned`, `enum('a','b')`,
/// `decimal(10,2)`, `datetime(6)`, `longtext`, `json`, ...).
pub fn column_from_sql_type(name: &str, sql_type: &str) -> ColumnDef {
    let lower = sql_type.trim().to_ascii_lowercase();
    let word: String = lower
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let args: Vec<String> = lower
        .find('(')
        .and_then(|s| {
            lower[s + 1..]
                .find(')')
                .map(|e| lower[s + 1..s + 1 + e].to_string())
        })
        .map(|a| a.split(',').map(|x| x.trim().to_string()).collect())
        .unwrap_or_default();
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
    let varying = lower.starts_with("character varying") || lower.starts_with("char varying");
    let ty = if varying {
        ColumnType::VarChar
    } else {
        type_of_word(&word)
    };
    let elements = if matches!(ty, ColumnType::Enum | ColumnType::Set) {
        parse_elements(sql_type)
    } else {
        Vec::new()
    };
    let decimals = match ty {
        ColumnType::Decimal => num(1).unwrap_or(0) as u8,
        ColumnType::Time | ColumnType::DateTime | ColumnType::Timestamp => {
            num(0).unwrap_or(0) as u8
        }
        _ => 0,
    };
    ColumnDef {
        name: name.to_string(),
        ty,
        sql_type: lower.clone(),
        unsigned: lower.contains("unsigned"),
        nullable: true,
        charset: None,
        collation: None,
        elements,
        decimals,
        length: if matches!(ty, ColumnType::Enum | ColumnType::Set) {
            0
        } else {
            num(0).unwrap_or(0)
        },
        generated: None,
    }
}

/// The column type a type name (lower case, without arguments) stands for.
fn type_of_word(word: &str) -> ColumnType {
    match word {
        "tinyint" | "bool" | "boolean" => ColumnType::TinyInt,
        "smallint" => ColumnType::SmallInt,
        "mediumint" => ColumnType::MediumInt,
        "int" | "integer" => ColumnType::Int,
        "bigint" => ColumnType::BigInt,
        "decimal" | "numeric" | "dec" | "fixed" => ColumnType::Decimal,
        "float" => ColumnType::Float,
        "double" | "real" => ColumnType::Double,
        "char" | "character" | "nchar" => ColumnType::Char,
        "varchar" | "nvarchar" => ColumnType::VarChar,
        "tinytext" | "text" | "mediumtext" | "longtext" | "long" => ColumnType::Text,
        "binary" => ColumnType::Binary,
        "varbinary" => ColumnType::VarBinary,
        "tinyblob" | "blob" | "mediumblob" | "longblob" => ColumnType::Blob,
        "date" => ColumnType::Date,
        "time" => ColumnType::Time,
        "datetime" => ColumnType::DateTime,
        "timestamp" => ColumnType::Timestamp,
        "year" => ColumnType::Year,
        "enum" => ColumnType::Enum,
        "set" => ColumnType::Set,
        "bit" => ColumnType::Bit,
        "json" => ColumnType::Json,
        // MariaDB's binary-stored types whose values capture turns into text
        // (`crate::textual`): a fixed-width character value for sinks and consumers.
        "uuid" | "inet4" | "inet6" => ColumnType::Char,
        _ => ColumnType::Geometry,
    }
}

/// `enum('a','b''c')` → `["a", "b'c"]`.
pub(super) fn parse_elements(sql_type: &str) -> Vec<String> {
    let Some(start) = sql_type.find('(') else {
        return Vec::new();
    };
    let b = &sql_type.as_bytes()[start + 1..];
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\'' {
            let mut s = Vec::new();
            i += 1;
            while i < b.len() {
                if b[i] == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    s.push(b'\'');
                    i += 2;
                } else if b[i] == b'\'' {
                    break;
                } else if b[i] == b'\\' && i + 1 < b.len() {
                    s.push(b[i + 1]);
                    i += 2;
                } else {
                    s.push(b[i]);
                    i += 1;
                }
            }
            out.push(String::from_utf8_lossy(&s).into_owned());
        } else if b[i] == b')' {
            break;
        }
        i += 1;
    }
    out
}

/// `AS (expr) [VIRTUAL|STORED]`: the server's default is VIRTUAL (MariaDB's PERSISTENT reaches
/// the parser as STORED, [`normalize_for_parser`]).
/// A period column reaches the parser with a marker expression
/// ([`crate::mariadb_sql::PERIOD_MARKERS`]).
pub(super) fn generation_of(
    expr: &sqlparser::ast::Expr,
    mode: Option<sqlparser::ast::GeneratedExpressionMode>,
) -> Generation {
    let (start, end) = crate::mariadb_sql::PERIOD_MARKERS;
    match mode {
        _ if expr.to_string() == start => Generation::RowStart,
        _ if expr.to_string() == end => Generation::RowEnd,
        Some(sqlparser::ast::GeneratedExpressionMode::Stored) => Generation::Stored,
        _ => Generation::Virtual,
    }
}

/// A generated column as the snapshot reads `information_schema.COLUMNS`
/// ([`Generation::from_extra`], shared with the MySQL sink).
pub fn generation_from_extra(extra: &str) -> Option<Generation> {
    Generation::from_extra(extra)
}

/// The tables a CREATE TABLE's foreign keys reference (table constraints and column
/// `REFERENCES`).
pub(super) fn foreign_parents<'a>(
    constraints: &'a [TableConstraint],
    columns: &'a [sqlparser::ast::ColumnDef],
) -> Vec<&'a ObjectName> {
    let inline = columns
        .iter()
        .flat_map(|c| c.options.iter())
        .filter_map(|o| match &o.option {
            ColumnOption::ForeignKey(fk) => Some(&fk.foreign_table),
            _ => None,
        });
    constraints
        .iter()
        .filter_map(|c| match c {
            TableConstraint::ForeignKey(fk) => Some(&fk.foreign_table),
            _ => None,
        })
        .chain(inline)
        .collect()
}

pub(super) fn ident_of_index_expr(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    let s = s.split('(').next().unwrap_or(&s).trim();
    s.trim_matches('`').trim_matches('"').to_string()
}

pub(super) fn apply_column_options(
    c: &mut ColumnDef,
    options: &[ColumnOption],
    pk: &mut Vec<String>,
    uniques: &mut Vec<Vec<String>>,
) {
    for o in options {
        match o {
            ColumnOption::NotNull => c.nullable = false,
            ColumnOption::Null => c.nullable = true,
            ColumnOption::PrimaryKey(_) => {
                c.nullable = false;
                pk.push(c.name.clone());
            }
            ColumnOption::Unique(_) => uniques.push(vec![c.name.clone()]),
            ColumnOption::Generated {
                generation_expr: Some(e),
                generation_expr_mode,
                ..
            } => c.generated = Some(generation_of(e, *generation_expr_mode)),
            ColumnOption::Check(ch)
                if ch.to_string().to_ascii_lowercase().contains("json_valid") =>
            {
                c.ty = ColumnType::Json;
            }
            _ => {}
        }
    }
}

/// The `CHARACTER SET` and `COLLATE` written on a column (the last of each, as the server takes
/// them).
pub(super) fn column_charset_options(options: &[ColumnOption]) -> (Option<String>, Option<String>) {
    let (mut cs, mut coll) = (None, None);
    for o in options {
        match o {
            ColumnOption::CharacterSet(n) => cs = Some(n.to_string()),
            ColumnOption::Collation(n) => coll = Some(n.to_string()),
            _ => {}
        }
    }
    (cs, coll)
}

/// `[DEFAULT] CHARSET|CHARACTER SET = x` and `[DEFAULT] COLLATE = y` among CREATE TABLE options.
pub(super) fn table_charset_options(options: &CreateTableOptions) -> CharsetOptions {
    let list = match options {
        CreateTableOptions::None => return CharsetOptions::default(),
        CreateTableOptions::With(l)
        | CreateTableOptions::Options(l)
        | CreateTableOptions::Plain(l)
        | CreateTableOptions::TableProperties(l) => l,
    };
    let mut out = CharsetOptions::default();
    for o in list {
        if let SqlOption::KeyValue { key, value } = o {
            let key = key.to_string().to_ascii_uppercase();
            let key = key.strip_prefix("DEFAULT ").unwrap_or(&key);
            match key {
                "CHARSET" | "CHARACTER SET" => out.charset = Some(value.to_string()),
                "COLLATE" => out.collation = Some(value.to_string()),
                _ => {}
            }
        }
    }
    out
}

/// Chooses the routing key: the primary key, else the first unique key whose columns are all
/// NOT NULL. Returns column indexes.
pub(super) fn choose_key(
    columns: &[ColumnDef],
    pk: &[String],
    uniques: &[Vec<String>],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let idx = |names: &[String]| -> Option<Vec<usize>> {
        names
            .iter()
            .map(|n| columns.iter().position(|c| c.name.eq_ignore_ascii_case(n)))
            .collect()
    };
    let uk: Vec<Vec<usize>> = uniques.iter().filter_map(|u| idx(u)).collect();
    if let Some(k) = idx(pk).filter(|k| !k.is_empty()) {
        return (k, uk);
    }
    for u in &uk {
        if u.iter().all(|i| !columns[*i].nullable) {
            let rest = uk.iter().filter(|x| *x != u).cloned().collect();
            return (u.clone(), rest);
        }
    }
    (Vec::new(), uk)
}

pub(super) fn names_of(columns: &[ColumnDef], idx: &[usize]) -> Vec<String> {
    idx.iter()
        .filter_map(|i| columns.get(*i).map(|c| c.name.clone()))
        .collect()
}

/// Mutable key description while applying an ALTER.
pub(super) struct KeyNames {
    pub(super) pk: Vec<String>,
    pub(super) uniques: Vec<Vec<String>>,
}

/// Adds `col` (or replaces the column named `replace`) at `pos`: in place when replacing
/// without a position, at the end when adding without one.
pub(super) fn place_column(
    columns: &mut Vec<ColumnDef>,
    col: ColumnDef,
    pos: Option<&sqlparser::ast::MySQLColumnPosition>,
    replace: Option<&str>,
) {
    use sqlparser::ast::MySQLColumnPosition as P;
    let old = replace.and_then(|n| columns.iter().position(|c| c.name.eq_ignore_ascii_case(n)));
    if replace.is_some() && old.is_none() {
        // MODIFY/CHANGE IF EXISTS of a column that is not there: the server changed nothing.
        return;
    }
    match (old, pos) {
        (Some(i), None) => {
            columns[i] = col;
            return;
        }
        (Some(i), Some(_)) => {
            columns.remove(i);
        }
        _ => {}
    }
    match pos {
        Some(P::First) => columns.insert(0, col),
        Some(P::After(name)) => match columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(&name.value))
        {
            Some(i) => columns.insert(i + 1, col),
            None => columns.push(col),
        },
        None => {
            // MariaDB keeps the implicit system-versioning columns last.
            let at = columns.len() - implicit_period_columns(columns);
            columns.insert(at, col)
        }
    }
}

/// 2 when the table ends with the implicit `row_start`, `row_end` columns MariaDB adds for
/// `WITH SYSTEM VERSIONING` ([`crate::mariadb_sql`]), else 0.
pub(super) fn implicit_period_columns(columns: &[ColumnDef]) -> usize {
    let implicit = |c: &ColumnDef, name: &str| {
        c.name == name && c.ty == ColumnType::Timestamp && c.decimals == 6 && !c.nullable
    };
    match columns {
        [.., s, e] if implicit(s, "row_start") && implicit(e, "row_end") => 2,
        _ => 0,
    }
}

/// A column of the primary key stays NOT NULL when redefined.
pub(super) fn keep_key_nullability(d: &mut ColumnDef, keys: &KeyNames) {
    if keys.pk.iter().any(|n| n.eq_ignore_ascii_case(&d.name)) {
        d.nullable = false;
    }
}

pub(super) fn rename_key_column(keys: &mut KeyNames, old: &str, new: &str) {
    for c in keys.pk.iter_mut().chain(keys.uniques.iter_mut().flatten()) {
        if c.eq_ignore_ascii_case(old) {
            *c = new.to_string();
        }
    }
}

pub(super) fn apply_constraint(
    con: &TableConstraint,
    keys: &mut KeyNames,
    columns: &mut [ColumnDef],
) {
    match con {
        TableConstraint::PrimaryKey(pk) => {
            keys.pk = pk
                .columns
                .iter()
                .map(|c| ident_of_index_expr(&c.column.expr))
                .collect();
            for c in columns.iter_mut() {
                if keys.pk.iter().any(|n| n.eq_ignore_ascii_case(&c.name)) {
                    c.nullable = false;
                }
            }
        }
        TableConstraint::Unique(u) => keys.uniques.push(
            u.columns
                .iter()
                .map(|c| ident_of_index_expr(&c.column.expr))
                .collect(),
        ),
        TableConstraint::Check(ch) => {
            let s = ch.to_string().to_ascii_lowercase();
            if let Some(i) = s.find("json_valid(") {
                let col = s[i + 11..]
                    .split(')')
                    .next()
                    .unwrap_or("")
                    .trim_matches('`')
                    .to_string();
                for c in columns
                    .iter_mut()
                    .filter(|c| c.name.eq_ignore_ascii_case(&col))
                {
                    c.ty = ColumnType::Json;
                }
            }
        }
        _ => {}
    }
}
