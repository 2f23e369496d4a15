//! Integration tests: user.
