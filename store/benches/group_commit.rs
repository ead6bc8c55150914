//! Group commit, measured against its baseline in the same run.
//!
//! For each backend, 64 threads each append single events durably
//! (`Durability::Fsync`) to their own session, and one thread appends to one
//! session with one durable commit per append (SQLite: one
//! `synchronous=FULL` transaction; JSONL: one fdatasync). Each side runs for
//! a fixed time; the table gives events per second and the ratio.
//!
//! Run with `cargo bench -p sessionlog-store --bench group_commit`. The
//! store lives in a temporary folder under `$SESSIONLOG_BENCH_DIR` (default:
//! the system temporary folder): point it at the disk you want to measure.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{NewEvent, Store, StoreError, WriterOptions};

const THREADS: usize = 64;
const RUN_FOR: Duration = Duration::from_secs(4);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::var_os("SESSIONLOG_BENCH_DIR")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let folder = tempfile::tempdir_in(base)?;
    println!(
        "group commit: {THREADS} threads vs 1 thread, {} s each, durable appends, store in {}",
        RUN_FOR.as_secs(),
        folder.path().display()
    );
    println!(
        "{:<8} {:>22} {:>22} {:>8}",
        "backend", "1 thread (events/s)", "64 threads (events/s)", "ratio"
    );
    let raw_folder = folder.path().join("raw");
    std::fs::create_dir(&raw_folder)?;
    let raw_single = measure_raw(&raw_folder, 1)?;
    let raw_grouped = measure_raw(&raw_folder, THREADS)?;
    println!(
        "{:<8} {raw_single:>22.0} {raw_grouped:>22.0} {:>7.1}x   (the disk's ceiling: no sessionlog code)",
        "raw",
        raw_grouped / raw_single
    );
    for (name, path) in [
        ("SQLite", folder.path().join("bench.db")),
        ("JSONL", folder.path().join("logs")),
    ] {
        let store = Store::create(&path)?;
        let single = measure(&store, "single", 1)?;
        let grouped = measure(&store, "group", THREADS)?;
        println!(
            "{name:<8} {single:>22.0} {grouped:>22.0} {:>7.1}x",
            grouped / single
        );
    }
    Ok(())
}

/// Events per second of `threads` threads, each appending to its own
/// session for `RUN_FOR`.
fn measure(store: &Store, prefix: &str, threads: usize) -> Result<f64, StoreError> {
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
fn measure_raw(folder: &std::path::Path, threads: usize) -> std::io::Result<f64> {
    use std::io::Write;
    let start = Barrier::new(threads);
    run_threads(threads, |thread| {
        let path = folder.join(format!("raw-{threads}-{thread}"));
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

fn header(id: &str) -> Result<SessionHeader, StoreError> {
    Ok(SessionHeader::root(
        SessionId::parse(id)?,
        sessionlog_store::now_ms(),
        "/bench".to_owned(),
    ))
}
