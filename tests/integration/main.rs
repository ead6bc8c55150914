//! The one integration-test binary of sessionlog.
//!
//! Module index:
//! - `support`: the independent writer of docs/FORMAT.md logs (`LogBuilder`, built by hand,
//!   never through our codec), a seeded generator (`Rng`) and the scan
//!   harness that feeds files to `LogScanner` line by line.
//! - `realistic`: seeded logs that read like agent sessions (turns, steps,
//!   calls, messages, approvals, preset batches, unknown types).
//! - `format`: hand-written logs decode and scan clean in any member order,
//!   and our encoder writes the same bytes as the independent writer.
//! - `codec`: round trips and hostile lines (proptest).
//! - `damage`: truncation at every offset, bit flips, one row per
//!   corruption and torn-tail class, and the reason of damage inside a batch.
//! - `docs`: docs/FORMAT.md's worked example, limits, schemas and versions
//!   tables, and docs/EVENTS.md's example log, projection, pending action
//!   and reply, match the code (the schemas: the tables a new store has).
//! - `embedding`: `examples/embed.rs` and `examples/embed_async.rs` run.
//! - `cli_support`: runs the real `sessionlog` binary (built once if missing).
//! - `people`: the command line as auditors and runtime authors use it:
//!   examples, replay, tail -f, salvage, stats, the HTML report in headless
//!   Chromium, help, completions, the README.
//! - `partial_reads`: `project --at K` reads through K, `tail -n N` of a
//!   database reads its last N rows; damage beyond is left to `verify`.
//! - `faults`: the fault-seam campaign (every `Io` operation of a scripted
//!   workload failed in turn, both backends) and the workload and recovery
//!   model the other reliability campaigns share.
//! - `power_loss`: simulated power loss for JSONL: every sync point, unsynced
//!   bytes dropped, kept, cut or garbled, unsynced names vanished.
//! - `crash`: `kill -9` of `append`, `fork` and `migrate` at random moments.
//! - `syncs`: the system calls of the real binary under `strace`: a SQLite
//!   store's close syncs the database before it drops the log, a new
//!   store's folders are synced into their parents (run by `.ci/run`).
//! - `cli_e2e`: the store and the binary end to end: logs cut at every
//!   offset reopened and appended, `Locked` across processes, `--expect-seq`,
//!   every exit code and their precedence.
//! - `concurrency`: readers during writes, 64 writers on one database, the
//!   one-writer lock across threads and processes.
//! - `import`: Codex CLI rollouts and Claude Code transcripts imported
//!   (the fixtures of `tests/fixtures/import/`, one per tool version
//!   family): counts, authority, `verify`, re-import, broken files.
//! - `sqlite_damage`: a multi-session database damaged page by page at
//!   random, put to verify, export and migrate; readers that change nothing
//!   (another application's database, a newer schema, no write
//!   permission); a write-ahead log removed under `append`, then SIGKILL.
//! - `resume`: long sessions: a refused batch leaves the writer's state as
//!   it was (proptest), state snapshots resume to the whole fold's state on
//!   every backend, a torn, tampered, foreign, stale or unknown one is
//!   ignored, and `kill -9` while one is written breaks nothing.
//! - `reviewer`: `review` and `review-audit` against a loopback HTTP server
//!   playing the reviewer model: the bytes sent, every kind of answer, what
//!   `--record` leaves, the key never shown, audits that agree or differ.
//! - `manners`: every command at its edges: a closed pipe, an empty
//!   store, warnings, exit codes.
//! - `forks`: forks by reference in SQLite and PostgreSQL read as copied
//!   forks (export, verify, project, tail, review-request), grandchildren,
//!   migrate writes them out whole, seals, a deleted parent row.
//! - `memory`: the peak resident memory of the commands that read a whole
//!   session (fork, replay, review-request, tail), as child processes, on a
//!   log far above the 64 MiB limit.
//! - `postgres`: the PostgreSQL store on a real server: one table of
//!   commands over all three backends, JSONL → PostgreSQL → SQLite → JSONL,
//!   two writers from two processes, `kill -9` of `append`, and the server
//!   stopped with `pg_ctl stop -m immediate` mid-append; `review-audit`,
//!   `report --audit` and `import --into` on a PostgreSQL store.
//! - `hostile`: arbitrary `append` lines and pending actions through the
//!   binary (proptest), records above 16 MiB, hostile ids, planted symlinks
//!   (never followed; one given as a log is refused as a symbolic link).
//! - `hostile_logs`: terminal escapes in log text, FIFOs in place of logs,
//!   exit precedence, event type spelling, `tail -f` on a replaced log, a
//!   damaged batch's torn tail, and the messages of these cases.
//! - `seals`: the attacks seals, trust files and anchors catch, forks, both
//!   backends, exit 7 and its precedence, and the chain property (proptest).

mod cli_e2e;
mod cli_support;
mod codec;
mod concurrency;
mod crash;
mod damage;
mod docs;
mod embedding;
mod faults;
mod forks;
mod format;
mod hostile;
mod hostile_logs;
mod import;
mod manners;
mod memory;
mod partial_reads;
mod people;
mod postgres;
mod power_loss;
mod realistic;
mod resume;
mod reviewer;
mod seals;
mod side_by_side;
mod sqlite_damage;
mod support;
mod syncs;
