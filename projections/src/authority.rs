//! `Authority`: how much a message may direct the session, from its
//! `source.kind` alone (SPEC §6). The role is informational.

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
pub fn message_authority(header: &SessionHeader, seq: u64, message: &Message) -> Authority {
    match message.source.kind.as_str() {
        "user" => Authority::User,
        "agent-message" => {
            let own = seq > header.seed_length;
            let from_parent = match (&header.parent_session, &message.source.sender_session_id) {
                (Some(parent), Some(sender)) => parent.as_str() == sender,
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
