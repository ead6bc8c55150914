//! `sessionlog import`: Codex CLI rollouts and Claude Code transcripts into
//! a store (the mapping is in `crate::import` and docs/IMPORT.md).
//!
//! Each SOURCE (a file or a folder walked for the tool's file names) gets a
//! one-line summary; a file that cannot be read is named with its line and
//! reason on stderr and imports nothing, the others go on, and the exit
//! code is 1 when any file failed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;
use sessionlog_schema::SessionId;
use sessionlog_store::Store;

use crate::commands::replay::display;
use crate::import::{self, Format, ImportError, SessionOutcome};
use crate::target::{is_lone_log, NewStore};
use crate::{exit, progress, UsageError};

/// What happened to the files of one SOURCE.
#[derive(Debug, Default)]
struct SourceReport {
    files: u64,
    imported: Vec<Imported>,
    events: u64,
    unknown_lines: u64,
    unchanged: u64,
    extended: Vec<Extended>,
    skipped: Vec<(String, String)>,
    failed: Vec<ImportError>,
}

/// A session the store held that its source grew, as `--json` lists it:
/// the events after the stored ones were appended.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Extended {
    session: String,
    file: String,
    /// Events the store held before.
    stored: u64,
    /// Events appended.
    events: u64,
    unknown_lines: u64,
}

/// A session written, as `--json` lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Imported {
    session: String,
    parent_session: Option<String>,
    file: String,
    events: u64,
    unknown_lines: u64,
}

/// A file that failed or was skipped, as `--json` lists it.
#[derive(Debug, Serialize)]
struct FileNote<'a> {
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<Option<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<Option<u64>>,
    reason: &'a str,
}

/// The `--json` line of one SOURCE, its members in this order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SourceLine<'a> {
    source: String,
    files: u64,
    sessions: usize,
    events: u64,
    unknown_lines: u64,
    unchanged: u64,
    skipped: Vec<FileNote<'a>>,
    failed: Vec<FileNote<'a>>,
    imported: &'a [Imported],
    extended: &'a [Extended],
}

/// Runs `import`.
pub fn run(
    format: Format,
    sources: &[PathBuf],
    into: &Path,
    json: bool,
    quiet: bool,
) -> Result<u8> {
    if is_lone_log(into) {
        bail!(UsageError(format!(
            "--into {}: a store is a folder, a .db/.sqlite database or a postgres:// URL, not a .jsonl file",
            sessionlog_store::store_display(into)
        )));
    }
    let created = NewStore::create(into)?;
    let store = created.store();
    let mut discovered = Vec::with_capacity(sources.len());
    for source in sources {
        discovered.push(import::discover(source, format, into));
    }
    let total: u64 = discovered
        .iter()
        .map(|found| found.as_ref().map_or(0, |found| found.files.len() as u64))
        .sum();
    let bar = progress::bar(quiet, "import");
    bar.set_length(total);
    let mut any_failed = false;
    let mut corrupt_store = false;
    for (source, files) in sources.iter().zip(discovered) {
        let mut report = SourceReport::default();
        match files {
            Ok(found) => {
                if found.files.is_empty() && found.failures.is_empty() && !quiet {
                    let names = match format {
                        import::Format::Codex => "no Codex rollout (rollout-*.jsonl)",
                        import::Format::Claude => {
                            "no Claude Code transcript (<uuid>.jsonl, agent-*.jsonl)"
                        }
                        import::Format::Auto => {
                            "no transcript (rollout-*.jsonl, <uuid>.jsonl, agent-*.jsonl)"
                        }
                    };
                    let other = match format {
                        import::Format::Codex => {
                            "; for Claude Code, `import claude` or `import auto`"
                        }
                        import::Format::Claude => "; for Codex, `import codex` or `import auto`",
                        import::Format::Auto => "",
                    };
                    bar.suspend(|| {
                        crate::warn(format!(
                            "{}: {names} found, plain or .zst{other}",
                            source.display()
                        ))
                    });
                }
                // What could not be looked into fails alone; the rest of
                // the folder is read.
                report.failed.extend(found.failures);
                for file in found.files {
                    report.files += 1;
                    import_one(store, &file, format, &mut report);
                    bar.inc(1);
                }
            }
            Err(error) => report.failed.push(error),
        }
        any_failed |= !report.failed.is_empty();
        corrupt_store |= report.failed.iter().any(|failure| failure.corrupt_store);
        bar.suspend(|| print_report(source, &report, json))?;
    }
    bar.finish_and_clear();
    // A store made for an import that imported nothing is not left behind.
    created.remove_if_empty();
    Ok(match (corrupt_store, any_failed) {
        (true, _) => exit::CORRUPT,
        (false, true) => exit::USAGE,
        (false, false) => exit::OK,
    })
}

fn import_one(store: &Store, file: &Path, format: Format, report: &mut SourceReport) {
    let written = import::translate_file(file, format)
        .and_then(|translation| import::write(store, file, translation));
    let file_import = match written {
        Ok(file_import) if file_import.sessions.is_empty() => {
            report.skipped.push((
                file.display().to_string(),
                "empty file: no transcript line".to_owned(),
            ));
            return;
        }
        Ok(file_import) => file_import,
        Err(error) => {
            report.failed.push(error);
            return;
        }
    };
    for (header, outcome) in file_import.sessions {
        match outcome {
            SessionOutcome::Created {
                events,
                unknown_lines,
            } => {
                report.events += events;
                report.unknown_lines += unknown_lines;
                report.imported.push(Imported {
                    session: header.id.to_string(),
                    parent_session: header.parent_session.as_ref().map(ToString::to_string),
                    file: file.display().to_string(),
                    events,
                    unknown_lines,
                });
            }
            SessionOutcome::Unchanged => report.unchanged += 1,
            SessionOutcome::Extended {
                stored,
                added,
                unknown_lines,
            } => {
                report.extended.push(Extended {
                    session: header.id.to_string(),
                    file: file.display().to_string(),
                    stored,
                    events: added,
                    unknown_lines,
                });
            }
            SessionOutcome::Changed {
                stored,
                now,
                differs_at,
                stored_torn,
                closed_at_end,
            } => report.skipped.push((
                file.display().to_string(),
                changed_reason(
                    &header.id,
                    stored,
                    now,
                    differs_at,
                    stored_torn,
                    closed_at_end,
                ),
            )),
            SessionOutcome::Withheld { because } => report.skipped.push((
                file.display().to_string(),
                format!(
                    "session {} not written: session {because} of the same file is skipped, \
                     and the sessions of one file are written together or not at all",
                    header.id
                ),
            )),
        }
    }
}

/// Why a source whose session the store holds, with other events, was
/// skipped. A source that only grew is skipped only when another session
/// of its file withholds it; a session imported in the middle of a turn
/// (`closed_at_end`) cannot take the rest of that turn, as the import
/// closed it and a log is never rewritten; one that differs before the
/// stored events end cannot be told apart from another source whose id
/// maps to the same session id, so both are named.
fn changed_reason(
    id: &SessionId,
    stored: u64,
    now: u64,
    differs_at: u64,
    stored_torn: bool,
    closed_at_end: bool,
) -> String {
    let why = if closed_at_end {
        format!(
            "the source now gives {now}, the same up to seq {}: it was imported in the middle \
             of a turn, which the import closed at the end of the file (from seq {differs_at} \
             on), and it went on with that turn since; a log is never rewritten, so only an \
             import into a new store gives the whole session",
            differs_at.saturating_sub(1)
        )
    } else if differs_at > stored && stored_torn {
        format!(
            "the source gives {now}, the first {stored} the same, but the stored log ends in a \
             torn tail after them: the store lost the end of its log (`sessionlog verify` names \
             it; a writer cuts the torn tail when it opens the session)"
        )
    } else if differs_at > stored {
        format!("the source now gives {now}, the first {stored} the same: it grew since it was imported")
    } else if differs_at == now + 1 && stored > now {
        format!(
            "the source gives {now}, the same as its first {now}: the session grew in the store \
             after it was imported (sealed, or appended to)"
        )
    } else {
        let place = match differs_at {
            0 => "its header differs".to_owned(),
            seq => format!("they differ from seq {seq} on"),
        };
        format!(
            "the source now gives {now}, and {place}: the source changed since it was imported \
             (a conversation that went on from where the import read it, which an appended log \
             cannot take in), or it is another source whose id maps to the same session id (see \
             \"Session ids, and importing again\" in docs/IMPORT.md)"
        )
    };
    format!("session {id} is already in the store with {stored} events; {why}; nothing written")
}

fn print_report(source: &Path, report: &SourceReport, json: bool) -> std::io::Result<()> {
    for error in &report.failed {
        crate::errln!("sessionlog: import failed: {}", display(&error.to_string()));
    }
    for (file, reason) in &report.skipped {
        crate::errln!(
            "sessionlog: import skipped {}: {}",
            display(file),
            display(reason)
        );
    }
    if json {
        let failed = report
            .failed
            .iter()
            .map(|error| FileNote {
                file: error.file.display().to_string(),
                line: Some(error.line),
                offset: Some(error.offset),
                reason: &error.reason,
            })
            .collect();
        let skipped = report
            .skipped
            .iter()
            .map(|(file, reason)| FileNote {
                file: file.clone(),
                line: None,
                offset: None,
                reason,
            })
            .collect();
        let line = SourceLine {
            source: source.display().to_string(),
            files: report.files,
            sessions: report.imported.len(),
            events: report.events,
            unknown_lines: report.unknown_lines,
            unchanged: report.unchanged,
            skipped,
            failed,
            imported: &report.imported,
            extended: &report.extended,
        };
        return crate::terminal::print_json_line(&serde_json::to_string(&line)?);
    }
    let mut summary = format!(
        "{}: {} imported ({}, {} kept)",
        display(&source.display().to_string()),
        crate::terminal::counted(report.imported.len() as u64, "session"),
        crate::terminal::counted(report.events, "event"),
        crate::terminal::counted(report.unknown_lines, "unknown line")
    );
    if !report.extended.is_empty() {
        let added: u64 = report.extended.iter().map(|extended| extended.events).sum();
        summary.push_str(&format!(
            ", {} extended by {}",
            crate::terminal::counted(report.extended.len() as u64, "session"),
            crate::terminal::counted(added, "event")
        ));
    }
    if report.unchanged > 0 {
        summary.push_str(&format!(", {} already imported", report.unchanged));
    }
    if !report.skipped.is_empty() {
        summary.push_str(&format!(
            ", {} skipped (reasons above)",
            report.skipped.len()
        ));
    }
    if !report.failed.is_empty() {
        summary.push_str(&format!(", {} failed", report.failed.len()));
    }
    crate::outln!("{summary}")
}
