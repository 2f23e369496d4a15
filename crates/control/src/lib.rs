//! podlab-control (being written)
