//! `apps/v1` Deployment manifests, decoded, validated and defaulted as the API server does
//! (`ValidateDeployment`, `SetDefaults_Deployment`): the replicas, selector and template under
//! the ReplicaSet rules (a Deployment's pods are a ReplicaSet's), then the strategy
//! (`RollingUpdate` with `maxSurge`/`maxUnavailable` as ints or percentages, or `Recreate`),
//! `revisionHistoryLimit` and `progressDeadlineSeconds`. Every error names its field path.

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentStrategy, ReplicaSet, ReplicaSetSpec, RollingUpdateDeployment,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use podlab_api::{FieldError, ManifestError};
use serde_json::Value;

use super::strategy::DEFAULT_FENCEPOST;
use crate::manifest::{decode_checked, validate_replicaset};

/// Decodes, checks, validates and defaults one Deployment document.
pub fn decode_deployment_value(value: Value, source: &str) -> Result<Deployment, ManifestError> {
    decode_checked(
        value,
        source,
        "Deployment",
        |d: &Deployment| d.metadata.name.clone(),
        validate_deployment,
        default_deployment,
    )
}

/// The Deployment's pod-making part as a ReplicaSet, for the rules they share.
fn as_replicaset(deployment: &Deployment) -> ReplicaSet {
    let spec = deployment.spec.clone().unwrap_or_default();
    ReplicaSet {
        metadata: deployment.metadata.clone(),
        spec: deployment.spec.as_ref().map(|_| ReplicaSetSpec {
            replicas: spec.replicas,
            min_ready_seconds: spec.min_ready_seconds,
            selector: spec.selector,
            template: Some(spec.template),
        }),
        status: None,
    }
}

/// `ValidateDeployment`.
pub fn validate_deployment(deployment: &Deployment) -> Vec<FieldError> {
    let mut errors = validate_replicaset(&as_replicaset(deployment));
    let Some(spec) = &deployment.spec else {
        return errors;
    };
    for (path, value) in [
        ("spec.revisionHistoryLimit", spec.revision_history_limit),
        (
            "spec.progressDeadlineSeconds",
            spec.progress_deadline_seconds,
        ),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            errors.push(FieldError::new(
                path,
                format!("Invalid value: {v}: must be greater than or equal to 0"),
            ));
        }
    }
    if let Some(deadline) = spec.progress_deadline_seconds {
        if deadline <= spec.min_ready_seconds.unwrap_or(0) {
            errors.push(FieldError::new(
                "spec.progressDeadlineSeconds",
                format!("Invalid value: {deadline}: must be greater than minReadySeconds"),
            ));
        }
    }
    if let Some(strategy) = &spec.strategy {
        errors.extend(validate_strategy(strategy));
    }
    errors
}

fn validate_strategy(strategy: &DeploymentStrategy) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match strategy.type_.as_deref() {
        None | Some("RollingUpdate") => {}
        Some("Recreate") => {
            if strategy.rolling_update.is_some() {
                errors.push(FieldError::new(
                    "spec.strategy.rollingUpdate",
                    "Forbidden: may not be specified when strategy `type` is 'Recreate'",
                ));
            }
            return errors;
        }
        Some(other) => {
            errors.push(FieldError::new(
                "spec.strategy.type",
                format!("Unsupported value: {other:?}: supported values: \"Recreate\", \"RollingUpdate\""),
            ));
            return errors;
        }
    }
    let Some(rolling) = &strategy.rolling_update else {
        return errors;
    };
    let base = "spec.strategy.rollingUpdate";
    let surge = fencepost(
        rolling.max_surge.as_ref(),
        &format!("{base}.maxSurge"),
        &mut errors,
    );
    let unavailable = fencepost(
        rolling.max_unavailable.as_ref(),
        &format!("{base}.maxUnavailable"),
        &mut errors,
    );
    if let (Some(0), Some(0)) = (surge, unavailable) {
        errors.push(FieldError::new(
            format!("{base}.maxUnavailable"),
            "Invalid value: 0: may not be 0 when `maxSurge` is 0",
        ));
    }
    if let Some(IntOrString::String(text)) = &rolling.max_unavailable {
        if unavailable.is_some_and(|p| p > 100) {
            errors.push(FieldError::new(
                format!("{base}.maxUnavailable"),
                format!("Invalid value: {text:?}: must not be greater than 100%"),
            ));
        }
    }
    errors
}

/// `ValidatePositiveIntOrPercent`: the number (or percentage) when it is one.
fn fencepost(value: Option<&IntOrString>, path: &str, errors: &mut Vec<FieldError>) -> Option<i64> {
    match value? {
        IntOrString::Int(n) if *n < 0 => {
            errors.push(FieldError::new(
                path,
                format!("Invalid value: {n}: must be greater than or equal to 0"),
            ));
            None
        }
        IntOrString::Int(n) => Some(i64::from(*n)),
        IntOrString::String(text) => {
            let number = text
                .strip_suffix('%')
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok());
            if number.is_none() {
                errors.push(FieldError::new(
                    path,
                    format!("Invalid value: {text:?}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"),
                ));
            }
            number
        }
    }
}

/// `ValidateDeploymentUpdate`: the selector of an apps/v1 Deployment cannot change.
pub fn validate_deployment_update(old: &Deployment, new: &Deployment) -> Vec<FieldError> {
    let mut errors = validate_deployment(new);
    let old_selector = old.spec.as_ref().map(|s| &s.selector);
    let new_selector = new.spec.as_ref().map(|s| &s.selector);
    if old_selector != new_selector {
        errors.push(FieldError::new(
            "spec.selector",
            format!(
                "Invalid value: {}: field is immutable",
                new_selector
                    .and_then(|s| serde_json::to_string(s).ok())
                    .unwrap_or_default()
            ),
        ));
    }
    errors
}

/// `SetDefaults_Deployment` (apps/v1) and the template's Pod defaults.
pub fn default_deployment(deployment: &mut Deployment) {
    let mut rs = as_replicaset(deployment);
    crate::manifest::default_replicaset(&mut rs);
    deployment.metadata.namespace = rs.metadata.namespace;
    let Some(spec) = deployment.spec.as_mut() else {
        return;
    };
    if let Some(template) = rs.spec.and_then(|s| s.template) {
        spec.template = template;
    }
    spec.replicas.get_or_insert(1);
    let strategy = spec.strategy.get_or_insert_with(Default::default);
    let kind = strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
    if kind == "RollingUpdate" {
        let rolling = strategy
            .rolling_update
            .get_or_insert_with(RollingUpdateDeployment::default);
        let default = || IntOrString::String(DEFAULT_FENCEPOST.into());
        rolling.max_surge.get_or_insert_with(default);
        rolling.max_unavailable.get_or_insert_with(default);
    }
    spec.revision_history_limit.get_or_insert(10);
    spec.progress_deadline_seconds.get_or_insert(600);
    spec.min_ready_seconds.get_or_insert(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: busybox
        command: ["sleep", "3600"]
"#;

    fn decode(text: &str) -> Result<Deployment, String> {
        let value = podlab_api::manifest::documents(text, "d.yaml")
            .map_err(|e| e.to_string())?
            .remove(0);
        decode_deployment_value(value, "d.yaml").map_err(|e| e.to_string())
    }

    #[test]
    fn a_deployment_is_defaulted_as_the_api_server_does() {
        let d = decode(WEB).unwrap();
        let spec = d.spec.unwrap();
        let strategy = spec.strategy.unwrap();
        assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
        let rolling = strategy.rolling_update.unwrap();
        assert_eq!(rolling.max_surge, Some(IntOrString::String("25%".into())));
        assert_eq!(
            rolling.max_unavailable,
            Some(IntOrString::String("25%".into()))
        );
        assert_eq!(spec.revision_history_limit, Some(10));
        assert_eq!(spec.progress_deadline_seconds, Some(600));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn bad_strategies_are_refused_with_their_field_paths() {
        let with = |strategy: &str| {
            decode(&WEB.replace(
                "  replicas: 3\n",
                &format!("  replicas: 3\n  strategy: {strategy}\n"),
            ))
        };
        let e = with("{type: Blue}").unwrap_err();
        assert!(e.contains("spec.strategy.type: Unsupported value: \"Blue\": supported values: \"Recreate\", \"RollingUpdate\""), "{e}");
        let e = with("{type: Recreate, rollingUpdate: {maxSurge: 1}}").unwrap_err();
        assert!(e.contains("spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"), "{e}");
        let e = with("{rollingUpdate: {maxSurge: 0, maxUnavailable: 0}}").unwrap_err();
        assert!(e.contains("spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"), "{e}");
        let e = with("{rollingUpdate: {maxSurge: ten}}").unwrap_err();
        assert!(e.contains("spec.strategy.rollingUpdate.maxSurge: Invalid value: \"ten\": a valid percent string"), "{e}");
        let e = with("{rollingUpdate: {maxUnavailable: 150%}}").unwrap_err();
        assert!(e.contains("must not be greater than 100%"), "{e}");
        let e = with("{rollingUpdate: {maxSurg: 1}}").unwrap_err();
        assert!(
            e.contains("spec.strategy.rollingUpdate.maxSurg: unknown field"),
            "{e}"
        );
        assert!(with("{type: Recreate}").is_ok());
    }

    #[test]
    fn the_template_and_selector_follow_the_replicaset_rules() {
        let e =
            decode(&WEB.replace("matchLabels: {app: web}", "matchLabels: {app: api}")).unwrap_err();
        assert!(
            e.contains(
                "Deployment \"web\" is invalid: spec.template.metadata.labels: Invalid value"
            ),
            "{e}"
        );
        let e = decode(&WEB.replace("        image: busybox\n", "")).unwrap_err();
        assert!(
            e.contains("spec.template.spec.containers[0].image: Required value"),
            "{e}"
        );
        let paused = decode(&WEB.replace("  replicas: 3\n", "  replicas: 3\n  paused: true\n"));
        assert_eq!(paused.unwrap().spec.unwrap().paused, Some(true));
    }
}
