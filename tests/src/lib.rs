//! The package that holds sessionlog's one integration-test binary
//! (`integration/main.rs`); this library is empty on purpose, since every
//! shared helper lives inside that binary.
