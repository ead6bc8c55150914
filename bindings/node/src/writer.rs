//! `NativeWriter`: the one writer of a session, held by a JavaScript
//! `Writer`. It takes appends a group at a time: `index.js` queues the
//! appends of its callers in call order and hands over everything that
//! queued while the previous group was being synced, so that they share
//! one sync (`SessionWriter::append_group`, the store's group commit).
//! Every call runs on the thread pool, in the order JavaScript made it (see
//! `Turns`); the writer lock is released by `close` or when the object is
//! collected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;
use serde::{Deserialize, Serialize};
use sessionlog_projections::parse_pending_action;
use sessionlog_schema::SealSecretKey;
use sessionlog_store::{NewEvent, SessionWriter};

use crate::failure::{Failure, Outcome};
use crate::json;
use crate::task::{blocking, Blocking};

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

/// The writer of one session (see the module docs).
#[napi]
#[derive(Debug)]
pub struct NativeWriter {
    writer: Arc<Mutex<Option<SessionWriter>>>,
    turns: Arc<Turns>,
    id: String,
}

/// Runs the calls made on one writer in the order they were made. A call
/// takes a ticket on the JavaScript thread, when it is made; on the thread
/// pool it waits until every earlier ticket has been served. `index.js`
/// may so hand over a group of appends while an earlier one is still being
/// written (a bulk import overlaps its encoding with the store's work), and
/// a lock would not keep that order: `Mutex` is not first come, first
/// served. libuv takes work first in, first out, so the call a waiting one
/// needs is always already running.
#[derive(Debug, Default)]
struct Turns {
    issued: AtomicU64,
    served: Mutex<u64>,
    next: Condvar,
}

impl Turns {
    /// A ticket for a call made now.
    fn take(&self) -> u64 {
        self.issued.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits for `ticket`'s turn; the turn passes on when the guard drops,
    /// whatever the call's outcome (a panic included).
    fn wait(&self, ticket: u64) -> Turn<'_> {
        let mut served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        while *served != ticket {
            served = self
                .next
                .wait(served)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Turn { turns: self }
    }
}

/// The turn of one call (see `Turns::wait`).
struct Turn<'a> {
    turns: &'a Turns,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut served = self
            .turns
            .served
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *served += 1;
        self.turns.next.notify_all();
    }
}

impl NativeWriter {
    /// Wraps an open writer.
    pub fn new(writer: SessionWriter) -> NativeWriter {
        NativeWriter {
            id: writer.id().as_str().to_owned(),
            writer: Arc::new(Mutex::new(Some(writer))),
            turns: Arc::default(),
        }
    }

    /// Runs `work` with the open writer on the thread pool.
    fn with_writer<T>(
        &self,
        work: impl FnOnce(&mut SessionWriter) -> Outcome<T> + Send + 'static,
    ) -> AsyncTask<Blocking<T>>
    where
        T: napi::bindgen_prelude::ToNapiValue + napi::bindgen_prelude::TypeName + Send + 'static,
    {
        let writer = Arc::clone(&self.writer);
        let turns = Arc::clone(&self.turns);
        let ticket = turns.take();
        let id = self.id.clone();
        blocking(move || {
            let _turn = turns.wait(ticket);
            let mut slot = writer.lock().unwrap_or_else(PoisonError::into_inner);
            let open = slot.as_mut().ok_or_else(|| {
                Failure::new("CLOSED", format!("the writer of session {id} is closed"))
            })?;
            work(open)
        })
    }
}

#[napi]
impl NativeWriter {
    /// The session's id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// Appends every batch of `group` (see `Batch`) in order, each atomic
    /// with its own expected seq, and syncs once for all; resolves with the
    /// JSON text of each batch's outcome, in order (see `BatchOutcome`).
    #[napi]
    pub fn append_group(&self, group: String) -> AsyncTask<Blocking<String>> {
        self.with_writer(move |writer| {
            let group: Vec<Batch> = serde_json::from_str(&group).map_err(|error| {
                Failure::new(
                    "INVALID_EVENT",
                    format!("a group of appends is not readable: {error}"),
                )
            })?;
            let batches = group
                .into_iter()
                .map(|Batch(expected_seq, events)| {
                    let events = events
                        .into_iter()
                        .map(|EventInput(event_type, ts, data)| NewEvent {
                            event_type,
                            data: data.get().to_owned(),
                            ts,
                        })
                        .collect();
                    (events, expected_seq)
                })
                .collect();
            let outcomes: Vec<BatchOutcome> = writer
                .append_group(batches)
                .into_iter()
                .map(|outcome| match outcome {
                    Ok(seqs) => BatchOutcome::Appended(seqs.first().map(|seq| seq.get())),
                    Err(error) => BatchOutcome::Failed(error.into()),
                })
                .collect();
            Ok(json::to_json(&outcomes))
        })
    }

    /// The Auto reviewer's request for the pending action (its JSON text),
    /// from the snapshot this writer holds; the request's JSON text.
    #[napi]
    pub fn review_request(&self, pending: String, max_bytes: f64) -> AsyncTask<Blocking<String>> {
        self.with_writer(move |writer| {
            let action = parse_pending_action(pending.as_bytes())?;
            Ok(writer.review_request(&action, max_bytes as usize)?)
        })
    }

    /// Appends a seal of every record so far durably, signed by `key` (the
    /// text of a secret key file) when given; resolves with its seq.
    #[napi]
    pub fn seal(&self, key: Option<String>) -> AsyncTask<Blocking<f64>> {
        self.with_writer(move |writer| {
            let key = key.as_deref().map(secret_key).transpose()?;
            Ok(writer.seal(key.as_ref(), None)?.get() as f64)
        })
    }

    /// Releases the writer and its lock. Closing twice does nothing.
    #[napi]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let writer = Arc::clone(&self.writer);
        let turns = Arc::clone(&self.turns);
        let ticket = turns.take();
        blocking(move || {
            let _turn = turns.wait(ticket);
            let open = writer.lock().unwrap_or_else(PoisonError::into_inner).take();
            drop(open);
            Ok(())
        })
    }
}

/// Reads the text of a secret key file (what `sessionlog keygen` writes);
/// `INVALID_ARGUMENT` without quoting it when it is not one.
pub fn secret_key(text: &str) -> Outcome<SealSecretKey> {
    SealSecretKey::parse_file(text)
        .map_err(|error| Failure::invalid_argument(format!("sealKey: {error}")))
}
