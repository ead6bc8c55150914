//! The native half of the `sessionlog` Node.js package: the store, the
//! validated writer, follow and the Auto-review request, for TypeScript
//! agent runtimes. `index.js` is the other half: it gives this addon the
//! API the package documents (plain JavaScript values in and out, one
//! `SessionlogError` for every failure, appends queued in call order,
//! `follow` as an async iterator).
//!
//! Nothing here runs store work on the JavaScript thread: every call that
//! touches a file or a database is a napi `AsyncTask` on libuv's thread
//! pool, except a writer's work, which runs on the writer's own thread
//! (`writer.rs`), and `follow` waits on the addon's tokio runtime. Values cross the
//! boundary as JSON text built from the records' stored bodies, so a
//! payload is serialised once (by `JSON.stringify` on the way in) and
//! parsed once (by `JSON.parse` on the way out). Errors cross as the JSON
//! text of a `Failure` (see `failure.rs`); a panic becomes a `PANIC` failure.
#![deny(missing_docs)]

mod failure;
mod follow;
mod json;
mod task;
mod writer;

use std::path::PathBuf;

use napi::bindgen_prelude::AsyncTask;
use napi_derive::napi;
use sessionlog_projections::{
    chat_completions_body, chat_completions_reply, parse_review_result, Defaults, ReviewFailure,
};
use sessionlog_schema::{ApprovalPolicy, SandboxMode, SessionHeader, SessionId};
use sessionlog_store::{
    bounded_failure_message, chain_head, fold_through, now_ms, AsyncStore, Durability, SealTurns,
    Store, WriterOptions,
};

use crate::failure::{Failure, Outcome};
use crate::follow::NativeFollow;
use crate::task::{blocking, guarded, Blocking};
use crate::writer::{Completion, NativeWriter};

/// A new root session: its id, working directory and optional baselines.
#[napi(object)]
#[derive(Debug)]
pub struct SessionInput {
    /// The session id.
    pub id: String,
    /// The working directory the session runs in.
    pub cwd: String,
    /// Unix milliseconds; now when absent.
    pub created_at: Option<f64>,
    /// The sandbox baseline (`read-only`, `workspace-write`,
    /// `danger-full-access`).
    pub sandbox_mode: Option<String>,
    /// The approval baseline (`ask`, `never`).
    pub approval_policy: Option<String>,
}

/// The configured defaults a projection falls back on.
#[napi(object)]
#[derive(Debug)]
pub struct DefaultsInput {
    /// The configured approval policy (`ask` when absent).
    pub default_approval: Option<String>,
    /// The configured sandbox mode (`workspace-write` when absent).
    pub default_sandbox: Option<String>,
}

/// The longest text handed to JavaScript as one string: V8's longest
/// string in UTF-16 units, which a UTF-8 text of as many bytes never passes.
const MAX_STRING_BYTES: usize = (1 << 29) - 24;

/// `text`, when one JavaScript string holds it; else `TOO_LARGE`, `what`
/// saying what it is (given its length), then `remedy`. Handed over as it
/// is, napi would refuse it in its own words, as an argument it cannot
/// convert.
fn one_string(text: String, what: impl FnOnce(usize) -> String, remedy: &str) -> Outcome<String> {
    if text.len() > MAX_STRING_BYTES {
        return Err(Failure::new(
            "TOO_LARGE",
            format!(
                "{}, more than one JavaScript string holds ({MAX_STRING_BYTES}); {remedy}",
                what(text.len())
            ),
        ));
    }
    Ok(text)
}

/// A store of sessions: a folder of JSONL logs or a SQLite database.
#[napi]
#[derive(Debug)]
pub struct NativeStore {
    store: AsyncStore,
}

/// Opens the store at `location` (creating it when `create` is set and it
/// is missing).
#[napi]
pub fn open_store(location: String, create: bool) -> AsyncTask<Blocking<NativeStore>> {
    blocking(move || {
        // A path is made absolute now (its `..` kept, as the file system
        // reads it), so that a later `process.chdir` moves neither the
        // store nor its writers' locks; a text that reads as a URL (or a
        // `postgres:`/`postgresql:` one mistyped) is left to `Store` as it
        // is, which opens it or refuses it.
        let lowered = location.trim_start().to_ascii_lowercase();
        let url_like = location.contains("://")
            || lowered.starts_with("postgres:")
            || lowered.starts_with("postgresql:");
        let path = match url_like {
            true => PathBuf::from(location),
            false => std::path::absolute(&location)
                .map_err(|error| Failure::new("IO", format!("{location}: {error}")))?,
        };
        let store = if create {
            Store::create(&path)?
        } else {
            Store::open(&path)?
        };
        Ok(NativeStore {
            store: AsyncStore::new(store),
        })
    })
}

/// Reads a reviewer's reply strictly; the decision's JSON text, or an
/// `AUTO_REVIEW_FAILED` failure naming what was wrong, its message cut as
/// the store cuts a reviewer failure's (a reply of megabytes still gives a
/// failure a settle can hold).
#[napi]
pub fn parse_review_result_json(reply: String) -> napi::Result<String> {
    guarded(|| {
        let decision = parse_review_result(reply.as_bytes()).map_err(|failure| {
            Failure::from(ReviewFailure {
                message: bounded_failure_message(failure.message),
            })
        })?;
        Ok(json::to_json(&decision))
    })
}

/// The Chat Completions body that asks the reviewer about `request` (the
/// exact text of a reviewer's request): compact JSON, members in the order
/// `model`, `messages`, `temperature`, `stream`, so that a runtime can send
/// it with its own HTTP client. `model` replaces the request's own model.
#[napi]
pub fn chat_completions_body_json(request: String, model: Option<String>) -> napi::Result<String> {
    guarded(|| {
        chat_completions_body(&request, model.as_deref())
            .map_err(|error| Failure::invalid_argument(error.message))
    })
}

/// The `{blocks, stop}` reply (JSON text) read from a Chat Completions
/// answer body, for `parse_review_result_json`; an `AUTO_REVIEW_FAILED`
/// failure naming what was wrong with the answer.
#[napi]
pub fn chat_completions_reply_json(response: String) -> napi::Result<String> {
    guarded(|| Ok(chat_completions_reply(response.as_bytes())?))
}

/// Panics on the JavaScript thread: with `panic_on_pool_for_tests`, it
/// exists so that the tests can show that a panic of the addon reaches
/// JavaScript as a `PANIC` error and the process lives on.
#[napi]
pub fn panic_for_tests() -> napi::Result<()> {
    guarded(|| panic!("a panic on the JavaScript thread, for the tests"))
}

/// Panics in an `AsyncTask` on the thread pool (see `panic_for_tests`).
#[napi]
pub fn panic_on_pool_for_tests() -> AsyncTask<Blocking<()>> {
    blocking(|| panic!("a panic on the thread pool, for the tests"))
}

#[napi]
impl NativeStore {
    /// The folder or database the store is.
    #[napi(getter)]
    pub fn location(&self) -> String {
        self.store.store().path().display().to_string()
    }

    /// Creates a root session; the header's JSON text.
    #[napi]
    pub fn create_session(
        &self,
        input: SessionInput,
        buffered: bool,
    ) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || {
            let id = session_id(&input.id)?;
            let created_at = input.created_at.map_or_else(now_ms, |ms| ms as u64);
            let mut header = SessionHeader::root(id, created_at, input.cwd);
            header.sandbox_mode = input
                .sandbox_mode
                .as_deref()
                .map(vocabulary::<SandboxMode>)
                .transpose()?;
            header.approval_policy = input
                .approval_policy
                .as_deref()
                .map(vocabulary::<ApprovalPolicy>)
                .transpose()?;
            store
                .store()
                .create_session(&header, &[], durability(buffered))?;
            Ok(json::header(&header))
        })
    }

    /// Opens the one writer of session `id` (`LOCKED` while another writer,
    /// in this process or another, holds it). Given `seal_key` (the text
    /// of a secret key file), it appends a seal signed by that key after
    /// every `turn/end`, in the same write and sync. `done` is called
    /// with the outcome of each piece of work sent to the writer, in the
    /// order sent (see `writer.rs`).
    #[napi]
    pub fn open_writer(
        &self,
        id: String,
        buffered: bool,
        keep_snapshot: bool,
        seal_key: Option<String>,
        done: Completion,
    ) -> AsyncTask<Blocking<NativeWriter>> {
        let store = self.store.clone();
        blocking(move || {
            let seal_turns = match seal_key {
                Some(text) => SealTurns::Signed(writer::secret_key(&text, "sealKey")?),
                None => SealTurns::Off,
            };
            let options = WriterOptions {
                durability: durability(buffered),
                keep_snapshot,
                seal_turns,
            };
            let writer = store.store().open_writer(&session_id(&id)?, options)?;
            NativeWriter::start(writer, done)
        })
    }

    /// Forks `child` from `parent`; the child's header as JSON text.
    #[napi]
    pub fn fork(
        &self,
        parent: String,
        child: String,
        prompt: Option<String>,
        defaults: DefaultsInput,
    ) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || {
            let (parent, child) = (session_id(&parent)?, session_id(&child)?);
            let defaults = configured(&defaults)?;
            let header = store
                .store()
                .fork(&parent, &child, prompt.as_deref(), &defaults)?;
            Ok(json::header(&header))
        })
    }

    /// The good prefix of session `id`: `{header, events, tornTail}` as
    /// JSON text.
    #[napi]
    pub fn snapshot(&self, id: String) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || {
            let snapshot = store.store().snapshot(&session_id(&id)?)?;
            one_string(
                json::snapshot(&snapshot),
                |len| format!("session {id} is {len} bytes of JSON"),
                "read its events with follow(), a part at a time",
            )
        })
    }

    /// The projections of session `id` as of seq `at` (the last when
    /// absent), as `sessionlog project` prints them; JSON text.
    #[napi]
    pub fn project(
        &self,
        id: String,
        at: Option<f64>,
        defaults: DefaultsInput,
    ) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || {
            let id = session_id(&id)?;
            let defaults = configured(&defaults)?;
            let store = store.store();
            let at = at.map(|at| at as u64);
            // A session that ends in a seal has its chain hashed from
            // the start rather than be read twice (`fold_through`).
            let ends_sealed = at.is_none() && store.ends_in_seal(&id);
            let (folded, _torn_tail) = fold_through(
                || store.stream(&id),
                &store.session_path(&id),
                at,
                ends_sealed,
            )?;
            if let Some(at) = at.filter(|at| *at > folded.seq()) {
                return Err(Failure::invalid_argument(format!(
                    "at {at} is past the last seq {} of session {id}",
                    folded.seq()
                )));
            }
            Ok(json::to_json(&folded.projection(&defaults)))
        })
    }

    /// The head of session `id`, as `sessionlog head` prints it (an
    /// anchor): `{session, seq, chain}` for the last record of its good
    /// prefix, as JSON text.
    #[napi]
    pub fn head(&self, id: String) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || {
            let (anchor, _torn_tail) = chain_head(store.store().stream(&session_id(&id)?)?)?;
            Ok(anchor.to_json_line())
        })
    }

    /// Every session's header (JSON text of an array; `{id, error}` for a
    /// session whose header cannot be read).
    #[napi]
    pub fn list(&self) -> AsyncTask<Blocking<String>> {
        let store = self.store.clone();
        blocking(move || Ok(json::list(store.store().list()?)))
    }

    /// Follows session `id` from `from_seq` on (see `NativeFollow`).
    #[napi]
    pub fn follow(&self, id: String, from_seq: f64) -> napi::Result<NativeFollow> {
        guarded(|| {
            let id = session_id(&id)?;
            let store = self.store.clone();
            let receiver = napi::bindgen_prelude::within_runtime_if_available(move || {
                store.follow(id, from_seq as u64)
            });
            Ok(NativeFollow::new(receiver))
        })
    }
}

fn session_id(id: &str) -> Outcome<SessionId> {
    SessionId::parse(id).map_err(|error| Failure::new("INVALID_ID", error.to_string()))
}

fn durability(buffered: bool) -> Durability {
    if buffered {
        Durability::Buffered
    } else {
        Durability::Fsync
    }
}

/// Parses a value of a closed vocabulary, refusing anything else.
pub(crate) fn vocabulary<T: std::str::FromStr<Err = String>>(text: &str) -> Outcome<T> {
    text.parse().map_err(Failure::invalid_argument)
}

pub(crate) fn configured(defaults: &DefaultsInput) -> Outcome<Defaults> {
    let mut configured = Defaults::default();
    if let Some(approval) = &defaults.default_approval {
        configured.approval = vocabulary(approval)?;
    }
    if let Some(sandbox) = &defaults.default_sandbox {
        configured.sandbox = vocabulary(sandbox)?;
    }
    Ok(configured)
}
