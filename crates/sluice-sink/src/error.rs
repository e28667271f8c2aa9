//! The sink error type. Every error says what failed, keeps its cause, and is classified
//! [`Retryable`](ErrorClass::Retryable) (the changefeed may restart from its checkpoint and try
//! again: network, timeouts, throttling, deadlocks, a store that refused a name already taken, a
//! write the node's write fence refused) or [`Fatal`](ErrorClass::Fatal) (retrying cannot help:
//! a bad URI or parameter, a table the sink refuses, a column the downstream lacks, a broken
//! caller contract).
//!
//! A downstream server error is classified by its code through the table the whole project
//! shares ([`sluice_types::error_class::SERVER_CODES`]), the same one capture uses upstream.
//!
//! Invariant: [`SinkError::class`] is a pure function of the error value, so the shell and the
//! simulator classify identically.

pub use sluice_types::error_class::mysql_text;
use std::fmt;

pub use sluice_types::ErrorClass;

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The sink URI or one of its parameters is invalid (fatal).
    #[error("invalid sink URI {uri}: {reason}")]
    InvalidUri { uri: String, reason: String },
    /// The caller broke the sink contract, e.g. rows out of commit-ts order or a write to a
    /// dispatcher that is not open (fatal: a bug upstream of the sink).
    #[error("sink contract violated by dispatcher {dispatcher}: {reason}")]
    Contract { dispatcher: String, reason: String },
    /// The sink refuses a table (fatal), e.g. no primary key and no not-null unique key.
    #[error("table {table} refused: {reason}")]
    TableRefused { table: String, reason: String },
    /// The object store failed.
    #[error("object store {op} {path} failed: {source}")]
    Store {
        op: &'static str,
        path: String,
        retryable: bool,
        #[source]
        source: Cause,
    },
    /// A MySQL server failed (a server error's text carries its code and message). `side` is
    /// `downstream` for a sink, `upstream` or `downstream` for `sluice check`.
    #[error("{side} {what} failed: {}", cause_text(.source.as_ref()))]
    Db {
        side: &'static str,
        what: String,
        code: Option<u16>,
        retryable: bool,
        #[source]
        source: Cause,
    },
    /// Connecting to a MySQL server failed: it is unreachable, or it refused the login of
    /// `user` (`code` 1045 and the like: fatal, the URI's user or password is wrong).
    #[error("{}", connect_text(.side, .user, .addr, .fix, .code, .source.as_ref()))]
    Connect {
        side: &'static str,
        user: String,
        addr: String,
        /// Where the user and password come from (`the sink URI`, `--upstream`).
        fix: &'static str,
        code: Option<u16>,
        retryable: bool,
        #[source]
        source: Cause,
    },
    /// The downstream did not answer within `timeout` (connecting) or `read-timeout` (a
    /// statement; it was killed on the server first). Retryable.
    #[error("downstream {what} did not answer within {after:?} ({param}){killed}")]
    Timeout {
        what: String,
        after: std::time::Duration,
        param: &'static str,
        /// Text saying what became of the unanswered statement.
        killed: String,
    },
    /// Encoding or decoding data failed (fatal: the same data fails again).
    #[error("codec error: {0}")]
    Codec(String),
    /// The storage layout read by `consume` is malformed (fatal).
    #[error("storage layout error at {path}: {reason}")]
    Layout { path: String, reason: String },
    /// The write fence refused a downstream write (cluster mode): this node's lease is not fresh,
    /// or the node moved on to a newer incarnation than the one the dispatcher was opened under
    /// (`current`). Nothing was written; retryable (the span's owner replays from the
    /// checkpoint). See [`crate::fence`].
    #[error("{what}: this node's lease is not fresh ({}); write refused", fence_text(.incarnation, .current))]
    Fenced {
        what: String,
        incarnation: Option<u64>,
        current: Option<u64>,
    },
    /// The downstream fence refused a write (MySQL sink): a later dispatcher took over this
    /// dispatcher's key range downstream (`by`, or a fence row this one does not hold), so this
    /// one is stale (its node paused or lost its lease). Nothing of the refused transaction
    /// committed; retryable (the dispatcher fails and the span's current owner carries on).
    #[error("{what}: the downstream fence of {span} is held by {by}; this dispatcher's write refused (a successor took the span over after this node paused; nothing to fix: this dispatcher stops and the successor writes the span)")]
    Superseded {
        what: String,
        span: String,
        by: String,
    },
    /// A Kafka broker or client failed: `what` was being done, `reason` is the client's text.
    #[error("Kafka {what} failed: {reason}")]
    Broker {
        what: String,
        reason: String,
        retryable: bool,
    },
    /// A schema registry (`protocol=avro`) failed: `what` was being done, `reason` is its
    /// answer. Retryable when it could not be reached or answered 5xx; fatal when it refused
    /// (an incompatible schema, a bad request, no access).
    #[error("schema registry {what} failed: {reason}")]
    Registry {
        what: String,
        reason: String,
        retryable: bool,
    },
    /// A background flush of this dispatcher failed earlier; later calls report it.
    #[error("an earlier flush failed: {0}")]
    Earlier(std::sync::Arc<SinkError>),
}

impl SinkError {
    pub fn class(&self) -> ErrorClass {
        match self {
            SinkError::InvalidUri { .. }
            | SinkError::Contract { .. }
            | SinkError::TableRefused { .. }
            | SinkError::Codec(_)
            | SinkError::Layout { .. } => ErrorClass::Fatal,
            SinkError::Store { retryable, .. }
            | SinkError::Db { retryable, .. }
            | SinkError::Connect { retryable, .. }
            | SinkError::Broker { retryable, .. }
            | SinkError::Registry { retryable, .. } => {
                if *retryable {
                    ErrorClass::Retryable
                } else {
                    ErrorClass::Fatal
                }
            }
            SinkError::Timeout { .. } | SinkError::Fenced { .. } | SinkError::Superseded { .. } => {
                ErrorClass::Retryable
            }
            SinkError::Earlier(e) => e.class(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    /// The sink refuses one table as it is (fatal for that table only: the others are fine).
    pub fn is_table_refusal(&self) -> bool {
        match self {
            SinkError::TableRefused { .. } => true,
            SinkError::Earlier(inner) => inner.is_table_refusal(),
            _ => false,
        }
    }

    pub(crate) fn invalid_uri(uri: &impl fmt::Display, reason: impl Into<String>) -> SinkError {
        SinkError::InvalidUri {
            uri: uri.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn contract(d: impl fmt::Display, reason: impl Into<String>) -> SinkError {
        SinkError::Contract {
            dispatcher: d.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn store(
        op: &'static str,
        path: impl Into<String>,
        e: object_store::Error,
    ) -> SinkError {
        use object_store::Error as E;
        let retryable = !matches!(
            e,
            E::InvalidPath { .. }
                | E::NotSupported { .. }
                | E::NotImplemented { .. }
                | E::UnknownConfigurationKey { .. }
                | E::PermissionDenied { .. }
                | E::Unauthenticated { .. }
        );
        SinkError::Store {
            op,
            path: path.into(),
            retryable,
            source: Box::new(e),
        }
    }

    /// A downstream database error, classified: a server error by the shared table of codes, a
    /// lost connection retryable, a bad URL fatal.
    pub fn db(what: impl Into<String>, e: mysql_async::Error) -> SinkError {
        Self::db_on("downstream", what, e)
    }

    /// [`SinkError::db`] on a named side (`sluice check` reads an upstream too).
    pub fn db_on(side: &'static str, what: impl Into<String>, e: mysql_async::Error) -> SinkError {
        let (code, retryable) = classify_mysql(&e);
        SinkError::Db {
            side,
            what: what.into(),
            code,
            retryable,
            source: Box::new(e),
        }
    }

    /// A failed connection to `side` at `addr` as `user`; `fix` names where the login is set.
    pub(crate) fn connect(
        side: &'static str,
        user: &str,
        addr: String,
        fix: &'static str,
        e: mysql_async::Error,
    ) -> SinkError {
        let (code, retryable) = classify_mysql(&e);
        SinkError::Connect {
            side,
            user: user.to_string(),
            addr,
            fix,
            code,
            retryable,
            source: Box::new(e),
        }
    }
}

fn connect_text(
    side: &str,
    user: &str,
    addr: &str,
    fix: &str,
    code: &Option<u16>,
    source: &(dyn std::error::Error + Send + Sync + 'static),
) -> String {
    let cause = cause_text(source);
    match code {
        Some(c) if sluice_types::error_class::is_login_refused(*c) => format!(
            "the {side} at {addr} refused the login of user `{user}` ({cause}); \
             check the user and password in {fix} and that user's grants"
        ),
        _ => format!("cannot connect to the {side} at {addr} as user `{user}`: {cause}"),
    }
}

/// The text of an error as the user reads it. A `mysql_async` error is shown without its
/// wrappers (`Input/output error: Input/output error: …`, ``Server error: `…'``): the
/// operating system's or the server's own message.
pub fn cause_text(e: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    match e.downcast_ref::<mysql_async::Error>() {
        Some(m) => mysql_text(m),
        None => e.to_string(),
    }
}

fn fence_text(bound: &Option<u64>, current: &Option<u64>) -> String {
    match (bound, current) {
        (Some(b), None) => format!("incarnation {b}"),
        (Some(b), Some(c)) => format!("incarnation {b}, now {c}"),
        (None, Some(c)) => format!("not fresh when the dispatcher was opened, now incarnation {c}"),
        (None, None) => "no fresh incarnation".to_string(),
    }
}

fn classify_mysql(e: &mysql_async::Error) -> (Option<u16>, bool) {
    match e {
        mysql_async::Error::Server(s) => (
            Some(s.code),
            sluice_types::server_error_class(s.code).is_retryable(),
        ),
        mysql_async::Error::Io(_) => (None, true),
        mysql_async::Error::Driver(_) => (None, true),
        mysql_async::Error::Url(_) => (None, false),
        mysql_async::Error::Other(_) => (None, true),
    }
}

pub type Result<T, E = SinkError> = std::result::Result<T, E>;
