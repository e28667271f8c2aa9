//! A small HTTP/1.1 client over a tokio TCP stream, enough for the `sluice cli` and node-to-node
//! messages (one request per connection, `Content-Length` or chunked responses).
//!
//! Invariants: a response body larger than [`MAX_RESPONSE_BYTES`] is an error, never an
//! unbounded buffer; every call has a deadline.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response body read.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad server URL {0:?}: expected http://host:port")]
    BadUrl(String),
    #[error("cannot reach {addr}: {source}; is `sluice server` running there?")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("talking to {addr}: {message}")]
    Protocol { addr: String, message: String },
    #[error("{addr} did not answer within {secs} s")]
    Timeout { addr: String, secs: u64 },
}

impl ClientError {
    pub fn is_retryable(&self) -> bool {
        !matches!(self, ClientError::BadUrl(_))
    }
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `base` is `http://host:port` (or `host:port`); `path` starts with `/`.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let hostport = base
        .trim_end_matches('/')
        .strip_prefix("http://")
        .unwrap_or(base.trim_end_matches('/'))
        .to_string();
    if hostport.is_empty() || hostport.contains('/') || base.starts_with("https://") {
        return Err(ClientError::BadUrl(base.to_string()));
    }
    let addr = hostport.clone();
    let fut = async {
        let mut s = TcpStream::connect(&hostport)
            .await
            .map_err(|source| ClientError::Connect {
                addr: addr.clone(),
                source,
            })?;
        let body = body.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let proto = |e: std::io::Error| ClientError::Protocol {
            addr: addr.clone(),
            message: e.to_string(),
        };
        s.write_all(head.as_bytes()).await.map_err(proto)?;
        s.write_all(body).await.map_err(proto)?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            let n = s.read(&mut chunk).await.map_err(proto)?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_RESPONSE_BYTES + 65536 {
                return Err(ClientError::Protocol {
                    addr: addr.clone(),
                    message: "response too large".into(),
                });
            }
        }
        parse_response(&buf).map_err(|m| ClientError::Protocol {
            addr: addr.clone(),
            message: m,
        })
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Timeout {
            addr,
            secs: timeout.as_secs(),
        }),
    }
}

fn parse_response(buf: &[u8]) -> Result<Response, String> {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no response header")?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "bad response header")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("bad status line")?;
    let mut chunked = false;
    let mut len: Option<usize> = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if k == "content-length" {
            len = v.parse().ok();
        }
    }
    let rest = &buf[end + 4..];
    let body = if chunked {
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            let nl = rest[i..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("bad chunk")?;
            let size_s = std::str::from_utf8(&rest[i..i + nl]).map_err(|_| "bad chunk size")?;
            let size = usize::from_str_radix(size_s.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| "bad chunk size")?;
            i += nl + 2;
            if size == 0 {
                break;
            }
            if i + size > rest.len() {
                return Err("truncated chunk".into());
            }
            out.extend_from_slice(&rest[i..i + size]);
            i += size + 2;
        }
        out
    } else {
        match len {
            Some(n) => rest.get(..n).ok_or("truncated body")?.to_vec(),
            None => rest.to_vec(),
        }
    };
    Ok(Response { status, body })
}
