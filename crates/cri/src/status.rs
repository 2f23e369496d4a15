//! gRPC statuses the way containerd's CRI plugin words them: what podlab-runtime's and
//! podlab-image's errors become on the wire, and the `InvalidArgument` of a field podlab refuses.

use podlab_runtime::Error;
use tonic::{Code, Status};

/// A request field that podlab cannot honour or that is malformed: `InvalidArgument` naming it.
pub fn invalid(field: &str, why: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {why}"))
}

/// A field podlab does not implement (yet): refused, never silently dropped.
pub fn unsupported(field: &str, what: impl std::fmt::Display) -> Status {
    invalid(field, format!("{what} is not supported by podlab"))
}

/// containerd's NotFound for an id it cannot find.
pub fn sandbox_not_found(id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find sandbox {id:?}: not found"
    ))
}

pub fn container_not_found(id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find container {id:?}: not found"
    ))
}

/// The status a runtime error stands for.
pub fn from_runtime(err: Error) -> Status {
    let code = match &err {
        Error::SandboxNotFound { id } => return sandbox_not_found(id),
        Error::ContainerNotFound { id } => return container_not_found(id),
        Error::ImageNotFound { .. } => Code::NotFound,
        Error::AmbiguousId { .. } | Error::InvalidConfig { .. } | Error::Invalid(_) => {
            Code::InvalidArgument
        }
        Error::SandboxNotReady { .. } | Error::InvalidState { .. } => Code::FailedPrecondition,
        Error::Timeout { .. } => Code::DeadlineExceeded,
        _ => Code::Unknown,
    };
    Status::new(code, err.to_string())
}

/// The status an image store error stands for.
pub fn from_image(err: podlab_image::Error) -> Status {
    let code = match &err {
        podlab_image::Error::NotFound { .. } => Code::NotFound,
        podlab_image::Error::InUse { .. } => Code::FailedPrecondition,
        _ => Code::Unknown,
    };
    Status::new(code, err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ids_are_not_found_in_containerds_words() {
        let status = from_runtime(Error::ContainerNotFound { id: "abc".into() });
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(
            status.message(),
            "an error occurred when try to find container \"abc\": not found"
        );
        let status = from_runtime(Error::SandboxNotFound { id: "abc".into() });
        assert_eq!(status.code(), Code::NotFound);
        assert!(status.message().contains("find sandbox \"abc\""));
    }

    #[test]
    fn refused_fields_are_named() {
        let status = unsupported("config.devices", "a device");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "config.devices: a device is not supported by podlab"
        );
    }
}
