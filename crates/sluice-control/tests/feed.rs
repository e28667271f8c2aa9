//! The feed's rules on a source in memory: batches hold whole transactions (a scan cut inside one
//! leaves it to the next batch; one larger than a batch goes in parts, each resolved below it,
//! with no row twice or left out), a batch ends at the first row
//! after a DDL, DDLs go only to the dispatchers they concern, reading stops at the memory quota
//! and resumes when the sink takes the rows, and the accounting holds through writes, skipped
//! rows and unsubscribes; a snapshot chunk goes into the stream right after its position, never
//! before everything up to it nor after anything later, and a window read's chunk goes without
//! the rows of keys the stream changed in its window.

use sluice_control::feed::{
    ChunkConsistency, ChunkRead, EventSource, Feed, FeedNote, FeedOut, FeedRow, Pos, Scan,
    CHUNK_TS_SLOTS, MAX_ROWS_PER_DELIVERY,
};
use sluice_control::{Effect, Input, SinkCommand, StreamItem};
use sluice_types::{
    ChangefeedId, DdlEvent, DdlInfluence, DdlKind, DispatcherId, InfluenceScope, Key, NodeId,
    RowKind, Span, TableId, Ts,
};

#[derive(Clone, Debug)]
struct Row {
    ts: Ts,
    key: Key,
}

impl FeedRow for Row {
    fn commit_ts(&self) -> Ts {
        self.ts
    }
    fn key(&self) -> &Key {
        &self.key
    }
    fn kind(&self) -> RowKind {
        RowKind::Insert
    }
    fn size(&self) -> usize {
        100
    }
    fn at_ts(mut self, ts: Ts) -> Self {
        self.ts = ts;
        self
    }
}

#[derive(Default)]
struct Mem {
    rows: Vec<Row>,
    ddls: Vec<DdlEvent>,
    complete: Ts,
}

const T: TableId = TableId(5);

impl Mem {
    /// `n` transactions of `rows` rows each, from ts `from` on.
    fn txns(&mut self, from: Ts, n: u64, rows: u64) {
        for i in 0..n {
            for k in 0..rows {
                self.rows.push(Row {
                    ts: from + i,
                    key: Key::row_u64(T, i * 100_000 + k),
                });
            }
        }
        self.complete = self.complete.max(from + n - 1);
    }

    fn ddl(&mut self, ts: Ts, scope: InfluenceScope) {
        self.ddls.push(DdlEvent {
            session: Default::default(),
            object_database: None,
            commit_ts: ts,
            commit_time_ms: 0,
            kind: DdlKind::AlterTable,
            database: "db".into(),
            query: format!("ALTER at {ts}"),
            influence: DdlInfluence {
                scope,
                trigger: false,
                dropped: vec![],
                added: vec![],
                renamed: vec![],
                sources: vec![],
            },
        });
        self.complete = self.complete.max(ts);
    }
}

impl EventSource for Mem {
    type Row = Row;
    /// Like the event store: a row's place in its transaction is its rank among the rows of its
    /// ts (every span's), and a scan cut by the limit resumes exactly at the first row left out.
    fn scan(&self, span: &Span, from: Pos, upto: Ts, limit: usize) -> Result<Scan<Row>, String> {
        let mut seq = 0u32;
        let mut all: Vec<(Pos, Row)> = Vec::new();
        for (i, r) in self.rows.iter().enumerate() {
            seq = if i > 0 && self.rows[i - 1].ts == r.ts {
                seq + 1
            } else {
                0
            };
            let at = Pos { ts: r.ts, seq };
            let after = at.ts > from.ts || (at.ts == from.ts && from.inside() && seq > from.seq);
            if after && r.ts <= upto && span.contains(&r.key) {
                all.push((at, r.clone()));
            }
        }
        let next = all.get(limit).map(|(at, _)| match at.seq {
            0 => Pos::after(at.ts - 1),
            s => Pos {
                ts: at.ts,
                seq: s - 1,
            },
        });
        Ok(Scan {
            rows: all.into_iter().take(limit).map(|(_, r)| r).collect(),
            next,
        })
    }
    fn ddls(&self, after: Ts, upto: Ts) -> Result<Vec<DdlEvent>, String> {
        Ok(self
            .ddls
            .iter()
            .filter(|d| d.commit_ts > after && d.commit_ts <= upto)
            .cloned()
            .collect())
    }
    fn complete(&self) -> Ts {
        self.complete
    }
    fn floor(&self) -> Ts {
        0
    }
    fn database_of(&self, _: TableId, _: Ts) -> Option<String> {
        Some("db".into())
    }
}

fn cf() -> ChangefeedId {
    ChangefeedId::new("cf")
}

const D: DispatcherId = DispatcherId { epoch: 1, seq: 1 };

/// `D` subscribes to the whole table from `start_ts`; what the feed answered.
fn subscribe<S: EventSource<Row = Row>>(
    feed: &mut Feed<Row>,
    src: &S,
    start_ts: Ts,
) -> Vec<FeedOut<Row>> {
    let mut out = Vec::new();
    feed.on_effect(
        src,
        Effect::Subscribe {
            cf: cf(),
            id: D,
            span: Span::whole_table(T),
            is_trigger: false,
            start_ts,
        },
        &mut out,
    );
    out
}

fn subscribed(src: &Mem, quota: u64) -> Feed<Row> {
    let mut feed = Feed::new(NodeId::new("n1"), quota);
    let out = subscribe(&mut feed, src, 0);
    assert!(matches!(
        out.as_slice(),
        [FeedOut::Open { start_ts: 0, .. }]
    ));
    feed
}

/// One poll: the batch for `D` (items, resolved ts), if any, and whether reading waited.
fn poll(feed: &mut Feed<Row>, src: &Mem) -> (Option<(Vec<StreamItem>, Ts)>, bool) {
    let mut out = Vec::new();
    feed.poll(src, |_, _| true, &mut out);
    let mut batch = None;
    let mut waited = false;
    for o in out {
        match o {
            FeedOut::Input(Input::Events {
                items, resolved_ts, ..
            }) => batch = Some((items, resolved_ts)),
            FeedOut::Note(FeedNote::QuotaWait) => waited = true,
            _ => {}
        }
    }
    (batch, waited)
}

fn rows_of(items: &[StreamItem]) -> Vec<(Ts, u64)> {
    items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Row {
                commit_ts, handle, ..
            } => Some((*commit_ts, *handle)),
            _ => None,
        })
        .collect()
}

/// The dispatcher writes these rows: the feed hands them to the sink.
fn write(feed: &mut Feed<Row>, src: &Mem, rows: &[(Ts, u64)]) -> (usize, u64) {
    let mut out = Vec::new();
    feed.on_effect(
        src,
        Effect::Sink(SinkCommand::WriteRows {
            cf: cf(),
            id: D,
            span: Span::whole_table(T),
            rows: rows.iter().map(|(ts, h)| (*ts, Key(vec![]), *h)).collect(),
            open: false,
        }),
        &mut out,
    );
    match out.as_slice() {
        [FeedOut::Write { rows, bytes, .. }] => (rows.len(), *bytes),
        other => panic!("expected one write, got {other:?}"),
    }
}

#[test]
fn a_scan_cut_inside_a_transaction_leaves_it_to_the_next_batch() {
    let mut src = Mem::default();
    src.txns(10, 3, 400);
    let mut feed = subscribed(&src, u64::MAX);
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!(rows_of(&items).len(), 800, "two whole transactions");
    assert_eq!(resolved, 11, "resolved below the cut transaction");
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!(rows_of(&items).len(), 400);
    assert!(rows_of(&items).iter().all(|r| r.0 == 12));
    assert_eq!(resolved, 12);
    feed.audit().expect("accounting");
}

#[test]
fn a_transaction_larger_than_a_batch_goes_in_parts_resolved_below_it() {
    let mut src = Mem::default();
    src.txns(9, 1, 5);
    let big = 2 * MAX_ROWS_PER_DELIVERY as u64 + 500;
    src.txns(10, 1, big);
    src.txns(11, 1, 3);
    let mut feed = subscribed(&src, u64::MAX);
    // The transaction before it goes alone, whole.
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!((rows_of(&items).len(), resolved), (5, 9));
    // Then the big one in parts of a batch each, resolved below it, never a row twice.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
            panic!("no batch")
        };
        let rows = rows_of(&items);
        assert_eq!(rows.len(), MAX_ROWS_PER_DELIVERY, "a part is one batch");
        assert!(rows.iter().all(|r| r.0 == 10), "only the open transaction");
        assert_eq!(resolved, 9, "a part resolves just below its transaction");
        seen.extend(items);
    }
    // The batch with its last rows ends it (and takes what follows, whole).
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    let rows = rows_of(&items);
    assert_eq!(rows.iter().filter(|r| r.0 == 10).count(), 500);
    assert_eq!(rows.iter().filter(|r| r.0 == 11).count(), 3);
    assert_eq!(resolved, 11);
    seen.extend(items);
    let keys: std::collections::BTreeSet<Key> = seen
        .iter()
        .filter_map(|i| match i {
            StreamItem::Row {
                commit_ts: 10, key, ..
            } => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        keys.len() as u64,
        big,
        "every row of it once, none left out"
    );
    // In flight: the parts read, never more than the transaction's rows delivered so far.
    assert_eq!(feed.inflight_rows(&cf(), D), 5 + big as usize + 3);
    feed.audit().expect("accounting");
}

#[test]
fn a_resubscription_inside_a_transaction_in_parts_reads_it_again_from_its_start() {
    let mut src = Mem::default();
    let big = MAX_ROWS_PER_DELIVERY as u64 + 10;
    src.txns(10, 1, big);
    let mut feed = subscribed(&src, u64::MAX);
    let (Some((_, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!(resolved, 9, "a part");
    subscribe(&mut feed, &src, 9);
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!(
        (rows_of(&items).len(), resolved),
        (MAX_ROWS_PER_DELIVERY, 9),
        "its first part again, not its rest"
    );
    feed.audit().expect("accounting");
}

#[test]
fn a_batch_ends_at_the_first_row_after_a_ddl_and_ddls_go_where_they_belong() {
    let mut src = Mem::default();
    src.txns(10, 1, 2);
    src.ddl(11, InfluenceScope::Tables(vec![TableId(99)])); // another table's
    src.ddl(12, InfluenceScope::Database("db".into()));
    src.txns(13, 2, 2);
    let mut feed = subscribed(&src, u64::MAX);
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    let ddls: Vec<Ts> = items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Ddl { ddl, .. } => Some(ddl.commit_ts),
            _ => None,
        })
        .collect();
    assert_eq!(ddls, vec![12], "only the database's DDL concerns the table");
    assert_eq!(rows_of(&items).len(), 2, "no row after the DDL");
    assert_eq!(resolved, 12);
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!(rows_of(&items).len(), 4);
    assert_eq!(resolved, 14);
}

#[test]
fn reading_stops_at_the_quota_and_resumes_when_the_sink_takes_the_rows() {
    let mut src = Mem::default();
    src.txns(10, 4, 3);
    // 500 bytes: two transactions of 3 rows of 100 bytes; the second starts below the quota.
    let mut feed = subscribed(&src, 500);
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    let rows = rows_of(&items);
    assert_eq!(rows.len(), 6);
    assert_eq!(resolved, 11);
    assert_eq!(
        feed.inflight_bytes(),
        600,
        "the quota plus less than one transaction"
    );
    let (batch, waited) = poll(&mut feed, &src);
    assert!(batch.is_none() && waited, "reading waits at the quota");
    let (n, bytes) = write(&mut feed, &src, &rows);
    assert_eq!((n, bytes), (6, 600));
    assert_eq!(feed.inflight_bytes(), 600, "in the sink, still in flight");
    feed.on_accepted(&cf(), D, n, bytes);
    assert_eq!(feed.inflight_bytes(), 0);
    feed.audit().expect("accounting");
    let (Some((items, resolved)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    assert_eq!((rows_of(&items).len(), resolved), (6, 13));
}

#[test]
fn skipped_rows_and_an_unsubscribe_release_what_they_held() {
    let mut src = Mem::default();
    src.txns(10, 3, 2);
    let mut feed = subscribed(&src, u64::MAX);
    let (Some((items, _)), _) = poll(&mut feed, &src) else {
        panic!("no batch")
    };
    let rows = rows_of(&items);
    // The dispatcher skips the first transaction (an ignored event type) and writes the second.
    let (n, bytes) = write(&mut feed, &src, &rows[2..4]);
    assert_eq!(feed.inflight_bytes(), 400, "the skipped rows are released");
    feed.audit().expect("accounting");
    let mut out = Vec::new();
    feed.on_effect(&src, Effect::Unsubscribe { cf: cf(), id: D }, &mut out);
    assert_eq!(feed.inflight_bytes(), 200, "the held rows are released");
    feed.on_accepted(&cf(), D, n, bytes);
    assert_eq!(feed.inflight_bytes(), 0);
    assert_eq!(feed.inflight_rows(&cf(), D), 0);
    feed.audit().expect("accounting");
}

#[test]
fn a_start_below_the_source_is_refused_with_an_error() {
    struct Late(Mem);
    impl EventSource for Late {
        type Row = Row;
        fn scan(&self, s: &Span, a: Pos, u: Ts, l: usize) -> Result<Scan<Row>, String> {
            self.0.scan(s, a, u, l)
        }
        fn ddls(&self, a: Ts, u: Ts) -> Result<Vec<DdlEvent>, String> {
            self.0.ddls(a, u)
        }
        fn complete(&self) -> Ts {
            self.0.complete
        }
        fn floor(&self) -> Ts {
            100
        }
        fn database_of(&self, t: TableId, at: Ts) -> Option<String> {
            self.0.database_of(t, at)
        }
    }
    let src = Late(Mem::default());
    let mut feed: Feed<Row> = Feed::new(NodeId::new("n1"), u64::MAX);
    let out = subscribe(&mut feed, &src, 50);
    assert!(out.iter().any(|o| matches!(
        o,
        FeedOut::Input(Input::SinkError { retryable: false, message, .. }) if message.contains("starts at ts 100")
    )));
    assert!(!out.iter().any(|o| matches!(o, FeedOut::Open { .. })));
}

/// `Effect::ReadChunk` for `D`, then the shell's answer: a chunk of `keys` read at `position`.
fn chunk(feed: &mut Feed<Row>, src: &Mem, position: Ts, keys: &[u64]) -> Vec<FeedOut<Row>> {
    ask(feed, src, false);
    let keys: Vec<u64> = keys.iter().map(|k| 900_000 + k).collect();
    answer(feed, position, ChunkConsistency::AtPosition, &keys)
}

#[test]
fn a_snapshot_chunk_waits_for_everything_up_to_its_position_and_goes_before_what_follows() {
    let mut src = Mem::default();
    src.txns(10, 2, 2); // ts 10, 11
    let mut feed = subscribed(&src, 1 << 20);
    let out = chunk(&mut feed, &src, 11, &[1, 2, 3]);
    assert!(
        matches!(
            out.as_slice(),
            [FeedOut::Input(Input::ChunkQueued {
                ts: 12,
                rows: 3,
                ..
            })]
        ),
        "{out:?}"
    );
    // The stream up to the position first, then the chunk at position + 1, then the rest.
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("a batch");
    assert_eq!(resolved, 11);
    assert!(rows_of(&items).iter().all(|(ts, _)| *ts <= 11));
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("the chunk");
    assert_eq!((resolved, rows_of(&items).len()), (12, 3));
    assert!(rows_of(&items).iter().all(|(ts, _)| *ts == 12));
    feed.audit().expect("accounting");
    // A later transaction (commit ts are binlog positions: never within the slots) follows.
    src.txns(200, 1, 1);
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("after the chunk");
    assert_eq!(resolved, 200);
    assert_eq!(
        rows_of(&items).iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![200]
    );
}

#[test]
fn chunks_at_one_position_take_the_ts_after_each_other_and_stop_past_the_slots() {
    let mut src = Mem::default();
    src.txns(10, 1, 1);
    let mut feed = subscribed(&src, 1 << 20);
    let _ = poll(&mut feed, &src);
    for i in 0..CHUNK_TS_SLOTS {
        let out = chunk(&mut feed, &src, 10, &[i]);
        let want = 11 + i;
        assert!(
            matches!(out.as_slice(), [FeedOut::Input(Input::ChunkQueued { ts, .. })] if *ts == want),
            "chunk {i}: {out:?}"
        );
        let (b, _) = poll(&mut feed, &src);
        assert_eq!(b.expect("the chunk").1, want);
    }
    // The upstream did not move: one more chunk cannot go in without passing a possible
    // transaction; it is refused with the reason, and the stream is not held.
    let out = chunk(&mut feed, &src, 10, &[99]);
    match out.as_slice() {
        [FeedOut::Input(Input::ChunkFailed { message, .. })] => {
            assert!(message.contains("written nothing"), "{message}")
        }
        other => panic!("expected a refused chunk, got {other:?}"),
    }
    feed.audit().expect("accounting");
}

#[test]
fn a_resubscription_below_a_chunk_handed_out_loses_it_and_says_so() {
    let mut src = Mem::default();
    src.txns(10, 2, 1);
    let mut feed = subscribed(&src, 1 << 20);
    let _ = chunk(&mut feed, &src, 11, &[1, 2]);
    let _ = poll(&mut feed, &src);
    let (b, _) = poll(&mut feed, &src);
    assert_eq!(b.expect("the chunk").1, 12);
    let mut out = Vec::new();
    feed.on_effect(
        &src,
        Effect::Subscribe {
            cf: cf(),
            id: D,
            span: Span::whole_table(T),
            is_trigger: false,
            start_ts: 10,
        },
        &mut out,
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, FeedOut::Input(Input::ChunkLost { .. }))),
        "{out:?}"
    );
    feed.audit().expect("the chunk's rows were released");
}

#[test]
fn a_chunk_read_of_an_ended_subscription_is_dropped_and_the_dispatcher_told() {
    let mut src = Mem::default();
    src.txns(10, 1, 1);
    let mut feed = subscribed(&src, 1 << 20);
    ask(&mut feed, &src, false);
    let mut out = Vec::new();
    feed.on_effect(&src, Effect::Unsubscribe { cf: cf(), id: D }, &mut out);
    let out = answer(&mut feed, 10, ChunkConsistency::AtPosition, &[1]);
    assert!(
        matches!(out.as_slice(), [FeedOut::Input(Input::ChunkDropped { .. })]),
        "{out:?}"
    );
    assert_eq!(feed.inflight_bytes(), 0);
    feed.audit().expect("nothing held");
}

#[test]
fn the_next_chunk_is_read_while_one_is_held_and_they_go_out_in_order() {
    let mut src = Mem::default();
    src.txns(10, 2, 1); // ts 10, 11
    let mut feed = subscribed(&src, 1 << 20);
    let first = chunk(&mut feed, &src, 11, &[1]);
    assert!(matches!(
        first.as_slice(),
        [FeedOut::Input(Input::ChunkQueued { ts: 12, .. })]
    ));
    // A second read while the first is held: accepted, after it.
    let second = chunk(&mut feed, &src, 11, &[2]);
    queued_at(&second, 13);
    let (b, _) = poll(&mut feed, &src);
    assert_eq!(b.expect("the stream up to the position").1, 11);
    let (b, _) = poll(&mut feed, &src);
    assert_eq!(b.expect("the first chunk").1, 12);
    let (b, _) = poll(&mut feed, &src);
    assert_eq!(b.expect("the second chunk").1, 13);
    feed.audit().expect("accounting");
}

/// A row of key `k` of table `T` at `ts`, in the source.
fn put(src: &mut Mem, ts: Ts, k: u64) {
    src.rows.push(Row {
        ts,
        key: Key::row_u64(T, k),
    });
    src.complete = src.complete.max(ts);
}

thread_local! {
    /// The reads [`ask`] asked and [`answer`] has not answered yet, oldest first.
    static ASKED: std::cell::RefCell<(u64, std::collections::VecDeque<u64>)> =
        const { std::cell::RefCell::new((0, std::collections::VecDeque::new())) };
}

/// `Effect::ReadChunk` for `D` (keyless or not), answered later by [`answer`] (the oldest read
/// not answered yet).
fn ask(feed: &mut Feed<Row>, src: &Mem, keyless: bool) {
    let mut out = Vec::new();
    let read = ASKED.with(|a| {
        let mut a = a.borrow_mut();
        a.0 += 1;
        let id = a.0;
        a.1.push_back(id);
        id
    });
    let read = Effect::ReadChunk(sluice_control::io::ChunkAsk {
        cf: cf(),
        id: D,
        read,
        span: Span::whole_table(T),
        after: None,
        upto: None,
        limit: 100,
        keyless,
    });
    feed.on_effect(src, read, &mut out);
    assert!(
        matches!(out.as_slice(), [FeedOut::Effect(Effect::ReadChunk(_))]),
        "{out:?}"
    );
}

/// The shell's answer to [`ask`]: rows of keys `keys` of `T`, read `consistency` at `position`.
fn answer(
    feed: &mut Feed<Row>,
    position: Ts,
    consistency: ChunkConsistency,
    keys: &[u64],
) -> Vec<FeedOut<Row>> {
    let rows = keys
        .iter()
        .map(|k| Row {
            ts: 0,
            key: Key::row_u64(T, *k),
        })
        .collect();
    let r = ChunkRead {
        position,
        consistency,
        rows,
        cursor: Some(vec![1]),
        more: true,
    };
    let read = ASKED.with(|a| a.borrow_mut().1.pop_front()).unwrap_or(0);
    answer_read(feed, read, r)
}

/// The shell's answer to read `read`.
fn answer_read(feed: &mut Feed<Row>, read: u64, r: ChunkRead<Row>) -> Vec<FeedOut<Row>> {
    let mut out = Vec::new();
    feed.on_chunk(&cf(), D, read, Ok(r), &mut out);
    out
}

/// The read [`ask`] asked last (taken out of the ones [`answer`] answers: the test answers it
/// by its id).
fn last_asked() -> u64 {
    ASKED
        .with(|a| a.borrow_mut().1.pop_back())
        .expect("a read asked")
}

/// A chunk of `keys` of `T` read at `position`.
fn chunk_of(position: Ts, keys: &[u64]) -> ChunkRead<Row> {
    ChunkRead {
        position,
        consistency: ChunkConsistency::AtPosition,
        rows: keys
            .iter()
            .map(|k| Row {
                ts: 0,
                key: Key::row_u64(T, *k),
            })
            .collect(),
        cursor: Some(vec![1]),
        more: true,
    }
}

/// Polls until nothing more comes: each batch's (or bare resolved ts's) ts and its rows' keys.
fn drain(feed: &mut Feed<Row>, src: &Mem) -> Vec<(Ts, Vec<Key>)> {
    let mut seen = Vec::new();
    loop {
        let mut out = Vec::new();
        feed.poll(src, |_, _| true, &mut out);
        let before = seen.len();
        for o in out {
            match o {
                FeedOut::Input(Input::Events {
                    items, resolved_ts, ..
                }) => {
                    let keys = items
                        .iter()
                        .filter_map(|i| match i {
                            StreamItem::Row { key, .. } => Some(key.clone()),
                            _ => None,
                        })
                        .collect();
                    seen.push((resolved_ts, keys));
                }
                FeedOut::Input(Input::Resolved { resolved_ts, .. }) => {
                    seen.push((resolved_ts, vec![]))
                }
                _ => {}
            }
        }
        assert!(seen.len() < 100, "the feed keeps handing out: {seen:?}");
        if seen.len() == before {
            return seen;
        }
    }
}

#[test]
fn parallel_reads_hold_the_stream_below_the_earliest_and_go_out_in_position_order() {
    let mut src = Mem::default();
    put(&mut src, 10, 1);
    let mut feed = subscribed(&src, 1 << 20);
    assert_eq!(drain(&mut feed, &src).last().map(|b| b.0), Some(10));
    // Read A is asked with the stream at 10; key 5 then changes at 200; read B is asked.
    ask(&mut feed, &src, false);
    let a = last_asked();
    put(&mut src, 200, 5);
    ask(&mut feed, &src, false);
    let b = last_asked();
    // B comes back first, read at 200: the stream does not pass A's possible position.
    queued_at(&answer_read(&mut feed, b, chunk_of(200, &[50])), 201);
    assert_eq!(
        drain(&mut feed, &src),
        vec![],
        "A may be below 200: nothing goes"
    );
    // A was read at 150, before the change of key 5: its chunk goes first, then the change,
    // then B's chunk.
    queued_at(&answer_read(&mut feed, a, chunk_of(150, &[5])), 151);
    let k = |n: u64| Key::row_u64(T, n);
    assert_eq!(
        drain(&mut feed, &src),
        vec![
            (150, vec![]),
            (151, vec![k(5)]),
            (200, vec![k(5)]),
            (201, vec![k(50)]),
        ]
    );
    feed.audit().expect("accounting");
}

#[test]
fn parallel_reads_at_one_position_take_free_slots_whatever_order_they_come_back_in() {
    let mut src = Mem::default();
    put(&mut src, 10, 1);
    let mut feed = subscribed(&src, 1 << 20);
    let _ = drain(&mut feed, &src);
    let asked: Vec<u64> = (0..3)
        .map(|_| {
            ask(&mut feed, &src, false);
            last_asked()
        })
        .collect();
    queued_at(&answer_read(&mut feed, asked[2], chunk_of(10, &[3])), 11);
    queued_at(&answer_read(&mut feed, asked[0], chunk_of(10, &[1])), 12);
    let k = |n: u64| Key::row_u64(T, n);
    // The read under way is at 10 or later: at 10 it takes a later slot, later it is past
    // them; the chunks held go.
    assert_eq!(
        drain(&mut feed, &src),
        vec![(11, vec![k(3)]), (12, vec![k(1)])]
    );
    queued_at(&answer_read(&mut feed, asked[1], chunk_of(10, &[2])), 13);
    assert_eq!(drain(&mut feed, &src), vec![(13, vec![k(2)])]);
    // An answer nobody asked for (or asked twice) is dropped.
    let out = answer_read(&mut feed, asked[1], chunk_of(10, &[9]));
    assert!(
        matches!(out.as_slice(), [FeedOut::Input(Input::ChunkDropped { .. })]),
        "{out:?}"
    );
    feed.audit().expect("accounting");
}

/// The feed's answer to a chunk: queued, to reach the dispatcher at `ts`.
fn queued_at(out: &[FeedOut<Row>], ts: Ts) {
    assert!(
        matches!(out, [FeedOut::Input(Input::ChunkQueued { ts: t, .. })] if *t == ts),
        "expected the chunk queued at {ts}: {out:?}"
    );
}

/// [`answer`] as a window read.
fn window_answer(feed: &mut Feed<Row>, position: Ts, keys: &[u64]) -> Vec<FeedOut<Row>> {
    answer(feed, position, ChunkConsistency::Window, keys)
}

#[test]
fn a_window_read_goes_after_its_position_without_the_keys_the_stream_changed_in_its_window() {
    let mut src = Mem::default();
    put(&mut src, 10, 7); // before the ask: the read saw it, the chunk keeps key 7
    let mut feed = subscribed(&src, 1 << 20);
    let (b, _) = poll(&mut feed, &src);
    assert_eq!(b.expect("ts 10").1, 10);
    ask(&mut feed, &src, false);
    assert_eq!(feed.window_floor(), Some(10), "the store keeps the window");
    // Between the ask and the binlog's end read after the chunk: keys 1 and 3 change.
    put(&mut src, 200, 1);
    put(&mut src, 200, 50); // not in the chunk
    put(&mut src, 300, 3);
    let out = window_answer(&mut feed, 300, &[1, 2, 3, 7]);
    queued_at(&out, 301);
    // The stream's versions up to the position first, then the chunk without keys 1 and 3.
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("the window's changes");
    assert_eq!((resolved, rows_of(&items).len()), (300, 3));
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("the chunk");
    assert_eq!(resolved, 301);
    let keys: Vec<Key> = items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Row { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(keys, vec![Key::row_u64(T, 2), Key::row_u64(T, 7)]);
    assert_eq!(feed.window_floor(), None);
    feed.audit().expect("the dropped rows left the accounting");
    let handles = rows_of(&items);
    let (n, bytes) = write(&mut feed, &src, &handles);
    assert_eq!(n, 2);
    feed.on_accepted(&cf(), D, n, bytes);
    feed.audit().expect("accounting after the write");
    assert_eq!(feed.inflight_bytes(), 0, "every row handed out was written");
}

#[test]
fn a_keyless_window_read_of_a_table_that_changed_is_lost_with_the_reason_and_read_again() {
    let mut src = Mem::default();
    put(&mut src, 10, 7);
    let mut feed = subscribed(&src, 1 << 20);
    let _ = poll(&mut feed, &src);
    ask(&mut feed, &src, true);
    put(&mut src, 200, 4);
    let _ = window_answer(&mut feed, 200, &[4, 7]);
    let _ = poll(&mut feed, &src); // the window's change
    let mut out = Vec::new();
    feed.poll(&src, |_, _| true, &mut out);
    let why = out.iter().find_map(|o| match o {
        FeedOut::Input(Input::ChunkLost { why, .. }) => why.clone(),
        _ => None,
    });
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("changed while its snapshot was read")),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, FeedOut::Input(Input::Events { .. }))),
        "no chunk row went out: {out:?}"
    );
    feed.audit().expect("the chunk's rows were released");
    // Unchanged in its window: the keyless chunk goes whole.
    ask(&mut feed, &src, true);
    let _ = window_answer(&mut feed, 200, &[4, 7]);
    let (b, _) = poll(&mut feed, &src);
    let (items, resolved) = b.expect("the chunk");
    assert_eq!((resolved, rows_of(&items).len()), (201, 2));
}

#[test]
fn at_the_quota_an_idle_table_still_moves_its_resolved_ts_and_a_busy_one_reads_nothing() {
    const IDLE: TableId = TableId(6);
    const D2: DispatcherId = DispatcherId { epoch: 1, seq: 2 };
    let mut src = Mem::default();
    src.txns(10, 10, 4); // 40 rows of `T`
    let mut feed = subscribed(&src, 200); // two rows' worth
    let mut out = Vec::new();
    feed.on_effect(
        &src,
        Effect::Subscribe {
            cf: cf(),
            id: D2,
            span: Span::whole_table(IDLE),
            is_trigger: false,
            start_ts: 0,
        },
        &mut out,
    );
    // The busy table fills the quota; its rows stay unread past it.
    let (b, _) = poll(&mut feed, &src);
    assert!(b.is_some());
    let held = feed.inflight_bytes();
    assert!(held >= 200, "{held}");
    // Capture moves on; the quota is still reached: the idle table's resolved ts follows the
    // source, the busy one gets nothing.
    src.txns(100, 5, 4);
    let mut out = Vec::new();
    feed.poll(&src, |_, _| true, &mut out);
    let resolved: Vec<(Vec<DispatcherId>, Ts)> = out
        .iter()
        .filter_map(|o| match o {
            FeedOut::Input(Input::Resolved {
                ids, resolved_ts, ..
            }) => Some((ids.clone(), *resolved_ts)),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, vec![(vec![D2], 104)], "{out:?}");
    assert!(
        !out.iter()
            .any(|o| matches!(o, FeedOut::Input(Input::Events { .. }))),
        "no row read over the quota: {out:?}"
    );
    assert_eq!(feed.inflight_bytes(), held);
    feed.audit().expect("accounting");
}
