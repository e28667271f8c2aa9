//! Running a DDL on a MySQL downstream under the upstream session it ran under
//! ([`sluice_types::DdlSession`]).
//!
//! Invariants:
//! - the settings are set on the connection that runs the DDL, right before it, and that
//!   connection is closed after the DDL (never returned to the pool), so the sink's own
//!   session (its `sql_mode`, collations, time zone, no current database) is what every other
//!   statement runs under;
//! - a DDL without session settings (recorded before capture read them) runs under the sink's
//!   own session, as before;
//! - collations travel by id (the QUERY event has only ids) and are named by the downstream's
//!   `information_schema.COLLATIONS`; an id the downstream does not know keeps the sink's own
//!   collation for that setting (documented in docs/sinks.md).

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use sluice_types::DdlSession;

/// A string literal for a `SET` (MariaDB's quoting, also valid in MySQL).
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// `sql_mode = …` as given: names are quoted, a number (bits capture could not name) is not.
fn sql_mode_assignment(mode: &str) -> String {
    if !mode.is_empty() && mode.bytes().all(|b| b.is_ascii_digit()) {
        format!("SESSION sql_mode = {mode}")
    } else {
        format!("SESSION sql_mode = {}", literal(mode))
    }
}

/// The assignments of one `SET` statement for `session`, collation names already looked up.
pub fn set_statement(session: &DdlSession, collations: &[(u16, String)]) -> Option<String> {
    let name = |id: Option<u16>| {
        id.and_then(|id| collations.iter().find(|(i, _)| *i == id))
            .map(|(_, n)| literal(n))
    };
    let mut parts = Vec::new();
    if let Some(mode) = &session.sql_mode {
        parts.push(sql_mode_assignment(mode));
    }
    if let Some(n) = name(session.collation_server) {
        parts.push(format!("SESSION collation_server = {n}"));
    }
    if let Some(n) = name(session.collation_connection) {
        parts.push(format!("SESSION collation_connection = {n}"));
    }
    if let Some(tz) = &session.time_zone {
        parts.push(format!("SESSION time_zone = {}", literal(tz)));
    }
    if session.no_foreign_key_checks {
        parts.push("SESSION foreign_key_checks = 0".to_string());
    }
    (!parts.is_empty()).then(|| format!("SET {}", parts.join(", ")))
}

/// Sets `session` on `c` (the connection the DDL runs on next). On MariaDB also
/// `system_versioning_alter_history = KEEP`: the upstream logged the DDL only if it succeeded
/// there, so an ALTER of a system-versioned table ran under KEEP upstream (the setting is not
/// in the binlog); MySQL has no such variable (error 1193, ignored).
pub async fn enter(c: &mut Conn, session: &DdlSession) -> Result<(), mysql_async::Error> {
    match c
        .query_drop("SET SESSION system_versioning_alter_history = KEEP")
        .await
    {
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => {}
        other => other?,
    }
    if session.is_empty() {
        return Ok(());
    }
    let ids: Vec<u16> = [session.collation_server, session.collation_connection]
        .into_iter()
        .flatten()
        .collect();
    let collations: Vec<(u16, String)> = if ids.is_empty() {
        Vec::new()
    } else {
        let list: Vec<String> = ids.iter().map(u16::to_string).collect();
        c.query(format!(
            "SELECT ID, COLLATION_NAME FROM information_schema.COLLATIONS WHERE ID IN ({})",
            list.join(", ")
        ))
        .await?
    };
    match set_statement(session, &collations) {
        Some(sql) => c.query_drop(sql).await,
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_statement_carries_every_setting() {
        let s = DdlSession {
            sql_mode: Some("PIPES_AS_CONCAT,ANSI_QUOTES,MAXDB".into()),
            collation_server: Some(8),
            collation_connection: Some(45),
            time_zone: Some("+02:00".into()),
            no_foreign_key_checks: true,
            expected_error: None,
        };
        let names = [(8, "latin1_swedish_ci".to_string())];
        assert_eq!(
            set_statement(&s, &names).as_deref(),
            Some(
                "SET SESSION sql_mode = 'PIPES_AS_CONCAT,ANSI_QUOTES,MAXDB', \
                 SESSION collation_server = 'latin1_swedish_ci', SESSION time_zone = '+02:00', \
                 SESSION foreign_key_checks = 0"
            )
        );
        let bits = DdlSession {
            sql_mode: Some("1099511627777".into()),
            ..DdlSession::default()
        };
        assert_eq!(
            set_statement(&bits, &[]).as_deref(),
            Some("SET SESSION sql_mode = 1099511627777")
        );
        let empty_mode = DdlSession {
            sql_mode: Some(String::new()),
            ..DdlSession::default()
        };
        assert_eq!(
            set_statement(&empty_mode, &[]).as_deref(),
            Some("SET SESSION sql_mode = ''")
        );
        assert_eq!(set_statement(&DdlSession::default(), &[]), None);
    }
}
