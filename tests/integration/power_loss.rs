//! Simulated power loss for the JSONL backend.
//!
//! A recording `FaultInjector` (it never fails anything) watches the
//! workload of `faults` through the `Io` seam: after each fdatasync it keeps
//! the bytes that are now durable for that file, after a publish it carries
//! the temporary file's durable bytes over to the published name, and after
//! a folder fsync it notes which names are durable. At every sync point
//! (before and after each fdatasync, after each truncate, publish and folder
//! fsync) it takes a crash point: the files as they are, what of them is
//! durable, and the model of what was acknowledged at that moment.
//!
//! Each crash point gives several post-crash disks: the bytes written since
//! the last fdatasync of each file dropped, kept, cut at a random byte,
//! replaced by random bytes, or cut and followed by random bytes; and either
//! every name as it is or only the names durable at the last folder fsync (a
//! file created since may vanish). Recovery (a writer opens each session,
//! then the log is read back) must keep every acknowledged event, keep only
//! whole records that were really written, never take random bytes for a
//! record, and leave a log that verifies and takes the next append.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sessionlog_store::testing::{FaultInjector, FaultPoint, Io};
use sessionlog_store::{Backend, JsonlStore, Store};

use crate::faults::{check_recovery, lock, ok, open_store, realistic_units, Model, Workload};
use crate::support::Rng;

/// One file at a crash point.
#[derive(Debug, Clone)]
struct CrashFile {
    name: String,
    /// What fdatasync has made durable (empty when never synced).
    durable: Vec<u8>,
    /// What the file holds now.
    current: Vec<u8>,
    /// Whether its name survived the last folder fsync.
    name_durable: bool,
}

/// The disk and the model at one sync point.
#[derive(Debug, Clone)]
struct CrashPoint {
    label: String,
    files: Vec<CrashFile>,
    model: Model,
}

/// What the recorder knows is durable.
#[derive(Debug, Default)]
struct Durable {
    bytes: BTreeMap<String, Vec<u8>>,
    names: BTreeSet<String>,
}

/// Records durable state and crash points; fails nothing.
struct Recorder {
    folder: PathBuf,
    model: Arc<Mutex<Model>>,
    durable: Mutex<Durable>,
    crash_points: Mutex<Vec<CrashPoint>>,
}

/// What is done to the bytes written since a file's last fdatasync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    Dropped,
    Kept,
    Cut,
    Garbled,
    CutThenGarbled,
}

const TAILS: [Tail; 5] = [
    Tail::Dropped,
    Tail::Kept,
    Tail::Cut,
    Tail::Garbled,
    Tail::CutThenGarbled,
];

impl Recorder {
    fn new(folder: &Path, model: Arc<Mutex<Model>>) -> Recorder {
        Recorder {
            folder: folder.to_owned(),
            model,
            durable: Mutex::new(Durable::default()),
            crash_points: Mutex::new(Vec::new()),
        }
    }

    fn name(path: &Path) -> String {
        path.file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn current_names(&self) -> Vec<String> {
        let mut names: Vec<String> = ok(std::fs::read_dir(&self.folder))
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn crash_point(&self, label: String) {
        let durable = lock(&self.durable);
        let files = self
            .current_names()
            .into_iter()
            .map(|name| CrashFile {
                current: std::fs::read(self.folder.join(&name)).unwrap_or_default(),
                durable: durable.bytes.get(&name).cloned().unwrap_or_default(),
                name_durable: durable.names.contains(&name),
                name,
            })
            .collect();
        let model = lock(&self.model).clone();
        lock(&self.crash_points).push(CrashPoint {
            label,
            files,
            model,
        });
    }
}

impl FaultInjector for Recorder {
    fn before(&self, point: FaultPoint, path: &Path) -> std::io::Result<()> {
        if point == FaultPoint::Fsync {
            self.crash_point(format!("before fdatasync of {}", Recorder::name(path)));
        }
        Ok(())
    }

    fn after(&self, point: FaultPoint, path: &Path) {
        let name = Recorder::name(path);
        match point {
            FaultPoint::Fsync => {
                let bytes = std::fs::read(path).unwrap_or_default();
                lock(&self.durable).bytes.insert(name.clone(), bytes);
            }
            FaultPoint::Publish => {
                let mut durable = lock(&self.durable);
                let prefix = format!(".{name}.tmp-");
                let temp = durable
                    .bytes
                    .keys()
                    .find(|key| key.starts_with(&prefix))
                    .cloned();
                if let Some(temp) = temp {
                    let bytes = durable.bytes.remove(&temp).unwrap_or_default();
                    durable.bytes.insert(name.clone(), bytes);
                }
            }
            FaultPoint::FolderFsync => {
                let names = self.current_names();
                lock(&self.durable).names = names.into_iter().collect();
            }
            FaultPoint::CreateTemp
            | FaultPoint::Write
            | FaultPoint::Truncate
            | FaultPoint::Commit
            // A state snapshot is never synced: a power loss may keep it
            // or not, and a reader ignores one it cannot trust.
            | FaultPoint::Snapshot => {}
        }
        if !matches!(point, FaultPoint::CreateTemp | FaultPoint::Write) {
            self.crash_point(format!("after {point:?} of {name}"));
        }
    }
}

/// The bytes of `file` after a crash with `tail`.
fn after_crash(file: &CrashFile, tail: Tail, rng: &mut Rng) -> Vec<u8> {
    let random = |rng: &mut Rng, at_least: usize, spread: usize| -> Vec<u8> {
        let length = at_least.max(1 + rng.below(spread));
        (0..length).map(|_| rng.next_u64() as u8).collect()
    };
    let Some(unsynced) = file.current.strip_prefix(file.durable.as_slice()) else {
        // Truncated since the last sync: either length may have survived.
        return match tail {
            Tail::Dropped | Tail::Cut => file.durable.clone(),
            Tail::Kept => file.current.clone(),
            Tail::Garbled | Tail::CutThenGarbled => {
                let mut bytes = file.current.clone();
                bytes.extend(random(rng, 1, 64));
                bytes
            }
        };
    };
    let mut bytes = file.durable.clone();
    let cut = if unsynced.is_empty() {
        0
    } else {
        rng.below(unsynced.len())
    };
    match tail {
        Tail::Dropped => {}
        Tail::Kept => bytes.extend_from_slice(unsynced),
        Tail::Cut => bytes.extend_from_slice(&unsynced[..cut]),
        Tail::Garbled => bytes.extend(random(rng, unsynced.len(), 48)),
        Tail::CutThenGarbled => {
            bytes.extend_from_slice(&unsynced[..cut]);
            bytes.extend(random(rng, 1, 64));
        }
    }
    bytes
}

/// What the campaign tried.
#[derive(Debug, Default)]
struct Figures {
    workloads: usize,
    crash_points: usize,
    crash_states: usize,
    sessions_recovered: usize,
    acknowledged_events: usize,
    vanished_files: usize,
}

/// Runs the workload of seed `seed` under the recorder, then recovers every
/// distinct post-crash disk of every crash point.
fn campaign(seed: u64, figures: &mut Figures) {
    let folder = ok(tempfile::tempdir());
    let logs = folder.path().join("logs");
    ok(std::fs::create_dir(&logs));
    let model = Arc::new(Mutex::new(Model::default()));
    let recorder = Arc::new(Recorder::new(&logs, model.clone()));
    let store = open_store(Backend::Jsonl, &logs, Io::with_faults(recorder.clone()));
    let workload = Workload {
        store,
        model,
        units: realistic_units(seed, 4),
    };
    ok(workload.run());
    drop(workload);
    let crash_points = lock(&recorder.crash_points).clone();
    let mut rng = Rng::new(seed);
    let mut seen: HashSet<Vec<(String, Vec<u8>)>> = HashSet::new();
    figures.workloads += 1;
    figures.crash_points += crash_points.len();
    for crash in &crash_points {
        for tail in TAILS {
            for names_as_now in [true, false] {
                let disk: Vec<(String, Vec<u8>)> = crash
                    .files
                    .iter()
                    .filter(|file| names_as_now || file.name_durable)
                    .map(|file| (file.name.clone(), after_crash(file, tail, &mut rng)))
                    .collect();
                if !seen.insert(disk.clone()) {
                    continue;
                }
                figures.vanished_files += crash.files.len() - disk.len();
                recover(&disk, crash, tail, figures);
            }
        }
    }
}

fn recover(disk: &[(String, Vec<u8>)], crash: &CrashPoint, tail: Tail, figures: &mut Figures) {
    let folder = ok(tempfile::tempdir());
    for (name, bytes) in disk {
        ok(std::fs::write(folder.path().join(name), bytes));
    }
    let store = Store::Jsonl(ok(JsonlStore::open(folder.path())));
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_recovery(&store, &crash.model, false)
    }));
    let found = found.unwrap_or_else(|panic| {
        let files: Vec<String> = disk
            .iter()
            .map(|(name, bytes)| format!("{name} ({} bytes)", bytes.len()))
            .collect();
        eprintln!(
            "recovery failed at crash point `{}` with the unsynced tail {tail:?}; files {files:?}",
            crash.label
        );
        std::panic::resume_unwind(panic)
    });
    figures.crash_states += 1;
    for recovered in found.values() {
        figures.sessions_recovered += 1;
        figures.acknowledged_events += recovered.acknowledged;
    }
}

#[test]
fn every_simulated_power_loss_keeps_every_acknowledged_event_and_no_garbage() {
    let seeds: u64 = if std::env::var_os("SESSIONLOG_LONG").is_some() {
        40
    } else {
        3
    };
    let mut figures = Figures::default();
    for seed in 0..seeds {
        campaign(seed, &mut figures);
    }
    eprintln!(
        "power loss (JSONL): {} workloads, {} crash points, {} distinct post-crash disks recovered, {} sessions reopened, {} acknowledged events found again, {} files vanished with their unsynced names; nothing acknowledged lost, no garbage accepted",
        figures.workloads,
        figures.crash_points,
        figures.crash_states,
        figures.sessions_recovered,
        figures.acknowledged_events,
        figures.vanished_files,
    );
    assert!(figures.crash_states > 100 * seeds as usize, "{figures:?}");
}

/// Post-crash logs kept under `tests/fixtures/crash/`: a writer reopening
/// each keeps exactly `kept` events, truncates the rest, and appends.
#[test]
fn stored_post_crash_logs_recover_to_their_good_prefix() {
    let fixtures = crate::cli_support::workspace_root().join("tests/fixtures/crash");
    for (name, kept) in [
        ("batch-missing-its-last-record.jsonl", 2),
        ("batch-cut-inside-a-record.jsonl", 2),
        ("garbled-unsynced-tail.jsonl", 2),
        ("zeroes-after-a-whole-batch.jsonl", 5),
    ] {
        let folder = ok(tempfile::tempdir());
        let path = folder.path().join(name);
        ok(std::fs::copy(fixtures.join(name), &path));
        let torn = ok(sessionlog_store::Snapshot::read(&path, None));
        assert!(torn.torn_tail.is_some(), "{name}: a torn tail");
        assert_eq!(torn.events.len(), kept, "{name}");
        let mut writer = ok(sessionlog_store::open_log_writer(
            &path,
            None,
            sessionlog_store::WriterOptions::default(),
            Io::default(),
        ));
        assert_eq!(writer.next_seq(), kept as u64 + 1, "{name}");
        ok(writer.append(crate::faults::probe(1), None));
        drop(writer);
        let recovered = ok(sessionlog_store::Snapshot::read(&path, None));
        assert!(recovered.torn_tail.is_none(), "{name}");
        assert_eq!(recovered.events.len(), kept + 1, "{name}");
    }
}
