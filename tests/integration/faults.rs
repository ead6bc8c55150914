//! The fault-seam campaign: a scripted workload (create, single appends,
//! batches, staged appends sharing one fsync, a reopen over a torn tail, a
//! fork, an append to the child) runs against both backends once per
//! operation of the `Io` seam, with that one operation failing (and again
//! with it and every later operation failing, a dying disk).
//!
//! Each run checks what docs/RELIABILITY.md promises: the failing operation returns an
//! error; a writer that saw it is poisoned (later appends and syncs are
//! refused); reopening without faults yields a log that verifies, holds every
//! acknowledged event, and of the events that were refused holds at most the
//! ones whose bytes were fully written before the failure (an fsync that
//! fails leaves its append *in doubt*: whole or absent, never torn). An
//! append refused before its bytes were handed to the file system (a failed
//! write, a failed SQLite commit) is never there.
//!
//! The workload and its model of what must survive are shared with the
//! simulated power-loss campaign (`power_loss`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sessionlog_projections::{fold, Defaults};
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::testing::{FaultInjector, FaultPoint, Io};
use sessionlog_store::{
    Backend, JsonlStore, NewEvent, SessionWriter, SqliteStore, Store, StoreError, WriterOptions,
};

use crate::realistic::realistic_log;

/// The root session of the workload.
pub const ROOT: &str = "root";
/// The child the workload forks from the root.
pub const KID: &str = "kid";

/// One event as a test expects to read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Its type.
    pub event_type: String,
    /// Its compact `data`.
    pub data: String,
    /// Its time.
    pub ts: u64,
}

/// Whether a session's creation was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Creation {
    /// Not attempted.
    #[default]
    No,
    /// Attempted and refused: the session is absent or whole.
    InDoubt,
    /// Acknowledged.
    Yes,
}

/// What must be true of one session after recovery.
#[derive(Debug, Clone, Default)]
pub struct SessionModel {
    /// Whether it exists.
    pub created: Creation,
    /// Its acknowledged events, in order.
    pub acked: Vec<Expected>,
    /// Units (one event or one batch) written after the last acknowledgement
    /// and not acknowledged: recovery may keep a prefix of these, whole.
    pub in_doubt: Vec<Vec<Expected>>,
    /// The parent it was forked from.
    pub parent: Option<String>,
}

/// What the workload has done so far, session by session.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Sessions by id.
    pub sessions: BTreeMap<String, SessionModel>,
}

/// Runs the workload against one store, keeping the model up to date.
pub struct Workload {
    /// The store, with its faulty or recording `Io`.
    pub store: Store,
    /// The model, shared with an injector that records crash states.
    pub model: Arc<Mutex<Model>>,
    /// The realistic units appended, in order.
    pub units: Vec<Vec<NewEvent>>,
}

/// A counting injector that fails the `fail_at`-th operation (0-based), and
/// every later one when `sticky`.
#[derive(Debug, Default)]
pub struct FailAt {
    seen: AtomicUsize,
    fail_at: Option<usize>,
    sticky: bool,
    injected: Mutex<Vec<FaultPoint>>,
    points: Mutex<Vec<FaultPoint>>,
}

/// What one campaign run found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    /// Runs of the workload.
    pub runs: usize,
    /// Operations failed on purpose.
    pub faults_injected: usize,
    /// Sessions reopened and checked.
    pub sessions_checked: usize,
    /// Acknowledged events found again.
    pub acknowledged_events_checked: usize,
    /// Refused appends that recovery kept (whole) because their bytes were
    /// written before the failure.
    pub in_doubt_kept: usize,
    /// Refused appends that recovery did not keep.
    pub in_doubt_dropped: usize,
}

impl FailAt {
    /// An injector that fails nothing and counts.
    pub fn counting() -> FailAt {
        FailAt::default()
    }

    /// Fails operation `index`, and every later one when `sticky`.
    pub fn failing(index: usize, sticky: bool) -> FailAt {
        FailAt {
            fail_at: Some(index),
            sticky,
            ..FailAt::default()
        }
    }

    /// The operations seen, in order.
    pub fn points(&self) -> Vec<FaultPoint> {
        lock(&self.points).clone()
    }

    /// The operations failed, in order.
    pub fn injected(&self) -> Vec<FaultPoint> {
        lock(&self.injected).clone()
    }
}

impl FaultInjector for FailAt {
    fn before(&self, point: FaultPoint, _path: &Path) -> std::io::Result<()> {
        let index = self.seen.fetch_add(1, Ordering::SeqCst);
        lock(&self.points).push(point);
        let fails = match self.fail_at {
            Some(at) => index == at || (self.sticky && index > at),
            None => false,
        };
        if fails {
            lock(&self.injected).push(point);
            return Err(std::io::Error::other(format!(
                "injected failure of {point:?} (operation {index})"
            )));
        }
        Ok(())
    }
}

/// Locks a mutex, ignoring poisoning (a failed assertion elsewhere).
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Panics with the error's text.
#[track_caller]
pub fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("unexpected error: {error}"))
}

/// A valid session id.
pub fn id(text: &str) -> SessionId {
    ok(SessionId::parse(text))
}

/// A realistic session (the rules of docs/EVENTS.md kept) as units: single events and
/// batches, in order.
pub fn realistic_units(seed: u64, turns: usize) -> Vec<Vec<NewEvent>> {
    let mut units: Vec<Vec<NewEvent>> = Vec::new();
    let mut remaining = 0u64;
    for event in realistic_log("units", seed, turns).log().events() {
        let new = NewEvent {
            event_type: event.event_type.clone(),
            data: event.data.clone(),
            ts: Some(event.ts),
        };
        match (remaining, event.batch) {
            (0, batch) => {
                units.push(vec![new]);
                remaining = batch.map_or(0, |n| n - 1);
            }
            (_, _) => {
                if let Some(unit) = units.last_mut() {
                    unit.push(new);
                }
                remaining -= 1;
            }
        }
    }
    units
}

/// An event of a type this version does not know: every rule ignores it, so
/// it can be appended whatever state a session is in.
pub fn probe(n: u64) -> NewEvent {
    NewEvent {
        event_type: "x-test/probe".into(),
        data: format!("{{\"n\":{n}}}"),
        ts: Some(1_800_000_000_000 + n),
    }
}

/// What a `NewEvent` becomes once written.
pub fn expected(event: &NewEvent) -> Expected {
    Expected {
        event_type: event.event_type.clone(),
        data: event.data.clone(),
        ts: event.ts.unwrap_or(0),
    }
}

/// How a record reads back, for comparison with `Expected`.
pub fn read_back(record: &EventRecord) -> Expected {
    Expected {
        event_type: record.event_type().to_owned(),
        data: record.data().to_owned(),
        ts: record.ts(),
    }
}

/// Opens a store at `path` of `backend` with `io`.
pub fn open_store(backend: Backend, path: &Path, io: Io) -> Store {
    match backend {
        Backend::Jsonl => Store::Jsonl(ok(JsonlStore::create_folder(path)).with_io(io)),
        Backend::Sqlite => Store::Sqlite(ok(SqliteStore::open_with_io(path, io))),
        Backend::Postgres => panic!(
            "the fault-seam campaign covers the backends whose commits go through `Io`; \
             a PostgreSQL commit happens in the server (see the postgres module)"
        ),
    }
}

/// Where a campaign keeps a store of `backend` inside `folder`.
pub fn store_path(backend: Backend, folder: &Path) -> PathBuf {
    match backend {
        Backend::Jsonl => folder.join("logs"),
        Backend::Sqlite => folder.join("sessions.db"),
        Backend::Postgres => panic!("a PostgreSQL store is a URL, not a path in a folder"),
    }
}

impl Workload {
    /// A workload over `store` appending the units of `realistic_units(seed, 4)`.
    pub fn new(store: Store, seed: u64) -> Workload {
        Workload {
            store,
            model: Arc::new(Mutex::new(Model::default())),
            units: realistic_units(seed, 4),
        }
    }

    /// Runs the script; stops at the first error (after checking that a
    /// writer that saw it is poisoned) and returns it.
    pub fn run(&self) -> Result<(), StoreError> {
        assert!(self.units.len() >= 14, "the realistic log is long enough");
        self.create(ROOT)?;
        let mut writer = self.open(ROOT)?;
        self.append_units(&mut writer, ROOT, &self.units[..9])?;
        drop(writer);
        self.tear(ROOT);
        let mut writer = self.open(ROOT)?;
        self.append_units(&mut writer, ROOT, &self.units[9..14])?;
        drop(writer);
        self.fork(ROOT, KID)?;
        let mut writer = self.open(KID)?;
        self.append_units(
            &mut writer,
            KID,
            &[vec![probe(1)], vec![probe(2), probe(3)]],
        )?;
        Ok(())
    }

    fn create(&self, session: &str) -> Result<(), StoreError> {
        lock(&self.model)
            .sessions
            .entry(session.to_owned())
            .or_default()
            .created = Creation::InDoubt;
        let header = SessionHeader::root(id(session), 1_700_000_000_000, "/work/ünï".into());
        self.store
            .create_session(&header, &[], sessionlog_store::Durability::Fsync)?;
        lock(&self.model)
            .sessions
            .entry(session.to_owned())
            .or_default()
            .created = Creation::Yes;
        Ok(())
    }

    fn open(&self, session: &str) -> Result<SessionWriter, StoreError> {
        self.store
            .open_writer(&id(session), WriterOptions::default())
    }

    /// Leaves a torn line at the end of a JSONL log, as a crash during an
    /// append would (SQLite transactions leave nothing to tear).
    fn tear(&self, session: &str) {
        let Store::Jsonl(store) = &self.store else {
            return;
        };
        let mut file = ok(std::fs::OpenOptions::new()
            .append(true)
            .open(store.log_path(&id(session))));
        ok(file.write_all(b"{\"seq\":999,\"ts\":1,\"type\":\"turn/st"));
    }

    fn fork(&self, parent: &str, child: &str) -> Result<(), StoreError> {
        {
            let mut model = lock(&self.model);
            let entry = model.sessions.entry(child.to_owned()).or_default();
            entry.created = Creation::InDoubt;
            entry.parent = Some(parent.to_owned());
        }
        self.store
            .fork(&id(parent), &id(child), None, &Defaults::default())?;
        let seeded: Vec<Expected> = ok(self.store.snapshot(&id(child)))
            .events
            .iter()
            .map(read_back)
            .collect();
        let mut model = lock(&self.model);
        let entry = model.sessions.entry(child.to_owned()).or_default();
        entry.created = Creation::Yes;
        entry.acked = seeded;
        Ok(())
    }

    /// Appends units: batches with `append_batch`, single events one at a
    /// time or, every third, staged in a group of up to three that shares
    /// one sync.
    fn append_units(
        &self,
        writer: &mut SessionWriter,
        session: &str,
        units: &[Vec<NewEvent>],
    ) -> Result<(), StoreError> {
        let mut index = 0;
        while index < units.len() {
            let unit = &units[index];
            let outcome = if unit.len() > 1 {
                self.mark_in_doubt(session, std::slice::from_ref(unit));
                index += 1;
                writer.append_batch(unit.clone(), None).map(|_| ())
            } else if index % 3 == 0 {
                let group: Vec<&Vec<NewEvent>> = units[index..]
                    .iter()
                    .take(3)
                    .take_while(|unit| unit.len() == 1)
                    .collect();
                index += group.len();
                self.stage_group(writer, session, &group)
            } else {
                self.mark_in_doubt(session, std::slice::from_ref(unit));
                index += 1;
                writer.append(unit[0].clone(), None).map(|_| ())
            };
            if let Err(error) = outcome {
                assert_poisoned(writer, &error);
                return Err(error);
            }
            self.acknowledge(session);
        }
        Ok(())
    }

    fn stage_group(
        &self,
        writer: &mut SessionWriter,
        session: &str,
        group: &[&Vec<NewEvent>],
    ) -> Result<(), StoreError> {
        for unit in group {
            self.mark_in_doubt(session, std::slice::from_ref(*unit));
            writer.stage(unit[0].clone(), None)?;
        }
        writer.sync().map(|_| ())
    }

    fn mark_in_doubt(&self, session: &str, units: &[Vec<NewEvent>]) {
        let mut model = lock(&self.model);
        let entry = model.sessions.entry(session.to_owned()).or_default();
        for unit in units {
            entry.in_doubt.push(unit.iter().map(expected).collect());
        }
    }

    fn acknowledge(&self, session: &str) {
        let mut model = lock(&self.model);
        let entry = model.sessions.entry(session.to_owned()).or_default();
        let units = std::mem::take(&mut entry.in_doubt);
        entry.acked.extend(units.into_iter().flatten());
    }
}

/// After a failed write or sync, the writer refuses every later append and
/// sync until the session is reopened.
#[track_caller]
fn assert_poisoned(writer: &mut SessionWriter, error: &StoreError) {
    assert!(
        matches!(error, StoreError::Io { .. } | StoreError::Sqlite { .. }),
        "the failure is reported as an I/O error: {error:?}"
    );
    let again = writer.append(probe(99), None);
    assert!(
        matches!(again, Err(StoreError::Poisoned { .. })),
        "a later append is refused: {again:?}"
    );
    let sync = writer.sync();
    assert!(
        matches!(sync, Err(StoreError::Poisoned { .. })),
        "a later sync is refused: {sync:?}"
    );
}

/// How many refused units of a session recovery kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Acknowledged events found.
    pub acknowledged: usize,
    /// Units found of those in doubt.
    pub in_doubt_kept: usize,
    /// Units in doubt that recovery dropped.
    pub in_doubt_dropped: usize,
}

/// Reopens every session of `model` in the (fault-free) `store` and checks
/// docs/RELIABILITY.md: the log verifies after a writer opened it, holds every
/// acknowledged event and, of the units in doubt, at most a prefix of whole
/// units (none when `refused_before_write`); the writer then appends.
/// Returns per session what was found.
pub fn check_recovery(
    store: &Store,
    model: &Model,
    refused_before_write: bool,
) -> BTreeMap<String, Recovered> {
    let mut found = BTreeMap::new();
    for (session, expected) in &model.sessions {
        let session_id = id(session);
        let exists = ok(store.contains(&session_id));
        match expected.created {
            Creation::No => assert!(!exists, "{session} was never created"),
            Creation::Yes => assert!(exists, "{session}'s creation was acknowledged"),
            Creation::InDoubt => {}
        }
        if !exists {
            continue;
        }
        let mut writer = store
            .open_writer(&session_id, WriterOptions::default())
            .unwrap_or_else(|error| panic!("{session} reopens for writing: {error}"));
        let events: Vec<Expected> = writer
            .events()
            .unwrap_or_default()
            .iter()
            .map(read_back)
            .collect();
        let recovered = if expected.created == Creation::InDoubt {
            check_whole_child(store, model, session, &writer, &events)
        } else {
            check_prefix(session, expected, &events, refused_before_write)
        };
        let seq = ok(writer.append(probe(7), None)).get();
        assert_eq!(seq, events.len() as u64 + 1, "{session}: the probe follows");
        drop(writer);
        let snapshot = ok(store.snapshot(&session_id));
        assert!(
            snapshot.torn_tail.is_none(),
            "{session}: the writer truncated the torn tail"
        );
        let (_, violations) = fold(snapshot.header.clone(), &snapshot.events);
        assert!(violations.is_empty(), "{session}: {violations:?}");
        let mut with_probe = events.clone();
        with_probe.push(expected_probe(7));
        let reread: Vec<Expected> = snapshot.events.iter().map(read_back).collect();
        assert_eq!(reread, with_probe, "{session}: read back after the probe");
        found.insert(session.clone(), recovered);
    }
    found
}

fn expected_probe(n: u64) -> Expected {
    expected(&probe(n))
}

fn check_prefix(
    session: &str,
    expected: &SessionModel,
    events: &[Expected],
    refused_before_write: bool,
) -> Recovered {
    let acked = expected.acked.len();
    assert!(
        events.len() >= acked && events[..acked] == expected.acked[..],
        "{session}: every acknowledged event is there ({} acknowledged, {} found)",
        acked,
        events.len()
    );
    let mut rest = &events[acked..];
    let mut kept = 0;
    for unit in &expected.in_doubt {
        if rest.is_empty() {
            break;
        }
        assert!(
            rest.len() >= unit.len() && rest[..unit.len()] == unit[..],
            "{session}: after the acknowledged events come only whole refused units, in order"
        );
        rest = &rest[unit.len()..];
        kept += 1;
    }
    assert!(rest.is_empty(), "{session}: nothing but what was written");
    if refused_before_write {
        assert!(
            kept < expected.in_doubt.len() || expected.in_doubt.is_empty(),
            "{session}: the append refused before its write is absent"
        );
    }
    Recovered {
        acknowledged: acked,
        in_doubt_kept: kept,
        in_doubt_dropped: expected.in_doubt.len() - kept,
    }
}

/// A session whose creation (fork) was refused but which exists: it must be
/// whole, its seeded prefix equal to its parent's events.
fn check_whole_child(
    store: &Store,
    model: &Model,
    session: &str,
    writer: &SessionWriter,
    events: &[Expected],
) -> Recovered {
    let header = writer.header();
    let Some(parent) = &model.sessions[session].parent else {
        assert!(
            events.is_empty(),
            "{session}: a refused root holds no event"
        );
        return Recovered {
            acknowledged: 0,
            in_doubt_kept: 1,
            in_doubt_dropped: 0,
        };
    };
    assert_eq!(header.parent_session, Some(id(parent)));
    let parent_events: Vec<Expected> = ok(store.snapshot(&id(parent)))
        .events
        .iter()
        .map(read_back)
        .collect();
    let seed = header.seed_length as usize;
    assert_eq!(seed, parent_events.len(), "{session}: seeded whole");
    assert_eq!(events[..seed], parent_events[..], "{session}: the seed");
    Recovered {
        acknowledged: 0,
        in_doubt_kept: 1,
        in_doubt_dropped: 0,
    }
}

/// Runs the campaign for `backend`: one run per operation of the workload
/// of each seed, failing that operation (and, in the second pass, every
/// later one too: a disk that stays broken, so the poisoned writer's
/// refusals and the recovery never lean on a later operation succeeding).
fn campaign(backend: Backend) -> Figures {
    let mut figures = Figures::default();
    let mut operations = Vec::new();
    for seed in [11, 12] {
        let counting = Arc::new(FailAt::counting());
        let folder = ok(tempfile::tempdir());
        let path = store_path(backend, folder.path());
        let workload = Workload::new(
            open_store(backend, &path, Io::with_faults(counting.clone())),
            seed,
        );
        ok(workload.run());
        operations = counting.points();
        for sticky in [false, true] {
            for index in 0..operations.len() {
                campaign_run(backend, seed, index, sticky, &operations, &mut figures);
            }
        }
    }
    eprintln!(
        "fault campaign ({backend:?}): {} operations per workload ({}), 2 workloads, each operation failed alone and with every later one: {} runs, {} faults injected, {} sessions reopened, {} acknowledged events found again, refused appends kept whole {} / absent {}",
        operations.len(),
        point_counts(&operations),
        figures.runs,
        figures.faults_injected,
        figures.sessions_checked,
        figures.acknowledged_events_checked,
        figures.in_doubt_kept,
        figures.in_doubt_dropped,
    );
    figures
}

fn campaign_run(
    backend: Backend,
    seed: u64,
    index: usize,
    sticky: bool,
    operations: &[FaultPoint],
    figures: &mut Figures,
) {
    let injector = Arc::new(FailAt::failing(index, sticky));
    let folder = ok(tempfile::tempdir());
    let path = store_path(backend, folder.path());
    let store = open_store(backend, &path, Io::with_faults(injector.clone()));
    let workload = Workload::new(store, seed);
    let outcome = workload.run();
    let injected = injector.injected();
    assert!(
        outcome.is_err(),
        "failing {:?} (operation {index}) is reported",
        operations[index]
    );
    // A failed write is followed by its cut back (the log truncated to
    // its good prefix, then fdatasynced), which a disk that stays broken
    // fails too; nothing else touches the disk until the reopen.
    let cut_back = [FaultPoint::Write, FaultPoint::Truncate];
    assert!(
        injected.len() == 1 || injected == cut_back,
        "after the failure nothing touches the disk until the reopen (operation {index}): {injected:?}"
    );
    let model = lock(&workload.model).clone();
    drop(workload);
    let refused_before_write = matches!(injected[0], FaultPoint::Write | FaultPoint::Commit);
    let reopened = open_store(backend, &path, Io::default());
    let found = check_recovery(&reopened, &model, refused_before_write);
    figures.runs += 1;
    figures.faults_injected += injected.len();
    for recovered in found.values() {
        figures.sessions_checked += 1;
        figures.acknowledged_events_checked += recovered.acknowledged;
        figures.in_doubt_kept += recovered.in_doubt_kept;
        figures.in_doubt_dropped += recovered.in_doubt_dropped;
    }
}

fn point_counts(points: &[FaultPoint]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for point in points {
        *counts.entry(format!("{point:?}")).or_default() += 1;
    }
    counts
        .iter()
        .map(|(point, count)| format!("{point} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn every_jsonl_operation_failing_keeps_every_acknowledged_event() {
    let figures = campaign(Backend::Jsonl);
    assert!(figures.runs >= 40, "{figures:?}");
}

#[test]
fn every_sqlite_commit_failing_keeps_every_acknowledged_event() {
    let figures = campaign(Backend::Sqlite);
    assert!(figures.runs >= 10, "{figures:?}");
}

#[test]
fn a_failed_sqlite_commit_keeps_none_of_the_refused_events() {
    // A failed commit is rolled back: SQLite never leaves a refused append
    // in doubt, unlike a JSONL fsync that fails after the write.
    let counting = Arc::new(FailAt::counting());
    let folder = ok(tempfile::tempdir());
    let path = store_path(Backend::Sqlite, folder.path());
    let workload = Workload::new(
        open_store(Backend::Sqlite, &path, Io::with_faults(counting.clone())),
        5,
    );
    ok(workload.run());
    for index in 0..counting.points().len() {
        let folder = ok(tempfile::tempdir());
        let path = store_path(Backend::Sqlite, folder.path());
        let injector = Arc::new(FailAt::failing(index, false));
        let workload = Workload::new(
            open_store(Backend::Sqlite, &path, Io::with_faults(injector)),
            5,
        );
        assert!(workload.run().is_err());
        let model = lock(&workload.model).clone();
        drop(workload);
        let found = check_recovery(
            &open_store(Backend::Sqlite, &path, Io::default()),
            &model,
            true,
        );
        for (session, expected) in &model.sessions {
            match expected.created {
                Creation::Yes => assert_eq!(
                    found[session].in_doubt_kept, 0,
                    "{session} at operation {index}"
                ),
                Creation::InDoubt => assert!(
                    !found.contains_key(session),
                    "a refused creation is rolled back: {session} at operation {index}"
                ),
                Creation::No => {}
            }
        }
    }
}

#[test]
fn a_failed_jsonl_fsync_leaves_the_append_whole_and_the_writer_poisoned() {
    // Operation indexes of the workload: create (CreateTemp, Write, Fsync,
    // Publish, FolderFsync), then one Write and one Fsync per append.
    let folder = ok(tempfile::tempdir());
    let path = store_path(Backend::Jsonl, folder.path());
    let counting = Arc::new(FailAt::counting());
    ok(Workload::new(
        open_store(Backend::Jsonl, &path, Io::with_faults(counting.clone())),
        3,
    )
    .run());
    let points = counting.points();
    let first_append_fsync = points
        .iter()
        .enumerate()
        .skip(5)
        .find(|(_, point)| **point == FaultPoint::Fsync)
        .map(|(index, _)| index)
        .unwrap_or_else(|| panic!("an append fsync in {points:?}"));
    let folder = ok(tempfile::tempdir());
    let path = store_path(Backend::Jsonl, folder.path());
    let injector = Arc::new(FailAt::failing(first_append_fsync, false));
    let workload = Workload::new(
        open_store(Backend::Jsonl, &path, Io::with_faults(injector)),
        3,
    );
    let error = workload.run();
    assert!(matches!(error, Err(StoreError::Io { .. })), "{error:?}");
    let model = lock(&workload.model).clone();
    drop(workload);
    let found = check_recovery(
        &open_store(Backend::Jsonl, &path, Io::default()),
        &model,
        false,
    );
    let root = found[ROOT];
    assert_eq!(root.acknowledged, 0, "{root:?}");
    assert!(
        root.in_doubt_kept >= 1 && root.in_doubt_dropped == 0,
        "the written, unsynced appends are found whole on reopen: they were in doubt ({root:?})"
    );
}
