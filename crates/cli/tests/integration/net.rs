//! Integration tests: net.
