//! A schema registry for tests: the REST endpoints of Confluent's Schema Registry that a
//! producer and a consumer of Confluent Avro call, served over HTTP/1.1 on a free port of
//! 127.0.0.1 by a thread of the test process (there is no registry package to install here).
//!
//! Served: `POST /subjects/{s}/versions`, `GET /schemas/ids/{id}`, `GET /subjects`,
//! `GET /subjects/{s}/versions`, `GET /subjects/{s}/versions/latest`, `PUT /config` and
//! `PUT /config/{s}`; optional HTTP basic auth ([`Registry::start_with_auth`]).
//!
//! Invariants (Confluent's rules):
//! - one id per distinct schema text, whatever the subject; registering a schema a subject has
//!   already gives its id again and no new version;
//! - under `BACKWARD` (the default) a new version is refused with 409 when a field it adds has
//!   no `default`, or a field both have changes type: a reader of the new schema could not
//!   read the old data. `NONE` accepts anything;
//! - dropping the [`Registry`] stops it.

use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest request body accepted.
pub const MAX_BODY: usize = 16 << 20;

#[derive(Default)]
struct State {
    /// Schema texts by id - 1.
    schemas: Vec<String>,
    /// Each subject's versions: ids in order.
    subjects: BTreeMap<String, Vec<u32>>,
    /// `BACKWARD` or `NONE`, per subject (the global one under "").
    compatibility: BTreeMap<String, String>,
    /// Requests served, by "METHOD path".
    requests: Vec<String>,
}

pub struct Registry {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

struct Answer {
    status: u16,
    body: Json,
}

fn answer(status: u16, body: Json) -> Answer {
    Answer { status, body }
}

fn error(status: u16, code: u32, message: String) -> Answer {
    answer(status, json!({"error_code": code, "message": message}))
}

impl Registry {
    /// Starts a registry without auth.
    pub fn start() -> io::Result<Registry> {
        Self::serve(None)
    }

    /// Starts a registry that answers 401 unless a request carries `user:password` (basic).
    pub fn start_with_auth(user: &str, password: &str) -> io::Result<Registry> {
        Self::serve(Some(format!(
            "Basic {}",
            base64(format!("{user}:{password}").as_bytes())
        )))
    }

    fn serve(auth: Option<String>) -> io::Result<Registry> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stp.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (st, auth) = (st.clone(), auth.clone());
                        std::thread::spawn(move || {
                            let _ = connection(conn, &st, auth.as_deref());
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Registry { addr, state, stop })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The subjects registered, with their versions' ids.
    pub fn subjects(&self) -> BTreeMap<String, Vec<u32>> {
        self.state
            .lock()
            .map(|s| s.subjects.clone())
            .unwrap_or_default()
    }

    /// The schema text of `id`.
    pub fn schema(&self, id: u32) -> Option<String> {
        let s = self.state.lock().ok()?;
        s.schemas.get(id.checked_sub(1)? as usize).cloned()
    }

    /// Every request served so far ("METHOD /path").
    pub fn requests(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Serves one connection's requests (keep-alive) until it closes.
fn connection(conn: TcpStream, state: &Mutex<State>, auth: Option<&str>) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let mut length = 0usize;
        let mut authorization = None;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "authorization" => authorization = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length.min(MAX_BODY)];
        reader.read_exact(&mut body)?;
        let a = match auth {
            Some(want) if authorization.as_deref() != Some(want) => {
                error(401, 40101, "Unauthorized".into())
            }
            _ => route(state, &method, &path, &body),
        };
        let text = a.body.to_string();
        write!(
            out,
            "HTTP/1.1 {} {}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n\r\n{text}",
            a.status,
            if a.status < 300 { "OK" } else { "Error" },
            text.len()
        )?;
        out.flush()?;
    }
}

fn route(state: &Mutex<State>, method: &str, path: &str, body: &[u8]) -> Answer {
    let Ok(mut s) = state.lock() else {
        return error(500, 50001, "state lock poisoned".into());
    };
    s.requests.push(format!("{method} {path}"));
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let json_body: Json = serde_json::from_slice(body).unwrap_or(Json::Null);
    match (method, segs.as_slice()) {
        ("POST", ["subjects", subject, "versions"]) => register(&mut s, subject, &json_body),
        ("GET", ["schemas", "ids", id]) => match id
            .parse::<usize>()
            .ok()
            .and_then(|i| s.schemas.get(i.checked_sub(1)?))
        {
            Some(text) => answer(200, json!({"schema": text})),
            None => error(404, 40403, format!("Schema {id} not found")),
        },
        ("GET", ["subjects"]) => answer(200, json!(s.subjects.keys().collect::<Vec<_>>())),
        ("GET", ["subjects", subject, "versions"]) => match s.subjects.get(*subject) {
            Some(v) => answer(200, json!((1..=v.len()).collect::<Vec<_>>())),
            None => error(404, 40401, format!("Subject '{subject}' not found.")),
        },
        ("GET", ["subjects", subject, "versions", "latest"]) => match s.subjects.get(*subject) {
            Some(v) if !v.is_empty() => {
                let id = v[v.len() - 1];
                answer(
                    200,
                    json!({"subject": subject, "version": v.len(), "id": id, "schema": s.schemas[id as usize - 1]}),
                )
            }
            _ => error(404, 40401, format!("Subject '{subject}' not found.")),
        },
        ("PUT", ["config"]) => set_compatibility(&mut s, "", &json_body),
        ("PUT", ["config", subject]) => set_compatibility(&mut s, subject, &json_body),
        _ => error(404, 404, format!("no route {method} {path}")),
    }
}

fn set_compatibility(s: &mut State, subject: &str, body: &Json) -> Answer {
    match body.get("compatibility").and_then(Json::as_str) {
        Some(c @ ("BACKWARD" | "NONE")) => {
            s.compatibility.insert(subject.to_string(), c.to_string());
            answer(200, json!({"compatibility": c}))
        }
        _ => error(
            422,
            42203,
            "compatibility must be BACKWARD or NONE here".into(),
        ),
    }
}

fn register(s: &mut State, subject: &str, body: &Json) -> Answer {
    let Some(text) = body.get("schema").and_then(Json::as_str) else {
        return error(
            422,
            42201,
            "Either the input schema or one its references is invalid".into(),
        );
    };
    let Ok(new) = serde_json::from_str::<Json>(text) else {
        return error(422, 42201, "Invalid schema: not JSON".into());
    };
    let existing = s
        .schemas
        .iter()
        .position(|t| t == text)
        .map(|i| i as u32 + 1);
    let versions = s.subjects.get(subject).cloned().unwrap_or_default();
    if let Some(id) = existing.filter(|id| versions.contains(id)) {
        return answer(200, json!({"id": id}));
    }
    let rule = s
        .compatibility
        .get(subject)
        .or_else(|| s.compatibility.get(""))
        .map_or("BACKWARD", String::as_str);
    if let (Some(last), "BACKWARD") = (versions.last(), rule) {
        let old: Json = serde_json::from_str(&s.schemas[*last as usize - 1]).unwrap_or(Json::Null);
        if let Err(why) = backward(&old, &new) {
            return error(409, 409, format!("Schema being registered is incompatible with an earlier schema for subject \"{subject}\": {why}"));
        }
    }
    let id = existing.unwrap_or_else(|| {
        s.schemas.push(text.to_string());
        s.schemas.len() as u32
    });
    s.subjects.entry(subject.to_string()).or_default().push(id);
    answer(200, json!({"id": id}))
}

/// Whether a reader of `new` can read data written with `old` (the record rules above).
fn backward(old: &Json, new: &Json) -> Result<(), String> {
    let fields = |j: &Json| -> BTreeMap<String, Json> {
        j.get("fields")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .map(|f| {
                        (
                            f["name"].as_str().unwrap_or_default().to_string(),
                            f.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (old, new) = (fields(old), fields(new));
    for (name, f) in &new {
        match old.get(name) {
            None if f.get("default").is_none() => {
                return Err(format!("READER_FIELD_MISSING_DEFAULT_VALUE: {name}"))
            }
            Some(o) if o["type"] != f["type"] => return Err(format!("TYPE_MISMATCH: {name}")),
            _ => {}
        }
    }
    Ok(())
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                A[(n >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_basic_auth() {
        assert_eq!(
            base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(base64(b"ab"), "YWI=");
    }

    #[test]
    fn backward_needs_defaults_for_new_fields() {
        let v1 = json!({"type": "record", "name": "t", "fields": [{"name": "a", "type": "long"}]});
        let ok = json!({"type": "record", "name": "t", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": ["null", "string"], "default": null}]});
        let bad = json!({"type": "record", "name": "t", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string"}]});
        let retyped =
            json!({"type": "record", "name": "t", "fields": [{"name": "a", "type": "string"}]});
        assert!(backward(&v1, &ok).is_ok());
        assert!(backward(&v1, &bad).is_err());
        assert!(backward(&v1, &retyped).is_err());
        assert!(
            backward(&ok, &v1).is_ok(),
            "a dropped field is fine for BACKWARD"
        );
    }
}
