//! The PostgreSQL engine against the test server: schema versions and the
//! v1 fixture, damage found by readers, locking across store handles,
//! fencing, notifications and concurrent appenders. Each test works in a
//! schema of its own (`postgres_store`), so they run in parallel.

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use super::*;
use crate::sql::assert_corrupt_at;
use crate::store::tests::{header, id, note, ok, postgres_store, record, PostgresSchema};
use crate::Store;

pub(super) fn engine(schema: &PostgresSchema) -> &PostgresStore {
    match &schema.store {
        Store::Postgres(store) => store,
        other => panic!("not a PostgreSQL store: {other:?}"),
    }
}

/// Runs `sql` in the test's schema, as something other than sessionlog
/// would (damage, a newer version).
pub(super) fn execute(schema: &PostgresSchema, sql: &str) {
    let mut client = ok(engine(schema).connect());
    ok(client.batch_execute(sql));
}

/// The sessions the v1 fixture holds: a root with a batch and a child.
fn fill_v1_fixture(store: &PostgresStore) {
    let events = [
        record(1, "approval/policy", r#"{"policy":"never"}"#),
        record(2, "turn/start", r#"{"turnId":"t1"}"#),
        EventRecord::new(3, 1_700_000_000_103, Some(2), "note/test", r#"{"n":3}"#),
        record(4, "note/test", r#"{"n":4,"text":"é ☃ 'quoted'"}"#),
    ];
    ok(store.create_session(&header("root"), &events, Durability::Fsync));
    let mut child = header("child");
    child.parent_session = Some(id("root"));
    child.seed_length = 2;
    child.delegation_depth = 1;
    child.approval_policy = Some(sessionlog_schema::ApprovalPolicy::Never);
    ok(store.create_session(&child, &events[..2], Durability::Fsync));
}

/// The fixture of schema `version`: its tables as that version made them,
/// then the rows every fixture holds.
fn fixture_path(version: i64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/postgres/v{version}.sql"))
}

/// The versions before the current one, each with a fixture.
const OLDER_VERSIONS: std::ops::Range<i64> = 1..POSTGRES_SCHEMA_VERSION;

/// Every row of both tables as an `INSERT` statement, in key order.
fn dump_rows(schema: &PostgresSchema) -> String {
    let mut client = ok(engine(schema).connect());
    let mut text = String::new();
    for sql in [
        "SELECT format('INSERT INTO sessions VALUES (%L, %s, %L, %L, %s, %s, %L, %L, %L, %s, %s);',
            id, created_at, cwd, parent_session, seed_length, delegation_depth, sandbox_mode,
            approval_policy, header_body, header_crc, last_seq) FROM sessions ORDER BY id",
        "SELECT format('INSERT INTO events VALUES (%L, %s, %s, %L, %L, %L, %s);',
            session_id, seq, ts, type, batch, body, crc) FROM events ORDER BY session_id, seq",
    ] {
        for row in ok(client.query(sql, &[])) {
            text.push_str(&ok(row.try_get::<_, String>(0)));
            text.push('\n');
        }
    }
    text
}

/// The rows of the fixture of `version`: its lines after the `-- rows`
/// marker.
fn fixture_rows(version: i64) -> String {
    let fixture = ok(std::fs::read_to_string(fixture_path(version)));
    let (_, rows) = fixture
        .split_once("-- rows\n")
        .unwrap_or_else(|| panic!("the v{version} fixture has no `-- rows` line"));
    rows.to_owned()
}

#[test]
fn every_fixture_holds_the_rows_the_generator_writes() {
    let Some(schema) = postgres_store() else {
        return;
    };
    fill_v1_fixture(engine(&schema));
    let generated = dump_rows(&schema);
    for version in OLDER_VERSIONS {
        if std::env::var_os("SESSIONLOG_WRITE_FIXTURES").is_some() {
            let fixture = ok(std::fs::read_to_string(fixture_path(version)));
            let (head, _) = fixture.split_once("-- rows\n").unwrap_or((&fixture, ""));
            ok(std::fs::write(
                fixture_path(version),
                format!("{head}-- rows\n{generated}"),
            ));
        }
        assert_eq!(fixture_rows(version), generated, "v{version}.sql");
    }
}

#[test]
fn v1_fixture_opens_reads_and_accepts_appends() {
    check_fixture_upgrade(1);
}

#[test]
fn v2_fixture_opens_reads_and_accepts_appends() {
    check_fixture_upgrade(2);
}

#[test]
fn v3_fixture_opens_reads_and_accepts_appends() {
    check_fixture_upgrade(3);
}

/// Loads the fixture of `version` into an empty schema, checks that a
/// read-only reader reads it without changing it, and that a writer
/// brings it to the current version and appends.
fn check_fixture_upgrade(version: i64) {
    let Some(schema) = postgres_store() else {
        return;
    };
    execute(
        &schema,
        "DROP TABLE snapshots; DROP TABLE events; DROP TABLE sessions; DROP TABLE schema_version;
         DROP FUNCTION keep_sessions_with_events();",
    );
    execute(&schema, &ok(std::fs::read_to_string(fixture_path(version))));
    if version >= 3 {
        // From version 3 the child can be a fork by reference: its two
        // seeded events are the root's first two rows (the same bodies).
        execute(
            &schema,
            "DELETE FROM events WHERE session_id = 'child';
             UPDATE sessions SET seed_source = 'root' WHERE id = 'child';",
        );
    }
    // A read-only reader of the old schema creates nothing and, without a
    // snapshots table (before version 3), folds every row.
    let reader = ok(PostgresStore::open_read_only(Path::new(&schema.url)));
    assert_eq!(ok(reader.current_state(&id("root"))).seq(), 4);
    let child = ok(reader.snapshot(&id("child")));
    assert_eq!(child.events.len(), 2, "the reader reads the child whole");
    assert_eq!(child.events[1].data(), r#"{"turnId":"t1"}"#);
    drop(reader);
    let mut client = ok(engine(&schema).connect());
    let snapshots = has_snapshots_table(&mut client);
    assert_eq!(
        snapshots,
        version >= 3,
        "what the reader found is what it left"
    );
    assert_eq!(
        events_foreign_keys(&mut client),
        1,
        "the reader altered nothing"
    );
    let store = ok(PostgresStore::open(Path::new(&schema.url)));
    let ids: Vec<String> = ok(store.ids()).iter().map(ToString::to_string).collect();
    assert_eq!(ids, ["child", "root"]);
    let root = ok(store.snapshot(&id("root")));
    assert_eq!(root.events.len(), 4);
    assert_eq!(root.events[2].batch(), Some(2));
    assert_eq!(ok(store.snapshot(&id("child"))).header.seed_length, 2);
    let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
    assert_eq!(ok(writer.append(note("new"), Some(5))).get(), 5);
    let mut client = ok(store.connect());
    let version: i32 =
        ok(ok(client.query_one("SELECT version FROM schema_version", &[])).try_get(0));
    assert_eq!(
        i64::from(version),
        POSTGRES_SCHEMA_VERSION,
        "the writer upgraded it"
    );
    let options: Option<Vec<String>> = ok(ok(client.query_one(
        "SELECT reloptions FROM pg_class WHERE oid = 'sessions'::regclass",
        &[],
    ))
    .try_get(0));
    assert_eq!(options, Some(vec!["fillfactor=10".to_owned()]));
    let snapshots = has_snapshots_table(&mut client);
    assert!(snapshots, "the upgrade added the snapshots table");
    assert_eq!(
        events_foreign_keys(&mut client),
        0,
        "the upgrade dropped the key"
    );
    assert_eq!(ok(store.current_state(&id("root"))).seq(), 5);
    assert_session_rows_with_events_stay(&schema, "root");
}

/// Whether the schema has the snapshots table.
fn has_snapshots_table(client: &mut postgres::Client) -> bool {
    let row = client.query_one("SELECT to_regclass('snapshots') IS NOT NULL", &[]);
    ok(ok(row).try_get(0))
}

/// How many foreign keys `events` has.
fn events_foreign_keys(client: &mut postgres::Client) -> i64 {
    let row = client.query_one(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'events'::regclass AND contype = 'f'",
        &[],
    );
    ok(ok(row).try_get(0))
}

/// Removing the row of `session`, which has events, is refused, as the
/// foreign key of the schemas before version 4 refused it, from a
/// connection whatever its `search_path`.
fn assert_session_rows_with_events_stay(schema: &PostgresSchema, session: &str) {
    let mut client = ok(engine(schema).connect());
    let events: i64 = ok(ok(client.query_one(
        "SELECT count(*) FROM events WHERE session_id = $1",
        &[&session],
    ))
    .try_get(0));
    assert!(events > 0, "session {session} has no events to keep");
    let qualified = format!(
        "{}.sessions",
        engine(schema).shared.location.quoted_schema()
    );
    ok(client.batch_execute("SET search_path TO public"));
    let Err(error) = client.execute(
        &format!("DELETE FROM {qualified} WHERE id = $1"),
        &[&session],
    ) else {
        panic!("the row of session {session} was removed with its events left");
    };
    let Some(refused) = error.as_db_error() else {
        panic!("not the server's refusal: {error:?}");
    };
    assert_eq!(refused.code().code(), "23503", "{refused:?}");
    assert!(refused.message().contains(session), "{refused:?}");
}

#[test]
fn an_empty_schema_is_created_at_the_current_version_and_newer_is_refused() {
    let Some(schema) = postgres_store() else {
        return;
    };
    assert_eq!(
        statements::SCHEMA_STEPS.len() as i64,
        POSTGRES_SCHEMA_VERSION
    );
    let mut client = ok(engine(&schema).connect());
    let version: i32 =
        ok(ok(client.query_one("SELECT version FROM schema_version", &[])).try_get(0));
    assert_eq!(i64::from(version), POSTGRES_SCHEMA_VERSION);
    execute(&schema, "UPDATE schema_version SET version = 99");
    for opened in [
        PostgresStore::open(Path::new(&schema.url)),
        PostgresStore::create(Path::new(&schema.url)),
    ] {
        let Err(error) = opened else {
            panic!("a version 99 schema was opened");
        };
        assert!(
            matches!(
                error,
                StoreError::NewerSchema {
                    found: 99,
                    supported: POSTGRES_SCHEMA_VERSION,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("99") && message.contains(&format!(" {POSTGRES_SCHEMA_VERSION};")),
            "{message}"
        );
    }
}

#[test]
fn reading_a_database_without_our_schema_creates_nothing() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let missing = schema
        .url
        .replace(&schema.schema, &format!("{}_absent", schema.schema));
    let refused = Store::open(Path::new(&missing));
    assert!(
        matches!(refused, Err(StoreError::NotAStore { .. })),
        "{refused:?}"
    );
    let mut client = ok(engine(&schema).connect());
    let exists: bool = ok(ok(client.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
        &[&format!("{}_absent", schema.schema)],
    ))
    .try_get(0));
    assert!(!exists, "opening for reading created the schema");
}

fn store_with_events(schema: &PostgresSchema, count: u64) -> &PostgresStore {
    let store = engine(schema);
    let events: Vec<EventRecord> = (1..=count)
        .map(|seq| record(seq, "note/test", "{}"))
        .collect();
    ok(store.create_session(&header("a"), &events, Durability::Fsync));
    store
}

/// Damage done behind the store's back, the seq and words it is reported
/// with.
const DAMAGE: &[(&str, u64, &str)] = &[
    (
        "UPDATE events SET body = replace(body, '{}', '{\"x\":1}') WHERE seq = 2",
        2,
        "CRC mismatch",
    ),
    ("DELETE FROM events WHERE seq = 2", 2, "not contiguous"),
    (
        "DELETE FROM events WHERE seq = 3",
        3,
        "events 3..=3 are missing",
    ),
    (
        "UPDATE sessions SET last_seq = 2",
        3,
        "rows run to seq 3 but the session row records 2",
    ),
    (
        "UPDATE events SET type = 'turn/start' WHERE seq = 1",
        1,
        "disagree",
    ),
    ("UPDATE sessions SET header_crc = 0", 0, "header CRC"),
    (
        "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
         SELECT session_id, 0, ts, type, batch, body, crc FROM events WHERE seq = 1",
        1,
        "seq 1 was due, and the row read there has seq 0 (no row may have a seq below 1)",
    ),
];

#[test]
fn damage_is_corruption_naming_session_and_seq() {
    for (damage, seq, reason) in DAMAGE {
        let Some(schema) = postgres_store() else {
            return;
        };
        let store = store_with_events(&schema, 3);
        execute(&schema, damage);
        assert_corrupt_at(store.snapshot(&id("a")), *seq, reason);
        let streamed: Vec<Result<EventRecord, StoreError>> = match store.events(&id("a")) {
            Ok(events) => events.collect(),
            Err(error) => vec![Err(error)],
        };
        assert!(
            matches!(streamed.last(), Some(Err(StoreError::CorruptRow { .. }))),
            "{damage}: {streamed:?}"
        );
        let writer = store.open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(writer, Err(StoreError::CorruptRow { .. })),
            "{damage}: {writer:?}"
        );
    }
}

#[test]
fn a_session_row_with_an_invalid_id_is_damage_of_the_store_not_skipped() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = store_with_events(&schema, 1);
    execute(
        &schema,
        "INSERT INTO sessions SELECT 'bad/id', created_at, cwd, parent_session, seed_length,
            delegation_depth, sandbox_mode, approval_policy, header_body, header_crc, last_seq
         FROM sessions WHERE id = 'a'",
    );
    assert_damage_of_the_store(store, &["\"bad/id\""]);
}

/// A store's `schema_version` holds one row: emptied or doubled, the
/// store is damaged (exit 2), said so, not a query's row count.
#[test]
fn a_version_table_without_its_one_row_is_damage() {
    let Some(schema) = postgres_store() else {
        return;
    };
    store_with_events(&schema, 1);
    let twice = format!(
        "INSERT INTO schema_version VALUES ({0}), ({0})",
        POSTGRES_SCHEMA_VERSION
    );
    for (change, rows) in [
        ("DELETE FROM schema_version", "0 rows"),
        (twice.as_str(), "2 rows"),
    ] {
        execute(&schema, change);
        let opened = PostgresStore::open_read_only(Path::new(&schema.url));
        match opened {
            Err(error @ StoreError::DamagedDatabase { .. }) => {
                assert!(error.to_string().contains(rows), "{error}");
                assert_eq!(error.class(), crate::ErrorClass::Corrupt);
            }
            other => panic!("damage, not {other:?}"),
        }
    }
}

/// The store's audit lists session `a` and one piece of damage of the
/// store as a whole, whose reason holds every one of `words`, and its
/// listing is refused.
fn assert_damage_of_the_store(store: &PostgresStore, words: &[&str]) {
    let audit = ok(store.audit());
    assert_eq!(audit.ids, [id("a")]);
    assert_eq!(audit.damage.len(), 1, "{:?}", audit.damage);
    assert!(
        matches!(&audit.damage[0], StoreError::DamagedDatabase { reason, .. }
            if words.iter().all(|word| reason.contains(word))),
        "{:?}",
        audit.damage
    );
    let ids = store.ids();
    assert!(
        matches!(&ids, Err(StoreError::DamagedDatabase { .. })),
        "{ids:?}"
    );
}

#[test]
fn a_session_row_stays_while_it_has_events_and_events_without_one_are_damage() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = store_with_events(&schema, 2);
    ok(store.create_session(&header("empty"), &[], Durability::Fsync));
    assert_session_rows_with_events_stay(&schema, "a");
    // The rows stand as they were, and a row with no events goes, as the
    // foreign key of the schemas before version 4 let it go.
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 2);
    execute(&schema, "DELETE FROM sessions WHERE id = 'empty'");
    assert_eq!(ok(store.ids()), [id("a")]);
    // Events written behind the store's back for a session without a row
    // are named by every listing of the store.
    execute(
        &schema,
        "INSERT INTO events SELECT 'ghost', seq, ts, type, batch, body, crc
         FROM events WHERE session_id = 'a' AND seq = 1",
    );
    assert_damage_of_the_store(store, &["\"ghost\"", "no session row"]);
}

#[test]
fn a_read_only_store_reads_and_refuses_every_write() {
    let Some(schema) = postgres_store() else {
        return;
    };
    store_with_events(&schema, 2);
    let store = ok(PostgresStore::open_read_only(Path::new(&schema.url)));
    assert!(store.is_read_only());
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 2);
    let writer = store.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(
            &writer,
            Err(StoreError::Io {
                operation: "write",
                ..
            })
        ),
        "{writer:?}"
    );
    let created = store.create_session(&header("b"), &[], Durability::Fsync);
    assert!(
        matches!(
            &created,
            Err(StoreError::Io {
                operation: "write",
                ..
            })
        ),
        "{created:?}"
    );
    assert_eq!(ok(store.ids()), [id("a")]);
}

#[test]
fn a_read_only_open_of_a_schema_without_tables_creates_nothing() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let elsewhere = format!("{}_untouched", schema.url);
    let refused = PostgresStore::open_read_only(Path::new(&elsewhere));
    assert!(
        matches!(refused, Err(StoreError::NotAStore { .. })),
        "{refused:?}"
    );
    let created = PostgresStore::open(Path::new(&elsewhere));
    assert!(
        matches!(created, Err(StoreError::NotAStore { .. })),
        "the read-only open created the tables: {created:?}"
    );
}

#[test]
fn a_writer_in_another_store_handle_is_locked_out_until_it_closes() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let first = engine(&schema);
    ok(first.create_session(&header("a"), &[], Durability::Fsync));
    ok(first.create_session(&header("b"), &[], Durability::Fsync));
    let writer = ok(first.open_writer(&id("a"), WriterOptions::default()));
    let second = ok(PostgresStore::open(Path::new(&schema.url)));
    let locked = second.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(&locked, Err(StoreError::Locked { .. })),
        "{locked:?}"
    );
    let mut other = ok(second.open_writer(&id("b"), WriterOptions::default()));
    assert_eq!(ok(other.append(note("b goes on"), Some(1))).get(), 1);
    drop(writer);
    assert!(second
        .open_writer(&id("a"), WriterOptions::default())
        .is_ok());
}

/// A writer of session `a` (made in `store`) that appended one event, then
/// had the connection that holds its lock ended by the server.
fn writer_cut_off_after_one(
    schema: &PostgresSchema,
    store: &PostgresStore,
) -> crate::SessionWriter {
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    ok(writer.append(note("one"), Some(1)));
    let key = lock_key("writer", &schema.schema, "a");
    // Waits (up to 30 s) until the backend has exited, and its lock with it.
    let mut client = ok(engine(schema).connect());
    let ended: Vec<bool> = ok(client.query(
        "SELECT pg_terminate_backend(pid, 30000) FROM pg_locks
         WHERE locktype = 'advisory' AND objsubid = 1
           AND ((classid::bigint << 32) | objid::bigint) = $1",
        &[&key],
    ))
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(ended, [true], "the writer's backend was not ended");
    writer
}

#[test]
fn a_writer_that_lost_its_lock_is_fenced_by_the_last_seq() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    // The stale writer's lock is taken from it behind its back, as when
    // its connection was cut and another host took over.
    let mut stale = writer_cut_off_after_one(&schema, store);
    let mut successor = ok(store.open_writer(&id("a"), WriterOptions::default()));
    ok(successor.append(note("two"), Some(2)));
    let late = stale.append(note("late"), Some(2));
    assert!(
        matches!(
            late,
            Err(StoreError::Postgres { .. } | StoreError::Conflict { .. })
        ),
        "{late:?}"
    );
    assert!(stale.is_poisoned());
    drop(successor);
    let texts: Vec<String> = ok(store.snapshot(&id("a")))
        .events
        .iter()
        .map(|record| record.data().to_owned())
        .collect();
    assert_eq!(texts, [r#"{"text":"one"}"#, r#"{"text":"two"}"#]);
}

/// An append whose connection the server ended names the session it was
/// for, not the store alone: in a store many writers share, the store
/// does not say which append failed.
#[test]
fn an_append_cut_off_by_the_server_names_its_session() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    let mut writer = writer_cut_off_after_one(&schema, store);
    let cut = writer.append(note("two"), Some(2));
    let Err(error @ StoreError::Postgres { .. }) = cut else {
        panic!("an append on an ended connection: {cut:?}");
    };
    let message = error.to_string();
    assert!(
        message.contains("#a: PostgreSQL append failed"),
        "{message}"
    );
}

#[test]
fn a_second_connection_appending_at_a_taken_seq_is_a_conflict() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    // Another writer's append, made outside any lock.
    execute(
        &schema,
        &format!(
            "UPDATE sessions SET last_seq = 1; INSERT INTO events VALUES ('a', 1, 5, 'note/test', NULL, '{body}', {crc});",
            body = r#"{"seq":1,"ts":5,"type":"note/test","data":{}"#,
            crc = record_crc(&id("a"), br#"{"seq":1,"ts":5,"type":"note/test","data":{}"#)
        ),
    );
    let refused = writer.append(note("mine"), Some(1));
    assert!(
        matches!(
            refused,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(writer.is_poisoned());
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
}

#[test]
fn a_listener_wakes_on_an_append_to_its_session_only() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    ok(store.create_session(&header("b"), &[], Durability::Fsync));
    let mut listener = ok(store.listener(&id("a")));
    let mut other = ok(store.open_writer(&id("b"), WriterOptions::default()));
    ok(other.append(note("b"), None));
    assert!(!ok(listener.wait(Duration::from_millis(300))));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    ok(writer.append(note("a"), None));
    assert!(ok(listener.wait(Duration::from_secs(10))));
}

#[test]
fn sixty_four_connections_appending_keep_every_acknowledged_event_exactly_once() {
    const WRITERS: usize = 64;
    const EVENTS: usize = 20;
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    for writer in 0..WRITERS {
        ok(store.create_session(&header(&format!("s{writer}")), &[], Durability::Fsync));
    }
    let start = Barrier::new(WRITERS);
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (store, start) = (store, &start);
            scope.spawn(move || {
                let session = id(&format!("s{writer}"));
                // Past the barrier before a failed open panics, so that no
                // other writer waits at it for ever.
                let opened = store.open_writer(&session, WriterOptions::default());
                start.wait();
                let mut writer_handle = ok(opened);
                for n in 0..EVENTS {
                    let seq = ok(writer_handle.append(note(&format!("{writer}/{n}")), None));
                    assert_eq!(seq.get(), n as u64 + 1);
                }
            });
        }
    });
    // The appends waited for one another: some were committed in groups.
    assert!(store.shared.group.grouped() > 0);
    for writer in 0..WRITERS {
        let events = ok(store.snapshot(&id(&format!("s{writer}")))).events;
        assert_eq!(events.len(), EVENTS, "session s{writer}");
        for (n, record) in events.iter().enumerate() {
            assert_eq!(record.data(), format!("{{\"text\":\"{writer}/{n}\"}}"));
        }
    }
}

#[test]
fn a_server_that_refuses_the_connection_is_a_clear_error_without_the_password() {
    let url = "postgres://someone:hunter2@127.0.0.1:1/nowhere?connect_timeout=2";
    let Err(error) = PostgresStore::open(Path::new(url)) else {
        panic!("connected to port 1");
    };
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::Postgres { .. }) && message.contains("127.0.0.1:1"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
    assert_eq!(error.class(), crate::ErrorClass::Io);
}

#[test]
fn a_statement_timeout_poisons_the_writer_and_acknowledges_nothing() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    // Every statement of this store has the limit, those meant to pass
    // too (a durable commit on a busy disk among them): 2 s, far above
    // what they take, and still a short wait for the blocked one.
    let timed = ok(PostgresStore::open(Path::new(&format!(
        "{}&options=-c%20statement_timeout%3D2000",
        schema.url
    ))));
    let mut writer = ok(timed.open_writer(&id("a"), WriterOptions::default()));
    ok(writer.append(note("kept"), Some(1)));
    // Another session holds the session row: the append waits, and times out.
    let mut blocker = ok(store.connect());
    ok(blocker.batch_execute("BEGIN; SELECT * FROM sessions WHERE id = 'a' FOR UPDATE"));
    let failed = writer.append(note("lost"), Some(2));
    let Err(error) = failed else {
        panic!("the append went through a locked row");
    };
    assert!(
        matches!(&error, StoreError::Postgres { code: Some(code), .. } if code == "57014"),
        "{error:?}"
    );
    assert!(writer.is_poisoned());
    ok(blocker.batch_execute("ROLLBACK"));
    drop(writer);
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
}

#[test]
fn a_long_session_reads_in_order_across_its_pages_whole_or_to_its_damage() {
    // Past its first page a read takes the pages after it from a thread
    // of their own: what it gives, and where it stops, are a page at a
    // time's.
    let page = PAGE_ROWS.unsigned_abs();
    let expected = crate::sql::long_session_events(page);
    let mut cases: Vec<(String, Option<(u64, &str)>)> = vec![(String::new(), None)];
    for (damage, seq, reason) in crate::sql::long_session_damage(page) {
        cases.push((damage, Some((seq, reason))));
    }
    for (damage, found) in cases {
        let Some(schema) = postgres_store() else {
            return;
        };
        let store = engine(&schema);
        ok(store.create_session(&header("a"), &expected, Durability::Buffered));
        if !damage.is_empty() {
            execute(&schema, &damage);
        }
        crate::sql::assert_read_in_order(|| ok(store.events(&id("a"))), &expected, page, found);
        if let Some((seq, reason)) = found {
            assert_corrupt_at(store.snapshot(&id("a")), seq, reason);
        }
    }
}

/// Loses every value of `table` stored out of line (its TOAST table's
/// tuples). The server refuses a statement that changes a TOAST table;
/// PostgreSQL's own `pg_surgery` kills its tuples, as the server's
/// corruption tests do. An extension is installed once a database: in a
/// schema of its own on the test server, kept, and installed by one test
/// at a time.
fn lose_out_of_line_values(schema: &PostgresSchema, table: &str) {
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    {
        let _one = INSTALLING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        execute(
            schema,
            "CREATE SCHEMA IF NOT EXISTS sessionlog_test_surgery;
             CREATE EXTENSION IF NOT EXISTS pg_surgery SCHEMA sessionlog_test_surgery",
        );
    }
    execute(
        schema,
        &format!(
            "DO $$ DECLARE toast regclass := (SELECT reltoastrelid::regclass FROM pg_class
                                               WHERE oid = '{table}'::regclass);
             BEGIN
                 EXECUTE format('SELECT sessionlog_test_surgery.heap_force_kill(%L, \
                                 ARRAY(SELECT ctid FROM %s))', toast, toast);
             END $$;"
        ),
    );
}

#[test]
fn a_row_the_server_cannot_read_leaves_the_whole_units_before_it_then_the_error() {
    // Row `at` alone has a body stored out of line, whose chunks are then
    // lost: the server fails as it sends that row, after the rows before
    // it. They are given out, but for a batch the failure cuts,
    // then the failure: on the first page of rows a read takes, and on
    // one a thread reads ahead.
    for (count, at, batch) in [(40, 30, None), (40, 30, Some(28..=31)), (400, 300, None)] {
        let Some(schema) = postgres_store() else {
            return;
        };
        let store = engine(&schema);
        execute(
            &schema,
            "ALTER TABLE events ALTER COLUMN body SET STORAGE EXTERNAL",
        );
        let events: Vec<EventRecord> = (1..=count)
            .map(|seq| {
                let text = match seq == at {
                    true => "p".repeat(4_000),
                    false => String::new(),
                };
                let size = batch
                    .as_ref()
                    .filter(|batch| *batch.start() == seq)
                    .map(|batch| batch.end() - batch.start() + 1);
                let data = format!(r#"{{"n":{seq},"text":"{text}"}}"#);
                EventRecord::new(seq, 1_700_000_000_000 + seq, size, "note/test", &data)
            })
            .collect();
        ok(store.create_session(&header("a"), &events, Durability::Fsync));
        lose_out_of_line_values(&schema, "events");
        let given = batch.as_ref().map_or(at - 1, |batch| batch.start() - 1);
        let case = format!("{count} events, row {at} unreadable, batch {batch:?}");
        let mut records = 0;
        let mut ended = None;
        for event in ok(store.events(&id("a"))) {
            match event {
                Ok(record) => {
                    records += 1;
                    assert_eq!(record.seq(), records, "{case}");
                }
                Err(error) => ended = Some(error),
            }
        }
        assert_eq!(records, given, "{case}: {ended:?}");
        let ended = ended.unwrap_or_else(|| panic!("{case}: the read ended without an error"));
        // The server's data_corrupted is the session's damage (exit 2),
        // at the row it could not send.
        match &ended {
            StoreError::CorruptRow { seq, reason, .. } => {
                assert_eq!(*seq, at, "{case}: {ended}");
                assert!(
                    reason.contains("cannot be read") && reason.contains("toast"),
                    "{case}: {ended}"
                );
            }
            other => panic!("{case}: corruption, not {other:?}"),
        }
        assert_eq!(ended.class(), crate::ErrorClass::Corrupt, "{case}");
        let (lent, ended) = crate::sql::bodies_lent(ok(store.events(&id("a"))));
        assert_eq!(lent as u64, given, "{case}, bodies lent: {ended:?}");
        assert!(
            matches!(ended, Some(StoreError::CorruptRow { seq, .. }) if seq == at),
            "{case}, bodies lent: {ended:?}"
        );
    }
}

/// A session row whose header the server cannot send (its out-of-line
/// chunks lost) is that session's corruption at seq 0, as a damaged event
/// row is at its seq: the other sessions still read.
#[test]
fn a_session_row_the_server_cannot_read_is_its_sessions_corruption() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    execute(
        &schema,
        "ALTER TABLE sessions ALTER COLUMN header_body SET STORAGE EXTERNAL",
    );
    ok(store.create_session(&header("ok1"), &[], Durability::Fsync));
    let long = SessionHeader::root(
        id("big"),
        1_700_000_000_000,
        format!("/{}", "x".repeat(5_000)),
    );
    ok(store.create_session(&long, &[], Durability::Fsync));
    ok(store.create_session(&header("ok2"), &[], Durability::Fsync));
    lose_out_of_line_values(&schema, "sessions");
    let ids = ok(store.ids());
    assert_eq!(ids.len(), 3, "the listing reads the ids alone: {ids:?}");
    match store.snapshot(&id("big")) {
        Err(error @ StoreError::CorruptRow { seq: 0, .. }) => {
            assert!(error.to_string().contains("big"), "{error}");
            assert_eq!(error.class(), crate::ErrorClass::Corrupt);
        }
        other => panic!("corruption at seq 0, not {other:?}"),
    }
    for session in ["ok1", "ok2"] {
        ok(store.snapshot(&id(session)));
    }
}

#[test]
fn a_burst_of_appends_is_announced_through_its_last_seq_in_order() {
    // The notifier sends at most one statement every NOTIFY_INTERVAL and
    // takes along what queued meanwhile: the last seq of a burst is still
    // announced, and no announcement goes back.
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    let mut client = ok(store.connect());
    ok(client.batch_execute(&format!("LISTEN \"{}\"", schema.schema)));
    let mut writer = ok(store.open_writer(&id("a"), WriterOptions::default()));
    let burst = 40;
    for n in 0..burst {
        ok(writer.append(note(&format!("n{n}")), None));
    }
    let mut seqs = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seqs.last() != Some(&burst) && std::time::Instant::now() < deadline {
        let mut notifications = client.notifications();
        let mut waiting = notifications.timeout_iter(Duration::from_millis(200));
        while let Some(notification) = ok(waiting.next()) {
            let payload: serde_json::Value = ok(serde_json::from_str(notification.payload()));
            assert_eq!(payload["session"], "a", "{payload}");
            seqs.push(payload["seq"].as_u64().unwrap_or_default());
        }
    }
    assert_eq!(seqs.last(), Some(&burst), "{seqs:?}");
    assert!(seqs.is_sorted() && seqs.len() <= burst as usize, "{seqs:?}");
}

/// A connection whose `synchronous_commit` is stronger than `on` (set by
/// the URL's `options`, the role, the database or the server) keeps it
/// for durable writes after a buffered one (a state snapshot) set it off.
#[test]
fn a_durable_write_after_a_buffered_one_keeps_a_stronger_setting() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let url = format!(
        "{}&options=-c%20synchronous_commit%3Dremote_apply",
        schema.url
    );
    let location = ok(Location::parse(Path::new(&url)));
    let mut connection = ok(Connection::open(&location, false));
    let shown = |connection: &mut Connection| -> String {
        ok(ok(connection.client.query_one("SHOW synchronous_commit", &[])).try_get(0))
    };
    assert_eq!(shown(&mut connection), "remote_apply");
    ok(connection.set_durability(&location, Durability::Buffered));
    assert_eq!(shown(&mut connection), "off");
    ok(connection.set_durability(&location, Durability::Fsync));
    assert_eq!(shown(&mut connection), "remote_apply");
}

/// A store whose connection the server ended fails the one call that meets
/// the end, and the next call connects again. The server's FATAL answer can
/// reach the client before the end of the stream does (here, always: the
/// backend ends itself while it runs a statement of the store's own
/// connection); a connection kept for the next call then failed that call
/// too, with "connection reset by peer".
#[test]
fn a_connection_the_server_ended_fails_one_call_and_the_next_connects_again() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    for round in 0..5 {
        let ended = store.shared.with_connection("end itself", |connection| {
            connection
                .client
                .batch_execute("SELECT pg_terminate_backend(pg_backend_pid())")
        });
        match ended {
            Err(error) => assert!(error.is_connection_lost(), "round {round}: {error}"),
            Ok(()) => panic!("round {round}: the backend did not end itself"),
        }
        let next = store.snapshot(&id("a"));
        assert!(
            next.is_ok(),
            "round {round}: the call after the lost one did not connect again: {:?}",
            next.err().map(|error| error.to_string())
        );
    }
}

/// A writer opening while a group commit holds the session's key (shared,
/// as its statement checks each writer's lock) waits for it, as a JSONL
/// writer waits for a lock held an instant; a lock still held after the
/// grace is `Locked`.
#[test]
fn a_writer_waits_out_a_lock_held_for_an_instant_and_not_longer() {
    let Some(schema) = postgres_store() else {
        return;
    };
    let store = engine(&schema);
    ok(store.create_session(&header("a"), &[], Durability::Fsync));
    let key = lock_key("writer", &schema.schema, "a");
    let mut holder = ok(store.connect());
    // The release comes after a short pause; on a machine so loaded that it
    // came after the whole grace, the round says nothing and runs again.
    let mut waited = false;
    for _ in 0..5 {
        let mut transaction = ok(holder.transaction());
        ok(transaction.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&key]));
        let started = Instant::now();
        let released = std::thread::scope(|scope| {
            let release = scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                ok(transaction.commit());
                started.elapsed()
            });
            let opened = store.open_writer(&id("a"), WriterOptions::default());
            let released = release
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (opened, released)
        });
        match released {
            (Ok(writer), _) => {
                drop(writer);
                waited = true;
                break;
            }
            // Released late, or the opening thread kept from its tries past
            // the grace on a loaded machine: the round says nothing.
            (Err(StoreError::Locked { .. }), _) => {}
            (Err(error), released) => {
                panic!("refused, the lock released after {released:?}: {error}")
            }
        }
    }
    assert!(waited, "no round released the lock within the grace");

    // A lock held throughout is Locked, after the grace.
    let mut transaction = ok(holder.transaction());
    ok(transaction.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&key]));
    let started = Instant::now();
    let refused = store.open_writer(&id("a"), WriterOptions::default());
    assert!(
        matches!(refused, Err(StoreError::Locked { .. })),
        "{refused:?}"
    );
    assert!(started.elapsed() >= crate::jsonl::LOCK_GRACE);
    ok(transaction.rollback());
}
