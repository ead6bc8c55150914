//! The header of a JSONL fork's child, predicted without the parent's fold.
//!
//! A child's header needs, of its parent's fold, only the seq of its last
//! event and its last own `sandbox/mode` and `approval/policy` switches
//! (`sessionlog_projections::child_header`). When the parent has no state
//! snapshot to give them, they are found from the end of its log: the last
//! seq as `tail -n 1` finds it ([`read_last_events`]), the switches by a
//! search of chunks read backwards for the bytes `"type":"sandbox/mode"`
//! and `"type":"approval/policy"` (the layout every writer of this store
//! gives a record), each hit decoded as the record of its line, the last
//! hit of each kind that is an own event of that type taken. The search
//! stops once both are known, or at the header.
//!
//! This is a prediction, never trusted: the fork writes it as the child's
//! header, then checks and folds every record of the parent as it copies
//! it, and a fold that does not give the same header makes the fork start
//! again by the way that needs no prediction (`fork.rs`). So whatever the
//! search cannot judge (a hit in a line it cannot decode, a line too long,
//! a read that fails) gives no prediction at all, and the fork's own read
//! reports what is wrong, at its line.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use sessionlog_projections::child_header;
use sessionlog_schema::{
    decode_event_viewed, ApprovalPolicy, EventView, SandboxMode, SessionHeader, SessionId,
    CRC_SUFFIX_LEN, MAX_RECORD_BYTES,
};

use crate::last::read_last_events;
use crate::reader::open_log_for_reading;

/// Bytes read at a time, backwards.
const CHUNK_BYTES: usize = 1 << 20;

/// The two kinds of record the search looks for, as every writer of this
/// store lays them out.
const SANDBOX_KEY: &[u8] = b"\"type\":\"sandbox/mode\"";
const APPROVAL_KEY: &[u8] = b"\"type\":\"approval/policy\"";

/// The header that the fork of the log at `parent_path` (whose header must
/// name `parent_id`, when given) into `child` at `now_ms` would give, as
/// the end of the log predicts it; `None` when it cannot be predicted.
pub(crate) fn scan_child_header(
    parent_path: &Path,
    parent_id: Option<SessionId>,
    child: &SessionId,
    now_ms: u64,
) -> Option<SessionHeader> {
    scan_in_chunks(parent_path, parent_id, child, now_ms, CHUNK_BYTES)
}

/// [`scan_child_header`], reading `chunk_bytes` at a time.
fn scan_in_chunks(
    parent_path: &Path,
    parent_id: Option<SessionId>,
    child: &SessionId,
    now_ms: u64,
    chunk_bytes: usize,
) -> Option<SessionHeader> {
    let last = read_last_events(parent_path, parent_id, 1).ok()?;
    let parent = &last.header.header;
    if parent.id == *child {
        return None;
    }
    let file = open_log_for_reading(parent_path).ok()?;
    let search = Search {
        file: &file,
        id: &parent.id,
        seed_length: parent.seed_length,
        last_seq: last.last_seq,
        chunk_bytes,
    };
    // The header's line is its body and `,"crc":"xxxxxxxx"}\n`.
    let start = (last.header.body.len() + CRC_SUFFIX_LEN + 1) as u64;
    let end = file.metadata().ok()?.len();
    let (sandbox, approval) = search.last_switches(start, end)?;
    Some(child_header(
        parent,
        child.clone(),
        last.last_seq,
        sandbox.or(parent.sandbox_mode),
        approval.or(parent.approval_policy),
        now_ms,
    ))
}

/// A switch a record makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Switch {
    Sandbox(SandboxMode),
    Approval(ApprovalPolicy),
}

/// What the search knows of one key, from its hits so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// The last own event of the key's type in the good prefix.
    Own(Switch),
    /// The last event of the key's type in the good prefix is not own (a
    /// seeded one), so there is no own one.
    Seeded,
    /// Nothing settled yet: no hit, or hits inside another record's data,
    /// or past the good prefix. The search looks further back.
    Further,
}

/// The line around a hit.
enum Around {
    /// A whole line, without its newline.
    Line(Vec<u8>),
    /// The last line, without its newline: a torn tail, not a record.
    Torn,
}

/// The search of one log for its last own switches.
struct Search<'a> {
    file: &'a File,
    /// The session whose records the log holds (their CRCs name it).
    id: &'a SessionId,
    /// The header's `seedLength`: records through it are not own.
    seed_length: u64,
    /// The last seq of the good prefix: records past it are not counted.
    last_seq: u64,
    /// Bytes read at a time ([`CHUNK_BYTES`]; less in tests, to cross
    /// chunks often).
    chunk_bytes: usize,
}

impl Search<'_> {
    /// The last own sandbox and approval switches of the records in
    /// `start..end`, each `None` when there is none; `None` when the
    /// search cannot tell.
    ///
    /// A log of more than a few chunks is searched in two halves at once,
    /// the lower on a thread of its own (the copies out of the page cache
    /// are most of the cost, and a fork's second core is idle until the
    /// copy starts); what the upper half settles stands, and the lower
    /// half stops when the upper settles both.
    fn last_switches(
        &self,
        start: u64,
        end: u64,
    ) -> Option<(Option<SandboxMode>, Option<ApprovalPolicy>)> {
        let never = AtomicBool::new(false);
        let (sandbox, approval) = if end - start < 4 * self.chunk_bytes as u64 {
            self.settle(start, end, end, &never)?
        } else {
            let mid = start + (end - start) / 2;
            let stop = AtomicBool::new(false);
            std::thread::scope(|scope| {
                let lower = std::thread::Builder::new()
                    .name("sessionlog-scan".into())
                    .spawn_scoped(scope, || self.settle(start, mid, end, &stop));
                let upper = self.settle(mid, end, end, &never);
                let settled = |(sandbox, approval): (Judged, Judged)| {
                    sandbox != Judged::Further && approval != Judged::Further
                };
                if upper.is_none_or(settled) {
                    stop.store(true, Ordering::Relaxed);
                }
                let (upper_sandbox, upper_approval) = upper?;
                let lower = match lower {
                    Ok(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    // No thread to be had: the lower half after the upper.
                    Err(_) => self.settle(start, mid, end, &stop),
                };
                let pick = |upper: Judged, lower: Option<Judged>| match upper {
                    Judged::Further => lower,
                    settled => Some(settled),
                };
                Some((
                    pick(upper_sandbox, lower.map(|found| found.0))?,
                    pick(upper_approval, lower.map(|found| found.1))?,
                ))
            })?
        };
        let sandbox = match sandbox {
            Judged::Own(Switch::Sandbox(mode)) => Some(mode),
            _ => None,
        };
        let approval = match approval {
            Judged::Own(Switch::Approval(policy)) => Some(policy),
            _ => None,
        };
        Some((sandbox, approval))
    }

    /// What the records that start in `start..high` settle of each key,
    /// searched backwards from `high` (a key that starts below `high` is
    /// read on up to `end`); `None` when the search cannot tell. Ends
    /// early, settling nothing more, once `stop` is set.
    fn settle(
        &self,
        start: u64,
        high: u64,
        end: u64,
        stop: &AtomicBool,
    ) -> Option<(Judged, Judged)> {
        let mut sandbox = Judged::Further;
        let mut approval = Judged::Further;
        // A key across two chunks is found in the higher one's overlap.
        let overlap = SANDBOX_KEY.len().max(APPROVAL_KEY.len()) - 1;
        let mut buf = vec![0; self.chunk_bytes + overlap];
        let mut high = high;
        while high > start
            && (sandbox == Judged::Further || approval == Judged::Further)
            && !stop.load(Ordering::Relaxed)
        {
            let low = high.saturating_sub(self.chunk_bytes as u64).max(start);
            let own_len = (high - low) as usize;
            let len = (own_len + overlap).min((end - low) as usize);
            self.file.read_exact_at(&mut buf[..len], low).ok()?;
            let chunk = &buf[..len];
            if sandbox == Judged::Further {
                sandbox = self.last_in(chunk, low, own_len, SANDBOX_KEY)?;
            }
            if approval == Judged::Further {
                approval = self.last_in(chunk, low, own_len, APPROVAL_KEY)?;
            }
            high = low;
        }
        Some((sandbox, approval))
    }

    /// What the hits of `key` that start in `chunk[..own_len]` (read at
    /// file offset `low`) settle, the last first; `None` when the search
    /// cannot tell.
    fn last_in(&self, chunk: &[u8], low: u64, own_len: usize, key: &[u8]) -> Option<Judged> {
        let hits: Vec<usize> = memchr::memmem::find_iter(chunk, key)
            .take_while(|&at| at < own_len)
            .collect();
        for &at in hits.iter().rev() {
            match self.judge(low + at as u64, key)? {
                Judged::Further => {}
                settled => return Some(settled),
            }
        }
        Some(Judged::Further)
    }

    /// Decodes the line around file offset `at`, a hit of `key`, as a
    /// record of the log.
    fn judge(&self, at: u64, key: &[u8]) -> Option<Judged> {
        let Around::Line(line) = self.line_around(at)? else {
            return Some(Judged::Further);
        };
        let viewed = decode_event_viewed(self.id, &line).ok()?;
        let seq = viewed.record.seq();
        if seq > self.last_seq {
            return Some(Judged::Further);
        }
        let switch = match viewed.view {
            Ok(EventView::SandboxMode { mode }) if key == SANDBOX_KEY => Switch::Sandbox(mode),
            Ok(EventView::ApprovalPolicy { policy }) if key == APPROVAL_KEY => {
                Switch::Approval(policy)
            }
            _ => return Some(Judged::Further),
        };
        Some(if seq > self.seed_length {
            Judged::Own(switch)
        } else {
            Judged::Seeded
        })
    }

    /// The line holding file offset `at`; `None` when it is longer than a
    /// record may be, or a read fails.
    fn line_around(&self, at: u64) -> Option<Around> {
        const STEP: usize = 4096;
        let limit = MAX_RECORD_BYTES as u64 + 1;
        let mut buf = vec![0; STEP];
        // Backwards to the newline before `at`, or the file's start.
        let mut line_start = 0;
        let mut high = at;
        while high > 0 {
            let low = high.saturating_sub(STEP as u64);
            let piece = &mut buf[..(high - low) as usize];
            self.file.read_exact_at(piece, low).ok()?;
            if let Some(newline) = memchr::memrchr(b'\n', piece) {
                line_start = low + newline as u64 + 1;
                break;
            }
            if at - low > limit {
                return None;
            }
            high = low;
        }
        // Forwards to the newline after it.
        let mut line = Vec::new();
        let mut low = line_start;
        loop {
            let read = self.file.read_at(&mut buf, low).ok()?;
            if read == 0 {
                return Some(Around::Torn);
            }
            if let Some(newline) = memchr::memchr(b'\n', &buf[..read]) {
                line.extend_from_slice(&buf[..newline]);
                return Some(Around::Line(line));
            }
            line.extend_from_slice(&buf[..read]);
            if line.len() as u64 > limit {
                return None;
            }
            low += read as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{event, header, id, note, ok, record};
    use crate::{Durability, NewEvent, Store, WriterOptions};
    use proptest::prelude::*;
    use sessionlog_projections::{delegate_from_state, Defaults};

    const TS: u64 = 1_800_000_000_000;

    /// What a session's log is made of, in order.
    #[derive(Debug, Clone)]
    enum Step {
        Note,
        Sandbox(SandboxMode),
        Approval(ApprovalPolicy),
        /// A note whose data holds both keys' bytes, as another record's
        /// data may.
        Lookalike(SandboxMode, ApprovalPolicy),
    }

    fn new_event(step: &Step, n: usize) -> NewEvent {
        match step {
            Step::Note => note(&format!("note {n}")),
            Step::Sandbox(mode) => event(
                "sandbox/mode",
                &format!(r#"{{"mode":"{}"}}"#, mode.as_str()),
                0,
            ),
            Step::Approval(policy) => event(
                "approval/policy",
                &format!(r#"{{"policy":"{}"}}"#, policy.as_str()),
                0,
            ),
            Step::Lookalike(mode, policy) => event(
                "note/test",
                &format!(
                    r#"{{"a":{{"type":"sandbox/mode","mode":"{}"}},"b":{{"type":"approval/policy","policy":"{}"}}}}"#,
                    mode.as_str(),
                    policy.as_str()
                ),
                0,
            ),
        }
    }

    fn append(store: &Store, session: &str, steps: &[Step]) {
        let mut writer = ok(store.open_writer(
            &id(session),
            WriterOptions {
                durability: Durability::Buffered,
                keep_snapshot: false,
                ..WriterOptions::default()
            },
        ));
        for (n, step) in steps.iter().enumerate() {
            ok(writer.append(new_event(step, n), None));
        }
    }

    /// The header that the fold of every record of `session` gives its
    /// child `c`.
    fn folded(store: &Store, session: &str) -> SessionHeader {
        let (state, violations) = ok(store.snapshot(&id(session))).fold();
        assert!(violations.is_empty(), "{violations:?}");
        ok(delegate_from_state(
            &state,
            id("c"),
            None,
            &Defaults::default(),
            TS,
        ))
        .header
    }

    fn predicted(store: &Store, session: &str, chunk_bytes: usize) -> Option<SessionHeader> {
        let path = store.session_path(&id(session));
        scan_in_chunks(&path, Some(id(session)), &id("c"), TS, chunk_bytes)
    }

    fn sandbox_mode() -> impl Strategy<Value = SandboxMode> {
        prop_oneof![
            Just(SandboxMode::ReadOnly),
            Just(SandboxMode::WorkspaceWrite),
            Just(SandboxMode::DangerFullAccess),
        ]
    }

    fn approval_policy() -> impl Strategy<Value = ApprovalPolicy> {
        prop_oneof![Just(ApprovalPolicy::Ask), Just(ApprovalPolicy::Never)]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => Just(Step::Note),
            1 => sandbox_mode().prop_map(Step::Sandbox),
            1 => approval_policy().prop_map(Step::Approval),
            1 => (sandbox_mode(), approval_policy())
                .prop_map(|(mode, policy)| Step::Lookalike(mode, policy)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the parent's switches (own or seeded with it from its
        /// own parent, next to records whose data holds the same bytes),
        /// its header's baselines and the chunks the search reads, the
        /// predicted header is the one the fold of every record gives.
        #[test]
        fn the_predicted_header_is_the_one_the_fold_gives(
            baseline in (proptest::option::of(sandbox_mode()), proptest::option::of(approval_policy())),
            seeded in proptest::collection::vec(step(), 0..12),
            own in proptest::collection::vec(step(), 0..12),
            chunk_bytes in 1usize..300,
        ) {
            let folder = ok(tempfile::tempdir());
            let store = ok(Store::create(folder.path()));
            let root = SessionHeader {
                sandbox_mode: baseline.0,
                approval_policy: baseline.1,
                ..header("p")
            };
            ok(store.create_session(&root, &[], Durability::Buffered));
            append(&store, "p", &seeded);
            prop_assert_eq!(predicted(&store, "p", chunk_bytes), Some(folded(&store, "p")));
            // A child of `p`, whose seeded switches are not its own.
            ok(store.fork(&id("p"), &id("q"), None, &Defaults::default()));
            append(&store, "q", &own);
            prop_assert_eq!(predicted(&store, "q", chunk_bytes), Some(folded(&store, "q")));
        }
    }

    /// A store holding root session `p` made of `steps`.
    fn root_of(steps: &[Step]) -> (tempfile::TempDir, Store) {
        let folder = ok(tempfile::tempdir());
        let store = ok(Store::create(folder.path()));
        ok(store.create_session(&header("p"), &[], Durability::Buffered));
        append(&store, "p", steps);
        (folder, store)
    }

    #[test]
    fn a_switch_in_a_torn_tail_or_an_unfinished_batch_is_not_counted() {
        let (_folder, store) = root_of(&[Step::Sandbox(SandboxMode::ReadOnly), Step::Note]);
        let expected = folded(&store, "p");
        assert_eq!(expected.sandbox_mode, Some(SandboxMode::ReadOnly));
        let path = store.session_path(&id("p"));
        let mut log = ok(std::fs::read(&path));
        // The first record of a batch of two whose second never arrived,
        // then a line cut before its newline.
        let first = sessionlog_schema::EventRecord::new(
            3,
            TS,
            Some(2),
            "sandbox/mode",
            r#"{"mode":"workspace-write"}"#,
        );
        log.extend_from_slice(first.encode(&id("p")).as_bytes());
        let torn = sessionlog_schema::EventRecord::new(
            4,
            TS,
            None,
            "sandbox/mode",
            r#"{"mode":"danger-full-access"}"#,
        );
        let torn = torn.encode(&id("p"));
        log.extend_from_slice(&torn.as_bytes()[..torn.len() - 1]);
        ok(std::fs::write(&path, log));
        for chunk_bytes in [7, 64, CHUNK_BYTES] {
            assert_eq!(predicted(&store, "p", chunk_bytes), Some(expected.clone()));
        }
    }

    #[test]
    fn a_seeded_switch_is_not_own_whatever_the_header_says() {
        // A child whose header's baseline is not its seeded switch (a
        // header written elsewhere): the baseline is what it inherits.
        let folder = ok(tempfile::tempdir());
        let store = ok(Store::create(folder.path()));
        let child = SessionHeader {
            parent_session: Some(id("p")),
            seed_length: 2,
            delegation_depth: 1,
            sandbox_mode: Some(SandboxMode::ReadOnly),
            ..header("q")
        };
        let seed = [
            record(1, "note/test", r#"{"text":"seeded"}"#),
            record(2, "sandbox/mode", r#"{"mode":"workspace-write"}"#),
        ];
        ok(store.create_session(&child, &seed, Durability::Buffered));
        let expected = folded(&store, "q");
        assert_eq!(expected.sandbox_mode, Some(SandboxMode::ReadOnly));
        assert_eq!(predicted(&store, "q", CHUNK_BYTES), Some(expected));
        append(&store, "q", &[Step::Sandbox(SandboxMode::DangerFullAccess)]);
        let expected = folded(&store, "q");
        assert_eq!(expected.sandbox_mode, Some(SandboxMode::DangerFullAccess));
        assert_eq!(predicted(&store, "q", CHUNK_BYTES), Some(expected));
    }

    #[test]
    fn a_hit_that_cannot_be_decoded_gives_no_prediction() {
        let (_folder, store) = root_of(&[Step::Approval(ApprovalPolicy::Never), Step::Note]);
        let path = store.session_path(&id("p"));
        let text = ok(std::fs::read_to_string(&path));
        // The switch's CRC no longer matches its line.
        let damaged = text.replacen(r#""policy":"never""#, r#""policy":"ask""#, 1);
        assert_ne!(damaged, text);
        ok(std::fs::write(&path, damaged));
        assert_eq!(predicted(&store, "p", CHUNK_BYTES), None);
    }
}
