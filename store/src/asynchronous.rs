//! `AsyncStore`: the store for async runtimes (tokio). Every blocking call
//! (file and database I/O, fsync, waiting for a group commit) runs on
//! tokio's blocking pool, so the caller's executor threads never wait on
//! the disk.
//!
//! Appends go through one owned `SessionWriter` per session, opened on the
//! first append and kept until [`AsyncStore::close`]; the store therefore
//! holds each session's writer lock while it has a writer open. Appends to
//! one session that arrive while another is being synced wait together and
//! then share one sync (group commit within a session): each is staged as
//! its own atomic batch, in arrival order, with its own expected seq, and
//! one that is refused (a conflict, a rule) leaves the others alone. A
//! writer that fails is dropped after reporting its error, so the next
//! append reopens the session and re-verifies it, as a poisoned writer
//! requires.
//! [`AsyncWriter`] is the handle of one session's writer, with the
//! operations of [`SessionWriter`] (append, append_batch, review_request
//! from the held snapshot, switch_preset, review); its appends join the
//! same groups.
//! `review` asks the Auto reviewer about a pending call of a session
//! through that same writer, reopened once with its snapshot kept if it
//! was opened without: the request is built while the writer is held, the
//! reviewer is called with the writer free for other appends, and the
//! verdict is recorded (when asked) as an append expecting the seq the
//! request was built at.
//! `follow` returns a [`Follow`], a `futures_core::Stream` of records; it
//! polls the store every `FOLLOW_POLL_INTERVAL` for new events: a
//! JSONL log through a [`LogFollower`], which reads only what was appended
//! since the last poll (nothing at all when the file did not change); a
//! database session through a [`RowFollower`], a query from the last seq
//! delivered, which must still hold what was delivered.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use sessionlog_projections::{Defaults, PendingAction};
use sessionlog_schema::{ApprovalPolicy, EventRecord, Preset, SessionHeader, SessionId};
use tokio::sync::mpsc;

use crate::follow::LogFollower;
use crate::reader::Snapshot;
use crate::review::{
    ask_reviewer, verdict_events, ReviewCallError, ReviewOptions, Reviewed, Reviewer,
};
use crate::row_follow::RowFollower;
use crate::store::Store;
use crate::writer::{
    build_record, AcknowledgedSeq, Durability, NewEvent, SessionWriter, WriterOptions,
};
use crate::StoreError;

/// How often `follow` looks for new events.
pub const FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How long `follow` waits before it reads again after a PostgreSQL server
/// ended its connection (the read connects again).
const FOLLOW_RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

/// Events `follow` buffers for a slow receiver before it waits.
const FOLLOW_CHANNEL_CAPACITY: usize = 256;

/// A `Store` for async code. Cheap to clone: clones share the store and its
/// open writers. The last clone dropped inside a runtime closes the writers
/// (and a PostgreSQL store's connections) on a thread of its own, a moment
/// later; [`close`](Self::close) frees a session's lock by the time it
/// returns.
#[derive(Debug, Clone)]
pub struct AsyncStore {
    shared: Arc<Shared>,
    options: WriterOptions,
}

/// What the clones of an [`AsyncStore`] share: dropped once, with the last
/// of them.
#[derive(Debug)]
struct Shared {
    /// The store; taken out only as the last handle drops.
    store: Option<Arc<Store>>,
    writers: Mutex<HashMap<SessionId, WriterSlot>>,
}

/// One session's writer, opened on first use, and the appends waiting for
/// it; appends to a session wait for each other here, never for other
/// sessions.
type WriterSlot = Arc<Slot>;

#[derive(Debug, Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Signalled when a group's outcomes are in.
    done: Condvar,
}

/// An append waiting for its group: its ticket, events and expected seq.
type Waiting = (u64, Vec<NewEvent>, Option<u64>);

/// What an append returns.
type Outcome = Result<Vec<AcknowledgedSeq>, StoreError>;

/// What applying a group gives back: the writer if it is still usable, and
/// each append's outcome by ticket.
type Applied = (Option<SessionWriter>, Vec<(u64, Outcome)>);

#[derive(Debug, Default)]
struct SlotState {
    /// The writer, while no group holds it.
    writer: Option<SessionWriter>,
    /// Appends waiting for the next group, in arrival order.
    waiting: Vec<Waiting>,
    /// Outcomes of applied appends, until their callers take them.
    outcomes: HashMap<u64, Outcome>,
    next_ticket: u64,
    /// Whether a caller is applying a group now.
    busy: bool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Puts a group's outcomes in, even when applying it panicked, so that no
/// caller of the group waits for ever.
struct GroupGuard<'s> {
    slot: &'s Slot,
    tickets: Vec<u64>,
    result: Option<Applied>,
    /// The session's log or row, which a failure names.
    session: std::path::PathBuf,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.slot.lock();
        match self.result.take() {
            Some((writer, outcomes)) => {
                state.writer = writer;
                state.outcomes.extend(outcomes);
            }
            None => {
                for ticket in &self.tickets {
                    state.outcomes.insert(
                        *ticket,
                        Err(StoreError::io(
                            "append",
                            self.session.clone(),
                            std::io::Error::other("an append of the same group panicked"),
                        )),
                    );
                }
            }
        }
        state.busy = false;
        self.slot.done.notify_all();
    }
}

impl AsyncStore {
    /// Wraps `store`; appends are durable (`Durability::Fsync`).
    pub fn new(store: Store) -> AsyncStore {
        AsyncStore {
            shared: Arc::new(Shared {
                store: Some(Arc::new(store)),
                writers: Mutex::new(HashMap::new()),
            }),
            options: WriterOptions {
                durability: Durability::Fsync,
                keep_snapshot: false,
                ..WriterOptions::default()
            },
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        self.shared_store()
    }

    /// Creates a session with its header and first events, atomically
    /// (see [`Store::create_session`]): the events get seqs 1, 2, ... and
    /// the current time when they carry none, and the session is refused
    /// whole if one breaks a rule.
    pub async fn create(
        &self,
        header: SessionHeader,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let store = Arc::clone(self.shared_store());
        self.on_pool(move || {
            let records = events
                .into_iter()
                .enumerate()
                .map(|(index, event)| build_record(index as u64 + 1, None, event))
                .collect::<Result<Vec<_>, _>>()?;
            store.create_session(&header, &records, durability)
        })
        .await
    }

    /// Creates a session from records already built (a copy of another
    /// session's, or seeded by a fork), as [`Store::create_session`].
    pub async fn create_records(
        &self,
        header: SessionHeader,
        events: Vec<EventRecord>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let store = Arc::clone(self.shared_store());
        self.on_pool(move || store.create_session(&header, &events, durability))
            .await
    }

    /// The writer handle of session `id`: opens its writer (verifying the
    /// log, taking its lock, keeping its snapshot for review requests) if
    /// this store has none open yet. Handles of one session share that one
    /// writer, and the appends of [`AsyncStore::append`] go through it too;
    /// [`AsyncWriter::close`] (or [`AsyncStore::close`]) releases it.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use sessionlog_schema::{Message, SessionHeader, SessionId, TurnStart};
    /// use sessionlog_store::{AsyncStore, Durability, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let folder = tempfile::tempdir()?;
    /// let store = AsyncStore::new(Store::create(&folder.path().join("sessions"))?);
    /// let id = SessionId::parse("a")?;
    /// let header = SessionHeader::root(id.clone(), 0, "/work".into());
    /// store.create(header, vec![TurnStart::new("t1").into()], Durability::Fsync).await?;
    /// let writer = store.writer(id).await?;
    /// let seq = writer.append(Message::user("hello").into(), Some(2)).await?;
    /// assert_eq!(seq.get(), 2);
    /// let mut followed = writer.follow(1);
    /// let first = followed.next().await.transpose()?;
    /// assert_eq!(first.map(|record| record.seq()), Some(1));
    /// writer.close().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn writer(&self, id: SessionId) -> Result<AsyncWriter, StoreError> {
        let this = self.clone();
        let session = id.clone();
        let header = self
            .on_pool(move || this.with_writer(&session, true, |writer| writer.header().clone()))
            .await?;
        Ok(AsyncWriter {
            store: self.clone(),
            id,
            header: Arc::new(header),
        })
    }

    /// Forks `child` from `parent` (see [`Store::fork`]).
    pub async fn fork(
        &self,
        parent: SessionId,
        child: SessionId,
        prompt: Option<String>,
        defaults: Defaults,
    ) -> Result<SessionHeader, StoreError> {
        let store = Arc::clone(self.shared_store());
        self.on_pool(move || store.fork(&parent, &child, prompt.as_deref(), &defaults))
            .await
    }

    /// The good prefix of session `id`.
    pub async fn snapshot(&self, id: SessionId) -> Result<Snapshot, StoreError> {
        let store = Arc::clone(self.shared_store());
        self.on_pool(move || store.snapshot(&id)).await
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
        self.on_pool(move || this.append_blocking(&id, events, expected_seq))
            .await
    }

    /// Asks `reviewer` about `pending` in session `id` and, with
    /// `options.record`, records the verdict (see
    /// [`SessionWriter::review`]). The request fails closed exactly as
    /// there; while the reviewer thinks, other appends to the session go
    /// on, and if one lands first the recording is refused as a
    /// `Conflict` (the verdict was about an older snapshot).
    pub async fn review(
        &self,
        id: SessionId,
        pending: PendingAction,
        options: ReviewOptions,
        reviewer: Arc<dyn Reviewer>,
    ) -> Result<Reviewed, ReviewCallError> {
        let pending = Arc::new(pending);
        let this = self.clone();
        let (building, session, preparing) = (Arc::clone(&pending), id.clone(), options.clone());
        let built = self
            .on_pool(move || {
                this.with_writer(&session, true, |writer| {
                    writer
                        .prepare_review(&building, &preparing)
                        .map(|request| (request, writer.next_seq()))
                })
            })
            .await?;
        let (request, next_seq) = built?;
        let model = options.model.clone();
        let call_id = pending.call_id.clone();
        let verdict = self
            .on_pool(move || {
                Ok(ask_reviewer(
                    &*reviewer,
                    &request,
                    model.as_deref(),
                    &call_id,
                ))
            })
            .await?;
        let recorded = if options.record {
            self.append(id, verdict_events(&pending, &verdict), Some(next_seq))
                .await?
        } else {
            Vec::new()
        };
        Ok(Reviewed { verdict, recorded })
    }

    /// Releases the writer of session `id` (and its lock), if one is open.
    /// A writer may take a state snapshot as it closes (a file write or a
    /// database commit): it is dropped on the blocking pool, and the lock
    /// is free when this returns, unless an append of it is still in
    /// flight (the writer then closes when that append ends).
    pub async fn close(&self, id: &SessionId) {
        let slot = self.writer_table().remove(id);
        if let Some(slot) = slot {
            let _ = tokio::task::spawn_blocking(move || drop(slot)).await;
        }
    }

    /// A stream of the events of session `id` from `from_seq` on: those
    /// already stored, then each new one as it is appended. It ends after
    /// delivering an error, except a PostgreSQL server ending the
    /// connection or out of reach ([`StoreError::is_connection_lost`]):
    /// then it logs a warning once and reads again every second, going on
    /// from where it was. Dropping it stops the polling.
    pub fn follow(&self, id: SessionId, from_seq: u64) -> Follow {
        let (sender, receiver) = mpsc::channel(FOLLOW_CHANNEL_CAPACITY);
        // The task may hold the store's last handle, whether it ends or is
        // cancelled.
        let store = OffRuntime(Some(Arc::clone(self.shared_store())));
        let place = self.shared_store().path().to_owned();
        tokio::spawn(async move {
            let followed = async {
                // A JSONL follower reads the log's end as it is made: on the
                // blocking pool, as every read.
                let making = (Arc::clone(&store), id.clone());
                let made = blocking(&place, move || {
                    let (store, id) = making;
                    Ok(match &*store {
                        Store::Jsonl(jsonl) => {
                            Following::Log(Box::new(jsonl.follower(&id, from_seq)?))
                        }
                        #[cfg(feature = "sqlite")]
                        Store::Sqlite(_) => Following::Rows(RowFollower::new(id, from_seq)),
                        #[cfg(feature = "postgres")]
                        Store::Postgres(_) => Following::Rows(RowFollower::new(id, from_seq)),
                    })
                })
                .await;
                let mut following = match made {
                    Ok(following) => following,
                    Err(error) => {
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                };
                // Whether the last read found the server out of reach (said
                // once an outage, as `sessionlog tail -f` says it).
                let mut unreachable = false;
                while !sender.is_closed() {
                    let reading = Arc::clone(&store);
                    let polled = blocking(&place, move || {
                        let batch = following.next_batch(&reading);
                        Ok((following, batch))
                    })
                    .await;
                    let records = match polled {
                        Ok((returned, Ok(records))) => {
                            following = returned;
                            unreachable = false;
                            records
                        }
                        // A restart or failover of the server: the next read
                        // connects again, and the stream goes on from where
                        // it was.
                        Ok((returned, Err(error))) if error.is_connection_lost() => {
                            following = returned;
                            if !unreachable {
                                tracing::warn!(session = %id, "following: {error}; connecting again");
                                unreachable = true;
                            }
                            tokio::time::sleep(FOLLOW_RECONNECT_INTERVAL).await;
                            continue;
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
            };
            followed.await;
            drop(store);
        });
        Follow { receiver }
    }

    fn append_blocking(
        &self,
        id: &SessionId,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        let slot = Arc::clone(self.writer_table().entry(id.clone()).or_default());
        let mut state = slot.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push((ticket, events, expected_seq));
        loop {
            if let Some(outcome) = state.outcomes.remove(&ticket) {
                return outcome;
            }
            if state.busy {
                state = slot
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Nobody is applying a group: this caller applies every append
            // waiting now, its own among them, with the slot unlocked.
            state.busy = true;
            let group = std::mem::take(&mut state.waiting);
            let writer = state.writer.take();
            drop(state);
            let mut guard = GroupGuard {
                slot: &slot,
                tickets: group.iter().map(|(ticket, ..)| *ticket).collect(),
                result: None,
                session: self.shared_store().session_path(id),
            };
            guard.result = Some(self.apply_group(id, writer, group));
            drop(guard);
            state = slot.lock();
        }
    }

    /// Opens the writer when it was dropped, then applies every append of
    /// `group` in order with [`SessionWriter::append_group`] (each its own
    /// batch, one sync for all). Returns the writer unless it is poisoned,
    /// and each append's outcome.
    fn apply_group(
        &self,
        id: &SessionId,
        mut writer: Option<SessionWriter>,
        group: Vec<Waiting>,
    ) -> Applied {
        let mut outcomes = Vec::with_capacity(group.len());
        let mut group = group.into_iter().peekable();
        // The writer was dropped (never opened, or poisoned): each append
        // tries to open it until one succeeds; a failure is that append's.
        let mut open = loop {
            if let Some(open) = writer.take() {
                break open;
            }
            let Some((ticket, ..)) = group.peek() else {
                return (None, outcomes);
            };
            match self.shared_store().open_writer(id, self.options.clone()) {
                Ok(open) => writer = Some(open),
                Err(error) => {
                    outcomes.push((*ticket, Err(error)));
                    group.next();
                }
            }
        };
        let (tickets, batches): (Vec<u64>, Vec<_>) = group
            .map(|(ticket, events, expected_seq)| (ticket, (events, expected_seq)))
            .unzip();
        outcomes.extend(tickets.into_iter().zip(open.append_group(batches)));
        ((!open.is_poisoned()).then_some(open), outcomes)
    }

    /// Runs `work` on session `id`'s writer, holding it alone (appends
    /// wait), after opening it when none is open, and reopening it with its
    /// snapshot kept when `snapshot` asks for one and it was opened without.
    fn with_writer<T>(
        &self,
        id: &SessionId,
        snapshot: bool,
        work: impl FnOnce(&mut SessionWriter) -> T,
    ) -> Result<T, StoreError> {
        let slot = Arc::clone(self.writer_table().entry(id.clone()).or_default());
        let mut state = slot.lock();
        while state.busy {
            state = slot
                .done
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.busy = true;
        let writer = state.writer.take();
        drop(state);
        let mut guard = GroupGuard {
            slot: &slot,
            tickets: Vec::new(),
            result: None,
            session: self.shared_store().session_path(id),
        };
        let mut writer = match writer {
            Some(writer) if !snapshot || writer.events().is_some() => writer,
            other => {
                // The old writer holds the session's lock: release it first.
                drop(other);
                let options = WriterOptions {
                    keep_snapshot: snapshot || self.options.keep_snapshot,
                    ..self.options.clone()
                };
                match self.shared_store().open_writer(id, options) {
                    Ok(writer) => writer,
                    Err(error) => {
                        guard.result = Some((None, Vec::new()));
                        return Err(error);
                    }
                }
            }
        };
        let output = work(&mut writer);
        guard.result = Some(((!writer.is_poisoned()).then_some(writer), Vec::new()));
        Ok(output)
    }

    fn writer_table(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, WriterSlot>> {
        self.shared
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work`, a call on this store, on tokio's blocking pool (see
    /// [`blocking`]).
    fn on_pool<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> impl Future<Output = Result<T, StoreError>> {
        blocking(self.shared_store().path(), work)
    }

    fn shared_store(&self) -> &Arc<Store> {
        match &self.shared.store {
            Some(store) => store,
            None => unreachable!("the store is taken out only as the last handle drops"),
        }
    }
}

/// The last handle of a store, dropped on a runtime's thread, hands the
/// store and its writers to a thread of its own: a writer may write a state
/// snapshot as it closes, and PostgreSQL's blocking client closes its
/// connection by running a runtime of its own, which a runtime's thread
/// must not (it panicked there). Both are moved out, so that nothing of
/// them is dropped here.
impl Drop for Shared {
    fn drop(&mut self) {
        let writers = std::mem::take(
            self.writers
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        drop_off_runtime((writers, self.store.take()));
    }
}

/// Drops `value` off the runtime's threads when called on one (where the
/// PostgreSQL client, closing a connection, would start a runtime of its
/// own and panic), else here. On a thread of its own, not tokio's blocking
/// pool: a runtime shutting down cancels its tasks on its worker threads
/// and runs no more blocking work, so the pool would drop `value` right
/// there.
fn drop_off_runtime<T: Send + 'static>(value: T) {
    if tokio::runtime::Handle::try_current().is_err() {
        return drop(value);
    }
    let spawned = std::thread::Builder::new()
        .name("sessionlog-drop".to_owned())
        .spawn(move || drop(value));
    // Should no thread be had, the value went with the closure, dropped
    // here: nothing else could.
    drop(spawned);
}

/// A value dropped off the runtime's threads ([`drop_off_runtime`])
/// however the future that holds it ends: run to its end, or cancelled
/// (a runtime shutting down drops its tasks' futures on its workers).
struct OffRuntime<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> std::ops::Deref for OffRuntime<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(value) => value,
            None => unreachable!("taken only by drop"),
        }
    }
}

impl<T: Send + 'static> Drop for OffRuntime<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            drop_off_runtime(value);
        }
    }
}

/// The writer of one session for async code: the operations of
/// [`SessionWriter`], each run on tokio's blocking pool. Made by
/// [`AsyncStore::writer`]; cheap to clone, and every clone (and every
/// [`AsyncStore::append`] to the session) goes through the same writer, so
/// appends that wait together share one sync. Review requests are built
/// from the snapshot the writer holds, never by reading the log again.
#[derive(Debug, Clone)]
pub struct AsyncWriter {
    store: AsyncStore,
    id: SessionId,
    header: Arc<SessionHeader>,
}

impl AsyncWriter {
    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// Appends one event durably (see [`SessionWriter::append`]); with
    /// `expected_seq`, it must get that seq (`Conflict` otherwise).
    pub async fn append(
        &self,
        event: NewEvent,
        expected_seq: Option<u64>,
    ) -> Result<AcknowledgedSeq, StoreError> {
        let seqs = self.append_batch(vec![event], expected_seq).await?;
        seqs.into_iter().next().ok_or_else(|| {
            StoreError::InvalidEvent("an append of one event acknowledged none".to_owned())
        })
    }

    /// Appends `events` as one atomic batch, durably (see
    /// [`SessionWriter::append_batch`]).
    pub async fn append_batch(
        &self,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        self.store
            .append(self.id.clone(), events, expected_seq)
            .await
    }

    /// The Auto reviewer's request for `pending` (see
    /// [`SessionWriter::review_request`]), built from the snapshot the
    /// writer holds, with the seq the next event will get: record a verdict
    /// about it with that seq as `expected_seq`, so that it is refused if
    /// anything landed in between.
    pub async fn review_request(
        &self,
        pending: PendingAction,
        max_bytes: usize,
    ) -> Result<(String, u64), ReviewCallError> {
        let this = self.store.clone();
        let id = self.id.clone();
        let built = self
            .store
            .on_pool(move || {
                this.with_writer(&id, true, |writer| {
                    writer
                        .review_request(&pending, max_bytes)
                        .map(|request| (request, writer.next_seq()))
                })
            })
            .await?;
        Ok(built?)
    }

    /// Asks `reviewer` about `pending` and, with `options.record`, records
    /// the verdict (see [`AsyncStore::review`]).
    pub async fn review(
        &self,
        pending: PendingAction,
        options: ReviewOptions,
        reviewer: Arc<dyn Reviewer>,
    ) -> Result<Reviewed, ReviewCallError> {
        self.store
            .review(self.id.clone(), pending, options, reviewer)
            .await
    }

    /// Switches the session's preset as one atomic batch (see
    /// [`SessionWriter::switch_preset`]).
    pub async fn switch_preset(
        &self,
        preset: Preset,
        auto_approval: Option<ApprovalPolicy>,
        defaults: Defaults,
        expected_seq: Option<u64>,
    ) -> Result<Vec<AcknowledgedSeq>, StoreError> {
        let this = self.store.clone();
        let id = self.id.clone();
        self.store
            .on_pool(move || {
                this.with_writer(&id, false, |writer| {
                    writer.switch_preset(preset, auto_approval, &defaults, expected_seq)
                })?
            })
            .await
    }

    /// The seq the next event will get.
    pub async fn next_seq(&self) -> Result<u64, StoreError> {
        let this = self.store.clone();
        let id = self.id.clone();
        self.store
            .on_pool(move || this.with_writer(&id, false, |writer| writer.next_seq()))
            .await
    }

    /// The session's events from `from_seq` on, then each new one (see
    /// [`AsyncStore::follow`]).
    pub fn follow(&self, from_seq: u64) -> Follow {
        self.store.follow(self.id.clone(), from_seq)
    }

    /// Releases the session's writer and its lock (for every handle of it:
    /// a later append opens it again), as [`AsyncStore::close`] does.
    pub async fn close(self) {
        self.store.close(&self.id).await;
    }
}

/// The events of a followed session, as a [`Stream`] (see
/// [`AsyncStore::follow`]). Dropping it stops the polling.
#[derive(Debug)]
pub struct Follow {
    receiver: mpsc::Receiver<Result<EventRecord, StoreError>>,
}

impl Follow {
    /// The next event, waiting for it; `None` once the stream ended.
    pub async fn recv(&mut self) -> Option<Result<EventRecord, StoreError>> {
        self.receiver.recv().await
    }

    /// The next event if one is already delivered, without waiting.
    pub fn try_recv(&mut self) -> Option<Result<EventRecord, StoreError>> {
        self.receiver.try_recv().ok()
    }

    /// Stops the polling; what was already delivered can still be
    /// received.
    pub fn close(&mut self) {
        self.receiver.close();
    }
}

impl Stream for Follow {
    type Item = Result<EventRecord, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(context)
    }
}

/// How `follow` finds new events.
enum Following {
    /// A JSONL log: read from where the last poll stopped.
    Log(Box<LogFollower>),
    /// A database session: queried from the last seq delivered, which
    /// must still hold what was delivered.
    Rows(RowFollower),
}

impl Following {
    /// Up to `FOLLOW_CHANNEL_CAPACITY` events not delivered yet.
    fn next_batch(&mut self, store: &Store) -> Result<Vec<EventRecord>, StoreError> {
        match self {
            Following::Log(follower) => follower.poll(FOLLOW_CHANNEL_CAPACITY),
            Following::Rows(follower) => follower.poll(store, FOLLOW_CHANNEL_CAPACITY),
        }
    }
}

/// Runs `work` on tokio's blocking pool (handed to it now: call this
/// within the runtime), a call on `store`.
fn blocking<T: Send + 'static>(
    store: &Path,
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> impl Future<Output = Result<T, StoreError>> {
    let store = store.to_owned();
    let running = tokio::task::spawn_blocking(work);
    async move {
        match running.await {
            Ok(result) => result,
            Err(join_error) if join_error.is_panic() => {
                std::panic::resume_unwind(join_error.into_panic())
            }
            // The runtime shut down before the call ran: said of the store
            // it was made on, as every other error of it is.
            Err(join_error) => Err(StoreError::io(
                "run a blocking store call",
                store,
                std::io::Error::other(join_error.to_string()),
            )),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::tests::{header, id, jsonl_store, note, ok, sqlite_store};

    /// A group whose application unwound (a panic) leaves each of its
    /// appends an error that names the session, and the slot free.
    #[test]
    fn the_appends_of_a_group_that_unwound_fail_naming_their_session() {
        let slot = Slot::default();
        slot.lock().busy = true;
        drop(GroupGuard {
            slot: &slot,
            tickets: vec![1, 2],
            result: None,
            session: std::path::PathBuf::from("/logs/s.jsonl"),
        });
        let mut state = slot.lock();
        assert!(!state.busy);
        for ticket in [1, 2] {
            match state.outcomes.remove(&ticket) {
                Some(Err(error)) => {
                    let message = error.to_string();
                    assert!(
                        message.contains("/logs/s.jsonl") && message.contains("panicked"),
                        "{message}"
                    );
                }
                other => panic!("ticket {ticket}: {other:?}"),
            }
        }
    }

    /// A call the runtime shut down before it ran fails naming the store
    /// it was made on (it once named an empty path).
    #[test]
    fn a_call_the_runtime_dropped_names_its_store() {
        let runtime = ok(tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build());
        let handle = runtime.handle().clone();
        runtime.shutdown_background();
        let call = {
            let _inside = handle.enter();
            blocking(Path::new("/work/store"), || Ok(1))
        };
        let result = ok(tokio::runtime::Builder::new_current_thread().build()).block_on(call);
        let error = match result {
            Ok(value) => panic!("the call ran: {value}"),
            Err(error) => error,
        };
        let message = error.to_string();
        assert!(message.contains("/work/store"), "{message}");
    }

    /// A tokio runtime of two worker threads, for a test that sets up (or
    /// drops) a blocking client outside it.
    pub(crate) fn two_worker_runtime() -> tokio::runtime::Runtime {
        ok(tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build())
    }

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

    /// A session created from typed events, written through a writer
    /// handle, followed as a `Stream`, switched to Auto and asked for a
    /// review request, which must be the one a cold build gives.
    async fn check_writer_handle(store: Store) {
        use futures_util::StreamExt;
        use sessionlog_projections::{
            build_review_request, parse_pending_action, DEFAULT_MAX_REQUEST_BYTES,
        };
        use sessionlog_schema::{
            Message, RequestHeader, SandboxMode, StepEnd, StepStart, ToolDefinition, ToolStart,
            TurnStart,
        };
        let store = AsyncStore::new(store);
        let refused = store
            .create(
                header("a"),
                vec![StepEnd::new("s9").into()],
                Durability::Fsync,
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::Rule { .. })),
            "{refused:?}"
        );
        assert!(!ok(store.store().contains(&id("a"))), "nothing was created");
        let shell = ToolDefinition::new("shell", "Runs a command.", &serde_json::json!({}));
        let seed = vec![
            NewEvent::of(&TurnStart::new("t1")),
            NewEvent::of(&StepStart::new("s1", "t1")),
            NewEvent::of(&RequestHeader::new(
                "p",
                "m",
                ApprovalPolicy::Never,
                SandboxMode::DangerFullAccess,
                vec![shell],
            )),
        ];
        ok(store.create(header("a"), seed, Durability::Fsync).await);

        let writer = ok(store.writer(id("a")).await);
        assert_eq!(writer.header(), &header("a"));
        let second = store
            .store()
            .open_writer(&id("a"), WriterOptions::default());
        assert!(
            matches!(second, Err(StoreError::Locked { .. })),
            "the handle holds the session's lock: {second:?}"
        );
        let mut followed = writer.follow(1);
        let seq = ok(writer.append(Message::user("list").into(), Some(4)).await);
        assert_eq!(seq.get(), 4);
        let switched = ok(writer
            .switch_preset(
                Preset::Auto,
                Some(ApprovalPolicy::Never),
                Defaults::default(),
                Some(5),
            )
            .await);
        let last = ok(switched.last().map(|seq| seq.get()).ok_or("no seq"));
        assert_eq!(ok(writer.next_seq().await), last + 1);
        for expected in 1..=last {
            let next = tokio::time::timeout(Duration::from_secs(5), followed.next()).await;
            let record = ok(ok(ok(next).ok_or("the stream ended")));
            assert_eq!(record.seq(), expected);
        }

        let pending = ok(parse_pending_action(
            br#"{"callId":"c1","stepId":"s1","name":"shell","arguments":{"command":"ls"}}"#,
        ));
        let (request, at) = ok(writer
            .review_request(pending.clone(), DEFAULT_MAX_REQUEST_BYTES)
            .await);
        assert_eq!(
            at,
            last + 1,
            "the request is about the session through seq {last}"
        );
        let snapshot = ok(store.snapshot(id("a")).await);
        let cold = ok(build_review_request(
            &snapshot.header,
            &snapshot.events,
            &pending,
            DEFAULT_MAX_REQUEST_BYTES,
        ));
        assert_eq!(
            request, cold,
            "the held snapshot gives the cold build's bytes"
        );

        let call = ToolStart::new("c1", "s1", "shell", &serde_json::json!({"command": "ls"}));
        let batch = ok(writer
            .clone()
            .append_batch(vec![call.into()], Some(at))
            .await);
        assert_eq!(batch.iter().map(|s| s.get()).collect::<Vec<_>>(), [at]);
        let stale = writer.append(Message::user("late").into(), Some(at)).await;
        assert!(
            matches!(stale, Err(StoreError::Conflict { .. })),
            "{stale:?}"
        );
        writer.close().await;
        assert!(store
            .store()
            .open_writer(&id("a"), WriterOptions::default())
            .is_ok());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jsonl_writer_handle_appends_reviews_and_switches() {
        let folder = ok(tempfile::tempdir());
        check_writer_handle(jsonl_store(folder.path())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_writer_handle_appends_reviews_and_switches() {
        let folder = ok(tempfile::tempdir());
        check_writer_handle(sqlite_store(folder.path())).await;
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

    /// Session `a` created in `writing` with one event, and followed in
    /// `reading` from seq 1, that event received.
    #[cfg(feature = "postgres")]
    async fn followed_from_its_first(writing: &AsyncStore, reading: &AsyncStore) -> Follow {
        ok(writing
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        ok(writing.append(id("a"), vec![note("one")], Some(1)).await);
        let mut followed = reading.follow(id("a"), 1);
        let first = tokio::time::timeout(Duration::from_secs(10), followed.recv()).await;
        assert_eq!(ok(ok(ok(first).ok_or("the stream ended"))).seq(), 1);
        followed
    }

    /// A PostgreSQL server that ends the follower's connection (a restart,
    /// a failover) does not end the stream: it reads again, and delivers
    /// what was appended meanwhile. (The blocking client connects outside
    /// the runtime.)
    #[cfg(feature = "postgres")]
    #[test]
    fn a_follow_goes_on_after_the_server_ends_its_connection() {
        let Some(schema) = crate::store::tests::postgres_store() else {
            return;
        };
        let name = format!("follow_{}", schema.schema);
        let url = format!("{}&application_name={name}", schema.url);
        let reading = AsyncStore::new(ok(Store::open(std::path::Path::new(&url))));
        let writing = AsyncStore::new(ok(Store::open(std::path::Path::new(&schema.url))));
        let runtime = two_worker_runtime();
        let mut followed = runtime.block_on(followed_from_its_first(&writing, &reading));
        let Store::Postgres(admin) = &schema.store else {
            panic!("not a PostgreSQL store");
        };
        let ended: i64 = ok(ok(ok(admin.connect()).query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1) AS ended",
            &[&name],
        ))
        .try_get(0));
        assert!(ended > 0, "the follower held no connection named {name}");
        runtime.block_on(async {
            ok(writing.append(id("a"), vec![note("two")], None).await);
            let next = tokio::time::timeout(Duration::from_secs(10), followed.recv()).await;
            let record = ok(ok(ok(next).ok_or("the stream ended")));
            assert_eq!(record.seq(), 2);
        });
        drop(followed);
        drop(runtime);
    }

    /// The last handle of a PostgreSQL store dropped inside the runtime,
    /// with an open writer and a follow: the blocking client's
    /// connections close off the runtime's threads (where closing one
    /// panicked).
    #[cfg(feature = "postgres")]
    #[test]
    fn a_postgres_store_dropped_inside_the_runtime_closes_its_connections_outside_it() {
        let Some(schema) = crate::store::tests::postgres_store() else {
            return;
        };
        let store = AsyncStore::new(ok(Store::open(std::path::Path::new(&schema.url))));
        let runtime = two_worker_runtime();
        runtime.block_on(async move {
            let followed = followed_from_its_first(&store, &store).await;
            drop(store);
            drop(followed);
            // The follow's task ends at its next look, holding the store.
            tokio::time::sleep(FOLLOW_POLL_INTERVAL * 5).await;
        });
        drop(runtime);
    }

    /// A value a task holds through [`OffRuntime`] (as a follow holds its
    /// store) is dropped off the runtime's threads however the task ends:
    /// cancelled as a runtime shutting down cancels it, or run to its end.
    /// A PostgreSQL client dropped on a runtime's thread panics.
    #[test]
    fn a_value_held_off_the_runtime_is_dropped_outside_it_when_its_task_is_cancelled() {
        struct Probe(std::sync::mpsc::Sender<bool>);
        impl Drop for Probe {
            fn drop(&mut self) {
                let outside = tokio::runtime::Handle::try_current().is_err();
                let _ = self.0.send(outside);
            }
        }
        let runtime = two_worker_runtime();
        for cancelled in [true, false] {
            let (sender, dropped) = std::sync::mpsc::channel();
            let held = OffRuntime(Some(Probe(sender)));
            let task = runtime.spawn(async move {
                tokio::time::sleep(match cancelled {
                    true => Duration::from_secs(60),
                    false => Duration::from_millis(1),
                })
                .await;
                drop(held);
            });
            if cancelled {
                task.abort();
            }
            let outside = dropped.recv_timeout(Duration::from_secs(10));
            assert_eq!(outside, Ok(true), "cancelled: {cancelled}");
        }
    }

    /// A task appending `events` to session `a` of `store`.
    fn spawn_append(
        store: &AsyncStore,
        events: Vec<NewEvent>,
        expected_seq: Option<u64>,
    ) -> tokio::task::JoinHandle<Result<Vec<AcknowledgedSeq>, StoreError>> {
        let store = store.clone();
        tokio::spawn(async move { store.append(id("a"), events, expected_seq).await })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_to_one_session_share_its_writer() {
        let folder = ok(tempfile::tempdir());
        let store = AsyncStore::new(sqlite_store(folder.path()));
        ok(store
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        let tasks: Vec<_> = (0..16)
            .map(|n| spawn_append(&store, vec![note(&n.to_string())], None))
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

    /// Counts fdatasyncs; the first one waits until `hold` is released, so
    /// that appends queue up behind it.
    #[derive(Default)]
    struct SlowFirstSync {
        syncs: std::sync::atomic::AtomicUsize,
        /// Whether the second fdatasync fails.
        fail_second: std::sync::atomic::AtomicBool,
        hold: std::sync::Mutex<bool>,
        released: std::sync::Condvar,
    }

    impl SlowFirstSync {
        fn release(&self) {
            *self.hold.lock().unwrap_or_else(PoisonError::into_inner) = true;
            self.released.notify_all();
        }
    }

    impl crate::testing::FaultInjector for SlowFirstSync {
        fn before(
            &self,
            point: crate::testing::FaultPoint,
            _: &std::path::Path,
        ) -> std::io::Result<()> {
            if point == crate::testing::FaultPoint::Fsync {
                let previous = self.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if previous == 1 && self.fail_second.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(std::io::Error::other(
                        "injected: the second fdatasync fails",
                    ));
                }
                if previous == 0 {
                    let mut released = self.hold.lock().unwrap_or_else(PoisonError::into_inner);
                    while !*released {
                        released = self
                            .released
                            .wait(released)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                }
            }
            Ok(())
        }
    }

    /// An AsyncStore over a JSONL store whose first append's fdatasync
    /// waits for `faults.release()`.
    async fn held_jsonl(folder: &std::path::Path) -> (AsyncStore, Arc<SlowFirstSync>) {
        let faults = Arc::new(SlowFirstSync::default());
        let jsonl = ok(crate::JsonlStore::create_folder(&folder.join("logs")))
            .with_io(crate::testing::Io::with_faults(faults.clone()));
        let store = AsyncStore::new(Store::Jsonl(jsonl));
        ok(store
            .create(header("a"), Vec::new(), Durability::Buffered)
            .await);
        (store, faults)
    }

    /// Waits until the first fdatasync is being held.
    async fn first_sync_started(faults: &SlowFirstSync) {
        while faults.syncs.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until `count` appends to session `a` wait for the next group
    /// (however slowly a loaded machine hands them to the blocking pool).
    async fn appends_waiting(store: &AsyncStore, count: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let slot = store.writer_table().get(&id("a")).cloned();
            let waiting = slot.map_or(0, |slot| slot.lock().waiting.len());
            if waiting >= count {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{waiting} appends waiting, not {count}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_to_one_session_that_wait_together_share_one_sync() {
        let folder = ok(tempfile::tempdir());
        let (store, faults) = held_jsonl(folder.path()).await;
        let first = spawn_append(&store, vec![note("first")], None);
        first_sync_started(&faults).await;
        let later: Vec<_> = (0..31)
            .map(|n| {
                let batch = vec![note(&format!("{n}.1")), note(&format!("{n}.2"))];
                spawn_append(&store, batch, None)
            })
            .collect();
        // Every later append reaches the session before the first sync
        // ends.
        appends_waiting(&store, 31).await;
        faults.release();
        ok(ok(first.await));
        let mut acknowledged = Vec::new();
        for task in later {
            let seqs = ok(ok(task.await));
            assert_eq!(seqs.len(), 2);
            assert_eq!(seqs[1].get(), seqs[0].get() + 1, "a batch stays whole");
            acknowledged.extend(seqs.iter().map(|seq| seq.get()));
        }
        acknowledged.sort_unstable();
        assert_eq!(acknowledged, (2..=63).collect::<Vec<_>>());
        assert_eq!(
            faults.syncs.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "the first append's sync, then one for the 31 that waited together"
        );
        let seqs: Vec<u64> = ok(store.snapshot(id("a")).await)
            .events
            .iter()
            .map(EventRecord::seq)
            .collect();
        assert_eq!(seqs, (1..=63).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_refused_in_a_group_leaves_the_others() {
        let folder = ok(tempfile::tempdir());
        let (store, faults) = held_jsonl(folder.path()).await;
        let first = spawn_append(&store, vec![note("first")], Some(1));
        first_sync_started(&faults).await;
        // Both want seq 2: whichever queues first gets it, the other is a
        // conflict; the third takes the next seq.
        let spawn = |expected, text| spawn_append(&store, vec![note(text)], expected);
        let (b, c) = (spawn(Some(2), "b"), spawn(Some(2), "c"));
        appends_waiting(&store, 2).await;
        let d = spawn(None, "d");
        appends_waiting(&store, 3).await;
        faults.release();
        ok(ok(first.await));
        let (b, c, d) = (ok(b.await), ok(c.await), ok(d.await));
        let (won, lost) = if b.is_ok() { (b, c) } else { (c, b) };
        assert_eq!(ok(won).iter().map(|s| s.get()).collect::<Vec<_>>(), [2]);
        assert!(
            matches!(
                lost,
                Err(StoreError::Conflict {
                    expected: 2,
                    actual: 3,
                    ..
                })
            ),
            "{lost:?}"
        );
        assert_eq!(ok(d).iter().map(|s| s.get()).collect::<Vec<_>>(), [3]);
        assert_eq!(faults.syncs.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(ok(store.snapshot(id("a")).await).events.len(), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_shared_sync_fails_every_append_of_its_group() {
        let folder = ok(tempfile::tempdir());
        let (store, faults) = held_jsonl(folder.path()).await;
        faults
            .fail_second
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let first = spawn_append(&store, vec![note("first")], None);
        first_sync_started(&faults).await;
        let group: Vec<_> = (0..4)
            .map(|n| spawn_append(&store, vec![note(&n.to_string())], None))
            .collect();
        appends_waiting(&store, 4).await;
        faults.release();
        ok(ok(first.await));
        let mut failure = 0;
        let mut in_doubt = 0;
        for task in group {
            match ok(task.await) {
                Err(StoreError::Io { source, .. })
                    if source.to_string().contains("may be in the log whole") =>
                {
                    assert!(source.to_string().contains("injected"), "{source}");
                    in_doubt += 1;
                }
                Err(StoreError::Io { .. }) => failure += 1,
                other => panic!("an append of the failed group: {other:?}"),
            }
        }
        assert_eq!(
            (failure, in_doubt),
            (1, 3),
            "one gets the failure itself, the others are in doubt as it is (all were written)"
        );
        // The writer was dropped: the next append reopens and re-verifies
        // the log (the refused appends are in doubt: written, never synced).
        let next = ok(store.append(id("a"), vec![note("after")], None).await);
        let snapshot = ok(store.snapshot(id("a")).await);
        assert_eq!(
            snapshot.events.last().map(EventRecord::seq),
            Some(next[0].get())
        );
        assert_eq!(snapshot.events[0].seq(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_value_sqlite_cannot_store_is_refused_alone_in_its_group() {
        let folder = ok(tempfile::tempdir());
        let store = AsyncStore::new(sqlite_store(folder.path()));
        ok(store
            .create(header("a"), Vec::new(), Durability::Fsync)
            .await);
        let appends: Vec<_> = (0..300u64)
            .map(|n| {
                let store = store.clone();
                let mut event = note(&n.to_string());
                if n == 150 {
                    event.ts = Some(u64::MAX);
                }
                tokio::spawn(async move { store.append(id("a"), vec![event], None).await })
            })
            .collect();
        let mut refused = Vec::new();
        for (n, append) in appends.into_iter().enumerate() {
            if let Err(error) = ok(append.await) {
                refused.push((n, error));
            }
        }
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            matches!(refused[0], (150, StoreError::InvalidEvent(_))),
            "{refused:?}"
        );
        assert_eq!(ok(store.snapshot(id("a")).await).events.len(), 299);
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
        store.close(&id("a")).await;
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
