//! End-to-end, on a single-node `sluice server` against real MariaDB instances: string columns
//! in charsets capture does not turn into text (koi8r, cp1251, gbk, sjis, ucs2, utf16, a koi8r
//! key) reach a MySQL downstream byte for byte: inserts in bulk (`LOAD DATA`) and one by one,
//! updates and deletes found by such a key, and a keyless table whose rows are found by every
//! column. Before the fix their bytes were bound as the connection's utf8mb4 and mangled
//! silently (found by the MariaDB suite replay through the sink, `alter_table.test` koi8r).
//! And a DDL sent by a `SET NAMES latin1` session (its text in latin1 bytes) reaches the
//! downstream with its characters (defaults, comments, ENUM values), not U+FFFD, and rows of
//! latin1 ENUM/SET columns keep their members.

mod common;
use common::*;
use sluice_testkit::mariadb::MariaDb;

const TABLES: &str = "CREATE DATABASE cs;
    CREATE TABLE cs.k (k VARCHAR(20) CHARACTER SET koi8r PRIMARY KEY, v TEXT CHARACTER SET cp1251,
        g VARCHAR(20) CHARACTER SET gbk, s CHAR(10) CHARACTER SET sjis,
        u VARCHAR(20) CHARACTER SET ucs2, w TEXT CHARACTER SET utf16, n INT);
    CREATE TABLE cs.nokey (a VARCHAR(20) CHARACTER SET koi8r, b TEXT CHARACTER SET cp1251);";

/// `HEX` of every column of every row, in key order: what the bytes are, whatever the charset.
fn rows(db: &MariaDb, table: &str, cols: &str) -> Vec<Vec<String>> {
    let hexed: Vec<String> = cols
        .split(',')
        .map(|c| format!("IFNULL(HEX({c}), 'NULL')"))
        .collect();
    db.query(&format!(
        "SELECT {} FROM cs.{table} ORDER BY {}",
        hexed.join(", "),
        cols
    ))
    .expect("rows")
}

/// Runs `sql` (raw bytes) in a session with `SET NAMES latin1`, as a legacy client sends it.
fn run_latin1(url: &str, sql: &[u8]) {
    use mysql_async::prelude::Queryable;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(url).expect("url"))
            .await
            .expect("connect");
        c.query_drop("SET NAMES latin1").await.expect("names");
        c.query_drop(sql).await.expect("latin1 DDL");
        c.disconnect().await.expect("disconnect");
    });
}

#[test]
fn strings_in_legacy_charsets_reach_mysql_byte_for_byte() {
    let out = Outputs::default();
    let dir = tmpdir("legacy-charsets");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    create_changefeed(
        &out,
        &server.url(),
        "cs",
        &format!("{down_url}/?force-replicate=true"),
    );
    up.exec(TABLES).expect("tables");
    // Each value written in its column's charset (CONVERT from utf8mb4 text): 40 rows in one
    // transaction (a bulk load downstream), then single rows, updates and deletes by key.
    up.exec(
        "SET NAMES utf8mb4;
         INSERT INTO cs.k SELECT CONVERT(CONCAT('Ключ-', seq) USING koi8r),
             CONVERT(CONCAT('Проба ', seq) USING cp1251), CONVERT(CONCAT('汉字', seq) USING gbk),
             CONVERT(CONCAT('ｶﾀｶﾅ', seq) USING sjis), CONVERT(CONCAT('ü€', seq) USING ucs2),
             CONVERT(CONCAT('😀', seq) USING utf16), seq FROM cs.seq_1_to_40;
         INSERT INTO cs.k (k, v, n) VALUES (CONVERT('Один' USING koi8r), CONVERT('Два' USING cp1251), 0);
         UPDATE cs.k SET v = CONVERT('Обновлено' USING cp1251), g = CONVERT('更新' USING gbk)
             WHERE k = CONVERT('Ключ-7' USING koi8r);
         UPDATE cs.k SET k = CONVERT('Новый' USING koi8r) WHERE k = CONVERT('Ключ-8' USING koi8r);
         DELETE FROM cs.k WHERE k = CONVERT('Ключ-9' USING koi8r);
         INSERT INTO cs.nokey VALUES (CONVERT('Ещё' USING koi8r), CONVERT('Строка' USING cp1251)),
             (CONVERT('Ещё' USING koi8r), CONVERT('Другая' USING cp1251));
         UPDATE cs.nokey SET b = CONVERT('Изменена' USING cp1251) WHERE b = CONVERT('Другая' USING cp1251);
         DELETE FROM cs.nokey WHERE b = CONVERT('Строка' USING cp1251);",
    )
    .expect("rows");
    // 0xE9 is 'é' and 0xA4 '¤' in latin1; the text is not UTF-8.
    run_latin1(
        &up_url,
        b"CREATE TABLE cs.l (id INT PRIMARY KEY, a VARCHAR(5) DEFAULT '\xe9t\xe9' COMMENT 'co\xfbt', \
          e ENUM('\xa4', 'x') CHARACTER SET utf8mb4, f ENUM('\xe4', '\xf6'), s SET('\xe4', '\xf6')) \
          CHARSET latin1",
    );
    up.exec("INSERT INTO cs.l (id) VALUES (1)")
        .expect("latin1 row");
    // A latin1 ENUM/SET member is its latin1 byte in the TABLE_MAP: read as UTF-8 it was U+FFFD,
    // which no downstream member matches (the downstream stored '').
    run_latin1(
        &up_url,
        b"INSERT INTO cs.l (id, f, s) VALUES (2, '\xf6', '\xe4,\xf6'), (3, '\xe4', '\xf6')",
    );
    let target = master_ts(&up);
    wait_checkpoint(&out, &server.url(), "cs", target, 120);
    let definition = |db: &MariaDb| {
        db.query(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IFNULL(COLUMN_DEFAULT, '-'), COLUMN_COMMENT \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'cs' AND TABLE_NAME = 'l' \
             ORDER BY ORDINAL_POSITION",
        )
        .expect("columns")
    };
    let upstream = definition(&up);
    assert_eq!(upstream[1][2], "'été'", "{upstream:?}");
    assert_eq!(definition(&down), upstream);
    let l = "id,a,e,f,s";
    assert_eq!(rows(&up, "l", l).len(), 3);
    assert_eq!(rows(&down, "l", l), rows(&up, "l", l));
    let k = "k,v,g,s,u,w,n";
    let upstream = rows(&up, "k", k);
    assert_eq!(upstream.len(), 40, "40 inserted + 1 - 1 deleted");
    assert_eq!(rows(&down, "k", k), upstream);
    let upstream = rows(&up, "nokey", "a,b");
    assert_eq!(upstream.len(), 1);
    assert_eq!(rows(&down, "nokey", "a,b"), upstream);
    // The values are the characters, not only the same bytes somewhere: the downstream reads
    // them back as the upstream wrote them.
    assert_eq!(
        down.query_one("SELECT CONVERT(v USING utf8mb4) FROM cs.k WHERE n = 7")
            .expect("read back"),
        "Обновлено"
    );
    let r = sluice(
        &out,
        &["cli", "--server", &server.url(), "changefeed", "list"],
    );
    assert!(r.stdout.contains("normal"), "{}", r.stdout);
    drop(server);
}
