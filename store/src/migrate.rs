//! `migrate` copies every session from one store to another (any backend
//! to any backend) and proves the copy identical with `diff`.
//!
//! A migration runs in three phases. **Verify**: every source session is
//! read whole and folded; a corrupt session or one that breaks the rules
//! refuses the whole run before anything is written, naming the session; a
//! torn tail is dropped and reported as a warning; an id that already exists
//! in the destination refuses the run too. **Copy**: each session is created
//! in the destination with its good prefix — to SQLite in transactions of
//! whole sessions of up to `COPY_EVENTS_PER_TRANSACTION` events, each
//! committed with a full sync; to JSONL without per-file fsyncs, then every
//! copied file and the folder are fsynced once at the end, before success is
//! reported. **Compare**: `diff` reads both stores again and the run fails
//! if they differ anywhere.
//!
//! `diff` compares two stores session by session in bounded memory:
//! missing sessions, header fields, then the events in lockstep (seq, ts,
//! batch, type, data, and the record bytes), naming the first difference.
//! Both sides are read as their good prefixes.

use std::fmt;
use std::path::PathBuf;

use sessionlog_projections::fold;
use sessionlog_schema::{EventRecord, SessionHeader, SessionId, TornTail};

use crate::store::Store;
use crate::writer::Durability;
use crate::StoreError;

/// Events per SQLite transaction during a copy (whole sessions are never
/// split; a larger session gets a transaction of its own).
const COPY_EVENTS_PER_TRANSACTION: usize = 50_000;

/// Where a migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigratePhase {
    /// Reading and checking the source sessions.
    Verify,
    /// Writing them to the destination.
    Copy,
    /// Comparing destination and source.
    Compare,
}

/// A progress report: `done` of `total` sessions of `phase`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateProgress {
    /// The phase.
    pub phase: MigratePhase,
    /// Sessions finished in this phase.
    pub done: usize,
    /// Sessions in the run.
    pub total: usize,
    /// The session just finished.
    pub session: Option<SessionId>,
}

/// Something the migration dropped, and why the run still succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateWarning {
    /// The session.
    pub session: SessionId,
    /// The torn tail left behind (the good prefix was copied).
    pub torn_tail: TornTail,
}

/// What a finished migration copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Sessions copied.
    pub sessions: usize,
    /// Events copied, over all sessions.
    pub events: u64,
    /// Torn tails dropped.
    pub warnings: Vec<MigrateWarning>,
}

/// The first place where two stores differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The session, when the difference is inside one.
    pub session: Option<SessionId>,
    /// The seq, when the difference is in an event.
    pub seq: Option<u64>,
    /// What differs: `session`, a header member (`cwd`, `seedLength`, ...),
    /// `event count`, or an event member (`ts`, `batch`, `type`, `data`,
    /// `record`).
    pub field: String,
    /// The left store's value.
    pub left: String,
    /// The right store's value.
    pub right: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(session) = &self.session {
            write!(f, "session {session}")?;
            if let Some(seq) = self.seq {
                write!(f, ", seq {seq}")?;
            }
            write!(f, ": ")?;
        }
        write!(
            f,
            "{} differs: left {}, right {}",
            self.field, self.left, self.right
        )
    }
}

impl fmt::Display for MigrateWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "session {}: dropped a torn tail of {} bytes at line {} ({})",
            self.session, self.torn_tail.bytes, self.torn_tail.position.line, self.torn_tail.reason
        )
    }
}

/// Copies every session of `from` into `to`, then proves the copy identical.
/// See the module docs for the phases and what refuses a run.
pub fn migrate(
    from: &Store,
    to: &Store,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<MigrateReport, StoreError> {
    let ids = from.ids()?;
    let total = ids.len();
    let mut warnings = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        if let Some(torn_tail) = verify_source_session(from, id)? {
            warnings.push(MigrateWarning {
                session: id.clone(),
                torn_tail,
            });
        }
        progress(MigrateProgress {
            phase: MigratePhase::Verify,
            done: index + 1,
            total,
            session: Some(id.clone()),
        });
    }
    for id in &ids {
        if to.contains(id)? {
            return Err(StoreError::AlreadyExists {
                id: id.clone(),
                path: to.path().to_owned(),
            });
        }
    }
    let events = copy_sessions(from, to, &ids, progress)?;
    let difference = diff_sessions(from, to, &ids, &mut |done, session| {
        progress(MigrateProgress {
            phase: MigratePhase::Compare,
            done,
            total,
            session: Some(session.clone()),
        });
    })?;
    if let Some(difference) = difference {
        return Err(StoreError::io(
            "compare the copy",
            to.path(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the copy differs from the source: {difference}"),
            ),
        ));
    }
    Ok(MigrateReport {
        sessions: total,
        events,
        warnings,
    })
}

/// The first difference between the sessions of `left` and `right`, or
/// `None` when they hold the same sessions with the same records.
pub fn diff(left: &Store, right: &Store) -> Result<Option<Difference>, StoreError> {
    let left_ids = left.ids()?;
    let right_ids = right.ids()?;
    let mut right_iter = right_ids.iter().peekable();
    for id in &left_ids {
        if let Some(extra) = right_iter.next_if(|other| *other < id) {
            return Ok(Some(missing_session(extra, "missing", "present")));
        }
        if right_iter.next_if(|other| *other == id).is_none() {
            return Ok(Some(missing_session(id, "present", "missing")));
        }
    }
    if let Some(extra) = right_iter.next() {
        return Ok(Some(missing_session(extra, "missing", "present")));
    }
    diff_sessions(left, right, &left_ids, &mut |_, _| {})
}

/// Reads session `id` whole, refusing corruption and rule violations with
/// the session named; returns its torn tail, if any.
fn verify_source_session(from: &Store, id: &SessionId) -> Result<Option<TornTail>, StoreError> {
    let snapshot = from.snapshot(id)?;
    let path = from.session_path(id);
    if let Some(error) = snapshot.header_vocabulary_errors.into_iter().next() {
        return Err(StoreError::HeaderVocabulary { path, error });
    }
    let (_, violations) = fold(snapshot.header, &snapshot.events);
    if let Some(violation) = violations.into_iter().next() {
        return Err(StoreError::Rule { path, violation });
    }
    Ok(snapshot.torn_tail)
}

/// Writes every session durably; returns the number of events copied.
fn copy_sessions(
    from: &Store,
    to: &Store,
    ids: &[SessionId],
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<u64, StoreError> {
    let total = ids.len();
    let mut copied_events = 0u64;
    let mut pending: Vec<(SessionHeader, Vec<EventRecord>)> = Vec::new();
    let mut pending_events = 0usize;
    for (index, id) in ids.iter().enumerate() {
        let snapshot = from.snapshot(id)?;
        copied_events += snapshot.events.len() as u64;
        match to {
            Store::Jsonl(store) => {
                store.create(&snapshot.header, &snapshot.events, Durability::Buffered)?;
            }
            Store::Sqlite(store) => {
                pending_events += snapshot.events.len();
                pending.push((snapshot.header, snapshot.events));
                if pending_events >= COPY_EVENTS_PER_TRANSACTION {
                    store.create_many(std::mem::take(&mut pending), Durability::Fsync)?;
                    pending_events = 0;
                }
            }
        }
        progress(MigrateProgress {
            phase: MigratePhase::Copy,
            done: index + 1,
            total,
            session: Some(id.clone()),
        });
    }
    match to {
        Store::Sqlite(store) => store.create_many(pending, Durability::Fsync)?,
        Store::Jsonl(store) => {
            for id in ids {
                sync_path(store.log_path(id))?;
            }
            sync_path(store.folder().to_owned())?;
        }
    }
    Ok(copied_events)
}

/// fsync of a file or folder written without one.
fn sync_path(path: PathBuf) -> Result<(), StoreError> {
    std::fs::File::open(&path)
        .and_then(|file| file.sync_all())
        .map_err(|source| StoreError::io("fsync", path, source))
}

/// Compares the sessions `ids` (present on both sides).
fn diff_sessions(
    left: &Store,
    right: &Store,
    ids: &[SessionId],
    done: &mut dyn FnMut(usize, &SessionId),
) -> Result<Option<Difference>, StoreError> {
    for (index, id) in ids.iter().enumerate() {
        if let Some(difference) = diff_session(left, right, id)? {
            return Ok(Some(difference));
        }
        done(index + 1, id);
    }
    Ok(None)
}

fn diff_session(
    left: &Store,
    right: &Store,
    id: &SessionId,
) -> Result<Option<Difference>, StoreError> {
    let (left_header, mut left_events) = left.events(id)?;
    let (right_header, mut right_events) = right.events(id)?;
    if let Some(difference) = diff_headers(id, &left_header, &right_header) {
        return Ok(Some(difference));
    }
    let mut count = 0u64;
    loop {
        let (left_record, right_record) = (
            left_events.next().transpose()?,
            right_events.next().transpose()?,
        );
        let (left_record, right_record) = match (left_record, right_record) {
            (None, None) => return Ok(None),
            (Some(l), Some(r)) => (l, r),
            (l, r) => {
                let more = |side: &Option<EventRecord>, events: &mut crate::EventStream| {
                    let rest = events.by_ref().count() as u64;
                    count + u64::from(side.is_some()) + rest
                };
                let left_count = more(&l, &mut left_events);
                let right_count = more(&r, &mut right_events);
                return Ok(Some(Difference {
                    session: Some(id.clone()),
                    seq: None,
                    field: "event count".to_owned(),
                    left: left_count.to_string(),
                    right: right_count.to_string(),
                }));
            }
        };
        count += 1;
        if let Some(difference) = diff_records(id, &left_record, &right_record) {
            return Ok(Some(difference));
        }
    }
}

fn diff_headers(id: &SessionId, left: &SessionHeader, right: &SessionHeader) -> Option<Difference> {
    let text = |value: Option<&str>| value.map_or_else(|| "null".to_owned(), |v| format!("{v:?}"));
    let fields: [(&str, String, String); 8] = [
        ("id", left.id.to_string(), right.id.to_string()),
        (
            "createdAt",
            left.created_at.to_string(),
            right.created_at.to_string(),
        ),
        ("cwd", format!("{:?}", left.cwd), format!("{:?}", right.cwd)),
        (
            "parentSession",
            text(left.parent_session.as_ref().map(SessionId::as_str)),
            text(right.parent_session.as_ref().map(SessionId::as_str)),
        ),
        (
            "seedLength",
            left.seed_length.to_string(),
            right.seed_length.to_string(),
        ),
        (
            "delegationDepth",
            left.delegation_depth.to_string(),
            right.delegation_depth.to_string(),
        ),
        (
            "sandboxMode",
            text(left.sandbox_mode.map(|m| m.as_str())),
            text(right.sandbox_mode.map(|m| m.as_str())),
        ),
        (
            "approvalPolicy",
            text(left.approval_policy.map(|p| p.as_str())),
            text(right.approval_policy.map(|p| p.as_str())),
        ),
    ];
    fields
        .into_iter()
        .find(|(_, l, r)| l != r)
        .map(|(field, left, right)| Difference {
            session: Some(id.clone()),
            seq: Some(0),
            field: format!("header {field}"),
            left,
            right,
        })
}

fn diff_records(id: &SessionId, left: &EventRecord, right: &EventRecord) -> Option<Difference> {
    let optional =
        |value: Option<u64>| value.map_or_else(|| "absent".to_owned(), |n| n.to_string());
    let fields: [(&str, String, String); 6] = [
        ("seq", left.seq().to_string(), right.seq().to_string()),
        ("ts", left.ts().to_string(), right.ts().to_string()),
        ("batch", optional(left.batch()), optional(right.batch())),
        (
            "type",
            format!("{:?}", left.event_type()),
            format!("{:?}", right.event_type()),
        ),
        ("data", left.data().to_owned(), right.data().to_owned()),
        ("record", left.body().to_owned(), right.body().to_owned()),
    ];
    fields
        .into_iter()
        .find(|(_, l, r)| l != r)
        .map(|(field, l, r)| Difference {
            session: Some(id.clone()),
            seq: Some(left.seq()),
            field: field.to_owned(),
            left: l,
            right: r,
        })
}

fn missing_session(id: &SessionId, left: &str, right: &str) -> Difference {
    Difference {
        session: Some(id.clone()),
        seq: None,
        field: "session".to_owned(),
        left: left.to_owned(),
        right: right.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::store::tests::{header, id, jsonl_store, note, ok, record, sqlite_store};
    use crate::writer::WriterOptions;
    use crate::Store;

    /// A folder of logs with a root, a batch, a child and unicode data.
    fn realistic_jsonl(folder: &std::path::Path) -> Store {
        let store = jsonl_store(folder);
        let events = [
            record(1, "approval/policy", r#"{"policy":"never"}"#),
            record(2, "turn/start", r#"{"turnId":"t1"}"#),
            record(3, "unknown/kind", r#"{"keep":"é ☃ \u0041","n":1.50e3}"#),
        ];
        ok(store.create_session(&header("root"), &events, Durability::Fsync));
        let mut writer = ok(store.open_writer(&id("root"), WriterOptions::default()));
        ok(writer.append_batch(vec![note("a"), note("b")], Some(4)));
        drop(writer);
        ok(store.fork(
            &id("root"),
            &id("child"),
            Some("hello"),
            &Default::default(),
        ));
        ok(store.create_session(&header("empty"), &[], Durability::Fsync));
        store
    }

    fn log_bytes(store: &Store, session: &str) -> Vec<u8> {
        ok(std::fs::read(store.session_path(&id(session))))
    }

    fn quiet(_: MigrateProgress) {}

    #[test]
    fn jsonl_to_sqlite_to_jsonl_is_byte_identical() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let sqlite = sqlite_store(folder.path());
        let report = ok(migrate(&source, &sqlite, &mut quiet));
        assert_eq!(report.sessions, 3);
        assert_eq!(report.events, 5 + 6);
        assert!(report.warnings.is_empty());
        let back = ok(Store::create(&folder.path().join("back")));
        ok(migrate(&sqlite, &back, &mut quiet));
        for session in ["root", "child", "empty"] {
            assert_eq!(
                log_bytes(&source, session),
                log_bytes(&back, session),
                "{session}"
            );
        }
        assert_eq!(ok(diff(&source, &back)), None);
    }

    #[test]
    fn progress_reports_every_session_of_every_phase() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let mut seen = Vec::new();
        ok(migrate(&source, &sqlite_store(folder.path()), &mut |p| {
            seen.push((p.phase, p.done, p.total))
        }));
        let phases = [
            MigratePhase::Verify,
            MigratePhase::Copy,
            MigratePhase::Compare,
        ];
        let expected: Vec<_> = phases
            .iter()
            .flat_map(|phase| (1..=3).map(move |done| (*phase, done, 3)))
            .collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn corrupt_source_session_refuses_the_run_and_writes_nothing() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let path = source.session_path(&id("root"));
        let mut bytes = ok(std::fs::read(&path));
        let second_line = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 5);
        bytes[second_line] ^= 0x01;
        ok(std::fs::write(&path, bytes));
        let destination = sqlite_store(folder.path());
        let refused = migrate(&source, &destination, &mut quiet);
        let Err(error) = refused else {
            panic!("a corrupt source was migrated");
        };
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("root.jsonl"), "{error}");
        assert!(ok(destination.ids()).is_empty(), "nothing is written");
    }

    #[test]
    fn rule_breaking_source_session_refuses_the_run_naming_it() {
        let folder = ok(tempfile::tempdir());
        let source = jsonl_store(folder.path());
        ok(source.create_session(&header("good"), &[], Durability::Fsync));
        let line = record(1, "turn/end", r#"{"turnId":"nope"}"#).encode(&id("bad"));
        let text = format!("{}{line}", header("bad").encode());
        ok(std::fs::write(source.session_path(&id("bad")), text));
        let destination = sqlite_store(folder.path());
        let refused = migrate(&source, &destination, &mut quiet);
        let Err(error) = refused else {
            panic!("a rule-breaking source was migrated");
        };
        assert!(matches!(error, StoreError::Rule { .. }), "{error:?}");
        assert!(error.to_string().contains("bad.jsonl"), "{error}");
        assert!(ok(destination.ids()).is_empty(), "nothing is written");
    }

    #[test]
    fn torn_tail_is_dropped_with_a_warning() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let mut file = ok(std::fs::OpenOptions::new()
            .append(true)
            .open(source.session_path(&id("empty"))));
        ok(file.write_all(b"{\"seq\":1,\"ts\":"));
        let destination = sqlite_store(folder.path());
        let report = ok(migrate(&source, &destination, &mut quiet));
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].session, id("empty"));
        assert!(report.warnings[0].to_string().contains("torn tail"));
        assert!(ok(destination.snapshot(&id("empty"))).events.is_empty());
    }

    #[test]
    fn existing_destination_session_refuses_the_run() {
        let folder = ok(tempfile::tempdir());
        let source = realistic_jsonl(folder.path());
        let destination = sqlite_store(folder.path());
        ok(destination.create_session(&header("empty"), &[], Durability::Fsync));
        let refused = migrate(&source, &destination, &mut quiet);
        assert!(
            matches!(&refused, Err(StoreError::AlreadyExists { id: taken, .. }) if taken.as_str() == "empty"),
            "{refused:?}"
        );
        assert_eq!(
            ok(destination.ids()),
            [id("empty")],
            "nothing else is written"
        );
    }

    /// `diff` of two stores built by `left` and `right`, as text.
    fn check_diff(left: &[(&str, &[EventRecord])], right: &[(&str, &[EventRecord])], expect: &str) {
        let folder = ok(tempfile::tempdir());
        let a = jsonl_store(folder.path());
        let b = sqlite_store(folder.path());
        for (store, sessions) in [(&a, left), (&b, right)] {
            for (session, events) in sessions {
                ok(store.create_session(&header(session), events, Durability::Buffered));
            }
        }
        let found = ok(diff(&a, &b)).map_or_else(|| "none".to_owned(), |d| d.to_string());
        assert_eq!(found, expect);
    }

    #[test]
    fn diff_names_the_first_difference() {
        let one = [record(1, "note/test", r#"{"n":1}"#)];
        let two = [
            record(1, "note/test", r#"{"n":1}"#),
            record(2, "note/test", r#"{"n":2}"#),
        ];
        let other = [record(1, "note/test", r#"{"n":9}"#)];
        check_diff(&[("a", &one)], &[("a", &one)], "none");
        check_diff(
            &[("a", &one), ("b", &one)],
            &[("a", &one)],
            "session b: session differs: left present, right missing",
        );
        check_diff(
            &[("b", &one)],
            &[("a", &one), ("b", &one)],
            "session a: session differs: left missing, right present",
        );
        check_diff(
            &[("a", &one)],
            &[("a", &two)],
            "session a: event count differs: left 1, right 2",
        );
        check_diff(
            &[("a", &one)],
            &[("a", &other)],
            r#"session a, seq 1: data differs: left {"n":1}, right {"n":9}"#,
        );
    }

    #[test]
    fn diff_names_a_header_field() {
        let folder = ok(tempfile::tempdir());
        let a = jsonl_store(folder.path());
        let b = sqlite_store(folder.path());
        ok(a.create_session(&header("a"), &[], Durability::Buffered));
        let mut moved = header("a");
        moved.cwd = "/elsewhere".to_owned();
        ok(b.create_session(&moved, &[], Durability::Buffered));
        let found = ok(diff(&a, &b)).map(|d| d.to_string());
        assert_eq!(
            found.as_deref(),
            Some(
                r#"session a, seq 0: header cwd differs: left "/work/project", right "/elsewhere""#
            )
        );
    }
}
