//! Durable storage of sessionlog: the JSONL backend (a folder of logs), the
//! SQLite backend (one database file for many sessions) and the PostgreSQL
//! backend (one database for many sessions on many machines), their shared
//! validated writer, streaming reads, creation and fork.
//!
//! This crate is the only one that opens files. Every change of durable state
//! goes through the [`testing::Io`] seam, so tests can fail any single
//! operation. What each event means is docs/EVENTS.md; the bytes, docs/FORMAT.md.
//!
//! # A session, from creation to a review request
//!
//! [`Store::create`] opens a store (a folder of `<id>.jsonl` logs, or a
//! database for a path ending in `.db` or `.sqlite`);
//! [`Store::create_session`] creates a session; [`Store::open_writer`] gives
//! its one [`SessionWriter`], whose appends are checked against every rule
//! and durable on return; [`Store::fork`] delegates to a child; and
//! [`SessionWriter::review_request`] builds the Auto reviewer's request for
//! a pending call from the snapshot the writer holds.
//!
//! ```
//! use serde_json::json;
//! use sessionlog_projections::{Defaults, PendingAction, DEFAULT_MAX_REQUEST_BYTES};
//! use sessionlog_schema::{
//!     ApprovalPolicy, Message, Preset, RequestHeader, SandboxMode, SessionHeader, SessionId,
//!     StepStart, ToolDefinition, ToolStart, TurnStart,
//! };
//! use sessionlog_store::{now_ms, Durability, NewEvent, Store, StoreError, WriterOptions};
//!
//! let folder = tempfile::tempdir()?;
//! // Create: a store, then a session with its header (and no events yet).
//! let store = Store::create(&folder.path().join("sessions"))?;
//! let id = SessionId::parse("lead")?;
//! let header = SessionHeader::root(id.clone(), now_ms(), "/work/project".into());
//! store.create_session(&header, &[], Durability::Fsync)?;
//!
//! // Append: through the session's one writer; every event is a typed value.
//! let mut writer = store.open_writer(&id, WriterOptions::default())?;
//! writer.switch_preset(Preset::Auto, Some(ApprovalPolicy::Ask), &Defaults::default(), None)?;
//! writer.append(NewEvent::of(&TurnStart::new("t1")), None)?;
//! writer.append(NewEvent::of(&Message::user("Run the tests")), None)?;
//! let shell = ToolDefinition::new("shell", "Run a command", &json!({"type": "object"}));
//! let sent = RequestHeader::new("p", "m", ApprovalPolicy::Ask, SandboxMode::DangerFullAccess, vec![shell]);
//! let seqs = writer.append_batch(vec![StepStart::new("s1", "t1").into(), sent.into()], None)?;
//! let last = writer.acknowledged_seq();
//! assert_eq!(seqs.last().map(|seq| seq.get()), Some(last));
//! // An event that breaks a rule is refused, and nothing is written.
//! let refused = writer.append(NewEvent::of(&TurnStart::new("t2")), None);
//! assert!(matches!(refused, Err(StoreError::Rule { .. })));
//!
//! // Fork: a child seeded with the parent's events; the parent is unchanged.
//! let child = store.fork(&id, &SessionId::parse("lead-tests")?, Some("Run the tests"), &Defaults::default())?;
//! assert_eq!(child.seed_length, last);
//! assert_eq!(store.snapshot(&id)?.events.len() as u64, last);
//!
//! // Review request: before the call runs, from the writer's snapshot.
//! let call = ToolStart::new("c1", "s1", "shell", &json!({"command": "cargo test"}));
//! let request = writer.review_request(&PendingAction::from_tool_start(&call), DEFAULT_MAX_REQUEST_BYTES)?;
//! assert!(request.contains("cargo test"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`AsyncStore`] and [`AsyncWriter`] are the same for tokio runtimes.
//!
//! # Features
//!
//! `sqlite` (the SQLite backend, with SQLite bundled) and `async`
//! ([`AsyncStore`], on tokio) are on by default; without them the crate keeps
//! JSONL logs and the blocking API, and builds neither.
#![deny(missing_docs)]
// Without the `sqlite` feature, what only the SQL backend uses (the row
// checks, the commit seam, a few imports and arguments) has no caller; it
// still compiles, so it stays checked.
#![cfg_attr(
    not(feature = "sqlite"),
    allow(dead_code, unused_imports, unused_variables)
)]

#[cfg(feature = "async")]
mod asynchronous;
mod error;
mod fold;
mod follow;
mod fork;
mod fork_header;
mod io;
mod jsonl;
mod last;
mod leftovers;
mod migrate;
mod reader;
mod review;
mod row_follow;
mod shared_text;
mod sql;
mod state_snapshot;
mod store;
mod wake;
mod writer;

#[cfg(feature = "async")]
pub use asynchronous::{AsyncStore, AsyncWriter, Follow, FOLLOW_POLL_INTERVAL};
pub use error::{corruption_remedy, ErrorClass, Refusal, StoreError};
pub use fold::fold_stream;
pub use follow::{LogFollower, ReadSoFar};
pub use fork::fork_log_file;
pub use jsonl::{
    create_log_file, create_log_file_as_stored, open_log_writer, read_header, read_header_as_is,
    state_snapshot_path, writer_holds, JsonlStore, ListEntry,
};
pub use last::{log_ends_in_seal, read_last_events, LastEvents};
pub use leftovers::Leftover;
pub use migrate::{
    diff, diff_sources, migrate, migrate_log, migrate_with, DiffValue, Difference, MigrateOptions,
    MigratePhase, MigrateProgress, MigrateReport, MigrateWarning, SessionSource,
};
pub use reader::{
    chain_head, file_kind, fold_through, read_snapshot_from, EventBody, FoldedEvent, Lend,
    LogReader, Projections, Rewind, SessionStream, Snapshot, Unproven,
};
pub use review::{
    ask_reviewer, bounded_failure_message, verdict_events, ReviewCallError, ReviewOptions,
    Reviewed, Reviewer, ReviewerError, ReviewerResponse, Verdict,
};
pub use row_follow::RowFollower;
pub use sql::checks::StoreAudit;
#[cfg(feature = "postgres")]
pub use sql::postgres::{
    PostgresEvents, PostgresListener, PostgresStore, DEFAULT_SCHEMA, POSTGRES_SCHEMA_VERSION,
};
#[cfg(feature = "sqlite")]
pub use sql::sqlite::{SqliteEvents, SqliteStore, SCHEMA_VERSION};
pub use store::{
    folder_of, is_postgres_url, redact_url, store_display, Backend, EventStream, HeldRead, Store,
};
pub use wake::{Wake, POLL_ONLY_VARIABLE};
pub use writer::{
    check_storable_header, check_storable_record, now_ms, AcknowledgedSeq, Durability, NewEvent,
    PresetSwitched, SealTurns, SessionWriter, WriterOptions,
};

pub mod testing {
    //! The seams under the API, for tests and low-level tools; an embedder
    //! needs none of them.
    //!
    //! [`Io`] is the one path of every durable change (write, fdatasync,
    //! truncate, publish, folder fsync, commit): `Io::default()` performs
    //! them, [`Io::with_faults`] lets a [`FaultInjector`] fail any one of
    //! them at a [`FaultPoint`] (what the fault and power-loss campaigns
    //! do). [`LineReader`] splits a log file into [`Line`]s, the raw
    //! material of every reader, which `sessionlog salvage` reads too.
    //!
    //! ```
    //! use std::path::Path;
    //! use std::sync::Arc;
    //!
    //! use sessionlog_schema::{SessionHeader, SessionId};
    //! use sessionlog_store::testing::{FaultInjector, FaultPoint, Io};
    //! use sessionlog_store::{Durability, JsonlStore, Store};
    //!
    //! /// Fails every fdatasync.
    //! struct NoSync;
    //!
    //! impl FaultInjector for NoSync {
    //!     fn before(&self, point: FaultPoint, _: &Path) -> std::io::Result<()> {
    //!         match point {
    //!             FaultPoint::Fsync => Err(std::io::Error::other("injected")),
    //!             _ => Ok(()),
    //!         }
    //!     }
    //! }
    //!
    //! let folder = tempfile::tempdir()?;
    //! let logs = JsonlStore::create_folder(&folder.path().join("logs"))?
    //!     .with_io(Io::with_faults(Arc::new(NoSync)));
    //! let store = Store::Jsonl(logs);
    //! let header = SessionHeader::root(SessionId::parse("a")?, 0, "/work".into());
    //! assert!(store.create_session(&header, &[], Durability::Fsync).is_err());
    //! assert!(!store.contains(&header.id)?, "a session that was not made durable is not there");
    //! # Ok::<(), Box<dyn std::error::Error>>(())
    //! ```

    pub use crate::io::{FaultInjector, FaultPoint, Io};
    pub use crate::reader::{Line, LineReader};
}
