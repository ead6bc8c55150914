//! The one integration-test binary of sessionlog.
//!
//! Module index:
//! - `support`: the independent SPEC §2 writer (`LogBuilder`, built by hand,
//!   never through our codec), a seeded generator (`Rng`) and the scan
//!   harness that feeds files to `LogScanner` line by line.
//! - `realistic`: seeded logs that read like agent sessions (turns, steps,
//!   calls, messages, approvals, preset batches, unknown types).
//! - `format`: hand-written logs decode and scan clean in any member order,
//!   and our encoder writes the same bytes as the independent writer.
//! - `codec`: round trips and hostile lines (proptest).
//! - `damage`: truncation at every offset, bit flips, and one row per
//!   corruption and torn-tail class.
//! - `docs`: docs/FORMAT.md's worked example and limits match the code.
//! - `cli_support`: runs the real `sessionlog` binary (built once if missing).
//! - `people`: the command line as auditors and runtime authors use it:
//!   examples, replay, tail -f, salvage, stats, the HTML report in headless
//!   Chromium, help, completions, the README.
//! - `faults`: the fault-seam campaign (every `Io` operation of a scripted
//!   workload failed in turn, both backends) and the workload and recovery
//!   model the other reliability campaigns share.
//! - `power_loss`: simulated power loss for JSONL: every sync point, unsynced
//!   bytes dropped, kept, cut or garbled, unsynced names vanished.
//! - `crash`: `kill -9` of `append`, `fork` and `migrate` at random moments.
//! - `cli_e2e`: the store and the binary end to end: logs cut at every
//!   offset reopened and appended, `Locked` across processes, `--expect-seq`,
//!   every exit code and their precedence.
//! - `concurrency`: readers during writes, 64 writers on one database, the
//!   one-writer lock across threads and processes.
//! - `import`: Codex CLI rollouts and Claude Code transcripts imported
//!   (the fixtures of `tests/fixtures/import/`, one per tool version
//!   family): counts, authority, `verify`, re-import, broken files.
//! - `manners`: every command at its edges: a closed pipe, an empty
//!   store, warnings, exit codes.
//! - `hostile`: arbitrary `append` lines and pending actions through the
//!   binary (proptest), records above 16 MiB, hostile ids, planted symlinks.

mod cli_e2e;
mod cli_support;
mod codec;
mod concurrency;
mod crash;
mod damage;
mod docs;
mod faults;
mod format;
mod hostile;
mod import;
mod manners;
mod people;
mod power_loss;
mod realistic;
mod support;
