//! [`fold_stream`]: a long read's fold on a thread of its own, so that
//! reading a log (its lines split, CRC-checked and decoded) and folding it
//! (the hash chain, the data's view, the rules) each take a core.
//!
//! The fold is the same sequential fold over the same records in the same
//! order: the reading thread hands over batches of records as a plain read
//! decodes them, and the folding thread applies them one by one to the one
//! state, so what it finds is what a fold on one thread finds.

use std::sync::mpsc;
use std::thread;

use sessionlog_projections::{SessionState, Violation};
use sessionlog_schema::EventRecord;

use crate::reader::{FoldedEvent, SessionStream};
use crate::StoreError;

/// How many events a fold takes on the reading thread before it moves to a
/// thread of its own: a short session is folded before a thread would have
/// started, and a store-wide read folds thousands of them.
const FOLDED_BEFORE_HANDOVER: u64 = 4096;

/// How many records the reading thread hands over at once: enough that
/// the two threads meet once per few hundred kilobytes of log.
const BATCH_RECORDS: usize = 1024;

/// How many batches may wait for the folding thread before the reading
/// thread waits for it.
const BATCHES_QUEUED: usize = 3;

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
    if fold_here(stream, state, &mut each, FOLDED_BEFORE_HANDOVER)? {
        return Ok(());
    }
    let (batches, to_fold) = mpsc::sync_channel::<Vec<EventRecord>>(BATCHES_QUEUED);
    let (spare, spares) = mpsc::channel::<Vec<EventRecord>>();
    let handed_over = thread::scope(|scope| {
        let (state, each) = (&mut *state, &mut each);
        let folder = thread::Builder::new()
            .name("sessionlog-fold".to_owned())
            .spawn_scoped(scope, move || {
                for batch in to_fold {
                    for record in &batch {
                        let folded = state.apply(record);
                        each(record, folded, state);
                    }
                    // The records go back to be freed by the thread that
                    // allocated them, whose allocator then needs no lock.
                    // The reader may be done and gone: the batch is then
                    // freed here.
                    let _ = spare.send(batch);
                }
            });
        // A thread that cannot be had (a limit on threads, say) leaves the
        // fold on this one.
        let folder = folder.ok()?;
        let read = hand_over(stream, &batches, &spares);
        drop(batches);
        if let Err(panic) = folder.join() {
            std::panic::resume_unwind(panic);
        }
        Some(read)
    });
    match handed_over {
        Some(read) => read,
        None => fold_here(stream, state, &mut each, u64::MAX).map(drop),
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
fn hand_over<S: SessionStream + ?Sized>(
    stream: &mut S,
    batches: &mpsc::SyncSender<Vec<EventRecord>>,
    spares: &mpsc::Receiver<Vec<EventRecord>>,
) -> Result<(), StoreError> {
    loop {
        let mut batch = match spares.try_recv() {
            Ok(mut folded) => {
                folded.clear();
                folded
            }
            Err(_) => Vec::with_capacity(BATCH_RECORDS),
        };
        let mut ended = None;
        while batch.len() < BATCH_RECORDS {
            match stream.next_event() {
                Ok(Some(record)) => batch.push(record),
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
        // A fold that stopped has panicked: the join says so.
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

    use sessionlog_schema::{SessionHeader, SessionId};

    use super::*;
    use crate::reader::LogReader;

    /// What a fold reports of one event: its seq, what applying it
    /// returned, and the state's seq and chain after it.
    type Seen = (u64, Result<(), Violation>, u64, [u8; 32]);

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
        LogReader::new(Cursor::new(bytes), Path::new("fold.jsonl"), None)
            .expect("a readable header")
    }

    /// The fold on one thread, event by event.
    fn fold_alone(bytes: &[u8]) -> (SessionState, Vec<Seen>, Result<(), String>) {
        let mut stream = reader(bytes);
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let mut seen = Vec::new();
        let ended = loop {
            match stream.next_event_folded(&mut state) {
                Ok(Some(FoldedEvent { record, folded })) => {
                    seen.push((record.seq(), folded, state.seq(), *state.chain().as_bytes()));
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error.to_string()),
            }
        };
        (state, seen, ended)
    }

    /// The fold of [`fold_stream`].
    fn fold_handed_over(bytes: &[u8]) -> (SessionState, Vec<Seen>, Result<(), String>) {
        let mut stream = reader(bytes);
        let mut state =
            SessionState::with_header_body(stream.header().clone(), stream.header_body());
        let mut seen = Vec::new();
        let ended = fold_stream(&mut stream, &mut state, |record, folded, state| {
            seen.push((record.seq(), folded, state.seq(), *state.chain().as_bytes()));
        });
        (state, seen, ended.map_err(|error| error.to_string()))
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
