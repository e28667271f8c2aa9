//! The upstream check, run at server start and at changefeed creation: everything the binlog
//! reader relies on is verified up front and each missing setting becomes one
//! [`SettingProblem`] naming the setting, its value, what is needed and how to fix it.
//!
//! Invariant: [`check_upstream`] returns `Ok` only when the upstream writes full-image,
//! full-metadata row events that this crate decodes (MariaDB's compressed events included), and
//! the connecting user may read them (replication privileges; their names differ between
//! MariaDB ≥ 10.5 and MySQL).

use crate::error::{CaptureError, Result, SettingProblem};
use mysql_async::prelude::Queryable;

/// What the check learned about the upstream (returned when it passes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamInfo {
    pub version: String,
    pub is_mariadb: bool,
    /// `NONE` or `CRC32`.
    pub checksum: String,
    pub server_id: u64,
}

async fn var(conn: &mut mysql_async::Conn, name: &str) -> Result<Option<String>> {
    // A variable the server does not have is an error 1193: report it as absent.
    let q = format!("SELECT CAST(@@{name} AS CHAR)");
    match conn.query_first::<Option<String>, _>(q).await {
        Ok(v) => Ok(v.flatten()),
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => Ok(None),
        Err(e) => Err(CaptureError::from_mysql(e)),
    }
}

fn problem(setting: &str, actual: &str, expected: &str, fix: &str) -> SettingProblem {
    SettingProblem {
        setting: setting.into(),
        actual: actual.into(),
        expected: expected.into(),
        fix: fix.into(),
    }
}

/// Connects to `url` (`mysql://user:pass@host:port`) and checks every setting capture needs.
pub async fn check_upstream(url: &str) -> Result<UpstreamInfo> {
    let opts = mysql_async::Opts::from_url(url)
        .map_err(|e| CaptureError::Connection(format!("bad url: {e}")))?;
    let addr = format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port());
    let user = opts.user().unwrap_or("").to_string();
    let mut conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| CaptureError::from_connect(&addr, &user, e))?;
    let r = check_conn(&mut conn).await;
    let _ = conn.disconnect().await;
    r
}

/// The check on an open connection.
pub async fn check_conn(conn: &mut mysql_async::Conn) -> Result<UpstreamInfo> {
    let version = var(conn, "version").await?.unwrap_or_default();
    let is_mariadb = version.to_ascii_lowercase().contains("mariadb");
    let mut problems = Vec::new();
    let cnf = if is_mariadb {
        "the [mariadbd] section of my.cnf"
    } else {
        "the [mysqld] section of my.cnf"
    };
    row_logging_problems(conn, cnf, &mut problems).await?;
    let checksum = event_encoding_problems(conn, cnf, &mut problems).await?;
    let server_id = server_id_problem(conn, cnf, &mut problems).await?;
    if let Some(p) = privilege_problem(conn, is_mariadb).await? {
        problems.push(p);
    }
    if problems.is_empty() {
        Ok(UpstreamInfo {
            version,
            is_mariadb,
            checksum,
            server_id,
        })
    } else {
        Err(CaptureError::Upstream(problems))
    }
}

/// `log_bin`, `binlog_format`, `binlog_row_image`, `binlog_row_metadata`: row events with full
/// images and full metadata.
async fn row_logging_problems(
    conn: &mut mysql_async::Conn,
    cnf: &str,
    problems: &mut Vec<SettingProblem>,
) -> Result<()> {
    let log_bin = var(conn, "log_bin").await?.unwrap_or_default();
    if !matches!(log_bin.as_str(), "1" | "ON") {
        problems.push(problem(
            "log_bin",
            if log_bin.is_empty() {
                "unknown"
            } else {
                &log_bin
            },
            "ON",
            &format!(
                "add log_bin=mysql-bin (and a unique server_id) to {cnf} and restart the server"
            ),
        ));
    }
    let format = var(conn, "binlog_format").await?.unwrap_or_default();
    if !format.eq_ignore_ascii_case("ROW") {
        problems.push(problem(
            "binlog_format",
            &format,
            "ROW",
            &format!("SET GLOBAL binlog_format=ROW and add binlog_format=ROW to {cnf}"),
        ));
    }
    let image = var(conn, "binlog_row_image").await?.unwrap_or_default();
    if !image.eq_ignore_ascii_case("FULL") {
        problems.push(problem(
            "binlog_row_image",
            &image,
            "FULL",
            &format!("SET GLOBAL binlog_row_image=FULL and add binlog_row_image=FULL to {cnf}"),
        ));
    }
    match var(conn, "binlog_row_metadata").await? {
        Some(m) if m.eq_ignore_ascii_case("FULL") => {}
        other => problems.push(problem(
            "binlog_row_metadata",
            other
                .as_deref()
                .unwrap_or("not supported (MariaDB < 10.5 / MySQL < 8.0.1)"),
            "FULL",
            &format!(
                "SET GLOBAL binlog_row_metadata=FULL and add binlog_row_metadata=FULL to {cnf}"
            ),
        )),
    }
    Ok(())
}

/// Compression, partial JSON and the checksum: events this crate can decode. Returns the
/// checksum setting.
async fn event_encoding_problems(
    conn: &mut mysql_async::Conn,
    cnf: &str,
    problems: &mut Vec<SettingProblem>,
) -> Result<String> {
    // Compression: MySQL's binlog_transaction_compression (zstd transaction payloads) is not
    // decodable; MariaDB's log_bin_compress (zlib events) is (`crate::compression`).
    let name = "binlog_transaction_compression";
    if let Some(v) = var(conn, name).await? {
        if matches!(v.as_str(), "1" | "ON") {
            problems.push(problem(
                name,
                &v,
                "OFF",
                &format!("SET GLOBAL {name}=OFF and add {name}=OFF to {cnf} (compressed transaction payloads are not decodable)"),
            ));
        }
    }
    // MySQL 8: partial JSON updates would log diffs instead of full images.
    if let Some(v) = var(conn, "binlog_row_value_options").await? {
        if v.to_ascii_uppercase().contains("PARTIAL_JSON") {
            problems.push(problem(
                "binlog_row_value_options",
                &v,
                "'' (empty)",
                &format!("SET GLOBAL binlog_row_value_options='' and add binlog_row_value_options='' to {cnf}"),
            ));
        }
    }
    let checksum = var(conn, "binlog_checksum")
        .await?
        .unwrap_or_else(|| "NONE".into())
        .to_ascii_uppercase();
    if checksum != "NONE" && checksum != "CRC32" {
        problems.push(problem(
            "binlog_checksum",
            &checksum,
            "CRC32 or NONE",
            &format!("SET GLOBAL binlog_checksum=CRC32 and add binlog_checksum=CRC32 to {cnf}"),
        ));
    }
    Ok(checksum)
}

/// A non-zero `server_id`. Returns it.
async fn server_id_problem(
    conn: &mut mysql_async::Conn,
    cnf: &str,
    problems: &mut Vec<SettingProblem>,
) -> Result<u64> {
    let server_id: u64 = var(conn, "server_id")
        .await?
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if server_id == 0 {
        problems.push(problem(
            "server_id",
            "0",
            "a non-zero id unique among the upstream's replicas",
            &format!("add server_id=1 (any unique non-zero value) to {cnf} and restart the server"),
        ));
    }

    Ok(server_id)
}

/// The privileges capture needs, for the connected account.
async fn privilege_problem(
    conn: &mut mysql_async::Conn,
    is_mariadb: bool,
) -> Result<Option<SettingProblem>> {
    let current: Option<String> = conn
        .query_first("SELECT CURRENT_USER()")
        .await
        .map_err(CaptureError::from_mysql)?;
    let current = current.unwrap_or_default();
    let (user, host) = current.rsplit_once('@').unwrap_or((current.as_str(), "%"));
    let grantee = format!("'{user}'@'{host}'");
    let privs: Vec<String> = conn
        .exec(
            "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ?",
            (grantee.clone(),),
        )
        .await
        .map_err(CaptureError::from_mysql)?;
    let has = |p: &str| privs.iter().any(|x| x.eq_ignore_ascii_case(p));
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") {
        missing.push("REPLICATION SLAVE");
    }
    // SHOW MASTER STATUS / SHOW BINARY LOGS: BINLOG MONITOR on MariaDB >= 10.5 (the old
    // REPLICATION CLIENT is an alias of it there), REPLICATION CLIENT on MySQL.
    if is_mariadb {
        if !has("BINLOG MONITOR") && !has("REPLICATION CLIENT") && !has("SUPER") {
            missing.push("BINLOG MONITOR");
        }
    } else if !has("REPLICATION CLIENT") && !has("SUPER") {
        missing.push("REPLICATION CLIENT");
    }
    if !has("SELECT") {
        missing.push("SELECT");
    }
    if missing.is_empty() {
        return Ok(None);
    }
    Ok(Some(problem(
        "privileges",
        &format!("{grantee} has [{}]", privs.join(", ")),
        &missing.join(", "),
        &format!("GRANT {} ON *.* TO {grantee}", missing.join(", ")),
    )))
}
