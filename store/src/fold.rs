//! [`fold_stream`]: a long read's fold on a thread of its own, so that
//! reading a log (its lines split, CRC-checked and decoded) and folding it
//! (the hash chain, the data's view, the rules) each take a core.
//!
//! The fold is the same sequential fold over the same records in the same
//! order: the reading thread hands over batches of records as a plain read
//! decodes them, and the folding thread applies them one by one to the one
//! state, so what it finds is what a fold on one thread finds.
//!
//! Each record's `data` is scanned once, on the folding thread: a JSONL
//! reader hands a record over before proving its `data` JSON
//! ([`SessionStream::next_event_unproven`]), and the scan that reads the
//! fold's view of the data proves it ([`prove_data`]). Should it find a
//! record whose data is not JSON (damage, which an intact record after it
//! makes corruption), the fold stops there and the log is read again from
//! that record on the calling thread, as a read alone reads it.

use std::sync::mpsc;
use std::thread;

use sessionlog_projections::{SessionState, Violation};
use sessionlog_schema::{prove_data, EventRecord, EventView};

use crate::reader::{FoldedEvent, SessionStream, Unproven};
use crate::StoreError;

/// How many events a fold takes on the reading thread before it moves to a
/// thread of its own: a short session is folded before a thread would have
/// started, and a store-wide read folds thousands of them.
const FOLDED_BEFORE_HANDOVER: u64 = 4096;

/// How many records the reading thread hands over at once: enough that
/// the two threads meet once per few hundred kilobytes of log.
const BATCH_RECORDS: usize = 1024;

/// The bodies' bytes past which the reading thread hands a batch over
/// before it holds [`BATCH_RECORDS`]: a log of large records (tool
/// outputs of hundreds of kilobytes) would otherwise have thousands of
/// them in flight between the threads, its memory following the records'
/// size. With it, what is in flight is some five batches of about this
/// much (and one record more each).
const BATCH_BYTES: usize = 1 << 20;

/// How many batches may wait for the folding thread before the reading
/// thread waits for it.
pub(crate) const BATCHES_QUEUED: usize = 3;

/// Records handed over, each with its mark when the folding thread is to
/// prove its `data` ([`SessionStream::next_event_unproven`]).
pub(crate) type Batch = Vec<(EventRecord, Option<Unproven>)>;

/// Folds every event left in `stream` into `state` (which must be the fold
/// of every event taken from it before), calling `each` with each record,
/// what [`SessionState::apply`] returned for it and the state after it, in
/// the order of the log.
///
/// A short session is folded on the calling thread, as
/// [`SessionStream::next_event_folded`] folds it. Past its first few
/// thousand events the fold goes on on a second thread while this one
/// reads, so that a long read costs about what the slower of the two costs,
/// not their sum (should no thread be had, it goes on on this one). An
/// error of the stream ends the read once every record before it is
/// folded; a panic of `each` goes on on this thread.
///
/// ```
/// use sessionlog_projections::SessionState;
/// use sessionlog_store::fold_stream;
///
/// # let folder = tempfile::tempdir()?;
/// # let path = folder.path().join("sessions");
/// # let store = sessionlog_store::Store::create(&path)?;
/// # let id = sessionlog_schema::SessionId::parse("a")?;
/// # let header = sessionlog_schema::SessionHeader::root(id.clone(), 0, "/work".into());
/// # store.create_session(&header, &[], sessionlog_store::Durability::Fsync)?;
/// # let mut writer = store.open_writer(&id, sessionlog_store::WriterOptions::default())?;
/// # writer.append(sessionlog_schema::TurnStart::new("t1").into(), None)?;
/// # drop(writer);
/// let mut stream = store.stream(&id)?;
/// let mut state = SessionState::with_header_body(stream.header().clone(), stream.header_body());
/// let mut violations = Vec::new();
/// fold_stream(&mut *stream, &mut state, |_, folded, _| {
///     violations.extend(folded.err());
/// })?;
/// assert_eq!(state.open_turn(), Some("t1"));
/// assert!(violations.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fold_stream<S, F>(
    stream: &mut S,
    state: &mut SessionState,
    mut each: F,
) -> Result<(), StoreError>
where
    S: SessionStream + ?Sized,
    F: FnMut(&EventRecord, Result<(), Violation>, &SessionState) + Send,
{
    match fold(stream, state, &mut each, Hashing::Every)? {
        Folded::Whole => Ok(()),
        // A fold that hashes every record never stops for the chain.
        Folded::ChainNeeded => unreachable!("a fold with its chain stopped for the chain"),
    }
}

/// Whether [`fold_unhashed`] folded the whole stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Folded {
    /// Every event left in the stream is folded.
    Whole,
    /// The fold stopped before an own seal, which only the chain can
    /// check, or before damage, which a read alone must find (see
    /// [`fold_unhashed`]): the state is to be thrown away and the session
    /// folded again from its start by [`fold_stream`].
    ChainNeeded,
}

/// [`fold_stream`] for a read that only projects (a whole `project`): past
/// the first few thousand events, unless an own seal came in those, the
/// records are folded without the hash chain ([`SessionState::apply_viewed_unhashed`]),
/// whose SHA-256 of every body costs a long fold more than its rules and
/// views together and which no projection uses.
///
/// An own seal further on must still be checked against the chain, and
/// only against the bytes this fold judged: the fold then stops and
/// returns [`Folded::ChainNeeded`], for the caller to fold the session
/// again from its start with its chain, and so does a record whose `data`
/// is not JSON (the read alone that finds what that damage is would
/// fold on with the chain this fold left behind). On [`Folded::Whole`] the
/// state holds every projection of the stream, but its chain is not the
/// session's: it is not to be sealed from or saved.
pub(crate) fn fold_unhashed<S, F>(
    stream: &mut S,
    state: &mut SessionState,
    mut each: F,
) -> Result<Folded, StoreError>
where
    S: SessionStream + ?Sized,
    F: FnMut(&EventRecord, Result<(), Violation>, &SessionState) + Send,
{
    fold(stream, state, &mut each, Hashing::UntilOwnSeal)
}

/// Which records a fold hashes into the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hashing {
    /// Every record.
    Every,
    /// Those of the first few thousand events, and every record of a
    /// session with an own seal among those; the others only once an own
    /// seal asks (by [`Folded::ChainNeeded`]).
    UntilOwnSeal,
}

/// Why the folding thread stopped before the end of the stream.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// At a record whose `data` is not JSON.
    Refused(Unproven),
    /// At an own seal, in a fold that left the chain behind.
    OwnSeal,
}

/// The fold of [`fold_stream`] (`hashing` [`Hashing::Every`]) and of
/// [`fold_unhashed`]: the first events on this thread, the rest on a
/// thread of its own, hashed as `hashing` says.
fn fold<S, F>(
    stream: &mut S,
    state: &mut SessionState,
    each: &mut F,
    hashing: Hashing,
) -> Result<Folded, StoreError>
where
    S: SessionStream + ?Sized,
    F: FnMut(&EventRecord, Result<(), Violation>, &SessionState) + Send,
{
    if fold_here(stream, state, each, FOLDED_BEFORE_HANDOVER)? {
        return Ok(Folded::Whole);
    }
    // A session sealed in its first events is sealed on: hashing as it
    // goes costs it less than a second read.
    let hashed = hashing == Hashing::Every || state.last_own_seal_seq().is_some();
    let id = state.header().id.clone();
    let (batches, to_fold) = mpsc::sync_channel::<Batch>(BATCHES_QUEUED);
    let (spare, spares) = mpsc::channel::<Batch>();
    let handed_over = thread::scope(|scope| {
        let (state, each) = (&mut *state, &mut *each);
        let folder = thread::Builder::new()
            .name("sessionlog-fold".to_owned())
            .spawn_scoped(scope, move || {
                for batch in to_fold {
                    for (record, unproven) in &batch {
                        // The view's scan proves `data` JSON.
                        let view = match unproven {
                            None => None,
                            Some(unproven) => match prove_data(&id, record) {
                                Ok(view) => Some(view),
                                Err(_) => return Some(Stop::Refused(*unproven)),
                            },
                        };
                        let folded = match (hashed, view) {
                            (true, None) => state.apply(record),
                            (true, Some(view)) => state.apply_viewed(record, view),
                            (false, view) => {
                                let view = view.unwrap_or_else(|| {
                                    EventView::parse(record.event_type(), record.data())
                                });
                                match state.apply_viewed_unhashed(record, view) {
                                    Some(folded) => folded,
                                    None => return Some(Stop::OwnSeal),
                                }
                            }
                        };
                        each(record, folded, state);
                    }
                    // The records go back to be freed by the thread that
                    // allocated them, whose allocator then needs no lock.
                    // The reader may be done and gone: the batch is then
                    // freed here.
                    let _ = spare.send(batch);
                }
                None
            });
        // A thread that cannot be had (a limit on threads, say) leaves the
        // fold on this one, with its chain (nothing was folded without).
        let folder = folder.ok()?;
        let read = hand_over(stream, &batches, &spares, !hashed);
        drop(batches);
        match folder.join() {
            Ok(stopped) => Some((read, stopped)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    match handed_over {
        Some((read, None)) => read.map(|()| Folded::Whole),
        // Only a fold without its chain stops at a seal.
        Some((_, Some(Stop::OwnSeal))) => Ok(Folded::ChainNeeded),
        Some((_, Some(Stop::Refused(_)))) if !hashed => Ok(Folded::ChainNeeded),
        // A record whose `data` is not JSON: what the read gave after it
        // (it read on) is put aside, and the log is read again from that
        // record on this thread, proved as a read alone proves it, so that
        // the damage, torn tail or corruption found there is the one a
        // fold alone finds.
        Some((_, Some(Stop::Refused(refused)))) => {
            stream.read_again(refused)?;
            fold_here(stream, state, each, u64::MAX).map(|_| Folded::Whole)
        }
        None => fold_here(stream, state, each, u64::MAX).map(|_| Folded::Whole),
    }
}

/// Folds at most `events` more events of `stream` on this thread, as
/// [`SessionStream::next_event_folded`] folds them; whether the stream
/// ended.
fn fold_here<S, F>(
    stream: &mut S,
    state: &mut SessionState,
    each: &mut F,
    events: u64,
) -> Result<bool, StoreError>
where
    S: SessionStream + ?Sized,
    F: FnMut(&EventRecord, Result<(), Violation>, &SessionState),
{
    for _ in 0..events {
        let Some(FoldedEvent { record, folded }) = stream.next_event_folded(state)? else {
            return Ok(true);
        };
        each(&record, folded, state);
    }
    Ok(false)
}

/// Reads `stream` to its end in batches sent to `batches`, reusing the
/// batches the fold sends back; stops early when the fold has stopped.
///
/// With `give_back`, the records of a batch back from the fold go back to
/// the stream, whose reader writes the bodies of records to come into
/// theirs ([`SessionStream::give_back`]); otherwise they are freed. That
/// pays where the reader is the slower thread (a fold without the chain):
/// a body allocated and freed per record is the largest cost it can shed.
/// Where the fold is the slower one (the chain hashed), it costs more than
/// it saves: each body the reader writes again is a cache line the fold
/// must then take back from the reader's core (docs/PERFORMANCE.md,
/// "Read + fold where SHA-256 is the fold's largest part").
pub(crate) fn hand_over<S: SessionStream + ?Sized>(
    stream: &mut S,
    batches: &mpsc::SyncSender<Batch>,
    spares: &mpsc::Receiver<Batch>,
    give_back: bool,
) -> Result<(), StoreError> {
    // The records of a batch back from the fold, freed one at a time as
    // the next batch is read (one before each record read), and the
    // emptied list of the batch before, which the next batch is read into.
    let mut stale: Batch = Vec::new();
    let mut emptied: Option<Batch> = None;
    loop {
        let mut batch = match spares.try_recv().ok() {
            Some(mut folded) if give_back => {
                for (record, _) in folded.drain(..) {
                    stream.give_back(record);
                }
                folded
            }
            // The records are freed by the thread that allocated them,
            // whose allocator then needs no lock; and freed in step with
            // the allocation of the records read, so that each body freed
            // waits in the allocator's thread cache for the next one of
            // its size. Freed all at once, a batch's thousand bodies
            // overflow that cache into the allocator's bins, and each body
            // allocated after comes from them, at several times the cost.
            folded => {
                if let Some(folded) = folded {
                    drop(std::mem::replace(&mut stale, folded));
                }
                emptied
                    .take()
                    .unwrap_or_else(|| Vec::with_capacity(BATCH_RECORDS))
            }
        };
        let mut ended = None;
        let mut bytes = 0;
        while batch.len() < BATCH_RECORDS && bytes < BATCH_BYTES {
            // Freed before the next is read: a batch of a few large
            // records holds no more at once than it did.
            stale.pop();
            match stream.next_event_unproven() {
                Ok(Some(record)) => {
                    bytes += record.0.body().len();
                    batch.push(record);
                }
                Ok(None) => {
                    ended = Some(Ok(()));
                    break;
                }
                Err(error) => {
                    ended = Some(Err(error));
                    break;
                }
            }
        }
        if stale.is_empty() {
            emptied = Some(std::mem::take(&mut stale));
        }
        // A fold that stopped has refused a record or panicked: the join
        // says which.
        if !batch.is_empty() && batches.send(batch).is_err() {
            return Ok(());
        }
        if let Some(ended) = ended {
            return ended;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::Path;

    use sessionlog_schema::{ChainValue, Seal, SessionHeader, SessionId, TornTail};

    use super::*;
    use crate::reader::{Lend, LogReader, Rewind};
    use crate::shared_text::SharedTextReader;

    /// What a fold reports of one event: its seq, what applying it
    /// returned, and the state's seq and chain after it.
    type Seen = (u64, Result<(), Violation>, u64, [u8; 32]);

    /// The chain value of `state` at every 97th seq (zeros elsewhere):
    /// each value hashes the bodies put off since the last one settled
    /// (`projections/src/chain.rs`), so a value at every event would make
    /// a long log's test quadratic.
    fn sampled_chain(state: &SessionState) -> [u8; 32] {
        match state.seq() % 97 {
            0 => *state.chain().as_bytes(),
            _ => [0; 32],
        }
    }

    /// A log of `turns` turns of a step and a call each (six events a
    /// turn), a shape violation in every 500th turn and a rule violation
    /// in every 600th (an event more each); with `damaged`, the record of
    /// that seq has a wrong CRC (an intact one follows it, so the read
    /// refuses the log there).
    fn log(turns: usize, damaged: Option<u64>) -> Vec<u8> {
        let id = SessionId::parse("s").expect("a valid id");
        let mut bytes = SessionHeader::root(id.clone(), 1, "/work".to_owned())
            .encode()
            .into_bytes();
        let mut seq = 0;
        let mut push = |event_type: &str, data: String| {
            seq += 1;
            let mut line = EventRecord::new(seq, 10, None, event_type, &data).encode(&id);
            if damaged == Some(seq) {
                line = line.replacen("\"seq\"", "\"seq\" ", 1);
            }
            bytes.extend(line.as_bytes());
        };
        for turn in 0..turns {
            push("turn/start", format!(r#"{{"turnId":"t{turn}"}}"#));
            push(
                "step/start",
                format!(r#"{{"stepId":"s{turn}","turnId":"t{turn}"}}"#),
            );
            push(
                "tool/start",
                format!(
                    r#"{{"callId":"c{turn}","stepId":"s{turn}","name":"shell","arguments":{{}}}}"#
                ),
            );
            push(
                "tool/settle",
                format!(r#"{{"callId":"c{turn}","status":"ok"}}"#),
            );
            if turn % 600 == 599 {
                push(
                    "tool/settle",
                    r#"{"callId":"nowhere","status":"ok"}"#.to_owned(),
                );
            }
            if turn % 500 == 499 {
                push("turn/start", r#"{"turnId":7}"#.to_owned());
            }
            push("step/end", format!(r#"{{"stepId":"s{turn}"}}"#));
            push("turn/end", format!(r#"{{"turnId":"t{turn}"}}"#));
        }
        bytes
    }

    fn reader(bytes: &[u8]) -> LogReader<Cursor<&[u8]>> {
        read_from(Cursor::new(bytes))
    }

    fn read_from<R: Lend>(source: R) -> LogReader<R> {
        LogReader::new(source, Path::new("fold.jsonl"), None).expect("a readable header")
    }

    /// The fold on one thread, event by event.
    fn fold_alone(bytes: &[u8]) -> (SessionState, Vec<Seen>, Result<(), String>) {
        folded_alone(&mut reader(bytes))
    }

    /// The fold of [`fold_stream`].
    fn fold_handed_over(bytes: &[u8]) -> (SessionState, Vec<Seen>, Result<(), String>) {
        folded_handed_over(&mut reader(bytes))
    }

    #[test]
    fn a_fold_handed_to_its_own_thread_sees_what_a_fold_alone_sees() {
        // 24,014 events: the handover comes at 4,096, and batches follow.
        let bytes = log(4_000, None);
        let (state, seen, ended) = fold_handed_over(&bytes);
        assert_eq!(ended, Ok(()));
        assert_eq!(seen.len(), 24_014);
        assert!(FOLDED_BEFORE_HANDOVER < 24_000 - BATCH_RECORDS as u64 * 2);
        // Violations on both sides of the handover, in the log's order.
        let violations: Vec<u64> = seen
            .iter()
            .filter(|(_, folded, _, _)| folded.is_err())
            .map(|(seq, _, _, _)| *seq)
            .collect();
        assert_eq!(violations.len(), 8 + 6);
        assert!(violations.first() < Some(&FOLDED_BEFORE_HANDOVER));
        assert!(violations.last() > Some(&FOLDED_BEFORE_HANDOVER));
        assert_eq!((state.clone(), seen, ended), fold_alone(&bytes));
        assert_eq!(state.seq(), 24_014);
    }

    #[test]
    fn a_short_log_is_folded_before_any_handover() {
        let bytes = log(10, None);
        let (state, seen, ended) = fold_handed_over(&bytes);
        assert_eq!(seen.len(), 60);
        assert_eq!((state, seen, ended), fold_alone(&bytes));
    }

    #[test]
    fn damage_after_the_handover_ends_the_fold_where_a_fold_alone_ends() {
        let bytes = log(4_000, Some(18_001));
        let (state, seen, ended) = fold_handed_over(&bytes);
        let Err(error) = &ended else {
            panic!("a damaged record was read as good");
        };
        assert!(
            error.contains("seq 18001") || error.contains("line 18002"),
            "{error}"
        );
        assert_eq!(seen.len(), 18_000);
        assert_eq!(state.seq(), 18_000);
        assert_eq!((state, seen, ended), fold_alone(&bytes));
    }

    /// What may be wrong with one record of [`flawed_log`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Flaw {
        /// Its `data` is not JSON, and its CRC matches: what only the
        /// proof of `data` finds.
        NotJson,
        /// Its `data` is not JSON and its seq is one too many.
        NotJsonAndGap,
        /// Its CRC does not match.
        Crc,
        /// Its seq is one too many, with a CRC that matches.
        Gap,
        /// It announces a batch of this many records.
        Batch(u64),
        /// A byte of its `data` is not UTF-8, and its CRC matches.
        NotUtf8,
    }

    /// A log of `events` small events (a turn's step, started and ended,
    /// in a loop), with `flaws` at their seqs, and its last `cut` bytes
    /// cut off.
    fn flawed_log(events: u64, flaws: &[(u64, Flaw)], cut: usize) -> Vec<u8> {
        padded_log(events, flaws, cut, |_| 0)
    }

    /// [`flawed_log`], the data of the event of each seq padded with a
    /// member of `pad(seq)` bytes (none when 0).
    fn padded_log(
        events: u64,
        flaws: &[(u64, Flaw)],
        cut: usize,
        pad: impl Fn(u64) -> usize,
    ) -> Vec<u8> {
        let id = SessionId::parse("s").expect("a valid id");
        let mut bytes = SessionHeader::root(id.clone(), 1, "/work".to_owned())
            .encode()
            .into_bytes();
        for seq in 1..=events {
            let flaw = flaws
                .iter()
                .find(|(at, _)| *at == seq)
                .map(|(_, flaw)| *flaw);
            let (event_type, data) = match seq % 4 {
                1 => ("turn/start", format!(r#"{{"turnId":"t{seq}"}}"#)),
                2 => (
                    "step/start",
                    format!(r#"{{"stepId":"s{seq}","turnId":"t{}"}}"#, seq - 1),
                ),
                3 => ("step/end", format!(r#"{{"stepId":"s{}"}}"#, seq - 1)),
                _ => ("turn/end", format!(r#"{{"turnId":"t{}"}}"#, seq - 3)),
            };
            let data = match pad(seq) {
                0 => data,
                bytes => format!(
                    r#"{},"pad":"{}"}}"#,
                    &data[..data.len() - 1],
                    "x".repeat(bytes)
                ),
            };
            let data = match flaw {
                Some(Flaw::NotJson | Flaw::NotJsonAndGap) => {
                    format!("{}]", &data[..data.len() - 1])
                }
                _ => data,
            };
            let stored_seq = match flaw {
                Some(Flaw::Gap | Flaw::NotJsonAndGap) => seq + 1,
                _ => seq,
            };
            let batch = match flaw {
                Some(Flaw::Batch(n)) => Some(n),
                _ => None,
            };
            let record = EventRecord::new(stored_seq, 10, batch, event_type, &data);
            let mut line = record.encode(&id);
            if flaw == Some(Flaw::Crc) {
                line = line.replacen("\"seq\"", "\"seq\" ", 1);
            }
            if flaw == Some(Flaw::NotUtf8) {
                let mut body = record.body().as_bytes().to_vec();
                let last = body.len() - 3;
                body[last] = 0xff;
                let crc = sessionlog_schema::record_crc(&id, &body);
                bytes.extend(body);
                bytes.extend(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
                continue;
            }
            bytes.extend(line.as_bytes());
        }
        bytes.truncate(bytes.len().saturating_sub(cut));
        bytes
    }

    /// A fold of `fold`, and then what the stream's `finish` gives when the
    /// fold ended well.
    type Finished = (
        (SessionState, Vec<Seen>, Result<(), String>),
        Option<Result<Option<TornTail>, String>>,
    );

    fn finished<'b>(
        bytes: &'b [u8],
        fold: impl FnOnce(
            &mut LogReader<Cursor<&'b [u8]>>,
        ) -> (SessionState, Vec<Seen>, Result<(), String>),
    ) -> Finished {
        finished_reading(reader(bytes), fold)
    }

    /// [`finished`] of a stream read from any source.
    fn finished_reading<R: Lend + Rewind + std::fmt::Debug>(
        mut stream: LogReader<R>,
        fold: impl FnOnce(&mut LogReader<R>) -> (SessionState, Vec<Seen>, Result<(), String>),
    ) -> Finished {
        let folded = fold(&mut stream);
        let tail = folded
            .2
            .is_ok()
            .then(|| Box::new(stream).finish().map_err(|error| error.to_string()));
        (folded, tail)
    }

    /// The fold of `stream` on one thread, event by event.
    fn folded_alone(
        stream: &mut LogReader<Cursor<&[u8]>>,
    ) -> (SessionState, Vec<Seen>, Result<(), String>) {
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let mut seen = Vec::new();
        let ended = loop {
            match stream.next_event_folded(&mut state) {
                Ok(Some(FoldedEvent { record, folded })) => {
                    seen.push((record.seq(), folded, state.seq(), sampled_chain(&state)));
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error.to_string()),
            }
        };
        (state, seen, ended)
    }

    /// The fold of `stream` by [`fold_stream`].
    fn folded_handed_over<R: Lend + Rewind + std::fmt::Debug>(
        stream: &mut LogReader<R>,
    ) -> (SessionState, Vec<Seen>, Result<(), String>) {
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let mut seen = Vec::new();
        let ended = fold_stream(stream, &mut state, |record, folded, state| {
            seen.push((record.seq(), folded, state.seq(), sampled_chain(state)));
        });
        (state, seen, ended.map_err(|error| error.to_string()))
    }

    #[test]
    fn a_record_whose_data_the_fold_refuses_ends_the_read_where_a_fold_alone_ends_it() {
        let handover = FOLDED_BEFORE_HANDOVER + 1;
        let far = FOLDED_BEFORE_HANDOVER + 2 * BATCH_RECORDS as u64 + 7;
        // (log, what the fold alone must end with)
        let cases: [(Vec<u8>, &str); 6] = [
            // Intact records follow: corruption at the refused record.
            (
                flawed_log(far + 100, &[(far, Flaw::NotJson)], 0),
                "intact record follows",
            ),
            // The last record: a torn tail, and the fold ends well.
            (flawed_log(far, &[(far, Flaw::NotJson)], 0), ""),
            // Only records that are not JSON follow it: a torn tail.
            (
                flawed_log(
                    handover + 3,
                    &[
                        (handover + 1, Flaw::NotJson),
                        (handover + 2, Flaw::NotJson),
                        (handover + 3, Flaw::NotJson),
                    ],
                    0,
                ),
                "",
            ),
            // Damage after it, and then a torn last line.
            (
                flawed_log(far + 3, &[(far, Flaw::NotJson), (far + 1, Flaw::Crc)], 5),
                "",
            ),
            // A gap on the same line: the data's error is the one given.
            (
                flawed_log(far + 10, &[(far, Flaw::NotJsonAndGap)], 0),
                "intact record follows",
            ),
            // Right after the handover.
            (
                flawed_log(far, &[(handover, Flaw::NotJson)], 0),
                "intact record follows",
            ),
        ];
        for (bytes, error) in cases {
            let alone = finished(&bytes, folded_alone);
            let handed_over = finished(&bytes, folded_handed_over);
            match &alone.0 .2 {
                Err(found) => assert!(found.contains(error), "{found}"),
                Ok(()) => {
                    assert!(error.is_empty());
                    let tail = alone
                        .1
                        .clone()
                        .expect("a finished read")
                        .expect("a torn tail");
                    assert!(tail.is_some(), "the refused record is a torn tail");
                }
            }
            assert!(alone.0 .1.len() as u64 >= FOLDED_BEFORE_HANDOVER);
            assert_eq!(handed_over, alone);
        }
    }

    #[test]
    fn a_file_is_read_again_from_the_record_the_fold_refused() {
        let far = FOLDED_BEFORE_HANDOVER + 2 * BATCH_RECORDS as u64 + 7;
        let folder = tempfile::tempdir().expect("a temporary folder");
        let path = folder.path().join("s.jsonl");
        for (bytes, expected) in [
            (flawed_log(far + 100, &[(far, Flaw::NotJson)], 0), false),
            (
                flawed_log(
                    far + 2,
                    &[
                        (far, Flaw::NotJson),
                        (far + 1, Flaw::NotJson),
                        (far + 2, Flaw::NotJson),
                    ],
                    0,
                ),
                true,
            ),
        ] {
            std::fs::write(&path, &bytes).expect("the log written");
            let alone = finished(&bytes, folded_alone);
            // A whole read's buffer, which the reader moves back in, and
            // one far smaller than what it read ahead, moved back from;
            // each a `BufReader`'s and blocks of shared text.
            for capacity in [crate::reader::READ_BUFFER_BYTES, 4096] {
                let open = || std::fs::File::open(&path).expect("the log opened");
                let bytes = std::io::BufReader::with_capacity(capacity, open());
                let handed_over = finished_reading(read_from(bytes), folded_handed_over);
                assert_eq!(handed_over.0 .2.is_ok(), expected);
                assert_eq!(handed_over, alone);
                let shared = SharedTextReader::with_capacity(capacity, open());
                assert_eq!(
                    finished_reading(read_from(shared), folded_handed_over),
                    alone
                );
            }
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_found_in_blocks_of_shared_text_as_in_bytes() {
        let far = FOLDED_BEFORE_HANDOVER + 2 * BATCH_RECORDS as u64 + 7;
        for (bytes, error) in [
            (
                flawed_log(far + 100, &[(far, Flaw::NotUtf8)], 0),
                Some("not UTF-8"),
            ),
            // The last line: a torn tail.
            (flawed_log(far, &[(far, Flaw::NotUtf8)], 0), None),
        ] {
            let alone = finished(&bytes, folded_alone);
            match (&alone.0 .2, error) {
                (Err(found), Some(error)) => assert!(found.contains(error), "{found}"),
                (Ok(()), None) => {
                    let tail = alone.1.clone().expect("a finished read");
                    assert!(tail.expect("a torn tail").is_some());
                }
                (ended, _) => panic!("{ended:?}"),
            }
            for block in [64, 4096, crate::reader::READ_BUFFER_BYTES] {
                let shared = SharedTextReader::with_capacity(block, Cursor::new(&bytes[..]));
                assert_eq!(
                    finished_reading(read_from(shared), folded_handed_over),
                    alone
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]

        /// Whatever is wrong with a log and wherever (before, at or after
        /// the handover, inside a batch, finished or not, in a torn tail),
        /// the fold handed over sees what a fold alone sees and ends as it
        /// ends, and the read finishes with the same torn tail.
        #[test]
        fn a_flawed_log_folds_handed_over_as_it_folds_alone(
            events in 4_200..6_600_u64,
            flaws in proptest::collection::vec(
                (
                    4_000..6_600_u64,
                    proptest::prop_oneof![
                        4 => proptest::strategy::Just(Flaw::NotJson),
                        1 => proptest::strategy::Just(Flaw::NotJsonAndGap),
                        1 => proptest::strategy::Just(Flaw::Crc),
                        1 => proptest::strategy::Just(Flaw::Gap),
                        2 => proptest::strategy::Strategy::prop_map(2..40_u64, Flaw::Batch),
                        1 => proptest::strategy::Just(Flaw::NotUtf8),
                    ],
                ),
                0..4,
            ),
            cut in proptest::prop_oneof![3 => proptest::strategy::Just(0_usize), 1 => 1..200_usize],
            block in proptest::prop_oneof![1 => 16..256_usize, 1 => 256..65_536_usize],
        ) {
            let bytes = flawed_log(events, &flaws, cut);
            let alone = finished(&bytes, folded_alone);
            let handed_over = finished(&bytes, folded_handed_over);
            proptest::prop_assert_eq!(&handed_over, &alone);
            // Read in blocks of shared text, of any size: a block that is
            // not UTF-8, or holds no whole line, is read as bytes.
            let shared = SharedTextReader::with_capacity(block, Cursor::new(&bytes[..]));
            proptest::prop_assert_eq!(
                finished_reading(read_from(shared), folded_handed_over),
                alone
            );
            // Without the chain: the same, or, for data that is not JSON
            // past the handover, a stop that asks for the fold with it.
            let (_, _, ended, _) = fold_without_chain(&bytes);
            let not_json = flaws
                .iter()
                .any(|(_, flaw)| matches!(flaw, Flaw::NotJson | Flaw::NotJsonAndGap));
            match ended {
                Ok(Folded::ChainNeeded) => proptest::prop_assert!(not_json),
                _ => assert_folds_whole_as_alone(&bytes),
            }
        }
    }

    /// What a fold reports of one event, short of the chain: what a fold
    /// without it is held to.
    type SeenUnhashed = (u64, Result<(), Violation>, u64);

    /// The projections and violation count of `state`: what a fold
    /// without the chain must agree on with one that keeps it.
    fn projected(state: &SessionState) -> (String, u64) {
        let projection = state.projection(&sessionlog_projections::Defaults::default());
        (
            serde_json::to_string(&projection).expect("a projection as JSON"),
            state.violation_count(),
        )
    }

    /// What [`fold_without_chain`] gives: the state, what it saw, how it
    /// ended, and what the stream's `finish` gave when it folded it whole.
    type FoldedWithoutChain = (
        SessionState,
        Vec<SeenUnhashed>,
        Result<Folded, String>,
        Option<Result<Option<TornTail>, String>>,
    );

    /// The fold of `bytes` by [`fold_unhashed`], then what the stream's
    /// `finish` gives when it folded the whole log.
    fn fold_without_chain(bytes: &[u8]) -> FoldedWithoutChain {
        let mut stream = reader(bytes);
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let mut seen = Vec::new();
        let ended = fold_unhashed(&mut stream, &mut state, |record, folded, state| {
            seen.push((record.seq(), folded, state.seq()));
        })
        .map_err(|error| error.to_string());
        let tail = (ended == Ok(Folded::Whole))
            .then(|| Box::new(stream).finish().map_err(|error| error.to_string()));
        (state, seen, ended, tail)
    }

    /// Asserts that a fold of `bytes` without the chain folded it whole and
    /// saw, found and projected what a fold alone does.
    #[test]
    fn a_log_of_large_records_folds_handed_over_as_it_folds_alone() {
        // Past the handover, records of 10 bytes to 1.5 MB: batches of one
        // to a few records, handed over as their bodies reach the cap.
        let large_from = FOLDED_BEFORE_HANDOVER + 100;
        let events = large_from + 24;
        let sizes = [300_000, 60_000, 1_200_000, 10, BATCH_BYTES / 4];
        let pad = |seq: u64| match seq >= large_from {
            true => sizes[(seq % 5) as usize],
            false => 0,
        };
        let clean = padded_log(events, &[], 0, pad);
        let alone = finished(&clean, folded_alone);
        let seqs: Vec<u64> = alone.0 .1.iter().map(|seen| seen.0).collect();
        assert_eq!(seqs, (1..=events).collect::<Vec<_>>());
        assert_eq!(finished(&clean, folded_handed_over), alone);
        for at in [large_from + 12, events - 1] {
            for flaw in [Flaw::NotJson, Flaw::Gap] {
                let bytes = padded_log(events, &[(at, flaw)], 0, pad);
                assert_eq!(
                    finished(&bytes, folded_handed_over),
                    finished(&bytes, folded_alone),
                    "{flaw:?} at {at}"
                );
            }
        }
        // A torn last record.
        let bytes = padded_log(events, &[], 200_000, pad);
        assert_eq!(
            finished(&bytes, folded_handed_over),
            finished(&bytes, folded_alone)
        );
    }

    fn assert_folds_whole_as_alone(bytes: &[u8]) {
        let ((state, seen, ended), tail) = finished(bytes, folded_alone);
        let (unhashed, unhashed_seen, unhashed_ended, unhashed_tail) = fold_without_chain(bytes);
        let seen: Vec<SeenUnhashed> = seen
            .into_iter()
            .map(|(seq, folded, state_seq, _)| (seq, folded, state_seq))
            .collect();
        assert_eq!(unhashed_seen, seen);
        assert_eq!(unhashed_ended, ended.map(|()| Folded::Whole));
        assert_eq!(unhashed_tail, tail);
        assert_eq!(projected(&unhashed), projected(&state));
        assert_eq!(unhashed.seq(), state.seq());
    }

    /// [`flawed_log`] without flaws, with an own seal after each seq of
    /// `seals_after` holding the chain through it.
    fn sealed_log(events: u64, seals_after: &[u64]) -> Vec<u8> {
        let id = SessionId::parse("s").expect("a valid id");
        let plain = flawed_log(events, &[], 0);
        let body = |line: &str| -> String {
            let end = line.rfind(",\"crc\":").expect("a CRC member");
            line[..end].to_owned()
        };
        let text = String::from_utf8(plain).expect("a UTF-8 log");
        let mut lines = text.split_inclusive('\n');
        let header = lines.next().expect("a header line");
        let mut chain = ChainValue::genesis(&body(header));
        let mut bytes = header.as_bytes().to_vec();
        let mut seq = 0;
        for line in lines {
            let record = sessionlog_schema::decode_event(&id, line.trim_end().as_bytes())
                .expect("a record of the plain log");
            seq += 1;
            let renumbered =
                EventRecord::new(seq, record.ts(), None, record.event_type(), record.data())
                    .encode(&id);
            chain = chain.next(&body(&renumbered));
            bytes.extend(renumbered.as_bytes());
            if seals_after.contains(&record.seq()) {
                let seal = Seal::new(&id, seq, chain, None);
                seq += 1;
                let line =
                    EventRecord::new(seq, 10, None, "seal", &seal.to_data_json()).encode(&id);
                chain = chain.next(&body(&line));
                bytes.extend(line.as_bytes());
            }
        }
        bytes
    }

    #[test]
    fn a_fold_without_the_chain_sees_and_projects_what_a_fold_alone_does() {
        // Violations on both sides of the handover.
        assert_folds_whole_as_alone(&log(4_000, None));
        // Damage after the handover that a plain read refuses.
        assert_folds_whole_as_alone(&log(4_000, Some(18_001)));
        // A short log, folded before any handover, and one sealed in its
        // first events, which keeps its chain past the handover.
        assert_folds_whole_as_alone(&log(10, None));
        let early = sealed_log(9_000, &[100, 8_000]);
        assert_folds_whole_as_alone(&early);
        let (state, _, ended, _) = fold_without_chain(&early);
        assert_eq!(ended, Ok(Folded::Whole));
        assert_eq!(state.last_own_seal_seq(), Some(8_002));
        let ((alone, _, _), _) = finished(&early, folded_alone);
        assert_eq!(state.chain(), alone.chain());
        assert_eq!(state.violation_count(), 0);
    }

    #[test]
    fn an_own_seal_past_the_first_events_of_an_unsealed_start_asks_for_the_chain() {
        for seal_after in [FOLDED_BEFORE_HANDOVER + 1, 8_000] {
            let bytes = sealed_log(9_000, &[seal_after]);
            // The seal holds: a fold alone finds nothing wrong.
            let ((alone, _, ended), _) = finished(&bytes, folded_alone);
            assert_eq!((ended, alone.violation_count()), (Ok(()), 0));
            let (state, seen, ended, tail) = fold_without_chain(&bytes);
            assert_eq!(ended, Ok(Folded::ChainNeeded));
            assert_eq!(tail, None);
            // Stopped before the seal, which was not folded.
            assert_eq!(state.seq(), seal_after);
            assert_eq!(seen.last().map(|seen| seen.0), Some(seal_after));
        }
    }

    #[test]
    fn data_that_is_not_json_past_the_handover_asks_for_the_chain() {
        let far = FOLDED_BEFORE_HANDOVER + 2 * BATCH_RECORDS as u64 + 7;
        let bytes = flawed_log(far + 100, &[(far, Flaw::NotJson)], 0);
        let (_, _, ended, _) = fold_without_chain(&bytes);
        assert_eq!(ended, Ok(Folded::ChainNeeded));
    }

    #[test]
    #[should_panic(expected = "the caller's own panic")]
    fn a_panic_of_the_callback_on_the_fold_thread_goes_on_on_the_callers() {
        let bytes = log(2_000, None);
        let mut stream = reader(&bytes);
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let _ = fold_stream(&mut stream, &mut state, |record, _, _| {
            if record.seq() == 9_000 {
                panic!("the caller's own panic");
            }
        });
    }
}
