//! Label selectors, as `metav1.LabelSelectorAsSelector` turns a `LabelSelector` into
//! requirements and `labels.Selector.Matches` applies them: every `matchLabels` pair and every
//! `matchExpressions` requirement must hold (AND). An absent selector selects nothing; an empty
//! one (`{}`) selects everything.
//!
//! Validation follows apimachinery's `ValidateLabelSelector`, with its wording, so that a bad
//! ReplicaSet selector is refused the way the API server refuses it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use podlab_api::FieldError;

/// A requirement's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement on one label key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: BTreeSet<String>,
}

impl Requirement {
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key));
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
    selects_nothing: bool,
}

impl Selector {
    pub fn everything() -> Self {
        Selector {
            requirements: Vec::new(),
            selects_nothing: false,
        }
    }

    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            selects_nothing: true,
        }
    }

    /// `labels.SelectorFromSet`: every pair must be present.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        let requirements = labels
            .iter()
            .map(|(key, value)| Requirement {
                key: key.clone(),
                operator: Operator::In,
                values: BTreeSet::from([value.clone()]),
            })
            .collect();
        Selector {
            requirements,
            selects_nothing: false,
        }
    }

    /// Checks and converts a `LabelSelector`; `path` names it in errors (`spec.selector`).
    pub fn from_label_selector(
        selector: Option<&LabelSelector>,
        path: &str,
    ) -> Result<Selector, Vec<FieldError>> {
        let Some(selector) = selector else {
            return Ok(Selector::nothing());
        };
        let errors = validate_label_selector(selector, path);
        if !errors.is_empty() {
            return Err(errors);
        }
        let mut parsed =
            Selector::from_labels(selector.match_labels.as_ref().unwrap_or(&BTreeMap::new()));
        for expression in selector.match_expressions.iter().flatten() {
            let operator = match expression.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                _ => Operator::DoesNotExist, // validated above
            };
            parsed.requirements.push(Requirement {
                key: expression.key.clone(),
                operator,
                values: expression.values.iter().flatten().cloned().collect(),
            });
        }
        Ok(parsed)
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether this selects everything (`{}`).
    pub fn is_empty(&self) -> bool {
        !self.selects_nothing && self.requirements.is_empty()
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        !self.selects_nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// The selector's string form, as `labels.Selector.String()`: requirements sorted by key,
/// `app=web,tier in (a,b),!legacy`.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut requirements: Vec<&Requirement> = self.requirements.iter().collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        let mut first = true;
        for r in requirements {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            let values = r.values.iter().cloned().collect::<Vec<_>>().join(",");
            match r.operator {
                Operator::In if r.values.len() == 1 => write!(f, "{}={values}", r.key)?,
                Operator::In => write!(f, "{} in ({values})", r.key)?,
                Operator::NotIn => write!(f, "{} notin ({values})", r.key)?,
                Operator::Exists => write!(f, "{}", r.key)?,
                Operator::DoesNotExist => write!(f, "!{}", r.key)?,
            }
        }
        Ok(())
    }
}

/// `ValidateLabelSelector`: operators, values per operator, label keys and values.
pub fn validate_label_selector(selector: &LabelSelector, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(labels) = &selector.match_labels {
        errors.extend(validate_labels(labels, &format!("{path}.matchLabels")));
    }
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{at}.values"),
                        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
                for (j, value) in values.iter().enumerate() {
                    if let Some(why) = label_value_problem(value) {
                        errors.push(FieldError::new(
                            format!("{at}.values[{j}]"),
                            format!("Invalid value: {value:?}: {why}"),
                        ));
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{at}.values"),
                        "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => errors.push(FieldError::new(
                format!("{at}.operator"),
                format!("Invalid value: {other:?}: not a valid selector operator"),
            )),
        }
        if let Some(why) = label_key_problem(&expression.key) {
            errors.push(FieldError::new(
                format!("{at}.key"),
                format!("Invalid value: {:?}: {why}", expression.key),
            ));
        }
    }
    errors
}

/// `ValidateLabels`: every key a qualified name, every value a label value.
pub fn validate_labels(labels: &BTreeMap<String, String>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (key, value) in labels {
        if let Some(why) = label_key_problem(key) {
            errors.push(FieldError::new(
                path,
                format!("Invalid value: {key:?}: {why}"),
            ));
        }
        if let Some(why) = label_value_problem(value) {
            errors.push(FieldError::new(
                path,
                format!("Invalid value: {value:?}: {why}"),
            ));
        }
    }
    errors
}

const NAME_REGEX_HINT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name ≤ 63 characters.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            return Some(format!("a qualified name {NAME_REGEX_HINT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"))
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if let Some(why) = podlab_api::validation::dns1123_subdomain(prefix) {
            return Some(format!("prefix part {why}"));
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !is_label_word(name) {
        return Some(format!("name part {NAME_REGEX_HINT}"));
    }
    None
}

/// `IsValidLabelValue`: empty, or ≤ 63 characters of the label alphabet.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    if !value.is_empty() && !is_label_word(value) {
        return Some("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into());
    }
    None
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_word(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions_all_must_hold() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                expression("tier", "In", &["front", "back"]),
                expression("env", "NotIn", &["dev"]),
                expression("legacy", "DoesNotExist", &[]),
                expression("team", "Exists", &[]),
            ]),
        };
        let s = Selector::from_label_selector(Some(&selector), "spec.selector").unwrap();
        let good = labels(&[("app", "web"), ("tier", "front"), ("team", "a")]);
        assert!(s.matches(Some(&good)));
        let mut dev = good.clone();
        dev.insert("env".into(), "dev".into());
        assert!(!s.matches(Some(&dev)));
        let mut legacy = good.clone();
        legacy.insert("legacy".into(), "".into());
        assert!(!s.matches(Some(&legacy)));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("team", "a")]))));
        assert!(!s.matches(None));
        assert_eq!(
            s.to_string(),
            "app=web,env notin (dev),!legacy,team,tier in (back,front)"
        );
    }

    #[test]
    fn absent_selects_nothing_and_empty_selects_everything() {
        let none = Selector::from_label_selector(None, "spec.selector").unwrap();
        assert!(!none.matches(Some(&labels(&[("a", "b")]))));
        let empty = Selector::from_label_selector(Some(&LabelSelector::default()), "s").unwrap();
        assert!(empty.is_empty() && empty.matches(None));
    }

    #[test]
    fn bad_selectors_are_refused_with_the_api_servers_words() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "-bad")])),
            match_expressions: Some(vec![
                expression("tier", "In", &[]),
                expression("env", "Exists", &["x"]),
                expression("k", "Near", &["x"]),
            ]),
        };
        let errors: Vec<String> = Selector::from_label_selector(Some(&selector), "spec.selector")
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors[0].starts_with("spec.selector.matchLabels: Invalid value: \"-bad\""),
            "{errors:?}"
        );
        assert_eq!(errors[1], "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'");
        assert_eq!(errors[2], "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
        assert_eq!(errors[3], "spec.selector.matchExpressions[2].operator: Invalid value: \"Near\": not a valid selector operator");
    }

    #[test]
    fn qualified_label_keys() {
        assert!(label_key_problem("paas.sogou.com/app").is_none());
        assert!(label_key_problem("app").is_none());
        assert!(label_key_problem("a/b/c").is_some());
        assert!(label_key_problem("/app").is_some());
        assert!(label_key_problem("Bad_Prefix/app").is_some());
        assert!(label_key_problem(&"a".repeat(64)).is_some());
    }
}
