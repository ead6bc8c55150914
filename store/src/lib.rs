//! Durable storage of sessionlog: the JSONL backend (a folder of logs) and
//! the SQLite backend (one database for many sessions), their shared
//! validated writer, streaming reads, creation and fork.
//!
//! This crate is the only one that opens files. Every change of durable state
//! goes through the `Io` seam, so tests can fail any single operation.
#![deny(missing_docs)]

mod asynchronous;
mod error;
mod follow;
mod io;
mod jsonl;
mod leftovers;
mod migrate;
mod reader;
mod review;
mod sql_checks;
mod sqlite;
mod store;
mod wake;
mod writer;

pub use asynchronous::{AsyncStore, FOLLOW_POLL_INTERVAL};
pub use error::{ErrorClass, Refusal, StoreError};
pub use follow::LogFollower;
pub use io::{FaultInjector, FaultPoint, Io};
pub use jsonl::{
    create_log_file, open_log_writer, read_header, read_header_as_is, sync_log_file, JsonlStore,
    ListEntry,
};
pub use leftovers::Leftover;
pub use migrate::{
    diff, diff_sources, migrate, migrate_log, migrate_with, Difference, MigrateOptions,
    MigratePhase, MigrateProgress, MigrateReport, MigrateWarning, SessionSource,
};
pub use reader::{
    chain_head, fold_through, read_snapshot_from, FoldedEvent, Line, LineReader, LogReader,
    SessionStream, Snapshot,
};
pub use review::{
    ask_reviewer, verdict_events, ReviewCallError, ReviewOptions, Reviewed, Reviewer,
    ReviewerError, ReviewerResponse, Verdict,
};
pub use sql_checks::StoreAudit;
pub use sqlite::{SqliteEvents, SqliteStore, SCHEMA_VERSION};
pub use store::{Backend, EventStream, Store};
pub use wake::{Wake, POLL_ONLY_VARIABLE};
pub use writer::{
    now_ms, AcknowledgedSeq, Durability, NewEvent, SealTurns, SessionWriter, WriterOptions,
};
