//! podlab-ns
