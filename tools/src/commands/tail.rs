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
//! session too, woken by a notification of each append instead. `-n N`
//! reads only the last N events: a log from its end (`read_last_events`,
//! which reports damage only in what it read), a database session's rows
//! from the last seq its session row records; `-f` then follows a log from
//! the end of that read (`LogFollower::after`), never from its start. What
//! is printed is never gathered first: only the events shown are held.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use sessionlog_store::{
    read_last_events, LastEvents, LogFollower, ReadSoFar, RowFollower, Store, Wake,
};

use crate::cli::SessionArgs;
use crate::commands::replay::describe;
use crate::target::{SessionRef, Target};
use crate::{exit, warn};

/// The longest `-f` waits before it looks at the log again; a change in
/// the log's folder ends the wait earlier (`Wake`).
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How often `tail -f` tries again when the PostgreSQL server dropped its
/// connection.
const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

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
    /// A database session, queried from the last seq read, which must
    /// still hold what was read ([`RowFollower`]).
    Database { store: &'a Store },
}

/// Where following goes on from once the first read is done.
enum ReadEnd<'a> {
    /// A log, with what was read of it.
    Log {
        path: PathBuf,
        expected_id: Option<SessionId>,
        read: LogRead,
    },
    /// A database session, from the last row read.
    Rows(RowFollower, &'a Store),
}

/// What the first read of a log read: its end, or all of it from its
/// start (what following must find again there).
enum LogRead {
    FromEnd(Box<LastEvents>),
    FromStart(Box<ReadSoFar>),
}

/// What `-f` polls.
enum Following<'a> {
    Log(Box<LogFollower>),
    Rows(RowFollower, &'a Store),
}

struct Tail<'a, W: Write> {
    source: Source<'a>,
    header: Option<SessionHeader>,
    /// The last seq printed (0: none).
    printed: u64,
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

impl<'a, W: Write> Tail<'a, W> {
    fn run(&mut self, start: Start, follow: bool, session: &SessionRef) -> Result<()> {
        // Watching starts before the first read, so that nothing appended
        // after it goes unnoticed.
        let mut wake = follow.then(|| Wake::watching(self.source.path()));
        if let Start::From(from) = start {
            self.printed = from.saturating_sub(1);
        }
        let end = self.first_read(start, session)?;
        let Some(wake) = &mut wake else {
            return Ok(());
        };
        // A log whose end was read goes on from there: following a long
        // log does not read it whole.
        let mut following = match end {
            ReadEnd::Log {
                path,
                expected_id,
                read: LogRead::FromEnd(last),
            } => Following::Log(Box::new(LogFollower::after(&path, expected_id, &last))),
            // What was printed from the start must be what the follower
            // then reads there: another history put in the log's place
            // meanwhile ends the command, never spliced on.
            ReadEnd::Log {
                path,
                expected_id,
                read: LogRead::FromStart(read),
            } => Following::Log(Box::new(LogFollower::after_read(
                &path,
                expected_id,
                &read,
                self.printed + 1,
            ))),
            ReadEnd::Rows(rows, store) => Following::Rows(rows, store),
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
        // A PostgreSQL server that drops the connection (a restart, a
        // failover, an administrator) is not the end of following: each
        // look connects again, once a second, until one succeeds.
        let mut lost = false;
        // When a listener that was there lost its connection: it is made
        // again at most once a second, the looks polling meanwhile.
        let mut listen_again_at: Option<Instant> = None;
        loop {
            let timeout = match lost {
                true => RECONNECT_INTERVAL,
                false => soon.unwrap_or(POLL_INTERVAL),
            };
            let woken = match listener.as_mut().map(|listener| listener.wait(timeout)) {
                Some(Ok(woken)) => woken,
                Some(Err(_)) => {
                    listener = None;
                    listen_again_at = Some(Instant::now() + RECONNECT_INTERVAL);
                    false
                }
                None => wake.wait(timeout),
            };
            let polled = match &mut following {
                Following::Log(follower) => follower.poll(usize::MAX),
                Following::Rows(follower, store) => follower.poll(store, usize::MAX),
            };
            let records = match polled {
                Ok(records) => records,
                Err(error) if self.reconnects(&error) => {
                    if !lost {
                        warn(format!(
                            "{error}; connecting again every {} s",
                            RECONNECT_INTERVAL.as_secs()
                        ));
                    }
                    lost = true;
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            if std::mem::take(&mut lost) {
                warn("connected again; following on");
                if let Source::Database {
                    store: Store::Postgres(store),
                } = &self.source
                {
                    listener = listener.or_else(|| store.listener(&session.id).ok());
                }
            }
            // The listener's own connection ended (the reads' did not).
            if listener.is_none() && listen_again_at.is_some_and(|at| Instant::now() >= at) {
                if let Source::Database {
                    store: Store::Postgres(store),
                } = &self.source
                {
                    listener = store.listener(&session.id).ok();
                }
                listen_again_at = listener
                    .is_none()
                    .then(|| Instant::now() + RECONNECT_INTERVAL);
            }
            for record in &records {
                self.print(record)?;
            }
            let found = records.len();
            self.out.flush()?;
            soon = match (found == 0, woken, soon) {
                (false, ..) => None,
                (true, true, _) => Some(Duration::from_millis(1)),
                (true, false, Some(delay)) => {
                    Some(delay * 2).filter(|delay| *delay < POLL_INTERVAL)
                }
                (true, false, None) => None,
            };
        }
    }

    /// Prints what the command shows before it follows: a log's last
    /// `count` events read from its end, or its events from a seq on read
    /// as they stream; a database's last `count` rows (an index range from
    /// the seq its session row records) or its rows from a seq on
    /// ([`first_rows`](Self::first_rows)). Only the events printed are
    /// held. Returns where following goes on from.
    fn first_read(&mut self, start: Start, session: &SessionRef) -> Result<ReadEnd<'a>> {
        let (target, path, expected_id) = match &self.source {
            Source::File {
                target,
                path,
                expected_id,
            } => (*target, path.clone(), expected_id.clone()),
            Source::Database { store } => {
                let store: &'a Store = store;
                return self.first_rows(start, session, store);
            }
        };
        let (torn, read) = match start {
            Start::Last(count) => {
                let count = usize::try_from(count).unwrap_or(usize::MAX);
                let last = read_last_events(&path, expected_id.clone(), count)?;
                self.header = Some(last.header.header.clone());
                for record in &last.events {
                    self.print(record)?;
                }
                self.printed = self.printed.max(last.last_seq);
                let torn = last.torn_tail.clone();
                (torn, LogRead::FromEnd(Box::new(last)))
            }
            Start::From(from) => {
                let mut stream = target.stream(session)?;
                self.header = Some(stream.header().clone());
                let mut read = ReadSoFar::new(stream.header().clone());
                while let Some(record) = stream.next_event()? {
                    read.add(&record);
                    if record.seq() >= from {
                        self.print(&record)?;
                    }
                }
                (stream.finish()?, LogRead::FromStart(Box::new(read)))
            }
        };
        if let Some(torn) = torn {
            warn(format!(
                "{}: ignoring a torn tail of {} bytes at line {} (byte offset {}): {}",
                session.label, torn.bytes, torn.position.line, torn.position.offset, torn.reason
            ));
        }
        self.out.flush()?;
        Ok(ReadEnd::Log {
            path,
            expected_id,
            read,
        })
    }

    /// [`first_read`](Self::first_read) of a database session: its last
    /// `count` rows (an index range from the seq its session row records)
    /// or its rows from a seq on.
    fn first_rows(
        &mut self,
        start: Start,
        session: &SessionRef,
        store: &'a Store,
    ) -> Result<ReadEnd<'a>> {
        let (header, _) = store.records(&session.id)?;
        self.header = Some(header.header);
        let from = match start {
            Start::From(from) => from,
            Start::Last(count) => match store.recorded_last_seq(&session.id)? {
                Some(last) => (last + 1).saturating_sub(count).max(1),
                None => 1,
            },
        };
        // The events before `from` are passed over, printed or not (`-n 0`
        // prints none): following goes on after them, and checks that the
        // session still holds the last one printed.
        self.printed = self.printed.max(from.saturating_sub(1));
        let mut last = None;
        for record in store.events_from(&session.id, from)? {
            let record = record?;
            self.print(&record)?;
            last = Some(record);
        }
        self.out.flush()?;
        let follower = RowFollower::after(session.id.clone(), header.body, last, self.printed + 1);
        Ok(ReadEnd::Rows(follower, store))
    }

    /// Prints `record` when it is above the last seq printed.
    /// Whether following goes on after `error`: a PostgreSQL server that
    /// is out of reach for now.
    fn reconnects(&self, error: &sessionlog_store::StoreError) -> bool {
        matches!(
            &self.source,
            Source::Database {
                store: Store::Postgres(_)
            }
        ) && error.is_connection_lost()
    }

    fn print(&mut self, record: &EventRecord) -> Result<()> {
        if record.seq() <= self.printed {
            return Ok(());
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
        Ok(())
    }
}
