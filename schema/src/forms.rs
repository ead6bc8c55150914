//! The forms of the v1 vocabulary: which members of each known type are
//! objects, arrays of objects or optional, in one table that every parse
//! of an event's `data` checks first.
//!
//! serde's derived structs read a struct from a JSON array of its fields
//! in order (`"source":["user"]`), and an internally tagged enum from an
//! array whose first element is the tag (`["text","a"]`); `Option` takes
//! `null` for an absent member. The format says otherwise: every object of
//! the vocabulary is a JSON object, and an optional member is left out,
//! never `null`. Rather than patch each struct (and each mirror of it),
//! [`check_forms`] walks `data` against [`forms_of`] and refuses an array
//! where the table says object, and `null` where it says optional, naming
//! the member. The owned parse ([`Event::parse`](crate::Event::parse)) and
//! the serde mirrors of [`EventView`](crate::EventView) both run it before
//! serde reads the value, so no path can accept the array form again; the
//! hand scanner reads only objects and leaves `null` to them.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::{EventType, ShapeError};

/// What a value of the vocabulary must be, beyond what its Rust type says.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Form {
    /// Anything serde's type for it takes (a string, a number, any JSON).
    Value,
    /// A JSON object with these members; others are ignored.
    Object(&'static [Member]),
    /// A JSON array whose elements have this form.
    Array(&'static Form),
}

/// One member of an object form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    name: &'static str,
    form: Form,
    optional: bool,
}

const fn required(name: &'static str, form: Form) -> Member {
    Member {
        name,
        form,
        optional: false,
    }
}

const fn optional(name: &'static str, form: Form) -> Member {
    Member {
        name,
        form,
        optional: true,
    }
}

const VALUE: Form = Form::Value;

const TOOL_DEFINITION: Form = Form::Object(&[
    required("name", VALUE),
    required("description", VALUE),
    required("parameters", VALUE),
]);

const REQUEST_HEADER: &[Member] = &[
    required("provider", VALUE),
    required("model", VALUE),
    required("approvalPolicy", VALUE),
    required("sandboxMode", VALUE),
    required("tools", Form::Array(&TOOL_DEFINITION)),
];

const MESSAGE_SOURCE: Form = Form::Object(&[
    required("kind", VALUE),
    optional("senderSessionId", VALUE),
    optional("name", VALUE),
]);

/// A content part: which members it needs depends on its `type`, which
/// serde checks; every member but `type` is optional for some kind of
/// part, and none is ever `null`.
const CONTENT_PART: Form = Form::Object(&[
    required("type", VALUE),
    optional("text", VALUE),
    optional("mediaType", VALUE),
    optional("name", VALUE),
    optional("size", VALUE),
    optional("data", VALUE),
]);

const MESSAGE: &[Member] = &[
    required("role", VALUE),
    required("source", MESSAGE_SOURCE),
    required("content", Form::Array(&CONTENT_PART)),
];

const TOOL_START: &[Member] = &[
    required("callId", VALUE),
    required("stepId", VALUE),
    required("name", VALUE),
    required("arguments", VALUE),
    optional("parentCallId", VALUE),
];

const TOOL_ERROR: Form = Form::Object(&[
    required("name", VALUE),
    required("code", VALUE),
    optional("message", VALUE),
    optional("reason", VALUE),
]);

const TOOL_SETTLE: &[Member] = &[
    required("callId", VALUE),
    required("status", VALUE),
    optional("result", VALUE),
    optional("error", TOOL_ERROR),
];

const APPROVAL_ASKED: &[Member] = &[
    required("requestId", VALUE),
    required("turnId", VALUE),
    required("tool", VALUE),
    optional("reason", VALUE),
    optional("callId", VALUE),
];

const SEAL: &[Member] = &[
    required("throughSeq", VALUE),
    required("chain", VALUE),
    optional("key", VALUE),
    optional("sig", VALUE),
];

/// The members of `known`'s `data` that the table says more about than
/// their Rust type does (`data` itself is always an object).
pub(crate) fn forms_of(known: EventType) -> &'static [Member] {
    match known {
        EventType::RequestHeader => REQUEST_HEADER,
        EventType::Message => MESSAGE,
        EventType::ToolStart => TOOL_START,
        EventType::ToolSettle => TOOL_SETTLE,
        EventType::ApprovalAsked => APPROVAL_ASKED,
        EventType::Seal => SEAL,
        EventType::TurnStart
        | EventType::TurnEnd
        | EventType::StepStart
        | EventType::StepEnd
        | EventType::ApprovalPolicy
        | EventType::SandboxMode
        | EventType::PermissionPreset
        | EventType::ApprovalDecided
        | EventType::Checkpoint
        | EventType::ChildCreated => &[],
    }
}

/// Checks `data` of a known type against its forms: `data` and every
/// object of the table are JSON objects, and no optional member is `null`.
/// Everything else (required members, their types, the vocabularies) is
/// left to serde; text that is not JSON passes here and fails there.
pub(crate) fn check_forms(known: EventType, data: &str) -> Result<(), ShapeError> {
    let seed = FormSeed {
        form: Form::Object(forms_of(known)),
        optional: false,
    };
    // Almost every event passes: check it directly, and only when that
    // fails check it again tracking the path, to name the member.
    let mut deserializer = serde_json::Deserializer::from_str(data);
    match seed.deserialize(&mut deserializer) {
        Ok(()) => return Ok(()),
        // Not JSON: serde's own parse says so, with its message.
        Err(error) if !error.is_data() => return Ok(()),
        Err(_) => {}
    }
    let mut deserializer = serde_json::Deserializer::from_str(data);
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(&mut deserializer, &mut track);
    let Err(error) = seed.deserialize(tracked) else {
        return Ok(());
    };
    let path = track.path().to_string();
    Err(ShapeError {
        event_type: known.as_str(),
        path: if path == "." || path.is_empty() {
            "data".to_owned()
        } else {
            format!("data.{path}")
        },
        message: crate::event::serde_message(&error.to_string()),
    })
}

/// The messages of a refused form.
const NOT_AN_OBJECT: &str = "must be a JSON object (an array of its fields is not one)";
const NULL_OPTIONAL: &str =
    "is optional and must be left out, never null (an optional member is never null)";

#[derive(Clone, Copy)]
struct FormSeed {
    form: Form,
    optional: bool,
}

impl<'de> DeserializeSeed<'de> for FormSeed {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FormSeed {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.optional {
            return Err(E::custom(NULL_OPTIONAL));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let element = match self.form {
            Form::Object(_) => return Err(de::Error::custom(NOT_AN_OBJECT)),
            Form::Array(element) => Some(*element),
            Form::Value => None,
        };
        match element {
            Some(form) => {
                let seed = FormSeed {
                    form,
                    optional: false,
                };
                while seq.next_element_seed(seed)?.is_some() {}
            }
            None => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let members = match self.form {
            Form::Object(members) => members,
            Form::Array(_) | Form::Value => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(());
            }
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match members.iter().find(|member| member.name == key) {
                Some(member) => map.next_value_seed(FormSeed {
                    form: member.form,
                    optional: member.optional,
                })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(known: EventType, data: &str) -> String {
        match check_forms(known, data) {
            Ok(()) => panic!("{data} passed the form check"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn arrays_where_objects_belong_are_refused_naming_the_member() {
        let cases = [
            (EventType::TurnStart, r#"["t1"]"#, "turn/start data:"),
            (
                EventType::Message,
                r#"{"role":"user","source":["user"],"content":[]}"#,
                "message data.source:",
            ),
            (
                EventType::Message,
                r#"{"role":"user","source":{"kind":"user"},"content":[["text","a"]]}"#,
                "message data.content[0]:",
            ),
            (
                EventType::RequestHeader,
                r#"{"provider":"p","model":"m","approvalPolicy":"ask","sandboxMode":"read-only","tools":[["n","d",{}]]}"#,
                "request/header data.tools[0]:",
            ),
            (
                EventType::ToolSettle,
                r#"{"callId":"c","status":"error","error":["E","C"]}"#,
                "tool/settle data.error:",
            ),
        ];
        for (known, data, prefix) in cases {
            let message = refused(known, data);
            assert!(message.starts_with(prefix), "{message}");
            assert!(message.contains("must be a JSON object"), "{message}");
        }
    }

    #[test]
    fn null_optional_members_are_refused_and_other_values_left_to_serde() {
        let message = refused(
            EventType::ToolSettle,
            r#"{"callId":"c","status":"ok","result":null}"#,
        );
        assert!(message.starts_with("tool/settle data.result:"), "{message}");
        assert!(message.contains("never null"), "{message}");
        for (known, data) in [
            // A required member's null, a wrong scalar, arguments of any
            // form, unknown members of any form: serde decides.
            (EventType::TurnStart, r#"{"turnId":null}"#),
            (
                EventType::ToolStart,
                r#"{"callId":"c","stepId":"s","name":"n","arguments":[1,null]}"#,
            ),
            (EventType::Checkpoint, r#"{"summary":["s"],"other":[{}]}"#),
            (EventType::ToolSettle, r#"{"callId":"c","result":[null]}"#),
            (EventType::TurnStart, r#"{"turnId":"#),
        ] {
            assert_eq!(check_forms(known, data), Ok(()), "{data}");
        }
    }
}
