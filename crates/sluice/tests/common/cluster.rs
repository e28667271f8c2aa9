//! Several `sluice server` nodes on one etcd, and what the failover tests read of them through
//! the API only: spans (the maintainer's view), dispatchers (the nodes' own reports), the
//! maintainer's address, table requests, runtime holds.

use super::*;
use serde_json::{json, Value};
use std::path::PathBuf;

pub struct Cluster {
    pub servers: Vec<Server>,
    pub dirs: Vec<ScratchDir>,
    /// The changefeed the helpers read.
    pub cf: String,
}

impl Cluster {
    /// `n` servers on one etcd with runtime holds and tiny regions (a split has boundaries to
    /// cut at), once all of them are registered.
    pub fn start(tag: &str, n: usize, up_url: &str, etcd_url: &str, cf: &str) -> Cluster {
        let dirs: Vec<ScratchDir> = (0..n).map(|i| tmpdir(&format!("{tag}{i}"))).collect();
        let servers: Vec<Server> = dirs
            .iter()
            .map(|d| {
                let toml = d.join("server.toml");
                std::fs::write(&toml, "region-size-bytes = 1\n").expect("server toml");
                let toml = toml.to_string_lossy().to_string();
                let args = [
                    "--etcd",
                    etcd_url,
                    "--enable-debug-holds",
                    "--config",
                    &toml,
                ];
                Server::start_with(d, up_url, &args)
            })
            .collect();
        let c = Cluster {
            servers,
            dirs,
            cf: cf.to_string(),
        };
        c.wait_captures(n);
        c
    }

    pub fn wait_captures(&self, n: usize) {
        wait_for(&format!("{n} captures"), 60, || {
            let (_, v) = api_raw(&self.live(), "GET", "/api/v2/captures", None)?;
            (v["items"].as_array().map(|a| a.len()) == Some(n))
                .then_some(())
                .ok_or(v.to_string())
        });
    }

    /// A live server's URL.
    pub fn live(&self) -> String {
        self.servers
            .iter()
            .find(|s| s.child.is_some())
            .map(|s| s.url())
            .unwrap_or_default()
    }

    /// Creates the changefeed with a `[scheduler]` section.
    pub fn create(&self, out: &Outputs, sink: &str, scheduler: &str) {
        self.create_as(out, &self.cf, sink, scheduler)
    }

    /// Creates changefeed `cf` (another than the one the helpers read) with a `[scheduler]`
    /// section.
    pub fn create_as(&self, out: &Outputs, cf: &str, sink: &str, scheduler: &str) {
        self.create_toml(out, cf, sink, &format!("[scheduler]\n{scheduler}"))
    }

    /// Creates changefeed `cf` with this whole changefeed TOML.
    pub fn create_toml(&self, out: &Outputs, cf: &str, sink: &str, toml: &str) {
        let cfg = self.servers[0]
            .data_dir
            .with_file_name(format!("{cf}.toml"));
        std::fs::write(&cfg, toml).expect("cf toml");
        let r = sluice(
            out,
            &[
                "cli",
                "--server",
                &self.live(),
                "changefeed",
                "create",
                "-c",
                cf,
                "--sink-uri",
                sink,
                "--config",
                &cfg.to_string_lossy(),
            ],
        );
        assert_eq!(r.code, 0, "create: {} {}", r.stdout, r.stderr);
    }

    fn get(&self, out: &Outputs, what: &str) -> Result<Value, String> {
        let path = format!("/api/v2/changefeeds/{}{what}", self.cf);
        let (st, v) = api_raw(&self.live(), "GET", &path, None)?;
        out.add(&v.to_string());
        (st == 200).then_some(v.clone()).ok_or(format!("{st} {v}"))
    }

    /// The changefeed as the API shows it.
    pub fn changefeed(&self, out: &Outputs) -> Result<Value, String> {
        self.get(out, "")
    }

    /// The spans view (answered by the current maintainer, wherever the call lands).
    pub fn spans(&self, out: &Outputs) -> Result<Value, String> {
        self.get(out, "/spans")
    }

    /// The dispatchers every node reports itself.
    pub fn dispatchers(&self, out: &Outputs) -> Result<Value, String> {
        self.get(out, "/dispatchers")
    }

    pub fn table_id(&self, out: &Outputs, name: &str) -> u64 {
        wait_for(&format!("{name} in the spans"), 60, || {
            let v = self.spans(out)?;
            v["items"]
                .as_array()
                .and_then(|a| a.iter().find(|i| i["table_name"] == name))
                .and_then(|i| i["table_id"].as_u64())
                .ok_or(v.to_string())
        })
    }

    /// The table's spans once exactly `n` of them replicate with no operator.
    pub fn wait_spans(&self, out: &Outputs, t: u64, n: usize, secs: u64) -> Vec<Value> {
        wait_for(&format!("table {t} in {n} span(s)"), secs, || {
            let v = self.spans(out)?;
            let items = of_table(&v, t);
            let settled = items.len() == n
                && items.iter().all(|i| {
                    (i["state"] == "replicating" || i["state"] == "snapshotting")
                        && i["operator"].is_null()
                });
            settled.then_some(items).ok_or(v.to_string())
        })
    }

    /// POST a table request and expect 202 (retried while, e.g., the maintainer's node does not
    /// know the table's regions yet).
    pub fn request(&self, out: &Outputs, kind: &str, body: Value) {
        wait_for(&format!("{kind} accepted"), 90, || {
            let path = format!("/api/v2/changefeeds/{}/{kind}", self.cf);
            let (st, v) = api_raw(&self.live(), "POST", &path, Some(&body))?;
            out.add(&v.to_string());
            (st == 202).then_some(()).ok_or(format!("{st} {v}"))
        });
    }

    pub fn maintainer(&self, out: &Outputs) -> Result<String, String> {
        let v = self.changefeed(out)?;
        v["maintainer_addr"]
            .as_str()
            .map(String::from)
            .ok_or(v.to_string())
    }

    /// The index of the server at `addr`.
    pub fn index_of(&self, addr: &str) -> usize {
        self.servers
            .iter()
            .position(|s| s.addr == addr)
            .unwrap_or_else(|| panic!("no server at {addr}"))
    }

    pub fn holds(&self, out: &Outputs, server: usize, body: Value) {
        let url = self.servers[server].url();
        let (st, v) = api(out, &url, "POST", "/api/v2/debug/holds", Some(&body));
        assert_eq!(st, 200, "{v}");
    }

    /// Cordons (or uncordons) the node at `addr`, through any live node.
    pub fn cordon(&self, out: &Outputs, addr: &str, on: bool) {
        let verb = if on { "cordon" } else { "uncordon" };
        let path = format!("/api/v2/captures/{addr}/{verb}");
        let (st, v) = api(out, &self.live(), "POST", &path, None);
        assert!(st < 300, "{verb}: {st} {v}");
    }

    /// No secret in any server log; servers stopped; data dirs removed.
    pub fn finish(self, out: &Outputs) {
        let logs: Vec<PathBuf> = self.servers.iter().map(|s| s.log.clone()).collect();
        let refs: Vec<&std::path::Path> = logs.iter().map(|p| p.as_path()).collect();
        out.assert_no_secret(&refs);
        // The servers stop first (fields drop in order), then the data dirs are removed.
        drop(self);
    }
}

/// The spans (or dispatchers) of table `t` in a view.
pub fn of_table(v: &Value, t: u64) -> Vec<Value> {
    v["items"]
        .as_array()
        .map(|a| a.iter().filter(|i| i["table_id"] == t).cloned().collect())
        .unwrap_or_default()
}

/// A request body naming a table.
pub fn table_body(t: u64) -> Value {
    json!({ "table_id": t })
}
