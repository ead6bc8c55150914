//! Reading ahead in key order inside a held read
//! ([`SqliteStore::hold_read`](super::SqliteStore::hold_read)).
//!
//! A store-wide `verify` or `stats` streams every session in id order. One
//! statement per session row and one per session's rows cost a seek each
//! through the trees of the whole file, and a statement's start and end,
//! for a handful of rows. Inside a held read the database is one snapshot,
//! so the rows can instead be read ahead in chunks, in key order: the
//! session rows from the id asked for on, and the event rows from
//! (session, seq) on, across sessions. A later request that falls inside
//! what was read ahead is served from it; any other (an id asked for twice,
//! out of order, or past the chunk) reads a new chunk from where it asks.
//! The rows given back are exactly those the per-session statements give
//! (the same columns, `seq >= from`), and are checked by the same code.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;

use rusqlite::{params, Connection};
use sessionlog_schema::SessionId;

use super::committer::sqlite_error;
use crate::sql::checks::RowPage;
use crate::sql::HeaderRow;
use crate::StoreError;

/// Session rows one read ahead takes: the literal `LIMIT` of its
/// statement (a bound LIMIT makes SQLite prepare the statement again at
/// each read).
macro_rules! session_chunk {
    () => {
        128
    };
}

/// Event rows one read ahead takes (the same bound as a page of one
/// session's rows).
macro_rules! event_chunk {
    () => {
        512
    };
}
const EVENT_CHUNK: usize = event_chunk!();
const SESSION_CHUNK: usize = session_chunk!();

/// What was read ahead in one held read.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    /// The held read (`Shared::held_reads`) that reads ahead, if any.
    held: Option<u64>,
    sessions: SessionsAhead,
    events: EventsAhead,
}

/// Session rows read ahead: every row whose id is at or past `start`
/// (after it, when `start_exclusive`) up to the last one held is in
/// `rows`, and past it too when `at_end`.
#[derive(Debug, Default)]
struct SessionsAhead {
    start: Option<(String, bool)>,
    rows: VecDeque<(String, HeaderRow)>,
    at_end: bool,
}

/// Event rows read ahead, grouped by session: every row whose key
/// (session, seq) is at or past `start` up to the last one held is in
/// `groups` (each a range of the rows of `page` not given out yet), and
/// past it too when `at_end`.
#[derive(Debug, Default)]
struct EventsAhead {
    start: Option<(String, i128)>,
    page: RowPage,
    groups: VecDeque<(String, Range<usize>)>,
    at_end: bool,
}

impl Sweep {
    /// Reads ahead in the held read `held` from now on.
    pub(super) fn start(&mut self, held: u64) {
        *self = Sweep {
            held: Some(held),
            ..Sweep::default()
        };
    }

    /// Reads no more ahead in the held read (after a read ahead failed:
    /// reads go on one session at a time).
    pub(super) fn stop(&mut self) {
        *self = Sweep::default();
    }

    /// Whether the held read `held` reads ahead.
    pub(super) fn reads(&self, held: u64) -> bool {
        self.held == Some(held)
    }

    /// The session row of `id` (`None`: there is none), read ahead with
    /// the rows after it.
    pub(super) fn session_row(
        &mut self,
        connection: &Connection,
        path: &Path,
        id: &SessionId,
    ) -> Result<Option<HeaderRow>, StoreError> {
        let ahead = &mut self.sessions;
        let id = id.as_str();
        let covered =
            ahead
                .start
                .as_ref()
                .is_some_and(|(start, exclusive)| match id.cmp(start.as_str()) {
                    std::cmp::Ordering::Greater => true,
                    std::cmp::Ordering::Equal => !exclusive,
                    std::cmp::Ordering::Less => false,
                });
        if covered {
            while ahead
                .rows
                .front()
                .is_some_and(|(front, _)| front.as_str() < id)
            {
                ahead.rows.pop_front();
            }
        }
        if !covered || (ahead.rows.is_empty() && !ahead.at_end) {
            ahead.fetch(connection, path, id)?;
        }
        let found = match ahead.rows.front() {
            Some((front, _)) if front == id => ahead.rows.pop_front().map(|(_, row)| row),
            _ => None,
        };
        ahead.start = Some((id.to_owned(), found.is_some()));
        Ok(found)
    }

    /// Up to `max` rows of session `id` from seq `from` on, read ahead
    /// with the rows after them, into `page` (emptied first), and whether
    /// they are all of its rows from `from` on.
    pub(super) fn rows_to_end(
        &mut self,
        connection: &Connection,
        path: &Path,
        id: &SessionId,
        from: u64,
        max: usize,
        page: &mut RowPage,
    ) -> Result<bool, StoreError> {
        let ahead = &mut self.events;
        let id = id.as_str();
        let mut from = i128::from(crate::sql::lowest_row_seq(from));
        page.clear();
        loop {
            if from > i128::from(i64::MAX) {
                // No row has a seq past the largest integer.
                return Ok(true);
            }
            let covered = ahead
                .start
                .as_ref()
                .is_some_and(|(start, seq)| (id, from) >= (start.as_str(), *seq));
            if covered {
                ahead.skip_before(id, from);
            }
            if !covered || (ahead.groups.is_empty() && !ahead.at_end) {
                ahead.fetch(connection, path, id, from)?;
            }
            let whole = match ahead.groups.front_mut() {
                Some((session, group)) if session == id => {
                    while page.rows.len() < max && !page.is_full_of_bytes() {
                        let Some(index) = group.next() else { break };
                        let row = &ahead.page.rows[index];
                        from = i128::from(row.seq) + 1;
                        page.push_from(&ahead.page, row);
                    }
                    if group.start < group.end {
                        // A full page, and more rows of the session.
                        Some(false)
                    } else if ahead.groups.len() > 1 || ahead.at_end {
                        // The next row held is another session's, or
                        // there is none: every row was read.
                        ahead.groups.pop_front();
                        Some(true)
                    } else {
                        // The rows held end with this session's: read on.
                        ahead.groups.pop_front();
                        let full = page.rows.len() == max || page.is_full_of_bytes();
                        full.then_some(false)
                    }
                }
                // Rows held, the first another session's; or none at all.
                Some(_) => Some(true),
                None => ahead.at_end.then_some(true),
            };
            ahead.start = Some((id.to_owned(), from));
            if let Some(whole) = whole {
                return Ok(whole);
            }
        }
    }
}

impl SessionsAhead {
    /// Reads the session rows from `id` on.
    fn fetch(&mut self, connection: &Connection, path: &Path, id: &str) -> Result<(), StoreError> {
        let sql = concat!(
            "SELECT id, header_body, header_crc, last_seq, seed_source, created_at, cwd,
               parent_session, seed_length, delegation_depth, sandbox_mode, approval_policy
             FROM sessions WHERE id >= ?1 ORDER BY id LIMIT ",
            session_chunk!()
        );
        self.rows.clear();
        let mut statement = connection
            .prepare_cached(sql)
            .map_err(sqlite_error("read a header", path))?;
        let mut found = statement
            .query([id])
            .map_err(sqlite_error("read a header", path))?;
        while let Some(row) = found.next().map_err(sqlite_error("read a header", path))? {
            let read = || -> rusqlite::Result<(String, HeaderRow)> {
                Ok((
                    row.get(0)?,
                    HeaderRow {
                        body: row.get(1)?,
                        crc: row.get(2)?,
                        last_seq: row.get(3)?,
                        seed_source: row.get(4)?,
                        columns: super::header_columns(row, 5)?,
                    },
                ))
            };
            self.rows
                .push_back(read().map_err(sqlite_error("read a header", path))?);
        }
        self.at_end = self.rows.len() < SESSION_CHUNK;
        self.start = Some((id.to_owned(), false));
        Ok(())
    }
}

impl EventsAhead {
    /// Drops the rows held before (`id`, `from`).
    fn skip_before(&mut self, id: &str, from: i128) {
        while let Some((session, group)) = self.groups.front_mut() {
            match session.as_str().cmp(id) {
                std::cmp::Ordering::Less => {
                    self.groups.pop_front();
                }
                std::cmp::Ordering::Equal => {
                    let rows = &self.page.rows[group.clone()];
                    group.start += rows
                        .iter()
                        .take_while(|row| i128::from(row.seq) < from)
                        .count();
                    if group.start >= group.end {
                        self.groups.pop_front();
                    }
                    return;
                }
                std::cmp::Ordering::Greater => return,
            }
        }
    }

    /// Reads the event rows from (`id`, `from`) on.
    fn fetch(
        &mut self,
        connection: &Connection,
        path: &Path,
        id: &str,
        from: i128,
    ) -> Result<(), StoreError> {
        let sql = concat!(
            "SELECT session_id, seq, ts, type, batch, body, crc FROM events
             WHERE (session_id, seq) >= (?1, ?2) ORDER BY session_id, seq LIMIT ",
            event_chunk!()
        );
        self.groups.clear();
        self.page.clear();
        let seq = i64::try_from(from).unwrap_or(i64::MAX);
        let mut statement = connection
            .prepare_cached(sql)
            .map_err(sqlite_error("read events", path))?;
        let mut found = statement
            .query(params![id, seq])
            .map_err(sqlite_error("read events", path))?;
        let mut count = 0;
        while let Some(row) = found.next().map_err(sqlite_error("read events", path))? {
            let page = &mut self.page;
            let session = super::push_event_row(page, row, 1)
                .and_then(|()| Ok(row.get_ref(0)?.as_str()?))
                .map_err(sqlite_error("read events", path))?;
            match self.groups.back_mut() {
                Some((last, group)) if last == session => group.end = count + 1,
                _ => self
                    .groups
                    .push_back((session.to_owned(), count..count + 1)),
            }
            count += 1;
            if self.page.is_full_of_bytes() {
                break;
            }
        }
        // Rows cut by their bytes may have rows after them.
        self.at_end = count < EVENT_CHUNK && !self.page.is_full_of_bytes();
        self.start = Some((id.to_owned(), from));
        Ok(())
    }
}
