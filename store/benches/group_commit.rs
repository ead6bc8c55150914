//! Group commit, measured against its baseline in the same run.
//!
//! For each backend, 64 threads each append single events durably
//! (`Durability::Fsync`) to their own session, and one thread appends to one
//! session with one durable commit per append (SQLite: one
//! `synchronous=FULL` transaction; JSONL: one fdatasync). The two sides
//! alternate for `ROUNDS` rounds of a fixed time each, so that a disk whose
//! speed drifts during the run weighs on both alike; the table gives events
//! per second over all rounds and the ratio.
//!
//! Run with `cargo bench -p sessionlog-store --bench group_commit`. The
//! store lives in a temporary folder under `$SESSIONLOG_BENCH_DIR` (default:
//! the system temporary folder): point it at the disk you want to measure.
//! `SESSIONLOG_BENCH_ONLY=raw|sqlite|jsonl` runs one row only (for a
//! profiler).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{NewEvent, Store, StoreError, WriterOptions};

const THREADS: usize = 64;
const ROUNDS: usize = 4;
const RUN_FOR: Duration = Duration::from_secs(1);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::var_os("SESSIONLOG_BENCH_DIR")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let folder = tempfile::tempdir_in(base)?;
    println!(
        "group commit: {THREADS} threads vs 1 thread, {ROUNDS} alternating rounds of {} s each, durable appends, store in {}",
        RUN_FOR.as_secs(),
        folder.path().display()
    );
    println!("file system: {}", describe_file_system(folder.path()));
    println!(
        "{:<8} {:>22} {:>22} {:>8}",
        "backend", "1 thread (events/s)", "64 threads (events/s)", "ratio"
    );
    let only = std::env::var("SESSIONLOG_BENCH_ONLY").ok();
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|only| only.eq_ignore_ascii_case(name))
    };
    if wanted("raw") {
        let raw_folder = folder.path().join("raw");
        std::fs::create_dir(&raw_folder)?;
        let (raw_single, raw_grouped) =
            alternate(|round, threads| measure_raw(&raw_folder, round, threads))?;
        println!(
            "{:<8} {raw_single:>22.0} {raw_grouped:>22.0} {:>7.1}x   (the disk's ceiling: no sessionlog code)",
            "raw",
            raw_grouped / raw_single
        );
    }
    for (name, path) in [
        ("SQLite", folder.path().join("bench.db")),
        ("JSONL", folder.path().join("logs")),
    ] {
        if !wanted(name) {
            continue;
        }
        let store = Store::create(&path)?;
        let (single, grouped) = alternate(|round, threads| measure(&store, round, threads))?;
        println!(
            "{name:<8} {single:>22.0} {grouped:>22.0} {:>7.1}x",
            grouped / single
        );
    }
    Ok(())
}

/// Runs `measure(round, threads)` for one thread and for `THREADS`
/// threads in turn, `ROUNDS` times, and gives the mean events per second of
/// each. A first round of `THREADS` threads is not counted: it brings the
/// store to its steady state (a SQLite WAL file at its full size, which a
/// fresh database has to grow to), as a store in service is.
fn alternate<E>(mut measure: impl FnMut(usize, usize) -> Result<f64, E>) -> Result<(f64, f64), E> {
    measure(ROUNDS, THREADS)?;
    let (mut single, mut grouped) = (0.0, 0.0);
    for round in 0..ROUNDS {
        single += measure(round, 1)?;
        grouped += measure(round, THREADS)?;
    }
    Ok((single / ROUNDS as f64, grouped / ROUNDS as f64))
}

/// Events per second of `threads` threads, each appending to its own
/// session for `RUN_FOR`.
fn measure(store: &Store, round: usize, threads: usize) -> Result<f64, StoreError> {
    let prefix = format!("r{round}-t{threads}");
    let prefix = prefix.as_str();
    for thread in 0..threads {
        store.create_session(
            &header(&format!("{prefix}-{thread}"))?,
            &[],
            Default::default(),
        )?;
    }
    let start = Barrier::new(threads);
    run_threads(threads, |thread| {
        append_until_deadline(store, prefix, thread, &start)
    })
}

/// Runs `work` on `threads` scoped threads and turns the events they
/// counted into events per second of `RUN_FOR`.
fn run_threads<E: Send>(
    threads: usize,
    work: impl Fn(usize) -> Result<u64, E> + Sync,
) -> Result<f64, E> {
    let work = &work;
    let counts: Result<Vec<u64>, E> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| scope.spawn(move || work(thread)))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let total: u64 = counts?.iter().sum();
    Ok(total as f64 / RUN_FOR.as_secs_f64())
}

fn append_until_deadline(
    store: &Store,
    prefix: &str,
    thread: usize,
    start: &Barrier,
) -> Result<u64, StoreError> {
    let id = SessionId::parse(&format!("{prefix}-{thread}"))?;
    let mut writer = store.open_writer(
        &id,
        WriterOptions {
            keep_snapshot: false,
            ..WriterOptions::default()
        },
    )?;
    start.wait();
    let deadline = Instant::now() + RUN_FOR;
    let mut appended = 0u64;
    while Instant::now() < deadline {
        let data =
            format!("{{\"thread\":{thread},\"n\":{appended},\"text\":\"a typical short note\"}}");
        writer.append(NewEvent::new("bench/note", data), None)?;
        appended += 1;
    }
    Ok(appended)
}

/// Events per second of `threads` threads, each appending a 120-byte line
/// to its own file with one `write` and one `fdatasync` per line: what the
/// file system itself allows, the ceiling of the JSONL side.
fn measure_raw(folder: &std::path::Path, round: usize, threads: usize) -> std::io::Result<f64> {
    use std::io::Write;
    let start = Barrier::new(threads);
    run_threads(threads, |thread| {
        let path = folder.join(format!("raw-{round}-{threads}-{thread}"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let line = [b'x'; 120];
        start.wait();
        let deadline = Instant::now() + RUN_FOR;
        let mut appended = 0u64;
        while Instant::now() < deadline {
            file.write_all(&line)?;
            file.sync_data()?;
            appended += 1;
        }
        Ok(appended)
    })
}

/// The file system `path` is on, from `/proc/self/mounts`: its type and
/// device, and for ext4 whether it has a journal (a `jbd2` entry for its
/// device), which decides whether fdatasyncs of different files can share
/// a commit.
fn describe_file_system(path: &std::path::Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return "unknown".to_owned();
    };
    let mount = mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?, fields.next()?, fields.next()?))
        })
        .filter(|(_, point, _)| path.starts_with(point))
        .max_by_key(|(_, point, _)| point.len());
    let Some((device, point, kind)) = mount else {
        return "unknown".to_owned();
    };
    let journal = if kind == "ext4" {
        let name = device.rsplit('/').next().unwrap_or(device);
        let journaled = std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
        });
        if journaled {
            ", with a journal"
        } else {
            ", without a journal"
        }
    } else {
        ""
    };
    format!("{kind} on {device} at {point}{journal}")
}

fn header(id: &str) -> Result<SessionHeader, StoreError> {
    Ok(SessionHeader::root(
        SessionId::parse(id)?,
        sessionlog_store::now_ms(),
        "/bench".to_owned(),
    ))
}
