//! Reading the sessions of a whole store on more than one thread, as of
//! one moment, with what is found handed on in session order.
//!
//! A store-wide `verify` or `stats` of a store of many small sessions is
//! bound by the work of each session (decoding and checking its rows,
//! folding them, the seal chain's hash), not by waiting for the disk, so
//! a second core halves its time. The sessions are cut into chunks taken
//! in turn by each reader (the calling thread is the first): each reader
//! is a handle of the store with a read of its own, all of the same
//! moment (`Store::hold_read_for`), and the chunks' results come back
//! through one-chunk channels, so that what is printed is in the order a
//! single thread would print it, and at most a chunk per reader waits.

use std::sync::mpsc;

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
    /// store cannot give more (see `Store::hold_read_for`).
    pub fn hold(target: &Target, wanted: usize) -> Result<Readers> {
        Readers::hold_for(target, wanted, false)
    }

    /// As [`hold`](Self::hold), with one more handle of the same moment
    /// when the store can give it: the [`checker`](Self::checker), for a
    /// check of the whole store (SQLite's check of every page) that runs
    /// beside the readers, the cores shared among them all.
    pub fn hold_with_checker(target: &Target, wanted: usize) -> Result<Readers> {
        Readers::hold_for(target, wanted, true)
    }

    fn hold_for(target: &Target, wanted: usize, checker: bool) -> Result<Readers> {
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
                    .hold_read_for(readers + usize::from(checker))?
                    .into_iter()
                    .map(|(store, held)| (Target::Store(store), held))
                    .unzip();
                let checker = match checker && targets.len() > readers {
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

    /// Runs `work` on every chunk of `sessions`, the chunks taken in turn
    /// by each reader on a thread of its own, and hands each chunk's
    /// result to `take` in the order of `sessions`. The first error, of
    /// `work` or of `take`, ends the run: the other readers stop after
    /// the chunk they are on.
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
        let work = &work;
        std::thread::scope(|scope| {
            let mut others = Vec::with_capacity(readers - 1);
            for (index, target) in self.targets.iter().enumerate().skip(1) {
                let (results, received) = mpsc::sync_channel(1);
                scope.spawn(move || {
                    for chunk in sessions.chunks(size).skip(index).step_by(readers) {
                        // The receiver is gone when the run ended early.
                        if results.send(work(target, chunk)).is_err() {
                            break;
                        }
                    }
                });
                others.push(received);
            }
            for (index, chunk) in sessions.chunks(size).enumerate() {
                let result = match index % readers {
                    0 => work(self.first(), chunk),
                    other => others[other - 1]
                        .recv()
                        .map_err(|_| anyhow!("a reading thread ended before its chunk"))?,
                };
                take(result?)?;
            }
            Ok(())
        })
    }
}
