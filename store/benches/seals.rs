//! What seals cost, as ratios against a baseline measured in the same run.
//!
//! 1. **Verify.** The code path of `sessionlog verify` (stream, fold, every
//!    own seal checked against the running chain, its signature verified)
//!    over a 400k-event log sealed (signed) every 1,000 events, against the
//!    same events unsealed: target ≤ 1.5×. Both are also put against the
//!    naive limit of the first targets (read, check each CRC, parse each
//!    line into a `serde_json::Value`): target ≤ 1.0×.
//! 2. **Durable appends.** Turns of eight events, each appended durably
//!    (`Durability::Fsync`, one fsync each), by a writer that seals every
//!    turn with a signed seal (`SealTurns::Signed`, the seal written and
//!    synced with the `turn/end`) against one that does not: the events
//!    per second of the sealing writer may be at most 5% lower (≥ 0.95×).
//!    The two alternate turn by turn, so a disk whose speed drifts weighs
//!    on both alike, and the verdict is on the median turn of each (an
//!    fsync that stalls behind another process's writes lands in one turn
//!    of one writer, and would weigh on whichever it hit); the ratio of
//!    the totals is printed beside it. The same turns appended without
//!    fsync (`Durability::Buffered`) give what a seal costs the CPU.
//!
//! `cargo bench -p sessionlog-store --bench seals`; `SESSIONLOG_BENCH_SCALE=0.1`
//! for a quick run; `SESSIONLOG_BENCH_ONLY=verify` or `append` for one
//! section; `SESSIONLOG_BENCH_DIR` picks the disk of the append section.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use sessionlog_projections::SessionState;
use sessionlog_schema::{SealSecretKey, SessionHeader, SessionId};
use sessionlog_store::{
    fold_stream, Durability, JsonlStore, LogReader, NewEvent, SealTurns, SessionStream, Store,
    WriterOptions,
};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const VERIFY_EVENTS: f64 = 400_000.0;
const SEAL_EVERY: usize = 1_000;
const APPEND_TURNS: f64 = 150.0;
const ROUNDS: usize = 4;

fn main() -> BenchResult<()> {
    let scale: f64 = match std::env::var("SESSIONLOG_BENCH_SCALE") {
        Ok(text) => text.parse()?,
        Err(_) => 1.0,
    };
    let only = std::env::var("SESSIONLOG_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "verify" {
        verify_section(((VERIFY_EVENTS * scale) as usize).max(SEAL_EVERY))?;
    }
    if only.is_empty() || only == "append" {
        append_section(((APPEND_TURNS * scale) as usize).max(10))?;
    }
    Ok(())
}

/// The events of one turn: eight, as a coding agent's turn with one call
/// logs them.
fn turn_events(turn: usize) -> Vec<(&'static str, String)> {
    let text = "Run the tests of the parser and tell me which ones fail; then fix the first one.";
    vec![
        ("turn/start", format!(r#"{{"turnId":"t{turn}"}}"#)),
        (
            "message",
            format!(
                r#"{{"role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
            ),
        ),
        (
            "step/start",
            format!(r#"{{"stepId":"s{turn}","turnId":"t{turn}"}}"#),
        ),
        (
            "tool/start",
            format!(
                r#"{{"callId":"c{turn}","stepId":"s{turn}","name":"shell","arguments":{{"command":"cargo test -p parser"}}}}"#
            ),
        ),
        (
            "tool/settle",
            format!(
                r#"{{"callId":"c{turn}","status":"ok","result":{{"exitCode":0,"stdout":"test result: ok. 41 passed"}}}}"#
            ),
        ),
        ("step/end", format!(r#"{{"stepId":"s{turn}"}}"#)),
        (
            "message",
            r#"{"role":"assistant","source":{"kind":"assistant"},"content":[{"type":"text","text":"All 41 tests pass."}]}"#
                .to_owned(),
        ),
        ("turn/end", format!(r#"{{"turnId":"t{turn}"}}"#)),
    ]
}

fn id(text: &str) -> BenchResult<SessionId> {
    Ok(SessionId::parse(text)?)
}

/// Writes `events` events (whole turns) to session `name` of `folder`, with
/// a signed seal after every `seal_every` events when given.
fn write_log(
    folder: &Path,
    name: &str,
    events: usize,
    seal_every: Option<usize>,
) -> BenchResult<std::path::PathBuf> {
    let store = JsonlStore::open(folder)?;
    let session = id(name)?;
    store.create(
        &SessionHeader::root(session.clone(), 1, "/work".to_owned()),
        &[],
        Durability::Buffered,
    )?;
    let options = WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        seal_turns: SealTurns::Off,
    };
    let mut writer = Store::Jsonl(store).open_writer(&session, options)?;
    let key = SealSecretKey::from_seed([11; 32]);
    let mut written = 0;
    let mut turn = 0;
    while written < events {
        for (event_type, data) in turn_events(turn) {
            if written == events {
                break;
            }
            writer.stage(
                NewEvent {
                    event_type: event_type.to_owned(),
                    data,
                    ts: Some(1_700_000_000_000 + written as u64),
                },
                None,
            )?;
            written += 1;
            if seal_every.is_some_and(|every| written % every == 0) {
                writer.seal(Some(&key), None)?;
            }
        }
        turn += 1;
    }
    writer.sync()?;
    Ok(folder.join(format!("{name}.jsonl")))
}

/// What `sessionlog verify` does: stream, fold (own seals checked against
/// the chain; past its first events on a thread of its own, as
/// `fold_stream` folds), collect violations. Returns the events and own
/// seals met.
fn verify(path: &Path) -> BenchResult<(u64, u64)> {
    let mut stream: Box<dyn SessionStream> = Box::new(LogReader::open(path, None)?);
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    let mut count = 0;
    let mut seals = 0;
    let mut broken = None;
    fold_stream(&mut *stream, &mut state, |record, folded, state| {
        count += 1;
        if let Err(violation) = folded {
            broken.get_or_insert(violation);
        }
        if state
            .last_seal()
            .is_some_and(|seal| seal.seq == record.seq())
        {
            seals += 1;
        }
    })?;
    if let Some(violation) = broken {
        return Err(format!("the bench log breaks a rule: {violation}").into());
    }
    stream.finish()?;
    Ok((count, seals))
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "pass"
    } else {
        "FAIL"
    }
}

fn verify_section(events: usize) -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let plain = write_log(dir.path(), "plain", events, None)?;
    let sealed = write_log(dir.path(), "sealed", events, Some(SEAL_EVERY))?;
    let sealed_id = id("sealed")?;
    let (plain_events, _) = verify(&plain)?;
    let (sealed_events, seals) = verify(&sealed)?;
    println!(
        "verify: {plain_events} events unsealed ({} MB); {sealed_events} records with {seals} signed seals ({} MB)",
        std::fs::metadata(&plain)?.len() / 1_000_000,
        std::fs::metadata(&sealed)?.len() / 1_000_000
    );
    let [plain_time, sealed_time, naive_time] = common::best_of(
        5,
        [
            &mut || verify(&plain).map(|_| ()),
            &mut || verify(&sealed).map(|_| ()),
            &mut || common::naive_read(&sealed, &sealed_id).map(|_| ()),
        ],
    )?;
    let ratio = sealed_time.as_secs_f64() / plain_time.as_secs_f64();
    let naive_ratio = sealed_time.as_secs_f64() / naive_time.as_secs_f64();
    println!("| figure | measured | baseline | ratio | target | |");
    println!("|---|---:|---:|---:|---|---|");
    println!(
        "| verify, sealed every {SEAL_EVERY} / unsealed | {} | {} | {ratio:.3} | ≤ 1.5 | {} |",
        ms(sealed_time),
        ms(plain_time),
        verdict(ratio <= 1.5)
    );
    println!(
        "| verify, sealed / naive limit | {} | {} | {naive_ratio:.3} | ≤ 1.0 | {} |",
        ms(sealed_time),
        ms(naive_time),
        verdict(naive_ratio <= 1.0)
    );
    Ok(())
}

fn append_section(turns: usize) -> BenchResult<()> {
    let dir = match std::env::var_os("SESSIONLOG_BENCH_DIR") {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let store = JsonlStore::open(dir.path())?;
    let key = SealSecretKey::from_seed([12; 32]);
    let mut round = 0;
    let mut open = |seal_turns: SealTurns,
                    durability: Durability|
     -> BenchResult<sessionlog_store::SessionWriter> {
        round += 1;
        let session = id(&format!("append-{round}"))?;
        store.create(
            &SessionHeader::root(session.clone(), 1, "/work".to_owned()),
            &[],
            Durability::Fsync,
        )?;
        let options = WriterOptions {
            durability,
            keep_snapshot: false,
            seal_turns,
        };
        Ok(Store::Jsonl(store.clone()).open_writer(&session, options)?)
    };
    let append_turn =
        |writer: &mut sessionlog_store::SessionWriter, turn: usize| -> BenchResult<Duration> {
            let start = Instant::now();
            for (event_type, data) in turn_events(turn) {
                writer.append(NewEvent::new(event_type, data), None)?;
            }
            Ok(start.elapsed())
        };
    let per_turn = turn_events(0).len() as f64;
    // Two sessions side by side, one turn of each in turn: a drift of the
    // disk's fsync cost weighs on both alike. Returns each turn's time,
    // unsealed and sealed.
    let mut take_turns = |durability: Durability| -> BenchResult<(Vec<Duration>, Vec<Duration>)> {
        let mut plain_turns = Vec::new();
        let mut sealed_turns = Vec::new();
        for _ in 0..ROUNDS {
            let mut plain = open(SealTurns::Off, durability)?;
            let mut sealed = open(SealTurns::Signed(key.clone()), durability)?;
            append_turn(&mut plain, 0)?;
            append_turn(&mut sealed, 0)?;
            for turn in 1..=turns {
                if turn % 2 == 0 {
                    plain_turns.push(append_turn(&mut plain, turn)?);
                    sealed_turns.push(append_turn(&mut sealed, turn)?);
                } else {
                    sealed_turns.push(append_turn(&mut sealed, turn)?);
                    plain_turns.push(append_turn(&mut plain, turn)?);
                }
            }
        }
        Ok((plain_turns, sealed_turns))
    };
    let (plain_turns, sealed_turns) = take_turns(Durability::Fsync)?;
    let (plain_cpu, sealed_cpu) = take_turns(Durability::Buffered)?;
    let rate = |turns: &[Duration]| per_turn * turns.len() as f64 / total(turns).as_secs_f64();
    let median_rate = |turns: &[Duration]| per_turn / median(turns).as_secs_f64();
    let ratio = median_rate(&sealed_turns) / median_rate(&plain_turns);
    let total_ratio = rate(&sealed_turns) / rate(&plain_turns);
    let seal_cpu_us = (median(&sealed_cpu).as_secs_f64() - median(&plain_cpu).as_secs_f64()) * 1e6;
    println!(
        "durable appends: {turns} turns of 8 events, one fsync per append, {ROUNDS} rounds of two sessions taking turns"
    );
    println!("| figure | measured | baseline | ratio | target | |");
    println!("|---|---:|---:|---:|---|---|");
    println!(
        "| durable appends, signed seal per turn / no seal (median turn) | {:.0} ev/s | {:.0} ev/s | {ratio:.3} | ≥ 0.95 | {} |",
        median_rate(&sealed_turns),
        median_rate(&plain_turns),
        verdict(ratio >= 0.95)
    );
    println!(
        "| the same, all turns | {:.0} ev/s | {:.0} ev/s | {total_ratio:.3} | | |",
        rate(&sealed_turns),
        rate(&plain_turns),
    );
    println!(
        "a signed seal costs {seal_cpu_us:.0} µs of CPU per turn (median buffered turn: {:.0} µs sealed, {:.0} µs not); the median durable turn takes {:.0} µs",
        median(&sealed_cpu).as_secs_f64() * 1e6,
        median(&plain_cpu).as_secs_f64() * 1e6,
        median(&plain_turns).as_secs_f64() * 1e6,
    );
    Ok(())
}

fn total(turns: &[Duration]) -> Duration {
    turns.iter().sum()
}

fn median(turns: &[Duration]) -> Duration {
    let mut sorted = turns.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}
