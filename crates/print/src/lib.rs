//! podlab-print (being written)
