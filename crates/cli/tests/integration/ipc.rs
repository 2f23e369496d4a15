//! Integration tests: ipc.
