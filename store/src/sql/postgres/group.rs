//! Group commit of the durable appends of one store's writers.
//!
//! Each writer has its own connection (it carries the session's lock), and
//! the server already lets concurrent commits share a WAL flush. But a
//! commit of its own per append costs the server a statement, a
//! transaction and a backend woken for each, and on two cores that work,
//! not the flush, is what 64 appenders queue on. So the durable appends of
//! the writers of one [`PostgresStore`](super::PostgresStore) (and its
//! clones) are grouped. The first writer to arrive *leads*: it takes every
//! append waiting at that moment and commits them in one statement
//! ([`APPEND_GROUP`](super::statements::APPEND_GROUP)), so one
//! transaction and one flush, on one of the store's group connections.
//! Appends that arrive meanwhile wait for the next group, which the first
//! of their writers to be woken leads; a second group starts beside the
//! first only once [`SECOND_GROUP`] appends wait. A lone writer leads a
//! group of one: its append runs as it always did, on its own connection,
//! with no other thread involved.
//!
//! What makes it safe to carry another writer's append is the fence every
//! append already has: a session's rows are inserted only if its row's
//! `last_seq` is still the seq the writer last wrote, moved in the same
//! statement. The statement is all or nothing, so a group either commits
//! every append the fence lets through or none. When the group's statement
//! fails (a row that breaks a constraint, a session row held locked past
//! [`GROUP_LOCK_TIMEOUT`](super::statements::GROUP_LOCK_TIMEOUT), the
//! group connection lost), each writer finds out what became of its own
//! append on its own connection (`Outcome::Unresolved`): it runs it again
//! alone, and an append the fence refuses because the group did commit it
//! is recognised by its last row's body.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use sessionlog_schema::{EventRecord, SessionId};

use super::location::Location;
use super::statements as sql;
use super::Connection;
use crate::StoreError;

/// How many groups may be committed at once. A second group overlaps its
/// statement with the first's WAL flush; on the two-core development
/// machine a third gained nothing (docs/PERFORMANCE.md).
const LEADERS: usize = 2;

/// How many appends must wait before a second group starts beside the one
/// being committed: a group pays a flush of its own, so a small second
/// group costs more than it saves, and its appends do better in the next
/// group (with 64 appenders, 32 measured best of 1 and 16–40).
const SECOND_GROUP: usize = 32;

/// The events a group takes at most (it always takes its first append,
/// however long): a bound on the arrays of one statement.
const GROUP_EVENTS: usize = 4096;

/// The appends waiting to be committed, the outcomes of those committed,
/// and the connections groups are committed on.
#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Queue>,
    /// How many appends were committed in groups of more than one.
    grouped: AtomicU64,
    /// The idle connections groups of more than one append are committed
    /// on ([`LEADERS`] at most), made on first use and again after one was
    /// lost: server backends that stay warm, with the group statement
    /// prepared, whichever writer leads. (A writer's own connection would
    /// be a different backend each time, with cold caches and its first
    /// executions of the statement planned afresh.)
    connections: Mutex<Vec<Connection>>,
}

#[derive(Debug, Default)]
struct Queue {
    /// How many groups are being committed ([`LEADERS`] at most).
    leading: usize,
    next_ticket: u64,
    waiting: Vec<Waiting>,
    decided: HashMap<u64, (Append, Outcome)>,
}

#[derive(Debug)]
struct Waiting {
    ticket: u64,
    append: Append,
    /// The writer's thread, unparked once its append is decided or when
    /// it is to lead the next group.
    thread: Thread,
}

/// One writer's append: its events, to insert if its session's last seq
/// is still `last_seq` and, in a group, the session's lock is still held.
#[derive(Debug)]
pub(super) struct Append {
    pub(super) id: SessionId,
    pub(super) last_seq: u64,
    pub(super) events: Vec<EventRecord>,
    /// The key of the session's lock its writer took.
    pub(super) lock_key: Option<i64>,
}

impl Append {
    /// Runs this append alone, in a statement of its own on `connection`:
    /// how many rows it inserted (0: the fence refused it).
    pub(super) fn run_alone(
        &self,
        connection: &mut Connection,
        location: &Location,
    ) -> Result<u64, StoreError> {
        connection.append(location, "append", &self.id, self.last_seq, &self.events)
    }
}

/// What became of an append.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Its statement ran: the rows it inserted (0 when the fence refused
    /// it: another writer appended since), or, for an append that ran
    /// alone, the error its statement returned.
    Ran(Result<u64, StoreError>),
    /// It was in a group whose statement failed or did not answer: for
    /// its writer to find out on its own connection.
    Unresolved,
}

impl GroupCommit {
    /// Commits `append` with whatever else is waiting, returning it with
    /// its outcome: leads a group when none is being committed (or when
    /// [`SECOND_GROUP`] appends wait), else waits for a leader to decide
    /// it. `connection`, the writer's own, commits durably
    /// (`synchronous_commit` on); a group of one runs on it.
    pub(super) fn commit(
        &self,
        connection: &mut Connection,
        location: &Location,
        append: Append,
    ) -> (Append, Outcome) {
        let mut queue = self.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push(Waiting {
            ticket,
            append,
            thread: thread::current(),
        });
        loop {
            if let Some(decided) = queue.decided.remove(&ticket) {
                return decided;
            }
            if !queue.may_lead() {
                drop(queue);
                thread::park();
                queue = self.lock();
                continue;
            }
            queue.leading += 1;
            let mut leading = Leading {
                commit: self,
                group: queue.take_group(),
                outcomes: Vec::new(),
            };
            drop(queue);
            leading.outcomes = self.run(connection, location, &leading.group);
            drop(leading);
            queue = self.lock();
        }
    }

    /// How many appends were committed in groups of more than one.
    #[cfg(test)]
    pub(super) fn grouped(&self) -> u64 {
        self.grouped.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_connections(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A group connection: an idle one, else a new one (durable commits,
    /// and [`GROUP_LOCK_TIMEOUT`](sql::GROUP_LOCK_TIMEOUT)). The leader
    /// gives it back after its group unless it was lost.
    fn group_connection(&self, location: &Location) -> Result<Connection, StoreError> {
        if let Some(connection) = self.lock_connections().pop() {
            return Ok(connection);
        }
        let mut connection = Connection::open(location, false)?;
        connection.run(
            location,
            "set the group connection's lock timeout",
            sql::GROUP_LOCK_TIMEOUT,
        )?;
        Ok(connection)
    }
}

impl Queue {
    /// Whether a group should start now: when none is being committed and
    /// an append waits, or beside one when [`SECOND_GROUP`] wait.
    fn may_lead(&self) -> bool {
        match self.leading {
            0 => !self.waiting.is_empty(),
            leading => leading < LEADERS && self.waiting.len() >= SECOND_GROUP,
        }
    }

    /// The waiting appends of distinct sessions, oldest first, up to
    /// [`GROUP_EVENTS`] events; the rest wait for the next group. (One
    /// writer per session makes a second append of a session in one group
    /// unlikely, but its fence would need the first's new last seq.)
    fn take_group(&mut self) -> Vec<Waiting> {
        let mut sessions = HashSet::new();
        let mut events = 0;
        let (mut group, mut rest) = (Vec::new(), Vec::new());
        for waiting in self.waiting.drain(..) {
            let fits = group.is_empty() || events + waiting.append.events.len() <= GROUP_EVENTS;
            if fits && sessions.insert(waiting.append.id.clone()) {
                events += waiting.append.events.len();
                group.push(waiting);
            } else {
                rest.push(waiting);
            }
        }
        self.waiting = rest;
        group
    }
}

/// A group being committed. Dropped, it hands every append of the group
/// back with its outcome (`Unresolved` for any its leader did not decide,
/// should it have unwound) and lets the next leader in.
struct Leading<'a> {
    commit: &'a GroupCommit,
    group: Vec<Waiting>,
    outcomes: Vec<Outcome>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut queue = self.commit.lock();
        let mut outcomes = std::mem::take(&mut self.outcomes).into_iter();
        let mut decided = Vec::with_capacity(self.group.len());
        for Waiting {
            ticket,
            append,
            thread,
        } in self.group.drain(..)
        {
            let outcome = outcomes.next().unwrap_or(Outcome::Unresolved);
            queue.decided.insert(ticket, (append, outcome));
            decided.push(thread);
        }
        queue.leading -= 1;
        let next = match queue.may_lead() {
            true => queue.waiting.first().map(|waiting| waiting.thread.clone()),
            false => None,
        };
        drop(queue);
        // The leader's own append, when it was in the group, needs no
        // waking: unparked, its thread would wake for nothing the next
        // time it waits.
        let leader = thread::current().id();
        next.iter()
            .chain(&decided)
            .filter(|thread| thread.id() != leader)
            .for_each(Thread::unpark);
    }
}

impl GroupCommit {
    /// Commits `group`: a lone append on its writer's `connection`, as it
    /// always ran; more than one in one statement on the group connection.
    fn run(
        &self,
        connection: &mut Connection,
        location: &Location,
        group: &[Waiting],
    ) -> Vec<Outcome> {
        if let [Waiting { append, .. }] = group {
            return vec![Outcome::Ran(append.run_alone(connection, location))];
        }
        let appends: Vec<&Append> = group.iter().map(|waiting| &waiting.append).collect();
        let ran = self.group_connection(location).and_then(|mut shared| {
            let ran = shared.append_group(location, &appends);
            // A connection the server ended may not read as closed yet.
            let lost = ran.as_ref().is_err_and(StoreError::is_connection_lost);
            if !shared.is_closed() && !lost {
                self.lock_connections().push(shared);
            }
            ran
        });
        match ran {
            Ok(moved) => {
                self.grouped
                    .fetch_add(appends.len() as u64, Ordering::Relaxed);
                appends
                    .iter()
                    .map(|append| match moved.contains(append.id.as_str()) {
                        true => Outcome::Ran(Ok(append.events.len() as u64)),
                        false => Outcome::Ran(Ok(0)),
                    })
                    .collect()
            }
            Err(error) => {
                tracing::debug!(
                    store = %location.display.display(),
                    appends = appends.len(),
                    %error,
                    "a group's append failed; each writer runs its own again"
                );
                appends.iter().map(|_| Outcome::Unresolved).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sessionlog_schema::record_crc;

    use super::*;
    use crate::sql::postgres::tests::{engine, execute};
    use crate::store::tests::{header, id, ok, postgres_store, record, PostgresSchema};
    use crate::writer::Durability;

    /// A store whose sessions `a`, `b` and `c` each hold one event, and a
    /// connection of its own to commit groups on.
    fn three_sessions(schema: &PostgresSchema) -> Connection {
        let store = engine(schema);
        for session in ["a", "b", "c"] {
            let events = [record(1, "note/test", r#"{"n":1}"#)];
            ok(store.create_session(&header(session), &events, Durability::Fsync));
        }
        ok(Connection::open(&store.shared.location, false))
    }

    /// The append of events `seqs` to `session` by a writer that last
    /// wrote `last_seq`.
    fn waiting(session: &str, last_seq: u64, seqs: std::ops::RangeInclusive<u64>) -> Waiting {
        let events = seqs
            .map(|seq| {
                record(
                    seq,
                    "note/test",
                    &format!(r#"{{"session":"{session}","n":{seq}}}"#),
                )
            })
            .collect();
        Waiting {
            ticket: 0,
            append: Append {
                id: id(session),
                last_seq,
                events,
                lock_key: None,
            },
            thread: thread::current(),
        }
    }

    /// How many events session `name` holds.
    fn events(schema: &PostgresSchema, name: &str) -> usize {
        ok(engine(schema).snapshot(&id(name))).events.len()
    }

    /// Commits `group` through the store's group commit, `connection`
    /// standing for the leader's own.
    fn run(
        schema: &PostgresSchema,
        connection: &mut Connection,
        group: &[Waiting],
    ) -> Vec<Outcome> {
        let store = engine(schema);
        store
            .shared
            .group
            .run(connection, &store.shared.location, group)
    }

    fn inserted(outcome: &Outcome) -> Option<u64> {
        match outcome {
            Outcome::Ran(Ok(inserted)) => Some(*inserted),
            Outcome::Ran(Err(error)) => panic!("the group's append failed: {error}"),
            Outcome::Unresolved => None,
        }
    }

    #[test]
    fn a_group_commits_what_each_fence_lets_through_in_one_statement() {
        let Some(schema) = postgres_store() else {
            return;
        };
        let mut connection = three_sessions(&schema);
        let group = [
            waiting("a", 1, 2..=2),
            waiting("b", 0, 1..=1),
            waiting("c", 1, 2..=3),
        ];
        let outcomes = run(&schema, &mut connection, &group);
        let inserted: Vec<_> = outcomes.iter().map(inserted).collect();
        // b's writer expected no event yet: another writer got ahead.
        assert_eq!(inserted, [Some(1), Some(0), Some(2)]);
        assert_eq!(
            [
                events(&schema, "a"),
                events(&schema, "b"),
                events(&schema, "c")
            ],
            [2, 1, 3]
        );
        assert_eq!(engine(&schema).shared.group.grouped(), 3);
    }

    /// A writer whose connection lost the session's lock (the server ended
    /// it) is refused by the group statement, as it would be alone on its
    /// dead connection: a group never carries the append of a writer whose
    /// session's lock is not held, which a new writer may take meanwhile.
    #[test]
    fn a_group_refuses_an_append_whose_sessions_lock_is_not_held() {
        let Some(schema) = postgres_store() else {
            return;
        };
        let mut connection = three_sessions(&schema);
        let store = engine(&schema);
        let location = &store.shared.location;
        let key = |session: &str| super::super::lock_key("writer", &location.schema, session);
        let lock = |client: &mut postgres::Client, session: &str| -> i32 {
            let row = ok(client.query_one(
                "SELECT pg_try_advisory_lock($1), pg_backend_pid()",
                &[&key(session)],
            ));
            assert!(row.get::<_, bool>(0), "{session} is free");
            row.get(1)
        };
        let mut holder = ok(store.connect());
        lock(&mut holder, "a");
        // c's writer took its lock on a connection the server has ended
        // since (the lock went with it); b's lock nobody ever took.
        let mut lost = ok(store.connect());
        let backend = lock(&mut lost, "c");
        let ended: bool =
            ok(holder.query_one("SELECT pg_terminate_backend($1, 5000)", &[&backend])).get(0);
        assert!(ended);
        let mut group = [
            waiting("a", 1, 2..=2),
            waiting("b", 1, 2..=2),
            waiting("c", 1, 2..=2),
        ];
        for waiting in &mut group {
            waiting.append.lock_key = Some(key(waiting.append.id.as_str()));
        }
        let outcomes = run(&schema, &mut connection, &group);
        let inserted: Vec<_> = outcomes.iter().map(inserted).collect();
        assert_eq!(inserted, [Some(1), Some(0), Some(0)]);
        assert_eq!(
            [
                events(&schema, "a"),
                events(&schema, "b"),
                events(&schema, "c")
            ],
            [2, 1, 1]
        );
        // The check took no lock that outlives the group's statement: a
        // new writer of c gets its session.
        let mut next = ok(store.connect());
        lock(&mut next, "c");
    }

    #[test]
    fn a_failed_group_commits_nothing_and_each_append_is_settled_alone() {
        let Some(schema) = postgres_store() else {
            return;
        };
        let mut connection = three_sessions(&schema);
        let store = engine(&schema);
        let location = &store.shared.location;
        // A stray row where b's append goes: its insert breaks the
        // primary key, and the statement with it.
        let stray = r#"{"seq":2,"ts":5,"type":"note/test","data":{}}"#;
        execute(
            &schema,
            &format!(
                "INSERT INTO events VALUES ('b', 2, 5, 'note/test', NULL, '{stray}', {})",
                record_crc(&id("b"), stray.as_bytes())
            ),
        );
        let group = [waiting("a", 1, 2..=2), waiting("b", 1, 2..=2)];
        let outcomes = run(&schema, &mut connection, &group);
        assert!(
            outcomes.iter().all(|outcome| inserted(outcome).is_none()),
            "{outcomes:?}"
        );
        assert_eq!(events(&schema, "a"), 1, "a group is all or nothing");
        assert_eq!(store.shared.group.grouped(), 0);
        let mut again = |waiting: &Waiting| ok(connection.append_again(location, &waiting.append));
        assert_eq!(again(&group[0]), 1);
        assert_eq!(again(&group[1]), 0, "the stray row is not b's append");
        assert_eq!(events(&schema, "a"), 2);
    }

    #[test]
    fn an_append_its_group_committed_is_recognised_when_run_again() {
        let Some(schema) = postgres_store() else {
            return;
        };
        let mut connection = three_sessions(&schema);
        let location = &engine(&schema).shared.location;
        let group = [waiting("a", 1, 2..=3), waiting("c", 1, 2..=2)];
        let outcomes = run(&schema, &mut connection, &group);
        assert_eq!(
            outcomes.iter().map(inserted).collect::<Vec<_>>(),
            [Some(2), Some(1)]
        );
        // As if the group's answer had been lost: the fence refuses the
        // append now, and the stored rows say the group committed it.
        assert_eq!(ok(connection.append_again(location, &group[0].append)), 2);
        // Another append at the same seqs was not committed.
        let mut other = waiting("a", 1, 2..=2).append;
        other.events[0] = record(2, "note/test", r#"{"other":true}"#);
        assert_eq!(ok(connection.append_again(location, &other)), 0);
        assert_eq!(events(&schema, "a"), 3);
    }

    #[test]
    fn a_session_row_held_locked_does_not_stall_its_group() {
        let Some(schema) = postgres_store() else {
            return;
        };
        let mut connection = three_sessions(&schema);
        let store = engine(&schema);
        let mut blocker = ok(store.connect());
        ok(blocker.batch_execute("BEGIN; SELECT * FROM sessions WHERE id = 'b' FOR UPDATE"));
        let group = [waiting("a", 1, 2..=2), waiting("b", 1, 2..=2)];
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let (outcomes, waited) = thread::scope(|scope| {
            // Should the group wait for the row after all, it gets it
            // after 10 s, and the assertions below say so.
            scope.spawn(move || {
                let _ = finished.recv_timeout(Duration::from_secs(10));
                ok(blocker.batch_execute("ROLLBACK"));
            });
            let started = Instant::now();
            let outcomes = run(&schema, &mut connection, &group);
            let waited = started.elapsed();
            drop(done);
            (outcomes, waited)
        });
        assert!(
            outcomes.iter().all(|outcome| inserted(outcome).is_none()),
            "{outcomes:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "the group waited {waited:?} for the row"
        );
        assert_eq!(events(&schema, "a"), 1);
    }
}
