//! The closed vocabularies of format v1, as enums.
//!
//! Every value is spelled exactly as in the log; parsing is case-sensitive and
//! a value outside the vocabulary is an error, never a guess.

/// Defines a closed vocabulary: an enum with its log spellings.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order docs/EVENTS.md lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// What this vocabulary is called in messages.
            pub const WHAT: &'static str = $what;

            /// The value as it is spelled in the log.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// Parses the log spelling (case-sensitive).
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The spellings joined for error messages: `a | b | c`.
            pub fn expected() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(" | ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                Self::parse(text).ok_or_else(|| {
                    format!("{:?} is not a valid {} (expected {})", text, $what, Self::expected())
                })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

vocabulary! {
    /// The sandbox a session's tools run in.
    SandboxMode, "sandbox mode" {
        /// No writes.
        ReadOnly = "read-only",
        /// Writes inside the workspace.
        WorkspaceWrite = "workspace-write",
        /// No sandbox at all.
        DangerFullAccess = "danger-full-access",
    }
}

vocabulary! {
    /// When the user is asked before a tool call runs.
    ApprovalPolicy, "approval policy" {
        /// Ask the user (or, under Auto review, the reviewer).
        Ask = "ask",
        /// Never ask.
        Never = "never",
    }
}

vocabulary! {
    /// A named permission preset a user picks.
    Preset, "preset" {
        /// (read-only, ask).
        ReadOnly = "read-only",
        /// (workspace-write, ask).
        WorkspaceWrite = "workspace-write",
        /// (danger-full-access, never).
        FullAccess = "full-access",
        /// (danger-full-access, ask or never), reviewed before every call.
        Auto = "auto",
    }
}

vocabulary! {
    /// How an approval request ended.
    ApprovalOutcome, "approval outcome" {
        /// The user allowed this one call.
        AllowedOnce = "allowed-once",
        /// The user rejected it.
        Rejected = "rejected",
        /// The request was cancelled.
        Cancelled = "cancelled",
        /// Nobody could answer.
        Unavailable = "unavailable",
    }
}

vocabulary! {
    /// The role of a message (informational; authority comes from its source).
    MessageRole, "message role" {
        /// A user turn.
        User = "user",
        /// Model output.
        Assistant = "assistant",
        /// System text.
        System = "system",
    }
}

vocabulary! {
    /// How a tool call settled.
    SettleStatus, "settle status" {
        /// It ran and returned.
        Ok = "ok",
        /// It failed or was refused.
        Error = "error",
        /// It was cancelled.
        Cancelled = "cancelled",
    }
}

vocabulary! {
    /// How a child session is meant to be used.
    ChildMode, "child mode" {
        /// Runs one task and ends.
        OneShot = "one-shot",
        /// Can be continued.
        Continuable = "continuable",
    }
}

impl Preset {
    /// The (sandbox, approval) pair the preset is defined by; `auto` admits
    /// either approval policy, so it is given with `ask` here and checked by
    /// [`Preset::fits`].
    pub fn definition(self) -> (SandboxMode, ApprovalPolicy) {
        match self {
            Preset::ReadOnly => (SandboxMode::ReadOnly, ApprovalPolicy::Ask),
            Preset::WorkspaceWrite => (SandboxMode::WorkspaceWrite, ApprovalPolicy::Ask),
            Preset::FullAccess => (SandboxMode::DangerFullAccess, ApprovalPolicy::Never),
            Preset::Auto => (SandboxMode::DangerFullAccess, ApprovalPolicy::Ask),
        }
    }

    /// Whether the effective pair fits this preset's definition.
    pub fn fits(self, sandbox: SandboxMode, approval: ApprovalPolicy) -> bool {
        match self {
            Preset::Auto => sandbox == SandboxMode::DangerFullAccess,
            _ => self.definition() == (sandbox, approval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabularies_round_trip_and_are_case_sensitive() {
        for mode in SandboxMode::ALL {
            assert_eq!(SandboxMode::parse(mode.as_str()), Some(*mode));
        }
        assert_eq!(ApprovalPolicy::parse("Ask"), None);
        assert_eq!(Preset::parse("full-access"), Some(Preset::FullAccess));
        assert!("custom".parse::<Preset>().is_err());
    }

    #[test]
    fn auto_fits_either_approval_policy_but_only_full_access_sandbox() {
        assert!(Preset::Auto.fits(SandboxMode::DangerFullAccess, ApprovalPolicy::Never));
        assert!(Preset::Auto.fits(SandboxMode::DangerFullAccess, ApprovalPolicy::Ask));
        assert!(!Preset::Auto.fits(SandboxMode::WorkspaceWrite, ApprovalPolicy::Ask));
        assert!(!Preset::FullAccess.fits(SandboxMode::DangerFullAccess, ApprovalPolicy::Ask));
    }
}
