//! `sessionlog stats`: how much a store holds. Sessions, events by type
//! (unknown types counted under their own names), bytes as JSONL records,
//! torn tails, rule violations, corrupt sessions. It reads every log as it
//! is: a rule violation or a torn tail is counted and warned of on stderr
//! (exit 0); a corrupt session is counted, named, and makes the exit code 2.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::SessionState;
use sessionlog_schema::{EventType, CRC_SUFFIX_LEN};
use sessionlog_store::{ErrorClass, FoldedEvent, StoreError};

use crate::cli::SessionArgs;
use crate::target::{SessionRef, Target};
use crate::{exit, progress, warn};

/// The counts of one session.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionStats {
    session: String,
    events: u64,
    last_seq: u64,
    /// Bytes of the good prefix as JSONL records, header included.
    bytes: u64,
    /// Bytes of a torn tail after the good prefix.
    torn_tail_bytes: Option<u64>,
    /// Why the session is corrupt, if it is.
    corrupt: Option<String>,
    /// Events of the good prefix that break a rule (`verify` names them).
    violations: u64,
    events_by_type: BTreeMap<String, u64>,
    unknown_types: BTreeMap<String, u64>,
}

/// The counts of the whole store (or of `--session`).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Totals {
    sessions: u64,
    events: u64,
    bytes: u64,
    torn_tails: u64,
    corrupt: u64,
    violations: u64,
    events_by_type: BTreeMap<String, u64>,
    unknown_types: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
struct Report {
    totals: Totals,
    sessions: Vec<SessionStats>,
}

/// Runs `stats`.
pub fn run(args: &SessionArgs, json: bool, quiet: bool) -> Result<u8> {
    let target = Target::open(&args.store)?;
    // The whole store as of one moment, and one read transaction for all.
    let _held = target.hold_read()?;
    let sessions = target.sessions(args.session.as_deref())?;
    let bar = progress::bar(quiet, "stats");
    bar.set_length(sessions.len() as u64);
    let mut report = Report {
        totals: Totals::default(),
        sessions: Vec::new(),
    };
    for session in &sessions {
        let stats = count(&target, session)?;
        warn_of(&session.label, &stats);
        report.totals.add(&stats);
        report.sessions.push(stats);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if json {
        crate::terminal::print_json_line(&serde_json::to_string(&report)?)?;
    } else {
        print_human(&report)?;
    }
    Ok(if report.totals.corrupt > 0 {
        exit::CORRUPT
    } else {
        exit::OK
    })
}

fn count(target: &Target, session: &SessionRef) -> Result<SessionStats> {
    let mut stats = SessionStats {
        session: session.id.to_string(),
        ..SessionStats::default()
    };
    match read(target, session, &mut stats) {
        Ok(()) => Ok(stats),
        Err(error) => match corrupt(&error) {
            Some(message) => {
                stats.corrupt = Some(message);
                Ok(stats)
            }
            None => Err(error),
        },
    }
}

fn read(target: &Target, session: &SessionRef, stats: &mut SessionStats) -> Result<()> {
    let mut stream = target.stream(session)?;
    // The header as stored (its own member order), which its seals cover.
    stats.bytes = (stream.header_body().len() + CRC_SUFFIX_LEN + 1) as u64;
    stats.violations = stream.header_vocabulary_errors().len() as u64;
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    while let Some(FoldedEvent { record, folded }) = stream.next_event_folded(&mut state)? {
        stats.violations += u64::from(folded.is_err());
        stats.events += 1;
        stats.last_seq = record.seq();
        stats.bytes += (record.body().len() + CRC_SUFFIX_LEN + 1) as u64;
        let name = record.event_type();
        if EventType::parse(name).is_none() {
            count_one(&mut stats.unknown_types, name);
        }
        count_one(&mut stats.events_by_type, name);
    }
    stats.torn_tail_bytes = stream.finish()?.map(|torn| torn.bytes);
    Ok(())
}

/// Counts one more `name`, allocating its key only the first time.
fn count_one(counts: &mut BTreeMap<String, u64>, name: &str) {
    match counts.get_mut(name) {
        Some(count) => *count += 1,
        None => {
            counts.insert(name.to_owned(), 1);
        }
    }
}

/// Warns of what stats counts but does not refuse: a torn tail, rule
/// violations.
fn warn_of(label: &str, stats: &SessionStats) {
    if let Some(bytes) = stats.torn_tail_bytes {
        warn(format!(
            "{label}: a torn tail of {bytes} bytes after seq {} (counted apart; `sessionlog verify` describes it)",
            stats.last_seq
        ));
    }
    if stats.violations > 0 {
        warn(format!(
            "{label}: {} event{} break the rules (`sessionlog verify` names them)",
            stats.violations,
            if stats.violations == 1 { "" } else { "s" }
        ));
    }
}

/// The message of a corruption error, `None` for any other error.
fn corrupt(error: &anyhow::Error) -> Option<String> {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<StoreError>())
        .find(|store| store.class() == ErrorClass::Corrupt)
        .map(ToString::to_string)
}

impl Totals {
    fn add(&mut self, stats: &SessionStats) {
        self.sessions += 1;
        self.events += stats.events;
        self.bytes += stats.bytes;
        self.torn_tails += u64::from(stats.torn_tail_bytes.is_some());
        self.corrupt += u64::from(stats.corrupt.is_some());
        self.violations += stats.violations;
        for (name, count) in &stats.events_by_type {
            *self.events_by_type.entry(name.clone()).or_default() += count;
        }
        for (name, count) in &stats.unknown_types {
            *self.unknown_types.entry(name.clone()).or_default() += count;
        }
    }
}

fn print_human(report: &Report) -> std::io::Result<()> {
    let totals = &report.totals;
    crate::outln!(
        "sessions  {} ({} with a torn tail, {} corrupt)",
        totals.sessions,
        totals.torn_tails,
        totals.corrupt
    )?;
    crate::outln!("rule violations {}", totals.violations)?;
    crate::outln!("events    {}", totals.events)?;
    crate::outln!("bytes     {}", totals.bytes)?;
    if !totals.events_by_type.is_empty() {
        crate::outln!("events by type:")?;
        let width = totals
            .events_by_type
            .keys()
            .map(|k| k.chars().count())
            .max();
        for (name, count) in &totals.events_by_type {
            let unknown = if totals.unknown_types.contains_key(name) {
                "  (unknown type)"
            } else {
                ""
            };
            crate::outln!(
                "  {:<width$}  {count:>8}{unknown}",
                crate::commands::replay::display(name),
                width = width.unwrap_or(0)
            )?;
        }
    }
    if report.sessions.len() > 1 {
        crate::outln!("per session:")?;
    }
    let id_width = report.sessions.iter().map(|s| s.session.len()).max();
    for stats in report.sessions.iter().filter(|_| report.sessions.len() > 1) {
        let mut line = format!(
            "  {:<width$}  {:>6} events, last seq {}, {} bytes",
            stats.session,
            stats.events,
            stats.last_seq,
            stats.bytes,
            width = id_width.unwrap_or(0)
        );
        if let Some(bytes) = stats.torn_tail_bytes {
            line.push_str(&format!(", torn tail of {bytes} bytes"));
        }
        if let Some(message) = &stats.corrupt {
            line.push_str(&format!(", CORRUPT: {message}"));
        }
        crate::outln!("{line}")?;
    }
    if report.sessions.len() == 1 {
        if let Some(message) = &report.sessions[0].corrupt {
            crate::outln!("corrupt: {message}")?;
        }
    }
    Ok(())
}
