//! Builders for the unit tests: records, sandboxes and pods with defaults everywhere.

use crate::model::{
    ContainerRecord, NetnsMode, RuntimeState, RuntimeView, SandboxRecord, SandboxState,
};

/// A record of `name` in sandbox `s1`, id `<name>-<created>`.
pub fn record(name: &str, state: RuntimeState, created: i64) -> ContainerRecord {
    ContainerRecord {
        id: format!("{name}-{created}"),
        name: name.into(),
        state,
        created,
        exit_code: 0,
        reason: String::new(),
        message: String::new(),
        restart_count: 0,
        sandbox_id: "s1".into(),
        hash: 0,
        started_at: Some(created),
        finished_at: None,
    }
}

pub fn exited(name: &str, created: i64, exit_code: i32) -> ContainerRecord {
    ContainerRecord {
        exit_code,
        finished_at: Some(created + 1),
        ..record(name, RuntimeState::Exited, created)
    }
}

/// The READY sandbox `s1` with an IP.
pub fn ready_sandbox() -> SandboxRecord {
    SandboxRecord {
        id: "s1".into(),
        created: 1,
        state: SandboxState::Ready,
        netns: NetnsMode::Pod,
        ip: Some("10.88.0.5".into()),
        attempt: 0,
    }
}

/// A runtime view with the ready sandbox and `records`.
pub fn runtime(records: Vec<ContainerRecord>) -> RuntimeView {
    RuntimeView {
        sandboxes: vec![ready_sandbox()],
        containers: records,
    }
}

/// A pod decoded from `yaml` as the API server would, with uid `u-1`.
pub fn pod(yaml: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = podlab_api::decode_pod(yaml, "test").unwrap();
    pod.metadata.uid = Some("u-1".into());
    pod
}
