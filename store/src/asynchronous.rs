//! `AsyncStore`: the store for async runtimes (tokio). Every blocking call
//! (file and database I/O, fsync, waiting for a group commit) runs on
//! tokio's blocking pool, so the caller's executor threads never wait on
//! the disk.
//!
//! Appends go through one owned `SessionWriter` per session, opened on the
//! first append and kept until [`AsyncStore::close`]; the store therefore
//! holds each session's writer lock while it has a writer open. A writer
//! that fails is dropped after reporting its error, so the next append
//! reopens the session and re-verifies it, as a poisoned writer requires.
//! `follow` polls the store every `FOLLOW_POLL_INTERVAL` for new events: a
//! JSONL log through a [`LogFollower`], which reads only what was appended
//! since the last poll (nothing at all when the file did not change); a
//! SQLite session with a query from the next seq.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sessionlog_projections::Defaults;
use sessionlog_schema::{EventRecord, SessionHeader, SessionId};
use tokio::sync::mpsc;

use crate::follow::LogFollower;
use crate::reader::Snapshot;
use crate::store::Store;
use crate::writer::{AcknowledgedSeq, Durability, NewEvent, SessionWriter, WriterOptions};
use crate::StoreError;

/// How often `follow` looks for new events.
pub const FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Events `follow` buffers for a slow receiver before it waits.
const FOLLOW_CHANNEL_CAPACITY: usize = 256;

/// A `Store` for async code. Cheap to clone: clones share the store and its
/// open writers.
#[derive(Debug, Clone)]
pub struct AsyncStore {
    store: Arc<Store>,
    writers: Arc<Mutex<HashMap<SessionId, WriterSlot>>>,
    options: WriterOptions,
}

/// One session's writer, opened on first use; appends to a session wait
/// for each other here, never for other sessions.
type WriterSlot = Arc<Mutex<Option<SessionWriter>>>;

impl AsyncStore {
    /// Wraps `store`; appends are durable (`Durability::Fsync`).
    pub fn new(store: Store) -> AsyncStore {
        AsyncStore {
            store: Arc::new(store),
            writers: Arc::new(Mutex::new(HashMap::new())),
            options: WriterOptions {
                durability: Durability::Fsync,
                keep_snapshot: false,
            },
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates a session with its header and first events (see
    /// [`Store::create_session`]).
    pub async fn create(
        &self,
        header: SessionHeader,
        events: Vec<EventRecord>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.create_session(&header, &events, durability)).await
    }

    /// Forks `child` from `parent` (see [`Store::fork`]).
    pub async fn fork(
        &self,
        parent: SessionId,
        child: SessionId,
        prompt: Option<String>,
        defaults: Defaults,
    ) -> Result<SessionHeader, StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.fork(&parent, &child, prompt.as_deref(), &defaults)).await
    }

    /// The good prefix of session `id`.
    pub async fn snapshot(&self, id: SessionId) -> Result<Snapshot, StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.snapshot(&id)).await
    }

    /// Appends `events` to session `id` as one atomic batch, durably; with
    /// `expected_seq`, the first event must get that seq (`Conflict`
    /// otherwise, and nothing is written).
    pub async fn append(
        &self,
        id: SessionId,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        let this = self.clone();
        blocking(move || this.append_blocking(&id, events, expected_seq)).await
    }

    /// Releases the writer of session `id` (and its lock), if one is open.
    pub fn close(&self, id: &SessionId) {
        self.writer_table().remove(id);
    }

    /// A stream of the events of session `id` from `from_seq` on: those
    /// already stored, then each new one as it is appended. It ends after
    /// delivering an error, or when the receiver is dropped.
    pub fn follow(
        &self,
        id: SessionId,
        from_seq: u64,
    ) -> mpsc::Receiver<Result<EventRecord, StoreError>> {
        let (sender, receiver) = mpsc::channel(FOLLOW_CHANNEL_CAPACITY);
        let store = Arc::clone(&self.store);
        tokio::spawn(async move {
            let mut following = match &*store {
                Store::Jsonl(jsonl) => match jsonl.follower(&id, from_seq) {
                    Ok(follower) => Following::Log(Box::new(follower)),
                    Err(error) => {
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                },
                Store::Sqlite(_) => Following::Query {
                    next_seq: from_seq.max(1),
                },
            };
            while !sender.is_closed() {
                let reading = Arc::clone(&store);
                let id = id.clone();
                let polled = blocking(move || {
                    let batch = following.next_batch(&reading, &id);
                    Ok((following, batch))
                })
                .await;
                let records = match polled {
                    Ok((returned, Ok(records))) => {
                        following = returned;
                        records
                    }
                    Ok((_, Err(error))) | Err(error) => {
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                };
                let caught_up = records.len() < FOLLOW_CHANNEL_CAPACITY;
                for record in records {
                    if sender.send(Ok(record)).await.is_err() {
                        return;
                    }
                }
                if caught_up {
                    tokio::time::sleep(FOLLOW_POLL_INTERVAL).await;
                }
            }
        });
        receiver
    }

    fn append_blocking(
        &self,
        id: &SessionId,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        let slot = Arc::clone(self.writer_table().entry(id.clone()).or_default());
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let mut writer = match slot.take() {
            Some(writer) => writer,
            None => self.store.open_writer(id, self.options)?,
        };
        let appended = writer.append_batch(events, expected_seq);
        let writer_still_usable = match &appended {
            Ok(_) => true,
            Err(error) => matches!(
                error,
                StoreError::Conflict { .. } | StoreError::Rule { .. } | StoreError::InvalidEvent(_)
            ),
        };
        if writer_still_usable {
            *slot = Some(writer);
        }
        appended
    }

    fn writer_table(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, WriterSlot>> {
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How `follow` finds new events.
enum Following {
    /// A JSONL log: read from where the last poll stopped.
    Log(Box<LogFollower>),
    /// A SQLite session: queried from the next seq.
    Query { next_seq: u64 },
}

impl Following {
    /// Up to `FOLLOW_CHANNEL_CAPACITY` events not delivered yet.
    fn next_batch(
        &mut self,
        store: &Store,
        id: &SessionId,
    ) -> Result<Vec<EventRecord>, StoreError> {
        match self {
            Following::Log(follower) => follower.poll(FOLLOW_CHANNEL_CAPACITY),
            Following::Query { next_seq } => {
                let records = store
                    .events_from(id, *next_seq)?
                    .take(FOLLOW_CHANNEL_CAPACITY)
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(last) = records.last() {
                    *next_seq = last.seq() + 1;
                }
                Ok(records)
            }
        }
    }
}

/// Runs `work` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join_error) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(join_error) => Err(StoreError::io(
            "run a blocking store call",
            std::path::PathBuf::new(),
            std::io::Error::other(join_error.to_string()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{header, id, jsonl_store, note, ok, sqlite_store};

    async fn check_append_and_follow(store: Store) {
        let store = AsyncStore::new(store);
        ok(store
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        let seqs = ok(store.append(id("a"), vec![note("one")], Some(1)).await);
        assert_eq!(seqs.iter().map(|s| s.get()).collect::<Vec<_>>(), [1]);
        let mut followed = store.follow(id("a"), 1);
        let first = ok(ok(followed.recv().await.ok_or("the stream ended")));
        assert_eq!(first.seq(), 1, "events already stored come first");
        let seqs = ok(store
            .append(id("a"), vec![note("two"), note("three")], None)
            .await);
        assert_eq!(seqs.iter().map(|s| s.get()).collect::<Vec<_>>(), [2, 3]);
        for expected in [2, 3] {
            let next = tokio::time::timeout(Duration::from_secs(5), followed.recv()).await;
            let record = ok(ok(ok(next).ok_or("the stream ended")));
            assert_eq!(record.seq(), expected);
        }
        let conflict = store.append(id("a"), vec![note("late")], Some(2)).await;
        assert!(
            matches!(conflict, Err(StoreError::Conflict { .. })),
            "{conflict:?}"
        );
        assert_eq!(ok(store.snapshot(id("a")).await).events.len(), 3);
        let child = ok(store
            .fork(id("a"), id("b"), None, Defaults::default())
            .await);
        assert_eq!(child.seed_length, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_appends_and_follows() {
        let folder = ok(tempfile::tempdir());
        check_append_and_follow(sqlite_store(folder.path())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jsonl_appends_and_follows() {
        let folder = ok(tempfile::tempdir());
        check_append_and_follow(jsonl_store(folder.path())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_to_one_session_share_its_writer() {
        let folder = ok(tempfile::tempdir());
        let store = AsyncStore::new(sqlite_store(folder.path()));
        ok(store
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        let tasks: Vec<_> = (0..16)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .append(id("a"), vec![note(&n.to_string())], None)
                        .await
                })
            })
            .collect();
        for task in tasks {
            ok(ok(task.await));
        }
        let seqs: Vec<u64> = ok(store.snapshot(id("a")).await)
            .events
            .iter()
            .map(EventRecord::seq)
            .collect();
        assert_eq!(seqs, (1..=16).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_releases_the_writer_lock() {
        let folder = ok(tempfile::tempdir());
        let store = AsyncStore::new(sqlite_store(folder.path()));
        ok(store
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        ok(store.append(id("a"), vec![note("one")], None).await);
        let locked = store
            .store()
            .open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(locked, Err(StoreError::Locked { .. })),
            "{locked:?}"
        );
        store.close(&id("a"));
        assert!(store
            .store()
            .open_writer(&id("a"), WriterOptions::default())
            .is_ok());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn follow_of_a_missing_session_delivers_not_found_and_ends() {
        let folder = ok(tempfile::tempdir());
        let store = AsyncStore::new(sqlite_store(folder.path()));
        let mut followed = store.follow(id("nobody"), 1);
        let first = followed.recv().await;
        assert!(
            matches!(first, Some(Err(StoreError::NotFound { .. }))),
            "{first:?}"
        );
        assert!(followed.recv().await.is_none());
    }
}
