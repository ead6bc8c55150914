//! Forks in a SQLite store, and its `export` against a plain select.
//!
//! - fork of a long parent (`SESSIONLOG_BENCH_FORK_EVENTS`, default
//!   200,000 events of about 300 bytes) against a fork of a 10-event parent,
//!   in the same run (target ≤ 5×), and the database's growth for the long
//!   fork against the parent's size (target < 10%);
//! - reading a session as `export` does (the store's stream, each checked
//!   body lent by `next_body` and written as an export line, without its
//!   CRC, into a buffer) against a
//!   rusqlite loop of `SELECT body, crc FROM events WHERE session_id = ?
//!   ORDER BY seq` writing the same lines into the same kind of buffer
//!   (target ≤ 2×).
//!
//! Run: `cargo bench -p sessionlog-store --bench forks`.

// `naive_read` there is the baseline of the other benches, not of this one.
#[allow(dead_code)]
mod common;

use std::io::Write;
use std::path::Path;

use common::best_of;
use sessionlog_projections::Defaults;
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::{Durability, NewEvent, Store, WriterOptions};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn id(text: &str) -> BenchResult<SessionId> {
    Ok(SessionId::parse(text)?)
}

/// `count` events of an unknown type (kept as is), about 300 bytes each.
fn events(count: u64) -> Vec<EventRecord> {
    let text = "a line of tool output that a long agent session keeps ".repeat(4);
    (1..=count)
        .map(|seq| {
            EventRecord::new(
                seq,
                1_700_000_000_000 + seq,
                None,
                "x-bench/output",
                &format!("{{\"n\":{seq},\"text\":\"{text}\"}}"),
            )
        })
        .collect()
}

/// The bytes of the database file and its write-ahead log.
fn database_bytes(path: &Path) -> u64 {
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |meta| meta.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    size(path) + size(Path::new(&wal))
}

fn main() -> BenchResult<()> {
    let long: u64 = std::env::var("SESSIONLOG_BENCH_FORK_EVENTS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(200_000);
    let folder = tempfile::tempdir()?;
    let path = folder.path().join("sessions.db");
    let store = Store::create(&path)?;
    // Each parent is written as a runtime writes it, by its writer (in
    // buffered batches of 1,000), so it has the state snapshot a writer
    // keeps, which a fork by reference starts from.
    for (name, count) in [("long", long), ("short", 10)] {
        let header = SessionHeader::root(id(name)?, 1_700_000_000_000, "/work".to_owned());
        store.create_session(&header, &[], Durability::Buffered)?;
        let mut writer = store.open_writer(
            &id(name)?,
            WriterOptions {
                durability: Durability::Buffered,
                keep_snapshot: false,
                ..WriterOptions::default()
            },
        )?;
        let all = events(count);
        for chunk in all.chunks(1_000) {
            let batch = chunk
                .iter()
                .map(|record| NewEvent {
                    event_type: record.event_type().to_owned(),
                    data: record.data().to_owned(),
                    ts: Some(record.ts()),
                })
                .collect();
            writer.append_batch(batch, None)?;
        }
    }
    let parent_bytes = database_bytes(&path);
    let forks = std::cell::Cell::new(0_u32);
    let fork = |parent: &str| -> BenchResult<()> {
        forks.set(forks.get() + 1);
        let child = id(&format!("{parent}-child-{}", forks.get()))?;
        store.fork(&id(parent)?, &child, Some("go on"), &Defaults::default())?;
        Ok(())
    };
    let before = database_bytes(&path);
    fork("long")?;
    let growth = database_bytes(&path).saturating_sub(before);
    let checkpointed = |path: &Path| -> BenchResult<u64> {
        let connection = rusqlite::Connection::open(path)?;
        connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        let pages: i64 = connection.query_row("PRAGMA page_count", [], |row| row.get(0))?;
        let free: i64 = connection.query_row("PRAGMA freelist_count", [], |row| row.get(0))?;
        let size: i64 = connection.query_row("PRAGMA page_size", [], |row| row.get(0))?;
        Ok(u64::try_from((pages - free) * size)?)
    };
    let used_before = checkpointed(&path)?;
    fork("long")?;
    let used_growth = checkpointed(&path)?.saturating_sub(used_before);
    let mut long_side = || fork("long");
    let mut short_side = || fork("short");
    let [long_time, short_time] = best_of(3, [&mut long_side, &mut short_side])?;
    println!("fork in SQLite, parent state from its snapshot and the rows after it");
    println!(
        "  {long}-event parent: {:.1} ms; 10-event parent: {:.2} ms; ratio {:.1}x (target <= 5x)",
        long_time.as_secs_f64() * 1e3,
        short_time.as_secs_f64() * 1e3,
        long_time.as_secs_f64() / short_time.as_secs_f64()
    );
    println!(
        "  database growth for one long fork: file + WAL {growth} bytes, pages in use {used_growth} \
         bytes = {:.4}% of the database holding the parent ({parent_bytes} bytes) (target < 10%)",
        used_growth.max(growth) as f64 * 100.0 / parent_bytes as f64
    );

    // Export against a plain select of the same rows, into the same sink.
    let session = id("long")?;
    let mut sink = Vec::with_capacity(256 << 20);
    let mut export = || -> BenchResult<()> {
        sink.clear();
        // As `sessionlog export` reads and writes a session: each body
        // (lent by the stream), then `}`.
        let mut stream = store.stream(&session)?;
        sink.write_all(stream.header_body().as_bytes())?;
        sink.write_all(b"}\n")?;
        while let Some(body) = stream.next_body()? {
            sink.write_all(body.as_str().as_bytes())?;
            sink.write_all(b"}\n")?;
        }
        Ok(())
    };
    let mut plain_sink = Vec::with_capacity(256 << 20);
    let connection = rusqlite::Connection::open(&path)?;
    let mut select = || -> BenchResult<()> {
        plain_sink.clear();
        let mut statement = connection
            .prepare_cached("SELECT body, crc FROM events WHERE session_id = ?1 ORDER BY seq")?;
        let mut rows = statement.query([session.as_str()])?;
        while let Some(row) = rows.next()? {
            let body = row.get_ref(0)?.as_str()?;
            let _crc: i64 = row.get(1)?;
            plain_sink.write_all(body.as_bytes())?;
            plain_sink.write_all(b"}\n")?;
        }
        Ok(())
    };
    // Best of 15: each side takes a fifth of a second, and on a loaded
    // machine best of 5 moved the ratio by a third between runs.
    let [export_time, select_time] = best_of(15, [&mut export, &mut select])?;
    println!("export of the {long}-event session from SQLite");
    println!(
        "  store read + lines: {:.1} ms; rusqlite select + lines: {:.1} ms; ratio {:.2}x (target <= 2x)",
        export_time.as_secs_f64() * 1e3,
        select_time.as_secs_f64() * 1e3,
        export_time.as_secs_f64() / select_time.as_secs_f64()
    );
    Ok(())
}
