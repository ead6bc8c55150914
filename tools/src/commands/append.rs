//! `sessionlog append`: events from stdin, validated and appended durably.
//!
//! Lines that arrive together (already in the input buffer) are staged and
//! share one fsync; `{"seq": N}` is printed for each only once it is durable.
//! A rule violation stops with exit 4 and writes nothing for that line; what
//! was acknowledged before it stays. With `--seal-key`, every `turn/end` is
//! followed by a signed seal written and synced with it, and its line says
//! so: `{"seq": N, "seal": N+1}`.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
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

/// Runs `append`.
pub fn run(args: &SessionArgs, expect_seq: Option<u64>, seal_key: Option<&Path>) -> Result<u8> {
    let seal_turns = match seal_key {
        Some(file) => SealTurns::Signed(crate::commands::seal::read_secret_key(file)?),
        None => SealTurns::Off,
    };
    let target = Target::open(&args.store)?;
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
    let mut stdout = std::io::stdout().lock();
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
            .and_then(|event| stage(&mut writer, event, expected.take()));
        match outcome {
            Ok(seq) => staged.push(seq),
            Err(error) => {
                acknowledge(&mut writer, &mut staged, &mut stdout)?;
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

fn parse_line(line: &[u8], line_number: u64) -> Result<NewEvent> {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let refused = |reason: String| {
        Exit {
        code: exit::USAGE,
        message: format!(
            "input line {line_number}: expected one JSON object {{\"type\", \"data\", \"ts\"?}}: {reason}"
        ),
    }
    };
    // serde also reads a struct from an array of its fields in order
    // (`["turn/start", {...}]`); only an object is an event.
    if !text.trim_ascii_start().starts_with(b"{") {
        return Err(refused("the line is not a JSON object".to_owned()).into());
    }
    let input: InputLine =
        serde_json::from_slice(text).map_err(|error| refused(error.to_string()))?;
    Ok(NewEvent {
        event_type: input.event_type,
        data: input.data.get().to_owned(),
        ts: input.ts,
    })
}

/// One staged input line: its event's seq, and the seal the writer staged
/// after it, if any.
struct Staged {
    seq: u64,
    seal: Option<u64>,
}

fn stage(writer: &mut SessionWriter, event: NewEvent, expected: Option<u64>) -> Result<Staged> {
    let seq = writer
        .stage(event, expected)
        .map_err(|error: StoreError| anyhow::Error::from(error))?;
    let seal = (writer.next_seq() > seq + 1).then_some(seq + 1);
    Ok(Staged { seq, seal })
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
    for Staged { seq, seal } in staged.drain(..) {
        match seal {
            Some(seal) => writeln!(stdout, "{{\"seq\": {seq}, \"seal\": {seal}}}")?,
            None => writeln!(stdout, "{{\"seq\": {seq}}}")?,
        }
    }
    stdout.flush()?;
    Ok(())
}

fn has_complete_line(buffer: &[u8]) -> bool {
    buffer.contains(&b'\n')
}
