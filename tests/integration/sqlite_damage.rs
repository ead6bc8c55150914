//! SQLite damage and access: a multi-session database damaged page by page
//! at random (bytes changed, page headers, zeroed, swapped or truncated
//! pages), each copy put to `sessionlog verify`, `export` and `migrate`;
//! readers that write nothing (another application's database, a newer
//! schema, a reader without write permission); and a write-ahead log
//! removed under a live `append` killed with SIGKILL.
//!
//! The campaign's one requirement: no case where `verify` exits 0 while
//! `export` (or a `migrate` that succeeded) lost or changed an event. CI
//! runs a few hundred cases; `SESSIONLOG_LONG=1` runs thousands.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{Durability, NewEvent, SqliteStore, Store, WriterOptions};

use crate::cli_support::{run, sessionlog};
use crate::support::Rng;

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("unexpected error: {error}"))
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

fn id(name: &str) -> SessionId {
    ok(SessionId::parse(name))
}

/// SQLite's page size for our databases (the default).
const PAGE: usize = 4096;

/// A database of `sessions` sessions with notes of varied sizes (some
/// spanning overflow pages) and batches, closed cleanly (no `-wal` left).
fn build_database(path: &Path, sessions: usize, rng: &mut Rng) {
    let store = ok(SqliteStore::open(path));
    for n in 0..sessions {
        let session = id(&format!("session-{n}"));
        let header = SessionHeader::root(session.clone(), 1_700_000_000_000, "/work".to_owned());
        ok(store.create(&header, &[], Durability::Buffered));
        let mut writer = ok(store.open_writer(
            &session,
            WriterOptions {
                durability: Durability::Buffered,
                keep_snapshot: false,
                ..WriterOptions::default()
            },
        ));
        let events = 10 + rng.below(60);
        let mut written = 0;
        while written < events {
            let note = |rng: &mut Rng, k: usize| {
                let size = *rng.pick(&[8usize, 40, 200, 900, 5000]);
                let body: String = (0..size)
                    .map(|i| char::from(b'a' + ((i + k) % 26) as u8))
                    .collect();
                NewEvent {
                    event_type: "note/test".to_owned(),
                    data: serde_json::json!({ "n": k, "text": body }).to_string(),
                    ts: Some(1_700_000_000_000 + k as u64),
                }
            };
            if rng.chance(20) {
                let size = 2 + rng.below(4);
                let batch = (0..size).map(|k| note(rng, written + k)).collect();
                ok(writer.append_batch(batch, None));
                written += size;
            } else {
                ok(writer.append(note(rng, written), None));
                written += 1;
            }
        }
    }
}

/// What `export` prints for each session, by id.
fn exports(database: &Path, ids: &[String]) -> BTreeMap<String, String> {
    ids.iter()
        .map(|session| {
            let export = run(["export", &text(database), "--session", session]);
            assert_eq!(export.code, 0, "export {session}: {}", export.stderr);
            (session.clone(), export.stdout)
        })
        .collect()
}

/// The sessions `verify --json` reported, and its exit code.
fn verify(database: &Path) -> (i32, Vec<String>, String) {
    let verified = run(["verify", &text(database), "--json", "--quiet"]);
    let sessions = verified
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|verdict| verdict["session"].as_str().map(str::to_owned))
        .collect();
    (verified.code, sessions, verified.stderr)
}

/// One kind of damage, applied to a copy of the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    /// 1 to 4 bytes anywhere in one page set to random values.
    Bytes,
    /// One byte of a page's b-tree header (type, free block, cell count,
    /// cell content start) changed.
    PageHeader,
    /// A run of 16 to 256 random bytes in one page.
    Run,
    /// One page zeroed.
    Zeroed,
    /// One page replaced by another page of the file.
    Swapped,
    /// The file cut at a random length.
    Truncated,
}

const DAMAGES: [Damage; 6] = [
    Damage::Bytes,
    Damage::PageHeader,
    Damage::Run,
    Damage::Zeroed,
    Damage::Swapped,
    Damage::Truncated,
];

fn damage(bytes: &mut Vec<u8>, kind: Damage, rng: &mut Rng) -> String {
    let pages = bytes.len() / PAGE;
    let page = rng.below(pages);
    let start = page * PAGE;
    match kind {
        Damage::Bytes => {
            let count = 1 + rng.below(4);
            for _ in 0..count {
                let at = start + rng.below(PAGE);
                bytes[at] = bytes[at].wrapping_add(1 + rng.below(255) as u8);
            }
            format!("{count} bytes of page {}", page + 1)
        }
        Damage::PageHeader => {
            // Page 1 holds the 100-byte database header first.
            let header = start + if page == 0 { 100 } else { 0 };
            let at = header + rng.below(8);
            bytes[at] = bytes[at].wrapping_add(1 + rng.below(255) as u8);
            format!("b-tree header byte {} of page {}", at - header, page + 1)
        }
        Damage::Run => {
            let length = 16 + rng.below(240);
            let at = start + rng.below(PAGE - length);
            for byte in &mut bytes[at..at + length] {
                *byte = rng.below(256) as u8;
            }
            format!(
                "{length} bytes at offset {} of page {}",
                at - start,
                page + 1
            )
        }
        Damage::Zeroed => {
            bytes[start..start + PAGE].fill(0);
            format!("page {} zeroed", page + 1)
        }
        Damage::Swapped => {
            let other = rng.below(pages);
            let copy = bytes[other * PAGE..(other + 1) * PAGE].to_vec();
            bytes[start..start + PAGE].copy_from_slice(&copy);
            format!("page {} replaced by page {}", page + 1, other + 1)
        }
        Damage::Truncated => {
            let length = rng.below(bytes.len());
            bytes.truncate(length);
            format!("cut to {length} bytes")
        }
    }
}

/// What the campaign saw, per kind of damage.
#[derive(Debug, Default)]
struct Figures {
    cases: usize,
    /// Exit codes of `verify`.
    verify_codes: BTreeMap<i32, usize>,
    /// `verify` exited 0 and every session exported as before (damage in
    /// free space or in bytes no reader uses).
    harmless: usize,
    /// `migrate` succeeded (its copy is then compared with the original).
    migrated: usize,
    /// `verify` exited 0 but an event was lost or changed: must stay 0.
    silent_losses: Vec<String>,
}

fn campaign(cases: usize, seed: u64) -> BTreeMap<Damage, Figures> {
    let folder = ok(tempfile::tempdir());
    let original = folder.path().join("original.db");
    let mut rng = Rng::new(seed);
    build_database(&original, 8, &mut rng);
    let pristine = ok(std::fs::read(&original));
    let ids: Vec<String> = (0..8).map(|n| format!("session-{n}")).collect();
    let expected = exports(&original, &ids);
    let (code, verified, stderr) = verify(&original);
    assert_eq!(
        (code, &verified),
        (0, &ids),
        "the original verifies: {stderr}"
    );
    let mut figures: BTreeMap<Damage, Figures> = BTreeMap::new();
    for case in 0..cases {
        let kind = DAMAGES[case % DAMAGES.len()];
        let mut bytes = pristine.clone();
        let what = damage(&mut bytes, kind, &mut rng);
        let copy = folder.path().join(format!("case-{case}.db"));
        ok(std::fs::write(&copy, &bytes));
        let (code, verified, stderr) = verify(&copy);
        let seen = figures.entry(kind).or_default();
        seen.cases += 1;
        *seen.verify_codes.entry(code).or_default() += 1;
        assert!(
            [0, 1, 2].contains(&code),
            "case {case} ({what}): verify exited {code}: {stderr}"
        );
        if code == 1 {
            // Only damage to the database header's schema version reads as
            // another application's database or a newer schema.
            assert!(
                stderr.contains("not a sessionlog store") || stderr.contains("newer"),
                "case {case} ({what}): verify exited 1: {stderr}"
            );
        }
        if code == 0 {
            let exported = exports(&copy, &verified);
            if verified != ids || exported != expected {
                seen.silent_losses.push(format!("case {case}: {what}"));
            } else {
                seen.harmless += 1;
            }
        }
        let migrated = folder.path().join(format!("case-{case}-copy"));
        if let Ok(report) = migrate_quietly(&copy, &migrated) {
            seen.migrated += 1;
            let copied = Store::open_read_only(&migrated).and_then(|store| store.ids());
            let copied: Vec<String> = ok(copied).iter().map(ToString::to_string).collect();
            let same = copied == ids && exports_of_folder(&migrated, &ids) == expected;
            if !same {
                seen.silent_losses.push(format!(
                    "case {case}: {what}: migrate copied {} sessions and called the copy identical",
                    report
                ));
            }
            let _ = std::fs::remove_dir_all(&migrated);
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut file = copy.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(file));
        }
    }
    figures
}

/// Runs the library's migrate from `database` to a new folder of logs.
fn migrate_quietly(database: &Path, folder: &Path) -> Result<usize, String> {
    let source = Store::open_read_only(database).map_err(|error| error.to_string())?;
    let destination = Store::create(folder).map_err(|error| error.to_string())?;
    sessionlog_store::migrate(&source, &destination, &mut |_| {})
        .map(|report| report.sessions)
        .map_err(|error| error.to_string())
}

fn exports_of_folder(folder: &Path, ids: &[String]) -> BTreeMap<String, String> {
    ids.iter()
        .map(|session| {
            let log: PathBuf = folder.join(format!("{session}.jsonl"));
            let export = run(["export", &text(&log)]);
            (session.clone(), export.stdout)
        })
        .collect()
}

fn print_figures(figures: &BTreeMap<Damage, Figures>) {
    for (kind, seen) in figures {
        println!(
            "{kind:?}: {} cases, verify exits {:?}, harmless {}, migrated {}, silent losses {}",
            seen.cases,
            seen.verify_codes,
            seen.harmless,
            seen.migrated,
            seen.silent_losses.len()
        );
    }
}

#[test]
fn no_page_level_damage_verifies_clean_while_an_event_is_lost_or_changed() {
    let long = std::env::var_os("SESSIONLOG_LONG").is_some();
    let cases = if long { 6000 } else { 240 };
    let figures = campaign(cases, 0x5eed_da7a);
    print_figures(&figures);
    let losses: Vec<&String> = figures
        .values()
        .flat_map(|seen| &seen.silent_losses)
        .collect();
    assert!(losses.is_empty(), "silent losses: {losses:#?}");
    let corrupt: usize = figures
        .values()
        .map(|seen| seen.verify_codes.get(&2).copied().unwrap_or(0))
        .sum();
    assert!(corrupt > cases / 2, "most damage is found: {figures:#?}");
}

/// Every byte of every file in `folder`, by name.
fn folder_bytes(folder: &Path) -> BTreeMap<String, Vec<u8>> {
    ok(std::fs::read_dir(folder))
        .map(|entry| {
            let path = ok(entry).path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            (
                name.unwrap_or_default(),
                std::fs::read(&path).unwrap_or_default(),
            )
        })
        .collect()
}

/// Nor do the commands that write to a session a store already holds:
/// `append`, `seal`, `preset` and `fork` on an empty file once made it a
/// store (WAL, the schema, mode 0644) before finding no session there.
/// Only `create` makes it one, private to its owner.
#[test]
fn only_create_makes_an_empty_file_a_store() {
    use std::os::unix::fs::PermissionsExt;
    let folder = ok(tempfile::tempdir());
    let empty = folder.path().join("empty.db");
    ok(std::fs::write(&empty, b""));
    ok(std::fs::set_permissions(
        &empty,
        std::fs::Permissions::from_mode(0o644),
    ));
    let key = folder.path().join("seal.key");
    run(["keygen", &text(&key)]).expect_code(0);
    let database = text(&empty);
    for arguments in [
        vec!["append", &database, "--session", "a"],
        vec!["seal", &database, "--session", "a", "--key", &text(&key)],
        vec!["preset", &database, "--session", "a", "read-only"],
        vec!["fork", &database, "--session", "a", "--child", "b"],
    ] {
        let refused = crate::cli_support::run_command(sessionlog(&arguments), Some(""));
        assert_eq!(refused.code, 1, "{arguments:?}: {refused:?}");
        assert!(
            refused.stderr.contains("not a sessionlog store"),
            "{arguments:?}: {}",
            refused.stderr
        );
        assert_eq!(ok(std::fs::read(&empty)), b"", "{arguments:?} changed it");
    }
    run(["create", &database, "--session", "a"]).expect_code(0);
    let mode = ok(std::fs::metadata(&empty)).permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a store is private to its owner");
    run(["verify", &database]).expect_code(0);
}

#[test]
fn readers_never_adopt_another_applications_database_nor_an_empty_file() {
    let folder = ok(tempfile::tempdir());
    let foreign = folder.path().join("other.db");
    {
        let connection = ok(rusqlite::Connection::open(&foreign));
        ok(connection
            .execute_batch("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('x');"));
    }
    let empty = folder.path().join("empty.db");
    ok(std::fs::write(&empty, b""));
    // A text file named as a database: no damaged database, no store.
    let notes = folder.path().join("notes.db");
    ok(std::fs::write(&notes, b"garbage\n"));
    let before = folder_bytes(folder.path());
    for database in [&foreign, &empty, &notes] {
        for command in ["verify", "list", "stats", "export"] {
            let reading = run([command, &text(database)]);
            assert_eq!(reading.code, 1, "{command} {}: {reading:?}", text(database));
            assert!(
                reading.stderr.contains("not a sessionlog store"),
                "{command}: {}",
                reading.stderr
            );
        }
    }
    let appended = crate::cli_support::run_command(
        sessionlog(["append", &text(&notes), "--session", "a"]),
        Some(""),
    );
    assert_eq!(appended.code, 1, "{appended:?}");
    assert!(
        appended.stderr.contains("not a SQLite database"),
        "{}",
        appended.stderr
    );
    assert_eq!(folder_bytes(folder.path()), before, "not a byte changed");
    // A store whose header was zeroed, or whose magic text alone was
    // changed, is a damaged database, not another file.
    let store = folder.path().join("store.db");
    run(["create", &text(&store), "--session", "a"]).expect_code(0);
    let made = ok(std::fs::read(&store));
    for (damage, range, byte) in [("zeroed", 0..100, 0u8), ("magic changed", 0..6, b'X')] {
        let mut bytes = made.clone();
        bytes[range].fill(byte);
        let damaged = folder.path().join(format!("{damage}.db"));
        ok(std::fs::write(&damaged, &bytes));
        let verified = run(["verify", &text(&damaged)]);
        assert_eq!(verified.code, 2, "{damage}: {verified:?}");
        assert!(
            verified.stderr.contains("damaged"),
            "{damage}: {}",
            verified.stderr
        );
    }
}

#[test]
fn a_newer_schema_is_refused_by_readers_and_writers_before_anything_changes() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    run(["create", &text(&database), "--session", "a"]).expect_code(0);
    ok(ok(rusqlite::Connection::open(&database)).pragma_update(None, "user_version", 99));
    refused_by_every_command(folder.path(), "99");
}

/// `verify`, `list`, `export` and `append` (of a turn) of the store
/// `s.db` in `folder` each exit 1 saying `said`, and not a byte of the
/// folder changes.
fn refused_by_every_command(folder: &Path, said: &str) {
    let before = folder_bytes(folder);
    for arguments in [
        vec!["verify", "s.db"],
        vec!["list", "s.db"],
        vec!["export", "s.db"],
        vec!["append", "s.db", "--session", "a"],
    ] {
        let mut command = sessionlog(&arguments);
        command.current_dir(folder);
        let refused = crate::cli_support::run_command(
            command,
            Some("{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n"),
        );
        assert_eq!(refused.code, 1, "{said}: {arguments:?}: {refused:?}");
        assert!(refused.stderr.contains(said), "{said}: {}", refused.stderr);
    }
    assert_eq!(folder_bytes(folder), before, "{said}: not a byte changed");
}

/// A trigger or a view added to a store's schema (SQL that would run inside
/// every append: it could loop for ever holding the session's lock, or
/// rewrite rows) makes the file no store to any command, named, and nothing
/// is written.
#[test]
fn a_trigger_or_a_view_in_the_schema_is_refused_by_every_command() {
    for (object, sql) in [
        (
            "trigger t",
            "CREATE TRIGGER t AFTER INSERT ON events BEGIN SELECT 1; END",
        ),
        ("view v", "CREATE VIEW v AS SELECT id FROM sessions"),
    ] {
        let folder = ok(tempfile::tempdir());
        let database = folder.path().join("s.db");
        run(["create", &text(&database), "--session", "a"]).expect_code(0);
        ok(ok(rusqlite::Connection::open(&database)).execute_batch(sql));
        refused_by_every_command(folder.path(), object);
    }
}

/// The files SQLite keeps beside a database, and the lock folder, made by
/// another user (who could read every event written through them, change
/// what is read, or hold every session locked) are refused, named; the
/// owner's own, left readable by others, are made private.
#[test]
fn companions_another_user_made_are_refused_and_the_owners_made_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let turn = "{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n";
    let append = |folder: &Path| {
        let mut command = sessionlog(["append", "s.db", "--session", "a"]);
        command.current_dir(folder);
        crate::cli_support::run_command(command, Some(turn))
    };
    let mode = |path: &Path| ok(std::fs::symlink_metadata(path)).mode() & 0o777;
    // The owner's own, open to everyone: made private.
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    run(["create", &text(&database), "--session", "a"]).expect_code(0);
    let wal = folder.path().join("s.db-wal");
    let locks = folder.path().join("s.db.locks");
    ok(std::fs::write(&wal, b""));
    ok(std::fs::set_permissions(
        &wal,
        std::fs::Permissions::from_mode(0o666),
    ));
    ok(std::fs::create_dir(&locks));
    ok(std::fs::set_permissions(
        &locks,
        std::fs::Permissions::from_mode(0o777),
    ));
    let appended = append(folder.path());
    assert_eq!(appended.code, 0, "{appended:?}");
    assert_eq!(mode(&locks), 0o700);
    if wal.exists() {
        assert_eq!(mode(&wal), 0o600);
    }
    // Another user's: only root can make one here.
    if !running_as_root() {
        eprintln!("note: not root; the case of another user's files needs chown");
        return;
    }
    for (name, make) in [
        ("s.db-wal", false),
        ("s.db-shm", false),
        ("s.db.locks", true),
    ] {
        let folder = ok(tempfile::tempdir());
        let database = folder.path().join("s.db");
        run(["create", &text(&database), "--session", "a"]).expect_code(0);
        let planted = folder.path().join(name);
        match make {
            true => ok(std::fs::create_dir(&planted)),
            false => ok(std::fs::write(&planted, b"")),
        }
        ok(std::os::unix::fs::chown(
            &planted,
            Some(65_534),
            Some(65_534),
        ));
        let refused = append(folder.path());
        assert_eq!(refused.code, 1, "{name}: {refused:?}");
        assert!(
            refused.stderr.contains(name) && refused.stderr.contains("another user"),
            "{name}: {}",
            refused.stderr
        );
        assert_eq!(
            ok(std::fs::symlink_metadata(&planted)).uid(),
            65_534,
            "{name}: left as it was"
        );
    }
}

/// Runs `command` without write permission on `folder`: as the `nobody`
/// user when the tests run as root (whom permissions do not stop), else
/// with the folder and its files made read-only.
fn without_write_permission(folder: &Path, arguments: &[&str]) -> crate::cli_support::Run {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let set = |path: &Path, mode: u32| {
        ok(std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(mode),
        ))
    };
    let root = running_as_root();
    for entry in ok(std::fs::read_dir(folder)) {
        let path = ok(entry).path();
        if path.is_file() {
            set(&path, 0o444);
        }
    }
    set(folder, 0o555);
    let mut command = sessionlog(arguments);
    command.current_dir(folder);
    if root {
        if let Some(parent) = folder.parent() {
            set(parent, 0o755);
        }
        command.uid(65_534).gid(65_534);
    }
    let result = crate::cli_support::run_command(command, None);
    set(folder, 0o700);
    result
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("Uid:"))
                .map(|line| line.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn a_reader_without_write_permission_verifies_and_exports() {
    let outer = ok(tempfile::tempdir());
    let folder = outer.path().join("store");
    ok(std::fs::create_dir(&folder));
    let database = folder.join("s.db");
    run(["create", &text(&database), "--session", "a"]).expect_code(0);
    let appended = crate::cli_support::run_with_stdin(
        ["append", &text(&database), "--session", "a"],
        "{\"type\":\"note/x\",\"data\":{\"n\":1}}\n",
    );
    assert_eq!(appended.code, 0, "{appended:?}");
    let before = ok(std::fs::read(&database));
    let verified = without_write_permission(&folder, &["verify", "s.db"]);
    assert_eq!(verified.code, 0, "{verified:?}");
    assert!(
        verified.stdout.contains("ok (1 event, last seq 1)"),
        "{}",
        verified.stdout
    );
    let exported = without_write_permission(&folder, &["export", "s.db", "--session", "a"]);
    assert_eq!(exported.code, 0, "{exported:?}");
    assert!(exported.stdout.contains("\"n\":1"), "{}", exported.stdout);
    assert_eq!(ok(std::fs::read(&database)), before, "not a byte changed");
}

#[test]
fn a_write_ahead_log_removed_under_a_live_append_loses_nothing_acknowledged_after_sigkill() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    run(["create", &text(&database), "--session", "a"]).expect_code(0);
    let mut child = ok(sessionlog(["append", &text(&database), "--session", "a"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn());
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("a stdin pipe"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("a stdout pipe"));
    let mut acks = BufReader::new(stdout).lines();
    let mut acknowledged = Vec::new();
    let mut send = |n: u64, acknowledged: &mut Vec<u64>| -> bool {
        let line = format!("{{\"type\":\"note/x\",\"data\":{{\"n\":{n}}}}}\n");
        if stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return false;
        }
        match acks.next() {
            Some(Ok(ack)) => {
                let value: serde_json::Value = ok(serde_json::from_str(&ack));
                acknowledged.push(value["seq"].as_u64().unwrap_or(0));
                true
            }
            _ => false,
        }
    };
    assert!(
        send(1, &mut acknowledged),
        "the first append is acknowledged"
    );
    let mut wal = database.as_os_str().to_owned();
    wal.push("-wal");
    ok(std::fs::remove_file(PathBuf::from(wal)));
    for n in 2..=4 {
        if !send(n, &mut acknowledged) {
            break;
        }
    }
    ok(child.kill());
    let _ = child.wait();
    assert_eq!(
        acknowledged,
        [1, 2],
        "the append that found the log gone is saved and acknowledged, then the writer stops"
    );
    let exported = run(["export", &text(&database), "--session", "a"]);
    assert_eq!(exported.code, 0, "{exported:?}");
    let seqs: Vec<u64> = exported
        .stdout
        .lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|event| event["seq"].as_u64())
        .collect();
    assert_eq!(
        seqs, acknowledged,
        "every acknowledged append survives SIGKILL"
    );
}

#[test]
fn verify_reports_damage_per_session_and_goes_on_to_the_others() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    for session in ["a", "b", "c"] {
        run(["create", &text(&database), "--session", session]).expect_code(0);
        let lines = "{\"type\":\"note/x\",\"data\":{}}\n".repeat(3);
        crate::cli_support::run_with_stdin(
            ["append", &text(&database), "--session", session],
            &lines,
        )
        .expect_code(0);
    }
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch(
            "PRAGMA foreign_keys = OFF;
             DELETE FROM events WHERE session_id = 'b' AND seq = 3;
             UPDATE sessions SET id = 'c/x' WHERE id = 'c';",
        ));
    }
    let verified = run(["verify", &text(&database), "--json"]);
    assert_eq!(verified.code, 2, "{verified:?}");
    let verdicts: Vec<(Option<String>, String)> = verified
        .stdout
        .lines()
        .map(|line| {
            let verdict: serde_json::Value = ok(serde_json::from_str(line));
            (
                verdict["session"].as_str().map(str::to_owned),
                verdict["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    // The invalid id, found while listing, first; the events of session
    // c, which now has no row, after the sessions (docs/FORMAT.md).
    let expected = [
        (None, "corrupt"),
        (Some("a"), "ok"),
        (Some("b"), "corrupt"),
        (None, "corrupt"),
    ]
    .map(|(session, status)| (session.map(str::to_owned), status.to_owned()));
    assert_eq!(verdicts, expected, "{}", verified.stdout);
    assert!(
        verified.stdout.contains("\\\"c/x\\\""),
        "{}",
        verified.stdout
    );
    assert!(
        verified.stdout.contains("no session row"),
        "{}",
        verified.stdout
    );
    for command in ["list", "stats"] {
        assert_eq!(run([command, &text(&database)]).code, 2, "{command}");
    }
    // Said once, beside the store that is damaged: the line names the
    // store as its source, and its message does not name it again.
    let printed = run(["verify", &text(&database)]);
    let prefix = format!("{}: the database is damaged: ", text(&database));
    let whole: Vec<&str> = printed
        .stdout
        .lines()
        .filter(|line| line.contains("the database is damaged"))
        .collect();
    assert_eq!(whole.len(), 2, "{}", printed.stdout);
    assert!(
        whole
            .iter()
            .all(|line| line.starts_with(&prefix) && line.matches(&text(&database)).count() == 1),
        "{}",
        printed.stdout
    );
}

/// The status `verify --json` gave each session (damage of the database
/// as a whole, with no session, left out).
fn statuses(database: &Path) -> BTreeMap<String, String> {
    run(["verify", &text(database), "--json", "--quiet"])
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|verdict| {
            let session = verdict["session"].as_str()?.to_owned();
            Some((session, verdict["status"].as_str()?.to_owned()))
        })
        .collect()
}

/// A store-wide read takes the rows of many sessions at once: damage in
/// one session's rows, whether a value that does not decode or a page
/// SQLite cannot read, is that session's finding alone, never its
/// neighbours'.
#[test]
fn damage_in_one_session_is_never_blamed_on_its_neighbours() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    let names: Vec<String> = (0..60).map(|n| format!("s{n:03}")).collect();
    {
        let store = ok(SqliteStore::open(&database));
        for name in &names {
            let header = SessionHeader::root(id(name), 1_700_000_000_000, "/work".to_owned());
            ok(store.create(&header, &[], Durability::Buffered));
            let mut writer = ok(store.open_writer(&id(name), WriterOptions::default()));
            for seq in 1..=5 {
                let data = format!(r#"{{"m":"mk-{name}-{seq}","pad":"{}"}}"#, "p".repeat(150));
                ok(writer.append(NewEvent::new("x-test/note", data), None));
            }
        }
    }
    let clean = ok(std::fs::read(&database));
    // A body and a session row that hold bytes that are not UTF-8.
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch(
            "UPDATE events SET body = CAST(x'7b8e7d' AS TEXT) WHERE session_id = 's020' AND seq = 2;
             UPDATE sessions SET header_body = CAST(x'7b8e7d' AS TEXT) WHERE id = 's040';",
        ));
    }
    let found = statuses(&database);
    for name in &names {
        let expected = match name.as_str() {
            "s020" | "s040" => "corrupt",
            _ => "ok",
        };
        assert_eq!(
            found.get(name).map(String::as_str),
            Some(expected),
            "{name}: {found:?}"
        );
    }
    let refused = run(["export", &text(&database), "--session", "s020"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("s020 is corrupt at seq 2"),
        "{}",
        refused.stderr
    );
    // A page of event rows zeroed in the middle of the file: the sessions
    // with rows on it are corrupt, every other one reads whole.
    let marker = b"mk-s030-3";
    let at = clean
        .windows(marker.len())
        .position(|window| window == marker)
        .unwrap_or_else(|| panic!("the marker is in the file"));
    let page = at / PAGE;
    let on_page = |name: &str| {
        let rows = &clean[page * PAGE..(page + 1) * PAGE];
        (1..=5).any(|seq| {
            let marker = format!("mk-{name}-{seq}");
            rows.windows(marker.len())
                .any(|window| window == marker.as_bytes())
        })
    };
    let mut bytes = clean.clone();
    bytes[page * PAGE..(page + 1) * PAGE].fill(0);
    // A read of a session's rows ends by reading the key after its last
    // row: the session just before the page cannot tell whether it had
    // rows there, and is damaged too.
    let first = names
        .iter()
        .position(|name| on_page(name))
        .unwrap_or_else(|| panic!("a session has rows on page {page}"));
    let touches = |name: &String| on_page(name) || first > 0 && *name == names[first - 1];
    let damaged = folder.path().join("page.db");
    ok(std::fs::write(&damaged, &bytes));
    let found = statuses(&damaged);
    // Each corrupt session is named with a seq of its own: 1 to 5, or 6
    // (a row after its last, on the page it cannot read).
    for line in run(["verify", &text(&damaged), "--json", "--quiet"])
        .stdout
        .lines()
    {
        let verdict: serde_json::Value = ok(serde_json::from_str(line));
        if let Some(seq) = verdict["corruption"]["seq"].as_u64() {
            assert!((1..=6).contains(&seq), "{line}");
        }
    }
    let mut blamed = 0;
    for name in &names {
        match found.get(name).map(String::as_str) {
            Some("ok") => {}
            Some("corrupt") => {
                blamed += 1;
                assert!(
                    touches(name),
                    "{name} has no row at page {page} but is corrupt: {found:?}"
                );
            }
            other => panic!("{name}: {other:?} ({found:?})"),
        }
    }
    assert!(
        blamed > 0,
        "the sessions of the zeroed page are corrupt: {found:?}"
    );
}

/// A page of event rows that SQLite cannot read, in the middle of a
/// session: a read gives out the events before it, then the corruption,
/// as a read of a log file stops at its damage. `project --at` before the
/// page succeeds, `tail --from 1` prints the events before it, `stats
/// --session` and `verify` count them, and each exits 2 once it reaches
/// the page.
#[test]
fn an_unreadable_page_leaves_the_events_before_it_to_every_reader() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    run(["create", &text(&database), "--session", "s"]).expect_code(0);
    let marker = |n: usize| format!("mk-{n}-");
    let lines: String = (1..=300)
        .map(|n| {
            let data = format!(r#"{{"n":{n},"text":"{}{}"}}"#, marker(n), "p".repeat(180));
            format!("{{\"type\":\"x-test/note\",\"data\":{data}}}\n")
        })
        .collect();
    crate::cli_support::run_with_stdin(["append", &text(&database), "--session", "s"], &lines)
        .expect_code(0);
    {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
    }
    // The leaf page of `events` (an index b-tree leaf, type 10: the table
    // has no rowid) that holds event 150, zeroed.
    let mut bytes = ok(std::fs::read(&database));
    let holds = |page: &[u8], n: usize| {
        let marker = marker(n);
        page.windows(marker.len())
            .any(|window| window == marker.as_bytes())
    };
    let page = (1..bytes.len() / PAGE)
        .map(|page| page * PAGE..(page + 1) * PAGE)
        .find(|page| bytes[page.start] == 10 && holds(&bytes[page.clone()], 150))
        .unwrap_or_else(|| panic!("no leaf page holds event 150"));
    let first_lost = (1..=150)
        .find(|&n| holds(&bytes[page.clone()], n))
        .unwrap_or(150);
    assert!(
        first_lost > 3,
        "event {first_lost} is the first on its page"
    );
    bytes[page].fill(0);
    ok(std::fs::write(&database, bytes));
    let store = text(&database);
    let before = (1..first_lost as u64).collect::<Vec<_>>();
    let at = |seq: usize| seq.to_string();

    run(["project", &store, "--session", "s", "--at", "1"]).expect_code(0);
    run([
        "project",
        &store,
        "--session",
        "s",
        "--at",
        &at(first_lost - 1),
    ])
    .expect_code(0);
    let reaching = run(["project", &store, "--session", "s", "--at", &at(first_lost)]);
    reaching.expect_code(2);
    let lost = format!("session s is corrupt at seq {first_lost}: the row cannot be read");
    assert!(reaching.stderr.contains(&lost), "{}", reaching.stderr);
    let tail = run(["tail", &store, "--session", "s", "--from", "1"]);
    tail.expect_code(2);
    let printed: Vec<u64> = tail
        .stdout
        .lines()
        .map(|line| {
            let record: serde_json::Value = ok(serde_json::from_str(line));
            record["seq"].as_u64().unwrap_or_default()
        })
        .collect();
    assert_eq!(printed, before);
    let stats = run(["stats", &store, "--session", "s", "--json"]);
    stats.expect_code(2);
    let report: serde_json::Value = ok(serde_json::from_str(&stats.stdout));
    assert_eq!(
        report["sessions"][0]["events"],
        first_lost - 1,
        "{}",
        stats.stdout
    );
    // The page is damage of the file, too: `stats` of the whole store
    // refuses it before it prints a report.
    let whole = run(["stats", &store, "--json"]);
    whole.expect_code(2);
    assert!(whole.stdout.is_empty(), "{}", whole.stdout);
    let verified = run(["verify", &store, "--json"]);
    verified.expect_code(2);
    let verdict: serde_json::Value = verified
        .stdout
        .lines()
        .map(|line| ok(serde_json::from_str::<serde_json::Value>(line)))
        .find(|verdict| verdict["session"] == "s")
        .unwrap_or_else(|| panic!("no verdict of session s: {}", verified.stdout));
    assert_eq!(verdict["events"], first_lost - 1, "{verdict}");
    assert_eq!(verdict["corruption"]["seq"], first_lost, "{verdict}");
}

/// A page that SQLite's `quick_check` finds damaged but no session's read
/// meets (the page of the `snapshots` table): damage of the database as a
/// whole, which every store-wide command refuses (exit 2) as `verify`
/// reports it; `stats` before it prints a report. A command of one
/// session reads that session alone.
#[test]
fn a_database_that_fails_quick_check_is_refused_by_every_store_wide_command() {
    let dir = ok(tempfile::tempdir());
    let examples = crate::cli_support::workspace_root().join("examples/sessions");
    let database = dir.path().join("store.db");
    run(["migrate", &text(&examples), &text(&database)]).expect_code(0);
    let page = {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
        let page: i64 = ok(connection.query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'snapshots'",
            [],
            |row| row.get(0),
        ));
        page.unsigned_abs() as usize
    };
    let mut bytes = ok(std::fs::read(&database));
    bytes[(page - 1) * PAGE..page * PAGE].fill(7);
    ok(std::fs::write(&database, bytes));
    let store = text(&database);
    let copy = text(&dir.path().join("copy"));
    for args in [
        vec!["verify", &store],
        vec!["stats", &store],
        vec!["stats", &store, "--json"],
        vec!["list", &store],
        vec!["list", &store, "--json"],
        vec!["migrate", &store, &copy],
        vec!["diff", &store, &text(&examples)],
    ] {
        let refused = run(&args);
        refused.expect_code(2);
        let said = format!("{}{}", refused.stdout, refused.stderr);
        assert!(said.contains("quick_check"), "{args:?}: {said}");
        // Every finding of quick_check on the line that names it.
        assert!(
            !said
                .lines()
                .any(|line| line.starts_with("***") || line.starts_with("Tree ")),
            "{args:?}: {said}"
        );
        if args[0] != "verify" {
            assert!(refused.stdout.is_empty(), "{args:?}: {}", refused.stdout);
        }
    }
    run(["stats", &store, "--session", "lead"]).expect_code(0);
    run(["export", &store, "--session", "lead"]).expect_code(0);

    // The index of the snapshots' table zeroed: quick_check reports
    // several findings, which `verify` gives on the one line that names
    // them, as it gives every finding of the database as a whole.
    let database = dir.path().join("index.db");
    run(["migrate", &text(&examples), &text(&database)]).expect_code(0);
    let page = {
        let connection = ok(rusqlite::Connection::open(&database));
        ok(connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"));
        let page: i64 = ok(connection.query_row(
            "SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'snapshots'",
            [],
            |row| row.get(0),
        ));
        page.unsigned_abs() as usize
    };
    let mut bytes = ok(std::fs::read(&database));
    bytes[(page - 1) * PAGE..page * PAGE].fill(0);
    ok(std::fs::write(&database, bytes));
    let refused = run(["verify", &text(&database)]);
    refused.expect_code(2);
    let findings: Vec<&str> = refused
        .stderr
        .lines()
        .chain(refused.stdout.lines())
        .filter(|line| line.contains("quick_check reports"))
        .collect();
    assert_eq!(findings.len(), 1, "{}{}", refused.stdout, refused.stderr);
    assert!(findings[0].contains("; "), "{}", findings[0]);
    assert!(
        !refused
            .stdout
            .lines()
            .chain(refused.stderr.lines())
            .any(|line| line.starts_with("***")
                || line.starts_with("Tree ")
                || line.starts_with("Page ")),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
}

/// Event rows of an id that has no session row, written behind the
/// store's back: no session of that id is created over them, by `create`,
/// `fork` or `migrate` (which writes nothing then), as PostgreSQL refuses
/// it; a session created over them would read them as its own.
#[test]
fn no_session_is_created_over_events_without_a_session_row() {
    let dir = ok(tempfile::tempdir());
    let examples = crate::cli_support::workspace_root().join("examples/sessions");
    let database = dir.path().join("store.db");
    run(["create", &text(&database), "--session", "keep"]).expect_code(0);
    let connection = ok(rusqlite::Connection::open(&database));
    // As the sqlite3 shell writes, without the foreign keys checked.
    ok(connection.execute_batch("PRAGMA foreign_keys = OFF"));
    // A row of "ghost" at seq 1, and one of "lead" (a session of the
    // examples) at seq 50.
    for (owner, seq) in [("ghost", 1), ("lead", 50)] {
        ok(connection.execute(
            "INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
             VALUES (?1, ?2, 1, 'note/test', NULL, '{}', 0)",
            rusqlite::params![owner, seq],
        ));
    }
    drop(connection);
    for args in [
        vec![
            "create".to_owned(),
            text(&database),
            "--session".to_owned(),
            "ghost".to_owned(),
        ],
        vec![
            "fork".to_owned(),
            text(&database),
            "--session".to_owned(),
            "keep".to_owned(),
            "--child".to_owned(),
            "ghost".to_owned(),
        ],
        vec!["migrate".to_owned(), text(&examples), text(&database)],
    ] {
        let refused = run(&args);
        refused.expect_code(2);
        // `migrate` refuses the damaged destination before it stages any
        // session; `create` and `fork` refuse the one session.
        let said = match args[0].as_str() {
            "migrate" => "\"ghost\" have no session row",
            _ => "have no session row; no session of that id is created over them",
        };
        assert!(
            refused.stderr.contains(said),
            "{args:?}: {}",
            refused.stderr
        );
    }
    assert_eq!(session_rows(&database), ["keep"], "nothing was created");
}

/// A destination database damaged as a whole (events without a session
/// row, of an id no source session has) is refused before anything is
/// published: the read-back found it only after the copy was in.
#[test]
fn migrate_into_a_damaged_database_writes_nothing() {
    let dir = ok(tempfile::tempdir());
    let examples = crate::cli_support::workspace_root().join("examples/sessions");
    let database = dir.path().join("store.db");
    run(["create", &text(&database), "--session", "keep"]).expect_code(0);
    let connection = ok(rusqlite::Connection::open(&database));
    ok(connection.execute_batch(
        "PRAGMA foreign_keys = OFF;
         INSERT INTO events (session_id, seq, ts, type, batch, body, crc)
         VALUES ('ghost', 1, 1, 'note/test', NULL, '{}', 0);",
    ));
    drop(connection);
    for resume in [false, true] {
        let mut args = vec!["migrate".to_owned(), text(&examples), text(&database)];
        if resume {
            args.push("--resume".to_owned());
        }
        let refused = run(&args);
        refused.expect_code(2);
        assert!(
            refused.stderr.contains("\"ghost\" have no session row"),
            "{}",
            refused.stderr
        );
    }
    assert_eq!(session_rows(&database), ["keep"], "nothing was published");
}

/// The ids of the session rows of `database`, read directly.
fn session_rows(database: &Path) -> Vec<String> {
    let connection = ok(rusqlite::Connection::open(database));
    let mut statement = ok(connection.prepare("SELECT id FROM sessions ORDER BY id"));
    let ids = ok(statement
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect()));
    ids
}

/// A `-wal` that is a symbolic link may hold changes that SQLite, which
/// does not follow one, never reads: a reading command refuses the
/// database, naming the link, rather than read it without them (and
/// `migrate` never calls a copy without them identical).
#[test]
fn a_write_ahead_log_that_is_a_symbolic_link_is_refused_not_skipped() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    run(["create", &text(&database), "--session", "a"]).expect_code(0);
    let elsewhere = folder.path().join("elsewhere");
    ok(std::fs::create_dir(&elsewhere));
    let target = elsewhere.join("s.db-wal");
    ok(std::fs::write(&target, b""));
    let wal = folder.path().join("s.db-wal");
    let _ = std::fs::remove_file(&wal);
    ok(std::os::unix::fs::symlink(&target, &wal));
    for command in [
        vec!["verify".to_owned(), text(&database)],
        vec!["list".to_owned(), text(&database)],
        vec![
            "migrate".to_owned(),
            text(&database),
            text(&folder.path().join("copy")),
        ],
    ] {
        let refused = run(command.clone());
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("s.db-wal") && refused.stderr.contains("not a regular file"),
            "{command:?}: {}",
            refused.stderr
        );
    }
    assert!(!folder.path().join("copy").exists(), "nothing was migrated");
}

/// A fork by reference whose header its parent's log does not give (its
/// approval policy changed, the row's CRC and columns made to agree, as a
/// header written from a forged state snapshot would be): `verify` reports
/// it on the child, corruption at seq 0, and every other session ok.
#[test]
fn a_fork_by_reference_whose_header_its_parents_log_does_not_give_is_corrupt() {
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("s.db");
    let store = text(&database);
    run(["create", &store, "--session", "p"]).expect_code(0);
    crate::cli_support::run_with_stdin(
        ["append", &store, "--session", "p"],
        "{\"type\":\"approval/policy\",\"data\":{\"policy\":\"never\"}}\n",
    )
    .expect_code(0);
    run(["fork", &store, "--session", "p", "--child", "c"]).expect_code(0);
    run(["fork", &store, "--session", "c", "--child", "g"]).expect_code(0);
    run(["verify", &store]).expect_code(0);

    let connection = ok(rusqlite::Connection::open(&database));
    let body: String = ok(connection.query_row(
        "SELECT header_body FROM sessions WHERE id = 'c'",
        [],
        |row| row.get(0),
    ));
    assert!(body.contains("\"approvalPolicy\":\"never\""), "{body}");
    let forged = body.replace("\"approvalPolicy\":\"never\"", "\"approvalPolicy\":\"ask\"");
    let crc =
        sessionlog_schema::record_crc(&SessionId::parse("c").expect("an id"), forged.as_bytes());
    ok(connection.execute(
        "UPDATE sessions SET header_body = ?1, header_crc = ?2, approval_policy = 'ask' WHERE id = 'c'",
        rusqlite::params![forged, crc],
    ));
    drop(connection);

    let verified = run(["verify", &store, "--json"]);
    verified.expect_code(2);
    let verdicts: Vec<serde_json::Value> = verified
        .stdout
        .lines()
        .map(|line| ok(serde_json::from_str(line)))
        .collect();
    let status = |session: &str| {
        verdicts
            .iter()
            .find(|verdict| verdict["session"] == session)
            .map(|verdict| verdict["status"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(status("p").as_deref(), Some("ok"), "{}", verified.stdout);
    assert_eq!(
        status("c").as_deref(),
        Some("corrupt"),
        "{}",
        verified.stdout
    );
    let child = verdicts.iter().find(|verdict| verdict["session"] == "c");
    let corruption = &child.expect("a verdict of c")["corruption"];
    assert_eq!(corruption["seq"], 0, "{corruption}");
    let message = corruption["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("approvalPolicy ask") && message.contains("approvalPolicy never"),
        "{message}"
    );
    // The grandchild, forked before the change, took the header its
    // parent had then: against the changed one, it no longer follows.
    assert_eq!(
        status("g").as_deref(),
        Some("corrupt"),
        "{}",
        verified.stdout
    );
}
