//! Integration tests: pid.
