//! The system calls of the real binary, watched with `strace`: what a
//! durable change rests on is synced before the process lets go of what
//! held it, in the order docs/RELIABILITY.md promises. A power loss cannot
//! be staged in a test; the order of the syncs is what decides it.
//!
//! These tests need `strace` (`/usr/bin/strace`), so they are `#[ignore]`d:
//! `.ci/run` installs it and runs them by name.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli_support::{run, run_command, sessionlog_binary};
use crate::crash::text;

/// Debian's strace: a test that needs it is run on purpose, so its
/// absence is a failure that says what to install.
fn strace() -> PathBuf {
    let path = PathBuf::from("/usr/bin/strace");
    assert!(
        path.is_file(),
        "/usr/bin/strace is missing: the sync-order tests need it (apt-get install strace, or run .ci/run)"
    );
    path
}

/// A temporary folder, and its path as `strace -y` names the files in it
/// (symlinks resolved).
fn temp_folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let folder = dir
        .path()
        .canonicalize()
        .unwrap_or_else(|error| panic!("canonical temp dir: {error}"));
    (dir, folder)
}

/// One traced system call: its name, its first argument (a file
/// descriptor's path as `strace -y` shows it, or a quoted path) and its
/// result.
#[derive(Debug)]
struct Call {
    name: String,
    target: String,
    result: String,
}

/// Runs `sessionlog args` under `strace -f -y`, tracing `calls`, with
/// `stdin`, checks that it exits 0 and returns the calls in order.
fn traced(folder: &Path, args: &[&str], stdin: Option<&str>, calls: &str) -> Vec<Call> {
    let trace = folder.join("strace.out");
    let mut command = Command::new(strace());
    command
        .args(["-f", "-qq", "-y", "-e"])
        .arg(format!("trace={calls}"))
        .arg("-o")
        .arg(&trace)
        .arg(sessionlog_binary())
        .args(args)
        .current_dir(folder)
        .env("NO_COLOR", "1")
        .env_remove("SESSIONLOG_LOG");
    run_command(command, stdin).expect_code(0);
    let text =
        std::fs::read_to_string(&trace).unwrap_or_else(|error| panic!("read trace: {error}"));
    text.lines().filter_map(parse_call).collect()
}

/// `1234 fsync(3</tmp/x/s.db>) = 0` → fsync, /tmp/x/s.db, 0;
/// `1234 mkdir("/tmp/x/a", 0700) = 0` → mkdir, /tmp/x/a, 0.
fn parse_call(line: &str) -> Option<Call> {
    let line = line
        .split_once(' ')
        .map_or(line, |(_, rest)| rest.trim_start());
    let (name, rest) = line.split_once('(')?;
    let (_, result) = rest.rsplit_once(" = ")?;
    let first = rest.split([',', ')']).next().unwrap_or_default();
    let target = match first.split_once('<') {
        Some((_, path)) => path.trim_end_matches('>'),
        None if name == "mkdirat" || name == "unlinkat" => rest
            .split(", ")
            .nth(1)
            .unwrap_or_default()
            .trim_matches('"'),
        None => first.trim_matches('"'),
    };
    Some(Call {
        name: name.to_owned(),
        target: target.to_owned(),
        result: result
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
    })
}

fn is_sync(call: &Call) -> bool {
    matches!(call.name.as_str(), "fsync" | "fdatasync") && call.result == "0"
}

/// A SQLite store closes by copying its write-ahead log into the database
/// file and deleting the log: the copy must be synced before the log that
/// held the acknowledged appends goes, whatever the last commit was. A
/// writer that closes after 1,024 acknowledged events saves its state
/// snapshot first, a commit that is never synced: under `synchronous=OFF`
/// that left the close's checkpoint without a sync of the database file.
#[test]
#[ignore = "traces system calls with /usr/bin/strace; .ci/run runs it with --ignored"]
fn sqlite_checkpoint_syncs_the_database_before_it_drops_the_log() {
    let (_dir, folder) = temp_folder();
    let database = folder.join("s.db");
    run(["create", &text(&database), "--session", "s"]).expect_code(0);
    let input: String = (0..1_100)
        .map(|n| format!("{{\"type\":\"x-test/n\",\"data\":{{\"n\":{n}}}}}\n"))
        .collect();
    let calls = traced(
        &folder,
        &["append", &text(&database), "--session", "s"],
        Some(&input),
        "pwrite64,fsync,fdatasync,unlink,unlinkat",
    );
    let database = text(&database);
    let wal = format!("{database}-wal");
    let last_write = calls
        .iter()
        .rposition(|call| call.name == "pwrite64" && call.target == database)
        .unwrap_or_else(|| panic!("the close copies the log into {database}: {calls:#?}"));
    let synced = calls[last_write..]
        .iter()
        .position(|call| is_sync(call) && call.target == database)
        .map(|at| last_write + at)
        .unwrap_or_else(|| {
            panic!(
                "no sync of {database} after its last write: {:#?}",
                &calls[last_write..]
            )
        });
    if let Some(dropped) = calls
        .iter()
        .position(|call| call.name.starts_with("unlink") && call.target == wal)
    {
        assert!(
            dropped > synced,
            "the log was deleted (call {dropped}) before the database was synced (call {synced})"
        );
    }
    run(["verify", &database]).expect_code(0);
}

/// A new JSONL store's folders, and the ones above it that did not exist,
/// are each made durable in their parent: a folder fsync of the parent
/// after each `mkdir`, so that the session published in the new folder
/// does not vanish with it on a power loss.
#[test]
#[ignore = "traces system calls with /usr/bin/strace; .ci/run runs it with --ignored"]
fn a_new_store_folder_is_synced_into_its_parent() {
    let (_dir, folder) = temp_folder();
    let calls = traced(
        &folder,
        &["create", "new/a/b", "--session", "s"],
        None,
        "mkdir,mkdirat,fsync,fdatasync",
    );
    for made in ["new", "new/a", "new/a/b"] {
        let made_at = calls
            .iter()
            .position(|call| {
                call.name.starts_with("mkdir") && call.result == "0" && call.target.ends_with(made)
            })
            .unwrap_or_else(|| panic!("{made} is created: {calls:#?}"));
        let path = folder.join(made);
        let parent = text(path.parent().unwrap_or(&folder));
        assert!(
            calls[made_at..]
                .iter()
                .any(|call| is_sync(call) && call.target == parent),
            "{parent} is synced after {made} is made in it: {:#?}",
            &calls[made_at..]
        );
    }
    assert!(folder.join("new/a/b/s.jsonl").is_file());
}
