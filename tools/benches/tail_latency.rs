//! How long `sessionlog tail -f` takes to print an event once its append is
//! acknowledged, on both file backends: the watched follow (the log's
//! folder watched with inotify) against the polling fallback
//! (`SESSIONLOG_FOLLOW_POLL_ONLY=1`, a look every 100 ms) in the same run.
//! Target: a median of at most 10 ms.
//!
//! Run with `cargo bench -p sessionlog --bench tail_latency`
//! (`SESSIONLOG_BENCH_APPENDS=N` for another number of appends, 40 by
//! default).
#![allow(clippy::disallowed_macros)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{now_ms, Durability, NewEvent, Store, WriterOptions, POLL_ONLY_VARIABLE};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The pause between two appends: longer than the poll interval's worst
/// case would bias nothing, shorter keeps the run short; it is not a
/// multiple of 100 ms, so appends fall at every phase of the poll.
const PAUSE: Duration = Duration::from_millis(37);

fn main() -> BenchResult<()> {
    let appends: usize = match std::env::var("SESSIONLOG_BENCH_APPENDS") {
        Ok(text) => text.parse()?,
        Err(_) => 40,
    };
    let folder = tempfile::tempdir()?;
    println!("sessionlog tail -f latency, {appends} appends per case");
    let mut rows = Vec::new();
    for (backend, location) in [
        ("JSONL", folder.path().join("logs")),
        ("SQLite", folder.path().join("store.db")),
    ] {
        let store = Store::create(&location)?;
        let mut medians = [Duration::ZERO; 2];
        for (index, poll_only) in [false, true].into_iter().enumerate() {
            let id = SessionId::parse(&format!("s{index}"))?;
            store.create_session(
                &SessionHeader::root(id.clone(), now_ms(), "/bench".into()),
                &[],
                Durability::Fsync,
            )?;
            let mut latencies = follow(&store, &location, &id, poll_only, appends)?;
            latencies.sort();
            medians[index] = latencies[latencies.len() / 2];
            println!(
                "  {backend}, {}: median {:.3} ms, p90 {:.3} ms",
                if poll_only { "polling" } else { "watched" },
                ms(medians[index]),
                ms(latencies[latencies.len() * 9 / 10]),
            );
        }
        rows.push((backend, medians[0], medians[1]));
    }
    println!();
    println!("| backend | watched median | polling median | ratio | target | pass |");
    println!("|---|---:|---:|---:|---|---|");
    for (backend, watched, polling) in rows {
        println!(
            "| {backend} | {:.3} ms | {:.1} ms | {:.4} | <= 10 ms | {} |",
            ms(watched),
            ms(polling),
            watched.as_secs_f64() / polling.as_secs_f64(),
            if watched <= Duration::from_millis(10) {
                "pass"
            } else {
                "FAIL"
            }
        );
    }
    Ok(())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Starts `tail -f` on session `id`, appends `count` events one at a time,
/// and returns, for each, the time from the append's acknowledgement to
/// its line on the follower's output.
fn follow(
    store: &Store,
    location: &Path,
    id: &SessionId,
    poll_only: bool,
    count: usize,
) -> BenchResult<Vec<Duration>> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sessionlog"));
    command
        .args(["tail", "-f", "--from", "1", "--session", id.as_str()])
        .arg(location)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if poll_only {
        command.env(POLL_ONLY_VARIABLE, "1");
    } else {
        command.env_remove(POLL_ONLY_VARIABLE);
    }
    let mut child = Killed(command.spawn()?);
    let stdout = child.0.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut writer = store.open_writer(
        id,
        WriterOptions {
            durability: Durability::Fsync,
            keep_snapshot: false,
            ..WriterOptions::default()
        },
    )?;
    // The first event tells when the follower is following (printed
    // whether it came before its first read or after); it is not measured.
    writer.append(NewEvent::new("x-bench/ready", "{}"), None)?;
    lines.next().ok_or("tail -f ended")??;
    let mut latencies = Vec::with_capacity(count);
    for n in 0..count {
        std::thread::sleep(PAUSE);
        writer.append(
            NewEvent::new("x-bench/note", format!("{{\"n\":{n}}}")),
            None,
        )?;
        let acknowledged = Instant::now();
        let line = lines.next().ok_or("tail -f ended")??;
        latencies.push(acknowledged.elapsed());
        if !line.contains(&format!("{{\"n\":{n}}}")) {
            return Err(format!("tail -f printed {line:?} for note {n}").into());
        }
    }
    Ok(latencies)
}

/// The follower, killed when the measure ends (it never ends by itself).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
