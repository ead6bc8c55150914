//! The embedding examples run as a runtime author would run them: each
//! creates a store in a temporary folder, writes a session through the
//! public API, and fails (an error or a failed assertion) if any step the
//! README promises does not hold.

#[allow(dead_code)]
#[path = "../../examples/embed.rs"]
mod embed;

#[allow(dead_code)]
#[path = "../../examples/embed_async.rs"]
mod embed_async;

#[test]
fn the_embedding_example_runs() {
    if let Err(error) = embed::main() {
        panic!("examples/embed.rs failed: {error}");
    }
}

#[test]
fn the_async_embedding_example_runs() {
    if let Err(error) = embed_async::main() {
        panic!("examples/embed_async.rs failed: {error}");
    }
}
