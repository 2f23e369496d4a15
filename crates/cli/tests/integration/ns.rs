//! Integration tests: ns.
