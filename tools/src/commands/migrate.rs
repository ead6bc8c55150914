//! `sessionlog migrate` and `diff`: copy every session between backends and
//! prove the copy identical; compare two stores.

use std::path::Path;

use anyhow::{bail, Result};
use sessionlog_store::{
    diff_sources, migrate_log, migrate_with, DiffValue, MigrateOptions, MigratePhase,
    MigrateProgress, SessionSource, Store, StoreError,
};

use crate::target::{is_lone_log, require_sessions, NewStore};
use crate::{exit, warn, UsageError};

/// What `migrate` may accept besides a fresh copy.
#[derive(Debug, Clone, Copy)]
pub struct MigrateArgs {
    /// Accept a source that holds no session.
    pub allow_empty: bool,
    /// Skip the sessions an interrupted run already copied, once proved
    /// identical.
    pub resume: bool,
}

/// Runs `migrate`.
pub fn migrate(
    from: &Path,
    to: &Path,
    options: &MigrateArgs,
    json: bool,
    quiet: bool,
) -> Result<u8> {
    refuse_same_store(from, to)?;
    // A lone log is a source of one session; a store is opened as such.
    let source = if is_lone_log(from) {
        None
    } else {
        Some(Store::open_read_only(from)?)
    };
    if source.is_none() && !from.exists() {
        bail!(UsageError(format!("{}: no such file", from.display())));
    }
    if let Some(source) = &source {
        require_sessions(&source.ids()?, from, options.allow_empty)?;
    }
    if is_lone_log(to) {
        bail!(UsageError(format!(
            "{}: a destination is a folder, a .db/.sqlite database or a postgres:// URL, \
             not a .jsonl file (a lone log is copied with cp, or into a folder)",
            sessionlog_store::store_display(to)
        )));
    }
    let created = NewStore::create(to)?;
    let destination = created.store();
    // Two URLs that spell one PostgreSQL store differently (another host
    // name, another user) are told by the server.
    if let Some(source) = &source {
        if source.is_same_store(destination)? {
            bail!(UsageError(format!(
                "{} and {} are the same store: migrate copies into another one",
                sessionlog_store::store_display(from),
                sessionlog_store::store_display(to)
            )));
        }
    }
    let bar = crate::progress::bar(quiet, "migrate");
    let mut progress = |update: MigrateProgress| {
        bar.set_prefix(match update.phase {
            MigratePhase::Verify => "migrate: read and verify",
            MigratePhase::Copy => "migrate: publish",
            MigratePhase::Compare => "migrate: compare",
        });
        crate::progress::update(&bar, update.done as u64, update.total as u64)
    };
    let migrate_options = MigrateOptions {
        resume: options.resume,
    };
    let migrated = match &source {
        Some(source) => migrate_with(source, destination, migrate_options, &mut progress),
        None => migrate_log(from, destination, migrate_options, &mut progress),
    };
    let report = match migrated {
        Ok(report) => report,
        Err(error) => {
            bar.finish_and_clear();
            // A refused migration leaves no empty store it made behind.
            created.remove_if_empty();
            return Err(refused(error, from, to));
        }
    };
    bar.finish_and_clear();
    for warning in &report.warnings {
        warn(warning);
    }
    // Sessions the destination held besides the source's: the copy of
    // each source session is proved identical, but `diff FROM TO` counts
    // these as a difference, so they are said.
    let others = destination
        .ids()?
        .len()
        .saturating_sub(report.sessions + report.skipped);
    if json {
        let warnings: Vec<String> = report.warnings.iter().map(ToString::to_string).collect();
        /// What `migrate --json` prints, its members in this order.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Migrated {
            sessions: usize,
            skipped: usize,
            events: u64,
            other_sessions: usize,
            warnings: Vec<String>,
            identical: bool,
        }
        crate::terminal::print_json_line(&serde_json::to_string(&Migrated {
            sessions: report.sessions,
            skipped: report.skipped,
            events: report.events,
            other_sessions: others,
            warnings,
            identical: true,
        })?)?;
    } else {
        let to_shown = sessionlog_store::store_display(to);
        crate::outln!(
            "migrated {} ({}) from {} to {to_shown}; the copy is identical",
            crate::terminal::counted(report.sessions as u64, "session"),
            crate::terminal::counted(report.events, "event"),
            sessionlog_store::store_display(from),
        )?;
        if report.skipped > 0 {
            crate::outln!(
                "skipped {} already in {to_shown}, each proved identical to its source",
                crate::terminal::counted(report.skipped as u64, "session"),
            )?;
        }
        if others > 0 {
            crate::outln!(
                "{to_shown} also holds {} the source does not (`sessionlog diff` counts {} as a difference)",
                crate::terminal::counted(others as u64, "other session"),
                if others == 1 { "it" } else { "them" }
            )?;
        }
    }
    Ok(exit::OK)
}

/// The error of a refused migration, with what to do about a session
/// already at the destination.
fn refused(error: StoreError, from: &Path, to: &Path) -> anyhow::Error {
    match error {
        StoreError::AlreadyExists { id, path } => anyhow::Error::msg(format!(
            "session {id} already exists in {}; nothing was written. If an interrupted migrate \
             published it, `sessionlog migrate {} {} --resume` proves and skips the sessions \
             already copied; otherwise migrate into another store",
            sessionlog_store::store_display(&path),
            crate::terminal::shell_word(&sessionlog_store::store_display(from)),
            crate::terminal::shell_word(&sessionlog_store::store_display(to))
        )),
        error => error.into(),
    }
}

/// One side of a `diff`: a store opened read-only, or a lone log (a store
/// of one session).
enum Side<'a> {
    Store(Store),
    Log(&'a Path),
}

impl<'a> Side<'a> {
    fn open(path: &'a Path) -> Result<Side<'a>> {
        if !is_lone_log(path) {
            return Ok(Side::Store(Store::open_read_only(path)?));
        }
        if !path.exists() {
            bail!(UsageError(format!("{}: no such file", path.display())));
        }
        Ok(Side::Log(path))
    }

    fn source(&self) -> SessionSource<'_> {
        match self {
            Side::Store(store) => SessionSource::Store(store),
            Side::Log(path) => SessionSource::Log(path),
        }
    }
}

/// Refuses a migration whose destination is its source: copying a store
/// onto itself would find every session already there.
fn refuse_same_store(from: &Path, to: &Path) -> Result<()> {
    let url = |path: &Path| path.to_str().is_some_and(sessionlog_store::is_postgres_url);
    let same = match (url(from), url(to)) {
        // Two PostgreSQL URLs name one store when they name the same user,
        // host, port, database and schema, however the URLs spell them
        // (parameters in another order, the default schema written out).
        (true, true) => {
            sessionlog_store::store_display(from) == sessionlog_store::store_display(to)
        }
        _ => match (std::fs::canonicalize(from), std::fs::canonicalize(to)) {
            (Ok(from), Ok(to)) => from == to,
            _ => false,
        },
    };
    if same {
        bail!(UsageError(format!(
            "{} and {} are the same store: migrate copies into another one",
            sessionlog_store::store_display(from),
            sessionlog_store::store_display(to)
        )));
    }
    Ok(())
}

/// A side of a difference as JSON: a number as a number, a null member as
/// null, text (and JSON as the record holds it) as a string of its own
/// characters.
fn difference_value(value: &DiffValue) -> serde_json::Value {
    match value {
        DiffValue::Number(number) => (*number).into(),
        DiffValue::Null | DiffValue::Absent => serde_json::Value::Null,
        DiffValue::Text(text) | DiffValue::Json(text) | DiffValue::Said(text) => {
            text.as_str().into()
        }
    }
}

/// Runs `diff`.
pub fn diff(a: &Path, b: &Path, json: bool) -> Result<u8> {
    let left = Side::open(a)?;
    let right = Side::open(b)?;
    match diff_sources(&left.source(), &right.source())? {
        None => {
            // Identical, and empty: two stores that hold no session are
            // equal, but so are two mistyped paths.
            for (side, path) in [(&left, a), (&right, b)] {
                if let Side::Store(store) = side {
                    crate::target::warn_if_no_sessions(store.ids()?.len(), path);
                }
            }
            if json {
                crate::terminal::print_json_line(r#"{"identical":true}"#)?;
            } else {
                crate::outln!("identical")?;
            }
            Ok(exit::OK)
        }
        Some(difference) => {
            if json {
                /// What `diff --json` prints of a difference, its members
                /// in this order.
                #[derive(serde::Serialize)]
                struct Different<'a> {
                    identical: bool,
                    session: Option<&'a str>,
                    seq: Option<u64>,
                    field: &'a str,
                    left: serde_json::Value,
                    right: serde_json::Value,
                    message: String,
                }
                crate::terminal::print_json_line(&serde_json::to_string(&Different {
                    identical: false,
                    session: difference.session.as_ref().map(|s| s.as_str()),
                    seq: difference.seq,
                    field: &difference.field,
                    left: difference_value(&difference.left),
                    right: difference_value(&difference.right),
                    message: difference.to_string(),
                })?)?;
            } else {
                crate::outln!("{difference}")?;
            }
            Ok(exit::USAGE)
        }
    }
}
