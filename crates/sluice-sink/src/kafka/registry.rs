//! The Confluent-compatible schema registry client of `protocol=avro`: registers each table
//! version's key and value schemas under TopicNameStrategy subjects (`<topic>-key`,
//! `<topic>-value`) and reads schemas back by id (`sluice consume`).
//!
//! Only the REST endpoints every compatible registry has are used: `POST
//! /subjects/{subject}/versions` and `GET /schemas/ids/{id}`.
//!
//! Invariants:
//! - the sink registers a schema once per (table version, topic) and side (it keeps the ids,
//!   `kafka::avro`); schemas read by id are cached here, at most [`MAX_CACHED`] (cleared when
//!   full, and read again);
//! - an unreachable registry or a 5xx answer is retryable; a refusal (409 incompatible, 422
//!   invalid, 401/403) is fatal and names what the registry said;
//! - the URI's password is never logged: errors name the registry without its user info.

use crate::error::{Result, SinkError};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use url::Url;

/// At most this many schemas read by id are cached.
pub const MAX_CACHED: usize = 65_536;
/// How long one registry request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

pub struct Registry {
    /// The registry's URL without user info (errors name it).
    base: Url,
    auth: Option<(String, Option<String>)>,
    http: reqwest::Client,
    /// Schemas read by id.
    schemas: Mutex<BTreeMap<u32, Arc<str>>>,
}

fn lock_error() -> SinkError {
    SinkError::Registry {
        what: "cache".into(),
        reason: "a lock was poisoned by a panic".into(),
        retryable: false,
    }
}

impl Registry {
    /// A client of the registry at `url` (`http(s)://[user:password@]host:port[/prefix]`).
    pub fn new(url: &Url) -> Result<Registry> {
        let mut base = url.clone();
        let auth = (!url.username().is_empty()).then(|| {
            let dec = |s: &str| {
                url::form_urlencoded::parse(format!("x={s}").as_bytes())
                    .next()
                    .map_or_else(|| s.to_string(), |(_, v)| v.into_owned())
            };
            (dec(url.username()), url.password().map(dec))
        });
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| SinkError::Registry {
                what: "client setup".into(),
                reason: e.to_string(),
                retryable: false,
            })?;
        Ok(Registry {
            base,
            auth,
            http,
            schemas: Mutex::new(BTreeMap::new()),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base.as_str().trim_end_matches('/'))
    }

    fn with_auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Some((user, password)) => r.basic_auth(user, password.as_ref()),
            None => r,
        }
    }

    /// Sends a request and reads its JSON answer; errors are classified (module docs).
    async fn call(&self, what: &str, r: reqwest::RequestBuilder) -> Result<Json> {
        let fail = |reason: String, retryable: bool| SinkError::Registry {
            what: format!("{what} at {}", self.base),
            reason,
            retryable,
        };
        let resp = self
            .with_auth(r)
            .header("Accept", CONTENT_TYPE)
            .send()
            .await
            .map_err(|e| fail(format!("no answer: {e}"), true))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| fail(format!("reading the answer: {e}"), true))?;
        if status.is_success() {
            return serde_json::from_str(&body)
                .map_err(|e| fail(format!("an answer that is not JSON ({e}): {body}"), false));
        }
        let message = serde_json::from_str::<Json>(&body)
            .ok()
            .and_then(|j| j.get("message").and_then(Json::as_str).map(str::to_string))
            .unwrap_or(body);
        let hint = match status.as_u16() {
            409 => ": the schema is not compatible with the subject's earlier versions under its compatibility rule; change the subject's compatibility (PUT /config/{subject}) or the table",
            401 | 403 => ": check the user and password in schema-registry=",
            _ => "",
        };
        Err(fail(
            format!("HTTP {status}: {message}{hint}"),
            status.is_server_error() || status.as_u16() == 429,
        ))
    }

    /// Checks the registry answers (`GET /subjects`).
    pub async fn reachable(&self) -> Result<()> {
        let req = self.http.get(self.url("subjects"));
        self.call("listing subjects", req).await.map(|_| ())
    }

    /// The id of `schema` under `subject` (the registry answers the same id for a schema it
    /// has, and registers a new one).
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32> {
        let req = self
            .http
            .post(self.url(&format!("subjects/{subject}/versions")))
            .header("Content-Type", CONTENT_TYPE)
            .body(json!({ "schema": schema }).to_string());
        let answer = self
            .call(&format!("registering a schema under {subject}"), req)
            .await?;
        let id = answer
            .get("id")
            .and_then(Json::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| SinkError::Registry {
                what: format!("registering a schema under {subject}"),
                reason: format!("an answer without an id: {answer}"),
                retryable: false,
            })?;
        Ok(id)
    }

    /// The schema text of `id`.
    pub async fn schema(&self, id: u32) -> Result<Arc<str>> {
        if let Some(s) = self.schemas.lock().map_err(|_| lock_error())?.get(&id) {
            return Ok(s.clone());
        }
        let req = self.http.get(self.url(&format!("schemas/ids/{id}")));
        let answer = self.call(&format!("reading schema {id}"), req).await?;
        let text: Arc<str> = answer
            .get("schema")
            .and_then(Json::as_str)
            .ok_or_else(|| SinkError::Registry {
                what: format!("reading schema {id}"),
                reason: format!("an answer without a schema: {answer}"),
                retryable: false,
            })?
            .into();
        let mut schemas = self.schemas.lock().map_err(|_| lock_error())?;
        if schemas.len() >= MAX_CACHED {
            schemas.clear();
        }
        schemas.insert(id, text.clone());
        Ok(text)
    }
}
