//! The binary Cargo built for this package answers as this package.
//!
//! Beyond what it checks, this test is why `cargo test --workspace` builds
//! `target/<profile>/sessionlog` afresh: Cargo builds a package's binaries
//! for its integration tests, and the command-line tests of
//! `sessionlog-tests` run that binary (they refuse one older than its
//! sources rather than build a second copy).

use std::process::Command;

#[test]
fn the_built_binary_reports_this_package_version() {
    let binary = env!("CARGO_BIN_EXE_sessionlog");
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|error| panic!("run {binary} --version: {error}"));
    assert!(
        output.status.success(),
        "{binary} --version: {}",
        output.status
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("sessionlog {}\n", env!("CARGO_PKG_VERSION"))
    );
}
