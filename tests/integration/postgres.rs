//! The PostgreSQL store through the real binary, against a real server.
//!
//! - One table of commands run on the same sessions in every backend (a
//!   backend column): the same exit code and the same output, the store's
//!   name aside; `export` byte for byte.
//! - JSONL → PostgreSQL → SQLite → JSONL: `migrate` thrice, `diff` clean,
//!   every log byte-identical to the original.
//! - Two writers on one session from two processes: exactly one holds it
//!   (the other exits 6) while appends to another session proceed.
//! - `review-audit` and `report --audit` give what they give on JSONL;
//!   `import --into` a PostgreSQL store writes what a folder gets.
//! - `kill -9` of `append` (CI 100 kills, `SESSIONLOG_LONG=1` 1,000).
//! - The server itself stopped with `pg_ctl stop -m immediate` while
//!   `append` runs, restarted, and the store reopened; and again while 16
//!   writers of one process append, their appends committed in groups
//!   (CI 1 stop, `SESSIONLOG_LONG=1` 12).
//!
//! The server is the one `SESSIONLOG_TEST_PG` names (`.ci/run` starts it
//! with `tools/pg-test-server.sh`); each test works in a schema of its own.
//! Without the variable the tests skip with a note, except under `CI`,
//! where they fail. The crash test starts a private server of its own.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Barrier;
use std::time::Duration;

use sessionlog_schema::SessionHeader;
use sessionlog_store::{Durability, NewEvent, Store, WriterOptions};

use crate::cli_support::{run, run_with_stdin, sessionlog, workspace_root, Run};
use crate::crash::{kill_sessions_within, kills, text};
use crate::faults::{id, ok};

/// The test server's URL, or `None` (with a note) when none is set up.
pub fn test_server() -> Option<String> {
    match std::env::var("SESSIONLOG_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "SESSIONLOG_TEST_PG is unset under CI: .ci/run starts the test server"
            );
            eprintln!(
                "note: SESSIONLOG_TEST_PG is unset; skipping a PostgreSQL test \
                 (start a server with tools/pg-test-server.sh start)"
            );
            None
        }
    }
}

/// A schema of its own on a server, dropped when the test ends.
pub struct Schema {
    pub url: String,
    name: String,
    server: String,
}

impl Schema {
    pub fn new(server: &str, label: &str) -> Schema {
        let name = format!(
            "it_{label}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_micros() % 1_000_000_000)
        );
        Schema {
            url: format!("{server}?schema={name}"),
            name,
            server: server.to_owned(),
        }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.url)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(Store::Postgres(store)) = Store::create(Path::new(&self.server)) {
            if let Ok(mut client) = store.connect() {
                let _ =
                    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
            }
        }
    }
}

fn examples() -> PathBuf {
    workspace_root().join("examples/sessions")
}

/// Every command of the table, `STORE` standing for the store.
const CASES: &[(&[&str], Option<&str>)] = &[
    (&["verify", "STORE"], None),
    (&["verify", "STORE", "--json"], None),
    (&["verify", "STORE", "--session", "nobody"], None),
    (&["list", "STORE"], None),
    (&["list", "STORE", "--tree"], None),
    (&["list", "STORE", "--json"], None),
    (&["export", "STORE", "--session", "lead"], None),
    (&["export", "STORE", "--session", "auto-review"], None),
    (
        &[
            "replay",
            "STORE",
            "--session",
            "auto-review",
            "--color",
            "never",
        ],
        None,
    ),
    (
        &["replay", "STORE", "--session", "approval", "--json"],
        None,
    ),
    (&["stats", "STORE"], None),
    (&["stats", "STORE", "--json"], None),
    (&["project", "STORE", "--session", "lead"], None),
    (
        &["project", "STORE", "--session", "lead", "--at", "3"],
        None,
    ),
    (
        &["project", "STORE", "--session", "lead", "--at", "100000"],
        None,
    ),
    (&["tail", "STORE", "--session", "lead", "-n", "3"], None),
    (
        &[
            "tail",
            "STORE",
            "--session",
            "lead",
            "--from",
            "2",
            "--json",
        ],
        None,
    ),
    (
        &[
            "append",
            "STORE",
            "--session",
            "approval",
            "--expect-seq",
            "1",
        ],
        Some("{\"type\":\"x-test/probe\",\"data\":{}}\n"),
    ),
    (
        &["append", "STORE", "--session", "approval"],
        Some("{\"type\":\"turn/end\",\"data\":{\"turnId\":\"never-started\"}}\n"),
    ),
    (
        &["append", "STORE", "--session", "approval"],
        Some("not json\n"),
    ),
    (&["verify", "STORE", "--session", "approval"], None),
    (
        &[
            "review-request",
            "STORE",
            "--session",
            "auto-review",
            "--pending",
            "PENDING",
        ],
        None,
    ),
];

/// The pending action of the `review-request` case.
const PENDING: &str =
    r#"{"callId":"call-9","stepId":"step-1","name":"shell","arguments":{"command":"ls"}}"#;

/// A run's code and output, with the store's name taken out. Where a
/// message names a session, the backends spell the place differently (a
/// JSONL store names the log file, PostgreSQL `store#id`, SQLite's writer
/// the database file): all become `STORE`.
fn outcome(run: &Run, store: &str) -> (i32, String, String) {
    let clean = |text: &str| {
        let mut text = text.replace(store, "STORE");
        for session in ["lead", "lead-tests", "auto-review", "approval", "nobody"] {
            text = text.replace(&format!("STORE/{session}.jsonl:"), "STORE:");
            text = text.replace(&format!("STORE#{session}:"), "STORE:");
        }
        text
    };
    (run.code, clean(&run.stdout), clean(&run.stderr))
}

#[test]
fn every_command_gives_the_same_code_and_output_on_every_backend() {
    let Some(server) = test_server() else {
        return;
    };
    let folder = ok(tempfile::tempdir());
    let schema = Schema::new(&server, "parity");
    let jsonl = folder.path().join("logs");
    let sqlite = folder.path().join("sessions.db");
    let backends: [(&str, String); 3] = [
        ("jsonl", text(&jsonl)),
        ("sqlite", text(&sqlite)),
        ("postgres", schema.url.clone()),
    ];
    for (_, store) in &backends {
        run(["migrate", &text(&examples()), store]).expect_code(0);
    }
    let pending = folder.path().join("pending.json");
    ok(std::fs::write(&pending, PENDING));
    let pending = text(&pending);
    let shown = |store: &str| match Store::open(Path::new(store)) {
        Ok(opened) => text(opened.path()),
        Err(error) => panic!("{store}: {error}"),
    };
    let mut mismatches = Vec::new();
    for (args, stdin) in CASES {
        let mut outcomes = Vec::new();
        for (backend, store) in &backends {
            let args: Vec<&str> = args
                .iter()
                .map(|arg| match *arg {
                    "STORE" => store.as_str(),
                    "PENDING" => pending.as_str(),
                    other => other,
                })
                .collect();
            let result = match stdin {
                Some(input) => run_with_stdin(&args, input),
                None => run(&args),
            };
            outcomes.push((*backend, outcome(&result, &shown(store))));
        }
        let (_, expected) = &outcomes[0];
        for (backend, got) in &outcomes[1..] {
            if got != expected {
                mismatches.push(format!(
                    "{args:?} on {backend}: {got:?}\n  jsonl gave {expected:?}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    for session in ["lead", "auto-review", "approval", "lead-tests"] {
        let exports: Vec<String> = backends
            .iter()
            .map(|(_, store)| run(["export", store, "--session", session]).stdout)
            .collect();
        assert_eq!(exports[0], exports[1], "{session}: sqlite export");
        assert_eq!(exports[0], exports[2], "{session}: postgres export");
    }
}

#[test]
fn review_audit_and_its_report_are_the_same_on_postgres_as_on_jsonl() {
    let Some(server) = test_server() else {
        return;
    };
    let folder = ok(tempfile::tempdir());
    let schema = Schema::new(&server, "audit");
    let jsonl = text(&folder.path().join("logs"));
    let reviewer = crate::reviewer::Server::saying(r#"{"risk":"low","decision":"allow"}"#);
    let mut reports = Vec::new();
    for (backend, store) in [("jsonl", jsonl.as_str()), ("postgres", schema.url.as_str())] {
        run(["migrate", &text(&examples()), store]).expect_code(0);
        let audit = run([
            "review-audit",
            store,
            "--session",
            "auto-review",
            "--endpoint",
            &reviewer.endpoint,
            "--json",
        ]);
        // The example's denied call is allowed today: the audit differs.
        audit.expect_code(8);
        let audit_file = folder.path().join(format!("{backend}-audit.json"));
        ok(std::fs::write(&audit_file, &audit.stdout));
        let html = folder.path().join(format!("{backend}.html"));
        run([
            "report",
            store,
            "--session",
            "auto-review",
            "--html",
            &text(&html),
            "--audit",
            &text(&audit_file),
        ])
        .expect_code(0);
        let shown = text(ok(Store::open(Path::new(store))).path());
        reports.push((
            audit.stdout.replace(&shown, "STORE"),
            ok(std::fs::read_to_string(&html)).replace(&shown, "STORE"),
        ));
    }
    assert_eq!(reports[0].0, reports[1].0, "review-audit --json");
    assert!(
        reports[1].1.contains("call-2"),
        "the report shows the audited calls"
    );
    assert_eq!(reports[0].1, reports[1].1, "report --audit");
}

#[test]
fn import_into_postgres_writes_the_sessions_a_folder_gets_and_again_nothing() {
    let Some(server) = test_server() else {
        return;
    };
    let folder = ok(tempfile::tempdir());
    let schema = Schema::new(&server, "import");
    let logs = text(&folder.path().join("logs"));
    let fixtures = workspace_root().join("tests/fixtures/import");
    let sources = [
        text(&fixtures.join("codex")),
        text(&fixtures.join("claude")),
    ];
    for store in [logs.as_str(), schema.url.as_str()] {
        run(["import", "auto", &sources[0], &sources[1], "--into", store]).expect_code(0);
        run(["verify", store]).expect_code(0);
    }
    let ids = |store: &str| ok(ok(Store::open(Path::new(store))).ids());
    let imported = ids(&logs);
    assert!(imported.len() >= 7, "{imported:?}");
    assert_eq!(ids(&schema.url), imported);
    for id in &imported {
        let exports: Vec<String> = [logs.as_str(), schema.url.as_str()]
            .iter()
            .map(|store| run(["export", store, "--session", id.as_str()]).stdout)
            .collect();
        assert_eq!(exports[0], exports[1], "{id}");
    }
    let again = run([
        "import",
        "auto",
        &sources[0],
        &sources[1],
        "--into",
        &schema.url,
    ]);
    again.expect_code(0);
    assert!(
        again.stdout.contains("0 sessions imported"),
        "{}",
        again.stdout
    );
    assert_eq!(ids(&schema.url), imported);
}

#[test]
fn jsonl_to_postgres_to_sqlite_to_jsonl_gives_back_every_byte() {
    let Some(server) = test_server() else {
        return;
    };
    let folder = ok(tempfile::tempdir());
    let schema = Schema::new(&server, "trip");
    let sqlite = folder.path().join("trip.db");
    let back = folder.path().join("back");
    run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
    run(["migrate", &schema.url, &text(&sqlite)]).expect_code(0);
    run(["migrate", &text(&sqlite), &text(&back)]).expect_code(0);
    run(["diff", &text(&examples()), &schema.url]).expect_code(0);
    run(["diff", &schema.url, &text(&sqlite)]).expect_code(0);
    let mut compared = 0;
    for entry in ok(std::fs::read_dir(examples())) {
        let path = ok(entry).path();
        let Some(name) = path.file_name() else {
            continue;
        };
        assert_eq!(
            ok(std::fs::read(&path)),
            ok(std::fs::read(back.join(name))),
            "{}",
            path.display()
        );
        compared += 1;
    }
    let names = |folder: &Path| -> std::collections::BTreeSet<std::ffi::OsString> {
        ok(std::fs::read_dir(folder))
            .map(|entry| ok(entry).file_name())
            .collect()
    };
    assert_eq!(
        names(&back),
        names(&examples()),
        "the same sessions came back"
    );
    assert!(compared >= 4, "every example session made the trip");
    let again = run(["migrate", &text(&examples()), &schema.url]);
    again.expect_code(1);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
}

#[test]
fn events_without_a_session_row_are_damage_and_a_row_with_events_stays() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "orphans");
    run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
    let Ok(Store::Postgres(store)) = Store::open(&schema.path()) else {
        panic!("{} is not a PostgreSQL store", schema.url);
    };
    let mut client = ok(store.connect());
    let owner: String =
        ok(ok(client.query_one("SELECT min(session_id) FROM events", &[])).try_get(0));
    // The server refuses to take the header of a session with events.
    let removed = client.execute("DELETE FROM sessions WHERE id = $1", &[&owner]);
    let refusal = removed.expect_err("a session row with events was removed");
    assert_eq!(
        refusal.as_db_error().map(|error| error.code().code()),
        Some("23503"),
        "{refusal:?}"
    );
    run(["verify", &schema.url]).expect_code(0);
    // Events of a session that has no row, written behind the store's
    // back: every command that lists the store names them.
    ok(client.execute(
        "INSERT INTO events SELECT 'ghost', seq, ts, type, batch, body, crc
         FROM events WHERE session_id = $1 AND seq = 1",
        &[&owner],
    ));
    // verify names them after the sessions, as it does in SQLite.
    let verified = run(["verify", &schema.url]);
    let last = verified.stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains("\"ghost\" have no session row"),
        "{}",
        verified.stdout
    );
    for command in ["verify", "list", "stats"] {
        let listed = run([command, &schema.url]);
        listed.expect_code(2);
        assert!(
            listed.stdout.contains("\"ghost\" have no session row")
                || listed.stderr.contains("\"ghost\" have no session row"),
            "{command}: {}{}",
            listed.stdout,
            listed.stderr
        );
    }
    // Nor is a session created over them: it would read them as its own.
    for args in [
        vec!["create", &schema.url, "--session", "ghost"],
        vec!["fork", &schema.url, "--session", &owner, "--child", "ghost"],
    ] {
        let refused = run(&args);
        refused.expect_code(2);
        assert!(
            refused.stderr.contains("\"ghost\" have no session row"),
            "{}",
            refused.stderr
        );
    }
    let rows: i64 = ok(ok(
        client.query_one("SELECT count(*) FROM sessions WHERE id = 'ghost'", &[])
    )
    .try_get(0));
    assert_eq!(rows, 0, "a session row was left");
}

#[test]
fn two_writers_from_two_processes_exactly_one_holds_the_session() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "two");
    for session in ["a", "b"] {
        run(["create", &schema.url, "--session", session]).expect_code(0);
    }
    let mut first = ok(sessionlog(["append", &schema.url, "--session", "a"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn());
    let mut input = first.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let mut acks = BufReader::new(first.stdout.take().unwrap_or_else(|| panic!("no stdout")));
    ok(input.write_all(b"{\"type\":\"x-test/probe\",\"data\":{\"n\":1}}\n"));
    ok(input.flush());
    let mut ack = String::new();
    ok(acks.read_line(&mut ack));
    assert_eq!(
        ack.trim(),
        r#"{"seq": 1}"#.replace(' ', "").replace(':', ": ")
    );
    let second = run_with_stdin(
        ["append", &schema.url, "--session", "a"],
        "{\"type\":\"x-test/probe\",\"data\":{\"n\":2}}\n",
    );
    second.expect_code(6);
    assert!(second.stderr.contains("locked"), "{}", second.stderr);
    run_with_stdin(
        ["append", &schema.url, "--session", "b"],
        "{\"type\":\"x-test/probe\",\"data\":{\"n\":1}}\n",
    )
    .expect_code(0);
    drop(input);
    assert!(ok(first.wait()).success());
    let store = ok(Store::open(&schema.path()));
    assert_eq!(ok(store.snapshot(&id("a"))).events.len(), 1);
    assert_eq!(ok(store.snapshot(&id("b"))).events.len(), 1);
    run_with_stdin(
        ["append", &schema.url, "--session", "a", "--expect-seq", "2"],
        "{\"type\":\"x-test/probe\",\"data\":{\"n\":2}}\n",
    )
    .expect_code(0);
}

#[test]
fn kill_9_during_postgres_appends_never_loses_an_acknowledged_event() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "kill");
    run(["create", &schema.url, "--session", "seed"]).expect_code(0);
    let kills = kills(100, 1000);
    // A kill within 400 ms of the start: starting, connecting and opening
    // the writer take up to about 150 ms on a loaded machine, so kills land
    // before, between and inside appends.
    let figures = kill_sessions_within(&schema.path(), kills, 23, 400_000);
    eprintln!(
        "kill -9 of append (PostgreSQL): {} kills, {} events acknowledged, {} runs finished before their kill; nothing acknowledged lost",
        figures.kills, figures.acknowledged, figures.exited_before_kill
    );
    assert_eq!(figures.torn_tails, 0, "a database has no torn tail");
    assert_eq!(figures.kills, kills, "{figures:?}");
    assert!(figures.acknowledged > 0, "{figures:?}");
}

/// `tools/pg-test-server.sh` with `arguments`; its standard output.
fn server_script(arguments: &[&str]) -> String {
    let output = ok(
        std::process::Command::new(workspace_root().join("tools/pg-test-server.sh"))
            .args(arguments)
            .output(),
    );
    assert!(
        output.status.success(),
        "pg-test-server.sh {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A private server, stopped and removed when dropped.
struct PrivateServer {
    dir: String,
}

impl PrivateServer {
    /// Starts a server of its own in `folder`; it and its URL.
    fn start(folder: &Path) -> (PrivateServer, String) {
        let server = PrivateServer {
            dir: text(&folder.join("cluster")),
        };
        let url = server_script(&["start", &server.dir]);
        (server, url)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(workspace_root().join("tools/pg-test-server.sh"))
            .args(["stop", &self.dir])
            .output();
    }
}

/// Over TCP and over the server's unix socket (where the lost connection
/// shows as a broken pipe, which must not pass for standard output's
/// reader going away: exit 141 and no message).
#[test]
fn the_server_stopped_immediately_mid_append_loses_nothing_acknowledged() {
    if test_server().is_none() {
        return;
    }
    let folder = ok(tempfile::tempdir());
    let (server, url) = PrivateServer::start(folder.path());
    let dir = server.dir.clone();
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or_else(|| panic!("no port in {url}"))
        .to_owned();
    let socket = format!("postgres:///postgres?host={dir}&port={port}&user=postgres");
    for (transport, url, session) in [("TCP", &url, "s"), ("unix socket", &socket, "u")] {
        stop_mid_append(url, &dir, session, transport);
    }
    drop(server);
}

fn stop_mid_append(url: &str, dir: &str, session: &str, transport: &str) {
    run(["create", url, "--session", session]).expect_code(0);
    let mut appender = ok(sessionlog(["append", url, "--session", session])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn());
    let mut input = appender.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    // Events until the appender is gone: a fixed number could all be
    // written before the stop on a fast machine, and the append would
    // then rightly succeed.
    let feeder = std::thread::spawn(move || {
        for n in 1u64.. {
            let line = format!("{{\"type\":\"x-test/probe\",\"data\":{{\"n\":{n}}}}}\n");
            if input.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    });
    let stdout = appender
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no stdout"));
    let (first_ack, acked) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = 0u64;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let value: serde_json::Value = ok(serde_json::from_str(&line));
            last = value["seq"].as_u64().unwrap_or_else(|| panic!("{line}"));
            let _ = first_ack.send(());
        }
        last
    });
    let mut stderr = appender
        .stderr
        .take()
        .unwrap_or_else(|| panic!("no stderr"));
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    // The stop comes once appends are being acknowledged (however long a
    // loaded machine takes to start the appender), half a second on.
    let started = acked.recv_timeout(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    server_script(&["crash", dir]);
    let status = ok(appender.wait());
    assert!(started.is_ok(), "nothing acknowledged within a minute");
    let acknowledged = reader.join().unwrap_or_else(|_| panic!("reader panicked"));
    let errors = errors
        .join()
        .unwrap_or_else(|_| panic!("stderr reader panicked"));
    drop(feeder.join());
    assert_eq!(
        status.code(),
        Some(1),
        "append over {transport} fails when its server goes away: {errors}"
    );
    assert!(
        errors.starts_with("sessionlog: "),
        "over {transport} the failure is named: {errors:?}"
    );
    assert!(
        acknowledged > 0,
        "appends were acknowledged before the stop"
    );
    server_script(&["start", dir]);
    run(["verify", url]).expect_code(0);
    let store = ok(Store::open(Path::new(url)));
    let events = ok(store.snapshot(&id(session))).events;
    assert!(
        events.len() as u64 >= acknowledged,
        "{acknowledged} acknowledged, {} found",
        events.len()
    );
    for (n, record) in events.iter().enumerate() {
        assert_eq!(record.data(), format!("{{\"n\":{}}}", n + 1));
    }
    eprintln!(
        "pg_ctl stop -m immediate mid-append over {transport}: {acknowledged} acknowledged, {} found after restart",
        events.len()
    );
    run_with_stdin(
        ["append", url, "--session", session],
        "{\"type\":\"x-test/probe\",\"data\":{\"n\":0}}\n",
    )
    .expect_code(0);
}

#[test]
fn the_server_stopped_immediately_under_grouped_appends_loses_nothing_acknowledged() {
    if test_server().is_none() {
        return;
    }
    let folder = ok(tempfile::tempdir());
    let (server, url) = PrivateServer::start(folder.path());
    drop(ok(Store::create(Path::new(&url))));
    let crashes = kills(1, 12);
    let (mut acknowledged, mut found) = (0, 0);
    for round in 0..crashes {
        // 0.3 s to 1.4 s of appending, so the stop lands in groups of
        // every size the writers reach.
        let after = Duration::from_millis(300 + (round as u64 * 97) % 1100);
        let figures = crash_under_grouped_writers(&url, &server.dir, round, after);
        acknowledged += figures.0;
        found += figures.1;
    }
    eprintln!(
        "pg_ctl stop -m immediate under {GROUPED_WRITERS} grouped writers: {crashes} stops, {acknowledged} acknowledged, {found} found after the restarts"
    );
    drop(server);
}

/// Writers of one process appending at once in
/// [`crash_under_grouped_writers`].
const GROUPED_WRITERS: usize = 16;

/// [`GROUPED_WRITERS`] writers of one store append to sessions of their
/// own until the server at `dir` is stopped `after` their start; then the
/// server is started again, `verify` must pass, and every session must
/// hold every event its writer had acknowledged, in order. Returns the
/// events acknowledged and found.
fn crash_under_grouped_writers(url: &str, dir: &str, round: usize, after: Duration) -> (u64, u64) {
    let store = ok(Store::open(Path::new(url)));
    let sessions: Vec<String> = (0..GROUPED_WRITERS)
        .map(|n| format!("g{round}-{n:02}"))
        .collect();
    for session in &sessions {
        let header = SessionHeader::root(id(session), 1_700_000_000_000, "/work".into());
        ok(store.create_session(&header, &[], Durability::Fsync));
    }
    let start = Barrier::new(GROUPED_WRITERS + 1);
    // Writers with an append acknowledged: the stop comes `after` they all
    // have one, however long a loaded machine took to get there.
    let appending = std::sync::atomic::AtomicUsize::new(0);
    // Each writer appends until its append fails, and keeps what was
    // acknowledged: the appends of the 16 wait for one another, so most
    // are committed in groups, and the stop lands inside one.
    let acknowledged: Vec<u64> = std::thread::scope(|scope| {
        let writers: Vec<_> = sessions
            .iter()
            .map(|session| {
                let (store, start, appending) = (&store, &start, &appending);
                scope.spawn(move || {
                    // Past the barrier first, so that a writer that fails
                    // to open never leaves the others waiting at it.
                    let opened = store.open_writer(&id(session), WriterOptions::default());
                    start.wait();
                    let mut writer = ok(opened);
                    let mut last = 0;
                    for n in 1u64.. {
                        let data = format!("{{\"n\":{n}}}");
                        let event = NewEvent::new("x-test/probe", &data);
                        match writer.append(event, None) {
                            Ok(seq) if last == 0 => {
                                last = seq.get();
                                appending.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            Ok(seq) => last = seq.get(),
                            Err(_) => break,
                        }
                    }
                    assert!(writer.is_poisoned());
                    last
                })
            })
            .collect();
        start.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while appending.load(std::sync::atomic::Ordering::SeqCst) < GROUPED_WRITERS
            && std::time::Instant::now() < deadline
            && !writers.iter().any(|writer| writer.is_finished())
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(after);
        server_script(&["crash", dir]);
        writers
            .into_iter()
            .map(|writer| {
                writer
                    .join()
                    .unwrap_or_else(|_| panic!("a writer panicked"))
            })
            .collect()
    });
    drop(store);
    server_script(&["start", dir]);
    run(["verify", url]).expect_code(0);
    let store = ok(Store::open(Path::new(url)));
    let mut found = 0;
    for (session, acknowledged) in sessions.iter().zip(&acknowledged) {
        assert!(
            *acknowledged > 0,
            "{session}: nothing acknowledged before the stop"
        );
        let events = ok(store.snapshot(&id(session))).events;
        assert!(
            events.len() as u64 >= *acknowledged,
            "{session}: {acknowledged} acknowledged, {} found",
            events.len()
        );
        for (n, record) in events.iter().enumerate() {
            assert_eq!(record.data(), format!("{{\"n\":{}}}", n + 1), "{session}");
        }
        found += events.len() as u64;
    }
    (acknowledged.iter().sum(), found)
}

#[test]
fn a_password_in_the_url_never_shows_in_messages_or_the_report() {
    let Some(server) = test_server() else {
        return;
    };
    // The test server trusts local connections, so any password is let in.
    const PASSWORD: &str = "pw-never-shown";
    let Some((scheme, rest)) = server.split_once("://") else {
        panic!("{server}: not a URL");
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let with_password = format!("{scheme}://postgres:{PASSWORD}@{rest}");
    let schema = Schema::new(&with_password, "password");
    let empty = Schema::new(&with_password, "password_empty");
    let folder = ok(tempfile::tempdir());
    let html = folder.path().join("report.html");
    let runs = [
        run(["create", &schema.url, "--session", "s1"]),
        run(["migrate", &text(&examples()), &empty.url]),
        run(["list", &schema.url]),
        run(["verify", &schema.url]),
        run(["report", &schema.url, "--html", &text(&html)]),
        run([
            "stats",
            &format!("{with_password}?schema=no_such_schema_here"),
        ]),
    ];
    for (index, ran) in runs.iter().enumerate() {
        let said = format!("{}{}", ran.stdout, ran.stderr);
        assert!(!said.contains(PASSWORD), "run {index}: {said}");
    }
    assert!(runs[0]
        .stdout
        .contains("created session s1 in postgres://postgres@"));
    assert!(
        runs[1].stdout.contains("migrated 5 sessions"),
        "{}",
        runs[1].stdout
    );
    let report = ok(std::fs::read_to_string(&html));
    assert!(
        report.contains("postgres://postgres@"),
        "the report names its store"
    );
    assert!(!report.contains(PASSWORD));
}

#[test]
fn a_session_row_whose_columns_disagree_with_its_header_is_corrupt() {
    // The columns copy the header for queries; the body is the truth, and
    // a reader names a column that says otherwise, in both databases.
    let folder = ok(tempfile::tempdir());
    let database = folder.path().join("sessions.db");
    let database = text(&database);
    run(["migrate", &text(&examples()), &database]).expect_code(0);
    let edits = [
        ("cwd = '/etc'", "cwd"),
        ("sandbox_mode = 'bogus'", "sandbox_mode"),
        ("seed_length = -5", "seed_length"),
        ("parent_session = 'lead'", "parent_session"),
        ("created_at = created_at + 1", "created_at"),
    ];
    let said_corrupt = |store: &str, column: &str| {
        let verified = run(["verify", store]);
        verified.expect_code(2);
        let said = format!("{}{}", verified.stdout, verified.stderr);
        assert!(said.contains(&format!("column {column} is")), "{said}");
        run(["export", store, "--session", "approval"]).expect_code(2);
    };
    for (edit, column) in edits {
        let copy = folder.path().join(format!("{column}.db"));
        ok(std::fs::copy(&database, &copy));
        let connection = ok(rusqlite::Connection::open(&copy));
        ok(connection.execute(
            &format!("UPDATE sessions SET {edit} WHERE id = 'approval'"),
            [],
        ));
        drop(connection);
        said_corrupt(&text(&copy), column);
    }
    let Some(server) = test_server() else {
        return;
    };
    for (edit, column) in edits {
        let schema = Schema::new(&server, &format!("columns_{column}"));
        run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
        let store = match ok(Store::open(&schema.path())) {
            Store::Postgres(store) => store,
            _ => panic!("not a PostgreSQL store"),
        };
        let mut client = ok(store.connect());
        ok(client.batch_execute(&format!("UPDATE sessions SET {edit} WHERE id = 'approval'")));
        said_corrupt(&schema.url, column);
    }
}

#[test]
fn a_url_that_is_not_a_postgres_url_makes_no_folder() {
    let folder = ok(tempfile::tempdir());
    for store in [
        "POSTGRES://user:pw@127.0.0.1:5432/db?schema=r",
        "postgres:/user:pw@127.0.0.1:5432/db",
        "pg://127.0.0.1/db",
        " postgres://127.0.0.1/db",
    ] {
        let refused = crate::cli_support::sessionlog(["create", store, "--session", "s1"])
            .current_dir(folder.path())
            .output();
        let refused = ok(refused);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{store}: {stderr}");
        assert!(
            stderr.contains("is not a PostgreSQL URL"),
            "{store}: {stderr}"
        );
        assert!(!stderr.contains("pw"), "{store}: {stderr}");
    }
    let made: Vec<_> = ok(std::fs::read_dir(folder.path())).collect();
    assert!(made.is_empty(), "{made:?}");
    // Nor is a store made in the server's own schemas.
    let Some(server) = test_server() else {
        return;
    };
    for schema in ["information_schema", "pg_catalog"] {
        let refused = run([
            "create",
            &format!("{server}?schema={schema}"),
            "--session",
            "s1",
        ]);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("the server's own"),
            "{}",
            refused.stderr
        );
    }
}

/// A database made for one test, dropped when it ends.
struct Database {
    admin: sessionlog_store::PostgresStore,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = self.admin.connect() {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {}", self.name));
        }
    }
}

/// A database whose encoding is not UTF8 is refused for writing, naming
/// its encoding, before anything is made in it: it would refuse some text
/// of a log at an append, with no session named.
#[test]
fn a_database_not_in_utf8_is_refused_for_writing() {
    let Some(server) = test_server() else {
        return;
    };
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    let database = Database {
        admin,
        name: format!("it_latin1_{}", std::process::id()),
    };
    // One statement a call: neither runs inside a transaction block.
    let mut client = ok(database.admin.connect());
    ok(client.batch_execute(&format!("DROP DATABASE IF EXISTS {}", database.name)));
    ok(client.batch_execute(&format!(
        "CREATE DATABASE {} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'",
        database.name
    )));
    drop(client);
    let (base, query) = server.split_once('?').unwrap_or((&server, ""));
    let Some((host, _)) = base.rsplit_once('/') else {
        panic!("{server}: no database in the URL");
    };
    let url = match query {
        "" => format!("{host}/{}", database.name),
        query => format!("{host}/{}?{query}", database.name),
    };
    let refused = run(["create", &url, "--session", "s"]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("encoding is LATIN1") && refused.stderr.contains("UTF8"),
        "{}",
        refused.stderr
    );
    // Nothing was made: a reader finds no store there.
    let read = Store::open_read_only(Path::new(&url));
    assert!(
        matches!(read, Err(sessionlog_store::StoreError::NotAStore { .. })),
        "{read:?}"
    );
}

/// `tail -f` of a PostgreSQL session goes on after the server ends its
/// connections (a restart, a failover, an administrator): it says so, and
/// prints what is appended once it is connected again.
#[test]
fn tail_f_follows_on_after_the_server_ends_its_connections() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "tail_drop");
    run(["create", &schema.url, "--session", "r"]).expect_code(0);
    let name = format!("it_tail_drop_{}", std::process::id());
    let followed = format!("{}&application_name={name}", schema.url);
    let mut tail = ok(sessionlog(["tail", &followed, "--session", "r", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn());
    let stdout = tail.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (lines, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let append = |n: u32| {
        run_with_stdin(
            ["append", &schema.url, "--session", "r"],
            &format!("{{\"type\":\"x-test/probe\",\"data\":{{\"n\":{n}}}}}\n"),
        )
        .expect_code(0);
    };
    let wait_for = |n: u32| {
        let wanted = format!("\"n\":{n}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match printed.recv_timeout(left) {
                Ok(line) if line.contains(&wanted) => return,
                Ok(_) => {}
                Err(error) => panic!("tail -f never printed event {n}: {error}"),
            }
        }
    };
    append(1);
    wait_for(1);
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    let ended: i64 = ok(ok(ok(admin.connect()).query_one(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1) AS ended",
        &[&name],
    ))
    .try_get(0));
    assert!(ended > 0, "tail -f held no connection named {name}");
    append(2);
    wait_for(2);
    // Only the listener's connection ends: it is made again (within a
    // second or so), and following goes on.
    let mut client = ok(admin.connect());
    let mut listening = || -> Vec<i32> {
        ok(client.query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            &[&name],
        ))
        .iter()
        .map(|row| ok(row.try_get(0)))
        .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let before = loop {
        let pids = listening();
        if !pids.is_empty() || std::time::Instant::now() > deadline {
            break pids;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        before.len(),
        1,
        "tail -f listens on one connection: {before:?}"
    );
    ok(ok(admin.connect()).execute("SELECT pg_terminate_backend($1)", &[&before[0]]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pids = listening();
        if pids.iter().any(|pid| *pid != before[0]) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tail -f never listened again after its listener's connection ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    append(3);
    wait_for(3);
    let _ = tail.kill();
    let finished = ok(tail.wait_with_output());
    let stderr = String::from_utf8_lossy(&finished.stderr);
    assert!(stderr.contains("connecting again"), "{stderr}");
}

/// A store is never made in a schema that holds another application's
/// tables (as a SQLite store is never made in another application's
/// database): refused as not a store, nothing added.
#[test]
fn a_schema_of_another_application_is_not_made_a_store() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "foreign");
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    ok(ok(admin.connect()).batch_execute(&format!(
        "CREATE SCHEMA {0}; CREATE TABLE {0}.accounts (id integer)",
        schema.name
    )));
    let examples = text(&examples());
    // A reading command says it as `create` does, rather than send the
    // person to `create`.
    for args in [
        vec!["create", schema.url.as_str(), "--session", "s"],
        vec!["migrate", examples.as_str(), schema.url.as_str()],
        vec!["list", schema.url.as_str()],
        vec!["verify", schema.url.as_str()],
    ] {
        let refused = run(&args);
        refused.expect_code(1);
        assert!(
            refused
                .stderr
                .contains("holds tables of another application (accounts)"),
            "{args:?}: {}",
            refused.stderr
        );
    }
    let read = Store::open_read_only(&schema.path());
    assert!(
        matches!(read, Err(sessionlog_store::StoreError::NotAStore { .. })),
        "nothing was added: {read:?}"
    );
    // Another application's schema_version (a migration tool's, its
    // version text or an integer) is no store either; four tables are
    // named, and a fifth only said to be there.
    for (suffix, tables, named) in [
        (
            "flyway",
            "CREATE TABLE {0}.schema_version (version varchar(50)); \
             INSERT INTO {0}.schema_version VALUES ('1.0'); CREATE TABLE {0}.users (id integer)",
            "(schema_version, users)",
        ),
        (
            "integer",
            "CREATE TABLE {0}.schema_version (version integer); \
             INSERT INTO {0}.schema_version VALUES (3); CREATE TABLE {0}.users (id integer)",
            "(schema_version, users)",
        ),
        (
            // Tables of a store's names, not of its columns: a shop's.
            "shop",
            "CREATE TABLE {0}.schema_version (version integer NOT NULL); \
             INSERT INTO {0}.schema_version VALUES (3); \
             CREATE TABLE {0}.sessions (id text PRIMARY KEY, login text); \
             CREATE TABLE {0}.events (id serial PRIMARY KEY, \
                 session_id text REFERENCES {0}.sessions (id) ON DELETE CASCADE, what text)",
            "(events, schema_version, sessions)",
        ),
        (
            "four",
            "CREATE TABLE {0}.a (id integer); CREATE TABLE {0}.b (id integer); \
             CREATE TABLE {0}.c (id integer); CREATE TABLE {0}.d (id integer)",
            "(a, b, c, d)",
        ),
        (
            "five",
            "CREATE TABLE {0}.a (id integer); CREATE TABLE {0}.b (id integer); \
             CREATE TABLE {0}.c (id integer); CREATE TABLE {0}.d (id integer); \
             CREATE TABLE {0}.e (id integer)",
            "(a, b, c, d, …)",
        ),
    ] {
        let schema = Schema::new(&server, &format!("foreign_{suffix}"));
        ok(ok(admin.connect()).batch_execute(&format!(
            "CREATE SCHEMA {0}; {1}",
            schema.name,
            tables.replace("{0}", &schema.name)
        )));
        let mut commands = vec![vec!["create", schema.url.as_str(), "--session", "s"]];
        if tables.contains("schema_version") {
            // A reader, too, is told whose table that is.
            commands.push(vec!["list", schema.url.as_str()]);
        }
        for args in commands {
            let refused = run(&args);
            refused.expect_code(1);
            assert!(
                refused
                    .stderr
                    .contains(&format!("holds tables of another application {named}")),
                "{suffix} {args:?}: {}",
                refused.stderr
            );
        }
        if suffix == "shop" {
            // Nothing of it was upgraded: its version, its foreign key and
            // its tables are as the application left them.
            let mut client = ok(admin.connect());
            let version: i32 = ok(client.query_one(
                &format!("SELECT version FROM {}.schema_version", schema.name),
                &[],
            ))
            .get(0);
            assert_eq!(version, 3);
            let mut count =
                |query: &str| -> i64 { ok(client.query_one(query, &[&schema.name])).get(0) };
            let kept = count(
                "SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
                  WHERE n.nspname = $1 AND c.contype = 'f'",
            );
            assert_eq!(kept, 1, "the application's foreign key stays");
            let tables = count(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = $1 AND c.relkind = 'r'",
            );
            assert_eq!(tables, 3, "no table was added");
        }
    }
}

/// A migration leaves the planner's statistics of what it wrote up to
/// date: until autovacuum's next pass, a read of a few events of a long
/// session could otherwise be planned as a scan of all its rows.
#[test]
fn a_migration_analyzes_the_tables_it_filled() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "analyzed");
    run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    let rows = ok(ok(admin.connect()).query(
        "SELECT relname::text FROM pg_stat_user_tables \
         WHERE schemaname = $1 AND last_analyze IS NOT NULL ORDER BY relname",
        &[&schema.name],
    ));
    let analyzed: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(analyzed, ["events", "sessions", "snapshots"]);
    // A role that may write the tables but does not own them cannot
    // analyze them: the migration stands, and the warning says so.
    let granted = Schema::new(&server, "granted");
    run(["create", &granted.url, "--session", "seed"]).expect_code(0);
    let role = format!("it_writer_{}", std::process::id());
    ok(ok(admin.connect()).batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; \
         GRANT USAGE ON SCHEMA {schema} TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        schema = granted.name
    )));
    let as_writer = granted
        .url
        .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    let migrated = run(["migrate", &text(&examples()), &as_writer]);
    ok(ok(admin.connect()).batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")));
    migrated.expect_code(0);
    assert!(
        migrated.stderr.contains("does not own the store's tables"),
        "{}",
        migrated.stderr
    );
}

/// A migration from a PostgreSQL store into itself is refused, however
/// the two URLs spell it; `--resume` would otherwise prove every session
/// against itself.
#[test]
fn migrate_into_the_same_postgres_store_is_refused() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "same");
    run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
    let respelled = format!("{}&application_name=other", schema.url);
    // Another user of the same server and database: only the server can
    // tell it is the same store.
    let role = format!("it_same_{}", std::process::id());
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    ok(ok(admin.connect()).batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN SUPERUSER"
    )));
    let other_user = schema
        .url
        .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(
        other_user, schema.url,
        "{server}: the URL names no user postgres"
    );
    for to in [schema.url.as_str(), respelled.as_str(), other_user.as_str()] {
        for resume in [false, true] {
            let mut args = vec!["migrate", schema.url.as_str(), to];
            if resume {
                args.push("--resume");
            }
            let refused = run(&args);
            refused.expect_code(1);
            assert!(
                refused.stderr.contains("are the same store"),
                "{args:?}: {}",
                refused.stderr
            );
        }
    }
    ok(ok(admin.connect()).batch_execute(&format!("DROP ROLE {role}")));
}

/// A password file others can read is not used, as libpq does not use it;
/// the warning names the file, once a run.
#[test]
fn a_password_file_others_can_read_is_named_once() {
    use std::os::unix::fs::PermissionsExt;
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "passfile");
    run(["create", &schema.url, "--session", "s"]).expect_code(0);
    let dir = ok(tempfile::tempdir());
    let file = dir.path().join("pgpass");
    ok(std::fs::write(&file, "*:*:*:*:secret\n"));
    ok(std::fs::set_permissions(
        &file,
        std::fs::Permissions::from_mode(0o644),
    ));
    let mut command = sessionlog(["verify", &schema.url, "--session", "nosuch"]);
    command.env("PGPASSFILE", &file);
    let refused = crate::cli_support::run_command(command, None);
    let warning = format!(
        "{}: the password file has group or world access",
        file.display()
    );
    assert_eq!(
        refused.stderr.matches(&warning).count(),
        1,
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains("secret"), "{}", refused.stderr);
}

/// A store that lost one of its tables is a store damaged (exit 2), not
/// another application's schema.
#[test]
fn a_store_without_its_events_table_is_damaged_not_foreign() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "lost_table");
    run(["create", &schema.url, "--session", "s"]).expect_code(0);
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    ok(ok(admin.connect()).batch_execute(&format!(
        "ALTER TABLE {0}.events RENAME TO events_old",
        schema.name
    )));
    for command in ["verify", "list"] {
        let refused = run([command, schema.url.as_str()]);
        refused.expect_code(2);
        assert!(
            refused.stderr.contains("has no events table")
                && !refused.stderr.contains("another application"),
            "{command}: {}",
            refused.stderr
        );
    }
}

/// A PostgreSQL writer that resumed from its state snapshot checks the
/// chain it carries against the session's rows before it seals: it seals
/// a turn when they agree, and, once a row under the snapshot was changed
/// (its CRC recomputed), refuses a seal signed by a key that sealed
/// nothing here (exit 7, nothing written), which reads the rows from the
/// header; one signed by the turn's key reads them from the turn's seal.
#[test]
fn a_resumed_writer_seals_only_the_chain_its_rows_give() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "sealres");
    let dir = ok(tempfile::tempdir());
    let key = dir.path().join("runtime.key");
    let key = key.to_str().unwrap_or_else(|| panic!("{key:?}"));
    run(["keygen", key]).expect_code(0);
    run(["create", &schema.url, "--session", "s", "--cwd", "/w"]).expect_code(0);
    let turn = |turn_id: &str| {
        format!(
            "{{\"type\":\"turn/start\",\"data\":{{\"turnId\":\"{turn_id}\"}}}}\n\
             {{\"type\":\"x-note\",\"data\":{{\"text\":\"do {turn_id}\"}}}}\n\
             {{\"type\":\"turn/end\",\"data\":{{\"turnId\":\"{turn_id}\"}}}}\n"
        )
    };
    let turns: String = (1..=400).map(|n| turn(&format!("t{n}"))).collect();
    run_with_stdin(["append", &schema.url, "--session", "s"], &turns).expect_code(0);
    // Resumed from the snapshot the append kept: sealed.
    let sealing = ["append", &schema.url, "--session", "s", "--seal-key", key];
    run_with_stdin(sealing, &turn("ta")).expect_code(0);
    let trust = format!("{key}.pub");
    run(["verify", &schema.url, "--trust", &trust, "--require-sealed"]).expect_code(0);
    // A row under the snapshot changed, its CRC recomputed.
    let Ok(Store::Postgres(store)) = Store::create(Path::new(&schema.url)) else {
        panic!("{}: no PostgreSQL store", schema.url);
    };
    let mut client = ok(store.connect());
    let select = format!(
        "SELECT body FROM {}.events WHERE session_id = 's' AND seq = 599",
        schema.name
    );
    let body: String = ok(client.query_one(select.as_str(), &[])).get(0);
    assert!(body.contains("do t200"), "{body}");
    let edited = body.replace("do t200", "do X200");
    let crc = i64::from(crate::support::spec_crc("s", edited.as_bytes()));
    let update = format!(
        "UPDATE {}.events SET body = $1, crc = $2 WHERE session_id = 's' AND seq = 599",
        schema.name
    );
    ok(client.execute(update.as_str(), &[&edited, &crc]));
    let count = format!(
        "SELECT count(*) FROM {}.events WHERE session_id = 's'",
        schema.name
    );
    let rows: i64 = ok(client.query_one(count.as_str(), &[])).get(0);
    // Signing with a key that sealed nothing here, the writer reads the
    // rows from the header: refused.
    let other = dir.path().join("other.key");
    let other = other.to_str().unwrap_or_else(|| panic!("{other:?}"));
    run(["keygen", other]).expect_code(0);
    let refused = run(["seal", &schema.url, "--session", "s", "--key", other]);
    refused.expect_code(7);
    assert!(
        refused.stderr.contains("no seal was written"),
        "{}",
        refused.stderr
    );
    let after: i64 = ok(client.query_one(count.as_str(), &[])).get(0);
    assert_eq!(after, rows, "nothing was written");
    // Signing with the key of the turn's seal, it reads them from that
    // seal, which vouches for the chain before it: the change is
    // `verify`'s to find, and the new seal does not vouch for it.
    run(["seal", &schema.url, "--session", "s", "--key", key]).expect_code(0);
    let verified = run(["verify", &schema.url, "--trust", &trust, "--json"]);
    verified.expect_code(7);
    let report: serde_json::Value = ok(serde_json::from_str(
        verified.stdout.lines().next().unwrap_or_default(),
    ));
    let failing: Vec<u64> = report["sealFailures"]
        .as_array()
        .map(|failures| failures.iter().filter_map(|f| f["seq"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(failing, [1204, 1205], "{}", verified.stdout);
}

/// A server that takes the connection and never answers (stopped,
/// overloaded, a forward with nothing behind it) is given up on after the
/// connect timeout, the URL's or `PGCONNECT_TIMEOUT`, as libpq gives up: it
/// does not hold the command forever. Needs no server: the listener here
/// accepts and says nothing.
#[test]
fn a_server_that_never_answers_is_given_up_on_after_the_connect_timeout() {
    let listener = ok(std::net::TcpListener::bind("127.0.0.1:0"));
    let port = ok(listener.local_addr()).port();
    // Each connection held 20 s, then closed: a command that waited for
    // an answer fails then, on the close, rather than hanging the test.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(20));
                drop(stream);
            });
        }
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    for (url, variable) in [
        (format!("{url}?connect_timeout=1"), None),
        (url.clone(), Some("1")),
    ] {
        let mut command = sessionlog(["list", url.as_str()]);
        if let Some(seconds) = variable {
            command.env("PGCONNECT_TIMEOUT", seconds);
        }
        let started = std::time::Instant::now();
        let refused = crate::cli_support::run_command(command, None);
        refused.expect_code(1);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert!(
            refused
                .stderr
                .contains("the server did not complete the connection within 1 s"),
            "{}",
            refused.stderr
        );
    }
}

/// A role that may not use the store's schema is told so, not that the
/// schema holds no store (its tables are only out of its sight), by
/// reading commands and by `create`, whose advice that would be; a schema
/// that does not exist is named as missing.
#[test]
fn a_role_without_usage_of_the_schema_is_told_so() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = Schema::new(&server, "nousage");
    run(["migrate", &text(&examples()), &schema.url]).expect_code(0);
    let role = format!("it_nousage_{}", std::process::id());
    let Ok(Store::Postgres(admin)) = Store::create(Path::new(&server)) else {
        panic!("{server}: no PostgreSQL store");
    };
    let mut client = ok(admin.connect());
    ok(client.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"
    )));
    let as_role = schema
        .url
        .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(
        as_role, schema.url,
        "{server}: the URL names no user postgres"
    );
    for args in [
        vec!["list", as_role.as_str()],
        vec!["create", as_role.as_str(), "--session", "s"],
    ] {
        let refused = run(&args);
        refused.expect_code(1);
        assert!(
            refused.stderr.contains(&format!(
                "exists, but role {role} may not use it (no USAGE privilege on it)"
            )),
            "{args:?}: {}",
            refused.stderr
        );
    }
    ok(client.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA {0} TO {role}; GRANT SELECT ON ALL TABLES IN SCHEMA {0} TO {role}",
        schema.name
    )));
    run(["list", as_role.as_str()]).expect_code(0);
    let missing = Schema::new(&server, "missing");
    let refused = run(["list", missing.url.as_str()]);
    refused.expect_code(1);
    assert!(
        refused.stderr.contains(&format!(
            "schema {} does not exist in database",
            missing.name
        )),
        "{}",
        refused.stderr
    );
    ok(client.batch_execute(&format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA {0} FROM {role}; REVOKE ALL ON SCHEMA {0} FROM {role}; \
         DROP ROLE {role}",
        schema.name
    )));
}
