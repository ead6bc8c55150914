//! Strict JSON readers for the review inputs that arrive from outside the
//! log: the reviewer's reply and the pending action.
//!
//! `serde_json` keeps the last of two members with the same name without a
//! word. A reviewer reply `{"decision":"deny","decision":"allow"}` or an
//! action whose arguments say two things at once must fail instead, so these
//! readers list an object's members in order, duplicates included, and check
//! nested values for repeated members at every depth.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// An object's members in their written order, each value as raw JSON.
pub(super) type Members<'a> = Vec<(String, &'a RawValue)>;

/// Why text is not the JSON object a reader wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ObjectError {
    /// Not JSON, or JSON followed by more text.
    NotJson(String),
    /// JSON, but not an object.
    NotObject,
}

/// Reads `json` as exactly one JSON object (surrounding JSON whitespace
/// allowed) and lists its members, repeated ones included.
pub(super) fn object_members(json: &str) -> Result<Members<'_>, ObjectError> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let members = deserializer
        .deserialize_any(MembersVisitor)
        .map_err(|error| match error.classify() {
            serde_json::error::Category::Data => ObjectError::NotObject,
            // serde_json says where, in the text read: kept.
            _ => ObjectError::NotJson(error.to_string()),
        })?;
    deserializer
        .end()
        .map_err(|error| ObjectError::NotJson(error.to_string()))?;
    Ok(members)
}

/// `bytes` as UTF-8 text; the error is the message that says where `what`
/// stops being UTF-8.
pub(super) fn utf8_text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|error| {
        format!(
            "{what} is not UTF-8 (invalid byte at offset {})",
            error.valid_up_to()
        )
    })
}

/// Reads `json` as exactly one JSON object without a repeated member; the
/// error is the message that says what is wrong with `what`.
pub(super) fn unique_members<'a>(json: &'a str, what: &str) -> Result<Members<'a>, String> {
    if json.starts_with('\u{feff}') {
        return Err(format!(
            "{what} starts with a byte order mark (bytes EF BB BF), which JSON does not allow"
        ));
    }
    let members = object_members(json).map_err(|error| match error {
        ObjectError::NotObject => format!("{what} is not a JSON object"),
        ObjectError::NotJson(detail) => {
            format!("{what} is not exactly one JSON object: {detail}")
        }
    })?;
    match first_duplicate(&members) {
        Some(name) => Err(format!("duplicate member {name} in {what}")),
        None => Ok(members),
    }
}

/// The name of the first member that appears twice, if any.
fn first_duplicate<'m>(members: &'m Members<'_>) -> Option<&'m str> {
    let mut seen = HashSet::new();
    members
        .iter()
        .map(|(name, _)| name.as_str())
        .find(|name| !seen.insert(*name))
}

/// What makes a raw value mean different things to different readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unclear {
    /// An object repeats this member: readers keep the first or the last.
    Duplicate(String),
    /// A string or number no strict reader takes (a lone surrogate escape, a
    /// number out of range): one reader refuses it, another reads a
    /// replacement or an infinity. serde_json's words.
    Unreadable(String),
}

impl fmt::Display for Unclear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unclear::Duplicate(name) => write!(f, "is ambiguous: duplicate member {name}"),
            Unclear::Unreadable(detail) => {
                write!(f, "holds a value JSON readers do not agree on: {detail}")
            }
        }
    }
}

/// Checks that no object anywhere inside `value` repeats a member and that
/// every string and number in it reads strictly.
pub(super) fn find_nested_duplicate(value: &RawValue) -> Option<Unclear> {
    let mut deserializer = serde_json::Deserializer::from_str(value.get());
    let error = NoDuplicates.deserialize(&mut deserializer).err()?;
    // The position is inside the value, not the text it came in: left out.
    let detail = without_position(&error.to_string());
    Some(match detail.strip_prefix("duplicate member ") {
        Some(name) if error.classify() == serde_json::error::Category::Data => {
            Unclear::Duplicate(name.to_owned())
        }
        _ => Unclear::Unreadable(detail),
    })
}

/// Whether a raw JSON value is the literal `null`.
pub(super) fn is_null(value: &RawValue) -> bool {
    value.get().trim() == "null"
}

/// Reads `value`, the member `member` names (`risk`, `text of block 1`),
/// as a string; else says it must be one, and, of a string no text can
/// hold (an escaped lone surrogate, `"\ud800"`), that it is one, since
/// "must be a string" alone would misname the cause.
pub(super) fn string_member(value: &RawValue, member: &str) -> Result<String, String> {
    as_string(value).ok_or_else(|| {
        let found = match value.get().trim_start().starts_with('"') {
            true => ", found a string that is not Unicode text (an escaped lone surrogate)",
            false => "",
        };
        format!("member {member} must be a string{found}")
    })
}

/// Reads a raw JSON value as a string, `None` when it is not one.
pub(super) fn as_string(value: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(value.get()).ok()
}

/// serde_json appends " at line L column C", which inside a raw value is
/// not where the value is in its text.
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(index) => message[..index].to_owned(),
        None => message.to_owned(),
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let value: &'de RawValue = map.next_value()?;
            members.push((name, value));
        }
        Ok(members)
    }
}

/// Walks any JSON value and fails on the first object that repeats a member.
struct NoDuplicates;

impl<'de> DeserializeSeed<'de> for NoDuplicates {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoDuplicates {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(NoDuplicates)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                return Err(A::Error::custom(format!("duplicate member {name}")));
            }
            map.next_value_seed(NoDuplicates)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).expect("test JSON is valid")
    }

    #[test]
    fn members_keep_order_and_repeats() {
        let members = object_members(r#" {"b":1,"a":[2],"b":"x"} "#).expect("an object");
        let listed: Vec<(&str, &str)> =
            members.iter().map(|(n, v)| (n.as_str(), v.get())).collect();
        assert_eq!(listed, [("b", "1"), ("a", "[2]"), ("b", "\"x\"")]);
        assert_eq!(first_duplicate(&members), Some("b"));
    }

    #[test]
    fn escaped_names_are_compared_decoded() {
        let members = object_members(r#"{"risk":1,"ris\u006b":2}"#).expect("an object");
        assert_eq!(first_duplicate(&members), Some("risk"));
    }

    #[test]
    fn non_objects_and_trailing_text_are_told_apart() {
        assert_eq!(object_members("[1]").err(), Some(ObjectError::NotObject));
        assert_eq!(object_members("\"x\"").err(), Some(ObjectError::NotObject));
        assert!(matches!(
            object_members("{} {}"),
            Err(ObjectError::NotJson(_))
        ));
        assert!(matches!(object_members("{"), Err(ObjectError::NotJson(_))));
        assert!(matches!(object_members(""), Err(ObjectError::NotJson(_))));
    }

    #[test]
    fn nested_duplicates_are_found_at_any_depth() {
        assert_eq!(
            find_nested_duplicate(&raw(r#"{"a":[{"b":1}],"c":{}}"#)),
            None
        );
        assert_eq!(
            find_nested_duplicate(&raw(r#"{"a":[1,{"x":{"y":1,"y":2}}]}"#)),
            Some(Unclear::Duplicate("y".to_owned()))
        );
    }

    #[test]
    fn values_readers_disagree_on_are_not_called_duplicates() {
        for (json, detail) in [
            (r#"{"a":"\ud800"}"#, "hex escape"),
            (r#"{"a":1e999}"#, "number out of range"),
        ] {
            // As a member of an object read, the raw value is kept unread
            // (a raw value made alone would be refused at once).
            let text = format!(r#"{{"arguments":{json}}}"#);
            let members = object_members(&text).expect("an object");
            match find_nested_duplicate(members[0].1) {
                Some(Unclear::Unreadable(found)) => assert!(found.contains(detail), "{found}"),
                other => panic!("{json}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_top_level_error_says_where_and_a_byte_order_mark_is_named() {
        let cut = unique_members("{\"a\":1,\n\"b\":", "the action").expect_err("cut short");
        assert!(cut.ends_with("at line 2 column 4"), "{cut}");
        let marked = unique_members("\u{feff}{}", "the action").expect_err("a BOM");
        assert!(marked.contains("byte order mark"), "{marked}");
    }
}
