//! The reviewer's reply, read strictly, and the records its outcome leaves
//! (docs/EVENTS.md, "The reviewer's reply").
//!
//! A reply is valid only in one shape: reasoning blocks, then exactly one text
//! block holding exactly one JSON object `{risk, decision, reason?}` with an
//! allowed pair, then stop reason `stop`. Everything else is a reviewer
//! failure with a message that says precisely what was wrong, because a
//! failure is reported to the user and must be actionable. Nothing here
//! guesses: case, extra members and repeated members all fail.

use serde::Serialize;
use serde_json::value::RawValue;
use sessionlog_schema::{EventData, ToolError, ToolSettle};

use super::strict::{string_member, unique_members, utf8_text, Members};

/// The stable code of a reviewer failure.
pub const AUTO_REVIEW_FAILED: &str = "AUTO_REVIEW_FAILED";

/// The stable code of a final denial.
pub const AUTO_REVIEW_DENIED: &str = "AUTO_REVIEW_DENIED";

/// How risky the reviewer judged the pending call's actual effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Project-local work; allowed.
    Low,
    /// Allowed only with explicit user or direct-parent authorization.
    Medium,
    /// Denied even when requested.
    High,
}

/// What the reviewer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run the call now, with full access.
    Allow,
    /// Do not run the call's body.
    Deny,
}

/// A valid reviewer decision. Serializes as `{"risk":..,"decision":..}`, with
/// `"reason"` only when the reviewer gave one (only possible with a denial).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewDecision {
    /// The risk class.
    pub risk: Risk,
    /// The decision.
    pub decision: Decision,
    /// The reviewer's reason for a denial, kept whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A reply that is not a valid decision (code `AUTO_REVIEW_FAILED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("auto review failed: {message}")]
pub struct ReviewFailure {
    /// What exactly was wrong with the reply.
    pub message: String,
}

impl Risk {
    /// Every class, low to high.
    pub const ALL: &'static [Risk] = &[Risk::Low, Risk::Medium, Risk::High];

    /// The spelling in a reply.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }

    /// Parses the spelling of a reply (case-sensitive).
    pub fn parse(text: &str) -> Option<Risk> {
        Risk::ALL.iter().copied().find(|risk| risk.as_str() == text)
    }
}

impl Decision {
    /// Both decisions.
    pub const ALL: &'static [Decision] = &[Decision::Allow, Decision::Deny];

    /// The spelling in a reply.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }

    /// Parses the spelling of a reply (case-sensitive).
    pub fn parse(text: &str) -> Option<Decision> {
        Decision::ALL
            .iter()
            .copied()
            .find(|decision| decision.as_str() == text)
    }
}

impl ReviewDecision {
    /// Whether `risk` with `decision` is one of the four pairs a reviewer may
    /// answer: low+allow, medium+allow, medium+deny, high+deny.
    pub fn is_allowed_pair(risk: Risk, decision: Decision) -> bool {
        match (risk, decision) {
            (Risk::Low, Decision::Allow)
            | (Risk::Medium, Decision::Allow)
            | (Risk::Medium, Decision::Deny)
            | (Risk::High, Decision::Deny) => true,
            (Risk::Low, Decision::Deny) | (Risk::High, Decision::Allow) => false,
        }
    }
}

impl ReviewFailure {
    /// The stable code, `AUTO_REVIEW_FAILED`.
    pub fn code(&self) -> &'static str {
        AUTO_REVIEW_FAILED
    }

    pub(super) fn new(message: impl Into<String>) -> Self {
        ReviewFailure {
            message: message.into(),
        }
    }
}

/// Reads a reviewer reply `{blocks, stop}` strictly (see the module docs).
pub fn parse_review_result(reply_json: &[u8]) -> Result<ReviewDecision, ReviewFailure> {
    let text = utf8_text(reply_json, "the reply").map_err(ReviewFailure::new)?;
    let members = members_of(text, "the reply")?;
    let blocks = required(&members, "blocks", "the reply", &["blocks", "stop"])?;
    let stop = required(&members, "stop", "the reply", &["blocks", "stop"])?;

    let blocks: Vec<&RawValue> = serde_json::from_str(blocks.get())
        .map_err(|_| ReviewFailure::new("member blocks of the reply must be an array"))?;
    let decision_text = the_text_block(&blocks)?;

    let stop = string_member(stop, "stop of the reply").map_err(ReviewFailure::new)?;
    if stop != "stop" {
        return Err(ReviewFailure::new(format!(
            "stop reason is {stop:?}, expected \"stop\""
        )));
    }
    decision_of(&decision_text)
}

/// The `data` of the `tool/settle` that records a final denial: compact JSON,
/// status `error`, the reviewer's reason kept whole.
///
/// ```
/// use sessionlog_projections::{denial_notice, denial_settle_data};
///
/// assert_eq!(
///     denial_settle_data("c1", Some("reads a private key")),
///     r#"{"callId":"c1","status":"error","error":{"name":"AutoReviewDeniedError","code":"AUTO_REVIEW_DENIED","reason":"reads a private key"}}"#
/// );
/// // All the model is shown:
/// assert_eq!(denial_notice("shell"), r#"Auto review rejected tool "shell"; its body was not executed"#);
/// ```
pub fn denial_settle_data(call_id: &str, reason: Option<&str>) -> String {
    let error = ToolError::new("AutoReviewDeniedError", AUTO_REVIEW_DENIED);
    let error = match reason {
        Some(reason) => error.with_reason(reason),
        None => error,
    };
    ToolSettle::error(call_id, error).to_json()
}

/// The `data` of the `tool/settle` that records a reviewer failure: compact
/// JSON, status `error`, the failure's message.
pub fn failure_settle_data(call_id: &str, message: &str) -> String {
    let error = ToolError::new("AutoReviewFailedError", AUTO_REVIEW_FAILED).with_message(message);
    ToolSettle::error(call_id, error).to_json()
}

/// All the model sees of a final denial.
pub fn denial_notice(tool_name: &str) -> String {
    format!("Auto review rejected tool \"{tool_name}\"; its body was not executed")
}

/// Lists the members of the object `json`, failing on anything but one
/// object without repeated members. `what` names it in messages.
pub(super) fn members_of<'a>(json: &'a str, what: &str) -> Result<Members<'a>, ReviewFailure> {
    unique_members(json, what).map_err(ReviewFailure::new)
}

fn is_one_of(name: &str, names: &[&str]) -> bool {
    names.contains(&name)
}

/// The member `name`, after checking that `members` holds no name outside
/// `allowed`.
fn required<'a>(
    members: &Members<'a>,
    name: &str,
    what: &str,
    allowed: &[&str],
) -> Result<&'a RawValue, ReviewFailure> {
    unexpected(members, what, allowed)?;
    members
        .iter()
        .find(|(member, _)| member == name)
        .map(|(_, value)| *value)
        .ok_or_else(|| ReviewFailure::new(format!("{what} has no member {name}")))
}

fn unexpected(members: &Members<'_>, what: &str, allowed: &[&str]) -> Result<(), ReviewFailure> {
    match members.iter().find(|(name, _)| !is_one_of(name, allowed)) {
        Some((name, _)) => Err(ReviewFailure::new(format!(
            "unexpected member {name} in {what}"
        ))),
        None => Ok(()),
    }
}

/// Checks the block sequence (reasoning*, one text, nothing after) and gives
/// the text of its text block.
fn the_text_block(blocks: &[&RawValue]) -> Result<String, ReviewFailure> {
    let mut text_block: Option<(usize, String)> = None;
    let mut text_blocks = 0;
    let mut reasoning_after_text = None;
    for (index, block) in blocks.iter().enumerate() {
        let number = index + 1;
        let what = format!("block {number}");
        let members = members_of(block.get(), &what)?;
        let kind = required(&members, "type", &what, &["type", "text"])?;
        let text = required(&members, "text", &what, &["type", "text"])?;
        let kind = string_member(kind, &format!("type of {what}")).map_err(ReviewFailure::new)?;
        let text = string_member(text, &format!("text of {what}")).map_err(ReviewFailure::new)?;
        match kind.as_str() {
            "reasoning" => {
                if text_block.is_some() && reasoning_after_text.is_none() {
                    reasoning_after_text = Some(number);
                }
            }
            "text" => {
                text_blocks += 1;
                if text_block.is_none() {
                    text_block = Some((number, text));
                }
            }
            other => {
                return Err(ReviewFailure::new(format!(
                    "{what} has type {other:?}, expected \"reasoning\" or \"text\""
                )))
            }
        }
    }
    if text_blocks > 1 {
        return Err(ReviewFailure::new(format!(
            "the reply has {text_blocks} text blocks, expected exactly 1"
        )));
    }
    if let Some(number) = reasoning_after_text {
        return Err(ReviewFailure::new(format!(
            "block {number} is a reasoning block after the text block; the text block must come last"
        )));
    }
    match text_block {
        Some((_, text)) => Ok(text),
        None => Err(ReviewFailure::new("the reply has no text block")),
    }
}

/// Reads the decision object held by the text block.
fn decision_of(text: &str) -> Result<ReviewDecision, ReviewFailure> {
    const WHAT: &str = "the text block";
    const NAMES: &[&str] = &["risk", "decision", "reason"];
    let members = members_of(text, WHAT)?;
    let risk = required(&members, "risk", WHAT, NAMES)?;
    let decision = required(&members, "decision", WHAT, NAMES)?;
    let reason = members
        .iter()
        .find(|(name, _)| name == "reason")
        .map(|(_, value)| *value);

    let risk = string_member(risk, "risk")
        .map_err(ReviewFailure::new)
        .and_then(|text| {
            Risk::parse(&text).ok_or_else(|| {
                ReviewFailure::new(format!(
                    "risk {text:?} is not one of \"low\", \"medium\", \"high\""
                ))
            })
        })?;
    let decision = string_member(decision, "decision")
        .map_err(ReviewFailure::new)
        .and_then(|text| {
            Decision::parse(&text).ok_or_else(|| {
                ReviewFailure::new(format!(
                    "decision {text:?} is not one of \"allow\", \"deny\""
                ))
            })
        })?;
    if !ReviewDecision::is_allowed_pair(risk, decision) {
        return Err(ReviewFailure::new(format!(
            "risk {} with decision {} is not an allowed pair (low+allow, medium+allow, medium+deny, high+deny)",
            risk.as_str(),
            decision.as_str()
        )));
    }
    let reason = match reason {
        None => None,
        Some(_) if decision != Decision::Deny => {
            return Err(ReviewFailure::new(
                "member reason is only allowed with decision deny",
            ))
        }
        Some(value) => Some(string_member(value, "reason").map_err(ReviewFailure::new)?),
    };
    Ok(ReviewDecision {
        risk,
        decision,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reply with reasoning, then one text block holding `object`, then `stop`.
    fn reply(object: &str) -> String {
        serde_json::json!({
            "blocks": [
                {"type": "reasoning", "text": "thinking"},
                {"type": "text", "text": object},
            ],
            "stop": "stop",
        })
        .to_string()
    }

    fn accepted(reply_json: &str) -> String {
        match parse_review_result(reply_json.as_bytes()) {
            Ok(decision) => serde_json::to_string(&decision).expect("a decision serializes"),
            Err(failure) => panic!("{reply_json} failed: {}", failure.message),
        }
    }

    fn failure(reply_json: &str) -> String {
        match parse_review_result(reply_json.as_bytes()) {
            Ok(decision) => panic!("{reply_json} was accepted as {decision:?}"),
            Err(failure) => failure.message,
        }
    }

    #[test]
    fn the_four_pairs_are_accepted() {
        assert_eq!(
            accepted(&reply(r#"{"risk":"low","decision":"allow"}"#)),
            r#"{"risk":"low","decision":"allow"}"#
        );
        assert_eq!(
            accepted(&reply(r#"{"risk":"medium","decision":"allow"}"#)),
            r#"{"risk":"medium","decision":"allow"}"#
        );
        assert_eq!(
            accepted(&reply(r#"{"risk":"medium","decision":"deny"}"#)),
            r#"{"risk":"medium","decision":"deny"}"#
        );
        assert_eq!(
            accepted(&reply(
                "\n  {\"decision\":\"deny\",\"risk\":\"high\",\"reason\":\"sends ~/.ssh/id_rsa\\nout\"}\t\n"
            )),
            r#"{"risk":"high","decision":"deny","reason":"sends ~/.ssh/id_rsa\nout"}"#
        );
    }

    #[test]
    fn only_reasoning_may_precede_the_text_block() {
        assert_eq!(
            accepted(
                r#"{"stop":"stop","blocks":[{"type":"text","text":"{\"risk\":\"low\",\"decision\":\"allow\"}"}]}"#
            ),
            r#"{"risk":"low","decision":"allow"}"#
        );
        assert_eq!(
            failure(
                r#"{"blocks":[{"type":"text","text":"{\"risk\":\"low\",\"decision\":\"allow\"}"},{"type":"reasoning","text":"x"}],"stop":"stop"}"#
            ),
            "block 2 is a reasoning block after the text block; the text block must come last"
        );
        assert_eq!(
            failure(
                r#"{"blocks":[{"type":"text","text":"{}"},{"type":"text","text":"{}"}],"stop":"stop"}"#
            ),
            "the reply has 2 text blocks, expected exactly 1"
        );
        assert_eq!(
            failure(r#"{"blocks":[{"type":"reasoning","text":"x"}],"stop":"stop"}"#),
            "the reply has no text block"
        );
        assert_eq!(
            failure(r#"{"blocks":[{"type":"tool_use","text":"x"}],"stop":"stop"}"#),
            "block 1 has type \"tool_use\", expected \"reasoning\" or \"text\""
        );
    }

    #[test]
    fn failures_say_what_was_wrong() {
        let cases: &[(&str, &str)] = &[
            (r#"{"risk":"low","decision":"deny"}"#, "risk low with decision deny is not an allowed pair (low+allow, medium+allow, medium+deny, high+deny)"),
            (r#"{"risk":"high","decision":"allow"}"#, "risk high with decision allow is not an allowed pair (low+allow, medium+allow, medium+deny, high+deny)"),
            (r#"{"risk":"Low","decision":"allow"}"#, "risk \"Low\" is not one of \"low\", \"medium\", \"high\""),
            (r#"{"risk":"low","decision":"ALLOW"}"#, "decision \"ALLOW\" is not one of \"allow\", \"deny\""),
            (r#"{"risk":"low","decision":"allow","reason":"fine"}"#, "member reason is only allowed with decision deny"),
            (r#"{"risk":"high","decision":"deny","reason":7}"#, "member reason must be a string"),
            (r#"{"risk":"high","decision":"deny","reason":null}"#, "member reason must be a string"),
            (r#"{"risk":"low","decision":"allow","confidence":1}"#, "unexpected member confidence in the text block"),
            (r#"{"risk":"low","risk":"low","decision":"allow"}"#, "duplicate member risk in the text block"),
            (r#"{"decision":"deny","risk":"high","decision":"allow"}"#, "duplicate member decision in the text block"),
            (r#"{"risk":"low"}"#, "the text block has no member decision"),
            (r#"{"risk":1,"decision":"allow"}"#, "member risk must be a string"),
            (r#"{"risk":"low","decision":"allow"} {"risk":"low","decision":"allow"}"#, "the text block is not exactly one JSON object: trailing characters at line 1 column 35"),
            (r#"Sure! {"risk":"low","decision":"allow"}"#, "the text block is not exactly one JSON object: expected value at line 1 column 1"),
            (r#"```json
{"risk":"low","decision":"allow"}
```"#, "the text block is not exactly one JSON object: expected value at line 1 column 1"),
            (r#"["low","allow"]"#, "the text block is not a JSON object"),
        ];
        for (object, expected) in cases {
            assert_eq!(failure(&reply(object)), *expected, "for {object}");
        }
    }

    #[test]
    fn the_reply_itself_is_strict() {
        let ok_text = r#""{\"risk\":\"low\",\"decision\":\"allow\"}""#;
        let cases: Vec<(String, &str)> = vec![
            (
                format!(r#"{{"blocks":[{{"type":"text","text":{ok_text}}}],"stop":"length"}}"#),
                "stop reason is \"length\", expected \"stop\"",
            ),
            (
                format!(r#"{{"blocks":[{{"type":"text","text":{ok_text}}}],"stop":"STOP"}}"#),
                "stop reason is \"STOP\", expected \"stop\"",
            ),
            (
                format!(r#"{{"blocks":[{{"type":"text","text":{ok_text}}}]}}"#),
                "the reply has no member stop",
            ),
            (
                format!(
                    r#"{{"blocks":[{{"type":"text","text":{ok_text}}}],"stop":"stop","usage":{{}}}}"#
                ),
                "unexpected member usage in the reply",
            ),
            (
                format!(
                    r#"{{"blocks":[],"blocks":[{{"type":"text","text":{ok_text}}}],"stop":"stop"}}"#
                ),
                "duplicate member blocks in the reply",
            ),
            (
                format!(
                    r#"{{"blocks":[{{"type":"text","text":{ok_text}}}],"stop":"stop","stop":"stop"}}"#
                ),
                "duplicate member stop in the reply",
            ),
            (
                format!(
                    r#"{{"blocks":[{{"type":"text","type":"text","text":{ok_text}}}],"stop":"stop"}}"#
                ),
                "duplicate member type in block 1",
            ),
            (
                format!(
                    r#"{{"blocks":[{{"type":"text","text":{ok_text},"id":"b1"}}],"stop":"stop"}}"#
                ),
                "unexpected member id in block 1",
            ),
            (
                format!(r#"{{"blocks":[{{"type":"text","text":{ok_text}}}],"stop":null}}"#),
                "member stop of the reply must be a string",
            ),
            (
                r#"{"blocks":{},"stop":"stop"}"#.to_owned(),
                "member blocks of the reply must be an array",
            ),
            (
                r#"{"blocks":[{"type":"text","text":{}}],"stop":"stop"}"#.to_owned(),
                "member text of block 1 must be a string",
            ),
            (
                r#"{"blocks":[{"type":"text","text":"\ud800"}],"stop":"stop"}"#.to_owned(),
                "member text of block 1 must be a string, found a string that is not Unicode text (an escaped lone surrogate)",
            ),
            (
                r#"{"blocks":[7],"stop":"stop"}"#.to_owned(),
                "block 1 is not a JSON object",
            ),
            ("[]".to_owned(), "the reply is not a JSON object"),
            (
                "".to_owned(),
                "the reply is not exactly one JSON object: EOF while parsing a value at line 1 column 0",
            ),
        ];
        for (reply_json, expected) in cases {
            assert_eq!(failure(&reply_json), expected, "for {reply_json}");
        }
        assert_eq!(
            parse_review_result(b"{\"blocks\":\xff}").map_err(|f| f.message),
            Err("the reply is not UTF-8 (invalid byte at offset 10)".to_owned())
        );
    }

    #[test]
    fn outcome_records_keep_the_reason_whole() {
        let reason = "line one\nline two \"quoted\" \u{1F512}";
        let data = denial_settle_data("call-7", Some(reason));
        assert_eq!(
            data,
            "{\"callId\":\"call-7\",\"status\":\"error\",\"error\":{\"name\":\"AutoReviewDeniedError\",\"code\":\"AUTO_REVIEW_DENIED\",\"reason\":\"line one\\nline two \\\"quoted\\\" \u{1F512}\"}}"
        );
        let parsed = sessionlog_schema::Event::parse("tool/settle", &data).expect("valid settle");
        let sessionlog_schema::Event::ToolSettle(settle) = parsed else {
            panic!("not a settle: {parsed:?}");
        };
        assert_eq!(settle.error.and_then(|e| e.reason).as_deref(), Some(reason));

        assert_eq!(
            denial_settle_data("c", None),
            r#"{"callId":"c","status":"error","error":{"name":"AutoReviewDeniedError","code":"AUTO_REVIEW_DENIED"}}"#
        );
        assert_eq!(
            failure_settle_data("c", "the reply has no text block"),
            r#"{"callId":"c","status":"error","error":{"name":"AutoReviewFailedError","code":"AUTO_REVIEW_FAILED","message":"the reply has no text block"}}"#
        );
        assert_eq!(
            denial_notice("bash"),
            "Auto review rejected tool \"bash\"; its body was not executed"
        );
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        super::super::arbitrary::json_value(word().boxed(), any::<String>().boxed())
    }

    /// Words that come close to the valid vocabulary.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "low",
                "medium",
                "high",
                "Low",
                "HIGH",
                "allow",
                "deny",
                "Deny",
                "risk",
                "decision",
                "reason",
                "blocks",
                "stop",
                "type",
                "text",
                "reasoning",
                "length",
                "",
            ])
            .prop_map(str::to_owned),
            "[a-z]{0,6}",
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_replies_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), value in json_value()) {
            let _ = parse_review_result(&bytes);
            let _ = parse_review_result(value.to_string().as_bytes());
            let _ = parse_review_result(reply(&value.to_string()).as_bytes());
        }

        #[test]
        fn only_the_four_pairs_are_ever_accepted(
            risk in word(),
            decision in word(),
            reason in prop::option::of(json_value()),
            reasoning in 0usize..3,
            extra in prop::option::of((word(), json_value())),
        ) {
            let mut object = serde_json::Map::new();
            object.insert("risk".to_owned(), risk.clone().into());
            object.insert("decision".to_owned(), decision.clone().into());
            if let Some(reason) = &reason {
                object.insert("reason".to_owned(), reason.clone());
            }
            if let Some((name, value)) = &extra {
                object.insert(name.clone(), value.clone());
            }
            let mut blocks = vec![serde_json::json!({"type": "reasoning", "text": "r"}); reasoning];
            blocks.push(serde_json::json!({"type": "text", "text": serde_json::Value::Object(object.clone()).to_string()}));
            let reply_json = serde_json::json!({"blocks": blocks, "stop": "stop"}).to_string();

            // Judge the object as it was sent: an extra member that shares a
            // name with `risk`, `decision` or `reason` replaced that member.
            let sent = |name: &str| object.get(name);
            let sent_str = |name: &str| sent(name).and_then(serde_json::Value::as_str);
            let pair_ok = matches!(
                (sent_str("risk"), sent_str("decision")),
                (Some("low"), Some("allow"))
                    | (Some("medium"), Some("allow"))
                    | (Some("medium"), Some("deny"))
                    | (Some("high"), Some("deny"))
            );
            let reason_ok = match sent("reason") {
                None => true,
                Some(serde_json::Value::String(_)) => sent_str("decision") == Some("deny"),
                Some(_) => false,
            };
            let members_ok = object.keys().all(|k| ["risk", "decision", "reason"].contains(&k.as_str()));
            let result = parse_review_result(reply_json.as_bytes());
            prop_assert_eq!(result.is_ok(), pair_ok && reason_ok && members_ok, "{} gave {:?}", reply_json, result);
            if let Ok(accepted) = result {
                prop_assert!(ReviewDecision::is_allowed_pair(accepted.risk, accepted.decision));
                prop_assert_eq!(Some(accepted.risk.as_str()), sent_str("risk"));
                prop_assert_eq!(Some(accepted.decision.as_str()), sent_str("decision"));
                prop_assert_eq!(accepted.reason.as_deref(), sent_str("reason"));
            }
        }
    }
}
