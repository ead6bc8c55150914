//! Why a reviewer request could not be built: the fail-closed codes of docs/EVENTS.md, "The Auto reviewer".
//!
//! The codes are stable (scripts and runtimes match on them); the message
//! says what was found and where, so the caller can fix the snapshot or the
//! action. When several apply, the first in [`ReviewErrorCode::ALL`] wins.

/// The size limit of a request when the caller names none: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

/// A request that fails closed: nothing is sent to the reviewer and the call
/// does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
#[non_exhaustive]
pub struct ReviewError {
    /// The stable code.
    pub code: ReviewErrorCode,
    /// What was found, naming the seq, member or call involved.
    pub message: String,
}

/// The fail-closed codes, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReviewErrorCode {
    /// The snapshot is corrupt or breaks a rule (a torn tail is not one).
    InvalidLog,
    /// The pending action is malformed, or a native call brings a schema.
    InvalidAction,
    /// A program's inner call brings no schema.
    MissingSchema,
    /// The log has no `request/header`.
    NoRequestHeader,
    /// No step is open.
    NoOpenStep,
    /// The pending action's step is not the open step.
    StepMismatch,
    /// The pending callId is already the callId of a logged `tool/start`.
    DuplicateCallId,
    /// The parentCallId names no own, started, unsettled call of the open step.
    UnknownParentCall,
    /// The native tool is not in the latest `request/header`.
    UnknownTool,
    /// The native tool is defined more than once in the latest `request/header`.
    AmbiguousTool,
    /// The compact request is longer than the limit.
    RequestTooLarge,
}

impl ReviewErrorCode {
    /// Every code, in the order they are checked.
    pub const ALL: &'static [ReviewErrorCode] = &[
        ReviewErrorCode::InvalidLog,
        ReviewErrorCode::InvalidAction,
        ReviewErrorCode::MissingSchema,
        ReviewErrorCode::NoRequestHeader,
        ReviewErrorCode::NoOpenStep,
        ReviewErrorCode::StepMismatch,
        ReviewErrorCode::DuplicateCallId,
        ReviewErrorCode::UnknownParentCall,
        ReviewErrorCode::UnknownTool,
        ReviewErrorCode::AmbiguousTool,
        ReviewErrorCode::RequestTooLarge,
    ];

    /// The stable spelling, e.g. `NO_OPEN_STEP`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewErrorCode::InvalidLog => "INVALID_LOG",
            ReviewErrorCode::InvalidAction => "INVALID_ACTION",
            ReviewErrorCode::MissingSchema => "MISSING_SCHEMA",
            ReviewErrorCode::NoRequestHeader => "NO_REQUEST_HEADER",
            ReviewErrorCode::NoOpenStep => "NO_OPEN_STEP",
            ReviewErrorCode::StepMismatch => "STEP_MISMATCH",
            ReviewErrorCode::DuplicateCallId => "DUPLICATE_CALL_ID",
            ReviewErrorCode::UnknownParentCall => "UNKNOWN_PARENT_CALL",
            ReviewErrorCode::UnknownTool => "UNKNOWN_TOOL",
            ReviewErrorCode::AmbiguousTool => "AMBIGUOUS_TOOL",
            ReviewErrorCode::RequestTooLarge => "REQUEST_TOO_LARGE",
        }
    }
}

impl std::fmt::Display for ReviewErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ReviewErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl ReviewError {
    /// An error with `code` and `message`.
    pub fn new(code: ReviewErrorCode, message: impl Into<String>) -> Self {
        ReviewError {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_spec_spellings_in_check_order() {
        let spelled: Vec<&str> = ReviewErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            spelled,
            [
                "INVALID_LOG",
                "INVALID_ACTION",
                "MISSING_SCHEMA",
                "NO_REQUEST_HEADER",
                "NO_OPEN_STEP",
                "STEP_MISMATCH",
                "DUPLICATE_CALL_ID",
                "UNKNOWN_PARENT_CALL",
                "UNKNOWN_TOOL",
                "AMBIGUOUS_TOOL",
                "REQUEST_TOO_LARGE",
            ]
        );
        let mut sorted = ReviewErrorCode::ALL.to_vec();
        sorted.sort();
        assert_eq!(sorted, ReviewErrorCode::ALL);
    }
}
