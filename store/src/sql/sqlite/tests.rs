use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use super::committer::commit_group;
use super::schema::{immutable_uri, user_version, wal_path, MIGRATION_STEPS};
use super::*;
use crate::io::{FaultInjector, FaultPoint};
use crate::sql::assert_corrupt_at;
use crate::store::tests::{events_of_calls, header, id, note, ok, record, tool_settle, tool_start};
use crate::writer::WriterOptions;

fn database(folder: &Path) -> PathBuf {
    folder.join("sessions.db")
}

fn raw(path: &Path) -> Connection {
    ok(Connection::open(path))
}

/// The sessions the v1 fixture holds: a root with a batch and a child.
fn fill_v1_fixture(store: &SqliteStore) {
    let events = [
        record(1, "approval/policy", r#"{"policy":"never"}"#),
        record(2, "turn/start", r#"{"turnId":"t1"}"#),
        EventRecord::new(3, 1_700_000_000_103, Some(2), "note/test", r#"{"n":3}"#),
        record(4, "note/test", r#"{"n":4,"text":"é ☃"}"#),
    ];
    ok(store.create(&header("root"), &events, Durability::Fsync));
    let mut child = header("child");
    child.parent_session = Some(id("root"));
    child.seed_length = 2;
    child.delegation_depth = 1;
    child.approval_policy = Some(sessionlog_schema::ApprovalPolicy::Never);
    ok(store.create(&child, &events[..2], Durability::Fsync));
}

/// The fixture database of schema `version`, as that version wrote it.
fn fixture_path(version: i64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/sqlite/v{version}.db"))
}

/// Each session's recorded last seq, `id|last_seq`, in id order.
fn last_seqs(path: &Path) -> Vec<String> {
    let connection = raw(path);
    let mut statement =
        ok(connection.prepare("SELECT id || '|' || last_seq FROM sessions ORDER BY id"));
    ok(ok(statement.query_map([], |row| row.get(0))).collect::<Result<_, _>>())
}

/// Every row of both tables, as text, in key order.
fn dump(path: &Path) -> Vec<String> {
    let connection = raw(path);
    let mut rows = Vec::new();
    for sql in [
        "SELECT id || '|' || created_at || '|' || cwd || '|' || ifnull(parent_session, '-') || '|' || seed_length || '|' || delegation_depth || '|' || ifnull(sandbox_mode, '-') || '|' || ifnull(approval_policy, '-') || '|' || header_body || '|' || header_crc FROM sessions ORDER BY id",
        "SELECT session_id || '|' || seq || '|' || ts || '|' || type || '|' || ifnull(batch, '-') || '|' || body || '|' || crc FROM events ORDER BY session_id, seq",
    ] {
        let mut statement = ok(connection.prepare(sql));
        let texts: Vec<String> =
            ok(ok(statement.query_map([], |row| row.get(0))).collect::<Result<_, _>>());
        rows.extend(texts);
    }
    rows
}

/// A request of `work` for `commit_group`, which never answers it.
fn request(work: Work) -> Request {
    Request {
        work,
        durability: Durability::Fsync,
        reply: mpsc::sync_channel(1).0,
    }
}

fn new_session(name: &str) -> NewSession {
    NewSession {
        header: header(name),
        header_body: header(name).to_body(),
        seed_source: None,
        events: vec![record(1, "note/test", r#"{"n":1}"#)],
    }
}

fn append(name: &str, seq: u64) -> Work {
    Work::Append {
        id: id(name),
        records: vec![record(seq, "note/test", &format!(r#"{{"n":{seq}}}"#))],
    }
}

/// One group, committed directly: `requests` give their outcomes in
/// order, and the rows the database then holds.
fn commit_one_group(requests: Vec<Work>) -> (Vec<Result<(), StoreError>>, Vec<String>) {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    {
        let store = ok(SqliteStore::open(&path));
        ok(store.create(&header("a"), &[], Durability::Fsync));
        ok(store.create(&header("b"), &[], Durability::Fsync));
    }
    let mut connection = ok(open_connection(&path, Access::ReadWrite));
    let group: Vec<Request> = requests.into_iter().map(request).collect();
    let outcomes = commit_group(&mut connection, &path, &Io::default(), &mut None, &group);
    drop(connection);
    (outcomes, dump(&path))
}

fn events_of(rows: &[String], name: &str) -> usize {
    rows.iter()
        .filter(|row| row.starts_with(&format!("{name}|")) && row.contains("note/test"))
        .count()
}

/// Each outcome in a word: `ok`, `conflict N/M` (expected, actual) or
/// `exists`.
fn outcome_words(outcomes: &[Result<(), StoreError>]) -> Vec<String> {
    outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok(()) => "ok".to_owned(),
            Err(StoreError::Conflict {
                expected, actual, ..
            }) => format!("conflict {expected}/{actual}"),
            Err(StoreError::AlreadyExists { .. }) => "exists".to_owned(),
            Err(other) => format!("unexpected: {other}"),
        })
        .collect()
}

#[test]
fn a_request_refused_before_writing_leaves_the_rest_of_its_group() {
    let (outcomes, rows) = commit_one_group(vec![
        append("a", 1),
        append("b", 5),
        append("a", 2),
        Work::Create(vec![new_session("a")]),
        Work::Create(vec![new_session("c")]),
    ]);
    assert_eq!(
        outcome_words(&outcomes),
        ["ok", "conflict 5/1", "ok", "exists", "ok"]
    );
    let counts = ["a", "b", "c"].map(|name| events_of(&rows, name));
    assert_eq!(counts, [2, 0, 1], "{rows:#?}");
}

#[test]
fn a_request_failing_after_writing_is_rolled_back_alone() {
    // The creation of d is inserted before that of a fails: the group
    // is applied again with a savepoint per request.
    let (outcomes, rows) = commit_one_group(vec![
        append("a", 1),
        Work::Create(vec![new_session("d"), new_session("a")]),
        append("b", 1),
        Work::Create(vec![new_session("c")]),
    ]);
    assert_eq!(outcome_words(&outcomes), ["ok", "exists", "ok", "ok"]);
    assert!(
        !rows.iter().any(|row| row.starts_with("d|")),
        "nothing of the failed creation remains: {rows:#?}"
    );
    let counts = ["a", "b", "c"].map(|name| events_of(&rows, name));
    assert_eq!(counts, [1, 1, 1], "{rows:#?}");
}

#[test]
fn current_fixture_is_what_the_generator_writes() {
    let folder = ok(tempfile::tempdir());
    let generated = database(folder.path());
    fill_v1_fixture(&ok(SqliteStore::open(&generated)));
    let fixture = fixture_path(SCHEMA_VERSION);
    if std::env::var_os("SESSIONLOG_WRITE_FIXTURES").is_some() {
        ok(std::fs::create_dir_all(
            fixture.parent().unwrap_or(Path::new(".")),
        ));
        let _ = std::fs::remove_file(&fixture);
        ok(raw(&generated).execute_batch(&format!(
            "VACUUM INTO '{}'",
            fixture.display().to_string().replace('\'', "''")
        )));
    }
    assert_eq!(dump(&fixture), dump(&generated));
    assert_eq!(last_seqs(&fixture), last_seqs(&generated));
    assert_eq!(ok(user_version(&raw(&fixture), &fixture)), SCHEMA_VERSION);
}

#[test]
fn every_fixture_holds_the_same_sessions() {
    let current = dump(&fixture_path(SCHEMA_VERSION));
    for version in 1..SCHEMA_VERSION {
        assert_eq!(dump(&fixture_path(version)), current, "v{version}.db");
    }
}

/// Opens a copy of the fixture of `version` for writing (which brings
/// it to the current schema), checks what it reads, and appends.
fn check_fixture_upgrade(version: i64) {
    let folder = ok(tempfile::tempdir());
    let copy = database(folder.path());
    ok(std::fs::copy(fixture_path(version), &copy));
    assert_eq!(ok(user_version(&raw(&copy), &copy)), version);
    // A read-only reader of the old schema changes nothing and, without a
    // snapshots table, folds every row.
    let reader = ok(SqliteStore::open_read_only(&copy));
    assert_eq!(ok(reader.current_state(&id("root"))).seq(), 4);
    drop(reader);
    assert_eq!(ok(user_version(&raw(&copy), &copy)), version);
    let store = ok(SqliteStore::open(&copy));
    assert_eq!(ok(user_version(&raw(&copy), &copy)), SCHEMA_VERSION);
    assert_eq!(last_seqs(&copy), ["child|2", "root|4"]);
    let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
    assert_eq!(ids, ["child", "root"]);
    let root = ok(store.snapshot(&id("root")));
    assert_eq!(root.events.len(), 4);
    assert_eq!(root.events[2].batch(), Some(2));
    assert_eq!(ok(store.snapshot(&id("child"))).header.seed_length, 2);
    let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
    assert_eq!(ok(writer.append(note("new"), Some(5))).get(), 5);
    assert_eq!(last_seqs(&copy), ["child|2", "root|5"]);
    assert_eq!(ok(store.current_state(&id("root"))).seq(), 5);
}

#[test]
fn v1_fixture_is_upgraded_recording_each_sessions_last_seq() {
    check_fixture_upgrade(1);
}

#[test]
fn v2_fixture_opens_reads_and_accepts_appends() {
    check_fixture_upgrade(2);
}

#[test]
fn v3_fixture_is_upgraded_with_a_table_of_snapshot_pages() {
    check_fixture_upgrade(3);
}

#[test]
fn an_older_fixture_is_read_without_upgrade_when_opened_read_only() {
    let folder = ok(tempfile::tempdir());
    let copy = database(folder.path());
    ok(std::fs::copy(fixture_path(1), &copy));
    let before = ok(std::fs::read(&copy));
    let store = ok(SqliteStore::open_read_only(&copy));
    assert_eq!(ok(store.snapshot(&id("root"))).events.len(), 4);
    let streamed: Vec<EventRecord> = ok(ok(store.events(&id("child"))).collect());
    assert_eq!(streamed.len(), 2);
    drop(store);
    assert_eq!(ok(std::fs::read(&copy)), before, "not a byte changed");
}

#[test]
fn empty_database_is_upgraded_to_the_current_version_in_one_step() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    drop(raw(&path));
    assert_eq!(ok(user_version(&raw(&path), &path)), 0);
    drop(ok(SqliteStore::open(&path)));
    assert_eq!(ok(user_version(&raw(&path), &path)), SCHEMA_VERSION);
    assert_eq!(
        MIGRATION_STEPS.last().map(|step| step.to_version),
        Some(SCHEMA_VERSION)
    );
}

/// Every byte of the database and of the files beside it.
fn folder_bytes(folder: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = ok(std::fs::read_dir(folder))
        .map(|entry| {
            let path = ok(entry).path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            (
                name.unwrap_or_default(),
                std::fs::read(&path).unwrap_or_default(),
            )
        })
        .collect();
    files.sort();
    files
}

fn journal_mode(path: &Path) -> String {
    ok(raw(path).pragma_query_value(None, "journal_mode", |row| row.get(0)))
}

#[test]
fn newer_schema_is_refused_naming_both_versions_before_anything_changes() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    {
        let connection = raw(&path);
        ok(connection.execute_batch("CREATE TABLE future (x INTEGER)"));
        ok(connection.pragma_update(None, "user_version", 99));
    }
    let before = folder_bytes(folder.path());
    for refused in [SqliteStore::open(&path), SqliteStore::open_read_only(&path)] {
        let Err(error) = refused else {
            panic!("a version 99 database was opened");
        };
        assert!(
            matches!(
                error,
                StoreError::NewerSchema {
                    found: 99,
                    supported: SCHEMA_VERSION,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("99") && message.contains(&format!(" {SCHEMA_VERSION}")),
            "{message}"
        );
    }
    assert_eq!(folder_bytes(folder.path()), before, "nothing changed");
    assert_eq!(journal_mode(&path), "delete", "not switched to WAL");
}

#[test]
fn another_applications_database_is_not_a_store_and_stays_untouched() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    ok(raw(&path).execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('x')"));
    let before = folder_bytes(folder.path());
    for refused in [SqliteStore::open(&path), SqliteStore::open_read_only(&path)] {
        assert!(
            matches!(&refused, Err(StoreError::NotAStore { reason, .. }) if reason.contains("notes")),
            "{refused:?}"
        );
    }
    assert_eq!(folder_bytes(folder.path()), before, "nothing changed");
    assert_eq!(journal_mode(&path), "delete");
}

#[test]
fn a_reader_refuses_an_empty_file_and_a_missing_one_and_creates_nothing() {
    let folder = ok(tempfile::tempdir());
    let empty = database(folder.path());
    ok(std::fs::write(&empty, b""));
    let refused = SqliteStore::open_read_only(&empty);
    assert!(
        matches!(refused, Err(StoreError::NotAStore { .. })),
        "{refused:?}"
    );
    let missing = folder.path().join("missing.db");
    let refused = SqliteStore::open_read_only(&missing);
    assert!(
        matches!(refused, Err(StoreError::Sqlite { .. })),
        "{refused:?}"
    );
    assert_eq!(
        folder_bytes(folder.path()),
        [("sessions.db".to_owned(), Vec::new())],
        "the empty file stays empty and nothing is created"
    );
}

#[test]
fn a_read_only_store_reads_without_changing_a_byte_and_refuses_writes() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    {
        let store = store_with_events(folder.path(), 3);
        ok(store.create(&header("b"), &[], Durability::Fsync));
    }
    let before = folder_bytes(folder.path());
    let store = ok(SqliteStore::open_read_only(&path));
    assert!(store.is_read_only());
    let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 3);
    assert!(ok(store.audit(true)).damage.is_empty());
    let refused = store.create(&header("c"), &[], Durability::Fsync);
    assert!(matches!(refused, Err(StoreError::Io { .. })), "{refused:?}");
    let refused = store.open_writer(&id("a"), WriterOptions::default());
    assert!(matches!(refused, Err(StoreError::Io { .. })), "{refused:?}");
    drop(store);
    let after: Vec<(String, Vec<u8>)> = folder_bytes(folder.path())
        .into_iter()
        .filter(|(name, _)| !name.ends_with("-shm") && !name.ends_with("-wal"))
        .collect();
    let before: Vec<(String, Vec<u8>)> = before
        .into_iter()
        .filter(|(name, _)| !name.ends_with("-shm") && !name.ends_with("-wal"))
        .collect();
    assert_eq!(after, before, "the database file is unchanged");
}

#[test]
fn an_immutable_read_sees_the_whole_database() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    drop(store_with_events(folder.path(), 3));
    let (connection, version) = ok(open_and_identify_read_only(&path, Access::Immutable));
    assert_eq!(version, SCHEMA_VERSION);
    let count: i64 = ok(connection.query_row("SELECT count(*) FROM events", [], |row| row.get(0)));
    assert_eq!(count, 3);
    assert!(immutable_uri(Path::new("/a b/c%?#.db")).starts_with("file:/a%20b/c%25%3F%23.db?"));
}

#[test]
fn rows_lost_from_the_end_of_a_session_are_corruption() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 3", []));
    assert_corrupt_at(store.snapshot(&id("a")), 3, "are missing");
    assert_eq!(streamed_until_corruption(&store), 2);
}

#[test]
fn rows_past_the_recorded_last_seq_are_corruption() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    ok(raw(store.path()).execute("UPDATE sessions SET last_seq = 2", []));
    assert_corrupt_at(store.snapshot(&id("a")), 3, "rows run to seq 3");
    streamed_until_corruption(&store);
}

#[test]
fn an_invalid_session_row_or_orphan_events_are_corruption_for_every_reader() {
    for damage in [
        "UPDATE sessions SET id = 'a/b' WHERE id = 'b'",
        "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
           SELECT 'gone', seq, ts, type, batch, body, crc FROM events WHERE session_id = 'a'",
    ] {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 2);
        ok(store.create(&header("b"), &[], Durability::Fsync));
        ok(raw(store.path()).execute_batch(&format!("PRAGMA foreign_keys = OFF; {damage}")));
        let ids = store.ids();
        assert!(
            matches!(&ids, Err(error) if error.class() == crate::ErrorClass::Corrupt),
            "{damage}: {ids:?}"
        );
        assert!(store.list().is_err(), "{damage}");
        let audit = ok(store.audit(true));
        assert_eq!(audit.damage.len(), 1, "{damage}: {:?}", audit.damage);
        assert!(
            audit.ids.contains(&id("a")),
            "the valid sessions stay listed"
        );
    }
}

/// Overwrites the one page of the (empty) `snapshots` table of the
/// database at `path` with bytes that make no b-tree page: damage no read
/// of a session meets, which only SQLite's check of every page finds.
fn damage_the_snapshots_page(path: &Path) {
    let connection = raw(path);
    ok(connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
    let page: i64 = ok(connection.query_row(
        "SELECT rootpage FROM sqlite_schema WHERE name = 'snapshots'",
        [],
        |row| row.get(0),
    ));
    drop(connection);
    let mut bytes = ok(std::fs::read(path));
    let start = (page.unsigned_abs() as usize - 1) * FILE_PAGE;
    bytes[start..start + FILE_PAGE].fill(7);
    ok(std::fs::write(path, bytes));
}

#[test]
fn a_database_that_fails_quick_check_is_refused_by_list() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    drop(store_with_events(folder.path(), 3));
    damage_the_snapshots_page(&path);
    let store = ok(SqliteStore::open_read_only(&path));
    // Each session reads whole: a command of one session reads it.
    assert_eq!(ok(store.ids()), [id("a")]);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 3);
    let audit = ok(store.audit(true));
    assert_eq!(audit.damage.len(), 1, "{:?}", audit.damage);
    // Beside the listing, and on its own handle in a held read.
    for held in [false, true] {
        let _held = held.then(|| ok(store.hold_read()));
        let listed = store.list();
        assert!(
            matches!(&listed, Err(error) if error.class() == crate::ErrorClass::Corrupt
                && error.to_string().contains("quick_check")),
            "held {held}: {listed:?}"
        );
    }
}

#[test]
fn sqlite_reports_of_a_damaged_file_are_corruption() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    drop(store_with_events(folder.path(), 200));
    let length = ok(std::fs::metadata(&path)).len();
    let file = ok(std::fs::OpenOptions::new().write(true).open(&path));
    ok(file.set_len(length / 2));
    drop(file);
    let store = SqliteStore::open_read_only(&path).and_then(|store| store.snapshot(&id("a")));
    assert!(
        matches!(&store, Err(error) if error.class() == crate::ErrorClass::Corrupt),
        "{store:?}"
    );
}

#[test]
fn a_lock_folder_replaced_by_a_symlink_is_refused() {
    let folder = ok(tempfile::tempdir());
    let elsewhere = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    ok(store.create(&header("a"), &[], Durability::Fsync));
    ok(std::os::unix::fs::symlink(
        elsewhere.path(),
        folder.path().join("sessions.db.locks"),
    ));
    let refused = store.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(
            &refused,
            Err(StoreError::Io {
                operation: "open lock folder",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        ok(std::fs::read_dir(elsewhere.path())).count(),
        0,
        "nothing lands there"
    );
}

/// A new database in a folder of its own, and the writer of its session
/// `a`, which has acknowledged one event.
fn a_writer_with_one_event() -> (tempfile::TempDir, PathBuf, SessionWriter) {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let store = ok(SqliteStore::open(&path));
    ok(store.create(&header("a"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    ok(writer.append(note("before"), Some(1)));
    (folder, path, writer)
}

#[test]
fn a_write_ahead_log_removed_under_a_writer_is_saved_then_the_writer_stops() {
    let (folder, path, mut writer) = a_writer_with_one_event();
    ok(std::fs::remove_file(wal_path(&path)));
    // The next commit finds the log gone: what it holds, this commit
    // included, is copied into the database file before the answer.
    let saved = writer.append(note("detected"), Some(2));
    assert_eq!(ok(saved).get(), 2);
    let refused = writer.append(note("after"), Some(3));
    assert!(
        matches!(&refused, Err(StoreError::Io { source, .. }) if source.to_string().contains("was removed")),
        "{refused:?}"
    );
    assert!(writer.is_poisoned());
    // What a kill -9 leaves: the database file alone (the removed log
    // is freed with the process).
    let survivor = folder.path().join("survivor.db");
    ok(std::fs::copy(&path, &survivor));
    let events = ok(ok(SqliteStore::open_read_only(&survivor)).snapshot(&id("a"))).events;
    assert_eq!(events.len(), 2, "every acknowledged event survives");
}

#[test]
fn a_database_replaced_or_removed_under_a_writer_acknowledges_nothing_more() {
    for removed in [false, true] {
        let (folder, path, mut writer) = a_writer_with_one_event();
        let copy = folder.path().join("copy.db");
        ok(std::fs::copy(&path, &copy));
        match removed {
            true => ok(std::fs::remove_file(&path)),
            false => ok(std::fs::rename(&copy, &path)),
        }
        let refused = writer.append(note("lost"), Some(2));
        assert!(
            matches!(&refused, Err(StoreError::Io { source, .. })
                if source.to_string().contains("database file") && source.to_string().contains("not acknowledged")),
            "{refused:?}"
        );
        assert!(writer.append(note("after"), None).is_err());
    }
}

#[test]
fn database_and_lock_files_are_private() {
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    ok(store.create(&header("a"), &[], Durability::Fsync));
    let _writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    let mode = |path: &Path| ok(std::fs::metadata(path)).permissions().mode() & 0o777;
    assert_eq!(mode(store.path()), 0o600);
    assert_eq!(mode(&store.lock_path(&id("a"))), 0o600);
    assert_eq!(mode(&folder.path().join("sessions.db.locks")), 0o700);
}

#[test]
fn wal_mode_is_on() {
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    let mode: String =
        ok(raw(store.path()).pragma_query_value(None, "journal_mode", |row| row.get(0)));
    assert_eq!(mode, "wal");
}

fn store_with_events(folder: &Path, count: u64) -> SqliteStore {
    let store = ok(SqliteStore::open(&database(folder)));
    let events: Vec<EventRecord> = (1..=count)
        .map(|seq| record(seq, "note/test", "{}"))
        .collect();
    ok(store.create(&header("a"), &events, Durability::Fsync));
    store
}

/// Streams session `a` and checks that the stream ends with
/// corruption; returns how many events came before it.
fn streamed_until_corruption(store: &SqliteStore) -> usize {
    let streamed: Vec<Result<EventRecord, StoreError>> = ok(store.events(&id("a"))).collect();
    assert!(
        matches!(streamed.last(), Some(Err(StoreError::CorruptRow { .. }))),
        "{streamed:?}"
    );
    streamed.len() - 1
}

#[test]
fn altered_body_is_corruption_naming_session_and_seq() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    ok(raw(store.path()).execute(
        "UPDATE events SET body = replace(body, '{}', '{\"x\":1}') WHERE seq = 2",
        [],
    ));
    assert_corrupt_at(store.snapshot(&id("a")), 2, "CRC mismatch");
    streamed_until_corruption(&store);
    let writer = store.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(writer, Err(StoreError::CorruptRow { .. })),
        "{writer:?}"
    );
}

/// A copy of the row at seq 1 at seq 0, which nothing writes.
const BELOW_ONE: &str = "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
     SELECT session_id, 0, ts, type, batch, body, crc FROM events WHERE seq = 1";

#[test]
fn a_row_below_seq_1_is_corruption_in_every_read() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    ok(raw(store.path()).execute(BELOW_ONE, []));
    assert_corrupt_at(
        store.snapshot(&id("a")),
        1,
        "seq 1 was due, and the row read there has seq 0 (no row may have a seq below 1)",
    );
    // A session with no events at all: its bounds name the row.
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 1);
    ok(raw(store.path()).execute("UPDATE events SET seq = -7", []));
    ok(raw(store.path()).execute("UPDATE sessions SET last_seq = 0", []));
    assert_corrupt_at(store.snapshot(&id("a")), 0, "a row at seq -7");
    let held = ok(store.hold_read());
    assert_corrupt_at(store.snapshot(&id("a")), 0, "a row at seq -7");
    drop(held);
}

#[test]
fn seq_gap_is_corruption_naming_session_and_seq() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 2", []));
    assert_corrupt_at(store.snapshot(&id("a")), 2, "not contiguous");
}

/// A column that disagrees with its row's body is named with its value
/// and the body's.
#[test]
fn columns_that_disagree_with_the_body_are_corruption() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 2);
    let connection = raw(store.path());
    ok(connection.execute("UPDATE events SET type = 'turn/start' WHERE seq = 1", []));
    assert_corrupt_at(
        store.snapshot(&id("a")),
        1,
        r#"disagree with its body: type "turn/start" (the body's "note/test")"#,
    );
    ok(connection.execute("UPDATE events SET type = 'note/test' WHERE seq = 1", []));
    ok(connection.execute("UPDATE events SET ts = 5, batch = 2 WHERE seq = 2", []));
    assert_corrupt_at(
        store.snapshot(&id("a")),
        2,
        "disagree with its body: ts 5 (the body's 1700000000102), batch 2 (the body's null)",
    );
}

/// Rewrites the text `select` reads with `edit`, its CRC (of session
/// `a`) made again, through `update` (`?1` the text, `?2` the CRC).
fn rewrite_signed(
    connection: &Connection,
    select: &str,
    update: &str,
    edit: impl Fn(&str) -> String,
) {
    let text: String = ok(connection.query_row(select, [], |row| row.get(0)));
    let edited = edit(&text);
    assert_ne!(edited, text);
    let crc = i64::from(sessionlog_schema::record_crc(&id("a"), edited.as_bytes()));
    ok(connection.execute(update, rusqlite::params![edited, crc]));
}

/// A line break between a body's tokens, its CRC made again: JSON, but
/// no JSONL line, so every read refuses it where a row would be exported
/// or migrated split in two.
#[test]
fn a_body_or_header_with_a_line_break_is_corruption() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 2);
    let connection = raw(store.path());
    rewrite_signed(
        &connection,
        "SELECT body FROM events WHERE seq = 2",
        "UPDATE events SET body = ?1, crc = ?2 WHERE seq = 2",
        |body| body.replacen(",\"ts\"", ",\n\"ts\"", 1),
    );
    assert_corrupt_at(store.snapshot(&id("a")), 2, "line break");
    streamed_until_corruption(&store);
    rewrite_signed(
        &connection,
        "SELECT header_body FROM sessions",
        "UPDATE sessions SET header_body = ?1, header_crc = ?2",
        |header| header.replacen(",\"", ",\n\"", 1),
    );
    assert_corrupt_at(store.snapshot(&id("a")), 0, "line break");
}

#[test]
fn unfinished_batch_is_corruption() {
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    let events = [
        EventRecord::new(1, 5, Some(2), "note/test", "{}"),
        EventRecord::new(2, 5, None, "note/test", "{}"),
    ];
    ok(store.create(&header("a"), &events, Durability::Fsync));
    ok(raw(store.path()).execute("DELETE FROM events WHERE seq = 2", []));
    assert_corrupt_at(store.snapshot(&id("a")), 2, "batch");
}

#[test]
fn values_sqlite_cannot_hold_are_refused_before_writing() {
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    let mut huge = header("a");
    huge.created_at = u64::MAX;
    let refused = store.create(&huge, &[], Durability::Fsync);
    assert!(
        matches!(refused, Err(StoreError::InvalidHeader(_))),
        "{refused:?}"
    );
    assert!(!ok(store.contains(&id("a"))));
}

/// Fails every commit while armed.
#[derive(Debug, Default)]
struct FailCommits {
    armed: AtomicBool,
}

impl FaultInjector for FailCommits {
    fn before(&self, point: FaultPoint, _path: &Path) -> io::Result<()> {
        if point == FaultPoint::Commit && self.armed.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected commit failure"));
        }
        Ok(())
    }
}

#[test]
fn failed_commit_poisons_the_writer_and_writes_nothing() {
    let folder = ok(tempfile::tempdir());
    let faults = Arc::new(FailCommits::default());
    let store = ok(SqliteStore::open_with_io(
        &database(folder.path()),
        Io::with_faults(faults.clone()),
    ));
    ok(store.create(&header("a"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    ok(writer.append(note("kept"), Some(1)));
    faults.armed.store(true, Ordering::SeqCst);
    let failed = writer.append(note("lost"), Some(2));
    assert!(matches!(failed, Err(StoreError::Io { .. })), "{failed:?}");
    faults.armed.store(false, Ordering::SeqCst);
    let refused = writer.append(note("after"), None);
    assert!(
        matches!(refused, Err(StoreError::Poisoned { .. })),
        "{refused:?}"
    );
    drop(writer);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
    let mut reopened = ok(store.open_writer(&id("a"), WriterOptions::default()));
    assert_eq!(ok(reopened.append(note("again"), Some(2))).get(), 2);
}

/// A group whose one commit fails: its first batch gets the failure, the
/// others an I/O error saying they may be in the log (a commit's answer can
/// be lost after it was applied), never `Poisoned`; here the injected
/// failure came before the commit, and nothing is there.
#[test]
fn every_batch_of_a_group_whose_commit_failed_is_in_doubt() {
    let folder = ok(tempfile::tempdir());
    let faults = Arc::new(FailCommits::default());
    let store = ok(SqliteStore::open_with_io(
        &database(folder.path()),
        Io::with_faults(faults.clone()),
    ));
    ok(store.create(&header("a"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    faults.armed.store(true, Ordering::SeqCst);
    let outcomes = writer.append_group(vec![
        (vec![note("one")], None),
        (vec![note("two")], None),
        (vec![note("three")], None),
    ]);
    faults.armed.store(false, Ordering::SeqCst);
    assert!(
        matches!(outcomes[0], Err(StoreError::Io { .. })),
        "{outcomes:?}"
    );
    for outcome in &outcomes[1..] {
        assert!(
            matches!(outcome, Err(StoreError::Io { source, .. }) if source.to_string().contains("may be in the log whole")),
            "{outcomes:?}"
        );
    }
    drop(writer);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 0);
}

#[test]
fn a_writer_in_another_store_handle_is_locked_out() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let first = ok(SqliteStore::open(&path));
    ok(first.create(&header("a"), &[], Durability::Fsync));
    let _writer = ok(first.open_writer(&id("a"), WriterOptions::default()));
    let second = ok(SqliteStore::open(&path));
    let locked = second.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(locked, Err(StoreError::Locked { .. })),
        "{locked:?}"
    );
}

#[test]
fn sixty_four_threads_appending_keep_every_acknowledged_event_exactly_once() {
    const THREADS: usize = 64;
    const EVENTS: usize = 40;
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    for thread in 0..THREADS {
        ok(store.create(&header(&format!("s{thread}")), &[], Durability::Fsync));
    }
    let start = Barrier::new(THREADS);
    let acknowledged: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (store, start) = (&store, &start);
                scope.spawn(move || {
                    let session = id(&format!("s{thread}"));
                    // Past the barrier before a failed open panics, so that
                    // no other thread waits at it for ever.
                    let opened = store.open_writer(&session, WriterOptions::default());
                    start.wait();
                    let mut writer = ok(opened);
                    (0..EVENTS)
                        .map(|n| ok(writer.append(note(&format!("{thread}/{n}")), None)).get())
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| panic!("an appender panicked"))
            })
            .collect()
    });
    for (thread, seqs) in acknowledged.iter().enumerate() {
        assert_eq!(*seqs, (1..=EVENTS as u64).collect::<Vec<_>>());
        let events = ok(store.snapshot(&id(&format!("s{thread}")))).events;
        assert_eq!(events.len(), EVENTS, "session s{thread}");
        for (n, record) in events.iter().enumerate() {
            assert_eq!(record.seq(), n as u64 + 1);
            let expected = format!("{{\"text\":\"{thread}/{n}\"}}");
            assert_eq!(record.data(), expected);
        }
    }
}

/// The events a stream of session `a` gives before its last item, and
/// the reason of the corruption that item is (`None`: anything else).
fn stream_verdict(store: &SqliteStore) -> (usize, Option<String>) {
    let streamed: Vec<Result<EventRecord, StoreError>> = ok(store.events(&id("a"))).collect();
    let reason = match streamed.last() {
        Some(Err(StoreError::CorruptRow { seq, reason, .. })) => {
            Some(format!("seq {seq}: {reason}"))
        }
        _ => None,
    };
    (streamed.len().saturating_sub(1), reason)
}

#[test]
fn a_held_read_finds_the_damage_a_read_without_it_finds() {
    let damages = [
        "DELETE FROM events WHERE seq = 3",
        "DELETE FROM events WHERE seq = 2",
        "UPDATE sessions SET last_seq = 2",
        "UPDATE sessions SET last_seq = 1",
        "UPDATE sessions SET last_seq = 4",
        "UPDATE events SET body = replace(body, '{}', '{\"x\":1}') WHERE seq = 3",
        BELOW_ONE,
    ];
    for damage in damages {
        let folder = ok(tempfile::tempdir());
        let store = store_with_events(folder.path(), 3);
        ok(raw(store.path()).execute(damage, []));
        let apart = stream_verdict(&store);
        let held = ok(store.hold_read());
        let in_held_read = stream_verdict(&store);
        drop(held);
        assert!(apart.1.is_some(), "{damage}: {apart:?}");
        assert_eq!(in_held_read, apart, "{damage}");
    }
}

#[test]
fn a_held_read_sees_one_moment_of_the_database_until_dropped() {
    let folder = ok(tempfile::tempdir());
    let store = store_with_events(folder.path(), 3);
    let held = ok(store.hold_read());
    // Another session and an append, committed by the committer's own
    // connection while the read is held.
    ok(store.create(&header("b"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    assert_eq!(ok(writer.append(note("later"), Some(4))).get(), 4);
    let nested = ok(store.hold_read());
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 3);
    assert_eq!(ok(store.events(&id("a"))).count(), 3);
    assert_eq!(ok(store.audit(false)).ids, [id("a")]);
    drop(nested);
    assert_eq!(
        ok(store.snapshot(&id("a"))).events.len(),
        3,
        "the outer read still holds"
    );
    drop(held);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 4);
    assert_eq!(ok(store.audit(false)).ids, [id("a"), id("b")]);
}

/// What a stream of session `name` gives: its header body, the seqs of
/// its events, and the error it ends with.
fn streamed(store: &SqliteStore, name: &str) -> (String, Vec<u64>, Option<String>) {
    match store.header_and_events_from(&id(name), 1) {
        Err(error) => (String::new(), Vec::new(), Some(error.to_string())),
        Ok((decoded, events)) => {
            let mut seqs = Vec::new();
            let mut error = None;
            for event in events {
                match event {
                    Ok(record) => seqs.push(record.seq()),
                    Err(found) => error = Some(found.to_string()),
                }
            }
            (decoded.body, seqs, error)
        }
    }
}

#[test]
fn sessions_read_ahead_in_a_held_read_are_those_read_one_by_one_in_any_order() {
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    // More sessions than a chunk of session rows, one with more rows than
    // two chunks of event rows, sessions without events.
    let names: Vec<String> = (0..300).map(|n| format!("s{n:03}")).collect();
    let sessions = names
        .iter()
        .enumerate()
        .map(|(n, name)| {
            let count = if n == 150 { 1_200 } else { n as u64 % 7 };
            let events = (1..=count)
                .map(|seq| record(seq, "note/test", "{}"))
                .collect();
            (header(name), events)
        })
        .collect();
    ok(store.create_many(sessions, Durability::Buffered));
    // Damage the read ahead must find as the statements do: a lost row, a
    // row past the recorded last seq, events without a session row.
    let connection = raw(store.path());
    ok(connection.execute_batch("PRAGMA foreign_keys = OFF"));
    ok(connection.execute(
        "DELETE FROM events WHERE session_id = 's200' AND seq = 3",
        [],
    ));
    ok(connection.execute("UPDATE sessions SET last_seq = 1 WHERE id = 's201'", []));
    ok(connection.execute(
        "DELETE FROM events WHERE session_id = 's150' AND seq = 700",
        [],
    ));
    ok(connection.execute("DELETE FROM sessions WHERE id = 's202'", []));
    let apart: Vec<_> = names.iter().map(|name| streamed(&store, name)).collect();
    assert!(apart[200].2.is_some() && apart[201].2.is_some() && apart[150].2.is_some());
    let at_700 = apart[150].2.as_deref().unwrap_or_default();
    assert!(at_700.contains("s150 is corrupt at seq 700"), "{at_700}");
    let orders: [Vec<usize>; 4] = [
        (0..300).collect(),
        (0..300).rev().collect(),
        (0..300).flat_map(|n| [n, n]).collect(),
        (0..300).map(|n| (n * 97) % 300).collect(),
    ];
    for order in orders {
        let held = ok(store.hold_read());
        for &n in &order {
            assert_eq!(streamed(&store, &names[n]), apart[n], "{}", names[n]);
        }
        drop(held);
    }
}

#[test]
fn a_long_session_reads_in_order_across_its_pages_whole_or_to_its_damage() {
    // Past its first page a read takes the pages after it from a thread
    // of their own; what it gives, and where it stops, are a page at a
    // time's, in a held read (which reads ahead in key order) or not.
    let page = PAGE_ROWS as u64;
    let expected = crate::sql::long_session_events(page);
    let mut cases: Vec<(String, Option<(u64, &str)>)> = vec![(String::new(), None)];
    for (damage, seq, reason) in crate::sql::long_session_damage(page) {
        cases.push((damage, Some((seq, reason))));
    }
    for (damage, found) in cases {
        let folder = ok(tempfile::tempdir());
        let store = ok(SqliteStore::open(&database(folder.path())));
        ok(store.create(&header("a"), &expected, Durability::Buffered));
        if !damage.is_empty() {
            ok(raw(store.path()).execute(&damage, []));
        }
        let read = || ok(store.events(&id("a")));
        crate::sql::assert_read_in_order(read, &expected, page, found);
        let held = ok(store.hold_read());
        crate::sql::assert_read_in_order(read, &expected, page, found);
        drop(held);
        if let Some((seq, reason)) = found {
            assert_corrupt_at(store.snapshot(&id("a")), seq, reason);
        }
    }
}

/// SQLite's page size for the databases the tests make (the default).
const FILE_PAGE: usize = 4096;

/// Session `a` of `count` events of some 200 bytes, in batches of `batch`
/// records, written out to the database file (no write-ahead log left);
/// then the leaf page of `events` that holds event `at` zeroed, as a
/// damaged disk leaves it. Gives the first seq that page held: the first
/// row a read cannot read.
fn zero_the_page_of_event(path: &Path, count: u64, batch: u64, at: u64) -> u64 {
    let marker = |seq: u64| format!("mk-{seq}-");
    let events: Vec<EventRecord> = (1..=count)
        .map(|seq| {
            let size = batch.min(count - seq + 1);
            let size = ((seq - 1) % batch == 0 && size > 1).then_some(size);
            let data = format!(r#"{{"text":"{}{}"}}"#, marker(seq), "p".repeat(180));
            EventRecord::new(seq, 1_700_000_000_000 + seq, size, "note/test", &data)
        })
        .collect();
    let store = ok(SqliteStore::open(path));
    ok(store.create(&header("a"), &events, Durability::Fsync));
    drop(store);
    ok(raw(path).execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
    let mut bytes = ok(std::fs::read(path));
    let holds = |page: &[u8], seq: u64| {
        let marker = marker(seq);
        page.windows(marker.len())
            .any(|window| window == marker.as_bytes())
    };
    // A leaf of a WITHOUT ROWID table is an index b-tree leaf (type 10);
    // its parent holds copies of some rows too.
    let page = (1..bytes.len() / FILE_PAGE)
        .find(|&page| {
            let page = &bytes[page * FILE_PAGE..(page + 1) * FILE_PAGE];
            page[0] == 10 && holds(page, at)
        })
        .unwrap_or_else(|| panic!("no leaf page holds event {at}"));
    let leaf = page * FILE_PAGE..(page + 1) * FILE_PAGE;
    let first = (1..=at)
        .find(|&seq| holds(&bytes[leaf.clone()], seq))
        .unwrap_or(at);
    bytes[leaf].fill(0);
    ok(std::fs::write(path, bytes));
    first
}

/// What a read of session `a` gives both ways (records, and bodies lent):
/// how many events, and the seq and reason of the corruption it ends with
/// (`None`: it ends with no error, or another one).
fn read_both_ways(store: &SqliteStore) -> [(usize, Option<(u64, String)>); 2] {
    let verdict = |error: Option<StoreError>| match error {
        Some(StoreError::CorruptRow { seq, reason, .. }) => Some((seq, reason)),
        _ => None,
    };
    let mut records = (0, None);
    for event in ok(store.events(&id("a"))) {
        match event {
            Ok(_) => records.0 += 1,
            Err(error) => records.1 = verdict(Some(error)),
        }
    }
    let (lent, ended) = crate::sql::bodies_lent(ok(store.events(&id("a"))));
    [records, (lent, verdict(ended))]
}

#[test]
fn an_unreadable_page_gives_out_the_whole_units_before_it_then_the_damage() {
    // The rows before the damaged page are given out, a batch the damage
    // cuts is held back whole, and the read ends with the corruption at
    // the first row it cannot read: on the first page of rows a read
    // takes, and on one a thread reads ahead, in a held read or not.
    let mut cut_a_batch = false;
    for (count, at) in [(300, 150), (1_300, 900)] {
        for batch in [1, 3, 7] {
            let folder = ok(tempfile::tempdir());
            let path = database(folder.path());
            let first_lost = zero_the_page_of_event(&path, count, batch, at);
            assert!(first_lost > 1, "{count} events, batches of {batch}");
            let given = (first_lost - 1) / batch * batch;
            cut_a_batch |= given < first_lost - 1;
            let store = ok(SqliteStore::open_read_only(&path));
            let expected = (given as usize, Some(first_lost));
            for how in ["apart", "in a held read"] {
                let held = (how != "apart").then(|| ok(store.hold_read()));
                for (read, (events, ended)) in read_both_ways(&store).into_iter().enumerate() {
                    let case = format!("{count} events, batches of {batch}, {how}, way {read}");
                    let (seq, reason) = ended.unwrap_or_else(|| panic!("{case}: no corruption"));
                    assert_eq!((events, Some(seq)), expected, "{case}: {reason}");
                    assert!(
                        reason.contains("the row cannot be read"),
                        "{case}: {reason}"
                    );
                }
                drop(held);
            }
            assert_corrupt_at(store.snapshot(&id("a")), first_lost, "cannot be read");
        }
    }
    assert!(cut_a_batch, "no case had the damage cut a batch");
}

#[test]
fn a_long_read_dropped_halfway_leaves_the_store_to_its_writer_and_readers() {
    let page = PAGE_ROWS as u64;
    let expected = crate::sql::long_session_events(page);
    let folder = ok(tempfile::tempdir());
    let store = ok(SqliteStore::open(&database(folder.path())));
    ok(store.create(&header("a"), &expected, Durability::Buffered));
    for taken in [1, page as usize + 3, 2 * page as usize] {
        let mut read = ok(store.events(&id("a")));
        for _ in 0..taken {
            assert!(matches!(read.next(), Some(Ok(_))));
        }
        drop(read);
        let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
        ok(writer.append(note("after a read dropped"), None));
        drop(writer);
    }
    let events = ok(store.snapshot(&id("a"))).events;
    assert_eq!(events.len(), expected.len() + 3);
}

#[test]
fn a_fork_by_reference_of_a_long_parent_reads_its_rows_then_its_own() {
    let page = PAGE_ROWS as u64;
    let seeded = crate::sql::long_session_events(page);
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let store = ok(crate::Store::create(&path));
    ok(store.create_session(&header("p"), &seeded, Durability::Buffered));
    let defaults = sessionlog_projections::Defaults::default();
    ok(store.fork(&id("p"), &id("a"), Some("go on"), &defaults));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    let own: Vec<crate::NewEvent> = (0..page + 7).map(|n| note(&format!("own {n}"))).collect();
    ok(writer.append_batch(own, None));
    drop(writer);
    let sqlite = ok(SqliteStore::open(&path));
    // No rows of its own for the seeded events: they are the parent's.
    let rows: i64 = ok(raw(&path).query_row(
        "SELECT count(*) FROM events WHERE session_id = 'a'",
        [],
        |row| row.get(0),
    ));
    assert_eq!(rows.unsigned_abs(), page + 8);
    let whole = ok(sqlite.snapshot(&id("a"))).events;
    assert_eq!(whole.len() as u64, seeded.len() as u64 + page + 8);
    let mut expected = seeded.clone();
    expected.extend_from_slice(&whole[seeded.len()..]);
    let read = || ok(sqlite.events(&id("a")));
    crate::sql::assert_read_in_order(read, &expected, page, None);
    // Damage to a row of the parent's is the child's corruption there.
    let at = 2 * page + 5;
    ok(raw(&path).execute(
        "UPDATE events SET body = replace(body, '\"n\":', '\"m\":') WHERE session_id = 'p' AND seq = ?1",
        [at.cast_signed()],
    ));
    crate::sql::assert_read_in_order(read, &expected, page, Some((at, "CRC mismatch")));
}

/// A buffered commit must not turn off the syncs of a checkpoint: SQLite
/// syncs the database file after copying the log into it only at
/// `synchronous` NORMAL or above, and a checkpoint run at OFF (the one of
/// a store closed after its state snapshot, a buffered commit) leaves
/// earlier durable commits unsynced in the file while it deletes the log
/// that held them. `power_loss::sqlite_checkpoint_syncs_the_database_before_it_drops_the_log`
/// watches the system calls of a real close.
#[test]
fn a_buffered_commit_keeps_the_checkpoint_syncs() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let connection = raw(&path);
    let mut level = None;
    for durability in [
        Durability::Buffered,
        Durability::Fsync,
        Durability::Buffered,
    ] {
        ok(super::committer::set_synchronous(
            &connection,
            &path,
            &mut level,
            durability,
        ));
        let synchronous: i64 = ok(connection.query_row("PRAGMA synchronous", [], |row| row.get(0)));
        let least = match durability {
            Durability::Fsync => 2,
            Durability::Buffered => 1,
        };
        assert!(
            synchronous >= least,
            "{durability:?}: synchronous {synchronous}, below {least}"
        );
    }
}

/// A database with a second name is refused to a writing store by either
/// name (each name would have its own write-ahead log and locks); reading
/// it stays possible.
#[test]
fn a_database_with_two_names_is_refused_to_writers() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let store = ok(SqliteStore::open(&path));
    ok(store.create(&header("s"), &[], Durability::Fsync));
    drop(store);
    let other = folder.path().join("other.db");
    ok(std::fs::hard_link(&path, &other));
    for name in [&path, &other] {
        match SqliteStore::open(name) {
            Err(error) => {
                let text = error.to_string();
                assert!(text.contains("2 names (hard links)"), "{text}");
                assert!(text.contains(&name.display().to_string()), "{text}");
            }
            Ok(_) => panic!("{} opened for writing with two names", name.display()),
        }
        let reader = ok(SqliteStore::open_read_only(name));
        assert!(ok(reader.contains(&id("s"))));
    }
    ok(std::fs::remove_file(&other));
    ok(SqliteStore::open(&path));
}

/// A state snapshot is copied from the write-ahead log into the database
/// file once kept, so that the next open reads it from the file.
#[test]
fn a_kept_snapshot_is_copied_into_the_database_file() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let store = ok(SqliteStore::open(&path));
    ok(store.create(&header("a"), &[], Durability::Buffered));
    let options = WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        ..WriterOptions::default()
    };
    let mut writer = ok(store.open_writer(&id("a"), options));
    for n in 0..1_100 {
        ok(writer.append(note(&format!("note {n}")), None));
    }
    // The writer closes past 1,024 events since its last snapshot: it
    // keeps one at seq 1,100. The next write queues behind its checkpoint.
    drop(writer);
    ok(store.create(&header("b"), &[], Durability::Buffered));
    // An immutable read sees the database file alone, not the log: a few
    // dozen pages of events and a snapshot stay far below SQLite's own
    // checkpoint threshold.
    let file = ok(super::schema::open_connection(&path, Access::Immutable));
    let kept: Option<i64> = ok(file
        .query_row(
            "SELECT seq FROM snapshots WHERE session_id = 'a'",
            [],
            |row| row.get(0),
        )
        .optional());
    assert_eq!(kept, Some(1_100), "the snapshot is in the database file");
    drop(file);
    let decoded = ok(store.decoded_header(&id("a")));
    let folded = ok(store.fold_session(&id("a"), decoded, SnapshotRead::Paged));
    assert_eq!(folded.resumed.map(|(anchor, _)| anchor.seq), Some(1_100));
    assert_eq!(folded.state.seq(), 1_100);
}

/// Processes creating sessions at once in a database that does not exist
/// yet all succeed: none takes a store whose schema another is writing
/// for a foreign database, nor fails to switch it to WAL while another
/// holds it.
#[test]
fn creations_at_once_in_a_new_database_all_succeed() {
    for round in 0..12 {
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = folder.path().join(format!("new-{round}.db"));
        let outcomes: Vec<Result<(), StoreError>> = std::thread::scope(|scope| {
            let creators: Vec<_> = (0..6)
                .map(|n| {
                    let path = &path;
                    scope.spawn(move || {
                        let store = crate::Store::create(path)?;
                        let header = SessionHeader::root(
                            sessionlog_schema::SessionId::parse(&format!("s{n}"))
                                .unwrap_or_else(|e| panic!("{e}")),
                            1,
                            "/work".into(),
                        );
                        store.create_session(&header, &[], crate::Durability::Fsync)
                    })
                })
                .collect();
            creators
                .into_iter()
                .map(|creator| {
                    creator
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        for outcome in &outcomes {
            assert!(outcome.is_ok(), "round {round}: {outcome:?}");
        }
    }
}

/// A writer that keeps no events, so resumes from the snapshot.
fn resuming_options() -> WriterOptions {
    WriterOptions {
        durability: Durability::Buffered,
        keep_snapshot: false,
        ..WriterOptions::default()
    }
}

/// A store holding session `a` of `calls` calls (settled when `settled`),
/// whose writer closed leaving a snapshot; and how many pages it has.
fn store_of_calls(folder: &Path, settled: bool) -> (SqliteStore, i64) {
    let store = ok(SqliteStore::open(&database(folder)));
    ok(store.create(&header("a"), &[], Durability::Buffered));
    let mut writer = ok(store.open_writer(&id("a"), resuming_options()));
    for chunk in events_of_calls(3000, settled).chunks(500) {
        ok(writer.append_batch(chunk.to_vec(), None));
    }
    drop(writer);
    let pages: i64 = ok(raw(&database(folder)).query_row(
        "SELECT count(*) FROM snapshot_pages WHERE session_id = 'a'",
        [],
        |row| row.get(0),
    ));
    assert!(pages >= 4, "pages: {pages}");
    (store, pages)
}

/// A writer reads its snapshot's pages, each a row of `snapshot_pages`,
/// as its lookups need them; when a page changes under it (its CRC no
/// longer matching), it checks the append again against the session
/// folded anew, and the verdict is the log's.
#[test]
fn a_writer_reads_its_snapshot_page_by_page_and_folds_again_when_a_page_fails() {
    let folder = ok(tempfile::tempdir());
    let (store, _) = store_of_calls(folder.path(), true);
    let connection = raw(&database(folder.path()));
    let options = resuming_options;
    let (call, settle) = (tool_start, tool_settle);

    let mut writer = ok(store.open_writer(&id("a"), options()));
    assert!(writer.state().reads_snapshot_pages());
    assert!(matches!(
        writer.append(call(1234), None),
        Err(StoreError::Rule { .. })
    ));
    assert!(!writer.state().snapshot_unreadable());
    drop(writer);

    let mut writer = ok(store.open_writer(&id("a"), options()));
    assert!(writer.state().reads_snapshot_pages());
    // Every page's bytes flipped, their lengths kept.
    ok(connection.execute_batch(
        "UPDATE snapshot_pages SET bytes = zeroblob(length(bytes)) WHERE session_id = 'a'",
    ));
    assert!(matches!(
        writer.append(call(1234), None),
        Err(StoreError::Rule { .. })
    ));
    assert!(
        !writer.state().reads_snapshot_pages(),
        "folded again, whole"
    );
    assert!(matches!(
        writer.append(settle(42), None),
        Err(StoreError::Rule { .. })
    ));
    assert_eq!(ok(writer.append(call(9999), None)).get(), 6003);
    assert_eq!(
        writer.state().call("c2999").map(|call| call.settled),
        Some(true)
    );
    drop(writer);
    // A page missing is a page that fails too.
    ok(connection.execute_batch("DELETE FROM snapshot_pages WHERE page = 3"));
    let mut writer = ok(store.open_writer(&id("a"), options()));
    assert!(matches!(
        writer.append(call(1234), None),
        Err(StoreError::Rule { .. })
    ));
    assert_eq!(writer.next_seq(), 6004);
}

/// A row after the snapshot that a failed page makes look rule-breaking
/// (the settle of a call started before it, on that page) does not refuse
/// the session: the open folds again, the snapshot read whole.
#[test]
fn a_row_after_the_snapshot_that_a_failed_page_makes_look_rule_breaking_does_not_refuse_the_open() {
    let folder = ok(tempfile::tempdir());
    let (store, pages) = store_of_calls(folder.path(), false);
    let options = resuming_options;
    // After the snapshot: the settle of a call the snapshot holds.
    let mut writer = ok(store.open_writer(&id("a"), options()));
    ok(writer.append(tool_settle(1500), None));
    drop(writer);
    // Every page but the first and the last (which the decode reads)
    // zeroed: the settle's lookup lands on one of them.
    let connection = raw(&database(folder.path()));
    ok(connection.execute(
        "UPDATE snapshot_pages SET bytes = zeroblob(length(bytes))
          WHERE session_id = 'a' AND page > 0 AND page < ?1",
        [pages - 1],
    ));
    let mut writer = ok(store.open_writer(&id("a"), options()));
    assert!(
        !writer.state().reads_snapshot_pages(),
        "folded again, whole"
    );
    assert_eq!(
        writer.state().call("c1500").map(|call| call.settled),
        Some(true)
    );
    assert!(matches!(
        writer.append(tool_settle(1500), None),
        Err(StoreError::Rule { .. })
    ));
}

/// The seq of session `a`'s snapshot row, if it has one.
fn snapshot_seq_of(path: &Path) -> Option<i64> {
    ok(raw(path)
        .query_row(
            "SELECT seq FROM snapshots WHERE session_id = 'a'",
            [],
            |row| row.get(0),
        )
        .optional())
}

/// A page that fails while the writer encodes its next snapshot (the rows
/// changed under it, and no lookup met them before) is not written into a
/// snapshot whose CRCs match, as rows that are not there: the log is
/// folded again first, and the snapshot kept is the log's.
#[test]
fn a_page_that_fails_as_the_next_snapshot_is_encoded_is_not_kept_in_it() {
    let folder = ok(tempfile::tempdir());
    let path = database(folder.path());
    let (store, _) = store_of_calls(folder.path(), false);
    assert_eq!(snapshot_seq_of(&path), Some(3002));
    let mut writer = ok(store.open_writer(&id("a"), resuming_options()));
    assert!(writer.state().reads_snapshot_pages());
    ok(raw(&path).execute_batch(
        "UPDATE snapshot_pages SET bytes = zeroblob(length(bytes)) WHERE session_id = 'a'",
    ));
    // Appends that look nothing up, then the close takes a snapshot (1,100
    // events past the last).
    for chunk in 0..11 {
        let events = (0..100).map(|n| note(&format!("{chunk}.{n}"))).collect();
        ok(writer.append_batch(events, None));
    }
    assert!(
        !writer.state().snapshot_unreadable(),
        "no lookup met a page"
    );
    drop(writer);
    assert_eq!(snapshot_seq_of(&path), Some(4102));
    let mut writer = ok(store.open_writer(&id("a"), resuming_options()));
    assert!(writer.state().call("c0100").is_some());
    ok(writer.append(tool_settle(100), None));
    drop(writer);
    assert!(ok(store.current_state(&id("a"))).call("c0100").is_some());
}

/// The reader connection's lock is never taken twice by one thread: a
/// writer's page reads inside a held read and beside a stream of the
/// session, with streams and whole reads on other threads, finish.
#[test]
fn page_reads_beside_held_reads_and_streams_never_hang() {
    let folder = ok(tempfile::tempdir());
    let (store, _) = store_of_calls(folder.path(), false);
    let (done, finished) = std::sync::mpsc::channel();
    let worker = {
        let store = store.clone();
        std::thread::spawn(move || {
            let held = ok(store.hold_read());
            let mut writer = ok(store.open_writer(&id("a"), resuming_options()));
            assert!(writer.state().reads_snapshot_pages());
            let mut events = ok(store.events(&id("a")));
            let _ = events.next();
            for n in (0..3000).step_by(97) {
                assert!(matches!(
                    writer.append(tool_start(n), None),
                    Err(StoreError::Rule { .. })
                ));
                let _ = events.next();
            }
            drop(held);
            let streams: Vec<_> = (0..4)
                .map(|_| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        for _ in 0..3 {
                            assert!(ok(store.events(&id("a"))).count() >= 3002);
                            ok(store.current_state(&id("a")));
                        }
                    })
                })
                .collect();
            for n in 0..200 {
                ok(writer.append(tool_settle(n), None));
            }
            for stream in streams {
                stream
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            }
            drop(writer);
            let _ = done.send(());
        })
    };
    assert!(
        finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_ok(),
        "page reads beside held reads and streams hung"
    );
    worker
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}
