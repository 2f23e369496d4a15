//! podlab-runtime
