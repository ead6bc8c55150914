//! Forks by reference in the databases, through the real binary.
//!
//! A SQLite or PostgreSQL fork stores no rows for its seeded events; every
//! reader must still see exactly what a JSONL (copied) fork holds:
//! - `export` of a child and of a grandchild (whose parent is itself a fork
//!   by reference): the parent's records byte for byte, the header and the
//!   forks' own events equal but for the fork's clock; `verify`, `project`,
//!   `tail` and `review-request` give the same output;
//! - the database holds only the child's own rows;
//! - `migrate` writes a by-reference child out whole into a folder of logs
//!   (byte-identical to the database's export, every line with the CRC of
//!   the child's id) and into another database, and `diff` finds nothing
//!   between them;
//! - a sealed child verifies with `--require-sealed`;
//! - a parent event row that is deleted makes the child corrupt (exit 2),
//!   named with the child's id and seq.
//!
//! PostgreSQL joins when `SESSIONLOG_TEST_PG` names a server.

use std::path::Path;

use crate::cli_support::{run, run_with_stdin, workspace_root};
use crate::crash::text;
use crate::faults::ok;
use crate::postgres::{test_server, Schema};

/// The prompt of every fork here.
const PROMPT: &str = "check the migration";

/// The pending action `review-request` is asked about.
const PENDING: &str =
    r#"{"callId":"call-9","stepId":"step-1","name":"shell","arguments":{"command":"ls"}}"#;

/// A line of an export with the fork's clock taken out: the header's
/// `createdAt`, an own event's `ts` (and the `time` `tail --json` shows of
/// it), and then the CRC (which covers them).
fn without_clock(line: &str) -> String {
    let mut text = line.to_owned();
    if let Some(start) = text.find("\"time\":\"") {
        let value = start + "\"time\":\"".len();
        if let Some(length) = text[value..].find('"') {
            text.replace_range(value..value + length, "T");
        }
    }
    for member in ["\"createdAt\":", "\"ts\":"] {
        if let Some(start) = text.find(member) {
            let digits = start + member.len();
            let end = text[digits..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(text.len(), |length| digits + length);
            text.replace_range(digits..end, "T");
        }
    }
    match text.rfind(",\"crc\":") {
        Some(crc) => text[..crc].to_owned(),
        None => text,
    }
}

/// An export compared across stores: its seeded lines (1..=seed) as they
/// are, the others without the fork's clock.
fn comparable(export: &str, seed: usize) -> Vec<String> {
    export
        .lines()
        .enumerate()
        .map(|(index, line)| match index {
            1.. if index <= seed => line.to_owned(),
            _ => without_clock(line),
        })
        .collect()
}

/// Checks that every line of `session`'s log carries the CRC of its body
/// computed for `session`'s id.
fn assert_crcs_for(session: &str, export: &str) {
    for line in export.lines() {
        let (body, crc) = line
            .rsplit_once(",\"crc\":\"")
            .unwrap_or_else(|| panic!("no CRC in {line}"));
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(session.as_bytes());
        hasher.update(body.as_bytes());
        assert_eq!(
            crc.trim_end_matches("\"}"),
            format!("{:08x}", hasher.finalize()),
            "{session}: {line}"
        );
    }
}

/// The seedLength of a child's export.
fn seed_length(export: &str) -> usize {
    let header = export.lines().next().unwrap_or_default();
    let value: serde_json::Value = ok(serde_json::from_str(header));
    value["seedLength"]
        .as_u64()
        .and_then(|seed| usize::try_from(seed).ok())
        .unwrap_or_else(|| panic!("no seedLength in {header}"))
}

/// Forks `auto-review` into `kid`, appends to `kid`, and forks `kid` into
/// `grandkid`, in `store`.
fn fork_family(store: &str) {
    run([
        "fork",
        store,
        "--session",
        "auto-review",
        "--child",
        "kid",
        "--prompt",
        PROMPT,
        "--quiet",
    ])
    .expect_code(0);
    crate::cli_support::run_with_stdin(
        ["append", store, "--session", "kid"],
        "{\"type\":\"x-test/probe\",\"data\":{\"n\":1}}\n",
    )
    .expect_code(0);
    run([
        "fork",
        store,
        "--session",
        "kid",
        "--child",
        "grandkid",
        "--prompt",
        PROMPT,
        "--quiet",
    ])
    .expect_code(0);
}

/// Output of `args` with the store's name taken out.
fn shown(args: &[&str], store: &str) -> (i32, String, String) {
    let result = run(args);
    let clean = |text: &str| {
        let mut text = text.replace(store, "STORE");
        for session in ["kid", "grandkid"] {
            text = text.replace(&format!("STORE/{session}.jsonl:"), "STORE:");
            text = text.replace(&format!("STORE#{session}:"), "STORE:");
        }
        text
    };
    (result.code, clean(&result.stdout), clean(&result.stderr))
}

/// The rows `session` holds in a SQLite store.
fn sqlite_rows(database: &Path, session: &str) -> i64 {
    let connection = ok(rusqlite::Connection::open(database));
    ok(connection.query_row(
        "SELECT count(*) FROM events WHERE session_id = ?1",
        [session],
        |row| row.get(0),
    ))
}

#[test]
fn a_fork_by_reference_reads_as_the_copied_fork_on_every_backend() {
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let server = test_server();
    let schema = server.as_deref().map(|server| Schema::new(server, "forks"));
    let mut stores = vec![
        ("jsonl", text(&folder.path().join("logs"))),
        ("sqlite", text(&folder.path().join("sessions.db"))),
    ];
    if let Some(schema) = &schema {
        stores.push(("postgres", schema.url.clone()));
    }
    for (_, store) in &stores {
        run(["migrate", &text(&examples), store]).expect_code(0);
        fork_family(store);
    }
    // Only the own rows are stored: the `auto` preset the parent
    // projects as and the prompt, then the probe appended to `kid`.
    let database = folder.path().join("sessions.db");
    assert_eq!(sqlite_rows(&database, "kid"), 3);
    assert_eq!(sqlite_rows(&database, "grandkid"), 2);

    let pending = folder.path().join("pending.json");
    ok(std::fs::write(&pending, PENDING));
    let pending = text(&pending);
    let (_, reference) = &stores[0];
    // The events of `auto-review` are the same bytes in every store; the
    // ones `kid` adds carry each store's own clock.
    let seed = seed_length(&run(["export", reference, "--session", "kid"]).stdout);
    assert!(seed > 10, "kid seeds {seed} events");
    for session in ["kid", "grandkid"] {
        let copied = run(["export", reference, "--session", session]);
        copied.expect_code(0);
        for (backend, store) in &stores[1..] {
            let export = run(["export", store, "--session", session]);
            export.expect_code(0);
            assert_eq!(
                comparable(&export.stdout, seed),
                comparable(&copied.stdout, seed),
                "{session} exported from {backend}"
            );
            for args in [
                vec!["verify", "STORE", "--session", session],
                vec!["verify", "STORE", "--session", session, "--json"],
                vec!["project", "STORE", "--session", session],
                vec!["project", "STORE", "--session", session, "--at", "5"],
                vec!["tail", "STORE", "--session", session, "-n", "3", "--json"],
                vec![
                    "review-request",
                    "STORE",
                    "--session",
                    session,
                    "--pending",
                    &pending,
                ],
            ] {
                let with = |store: &str| -> Vec<String> {
                    args.iter()
                        .map(|arg| match *arg {
                            "STORE" => store.to_owned(),
                            other => (*other).to_owned(),
                        })
                        .collect()
                };
                let on = |store: &str| {
                    let args = with(store);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let (code, stdout, stderr) = shown(&args, store);
                    let stdout: Vec<String> = stdout.lines().map(without_clock).collect();
                    (code, stdout, stderr)
                };
                assert_eq!(on(store), on(reference), "{args:?} on {backend}");
            }
        }
    }
    for (_, store) in &stores {
        run(["verify", store]).expect_code(0);
    }
}

#[test]
fn migrate_writes_a_fork_by_reference_out_whole_and_diff_finds_nothing() {
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let database = text(&folder.path().join("sessions.db"));
    run(["migrate", &text(&examples), &database]).expect_code(0);
    fork_family(&database);
    let logs = text(&folder.path().join("logs"));
    run(["migrate", &database, &logs]).expect_code(0);
    let mut targets = vec![logs.clone(), text(&folder.path().join("again.db"))];
    run(["migrate", &logs, &targets[1]]).expect_code(0);
    let server = test_server();
    let schema = server
        .as_deref()
        .map(|server| Schema::new(server, "forkmig"));
    if let Some(schema) = &schema {
        run(["migrate", &database, &schema.url]).expect_code(0);
        targets.push(schema.url.clone());
    }
    for target in &targets {
        for session in ["kid", "grandkid"] {
            let original = run(["export", &database, "--session", session]);
            let migrated = run(["export", target, "--session", session]);
            migrated.expect_code(0);
            assert_eq!(migrated.stdout, original.stdout, "{session} in {target}");
        }
        run(["diff", &database, target]).expect_code(0);
        run(["verify", target]).expect_code(0);
    }
    // The copy is whole: the child's seeded lines are in its own log, with
    // the CRCs of its own id.
    let kid = ok(std::fs::read_to_string(
        folder.path().join("logs/kid.jsonl"),
    ));
    assert_eq!(kid.lines().count(), 1 + seed_length(&kid) + 3);
    for session in ["kid", "grandkid"] {
        let log = folder.path().join(format!("logs/{session}.jsonl"));
        assert_crcs_for(session, &ok(std::fs::read_to_string(log)));
    }
}

#[test]
fn a_sealed_fork_by_reference_verifies_and_its_chain_runs_over_its_own_records() {
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let database = text(&folder.path().join("sessions.db"));
    let logs = text(&folder.path().join("logs"));
    run(["migrate", &text(&examples), &database]).expect_code(0);
    fork_family(&database);
    run(["seal", &database, "--session", "grandkid"]).expect_code(0);
    run([
        "verify",
        &database,
        "--session",
        "grandkid",
        "--require-sealed",
    ])
    .expect_code(0);
    // The chain of the child's own records: the same head as its copy.
    run(["migrate", &database, &logs]).expect_code(0);
    let head = |store: &str| run(["head", store, "--session", "grandkid"]).stdout;
    assert_eq!(head(&database), head(&logs));
    run(["verify", &logs, "--session", "grandkid", "--require-sealed"]).expect_code(0);
}

#[test]
fn a_deleted_parent_row_makes_the_fork_corrupt_naming_the_child_and_seq() {
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let database = folder.path().join("sessions.db");
    run(["migrate", &text(&examples), &text(&database)]).expect_code(0);
    fork_family(&text(&database));
    let connection = ok(rusqlite::Connection::open(&database));
    ok(connection.execute(
        "DELETE FROM events WHERE session_id = 'auto-review' AND seq = 4",
        [],
    ));
    drop(connection);
    for session in ["kid", "grandkid"] {
        let verified = run(["verify", &text(&database), "--session", session]);
        verified.expect_code(2);
        let said = format!("{}{}", verified.stdout, verified.stderr);
        assert!(
            said.contains(&format!("{session}: corrupt at seq 4: "))
                && said.contains("auto-review"),
            "{said}"
        );
        run(["export", &text(&database), "--session", session]).expect_code(2);
    }
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "forkdel");
    run(["migrate", &text(&examples), &schema.url]).expect_code(0);
    fork_family(&schema.url);
    let store = match ok(sessionlog_store::Store::open(&schema.path())) {
        sessionlog_store::Store::Postgres(store) => store,
        _ => panic!("not a PostgreSQL store"),
    };
    let mut client = ok(store.connect());
    ok(client.batch_execute("DELETE FROM events WHERE session_id = 'auto-review' AND seq = 4"));
    let verified = run(["verify", &schema.url, "--session", "grandkid"]);
    verified.expect_code(2);
    let said = format!("{}{}", verified.stdout, verified.stderr);
    assert!(said.contains("grandkid: corrupt at seq 4: "), "{said}");
}

/// A parent row past a fork by reference's seed is none of the child's:
/// removed, it makes the parent corrupt and leaves the child whole, as a
/// copied child would be, to `verify` as to every other command.
#[test]
fn a_deleted_parent_row_past_the_seed_leaves_the_fork_whole() {
    let folder = ok(tempfile::tempdir());
    let database = text(&folder.path().join("s.db"));
    run(["create", &database, "--session", "p", "--cwd", "/w"]).expect_code(0);
    let turn = "{\"type\":\"turn/start\",\"data\":{\"turnId\":\"t1\"}}\n\
                {\"type\":\"turn/end\",\"data\":{\"turnId\":\"t1\"}}\n";
    run_with_stdin(["append", &database, "--session", "p"], turn).expect_code(0);
    run(["fork", &database, "--session", "p", "--child", "k"]).expect_code(0);
    let note = "{\"type\":\"x-note\",\"data\":{}}\n";
    run_with_stdin(["append", &database, "--session", "p"], note).expect_code(0);
    let connection = ok(rusqlite::Connection::open(&database));
    ok(connection.execute("DELETE FROM events WHERE session_id = 'p' AND seq = 3", []));
    drop(connection);
    let child = run(["verify", &database, "--session", "k", "--json"]);
    child.expect_code(0);
    assert!(
        child.stdout.contains(r#""status":"ok""#),
        "{}",
        child.stdout
    );
    for command in ["export", "project"] {
        run([command, &database, "--session", "k"]).expect_code(0);
    }
    let parent = run(["verify", &database, "--session", "p"]);
    parent.expect_code(2);
    assert!(
        parent.stdout.contains("p: corrupt at seq 3"),
        "{}",
        parent.stdout
    );
}

#[test]
fn a_fork_whose_row_refers_to_another_session_than_its_parent_is_corrupt() {
    // The reference is the row's `seed_source`; the header names the
    // parent. Pointed at another session with as many rows, the fork would
    // read that session's events as its own: every reader refuses it.
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let database = folder.path().join("sessions.db");
    run(["migrate", &text(&examples), &text(&database)]).expect_code(0);
    fork_family(&text(&database));
    let said_corrupt = |store: &str| {
        for session in ["kid", "grandkid"] {
            let verified = run(["verify", store, "--session", session]);
            verified.expect_code(2);
            let said = format!("{}{}", verified.stdout, verified.stderr);
            assert!(said.contains("lead-tests"), "{said}");
            run(["export", store, "--session", session]).expect_code(2);
        }
    };
    run(["verify", &text(&database)]).expect_code(0);
    let connection = ok(rusqlite::Connection::open(&database));
    ok(connection.execute(
        "UPDATE sessions SET seed_source = 'lead-tests' WHERE id = 'kid'",
        [],
    ));
    drop(connection);
    said_corrupt(&text(&database));
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "forksource");
    run(["migrate", &text(&examples), &schema.url]).expect_code(0);
    fork_family(&schema.url);
    run(["verify", &schema.url]).expect_code(0);
    let store = match ok(sessionlog_store::Store::open(&schema.path())) {
        sessionlog_store::Store::Postgres(store) => store,
        _ => panic!("not a PostgreSQL store"),
    };
    let mut client = ok(store.connect());
    ok(client.batch_execute("UPDATE sessions SET seed_source = 'lead-tests' WHERE id = 'kid'"));
    said_corrupt(&schema.url);
}

/// kid's header and row, forged to name grandkid as the parent kid was
/// forked from: its header body's member changed and its CRC taken again.
fn forged_header_of_kid(header_body: &str) -> (String, i64) {
    let forged = header_body.replace(
        r#""parentSession":"auto-review""#,
        r#""parentSession":"grandkid""#,
    );
    assert_ne!(forged, header_body, "kid's parent is auto-review");
    let crc = crate::support::spec_crc("kid", forged.as_bytes());
    (forged, i64::from(crc))
}

#[test]
fn forks_by_reference_that_refer_back_in_a_loop_are_corrupt_where_the_loop_closes() {
    // kid's header and row forged to name grandkid, which refers to kid:
    // reading any of the three (ggkid refers to grandkid) runs into the
    // loop, which every reader refuses at once, naming the two sessions
    // that close it.
    let folder = ok(tempfile::tempdir());
    let examples = workspace_root().join("examples/sessions");
    let database = folder.path().join("sessions.db");
    let family = |store: &str| {
        run(["migrate", &text(&examples), store]).expect_code(0);
        fork_family(store);
        run([
            "fork",
            store,
            "--session",
            "grandkid",
            "--child",
            "ggkid",
            "--quiet",
        ])
        .expect_code(0);
        run(["verify", store]).expect_code(0);
    };
    let said_loop = |store: &str| {
        // The session read, and the two sessions that close the loop.
        let cases = [
            ("kid", "session grandkid refers back to session kid"),
            ("grandkid", "session kid refers back to session grandkid"),
            ("ggkid", "session kid refers back to session grandkid"),
        ];
        for (session, closed) in cases {
            let verified = run(["verify", store, "--session", session]);
            verified.expect_code(2);
            let said = format!("{}{}", verified.stdout, verified.stderr);
            assert!(
                said.contains(&format!("{session}: corrupt at seq 1")),
                "{said}"
            );
            assert!(said.contains(closed), "{said}");
            run(["export", store, "--session", session]).expect_code(2);
        }
    };
    family(&text(&database));
    let connection = ok(rusqlite::Connection::open(&database));
    let header_body: String = ok(connection.query_row(
        "SELECT header_body FROM sessions WHERE id = 'kid'",
        [],
        |row| row.get(0),
    ));
    let (forged, crc) = forged_header_of_kid(&header_body);
    ok(connection.execute(
        "UPDATE sessions SET header_body = ?1, header_crc = ?2, parent_session = 'grandkid', \
         seed_source = 'grandkid' WHERE id = 'kid'",
        rusqlite::params![forged, crc],
    ));
    drop(connection);
    said_loop(&text(&database));
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "forkloop");
    family(&schema.url);
    let store = match ok(sessionlog_store::Store::open(&schema.path())) {
        sessionlog_store::Store::Postgres(store) => store,
        _ => panic!("not a PostgreSQL store"),
    };
    let mut client = ok(store.connect());
    let row = ok(client.query_one("SELECT header_body FROM sessions WHERE id = 'kid'", &[]));
    let (forged, crc) = forged_header_of_kid(row.get(0));
    ok(client.execute(
        "UPDATE sessions SET header_body = $1, header_crc = $2, parent_session = 'grandkid', \
         seed_source = 'grandkid' WHERE id = 'kid'",
        &[&forged, &crc],
    ));
    said_loop(&schema.url);
}

#[test]
fn a_time_no_backend_stores_is_neither_forked_nor_migrated_and_names_its_session() {
    // A log written by something else, with a ts above 2^63 - 1: both
    // backends refuse to write it, so a fork does not copy it and migrate
    // names the session it is in.
    let folder = ok(tempfile::tempdir());
    let logs = folder.path().join("logs");
    ok(std::fs::create_dir(&logs));
    let body = r#"{"seq":1,"ts":18446744073709551615,"type":"turn/start","data":{"turnId":"t1"}"#;
    let crc = crate::support::spec_crc("big", body.as_bytes());
    let header = run(["create", &text(&logs), "--session", "big"]);
    header.expect_code(0);
    let log = logs.join("big.jsonl");
    let mut bytes = ok(std::fs::read(&log));
    bytes.extend_from_slice(format!("{body},\"crc\":\"{crc:08x}\"}}\n").as_bytes());
    ok(std::fs::write(&log, bytes));
    let forked = run(["fork", &text(&logs), "--session", "big", "--child", "kid"]);
    forked.expect_code(1);
    assert!(
        forked.stderr.contains("big.jsonl: seq 1"),
        "{}",
        forked.stderr
    );
    assert!(!logs.join("kid.jsonl").exists(), "the child was written");
    let database = folder.path().join("sessions.db");
    let migrated = run(["migrate", &text(&logs), &text(&database)]);
    migrated.expect_code(1);
    assert!(
        migrated.stderr.contains("session big: seq 1"),
        "{}",
        migrated.stderr
    );
}

/// A lone log forked into a child with its own session's id is refused for
/// that, not as a child that already exists at a file that does not: the
/// log's file is named otherwise.
#[test]
fn a_lone_log_forked_into_its_own_id_is_refused_for_that() {
    let folder = ok(tempfile::tempdir());
    let source = folder.path().join("source");
    run(["create", &text(&source), "--session", "c"]).expect_code(0);
    let lone_folder = folder.path().join("lone");
    ok(std::fs::create_dir(&lone_folder));
    let lone = lone_folder.join("kept-by-hand.jsonl");
    ok(std::fs::copy(source.join("c.jsonl"), &lone));
    let refused = run(["fork", &text(&lone), "--child", "c"]);
    refused.expect_code(1);
    assert!(
        refused
            .stderr
            .contains("the child id c is the parent's own id"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("already exists"),
        "{}",
        refused.stderr
    );
    // In a store, the child's name is the parent's log: it exists.
    let in_store = run(["fork", &text(&source), "--session", "c", "--child", "c"]);
    in_store.expect_code(1);
    assert!(
        in_store.stderr.contains("already exists"),
        "{}",
        in_store.stderr
    );
}
