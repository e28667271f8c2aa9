//! Secrets: every password of the upstream URL and of sink URIs is registered here when the
//! server learns it, and every log line and API response passes through [`scrub`], which replaces
//! each registered secret by `******`. URLs are also masked structurally ([`mask_url`]) before
//! they are printed, so a secret never leaves the process even if it was not registered.

use std::sync::{Mutex, OnceLock};

/// At most this many secrets are remembered (oldest dropped first).
pub const MAX_SECRETS: usize = 4096;

fn secrets() -> &'static Mutex<Vec<String>> {
    static S: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Vec::new()))
}

/// Remember a secret (ignored when shorter than 3 characters: too many false hits).
pub fn register(secret: &str) {
    if secret.len() < 3 {
        return;
    }
    let mut s = secrets().lock().unwrap_or_else(|p| p.into_inner());
    if s.iter().any(|x| x == secret) {
        return;
    }
    if s.len() >= MAX_SECRETS {
        s.remove(0);
    }
    s.push(secret.to_string());
    // Percent-encoded form too (URLs carry it that way).
    let enc: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    if enc != secret && s.len() < MAX_SECRETS {
        s.push(enc);
    }
}

/// Register the password and secret parameters of a URL, and those of the URLs inside its
/// parameters (a Kafka sink's `schema-registry`, a claim-check store).
pub fn register_url(raw: &str) {
    // A Kafka URI's authority may list several brokers, which `Url` refuses: read the rest.
    let parsed = url::Url::parse(raw).or_else(|e| match raw.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            url::Url::parse(&format!("{scheme}://brokers{}", &rest[end..]))
        }
        None => Err(e),
    });
    if let Ok(u) = parsed {
        if let Some(p) = u.password() {
            register(p);
            if let Ok(d) = urlencoding_decode(p) {
                register(&d);
            }
        }
        for (k, v) in u.query_pairs() {
            if sluice_sink::uri::SECRET_PARAMS.contains(&k.as_ref()) {
                register(&v);
            } else if v.contains("://") {
                register_url(&v);
            }
        }
    }
}

fn urlencoding_decode(s: &str) -> Result<String, ()> {
    let bytes: Vec<u8> = url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned().into_bytes())
        .ok_or(())?;
    String::from_utf8(bytes).map_err(|_| ())
}

/// The text with every registered secret replaced.
pub fn scrub(text: &str) -> String {
    let s = secrets().lock().unwrap_or_else(|p| p.into_inner());
    let mut out = text.to_string();
    for secret in s.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "******");
        }
    }
    out
}

/// A URL with its password and secret parameters masked (sink URIs and upstream URLs).
pub fn mask_url(raw: &str) -> String {
    scrub(&sluice_sink::uri::mask_uri(raw))
}

/// A `tracing` writer that scrubs every line.
pub struct ScrubWriter;

impl std::io::Write for ScrubWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let clean = scrub(&text);
        std::io::stderr().write_all(clean.as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn masks_registered_and_structural() {
        register_url("mysql://root:s3cr%40t-pw@127.0.0.1:3306");
        assert_eq!(scrub("error for s3cr@t-pw here"), "error for ****** here");
        let m = mask_url("mysql://root:other-pass@h:1/?password=zzz-pass");
        assert!(!m.contains("other-pass") && !m.contains("zzz-pass"), "{m}");
        register_url(
            "kafka://a:1,b:2/t?protocol=avro&schema-registry=http%3A%2F%2Fu%3Areg-pw-1%40r%3A8081",
        );
        assert_eq!(scrub("registry said reg-pw-1"), "registry said ******");
    }
}
