//! Snapshot reads: one chunk of a table's existing rows, read in one consistent snapshot whose
//! binlog position the upstream names, for a changefeed's initial or requested copy.
//!
//! A chunk is `START TRANSACTION WITH CONSISTENT SNAPSHOT`, MariaDB's `binlog_snapshot_file` and
//! `binlog_snapshot_position` (the binlog position the snapshot is consistent with: every
//! transaction committed before it is in the snapshot, none after it), one `SELECT` of at most
//! `limit` rows after the previous chunk's last key in key order, and `COMMIT`. No lock is taken
//! (no `FLUSH TABLES WITH READ LOCK`, no `RELOAD` privilege), the binlog never pauses, and each
//! transaction lasts one chunk.
//!
//! Invariants:
//! - values are the ones the binlog decoder produces for the column (timestamps as UTC
//!   microseconds, ENUM/SET/BIT by their numbers, JSON as text, temporal types by parts), so a
//!   chunk's row and a captured row of the same content are equal, and so are their keys
//!   ([`crate::keys::row_key`] with the key columns' collation ids);
//! - the cursor is the last row's key values as the upstream returned them; the next chunk
//!   starts strictly after it in the upstream's key order (`ORDER BY` the key columns), so the
//!   chunks of a table cover it once, whatever its key types and collations;
//! - a table without a key is read whole in one snapshot (`limit` is ignored): there is no
//!   order to resume in.
//! - an upstream that does not name the snapshot's position (MySQL) gets window reads
//!   ([`SnapshotRead::Window`], DBLog's watermarks): the read sees every transaction capture
//!   could have seen when it was asked (a low-watermark write commits first; commits are in
//!   binlog order), and its position, the binlog's end read after it, is at or after every
//!   transaction it saw; the feed settles the keys changed in between
//!   (`sluice_control::feed`, `chunk.rs`). With `snapshot-read = "position"` such an upstream
//!   is refused with the reason.

use crate::error::{CaptureError, Result};
use crate::keys::row_key;
use crate::pos::BinlogPos;
use mysql_async::prelude::Queryable;
use mysql_async::Value as M;
use serde::{Deserialize, Serialize};
use sluice_types::{ColumnDef, ColumnType, Key, TableSchema, Ts, Value};

mod bounds;
pub use bounds::chunk_bounds;

/// One chunk as read.
#[derive(Clone, Debug)]
pub struct SnapshotChunk {
    /// The commit ts of everything the snapshot holds (its binlog position); for a window read,
    /// a position at or after everything it holds.
    pub position: Ts,
    /// A window read ([`SnapshotRead::Window`]): the upstream at some point after what capture
    /// had when the read was asked, at or before `position`.
    pub window: bool,
    /// A window read whose low-watermark write failed (a read-only upstream user): why. The
    /// read then relies on the upstream having committed what capture saw before it began.
    pub watermark_failed: Option<String>,
    /// Each row's values (in the schema's column order) and its key.
    pub rows: Vec<(Vec<Value>, Key)>,
    /// Where the next chunk starts (`None` when no row was read).
    pub cursor: Option<Vec<u8>>,
    /// Rows follow the cursor.
    pub more: bool,
}

/// A key value as the cursor keeps it (the upstream's own value, sent back as a parameter).
#[derive(Clone, Debug, Serialize, Deserialize)]
enum CursorValue {
    Null,
    Int(i64),
    UInt(u64),
    Bytes(Vec<u8>),
    Float(f32),
    Double(f64),
    Date(u16, u8, u8, u8, u8, u8, u32),
    Time(bool, u32, u8, u8, u8, u32),
}

impl CursorValue {
    fn of(v: &M) -> CursorValue {
        match v {
            M::NULL => CursorValue::Null,
            M::Int(i) => CursorValue::Int(*i),
            M::UInt(u) => CursorValue::UInt(*u),
            M::Bytes(b) => CursorValue::Bytes(b.clone()),
            M::Float(f) => CursorValue::Float(*f),
            M::Double(d) => CursorValue::Double(*d),
            M::Date(y, mo, d, h, mi, s, us) => CursorValue::Date(*y, *mo, *d, *h, *mi, *s, *us),
            M::Time(n, d, h, mi, s, us) => CursorValue::Time(*n, *d, *h, *mi, *s, *us),
        }
    }
    fn param(&self) -> M {
        match self.clone() {
            CursorValue::Null => M::NULL,
            CursorValue::Int(i) => M::Int(i),
            CursorValue::UInt(u) => M::UInt(u),
            CursorValue::Bytes(b) => M::Bytes(b),
            CursorValue::Float(f) => M::Float(f),
            CursorValue::Double(d) => M::Double(d),
            CursorValue::Date(y, mo, d, h, mi, s, us) => M::Date(y, mo, d, h, mi, s, us),
            CursorValue::Time(n, d, h, mi, s, us) => M::Time(n, d, h, mi, s, us),
        }
    }
}

fn quote(id: &str) -> String {
    format!("`{}`", id.replace('`', "``"))
}

/// The expression a column is selected by, so its value reads as the decoder's.
fn select_expr(c: &ColumnDef) -> String {
    let q = quote(&c.name);
    match c.ty {
        ColumnType::Timestamp => format!("UNIX_TIMESTAMP({q})"),
        ColumnType::Enum | ColumnType::Set | ColumnType::Bit => format!("({q} + 0)"),
        _ => q,
    }
}

/// The comparison of a key column with a cursor parameter.
fn key_operand(c: &ColumnDef) -> String {
    let q = quote(&c.name);
    match c.ty {
        // ENUM and SET sort by their numbers; compared with a number they compare so too.
        ColumnType::Enum | ColumnType::Set => format!("({q} + 0)"),
        _ => q,
    }
}

fn param_expr(c: &ColumnDef) -> &'static str {
    match c.ty {
        // Exact: a decimal compared with a string parameter would compare as a double.
        ColumnType::Decimal => "CAST(? AS DECIMAL(65,30))",
        _ => "?",
    }
}

/// `k1 > ? OR (k1 = ? AND k2 > ?) OR …`, with its parameters: the keys after the cursor.
fn after_clause(keys: &[&ColumnDef], after: &[CursorValue]) -> (String, Vec<M>) {
    lex_clause(keys, after, ">", false)
}

/// `k1 < ? OR (k1 = ? AND k2 < ?) OR … OR (k1 = ? AND … AND kn = ?)`, with its parameters:
/// the keys up to a bound, the bound included.
fn upto_clause(keys: &[&ColumnDef], upto: &[CursorValue]) -> (String, Vec<M>) {
    lex_clause(keys, upto, "<", true)
}

/// The keys on the `op` side of `vals` in the key columns' order (lexicographic over the
/// columns), `vals` itself too when `inclusive`.
fn lex_clause(
    keys: &[&ColumnDef],
    vals: &[CursorValue],
    op: &str,
    inclusive: bool,
) -> (String, Vec<M>) {
    let mut ors = Vec::new();
    let mut params = Vec::new();
    let eq = |k: &ColumnDef| format!("{} = {}", key_operand(k), param_expr(k));
    for i in 0..keys.len() {
        let mut ands = Vec::new();
        for (j, k) in keys.iter().enumerate().take(i) {
            ands.push(eq(k));
            params.push(vals[j].param());
        }
        ands.push(format!(
            "{} {op} {}",
            key_operand(keys[i]),
            param_expr(keys[i])
        ));
        params.push(vals[i].param());
        ors.push(format!("({})", ands.join(" AND ")));
    }
    if inclusive {
        ors.push(format!(
            "({})",
            keys.iter().map(|k| eq(k)).collect::<Vec<_>>().join(" AND ")
        ));
        params.extend(vals.iter().map(CursorValue::param));
    }
    (ors.join(" OR "), params)
}

/// The collation id of each key column (key weights use ids; the schema has names).
async fn key_spec(conn: &mut mysql_async::Conn, table: &TableSchema) -> Result<Vec<(usize, u16)>> {
    let mut spec = Vec::new();
    for i in &table.key_columns {
        let id: u16 = match &table.columns[*i].collation {
            Some(name) => conn
                .exec_first(
                    "SELECT ID FROM information_schema.COLLATIONS WHERE COLLATION_NAME = ?",
                    (name.clone(),),
                )
                .await
                .map_err(CaptureError::from_mysql)?
                .unwrap_or(0),
            None => 0,
        };
        spec.push((*i, id));
    }
    Ok(spec)
}

/// Begins the consistent snapshot ([`BEGIN_SNAPSHOT`]) and asks for its binlog position in the
/// same round trip; `None` where the upstream names none (MySQL: a window read is needed).
async fn begin_at_named_position(conn: &mut mysql_async::Conn) -> Result<Option<Ts>> {
    let e = CaptureError::from_mysql;
    let mut results = conn
        .query_iter(format!(
            "{BEGIN_SNAPSHOT}; SHOW STATUS LIKE 'binlog_snapshot_%'"
        ))
        .await
        .map_err(e)?;
    // The statements before it answer with no rows; the status is the last result set.
    let mut rows: Vec<(String, String)> = Vec::new();
    while !results.is_empty() {
        let set: Vec<(String, String)> = results.collect().await.map_err(e)?;
        if !set.is_empty() {
            rows = set;
        }
    }
    drop(results);
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|r| r.1.clone())
    };
    let (Some(file), Some(pos)) = (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
    else {
        return Ok(None);
    };
    let pos: u64 = pos
        .parse()
        .map_err(|_| CaptureError::Sql(format!("binlog_snapshot_position {pos:?}")))?;
    BinlogPos::new(file.clone(), pos)
        .ts()
        .map(Some)
        .ok_or_else(|| CaptureError::Sql(format!("binlog_snapshot_file {file:?} has no index")))
}

fn no_named_position() -> CaptureError {
    CaptureError::Sql(
        "the upstream does not report binlog_snapshot_file / binlog_snapshot_position (MySQL), \
         and the server's snapshot-read = \"position\" allows nothing else: set snapshot-read \
         to \"auto\" or \"window\" (window reads, DBLog's watermarks)"
            .into(),
    )
}

/// What stands in the way of a snapshot of these tables (`db`, `table`): an upstream that does not
/// name a snapshot's position, or tables the user may not `SELECT` (one line each, at most 20).
/// Empty: the snapshot can run.
pub async fn check_readable(
    conn: &mut mysql_async::Conn,
    tables: &[(String, String)],
    how: SnapshotRead,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let pos = begin_at_named_position(conn).await;
    let _ = conn.query_drop("COMMIT").await;
    match (pos, how) {
        (Err(e), _) => problems.push(e.to_string()),
        (Ok(None), SnapshotRead::Position) => problems.push(no_named_position().to_string()),
        (Ok(Some(_)), SnapshotRead::Position | SnapshotRead::Auto) => {}
        // Window reads: the binlog's end must be readable.
        (Ok(_), _) => {
            if let Err(e) = crate::binlog::master_position(conn).await {
                problems.push(format!(
                    "a window snapshot read takes the binlog's end as its position, and it cannot \
                     be read: {e} (grant REPLICATION CLIENT, or BINLOG MONITOR on MariaDB)"
                ));
            }
        }
    }
    for (db, t) in tables {
        let q = format!("SELECT * FROM {}.{} LIMIT 0", quote(db), quote(t));
        if let Err(e) = conn.query_drop(q).await {
            problems.push(format!("{db}.{t}: {}", CaptureError::from_mysql(e)));
            if problems.len() >= 20 {
                break;
            }
        }
    }
    Ok(problems)
}

/// How a chunk read finds the binlog position its rows stand at (the server's `snapshot-read`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotRead {
    /// The named position where the upstream reports it (MariaDB), a window read elsewhere.
    #[default]
    Auto,
    /// Only at the position the upstream names for its consistent snapshot (refused where it
    /// names none).
    Position,
    /// A window read (DBLog's watermarks): a low-watermark write, the consistent read, then the
    /// binlog's end as the chunk's position; the feed drops the chunk's rows of keys the stream
    /// changed between the read's ask and that position.
    Window,
}

impl SnapshotRead {
    pub fn parse(s: &str) -> std::result::Result<SnapshotRead, String> {
        match s {
            "auto" => Ok(SnapshotRead::Auto),
            "position" => Ok(SnapshotRead::Position),
            "window" => Ok(SnapshotRead::Window),
            other => Err(format!(
                "snapshot-read {other:?}: use \"auto\" (the default), \"position\" or \"window\""
            )),
        }
    }
}

/// The key columns of a table, in key order.
fn key_columns(table: &TableSchema) -> Vec<&ColumnDef> {
    table
        .key_columns
        .iter()
        .map(|i| &table.columns[*i])
        .collect()
}

/// ` WHERE` the keys after `after` and up to `upto` (each only when given), with its
/// parameters; empty when neither is.
fn range_where(
    keys: &[&ColumnDef],
    after: Option<&[CursorValue]>,
    upto: Option<&[CursorValue]>,
) -> (String, Vec<M>) {
    let mut conds = Vec::new();
    let mut params = Vec::new();
    if let Some(a) = after.filter(|a| a.len() == keys.len()) {
        let (w, p) = after_clause(keys, a);
        conds.push(format!("({w})"));
        params.extend(p);
    }
    if let Some(u) = upto.filter(|u| u.len() == keys.len()) {
        let (w, p) = upto_clause(keys, u);
        conds.push(format!("({w})"));
        params.extend(p);
    }
    match conds.is_empty() {
        true => (String::new(), params),
        false => (format!(" WHERE {}", conds.join(" AND ")), params),
    }
}

/// The `SELECT` of one chunk (the rows after `after` and up to `upto`) and its parameters.
fn chunk_query(
    table: &TableSchema,
    (after, upto): (Option<&[CursorValue]>, Option<&[CursorValue]>),
    limit: usize,
) -> (String, Vec<M>) {
    let keys = key_columns(table);
    let mut exprs: Vec<String> = table.columns.iter().map(select_expr).collect();
    exprs.extend(keys.iter().map(|k| quote(&k.name)));
    let mut q = format!(
        "SELECT {} FROM {}.{}",
        exprs.join(", "),
        quote(&table.database),
        quote(&table.name)
    );
    let mut params = Vec::new();
    if !keys.is_empty() {
        let (w, p) = range_where(&keys, after, upto);
        q.push_str(&w);
        params = p;
        let order: Vec<String> = keys.iter().map(|k| quote(&k.name)).collect();
        q.push_str(&format!(
            " ORDER BY {} LIMIT {}",
            order.join(", "),
            limit + 1
        ));
    }
    (q, params)
}

/// A cursor as the shell keeps it, read back (`None`: none given).
fn parse_cursor(c: Option<&[u8]>) -> Result<Option<Vec<CursorValue>>> {
    c.map(|b| {
        serde_json::from_slice(b).map_err(|x| {
            CaptureError::Sql(format!(
                "unreadable snapshot cursor ({x}): copy the table again"
            ))
        })
    })
    .transpose()
}

/// The session's settings and the consistent snapshot (one round trip).
const BEGIN_SNAPSHOT: &str = "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; \
     SET time_zone = '+00:00', NAMES utf8mb4; \
     START TRANSACTION WITH CONSISTENT SNAPSHOT";

/// The rows of one consistent read, taken into `acc`, and the position the upstream names for
/// it (`None`: it names none, MySQL).
async fn read_at_named_position(
    conn: &mut mysql_async::Conn,
    q: &str,
    params: Vec<M>,
    acc: &mut ChunkRows<'_>,
) -> Result<Option<Ts>> {
    let read = async {
        let Some(position) = begin_at_named_position(conn).await? else {
            return Ok(None);
        };
        select_rows(conn, q, params, acc).await?;
        Ok::<_, CaptureError>(Some(position))
    }
    .await;
    let _ = conn.query_drop("COMMIT").await;
    read
}

/// One window read, its rows taken into `acc`: the node's heartbeat row written first (the low
/// watermark: it commits after every transaction capture can have seen, so the read sees them
/// all), the consistent read, then the binlog's end (at or after every transaction the read
/// saw).
async fn read_in_window(
    conn: &mut mysql_async::Conn,
    q: &str,
    params: Vec<M>,
    node: &str,
    acc: &mut ChunkRows<'_>,
) -> Result<(Ts, Option<String>)> {
    let e = CaptureError::from_mysql;
    let watermark = crate::heartbeat::touch(conn, node)
        .await
        .err()
        .map(|w| w.to_string());
    conn.query_drop(BEGIN_SNAPSHOT).await.map_err(e)?;
    let read = select_rows(conn, q, params, acc).await;
    let _ = conn.query_drop("COMMIT").await;
    read?;
    let end = crate::binlog::master_position(conn).await?;
    let position = end
        .ts()
        .ok_or_else(|| CaptureError::Sql(format!("binlog file {:?} has no index", end.file)))?;
    Ok((position, watermark))
}

/// Runs the chunk's `SELECT`, each row converted as it arrives (a chunk is never held twice,
/// as the client's rows and as values).
async fn select_rows(
    conn: &mut mysql_async::Conn,
    q: &str,
    params: Vec<M>,
    acc: &mut ChunkRows<'_>,
) -> Result<()> {
    let e = CaptureError::from_mysql;
    let mut result = conn.exec_iter(q, params).await.map_err(e)?;
    while let Some(row) = result.next().await.map_err(e)? {
        if !acc.take(row) {
            return result.drop_result().await.map_err(e);
        }
    }
    Ok(())
}

pub async fn read_chunk(
    conn: &mut mysql_async::Conn,
    table: &TableSchema,
    (after, upto): (Option<&[u8]>, Option<&[u8]>),
    limit: usize,
    how: SnapshotRead,
    node: &str,
) -> Result<SnapshotChunk> {
    let spec = key_spec(conn, table).await?;
    let after = parse_cursor(after)?;
    let upto = parse_cursor(upto)?;
    let (q, params) = chunk_query(table, (after.as_deref(), upto.as_deref()), limit);
    let mut acc = ChunkRows::new(table, &spec, limit);
    let named = match how {
        SnapshotRead::Window => None,
        _ => read_at_named_position(conn, &q, params.clone(), &mut acc).await?,
    };
    let (position, window) = match (named, how) {
        (Some(p), _) => (p, None),
        (None, SnapshotRead::Position) => return Err(no_named_position()),
        (None, _) => {
            let (p, watermark) = read_in_window(conn, &q, params, node, &mut acc).await?;
            (p, Some(watermark))
        }
    };
    let mut chunk = acc.finish(position)?;
    chunk.window = window.is_some();
    chunk.watermark_failed = window.flatten();
    Ok(chunk)
}

/// A chunk's rows as they arrive: values in the decoder's form, keys, and the last row's raw
/// key values (the cursor). A keyed read asks for one row more than `limit`: that row only says
/// more follow.
struct ChunkRows<'a> {
    table: &'a TableSchema,
    spec: &'a [(usize, u16)],
    limit: usize,
    rows: Vec<(Vec<Value>, Key)>,
    /// The last row taken (its raw key columns, after the values, make the cursor).
    last: Option<mysql_async::Row>,
    more: bool,
    /// The first value that could not be converted: the read stops there.
    failed: Option<String>,
}

impl<'a> ChunkRows<'a> {
    fn new(table: &'a TableSchema, spec: &'a [(usize, u16)], limit: usize) -> Self {
        ChunkRows {
            table,
            spec,
            limit,
            rows: Vec::new(),
            last: None,
            more: false,
            failed: None,
        }
    }

    fn keyed(&self) -> bool {
        !self.table.key_columns.is_empty()
    }

    /// Takes one row; `false` once the rest of the result is not needed.
    fn take(&mut self, mut r: mysql_async::Row) -> bool {
        if self.keyed() && self.rows.len() >= self.limit {
            self.more = true;
            return false;
        }
        if self.rows.is_empty() {
            self.rows.reserve(self.limit.min(1 << 16));
        }
        let mut vals = Vec::with_capacity(self.table.columns.len());
        for (i, c) in self.table.columns.iter().enumerate() {
            match sql_value_owned(c, r.take(i)) {
                Ok(v) => vals.push(v),
                Err(m) => {
                    self.failed = Some(format!(
                        "snapshot of {}.{}: column {}: {m}",
                        self.table.database, self.table.name, c.name
                    ));
                    return false;
                }
            }
        }
        let key = row_key(self.table.table_id, &vals, self.spec);
        self.rows.push((vals, key));
        self.last = Some(r);
        true
    }

    /// The chunk read at `position`, or the conversion that failed.
    fn finish(self, position: Ts) -> Result<SnapshotChunk> {
        if let Some(message) = self.failed {
            return Err(CaptureError::Decode {
                file: String::new(),
                pos: position,
                message,
            });
        }
        let n = self.table.columns.len();
        let keys = self.table.key_columns.len();
        let cursor = self.last.filter(|_| keys > 0).map(|r| {
            let raw: Vec<CursorValue> = (n..n + keys)
                .map(|j| r.as_ref(j).map_or(CursorValue::Null, CursorValue::of))
                .collect();
            serde_json::to_vec(&raw).unwrap_or_default()
        });
        Ok(SnapshotChunk {
            position,
            window: false,
            watermark_failed: None,
            rows: self.rows,
            cursor,
            more: self.more,
        })
    }
}

pub fn exact_key_order(table: &TableSchema) -> bool {
    !table.key_columns.is_empty()
        && table.key_columns.iter().all(|i| {
            matches!(
                table.columns[*i].ty,
                ColumnType::TinyInt
                    | ColumnType::SmallInt
                    | ColumnType::MediumInt
                    | ColumnType::Int
                    | ColumnType::BigInt
            )
        })
}

/// A cursor whose read starts at row key `start` (the rows with key `>= start`), for a table of
/// [`exact_key_order`]; `None` when the key is not a whole row key of integers or is the
/// smallest there is (read from the table's start then).
pub fn cursor_at(table: &TableSchema, start: &sluice_types::Key) -> Option<Vec<u8>> {
    if !exact_key_order(table) {
        return None;
    }
    let mut rest = start.0.get(9..)?;
    let mut vals = Vec::with_capacity(table.key_columns.len());
    for i in &table.key_columns {
        let (tag, tail) = rest.split_first()?;
        let bytes: [u8; 8] = tail.get(..8)?.try_into().ok()?;
        if *tag != 0x03 {
            return None;
        }
        let raw = u64::from_be_bytes(bytes);
        vals.push(match table.columns[*i].unsigned {
            true => CursorValue::UInt(raw),
            false => CursorValue::Int((raw ^ (1 << 63)) as i64),
        });
        rest = &tail[8..];
    }
    if !rest.is_empty() {
        return None;
    }
    // `>= (.., y)` is `> (.., y - 1)` for integers.
    match vals.last_mut()? {
        CursorValue::UInt(u) => *u = u.checked_sub(1)?,
        CursorValue::Int(i) => *i = i.checked_sub(1)?,
        _ => return None,
    }
    serde_json::to_vec(&vals).ok()
}

/// Where the next read of `span` starts: after `after` (a cursor of an earlier chunk) or, for a
/// table of [`exact_key_order`], at the span's first key when that is later (a span split off
/// behind a copy's cursor, or a new span inherited a cursor below its start: the rows between
/// are not the span's and need no reading); from the table's start when neither is known.
pub fn read_from(
    table: &TableSchema,
    span: &sluice_types::Span,
    after: Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let at_start = (span.start > sluice_types::Key::table_start(span.table))
        .then(|| cursor_at(table, &span.start))
        .flatten();
    let (Some(c), Some(s)) = (&after, &at_start) else {
        return after.or(at_start);
    };
    match (int_cursor(c), int_cursor(s)) {
        (Some(c), Some(s)) if c < s => at_start,
        _ => after,
    }
}

/// An integer key's cursor as numbers, for comparing cursors of [`exact_key_order`] tables.
fn int_cursor(c: &[u8]) -> Option<Vec<i128>> {
    let vals: Vec<CursorValue> = serde_json::from_slice(c).ok()?;
    vals.iter()
        .map(|v| match v {
            CursorValue::Int(i) => Some(i128::from(*i)),
            CursorValue::UInt(u) => Some(i128::from(*u)),
            _ => None,
        })
        .collect()
}

/// A read of a span of a table of [`exact_key_order`] is over once it saw a row at or past the
/// span's end (the rows after it in key order are past it too).
pub fn past_span(table: &TableSchema, span: &sluice_types::Span, key: &sluice_types::Key) -> bool {
    exact_key_order(table) && *key >= span.end
}

/// [`sql_value`] of a value taken out of its row: the bytes of a character or binary column
/// become the value without a copy.
fn sql_value_owned(c: &ColumnDef, v: Option<M>) -> std::result::Result<Value, String> {
    // JSON and geometry are text too, but the decoder's form of them is not the bytes as read.
    let textual = value_kind(c.ty) == ValueKind::Textual
        && !matches!(c.ty, ColumnType::Json | ColumnType::Geometry);
    match v {
        Some(M::Bytes(b)) if textual => Ok(match c.ty {
            ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => Value::Bytes(b),
            // CHAR, VARCHAR, TEXT: read as utf8mb4 (`SET NAMES`); bytes that are not stay bytes.
            _ => match String::from_utf8(b) {
                Ok(s) => Value::Text(s),
                Err(e) => Value::Bytes(e.into_bytes()),
            },
        }),
        other => sql_value(c, other.as_ref()),
    }
}

/// The decoder's value of a column from the upstream's (see `select_expr`).
pub fn sql_value(c: &ColumnDef, v: Option<&M>) -> std::result::Result<Value, String> {
    let v = v.ok_or("missing")?;
    if *v == M::NULL {
        return Ok(Value::Null);
    }
    match value_kind(c.ty) {
        ValueKind::Numeric => numeric(c, v),
        ValueKind::Temporal => temporal(c, v),
        ValueKind::Members => members(c, v),
        ValueKind::Textual => textual(c, v),
    }
}

/// How a column's value is read back from the upstream's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Numeric,
    Temporal,
    Members,
    Textual,
}

fn value_kind(ty: ColumnType) -> ValueKind {
    match ty {
        ColumnType::TinyInt
        | ColumnType::SmallInt
        | ColumnType::MediumInt
        | ColumnType::Int
        | ColumnType::BigInt
        | ColumnType::Year
        | ColumnType::Float
        | ColumnType::Double
        | ColumnType::Decimal => ValueKind::Numeric,
        ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time => {
            ValueKind::Temporal
        }
        ColumnType::Enum | ColumnType::Set | ColumnType::Bit => ValueKind::Members,
        _ => ValueKind::Textual,
    }
}

fn text(v: &M) -> std::result::Result<String, String> {
    match v {
        M::Bytes(b) => String::from_utf8(b.clone()).map_err(|_| "not UTF-8".to_string()),
        M::Int(i) => Ok(i.to_string()),
        M::UInt(u) => Ok(u.to_string()),
        M::Float(f) => Ok(f.to_string()),
        M::Double(d) => Ok(d.to_string()),
        other => Err(format!("unexpected value {other:?}")),
    }
}

fn int(v: &M) -> std::result::Result<u64, String> {
    match v {
        M::UInt(u) => Ok(*u),
        M::Int(i) => Ok(*i as u64),
        other => text(other)?
            .parse()
            .map_err(|_| format!("not a number: {other:?}")),
    }
}

fn numeric(c: &ColumnDef, v: &M) -> std::result::Result<Value, String> {
    let bad = |what: &str| format!("not {what}: {v:?}");
    Ok(match c.ty {
        ColumnType::Year => Value::Year(int(v)? as u16),
        ColumnType::Float => match v {
            M::Float(f) => Value::Float(*f),
            M::Double(d) => Value::Float(*d as f32),
            other => Value::Float(text(other)?.parse().map_err(|_| bad("a float"))?),
        },
        ColumnType::Double => match v {
            M::Double(d) => Value::Double(*d),
            M::Float(f) => Value::Double(*f as f64),
            other => Value::Double(text(other)?.parse().map_err(|_| bad("a double"))?),
        },
        ColumnType::Decimal => Value::Decimal(text(v)?),
        _ => match (v, c.unsigned) {
            (M::Int(i), false) => Value::Int(*i),
            (M::UInt(u), true) => Value::UInt(*u),
            (M::Int(i), true) => Value::UInt(*i as u64),
            (M::UInt(u), false) => Value::Int(*u as i64),
            (other, true) => Value::UInt(text(other)?.parse().map_err(|_| bad("a number"))?),
            (other, false) => Value::Int(text(other)?.parse().map_err(|_| bad("a number"))?),
        },
    })
}

fn textual(c: &ColumnDef, v: &M) -> std::result::Result<Value, String> {
    Ok(match c.ty {
        ColumnType::Json => Value::Json(text(v)?),
        ColumnType::Binary | ColumnType::VarBinary | ColumnType::Blob => match v {
            M::Bytes(b) => Value::Bytes(b.clone()),
            other => Value::Bytes(text(other)?.into_bytes()),
        },
        ColumnType::Geometry => match v {
            M::Bytes(b) => Value::Geometry(b.clone()),
            other => return Err(format!("unexpected geometry {other:?}")),
        },
        // CHAR, VARCHAR, TEXT: read as utf8mb4 (`SET NAMES`); bytes that are not stay bytes.
        _ => match v {
            M::Bytes(b) => match String::from_utf8(b.clone()) {
                Ok(s) => Value::Text(s),
                Err(_) => Value::Bytes(b.clone()),
            },
            other => Value::Text(text(other)?),
        },
    })
}

fn temporal(c: &ColumnDef, v: &M) -> std::result::Result<Value, String> {
    Ok(match (c.ty, v) {
        (ColumnType::Date, M::Date(y, m, d, ..)) => Value::Date {
            year: *y,
            month: *m,
            day: *d,
        },
        (ColumnType::Date, other) => parse_date(&text(other)?)?,
        (ColumnType::DateTime, M::Date(y, mo, d, h, mi, s, us)) => Value::DateTime {
            year: *y,
            month: *mo,
            day: *d,
            hour: *h,
            minute: *mi,
            second: *s,
            micros: *us,
        },
        (ColumnType::DateTime, other) => parse_datetime(&text(other)?)?,
        (ColumnType::Timestamp, other) => Value::Timestamp {
            micros: parse_micros(&text(other)?)?,
        },
        (_, M::Time(neg, days, h, mi, s, us)) => Value::Time {
            negative: *neg,
            hours: days * 24 + *h as u32,
            minutes: *mi,
            seconds: *s,
            micros: *us,
        },
        (_, other) => return Err(format!("unexpected time {other:?}")),
    })
}

/// ENUM and SET by their numbers (`col + 0`), BIT by its bits.
fn members(c: &ColumnDef, v: &M) -> std::result::Result<Value, String> {
    Ok(match c.ty {
        ColumnType::Enum => crate::decode::enum_value(&c.elements, int(v)? as u16),
        ColumnType::Set => crate::decode::set_value(&c.elements, int(v)?),
        _ => Value::Bit {
            bits: int(v)?,
            width: bit_width(c),
        },
    })
}

fn bit_width(c: &ColumnDef) -> u16 {
    let t = c.sql_type.to_ascii_lowercase();
    t.strip_prefix("bit(")
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(if c.length > 0 { c.length as u16 } else { 1 })
}

/// `UNIX_TIMESTAMP()`'s text (`1700000000` or `1700000000.123456`) as microseconds.
fn parse_micros(s: &str) -> std::result::Result<i64, String> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: i64 = secs.parse().map_err(|_| format!("timestamp {s:?}"))?;
    let mut f = frac.to_string();
    f.truncate(6);
    while f.len() < 6 {
        f.push('0');
    }
    let us: i64 = f.parse().map_err(|_| format!("timestamp {s:?}"))?;
    Ok(secs * 1_000_000 + us)
}

fn parse_date(s: &str) -> std::result::Result<Value, String> {
    let p: Vec<&str> = s.split('-').collect();
    let n = |i: usize| {
        p.get(i)
            .and_then(|x| x.parse::<u16>().ok())
            .ok_or(format!("date {s:?}"))
    };
    Ok(Value::Date {
        year: n(0)?,
        month: n(1)? as u8,
        day: n(2)? as u8,
    })
}

fn parse_datetime(s: &str) -> std::result::Result<Value, String> {
    let (d, t) = s.split_once(' ').unwrap_or((s, "00:00:00"));
    let Value::Date { year, month, day } = parse_date(d)? else {
        return Err(format!("datetime {s:?}"));
    };
    let (hms, frac) = t.split_once('.').unwrap_or((t, ""));
    let p: Vec<u8> = hms.split(':').filter_map(|x| x.parse().ok()).collect();
    let micros = if frac.is_empty() {
        0
    } else {
        parse_micros(&format!("0.{frac}"))? as u32
    };
    Ok(Value::DateTime {
        year,
        month,
        day,
        hour: *p.first().unwrap_or(&0),
        minute: *p.get(1).unwrap_or(&0),
        second: *p.get(2).unwrap_or(&0),
        micros,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_utc_micros() {
        assert_eq!(parse_micros("1700000000.123456"), Ok(1_700_000_000_123_456));
        assert_eq!(parse_micros("1700000000.5"), Ok(1_700_000_000_500_000));
        assert_eq!(parse_micros("0"), Ok(0));
        assert!(parse_micros("x").is_err());
    }

    fn col(name: &str, ty: ColumnType, unsigned: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            sql_type: String::new(),
            unsigned,
            nullable: false,
            charset: None,
            collation: None,
            elements: vec![],
            decimals: 0,
            length: 0,
            generated: None,
        }
    }

    fn int_table(unsigned: [bool; 2], keys: Vec<usize>, second: ColumnType) -> TableSchema {
        TableSchema {
            table_id: sluice_types::TableId(7),
            database: "d".into(),
            name: "t".into(),
            columns: vec![
                col("a", ColumnType::BigInt, unsigned[0]),
                col("b", second, unsigned[1]),
            ],
            key_columns: keys,
            unique_keys: vec![],
            version: 0,
            partitioning: None,
        }
    }

    #[test]
    fn a_span_of_integer_keys_starts_at_its_first_key_and_ends_past_its_last() {
        let t = int_table([false, true], vec![0, 1], ColumnType::Int);
        let spec = [(0usize, 0u16), (1, 0)];
        let key = |a: i64, b: u64| row_key(t.table_id, &[Value::Int(a), Value::UInt(b)], &spec);
        let cursor = |k: &Key| cursor_at(&t, k).map(|c| String::from_utf8(c).expect("utf-8"));
        // `>= (-5, 10)` reads as `> (-5, 9)`, in the cursor's own form.
        assert_eq!(
            cursor(&key(-5, 10)).as_deref(),
            Some(r#"[{"Int":-5},{"UInt":9}]"#)
        );
        // The smallest last value has no predecessor: read from the start (correct, slower).
        assert_eq!(cursor(&key(3, 0)), None);
        // Not a whole row key (a table prefix): no cursor.
        assert_eq!(cursor(&Key::table_start(t.table_id)), None);
        let span = sluice_types::Span::new(t.table_id, key(-5, 10), key(8, 1));
        assert!(!past_span(&t, &span, &key(8, 0)));
        assert!(past_span(&t, &span, &key(8, 1)));
        assert!(past_span(&t, &span, &key(9, 0)));
        // A string in the key: its order is not the SQL order; read the table, keep the span.
        let s = int_table([false, false], vec![0, 1], ColumnType::VarChar);
        let skey = row_key(s.table_id, &[Value::Int(1), Value::Text("x".into())], &spec);
        assert_eq!(cursor_at(&s, &skey), None);
        assert!(!past_span(&s, &span, &key(9, 0)));
        assert!(!exact_key_order(&int_table(
            [false, false],
            vec![],
            ColumnType::Int
        )));
    }

    #[test]
    fn a_span_reads_from_the_later_of_its_cursor_and_its_first_key() {
        let t = int_table([false, true], vec![0, 1], ColumnType::Int);
        let spec = [(0usize, 0u16), (1, 0)];
        let key = |a: i64, b: u64| row_key(t.table_id, &[Value::Int(a), Value::UInt(b)], &spec);
        let text = |c: Option<Vec<u8>>| c.map(|c| String::from_utf8(c).expect("utf-8"));
        let cur = |a: i64, b: u64| Some(format!(r#"[{{"Int":{a}}},{{"UInt":{b}}}]"#).into_bytes());
        let span = sluice_types::Span::new(t.table_id, key(10, 5), key(20, 0));
        // A cursor behind the span's start (inherited from the whole table's copy): the span's
        // first key, not the rows before it.
        assert_eq!(
            text(read_from(&t, &span, cur(-3, 7))).as_deref(),
            Some(r#"[{"Int":10},{"UInt":4}]"#)
        );
        assert_eq!(
            text(read_from(&t, &span, cur(10, 3))).as_deref(),
            Some(r#"[{"Int":10},{"UInt":4}]"#)
        );
        // A cursor inside the span: from there.
        assert_eq!(
            text(read_from(&t, &span, cur(12, 0))).as_deref(),
            Some(r#"[{"Int":12},{"UInt":0}]"#)
        );
        // No cursor: the span's first key; a span from the table's start: the table's start.
        assert_eq!(
            text(read_from(&t, &span, None)).as_deref(),
            Some(r#"[{"Int":10},{"UInt":4}]"#)
        );
        let whole = sluice_types::Span::whole_table(t.table_id);
        assert_eq!(read_from(&t, &whole, None), None);
        assert_eq!(text(read_from(&t, &whole, cur(1, 1))), text(cur(1, 1)));
        // A string in the key: its order is not the SQL order, the cursor is kept as it is.
        let s = int_table([false, false], vec![0, 1], ColumnType::VarChar);
        let skey = row_key(s.table_id, &[Value::Int(1), Value::Text("x".into())], &spec);
        let sspan = sluice_types::Span::new(s.table_id, skey.clone(), skey);
        let scur = Some(br#"[{"Int":0},{"Bytes":[97]}]"#.to_vec());
        assert_eq!(read_from(&s, &sspan, scur.clone()), scur);
    }

    #[test]
    fn values_taken_from_a_row_read_as_the_borrowed_ones() {
        let cases = [
            (ColumnType::VarChar, M::Bytes(b"abc".to_vec())),
            (ColumnType::Char, M::Bytes(vec![0xff, 0x00])),
            (ColumnType::Blob, M::Bytes(vec![1, 2, 3])),
            (ColumnType::Json, M::Bytes(b"{}".to_vec())),
            (ColumnType::Decimal, M::Bytes(b"1.50".to_vec())),
            (ColumnType::Int, M::Int(-3)),
            (ColumnType::VarChar, M::NULL),
        ];
        for (ty, v) in cases {
            let c = col("c", ty, false);
            assert_eq!(
                sql_value_owned(&c, Some(v.clone())),
                sql_value(&c, Some(&v)),
                "{ty:?} {v:?}"
            );
        }
        assert!(sql_value_owned(&col("c", ColumnType::Text, false), None).is_err());
    }

    #[test]
    fn composite_keys_resume_strictly_after_the_cursor() {
        let (a, b) = (
            col("a", ColumnType::Int, false),
            col("b", ColumnType::Decimal, false),
        );
        let (w, p) = after_clause(
            &[&a, &b],
            &[CursorValue::Int(1), CursorValue::Bytes(b"2.5".to_vec())],
        );
        assert_eq!(
            w,
            "(`a` > ?) OR (`a` = ? AND `b` > CAST(? AS DECIMAL(65,30)))"
        );
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn a_bounded_range_is_after_its_start_and_up_to_its_bound_included() {
        let (a, b) = (
            col("a", ColumnType::VarChar, false),
            col("b", ColumnType::BigInt, false),
        );
        let start = [CursorValue::Bytes(b"r1".to_vec()), CursorValue::Int(7)];
        let bound = [CursorValue::Bytes(b"r3".to_vec()), CursorValue::Int(2)];
        let (w, p) = range_where(&[&a, &b], Some(&start), Some(&bound));
        assert_eq!(
            w,
            " WHERE ((`a` > ?) OR (`a` = ? AND `b` > ?)) AND \
             ((`a` < ?) OR (`a` = ? AND `b` < ?) OR (`a` = ? AND `b` = ?))"
        );
        assert_eq!(p.len(), 3 + 5);
        let (w, p) = range_where(&[&a, &b], None, None);
        assert!(w.is_empty() && p.is_empty(), "the whole table");
        let (w, _) = range_where(&[&a, &b], None, Some(&bound));
        assert!(w.starts_with(" WHERE ((`a` < ?)"), "{w}");
    }
}
