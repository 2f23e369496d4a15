//! Look-alikes of the pieces of Go's standard library whose exact bytes kubectl shows.
//!
//! kubectl is a Go program: what `-o jsonpath`, `-o go-template`, `-o json` and `-o yaml` print is
//! decided by Go's `fmt`, `strconv`, `encoding/json`, `text/tabwriter` and by how JSON decodes into
//! `interface{}` values. These modules reproduce those behaviours over podlab's JSON objects so that
//! podlab prints the same bytes; each one names the Go package it stands in for.

pub(crate) mod data;
pub(crate) mod float;
pub(crate) mod fmt;
pub(crate) mod json;
pub(crate) mod quote;
pub(crate) mod sort;
pub(crate) mod tabwriter;

pub(crate) use data::{Data, NumberMode};
