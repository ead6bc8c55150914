//! Store-wide `verify` and `stats` read a store of many sessions on more
//! than one thread: what they print must be what one thread prints, in
//! session order, each verdict and count on its own session, and all of
//! one moment of the store.

use std::path::Path;

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{Durability, NewEvent, SqliteStore, Store, WriterOptions};

use crate::cli_support::run;

/// Sessions in the store: many chunks for each reader.
const SESSIONS: usize = 2_500;

fn id(index: usize) -> SessionId {
    SessionId::parse(&format!("s{index:05}")).unwrap_or_else(|error| panic!("{error}"))
}

/// Creates the root session `id`, with no events.
fn create_root(store: &Store, id: &SessionId, durability: Durability) {
    store
        .create_session(
            &SessionHeader::root(id.clone(), 1, "/work".into()),
            &[],
            durability,
        )
        .unwrap_or_else(|error| panic!("create: {error}"));
}

/// A SQLite store of `SESSIONS` sessions; session `index` holds
/// `1 + index % 4` events (a turn opened, messages), so that every
/// session's count is its own.
fn store_of_many(path: &Path) {
    let store = Store::create(path).unwrap_or_else(|error| panic!("create: {error}"));
    let template = SessionId::parse("template").unwrap_or_else(|error| panic!("{error}"));
    create_root(&store, &template, Durability::Buffered);
    let mut writer = store
        .open_writer(&template, WriterOptions::default())
        .unwrap_or_else(|error| panic!("writer: {error}"));
    writer
        .append(NewEvent::new("turn/start", r#"{"turnId":"t1"}"#), None)
        .unwrap_or_else(|error| panic!("append: {error}"));
    for _ in 0..3 {
        let message =
            r#"{"role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"go"}]}"#;
        writer
            .append(NewEvent::new("message", message), None)
            .unwrap_or_else(|error| panic!("append: {error}"));
    }
    drop(writer);
    let events = store
        .snapshot(&template)
        .unwrap_or_else(|error| panic!("snapshot: {error}"))
        .events;
    let sqlite = SqliteStore::open(path).unwrap_or_else(|error| panic!("open: {error}"));
    let sessions = (0..SESSIONS)
        .map(|index| {
            let header = SessionHeader::root(id(index), 1, "/work".into());
            (header, events[..1 + index % 4].to_vec())
        })
        .collect();
    sqlite
        .create_many(sessions, Durability::Buffered)
        .unwrap_or_else(|error| panic!("create: {error}"));
    drop(sqlite);
    // The template is no part of what the tests count.
    let connection =
        rusqlite::Connection::open(path).unwrap_or_else(|error| panic!("open: {error}"));
    connection
        .execute_batch(
            "DELETE FROM snapshots WHERE session_id = 'template';
             DELETE FROM events WHERE session_id = 'template';
             DELETE FROM sessions WHERE id = 'template';",
        )
        .unwrap_or_else(|error| panic!("delete: {error}"));
}

/// Damages two sessions far apart: a bad CRC in one, a missing row in the
/// other.
fn damage(path: &Path, corrupt: usize, gap: usize) {
    let connection =
        rusqlite::Connection::open(path).unwrap_or_else(|error| panic!("open: {error}"));
    connection
        .execute(
            "UPDATE events SET crc = crc + 1 WHERE session_id = ?1 AND seq = 1",
            [id(corrupt).as_str()],
        )
        .unwrap_or_else(|error| panic!("update: {error}"));
    connection
        .execute(
            "DELETE FROM events WHERE session_id = ?1 AND seq = 2",
            [id(gap).as_str()],
        )
        .unwrap_or_else(|error| panic!("delete: {error}"));
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}")))
        .collect()
}

/// A store of many sessions (in a folder that lives as long as the value)
/// with sessions `corrupt` and `gap` damaged, and its path.
fn damaged_store(corrupt: usize, gap: usize) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let path = dir.path().join("store.db");
    store_of_many(&path);
    damage(&path, corrupt, gap);
    let store = path.display().to_string();
    (dir, store)
}

#[test]
fn verify_of_many_sessions_gives_each_its_own_verdict_in_order() {
    // The session with the gap holds four events: its seq 2 is missing
    // between two rows.
    let (corrupt, gap) = (1_234, 2_347);
    let (_dir, store) = damaged_store(corrupt, gap);
    let verified = run(["verify", &store, "--json"]);
    verified.expect_code(2);
    let verdicts = json_lines(&verified.stdout);
    assert_eq!(verdicts.len(), SESSIONS);
    for (index, verdict) in verdicts.iter().enumerate() {
        assert_eq!(verdict["session"], id(index).as_str(), "verdict {index}");
        let status = if index == corrupt || index == gap {
            "corrupt"
        } else {
            "ok"
        };
        assert_eq!(verdict["status"], status, "session {index}");
        if status == "ok" {
            assert_eq!(verdict["events"], 1 + index as u64 % 4, "session {index}");
        }
    }
}

#[test]
fn stats_of_many_sessions_counts_each_once_in_order() {
    let (corrupt, gap) = (7, 2_001);
    let (_dir, store) = damaged_store(corrupt, gap);
    let counted = run(["stats", &store, "--json"]);
    counted.expect_code(2);
    let report: serde_json::Value =
        serde_json::from_str(&counted.stdout).unwrap_or_else(|error| panic!("{error}"));
    let sessions = report["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("no sessions in {report}"));
    assert_eq!(sessions.len(), SESSIONS);
    let mut events = 0;
    for (index, stats) in sessions.iter().enumerate() {
        assert_eq!(stats["session"], id(index).as_str(), "stats {index}");
        let damaged = index == corrupt || index == gap;
        assert_eq!(stats["corrupt"].is_string(), damaged, "session {index}");
        if !damaged {
            assert_eq!(stats["events"], 1 + index as u64 % 4, "session {index}");
        }
        events += stats["events"].as_u64().unwrap_or(0);
    }
    assert_eq!(report["totals"]["sessions"], SESSIONS as u64);
    assert_eq!(report["totals"]["corrupt"], 2);
    assert_eq!(report["totals"]["events"], events);
    // Session `index` holds `index % 4` messages; the corrupt one's first
    // record is refused, the other's first event is a turn's start.
    let messages: u64 = (0..SESSIONS)
        .filter(|index| *index != corrupt && *index != gap)
        .map(|index| index as u64 % 4)
        .sum();
    assert_eq!(report["totals"]["eventsByType"]["message"], messages);

    // People's output: the same totals, and each damaged session named.
    let human = run(["stats", &store]);
    human.expect_code(2);
    assert!(
        human.stdout.starts_with(&format!(
            "sessions  {SESSIONS} (0 with a torn tail, 2 corrupt)"
        )),
        "{}",
        &human.stdout[..human.stdout.len().min(200)]
    );
    for index in [corrupt, gap] {
        let line = human
            .stdout
            .lines()
            .find(|line| line.trim_start().starts_with(id(index).as_str()))
            .unwrap_or_else(|| panic!("no line for session {index}"));
        assert!(line.contains("CORRUPT"), "{line}");
    }
    let json_types = &report["totals"]["eventsByType"];
    for (name, count) in json_types
        .as_object()
        .unwrap_or_else(|| panic!("{json_types}"))
    {
        let line = human
            .stdout
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no count of {name}"));
        assert!(line.ends_with(&count.to_string()), "{line} against {count}");
    }
}

#[test]
fn readers_side_by_side_see_one_moment() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let path = dir.path().join("store.db");
    let store = Store::create(&path).unwrap_or_else(|error| panic!("create: {error}"));
    let first = SessionId::parse("a").unwrap_or_else(|error| panic!("{error}"));
    create_root(&store, &first, Durability::Fsync);
    let reading = Store::open_read_only(&path).unwrap_or_else(|error| panic!("open: {error}"));
    let readers = reading
        .hold_read_for(2)
        .unwrap_or_else(|error| panic!("hold: {error}"));
    assert_eq!(readers.len(), 2, "two readers of a SQLite store");
    // A session created after the moment is seen by neither reader.
    let later = SessionId::parse("b").unwrap_or_else(|error| panic!("{error}"));
    create_root(&store, &later, Durability::Fsync);
    for (reader, _held) in &readers {
        let ids = reader.ids().unwrap_or_else(|error| panic!("ids: {error}"));
        assert_eq!(ids, vec![first.clone()]);
    }
    drop(readers);
    let ids = reading.ids().unwrap_or_else(|error| panic!("ids: {error}"));
    assert_eq!(ids, vec![first, later]);
}

/// Damages the first page of a table no session reads (made for the
/// test, a few pages of rows): only SQLite's check of every page can find
/// it.
fn damage_a_page_no_session_reads(path: &Path) {
    let connection =
        rusqlite::Connection::open(path).unwrap_or_else(|error| panic!("open: {error}"));
    connection
        .execute_batch(
            "CREATE TABLE extra (x TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
             INSERT INTO extra SELECT printf('%0100d', i) FROM n;
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap_or_else(|error| panic!("extra: {error}"));
    let root: i64 = connection
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'extra'",
            [],
            |row| row.get(0),
        )
        .unwrap_or_else(|error| panic!("root: {error}"));
    let page_size: i64 = connection
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap_or_else(|error| panic!("page size: {error}"));
    drop(connection);
    // The page's type (its header's first byte) made one no b-tree has.
    let mut bytes = std::fs::read(path).unwrap_or_else(|error| panic!("read: {error}"));
    let at = usize::try_from((root - 1) * page_size).unwrap_or(usize::MAX);
    assert!(at < bytes.len(), "page {root} is in the file");
    bytes[at] = 0x77;
    std::fs::write(path, bytes).unwrap_or_else(|error| panic!("write: {error}"));
}

#[test]
fn damage_only_the_check_of_every_page_finds_is_printed_after_the_sessions() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let path = dir.path().join("store.db");
    store_of_many(&path);
    damage_a_page_no_session_reads(&path);
    let store = path.display().to_string();
    // The whole store (the check on a handle of its own beside the
    // readers), and one session.
    for args in [vec![], vec!["--session", "s00042"]] {
        let verified = run([&["verify", &store, "--json"][..], &args].concat());
        verified.expect_code(2);
        let verdicts = json_lines(&verified.stdout);
        let (last, sessions) = verdicts
            .split_last()
            .unwrap_or_else(|| panic!("no verdict: {}", verified.stderr));
        assert!(last["session"].is_null(), "{last}");
        assert_eq!(last["status"], "corrupt", "{last}");
        let message = last["corruption"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("quick_check"), "{message}");
        assert_eq!(sessions.len(), if args.is_empty() { SESSIONS } else { 1 });
        assert!(
            sessions.iter().all(|verdict| verdict["status"] == "ok"),
            "every session is whole: {}",
            verified.stdout
        );
    }
}

/// Runs `damage` on the database at `path`, foreign keys off.
fn damage_rows(path: &Path, damage: &str) {
    let connection =
        rusqlite::Connection::open(path).unwrap_or_else(|error| panic!("open: {error}"));
    connection
        .execute_batch(&format!("PRAGMA foreign_keys = OFF; {damage}"))
        .unwrap_or_else(|error| panic!("{damage}: {error}"));
}

#[test]
fn events_without_a_session_row_are_named_whether_or_not_the_counts_agree() {
    // Events of a session with no row, the counts of rows then off by
    // one; and the same with a row of another session gone, the counts
    // then agreeing (found once that session reads short). Either way the
    // owners are listed after the sessions are read, and printed last.
    let orphan = "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
                    SELECT 's00007x', seq, ts, type, batch, body, crc FROM events
                     WHERE session_id = 's00001' AND seq = 1;";
    let short = "DELETE FROM events WHERE session_id = 's00003' AND seq = 4;";
    for (damage, counts_agree) in [
        (orphan.to_owned(), false),
        (format!("{orphan} {short}"), true),
    ] {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let path = dir.path().join("store.db");
        store_of_many(&path);
        damage_rows(&path, &damage);
        let verified = run(["verify", &path.display().to_string(), "--json"]);
        verified.expect_code(2);
        let verdicts = json_lines(&verified.stdout);
        let whole: Vec<_> = verdicts
            .iter()
            .enumerate()
            .filter(|(_, verdict)| verdict["session"].is_null())
            .collect();
        assert_eq!(whole.len(), 1, "{}", verified.stdout);
        let (at, verdict) = whole[0];
        assert_eq!(at, verdicts.len() - 1, "{damage}");
        let message = verdict["corruption"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains(r#"events of session "s00007x" have no session row"#),
            "{message}"
        );
        let corrupt: Vec<_> = verdicts
            .iter()
            .filter(|verdict| verdict["status"] == "corrupt" && !verdict["session"].is_null())
            .map(|verdict| verdict["session"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            corrupt,
            if counts_agree { vec!["s00003"] } else { vec![] },
            "{damage}"
        );
        // `stats` counts beside its reads too, and refuses the store
        // before it prints a report when the counts leave events without
        // a row: the session short of rows is found by its own read.
        let stats = run(["stats", &path.display().to_string(), "--json"]);
        stats.expect_code(2);
        match counts_agree {
            false => {
                assert!(stats.stdout.is_empty(), "{}", stats.stdout);
                assert!(stats.stderr.contains("s00007x"), "{}", stats.stderr);
            }
            true => {
                let report: serde_json::Value = serde_json::from_str(stats.stdout.trim())
                    .unwrap_or_else(|error| panic!("{error}: {}", stats.stdout));
                assert_eq!(report["totals"]["corrupt"], 1, "{}", stats.stdout);
            }
        }
    }
}
