//! `sessionlog clean`: removes the temporary files that a killed `create`,
//! `fork` or `migrate` left in a folder of logs (see
//! `JsonlStore::remove_leftovers`). Files in use by a running creation or
//! migration, files written less than `--older-than` seconds ago, and the
//! lock an interrupted migration left (until a run finishes it), stay;
//! each is listed with why.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;
use sessionlog_store::{JsonlStore, Leftover, Store};

use crate::exit;
use crate::target::Target;
use crate::UsageError;

/// One temporary file as reported.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    path: String,
    bytes: u64,
    age_seconds: u64,
    /// `removed`, `would remove`, `in use`, `recent`, `unfinished
    /// migration` (the lock an interrupted migration left: kept until a run
    /// finishes it) or `unreadable` (another user's file, whose lock this
    /// user cannot test: kept).
    action: &'static str,
}

/// Runs `clean`.
pub fn run(store: &Path, older_than: u64, dry_run: bool, json: bool) -> Result<u8> {
    // Read-only first, so that a database is not opened for writing; a
    // folder of logs is then opened again for the removal.
    let jsonl = match Target::open(store)? {
        Target::Store(Store::Jsonl(_)) => JsonlStore::open(store)?,
        Target::Store(Store::Sqlite(_) | Store::Postgres(_)) => {
            if !json {
                crate::outln!(
                    "{}: a database keeps no temporary files",
                    sessionlog_store::store_display(store)
                )?;
            }
            return Ok(exit::OK);
        }
        Target::File(_) => bail!(UsageError(format!(
            "{}: clean takes the folder of logs, not one log",
            sessionlog_store::store_display(store)
        ))),
    };
    let min_age = Duration::from_secs(older_than);
    let found = jsonl.leftovers()?;
    let removed = if dry_run {
        Vec::new()
    } else {
        jsonl.remove_leftovers(&found, min_age)?
    };
    let mut entries = Vec::with_capacity(found.len());
    for leftover in &found {
        let action = if removed.iter().any(|gone| gone.path == leftover.path) {
            "removed"
        } else if leftover.untestable {
            // Another user's, in a shared folder: its lock cannot be
            // tested, so it is left alone.
            "unreadable"
        } else if leftover.in_use {
            "in use"
        } else if leftover.is_migration_lock() {
            // The mark of a migration that was interrupted: kept until a
            // run finishes it (`migrate --resume`).
            "unfinished migration"
        } else if !leftover.removable(min_age) {
            "recent"
        } else if dry_run {
            "would remove"
        } else {
            // Gone by the time of removal.
            continue;
        };
        entries.push(entry(leftover, action));
    }
    for entry in &entries {
        if json {
            crate::terminal::print_json_line(&serde_json::to_string(entry)?)?;
        } else {
            crate::outln!(
                "{}: {} ({} bytes, written {} s ago)",
                entry.action,
                // A file name may hold a line break: it stays on its line.
                entry.path.escape_debug(),
                entry.bytes,
                entry.age_seconds
            )?;
        }
    }
    if !json {
        let (verb, gone) = if dry_run {
            ("would be removed", entries_with(&entries, "would remove"))
        } else {
            ("removed", entries_with(&entries, "removed"))
        };
        let bytes: u64 = gone.iter().map(|entry| entry.bytes).sum();
        crate::outln!(
            "{} {verb} ({bytes} bytes), {} kept",
            crate::terminal::counted(gone.len() as u64, "temporary file"),
            entries.len() - gone.len()
        )?;
    }
    // The lock of an interrupted migration, kept, says that the folder may
    // be short of the source's sessions.
    crate::commands::verify::warn_of_migration_locks(jsonl.folder(), &found);
    Ok(exit::OK)
}

fn entries_with<'e>(entries: &'e [Entry], action: &str) -> Vec<&'e Entry> {
    entries
        .iter()
        .filter(|entry| entry.action == action)
        .collect()
}

fn entry(leftover: &Leftover, action: &'static str) -> Entry {
    Entry {
        path: leftover.path.display().to_string(),
        bytes: leftover.bytes,
        age_seconds: leftover.age.as_secs(),
        action,
    }
}
