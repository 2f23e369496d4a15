//! Integration tests: uts.
