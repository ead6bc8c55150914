//! `Violation`: an event that breaks the vocabulary, the shapes or a rule of
//! docs/EVENTS.md, "Rules", named by its seq and type.
//!
//! Every kind but `Seal` makes `verify` and the folding commands exit 4; a
//! seal that does not hold exits 7. The kind tells the reader which part of
//! the contract was broken.

use sessionlog_schema::{HeaderVocabularyError, ShapeError};

/// What part of the contract an event breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A value outside its closed vocabulary (`approval/policy` `sometimes`).
    Vocabulary,
    /// `data` is not an object, lacks a required field, or has one of the
    /// wrong type.
    Shape,
    /// A rule of docs/EVENTS.md, "Rules": turns, steps, calls, approvals, uniqueness, seq order.
    Rule,
    /// An own seal that does not hold: its `throughSeq` is not the seq
    /// before it, its chain differs from the recomputed one, or its
    /// signature does not verify. The log was changed after it was sealed.
    Seal,
}

/// One broken event: where it is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seq {seq} ({}): {message}", event_type.escape_debug())]
pub struct Violation {
    /// The event's seq (0 for the header).
    pub seq: u64,
    /// The event's type as logged (`header` for the header).
    pub event_type: String,
    /// Which part of the contract it breaks.
    pub kind: ViolationKind,
    /// What is wrong, naming the field or the ids involved.
    pub message: String,
}

impl ViolationKind {
    /// The kind as a word for reports: `vocabulary`, `shape`, `rule`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Vocabulary => "vocabulary",
            ViolationKind::Shape => "shape",
            ViolationKind::Rule => "rule",
            ViolationKind::Seal => "seal",
        }
    }
}

impl std::fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Violation {
    /// A shape or vocabulary error of the event at `seq`, naming its field.
    pub fn from_shape(seq: u64, event_type: &str, error: &ShapeError) -> Violation {
        Violation {
            seq,
            event_type: event_type.to_owned(),
            kind: shape_error_kind(error),
            message: format!("{}: {}", error.path, error.message),
        }
    }

    /// A seal at `seq` that does not hold.
    pub fn seal(seq: u64, event_type: &str, message: String) -> Violation {
        Violation {
            seq,
            event_type: event_type.to_owned(),
            kind: ViolationKind::Seal,
            message,
        }
    }

    /// A broken rule of the event at `seq`.
    pub fn rule(seq: u64, event_type: &str, message: String) -> Violation {
        Violation {
            seq,
            event_type: event_type.to_owned(),
            kind: ViolationKind::Rule,
            message,
        }
    }
}

impl From<&HeaderVocabularyError> for Violation {
    /// A header field outside its vocabulary: seq 0, type `header`.
    fn from(error: &HeaderVocabularyError) -> Violation {
        Violation {
            seq: 0,
            event_type: "header".to_owned(),
            kind: ViolationKind::Vocabulary,
            message: format!(
                "{}: {:?} is not a valid {} (expected {})",
                error.field, error.value, error.what, error.expected
            ),
        }
    }
}

/// Tells a value outside a closed vocabulary from a broken shape. The schema
/// reports both as a [`ShapeError`]; a vocabulary value is a string that
/// parsed as JSON but is not one of the allowed spellings, which the schema
/// words as `"x" is not a <vocabulary> (expected ...)` for enums of values
/// and `unknown variant` for the content part `type` tag.
fn shape_error_kind(error: &ShapeError) -> ViolationKind {
    let message = error.message.as_str();
    let outside_value_vocabulary = message.contains(" is not a ") && message.contains("(expected ");
    let outside_tag_vocabulary = message.starts_with("unknown variant");
    if outside_value_vocabulary || outside_tag_vocabulary {
        ViolationKind::Vocabulary
    } else {
        ViolationKind::Shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type that holds a line break (or any control character) stays on
    /// the message's line: it cannot forge a line of output.
    #[test]
    fn a_type_with_a_line_break_stays_on_its_line() {
        let violation = Violation {
            seq: 3,
            event_type: "x\nsessions  999".to_owned(),
            kind: ViolationKind::Rule,
            message: "broken".to_owned(),
        };
        assert_eq!(violation.to_string(), "seq 3 (x\\nsessions  999): broken");
        let plain = Violation {
            event_type: "turn/end".to_owned(),
            ..violation
        };
        assert_eq!(plain.to_string(), "seq 3 (turn/end): broken");
    }
}
