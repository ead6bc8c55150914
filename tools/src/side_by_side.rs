//! Reading the sessions of a whole store on more than one thread, as of
//! one moment, with what is found handed on in session order.
//!
//! A store-wide `verify` or `stats` of a store of many small sessions is
//! bound by the work of each session (decoding and checking its rows,
//! folding them, the seal chain's hash), not by waiting for the disk, so
//! a second core halves its time. The sessions are cut into chunks, each
//! taken by the first reader free (the calling thread is one of them):
//! each reader is a handle of the store with a read of its own, all of the
//! same moment (`Store::hold_read_for`), and the chunks' results are
//! handed on in order by the calling thread, so that what is printed is
//! in the order a single thread would print it, and at most a few chunks
//! per reader wait.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use anyhow::{anyhow, Result};
use sessionlog_store::HeldRead;

use crate::target::{SessionRef, Target};

/// The most readers a command asks for, however many cores there are:
/// each is a connection with a page cache of its own.
pub const MAX_READERS: usize = 8;

/// The most sessions a chunk holds: large enough that a reader's read
/// ahead past its chunk (at most a chunk of session rows and one of event
/// rows) is a small part of its work, small enough that a chunk's results
/// are little to hold.
const MAX_CHUNK: usize = 1024;

/// Chunks each reader takes at least, when the store holds few sessions:
/// so that one large session does not leave the other readers idle for
/// long.
const CHUNKS_PER_READER: usize = 16;

/// Handles of one target, each with a read held, all of one moment.
#[derive(Debug)]
pub struct Readers {
    targets: Vec<Target>,
    /// A handle for a check of the whole store on a thread of its own,
    /// beside the readers (see [`Readers::hold_with_checker`]).
    checker: Option<Target>,
    _held: Vec<HeldRead>,
}

impl Readers {
    /// Holds a read of `target` for as many readers as this machine has
    /// cores (at most `wanted`); one for a lone log, and fewer when the
    /// store cannot give more (see `Store::hold_read_for`). With them, one
    /// more handle of the same moment when the store can give it: the
    /// [`checker`](Self::checker), for checks of the whole store (SQLite's
    /// check of every page, its count of the rows) that run
    /// [`beside`](Self::beside) the readers, the cores shared among them
    /// all.
    pub fn hold_with_checker(target: &Target, wanted: usize) -> Result<Readers> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let readers = wanted.min(cores).max(1);
        Ok(match target {
            Target::File(path) => Readers {
                targets: vec![Target::File(path.clone())],
                checker: None,
                _held: Vec::new(),
            },
            Target::Store(store) => {
                let (mut targets, held): (Vec<Target>, Vec<HeldRead>) = store
                    .hold_read_for(readers + 1)?
                    .into_iter()
                    .map(|(store, held)| (Target::Store(store), held))
                    .unzip();
                let checker = match targets.len() > readers {
                    true => targets.pop(),
                    false => None,
                };
                Readers {
                    targets,
                    checker,
                    _held: held,
                }
            }
        })
    }

    /// The first reader: the one of the calling thread.
    pub fn first(&self) -> &Target {
        &self.targets[0]
    }

    /// The handle held for a check beside the readers, when the store
    /// gave one ([`hold_with_checker`](Self::hold_with_checker)).
    pub fn checker(&self) -> Option<&Target> {
        self.checker.as_ref()
    }

    /// Runs `check` on the [`checker`](Self::checker)'s handle on a thread
    /// of its own, beside `main`, which is given a way to wait for what
    /// `check` gave; with no checker, waiting runs `check` on the first
    /// reader then. A panic of `check` comes back when it is waited for.
    pub fn beside<A, B>(
        &self,
        check: impl Fn(&Target) -> Result<A> + Sync,
        main: impl FnOnce(Box<dyn FnOnce() -> Result<A> + '_>) -> Result<B>,
    ) -> Result<B>
    where
        A: Send,
    {
        let check = &check;
        std::thread::scope(|scope| {
            let running = self
                .checker()
                .map(|checker| scope.spawn(move || check(checker)));
            main(Box::new(move || match running {
                Some(running) => running
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => check(self.first()),
            }))
        })
    }

    /// Runs `work` on every chunk of `sessions`, each reader on a thread
    /// of its own taking the next chunk nobody has taken, and hands each
    /// chunk's result to `take` in the order of `sessions`. The calling
    /// thread is a reader too, and the one that runs `take`: it works on a
    /// chunk only while the next result in order is not there yet, so the
    /// time `take` spends (printing, say) goes to it and the other readers
    /// take more chunks meanwhile. At most [`AHEAD_PER_READER`] chunks per
    /// reader are taken past the next one `take` waits for, so that what
    /// waits to be taken stays small. The first error, of `work` or of
    /// `take`, ends the run: the other readers stop after the chunk they
    /// are on.
    pub fn in_order<C, W, T>(&self, sessions: &[SessionRef], work: W, mut take: T) -> Result<()>
    where
        C: Send,
        W: Fn(&Target, &[SessionRef]) -> Result<C> + Sync,
        T: FnMut(C) -> Result<()>,
    {
        let readers = self.targets.len();
        let size = (sessions.len() / (readers * CHUNKS_PER_READER)).clamp(1, MAX_CHUNK);
        if readers == 1 || sessions.len() <= size {
            for chunk in sessions.chunks(size) {
                take(work(self.first(), chunk)?)?;
            }
            return Ok(());
        }
        let chunks: Vec<&[SessionRef]> = sessions.chunks(size).collect();
        let ahead = readers * AHEAD_PER_READER;
        let board = Board::new(chunks.len(), ahead);
        let (work, board, chunks) = (&work, &board, &chunks);
        std::thread::scope(|scope| {
            for target in self.targets.iter().skip(1) {
                scope.spawn(move || {
                    while let Some(index) = board.claim_waiting() {
                        let mut claim = Claim {
                            board,
                            index: Some(index),
                        };
                        let result = work(target, chunks[index]);
                        claim.deliver(result);
                    }
                });
            }
            let mut run = || -> Result<()> {
                for next in 0..chunks.len() {
                    let result = loop {
                        match board.result_or_chunk(next) {
                            Next::Result(result) => break result,
                            Next::Chunk(index) if index == next => {
                                break work(self.first(), chunks[index])
                            }
                            Next::Chunk(index) => {
                                let result = work(self.first(), chunks[index]);
                                board.deliver(index, result);
                            }
                        }
                    };
                    board.taken(next + 1);
                    take(result?)?;
                }
                Ok(())
            };
            let done = run();
            board.stop();
            done
        })
    }
}

/// Chunks a reader may take past the next result the calling thread
/// waits for, per reader.
const AHEAD_PER_READER: usize = 2;

/// Which chunks are taken and what they gave, shared by the readers of
/// one [`Readers::in_order`].
struct Board<C> {
    state: Mutex<BoardState<C>>,
    changed: Condvar,
    chunks: usize,
    ahead: usize,
}

/// What the calling thread does next (see [`Board::result_or_chunk`]).
enum Next<C> {
    /// Takes the result it waits for.
    Result(Result<C>),
    /// Works on this chunk meanwhile.
    Chunk(usize),
}

struct BoardState<C> {
    /// The first chunk nobody has taken.
    next: usize,
    /// The chunks whose results went to `take`.
    taken: usize,
    /// Results not taken yet, by chunk.
    results: BTreeMap<usize, Result<C>>,
    stopped: bool,
}

impl<C> Board<C> {
    fn new(chunks: usize, ahead: usize) -> Board<C> {
        Board {
            state: Mutex::new(BoardState {
                next: 0,
                taken: 0,
                results: BTreeMap::new(),
                stopped: false,
            }),
            changed: Condvar::new(),
            chunks,
            ahead,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BoardState<C>> {
        // A reader that panicked holds no claim (see `Claim`), and the
        // state it left is whole: each change is one assignment.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the board changes.
    fn wait<'a>(&self, state: MutexGuard<'a, BoardState<C>>) -> MutexGuard<'a, BoardState<C>> {
        self.changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the next chunk for a reader, when one is left that is not
    /// too far past the next result the calling thread waits for.
    fn claim(&self, state: &mut BoardState<C>) -> Option<usize> {
        let claimable = state.next < self.chunks && state.next < state.taken + self.ahead;
        claimable.then(|| {
            state.next += 1;
            state.next - 1
        })
    }

    /// The next chunk for a reader of its own thread, waiting while it
    /// would be too far ahead; `None` when there is none left or the run
    /// has stopped.
    fn claim_waiting(&self) -> Option<usize> {
        let mut state = self.lock();
        loop {
            if state.stopped || state.next >= self.chunks {
                return None;
            }
            if let Some(index) = self.claim(&mut state) {
                return Some(index);
            }
            state = self.wait(state);
        }
    }

    fn deliver(&self, index: usize, result: Result<C>) {
        self.lock().results.insert(index, result);
        self.changed.notify_all();
    }

    /// For the calling thread, which waits for the result of chunk
    /// `index`: that result once it is there, or else a chunk to work on
    /// meanwhile, waiting while there is neither.
    fn result_or_chunk(&self, index: usize) -> Next<C> {
        let mut state = self.lock();
        loop {
            if let Some(result) = state.results.remove(&index) {
                return Next::Result(result);
            }
            if let Some(chunk) = self.claim(&mut state) {
                return Next::Chunk(chunk);
            }
            state = self.wait(state);
        }
    }

    /// Chunks before `taken` went to `take`: readers may go further.
    fn taken(&self, taken: usize) {
        self.lock().taken = taken;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }
}

/// A chunk taken by a reader of its own thread: should the reader panic
/// before it gives the chunk's result, an error goes in its place, so that
/// the calling thread does not wait for it (the panic itself comes back
/// when the threads are joined).
struct Claim<'a, C> {
    board: &'a Board<C>,
    index: Option<usize>,
}

impl<C> Claim<'_, C> {
    fn deliver(&mut self, result: Result<C>) {
        if let Some(index) = self.index.take() {
            self.board.deliver(index, result);
        }
    }
}

impl<C> Drop for Claim<'_, C> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            let stopped = anyhow!("a reading thread stopped before its chunk");
            self.board.deliver(index, Err(stopped));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use sessionlog_schema::{SessionHeader, SessionId};
    use sessionlog_store::{Durability, SqliteStore, Store};

    use super::*;

    /// A database of `count` sessions without events, held for readers.
    fn readers_of(count: usize) -> (tempfile::TempDir, Readers, Vec<SessionRef>) {
        let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let path = folder.path().join("store.db");
        drop(Store::create(&path).unwrap_or_else(|error| panic!("create: {error}")));
        let sqlite = SqliteStore::open(&path).unwrap_or_else(|error| panic!("open: {error}"));
        let sessions = (0..count)
            .map(|index| {
                let id = SessionId::parse(&format!("s{index:04}"))
                    .unwrap_or_else(|error| panic!("{error}"));
                (SessionHeader::root(id, 1, "/work".into()), Vec::new())
            })
            .collect();
        sqlite
            .create_many(sessions, Durability::Buffered)
            .unwrap_or_else(|error| panic!("fill: {error}"));
        let target = Target::open(&path).unwrap_or_else(|error| panic!("target: {error}"));
        let readers = Readers::hold_with_checker(&target, MAX_READERS)
            .unwrap_or_else(|error| panic!("hold: {error}"));
        let sessions = target
            .sessions(None)
            .unwrap_or_else(|error| panic!("sessions: {error}"));
        assert_eq!(sessions.len(), count);
        (folder, readers, sessions)
    }

    /// Work that takes longer on some chunks than on others, so that the
    /// readers finish them out of order.
    fn uneven(chunk: &[SessionRef]) -> Vec<String> {
        let first = chunk
            .first()
            .and_then(|session| session.id.as_str()[1..].parse::<u64>().ok())
            .unwrap_or(0);
        let spins = if first.is_multiple_of(3) {
            200_000
        } else {
            2_000
        };
        std::hint::black_box((0..spins).fold(0u64, |sum, n| sum.wrapping_add(n)));
        chunk.iter().map(|session| session.id.to_string()).collect()
    }

    #[test]
    fn every_chunk_is_taken_once_and_handed_on_in_order() {
        let (_folder, readers, sessions) = readers_of(500);
        let worked = AtomicUsize::new(0);
        let mut seen = Vec::new();
        readers
            .in_order(
                &sessions,
                |_, chunk| {
                    worked.fetch_add(chunk.len(), Ordering::Relaxed);
                    Ok(uneven(chunk))
                },
                |ids| {
                    seen.extend(ids);
                    Ok(())
                },
            )
            .unwrap_or_else(|error| panic!("{error}"));
        let expected: Vec<String> = sessions.iter().map(|s| s.id.to_string()).collect();
        assert_eq!(seen, expected);
        assert_eq!(worked.load(Ordering::Relaxed), sessions.len());
    }

    #[test]
    fn the_first_error_ends_the_run_after_the_chunks_before_it() {
        let (_folder, readers, sessions) = readers_of(500);
        let failing = sessions[250].id.clone();
        let mut seen = Vec::new();
        let result = readers.in_order(
            &sessions,
            |_, chunk| match chunk.iter().any(|session| session.id == failing) {
                true => Err(anyhow!("chunk of {failing}")),
                false => Ok(uneven(chunk)),
            },
            |ids| {
                seen.extend(ids);
                Ok(())
            },
        );
        let error = result.err().map(|error| error.to_string());
        assert_eq!(error, Some(format!("chunk of {failing}")));
        // Every chunk before the failing one, in order, and nothing after.
        assert!(!seen.is_empty() && seen.len() <= 250, "{}", seen.len());
        let expected: Vec<String> = sessions[..seen.len()]
            .iter()
            .map(|s| s.id.to_string())
            .collect();
        assert_eq!(seen, expected);
        // An error of `take` ends it as well.
        let mut taken = 0;
        let result = readers.in_order(
            &sessions,
            |_, chunk| Ok(uneven(chunk)),
            |_| {
                taken += 1;
                match taken {
                    3 => Err(anyhow!("the third")),
                    _ => Ok(()),
                }
            },
        );
        assert_eq!(
            result.err().map(|error| error.to_string()),
            Some("the third".into())
        );
        assert_eq!(taken, 3);
    }

    #[test]
    fn a_reader_that_panics_does_not_leave_the_run_waiting() {
        let (_folder, readers, sessions) = readers_of(500);
        if readers.targets.len() < 2 {
            // One core: every chunk is the calling thread's.
            return;
        }
        // The calling thread holds its first chunk until another reader
        // has taken one, which then panics.
        let taken = std::sync::atomic::AtomicBool::new(false);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            readers.in_order(
                &sessions,
                |target, chunk| {
                    if !std::ptr::eq(target, readers.first()) {
                        taken.store(true, Ordering::SeqCst);
                        panic!("a reader gave up");
                    }
                    let started = std::time::Instant::now();
                    while !taken.load(Ordering::SeqCst)
                        && started.elapsed() < std::time::Duration::from_secs(30)
                    {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Ok(uneven(chunk))
                },
                |_| Ok(()),
            )
        }));
        assert!(taken.load(Ordering::SeqCst), "another reader took a chunk");
        assert!(outcome.is_err(), "the panic comes back");
    }
}
