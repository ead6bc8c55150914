//! `NativeFollow`: one session's events as they are appended, through
//! `AsyncStore::follow` on the addon's tokio runtime. `next` waits, without
//! holding any thread, until at least one event is there and hands over
//! every event already delivered (a JSON array of records), or null once
//! `stop` was called; `index.js` makes an async iterator of it that an
//! `AbortSignal` ends.

use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use sessionlog_store::Follow;
use tokio::sync::watch;

use crate::failure::{Failure, Outcome};
use crate::json;

/// At most this many events are handed over by one `next`.
const EVENTS_PER_CALL: usize = 1024;

/// At most this many bytes of records (and one record more, up to the
/// 16 MiB a record may take) are handed over by one `next`: one JSON text
/// per call, far below the longest string JavaScript holds (about 512 MiB).
const BYTES_PER_CALL: usize = 64 << 20;

type Followed = Follow;

/// A followed session (see the module docs).
#[napi]
#[derive(Debug)]
pub struct NativeFollow {
    receiver: Arc<tokio::sync::Mutex<Followed>>,
    /// A failure met after events that were handed over first.
    held: Arc<Mutex<Option<Failure>>>,
    stopped: watch::Sender<bool>,
}

impl NativeFollow {
    /// Wraps the stream `AsyncStore::follow` returned.
    pub fn new(receiver: Followed) -> NativeFollow {
        NativeFollow {
            receiver: Arc::new(tokio::sync::Mutex::new(receiver)),
            held: Arc::new(Mutex::new(None)),
            stopped: watch::channel(false).0,
        }
    }
}

#[napi]
impl NativeFollow {
    /// The next events (the JSON text of an array of records), or null
    /// once stopped or when the stream ended.
    #[napi(ts_return_type = "Promise<string | null>")]
    pub fn next<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<String>>> {
        let receiver = Arc::clone(&self.receiver);
        let held = Arc::clone(&self.held);
        let mut stopped = self.stopped.subscribe();
        env.spawn_future(async move {
            let work = tokio::spawn(async move {
                if let Some(failure) = held.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    return Err(failure);
                }
                if *stopped.borrow() {
                    return Ok(None);
                }
                let mut receiver = receiver.lock().await;
                let first = tokio::select! {
                    first = receiver.recv() => first,
                    _ = stopped.wait_for(|stopped| *stopped) => None,
                };
                let Some(first) = first else {
                    return Ok(None);
                };
                let first = first?;
                let mut bytes = first.body().len();
                let mut records = vec![first];
                while records.len() < EVENTS_PER_CALL && bytes < BYTES_PER_CALL {
                    match receiver.try_recv() {
                        Some(Ok(record)) => {
                            bytes += record.body().len();
                            records.push(record);
                        }
                        Some(Err(error)) => {
                            *held.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(error.into());
                            break;
                        }
                        None => break,
                    }
                }
                let mut text = String::new();
                json::push_events(&mut text, &records);
                Outcome::Ok(Some(text))
            });
            match work.await {
                Ok(outcome) => outcome.map_err(Failure::into_napi),
                Err(error) if error.is_panic() => {
                    Err(Failure::panic(error.into_panic()).into_napi())
                }
                Err(error) => Err(Failure::new("IO", error.to_string()).into_napi()),
            }
        })
    }

    /// Ends the stream: a waiting `next` and every later one give null, and
    /// the store stops polling the session.
    #[napi]
    pub fn stop(&self) {
        self.stopped.send_replace(true);
        let receiver = Arc::clone(&self.receiver);
        napi::bindgen_prelude::spawn(async move {
            receiver.lock().await.close();
        });
    }
}
