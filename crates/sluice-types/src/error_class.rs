//! The error vocabulary every Sluice crate shares: [`ErrorClass`] (can retrying help?) and the one
//! table of MariaDB/MySQL server error codes with their class ([`SERVER_CODES`]), used by capture
//! (upstream) and by the sinks (downstream) alike, and the codes of a refused login
//! ([`LOGIN_REFUSED_CODES`]), which both sides report as such.
//!
//! Invariants: a code appears at most once in the table; a code the table does not list is
//! [`ErrorClass::Fatal`] (an error nobody has judged is shown to the operator, not retried
//! forever); the class of a code is the same whichever side of Sluice meets it.

/// Whether retrying can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Transient: the same request may succeed later (connection lost, server restarting,
    /// deadlock, read-only during a failover).
    Retryable,
    /// Retrying the same request fails again: an operator must change something.
    Fatal,
}

impl ErrorClass {
    pub fn is_retryable(self) -> bool {
        self == ErrorClass::Retryable
    }
}

/// One server error code Sluice has judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerCode {
    pub code: u16,
    /// The server's symbolic name (`ER_LOCK_DEADLOCK`).
    pub name: &'static str,
    pub class: ErrorClass,
}

const fn retryable(code: u16, name: &'static str) -> ServerCode {
    ServerCode {
        code,
        name,
        class: ErrorClass::Retryable,
    }
}

const fn fatal(code: u16, name: &'static str) -> ServerCode {
    ServerCode {
        code,
        name,
        class: ErrorClass::Fatal,
    }
}

/// The server error codes with a class, in code order. Retryable: the server going away or
/// restarting, connection and network errors, too many connections, a killed or interrupted
/// query, lock waits and deadlocks (the transaction was rolled back and can run again), and a
/// read-only server (a failover in progress). Fatal codes are listed where the choice is not
/// obvious; every other code is fatal too (see [`server_error_class`]).
pub const SERVER_CODES: &[ServerCode] = &[
    retryable(1040, "ER_CON_COUNT_ERROR"),
    retryable(1053, "ER_SERVER_SHUTDOWN"),
    retryable(1077, "ER_NORMAL_SHUTDOWN"),
    retryable(1078, "ER_GOT_SIGNAL"),
    retryable(1079, "ER_SHUTDOWN_COMPLETE"),
    retryable(1080, "ER_FORCING_CLOSE"),
    retryable(1152, "ER_ABORTING_CONNECTION"),
    // A packet over `max_allowed_packet`: the same statement is as large the next time; raise
    // the server's `max_allowed_packet`.
    fatal(1153, "ER_NET_PACKET_TOO_LARGE"),
    retryable(1158, "ER_NET_READ_ERROR"),
    retryable(1159, "ER_NET_READ_INTERRUPTED"),
    retryable(1160, "ER_NET_ERROR_ON_WRITE"),
    retryable(1161, "ER_NET_WRITE_INTERRUPTED"),
    retryable(1205, "ER_LOCK_WAIT_TIMEOUT"),
    retryable(1213, "ER_LOCK_DEADLOCK"),
    // The start position is gone from the binlog: the changefeed must start again elsewhere.
    fatal(1236, "ER_MASTER_FATAL_ERROR_READING_BINLOG"),
    retryable(1290, "ER_OPTION_PREVENTS_STATEMENT"),
    retryable(1317, "ER_QUERY_INTERRUPTED"),
    retryable(1927, "ER_CONNECTION_KILLED"),
    retryable(2006, "CR_SERVER_GONE_ERROR"),
    retryable(2013, "CR_SERVER_LOST"),
];

/// The table's entry for `code`, if it has one.
pub fn server_code(code: u16) -> Option<&'static ServerCode> {
    SERVER_CODES.iter().find(|c| c.code == code)
}

/// The class of a server error code: the table's, and [`ErrorClass::Fatal`] for a code the
/// table does not list.
pub fn server_error_class(code: u16) -> ErrorClass {
    server_code(code).map_or(ErrorClass::Fatal, |c| c.class)
}

/// Server error codes that mean the login itself was refused (all fatal: the URL's user or
/// password, or that user's grants, must change): wrong user or password, no password given,
/// host not allowed to connect, no access to the database, password expired.
pub const LOGIN_REFUSED_CODES: &[u16] = &[1044, 1045, 1130, 1698, 1862];

/// Whether `code` says the server refused the login (see [`LOGIN_REFUSED_CODES`]).
pub fn is_login_refused(code: u16) -> bool {
    LOGIN_REFUSED_CODES.contains(&code)
}

/// A `mysql_async` error's message without the driver's doubled prefixes
/// (`Input/output error: Input/output error: …`, ``Server error: `…'``): the operating
/// system's or the server's own message.
#[cfg(feature = "mysql")]
pub fn mysql_text(e: &mysql_async::Error) -> String {
    use mysql_async::{Error as E, IoError};
    match e {
        E::Io(IoError::Io(io)) => io.to_string(),
        // TLS errors, when a TLS feature is on.
        #[allow(unreachable_patterns)]
        E::Io(other) => other.to_string(),
        E::Server(s) => s.to_string(),
        E::Driver(d) => d.to_string(),
        E::Url(u) => format!("connection URL: {u}"),
        E::Other(o) => o.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_deadlocks_and_read_only_are_retryable() {
        for code in [
            1040, 1053, 1152, 1158, 1205, 1213, 1290, 1317, 1927, 2006, 2013,
        ] {
            assert_eq!(server_error_class(code), ErrorClass::Retryable, "{code}");
            assert!(server_error_class(code).is_retryable(), "{code}");
        }
    }

    #[test]
    fn listed_fatal_codes_and_unlisted_codes_are_fatal() {
        // Listed: a packet over max_allowed_packet, a purged binlog position.
        for code in [1153, 1236] {
            assert_eq!(server_code(code).map(|c| c.class), Some(ErrorClass::Fatal));
        }
        // Not listed: no such table, unknown column, duplicate key, access denied.
        for code in [1146, 1054, 1062, 1045, 0, u16::MAX] {
            assert!(server_code(code).is_none(), "{code}");
            assert_eq!(server_error_class(code), ErrorClass::Fatal, "{code}");
            assert!(!server_error_class(code).is_retryable(), "{code}");
        }
    }

    #[test]
    fn refused_logins_are_fatal() {
        for &code in LOGIN_REFUSED_CODES {
            assert!(is_login_refused(code), "{code}");
            assert_eq!(server_error_class(code), ErrorClass::Fatal, "{code}");
        }
        assert!(!is_login_refused(1146) && !is_login_refused(2013));
    }

    #[test]
    fn the_table_lists_each_code_once_in_order() {
        for pair in SERVER_CODES.windows(2) {
            assert!(pair[0].code < pair[1].code, "{pair:?}");
        }
        assert!(SERVER_CODES.iter().all(|c| !c.name.is_empty()));
    }
}
