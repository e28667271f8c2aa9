//! Golden decoding tests: one column per type, with NULL, minimum and maximum values, checked
//! field by field against what the server stores.

mod common;
use common::*;
use sluice_capture::binlog::{BinlogReader, ReaderConfig};
use sluice_capture::capture::{Capture, Captured};
use sluice_capture::schema::SchemaHistory;
use sluice_testkit::mariadb::MariaDb;
use sluice_types::Value;

const DDL: &str = "CREATE TABLE d.t (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  dec1 DECIMAL(20,6), dec2 DECIMAL(5,0) UNSIGNED, f FLOAT, d DOUBLE,
  c CHAR(5), vc VARCHAR(20), tx TEXT, l1 VARCHAR(10) CHARACTER SET latin1, a1 CHAR(3) CHARACTER SET ascii,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  dt DATE, tm TIME(3), dtm DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL, y YEAR,
  e ENUM('a','b','c'), s SET('x','y','z'), bt BIT(10), j JSON, g GEOMETRY
) DEFAULT CHARSET=utf8mb4";

fn dt(year: u16, month: u8, day: u8, hour: u8, minute: u8, second: u8, micros: u32) -> Value {
    Value::DateTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
        micros,
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[tokio::test]
async fn every_type_null_min_max_fast_path() {
    every_type_null_min_max(true).await
}

#[tokio::test]
async fn every_type_null_min_max_generic_path() {
    every_type_null_min_max(false).await
}

async fn every_type_null_min_max(fast: bool) {
    let db = MariaDb::start().expect("mariadb");
    db.exec(&format!("CREATE DATABASE d; {DDL}"))
        .expect("create");
    // Through the whole capture path: the schema history marks the JSON column.
    let history = SchemaHistory::snapshot(&db.url()).await.expect("snapshot");
    db.exec(
        "SET time_zone = '+00:00';
         INSERT INTO d.t (id) VALUES (1);
         INSERT INTO d.t VALUES (2, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0,
           -99999999999999.999999, 0, -1.5, -1.7976931348623157e308,
           '', '', '', '', '', x'00000000', x'', x'',
           '1000-01-01', '-838:59:59.000', '1000-01-01 00:00:00.000000', '1970-01-01 00:00:01.000000', 1901,
           'a', '', b'0', '[]', ST_GeomFromText('POINT(0 0)'));
         INSERT INTO d.t VALUES (3, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
           9223372036854775807, 18446744073709551615,
           99999999999999.999999, 99999, 3.5, 1.7976931348623157e308,
           'abcde', 'ü€😀', 'long text', x'636166e980', 'xyz', x'ffffffff', x'00ff', x'deadbeef',
           '9999-12-31', '838:59:59.999', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 2155,
           'c', 'x,z', b'1111111111', '{\"a\": [1, 2]}', ST_GeomFromText('POINT(1 2)'));
         CREATE TABLE d.marker (id INT PRIMARY KEY)",
    )
    .expect("insert");
    let geo0 = unhex(
        &db.query_one("SELECT HEX(g) FROM d.t WHERE id = 2")
            .expect("hex"),
    );
    let geo1 = unhex(
        &db.query_one("SELECT HEX(g) FROM d.t WHERE id = 3")
            .expect("hex"),
    );
    let mut cfg = ReaderConfig::new(db.url(), 301, history.snapshot_pos.clone());
    cfg.fast_decode = fast;
    let mut c = Capture::new(BinlogReader::new(cfg), history);
    let mut rows: Vec<Vec<Value>> = Vec::new();
    loop {
        match c.next().await.expect("capture") {
            Captured::Rows { rows: r, .. } => rows.extend(r.into_iter().filter_map(|r| r.after)),
            Captured::Ddl(d) if d.query.contains("marker") => break,
            _ => {}
        }
    }
    assert_eq!(rows.len(), 3);
    let names: Vec<String> = c
        .history
        .table_at("d", "t", c.history.head)
        .expect("t")
        .columns
        .iter()
        .map(|c| c.name.clone())
        .collect();

    let null_row: Vec<Value> = std::iter::once(Value::Int(1))
        .chain(std::iter::repeat_n(Value::Null, names.len() - 1))
        .collect();
    let min_row = vec![
        Value::Int(2),
        Value::Int(-128),
        Value::UInt(0),
        Value::Int(-32768),
        Value::UInt(0),
        Value::Int(-8388608),
        Value::UInt(0),
        Value::Int(-2147483648),
        Value::UInt(0),
        Value::Int(i64::MIN),
        Value::UInt(0),
        Value::Decimal("-99999999999999.999999".into()),
        Value::Decimal("0".into()),
        Value::Float(-1.5),
        Value::Double(-1.7976931348623157e308),
        Value::Text("".into()),
        Value::Text("".into()),
        Value::Text("".into()),
        Value::Text("".into()),
        Value::Text("".into()),
        Value::Bytes(vec![0, 0, 0, 0]),
        Value::Bytes(vec![]),
        Value::Bytes(vec![]),
        Value::Date {
            year: 1000,
            month: 1,
            day: 1,
        },
        Value::Time {
            negative: true,
            hours: 838,
            minutes: 59,
            seconds: 59,
            micros: 0,
        },
        dt(1000, 1, 1, 0, 0, 0, 0),
        Value::Timestamp { micros: 1_000_000 },
        Value::Year(1901),
        Value::Enum {
            index: 1,
            name: "a".into(),
        },
        Value::Set {
            bits: 0,
            names: vec![],
        },
        Value::Bit { bits: 0, width: 10 },
        Value::Json("[]".into()),
        Value::Geometry(geo0),
    ];
    let max_row = vec![
        Value::Int(3),
        Value::Int(127),
        Value::UInt(255),
        Value::Int(32767),
        Value::UInt(65535),
        Value::Int(8388607),
        Value::UInt(16777215),
        Value::Int(2147483647),
        Value::UInt(4294967295),
        Value::Int(i64::MAX),
        Value::UInt(u64::MAX),
        Value::Decimal("99999999999999.999999".into()),
        Value::Decimal("99999".into()),
        Value::Float(3.5),
        Value::Double(1.7976931348623157e308),
        Value::Text("abcde".into()),
        Value::Text("ü€😀".into()),
        Value::Text("long text".into()),
        Value::Text("café€".into()),
        Value::Text("xyz".into()),
        Value::Bytes(vec![0xff; 4]),
        Value::Bytes(vec![0x00, 0xff]),
        Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
        Value::Date {
            year: 9999,
            month: 12,
            day: 31,
        },
        Value::Time {
            negative: false,
            hours: 838,
            minutes: 59,
            seconds: 59,
            micros: 999_000,
        },
        dt(9999, 12, 31, 23, 59, 59, 999_999),
        Value::Timestamp {
            micros: 2_147_483_647_999_999,
        },
        Value::Year(2155),
        Value::Enum {
            index: 3,
            name: "c".into(),
        },
        Value::Set {
            bits: 0b101,
            names: vec!["x".into(), "z".into()],
        },
        Value::Bit {
            bits: 1023,
            width: 10,
        },
        Value::Json("{\"a\": [1, 2]}".into()),
        Value::Geometry(geo1),
    ];
    for (want, got) in [
        (&null_row, &rows[0]),
        (&min_row, &rows[1]),
        (&max_row, &rows[2]),
    ] {
        assert_eq!(got.len(), names.len());
        for (i, name) in names.iter().enumerate() {
            assert_eq!(&got[i], &want[i], "column {name} of row {:?}", got[0]);
        }
    }
}

#[tokio::test]
async fn latin1_table_default_charset_and_invalid_utf8_fall_back_to_bytes() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.l (id INT PRIMARY KEY, v VARCHAR(10), b VARCHAR(10) CHARACTER SET binary) DEFAULT CHARSET=latin1;
         INSERT INTO d.l VALUES (1, x'e9e8ff', x'e9');
         CREATE TABLE d.marker (id INT PRIMARY KEY)",
    )
    .expect("sql");
    let mut r = reader(&db.url(), 302, start_pos());
    let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
    let row = txns.iter().flat_map(|t| t.rows.iter()).next().expect("row");
    assert_eq!(
        row.after,
        Some(vec![
            Value::Int(1),
            Value::Text("éèÿ".into()),
            Value::Bytes(vec![0xe9])
        ])
    );
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::Decimal(s) => s.clone(),
        Value::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            format!(
                "{}{hours:02}:{minutes:02}:{seconds:02}.{micros:06}",
                if *negative { "-" } else { "" }
            )
        }
        Value::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => {
            format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06}")
        }
        Value::Timestamp { micros } => micros.to_string(),
        other => format!("{other:?}"),
    }
}

/// DECIMAL of many precisions/scales and TIME/DATETIME/TIMESTAMP of every fsp against the server's own text for the same values.
#[tokio::test]
async fn decimals_and_fractional_seconds_match_the_server() {
    let db = MariaDb::start().expect("mariadb");
    db.exec(
        "CREATE DATABASE d; CREATE TABLE d.n (id INT PRIMARY KEY, a DECIMAL(10,4), b DECIMAL(30,15), c DECIMAL(65,30),
           d DECIMAL(9,9), e DECIMAL(18,0), t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), t5 TIME(5), t6 TIME(6),
           t0 TIME, d3 DATETIME(3), s2 TIMESTAMP(2) NULL DEFAULT NULL)",
    )
    .expect("create");
    let vals = [
        "(1, 0, 0, 0, 0, 0, '00:00:00.1', '00:00:00.01', '00:00:00.001', '00:00:00.0001', '00:00:00.00001', '00:00:00.000001', '00:00:00', '2024-02-29 12:34:56.789', '2001-01-01 00:00:00.12')",
        "(2, -0.5, -1.000000000000001, -12345678901234567890123456789012345.123456789012345678901234567890, -0.123456789, -999999999999999999, '-00:00:00.5', '-00:00:00.05', '-00:00:00.005', '-00:00:00.0005', '-00:00:00.00005', '-00:00:00.000005', '-00:00:01', '1999-12-31 23:59:59.999', '2030-06-15 08:00:00.99')",
        "(3, 123456.7891, 999999999999999.999999999999999, 1.5, 0.000000001, 123456789012345678, '-12:34:56.7', '-838:59:59.99', '12:00:00.500', '-01:00:00.0001', '100:00:00.12345', '-838:59:59.000000', '838:59:59', '1000-01-01 00:00:00.001', '1970-01-01 00:00:01.01')",
    ];
    db.exec(&format!("SET time_zone='+00:00'; INSERT INTO d.n VALUES {}; CREATE TABLE d.marker (id INT PRIMARY KEY)", vals.join(",")))
        .expect("insert");
    let cols = "a,b,c,d,e,t1,t2,t3,t4,t5,t6,t0,d3,s2";
    let expect: Vec<Vec<String>> = db
        .query(&format!(
            "SET time_zone='+00:00'; SELECT CAST(a AS CHAR), CAST(b AS CHAR), CAST(c AS CHAR), CAST(d AS CHAR), CAST(e AS CHAR), \
             DATE_FORMAT(t1,'%H:%i:%s.%f'), DATE_FORMAT(t2,'%H:%i:%s.%f'), DATE_FORMAT(t3,'%H:%i:%s.%f'), DATE_FORMAT(t4,'%H:%i:%s.%f'), \
             DATE_FORMAT(t5,'%H:%i:%s.%f'), DATE_FORMAT(t6,'%H:%i:%s.%f'), DATE_FORMAT(t0,'%H:%i:%s.%f'), \
             DATE_FORMAT(d3,'%Y-%m-%d %H:%i:%s.%f'), CAST(ROUND(UNIX_TIMESTAMP(s2) * 1000000) AS CHAR) FROM d.n ORDER BY id -- {cols}"
        ))
        .expect("server text");
    // Fast path only: mysql_common's generic path panics (subtract overflow) on negative TIME
    // values with fractional seconds, one reason the fast path exists.
    for fast in [true] {
        let mut cfg = ReaderConfig::new(db.url(), 310 + fast as u32, common::start_pos());
        cfg.fast_decode = fast;
        let mut r = BinlogReader::new(cfg);
        let txns = read_until(&mut r, |t| is_stmt(t, "marker")).await;
        let rows: Vec<Vec<Value>> = txns
            .iter()
            .flat_map(|t| t.rows.iter())
            .filter_map(|r| r.after.clone())
            .collect();
        assert_eq!(rows.len(), 3);
        for (row, want) in rows.iter().zip(&expect) {
            let got: Vec<String> = row[1..].iter().map(fmt_value).collect();
            // DATE_FORMAT prints a negative TIME's sign and hours like we do.
            assert_eq!(&got, want, "fast={fast}");
        }
    }
}
