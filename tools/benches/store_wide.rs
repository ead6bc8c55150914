//! Store-wide `verify` and `stats` of a SQLite store holding many small
//! sessions, against a dump of every row of the same database by the
//! `sqlite3` shell (`sqlite3 -readonly DB .dump`, into `/dev/null` as the
//! commands' output goes), in the same run. Target: each command ≤ 3×
//! the dump. That is the baseline the target was set against: the build
//! from before the store-wide work gives, against it, the 9–11× the target
//! started from (docs/PERFORMANCE.md, "The target's baseline").
//!
//! Each line also gives the ratio against a stricter floor: every session
//! row and every event row read in this process through one `SELECT`
//! each, nothing written out, which no reader of the whole store can beat.
//!
//! Run with `cargo bench -p sessionlog --bench store_wide`
//! (`SESSIONLOG_BENCH_SESSIONS=N` for another number of sessions, 100,000
//! by default; each holds one turn of five events;
//! `SESSIONLOG_BENCH_KEEP=1` keeps the database, to profile a command on it).
//! Without `sqlite3` on the `PATH` the target's baseline is not measured,
//! and the line says so.
//!
//! On a loaded machine the time a process waits for a core is in its wall
//! time, so each line also gives the ratio of CPU times (user + system,
//! from `/proc/self/stat`: the command's and the shell's as children
//! waited for, the in-process read's as this process's own), in the same
//! best-of-3 run.
#![allow(clippy::disallowed_macros)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{now_ms, Durability, NewEvent, SqliteStore, Store, WriterOptions};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Sessions handed to the committer in one transaction while filling.
const CHUNK: usize = 2_000;

fn main() -> BenchResult<()> {
    let sessions: usize = match std::env::var("SESSIONLOG_BENCH_SESSIONS") {
        Ok(text) => text.parse()?,
        Err(_) => 100_000,
    };
    let folder = tempfile::tempdir()?;
    let database = folder.path().join("store.db");
    if std::env::var_os("SESSIONLOG_BENCH_KEEP").is_some() {
        println!("keeping {}", database.display());
        std::mem::forget(folder);
    }
    let started = Instant::now();
    fill(&database, sessions)?;
    println!(
        "store-wide reads, {sessions} sessions of 5 events ({:.1} MB), filled in {:.1} s",
        std::fs::metadata(&database)?.len() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let binary = Path::new(env!("CARGO_BIN_EXE_sessionlog"));
    for command in ["verify", "stats"] {
        let mut against_dump = Best::default();
        let mut against_read = Best::default();
        let mut dumped = true;
        for _ in 0..3 {
            let before = cpu_ticks()?;
            let read = read_every_row(&database)?;
            let between = cpu_ticks()?;
            let run = run_command(binary, command, &database)?;
            let after = cpu_ticks()?;
            let dump = sqlite3_dump(&database)?;
            let last = cpu_ticks()?;
            let run_cpu = after.1 - between.1;
            against_read.keep(run, read, (run_cpu, between.0 - before.0));
            match dump {
                Some(dump) => against_dump.keep(run, dump, (run_cpu, last.1 - after.1)),
                None => dumped = false,
            }
        }
        let floor = format!(
            "a read of every row in-process {:.0} ms: {:.2}x, CPU {} ms against {} ms: {:.2}x",
            ms(against_read.times.1),
            against_read.ratio,
            against_read.cpu.0 * 10,
            against_read.cpu.1 * 10,
            against_read.cpu_ratio,
        );
        match dumped {
            true => println!(
                "  {command}: {:.0} ms, sqlite3 .dump {:.0} ms: {:.2}x (target <= 3x): {}; \
                 CPU {} ms against {} ms: {:.2}x; {floor}",
                ms(against_dump.times.0),
                ms(against_dump.times.1),
                against_dump.ratio,
                if against_dump.ratio <= 3.0 {
                    "met"
                } else {
                    "MISSED"
                },
                against_dump.cpu.0 * 10,
                against_dump.cpu.1 * 10,
                against_dump.cpu_ratio,
            ),
            false => println!(
                "  {command}: {:.0} ms; sqlite3 is not on the PATH, so the target's baseline \
                 (sqlite3 .dump) is not measured; {floor}",
                ms(against_read.times.0),
            ),
        }
    }
    Ok(())
}

/// Creates `sessions` sessions of one turn each, in transactions of
/// [`CHUNK`] sessions without fsync.
fn fill(database: &Path, sessions: usize) -> BenchResult<()> {
    let store = Store::create(database)?;
    let template = SessionId::parse("template")?;
    store.create_session(
        &SessionHeader::root(template.clone(), now_ms(), "/bench".into()),
        &[],
        Durability::Buffered,
    )?;
    let mut writer = store.open_writer(
        &template,
        WriterOptions {
            durability: Durability::Buffered,
            ..WriterOptions::default()
        },
    )?;
    let turn = [
        ("turn/start", r#"{"turnId":"t1"}"#),
        (
            "message",
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"Run the tests and fix what fails."}]}"#,
        ),
        ("step/start", r#"{"turnId":"t1","stepId":"p1"}"#),
        ("step/end", r#"{"turnId":"t1","stepId":"p1"}"#),
        ("turn/end", r#"{"turnId":"t1"}"#),
    ];
    for (event_type, data) in turn {
        writer.append(NewEvent::new(event_type, data), None)?;
    }
    drop(writer);
    let events = store.snapshot(&template)?.events;
    let sqlite = SqliteStore::open(database)?;
    let mut next = 0;
    while next < sessions {
        let chunk = (next..sessions.min(next + CHUNK))
            .map(|index| {
                let id = SessionId::parse(&format!("s{index:07}"))?;
                let header = SessionHeader::root(id, now_ms(), "/bench".into());
                Ok((header, events.clone()))
            })
            .collect::<BenchResult<Vec<_>>>()?;
        next += chunk.len();
        sqlite.create_many(chunk, Durability::Buffered)?;
    }
    Ok(())
}

/// The best of a few runs of a command against a baseline: the lowest
/// ratio of wall times with the times it came from, and the lowest ratio
/// of CPU times (in ticks) with its ticks.
struct Best {
    ratio: f64,
    times: (Duration, Duration),
    cpu_ratio: f64,
    cpu: (u64, u64),
}

impl Default for Best {
    fn default() -> Self {
        Best {
            ratio: f64::INFINITY,
            times: (Duration::MAX, Duration::MAX),
            cpu_ratio: f64::INFINITY,
            cpu: (0, 0),
        }
    }
}

impl Best {
    fn keep(&mut self, run: Duration, baseline: Duration, cpu: (u64, u64)) {
        let ratio = run.as_secs_f64() / baseline.as_secs_f64();
        if ratio < self.ratio {
            self.ratio = ratio;
            self.times = (run, baseline);
        }
        let cpu_ratio = cpu.0 as f64 / cpu.1.max(1) as f64;
        if cpu_ratio < self.cpu_ratio {
            self.cpu_ratio = cpu_ratio;
            self.cpu = cpu;
        }
    }
}

/// `sqlite3 -readonly DATABASE .dump` into `/dev/null`: the target's
/// baseline. `None` when there is no `sqlite3` to run.
fn sqlite3_dump(database: &Path) -> BenchResult<Option<Duration>> {
    let started = Instant::now();
    let status = match Command::new("sqlite3")
        .arg("-readonly")
        .arg(database)
        .arg(".dump")
        .stdout(Stdio::null())
        .status()
    {
        Ok(status) => status,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let elapsed = started.elapsed();
    if !status.success() {
        return Err(format!("sqlite3 .dump exited with {status}").into());
    }
    Ok(Some(elapsed))
}

/// Reads every session row and every event row, body included: the
/// floor below the target's baseline.
fn read_every_row(database: &Path) -> BenchResult<Duration> {
    let started = Instant::now();
    let connection = rusqlite::Connection::open_with_flags(
        database,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    let mut bytes = 0usize;
    let mut statement = connection.prepare("SELECT id, header_body, header_crc FROM sessions")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        bytes += row.get_ref(0)?.as_str()?.len() + row.get_ref(1)?.as_str()?.len();
    }
    let mut statement = connection
        .prepare("SELECT session_id, seq, body, crc FROM events ORDER BY session_id, seq")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        bytes += row.get_ref(2)?.as_str()?.len();
    }
    std::hint::black_box(bytes);
    Ok(started.elapsed())
}

fn run_command(binary: &Path, command: &str, database: &Path) -> BenchResult<Duration> {
    let started = Instant::now();
    let status = Command::new(binary)
        .args(["--quiet", command])
        .arg(database)
        .stdout(Stdio::null())
        .status()?;
    let elapsed = started.elapsed();
    if !status.success() {
        return Err(format!("sessionlog {command} exited with {status}").into());
    }
    Ok(elapsed)
}

/// The CPU time (user + system, in ticks of 10 ms: Linux's `USER_HZ`) of
/// this process, and of its children waited for.
fn cpu_ticks() -> BenchResult<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name, which is in parentheses: the
    // state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let after_name = stat.rsplit_once(')').ok_or("no ) in /proc/self/stat")?.1;
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    let field = |number: usize| fields.get(number - 4).copied().unwrap_or(0);
    Ok((field(14) + field(15), field(16) + field(17)))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
