//! A store opened by a relative path, in a process that then changes its
//! working folder (a runtime running a tool there): its writer goes on
//! writing the same session, and finds the log's name (a JSONL file, a
//! database and its write-ahead log) where it opened it. A test binary of
//! its own, since the working folder is the process's.

use sessionlog_schema::{SessionHeader, SessionId};
use sessionlog_store::{Durability, NewEvent, Store, WriterOptions};

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("unexpected error: {error}"))
}

fn note(n: u32) -> NewEvent {
    NewEvent {
        event_type: "x-test/note".to_owned(),
        data: format!("{{\"n\":{n}}}"),
        ts: Some(1_700_000_000_000),
    }
}

#[test]
fn a_writer_of_a_store_opened_by_a_relative_path_outlives_a_change_of_working_folder() {
    let folder = ok(tempfile::tempdir());
    let elsewhere = ok(tempfile::tempdir());
    let id = ok(SessionId::parse("w1"));
    let names: &[&str] = match cfg!(feature = "sqlite") {
        true => &["sessions", "sessions.db"],
        false => &["sessions"],
    };
    for &name in names {
        ok(std::env::set_current_dir(folder.path()));
        let store = ok(Store::create(std::path::Path::new(name)));
        let header = SessionHeader::root(id.clone(), 1_700_000_000_000, "/work".into());
        ok(store.create_session(&header, &[], Durability::Fsync));
        let mut writer = ok(store.open_writer(&id, WriterOptions::default()));
        assert_eq!(ok(writer.append(note(1), None)).get(), 1);
        ok(std::env::set_current_dir(elsewhere.path()));
        assert_eq!(ok(writer.append(note(2), None)).get(), 2, "{name}");
        // Enough for the writer to keep a state snapshot as it closes:
        // beside the log, not in the folder the process is in now.
        let more = (3..=1100).map(note).collect();
        ok(writer.append_batch(more, None));
        drop(writer);
        if name == "sessions" {
            assert!(folder.path().join("sessions/.w1.jsonl.state").exists());
            assert!(!elsewhere.path().join("sessions").exists());
        }
        drop(store);
        let reread = ok(Store::open_read_only(&folder.path().join(name)));
        assert_eq!(ok(reread.snapshot(&id)).events.len(), 1100, "{name}");
    }
}
