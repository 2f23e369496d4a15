//! podlab-image
