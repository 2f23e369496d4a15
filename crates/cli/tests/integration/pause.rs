//! Integration tests: pause.
