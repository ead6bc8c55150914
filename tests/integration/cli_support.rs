//! Running the real `sessionlog` binary from tests.
//!
//! The binary is the one Cargo built beside this test executable:
//! `…/target/<profile>/deps/integration-xxxx` → `…/target/<profile>/sessionlog`.
//! `cargo test --workspace` builds it (the `sessionlog` package has an
//! integration test of its own, and Cargo builds a package's binaries for
//! those). Nothing here builds it a second time: a binary that is missing,
//! or older than any source it is built from (a run of `cargo test -p
//! sessionlog-tests` alone after an edit), stops the run with the command
//! that builds it, so no test ever runs a stale binary.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

/// What a finished run of the binary left behind.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`-1` when a signal ended it).
    pub code: i32,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

/// The path of the `sessionlog` binary Cargo built, checked to be no older
/// than its sources.
pub fn sessionlog_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(locate_current_binary)
}

/// Makes a FIFO at `path` (with `mkfifo`).
pub fn make_fifo(path: &Path) {
    let made = crate::faults::ok(Command::new("mkfifo").arg(path).status());
    assert!(made.success(), "mkfifo {} failed", path.display());
}

/// Runs `args` and waits at most `limit`; `None` when it had to be killed.
pub fn run_within(args: &[&str], limit: Duration) -> Option<(i32, String)> {
    let mut child: Child = crate::faults::ok(
        sessionlog(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn(),
    );
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = crate::faults::ok(child.try_wait()) {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                crate::faults::ok(std::io::Read::read_to_string(&mut pipe, &mut stderr));
            }
            return Some((status.code().unwrap_or(-1), stderr));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Commands that run the binary as another user (`nobody`, through
/// `setpriv`), for the tests of what one user may not read of another's:
/// `None`, said on standard error, when the tests do not run as root, there
/// is no `setpriv`, or that user cannot run the binary.
pub fn as_another_user() -> Option<impl Fn() -> Command> {
    let root = std::fs::metadata("/proc/self")
        .map(|metadata| std::os::unix::fs::MetadataExt::uid(&metadata) == 0)
        .unwrap_or(false);
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !root || !setpriv {
        eprintln!("note: not root, or no setpriv: no other user to run as");
        return None;
    }
    let binary = sessionlog_binary();
    let as_other = move || {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(binary);
        command
    };
    let runs = as_other()
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !runs {
        eprintln!("note: another user cannot run {}", binary.display());
        return None;
    }
    Some(as_other)
}

/// A `Command` for the binary with `args`, with colour and terminal
/// detection out of the way (`NO_COLOR` set, `COLUMNS` cleared, so that a
/// timeline is laid out for 80 columns) and `SESSIONLOG_LOG` cleared.
pub fn sessionlog<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(sessionlog_binary());
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .env_remove("SESSIONLOG_LOG");
    command
}

/// Runs the binary with `args` and no standard input.
pub fn run<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run_command(sessionlog(args), None)
}

/// Runs the binary with `args`, writing `stdin` to its standard input.
pub fn run_with_stdin<I, S>(args: I, stdin: &str) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run_command(sessionlog(args), Some(stdin))
}

/// Runs a prepared command to completion.
pub fn run_command(mut command: Command, stdin: Option<&str>) -> Run {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("start {command:?}: {error}"));
    // The input is written by a thread of its own while the outputs are
    // read: a command that answers each line (`append`) would otherwise fill
    // its stdout pipe and stop reading, and both sides would wait forever.
    let feeder = stdin.map(|text| {
        let mut pipe = child.stdin.take().unwrap_or_else(|| panic!("stdin piped"));
        let text = text.to_owned();
        std::thread::spawn(move || {
            // A command that exits before reading its input (a refused id,
            // a locked session) closes the pipe: that is its answer, not ours.
            if let Err(error) = pipe.write_all(text.as_bytes()) {
                assert!(
                    error.kind() == std::io::ErrorKind::BrokenPipe,
                    "write stdin: {error}"
                );
            }
        })
    });
    let output = child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("wait for {command:?}: {error}"));
    if let Some(feeder) = feeder {
        feeder
            .join()
            .unwrap_or_else(|_| panic!("writing the input of {command:?} failed"));
    }
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

impl Run {
    /// Panics with both streams unless the exit code is `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code {} (wanted {code})\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }
}

/// Panics unless the one JSON object on `line` has exactly `members` at
/// its top level, in that order (read from the text: `serde_json`'s map
/// sorts its keys).
#[track_caller]
pub fn expect_members_in_order(line: &str, members: &[&str]) {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line.trim())
        .unwrap_or_else(|error| panic!("not one JSON object ({error}): {line}"));
    let mut sorted: Vec<&str> = members.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        object.keys().map(String::as_str).collect::<Vec<_>>(),
        sorted,
        "{line}"
    );
    let at: Vec<usize> = members
        .iter()
        .map(|member| {
            line.find(&format!("\"{member}\":"))
                .unwrap_or_else(|| panic!("{member} in {line}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|pair| pair[0] < pair[1]),
        "{members:?} in this order in {line}"
    );
}

/// The root of the workspace (where `examples/` and `Cargo.toml` live).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("the tests package lives inside the workspace"))
        .to_owned()
}

fn locate_current_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|error| panic!("current_exe: {error}"));
    // …/target/<profile>/deps/integration-xxxx
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("unexpected test executable path {}", exe.display()));
    let binary = profile_dir.join("sessionlog");
    let release = profile_dir
        .file_name()
        .is_some_and(|name| name == "release");
    let build = if release {
        "cargo build --release -p sessionlog"
    } else {
        "cargo build -p sessionlog"
    };
    let built = std::fs::metadata(&binary)
        .and_then(|metadata| metadata.modified())
        .unwrap_or_else(|error| {
            panic!(
                "{} is missing ({error}): run `{build}`, or run every test with `cargo test --workspace`, which builds it",
                binary.display()
            )
        });
    if let Some(newer) = newest_source_after(built) {
        panic!(
            "{} is older than {}: run `{build}`, or run every test with `cargo test --workspace`, which rebuilds it",
            binary.display(),
            newer.display()
        );
    }
    binary
}

/// A source file of the binary modified after `built`, if any.
fn newest_source_after(built: std::time::SystemTime) -> Option<PathBuf> {
    let root = workspace_root();
    let mut pending: Vec<PathBuf> = ["Cargo.toml", "Cargo.lock"]
        .iter()
        .map(|file| root.join(file))
        .collect();
    let mut folders: Vec<PathBuf> = ["schema", "projections", "store", "reviewer", "tools"]
        .iter()
        .map(|crate_dir| root.join(crate_dir))
        .collect();
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if is_dir
                && path
                    .file_name()
                    .is_some_and(|name| name != "benches" && name != "tests")
            {
                folders.push(path);
            } else if path
                .extension()
                .is_some_and(|ext| ext == "rs" || ext == "toml")
            {
                pending.push(path);
            }
        }
    }
    pending.into_iter().find(|path| {
        std::fs::metadata(path)
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|modified| modified > built)
    })
}

/// A running `tail -f` whose stdout lines arrive on a channel.
pub struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    /// Starts `sessionlog ARGS`, watching the store's folder or, with
    /// `poll_only`, with the polling fallback alone.
    pub fn start(args: &[&str], poll_only: bool) -> Follower {
        let mut command = sessionlog(args);
        if poll_only {
            command.env(sessionlog_store::POLL_ONLY_VARIABLE, "1");
        } else {
            command.env_remove(sessionlog_store::POLL_ONLY_VARIABLE);
        }
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null());
        let mut child = command
            .spawn()
            .unwrap_or_else(|error| panic!("spawn tail: {error}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("piped stdout"));
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// The seqs of the next `count` lines.
    pub fn next_seqs(&self, count: usize) -> Vec<u64> {
        (0..count)
            .map(|_| {
                let line = self
                    .lines
                    .recv_timeout(Duration::from_secs(20))
                    .unwrap_or_else(|error| panic!("tail -f printed nothing new: {error}"));
                let record: serde_json::Value =
                    serde_json::from_str(&line).unwrap_or_else(|error| panic!("{line:?}: {error}"));
                record["seq"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no seq in {line}"))
            })
            .collect()
    }

    /// Fails if a line comes within 600 ms.
    pub fn assert_quiet(&self) {
        if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(600)) {
            panic!("tail -f printed {line} twice or out of nowhere");
        }
    }
}

impl Follower {
    /// Waits (up to 20 s) until every thread of the command sleeps: it has
    /// read what was there and waits for what comes, so that an append
    /// made now is new to it, however late a loaded machine started it.
    pub fn wait_until_waiting(&self) {
        let tasks = format!("/proc/{}/task", self.child.id());
        let sleeping = || -> Option<bool> {
            let mut all = true;
            for task in std::fs::read_dir(&tasks).ok()? {
                let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
                // The state follows the name, which is in parentheses.
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                all &= state == 'S';
            }
            Some(all)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        // Twice in a row, 50 ms apart: a start can block for a moment too.
        let mut in_a_row = 0;
        while in_a_row < 2 && std::time::Instant::now() < deadline {
            in_a_row = match sleeping() {
                Some(true) => in_a_row + 1,
                _ => 0,
            };
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the command is still running (it has not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .unwrap_or_else(|error| panic!("wait for tail: {error}"))
            .is_none()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
