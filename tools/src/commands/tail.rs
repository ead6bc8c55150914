//! `sessionlog tail`: the last events of a session, and with `-f` every new
//! one as another process appends it.
//!
//! A JSONL log is followed with the store's `LogFollower`, which looks
//! whenever the log's folder changes (`Wake`: inotify) and at least every
//! 100 ms: a look that finds the file unchanged reads nothing, and one that
//! finds it grown reads only the new lines, after checking that the last
//! line it read is still in place. Another file under the name, a file
//! shorter than what was read or a rewritten last line make it read the log
//! again from the start, printing only the events above the last one
//! printed; so a writer restart, the cut of a torn tail, or a log replaced
//! by a new file can neither repeat an event nor skip one. A SQLite session
//! is looked at the same way, with `Store::events_from`, and a PostgreSQL
//! session too, woken by a notification of each append instead; `-n N`
//! reads only a database session's last N rows, from the last seq its
//! session row records.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::{LogFollower, Store, StoreError, Wake};

use crate::cli::SessionArgs;
use crate::commands::replay::describe;
use crate::target::{SessionRef, Target};
use crate::{exit, warn};

/// The longest `-f` waits before it looks at the log again; a change in
/// the log's folder ends the wait earlier (`Wake`).
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What to print first.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// The last N events.
    Last(u64),
    /// Every event from this seq on.
    From(u64),
}

/// Runs `tail`.
pub fn run(args: &SessionArgs, start: Start, follow: bool, json: bool) -> Result<u8> {
    let target = Target::open(&args.store)?;
    let session = target.session(args.session.as_deref())?;
    let mut tail = Tail {
        source: Source::of(&target, &session),
        header: None,
        printed: 0,
        latest_seq_read: None,
        json,
        out: crate::terminal::stdout(crate::terminal::Mode::Json),
    };
    tail.run(start, follow, &session)?;
    Ok(exit::OK)
}

/// Where the events come from.
enum Source<'a> {
    /// A JSONL log: read once, then followed.
    File {
        target: &'a Target,
        path: PathBuf,
        /// The session its header must name (none for a lone file).
        expected_id: Option<SessionId>,
    },
    /// A database session, queried from the next seq.
    Database { store: &'a Store },
}

struct Tail<'a, W: Write> {
    source: Source<'a>,
    header: Option<SessionHeader>,
    /// The last seq printed (0: none).
    printed: u64,
    /// The last seq of the latest read.
    latest_seq_read: Option<u64>,
    json: bool,
    out: W,
}

impl<'a> Source<'a> {
    /// The file that changes when the session grows: the log, or the
    /// database (its `-wal` beside it).
    fn path(&self) -> &std::path::Path {
        match self {
            Source::File { path, .. } => path,
            Source::Database { store } => store.path(),
        }
    }

    fn of(target: &'a Target, session: &SessionRef) -> Source<'a> {
        match target {
            Target::File(path) => Source::File {
                target,
                path: path.clone(),
                expected_id: None,
            },
            Target::Store(store @ Store::Jsonl(_)) => Source::File {
                target,
                path: store.session_path(&session.id),
                expected_id: Some(session.id.clone()),
            },
            Target::Store(store) => Source::Database { store },
        }
    }
}

impl<W: Write> Tail<'_, W> {
    fn run(&mut self, start: Start, follow: bool, session: &SessionRef) -> Result<()> {
        // Watching starts before the first read, so that nothing appended
        // after it goes unnoticed.
        let mut wake = follow.then(|| Wake::watching(self.source.path()));
        let first = self.read_new(session, self.first_seq(start, session)?)?;
        let shown: Vec<EventRecord> = match start {
            Start::From(from) => first.into_iter().filter(|r| r.seq() >= from).collect(),
            Start::Last(count) => {
                let mut last = VecDeque::new();
                for record in first {
                    if last.len() as u64 == count {
                        last.pop_front();
                    }
                    if count > 0 {
                        last.push_back(record);
                    }
                }
                last.into()
            }
        };
        if let Start::From(from) = start {
            self.printed = from.saturating_sub(1).max(self.printed);
        }
        self.print(&shown)?;
        if let Some(last) = self.latest_seq_read {
            self.printed = self.printed.max(last);
        }
        let Some(wake) = &mut wake else {
            return Ok(());
        };
        let mut follower = match &self.source {
            Source::File {
                path, expected_id, ..
            } => Some(LogFollower::new(
                path,
                expected_id.clone(),
                self.printed + 1,
            )),
            Source::Database { .. } => None,
        };
        // A PostgreSQL session wakes the loop on its notifications, any
        // other on a change in its folder (`Wake`); each still reads by seq
        // and looks at least every poll interval. After a wake that found
        // nothing new yet (a commit still in flight), the next looks come
        // sooner: 1, 2, 4, … ms.
        let mut listener = match &self.source {
            Source::Database {
                store: Store::Postgres(store),
            } => store.listener(&session.id).ok(),
            _ => None,
        };
        let mut soon: Option<Duration> = None;
        loop {
            let timeout = soon.unwrap_or(POLL_INTERVAL);
            let woken = match listener.as_mut().map(|listener| listener.wait(timeout)) {
                Some(Ok(woken)) => woken,
                Some(Err(_)) => {
                    listener = None;
                    false
                }
                None => wake.wait(timeout),
            };
            let records = match &mut follower {
                Some(follower) => follower.poll(usize::MAX)?,
                None => self.read_new(session, self.printed + 1)?,
            };
            soon = match (records.is_empty(), woken, soon) {
                (false, ..) => None,
                (true, true, _) => Some(Duration::from_millis(1)),
                (true, false, Some(delay)) => {
                    Some(delay * 2).filter(|delay| *delay < POLL_INTERVAL)
                }
                (true, false, None) => None,
            };
            self.print(&records)?;
        }
    }

    /// The seq the first read starts at: a database reads only the last
    /// `count` events (an index range from the seq its session row
    /// records); a log file is read from the top.
    fn first_seq(&self, start: Start, session: &SessionRef) -> Result<u64> {
        let (Source::Database { store }, Start::Last(count)) = (&self.source, start) else {
            return Ok(1);
        };
        Ok(match store.recorded_last_seq(&session.id)? {
            Some(last) => (last + 1).saturating_sub(count).max(1),
            None => 1,
        })
    }

    /// Events with seq ≥ `from` read now: a log's whole good prefix (read
    /// once, before following; a torn tail is named), or a database's rows
    /// from `from` on.
    fn read_new(&mut self, session: &SessionRef, from: u64) -> Result<Vec<EventRecord>> {
        self.latest_seq_read = None;
        let records = match &self.source {
            Source::File { target, .. } => {
                let mut stream = target.stream(session)?;
                if self.header.is_none() {
                    self.header = Some(stream.header().clone());
                }
                let mut records = Vec::new();
                while let Some(record) = stream.next_event()? {
                    if record.seq() >= from {
                        records.push(record);
                    }
                }
                if let Some(torn) = stream.finish()? {
                    warn(format!(
                        "{}: ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                        session.label,
                        torn.bytes,
                        torn.position.line,
                        torn.position.offset,
                        torn.reason
                    ));
                }
                records
            }
            Source::Database { store } => {
                if self.header.is_none() {
                    self.header = Some(store.events(&session.id)?.0);
                }
                store
                    .events_from(&session.id, from)?
                    .collect::<Result<Vec<_>, StoreError>>()?
            }
        };
        self.latest_seq_read = records.last().map(EventRecord::seq);
        Ok(records)
    }

    /// Prints the records above the last seq printed, in order.
    fn print(&mut self, records: &[EventRecord]) -> Result<()> {
        for record in records {
            if record.seq() <= self.printed {
                continue;
            }
            if record.seq() != self.printed + 1 && self.printed > 0 {
                warn(format!(
                    "the log now continues at seq {} after seq {}: it was replaced",
                    record.seq(),
                    self.printed
                ));
            }
            if self.json {
                let header = self
                    .header
                    .as_ref()
                    .unwrap_or_else(|| unreachable!("the header is read before any event"));
                let entry = describe(header, record, |_| None);
                serde_json::to_writer(&mut self.out, &entry)?;
                self.out.write_all(b"\n")?;
            } else {
                self.out.write_all(record.body().as_bytes())?;
                self.out.write_all(b"}\n")?;
            }
            self.printed = record.seq();
        }
        self.out.flush()?;
        Ok(())
    }
}
