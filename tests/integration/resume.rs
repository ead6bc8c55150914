//! Long sessions: a refused batch leaves the writer's state as it was (no
//! copy of it is made), and state snapshots let a writer resume from the
//! fold of a long session, on every backend.
//!
//! - A batch refused at any position (a rule, data that is not JSON) leaves
//!   the writer's state equal to before, and the next append behaves as on
//!   a writer that never saw it (proptest).
//! - A writer takes a snapshot every 8192 events; resuming from it and
//!   folding the tail gives the state a fold of the whole log gives, on
//!   JSONL, SQLite and PostgreSQL (when `SESSIONLOG_TEST_PG` is set).
//! - A torn, tampered, foreign, stale or unknown-format snapshot is ignored:
//!   the state is the whole fold's, and the session opens and appends.
//! - Resuming reads nothing before the anchor, but `verify` reads it all.
//! - `kill -9` of `append` while it writes a snapshot never breaks the
//!   session nor loses an acknowledged event (CI: a few dozen kills per
//!   backend; `SESSIONLOG_LONG=1`: hundreds).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sessionlog_projections::SessionState;
use sessionlog_schema::SessionHeader;
use sessionlog_store::{
    Durability, JsonlStore, NewEvent, SqliteStore, Store, StoreError, WriterOptions,
};

use crate::cli_support::run;
use crate::crash::{input_line, kills, start_append, text};
use crate::faults::{expected, id, ok, read_back, realistic_units, Expected};
use crate::support::Rng;

/// A writer that keeps no events: the one that resumes from a snapshot.
fn appender() -> WriterOptions {
    WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        ..WriterOptions::default()
    }
}

/// Creates session `name` in `store` and appends realistic units to it
/// until it holds at least `events` events; returns the units appended
/// and the units of the same session that follow them (ids are unique
/// within one generated session only).
fn long_session(
    store: &Store,
    name: &str,
    events: u64,
    seed: u64,
) -> (Vec<Vec<NewEvent>>, Vec<Vec<NewEvent>>) {
    let header = SessionHeader::root(id(name), 1_700_000_000_000, "/work".into());
    ok(store.create_session(&header, &[], Durability::Buffered));
    let mut writer = ok(store.open_writer(&id(name), appender()));
    let mut units = realistic_units(seed, events as usize / 8 + 400).into_iter();
    let mut appended = Vec::new();
    while writer.next_seq() <= events {
        let unit = units
            .next()
            .unwrap_or_else(|| panic!("the generated session is shorter than {events} events"));
        ok(writer.append_batch(unit.clone(), None));
        appended.push(unit);
    }
    (appended, units.collect())
}

/// The state a fold of the whole session gives.
fn whole_fold(store: &Store, name: &str) -> SessionState {
    let snapshot = ok(store.snapshot(&id(name)));
    let (state, violations) = snapshot.fold();
    assert!(violations.is_empty(), "{violations:?}");
    state
}

/// The JSONL sidecar snapshot of session `name` in `folder`.
fn sidecar(folder: &Path, name: &str) -> PathBuf {
    folder.join(format!(".{name}.jsonl.state"))
}

/// The number of snapshot rows of a SQLite database.
fn sqlite_snapshot_rows(path: &Path) -> i64 {
    let connection = ok(rusqlite::Connection::open(path));
    ok(connection.query_row("SELECT count(*) FROM snapshots", [], |row| row.get(0)))
}

/// Checks, on `store`, that a long session got a snapshot (`has_snapshot`),
/// that the resumed state equals the whole fold before and after more
/// appends, and that a writer resumed from it appends where it should.
fn check_resume(store: &Store, has_snapshot: impl Fn() -> bool) {
    let (_, rest) = long_session(store, "long", 8192 + 300, 7);
    assert!(has_snapshot(), "a writer of 8192 events took a snapshot");
    assert_eq!(
        ok(store.current_state(&id("long"))),
        whole_fold(store, "long")
    );
    // A writer resumed from it goes on where the log ends, and so does the
    // state after more appends (a refused one included).
    let mut writer = ok(store.open_writer(&id("long"), appender()));
    let next = writer.next_seq();
    assert_eq!(next, whole_fold(store, "long").seq() + 1);
    assert_eq!(writer.state(), &whole_fold(store, "long"));
    for unit in rest.into_iter().take(20) {
        ok(writer.append_batch(unit, None));
    }
    let refused = writer.append(NewEvent::new("step/end", r#"{"stepId":"nowhere"}"#), None);
    assert!(
        matches!(refused, Err(StoreError::Rule { .. })),
        "{refused:?}"
    );
    drop(writer);
    assert_eq!(
        ok(store.current_state(&id("long"))),
        whole_fold(store, "long")
    );
}

#[test]
fn jsonl_resumes_from_its_snapshot_to_the_state_of_the_whole_fold() {
    let folder = ok(tempfile::tempdir());
    let store = Store::Jsonl(ok(JsonlStore::create_folder(folder.path())));
    check_resume(&store, || sidecar(folder.path(), "long").exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = ok(std::fs::metadata(sidecar(folder.path(), "long")))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "a snapshot is private like its log");
    // Neither a listing nor the leftover cleanup takes it for anything.
    assert_eq!(ok(store.ids()), [id("long")]);
    let Store::Jsonl(jsonl) = &store else {
        unreachable!()
    };
    assert_eq!(ok(jsonl.leftovers()), []);
}

#[test]
fn sqlite_resumes_from_its_snapshot_to_the_state_of_the_whole_fold() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("s.db");
    let store = Store::Sqlite(ok(SqliteStore::open(&path)));
    check_resume(&store, || sqlite_snapshot_rows(&path) == 1);
}

#[test]
fn postgres_resumes_from_its_snapshot_to_the_state_of_the_whole_fold() {
    let Some(server) = crate::postgres::test_server() else {
        return;
    };
    let schema = crate::postgres::Schema::new(&server, "resume");
    let store = ok(Store::create(&schema.path()));
    let url = schema.url.clone();
    check_resume(&store, || {
        let Store::Postgres(postgres) = ok(Store::open(Path::new(&url))) else {
            unreachable!()
        };
        let mut client = ok(postgres.connect());
        let rows: i64 = ok(ok(client.query_one("SELECT count(*) FROM snapshots", &[])).try_get(0));
        rows == 1
    });
}

/// A JSONL folder holding session `name`, long enough to have a snapshot.
fn jsonl_with_snapshot(name: &str) -> (tempfile::TempDir, Store) {
    let folder = ok(tempfile::tempdir());
    let store = Store::Jsonl(ok(JsonlStore::create_folder(folder.path())));
    long_session(&store, name, 8192 + 50, 3);
    assert!(sidecar(folder.path(), name).exists());
    (folder, store)
}

/// The session's state is the whole fold's, and it opens and appends.
fn check_ignored(store: &Store, name: &str, case: &str) {
    let whole = whole_fold(store, name);
    assert_eq!(ok(store.current_state(&id(name))), whole, "{case}");
    let mut writer = ok(store.open_writer(&id(name), appender()));
    assert_eq!(writer.state(), &whole, "{case}");
    let next = writer.next_seq();
    let appended = ok(writer.append(NewEvent::new("future/kind", "{}"), Some(next)));
    assert_eq!(appended.get(), next, "{case}");
    drop(writer);
    assert_eq!(
        ok(store.current_state(&id(name))),
        whole_fold(store, name),
        "{case}"
    );
}

/// Rewrites the snapshot at `path` with its format field set to `format`
/// and its CRC made to match again.
fn with_format(path: &Path, format: u32) {
    let mut bytes = ok(std::fs::read(path));
    bytes[16..20].copy_from_slice(&format.to_le_bytes());
    let end = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
    ok(std::fs::write(path, bytes));
}

#[test]
fn a_torn_tampered_foreign_stale_or_unknown_jsonl_snapshot_is_ignored() {
    // Torn: a power loss kept half of it.
    let (folder, store) = jsonl_with_snapshot("s");
    let path = sidecar(folder.path(), "s");
    let bytes = ok(std::fs::read(&path));
    ok(std::fs::write(&path, &bytes[..bytes.len() / 2]));
    check_ignored(&store, "s", "torn");

    // Tampered: one byte of its state changed.
    let (folder, store) = jsonl_with_snapshot("s");
    let path = sidecar(folder.path(), "s");
    let mut bytes = ok(std::fs::read(&path));
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    ok(std::fs::write(&path, &bytes));
    check_ignored(&store, "s", "tampered");

    // Foreign: another session's snapshot under this one's name.
    let (folder, store) = jsonl_with_snapshot("s");
    long_session(&store, "other", 8192 + 10, 5);
    ok(std::fs::copy(
        sidecar(folder.path(), "other"),
        sidecar(folder.path(), "s"),
    ));
    check_ignored(&store, "s", "foreign");

    // Far larger than a snapshot of its log can be (a sparse file of
    // 64 GiB): ignored without being read, where it once was read whole
    // into memory, and the allocation aborted the process.
    let (folder, store) = jsonl_with_snapshot("s");
    let huge = ok(std::fs::OpenOptions::new()
        .write(true)
        .open(sidecar(folder.path(), "s")));
    ok(huge.set_len(64 << 30));
    drop(huge);
    check_ignored(&store, "s", "huge");

    // Of a format this build does not know.
    let (folder, store) = jsonl_with_snapshot("s");
    with_format(&sidecar(folder.path(), "s"), 99);
    check_ignored(&store, "s", "unknown format");

    // Of the format before this one (1: LEB128 integers), which this build
    // no longer reads.
    let (folder, store) = jsonl_with_snapshot("s");
    with_format(&sidecar(folder.path(), "s"), 1);
    check_ignored(&store, "s", "the format before");

    // Stale: the log no longer reaches its anchor (cut back at a line).
    let (folder, store) = jsonl_with_snapshot("s");
    let log = folder.path().join("s.jsonl");
    let bytes = ok(std::fs::read(&log));
    let cut = bytes.len() / 2;
    let cut = cut + bytes[cut..].iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
    ok(std::fs::write(&log, &bytes[..cut]));
    check_ignored(&store, "s", "stale, log shorter");

    // Stale: another history of the same session, longer than the anchor,
    // with another record where the anchor is.
    let (folder, _store) = jsonl_with_snapshot("s");
    let elsewhere = ok(tempfile::tempdir());
    let other = Store::Jsonl(ok(JsonlStore::create_folder(elsewhere.path())));
    long_session(&other, "s", 8192 + 400, 11);
    ok(std::fs::copy(
        sidecar(folder.path(), "s"),
        sidecar(elsewhere.path(), "s"),
    ));
    check_ignored(&other, "s", "stale, another history");
}

/// The damage each database case does to session `a`'s snapshot row, as
/// SQL of either engine: the statement that tampers with one byte of its
/// state (`tamper`), then the foreign, stale and unknown-format ones.
fn database_cases(tamper: &'static str) -> [(&'static str, &'static str); 4] {
    [
        ("tampered", tamper),
        (
            "foreign",
            "UPDATE snapshots SET state = (SELECT state FROM snapshots WHERE session_id = 'b') WHERE session_id = 'a'",
        ),
        ("stale", "UPDATE snapshots SET anchor_crc = anchor_crc + 1 WHERE session_id = 'a'"),
        ("unknown format", "UPDATE snapshots SET format = 99 WHERE session_id = 'a'"),
    ]
}

/// Checks on a database `store` holding long sessions `a` and `b` that each
/// case of [`database_cases`] makes `a`'s snapshot ignored, each damaging
/// the good row alone: `restore` puts the good row back first (a writer
/// that folded the whole log leaves a snapshot of its own when it closes),
/// and `execute` runs a statement, giving the rows it changed.
fn check_database_cases(
    store: &Store,
    tamper: &'static str,
    restore: &mut dyn FnMut(),
    execute: &mut dyn FnMut(&str, i64) -> u64,
) {
    // Event 2 of `a` damaged (its CRC off by one) or mended: a read from
    // the first row finds it, a resume from a snapshot never reads it. So
    // whether a snapshot was used shows.
    let damage_event_2 = "UPDATE events SET crc = crc + $1 WHERE session_id = 'a' AND seq = 2";
    for (case, sql) in database_cases(tamper) {
        restore();
        assert_eq!(execute(damage_event_2, 1), 1, "{case}: event 2 damaged");
        let resumed = store.current_state(&id("a")).map(|state| state.seq());
        assert!(
            resumed.is_ok(),
            "{case}: the good snapshot is used: {resumed:?}"
        );
        assert_eq!(execute(sql, 0), 1, "{case}: one row changed");
        let folded = store.current_state(&id("a")).map(|state| state.seq());
        assert!(
            matches!(folded, Err(StoreError::CorruptRow { seq: 2, .. })),
            "{case}: the snapshot is ignored and every row read: {folded:?}"
        );
        assert_eq!(execute(damage_event_2, -1), 1, "{case}: event 2 mended");
        check_ignored(store, "a", case);
    }
}

/// Runs `sql` on a SQLite connection, `$1` bound to `by` when it names
/// it; the rows it changed.
fn sqlite_execute(raw: &rusqlite::Connection, sql: &str, by: i64) -> u64 {
    let changed = match sql.contains("$1") {
        true => raw.execute(sql, [by]),
        false => raw.execute(sql, []),
    };
    ok(changed) as u64
}

#[test]
fn a_tampered_foreign_or_stale_sqlite_snapshot_is_ignored() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("s.db");
    let store = Store::Sqlite(ok(SqliteStore::open(&path)));
    long_session(&store, "a", 8192 + 20, 3);
    long_session(&store, "b", 8192 + 40, 4);
    let raw = ok(rusqlite::Connection::open(&path));
    // The row holds the snapshot's head, and `snapshot_pages` its pages.
    let good: (Vec<u8>, i64, i64, i64) = ok(raw.query_row(
        "SELECT state, seq, anchor_crc, format FROM snapshots WHERE session_id = 'a'",
        [],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
    ));
    let good_pages: Vec<(i64, Vec<u8>)> = ok(ok(
        raw.prepare("SELECT page, bytes FROM snapshot_pages WHERE session_id = 'a' ORDER BY page")
    )
    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
    .and_then(|rows| rows.collect()));
    assert!(!good_pages.is_empty());
    let mut restore = || {
        let (state, seq, anchor_crc, format) = &good;
        ok(raw.execute(
            "UPDATE snapshots SET state = ?1, seq = ?2, anchor_crc = ?3, format = ?4
              WHERE session_id = 'a'",
            rusqlite::params![state, seq, anchor_crc, format],
        ));
        ok(raw.execute("DELETE FROM snapshot_pages WHERE session_id = 'a'", []));
        for (page, bytes) in &good_pages {
            ok(raw.execute(
                "INSERT INTO snapshot_pages (session_id, page, bytes) VALUES ('a', ?1, ?2)",
                rusqlite::params![page, bytes],
            ));
        }
    };
    let mut execute = |sql: &str, by: i64| sqlite_execute(&raw, sql, by);
    let tamper = "UPDATE snapshot_pages SET bytes = CAST(substr(bytes, 1, 100)
          || CASE WHEN substr(bytes, 101, 1) = x'00' THEN x'01' ELSE x'00' END
          || substr(bytes, 102) AS BLOB) WHERE session_id = 'a' AND page = 0";
    check_database_cases(&store, tamper, &mut restore, &mut execute);
}

#[test]
fn a_tampered_foreign_or_stale_postgres_snapshot_is_ignored() {
    let Some(server) = crate::postgres::test_server() else {
        return;
    };
    let schema = crate::postgres::Schema::new(&server, "ignored");
    let store = ok(Store::create(&schema.path()));
    long_session(&store, "a", 8192 + 20, 3);
    long_session(&store, "b", 8192 + 40, 4);
    let Store::Postgres(postgres) = &store else {
        unreachable!()
    };
    let client = std::cell::RefCell::new(ok(postgres.connect()));
    let good = ok(client.borrow_mut().query_one(
        "SELECT state, seq, anchor_crc, format FROM snapshots WHERE session_id = 'a'",
        &[],
    ));
    let good: (Vec<u8>, i64, i64, i64) = (
        ok(good.try_get(0)),
        ok(good.try_get(1)),
        ok(good.try_get(2)),
        ok(good.try_get(3)),
    );
    let mut restore = || {
        let (state, seq, anchor_crc, format) = &good;
        ok(client.borrow_mut().execute(
            "UPDATE snapshots SET state = $1, seq = $2, anchor_crc = $3, format = $4
              WHERE session_id = 'a'",
            &[state, seq, anchor_crc, format],
        ));
    };
    let mut execute = |sql: &str, by: i64| -> u64 {
        let mut client = client.borrow_mut();
        let changed = match sql.contains("$1") {
            true => client.execute(sql, &[&by]),
            false => client.execute(sql, &[]),
        };
        ok(changed)
    };
    let tamper = "UPDATE snapshots SET state = set_byte(state, 100,
          CASE WHEN get_byte(state, 100) = 0 THEN 1 ELSE 0 END) WHERE session_id = 'a'";
    check_database_cases(&store, tamper, &mut restore, &mut execute);
}

/// On a database `store` (`execute` runs a statement of its engine, `$1`
/// bound to the number given, and gives the rows it changed; `anchor`
/// gives the seq of session `a`'s snapshot row): a snapshot
/// is used only while the body of its anchor event is the one it was
/// folded through, not while a column says so; and a child forked by
/// reference, with no event rows of its own, resumes from its snapshot,
/// whose anchor is in its parent's rows.
fn check_database_anchors(
    store: &Store,
    execute: &mut dyn FnMut(&str, i64) -> u64,
    anchor: &mut dyn FnMut() -> u64,
) {
    long_session(store, "a", 8192 + 20, 3);
    let last = ok(store.current_state(&id("a"))).seq();
    // The writer's own snapshot, at 8,192: fewer than 1,024 events follow.
    let anchor = anchor();
    assert!(anchor >= 8192 && anchor < last, "{anchor} of {last}");
    // Event 2 damaged: a resume never reads it, a whole fold does.
    let damage_event_2 = "UPDATE events SET crc = crc + $1 WHERE session_id = 'a' AND seq = 2";
    assert_eq!(execute(damage_event_2, 1), 1);
    assert_eq!(ok(store.current_state(&id("a"))).seq(), last, "resumed");
    // The anchor event's body changed, its stored CRC kept: the snapshot
    // is ignored and the whole fold refuses the session at event 2.
    let body_changed = format!(
        "UPDATE events SET body = replace(body, '\"seq\":{anchor},', '\"seq\": {anchor},')
          WHERE session_id = 'a' AND seq = {anchor}"
    );
    assert_eq!(execute(&body_changed, 0), 1);
    let folded = store.current_state(&id("a")).map(|state| state.seq());
    assert!(
        matches!(folded, Err(StoreError::CorruptRow { seq: 2, .. })),
        "the snapshot of a changed anchor is ignored: {folded:?}"
    );
    let refused = store.open_writer(&id("a"), appender()).map(|_| ());
    assert!(
        matches!(refused, Err(StoreError::CorruptRow { seq: 2, .. })),
        "{refused:?}"
    );
    // A child forked by reference, of a parent with no preset or policy to
    // pass on and with no prompt: it has no event rows of its own. Its
    // first writer folds the parent's rows and leaves a snapshot at their
    // end when it closes, anchored in the parent's rows.
    let header = SessionHeader::root(id("p"), 1_700_000_000_000, "/work".into());
    ok(store.create_session(&header, &[], Durability::Buffered));
    let mut writer = ok(store.open_writer(&id("p"), appender()));
    for n in 0..1_100 {
        ok(writer.append(
            NewEvent::new("x-test/note", format!(r#"{{"n":{n}}}"#)),
            None,
        ));
    }
    drop(writer);
    let defaults = sessionlog_projections::Defaults::default();
    ok(store.fork(&id("p"), &id("child"), None, &defaults));
    drop(ok(store.open_writer(&id("child"), appender())));
    // Event 2 of the parent damaged: the child resumes from its snapshot
    // and never reads it; a whole read does.
    let damage_parent = "UPDATE events SET crc = crc + $1 WHERE session_id = 'p' AND seq = 2";
    assert_eq!(execute(damage_parent, 1), 1);
    assert_eq!(ok(store.current_state(&id("child"))).seq(), 1_100);
    assert!(
        store.snapshot(&id("child")).is_err(),
        "a whole read finds it"
    );
}

#[test]
fn a_sqlite_snapshot_holds_only_while_its_anchor_event_does() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("s.db");
    let store = Store::Sqlite(ok(SqliteStore::open(&path)));
    let raw = ok(rusqlite::Connection::open(&path));
    let mut execute = |sql: &str, by: i64| sqlite_execute(&raw, sql, by);
    let snapshot_seq = ok(rusqlite::Connection::open(&path));
    let mut anchor = || -> u64 {
        let seq: i64 = ok(snapshot_seq.query_row(
            "SELECT seq FROM snapshots WHERE session_id = 'a'",
            [],
            |row| row.get(0),
        ));
        seq as u64
    };
    check_database_anchors(&store, &mut execute, &mut anchor);
}

#[test]
fn a_postgres_snapshot_holds_only_while_its_anchor_event_does() {
    let Some(server) = crate::postgres::test_server() else {
        return;
    };
    let schema = crate::postgres::Schema::new(&server, "anchors");
    let store = ok(Store::create(&schema.path()));
    let Store::Postgres(postgres) = &store else {
        unreachable!()
    };
    let mut client = ok(postgres.connect());
    let mut execute = |sql: &str, by: i64| -> u64 {
        let changed = match sql.contains("$1") {
            true => client.execute(sql, &[&by]),
            false => client.execute(sql, &[]),
        };
        ok(changed)
    };
    let mut snapshot_seq = ok(postgres.connect());
    let mut anchor = || -> u64 {
        let row =
            ok(snapshot_seq.query_one("SELECT seq FROM snapshots WHERE session_id = 'a'", &[]));
        ok(row.try_get::<_, i64>(0)) as u64
    };
    check_database_anchors(&store, &mut execute, &mut anchor);
}

#[test]
fn resuming_reads_nothing_before_the_anchor_but_verify_reads_everything() {
    let (folder, store) = jsonl_with_snapshot("s");
    // Damage an early record in place, its length kept: a read of the
    // whole log finds it; a resume from the snapshot never reads it.
    let log = folder.path().join("s.jsonl");
    let mut bytes = ok(std::fs::read(&log));
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
    let at = second_line + 5;
    bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
    ok(std::fs::write(&log, &bytes));
    assert!(ok(store.current_state(&id("s"))).seq() > 8192);
    assert!(
        store.snapshot(&id("s")).is_err(),
        "a whole read finds the damage"
    );
    let verify = run(["verify", &text(folder.path()), "--session", "s"]);
    verify.expect_code(2);
    assert!(
        verify.stdout.contains("corrupt at line 2"),
        "{}",
        verify.stdout
    );
}

/// One random batch of `units`, broken at `position` by `breaker`.
fn broken_batch(units: &[Vec<NewEvent>], position: usize, breaker: usize) -> Vec<NewEvent> {
    let mut batch: Vec<NewEvent> = units.iter().flatten().cloned().collect();
    let bad = match breaker {
        0 => NewEvent::new("step/end", r#"{"stepId":"never-started"}"#),
        1 => NewEvent::new("tool/settle", r#"{"callId":"never-started","status":"ok"}"#),
        2 => NewEvent::new("turn/start", "not json"),
        _ => NewEvent::new(
            "approval/decided",
            r#"{"requestId":"nope","outcome":"rejected"}"#,
        ),
    };
    batch.insert(position.min(batch.len()), bad);
    batch
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_refused_at_any_position_leaves_the_writer_as_it_was(
        seed in 0u64..1000,
        prefix in 0usize..12,
        batch_units in 1usize..6,
        position in 0usize..40,
        breaker in 0usize..4,
    ) {
        let folder = ok(tempfile::tempdir());
        let store = Store::Jsonl(ok(JsonlStore::create_folder(folder.path())));
        let units = realistic_units(seed, 8);
        let prefix = prefix.min(units.len());
        let header = SessionHeader::root(id("s"), 1, "/work".into());
        ok(store.create_session(&header, &[], Durability::Buffered));
        let mut writer = ok(store.open_writer(&id("s"), appender()));
        for unit in &units[..prefix] {
            ok(writer.append_batch(unit.clone(), None));
        }
        let before = writer.state().clone();
        let rest = &units[prefix..];
        let take = batch_units.min(rest.len());
        let batch = broken_batch(&rest[..take], position, breaker);
        let refused = writer.append_batch(batch, None);
        prop_assert!(refused.is_err(), "a broken batch was accepted");
        prop_assert_eq!(writer.state(), &before);
        prop_assert!(!writer.is_poisoned());
        // The next appends go as they would have on an untouched writer,
        // and the state is the fold of what the log holds.
        for unit in rest {
            let seqs = ok(writer.append_batch(unit.clone(), None));
            prop_assert_eq!(seqs.len(), unit.len());
        }
        prop_assert_eq!(writer.state(), &whole_fold(&store, "s"));
        prop_assert_eq!(
            ok(store.snapshot(&id("s"))).events.len(),
            units.iter().map(Vec::len).sum::<usize>()
        );
    }
}

/// Kills `append` again and again on a long session whose snapshot is
/// removed before most rounds, so that the process writes one right after
/// its first acknowledgement: some kills land inside that write. After
/// each: `verify` exits 0 or 3, every acknowledged event is there, and the
/// resumed state is the whole fold's. `remove_snapshot` removes it. What
/// the campaign did is printed, named by `backend`.
fn snapshot_kills(
    backend: &str,
    store_path: &Path,
    kills: usize,
    seed: u64,
    remove_snapshot: impl Fn(),
) {
    let store = ok(Store::open(store_path));
    let (prepared, rest) = long_session(&store, "k", 8192 + 10, seed);
    drop(store);
    let mut events: Vec<Expected> = prepared.iter().flatten().map(expected).collect();
    let more: Vec<Expected> = rest.iter().flatten().map(expected).collect();
    assert!(
        more.len() >= kills * 10,
        "enough events to feed every round"
    );
    let lines: Vec<String> = more.iter().map(input_line).collect();
    let acked = Arc::new(AtomicU64::new(0));
    let mut rng = Rng::new(seed);
    let mut have = events.len();
    let start = have;
    let (mut rounds, mut removed, mut torn) = (0, 0, 0);
    for round in 0..kills {
        if have - start >= lines.len() {
            break;
        }
        rounds += 1;
        if rng.below(4) != 0 {
            remove_snapshot();
            removed += 1;
        }
        let chunk = 1 + rng.below(20);
        let from = have - start;
        let feed = lines[from..(from + chunk).min(lines.len())].to_vec();
        let appender = start_append(store_path, "k", feed, acked.clone(), have as u64 + 1);
        std::thread::sleep(Duration::from_micros(rng.below(60_000) as u64));
        appender.kill();
        let verify = run(["verify", &text(store_path), "--session", "k"]);
        assert!(
            verify.code == 0 || verify.code == 3,
            "round {round}: verify after a kill exits 0 or 3\n{}{}",
            verify.stdout,
            verify.stderr
        );
        torn += usize::from(verify.code == 3);
        let store = ok(Store::open(store_path));
        let snapshot = ok(store.snapshot(&id("k")));
        let acknowledged = acked.load(Ordering::SeqCst) as usize;
        assert!(
            snapshot.events.len() >= acknowledged,
            "round {round}: {acknowledged} acknowledged, {} found",
            snapshot.events.len()
        );
        let found: Vec<Expected> = snapshot.events[start..].iter().map(read_back).collect();
        assert_eq!(
            found[..],
            more[..found.len()],
            "round {round}: only fed events, in order"
        );
        assert_eq!(
            ok(store.current_state(&id("k"))),
            whole_fold(&store, "k"),
            "round {round}"
        );
        have = snapshot.events.len();
    }
    events.extend(more[..have - start].iter().cloned());
    let store = ok(Store::open(store_path));
    let mut writer = ok(store.open_writer(&id("k"), WriterOptions::default()));
    ok(writer.append(NewEvent::new("future/kind", "{}"), Some(have as u64 + 1)));
    assert_eq!(writer.state(), &whole_fold(&store, "k"));
    let found: Vec<Expected> = ok(store.snapshot(&id("k"))).events[..events.len()]
        .iter()
        .map(read_back)
        .collect();
    assert_eq!(found, events);
    eprintln!(
        "kill -9 of append while a snapshot is written ({backend}): {rounds} kills, the snapshot removed before {removed}, {} events acknowledged after the first {start}, {torn} torn tails found by verify (exit 3); nothing acknowledged lost, every resumed state the whole fold's",
        (acked.load(Ordering::SeqCst) as usize).saturating_sub(start),
    );
}

#[test]
fn kill_9_while_a_jsonl_snapshot_is_written_never_breaks_the_session() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().to_owned();
    let snapshot = sidecar(&path, "k");
    snapshot_kills("JSONL", &path, kills(30, 600), 41, || {
        let _ = std::fs::remove_file(&snapshot);
    });
    let Store::Jsonl(store) = ok(Store::open(&path)) else {
        unreachable!()
    };
    assert_eq!(ok(store.leftovers()), [], "a snapshot is never a leftover");
    assert_eq!(ok(store.ids()), [id("k")]);
}

#[test]
fn kill_9_while_a_sqlite_snapshot_is_written_never_breaks_the_session() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("k.db");
    ok(SqliteStore::open(&path));
    snapshot_kills("SQLite", &path, kills(30, 600), 43, || {
        let raw = ok(rusqlite::Connection::open(&path));
        ok(raw.busy_timeout(Duration::from_secs(5)));
        ok(raw.execute("DELETE FROM snapshots", []));
    });
}

#[test]
fn a_writer_closing_with_a_long_tail_snapshots_its_last_seq_and_a_short_one_does_not() {
    let folder = ok(tempfile::tempdir());
    let path = folder.path().join("s.db");
    let store = ok(Store::create(&path));
    // Both below the interval of a writer's own snapshots: only the close
    // can take one, and only after 1,024 events or more.
    long_session(&store, "long", 1_500, 3);
    long_session(&store, "short", 500, 4);
    let connection = ok(rusqlite::Connection::open(&path));
    let rows: Vec<(String, i64)> = ok(ok(
        connection.prepare("SELECT session_id, seq FROM snapshots ORDER BY session_id")
    )
    .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
    .and_then(Iterator::collect));
    let last = whole_fold(&store, "long").seq();
    assert_eq!(rows, [("long".to_owned(), last as i64)]);
    assert_eq!(
        ok(store.current_state(&id("long"))),
        whole_fold(&store, "long")
    );
}

/// Damages (`true`) or mends (`false`) event 2 of session `name`.
type Damage = Box<dyn FnMut(&str, bool)>;

/// A backend a session is made in whole, with how to damage and mend its
/// event 2 in place (a resume from a snapshot never reads it, a whole read
/// does) and whether session `name` has a state snapshot.
struct MadeIn {
    name: &'static str,
    store: Store,
    damage: Damage,
    has_snapshot: Box<dyn FnMut(&str) -> bool>,
    /// What holds the store's files or schema for as long as it is used.
    _keep: Box<dyn std::any::Any>,
}

/// A JSONL folder, a SQLite database and, with `SESSIONLOG_TEST_PG`, a
/// PostgreSQL schema, each empty.
fn every_backend(label: &str) -> Vec<MadeIn> {
    let folder = ok(tempfile::tempdir());
    let logs = folder.path().join("logs");
    let store = Store::Jsonl(ok(JsonlStore::create_folder(&logs)));
    let flipped = logs.clone();
    let mut made = vec![MadeIn {
        name: "JSONL",
        store,
        damage: Box::new(move |name, _| {
            // One bit of line 2 flipped, or flipped back: its length kept.
            let log = flipped.join(format!("{name}.jsonl"));
            let mut bytes = ok(std::fs::read(&log));
            let at = bytes.iter().position(|&b| b == b'\n').unwrap_or(0) + 6;
            bytes[at] ^= 0x01;
            ok(std::fs::write(&log, &bytes));
        }),
        has_snapshot: Box::new(move |name| sidecar(&logs, name).exists()),
        _keep: Box::new(()),
    }];
    let path = folder.path().join("s.db");
    let store = ok(Store::create(&path));
    let raw = ok(rusqlite::Connection::open(&path));
    let counted = ok(rusqlite::Connection::open(&path));
    made.push(MadeIn {
        name: "SQLite",
        store,
        damage: Box::new(move |name, damaged| {
            let by = if damaged { 1 } else { -1 };
            let sql = "UPDATE events SET crc = crc + ?1 WHERE session_id = ?2 AND seq = 2";
            assert_eq!(ok(raw.execute(sql, rusqlite::params![by, name])), 1);
        }),
        has_snapshot: Box::new(move |name| {
            let sql = "SELECT count(*) FROM snapshots WHERE session_id = ?1";
            ok(counted.query_row(sql, [name], |row| row.get::<_, i64>(0))) == 1
        }),
        _keep: Box::new(folder),
    });
    if let Some(server) = crate::postgres::test_server() {
        let schema = crate::postgres::Schema::new(&server, label);
        let store = ok(Store::create(&schema.path()));
        let Store::Postgres(postgres) = &store else {
            unreachable!()
        };
        let mut raw = ok(postgres.connect());
        let mut counted = ok(postgres.connect());
        made.push(MadeIn {
            name: "PostgreSQL",
            store,
            damage: Box::new(move |name, damaged| {
                let by: i64 = if damaged { 1 } else { -1 };
                let sql = "UPDATE events SET crc = crc + $1 WHERE session_id = $2 AND seq = 2";
                assert_eq!(ok(raw.execute(sql, &[&by, &name])), 1);
            }),
            has_snapshot: Box::new(move |name| {
                let sql = "SELECT count(*) FROM snapshots WHERE session_id = $1";
                let row = ok(counted.query_one(sql, &[&name]));
                ok(row.try_get::<_, i64>(0)) == 1
            }),
            _keep: Box::new(schema),
        });
    }
    made
}

/// Checks that session `name` of `made`, made whole without a writer,
/// opens from a snapshot that holds: with its event 2 damaged its state is
/// still read, and mended, that state is the whole fold's and a writer
/// appends after it.
fn check_made_with_snapshot(made: &mut MadeIn, name: &str) {
    let backend = made.name;
    assert!((made.has_snapshot)(name), "{backend}: a snapshot is kept");
    let whole = whole_fold(&made.store, name);
    (made.damage)(name, true);
    let resumed = made.store.current_state(&id(name));
    assert!(
        made.store.snapshot(&id(name)).is_err(),
        "{backend}: a whole read finds the damage"
    );
    (made.damage)(name, false);
    assert_eq!(ok(resumed), whole, "{backend}: resumed from the snapshot");
    check_ignored(&made.store, name, backend);
}

/// The header and records of a session of `events` events or more, as a
/// writer wrote them (what `import` or a caller hands to a creation).
fn records_of_a_session(events: u64, seed: u64) -> Vec<sessionlog_schema::EventRecord> {
    let folder = ok(tempfile::tempdir());
    let store = Store::Jsonl(ok(JsonlStore::create_folder(folder.path())));
    long_session(&store, "source", events, seed);
    ok(store.snapshot(&id("source"))).events
}

#[test]
fn a_session_created_with_its_events_keeps_a_snapshot_when_long_on_every_backend() {
    let long = records_of_a_session(1_100, 21);
    let short = records_of_a_session(900, 22);
    for mut made in every_backend("created") {
        for (name, events) in [("long", &long), ("short", &short)] {
            let header = SessionHeader::root(id(name), 1_700_000_000_000, "/work".into());
            ok(made
                .store
                .create_session(&header, events, Durability::Fsync));
        }
        check_made_with_snapshot(&mut made, "long");
        // Below 1,024 events the first open folds the session: no
        // snapshot is written for it.
        assert!(!(made.has_snapshot)("short"), "{}", made.name);
        assert_eq!(
            ok(made.store.current_state(&id("short"))),
            whole_fold(&made.store, "short")
        );
    }
}

#[test]
fn a_migrated_session_keeps_a_snapshot_when_long_on_every_backend() {
    let folder = ok(tempfile::tempdir());
    let source = Store::Jsonl(ok(JsonlStore::create_folder(folder.path())));
    long_session(&source, "long", 1_100, 31);
    long_session(&source, "short", 900, 32);
    // The source's own snapshots are not what the copies get.
    ok(std::fs::remove_file(sidecar(folder.path(), "long")));
    for mut made in every_backend("migrated") {
        ok(sessionlog_store::migrate(&source, &made.store, &mut |_| {}));
        check_made_with_snapshot(&mut made, "long");
        assert!(!(made.has_snapshot)("short"), "{}", made.name);
        if let Store::Jsonl(jsonl) = &made.store {
            assert_eq!(ok(jsonl.leftovers()), [], "no snapshot is left staged");
        }
    }
}
