//! Following a database session: [`RowFollower`] reads the rows after the
//! last one it delivered, by seq, and first checks that the session still
//! has the header it read and the last record it delivered, unchanged.
//!
//! A database never loses rows to a torn tail, so a session whose header
//! changed, or whose last delivered row is gone or holds another record,
//! was replaced or rewritten from outside (another history copied in, rows
//! deleted by hand). What comes after the change is never spliced onto
//! what was delivered: the poll fails with `HistoryChanged`, as a
//! [`LogFollower`](crate::LogFollower) fails for a log whose file was
//! replaced. Rows before the last one delivered are not read again: an
//! edit of those alone, leaving the header and that row as they were, is
//! for `verify` (and a seal) to find, as it is for a log edited in place.

use std::path::PathBuf;

use sessionlog_schema::{EventRecord, SessionId};

use crate::{store_display, Store, StoreError};

/// Follows one session of a SQLite or PostgreSQL store. See the module docs.
#[derive(Debug, Clone)]
pub struct RowFollower {
    id: SessionId,
    /// The next seq to deliver.
    next_seq: u64,
    /// The header's body as the first poll read it.
    header: Option<String>,
    /// The last record delivered (or passed over at the start), which the
    /// session must still hold.
    last: Option<EventRecord>,
}

impl RowFollower {
    /// A follower of session `id` from `from_seq` on (1 for all of it).
    pub fn new(id: SessionId, from_seq: u64) -> RowFollower {
        RowFollower {
            id,
            next_seq: from_seq.max(1),
            header: None,
            last: None,
        }
    }

    /// A follower that delivers from `next_seq` on, after a read of the
    /// same session that found the header whose body is `header_body` and
    /// ended with `last` (a seq below `next_seq`), which the session must
    /// still hold.
    pub fn after(
        id: SessionId,
        header_body: String,
        last: Option<EventRecord>,
        next_seq: u64,
    ) -> RowFollower {
        RowFollower {
            id,
            next_seq: next_seq.max(1),
            header: Some(header_body),
            last,
        }
    }

    /// Up to `max` events not delivered yet, after checking that the
    /// session still holds the header and the last record delivered.
    pub fn poll(&mut self, store: &Store, max: usize) -> Result<Vec<EventRecord>, StoreError> {
        let (header, _) = store.records(&self.id)?;
        match &self.header {
            Some(known) if *known != header.body => {
                return Err(self.changed(store, "the session now holds another header".to_owned()))
            }
            Some(_) => {}
            None => self.header = Some(header.body),
        }
        let from = self.last.as_ref().map_or(self.next_seq, EventRecord::seq);
        let mut rows = store.events_from(&self.id, from)?;
        if let Some(last) = &self.last {
            match rows.next().transpose()? {
                Some(found) if found.seq() == last.seq() && found.body() == last.body() => {}
                Some(found) if found.seq() == last.seq() => {
                    return Err(self.changed(
                        store,
                        format!("seq {} now holds another record", last.seq()),
                    ))
                }
                _ => {
                    return Err(self.changed(
                        store,
                        format!("seq {}, delivered before, was removed", last.seq()),
                    ))
                }
            }
        }
        let mut records = Vec::new();
        for record in rows {
            let record = record?;
            if record.seq() >= self.next_seq {
                records.push(record);
                if records.len() == max {
                    break;
                }
            }
        }
        if let Some(newest) = records.last() {
            self.next_seq = newest.seq() + 1;
            self.last = Some(newest.clone());
        }
        Ok(records)
    }

    fn changed(&self, store: &Store, reason: String) -> StoreError {
        StoreError::HistoryChanged {
            path: PathBuf::from(format!(
                "{} session {}",
                store_display(store.path()),
                self.id
            )),
            reason,
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::path::Path;

    use sessionlog_schema::SessionHeader;

    use super::*;
    use crate::store::tests::{id, record};
    use crate::Durability;

    fn store_with(path: &Path, cwd: &str, types: &[&str]) -> Store {
        let store = Store::create(path).expect("a store");
        let header = SessionHeader::root(id("s1"), 1_700_000_000_000, cwd.to_owned());
        let records: Vec<EventRecord> = types
            .iter()
            .enumerate()
            .map(|(index, kind)| record(index as u64 + 1, kind, "{}"))
            .collect();
        store
            .create_session(&header, &records, Durability::Fsync)
            .expect("the session");
        store
    }

    fn seqs(records: &[EventRecord]) -> Vec<u64> {
        records.iter().map(EventRecord::seq).collect()
    }

    /// Runs `sql` on the SQLite database at `path`, from outside the store.
    fn by_hand(path: &Path, sql: &str) {
        let connection = rusqlite::Connection::open(path).expect("open");
        connection.execute_batch(sql).expect(sql);
    }

    #[test]
    fn a_session_replaced_or_cut_under_the_follower_is_never_spliced() {
        let folder = tempfile::tempdir().expect("tempdir");
        let path = folder.path().join("a.db");
        let store = store_with(&path, "/a", &["x-old", "x-old", "x-old"]);
        store_with(&folder.path().join("b.db"), "/b", &["x-new"; 6]);
        let mut follower = RowFollower::new(id("s1"), 2);
        assert_eq!(seqs(&follower.poll(&store, 10).expect("poll")), [2, 3]);
        assert!(follower.poll(&store, 10).expect("poll").is_empty());

        // Another history put in its place, in one transaction.
        let other = folder.path().join("b.db");
        by_hand(
            &path,
            &format!(
                "ATTACH '{}' AS b; BEGIN;
                 DELETE FROM events WHERE session_id = 's1';
                 DELETE FROM snapshots WHERE session_id = 's1';
                 DELETE FROM sessions WHERE id = 's1';
                 INSERT INTO sessions SELECT * FROM b.sessions;
                 INSERT INTO events SELECT * FROM b.events; COMMIT;",
                other.display()
            ),
        );
        let replaced = follower.poll(&store, 10);
        assert!(
            matches!(&replaced, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("another header")),
            "{replaced:?}"
        );

        // The same header, but the row delivered last is another record.
        let mut follower = RowFollower::new(id("s1"), 1);
        assert_eq!(follower.poll(&store, 4).expect("poll").len(), 4);
        let swapped = record(4, "x-other", "{}");
        by_hand(
            &path,
            &format!(
                "UPDATE events SET type = 'x-other', body = '{}', crc = {}
                 WHERE session_id = 's1' AND seq = 4;",
                swapped.body().replace('\'', "''"),
                sessionlog_schema::record_crc(&id("s1"), swapped.body().as_bytes())
            ),
        );
        let rewritten = follower.poll(&store, 10);
        assert!(
            matches!(&rewritten, Err(StoreError::HistoryChanged { reason, .. }) if reason.contains("seq 4 now holds another record")),
            "{rewritten:?}"
        );
    }
}
