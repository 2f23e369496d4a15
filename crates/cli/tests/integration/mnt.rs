//! Integration tests: mnt.
