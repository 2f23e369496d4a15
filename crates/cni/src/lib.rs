//! podlab-cni (being written)
