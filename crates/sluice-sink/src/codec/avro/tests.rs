use super::*;
use crate::testing::{all_types_rows, all_types_schema};

fn long_bytes(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    put_long(&mut out, v);
    out
}

#[test]
fn longs_are_zigzag_varints() {
    // The Avro specification's examples.
    assert_eq!(long_bytes(0), [0x00]);
    assert_eq!(long_bytes(-1), [0x01]);
    assert_eq!(long_bytes(1), [0x02]);
    assert_eq!(long_bytes(-2), [0x03]);
    assert_eq!(long_bytes(2), [0x04]);
    assert_eq!(long_bytes(-64), [0x7f]);
    assert_eq!(long_bytes(64), [0x80, 0x01]);
    for v in [i64::MIN, i64::MAX, -300, 300, 1 << 40] {
        let b = long_bytes(v);
        let s = RecordSchema {
            name: "r".into(),
            namespace: None,
            database: String::new(),
            table: "r".into(),
            fields: vec![FieldSchema {
                name: "x".into(),
                column: "x".into(),
                ty: AvroType::Long,
                tidb_type: None,
                decimal_scale: None,
                allowed: None,
            }],
        };
        assert_eq!(decode_record(&s, &b).expect("decodes"), [Datum::Long(v)]);
    }
}

#[test]
fn every_column_type_round_trips_through_its_schema() {
    let schema = all_types_schema("db", 3);
    let rows = all_types_rows(&schema, 99, 1_700_000_000_123);
    for o in [
        AvroOptions::default(),
        AvroOptions {
            tidb_extension: true,
            decimal_as_string: true,
            bigint_unsigned_as_string: true,
        },
    ] {
        let value = parse_record_schema(&value_schema(&schema, o).expect("schema").to_string())
            .expect("parses");
        let key = parse_record_schema(&key_schema(&schema, o).expect("schema").to_string())
            .expect("parses");
        assert_eq!(key.fields.len(), 1);
        for row in &rows {
            let body = encode_value(&schema, row, o)
                .expect("encodes")
                .expect("a value");
            let data = decode_record(&value, &body).expect("decodes");
            let after = row.after.as_ref().expect("after");
            for ((f, d), (col, v)) in value
                .fields
                .iter()
                .zip(data)
                .zip(schema.columns.iter().zip(after))
            {
                let got = column_value(f, d);
                let want = match v {
                    Value::Null => Value::Null,
                    Value::Bit { bits, .. } => Value::UInt(*bits),
                    Value::Bytes(b) | Value::Geometry(b) if super::super::is_binary(col.ty) => {
                        Value::Bytes(b.clone())
                    }
                    Value::Float(x) => Value::Text(x.to_string()),
                    other => Value::Text(value_text(other, col).expect("text")),
                };
                assert_eq!(got, want, "column {} with {o:?}", col.name);
            }
            let k = encode_key(&schema, row, o).expect("key");
            assert_eq!(
                decode_record(&key, &k).expect("key decodes"),
                [Datum::Long(
                    int_of(&schema.columns[0], &after[0]).expect("int")
                )]
            );
        }
    }
}

#[test]
fn a_delete_is_a_tombstone_and_extension_fields_follow_the_columns() {
    let schema = all_types_schema("db", 3);
    let mut row = all_types_rows(&schema, (5 << 32) | 77, 1_700_000_000_123).remove(1);
    let o = AvroOptions {
        tidb_extension: true,
        ..Default::default()
    };
    let value = parse_record_schema(&value_schema(&schema, o).expect("schema").to_string())
        .expect("parses");
    let data = decode_record(
        &value,
        &encode_value(&schema, &row, o).expect("enc").expect("v"),
    )
    .expect("decodes");
    let n = schema.columns.len();
    assert_eq!(value.fields[n].name, "_tidb_op");
    assert_eq!(
        data[n..],
        [
            Datum::String("c".into()),
            Datum::Long((5 << 32) | 77),
            Datum::Long(1_700_000_000_123)
        ]
    );
    row.snapshot = true;
    let data = decode_record(
        &value,
        &encode_value(&schema, &row, o).expect("enc").expect("v"),
    )
    .expect("decodes");
    assert_eq!(data[n], Datum::String("r".into()), "a snapshot read");
    row.kind = RowKind::Delete;
    row.before = row.after.take();
    assert_eq!(encode_value(&schema, &row, o).expect("delete"), None);
    assert!(!encode_key(&schema, &row, o).expect("key").is_empty());
}

#[test]
fn names_tables_without_keys_and_bad_bodies_are_handled() {
    let mut schema = all_types_schema("my-db", 3);
    schema.columns[1].name = "1st col".into();
    let v = value_schema(&schema, AvroOptions::default()).expect("schema");
    assert_eq!(v["namespace"], "my_db");
    assert_eq!(v["fields"][1]["name"], "_1st_col");
    assert_eq!(v["fields"][1]["sluice.column"], "1st col");
    let parsed = parse_record_schema(&v.to_string()).expect("parses");
    assert_eq!(parsed.fields[1].column, "1st col");
    assert_eq!(
        (parsed.database.as_str(), parsed.table.as_str()),
        ("my-db", "all_types")
    );
    schema.columns[2].name = "1st-col".into();
    let err = value_schema(&schema, AvroOptions::default()).expect_err("a clash");
    assert!(err.to_string().contains("_1st_col"), "{err}");
    schema.key_columns.clear();
    let err = key_schema(&schema, AvroOptions::default()).expect_err("no key");
    assert!(err.to_string().contains("primary key"), "{err}");
    let ok = all_types_schema("db", 1);
    let value = parse_record_schema(
        &value_schema(&ok, AvroOptions::default())
            .expect("s")
            .to_string(),
    )
    .expect("parses");
    let body = encode_value(&ok, &all_types_rows(&ok, 1, 1)[0], AvroOptions::default())
        .expect("enc")
        .expect("v");
    for cut in 0..body.len() {
        assert!(decode_record(&value, &body[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = body.clone();
    longer.push(0);
    assert!(decode_record(&value, &longer).is_err());
    assert!(unframe(&[1, 0, 0, 0, 1]).is_err());
    assert_eq!(unframe(&frame(7, b"x")).expect("framed"), (7, &b"x"[..]));
}
