//! The Rust side of the Node.js benchmark (`bench/bench.js`): the same
//! operations through the Rust API, on the same disk, timed inside this
//! process. `bench.js` runs it between its own rounds and prints the
//! ratios.
//!
//! ```text
//! baseline append STORE COUNT fsync|buffered   appends COUNT events one at a time
//! baseline snapshot STORE ID                   reads a session's good prefix
//! ```
//!
//! Prints `{"seconds": S, "count": N}`.

use std::path::PathBuf;
use std::time::Instant;

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{now_ms, Durability, NewEvent, Store, WriterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (seconds, count) = match args.as_slice() {
        [what, store, count, durability] if what == "append" => {
            let durability = match durability.as_str() {
                "buffered" => Durability::Buffered,
                _ => Durability::Fsync,
            };
            append(PathBuf::from(store), count.parse()?, durability)?
        }
        [what, store, id] if what == "snapshot" => {
            let store = Store::open(&PathBuf::from(store))?;
            let id = SessionId::parse(id)?;
            let started = Instant::now();
            let snapshot = store.snapshot(&id)?;
            (started.elapsed().as_secs_f64(), snapshot.events.len())
        }
        _ => {
            return Err(
                "usage: baseline append STORE COUNT fsync|buffered | snapshot STORE ID".into(),
            )
        }
    };
    println!("{{\"seconds\":{seconds},\"count\":{count}}}");
    Ok(())
}

/// Creates a session in a new store and appends `count` events to it one
/// at a time, as a runtime does.
fn append(
    location: PathBuf,
    count: usize,
    durability: Durability,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let store = Store::create(&location)?;
    let id = SessionId::parse("bench")?;
    store.create_session(
        &SessionHeader::root(id.clone(), now_ms(), "/bench".into()),
        &[],
        durability,
    )?;
    let mut writer = store.open_writer(
        &id,
        WriterOptions {
            durability,
            keep_snapshot: false,
            ..WriterOptions::default()
        },
    )?;
    let started = Instant::now();
    for n in 0..count {
        writer.append(NewEvent::new("x-bench/note", note(n)), None)?;
    }
    Ok((started.elapsed().as_secs_f64(), count))
}

/// The data of the n-th event: the same text `bench.js` appends.
fn note(n: usize) -> String {
    format!(
        r#"{{"n":{n},"text":"a note of about one hundred bytes, as a small runtime event carries"}}"#
    )
}
