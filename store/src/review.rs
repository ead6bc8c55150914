//! Asking the Auto reviewer about a pending call, and recording what it
//! decided, over an open writer.
//!
//! The writer already holds the validated snapshot, so the request is
//! built without reading the log again; the call itself goes through a
//! [`Reviewer`], the one seam to the network, which this crate only
//! declares (the HTTP client lives outside the core crates). The way the
//! request becomes a Chat Completions body and the answer becomes the
//! strict reply is the pure mapping of the projections, so every runtime
//! asks the same bytes.
//!
//! A request that fails closed is never sent and nothing is recorded. A
//! decision is never retried, guessed or defaulted: whatever keeps the
//! reviewer from answering (no connection, a timeout, a status other than
//! 2xx, an answer that is not a valid reply) is a reviewer failure.
//! Recording appends, as one atomic batch, the call's `tool/start` and,
//! when the call must not run, its settle (the denial or the failure),
//! with the seq the writer had when the request was built: if anything
//! was appended meanwhile, the decision is about a snapshot that is no
//! longer the log's, and the batch is refused as a `Conflict`.

use std::fmt;

use sessionlog_projections::{
    chat_completions_body, chat_completions_reply, denial_settle_data, failure_settle_data,
    parse_review_result, Decision, PendingAction, ReviewDecision, ReviewError, ReviewErrorCode,
    ReviewFailure, DEFAULT_MAX_REQUEST_BYTES,
};

use crate::writer::{AcknowledgedSeq, NewEvent, SessionWriter};
use crate::StoreError;

/// Sends one Chat Completions body to a reviewer model and gives back its
/// answer. Implementations bring the endpoint, the key and the timeout;
/// the body is already final.
pub trait Reviewer: Send + Sync + fmt::Debug {
    /// POSTs `body` (compact JSON) and returns the status and body of the
    /// answer, or why no answer came (a connection failure, a timeout).
    /// The error's text must never hold the key. The answer's body is
    /// given back as received: the decision is read from it as the
    /// reviewer wrote it, and only the text made of it is scrubbed.
    fn send(&self, body: &str) -> Result<ReviewerResponse, ReviewerError>;

    /// `text` (a denial's reason, or a failure's message quoting the
    /// answer) with every credential of this reviewer taken out, before it
    /// is printed or recorded. By default it is left as it is.
    fn scrub(&self, text: String) -> String {
        text
    }
}

/// The answer of a reviewer model's endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewerResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body, as received.
    pub body: Vec<u8>,
}

/// Why a reviewer gave no answer (connection, timeout, transport).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ReviewerError {
    /// What happened, without any credential.
    pub message: String,
}

/// How to ask the reviewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewOptions {
    /// The model to ask; the request's `model.model` when `None`.
    pub model: Option<String>,
    /// The request size limit (see `DEFAULT_MAX_REQUEST_BYTES`).
    pub max_request_bytes: usize,
    /// Append the call's `tool/start` (and its settle when it must not run).
    pub record: bool,
}

/// What the reviewer said: a decision, or a reviewer failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A valid decision.
    Decided(ReviewDecision),
    /// No valid decision (code `AUTO_REVIEW_FAILED`); the call must not run.
    Failed(ReviewFailure),
}

/// The outcome of [`SessionWriter::review`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    /// What the reviewer said.
    pub verdict: Verdict,
    /// The seqs recorded (empty without `record`).
    pub recorded: Vec<AcknowledgedSeq>,
}

/// Why [`SessionWriter::review`] gave no verdict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReviewCallError {
    /// The request failed closed: nothing was sent, nothing recorded.
    #[error(transparent)]
    Refused(#[from] ReviewError),
    /// Recording the verdict failed (nothing of the batch is in the log).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Default for ReviewOptions {
    fn default() -> Self {
        ReviewOptions {
            model: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            record: false,
        }
    }
}

impl Verdict {
    /// Whether the call may run.
    pub fn allows(&self) -> bool {
        matches!(self, Verdict::Decided(decision) if decision.decision == Decision::Allow)
    }
}

impl SessionWriter {
    /// Asks `reviewer` about `pending` (the Auto review of one call) and,
    /// with `options.record`, records the verdict. See the module docs.
    ///
    /// Needs a writer opened with `keep_snapshot`; the request fails closed
    /// like [`SessionWriter::review_request`].
    ///
    /// ```
    /// use sessionlog_projections::{parse_pending_action, Defaults};
    /// use sessionlog_schema::{ApprovalPolicy, Preset, SessionHeader, SessionId};
    /// use sessionlog_store::{
    ///     now_ms, Durability, NewEvent, ReviewOptions, Reviewer, ReviewerError,
    ///     ReviewerResponse, Store, WriterOptions,
    /// };
    ///
    /// /// A reviewer that allows everything (a real one is `HttpReviewer`).
    /// #[derive(Debug)]
    /// struct Allows;
    ///
    /// impl Reviewer for Allows {
    ///     fn send(&self, _body: &str) -> Result<ReviewerResponse, ReviewerError> {
    ///         let answer = r#"{"choices":[{"message":{"content":"{\"risk\":\"low\",\"decision\":\"allow\"}"},"finish_reason":"stop"}]}"#;
    ///         Ok(ReviewerResponse { status: 200, body: answer.into() })
    ///     }
    /// }
    ///
    /// let folder = tempfile::tempdir()?;
    /// let store = Store::create(&folder.path().join("logs"))?;
    /// let id = SessionId::parse("s1")?;
    /// let header = SessionHeader::root(id.clone(), now_ms(), "/work".into());
    /// store.create_session(&header, &[], Durability::Fsync)?;
    /// let mut writer = store.open_writer(&id, WriterOptions::default())?;
    /// writer.switch_preset(Preset::Auto, Some(ApprovalPolicy::Never), &Defaults::default(), None)?;
    /// writer.append(NewEvent::new("turn/start", r#"{"turnId":"t1"}"#), None)?;
    /// writer.append(NewEvent::new("step/start", r#"{"stepId":"s1","turnId":"t1"}"#), None)?;
    /// writer.append(
    ///     NewEvent::new(
    ///         "request/header",
    ///         r#"{"provider":"p","model":"m","approvalPolicy":"never","sandboxMode":"danger-full-access",
    ///             "tools":[{"name":"shell","description":"Runs a command","parameters":{}}]}"#,
    ///     ),
    ///     None,
    /// )?;
    ///
    /// let pending = parse_pending_action(
    ///     br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
    /// )?;
    /// let options = ReviewOptions { record: true, ..ReviewOptions::default() };
    /// let reviewed = writer.review(&pending, &options, &Allows)?;
    /// assert!(reviewed.verdict.allows());
    /// assert_eq!(reviewed.recorded.len(), 1, "an allowed call is recorded started");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn review(
        &mut self,
        pending: &PendingAction,
        options: &ReviewOptions,
        reviewer: &dyn Reviewer,
    ) -> Result<Reviewed, ReviewCallError> {
        let request = self.prepare_review(pending, options)?;
        let next_seq = self.next_seq();
        let verdict = ask_reviewer(
            reviewer,
            &request,
            options.model.as_deref(),
            &pending.call_id,
        );
        let recorded = if options.record {
            self.append_batch(verdict_events(pending, &verdict), Some(next_seq))?
        } else {
            Vec::new()
        };
        Ok(Reviewed { verdict, recorded })
    }

    /// The reviewer's request for `pending`, and, when the verdict is to
    /// be recorded, the proof that it can be: the reviewer is asked only
    /// for a call whose start (and a settle) the log would take, for a
    /// verdict paid for and then lost helps nobody (`INVALID_ACTION`,
    /// nothing sent). Whether the log moved on meanwhile is the append's
    /// to tell.
    pub(crate) fn prepare_review(
        &mut self,
        pending: &PendingAction,
        options: &ReviewOptions,
    ) -> Result<String, ReviewCallError> {
        let request = self.review_request(pending, options.max_request_bytes)?;
        if options.record {
            let failed = Verdict::Failed(ReviewFailure {
                message: String::new(),
            });
            self.check_batch(&verdict_events(pending, &failed))
                .map_err(|error| {
                    ReviewError::new(
                        ReviewErrorCode::InvalidAction,
                        format!(
                            "the call could not be recorded, so the reviewer was not asked: {error}"
                        ),
                    )
                })?;
        }
        Ok(request)
    }
}

/// Sends the reviewer's `request` (as `build_review_request` built it) to
/// `reviewer` as one Chat Completions call and reads its answer strictly.
/// `model` overrides the request's model; `call_id` is the reviewed
/// call's.
/// The answer is read as it came; the reviewer's `scrub` then takes any
/// credential out of the text made of it (the reason, the failure's
/// message), so that the decision itself is never what scrubbing changed.
/// A denial whose reason no settle could hold is a failure, whether the
/// verdict is recorded or only shown (see `recordable`).
pub fn ask_reviewer(
    reviewer: &dyn Reviewer,
    request: &str,
    model: Option<&str>,
    call_id: &str,
) -> Verdict {
    let verdict = match try_ask(reviewer, request, model) {
        Ok(mut decision) => {
            decision.reason = decision.reason.map(|reason| reviewer.scrub(reason));
            Verdict::Decided(decision)
        }
        Err(failure) => Verdict::Failed(ReviewFailure {
            message: bounded_failure_message(reviewer.scrub(failure.message)),
        }),
    };
    recordable(verdict, call_id)
}

/// The most characters of a failure's message that are kept: a message
/// quotes what the reviewer sent (a stop reason, a member's name), and a
/// reply of megabytes must still give a settle that fits in a record, and
/// a line a person can read.
const MAX_FAILURE_MESSAGE_CHARS: usize = 4096;

/// A reviewer failure's `message` cut to its first 4,096 characters,
/// saying how many were left out: what `ask_reviewer` keeps of a failure
/// (after taking any credential out, so that the cut never splits one),
/// and what a runtime that reads the reviewer's reply itself keeps of
/// what the strict read found wrong. Apply it once: a message already cut
/// is cut again.
pub fn bounded_failure_message(message: String) -> String {
    let Some((cut, _)) = message.char_indices().nth(MAX_FAILURE_MESSAGE_CHARS) else {
        return message;
    };
    let left_out = message[cut..].chars().count();
    format!(
        "{}… ({left_out} more characters not shown)",
        &message[..cut]
    )
}

/// `verdict`, or, when it is a denial whose reason (kept whole, as the
/// settle must keep it) would make a settle above the record limit, a
/// failure that says so: the call must not run either way, and a failure
/// can be recorded.
fn recordable(verdict: Verdict, call_id: &str) -> Verdict {
    let Verdict::Decided(decision) = &verdict else {
        return verdict;
    };
    if decision.decision != Decision::Deny {
        return verdict;
    }
    let data = denial_settle_data(call_id, decision.reason.as_deref());
    // The record around the data: seq, ts, type and CRC, well within this.
    const RECORD_AROUND_DATA: usize = 256;
    if data.len() + RECORD_AROUND_DATA <= sessionlog_schema::MAX_RECORD_BYTES {
        return verdict;
    }
    Verdict::Failed(ReviewFailure {
        message: format!(
            "the reviewer denied the call with a reason of {} bytes: a denial settle keeps it \
             whole, and would be above the {}-byte record limit",
            decision.reason.as_deref().map_or(0, str::len),
            sessionlog_schema::MAX_RECORD_BYTES
        ),
    })
}

/// The events that record `verdict` about `pending`: its `tool/start`,
/// then, when it must not run, the denial or failure settle.
pub fn verdict_events(pending: &PendingAction, verdict: &Verdict) -> Vec<NewEvent> {
    let start = NewEvent::new("tool/start", pending.tool_start_data());
    let settle = match verdict {
        Verdict::Decided(decision) if decision.decision == Decision::Allow => None,
        Verdict::Decided(decision) => Some(denial_settle_data(
            &pending.call_id,
            decision.reason.as_deref(),
        )),
        Verdict::Failed(failure) => Some(failure_settle_data(&pending.call_id, &failure.message)),
    };
    let ts = crate::now_ms();
    std::iter::once(start)
        .chain(settle.map(|data| NewEvent::new("tool/settle", data)))
        .map(|event| NewEvent {
            ts: Some(ts),
            ..event
        })
        .collect()
}

fn try_ask(
    reviewer: &dyn Reviewer,
    request: &str,
    model: Option<&str>,
) -> Result<ReviewDecision, ReviewFailure> {
    let body = chat_completions_body(request, model)
        .map_err(|error| failure(format!("the request could not be sent: {error}")))?;
    let response = reviewer
        .send(&body)
        .map_err(|error| failure(format!("no answer from the reviewer: {error}")))?;
    if !(200..300).contains(&response.status) {
        // Scrubbed whole before it is cut: a cut inside a credential would
        // leave its first part unrecognised.
        let body = reviewer.scrub(String::from_utf8_lossy(&response.body).into_owned());
        return Err(failure(format!(
            "the reviewer answered HTTP {}: {}",
            response.status,
            excerpt(&body)
        )));
    }
    let reply = chat_completions_reply(&response.body)?;
    parse_review_result(reply.as_bytes())
}

fn failure(message: String) -> ReviewFailure {
    ReviewFailure { message }
}

/// The start of an error answer's body, for a message: at most 200
/// characters, control characters escaped.
fn excerpt(text: &str) -> String {
    const LIMIT: usize = 200;
    let mut out: String = text
        .chars()
        .take(LIMIT)
        .flat_map(char::escape_default)
        .collect();
    if text.chars().count() > LIMIT {
        out.push_str("...");
    }
    if out.is_empty() {
        out.push_str("(empty body)");
    }
    out
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "async")]
    use std::sync::Arc;
    use std::sync::Mutex;

    use serde_json::json;
    use sessionlog_projections::{parse_pending_action, ReviewErrorCode, Risk};
    use sessionlog_schema::SessionId;

    use super::*;
    use crate::store::tests::{event, header, id, jsonl_store, ok, sqlite_store};
    #[cfg(feature = "async")]
    use crate::AsyncStore;
    use crate::{Durability, Store, WriterOptions};

    /// A reviewer that answers from a script and keeps every body it got.
    #[derive(Debug, Default)]
    struct Scripted {
        answers: Mutex<Vec<Result<ReviewerResponse, ReviewerError>>>,
        bodies: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn answering(answers: Vec<Result<ReviewerResponse, ReviewerError>>) -> Scripted {
            Scripted {
                answers: Mutex::new(answers.into_iter().rev().collect()),
                bodies: Mutex::default(),
            }
        }

        fn bodies(&self) -> Vec<String> {
            ok(self.bodies.lock().map_err(|e| e.to_string())).clone()
        }
    }

    impl Reviewer for Scripted {
        fn send(&self, body: &str) -> Result<ReviewerResponse, ReviewerError> {
            ok(self.bodies.lock().map_err(|e| e.to_string())).push(body.to_owned());
            ok(self.answers.lock().map_err(|e| e.to_string()))
                .pop()
                .unwrap_or_else(|| panic!("the reviewer was asked more often than scripted"))
        }
    }

    /// A reviewer during whose answer another append lands.
    #[cfg(feature = "async")]
    #[derive(Debug)]
    struct Racing {
        store: AsyncStore,
        runtime: tokio::runtime::Handle,
    }

    #[cfg(feature = "async")]
    impl Reviewer for Racing {
        fn send(&self, _body: &str) -> Result<ReviewerResponse, ReviewerError> {
            let appended = self.runtime.block_on(self.store.append(
                id("a"),
                vec![event("note/x", "{}", 6)],
                None,
            ));
            ok(appended);
            says(r#"{"risk":"low","decision":"allow"}"#)
        }
    }

    fn says(content: &str) -> Result<ReviewerResponse, ReviewerError> {
        Ok(ReviewerResponse {
            status: 200,
            body: json!({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]})
                .to_string()
                .into_bytes(),
        })
    }

    /// An Auto session with an open step and a request/header naming `shell`.
    fn auto_session(store: &Store, session: &str) {
        ok(store.create_session(&header(session), &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id(session), WriterOptions::default()));
        let tools = json!({"provider": "p", "model": "m", "approvalPolicy": "never",
            "sandboxMode": "danger-full-access",
            "tools": [{"name": "shell", "description": "Runs a command.", "parameters": {"type": "object"}}]});
        ok(writer.append_batch(
            vec![
                event("sandbox/mode", r#"{"mode":"danger-full-access"}"#, 1),
                event("approval/policy", r#"{"policy":"never"}"#, 1),
                event("permission/preset", r#"{"preset":"auto"}"#, 1),
            ],
            None,
        ));
        for (event_type, data) in [
            ("turn/start", r#"{"turnId":"t1"}"#.to_owned()),
            ("step/start", r#"{"stepId":"s1","turnId":"t1"}"#.to_owned()),
            ("request/header", tools.to_string()),
        ] {
            ok(writer.append(event(event_type, &data, 2), None));
        }
    }

    fn pending(call_id: &str) -> PendingAction {
        ok(parse_pending_action(
            json!({"callId": call_id, "stepId": "s1", "name": "shell", "arguments": {"command": "ls"}})
                .to_string()
                .as_bytes(),
        ))
    }

    fn types(store: &Store, session: &SessionId) -> Vec<String> {
        ok(store.snapshot(session))
            .events
            .iter()
            .skip(6)
            .map(|record| format!("{} {}", record.event_type(), record.data()))
            .collect()
    }

    fn check_sync(store: Store) {
        auto_session(&store, "a");
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let reviewer = Scripted::answering(vec![
            says(r#"{"risk":"low","decision":"allow"}"#),
            says(r#"{"risk":"high","decision":"deny","reason":"line one\nline \"two\""}"#),
            Err(ReviewerError {
                message: "connection refused".to_owned(),
            }),
            says(r#"{"risk":"low","decision":"allow"}"#),
        ]);
        let record = ReviewOptions {
            record: true,
            ..ReviewOptions::default()
        };

        let allowed = ok(writer.review(&pending("c1"), &record, &reviewer));
        assert!(allowed.verdict.allows());
        assert_eq!(
            allowed.recorded.iter().map(|s| s.get()).collect::<Vec<_>>(),
            [7]
        );
        let request = ok(writer.review_request(&pending("c2"), DEFAULT_MAX_REQUEST_BYTES));
        let denied = ok(writer.review(&pending("c2"), &record, &reviewer));
        assert_eq!(
            denied.verdict,
            Verdict::Decided(ReviewDecision {
                risk: Risk::High,
                decision: Decision::Deny,
                reason: Some("line one\nline \"two\"".to_owned())
            })
        );
        assert_eq!(
            denied.recorded.iter().map(|s| s.get()).collect::<Vec<_>>(),
            [8, 9]
        );
        let failed = ok(writer.review(&pending("c3"), &record, &reviewer));
        assert_eq!(
            failed.verdict,
            Verdict::Failed(ReviewFailure {
                message: "no answer from the reviewer: connection refused".to_owned()
            })
        );
        let unrecorded = ok(writer.review(&pending("c4"), &ReviewOptions::default(), &reviewer));
        assert!(unrecorded.verdict.allows() && unrecorded.recorded.is_empty());

        let refused = writer.review(&pending("c1"), &record, &reviewer);
        assert!(
            matches!(&refused, Err(ReviewCallError::Refused(error)) if error.code == ReviewErrorCode::DuplicateCallId),
            "{refused:?}"
        );
        let bodies = reviewer.bodies();
        assert_eq!(bodies.len(), 4, "a refused request is never sent");
        assert_eq!(bodies[1], ok(chat_completions_body(&request, None)));
        drop(writer);
        assert_eq!(
            types(&store, &id("a")),
            [
                r#"tool/start {"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
                r#"tool/start {"callId":"c2","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
                r#"tool/settle {"callId":"c2","status":"error","error":{"name":"AutoReviewDeniedError","code":"AUTO_REVIEW_DENIED","reason":"line one\nline \"two\""}}"#,
                r#"tool/start {"callId":"c3","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
                r#"tool/settle {"callId":"c3","status":"error","error":{"name":"AutoReviewFailedError","code":"AUTO_REVIEW_FAILED","message":"no answer from the reviewer: connection refused"}}"#,
            ]
        );
    }

    #[test]
    fn a_writer_reviews_and_records_in_jsonl() {
        let folder = ok(tempfile::tempdir());
        check_sync(jsonl_store(folder.path()));
    }

    #[test]
    fn a_writer_reviews_and_records_in_sqlite() {
        let folder = ok(tempfile::tempdir());
        check_sync(sqlite_store(folder.path()));
    }

    /// A reply that makes a failure's message of megabytes (a stop reason
    /// of quotes, each escaped in the message), or a denial whose reason
    /// no settle can hold, is still recorded: as a failure whose message
    /// is cut, and says so.
    #[test]
    fn an_oversized_verdict_is_recorded_as_a_bounded_failure() {
        let folder = ok(tempfile::tempdir());
        let store = jsonl_store(folder.path());
        auto_session(&store, "a");
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        let quotes = "\"".repeat(5_000_000);
        let reason = "x".repeat(sessionlog_schema::MAX_RECORD_BYTES);
        let reviewer = Scripted::answering(vec![
            Ok(ReviewerResponse {
                status: 200,
                body: json!({"choices": [{"message": {"content": r#"{"risk":"low","decision":"allow"}"#}, "finish_reason": quotes}]})
                    .to_string()
                    .into_bytes(),
            }),
            says(&json!({"risk": "high", "decision": "deny", "reason": reason}).to_string()),
        ]);
        let record = ReviewOptions {
            record: true,
            ..ReviewOptions::default()
        };
        let failed = ok(writer.review(&pending("c1"), &record, &reviewer));
        let Verdict::Failed(failure) = &failed.verdict else {
            panic!("{:?}", failed.verdict);
        };
        assert!(
            failure.message.starts_with("stop reason is"),
            "{}",
            &failure.message[..40]
        );
        assert!(failure.message.ends_with("more characters not shown)"));
        assert!(failure.message.chars().count() < MAX_FAILURE_MESSAGE_CHARS + 100);
        assert_eq!(failed.recorded.len(), 2, "the start and the failure settle");
        let denied = ok(writer.review(&pending("c2"), &record, &reviewer));
        let Verdict::Failed(failure) = &denied.verdict else {
            panic!("a denial no record holds was given as a decision");
        };
        assert!(
            failure.message.contains("record limit"),
            "{}",
            failure.message
        );
        assert_eq!(denied.recorded.len(), 2);
        drop(writer);
        let settles = types(&store, &id("a"));
        assert!(
            settles[1].contains("AUTO_REVIEW_FAILED"),
            "{}",
            &settles[1][..200]
        );
        assert!(
            settles[3].contains("AUTO_REVIEW_FAILED"),
            "{}",
            &settles[3][..200]
        );
    }

    #[test]
    fn every_way_of_not_answering_is_a_failure() {
        let cases: Vec<(Result<ReviewerResponse, ReviewerError>, &str)> = vec![
            (
                Ok(ReviewerResponse {
                    status: 503,
                    body: b"overloaded\n".to_vec(),
                }),
                "the reviewer answered HTTP 503: overloaded\\n",
            ),
            (
                Ok(ReviewerResponse {
                    status: 500,
                    body: Vec::new(),
                }),
                "the reviewer answered HTTP 500: (empty body)",
            ),
            (
                Ok(ReviewerResponse {
                    status: 200,
                    body: b"<html>".to_vec(),
                }),
                "the reviewer's answer is not exactly one JSON object: expected value at line 1 column 1",
            ),
            (
                Err(ReviewerError {
                    message: "no complete answer within the timeout".to_owned(),
                }),
                "no answer from the reviewer: no complete answer within the timeout",
            ),
        ];
        let request = r#"{"model":{"provider":"p","model":"m"},"partitions":{"REVIEW_POLICY":"x","ENVIRONMENT":{},"PROJECT_INSTRUCTIONS":[],"FILTERED_HISTORY":[],"PENDING_ACTION":{}}}"#;
        for (answer, expected) in cases {
            let reviewer = Scripted::answering(vec![answer]);
            assert_eq!(
                ask_reviewer(&reviewer, request, None, "c1"),
                Verdict::Failed(ReviewFailure {
                    message: expected.to_owned()
                })
            );
        }
    }

    /// A verdict only shown (`review` without `--record`) or asked for
    /// again (`review-audit`) is the one a recording would keep: a denial
    /// whose reason no settle holds is a failure there too.
    #[test]
    fn a_denial_no_settle_holds_is_a_failure_when_only_shown() {
        let request = r#"{"model":{"provider":"p","model":"m"},"partitions":{"REVIEW_POLICY":"x","ENVIRONMENT":{},"PROJECT_INSTRUCTIONS":[],"FILTERED_HISTORY":[],"PENDING_ACTION":{}}}"#;
        let reason = "x".repeat(sessionlog_schema::MAX_RECORD_BYTES);
        let reviewer = Scripted::answering(vec![
            says(&json!({"risk": "high", "decision": "deny", "reason": reason}).to_string()),
            says(r#"{"risk":"high","decision":"deny","reason":"no"}"#),
        ]);
        let verdict = ask_reviewer(&reviewer, request, None, "c1");
        assert!(
            matches!(&verdict, Verdict::Failed(failure) if failure.message.contains("record limit")),
            "a denial no record holds was given as a decision"
        );
        let verdict = ask_reviewer(&reviewer, request, None, "c1");
        assert!(
            matches!(&verdict, Verdict::Decided(decision) if decision.decision == Decision::Deny),
            "{verdict:?}"
        );
    }

    /// `AsyncStore::review` records a denial no settle can hold as the
    /// same failure `SessionWriter::review` records.
    #[cfg(feature = "async")]
    #[test]
    fn an_async_review_records_an_oversized_denial_as_a_failure() {
        let folder = ok(tempfile::tempdir());
        let store = jsonl_store(folder.path());
        auto_session(&store, "a");
        let runtime = crate::asynchronous::tests::two_worker_runtime();
        let store = AsyncStore::new(store);
        let reason = "x".repeat(sessionlog_schema::MAX_RECORD_BYTES);
        runtime.block_on(async {
            let reviewer = Arc::new(Scripted::answering(vec![says(
                &json!({"risk": "high", "decision": "deny", "reason": reason}).to_string(),
            )]));
            let record = ReviewOptions {
                record: true,
                ..ReviewOptions::default()
            };
            let reviewed = ok(store.review(id("a"), pending("c1"), record, reviewer).await);
            assert!(
                matches!(&reviewed.verdict, Verdict::Failed(failure) if failure.message.contains("record limit")),
                "a denial no record holds was given as a decision"
            );
            assert_eq!(reviewed.recorded.len(), 2);
            store.close(&id("a")).await;
        });
    }

    #[cfg(feature = "async")]
    #[test]
    fn a_verdict_about_an_older_snapshot_is_not_recorded() {
        let folder = ok(tempfile::tempdir());
        let store = jsonl_store(folder.path());
        auto_session(&store, "a");
        let runtime = crate::asynchronous::tests::two_worker_runtime();
        let store = AsyncStore::new(store);
        runtime.block_on(async {
            let reviewer = Arc::new(Scripted::answering(vec![
                says(r#"{"risk":"medium","decision":"deny","reason":"no"}"#),
                says(r#"{"risk":"low","decision":"allow"}"#),
            ]));
            let record = ReviewOptions {
                record: true,
                ..ReviewOptions::default()
            };
            // The async writer was opened without a snapshot: review reopens it with one.
            ok(store
                .append(id("a"), vec![event("note/x", "{}", 3)], Some(7))
                .await);
            let denied = ok(store
                .review(id("a"), pending("c1"), record.clone(), reviewer.clone())
                .await);
            assert_eq!(
                denied.recorded.iter().map(|s| s.get()).collect::<Vec<_>>(),
                [8, 9]
            );
            let seqs = ok(store
                .append(id("a"), vec![event("note/x", "{}", 4)], Some(10))
                .await);
            assert_eq!(seqs.iter().map(|s| s.get()).collect::<Vec<_>>(), [10]);
            let allowed = ok(store
                .review(id("a"), pending("c2"), record, reviewer.clone())
                .await);
            assert_eq!(
                allowed.recorded.iter().map(|s| s.get()).collect::<Vec<_>>(),
                [11]
            );
            store.close(&id("a")).await;
        });
        // An append that lands while the reviewer thinks makes the verdict
        // one about an older snapshot: it is not recorded.
        runtime.block_on(async {
            let reviewer = Arc::new(Racing {
                store: store.clone(),
                runtime: tokio::runtime::Handle::current(),
            });
            let record = ReviewOptions {
                record: true,
                ..ReviewOptions::default()
            };
            let late = store.review(id("a"), pending("c3"), record, reviewer).await;
            assert!(
                matches!(
                    late,
                    Err(ReviewCallError::Store(StoreError::Conflict {
                        expected: 12,
                        actual: 13,
                        ..
                    }))
                ),
                "{late:?}"
            );
            let events = ok(store.snapshot(id("a")).await).events;
            assert_eq!(
                events.len(),
                12,
                "the racing append is in, the verdict is not"
            );
        });
    }
}
