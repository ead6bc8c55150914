//! Process crashes: `kill -9` of the real `sessionlog` binary at random
//! moments.
//!
//! - `append` (JSONL and SQLite): events are fed through a pipe kept open,
//!   `{"seq":N}` acknowledgements are read back, and the process is killed
//!   at a random moment (before it opened the log, between appends, inside
//!   one). After each kill: `verify` exits 0 or 3, the good prefix holds
//!   every acknowledged event and only events that were fed, in order, and
//!   the next `append` reopens the log (truncating a torn tail).
//! - `fork`: the child exists whole (header baseline and every seeded
//!   event) or not at all.
//! - `migrate`: every session in the destination is whole; a rerun either
//!   completes (nothing had been written) or is refused cleanly, naming a
//!   session that already exists, and changes nothing.
//!
//! CI runs a bounded number of kills; `SESSIONLOG_LONG=1` runs thousands.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sessionlog_projections::fold;
use sessionlog_store::Store;

use crate::cli_support::{run, sessionlog};
use crate::faults::{expected, id, ok, read_back, realistic_units, Expected};
use crate::realistic::realistic_log;
use crate::support::Rng;

/// A path as an argument of the binary (test paths are UTF-8).
pub fn text(path: &Path) -> String {
    path.display().to_string()
}

/// Whether the long campaigns were asked for.
pub fn long_run() -> bool {
    std::env::var_os("SESSIONLOG_LONG").is_some()
}

/// One input line of `sessionlog append` for an expected event.
pub fn input_line(event: &Expected) -> String {
    format!(
        "{{\"type\":{},\"data\":{},\"ts\":{}}}\n",
        serde_json::to_string(&event.event_type).unwrap_or_default(),
        event.data,
        event.ts
    )
}

/// A realistic session's events, flattened (`append` takes one event a line).
fn realistic_events(seed: u64, turns: usize) -> Vec<Expected> {
    realistic_units(seed, turns)
        .iter()
        .flatten()
        .map(expected)
        .collect()
}

/// What one kill loop saw.
#[derive(Debug, Default)]
pub struct KillFigures {
    pub kills: usize,
    pub acknowledged: u64,
    pub torn_tails: usize,
    pub exited_before_kill: usize,
}

/// A running `append` fed through a pipe that stays open until the kill.
pub struct Appender {
    pub child: Child,
    feeder: JoinHandle<Option<ChildStdin>>,
    acks: JoinHandle<()>,
}

impl Appender {
    /// `kill -9`, then waits for the process and for its feeder and
    /// acknowledgement reader to finish.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        ok(self.child.wait());
        drop(self.feeder.join());
        ok(self
            .acks
            .join()
            .map_err(|_| "the acknowledgement reader panicked"));
    }
}

pub fn start_append(
    store: &Path,
    session: &str,
    lines: Vec<String>,
    acked: Arc<AtomicU64>,
    expect_seq: u64,
) -> Appender {
    let mut child = ok(sessionlog([
        "append",
        &text(store),
        "--session",
        session,
        "--expect-seq",
        &expect_seq.to_string(),
        "--quiet",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn());
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let feeder = std::thread::spawn(move || {
        let pipe = stdin.as_mut()?;
        for line in lines {
            if pipe.write_all(line.as_bytes()).is_err() || pipe.flush().is_err() {
                return None;
            }
        }
        stdin
    });
    let acks = std::thread::spawn(move || {
        let Some(stdout) = stdout else { return };
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let seq = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|value| value["seq"].as_u64())
                .unwrap_or_else(|| panic!("an acknowledgement: {line:?}"));
            acked.fetch_max(seq, Ordering::SeqCst);
        }
    });
    Appender {
        child,
        feeder,
        acks,
    }
}

/// Kills `append` again and again while it appends `events`; checks every
/// survivor. `store` is a JSONL folder or a database holding session `s`.
fn kill_loop(
    store: &Path,
    session: &str,
    events: &[Expected],
    kills: usize,
    seed: u64,
    max_delay_us: usize,
) -> KillFigures {
    run([
        "create",
        &text(store),
        "--session",
        session,
        "--cwd",
        "/work",
    ])
    .expect_code(0);
    let lines: Vec<String> = events.iter().map(input_line).collect();
    let acked = Arc::new(AtomicU64::new(0));
    let mut rng = Rng::new(seed);
    let mut figures = KillFigures::default();
    let mut have = 0usize;
    // The kills fall within `window` of each start: on a loaded machine an
    // appender may not have started appending by then, so a round in
    // which nothing was acknowledged widens it (up to 16 times), and one
    // that acknowledged events sets it back.
    let mut window = max_delay_us;
    for round in 0..kills {
        if have >= lines.len() {
            break;
        }
        let chunk = 1 + rng.below(60);
        let feed = lines[have..(have + chunk).min(lines.len())].to_vec();
        let acked_before = acked.load(Ordering::SeqCst);
        let mut appender = start_append(store, session, feed, acked.clone(), have as u64 + 1);
        std::thread::sleep(Duration::from_micros(rng.below(window) as u64));
        if ok(appender.child.try_wait()).is_some() {
            figures.exited_before_kill += 1;
        }
        appender.kill();
        figures.kills += 1;
        window = match acked.load(Ordering::SeqCst) > acked_before {
            true => max_delay_us,
            false => (window * 2).min(max_delay_us * 16),
        };
        let verify = run(["verify", &text(store), "--session", session]);
        assert!(
            verify.code == 0 || verify.code == 3,
            "round {round}: verify after a kill exits 0 or 3\n{}{}",
            verify.stdout,
            verify.stderr
        );
        if verify.code == 3 {
            figures.torn_tails += 1;
        }
        let snapshot = ok(ok(Store::open(store)).snapshot(&id(session)));
        let found: Vec<Expected> = snapshot.events.iter().map(read_back).collect();
        let acknowledged = acked.load(Ordering::SeqCst) as usize;
        assert!(
            found.len() >= acknowledged,
            "round {round}: {acknowledged} events acknowledged, {} found",
            found.len()
        );
        assert_eq!(
            found[..],
            events[..found.len()],
            "round {round}: only fed events, in order"
        );
        have = found.len();
    }
    let rest: String = lines[have..].concat();
    let finish =
        crate::cli_support::run_with_stdin(["append", &text(store), "--session", session], &rest);
    finish.expect_code(0);
    run(["verify", &text(store), "--session", session]).expect_code(0);
    let snapshot = ok(ok(Store::open(store)).snapshot(&id(session)));
    let found: Vec<Expected> = snapshot.events.iter().map(read_back).collect();
    assert_eq!(
        found, events,
        "after the kills the log holds every event once"
    );
    let (_, violations) = fold(snapshot.header, &snapshot.events);
    assert!(violations.is_empty(), "{violations:?}");
    figures.acknowledged = acked.load(Ordering::SeqCst);
    figures
}

/// Runs `kills` kills in rounds of at most 150 per session (so a long run
/// does not reread one ever-growing log), adding up the figures.
fn kill_sessions(store: &Path, kills: usize, seed: u64) -> KillFigures {
    kill_sessions_within(store, kills, seed, 12_000)
}

/// [`kill_sessions`], each kill at most `max_delay_us` after the start.
pub fn kill_sessions_within(
    store: &Path,
    kills: usize,
    seed: u64,
    max_delay_us: usize,
) -> KillFigures {
    let mut total = KillFigures::default();
    for (n, start) in (0..kills).step_by(150).enumerate() {
        let round_kills = (kills - start).min(150);
        let events = realistic_events(seed + n as u64, round_kills * 4);
        let figures = kill_loop(
            store,
            &format!("s{n}"),
            &events,
            round_kills,
            seed + n as u64,
            max_delay_us,
        );
        total.kills += figures.kills;
        total.acknowledged += figures.acknowledged;
        total.torn_tails += figures.torn_tails;
        total.exited_before_kill += figures.exited_before_kill;
    }
    total
}

pub fn kills(ci: usize, long: usize) -> usize {
    if long_run() {
        long
    } else {
        ci
    }
}

#[test]
fn kill_9_during_jsonl_appends_never_loses_an_acknowledged_event() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("logs");
    let kills = kills(150, 3000);
    let figures = kill_sessions(&store, kills, 21);
    eprintln!(
        "kill -9 of append (JSONL): {} kills, {} events acknowledged, {} torn tails found by verify (exit 3), {} runs finished before their kill; nothing acknowledged lost",
        figures.kills, figures.acknowledged, figures.torn_tails, figures.exited_before_kill
    );
    assert_eq!(figures.kills, kills, "{figures:?}");
    assert!(figures.acknowledged > 0, "{figures:?}");
}

#[test]
fn kill_9_during_sqlite_appends_never_loses_an_acknowledged_event() {
    let folder = ok(tempfile::tempdir());
    let store = folder.path().join("sessions.db");
    let kills = kills(100, 2000);
    let figures = kill_sessions(&store, kills, 22);
    eprintln!(
        "kill -9 of append (SQLite): {} kills, {} events acknowledged, {} torn tails found by verify (exit 3), {} runs finished before their kill; nothing acknowledged lost",
        figures.kills, figures.acknowledged, figures.torn_tails, figures.exited_before_kill
    );
    assert_eq!(figures.torn_tails, 0, "a database has no torn tail");
    assert_eq!(figures.kills, kills, "{figures:?}");
    assert!(figures.acknowledged > 0, "{figures:?}");
}

/// Kills `fork` at random moments; every child is whole or absent.
fn fork_kills(store: &Path, kills: usize, seed: u64) -> (usize, usize) {
    let parent = realistic_log("parent", seed, 60);
    let opened = ok(Store::create(store));
    let spec = parent.log();
    let header =
        sessionlog_schema::SessionHeader::root(id("parent"), 1_700_000_000_000, "/work".into());
    let records: Vec<sessionlog_schema::EventRecord> = spec
        .events()
        .iter()
        .map(|e| sessionlog_schema::EventRecord::new(e.seq, e.ts, e.batch, &e.event_type, &e.data))
        .collect();
    ok(opened.create_session(&header, &records, sessionlog_store::Durability::Fsync));
    drop(opened);
    let mut rng = Rng::new(seed);
    let (mut whole, mut absent) = (0, 0);
    for round in 0..kills {
        let child_id = format!("child-{round}");
        let mut child = ok(sessionlog([
            "fork",
            &text(store),
            "--session",
            "parent",
            "--child",
            &child_id,
            "--prompt",
            "run the tests",
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn());
        std::thread::sleep(Duration::from_micros(rng.below(15_000) as u64));
        let _ = child.kill();
        ok(child.wait());
        let opened = ok(Store::open(store));
        if !ok(opened.contains(&id(&child_id))) {
            absent += 1;
            continue;
        }
        whole += 1;
        let snapshot = ok(opened.snapshot(&id(&child_id)));
        assert!(snapshot.torn_tail.is_none(), "{child_id}: no torn tail");
        assert_eq!(
            snapshot.header.seed_length,
            records.len() as u64,
            "{child_id}"
        );
        let seeded: Vec<Expected> = snapshot.events[..records.len()]
            .iter()
            .map(read_back)
            .collect();
        let parent_events: Vec<Expected> = records.iter().map(read_back).collect();
        assert_eq!(seeded, parent_events, "{child_id}: the whole seed");
        let last = snapshot
            .events
            .last()
            .map(|r| r.data().to_owned())
            .unwrap_or_default();
        assert!(
            last.contains("run the tests"),
            "{child_id}: ends with its prompt"
        );
        let (_, violations) = fold(snapshot.header.clone(), &snapshot.events);
        assert!(violations.is_empty(), "{child_id}: {violations:?}");
    }
    (whole, absent)
}

#[test]
fn kill_9_during_fork_leaves_the_child_whole_or_absent() {
    for (name, kills) in [("logs", kills(40, 400)), ("sessions.db", kills(40, 400))] {
        let folder = ok(tempfile::tempdir());
        let store = folder.path().join(name);
        let (whole, absent) = fork_kills(&store, kills, 31);
        let leftovers = if name == "logs" {
            let left = dot_files(&store).len();
            assert_eq!(clean_after_kills(&store), left);
            left
        } else {
            0
        };
        eprintln!(
            "kill -9 of fork ({name}): {kills} kills, {whole} children whole, {absent} absent, none partial; {leftovers} temporary files left behind, all removed by `sessionlog clean`"
        );
        assert_eq!(whole + absent, kills);
    }
}

/// A source store of `sessions` realistic sessions.
fn migration_source(path: &Path, sessions: u64) {
    let store = ok(Store::create(path));
    for n in 0..sessions {
        let session_id = format!("s{n:03}");
        let spec = realistic_log(&session_id, n, 8).log();
        let records: Vec<sessionlog_schema::EventRecord> = spec
            .events()
            .iter()
            .map(|e| {
                sessionlog_schema::EventRecord::new(e.seq, e.ts, e.batch, &e.event_type, &e.data)
            })
            .collect();
        let header = sessionlog_schema::SessionHeader::root(
            id(&session_id),
            1_700_000_000_000,
            "/work".into(),
        );
        ok(store.create_session(&header, &records, sessionlog_store::Durability::Buffered));
    }
}

/// How a migration killed at a random moment ended, once rerun.
#[derive(Debug, Default)]
struct MigrateOutcomes {
    rerun_completed: usize,
    rerun_refused: usize,
    sessions_found_whole: usize,
    /// Temporary files `sessionlog clean` removed after a kill.
    leftovers_removed: usize,
}

/// The dot-named files of a JSONL store folder.
fn dot_files(folder: &Path) -> Vec<String> {
    ok(std::fs::read_dir(folder))
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with('.'))
        .collect()
}

/// Runs `sessionlog clean` on a JSONL store folder whose writers are all
/// gone: every temporary file goes but the locks of interrupted
/// migrations, which it keeps and names; no session goes. Returns how many
/// went.
fn clean_after_kills(store: &Path) -> usize {
    let before = ok(ok(Store::open(store)).ids());
    let cleaned = run(["clean", &text(store), "--older-than", "0", "--json"]);
    cleaned.expect_code(0);
    let removed = cleaned
        .stdout
        .lines()
        .filter(|line| line.contains(r#""action":"removed""#))
        .count();
    let kept = cleaned
        .stdout
        .lines()
        .filter(|line| line.contains(r#""action":"unfinished migration""#))
        .count();
    let left = dot_files(store);
    assert!(
        left.iter()
            .all(|name| name.starts_with(".migrate-") && name.ends_with(".lock")),
        "every temporary file removed but migration locks: {left:?}"
    );
    assert_eq!(
        left.len(),
        kept,
        "each lock kept is named: {}",
        cleaned.stdout
    );
    assert_eq!(
        ok(ok(Store::open(store)).ids()),
        before,
        "no session removed"
    );
    removed
}

/// The store a killed migration left at `to`, if it left one: a run killed
/// before it made a new database a store leaves a file with no table,
/// which holds no session and which every command but `create`, `migrate`
/// and `import` refuses as no store.
fn destination_store(to: &Path) -> Option<Store> {
    if !to.exists() {
        return None;
    }
    match Store::open(to) {
        Ok(store) => Some(store),
        Err(sessionlog_store::StoreError::NotAStore { .. }) => None,
        Err(error) => panic!("{}: {error}", to.display()),
    }
}

fn migrate_kills(from: &Path, to_name: &str, kills: usize, seed: u64) -> MigrateOutcomes {
    let mut rng = Rng::new(seed);
    let mut outcomes = MigrateOutcomes::default();
    let source = ok(Store::open(from));
    for round in 0..kills {
        let folder = ok(tempfile::tempdir());
        let to = folder.path().join(to_name);
        let mut child = ok(sessionlog(["migrate", &text(from), &text(&to), "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn());
        std::thread::sleep(Duration::from_micros(rng.below(60_000) as u64));
        let _ = child.kill();
        ok(child.wait());
        if let Some(destination) = destination_store(&to) {
            for session in ok(destination.ids()) {
                let copied = ok(destination.snapshot(&session));
                let original = ok(source.snapshot(&session));
                assert!(copied.torn_tail.is_none(), "round {round}: {session} whole");
                assert_eq!(
                    copied.events, original.events,
                    "round {round}: {session} whole"
                );
                outcomes.sessions_found_whole += 1;
            }
        }
        if to.is_dir() {
            outcomes.leftovers_removed += clean_after_kills(&to);
            // A killed run's lock names its source, or nothing when the
            // kill came before its line was written.
            let source_line = format!("{}\n", text(&ok(std::path::absolute(from))));
            for lock in dot_files(&to) {
                let named = ok(std::fs::read_to_string(to.join(&lock)));
                assert!(
                    named.is_empty() || named == source_line,
                    "round {round}: {lock} holds {named:?}"
                );
            }
        }
        let before = destination_store(&to).map(|store| ok(store.ids()));
        let rerun = run(["migrate", &text(from), &text(&to), "--quiet"]);
        match rerun.code {
            0 => {
                outcomes.rerun_completed += 1;
                run(["diff", &text(from), &text(&to)]).expect_code(0);
            }
            1 => {
                outcomes.rerun_refused += 1;
                assert!(
                    rerun.stderr.contains("already exists"),
                    "round {round}: a rerun is refused naming the session: {}",
                    rerun.stderr
                );
                let after = destination_store(&to).map(|store| ok(store.ids()));
                assert_eq!(
                    after, before,
                    "round {round}: the refused rerun wrote nothing"
                );
            }
            code => panic!("round {round}: rerun exit {code}: {}", rerun.stderr),
        }
        // Finished by a run that resumes it, the migration leaves nothing
        // behind: no lock of the killed run says the folder is short.
        run(["migrate", &text(from), &text(&to), "--quiet", "--resume"]).expect_code(0);
        run(["diff", &text(from), &text(&to)]).expect_code(0);
        if to.is_dir() {
            assert_eq!(dot_files(&to), Vec::<String>::new(), "round {round}");
        }
    }
    outcomes
}

#[test]
fn kill_9_during_migrate_leaves_whole_sessions_and_a_clean_refusal_on_rerun() {
    let folder = ok(tempfile::tempdir());
    let jsonl = folder.path().join("source-logs");
    let sqlite = folder.path().join("source.db");
    migration_source(&jsonl, 40);
    migration_source(&sqlite, 40);
    let kills = kills(12, 200);
    for (from, to_name) in [(&jsonl, "copy.db"), (&sqlite, "copy-logs")] {
        let outcomes = migrate_kills(from, to_name, kills, 41);
        eprintln!(
            "kill -9 of migrate {} -> {to_name}: {kills} kills, {} sessions found whole in partial destinations, {} temporary files removed by clean, rerun completed {} times, refused cleanly {} times",
            from.display(),
            outcomes.sessions_found_whole,
            outcomes.leftovers_removed,
            outcomes.rerun_completed,
            outcomes.rerun_refused
        );
        assert_eq!(outcomes.rerun_completed + outcomes.rerun_refused, kills);
    }
}
