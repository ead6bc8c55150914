//! The PostgreSQL store against baselines measured in the same run, on the
//! server `SESSIONLOG_TEST_PG` names (`tools/pg-test-server.sh start`):
//!
//! - **append**: durable single-session appends through `SessionWriter`
//!   against a raw loop of the same rows through the same client crate, one
//!   autocommit `INSERT` per row (an `INSERT` and its `COMMIT` in one round
//!   trip: the least a durable row can cost). Target: ≥ 0.8×.
//! - **group commit**: 64 writers on 64 sessions against one, durable
//!   appends; the server's `pg_stat_wal.wal_sync` per append commit shows
//!   how many commits share one WAL flush, and raw autocommit `INSERT`s on
//!   64 connections against 1 beside it: the server's and the disk's own
//!   ceiling on this machine. Target: ≥ 10×.
//! - **export**: a 300,000-event session read and written out as `export`
//!   does (header, then each record's JSON line) against `COPY (SELECT body
//!   …) TO STDOUT` of the same rows. Target: ≤ 2× the time.
//!
//! The two sides of each comparison alternate, round after round, and the
//! append and group figures are medians of the rounds' ratios. Run with
//! `cargo bench -p sessionlog-store --bench postgres`;
//! `SESSIONLOG_BENCH_SCALE=0.1` shrinks the export session.

use std::io::Read;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::{Durability, NewEvent, PostgresStore, Store, WriterOptions};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Rounds of the append comparison: each pairs a second of appends with a
/// second of raw inserts right after, and the median of the rounds'
/// ratios is the figure, so that one round the machine disturbed (this is
/// a shared two-core machine) does not move it.
const ROUNDS: usize = 9;
const RUN_FOR: Duration = Duration::from_secs(1);
const THREADS: usize = 64;
const GROUP_ROUNDS: usize = 7;
/// Appends each group-commit writer makes before the timed run.
const WARM_UP: u64 = 8;
const EXPORT_EVENTS: f64 = 300_000.0;
/// The table and the one-row autocommit insert of the raw baselines.
const RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS raw_events (session_id text, seq bigint,
    ts bigint, type text, batch bigint, body text, crc bigint, PRIMARY KEY (session_id, seq))";
const RAW_INSERT: &str = "INSERT INTO raw_events (session_id, seq, ts, type, batch, body, crc)
    VALUES ($1, $2, $3, $4, $5, $6, $7)";

fn main() -> BenchResult<()> {
    let Ok(server) = std::env::var("SESSIONLOG_TEST_PG") else {
        println!("SESSIONLOG_TEST_PG is unset: start a server with tools/pg-test-server.sh start");
        return Ok(());
    };
    let scale: f64 = match std::env::var("SESSIONLOG_BENCH_SCALE") {
        Ok(text) => text.parse()?,
        Err(_) => 1.0,
    };
    let schema = format!("bench_{}", std::process::id());
    let url = format!("{server}?schema={schema}");
    let Store::Postgres(store) = Store::create(Path::new(&url))? else {
        return Err("not a PostgreSQL store".into());
    };
    println!("PostgreSQL store benchmarks on {}", store.path().display());
    let outcome = run_all(&store, scale);
    let mut client = store.connect()?;
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
    outcome
}

fn run_all(store: &PostgresStore, scale: f64) -> BenchResult<()> {
    let only = std::env::var("SESSIONLOG_BENCH_ONLY").ok();
    let runs = |section: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|name| name == section))
    };
    if runs("append") {
        append(store)?;
    }
    if runs("group") {
        group_commit(store)?;
    }
    if runs("export") {
        export(store, ((EXPORT_EVENTS * scale) as u64).max(1))?;
    }
    Ok(())
}

fn id(text: &str) -> BenchResult<SessionId> {
    Ok(SessionId::parse(text)?)
}

fn note(n: u64) -> NewEvent {
    NewEvent {
        event_type: "x-bench/note".to_owned(),
        data: format!("{{\"n\":{n},\"text\":\"an event of about a hundred bytes, as notes are\"}}"),
        ts: Some(1_700_000_000_000 + n),
    }
}

fn create(store: &PostgresStore, name: &str) -> BenchResult<SessionId> {
    let session = id(name)?;
    let header = SessionHeader::root(session.clone(), 1_700_000_000_000, "/bench".to_owned());
    store.create_session(&header, &[], Durability::Fsync)?;
    Ok(session)
}

/// Single-session durable appends against raw autocommit inserts.
fn append(store: &PostgresStore) -> BenchResult<()> {
    let mut raw = store.connect()?;
    raw.batch_execute(RAW_TABLE)?;
    let insert = raw.prepare(RAW_INSERT)?;
    let session = create(store, "append")?;
    let mut writer = store.open_writer(
        &session,
        WriterOptions {
            durability: Durability::Fsync,
            keep_snapshot: false,
            ..WriterOptions::default()
        },
    )?;
    let (mut ours, mut theirs) = (0.0, 0.0);
    let mut ratios = Vec::with_capacity(ROUNDS);
    let mut raw_seq = 0u64;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let mut count = 0u64;
        while started.elapsed() < RUN_FOR {
            let n = writer.next_seq();
            writer.append(note(n), None)?;
            count += 1;
        }
        let our_rate = count as f64 / started.elapsed().as_secs_f64();
        ours += our_rate;
        let started = Instant::now();
        let mut count = 0u64;
        while started.elapsed() < RUN_FOR {
            raw_seq += 1;
            let event = note(raw_seq);
            let record = EventRecord::new(raw_seq, 1, None, &event.event_type, &event.data);
            raw.execute(
                &insert,
                &[
                    &"append",
                    &(raw_seq as i64),
                    &1_i64,
                    &record.event_type(),
                    &None::<i64>,
                    &record.body(),
                    &0_i64,
                ],
            )?;
            count += 1;
        }
        let raw_rate = count as f64 / started.elapsed().as_secs_f64();
        theirs += raw_rate;
        ratios.push(our_rate / raw_rate);
    }
    let (ours, theirs) = (ours / ROUNDS as f64, theirs / ROUNDS as f64);
    let (low, high) = ratios
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(low, high), &ratio| {
            (low.min(ratio), high.max(ratio))
        });
    println!(
        "append, one session, durable: sessionlog {ours:.0} events/s, raw INSERT+COMMIT {theirs:.0} rows/s (means); median of {ROUNDS} rounds' ratios {:.2}x (target >= 0.8x), rounds {low:.2}-{high:.2}x",
        median(ratios)
    );
    Ok(())
}

/// The middle value (the mean of the two middle values of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() % 2 {
        0 => (values[middle - 1] + values[middle]) / 2.0,
        _ => values[middle],
    }
}

/// The server's WAL flushes so far (`pg_stat_wal.wal_sync`).
fn wal_syncs(client: &mut postgres::Client) -> BenchResult<i64> {
    client.batch_execute("SELECT pg_stat_clear_snapshot()")?;
    Ok(client
        .query_one("SELECT wal_sync FROM pg_stat_wal", &[])?
        .try_get(0)?)
}

/// `threads` writers on sessions of their own for `RUN_FOR`, after
/// `WARM_UP` appends each: appends per second and WAL flushes per append
/// commit. The writers' connections
/// close before the flush count is read, which makes their backends report
/// their statistics.
fn appenders(store: &PostgresStore, round: usize, threads: usize) -> BenchResult<(f64, f64)> {
    let mut sessions = Vec::new();
    for thread in 0..threads {
        sessions.push(create(store, &format!("g{round}-{threads}-{thread}"))?);
    }
    let mut client = store.connect()?;
    let syncs_before = wal_syncs(&mut client)?;
    let start = Barrier::new(threads + 1);
    let (counts, elapsed) = std::thread::scope(|scope| -> BenchResult<(Vec<u64>, Duration)> {
        let handles: Vec<_> = sessions
            .iter()
            .map(|session| {
                let start = &start;
                scope.spawn(move || -> Result<u64, String> {
                    let mut writer = store
                        .open_writer(
                            session,
                            WriterOptions {
                                durability: Durability::Fsync,
                                keep_snapshot: false,
                                ..WriterOptions::default()
                            },
                        )
                        .map_err(|error| error.to_string())?;
                    // A writer's first appends prepare its statements and
                    // fill its new server backend's caches, and PostgreSQL
                    // plans the first five executions of a prepared
                    // statement afresh: a cost of starting, not of
                    // appending, which 64 new writers would otherwise pay
                    // inside their one timed second.
                    for n in 0..WARM_UP {
                        writer
                            .append(note(n), None)
                            .map_err(|error| error.to_string())?;
                    }
                    start.wait();
                    let started = Instant::now();
                    let mut count = WARM_UP;
                    while started.elapsed() < RUN_FOR {
                        writer
                            .append(note(count), None)
                            .map_err(|error| error.to_string())?;
                        count += 1;
                    }
                    Ok(count - WARM_UP)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut counts = Vec::new();
        for handle in handles {
            counts.push(handle.join().map_err(|_| "an appender panicked")??);
        }
        Ok((counts, started.elapsed()))
    })?;
    std::thread::sleep(Duration::from_millis(300));
    let syncs = wal_syncs(&mut client)? - syncs_before;
    let total: u64 = counts.iter().sum();
    // The flushes counted include those of the warm-up appends, and so do
    // the commits they are divided by.
    let committed = total + WARM_UP * threads as u64;
    Ok((
        total as f64 / elapsed.as_secs_f64(),
        syncs as f64 / committed as f64,
    ))
}

/// What the server and its disk give the simplest durable row, as a
/// ceiling for [`appenders`]: `threads` connections, each inserting rows
/// of its own with one autocommit `INSERT` each for `RUN_FOR`, after
/// `WARM_UP` rows; rows per second.
fn raw_appenders(store: &PostgresStore, round: usize, threads: usize) -> BenchResult<f64> {
    let start = Barrier::new(threads + 1);
    let (total, elapsed) = std::thread::scope(|scope| -> BenchResult<(u64, Duration)> {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let start = &start;
                scope.spawn(move || -> Result<u64, String> {
                    let session = format!("raw{round}-{threads}-{thread}");
                    let fail = |error: postgres::Error| error.to_string();
                    let mut client = store.connect().map_err(|error| error.to_string())?;
                    let insert = client.prepare(RAW_INSERT).map_err(fail)?;
                    let mut count = 0u64;
                    let mut insert_next = |count: &mut u64| {
                        *count += 1;
                        let event = note(*count);
                        let record =
                            EventRecord::new(*count, 1, None, &event.event_type, &event.data);
                        let row: [&(dyn postgres::types::ToSql + Sync); 7] = [
                            &session,
                            &(*count as i64),
                            &1_i64,
                            &record.event_type(),
                            &None::<i64>,
                            &record.body(),
                            &0_i64,
                        ];
                        client.execute(&insert, &row).map(drop).map_err(fail)
                    };
                    for _ in 0..WARM_UP {
                        insert_next(&mut count)?;
                    }
                    start.wait();
                    let started = Instant::now();
                    while started.elapsed() < RUN_FOR {
                        insert_next(&mut count)?;
                    }
                    Ok(count - WARM_UP)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut total = 0;
        for handle in handles {
            total += handle.join().map_err(|_| "a raw appender panicked")??;
        }
        Ok((total, started.elapsed()))
    })?;
    Ok(total as f64 / elapsed.as_secs_f64())
}

/// One writer, then 64, in each of `GROUP_ROUNDS` rounds; the ratio of
/// each round (the two runs a second apart, so the disk and the machine's
/// load are alike for both) and their median, which one disturbed round
/// (another process flushing the disk, a burst of load) does not move.
fn group_commit(store: &PostgresStore) -> BenchResult<()> {
    store.connect()?.batch_execute(RAW_TABLE)?;
    appenders(store, 99, THREADS)?;
    let mut rounds = Vec::new();
    let mut raw_rounds = Vec::new();
    for round in 0..GROUP_ROUNDS {
        let one = appenders(store, round, 1)?;
        let many = appenders(store, round, THREADS)?;
        let raw = (
            raw_appenders(store, round, 1)?,
            raw_appenders(store, round, THREADS)?,
        );
        println!(
            "  round {round}: 1 writer {:.0} events/s ({:.2} WAL flushes per commit), {THREADS} writers {:.0} events/s ({:.3} WAL flushes per commit): {:.1}x; raw INSERT+COMMIT 1 connection {:.0} rows/s, {THREADS} {:.0} rows/s: {:.1}x",
            one.0,
            one.1,
            many.0,
            many.1,
            many.0 / one.0,
            raw.0,
            raw.1,
            raw.1 / raw.0
        );
        rounds.push((one, many));
        raw_rounds.push(raw);
    }
    let ratio = median(rounds.iter().map(|(one, many)| many.0 / one.0).collect());
    let flushes_one = median(rounds.iter().map(|(one, _)| one.1).collect());
    let flushes_many = median(rounds.iter().map(|(_, many)| many.1).collect());
    let raw_ratio = median(raw_rounds.iter().map(|(one, many)| many / one).collect());
    println!(
        "group commit: median of {GROUP_ROUNDS} rounds {ratio:.1}x (target >= 10x); WAL flushes per commit: 1 writer {flushes_one:.2}, {THREADS} writers {flushes_many:.3} ({:.1} commits share a flush); \
         the server's own ceiling, raw INSERT+COMMIT on {THREADS} connections against 1: {raw_ratio:.1}x",
        1.0 / flushes_many
    );
    Ok(())
}

/// Export of a long session against `COPY … TO STDOUT` of its rows.
fn export(store: &PostgresStore, events: u64) -> BenchResult<()> {
    let session = id("export")?;
    let header = SessionHeader::root(session.clone(), 1_700_000_000_000, "/bench".to_owned());
    let records: Vec<EventRecord> = (1..=events)
        .map(|seq| {
            let event = note(seq);
            EventRecord::new(
                seq,
                1_700_000_000_000 + seq,
                None,
                &event.event_type,
                &event.data,
            )
        })
        .collect();
    store.create_session(&header, &records, Durability::Buffered)?;
    drop(records);
    let generic = Store::Postgres(store.clone());
    let mut client = store.connect()?;
    let (mut ours, mut theirs) = (Duration::ZERO, Duration::ZERO);
    let mut bytes = (0, 0);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let mut out = Vec::with_capacity(64 << 20);
        let (decoded, stream) = generic.records(&session)?;
        out.extend_from_slice(decoded.body.as_bytes());
        out.extend_from_slice(b"}\n");
        let mut count = 0;
        for record in stream {
            let record = record?;
            out.extend_from_slice(record.body().as_bytes());
            out.extend_from_slice(b"}\n");
            count += 1;
        }
        assert_eq!(count, events);
        ours += started.elapsed();
        bytes.0 = out.len();
        let started = Instant::now();
        let mut out = Vec::with_capacity(64 << 20);
        client
            .copy_out(
                "COPY (SELECT body FROM events WHERE session_id = 'export' ORDER BY seq) TO STDOUT",
            )?
            .read_to_end(&mut out)?;
        theirs += started.elapsed();
        bytes.1 = out.len();
    }
    println!(
        "export of {events} events: sessionlog {:.0} ms ({:.1} MB), COPY TO STDOUT {:.0} ms ({:.1} MB), ratio {:.2}x the time (target <= 2x)",
        ours.as_secs_f64() * 1000.0 / ROUNDS as f64,
        bytes.0 as f64 / 1e6,
        theirs.as_secs_f64() * 1000.0 / ROUNDS as f64,
        bytes.1 as f64 / 1e6,
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
    Ok(())
}
