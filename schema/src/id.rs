//! `SessionId`: the only way to name a session, valid by construction.
//!
//! Ids reach file names and SQL keys, so an invalid one must never exist as a
//! value: the pattern is `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`, checked on the
//! whole string, which rules out `/`, `..`, NUL, whitespace and every non-ASCII
//! look-alike before any path is built.

use std::fmt;

/// The longest id the format admits, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// A session id matching `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Box<str>);

/// Why a string is not a valid session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id {value:?}: {reason} (ids match ^[A-Za-z0-9][A-Za-z0-9_-]{{0,127}}$)")]
pub struct InvalidSessionId {
    /// The rejected text.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl SessionId {
    /// Checks `value` against the id pattern.
    pub fn parse(value: &str) -> Result<Self, InvalidSessionId> {
        let reject = |reason| {
            Err(InvalidSessionId {
                value: value.to_owned(),
                reason,
            })
        };
        let bytes = value.as_bytes();
        let Some(&first) = bytes.first() else {
            return reject("it is empty");
        };
        if bytes.len() > MAX_SESSION_ID_LEN {
            return reject("it is longer than 128 bytes");
        }
        if !first.is_ascii_alphanumeric() {
            return reject("it must start with an ASCII letter or digit");
        }
        let allowed = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-';
        if !bytes.iter().all(allowed) {
            return reject("only ASCII letters, digits, '_' and '-' are allowed");
        }
        Ok(SessionId(value.into()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({:?})", &*self.0)
    }
}

impl std::str::FromStr for SessionId {
    type Err = InvalidSessionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::parse(s)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        SessionId::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_pattern_and_rejects_everything_else() {
        for good in ["a", "A0", "0", "s_1-x", &"a".repeat(128)] {
            assert!(SessionId::parse(good).is_ok(), "{good:?} should be valid");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "a/b",
            "..",
            "a.b",
            "a\0",
            "a\n",
            " a",
            "ａ",
            "a b",
            "é",
            &"a".repeat(129),
        ] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
