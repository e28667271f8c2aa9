//! Errors of the capture crate, classified for the caller: a *retryable* error is transient
//! (connection dropped, upstream restarting) and the reader recovers from it by itself with
//! backoff; a *fatal* error needs an operator (wrong upstream settings, purged binlog, a DDL
//! that cannot be parsed) and must stop the changefeed with the error's message.
//!
//! An upstream server error is classified by its code through the table the whole project shares
//! ([`sluice_types::error_class::SERVER_CODES`]), the same one the sinks use downstream.
//!
//! Invariant: every message says what is wrong and, where there is one, how to fix it.

pub use sluice_types::error_class::mysql_text;
use std::fmt;

pub use sluice_types::ErrorClass;

/// One upstream setting that is wrong (see [`crate::check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingProblem {
    /// The variable or privilege, e.g. `binlog_format`.
    pub setting: String,
    /// What the upstream has.
    pub actual: String,
    /// What Sluice needs.
    pub expected: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for SettingProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} but Sluice needs {}; fix: {}",
            self.setting, self.actual, self.expected, self.fix
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The connection to the upstream failed or dropped (retryable).
    #[error("upstream connection: {0}")]
    Connection(String),
    /// The upstream settings are wrong (fatal); one entry per wrong setting.
    #[error("upstream is not ready for capture: {}", .0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Upstream(Vec<SettingProblem>),
    /// The start position is no longer in the upstream's binlog (error 1236).
    #[error(
        "binlog file {file} (position {pos}) is no longer available upstream ({message}); the changefeed \
         lagged longer than binlog_expire_logs_seconds allows and must be recreated from a new snapshot"
    )]
    BinlogPurged {
        file: String,
        pos: u64,
        message: String,
    },
    /// An event failed its CRC32 check.
    #[error("binlog event at {file}:{pos} failed its checksum (expected {expected:08x}, computed {computed:08x})")]
    Checksum {
        file: String,
        pos: u64,
        expected: u32,
        computed: u32,
    },
    /// The binlog contains something Sluice cannot decode (fatal).
    #[error("cannot decode binlog event at {file}:{pos}: {message}")]
    Decode {
        file: String,
        pos: u64,
        message: String,
    },
    /// A DDL statement could not be parsed or applied (fatal unless configured to skip).
    #[error(
        "cannot apply DDL at commit ts {commit_ts} (database `{database}`): {message}; statement: {query}. \
         Set skip-unparseable-ddl = true in the server configuration to skip such statements (they are then not replicated)"
    )]
    Ddl {
        commit_ts: u64,
        database: String,
        query: String,
        message: String,
    },
    /// A row references a table the schema history does not know (fatal).
    #[error("schema history has no table `{0}` at commit ts {1}")]
    UnknownTable(String, u64),
    /// Local storage (event store, persisted history) failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The upstream refused for now (deadlock, lock wait timeout, read-only during a failover, a
    /// killed query): a server error whose code the shared table classifies retryable.
    #[error("upstream refused for now: {0}")]
    Transient(String),
    /// Other upstream SQL errors.
    #[error("upstream SQL error: {0}")]
    Sql(String),
}

impl CaptureError {
    pub fn class(&self) -> ErrorClass {
        match self {
            CaptureError::Connection(_)
            | CaptureError::Transient(_)
            | CaptureError::Checksum { .. } => ErrorClass::Retryable,
            _ => ErrorClass::Fatal,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    /// Classifies a mysql_async error: I/O and driver errors are retryable connection errors; a
    /// server error is [`CaptureError::Transient`] or [`CaptureError::Sql`] (fatal) as the
    /// shared table of server codes classifies its code.
    pub fn from_mysql(e: mysql_async::Error) -> CaptureError {
        match e {
            mysql_async::Error::Server(ref s) => match sluice_types::server_error_class(s.code) {
                ErrorClass::Retryable => CaptureError::Transient(mysql_text(&e)),
                ErrorClass::Fatal => CaptureError::Sql(mysql_text(&e)),
            },
            _ => CaptureError::Connection(mysql_text(&e)),
        }
    }

    /// Classifies a failed connection to the upstream at `addr` as `user` (the URL's): a
    /// refused login is fatal and says where to fix it; anything else is [`Self::from_mysql`]
    /// with the address and user named.
    pub fn from_connect(addr: &str, user: &str, e: mysql_async::Error) -> CaptureError {
        match e {
            mysql_async::Error::Server(ref s) if sluice_types::error_class::is_login_refused(s.code) => {
                CaptureError::Sql(format!(
                    "the upstream at {addr} refused the login of user `{user}` ({s}); check the user and \
                     password in the upstream URL (--upstream, or `upstream` in the server configuration) \
                     and that user's grants"
                ))
            }
            e => match CaptureError::from_mysql(e) {
                CaptureError::Connection(m) => CaptureError::Connection(format!(
                    "cannot connect to {addr} as user `{user}`: {m}"
                )),
                CaptureError::Sql(m) => CaptureError::Sql(format!(
                    "connecting to the upstream at {addr} as user `{user}`: {m}"
                )),
                other => other,
            },
        }
    }
}

pub type Result<T> = std::result::Result<T, CaptureError>;
