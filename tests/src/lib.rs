//! Shared helpers live in the integration binary.
