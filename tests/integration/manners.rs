//! How every command behaves at its edges, as a user meets it: a reader that
//! goes away (`| head -1`), a folder that holds no sessions, warnings, and
//! the exit codes of what is not the command's main answer.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::cli_support::{run, sessionlog, workspace_root};

fn examples() -> PathBuf {
    workspace_root().join("examples").join("sessions")
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

// ---------------------------------------------------------------------------
// A reader that goes away
// ---------------------------------------------------------------------------

/// Runs the binary with a standard output whose reader is already gone, so
/// its first write meets a broken pipe whatever the timing, and returns its
/// exit code and standard error.
fn run_into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap_or_else(|error| panic!("pipe: {error}"));
    drop(reader);
    let output = sessionlog(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|error| panic!("run sessionlog {args:?}: {error}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_command_stops_quietly_with_141_when_its_reader_goes_away() {
    let store = arg(&examples());
    let log = arg(&examples().join("auto-review.jsonl"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["verify", &store],
        vec!["verify", &store, "--json"],
        vec!["stats", &store],
        vec!["stats", &store, "--json"],
        vec!["list", &store],
        vec!["list", &store, "--tree"],
        vec!["completions", "bash"],
        vec!["export", &store],
        vec!["replay", &log],
        vec!["replay", &log, "--json"],
        vec!["tail", &log],
        vec!["project", &log],
        vec!["diff", &store, &store],
        vec!["--help"],
    ];
    for command in commands {
        let (code, stderr) = run_into_closed_pipe(&command);
        assert_eq!(
            code,
            Some(141),
            "sessionlog {command:?} into a closed pipe exits 128 + SIGPIPE; stderr: {stderr}"
        );
        assert!(
            stderr.is_empty(),
            "sessionlog {command:?} into a closed pipe prints nothing on stderr, got: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------
// A folder that holds no sessions
// ---------------------------------------------------------------------------

#[test]
fn verify_and_migrate_of_a_folder_without_sessions_say_so_and_exit_1() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let empty = dir.path().join("not-a-store");
    std::fs::create_dir(&empty).unwrap_or_else(|error| panic!("mkdir: {error}"));
    std::fs::write(empty.join("notes.txt"), "not a log\n")
        .unwrap_or_else(|error| panic!("write: {error}"));
    let expected = format!("no sessions found in {}", empty.display());

    let verified = run(["verify", &arg(&empty)]);
    verified.expect_code(1);
    assert!(verified.stderr.contains(&expected), "{}", verified.stderr);
    assert!(
        verified.stderr.contains("--allow-empty"),
        "{}",
        verified.stderr
    );
    run(["verify", &arg(&empty), "--allow-empty"]).expect_code(0);

    let destination = dir.path().join("copy.db");
    let migrated = run(["migrate", &arg(&empty), &arg(&destination)]);
    migrated.expect_code(1);
    assert!(migrated.stderr.contains(&expected), "{}", migrated.stderr);
    assert!(!destination.exists(), "a refused migration creates nothing");
    run(["migrate", &arg(&empty), &arg(&destination), "--allow-empty"]).expect_code(0);
}
