//! `sessionlog append`: events from stdin, validated and appended durably.
//!
//! Lines that arrive together (already in the input buffer) are staged and
//! share one fsync; `{"seq": N}` is printed for each only once it is durable.
//! A line holding a JSON array of events is one atomic batch. A rule
//! violation stops with exit 4 and writes nothing for that line; what was
//! acknowledged before it stays. An unknown type outside an `x-` namespace
//! is kept with a warning that names the closest known type, or refused
//! (exit 4) under `--strict`. With `--seal-key`, every `turn/end` is
//! followed by a signed seal written and synced with it, and its line says
//! so: `{"seq": N, "seal": N+1}`.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
use sessionlog_schema::{one_line, EventType};
use sessionlog_store::{NewEvent, SealTurns, SessionWriter, StoreError, WriterOptions};

use crate::cli::SessionArgs;
use crate::target::Target;
use crate::{exit, Exit};

/// One input line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    #[serde(rename = "type")]
    event_type: String,
    data: Box<RawValue>,
    #[serde(default, deserialize_with = "present")]
    ts: Option<u64>,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    u64::deserialize(deserializer).map(Some)
}

/// How `append` treats an event type it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownTypes {
    /// Kept (the format keeps unknown types); warned of unless the type is
    /// in an `x-` namespace.
    Warn,
    /// Refused (exit 4) unless the type is in an `x-` namespace.
    Refuse,
}

/// Runs `append`.
pub fn run(
    args: &SessionArgs,
    expect_seq: Option<u64>,
    unknown: UnknownTypes,
    seal_key: Option<&Path>,
) -> Result<u8> {
    let seal_turns = match seal_key {
        Some(file) => SealTurns::Signed(crate::commands::seal::read_secret_key(file)?),
        None => SealTurns::Off,
    };
    let target = Target::open_for_writing(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let options = WriterOptions {
        keep_snapshot: false,
        seal_turns,
        ..WriterOptions::default()
    };
    let mut writer = target.writer(&session, options)?;
    // Our own large buffer over stdin, so lines that arrived together are
    // visible in it (std's inner buffer is bypassed by reads this large).
    let mut input = std::io::BufReader::with_capacity(1 << 20, std::io::stdin());
    let mut stdout = crate::terminal::stdout(crate::terminal::Mode::Json);
    let mut expected = expect_seq;
    let mut staged: Vec<Staged> = Vec::new();
    let mut line = Vec::new();
    let mut line_number = 0u64;
    loop {
        line.clear();
        let read = input
            .read_until(b'\n', &mut line)
            .context("read standard input")?;
        if read == 0 {
            break;
        }
        line_number += 1;
        let outcome = parse_line(&line, line_number)
            .and_then(|events| check_types(&events, line_number, unknown).map(|()| events))
            .and_then(|events| {
                // The refusal names the line as well as the seq: the
                // runtime writing the lines knows them by their place.
                stage(&mut writer, events, expected.take())
                    .with_context(|| format!("input line {line_number}"))
            });
        match outcome {
            Ok(line) => staged.push(line),
            Err(error) => {
                // What was staged before a refused line is acknowledged; a
                // failed write poisoned the writer instead, and the failure
                // itself (not "poisoned by an earlier failure") is the
                // error to report: nothing staged was acknowledged.
                if !writer.is_poisoned() {
                    acknowledge(&mut writer, &mut staged, &mut stdout)?;
                }
                return Err(error);
            }
        }
        if !has_complete_line(input.buffer()) {
            acknowledge(&mut writer, &mut staged, &mut stdout)?;
        }
    }
    acknowledge(&mut writer, &mut staged, &mut stdout)?;
    Ok(exit::OK)
}

/// The events of one input line: one object, or an array of objects that
/// is one atomic batch.
fn parse_line(line: &[u8], line_number: u64) -> Result<Vec<NewEvent>> {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let refused = |reason: String| {
        Exit {
        code: exit::USAGE,
        message: format!(
            "input line {line_number}: expected one JSON object {{\"type\", \"data\", \"ts\"?}} or an array of them (one atomic batch): {reason}"
        ),
    }
    };
    let trimmed = text.trim_ascii_start();
    if trimmed.starts_with(b"[") {
        let items: Vec<Box<RawValue>> =
            serde_json::from_slice(text).map_err(|error| refused(one_line(&error.to_string())))?;
        if items.is_empty() {
            return Err(refused("the array holds no event".to_owned()).into());
        }
        return items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                parse_object(item.get().as_bytes()).map_err(|reason| {
                    refused(format!("element {} of the array: {reason}", index + 1)).into()
                })
            })
            .collect();
    }
    Ok(vec![parse_object(text).map_err(refused)?])
}

/// One event object. serde also reads a struct from an array of its fields
/// in order (`["turn/start", {...}]`); only an object is an event.
fn parse_object(text: &[u8]) -> Result<NewEvent, String> {
    if !text.trim_ascii_start().starts_with(b"{") {
        return Err("not a JSON object".to_owned());
    }
    // serde quotes an unknown member's name as it is: a line break in it
    // would print a line of its own.
    let input: InputLine =
        serde_json::from_slice(text).map_err(|error| one_line(&error.to_string()))?;
    Ok(NewEvent {
        event_type: input.event_type,
        data: input.data.get().to_owned(),
        ts: input.ts,
    })
}

/// Warns of (or refuses) each unknown type that is not in an `x-`
/// namespace: most such types are typos (`turn/begin`, `Message`) that no
/// projection would ever read.
fn check_types(events: &[NewEvent], line_number: u64, unknown: UnknownTypes) -> Result<()> {
    for event in events {
        let name = event.event_type.as_str();
        if EventType::parse(name).is_some() || name.starts_with("x-") {
            continue;
        }
        // A type no type may be spelled with (empty, a control character)
        // is the writer's to refuse: it is not kept.
        if sessionlog_projections::type_violation(1, name).is_some() {
            continue;
        }
        let hint = match closest_known_types(name).as_slice() {
            [] => String::new(),
            [only] => format!(" (did you mean \"{}\"?)", only.as_str()),
            several => format!(
                " (did you mean one of {}?)",
                several
                    .iter()
                    .map(|known| format!("\"{}\"", known.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let shown = crate::commands::replay::display(name);
        if unknown == UnknownTypes::Refuse {
            return Err(Exit {
                code: exit::RULE,
                message: format!(
                    "input line {line_number}: unknown event type \"{shown}\"{hint}; --strict refuses it (a type of your own goes in an x- namespace, such as x-myruntime/usage); nothing was written for this line"
                ),
            }
            .into());
        }
        crate::warn(format!(
            "input line {line_number}: unknown event type \"{shown}\"{hint}; it is kept, but no projection reads it (a type of your own goes in an x- namespace, such as x-myruntime/usage; --strict refuses unknown types)"
        ));
    }
    Ok(())
}

/// The known types `name` was likely meant to be: those of its namespace
/// when it names a known one (`turn/begin`: `turn/start`, `turn/end`), else
/// the nearest by edit distance ignoring case (`Message`: `message`) when it
/// is near enough to be a typo.
pub fn closest_known_types(name: &str) -> Vec<EventType> {
    let lowered = name.to_lowercase();
    if let Some((namespace, _)) = lowered.split_once('/') {
        let prefix = format!("{namespace}/");
        let same_namespace: Vec<EventType> = EventType::ALL
            .iter()
            .copied()
            .filter(|known| known.as_str().starts_with(&prefix))
            .collect();
        if !same_namespace.is_empty() {
            return same_namespace;
        }
    }
    EventType::ALL
        .iter()
        .map(|known| (edit_distance(&lowered, known.as_str()), *known))
        .filter(|(distance, known)| *distance <= known.as_str().len().div_ceil(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
        .into_iter()
        .collect()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// One staged input line: the seqs of its events, and the seal the writer
/// staged after them, if any.
struct Staged {
    seqs: Vec<u64>,
    seal: Option<u64>,
}

fn stage(
    writer: &mut SessionWriter,
    mut events: Vec<NewEvent>,
    expected: Option<u64>,
) -> Result<Staged> {
    let staged = if events.len() == 1 {
        let event = events.remove(0);
        writer.stage(event, expected).map(|seq| vec![seq])
    } else {
        writer.stage_batch(events, expected)
    };
    let seqs = staged.map_err(|error: StoreError| anyhow::Error::from(error))?;
    let seal = seqs
        .last()
        .and_then(|last| (writer.next_seq() > last + 1).then_some(last + 1));
    Ok(Staged { seqs, seal })
}

/// Syncs what is staged and prints one `{"seq": N}` line for each (with
/// `"seal": M` when a seal followed it).
fn acknowledge(
    writer: &mut SessionWriter,
    staged: &mut Vec<Staged>,
    stdout: &mut impl Write,
) -> Result<()> {
    if staged.is_empty() {
        return Ok(());
    }
    writer.sync()?;
    for Staged { seqs, seal } in staged.drain(..) {
        let last = seqs.last().copied();
        for seq in seqs {
            match seal.filter(|_| Some(seq) == last) {
                Some(seal) => writeln!(stdout, "{{\"seq\": {seq}, \"seal\": {seal}}}")?,
                None => writeln!(stdout, "{{\"seq\": {seq}}}")?,
            }
        }
    }
    stdout.flush()?;
    Ok(())
}

fn has_complete_line(buffer: &[u8]) -> bool {
    buffer.contains(&b'\n')
}
