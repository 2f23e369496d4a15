//! Field selectors: `status.phase=Running,spec.nodeName!=node-a` as apimachinery's
//! `fields.ParseSelector` reads them (terms split on unescaped commas, `=`, `==`, `!=`, values
//! unescaped with `\`), checked against and matched on the fields the API server offers for each
//! kind (for pods: metadata.name, metadata.namespace, spec.nodeName, spec.restartPolicy,
//! spec.schedulerName, spec.serviceAccountName, spec.hostNetwork, status.phase, status.podIP,
//! status.nominatedNodeName). A field the object lacks has the value "".

use std::collections::BTreeMap;

use crate::PrintError;

/// One term: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

/// A parsed field selector; all terms must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// `fields.ParseSelector`.
    pub fn parse(selector: &str) -> Result<Self, PrintError> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, value)) = split_term(&part) else {
                return Err(PrintError::FieldSelector(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            terms.push(FieldTerm {
                field: field.to_string(),
                value: unescape(value)?,
                negated: op == "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Checks every field is one the API server supports for `kind` (`Pod`, `Event`,
    /// `ReplicaSet`, others: metadata only): `field label not supported: X`.
    pub fn validate_for(&self, kind: &str) -> Result<(), PrintError> {
        let supported = supported_fields(kind);
        for t in &self.terms {
            if !supported.contains(&t.field.as_str()) {
                return Err(PrintError::FieldSelector(format!(
                    "field label not supported: {}",
                    t.field
                )));
            }
        }
        Ok(())
    }

    /// Whether the object's selectable fields satisfy every term.
    pub fn matches(&self, object: &serde_json::Value) -> bool {
        let fields = selectable_fields(object);
        self.terms.iter().all(|t| {
            let v = fields.get(&t.field).map(String::as_str).unwrap_or("");
            (v == t.value) != t.negated
        })
    }
}

/// The field labels the API server converts for a kind.
fn supported_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIPs",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        "ReplicaSet" => &["metadata.name", "metadata.namespace", "status.replicas"],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

fn str_at<'a>(object: &'a serde_json::Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(|v| v.as_str())
        .unwrap_or("")
}

/// The fields set the API server matches field selectors against, by the object's kind.
pub fn selectable_fields(object: &serde_json::Value) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        f.insert(k.to_string(), v);
    };
    put("metadata.name", str_at(object, "/metadata/name").into());
    put(
        "metadata.namespace",
        str_at(object, "/metadata/namespace").into(),
    );
    match object.get("kind").and_then(|k| k.as_str()).unwrap_or("") {
        "Pod" => {
            put("spec.nodeName", str_at(object, "/spec/nodeName").into());
            put(
                "spec.restartPolicy",
                str_at(object, "/spec/restartPolicy").into(),
            );
            put(
                "spec.schedulerName",
                str_at(object, "/spec/schedulerName").into(),
            );
            put(
                "spec.serviceAccountName",
                str_at(object, "/spec/serviceAccountName").into(),
            );
            let host_network = object
                .pointer("/spec/hostNetwork")
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            put("spec.hostNetwork", host_network.to_string());
            put("status.phase", str_at(object, "/status/phase").into());
            // The first of status.podIPs, as the API server takes it.
            let ip = object
                .pointer("/status/podIPs/0/ip")
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| str_at(object, "/status/podIP"));
            put("status.podIP", ip.into());
            put(
                "status.nominatedNodeName",
                str_at(object, "/status/nominatedNodeName").into(),
            );
        }
        "Event" => {
            for k in [
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            ] {
                put(
                    &format!("involvedObject.{k}"),
                    str_at(object, &format!("/involvedObject/{k}")).into(),
                );
            }
            put("reason", str_at(object, "/reason").into());
            put(
                "reportingComponent",
                str_at(object, "/reportingComponent").into(),
            );
            put("source", str_at(object, "/source/component").into());
            put("type", str_at(object, "/type").into());
        }
        "ReplicaSet" => {
            let replicas = object
                .pointer("/status/replicas")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            put("status.replicas", replicas.to_string());
        }
        _ => {}
    }
    f
}

/// Splits on commas not escaped by a backslash.
fn split_terms(s: &str) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(s[start..i].to_string());
            start = i + 1;
        }
    }
    terms.push(s[start..].to_string());
    terms
}

/// The first `!=`, `==` or `=` splits a term (no escaping on the left side).
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; a bare `,` or `=` is an
/// error.
fn unescape(s: &str) -> Result<String, PrintError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    let mut slash = false;
    for c in s.chars() {
        if slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(PrintError::FieldSelector(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )))
                }
            }
            slash = false;
            continue;
        }
        match c {
            '\\' => slash = true,
            ',' | '=' => {
                return Err(PrintError::FieldSelector(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )))
            }
            _ => out.push(c),
        }
    }
    if slash {
        return Err(PrintError::FieldSelector(
            "invalid field selector: invalid escape sequence: \\".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str, node: Option<&str>, ip: Option<&str>) -> serde_json::Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"restartPolicy": "Always"}, "status": {"phase": phase}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        if let Some(ip) = ip {
            p["status"]["podIP"] = json!(ip);
            p["status"]["podIPs"] = json!([{"ip": ip}]);
        }
        p
    }

    #[test]
    fn parses_and_matches_pods() {
        let a = pod("a", "Running", Some("node-a"), Some("10.0.0.1"));
        let b = pod("b", "Pending", None, None);
        let m = |s: &str, p: &serde_json::Value| FieldSelector::parse(s).unwrap().matches(p);
        assert!(m("status.phase=Running", &a) && !m("status.phase=Running", &b));
        assert!(m("status.phase==Pending", &b));
        assert!(m("status.phase!=Running", &b) && !m("status.phase!=Running", &a));
        assert!(m("spec.nodeName=", &b) && !m("spec.nodeName=", &a));
        assert!(m("spec.nodeName=node-a,status.podIP=10.0.0.1", &a));
        assert!(!m("spec.nodeName=node-a,status.podIP=10.0.0.2", &a));
        assert!(m(
            "metadata.name=a,metadata.namespace=default,spec.restartPolicy=Always",
            &a
        ));
        assert!(m("spec.hostNetwork=false", &a));
        assert!(m("", &a));
    }

    #[test]
    fn errors_like_the_api_server() {
        let e = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
        assert_eq!(
            e("status.phase"),
            "invalid selector: 'status.phase'; can't understand 'status.phase'"
        );
        assert_eq!(
            e("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            e("a=b\\x"),
            "invalid field selector: invalid escape sequence: \\x"
        );
        assert_eq!(
            FieldSelector::parse("a=b\\,c").unwrap().terms()[0].value,
            "b,c"
        );
        let s = FieldSelector::parse("status.phase=Running,spec.bogus=x").unwrap();
        assert_eq!(
            s.validate_for("Pod").unwrap_err().to_string(),
            "field label not supported: spec.bogus"
        );
        assert!(FieldSelector::parse("status.replicas=2")
            .unwrap()
            .validate_for("ReplicaSet")
            .is_ok());
        assert!(FieldSelector::parse("status.phase=x")
            .unwrap()
            .validate_for("ReplicaSet")
            .is_err());
    }
}
