//! Concurrency: readers during writes, many writers on one database, the
//! one-writer lock across threads and processes.
//!
//! - A thread appends realistic units (single events and batches) while
//!   others take snapshots again and again: every snapshot is a prefix of
//!   the final log that never ends inside a batch.
//! - 64 writers on 64 sessions of one SQLite store (and of one JSONL
//!   folder): every acknowledged event is there exactly once, seqs
//!   contiguous.
//! - A writer held in this process makes `sessionlog append` exit 6.
//! - A session closed and reopened while other threads start processes is
//!   never reported `Locked` (a forked child briefly shares the lock's open
//!   file description until it executes its program).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use sessionlog_schema::SessionHeader;
use sessionlog_store::{Durability, JsonlStore, SqliteStore, Store, StoreError, WriterOptions};

use crate::cli_support::run_with_stdin;
use crate::crash::text;
use crate::faults::{expected, id, ok, read_back, realistic_units, Expected};

fn both_backends(folder: &std::path::Path) -> [Store; 2] {
    [
        Store::Jsonl(ok(JsonlStore::create_folder(&folder.join("logs")))),
        Store::Sqlite(ok(SqliteStore::open(&folder.join("sessions.db")))),
    ]
}

fn create(store: &Store, session: &str) {
    let header = SessionHeader::root(id(session), 1_700_000_000_000, "/work".into());
    ok(store.create_session(&header, &[], Durability::Fsync));
}

#[test]
fn readers_during_writes_always_see_a_prefix_that_never_splits_a_batch() {
    let folder = ok(tempfile::tempdir());
    for store in both_backends(folder.path()) {
        create(&store, "s");
        let units = realistic_units(17, 30);
        let boundaries: Vec<usize> = units
            .iter()
            .scan(0, |end, unit| {
                *end += unit.len();
                Some(*end)
            })
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let store = store.clone();
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    while !done.load(Ordering::SeqCst) {
                        let snapshot = store
                            .snapshot(&id("s"))
                            .unwrap_or_else(|error| panic!("a reader never fails: {error}"));
                        seen.push(snapshot.events.iter().map(read_back).collect::<Vec<_>>());
                    }
                    seen
                })
            })
            .collect();
        let mut writer = ok(store.open_writer(&id("s"), WriterOptions::default()));
        for unit in &units {
            if unit.len() > 1 {
                ok(writer.append_batch(unit.clone(), None));
            } else {
                ok(writer.append(unit[0].clone(), None));
            }
        }
        drop(writer);
        done.store(true, Ordering::SeqCst);
        let all: Vec<Expected> = units.iter().flatten().map(expected).collect();
        let mut snapshots = 0;
        for reader in readers {
            let seen = ok(reader.join().map_err(|_| "a reader panicked"));
            for events in seen {
                assert_eq!(events[..], all[..events.len()], "a prefix of the final log");
                assert!(
                    events.is_empty() || boundaries.contains(&events.len()),
                    "a snapshot of {} events ends inside a batch",
                    events.len()
                );
                snapshots += 1;
            }
        }
        eprintln!(
            "readers during writes ({:?}): {snapshots} snapshots of {} events, each a prefix ending on a unit boundary",
            store.backend(),
            all.len()
        );
        assert!(snapshots > 0);
    }
}

#[test]
fn sixty_four_writers_on_sixty_four_sessions_keep_every_acknowledged_event_once() {
    let folder = ok(tempfile::tempdir());
    for store in both_backends(folder.path()) {
        let sessions: Vec<String> = (0..64).map(|n| format!("w{n:02}")).collect();
        for session in &sessions {
            create(&store, session);
        }
        let barrier = Arc::new(Barrier::new(sessions.len()));
        let writers: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(n, session)| {
                let store = store.clone();
                let barrier = barrier.clone();
                let session = session.clone();
                std::thread::spawn(move || {
                    let units = realistic_units(n as u64, 2);
                    // Past the barrier before a failed open panics, so that
                    // no other writer waits at it for ever.
                    let opened = store.open_writer(&id(&session), WriterOptions::default());
                    barrier.wait();
                    let mut writer = ok(opened);
                    let mut acknowledged = Vec::new();
                    for unit in &units {
                        if unit.len() > 1 {
                            let seqs = ok(writer.append_batch(unit.clone(), None));
                            acknowledged.extend(seqs.iter().map(|seq| seq.get()));
                        } else {
                            acknowledged.push(ok(writer.append(unit[0].clone(), None)).get());
                        }
                    }
                    (session, units, acknowledged)
                })
            })
            .collect();
        let mut events = 0;
        for writer in writers {
            let (session, units, acknowledged) = ok(writer.join().map_err(|_| "a writer panicked"));
            let all: Vec<Expected> = units.iter().flatten().map(expected).collect();
            let snapshot = ok(store.snapshot(&id(&session)));
            let seqs: Vec<u64> = snapshot.events.iter().map(|r| r.seq()).collect();
            let contiguous: Vec<u64> = (1..=all.len() as u64).collect();
            assert_eq!(seqs, contiguous, "{session}: contiguous seqs");
            assert_eq!(
                acknowledged, contiguous,
                "{session}: each acknowledged once"
            );
            let found: Vec<Expected> = snapshot.events.iter().map(read_back).collect();
            assert_eq!(found, all, "{session}: every event once, in order");
            events += all.len();
        }
        eprintln!(
            "64 concurrent writers ({:?}): {events} acknowledged events, each found exactly once",
            store.backend()
        );
    }
}

#[test]
fn a_writer_held_in_this_process_makes_the_binary_exit_6() {
    let folder = ok(tempfile::tempdir());
    for store in both_backends(folder.path()) {
        create(&store, "held");
        let _writer = ok(store.open_writer(&id("held"), WriterOptions::default()));
        let refused = run_with_stdin(
            ["append", &text(store.path()), "--session", "held"],
            "{\"type\":\"x-note\",\"data\":{}}\n",
        );
        refused.expect_code(6);
        assert!(refused.stderr.contains("locked"), "{}", refused.stderr);
        let other_thread = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    store
                        .open_writer(&id("held"), WriterOptions::default())
                        .map(|_| ())
                })
                .join()
        });
        assert!(
            matches!(other_thread, Ok(Err(StoreError::Locked { .. }))),
            "{other_thread:?}"
        );
    }
}

#[test]
fn a_session_reopened_while_other_threads_start_processes_is_never_locked_out() {
    let folder = ok(tempfile::tempdir());
    for store in both_backends(folder.path()) {
        create(&store, "busy");
        let stop = Arc::new(AtomicBool::new(false));
        let spawners: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut spawned = 0;
                    while !stop.load(Ordering::SeqCst) {
                        if std::process::Command::new("true").status().is_ok() {
                            spawned += 1;
                        }
                    }
                    spawned
                })
            })
            .collect();
        let mut locked = 0;
        let reopens = 400;
        for _ in 0..reopens {
            match store.open_writer(&id("busy"), WriterOptions::default()) {
                Ok(writer) => drop(writer),
                Err(StoreError::Locked { .. }) => locked += 1,
                Err(error) => panic!("{error}"),
            }
        }
        stop.store(true, Ordering::SeqCst);
        let spawned: usize = spawners
            .into_iter()
            .map(|spawner| ok(spawner.join().map_err(|_| "a spawner panicked")))
            .sum();
        assert_eq!(
            locked,
            0,
            "{:?}: {locked} of {reopens} reopens were refused as Locked while {spawned} processes started",
            store.backend()
        );
    }
}
