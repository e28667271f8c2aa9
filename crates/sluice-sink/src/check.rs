//! `sluice check --upstream URI --downstream URI [--tables 'db.*,…']`: compares tables of two
//! MySQL-compatible servers by chunk checksums and bisects differing chunks down to the rows,
//! reported by key (what sync-diff-inspector does for TiCDC).
//!
//! Invariants:
//! - a row's checksum covers every column's exact bytes and its NULL-ness (`NULL` and `''` differ,
//!   and so do `'a'` and `'a '`); a chunk's checksum is the row count and the XOR of 64-bit row
//!   hashes over a key range, evaluated with the same range on both sides;
//! - chunk boundaries come from the upstream's key order; the first and last chunks are open, so
//!   rows that exist only downstream are still covered;
//! - a differing range is halved until it holds at most [`ROW_COMPARE_MAX`] upstream rows, then
//!   compared row by row; every difference is reported by key ([`DiffKind`]);
//! - [`CheckReport::equal`] is true only when no table has any difference (exit code 0).

use crate::error::{Result, SinkError};
use crate::mysql::{login_error, pool, quote_ident};
use crate::uri::{MysqlConfig, SinkConfig, SinkUri};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, Row, Value as M};
use std::collections::BTreeMap;
use std::fmt;

/// Default rows per chunk.
pub const DEFAULT_CHUNK_SIZE: usize = 10_000;
/// A differing range at most this large (upstream rows) is compared row by row.
pub const ROW_COMPARE_MAX: usize = 64;
/// At most this many differences are listed per table (the count is always exact up to the
/// rows compared).
pub const MAX_LISTED_DIFFS: usize = 1000;
/// Schemas never compared.
pub const SYSTEM_SCHEMAS: &[&str] = &[
    "mysql",
    "information_schema",
    "performance_schema",
    "sys",
    crate::mysql::PROGRESS_DB,
    // The upstream's heartbeat table (`sluice.heartbeat`), never replicated.
    "sluice",
];

#[derive(Clone, Debug)]
pub struct CheckArgs {
    pub upstream: String,
    pub downstream: String,
    /// Patterns `db.table` with `*` as wildcard; empty: every non-system table.
    pub tables: Vec<String>,
    pub chunk_size: usize,
}

impl CheckArgs {
    pub fn new(upstream: &str, downstream: &str, tables: &str) -> CheckArgs {
        CheckArgs {
            upstream: upstream.into(),
            downstream: downstream.into(),
            tables: tables
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            chunk_size: DEFAULT_CHUNK_SIZE,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiffKind {
    /// Upstream has the row, downstream does not.
    Missing,
    /// Downstream has a row upstream does not.
    Extra,
    /// Both have the key with different contents.
    Differs,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowDiff {
    /// Key column values as text (`NULL` for NULL).
    pub key: Vec<String>,
    pub kind: DiffKind,
}

#[derive(Clone, Debug, Default)]
pub struct TableReport {
    pub table: String,
    pub key_columns: Vec<String>,
    pub chunks: usize,
    pub upstream_rows: u64,
    pub downstream_rows: u64,
    /// A structural difference (missing table, different columns): rows were not compared.
    pub schema_difference: Option<String>,
    pub diffs: Vec<RowDiff>,
    pub diff_count: usize,
}

impl TableReport {
    pub fn equal(&self) -> bool {
        self.schema_difference.is_none() && self.diff_count == 0
    }
}

#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub tables: Vec<TableReport>,
}

impl CheckReport {
    pub fn equal(&self) -> bool {
        self.tables.iter().all(TableReport::equal)
    }
    /// 0 when equal, 1 when any difference was found (errors are reported by `run` itself; the
    /// binary exits 2 on them).
    pub fn exit_code(&self) -> i32 {
        if self.equal() {
            0
        } else {
            1
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tables {
            let state = if t.equal() { "equal" } else { "DIFFERENT" };
            writeln!(
                f,
                "{}: {state} ({} chunks, {} upstream rows, {} downstream rows)",
                t.table, t.chunks, t.upstream_rows, t.downstream_rows
            )?;
            if let Some(s) = &t.schema_difference {
                writeln!(f, "  schema: {s}")?;
            }
            for d in &t.diffs {
                writeln!(
                    f,
                    "  {:?} ({}) = ({})",
                    d.kind,
                    t.key_columns.join(", "),
                    d.key.join(", ")
                )?;
            }
            if t.diff_count > t.diffs.len() {
                writeln!(f, "  … and {} more", t.diff_count - t.diffs.len())?;
            }
        }
        let n = self.tables.iter().filter(|t| !t.equal()).count();
        write!(f, "{} tables compared, {n} different", self.tables.len())
    }
}

fn glob(pattern: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some((c, rest)) => {
                s.first().is_some_and(|x| x.eq_ignore_ascii_case(c)) && go(rest, &s[1..])
            }
        }
    }
    go(pattern.as_bytes(), s.as_bytes())
}

/// One of the two servers compared: its pool, and what a failure on it is called.
struct Server {
    pool: Pool,
    cfg: MysqlConfig,
    /// `upstream` or `downstream`.
    side: &'static str,
    /// The option that names it (`--upstream`).
    option: &'static str,
}

impl Server {
    fn open(uri: &str, side: &'static str, option: &'static str) -> Result<Server> {
        match SinkUri::parse(uri)?.config {
            SinkConfig::Mysql(cfg) => Ok(Server {
                pool: pool(&cfg, 4)?,
                cfg,
                side,
                option,
            }),
            _ => Err(SinkError::invalid_uri(
                &crate::uri::mask_uri(uri),
                format!("{option} must be a mysql:// URI"),
            )),
        }
    }

    async fn conn(&self) -> Result<Conn> {
        self.pool
            .get_conn()
            .await
            .map_err(|e| login_error(&self.cfg, self.side, self.option, e))
    }
}

fn text(v: &M) -> String {
    match v {
        M::NULL => "NULL".into(),
        M::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        M::Int(i) => i.to_string(),
        M::UInt(u) => u.to_string(),
        M::Float(f) => f.to_string(),
        M::Double(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

struct Table {
    /// No primary or not-null unique key: `key` is every column, the table is one chunk (range
    /// conditions would drop rows with NULLs) and rows are compared as a multiset.
    keyless: bool,
    db: String,
    name: String,
    columns: Vec<String>,
    key: Vec<String>,
}

impl Table {
    fn qualified(&self) -> String {
        format!("{}.{}", quote_ident(&self.db), quote_ident(&self.name))
    }
    fn key_list(&self) -> String {
        self.key
            .iter()
            .map(|k| quote_ident(k))
            .collect::<Vec<_>>()
            .join(",")
    }
    /// SQL for a row's 64-bit hash over every column's bytes and NULL-ness.
    fn row_hash(&self) -> String {
        let parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("IFNULL(HEX(CAST({} AS BINARY)),'N')", quote_ident(c)))
            .collect();
        format!(
            "CAST(CONV(LEFT(MD5(CONCAT_WS(',',{})),16),16,10) AS UNSIGNED)",
            parts.join(",")
        )
    }
    /// `WHERE` for the key range `(lo, hi]` (open ends when `None`) and its parameters.
    fn range(&self, lo: &Option<Vec<M>>, hi: &Option<Vec<M>>) -> (String, Vec<M>) {
        let tuple = format!("({})", self.key_list());
        let ph = format!("({})", vec!["?"; self.key.len()].join(","));
        let mut conds = vec!["1=1".to_string()];
        let mut params = Vec::new();
        if let Some(l) = lo {
            conds.push(format!("{tuple} > {ph}"));
            params.extend(l.iter().cloned());
        }
        if let Some(h) = hi {
            conds.push(format!("{tuple} <= {ph}"));
            params.extend(h.iter().cloned());
        }
        (conds.join(" AND "), params)
    }
}

/// Names the server a failed query ran on (the queries below run on either).
fn on(side: &'static str) -> impl Fn(SinkError) -> SinkError {
    move |e| match e {
        SinkError::Db {
            what,
            code,
            retryable,
            source,
            ..
        } => SinkError::Db {
            side,
            what,
            code,
            retryable,
            source,
        },
        e => e,
    }
}

async fn list_tables(up: &mut Conn, patterns: &[String]) -> Result<Vec<(String, String)>> {
    let rows: Vec<(String, String)> = up
        .query("SELECT table_schema, table_name FROM information_schema.tables WHERE table_type IN ('BASE TABLE', 'SYSTEM VERSIONED') ORDER BY table_schema, table_name")
        .await
        .map_err(|e| SinkError::db_on("upstream", "list tables", e))?;
    Ok(rows
        .into_iter()
        .filter(|(db, _)| !SYSTEM_SCHEMAS.contains(&db.as_str()))
        .filter(|(db, t)| {
            patterns.is_empty() || patterns.iter().any(|p| glob(p, &format!("{db}.{t}")))
        })
        .collect())
}

async fn describe(
    c: &mut Conn,
    db: &str,
    name: &str,
) -> Result<Option<(Vec<String>, Vec<String>)>> {
    let cols: Vec<String> = c
        .exec("SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position", (db, name))
        .await
        .map_err(|e| SinkError::db("read columns", e))?;
    if cols.is_empty() {
        return Ok(None);
    }
    // Primary key, else the first unique key whose columns are all NOT NULL.
    let idx: Vec<(String, String, u64, String)> = c
        .exec(
            "SELECT s.index_name, s.column_name, s.seq_in_index, c.is_nullable FROM information_schema.statistics s \
             JOIN information_schema.columns c ON c.table_schema = s.table_schema AND c.table_name = s.table_name AND c.column_name = s.column_name \
             WHERE s.table_schema = ? AND s.table_name = ? AND s.non_unique = 0 ORDER BY s.index_name = 'PRIMARY' DESC, s.index_name, s.seq_in_index",
            (db, name),
        )
        .await
        .map_err(|e| SinkError::db("read keys", e))?;
    let mut by_index: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (i, col, _, nullable) in idx {
        match by_index.last_mut() {
            Some((n, v)) if *n == i => v.push((col, nullable)),
            _ => by_index.push((i, vec![(col, nullable)])),
        }
    }
    let key = by_index
        .into_iter()
        .find(|(_, cols)| cols.iter().all(|(_, n)| n == "NO"))
        .map(|(_, cols)| cols.into_iter().map(|(c, _)| c).collect())
        .unwrap_or_default();
    Ok(Some((cols, key)))
}

async fn chunk_sum(
    c: &mut Conn,
    t: &Table,
    lo: &Option<Vec<M>>,
    hi: &Option<Vec<M>>,
) -> Result<(u64, u64)> {
    let (cond, params) = t.range(lo, hi);
    let sql = format!(
        "SELECT COUNT(*), IFNULL(BIT_XOR({}), 0) FROM {} WHERE {cond}",
        t.row_hash(),
        t.qualified()
    );
    let r: Option<(u64, u64)> = c
        .exec_first(sql, params)
        .await
        .map_err(|e| SinkError::db(format!("checksum {}", t.qualified()), e))?;
    Ok(r.unwrap_or((0, 0)))
}

/// The key `offset` rows after `lo` (upstream order), if the range has that many.
async fn key_at(
    c: &mut Conn,
    t: &Table,
    lo: &Option<Vec<M>>,
    hi: &Option<Vec<M>>,
    offset: usize,
) -> Result<Option<Vec<M>>> {
    let (cond, params) = t.range(lo, hi);
    let sql = format!(
        "SELECT {} FROM {} WHERE {cond} ORDER BY {} LIMIT 1 OFFSET {offset}",
        t.key_list(),
        t.qualified(),
        t.key_list()
    );
    let r: Option<Row> = c
        .exec_first(sql, params)
        .await
        .map_err(|e| SinkError::db(format!("chunk boundary {}", t.qualified()), e))?;
    Ok(r.map(Row::unwrap))
}

async fn rows_in(
    c: &mut Conn,
    t: &Table,
    lo: &Option<Vec<M>>,
    hi: &Option<Vec<M>>,
) -> Result<BTreeMap<Vec<String>, Vec<u64>>> {
    let (cond, params) = t.range(lo, hi);
    let sql = format!(
        "SELECT {}, {} FROM {} WHERE {cond}",
        t.row_hash(),
        t.key_list(),
        t.qualified()
    );
    let rows: Vec<Row> = c
        .exec(sql, params)
        .await
        .map_err(|e| SinkError::db(format!("read rows {}", t.qualified()), e))?;
    let mut out: BTreeMap<Vec<String>, Vec<u64>> = BTreeMap::new();
    for r in rows {
        let mut vals = r.unwrap();
        if vals.is_empty() {
            continue;
        }
        let h = match vals.remove(0) {
            M::UInt(u) => u,
            M::Int(i) => i as u64,
            M::Bytes(b) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
            _ => 0,
        };
        out.entry(vals.iter().map(text).collect())
            .or_default()
            .push(h);
    }
    Ok(out)
}

async fn compare_range(
    up: &mut Conn,
    down: &mut Conn,
    t: &Table,
    lo: Option<Vec<M>>,
    hi: Option<Vec<M>>,
    rep: &mut TableReport,
) -> Result<()> {
    // Iterative bisection over a stack of ranges.
    let mut stack = vec![(lo, hi, None::<(u64, u64)>)];
    while let Some((lo, hi, known_up)) = stack.pop() {
        let u = match known_up {
            Some(s) => s,
            None => chunk_sum(up, t, &lo, &hi).await.map_err(on("upstream"))?,
        };
        let d = chunk_sum(down, t, &lo, &hi)
            .await
            .map_err(on("downstream"))?;
        if u == d {
            continue;
        }
        let n = u.0 as usize;
        if n > ROW_COMPARE_MAX && !t.keyless {
            if let Some(mid) = key_at(up, t, &lo, &hi, n / 2 - 1)
                .await
                .map_err(on("upstream"))?
            {
                stack.push((Some(mid.clone()), hi.clone(), None));
                stack.push((lo, Some(mid), None));
                continue;
            }
        }
        let (ur, dr) = (
            rows_in(up, t, &lo, &hi).await.map_err(on("upstream"))?,
            rows_in(down, t, &lo, &hi).await.map_err(on("downstream"))?,
        );
        // Per key, a multiset of row hashes (keyless tables can hold duplicates).
        let mut diffs = Vec::new();
        let empty = Vec::new();
        let keys: std::collections::BTreeSet<&Vec<String>> = ur.keys().chain(dr.keys()).collect();
        for k in keys {
            let (mut a, mut b) = (
                ur.get(k).unwrap_or(&empty).clone(),
                dr.get(k).unwrap_or(&empty).clone(),
            );
            a.sort_unstable();
            b.sort_unstable();
            if a == b {
                continue;
            }
            let kind = if a.len() > b.len() {
                DiffKind::Missing
            } else if a.len() < b.len() {
                DiffKind::Extra
            } else {
                DiffKind::Differs
            };
            diffs.push(RowDiff {
                key: k.clone(),
                kind,
            });
        }
        rep.diff_count += diffs.len();
        for d in diffs {
            if rep.diffs.len() < MAX_LISTED_DIFFS {
                rep.diffs.push(d);
            }
        }
    }
    Ok(())
}

async fn check_table(
    up: &mut Conn,
    down: &mut Conn,
    db: &str,
    name: &str,
    chunk: usize,
) -> Result<TableReport> {
    let mut rep = TableReport {
        table: format!("{db}.{name}"),
        ..Default::default()
    };
    let Some((cols, key)) = describe(up, db, name).await.map_err(on("upstream"))? else {
        rep.schema_difference = Some("table vanished upstream".into());
        return Ok(rep);
    };
    match describe(down, db, name).await.map_err(on("downstream"))? {
        None => {
            rep.schema_difference = Some("missing downstream".into());
            return Ok(rep);
        }
        Some((dcols, _)) if dcols != cols => {
            rep.schema_difference = Some(format!(
                "columns differ: upstream {cols:?}, downstream {dcols:?}"
            ));
            return Ok(rep);
        }
        Some(_) => {}
    }
    let keyless = key.is_empty();
    let key = if keyless { cols.clone() } else { key };
    rep.key_columns = key.clone();
    let t = Table {
        keyless,
        db: db.into(),
        name: name.into(),
        columns: cols,
        key,
    };
    rep.upstream_rows = chunk_sum(up, &t, &None, &None)
        .await
        .map_err(on("upstream"))?
        .0;
    rep.downstream_rows = chunk_sum(down, &t, &None, &None)
        .await
        .map_err(on("downstream"))?
        .0;
    let mut lo: Option<Vec<M>> = None;
    loop {
        let hi = if t.keyless {
            None
        } else {
            key_at(up, &t, &lo, &None, chunk.max(1) - 1)
                .await
                .map_err(on("upstream"))?
        };
        rep.chunks += 1;
        compare_range(up, down, &t, lo.clone(), hi.clone(), &mut rep).await?;
        match hi {
            Some(h) => lo = Some(h),
            None => break,
        }
    }
    rep.diffs.sort();
    Ok(rep)
}

/// Compares the selected tables; `Err` only when the comparison itself failed.
pub async fn run(args: &CheckArgs) -> Result<CheckReport> {
    let (up_server, down_server) = (
        Server::open(&args.upstream, "upstream", "--upstream")?,
        Server::open(&args.downstream, "downstream", "--downstream")?,
    );
    let mut up = up_server.conn().await?;
    let mut down = down_server.conn().await?;
    let mut report = CheckReport::default();
    for (db, name) in list_tables(&mut up, &args.tables).await? {
        report
            .tables
            .push(check_table(&mut up, &mut down, &db, &name, args.chunk_size).await?);
    }
    drop((up, down));
    let _ = up_server.pool.disconnect().await;
    let _ = down_server.pool.disconnect().await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn globs() {
        assert!(super::glob("db.*", "db.t"));
        assert!(super::glob("*.t", "x.t"));
        assert!(!super::glob("db.*", "dbx.t"));
        assert!(super::glob("d?b", "d?b"));
    }
}
