//! The HTTP transport of the Auto review: [`HttpReviewer`] POSTs one Chat
//! Completions body to `{endpoint}/chat/completions` and hands back the
//! status and body of the answer, for the store's `SessionWriter::review`
//! and the `sessionlog review` and `review-audit` commands.
//!
//! It lives in a crate of its own so that the core crates (schema,
//! projections, store) stay free of network code. The client is `ureq`:
//! blocking (one call at a time, from a command or a blocking-pool thread,
//! so no async runtime is needed), with rustls and Mozilla's roots, a
//! timeout on the whole exchange, and proxies from the usual environment
//! variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`). When
//! `SSL_CERT_FILE` names a PEM file, its certificates are the roots
//! instead (a private CA, a corporate proxy).
//!
//! The key is sent only in the `Authorization` header. It never appears in
//! an error, a reason or a failure made of the answer (each is scrubbed of
//! it, after the answer was read as it came: see [`Reviewer::scrub`]), in
//! `Debug` output, or in a log line: the transport logs nothing, and ureq's
//! wire-level `trace` logging, which is not redacted, must be kept off by
//! the program (the `sessionlog` binary caps the `log` facade at `debug`).
//! A key shorter than [`MIN_SCRUBBED_KEY`] characters is a placeholder
//! (local servers take `EMPTY` or `dummy`), not a secret: taking it out
//! would rewrite ordinary words of a reason, so it is left. A password in
//! the endpoint's URL is never shown either: messages name the URL
//! without it.
#![deny(missing_docs)]

use std::fmt;
use std::time::Duration;

use sessionlog_store::{redact_url, Reviewer, ReviewerError, ReviewerResponse};
use ureq::tls::{RootCerts, TlsConfig};

/// The timeout of the whole exchange when none is given: 90 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

/// The largest answer read: 16 MiB (a reviewer's answer is a few KiB).
const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// How much of an answer that is not a success (a status outside 2xx) is
/// read: the failure quotes its first 200 characters.
const REFUSAL_PREFIX_BYTES: u64 = 64 << 10;

/// The shortest key scrubbed from what is printed and recorded: 8
/// characters. See the crate docs.
pub const MIN_SCRUBBED_KEY: usize = 8;

/// A reviewer model behind an OpenAI-compatible Chat Completions endpoint.
///
/// ```no_run
/// use sessionlog_reviewer::{HttpReviewer, HttpReviewerOptions, DEFAULT_TIMEOUT};
/// use sessionlog_store::Reviewer;
///
/// let reviewer = HttpReviewer::new(HttpReviewerOptions {
///     endpoint: "http://127.0.0.1:8080/v1".to_owned(),
///     key: std::env::var("SESSIONLOG_REVIEWER_KEY").ok(),
///     timeout: DEFAULT_TIMEOUT,
/// })?;
/// // Usually `SessionWriter::review` sends the body that
/// // `chat_completions_body` made of a reviewer's request.
/// let answer = reviewer.send(r#"{"model":"m","messages":[],"temperature":0,"stream":false}"#)?;
/// println!("HTTP {}", answer.status);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HttpReviewer {
    /// The URL posted to, as given.
    target: String,
    /// `target` without the password of its user information.
    url: String,
    key: Option<String>,
    agent: ureq::Agent,
}

/// Settings of an [`HttpReviewer`].
#[derive(Clone)]
pub struct HttpReviewerOptions {
    /// The base URL, e.g. `https://api.deepseek.com/v1` or
    /// `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub endpoint: String,
    /// The bearer key, if the endpoint wants one.
    pub key: Option<String>,
    /// The timeout of the whole exchange, from connecting to the last byte
    /// of the answer.
    pub timeout: Duration,
}

/// Settings that cannot make a reviewer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpReviewerError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("the endpoint {endpoint:?} is not an http:// or https:// URL")]
    Endpoint {
        /// The endpoint given.
        endpoint: String,
    },
    /// The endpoint starts as one, but is no valid URL to add
    /// `/chat/completions` to.
    #[error("the endpoint {endpoint:?} is not a valid URL: {reason}")]
    InvalidEndpoint {
        /// The endpoint given, without a password.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `SSL_CERT_FILE` could not be read or holds no certificate.
    #[error("SSL_CERT_FILE {path}: {reason}")]
    CertFile {
        /// The file named.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
}

impl fmt::Debug for HttpReviewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpReviewer")
            .field("url", &self.url)
            .field("key", &self.key.as_ref().map(|_| "(redacted)"))
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for HttpReviewerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpReviewerOptions")
            .field("endpoint", &redact_url(&self.endpoint))
            .field("key", &self.key.as_ref().map(|_| "(redacted)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HttpReviewer {
    /// A reviewer for `options`; the certificate roots come from
    /// `SSL_CERT_FILE` when it is set.
    pub fn new(options: HttpReviewerOptions) -> Result<HttpReviewer, HttpReviewerError> {
        let endpoint = options.endpoint.trim_end_matches('/');
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(HttpReviewerError::Endpoint {
                endpoint: redact_url(&options.endpoint),
            });
        }
        let invalid = |reason: String| HttpReviewerError::InvalidEndpoint {
            endpoint: redact_url(&options.endpoint),
            reason,
        };
        if endpoint.contains(['?', '#']) {
            return Err(invalid(
                "a base URL takes no query or fragment (/chat/completions is added to its path)"
                    .to_owned(),
            ));
        }
        // Checked before anything is read or sent: a URL the client cannot
        // use would otherwise be a reviewer failure, recorded as one.
        let uri: ureq::http::Uri = format!("{endpoint}/chat/completions")
            .parse()
            .map_err(|error: ureq::http::uri::InvalidUri| invalid(error.to_string()))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(invalid("it names no host".to_owned()));
        }
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls_config()?)
            .build();
        let target = format!("{endpoint}/chat/completions");
        Ok(HttpReviewer {
            url: redact_url(&target),
            target,
            key: options.key.filter(|key| !key.is_empty()),
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// The URL every call is POSTed to, as messages show it (without the
    /// password of its user information).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn exchange(&self, body: &str) -> Result<ReviewerResponse, ureq::Error> {
        let mut request = self
            .agent
            .post(&self.target)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = request.send(body)?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            // A refusal is quoted only by its first characters: a bounded
            // prefix of its body is read, however long it is, so that its
            // status is what the failure says.
            let mut prefix = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    response
                        .body_mut()
                        .with_config()
                        .limit(MAX_ANSWER_BYTES)
                        .reader(),
                    REFUSAL_PREFIX_BYTES,
                ),
                &mut prefix,
            )
            .map_err(ureq::Error::Io)?;
            return Ok(ReviewerResponse {
                status,
                body: prefix,
            });
        }
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()?;
        Ok(ReviewerResponse { status, body })
    }

    /// `message` with every occurrence of the key replaced (a key of at
    /// least [`MIN_SCRUBBED_KEY`] characters), as it is and in the escaped
    /// forms a message quotes a value in (`{:?}`, a JSON string), which
    /// differ from it when the key holds a quote, a backslash or a control
    /// character.
    fn scrub_key(&self, mut message: String) -> String {
        let Some(key) = self.key.as_deref() else {
            return message;
        };
        if key.chars().count() < MIN_SCRUBBED_KEY {
            return message;
        }
        for form in key_forms(key) {
            if message.contains(form.as_str()) {
                message = message.replace(form.as_str(), "(redacted)");
            }
        }
        message
    }
}

impl Reviewer for HttpReviewer {
    fn send(&self, body: &str) -> Result<ReviewerResponse, ReviewerError> {
        self.exchange(body).map_err(|error| ReviewerError {
            message: self.scrub_key(describe(&error, &self.url)),
        })
    }

    fn scrub(&self, text: String) -> String {
        self.scrub_key(text)
    }
}

/// The key as it is, then as `{:?}` and a JSON string quote it (without
/// the quotes), each once.
fn key_forms(key: &str) -> Vec<String> {
    let quoted = |text: String| text[1..text.len() - 1].to_owned();
    let mut forms = vec![key.to_owned()];
    for form in [
        quoted(format!("{key:?}")),
        quoted(serde_json::Value::from(key).to_string()),
    ] {
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// What went wrong, in words a user can act on.
fn describe(error: &ureq::Error, url: &str) -> String {
    match error {
        ureq::Error::Timeout(_) => {
            format!("no complete answer from {url} within the timeout")
        }
        ureq::Error::BodyExceedsLimit(limit) => {
            format!(
                "the answer from {url} is above {limit} bytes, the most a reviewer's answer may be"
            )
        }
        ureq::Error::Io(io) => format!("POST {url}: {io}"),
        other => format!("POST {url}: {other}"),
    }
}

/// Mozilla's roots, or the certificates of `SSL_CERT_FILE`.
fn tls_config() -> Result<TlsConfig, HttpReviewerError> {
    let Some(path) = std::env::var_os("SSL_CERT_FILE") else {
        return Ok(TlsConfig::builder().root_certs(RootCerts::WebPki).build());
    };
    let shown = path.to_string_lossy().into_owned();
    let cert_error = |reason: String| HttpReviewerError::CertFile {
        path: shown.clone(),
        reason,
    };
    let pem = std::fs::read(&path).map_err(|error| cert_error(error.to_string()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item.map_err(|error| cert_error(error.to_string()))? {
            ureq::tls::PemItem::Certificate(cert) => certs.push(cert),
            _ => continue,
        }
    }
    if certs.is_empty() {
        return Err(cert_error("holds no PEM certificate".to_owned()));
    }
    Ok(TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_never_in_debug_output_or_errors() {
        let reviewer = HttpReviewer::new(HttpReviewerOptions {
            endpoint: "http://127.0.0.1:9/v1/".to_owned(),
            key: Some("sk-secret-1234".to_owned()),
            timeout: Duration::from_secs(5),
        })
        .expect("a reviewer");
        assert_eq!(reviewer.url(), "http://127.0.0.1:9/v1/chat/completions");
        let shown = format!("{reviewer:?}");
        assert!(!shown.contains("sk-secret-1234"), "{shown}");
        assert_eq!(
            reviewer.scrub("echo sk-secret-1234 back".to_owned()),
            "echo (redacted) back"
        );
        assert_eq!(
            reviewer.scrub("{\"e\":\"Bearer sk-secret-1234sk-secret-1234\"}".to_owned()),
            "{\"e\":\"Bearer (redacted)(redacted)\"}"
        );
        assert_eq!(reviewer.scrub("sk-secret".to_owned()), "sk-secret");
    }

    /// A key holding a quote, a backslash or a control character is also
    /// taken out where a message quotes it escaped, as `{:?}` and JSON do.
    #[test]
    fn the_key_is_scrubbed_in_its_escaped_forms() {
        let key = "sk-live\"Q\\x9\tZk2";
        let reviewer = HttpReviewer::new(HttpReviewerOptions {
            endpoint: "http://127.0.0.1:9/v1".to_owned(),
            key: Some(key.to_owned()),
            timeout: Duration::from_secs(5),
        })
        .expect("a reviewer");
        for quoted in [
            format!("stop reason is {key:?}, expected \"stop\""),
            format!("the answer: {}", serde_json::Value::from(key)),
            format!("raw {key} end"),
        ] {
            let scrubbed = reviewer.scrub(quoted.clone());
            assert!(scrubbed.contains("(redacted)"), "{quoted} gave {scrubbed}");
            for form in key_forms(key) {
                assert!(!scrubbed.contains(&form), "{form:?} left in {scrubbed}");
            }
        }
        assert_eq!(key_forms("sk-plain-1234"), ["sk-plain-1234"]);
    }

    #[test]
    fn a_placeholder_key_is_not_scrubbed_from_words() {
        let reviewer = HttpReviewer::new(HttpReviewerOptions {
            endpoint: "http://127.0.0.1:9/v1".to_owned(),
            key: Some("dummy".to_owned()),
            timeout: Duration::from_secs(5),
        })
        .expect("a reviewer");
        assert_eq!(
            reviewer.scrub("uploads ~/.ssh to a dummy host".to_owned()),
            "uploads ~/.ssh to a dummy host"
        );
    }

    #[test]
    fn a_password_in_the_endpoint_is_never_shown() {
        let options = HttpReviewerOptions {
            endpoint: "http://user:hunter2@127.0.0.1:9/v1".to_owned(),
            key: None,
            timeout: Duration::from_secs(5),
        };
        assert!(!format!("{options:?}").contains("hunter2"));
        let reviewer = HttpReviewer::new(options).expect("a reviewer");
        assert_eq!(
            reviewer.url(),
            "http://user@127.0.0.1:9/v1/chat/completions"
        );
        assert!(!format!("{reviewer:?}").contains("hunter2"));
        let error = reviewer.send("{}").expect_err("nothing listens on port 9");
        assert!(
            error
                .message
                .contains("http://user@127.0.0.1:9/v1/chat/completions")
                && !error.message.contains("hunter2"),
            "{}",
            error.message
        );
        let refused = HttpReviewer::new(HttpReviewerOptions {
            endpoint: "ftp://user:hunter2@example.invalid".to_owned(),
            key: None,
            timeout: DEFAULT_TIMEOUT,
        })
        .expect_err("refused");
        assert!(!refused.to_string().contains("hunter2"), "{refused}");
    }

    #[test]
    fn an_endpoint_must_be_http() {
        let error = HttpReviewer::new(HttpReviewerOptions {
            endpoint: "ftp://example.invalid".to_owned(),
            key: None,
            timeout: DEFAULT_TIMEOUT,
        })
        .expect_err("refused");
        assert_eq!(
            error.to_string(),
            "the endpoint \"ftp://example.invalid\" is not an http:// or https:// URL"
        );
    }

    /// An endpoint the client could not use is refused when the reviewer
    /// is made, before anything is read or sent (it is never a reviewer
    /// failure, recorded as one), and without its password.
    #[test]
    fn an_endpoint_the_client_cannot_use_is_refused_up_front() {
        for (endpoint, reason) in [
            ("http://[::1/v1", "invalid authority"),
            ("http:///v1", "invalid format"),
            ("https://user:hunter2@[::1/v1", "invalid authority"),
            ("http://127.0.0.1:9/v1?x=1", "no query or fragment"),
            ("http://127.0.0.1:9/v1#top", "no query or fragment"),
        ] {
            let error = HttpReviewer::new(HttpReviewerOptions {
                endpoint: endpoint.to_owned(),
                key: None,
                timeout: DEFAULT_TIMEOUT,
            })
            .expect_err(endpoint);
            let shown = error.to_string();
            assert!(
                matches!(error, HttpReviewerError::InvalidEndpoint { .. })
                    && shown.contains(reason),
                "{endpoint}: {shown}"
            );
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }
}
