//! What users read: each message says what failed, where, and what to do, once. A bad sink URI
//! says "invalid sink URI" once; a downstream that refuses the login says so, naming address and
//! user (not "create progress tables"); an unreachable server is named with the operating
//! system's message (not `Input/output error: Input/output error: …`); `sluice check` names the
//! side that failed; a second server on a data dir names the first; `split-table` that the
//! maintainer would reject is refused with the reason; `changefeed tables` names the tables;
//! schema files keep the case of ENUM values; every metric has HELP; every option of the
//! table commands has help text. Every output is searched for the test passwords.

mod common;
use common::*;
use serde_json::json;
use std::process::Command;

/// A password no server accepts (it must not appear in any output either).
const WRONG_PASS: &str = "Wrong-s3cret-5512";

fn error_msg(v: &serde_json::Value) -> String {
    v["error_msg"].as_str().unwrap_or("").to_string()
}

fn create_refused(out: &Outputs, s: &str, id: &str, sink: &str) -> String {
    let (st, v) = api(
        out,
        s,
        "POST",
        "/api/v2/changefeeds",
        Some(&json!({"changefeed_id": id, "sink_uri": sink})),
    );
    assert_eq!(
        (st, v["error_code"].as_str()),
        (400, Some("CDC:ErrSinkURIInvalid")),
        "{v}"
    );
    error_msg(&v)
}

#[test]
fn sink_check_and_upstream_errors_say_what_failed_once() {
    let out = Outputs::default();
    let dir = tmpdir("msg-sink");
    let (_up, up_url) = mariadb_with_user(UP_PASS);
    let (down, down_url) = mariadb_with_user(DOWN_PASS);
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    let dead = free_port();

    let m = create_refused(&out, &s, "bad1", "foo://x");
    assert_eq!(m.matches("invalid sink URI").count(), 1, "{m}");

    let wrong = format!("mysql://sluice:{WRONG_PASS}@127.0.0.1:{}/", down.port());
    let m = create_refused(&out, &s, "bad2", &wrong);
    let at = format!("127.0.0.1:{}", down.port());
    assert!(
        m.contains(&format!(
            "the downstream at {at} refused the login of user `sluice`"
        )),
        "{m}"
    );
    assert!(
        m.contains("1045") && m.contains("sink URI") && !m.contains("progress tables"),
        "{m}"
    );

    let m = create_refused(
        &out,
        &s,
        "bad3",
        &format!("mysql://sluice:{DOWN_PASS}@127.0.0.1:{dead}/?max-retries=0"),
    );
    assert!(
        m.contains(&format!(
            "cannot connect to the downstream at 127.0.0.1:{dead} as user `sluice`"
        )),
        "{m}"
    );
    assert!(!m.contains("Input/output error"), "{m}");
    let (_, v) = api(&out, &s, "GET", "/api/v2/changefeeds", None);
    assert_eq!(v["total"], 0, "a refused create changed nothing: {v}");

    // `sluice check`: the side that failed, by name.
    let r = check(
        &out,
        &format!("mysql://sluice:{UP_PASS}@127.0.0.1:{dead}"),
        &down_url,
        "",
    );
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "cannot connect to the upstream at 127.0.0.1:{dead} as user `sluice`"
        )),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("downstream") && !r.stderr.contains("Input/output error"),
        "{}",
        r.stderr
    );
    let r = check(&out, &up_url, &wrong, "");
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "the downstream at {at} refused the login of user `sluice`"
        )),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--downstream"), "{}", r.stderr);

    // A server whose upstream cannot be reached on its first start.
    let fresh = tmpdir("msg-noup");
    let o = Command::new(BIN)
        .args([
            "server",
            "--addr",
            &format!("127.0.0.1:{}", free_port()),
            "--data-dir",
        ])
        .arg(fresh.join("data"))
        .args([
            "--upstream",
            &format!("mysql://sluice:{UP_PASS}@127.0.0.1:{dead}"),
        ])
        .output()
        .expect("run server");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    out.add(&err);
    out.add(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "cannot connect to 127.0.0.1:{dead} as user `sluice`"
        )),
        "{err}"
    );
    assert!(
        !err.contains("Input/output error") && !err.contains("upstream: upstream"),
        "{err}"
    );
    out.assert_no_secret(&[&server.log]);
    let all = std::fs::read_to_string(&server.log).unwrap_or_default() + &err;
    assert!(
        !all.contains(WRONG_PASS),
        "the wrong password appears in the output"
    );
}

#[test]
fn a_second_server_on_a_data_dir_names_the_first() {
    let out = Outputs::default();
    let dir = tmpdir("msg-lock");
    let (_up, up_url) = mariadb_with_user(UP_PASS);
    let mut first = Server::start(&dir, &up_url);
    let pid = first
        .child
        .as_ref()
        .map(|c| c.id())
        .expect("first server's pid");
    let o = Command::new(BIN)
        .args([
            "server",
            "--addr",
            &format!("127.0.0.1:{}", free_port()),
            "--data-dir",
        ])
        .arg(&first.data_dir)
        .args(["--upstream", &up_url])
        .output()
        .expect("run second server");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    out.add(&err);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("in use by another sluice server"), "{err}");
    assert!(
        err.contains(&format!("pid {pid}, API address {}", first.addr)),
        "{err}"
    );
    assert!(!err.contains("Database already open"), "{err}");
    // The first one is untouched, and after a kill -9 the dir can be taken again.
    let (st, _) = api(&out, &first.url(), "GET", "/api/v2/health", None);
    assert_eq!(st, 200);
    first.kill9();
    first.restart_after_kill();
    let (st, _) = api(&out, &first.url(), "GET", "/api/v2/health", None);
    assert_eq!(st, 200);
    out.assert_no_secret(&[&first.log]);
}

/// The options of `sluice cli changefeed <sub> --help` that have no help text.
fn options_without_help(sub: &str) -> Vec<String> {
    let o = Command::new(BIN)
        .args(["cli", "changefeed", sub, "--help"])
        .output()
        .expect("help");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && text.contains("Options:"),
        "{sub}: {text}"
    );
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .skip(1)
        .collect();
    let mut bare = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        // `--name <VALUE>  help`, or the help on the next, deeper-indented line.
        let has_text = t.split("  ").skip(1).any(|w| !w.trim().is_empty());
        let next_is_help = lines.get(i + 1).is_some_and(|n| {
            let nt = n.trim_start();
            !nt.is_empty() && !nt.starts_with('-') && n.len() - nt.len() > l.len() - t.len()
        });
        if !has_text && !next_is_help {
            bare.push(format!("{sub}: {}", t.trim()));
        }
    }
    bare
}

#[test]
fn table_commands_metrics_and_schema_files_read_right() {
    let out = Outputs::default();
    let dir = tmpdir("msg-tables");
    let (up, up_url) = mariadb_with_user(UP_PASS);
    up.exec("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT); CREATE TABLE d.nokey (v INT); INSERT INTO d.t VALUES (1,1); INSERT INTO d.nokey VALUES (1);")
        .expect("setup");
    let server = Server::start(&dir, &up_url);
    let s = server.url();
    let files = dir.join("out");
    let sink = format!(
        "file://{}?protocol=canal-json&flush-interval=200ms",
        files.display()
    );
    create_changefeed(&out, &s, "cf", &sink);
    up.exec("CREATE TABLE d.o (id INT PRIMARY KEY, st ENUM('new','paid','Shipped'), tags SET('a','B')); INSERT INTO d.o VALUES (1,'paid','a,B');")
        .expect("enum table");
    wait_checkpoint(&out, &s, "cf", master_ts(&up), 60);

    // changefeed tables: ids and names, each table once.
    let (st, v) = api(&out, &s, "GET", "/api/v2/changefeeds/cf/tables", None);
    assert_eq!(st, 200, "{v}");
    let names: Vec<String> = v["items"][0]["table_names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let ids: Vec<u64> = v["items"][0]["table_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n.as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(names.len(), ids.len(), "{v}");
    for t in ["d.t", "d.nokey", "d.o"] {
        assert!(names.iter().any(|n| n == t), "{t} missing: {v}");
    }
    let id_of = |name: &str| ids[names.iter().position(|n| n == name).unwrap_or(0)];
    let r = sluice(
        &out,
        &["cli", "--server", &s, "changefeed", "tables", "-c", "cf"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("TABLE_NAMES") && r.stdout.contains("d.nokey"),
        "{}",
        r.stdout
    );

    // split-table that the maintainer would reject: refused, with the reason.
    let t = id_of("d.t").to_string();
    let r = sluice(
        &out,
        &[
            "cli",
            "--server",
            &s,
            "changefeed",
            "split-table",
            "-c",
            "cf",
            "--table-id",
            &t,
            "--spans",
            "2",
        ],
    );
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("accepted"), "{}", r.stdout);
    assert!(
        r.stderr.contains("d.t")
            && r.stderr.contains("1 region(s)")
            && r.stderr.contains("region-size-bytes"),
        "{}",
        r.stderr
    );
    let (st, v) = api(
        &out,
        &s,
        "POST",
        "/api/v2/changefeeds/cf/split_table",
        Some(&json!({"table_id": id_of("d.nokey"), "spans": 2})),
    );
    assert_eq!(st, 400, "{v}");
    assert!(error_msg(&v).contains("no primary key"), "{v}");
    let (_, v) = api(&out, &s, "GET", "/api/v2/changefeeds/cf/spans", None);
    assert_eq!(v["total"], 3, "nothing was split: {v}");

    // The schema file of d.o keeps the values' case.
    let meta = files.join("d").join("o").join("meta");
    let schema: String = std::fs::read_dir(&meta)
        .expect("schema dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("schema_"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(schema.contains("ENUM('new','paid','Shipped')"), "{schema}");
    assert!(schema.contains("SET('a','B')"), "{schema}");

    // Every metric has HELP.
    let (st, v) = api_raw(&s, "GET", "/metrics", None).expect("metrics");
    let text = v.as_str().unwrap_or_default().to_string();
    assert_eq!(st, 200);
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(typed.len() > 10, "{text}");
    for name in typed {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP:\n{text}"
        );
    }

    // Every option of the changefeed commands has help text.
    let bare: Vec<String> = [
        "create",
        "update",
        "move-table",
        "split-table",
        "merge-table",
        "tables",
    ]
    .iter()
    .flat_map(|s| options_without_help(s))
    .collect();
    assert!(bare.is_empty(), "options without help: {bare:?}");
    out.assert_no_secret(&[&server.log]);
}
