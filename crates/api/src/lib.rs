//! # podlab-api: Kubernetes objects, decoded the way the API server decodes them
//!
//! podlab takes real `v1.Pod` manifests, the ones `kubectl apply -f` sends to a cluster, and
//! prints real `v1.Pod` objects back. The types are those of the `k8s-openapi` crate (generated
//! from Kubernetes' own OpenAPI schema), so what podlab accepts and prints is what a cluster
//! would. This crate is the API server's front door for podlab:
//!
//! * [`manifest`]: YAML or JSON text → typed objects. Syntax errors name the line; type errors
//!   and unknown fields name the field path (`spec.containers[0].image`).
//! * [`supported`]: the fields podlab implements. A field Kubernetes knows but podlab does not
//!   implement is rejected with its path, never silently ignored.
//! * [`validation`]: the API server's checks (required fields, DNS names, duplicates, enums).
//! * [`resources`]: `requests` and `limits`: quantities, their checks and defaults, the QoS class.
//! * [`defaults`]: the API server's defaulting (restartPolicy, grace period, probe timings...).
//! * [`update`]: what an update of an existing Pod may change (`ValidatePodUpdate`).
//! * [`resize`]: the `resize` subresource: what an in-place resize may change (`ValidatePodResize`).
//! * [`patch`]: strategic merge, JSON merge and JSON patches (`kubectl patch --type`).
//! * [`warnings`]: the warnings the API server answers a create with (`Warning: ...`).
//! * [`yaml`]: YAML read as kubectl reads it (YAML 1.1's octal `defaultMode: 0644`).
//!
//! Nothing here touches the machine: it is pure and tested without root.

pub mod defaults;
pub mod env;
pub mod manifest;
pub mod patch;
pub mod quantity;
pub mod resize;
pub mod resources;
pub mod security;
pub mod supported;
pub mod update;
pub mod validation;
pub mod volumes;
pub mod warnings;
pub mod yaml;

pub use k8s_openapi::api::core::v1 as core;
pub use manifest::{decode, decode_pod, Object};

/// Why a manifest was refused. Every variant says where: a line, or field paths.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{input}: YAML syntax: {message}")]
    Syntax { input: String, message: String },
    #[error("{input}: {path}: {message}")]
    Type {
        input: String,
        path: String,
        message: String,
    },
    #[error("{input}: {kind} {name:?} is invalid: {}", render_field_errors(.errors))]
    Invalid {
        input: String,
        kind: String,
        name: String,
        errors: Vec<FieldError>,
    },
    #[error("{input}: {0}", .message)]
    Other { input: String, message: String },
}

/// One problem at one field, phrased as the API server phrases it
/// (`spec.containers[0].image: Required value`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

fn render_field_errors(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
