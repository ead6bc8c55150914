//! `Failure`: every error the addon hands to JavaScript, as the stable code a
//! program branches on plus the context a person needs (message, seq, path,
//! line, byte offset). It crosses the boundary as the JSON text of a napi
//! error's message, which `index.js` turns into a `SessionlogError`.

use std::any::Any;

use serde::Serialize;
use sessionlog_projections::{ReviewError, ReviewFailure, AUTO_REVIEW_FAILED};
use sessionlog_store::{ErrorClass, StoreError};

/// An error on its way to JavaScript.
#[derive(Debug, Serialize)]
pub struct Failure {
    /// Marks the message as ours, so `index.js` never mistakes another
    /// error's text for one.
    sessionlog: bool,
    code: &'static str,
    message: String,
    #[serde(flatten)]
    context: Box<Context>,
}

/// Where a failure happened, as far as it applies.
#[derive(Debug, Default, Serialize)]
struct Context {
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actual: Option<u64>,
}

/// The result of everything the addon does off the JavaScript thread.
pub type Outcome<T> = Result<T, Failure>;

impl Failure {
    /// A failure with only a code and a message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            sessionlog: true,
            code,
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An argument the API cannot take (a bad option, a seq past the log).
    pub fn invalid_argument(message: impl Into<String>) -> Failure {
        Failure::new("INVALID_ARGUMENT", message)
    }

    /// A panic of the addon's own code: a bug, reported instead of taking
    /// the Node process down.
    pub fn panic(payload: Box<dyn Any + Send>) -> Failure {
        let what = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Failure::new(
            "PANIC",
            format!("sessionlog panicked (a bug; please report it): {what}"),
        )
    }

    fn at_path(self, path: &std::path::Path) -> Failure {
        self.with(|context| context.path = Some(path.display().to_string()))
    }

    fn with(mut self, set: impl FnOnce(&mut Context)) -> Failure {
        set(&mut self.context);
        self
    }

    /// The napi error whose message carries this failure.
    pub fn into_napi(self) -> napi::Error {
        let text = serde_json::to_string(&self).unwrap_or_else(|_| {
            // Serialising strings and integers cannot fail; keep the code
            // even if it somehow did.
            format!(
                r#"{{"sessionlog":true,"code":"{}","message":""}}"#,
                self.code
            )
        });
        napi::Error::new(napi::Status::GenericFailure, text)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        let message = error.to_string();
        match &error {
            StoreError::Postgres { store, .. } | StoreError::Io { path: store, .. }
                if error.is_connection_lost() =>
            {
                Failure::new("CONNECTION_LOST", message).at_path(store)
            }
            StoreError::Io { path, .. }
            | StoreError::Sqlite { path, .. }
            | StoreError::NewerSchema { path, .. } => Failure::new("IO", message).at_path(path),
            StoreError::Postgres { store, .. } | StoreError::InvalidStore { store, .. } => {
                Failure::new("IO", message).at_path(store)
            }
            StoreError::NotAStore { path, .. } => Failure::new("IO", message).at_path(path),
            StoreError::DamagedDatabase { path, .. } => {
                Failure::new("CORRUPT", message).at_path(path)
            }
            StoreError::InvalidId(_) => Failure::new("INVALID_ID", message),
            StoreError::NotFound { path, .. } => Failure::new("NOT_FOUND", message).at_path(path),
            StoreError::AlreadyExists { path, .. } => Failure::new("EXISTS", message).at_path(path),
            StoreError::Corrupt { path, corruption } => Failure::new("CORRUPT", message)
                .at_path(path)
                .with(|context| {
                    context.line = Some(corruption.position.line);
                    context.offset = Some(corruption.position.offset);
                }),
            StoreError::CorruptRow { path, seq, .. } => Failure::new("CORRUPT", message)
                .at_path(path)
                .with(|context| context.seq = Some(*seq)),
            StoreError::HeaderVocabulary { path, .. } => Failure::new("RULE", message)
                .at_path(path)
                .with(|context| context.seq = Some(0)),
            StoreError::Rule { path, violation } => Failure::new(
                match error.class() {
                    ErrorClass::Seal => "SEAL",
                    _ => "RULE",
                },
                message,
            )
            .at_path(path)
            .with(|context| context.seq = Some(violation.seq)),
            StoreError::Locked { path, .. } => Failure::new("LOCKED", message).at_path(path),
            // A log of another history put in place of the one followed.
            StoreError::HistoryChanged { path, .. } => {
                Failure::new("CORRUPT", message).at_path(path)
            }
            StoreError::Conflict {
                expected, actual, ..
            } => Failure::new("CONFLICT", message).with(|context| {
                context.seq = Some(*actual);
                context.expected = Some(*expected);
                context.actual = Some(*actual);
            }),
            StoreError::Poisoned { .. } => Failure::new("POISONED", message),
            // A header value no backend stores is refused as an event that
            // cannot be written is (README, "Errors").
            StoreError::InvalidEvent(_) | StoreError::InvalidHeader(_) => {
                Failure::new("INVALID_EVENT", message)
            }
            // What later versions of the store add is told by its class.
            _ => match error.class() {
                ErrorClass::Corrupt => Failure::new("CORRUPT", message),
                ErrorClass::Rule => Failure::new("RULE", message),
                ErrorClass::Seal => Failure::new("SEAL", message),
                ErrorClass::Contention => Failure::new("LOCKED", message),
                ErrorClass::Io => Failure::new("IO", message),
            },
        }
    }
}

impl From<ReviewError> for Failure {
    fn from(error: ReviewError) -> Failure {
        Failure::new(error.code.as_str(), error.message)
    }
}

impl From<ReviewFailure> for Failure {
    fn from(failure: ReviewFailure) -> Failure {
        Failure::new(AUTO_REVIEW_FAILED, failure.message)
    }
}
