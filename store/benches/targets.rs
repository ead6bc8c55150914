//! The performance targets, each measured against its baseline in the same
//! run and printed as one table (figure, measured, baseline, ratio, target).
//!
//! The inputs are generated here, in a temporary folder: realistic logs of
//! turns, steps, messages, tool calls with arguments, tool settles with
//! results of a few hundred bytes, approvals and request headers (about 250
//! bytes per event). Every figure is a ratio against a baseline measured in
//! the same process, best of several interleaved runs, so a noisy machine
//! moves both sides.
//!
//! Run with `cargo bench -p sessionlog-store --bench targets`.
//! `SESSIONLOG_BENCH_SCALE=0.1` scales every size down for a quick run;
//! `SESSIONLOG_BENCH_DIR` picks the folder (default: the system temporary
//! folder) and so the disk that the durable-append figure measures;
//! `SESSIONLOG_BENCH_KEEP=1` keeps the inputs there for profiling (run this
//! binary with `SESSIONLOG_BENCH_CHILD_VERIFY=<log>` to verify one log alone,
//! e.g. under `valgrind --tool=callgrind`).

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sessionlog_projections::{
    build_review_request_for_state, parse_pending_action, SessionState, Violation,
};
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::{
    fold_stream, fold_through, migrate, Durability, JsonlStore, LogReader, NewEvent, SessionStream,
    Store, WriterOptions,
};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Full sizes; every one is multiplied by `SESSIONLOG_BENCH_SCALE`.
const VERIFY_EVENTS: f64 = 400_000.0;
const APPEND_EVENTS: f64 = 1_000.0;
const LIST_SESSIONS: f64 = 10_000.0;
const REVIEW_EVENTS: f64 = 100_000.0;
const MIGRATE_SESSIONS: f64 = 1_000.0;
const MIGRATE_EVENTS_PER_SESSION: f64 = 1_000.0;
const RESUME_EVENTS: f64 = 1_000_000.0;

/// Peak resident memory `verify` may use, whatever the log size.
const VERIFY_MEMORY_LIMIT_KIB: f64 = 128.0 * 1024.0;

/// The child process that measures verify's peak memory is this binary run
/// again with this variable naming the log.
const CHILD_VERIFY: &str = "SESSIONLOG_BENCH_CHILD_VERIFY";

fn main() -> BenchResult<()> {
    if let Some(path) = std::env::var_os(CHILD_VERIFY) {
        return child_verify(Path::new(&path));
    }
    let scale: f64 = match std::env::var("SESSIONLOG_BENCH_SCALE") {
        Ok(text) => text.parse()?,
        Err(_) => 1.0,
    };
    let sized = |full: f64| ((full * scale).round() as usize).max(1);
    let base =
        std::env::var_os("SESSIONLOG_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let folder = tempfile::tempdir_in(base)?;
    println!(
        "sessionlog targets, scale {scale}, inputs in {}",
        folder.path().display()
    );
    let mut table = Table::default();

    let verify_log = folder.path().join("verify.jsonl");
    let events = sized(VERIFY_EVENTS);
    let bytes = write_log(&verify_log, "verify", events)?;
    println!(
        "generated {events} events, {:.1} MB ({:.0} bytes/event)",
        bytes as f64 / 1e6,
        bytes as f64 / events as f64
    );
    // SESSIONLOG_BENCH_ONLY=review,migration runs only the sections named.
    let only = std::env::var("SESSIONLOG_BENCH_ONLY").ok();
    let runs = |section: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|name| name == section))
    };
    if runs("verify") {
        verify_and_fold(&mut table, &verify_log, events)?;
    }
    if runs("append") {
        durable_append(&mut table, folder.path(), sized(APPEND_EVENTS))?;
    }
    if runs("list") {
        list(&mut table, folder.path(), sized(LIST_SESSIONS))?;
    }
    if runs("review") {
        review(&mut table, folder.path(), sized(REVIEW_EVENTS))?;
    }
    if runs("follow") {
        follow(&mut table, folder.path(), sized(REVIEW_EVENTS))?;
    }
    if runs("reads") {
        partial_reads(
            &mut table,
            folder.path(),
            &verify_log,
            events,
            sized(REVIEW_EVENTS),
        )?;
    }
    if runs("resume") {
        resume(&mut table, folder.path(), sized(RESUME_EVENTS))?;
    }
    if runs("migration") {
        migration(
            &mut table,
            folder.path(),
            sized(MIGRATE_SESSIONS),
            sized(MIGRATE_EVENTS_PER_SESSION),
        )?;
    }
    table.print();
    if std::env::var_os("SESSIONLOG_BENCH_KEEP").is_some() {
        println!("inputs kept in {}", folder.keep().display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The table

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

struct Row {
    figure: String,
    measured: String,
    baseline: String,
    ratio: f64,
    target: Target,
}

#[derive(Clone, Copy)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
    /// A figure shown beside the others, with no target of its own.
    Reported,
}

impl Target {
    fn passes(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(limit) => ratio <= limit,
            Target::AtLeast(limit) => ratio >= limit,
            Target::Reported => true,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtMost(limit) => format!("<= {limit}"),
            Target::AtLeast(limit) => format!(">= {limit}"),
            Target::Reported => "-".to_owned(),
        }
    }
}

impl Table {
    fn add(
        &mut self,
        figure: &str,
        measured: String,
        baseline: String,
        ratio: f64,
        target: Target,
    ) {
        println!(
            "  {figure}: {measured} vs {baseline} -> {}",
            ratio_text(ratio)
        );
        self.rows.push(Row {
            figure: figure.to_owned(),
            measured,
            baseline,
            ratio,
            target,
        });
    }

    fn print(&self) {
        println!();
        println!(
            "| {:<70} | {:>16} | {:>16} | {:>7} | {:>8} | {:<4} |",
            "figure", "measured", "baseline", "ratio", "target", "pass"
        );
        println!(
            "|{:-<72}|{:->18}|{:->18}|{:->9}|{:->10}|{:-<6}|",
            "", "", "", "", "", ""
        );
        for row in &self.rows {
            println!(
                "| {:<70} | {:>16} | {:>16} | {:>7} | {:>8} | {:<4} |",
                row.figure,
                row.measured,
                row.baseline,
                ratio_text(row.ratio),
                row.target.text(),
                match row.target {
                    Target::Reported => "-",
                    _ if row.target.passes(row.ratio) => "pass",
                    _ => "FAIL",
                }
            );
        }
    }
}

/// A ratio with three decimals, or three significant digits below 0.01.
fn ratio_text(ratio: f64) -> String {
    if ratio >= 0.01 {
        format!("{ratio:.3}")
    } else {
        format!("{ratio:.2e}")
    }
}

fn micros(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------
// Inputs

/// A small deterministic generator (xorshift), so every run logs the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Prose of about `len` bytes as a JSON string body (escapes included).
    fn prose(&mut self, len: usize) -> String {
        const WORDS: &[&str] = &[
            "the",
            "session",
            "writes",
            "a",
            "file",
            "under",
            "src/",
            "with",
            "tests",
            "and",
            "checks",
            "cargo",
            "build",
            "output",
            "error:",
            "warning",
            "line",
            "café",
            "\\n",
            "\\\"quoted\\\"",
            "function",
            "returns",
            "value",
            "for",
            "each",
            "path",
            "→",
        ];
        let mut text = String::with_capacity(len + 16);
        while text.len() < len {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(WORDS[self.below(WORDS.len() as u64) as usize]);
        }
        text
    }
}

const TOOLS: &[&str] = &["shell", "read_file", "write_file", "search"];

/// The `request/header` of every tenth turn.
fn request_header_data() -> String {
    let tools: Vec<String> = TOOLS
        .iter()
        .map(|name| {
            format!(
                r#"{{"name":"{name}","description":"Runs {name} in the workspace","parameters":{{"type":"object","properties":{{"path":{{"type":"string"}},"command":{{"type":"string"}}}},"required":["path"]}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"provider":"anthropic","model":"claude-sonnet","approvalPolicy":"ask","sandboxMode":"workspace-write","tools":[{}]}}"#,
        tools.join(",")
    )
}

/// Events of a realistic session, `(type, data)`, ending inside an open
/// turn and step (so the session can be reviewed); the open step is
/// `step-open`.
struct Session {
    rng: Rng,
    events: Vec<(&'static str, String)>,
}

impl Session {
    fn generate(count: usize, seed: u64) -> Vec<(&'static str, String)> {
        let mut session = Session {
            rng: Rng(seed | 1),
            events: Vec::with_capacity(count + 64),
        };
        let mut turn = 0;
        while session.events.len() + 80 < count {
            session.turn(turn);
            turn += 1;
        }
        session.open_tail(count, turn);
        session.events
    }

    fn push(&mut self, event_type: &'static str, data: String) {
        self.events.push((event_type, data));
    }

    fn turn(&mut self, turn: usize) {
        self.push("turn/start", format!(r#"{{"turnId":"turn-{turn}"}}"#));
        if turn.is_multiple_of(10) {
            self.push("request/header", request_header_data());
        }
        self.user_message();
        let steps = 3 + self.rng.below(4) as usize;
        for step in 0..steps {
            let step_id = format!("step-{turn}-{step}");
            self.push(
                "step/start",
                format!(r#"{{"stepId":"{step_id}","turnId":"turn-{turn}"}}"#),
            );
            self.assistant_message();
            let call_id = format!("call-{turn}-{step}");
            self.tool_start(&call_id, &step_id);
            if self.rng.below(6) == 0 {
                let request = format!("req-{turn}-{step}");
                self.push(
                    "approval/asked",
                    format!(
                        r#"{{"requestId":"{request}","turnId":"turn-{turn}","tool":"shell","reason":"writes outside the workspace","callId":"{call_id}"}}"#
                    ),
                );
                self.push(
                    "approval/decided",
                    format!(r#"{{"requestId":"{request}","outcome":"allowed-once"}}"#),
                );
            }
            self.tool_settle(&call_id);
            self.push("step/end", format!(r#"{{"stepId":"{step_id}"}}"#));
        }
        self.assistant_message();
        self.push("turn/end", format!(r#"{{"turnId":"turn-{turn}"}}"#));
    }

    /// Fills the log up to `count` events inside an open turn and step.
    fn open_tail(&mut self, count: usize, turn: usize) {
        self.push("turn/start", format!(r#"{{"turnId":"turn-{turn}"}}"#));
        if !turn.is_multiple_of(10) {
            self.push("request/header", request_header_data());
        }
        self.push(
            "step/start",
            format!(r#"{{"stepId":"step-open","turnId":"turn-{turn}"}}"#),
        );
        let mut call = 0;
        while self.events.len() < count {
            if count - self.events.len() >= 2 {
                let call_id = format!("call-open-{call}");
                self.tool_start(&call_id, "step-open");
                self.tool_settle(&call_id);
                call += 1;
            } else {
                self.assistant_message();
            }
        }
    }

    fn user_message(&mut self) {
        let text = self.rng.prose(120);
        let attachment = if self.rng.below(20) == 0 {
            r#",{"type":"image","mediaType":"image/png","name":"screen.png","size":48213}"#
        } else {
            ""
        };
        self.push(
            "message",
            format!(
                r#"{{"role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}{attachment}]}}"#
            ),
        );
    }

    fn assistant_message(&mut self) {
        let text = self.rng.prose(100);
        self.push(
            "message",
            format!(
                r#"{{"role":"assistant","source":{{"kind":"assistant"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
            ),
        );
    }

    fn tool_start(&mut self, call_id: &str, step_id: &str) {
        let name = TOOLS[self.rng.below(TOOLS.len() as u64) as usize];
        let command = self.rng.prose(40);
        let n = self.rng.below(1000);
        self.push(
            "tool/start",
            format!(
                r#"{{"callId":"{call_id}","stepId":"{step_id}","name":"{name}","arguments":{{"path":"src/module_{n}.rs","command":"{command}","timeoutMs":30000}}}}"#
            ),
        );
    }

    fn tool_settle(&mut self, call_id: &str) {
        let len = 180 + self.rng.below(320) as usize;
        let stdout = self.rng.prose(len);
        self.push(
            "tool/settle",
            format!(
                r#"{{"callId":"{call_id}","status":"ok","result":{{"exitCode":0,"stdout":"{stdout}","truncated":false}}}}"#
            ),
        );
    }
}

fn id(text: &str) -> BenchResult<SessionId> {
    Ok(SessionId::parse(text)?)
}

fn header(name: &str) -> BenchResult<SessionHeader> {
    Ok(SessionHeader::root(
        id(name)?,
        1_700_000_000_000,
        "/work/project".to_owned(),
    ))
}

fn records<'a>(events: &'a [(&'static str, String)]) -> impl Iterator<Item = EventRecord> + 'a {
    events
        .iter()
        .enumerate()
        .map(|(index, (event_type, data))| {
            let seq = index as u64 + 1;
            EventRecord::new(seq, 1_700_000_000_000 + seq * 7, None, event_type, data)
        })
}

/// Writes a log of `count` events for session `name` at `path`; returns its
/// size in bytes.
fn write_log(path: &Path, name: &str, count: usize) -> BenchResult<u64> {
    let header = header(name)?;
    let events = Session::generate(count, 0x5eed_0000 + count as u64);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    out.write_all(header.encode().as_bytes())?;
    for record in records(&events) {
        out.write_all(record.encode(&header.id).as_bytes())?;
    }
    out.into_inner()?.sync_all()?;
    Ok(std::fs::metadata(path)?.len())
}

// ---------------------------------------------------------------------------
// 1 and 2: verify, read, fold

/// A plain streaming read: every line split, CRC-checked and decoded into
/// an `EventRecord`, no fold.
fn streaming_read(path: &Path, id: &SessionId) -> BenchResult<u64> {
    let mut reader = LogReader::open(path, Some(id.clone()))?;
    let mut count = 0;
    while let Some(record) = reader.next_event()? {
        std::hint::black_box(&record);
        count += 1;
    }
    reader.finish()?;
    Ok(count)
}

/// What `sessionlog verify` does: stream, fold every projection while
/// reading (each line scanned once), collect every violation.
fn verify(path: &Path, id: Option<SessionId>) -> BenchResult<(u64, Vec<Violation>)> {
    let mut stream: Box<dyn SessionStream> = Box::new(LogReader::open(path, id)?);
    let mut violations = Vec::new();
    let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
    let mut count = 0;
    fold_stream(&mut *stream, &mut state, |record, folded, _| {
        std::hint::black_box(record);
        count += 1;
        if let Err(violation) = folded {
            violations.push(violation);
        }
    })?;
    stream.finish()?;
    std::hint::black_box(&state);
    Ok((count, violations))
}

/// What a whole `sessionlog project` does: read and fold every event
/// (`fold_through`, which leaves the hash chain out of the fold of a log
/// that no own seal asks it of), refusing violations.
fn cold_project(path: &Path, id: &SessionId) -> BenchResult<u64> {
    let open = || -> Result<Box<dyn SessionStream>, sessionlog_store::StoreError> {
        Ok(Box::new(LogReader::open(path, Some(id.clone()))?))
    };
    let (folded, _) = fold_through(open, path, None, false)?;
    std::hint::black_box(&folded);
    Ok(folded.seq())
}

/// Run as a child process: verifies `path` and prints the peak resident
/// memory (VmHWM, KiB) the whole process needed.
fn child_verify(path: &Path) -> BenchResult<()> {
    let (count, violations) = verify(path, None)?;
    if !violations.is_empty() {
        return Err(format!("verify found {} violations", violations.len()).into());
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    let peak = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .ok_or("no VmHWM in /proc/self/status")?;
    println!("{count} {peak}");
    Ok(())
}

fn verify_and_fold(table: &mut Table, path: &Path, events: usize) -> BenchResult<()> {
    let id = id("verify")?;
    // Warm the page cache so every side reads from memory.
    let mut sink = Vec::new();
    File::open(path)?.read_to_end(&mut sink)?;
    drop(sink);
    let (count, violations) = verify(path, Some(id.clone()))?;
    if count != events as u64 || !violations.is_empty() {
        return Err(format!(
            "the generated log verifies as {count} events with {} violations",
            violations.len()
        )
        .into());
    }
    if cold_project(path, &id)? != events as u64 {
        return Err("the generated log projects short of its last event".into());
    }
    let mut naive = || common::naive_read(path, &id).map(drop);
    let mut read = || streaming_read(path, &id).map(drop);
    let mut checked = || verify(path, Some(id.clone())).map(drop);
    let mut project = || cold_project(path, &id).map(drop);
    let [naive, read, checked, project] =
        common::best_of(3, [&mut naive, &mut read, &mut checked, &mut project])?;
    let label = format!("{}k events", events / 1000);
    table.add(
        &format!("verify {label} (stream + fold + chain) / naive limit"),
        ms(checked),
        ms(naive),
        checked.as_secs_f64() / naive.as_secs_f64(),
        Target::AtMost(1.0),
    );
    table.add(
        &format!("cold project {label} (read + fold) / naive limit"),
        ms(project),
        ms(naive),
        project.as_secs_f64() / naive.as_secs_f64(),
        Target::AtMost(1.0),
    );
    table.add(
        &format!("read + fold {label} / plain streaming read"),
        ms(project),
        ms(read),
        project.as_secs_f64() / read.as_secs_f64(),
        Target::AtMost(1.25),
    );
    table.add(
        &format!("verify {label} (read + fold + chain) / plain streaming read"),
        ms(checked),
        ms(read),
        checked.as_secs_f64() / read.as_secs_f64(),
        Target::Reported,
    );
    let output = std::process::Command::new(std::env::current_exe()?)
        .env(CHILD_VERIFY, path)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "the verify child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let text = String::from_utf8(output.stdout)?;
    let peak_kib: f64 = text
        .split_whitespace()
        .nth(1)
        .ok_or("the verify child printed no peak")?
        .parse()?;
    table.add(
        &format!("verify {label}: peak RSS / 128 MiB"),
        format!("{:.1} MiB", peak_kib / 1024.0),
        "128.0 MiB".to_owned(),
        peak_kib / VERIFY_MEMORY_LIMIT_KIB,
        Target::AtMost(1.0),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 3: durable append

fn durable_append(table: &mut Table, folder: &Path, count: usize) -> BenchResult<()> {
    let store = JsonlStore::create_folder(&folder.join("append"))?;
    let events = Session::generate(count, 0xa99e4d);
    let mut round = 0;
    let mut writer_side = || -> BenchResult<()> {
        round += 1;
        let header = header(&format!("append-{round}"))?;
        store.create(&header, &[], Durability::Fsync)?;
        let mut writer = store.open_writer(
            &header.id,
            WriterOptions {
                durability: Durability::Fsync,
                keep_snapshot: false,
                ..WriterOptions::default()
            },
        )?;
        for (index, (event_type, data)) in events.iter().enumerate() {
            let event = NewEvent {
                event_type: (*event_type).to_owned(),
                data: data.clone(),
                ts: Some(1_700_000_000_000 + index as u64),
            };
            writer.append(event, None)?;
        }
        Ok(())
    };
    let raw_header = header("append-raw")?;
    let lines: Vec<String> = records(&events)
        .map(|record| record.encode(&raw_header.id))
        .collect();
    let mut raw_round = 0;
    let mut raw_side = || -> BenchResult<()> {
        raw_round += 1;
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(folder.join(format!("raw-{raw_round}.jsonl")))?;
        file.write_all(raw_header.encode().as_bytes())?;
        file.sync_data()?;
        for line in &lines {
            file.write_all(line.as_bytes())?;
            file.sync_data()?;
        }
        Ok(())
    };
    let [writer_time, raw_time] = common::best_of(2, [&mut writer_side, &mut raw_side])?;
    let rate = |time: Duration| format!("{:.0} ev/s", count as f64 / time.as_secs_f64());
    table.add(
        &format!("durable append, 1 writer, {count} events / raw write+fdatasync"),
        rate(writer_time),
        rate(raw_time),
        raw_time.as_secs_f64() / writer_time.as_secs_f64(),
        Target::AtLeast(0.8),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Resume: a writer on a long session, from its state snapshot

/// The events a long session of `long` events is followed by, and a
/// writer of `durability` that keeps no events.
const RESUME_TAIL: usize = 4_000;

fn appender(durability: Durability) -> WriterOptions {
    WriterOptions {
        durability,
        keep_snapshot: false,
        ..WriterOptions::default()
    }
}

fn new_event(index: usize, (event_type, data): &(&'static str, String)) -> NewEvent {
    NewEvent {
        event_type: (*event_type).to_owned(),
        data: data.clone(),
        ts: Some(1_700_000_000_000 + index as u64),
    }
}

/// On every backend (PostgreSQL when `SESSIONLOG_TEST_PG` names a server):
/// opening a writer and appending one event durably to a session of
/// `long` events against the same on a 10-event session, interleaved,
/// best of 9 (target: at most 10x), and `append_batch` of 8 events on the
/// long session against the same on a new one (target: at most 2x,
/// buffered so that the state's cost is not hidden behind an fsync). The
/// long session is written with buffered batches of 1,000 events, as an
/// import would.
fn resume(table: &mut Table, folder: &Path, long: usize) -> BenchResult<()> {
    let events = Session::generate(long + RESUME_TAIL, 0x5e5e);
    let short = Session::generate(RESUME_TAIL, 0x5e5e);
    let mut stores = vec![
        ("JSONL", Store::create(&folder.join("resume"))?),
        ("SQLite", Store::create(&folder.join("resume.db"))?),
    ];
    // The PostgreSQL schema goes when the section ends, however it ends:
    // its million events are some 400 MB of the test server's disk.
    #[cfg(feature = "postgres")]
    let mut _dropped = None;
    if let Ok(server) = std::env::var("SESSIONLOG_TEST_PG") {
        let schema = format!("bench_resume_{}", std::process::id());
        let store = Store::create(Path::new(&format!("{server}?schema={schema}")))?;
        #[cfg(feature = "postgres")]
        {
            _dropped = Some(SchemaDropped {
                store: store.clone(),
                schema,
            });
        }
        stores.push(("PostgreSQL", store));
    }
    for (name, store) in &stores {
        let started = Instant::now();
        for session in ["long", "ten"] {
            store.create_session(&header(session)?, &[], Durability::Buffered)?;
        }
        let mut writer = store.open_writer(&id("long")?, appender(Durability::Buffered))?;
        for (chunk, batch) in events[..long].chunks(1_000).enumerate() {
            let batch = batch
                .iter()
                .enumerate()
                .map(|(index, event)| new_event(chunk * 1_000 + index, event))
                .collect();
            writer.append_batch(batch, None)?;
        }
        drop(writer);
        let mut writer = store.open_writer(&id("ten")?, appender(Durability::Buffered))?;
        let ten = short[..10].iter().enumerate();
        writer.append_batch(
            ten.map(|(index, event)| new_event(index, event)).collect(),
            None,
        )?;
        drop(writer);
        println!(
            "{name}: wrote {long} events in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // Each round appends the next event of each session, the long and
        // the short side interleaved.
        let next = std::cell::Cell::new([long, 10]);
        let reopen = |session: &str, slot: usize, events: &[(&'static str, String)]| {
            let mut writer = store.open_writer(&id(session)?, appender(Durability::Fsync))?;
            let mut at = next.get();
            writer.append(new_event(at[slot], &events[at[slot]]), None)?;
            at[slot] += 1;
            next.set(at);
            BenchResult::Ok(())
        };
        let mut long_side = || reopen("long", 0, &events);
        let mut short_side = || reopen("ten", 1, &short);
        let [long_time, short_time] = common::best_of(9, [&mut long_side, &mut short_side])?;
        table.add(
            &format!("resume, {name}: open writer + append 1, {long} events / 10 events"),
            ms(long_time),
            ms(short_time),
            long_time.as_secs_f64() / short_time.as_secs_f64(),
            Target::AtMost(10.0),
        );
        // append_batch of 8 events, buffered, on the long session and on
        // a new one; each side's writer stays open.
        let mut long_writer = store.open_writer(&id("long")?, appender(Durability::Buffered))?;
        let mut from = next.get()[0];
        let mut round = 0;
        let fresh = |round: usize| -> BenchResult<sessionlog_store::SessionWriter> {
            let name = format!("new-{round}");
            store.create_session(&header(&name)?, &[], Durability::Buffered)?;
            Ok(store.open_writer(&id(&name)?, appender(Durability::Buffered))?)
        };
        let mut new_writer = fresh(round)?;
        let mut new_from = 0;
        let batches = 100;
        let mut long_batches = || -> BenchResult<()> {
            for _ in 0..batches {
                let batch = (from..from + 8).map(|index| new_event(index, &events[index]));
                long_writer.append_batch(batch.collect(), None)?;
                from += 8;
            }
            Ok(())
        };
        let mut new_batches = || -> BenchResult<()> {
            if new_from + batches * 8 > short.len() {
                round += 1;
                new_writer = fresh(round)?;
                new_from = 0;
            }
            for _ in 0..batches {
                let batch = (new_from..new_from + 8).map(|index| new_event(index, &short[index]));
                new_writer.append_batch(batch.collect(), None)?;
                new_from += 8;
            }
            Ok(())
        };
        let [long_time, new_time] = common::best_of(3, [&mut long_batches, &mut new_batches])?;
        let per_batch = |time: Duration| micros(time / batches as u32);
        table.add(
            &format!("append_batch of 8, {name}: {long}-event session / new session"),
            per_batch(long_time),
            per_batch(new_time),
            long_time.as_secs_f64() / new_time.as_secs_f64(),
            Target::AtMost(2.0),
        );
    }
    Ok(())
}

/// Drops a bench's PostgreSQL schema, and every table in it, when dropped.
#[cfg(feature = "postgres")]
struct SchemaDropped {
    store: Store,
    schema: String,
}

#[cfg(feature = "postgres")]
impl Drop for SchemaDropped {
    fn drop(&mut self) {
        let Store::Postgres(store) = &self.store else {
            return;
        };
        let statement = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        let dropped: BenchResult<()> = store
            .connect()
            .map_err(Into::into)
            .and_then(|mut client| Ok(client.batch_execute(&statement)?));
        if let Err(error) = dropped {
            eprintln!(
                "the bench's schema {} was left behind: {error}",
                self.schema
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 4: list

fn list(table: &mut Table, folder: &Path, sessions: usize) -> BenchResult<()> {
    let store_folder = folder.join("list");
    let store = JsonlStore::create_folder(&store_folder)?;
    let events = Session::generate(30, 0x1157);
    for index in 0..sessions {
        let header = header(&format!("session-{index:05}"))?;
        let mut out = BufWriter::new(File::create(store.log_path(&header.id))?);
        out.write_all(header.encode().as_bytes())?;
        for record in records(&events) {
            out.write_all(record.encode(&header.id).as_bytes())?;
        }
        out.flush()?;
    }
    let mut listed = || -> BenchResult<()> {
        let entries = store.list()?;
        if entries.len() != sessions || entries.iter().any(|entry| entry.header.is_err()) {
            return Err("list did not read every header".into());
        }
        std::hint::black_box(&entries);
        Ok(())
    };
    let mut raw = || -> BenchResult<()> {
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(&store_folder)? {
            let mut reader = BufReader::new(File::open(entry?.path())?);
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line)?;
            lines.push(line);
        }
        if lines.len() != sessions {
            return Err("the raw side missed a session".into());
        }
        std::hint::black_box(&lines);
        Ok(())
    };
    let [listed, raw] = common::best_of(3, [&mut listed, &mut raw])?;
    table.add(
        &format!("list {sessions} sessions / raw first lines"),
        ms(listed),
        ms(raw),
        listed.as_secs_f64() / raw.as_secs_f64(),
        Target::AtMost(2.0),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 5: the reviewer's request of an open session

fn review(table: &mut Table, folder: &Path, events: usize) -> BenchResult<()> {
    let store = JsonlStore::create_folder(&folder.join("review"))?;
    let review_id = id("review")?;
    let path = store.log_path(&review_id);
    write_log(&path, "review", events)?;
    let writer = store.open_writer(&review_id, WriterOptions::default())?;
    let pending = parse_pending_action(
        br#"{"callId":"pending-1","stepId":"step-open","name":"shell","arguments":{"path":"src/lib.rs","command":"cargo test --release"}}"#,
    )?;
    let snapshot = writer.events().ok_or("the writer keeps no snapshot")?;
    let request = writer.review_request(&pending, usize::MAX)?;
    let cold = build_review_request_for_state(writer.state(), snapshot, &pending, usize::MAX)?;
    if request != cold {
        return Err(
            "the open writer's request differs from the one built from its snapshot".into(),
        );
    }
    let request_bytes = request.len();
    let mut build = || -> BenchResult<()> {
        let request = writer.review_request(&pending, usize::MAX)?;
        std::hint::black_box(&request);
        Ok(())
    };
    let mut cold_verify = || verify(&path, Some(review_id.clone())).map(drop);
    let [build, cold_verify] = common::best_of(5, [&mut build, &mut cold_verify])?;
    table.add(
        &format!(
            "review request, open {}k-event session ({:.1} MB) / cold verify",
            events / 1000,
            request_bytes as f64 / 1e6
        ),
        ms(build),
        ms(cold_verify),
        build.as_secs_f64() / cold_verify.as_secs_f64(),
        Target::AtMost(0.05),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads that need not cost the whole log

/// `project --at 10` of the long log against the same of a 10-event log
/// (target: at most 5×), and `tail -n 10` of a long database session
/// against the same of a 10-event one (the command's two reads: the
/// session row's last seq, then the rows from there).
fn partial_reads(
    table: &mut Table,
    folder: &Path,
    long_log: &Path,
    long_events: usize,
    database_events: usize,
) -> BenchResult<()> {
    let short_log = folder.join("short.jsonl");
    write_log(&short_log, "short", 10)?;
    let project_at_10 = |path: &Path| -> BenchResult<()> {
        let open = || -> Result<Box<dyn SessionStream>, sessionlog_store::StoreError> {
            Ok(Box::new(LogReader::open(path, None)?))
        };
        let (folded, _) = fold_through(open, path, Some(10), false)?;
        if folded.seq() != 10 {
            return Err(format!("project --at 10 folded through seq {}", folded.seq()).into());
        }
        Ok(())
    };
    let mut long = || project_at_10(long_log);
    let mut short = || project_at_10(&short_log);
    let [long, short] = common::best_of(9, [&mut long, &mut short])?;
    table.add(
        &format!(
            "project --at 10, {}k-event log / 10-event log",
            long_events / 1000
        ),
        micros(long),
        micros(short),
        long.as_secs_f64() / short.as_secs_f64(),
        Target::AtMost(5.0),
    );

    let database = Store::create(&folder.join("reads.db"))?;
    for (name, count) in [("long", database_events), ("short", 10)] {
        let events = Session::generate(count, 0x5eed_0000 + count as u64);
        let records: Vec<EventRecord> = records(&events).collect();
        database.create_session(&header(name)?, &records, Durability::Buffered)?;
    }
    let tail_10 = |name: &str| -> BenchResult<()> {
        let id = id(name)?;
        let last = database
            .recorded_last_seq(&id)?
            .ok_or("a database records its last seq")?;
        let shown = database
            .events_from(&id, (last + 1).saturating_sub(10).max(1))?
            .collect::<Result<Vec<_>, _>>()?;
        if shown.len() != 10 {
            return Err(format!("tail -n 10 read {} events", shown.len()).into());
        }
        Ok(())
    };
    let mut long = || tail_10("long");
    let mut short = || tail_10("short");
    let [long, short] = common::best_of(9, [&mut long, &mut short])?;
    table.add(
        &format!(
            "tail -n 10, {}k-event SQLite session / 10-event session",
            database_events / 1000
        ),
        micros(long),
        micros(short),
        long.as_secs_f64() / short.as_secs_f64(),
        Target::AtMost(5.0),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Following a growing log (not one of the targets; ours: 1%)

/// A follower's poll after one event was appended to a long log, against
/// what a poll cost before `LogFollower`: reading the whole log again and
/// keeping the events above the last one delivered.
fn follow(table: &mut Table, folder: &Path, events: usize) -> BenchResult<()> {
    let store = JsonlStore::create_folder(&folder.join("follow"))?;
    let follow_id = id("follow")?;
    let path = store.log_path(&follow_id);
    write_log(&path, "follow", events)?;
    let mut follower = store.follower(&follow_id, 1)?;
    let mut delivered = 0;
    while delivered < events {
        let batch = follower.poll(4096)?.len();
        if batch == 0 {
            return Err("the follower stopped before the end of the log".into());
        }
        delivered += batch;
    }
    let mut next_seq = events as u64 + 1;
    // Appends the event of seq `next_seq` and returns that seq.
    let mut append_one = || -> BenchResult<u64> {
        let seq = next_seq;
        let record = EventRecord::new(seq, 1_800_000_000_000, None, "note/test", "{}");
        let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
        file.write_all(record.encode(&follow_id).as_bytes())?;
        next_seq += 1;
        Ok(seq)
    };
    let (mut poll, mut reread) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        append_one()?;
        let start = Instant::now();
        let new = follower.poll(usize::MAX)?;
        poll = poll.min(start.elapsed());
        if new.len() != 1 {
            return Err(format!("a poll after one append gave {} events", new.len()).into());
        }
        let after = append_one()?;
        let start = Instant::now();
        let mut found = 0;
        for record in store.reader(&follow_id)? {
            if record?.seq() >= after {
                found += 1;
            }
        }
        reread = reread.min(start.elapsed());
        if found != 1 {
            return Err(format!("a re-read after one append found {found} new events").into());
        }
        // The follower delivers that event too, so that the next round
        // starts caught up.
        follower.poll(usize::MAX)?;
    }
    table.add(
        &format!(
            "follow: poll after 1 append to a {}k-event log / re-read of it",
            events / 1000
        ),
        format!("{:.3} ms", poll.as_secs_f64() * 1e3),
        ms(reread),
        poll.as_secs_f64() / reread.as_secs_f64(),
        Target::AtMost(0.01),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 6: migration JSONL -> SQLite

fn migration(
    table: &mut Table,
    folder: &Path,
    sessions: usize,
    events_per_session: usize,
) -> BenchResult<()> {
    let source_folder = folder.join("migrate-source");
    let source = JsonlStore::create_folder(&source_folder)?;
    let events = Session::generate(events_per_session, 0x3194);
    let mut rows: Vec<(String, u64, String)> = Vec::with_capacity(sessions * events.len());
    for index in 0..sessions {
        let header = header(&format!("migrated-{index:04}"))?;
        let mut out = BufWriter::new(File::create(source.log_path(&header.id))?);
        out.write_all(header.encode().as_bytes())?;
        for record in records(&events) {
            out.write_all(record.encode(&header.id).as_bytes())?;
            rows.push((
                header.id.to_string(),
                record.seq(),
                record.body().to_owned(),
            ));
        }
        out.flush()?;
    }
    let total = rows.len();
    let source = Store::open(&source_folder)?;
    let mut round = 0;
    let mut migrated = || -> BenchResult<()> {
        round += 1;
        let target = Store::create(&folder.join(format!("migrated-{round}.db")))?;
        let report = migrate(&source, &target, &mut |_| {})?;
        if report.events != total as u64 {
            return Err(format!("migrated {} of {total} events", report.events).into());
        }
        Ok(())
    };
    let mut bulk_round = 0;
    let mut bulk = || -> BenchResult<()> {
        bulk_round += 1;
        bulk_insert(&folder.join(format!("bulk-{bulk_round}.db")), &rows)
    };
    let [migrated, bulk] = common::best_of(2, [&mut migrated, &mut bulk])?;
    let rate = |time: Duration| format!("{:.0} ev/s", total as f64 / time.as_secs_f64());
    table.add(
        &format!("migrate {sessions} sessions / {total} events to SQLite / bulk insert"),
        rate(migrated),
        rate(bulk),
        bulk.as_secs_f64() / migrated.as_secs_f64(),
        Target::AtLeast(0.5),
    );
    Ok(())
}

/// SQLite's own bulk-insert rate: one transaction, one prepared INSERT of
/// the same (session, seq, body) rows, WAL mode, committed durably.
fn bulk_insert(path: &Path, rows: &[(String, u64, String)]) -> BenchResult<()> {
    let mut connection = rusqlite::Connection::open(path)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.execute_batch(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, \
         PRIMARY KEY (session_id, seq)) STRICT, WITHOUT ROWID;",
    )?;
    let transaction = connection.transaction()?;
    {
        let mut insert = transaction
            .prepare("INSERT INTO events (session_id, seq, body) VALUES (?1, ?2, ?3)")?;
        for (session, seq, body) in rows {
            insert.execute(rusqlite::params![session, *seq as i64, body])?;
        }
    }
    transaction.commit()?;
    Ok(())
}
