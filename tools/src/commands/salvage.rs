//! `sessionlog salvage FILE OUT`: the explicit, separate act of docs/FORMAT.md that
//! gets the good prefix out of a damaged log.
//!
//! FILE is only read. Its lines go through the schema's `LogScanner`
//! directly (the store's reader stops with an error at corruption, and
//! salvage wants the records before it). The prefix must itself pass the
//! rules of docs/EVENTS.md, "Rules": when it does not, it is cut before the batch holding the
//! first violation. The result is written to a NEW file with
//! `create_log_file` (atomic, fsynced, refusing an existing OUT), and the
//! report says what was left behind: from which line and byte offset, how
//! many bytes, and why.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sessionlog_projections::{fold_stored, ViolationKind};
use sessionlog_schema::{Corruption, EventRecord, LogScanner, SessionId, TornTail};
use sessionlog_store::testing::{Io, Line, LineReader};
use sessionlog_store::{
    check_storable_header, check_storable_record, create_log_file_as_stored, Backend, Durability,
    StoreError,
};

use crate::{exit, progress, Exit, UsageError};

/// What salvage did, as printed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SalvageReport {
    file: String,
    out: String,
    session: String,
    /// Events written to OUT.
    events: u64,
    /// The last seq written (0: the header alone).
    last_seq: u64,
    /// What FILE holds past the salvaged prefix; `null` when nothing.
    left_behind: Option<LeftBehind>,
}

/// The part of FILE that was not copied.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeftBehind {
    /// 1-based line where it starts.
    line: u64,
    /// Byte offset where it starts.
    offset: u64,
    /// How many bytes, to the end of FILE.
    bytes: u64,
    /// `corrupt`, `torn-tail`, `rule-violation`, `seal-failure` or
    /// `unstorable`.
    cause: &'static str,
    /// What is wrong there.
    reason: String,
}

/// What a scan of FILE found.
struct Scan {
    header: sessionlog_schema::SessionHeader,
    /// The header record's body as the file holds it (its members in any
    /// order): copied byte for byte, the hash chain starts from it.
    header_body: String,
    header_vocabulary_errors: Vec<sessionlog_schema::HeaderVocabularyError>,
    records: Vec<EventRecord>,
    /// Byte offset of every line read, by line number - 1.
    line_offsets: Vec<u64>,
    /// Where the good prefix ends.
    good_end: u64,
    good_lines: u64,
    damage: Option<Damage>,
}

enum Damage {
    Corrupt(Corruption),
    Torn(TornTail),
}

/// Runs `salvage`.
pub fn run(file: &Path, out: &Path, json: bool, quiet: bool) -> Result<u8> {
    if file.is_dir() {
        bail!(UsageError(format!(
            "{} is a folder: salvage copies the good prefix of one log file, such as {}",
            file.display(),
            file.join("SESSION.jsonl").display()
        )));
    }
    if Backend::of_path(file) != Backend::Jsonl {
        bail!(UsageError(format!(
            "{} is a database: salvage copies the good prefix of one log file (.jsonl); \
             `sessionlog verify` names a database's damage and `migrate` copies what reads",
            sessionlog_store::store_display(file)
        )));
    }
    if Backend::of_path(out) != Backend::Jsonl {
        bail!(UsageError(format!(
            "{}: salvage writes a log file (.jsonl), not a database; \
             `sessionlog migrate` the salvaged log into one",
            sessionlog_store::store_display(out)
        )));
    }
    // Every command takes a lone log by a name that ends in `.jsonl`: a
    // log written under another name could not be read back as one.
    if out.extension().and_then(|extension| extension.to_str()) != Some("jsonl") {
        bail!(UsageError(format!(
            "{}: salvage writes a log file, whose name ends in .jsonl (the name every \
             command takes a lone log by)",
            out.display()
        )));
    }
    match std::fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => bail!(UsageError(format!(
            "{} is not a regular file: salvage reads one log file",
            file.display()
        ))),
        Err(_) => bail!(UsageError(format!(
            "{}: no such log file",
            sessionlog_store::store_display(file)
        ))),
    }
    if out.symlink_metadata().is_ok() {
        bail!(UsageError(format!(
            "{} exists; salvage writes a new file and never replaces one",
            out.display()
        )));
    }
    let folder = sessionlog_store::folder_of(out);
    if !folder.is_dir() {
        bail!(UsageError(format!(
            "{}: its folder {} does not exist; salvage writes a new file in a folder that does",
            out.display(),
            folder.display()
        )));
    }
    let file_len = std::fs::metadata(file)
        .with_context(|| format!("stat {}", file.display()))?
        .len();
    let scan = scan(file, file_len, quiet)?;
    let (kept, left_behind) = choose_prefix(&scan, file_len, file)?;
    create_log_file_as_stored(
        out,
        &scan.header,
        &scan.header_body,
        &scan.records[..kept],
        Durability::Fsync,
        &Io::default(),
    )?;
    warn_of_a_misnamed_log_in_a_store(out, folder, &scan.header.id, quiet);
    let report = SalvageReport {
        file: file.display().to_string(),
        out: out.display().to_string(),
        session: scan.header.id.to_string(),
        events: kept as u64,
        last_seq: scan.records[..kept].last().map_or(0, EventRecord::seq),
        left_behind,
    };
    if json {
        crate::terminal::print_json_line(&serde_json::to_string(&report)?)?;
    } else {
        print_human(&report)?;
    }
    Ok(exit::OK)
}

/// Warns, when the log of session `id` is written as `out` under another
/// name than `<id>.jsonl`, in a `folder` that is a store (it holds a log
/// named for the session its header holds): there, a log named for
/// another session than its header's is corruption, and `verify` of the
/// folder would report it. Lone logs beside each other, under any names,
/// are no store, and draw nothing.
fn warn_of_a_misnamed_log_in_a_store(out: &Path, folder: &Path, id: &SessionId, quiet: bool) {
    use std::io::{BufRead, Read};
    let named_for = out.file_stem().and_then(|stem| stem.to_str());
    if quiet || named_for == Some(id.as_str()) {
        return;
    }
    let header_id = |path: &Path| -> Option<String> {
        let file = std::fs::File::open(path).ok()?;
        let mut line = String::new();
        std::io::BufReader::new(file.take(64 << 10))
            .read_line(&mut line)
            .ok()?;
        let header: serde_json::Value = serde_json::from_str(line.trim_end()).ok()?;
        Some(header.get("id")?.as_str()?.to_owned())
    };
    let store_log = std::fs::read_dir(folder).ok().and_then(|entries| {
        entries
            .filter_map(std::result::Result::ok)
            .find_map(|entry| {
                let path = entry.path();
                let stem = path.file_stem()?.to_str()?.to_owned();
                let log = path.extension()? == "jsonl" && !stem.starts_with('.');
                (log && header_id(&path).as_deref() == Some(stem.as_str())).then_some(path)
            })
    });
    if let Some(store_log) = store_log {
        crate::warn(format!(
            "{} holds session {id} under another name, in a folder that is a store (it holds {}, \
             named for its session): `sessionlog verify {}` will report it as corrupt, a log \
             named for another session than its header's; name it {id}.jsonl, or move it out",
            out.display(),
            store_log.display(),
            folder.display()
        ));
    }
}

/// How many records to keep, and what that leaves behind.
fn choose_prefix(scan: &Scan, file_len: u64, file: &Path) -> Result<(usize, Option<LeftBehind>)> {
    let records = &scan.records;
    let seed_length = scan.header.seed_length;
    if seed_length > records.len() as u64 {
        bail!(Exit {
            code: exit::CORRUPT,
            message: format!(
                "{}: nothing valid can be salvaged: the good prefix holds {} but the header's seedLength is {seed_length}",
                file.display(),
                crate::terminal::counted(records.len() as u64, "event")
            ),
        });
    }
    // A header no backend stores (the format allows it; writers refuse
    // it): no log made of it could be read back into a store.
    if let Err(error) = check_storable_header(&scan.header) {
        let reason = match error {
            StoreError::InvalidHeader(reason) => reason,
            error => error.to_string(),
        };
        bail!(Exit {
            code: exit::USAGE,
            message: format!(
                "{}: nothing valid can be salvaged: the header holds a value no backend stores ({reason})",
                file.display()
            ),
        });
    }
    if let Some(error) = scan.header_vocabulary_errors.first() {
        bail!(Exit {
            code: exit::RULE,
            message: format!(
                "{}: nothing valid can be salvaged: the header breaks the rules: {error}",
                file.display()
            ),
        });
    }
    let (_, violations) = fold_stored(scan.header.clone(), &scan.header_body, records);
    // The first record that breaks a rule, or that no backend stores (an
    // integer above 2^63 - 1, a NUL in its type): the copy ends before its
    // batch. A seal that does not hold says a record it covers changed,
    // not which: the copy ends after the last own seal that held before
    // it (the records it covers are proved), or at the seeded prefix.
    let broken = violations.first().map(|violation| {
        let index = (violation.seq - 1) as usize;
        match violation.kind {
            ViolationKind::Seal => {
                let proved = last_seal_held(records, index, seed_length);
                let reason = match proved {
                    Some(seal) => format!(
                        "{violation}; a record it covers changed, so only what the seal at seq {} \
                         proves is kept",
                        records[seal].seq()
                    ),
                    None => format!(
                        "{violation}; a record it covers changed, and no own seal before it \
                         holds, so no own event is kept"
                    ),
                };
                let first_unproved = proved.map_or(seed_length as usize, |seal| seal + 1);
                (first_unproved, "seal-failure", reason)
            }
            _ => (index, "rule-violation", violation.to_string()),
        }
    });
    let unstorable = records.iter().enumerate().find_map(|(index, record)| {
        check_storable_record(record).err().map(|error| {
            let reason = match error {
                StoreError::InvalidEvent(reason) => reason,
                error => error.to_string(),
            };
            (index, "unstorable", reason)
        })
    });
    let first = match (broken, unstorable) {
        (Some(broken), Some(unstorable)) if unstorable.0 < broken.0 => Some(unstorable),
        (Some(broken), _) => Some(broken),
        (None, unstorable) => unstorable,
    };
    if let Some((index, cause, violation)) = first {
        let cut = batch_start(records, index);
        if (cut as u64) < seed_length {
            let (code, what) = match cause {
                "rule-violation" => (exit::RULE, "breaks the rules"),
                "seal-failure" => (exit::SEAL, "is under a seal that does not hold"),
                _ => (exit::USAGE, "holds a record no backend stores"),
            };
            bail!(Exit {
                code,
                message: format!(
                    "{}: nothing valid can be salvaged: the seeded prefix {what}: {violation}",
                    file.display()
                ),
            });
        }
        // Record `cut` (seq cut + 1) sits on line cut + 2.
        let offset = scan.line_offsets[cut + 1];
        return Ok((
            cut,
            Some(LeftBehind {
                line: cut as u64 + 2,
                offset,
                bytes: file_len - offset,
                cause,
                reason: format!(
                    "{violation}{}",
                    match &scan.damage {
                        Some(Damage::Corrupt(c)) => format!("; further on, {}", c),
                        Some(Damage::Torn(t)) => format!("; further on, a torn tail: {}", t.reason),
                        None => String::new(),
                    }
                ),
            }),
        ));
    }
    let left_behind = match &scan.damage {
        None => None,
        Some(Damage::Torn(torn)) => Some(LeftBehind {
            line: torn.position.line,
            offset: torn.position.offset,
            bytes: torn.bytes,
            cause: "torn-tail",
            // The reason `verify` gives, which names an unfinished batch
            // and how many of its records arrived.
            reason: torn.reason.clone(),
        }),
        Some(Damage::Corrupt(corruption)) => Some(LeftBehind {
            line: scan.good_lines + 1,
            offset: scan.good_end,
            bytes: file_len - scan.good_end,
            cause: "corrupt",
            reason: corruption.to_string(),
        }),
    };
    Ok((records.len(), left_behind))
}

/// The index of the last own seal before record `failed` (whose seal
/// failed, the first thing the fold refused: every own seal before it
/// held); `None` when there is none.
fn last_seal_held(records: &[EventRecord], failed: usize, seed_length: u64) -> Option<usize> {
    records[..failed]
        .iter()
        .rposition(|record| record.event_type() == "seal")
        .filter(|&index| index as u64 >= seed_length)
}

/// The index of the first record of the batch holding record `index` (a
/// batch is kept whole or not at all).
fn batch_start(records: &[EventRecord], index: usize) -> usize {
    let mut start = 0;
    let mut remaining = 0u64;
    for (position, record) in records.iter().enumerate().take(index + 1) {
        if remaining == 0 {
            start = position;
            remaining = record.batch().unwrap_or(1);
        }
        remaining -= 1;
    }
    start
}

fn scan(file: &Path, file_len: u64, quiet: bool) -> Result<Scan> {
    let bar = progress::bytes_bar(quiet, "salvage", file_len);
    let mut lines = LineReader::open(file)?;
    let mut scanner = LogScanner::new(None);
    let mut records = Vec::new();
    let mut ready = Vec::new();
    let mut line_offsets = Vec::new();
    let mut good_end = 0;
    let mut good_lines = 0;
    let mut damage = None;
    loop {
        let Some((offset, read)) = lines
            .next_line()
            .with_context(|| format!("read {}", file.display()))?
        else {
            break;
        };
        line_offsets.push(offset);
        let pushed = match read {
            Line::Complete { terminated } => {
                scanner.push_line(lines.line(), terminated, offset, &mut ready)
            }
            Line::Oversized { len, terminated } => {
                scanner.push_oversized_line(len, terminated, offset)
            }
        };
        let end = match read {
            Line::Complete { terminated } => {
                offset + lines.line().len() as u64 + u64::from(terminated)
            }
            Line::Oversized { len, terminated } => offset + len + u64::from(terminated),
        };
        bar.set_position(end);
        if let Err(corruption) = pushed {
            if scanner.header().is_none() {
                bar.finish_and_clear();
                bail!(Exit {
                    code: exit::CORRUPT,
                    message: format!("{}: nothing can be salvaged: {corruption}", file.display()),
                });
            }
            damage = Some(Damage::Corrupt(corruption));
            break;
        }
        // The good prefix grows with the header and with every line that
        // hands records out (a batch's last line hands out the whole batch).
        if line_offsets.len() == 1 || !ready.is_empty() {
            records.append(&mut ready);
            good_end = end;
            good_lines = line_offsets.len() as u64;
        }
    }
    bar.finish_and_clear();
    let Some(header) = scanner.header().cloned() else {
        bail!(Exit {
            code: exit::CORRUPT,
            message: format!(
                "{}: nothing can be salvaged: the file is empty",
                file.display()
            ),
        });
    };
    let header_vocabulary_errors = scanner.header_vocabulary_errors().to_vec();
    let header_body = scanner.header_body().to_owned();
    if damage.is_none() {
        damage = match scanner.finish() {
            Ok(summary) => summary.torn_tail.map(Damage::Torn),
            // seedLength above the intact events: `choose_prefix` says so.
            Err(_) => None,
        };
    }
    Ok(Scan {
        header,
        header_body,
        header_vocabulary_errors,
        records,
        line_offsets,
        good_end,
        good_lines,
        damage,
    })
}

fn print_human(report: &SalvageReport) -> std::io::Result<()> {
    crate::outln!(
        "salvaged {} event{} (last seq {}) of session {} from {} into {}",
        report.events,
        if report.events == 1 { "" } else { "s" },
        report.last_seq,
        report.session,
        report.file,
        report.out
    )?;
    match &report.left_behind {
        None => crate::outln!("nothing was left behind: {} has no damage", report.file),
        Some(left) => crate::outln!(
            "left behind: {} bytes from line {} (byte offset {}), {}: {}",
            left.bytes,
            left.line,
            left.offset,
            left.cause,
            left.reason
        ),
    }
}
