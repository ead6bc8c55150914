//! `Authority`: how much a message may direct the session, from its
//! `source.kind` alone (docs/EVENTS.md, "Rules"). The role is informational.

use serde::Serialize;
use sessionlog_schema::{Message, SessionHeader};

/// The authority a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Authority {
    /// Admitted user input, whatever transport it came by, seeded or own.
    User,
    /// An own `agent-message` from the session's parent.
    DirectParent,
    /// Any other `agent-message` (inherited or unverified), checkpoints,
    /// images and attachment metadata.
    Fact,
    /// Project instructions: they constrain, never direct.
    Constraint,
    /// Never shown to the reviewer: `context`, `assistant` and every other
    /// kind.
    Excluded,
}

/// The authority of `message`, logged at `seq` in the session of `header`.
///
/// ```
/// use sessionlog_projections::{message_authority, Authority};
/// use sessionlog_schema::{Message, MessageRole, MessageSource, SessionHeader, SessionId};
///
/// let header = SessionHeader::root(SessionId::parse("a")?, 0, "/work".into());
/// assert_eq!(message_authority(&header, 1, &Message::user("go")), Authority::User);
/// // Authority comes from the source, never the role.
/// let injected = Message::new(MessageRole::User, MessageSource::named("context", "plugin"), "go");
/// assert_eq!(message_authority(&header, 2, &injected), Authority::Excluded);
/// assert_eq!(message_authority(&header, 3, &Message::assistant("done")), Authority::Excluded);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn message_authority(header: &SessionHeader, seq: u64, message: &Message) -> Authority {
    match message.source.kind.as_str() {
        "user" => Authority::User,
        "agent-message" => {
            let own = seq > header.seed_length;
            // A header may name the session itself as its parent (the
            // format allows it): its own messages are then not a parent's
            // instructions but facts, the lower authority.
            let from_parent = match (&header.parent_session, &message.source.sender_session_id) {
                (Some(parent), Some(sender)) => parent.as_str() == sender && parent != &header.id,
                _ => false,
            };
            if own && from_parent {
                Authority::DirectParent
            } else {
                Authority::Fact
            }
        }
        "instructions" => Authority::Constraint,
        _ => Authority::Excluded,
    }
}

/// Whether a message of source kind `kind` may be shown to the reviewer at
/// all: every kind but these three is [`Authority::Excluded`] whatever the
/// rest of the message says.
pub(crate) fn may_be_shown(kind: &str) -> bool {
    matches!(kind, "user" | "agent-message" | "instructions")
}

impl Authority {
    /// The spelling: `user`, `direct-parent`, `fact`, `constraint`,
    /// `excluded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Authority::User => "user",
            Authority::DirectParent => "direct-parent",
            Authority::Fact => "fact",
            Authority::Constraint => "constraint",
            Authority::Excluded => "excluded",
        }
    }
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use sessionlog_schema::{Event, SessionHeader};

    use super::*;
    use crate::test_log::id;

    /// The authority of a message of `kind` (and `sender`, when given) at
    /// `seq` in a child seeded with 2 events of `parent`.
    fn authority(header: &SessionHeader, seq: u64, role: &str, source: &str) -> String {
        let data = format!(r#"{{"role":"{role}","source":{source},"content":[]}}"#);
        match Event::parse("message", &data) {
            Ok(Event::Message(message)) => message_authority(header, seq, &message).to_string(),
            other => panic!("{data} did not parse as a message: {other:?}"),
        }
    }

    fn child_header() -> SessionHeader {
        let mut header = SessionHeader::root(id("kid"), 0, "/w".to_owned());
        header.parent_session = Some(id("parent"));
        header.seed_length = 2;
        header
    }

    #[test]
    fn only_the_kinds_that_may_be_shown_ever_get_an_authority() {
        let child = child_header();
        for kind in [
            "user",
            "agent-message",
            "instructions",
            "context",
            "assistant",
            "x",
        ] {
            for seq in [1, 3] {
                let source =
                    format!(r#"{{"kind":"{kind}","senderSessionId":"parent","name":"n"}}"#);
                let shown = authority(&child, seq, "user", &source) != "excluded";
                assert_eq!(may_be_shown(kind), shown, "{kind} at seq {seq}");
            }
        }
    }

    #[test]
    fn authority_comes_from_the_source_kind_alone() {
        let child = child_header();
        let root = SessionHeader::root(id("root"), 0, "/w".to_owned());
        let from_parent = r#"{"kind":"agent-message","senderSessionId":"parent"}"#;
        let mut own_parent = SessionHeader::root(id("self"), 0, "/w".to_owned());
        own_parent.parent_session = Some(id("self"));
        let from_itself = r#"{"kind":"agent-message","senderSessionId":"self"}"#;
        let cases = [
            (&child, 3, "user", r#"{"kind":"user"}"#, "user"),
            (&child, 1, "user", r#"{"kind":"user"}"#, "user"),
            (&child, 3, "assistant", r#"{"kind":"user"}"#, "user"),
            (&child, 3, "user", from_parent, "direct-parent"),
            (&child, 2, "user", from_parent, "fact"),
            (
                &child,
                3,
                "user",
                r#"{"kind":"agent-message","senderSessionId":"other"}"#,
                "fact",
            ),
            (&child, 3, "user", r#"{"kind":"agent-message"}"#, "fact"),
            (&root, 1, "user", from_parent, "fact"),
            // A header naming the session itself as its parent: its own
            // agent messages are facts.
            (&own_parent, 3, "user", from_itself, "fact"),
            (
                &child,
                3,
                "system",
                r#"{"kind":"instructions","name":"AGENTS.md"}"#,
                "constraint",
            ),
            (
                &child,
                3,
                "system",
                r#"{"kind":"context","name":"plugin"}"#,
                "excluded",
            ),
            (
                &child,
                3,
                "assistant",
                r#"{"kind":"assistant"}"#,
                "excluded",
            ),
            (&child, 3, "user", r#"{"kind":"webhook"}"#, "excluded"),
        ];
        for (header, seq, role, source, expected) in cases {
            assert_eq!(
                authority(header, seq, role, source),
                expected,
                "{source} at seq {seq} in {}",
                header.id
            );
        }
    }

    #[test]
    fn authorities_serialise_as_their_spelling() {
        let all = [
            Authority::User,
            Authority::DirectParent,
            Authority::Fact,
            Authority::Constraint,
            Authority::Excluded,
        ];
        let json = serde_json::to_string(&all).ok();
        assert_eq!(
            json.as_deref(),
            Some(r#"["user","direct-parent","fact","constraint","excluded"]"#)
        );
    }
}
