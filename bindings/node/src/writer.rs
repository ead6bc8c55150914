//! `NativeWriter`: the one writer of a session, held by a JavaScript
//! `Writer`. It takes appends a group at a time: `index.js` queues the
//! appends of its callers in call order and hands over everything that
//! queued while the previous group was being synced, so that they share
//! one sync (`SessionWriter::append_group`, the store's group commit).
//! Every call runs on the thread pool; the writer lock is released by
//! `close` or when the object is collected.

use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;
use sessionlog_projections::parse_pending_action;
use sessionlog_store::{NewEvent, SessionWriter};

use crate::failure::{Failure, Outcome};
use crate::json;
use crate::task::{blocking, Blocking};

/// One event to append: its type, its `data` as JSON text (what
/// `JSON.stringify` gave), and its time in unix milliseconds (now when
/// absent).
#[napi(object)]
#[derive(Debug)]
pub struct EventInput {
    /// The event type, e.g. `turn/start`.
    #[napi(js_name = "type")]
    pub event_type: String,
    /// `data` as JSON text.
    pub data: String,
    /// Unix milliseconds.
    pub ts: Option<f64>,
}

/// One caller's append: its events (one atomic batch) and the seq the first
/// must get.
#[napi(object)]
#[derive(Debug)]
pub struct BatchInput {
    /// The events, appended all or none.
    pub events: Vec<EventInput>,
    /// The seq the first event must get (`CONFLICT` otherwise).
    pub expect_seq: Option<f64>,
}

/// One caller's outcome: the seqs of its events, or the JSON text of its
/// failure.
#[napi(object)]
#[derive(Debug)]
pub struct BatchOutcome {
    /// The acknowledged seqs.
    pub seqs: Option<Vec<f64>>,
    /// The failure (see `Failure`).
    pub error: Option<String>,
}

/// The writer of one session (see the module docs).
#[napi]
#[derive(Debug)]
pub struct NativeWriter {
    writer: Arc<Mutex<Option<SessionWriter>>>,
    id: String,
}

impl NativeWriter {
    /// Wraps an open writer.
    pub fn new(writer: SessionWriter) -> NativeWriter {
        NativeWriter {
            id: writer.id().as_str().to_owned(),
            writer: Arc::new(Mutex::new(Some(writer))),
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
        let id = self.id.clone();
        blocking(move || {
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

    /// Appends every batch of `group` in order, each atomic with its own
    /// expected seq, and syncs once for all; resolves with each batch's
    /// outcome, in order.
    #[napi]
    pub fn append_group(&self, group: Vec<BatchInput>) -> AsyncTask<Blocking<Vec<BatchOutcome>>> {
        self.with_writer(move |writer| {
            let batches = group
                .into_iter()
                .map(|batch| {
                    let events = batch.events.into_iter().map(new_event).collect();
                    (events, batch.expect_seq.map(|seq| seq as u64))
                })
                .collect();
            Ok(writer
                .append_group(batches)
                .into_iter()
                .map(|outcome| match outcome {
                    Ok(seqs) => BatchOutcome {
                        seqs: Some(seqs.into_iter().map(|seq| seq.get() as f64).collect()),
                        error: None,
                    },
                    Err(error) => BatchOutcome {
                        seqs: None,
                        error: Some(json::to_json(&Failure::from(error))),
                    },
                })
                .collect())
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

    /// Releases the writer and its lock. Closing twice does nothing.
    #[napi]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let writer = Arc::clone(&self.writer);
        blocking(move || {
            let open = writer.lock().unwrap_or_else(PoisonError::into_inner).take();
            drop(open);
            Ok(())
        })
    }
}

fn new_event(event: EventInput) -> NewEvent {
    NewEvent {
        event_type: event.event_type,
        data: event.data,
        ts: event.ts.map(|ts| ts as u64),
    }
}
