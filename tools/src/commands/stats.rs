//! `sessionlog stats`: how much a store holds. Sessions, events by type
//! (unknown types counted under their own names), bytes as JSONL records,
//! torn tails, rule violations, corrupt sessions. It reads every log as it
//! is: a rule violation or a torn tail is counted and warned of on stderr
//! (exit 0); a corrupt session is counted, named, and makes the exit code 2.
//! In a folder read whole, a log that cannot be opened or read is counted
//! and named too, and the others counted: exit 1 unless one is corrupt.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use sessionlog_projections::SessionState;
use sessionlog_schema::{EventType, CRC_SUFFIX_LEN};
use sessionlog_store::fold_stream;

use crate::cli::SessionArgs;
use crate::commands::verify::{readers_for, WholeStore};
use crate::side_by_side::Readers;
use crate::target::{not_read, Audit, NotRead, SessionRef, Target, UnreadableLog};
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
    /// Why its log could not be opened or read (an I/O error), if so.
    unreadable: Option<String>,
    /// Records of the good prefix that break a rule (`verify` names them):
    /// its events, and the header once, however many of its values are
    /// out of the vocabulary.
    violations: u64,
    /// Whether the header is one of them (said apart, not a member of the
    /// JSON).
    #[serde(skip)]
    header_breaks: bool,
    /// How many of those are seals that do not hold (exit 7, where the
    /// rest is exit 4).
    seal_failures: u64,
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
    /// Sessions whose log could not be opened or read.
    unreadable: u64,
    violations: u64,
    /// How many of those are seals that do not hold (exit 7, where the
    /// rest is exit 4).
    seal_failures: u64,
    events_by_type: BTreeMap<String, u64>,
    unknown_types: BTreeMap<String, u64>,
}

/// What `stats` prints: the totals, then each session. The sessions are
/// written out by the reader that counted them, chunk by chunk (each
/// session's line, or its JSON object), so that the calling thread only
/// joins the blocks once the totals are known.
#[derive(Debug, Default)]
struct Report {
    totals: Totals,
    /// The sessions' lines (people's output) or JSON objects, a block a
    /// chunk, in the order of the sessions.
    sessions: Vec<String>,
    /// How many sessions the blocks hold.
    count: usize,
    /// The corruption of the one session, when there is only one.
    only_corrupt: Option<String>,
    /// Why the log of the one session could not be read, when there is
    /// only one.
    only_unreadable: Option<String>,
}

/// How each session of a chunk is written out.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `--json`: each session an object of the report's `sessions`.
    Json,
    /// People's output: a line each, the ids padded to `id_width`; none
    /// for a lone session (the totals say it all).
    Lines { id_width: usize, lone: bool },
}

/// Runs `stats`.
pub fn run(args: &SessionArgs, json: bool, quiet: bool) -> Result<u8> {
    let target = Target::open(&args.store)?;
    // The whole store as of one moment, read on each core side by side,
    // and SQLite's check of every page and its count of the rows on a
    // handle of their own beside them, as `verify` runs them. One session
    // (`--session`) is read alone, as `export` reads it.
    let readers = Readers::hold_with_checker(&target, readers_for(args))?;
    readers.beside(
        |checker| match args.session {
            Some(_) => Ok(WholeStore {
                engine_damage: Vec::new(),
                events_accounted_for: true,
            }),
            None => WholeStore::check(checker),
        },
        |whole_store| report(args, json, quiet, &readers, whole_store),
    )
}

/// Counts the sessions of `readers` and prints the report. Damage of the
/// store as a whole is refused, as by `list`: a session row with an
/// invalid id before any session is read; what SQLite's check of every
/// page finds, and events without a session row when the count of the
/// rows does not rule them out (`whole_store`, which may be running
/// already), before the report is printed.
fn report(
    args: &SessionArgs,
    json: bool,
    quiet: bool,
    readers: &Readers,
    whole_store: impl FnOnce() -> Result<WholeStore>,
) -> Result<u8> {
    let sessions = match args.session {
        Some(_) => readers.first().sessions(args.session.as_deref())?,
        None => {
            let Audit { sessions, damage } = readers.first().audit(None)?;
            if let Some(first) = damage.into_iter().next() {
                return Err(first.into());
            }
            crate::target::warn_if_no_sessions(sessions.len(), &args.store);
            sessions
        }
    };
    let bar = progress::bar(quiet, "stats");
    bar.set_length(sessions.len() as u64);
    let mut report = Report::default();
    let layout = match json {
        true => Layout::Json,
        false => Layout::Lines {
            id_width: sessions
                .iter()
                .map(|session| session.id.as_str().len())
                .max()
                .unwrap_or(0),
            lone: sessions.len() == 1,
        },
    };
    let unreadable = readers.first().unreadable_log(args.session.as_deref());
    // The chunks come back in the order of `sessions`.
    let mut labels = sessions.iter();
    readers.in_order(
        &sessions,
        |target, chunk| {
            // People's output shows the counts by type of the whole store
            // only: there they go straight into the chunk's counts, with no
            // map per session.
            let mut by_type = Totals::default();
            let stats = chunk
                .iter()
                .map(|session| count(target, session, (!json).then_some(&mut by_type), unreadable))
                .collect::<Result<Vec<_>>>()?;
            let block = write_block(&stats, layout)?;
            Ok((by_type, stats, block))
        },
        |(by_type, chunk, block)| {
            report.totals.add_by_type(&by_type);
            // The chunk first: a zip takes from its first side before it
            // knows the second has ended.
            for (stats, session) in chunk.into_iter().zip(labels.by_ref()) {
                warn_of(&session.label, &stats);
                report.totals.add(&stats);
                report.count += 1;
                if sessions.len() == 1 {
                    report.only_corrupt = stats.corrupt;
                    report.only_unreadable = stats.unreadable;
                }
                bar.inc(1);
            }
            report.sessions.push(block);
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    let whole_store = whole_store()?;
    if let Some(first) = whole_store.engine_damage.into_iter().next() {
        return Err(first.into());
    }
    if !whole_store.events_accounted_for {
        if let Some(first) = readers.first().unowned_events()?.into_iter().next() {
            return Err(first.into());
        }
    }
    if json {
        // What serialising `{"totals", "sessions"}` whole gives, its
        // sessions written already.
        let mut line = String::from("{\"totals\":");
        line.push_str(&serde_json::to_string(&report.totals)?);
        line.push_str(",\"sessions\":[");
        line.push_str(&report.sessions.join(","));
        line.push_str("]}");
        crate::terminal::print_json_line(&line)?;
    } else {
        let mut out = crate::terminal::stdout(crate::terminal::Mode::Text);
        write_human(&mut out, &report)?;
        out.flush()?;
    }
    Ok(if report.totals.corrupt > 0 {
        exit::CORRUPT
    } else if report.totals.unreadable > 0 {
        exit::USAGE
    } else {
        exit::OK
    })
}

/// Counts one session; by type into `totals` when given, else into its
/// own counts. A log that cannot be opened or read is counted as such when
/// `unreadable` says so, with what was read of it.
fn count(
    target: &Target,
    session: &SessionRef,
    totals: Option<&mut Totals>,
    unreadable: UnreadableLog,
) -> Result<SessionStats> {
    let mut stats = SessionStats {
        session: session.id.to_string(),
        ..SessionStats::default()
    };
    let Err(error) = read(target, session, &mut stats, totals) else {
        return Ok(stats);
    };
    match not_read(&error, unreadable) {
        Some((NotRead::Corrupt, corrupt)) => stats.corrupt = Some(corrupt.to_string()),
        Some((NotRead::Unreadable, io)) => stats.unreadable = Some(io.to_string()),
        None => return Err(error),
    }
    Ok(stats)
}

fn read(
    target: &Target,
    session: &SessionRef,
    stats: &mut SessionStats,
    totals: Option<&mut Totals>,
) -> Result<()> {
    let (by_type, unknown_types) = match totals {
        Some(totals) => (&mut totals.events_by_type, &mut totals.unknown_types),
        None => (&mut stats.events_by_type, &mut stats.unknown_types),
    };
    let mut stream = target.stream(session)?;
    // The header as stored (its own member order), which its seals cover.
    stats.bytes = (stream.header_body().len() + CRC_SUFFIX_LEN + 1) as u64;
    stats.header_breaks = !stream.header_vocabulary_errors().is_empty();
    stats.violations = u64::from(stats.header_breaks);
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    fold_stream(&mut *stream, &mut state, |record, folded, _| {
        stats.violations += u64::from(folded.is_err());
        stats.seal_failures +=
            u64::from(folded.is_err_and(|violation| {
                violation.kind == sessionlog_projections::ViolationKind::Seal
            }));
        stats.events += 1;
        stats.last_seq = record.seq();
        stats.bytes += (record.body().len() + CRC_SUFFIX_LEN + 1) as u64;
        let name = record.event_type();
        if EventType::parse(name).is_none() {
            count_one(unknown_types, name);
        }
        count_one(by_type, name);
    })?;
    stats.torn_tail_bytes = stream.finish()?.map(|torn| torn.bytes);
    Ok(())
}

/// Counts one more `name`, allocating its key only the first time.
fn count_one(counts: &mut BTreeMap<String, u64>, name: &str) {
    add_to(counts, name, 1);
}

/// Adds `more` to the count of `name`, allocating its key only the first
/// time.
fn add_to(counts: &mut BTreeMap<String, u64>, name: &str, more: u64) {
    match counts.get_mut(name) {
        Some(count) => *count += more,
        None => {
            counts.insert(name.to_owned(), more);
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
        let them = match stats.violations {
            1 => "it",
            _ => "them",
        };
        warn(format!(
            "{label}: {} (`sessionlog verify` names {them})",
            crate::terminal::what_breaks(
                stats.violations,
                stats.seal_failures,
                u64::from(stats.header_breaks)
            )
        ));
    }
}

impl Totals {
    /// Adds the counts by type of `more`.
    fn add_by_type(&mut self, more: &Totals) {
        self.add_counts(&more.events_by_type, &more.unknown_types);
    }

    fn add_counts(&mut self, by_type: &BTreeMap<String, u64>, unknown: &BTreeMap<String, u64>) {
        for (name, count) in by_type {
            add_to(&mut self.events_by_type, name, *count);
        }
        for (name, count) in unknown {
            add_to(&mut self.unknown_types, name, *count);
        }
    }

    fn add(&mut self, stats: &SessionStats) {
        self.sessions += 1;
        self.events += stats.events;
        self.bytes += stats.bytes;
        self.torn_tails += u64::from(stats.torn_tail_bytes.is_some());
        self.corrupt += u64::from(stats.corrupt.is_some());
        self.unreadable += u64::from(stats.unreadable.is_some());
        self.violations += stats.violations;
        self.seal_failures += stats.seal_failures;
        self.add_counts(&stats.events_by_type, &stats.unknown_types);
    }
}

/// The sessions of a chunk as `layout` writes them: a line each for
/// people, or their JSON objects separated by commas.
fn write_block(chunk: &[SessionStats], layout: Layout) -> Result<String> {
    let mut block = String::new();
    match layout {
        Layout::Json => {
            for (index, stats) in chunk.iter().enumerate() {
                if index > 0 {
                    block.push(',');
                }
                block.push_str(&serde_json::to_string(stats)?);
            }
        }
        Layout::Lines { lone: true, .. } => {}
        Layout::Lines { id_width, .. } => {
            use std::fmt::Write as _;
            for stats in chunk {
                let _ = write!(
                    block,
                    "  {:<id_width$}  {:>6} events, last seq {}, {} bytes",
                    stats.session, stats.events, stats.last_seq, stats.bytes,
                );
                if let Some(bytes) = stats.torn_tail_bytes {
                    let _ = write!(block, ", torn tail of {bytes} bytes");
                }
                if stats.violations > 0 {
                    let _ = write!(
                        block,
                        ", {}",
                        crate::terminal::what_breaks(
                            stats.violations,
                            stats.seal_failures,
                            u64::from(stats.header_breaks)
                        )
                    );
                }
                if let Some(message) = &stats.corrupt {
                    let _ = write!(block, ", CORRUPT: {message}");
                }
                if let Some(message) = &stats.unreadable {
                    let _ = write!(block, ", UNREADABLE: {message}");
                }
                block.push('\n');
            }
        }
    }
    Ok(block)
}

/// Writes the report, as people read it, into `out`.
fn write_human(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    let totals = &report.totals;
    let unreadable = match totals.unreadable {
        0 => String::new(),
        count => format!(", {count} unreadable"),
    };
    writeln!(
        out,
        "sessions  {} ({} with a torn tail, {} corrupt{unreadable})",
        totals.sessions, totals.torn_tails, totals.corrupt
    )?;
    writeln!(
        out,
        "rule violations {}",
        totals.violations.saturating_sub(totals.seal_failures)
    )?;
    if totals.seal_failures > 0 {
        writeln!(out, "seals that do not hold {}", totals.seal_failures)?;
    }
    writeln!(out, "events    {}", totals.events)?;
    writeln!(out, "bytes     {}", totals.bytes)?;
    if !totals.events_by_type.is_empty() {
        writeln!(out, "events by type:")?;
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
            writeln!(
                out,
                "  {:<width$}  {count:>8}{unknown}",
                crate::commands::replay::display(name),
                width = width.unwrap_or(0)
            )?;
        }
    }
    if report.count > 1 {
        writeln!(out, "per session:")?;
    }
    for block in &report.sessions {
        out.write_all(block.as_bytes())?;
    }
    if let Some(message) = &report.only_corrupt {
        writeln!(out, "corrupt: {message}")?;
    }
    if let Some(message) = &report.only_unreadable {
        writeln!(out, "unreadable: {message}")?;
    }
    Ok(())
}
