//! The pending action: the tool call waiting for its review (docs/EVENTS.md, "The Auto reviewer").
//!
//! It arrives from the runtime, not from the log, so it is read strictly:
//! exactly the members `callId`, `stepId`, `name`, `arguments` and the
//! optional `parentCallId` and `schema`, none null, none repeated, no other.
//! Arguments and parameter schemas are kept as raw JSON so the reviewer sees
//! them as the runtime wrote them, and may not repeat a member at any depth:
//! a tool and its reviewer must never read two different values out of one
//! ambiguous object.

use serde_json::value::RawValue;
use sessionlog_schema::{EventData, ToolStart};

use super::error::{ReviewError, ReviewErrorCode};
use super::strict::{
    find_nested_duplicate, is_null, string_member, unique_members, utf8_text, Members,
};

/// A tool call waiting for review.
#[derive(Debug, Clone)]
pub struct PendingAction {
    /// The call's id; unique over the whole log once started.
    pub call_id: String,
    /// The step the call belongs to; must be the open step.
    pub step_id: String,
    /// The tool's name.
    pub name: String,
    /// The call's arguments, raw JSON (never `null`).
    pub arguments: Box<RawValue>,
    /// For a call made from inside a program tool: the program's call.
    pub parent_call_id: Option<String>,
    /// The frozen schema an inner call brings; a native call brings none.
    pub schema: Option<ToolSchema>,
}

/// The description and parameter schema of an inner call's tool, frozen when
/// the program's binding was built.
#[derive(Debug, Clone)]
pub struct ToolSchema {
    /// What the tool does.
    pub description: String,
    /// Its parameter schema, raw JSON (never `null`).
    pub parameters: Box<RawValue>,
}

const ACTION: &str = "the pending action";
const ACTION_MEMBERS: &[&str] = &[
    "callId",
    "stepId",
    "name",
    "arguments",
    "parentCallId",
    "schema",
];
const SCHEMA: &str = "member schema of the pending action";
const SCHEMA_MEMBERS: &[&str] = &["description", "parameters"];

/// Reads a pending action strictly; any deviation is `INVALID_ACTION` naming
/// the member.
///
/// ```
/// use sessionlog_projections::{parse_pending_action, ReviewErrorCode};
///
/// let action = parse_pending_action(
///     br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
/// )?;
/// assert_eq!(action.tool_start_data(), r#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#);
/// let null = parse_pending_action(br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":null}"#);
/// assert_eq!(null.map_err(|error| error.code).err(), Some(ReviewErrorCode::InvalidAction));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_pending_action(json: &[u8]) -> Result<PendingAction, ReviewError> {
    let text = utf8_text(json, ACTION).map_err(invalid)?;
    let members = strict_members(text, ACTION, ACTION_MEMBERS)?;
    let action = PendingAction {
        call_id: required_string(&members, "callId", ACTION)?,
        step_id: required_string(&members, "stepId", ACTION)?,
        name: required_string(&members, "name", ACTION)?,
        arguments: required_value(&members, "arguments", ACTION)?,
        parent_call_id: optional(&members, "parentCallId", ACTION)?
            .map(|value| string_of(value, "parentCallId", ACTION))
            .transpose()?,
        schema: optional(&members, "schema", ACTION)?
            .map(schema_of)
            .transpose()?,
    };
    action.check_raw_values()?;
    Ok(action)
}

impl PendingAction {
    /// The `data` of the `tool/start` that starts this call: compact JSON
    /// `{callId, stepId, name, arguments, parentCallId?}`, arguments as the
    /// runtime wrote them. An inner call's frozen schema is not logged.
    pub fn tool_start_data(&self) -> String {
        self.tool_start().to_json()
    }

    /// The `tool/start` data that starts this call (see
    /// [`tool_start_data`](Self::tool_start_data)).
    pub fn tool_start(&self) -> ToolStart {
        ToolStart {
            call_id: self.call_id.clone(),
            step_id: self.step_id.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
            parent_call_id: self.parent_call_id.clone(),
        }
    }

    /// The pending action a logged `tool/start` was before it started. It
    /// brings no schema: the log keeps none, so an inner call rebuilt this
    /// way fails closed with `MISSING_SCHEMA`.
    pub fn from_tool_start(start: &ToolStart) -> PendingAction {
        PendingAction {
            call_id: start.call_id.clone(),
            step_id: start.step_id.clone(),
            name: start.name.clone(),
            arguments: start.arguments.clone(),
            parent_call_id: start.parent_call_id.clone(),
            schema: None,
        }
    }

    /// Checks what a hand-built action could get wrong and a parsed one
    /// cannot: raw values that are `null` or repeat a member.
    pub(super) fn check_raw_values(&self) -> Result<(), ReviewError> {
        check_raw(&self.arguments, "arguments")?;
        if let Some(schema) = &self.schema {
            check_raw(&schema.parameters, "schema.parameters")?;
        }
        Ok(())
    }
}

fn invalid(message: impl Into<String>) -> ReviewError {
    ReviewError::new(ReviewErrorCode::InvalidAction, message)
}

fn check_raw(value: &RawValue, path: &str) -> Result<(), ReviewError> {
    if is_null(value) {
        return Err(invalid(format!("member {path} of {ACTION} is null")));
    }
    match find_nested_duplicate(value) {
        Some(unclear) => Err(invalid(format!("member {path} of {ACTION} {unclear}"))),
        None => Ok(()),
    }
}

fn strict_members<'a>(
    json: &'a str,
    what: &str,
    allowed: &[&str],
) -> Result<Members<'a>, ReviewError> {
    let members = unique_members(json, what).map_err(invalid)?;
    if let Some((name, _)) = members.iter().find(|(name, _)| !allowed.contains(&&**name)) {
        return Err(invalid(format!("unexpected member {name} in {what}")));
    }
    Ok(members)
}

/// The member `name` if present; present but `null` is an error.
fn optional<'a>(
    members: &Members<'a>,
    name: &str,
    what: &str,
) -> Result<Option<&'a RawValue>, ReviewError> {
    match members.iter().find(|(member, _)| member == name) {
        None => Ok(None),
        Some((_, value)) if is_null(value) => {
            Err(invalid(format!("member {name} of {what} is null")))
        }
        Some((_, value)) => Ok(Some(*value)),
    }
}

fn required_value(
    members: &Members<'_>,
    name: &str,
    what: &str,
) -> Result<Box<RawValue>, ReviewError> {
    optional(members, name, what)?
        .map(RawValue::to_owned)
        .ok_or_else(|| invalid(format!("{what} has no member {name}")))
}

fn required_string(members: &Members<'_>, name: &str, what: &str) -> Result<String, ReviewError> {
    let value = optional(members, name, what)?
        .ok_or_else(|| invalid(format!("{what} has no member {name}")))?;
    string_of(value, name, what)
}

fn string_of(value: &RawValue, name: &str, what: &str) -> Result<String, ReviewError> {
    string_member(value, &format!("{name} of {what}")).map_err(invalid)
}

fn schema_of(value: &RawValue) -> Result<ToolSchema, ReviewError> {
    let members = strict_members(value.get(), SCHEMA, SCHEMA_MEMBERS)?;
    Ok(ToolSchema {
        description: required_string(&members, "description", SCHEMA)?,
        parameters: required_value(&members, "parameters", SCHEMA)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(json: &str) -> String {
        match parse_pending_action(json.as_bytes()) {
            Ok(action) => panic!("{json} parsed as {action:?}"),
            Err(error) => {
                assert_eq!(error.code, ReviewErrorCode::InvalidAction, "for {json}");
                error.message
            }
        }
    }

    #[test]
    fn a_native_and_an_inner_action_parse() {
        let native = parse_pending_action(
            br#"{"callId":"c1","stepId":"s1","name":"bash","arguments":{"cmd":"ls -la"}}"#,
        )
        .expect("a valid native action");
        assert_eq!(
            (
                native.call_id.as_str(),
                native.step_id.as_str(),
                native.name.as_str()
            ),
            ("c1", "s1", "bash")
        );
        assert_eq!(native.arguments.get(), r#"{"cmd":"ls -la"}"#);
        assert!(native.parent_call_id.is_none() && native.schema.is_none());

        let inner = parse_pending_action(
            br#"{"callId":"c2","stepId":"s1","name":"tools.read","arguments":[1],"parentCallId":"c1","schema":{"description":"Reads","parameters":{"type":"object"}}}"#,
        )
        .expect("a valid inner action");
        assert_eq!(inner.parent_call_id.as_deref(), Some("c1"));
        let schema = inner.schema.expect("schema kept");
        assert_eq!(schema.description, "Reads");
        assert_eq!(schema.parameters.get(), r#"{"type":"object"}"#);
    }

    #[test]
    fn an_action_starts_as_the_tool_start_it_becomes() {
        let inner = parse_pending_action(
            br#"{"name":"tools.read","callId":"c2","arguments":{"path":"a b"},"stepId":"s1","parentCallId":"c1","schema":{"description":"Reads","parameters":{}}}"#,
        )
        .expect("a valid inner action");
        let data = inner.tool_start_data();
        assert_eq!(
            data,
            r#"{"callId":"c2","stepId":"s1","name":"tools.read","arguments":{"path":"a b"},"parentCallId":"c1"}"#
        );
        let sessionlog_schema::Event::ToolStart(start) =
            sessionlog_schema::Event::parse("tool/start", &data).expect("a valid tool/start")
        else {
            panic!("not a tool/start");
        };
        let again = PendingAction::from_tool_start(&start);
        assert_eq!(again.tool_start_data(), data);
        assert!(again.schema.is_none());
    }

    #[test]
    fn malformed_actions_name_the_member() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"stepId":"s","name":"n","arguments":{}}"#,
                "the pending action has no member callId",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n"}"#,
                "the pending action has no member arguments",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":null}"#,
                "member arguments of the pending action is null",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"parentCallId":null}"#,
                "member parentCallId of the pending action is null",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"schema":null}"#,
                "member schema of the pending action is null",
            ),
            (
                r#"{"callId":7,"stepId":"s","name":"n","arguments":{}}"#,
                "member callId of the pending action must be a string",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"turnId":"t"}"#,
                "unexpected member turnId in the pending action",
            ),
            (
                r#"{"callId":"c","callId":"d","stepId":"s","name":"n","arguments":{}}"#,
                "duplicate member callId in the pending action",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{"path":"a","path":"/etc"}}"#,
                "member arguments of the pending action is ambiguous: duplicate member path",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"parentCallId":"p","schema":{"description":"d"}}"#,
                "member schema of the pending action has no member parameters",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"parentCallId":"p","schema":{"description":"d","parameters":{},"x":1}}"#,
                "unexpected member x in member schema of the pending action",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"parentCallId":"p","schema":{"description":"d","parameters":{"a":{"b":1,"b":1}}}}"#,
                "member schema.parameters of the pending action is ambiguous: duplicate member b",
            ),
            (
                r#"{"callId":"c","stepId":"s","name":"n","arguments":{},"parentCallId":"p","schema":"d"}"#,
                "member schema of the pending action is not a JSON object",
            ),
            ("[]", "the pending action is not a JSON object"),
            (
                r#"{"callId":"c"} x"#,
                "the pending action is not exactly one JSON object: trailing characters at line 1 column 16",
            ),
        ];
        for (json, expected) in cases {
            assert_eq!(error(json), *expected, "for {json}");
        }
    }
}
