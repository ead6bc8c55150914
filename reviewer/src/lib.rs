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
//! an error (every message is scrubbed of it), in `Debug` output, or in a
//! log line: the transport logs nothing, and ureq's wire-level `trace`
//! logging, which is not redacted, must be kept off by the program (the
//! `sessionlog` binary caps the `log` facade at `debug`).
#![deny(missing_docs)]

use std::fmt;
use std::time::Duration;

use sessionlog_store::{Reviewer, ReviewerError, ReviewerResponse};
use ureq::tls::{RootCerts, TlsConfig};

/// The timeout of the whole exchange when none is given: 90 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

/// The largest answer read: 16 MiB (a reviewer's answer is a few KiB).
const MAX_ANSWER_BYTES: u64 = 16 << 20;

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
            .field("endpoint", &self.endpoint)
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
                endpoint: options.endpoint.clone(),
            });
        }
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls_config()?)
            .build();
        Ok(HttpReviewer {
            url: format!("{endpoint}/chat/completions"),
            key: options.key.filter(|key| !key.is_empty()),
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// The URL every call is POSTed to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn exchange(&self, body: &str) -> Result<ReviewerResponse, ureq::Error> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = request.send(body)?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()?;
        Ok(ReviewerResponse { status, body })
    }

    /// `body` with every occurrence of the key replaced: a server that
    /// echoes the key (in an error, in a reason) must not get it printed
    /// or recorded.
    fn scrub_bytes(&self, body: Vec<u8>) -> Vec<u8> {
        let Some(key) = self.key.as_deref().map(str::as_bytes) else {
            return body;
        };
        if !body.windows(key.len()).any(|window| window == key) {
            return body;
        }
        let mut scrubbed = Vec::with_capacity(body.len());
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            if rest.starts_with(key) {
                scrubbed.extend_from_slice(b"(redacted)");
                rest = &rest[key.len()..];
            } else {
                scrubbed.push(rest[0]);
                rest = &rest[1..];
            }
        }
        scrubbed
    }

    /// `message` with every occurrence of the key replaced.
    fn scrub(&self, message: String) -> String {
        match &self.key {
            Some(key) => message.replace(key.as_str(), "(redacted)"),
            None => message,
        }
    }
}

impl Reviewer for HttpReviewer {
    fn send(&self, body: &str) -> Result<ReviewerResponse, ReviewerError> {
        match self.exchange(body) {
            Ok(response) => Ok(ReviewerResponse {
                status: response.status,
                body: self.scrub_bytes(response.body),
            }),
            Err(error) => Err(ReviewerError {
                message: self.scrub(describe(&error, &self.url)),
            }),
        }
    }
}

/// What went wrong, in words a user can act on.
fn describe(error: &ureq::Error, url: &str) -> String {
    match error {
        ureq::Error::Timeout(_) => {
            format!("no complete answer from {url} within the timeout")
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
            reviewer.scrub_bytes(b"{\"e\":\"Bearer sk-secret-1234sk-secret-1234\"}".to_vec()),
            b"{\"e\":\"Bearer (redacted)(redacted)\"}"
        );
        assert_eq!(reviewer.scrub_bytes(b"sk-secret".to_vec()), b"sk-secret");
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
}
