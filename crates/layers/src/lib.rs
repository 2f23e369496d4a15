//! podlab-layers (being written)
