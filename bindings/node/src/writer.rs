//! `NativeWriter`: the one writer of a session, held by a JavaScript
//! `Writer`, with a thread of its own. It takes appends a group at a time:
//! `index.js` queues the appends of its callers in call order and hands over
//! everything that queued while the previous group was being synced, so
//! that they share one sync (`SessionWriter::append_group`, the store's
//! group commit).
//!
//! The writer's thread takes its work from a channel, in the order the
//! JavaScript thread sent it (call order, whatever is still running), and
//! reports each outcome, in the same order, by one call of the completion
//! function `index.js` gave when it opened the writer (a napi threadsafe
//! function). An append awaited one at a time so costs one wake of the
//! event loop and, usually, no wake of the writer's thread: after a piece
//! of work the thread watches the channel for `LINGER` before it sleeps,
//! which covers the time the event loop takes to resolve the promise and
//! make the next append. The writer lock is released by `close` or when the
//! object is collected (the channel closes and the thread ends).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use napi::bindgen_prelude::Unknown;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use sessionlog_projections::parse_pending_action;
use sessionlog_schema::{ApprovalPolicy, Preset, SealSecretKey};
use sessionlog_store::{NewEvent, SessionWriter};

use crate::failure::{Failure, Outcome};
use crate::json;
use crate::DefaultsInput;

/// How long the writer's thread watches for the next piece of work after
/// finishing one before it sleeps. The event loop needs about 20–60 µs to
/// settle an append and make the next; an idle writer spends this much of a
/// core once per append, never more.
const LINGER: Duration = Duration::from_micros(250);

/// The completion function: called with `(error)` or `(null, text)` once per
/// piece of work, in the order the work was sent. Weak: it never keeps the
/// event loop alive by itself (`index.js` does while work is pending).
pub type Completion = ThreadsafeFunction<String, Unknown<'static>, String, Status, true, true>;

/// A group of appends as `index.js` encodes it, one JSON array for all:
/// `[[expectSeq|null, [[type, ts|null, data], ...]], ...]`, each `data` the
/// JSON text `JSON.stringify` gave, kept as it is (it is compacted once,
/// when its record is built).
#[derive(Debug, Deserialize)]
struct Batch<'text>(Option<u64>, #[serde(borrow)] Vec<EventInput<'text>>);

#[derive(Debug, Deserialize)]
struct EventInput<'text>(
    String,
    Option<u64>,
    #[serde(borrow)] &'text serde_json::value::RawValue,
);

/// One append's outcome: the seq of its first event (its events have the
/// seqs from there on; null for an empty batch), or its failure.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum BatchOutcome {
    Appended(Option<u64>),
    Failed(Failure),
}

/// A piece of work for the writer's thread. Each resolves with a JSON text.
#[derive(Debug)]
enum Work {
    /// A group of appends (see `Batch`): the outcome of each, in order.
    AppendGroup(String),
    /// The Auto reviewer's request for a pending action (its JSON text).
    ReviewRequest { pending: String, max_bytes: usize },
    /// A seal, signed by the key file's text when given: its seq.
    Seal(Option<String>),
    /// A switch of the session's permission preset: what it switched.
    SwitchPreset {
        preset: String,
        approval: Option<String>,
        defaults: DefaultsInput,
        expected_seq: Option<u64>,
    },
    /// Releases the writer and its lock: `null`.
    Close,
}

/// The writer of one session (see the module docs).
#[napi]
#[derive(Debug)]
pub struct NativeWriter {
    /// The channel to the writer's thread; `None` once `close` was sent.
    work: Option<Sender<Work>>,
    id: String,
}

impl NativeWriter {
    /// Starts the thread of an open writer, which reports to `done`.
    pub fn start(writer: SessionWriter, done: Completion) -> Outcome<NativeWriter> {
        let id = writer.id().as_str().to_owned();
        let (work, inbox) = channel();
        thread::Builder::new()
            .name(format!("sessionlog writer {id}"))
            .spawn(move || serve(writer, &inbox, &done))
            .map_err(|error| {
                Failure::new(
                    "IO",
                    format!("cannot start the writer thread of session {id}: {error}"),
                )
            })?;
        Ok(NativeWriter {
            work: Some(work),
            id,
        })
    }

    /// Sends `work` to the writer's thread; `CLOSED` once `close` was sent.
    fn send(&mut self, work: Work, closing: bool) -> napi::Result<()> {
        let closed = || {
            Failure::new(
                "CLOSED",
                format!("the writer of session {} is closed", self.id),
            )
            .into_napi()
        };
        let sent = match &self.work {
            Some(channel) => channel.send(work).map_err(|_| closed()),
            None => Err(closed()),
        };
        if closing {
            // Whatever comes after `close` is refused here, so nothing sent
            // is left unanswered when the thread ends.
            self.work = None;
        }
        sent
    }
}

#[napi]
impl NativeWriter {
    /// The session's id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// Sends a group of appends (see `Batch`): every batch in order, each
    /// atomic with its own expected seq, synced once for all; its completion
    /// is the JSON text of each batch's outcome, in order (see
    /// `BatchOutcome`).
    #[napi]
    pub fn append_group(&mut self, group: String) -> napi::Result<()> {
        self.send(Work::AppendGroup(group), false)
    }

    /// Sends a request for the Auto reviewer's request for the pending
    /// action (its JSON text), from the snapshot this writer holds; its
    /// completion is the request's JSON text.
    #[napi]
    pub fn review_request(&mut self, pending: String, max_bytes: f64) -> napi::Result<()> {
        let max_bytes = max_bytes as usize;
        self.send(Work::ReviewRequest { pending, max_bytes }, false)
    }

    /// Sends a seal of every record so far, written durably and signed by
    /// `key` (the text of a secret key file) when given; its completion is
    /// the seal's seq.
    #[napi]
    pub fn seal(&mut self, key: Option<String>) -> napi::Result<()> {
        self.send(Work::Seal(key), false)
    }

    /// Sends a switch of the session's permission preset to `preset` (the
    /// preset writer: the `sandbox/mode` and `approval/policy` events it
    /// needs and the `permission/preset` event, one atomic batch); `auto`
    /// under the approval policy `approval`. Its completion is the JSON text
    /// `{session, preset, seqs, sandboxMode, approvalPolicy}`, as
    /// `sessionlog preset --json` prints it.
    #[napi]
    pub fn switch_preset(
        &mut self,
        preset: String,
        approval: Option<String>,
        defaults: DefaultsInput,
        expect_seq: Option<f64>,
    ) -> napi::Result<()> {
        let work = Work::SwitchPreset {
            preset,
            approval,
            defaults,
            // `index.js` gave a safe integer of at least 1.
            expected_seq: expect_seq.map(|seq| seq as u64),
        };
        self.send(work, false)
    }

    /// Sends the release of the writer and its lock, after everything sent
    /// before; its completion is `null`. Closing twice does nothing more.
    #[napi]
    pub fn close(&mut self) -> napi::Result<()> {
        self.send(Work::Close, true)
    }
}

/// The writer's thread: does each piece of work in the order sent and
/// reports it, until `close` or until the `NativeWriter` is dropped.
fn serve(writer: SessionWriter, inbox: &Receiver<Work>, done: &Completion) {
    let id = writer.id().as_str().to_owned();
    let mut writer = Some(writer);
    let mut next = inbox.recv().ok();
    while let Some(work) = next {
        let closing = matches!(work, Work::Close);
        let outcome = match catch_unwind(AssertUnwindSafe(|| run(&mut writer, &id, work))) {
            Ok(outcome) => outcome,
            Err(payload) => Err(Failure::panic(payload)),
        };
        // The status is `Closing` only when the JavaScript environment is
        // going away, and then nobody waits for the answer.
        let _ = done.call(
            outcome.map_err(Failure::into_napi),
            ThreadsafeFunctionCallMode::NonBlocking,
        );
        if closing {
            return;
        }
        next = linger(inbox);
    }
}

/// The next piece of work: watched for during `LINGER`, then waited for
/// asleep; `None` when the channel closed.
fn linger(inbox: &Receiver<Work>) -> Option<Work> {
    let started = Instant::now();
    loop {
        match inbox.try_recv() {
            Ok(work) => return Some(work),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if started.elapsed() < LINGER => thread::yield_now(),
            Err(TryRecvError::Empty) => return inbox.recv().ok(),
        }
    }
}

/// Does one piece of work with the writer (`None` once closed).
fn run(slot: &mut Option<SessionWriter>, id: &str, work: Work) -> Outcome<String> {
    if let Work::Close = work {
        drop(slot.take());
        return Ok("null".to_owned());
    }
    let writer = slot
        .as_mut()
        .ok_or_else(|| Failure::new("CLOSED", format!("the writer of session {id} is closed")))?;
    match work {
        Work::AppendGroup(group) => append_group(writer, &group),
        Work::ReviewRequest { pending, max_bytes } => {
            let action = parse_pending_action(pending.as_bytes())?;
            crate::one_string(
                writer.review_request(&action, max_bytes)?,
                |len| format!("the review request of session {id} is {len} bytes"),
                "with a maxBytes below that, it is REQUEST_TOO_LARGE, as a reviewer refuses it",
            )
        }
        Work::Seal(key) => {
            let key = key
                .as_deref()
                .map(|key| secret_key(key, "key"))
                .transpose()?;
            Ok(writer.seal(key.as_ref(), None)?.get().to_string())
        }
        Work::SwitchPreset {
            preset,
            approval,
            defaults,
            expected_seq,
        } => switch_preset(
            writer,
            &preset,
            approval.as_deref(),
            &defaults,
            expected_seq,
        ),
        Work::Close => Ok("null".to_owned()),
    }
}

/// Switches the preset of `writer`'s session (see
/// `NativeWriter::switch_preset`).
fn switch_preset(
    writer: &mut SessionWriter,
    preset: &str,
    approval: Option<&str>,
    defaults: &DefaultsInput,
    expected_seq: Option<u64>,
) -> Outcome<String> {
    let preset: Preset = crate::vocabulary(preset)?;
    let approval: Option<ApprovalPolicy> = approval.map(crate::vocabulary).transpose()?;
    match (preset, approval) {
        (Preset::Auto, None) => {
            return Err(Failure::invalid_argument(
                "preset auto runs under an approval policy the caller names: give { approval: \"ask\" } or { approval: \"never\" }",
            ))
        }
        (preset, Some(_)) if preset != Preset::Auto => {
            return Err(Failure::invalid_argument(format!(
                "approval is only for preset auto; preset {} brings its own approval policy",
                preset.as_str()
            )))
        }
        _ => {}
    }
    let defaults = crate::configured(defaults)?;
    let seqs = writer.switch_preset(preset, approval, &defaults, expected_seq)?;
    Ok(json::to_json(
        &writer.preset_switched(preset, &seqs, &defaults),
    ))
}

/// Appends a group (see `Batch`); the JSON text of each batch's outcome.
/// Each batch is decoded alone: one that does not decode (`index.js`
/// checks every event first, so this is a second line) fails alone, as a
/// batch the writer refuses does.
fn append_group(writer: &mut SessionWriter, group: &str) -> Outcome<String> {
    let texts: Vec<&serde_json::value::RawValue> =
        serde_json::from_str(group).map_err(|error| {
            Failure::new(
                "INVALID_EVENT",
                format!("a group of appends is not readable: {error}"),
            )
        })?;
    let mut decoded = Vec::with_capacity(texts.len());
    let mut batches = Vec::new();
    for (index, text) in texts.iter().enumerate() {
        match serde_json::from_str::<Batch>(text.get()) {
            Ok(Batch(expected_seq, events)) => {
                let events = events
                    .into_iter()
                    .map(|EventInput(event_type, ts, data)| NewEvent {
                        event_type,
                        data: data.get().to_owned(),
                        ts,
                    })
                    .collect();
                batches.push((events, expected_seq));
                decoded.push(None);
            }
            Err(error) => decoded.push(Some(Failure::new(
                "INVALID_EVENT",
                format!("append {index} of its group is not readable: {error}"),
            ))),
        }
    }
    let mut appended = writer.append_group(batches).into_iter();
    let outcomes: Vec<BatchOutcome> = decoded
        .into_iter()
        .map(|failure| match failure {
            Some(failure) => BatchOutcome::Failed(failure),
            // The writer's outcomes are those of the batches that decoded,
            // in order: one is taken only for such a batch.
            None => match appended.next() {
                Some(Ok(seqs)) => BatchOutcome::Appended(seqs.first().map(|seq| seq.get())),
                Some(Err(error)) => BatchOutcome::Failed(error.into()),
                None => BatchOutcome::Failed(Failure::new(
                    "PANIC",
                    "the writer gave fewer outcomes than it was given batches",
                )),
            },
        })
        .collect();
    Ok(json::to_json(&outcomes))
}

/// Reads the text of a secret key file (what `sessionlog keygen` writes),
/// given as the option `option`; `INVALID_ARGUMENT` naming that option,
/// without quoting the text, when it is not one.
pub fn secret_key(text: &str, option: &str) -> Outcome<SealSecretKey> {
    SealSecretKey::parse_file(text)
        .map_err(|error| Failure::invalid_argument(format!("{option}: {error}")))
}
