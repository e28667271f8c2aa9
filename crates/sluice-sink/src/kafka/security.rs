//! How the Kafka client reaches the brokers: TLS and SASL, from TiCDC's URI parameters
//! (`enable-tls`, `ca`, `cert`, `key`, `insecure-skip-verify`, `sasl-user`, `sasl-password`,
//! `sasl-mechanism`), turned into librdkafka's settings ([`Security::client_settings`]), which
//! every client of the sink uses: the producer, the admin client, the transactional producers,
//! the progress reader and `sluice consume`.
//!
//! Invariants:
//! - TLS is on when `enable-tls=true` or any of `ca`, `cert`, `key` is given; a client
//!   certificate needs its key and the other way round; the files must exist when the URI is
//!   parsed (a typo fails `changefeed create`, not a dispatcher later);
//! - SASL needs a user and a password, and they need a mechanism Sluice's client has: `PLAIN`,
//!   `SCRAM-SHA-256`, `SCRAM-SHA-512` (case-insensitive). `GSSAPI` (Kerberos) and `OAUTHBEARER`
//!   and their `sasl-gssapi-*` / `sasl-oauth-*` parameters are refused with "not supported
//!   yet", never ignored;
//! - the password is a [`Secret`]: it never prints, and the URI's copy is masked like every
//!   other secret parameter.

use crate::error::{Result, SinkError};
use crate::uri::{Params, Secret};

/// TiCDC's Kerberos and OAuth parameters: the client is built without GSSAPI and OIDC.
const NOT_YET: &[&str] = &[
    "sasl-gssapi-auth-type",
    "sasl-gssapi-keytab-path",
    "sasl-gssapi-kerberos-config-path",
    "sasl-gssapi-service-name",
    "sasl-gssapi-user",
    "sasl-gssapi-password",
    "sasl-gssapi-realm",
    "sasl-gssapi-disable-pafxfast",
    "sasl-oauth-client-id",
    "sasl-oauth-client-secret",
    "sasl-oauth-token-url",
    "sasl-oauth-scopes",
    "sasl-oauth-grant-type",
    "sasl-oauth-audience",
];

/// TLS towards the brokers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Tls {
    /// `ca`: a PEM file of the CA certificates that sign the brokers' (default: the system's).
    pub ca: Option<String>,
    /// `cert` and `key`: the client's certificate and private key, PEM (mutual TLS).
    pub cert: Option<(String, String)>,
    /// `insecure-skip-verify=true`: the brokers' certificates are not checked (tests only).
    pub skip_verify: bool,
}

/// A SASL mechanism Sluice's client carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// librdkafka's name (`sasl.mechanisms`).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub password: Secret,
}

/// TLS and SASL of one sink (both `None`: plaintext, no authentication).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Security {
    pub tls: Option<Tls>,
    pub sasl: Option<Sasl>,
}

impl Security {
    /// Takes the TLS and SASL parameters out of `p`.
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Security> {
        for k in NOT_YET {
            if let Some(v) = p.take(k) {
                return Err(p.bad(
                    k,
                    &v,
                    "not supported yet (Sluice's Kafka client has SASL PLAIN and SCRAM, not GSSAPI or OAUTHBEARER)",
                ));
            }
        }
        Ok(Security {
            tls: tls(p)?,
            sasl: sasl(p)?,
        })
    }

    /// A failure to reach the brokers, with what to check when TLS or SASL is on (the client
    /// reports a failed handshake as a plain transport failure).
    pub(crate) fn explain(&self, e: SinkError) -> SinkError {
        let check = match (&self.tls, &self.sasl) {
            (None, None) => return e,
            (Some(_), None) => "check that the brokers speak TLS on this port, that `ca` (or the system's authorities) signs their certificates, and `cert`/`key` if they require client certificates",
            (None, Some(_)) => "check sasl-user, sasl-password and sasl-mechanism, and that the brokers take SASL without TLS on this port",
            (Some(_), Some(_)) => "check the TLS settings (ca, cert, key) and the SASL credentials (sasl-user, sasl-password, sasl-mechanism)",
        };
        match e {
            SinkError::Broker {
                what,
                reason,
                retryable,
            } => SinkError::Broker {
                what,
                reason: format!("{reason}; {check}"),
                retryable,
            },
            other => other,
        }
    }

    /// librdkafka's `security.protocol` and the settings of TLS and SASL.
    pub fn client_settings(&self) -> Vec<(&'static str, String)> {
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        let mut s = vec![("security.protocol", protocol.to_string())];
        if let Some(t) = &self.tls {
            if let Some(ca) = &t.ca {
                s.push(("ssl.ca.location", ca.clone()));
            }
            if let Some((cert, key)) = &t.cert {
                s.push(("ssl.certificate.location", cert.clone()));
                s.push(("ssl.key.location", key.clone()));
            }
            if t.skip_verify {
                s.push(("enable.ssl.certificate.verification", "false".into()));
                s.push(("ssl.endpoint.identification.algorithm", "none".into()));
            }
        }
        if let Some(a) = &self.sasl {
            s.push(("sasl.mechanisms", a.mechanism.name().into()));
            s.push(("sasl.username", a.user.clone()));
            s.push(("sasl.password", a.password.expose().to_string()));
        }
        s
    }
}

/// A PEM file parameter: it must name a readable file.
fn pem_file(p: &mut Params<'_>, k: &str) -> Result<Option<String>> {
    let Some(v) = p.take(k) else {
        return Ok(None);
    };
    match std::fs::metadata(&v) {
        Ok(m) if m.is_file() => Ok(Some(v)),
        Ok(_) => Err(p.bad(k, &v, "is not a file (expected the path of a PEM file)")),
        Err(e) => Err(p.bad(k, &v, &format!("cannot be read: {e}"))),
    }
}

fn tls(p: &mut Params<'_>) -> Result<Option<Tls>> {
    let enable = p.bool("enable-tls", false)?;
    let ca = pem_file(p, "ca")?;
    let cert = pem_file(p, "cert")?;
    let key = pem_file(p, "key")?;
    let skip_verify = p.bool("insecure-skip-verify", false)?;
    let cert = match (cert, key) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((c, k)),
        (Some(c), None) => {
            return Err(p.bad("cert", &c, "needs key=… (the certificate's private key)"))
        }
        (None, Some(k)) => return Err(p.bad("key", &k, "needs cert=… (the client certificate)")),
    };
    if !enable && ca.is_none() && cert.is_none() {
        if skip_verify {
            return Err(p.bad(
                "insecure-skip-verify",
                "true",
                "needs TLS (enable-tls=true, or ca=…)",
            ));
        }
        return Ok(None);
    }
    Ok(Some(Tls {
        ca,
        cert,
        skip_verify,
    }))
}

fn sasl(p: &mut Params<'_>) -> Result<Option<Sasl>> {
    let user = p.take("sasl-user");
    let password = p.take("sasl-password");
    let mechanism = p.take("sasl-mechanism");
    let (user, password) = match (user, password, mechanism.as_deref()) {
        (None, None, None) => return Ok(None),
        (Some(u), Some(pw), _) => (u, pw),
        (None, _, _) => {
            return Err(p.bad(
                "sasl-user",
                "",
                "SASL needs sasl-user=… and sasl-password=…",
            ))
        }
        (Some(u), None, _) => return Err(p.bad("sasl-user", &u, "needs sasl-password=…")),
    };
    let mechanism = match mechanism
        .as_deref()
        .unwrap_or("PLAIN")
        .to_ascii_uppercase()
        .as_str()
    {
        "PLAIN" => SaslMechanism::Plain,
        "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
        "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
        "GSSAPI" | "OAUTHBEARER" => {
            return Err(p.bad(
                "sasl-mechanism",
                mechanism.as_deref().unwrap_or_default(),
                "not supported yet (use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
            ))
        }
        other => {
            return Err(p.bad(
                "sasl-mechanism",
                other,
                "expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
            ))
        }
    };
    if user.is_empty() {
        return Err(p.bad("sasl-user", "", "must not be empty"));
    }
    Ok(Some(Sasl {
        mechanism,
        user,
        password: Secret::new(password),
    }))
}

#[cfg(test)]
mod tests {
    use crate::uri::{SinkConfig, SinkUri};
    use std::collections::BTreeMap;

    fn settings(params: &str) -> Result<BTreeMap<&'static str, String>, String> {
        match SinkUri::parse(&format!("kafka://h:9092/t?protocol=canal-json&{params}")) {
            Ok(u) => match u.config {
                SinkConfig::Kafka(c) => Ok(c.client_settings().into_iter().collect()),
                _ => Err("not kafka".into()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    fn pem(dir: &std::path::Path, name: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, "-----BEGIN CERTIFICATE-----\n").expect("write");
        p.display().to_string()
    }

    #[test]
    fn tls_parameters_become_the_clients_ssl_settings() {
        let dir = std::env::temp_dir().join(format!("sluice-tls-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (ca, cert, key) = (pem(&dir, "ca.pem"), pem(&dir, "c.pem"), pem(&dir, "c.key"));
        let s = settings("").expect("plain");
        assert_eq!(s["security.protocol"], "plaintext");
        assert!(!s.contains_key("ssl.ca.location"));
        let s = settings("enable-tls=true").expect("tls");
        assert_eq!(s["security.protocol"], "ssl");
        assert!(
            !s.contains_key("ssl.ca.location"),
            "the system's authorities"
        );
        let s = settings(&format!("ca={ca}&cert={cert}&key={key}")).expect("mutual tls");
        assert_eq!(s["security.protocol"], "ssl", "a ca alone turns TLS on");
        assert_eq!(
            (
                &s["ssl.ca.location"],
                &s["ssl.certificate.location"],
                &s["ssl.key.location"]
            ),
            (&ca, &cert, &key)
        );
        assert!(!s.contains_key("enable.ssl.certificate.verification"));
        let s = settings("enable-tls=true&insecure-skip-verify=true").expect("skip");
        assert_eq!(s["enable.ssl.certificate.verification"], "false");
        assert_eq!(s["ssl.endpoint.identification.algorithm"], "none");
        let bad = |p: &str, want: &str| {
            let e = settings(p).expect_err(p);
            assert!(e.contains(want), "{p}: {e}");
        };
        bad(&format!("cert={cert}"), "needs key");
        bad(&format!("key={key}"), "needs cert");
        bad("ca=/nonexistent/ca.pem", "cannot be read");
        bad(&format!("ca={}", dir.display()), "is not a file");
        bad("insecure-skip-verify=true", "needs TLS");
        bad("enable-tls=maybe", "true or false");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sasl_parameters_become_the_clients_sasl_settings_and_the_password_stays_hidden() {
        let s = settings("sasl-user=app&sasl-password=pw1").expect("plain");
        assert_eq!(
            (
                s["security.protocol"].as_str(),
                s["sasl.mechanisms"].as_str()
            ),
            ("sasl_plaintext", "PLAIN")
        );
        assert_eq!(
            (s["sasl.username"].as_str(), s["sasl.password"].as_str()),
            ("app", "pw1")
        );
        for (m, want) in [
            ("scram-sha-256", "SCRAM-SHA-256"),
            ("SCRAM-SHA-512", "SCRAM-SHA-512"),
            ("Plain", "PLAIN"),
        ] {
            let s = settings(&format!(
                "sasl-user=app&sasl-password=pw1&sasl-mechanism={m}&enable-tls=true"
            ))
            .expect(m);
            assert_eq!(s["security.protocol"], "sasl_ssl");
            assert_eq!(s["sasl.mechanisms"], want);
        }
        let bad = |p: &str, want: &str| {
            let e = settings(p).expect_err(p);
            assert!(e.contains(want), "{p}: {e}");
            assert!(!e.contains("hunter2pw"), "{e}");
        };
        bad("sasl-user=app", "needs sasl-password");
        bad("sasl-password=hunter2pw", "sasl-user");
        bad("sasl-user=&sasl-password=hunter2pw", "must not be empty");
        bad(
            "sasl-user=a&sasl-password=hunter2pw&sasl-mechanism=md5",
            "expected PLAIN",
        );
        bad(
            "sasl-user=a&sasl-password=hunter2pw&sasl-mechanism=OAUTHBEARER",
            "not supported yet",
        );
        bad("sasl-gssapi-realm=EXAMPLE.COM", "not supported yet");
        bad("sasl-oauth-client-secret=hunter2pw", "not supported yet");
    }
}
