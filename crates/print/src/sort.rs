//! `--sort-by=<jsonpath>`: kubectl's sorters. The path is relaxed (`.metadata.name`,
//! `{.metadata.name}` ...); each object's first value decides its place: numbers by value,
//! strings bytewise, or as quantities when both parse as quantities (`100Mi` < `1Gi`, and `2` <
//! `10`); an object without the field sorts before any with it. The
//! order follows Go's `sort.Sort` exactly, as kubectl's comparator is not a strict order.

use crate::golang::{Data, NumberMode};
use crate::jsonpath::{relaxed_expression, JVal, JsonPath};
use crate::PrintError;

/// How the sorted objects are printed, which changes kubectl's checks slightly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortTarget {
    /// The default table: every row is checked, even a single one must have the field.
    Table,
    /// Any other output: zero or one object is never checked or sorted.
    Objects,
}

/// A `--sort-by` path. Like kubectl it is only checked when there is something to sort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortBy {
    raw: String,
}

impl SortBy {
    pub fn new(sort_by: &str) -> Self {
        SortBy {
            raw: sort_by.to_string(),
        }
    }

    /// The complete JSONPath for the table sorter (the raw text when it is not a relaxed path).
    fn table_field(&self) -> String {
        relaxed_expression(&self.raw).unwrap_or_else(|_| self.raw.clone())
    }

    fn parsed(&self, target: SortTarget) -> Result<(String, JsonPath), PrintError> {
        let field = match target {
            SortTarget::Table => self.table_field(),
            SortTarget::Objects => relaxed_expression(&self.raw).map_err(PrintError::SortBy)?,
        };
        let path = JsonPath::parse(&field).map_err(|e| match e {
            PrintError::JsonPathParse { reason, .. } => PrintError::SortBy(match target {
                SortTarget::Table => format!("sorting error: {reason}"),
                SortTarget::Objects => reason,
            }),
            other => other,
        })?;
        Ok((field, path))
    }

    /// Sorts the objects (the items of what is printed) in place.
    pub fn sort(
        &self,
        items: &mut [serde_json::Value],
        target: SortTarget,
    ) -> Result<(), PrintError> {
        if target == SortTarget::Objects && items.len() <= 1 {
            return Ok(());
        }
        let (field, path) = self.parsed(target)?;
        let datas: Vec<Data> = items
            .iter()
            .map(|v| Data::from_json(v, NumberMode::Unstructured))
            .collect();
        let mut keyed: Vec<(usize, Option<JVal>)> = Vec::with_capacity(items.len());
        for (i, d) in datas.iter().enumerate() {
            let results = path.find_results(d).map_err(PrintError::SortBy)?;
            let first = results
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next());
            keyed.push((i, first));
        }
        if !items.is_empty() && keyed.iter().all(|(_, k)| k.is_none()) {
            return Err(PrintError::SortBy(format!(
                "couldn't find any field with path {} in the list of objects",
                crate::golang::quote::quote(&field)
            )));
        }
        let holder = match target {
            SortTarget::Table => "[][][]reflect.Value",
            SortTarget::Objects => "*unstructured.Unstructured",
        };
        let mut failure: Option<String> = None;
        crate::golang::sort::sort(&mut keyed, |a, b| {
            if failure.is_some() {
                return false;
            }
            let (Some(x), Some(y)) = (&a.1, &b.1) else {
                return a.1.is_none();
            };
            match is_less(x, y) {
                Ok(less) => less,
                Err(e) => {
                    failure = Some(format!(
                        "Field {field} in {holder} is an unsortable type: {}, err: {e}",
                        kind_name(x)
                    ));
                    false
                }
            }
        });
        if let Some(f) = failure {
            return Err(PrintError::SortBy(f));
        }
        let order: Vec<usize> = keyed.iter().map(|(i, _)| *i).collect();
        let mut taken: Vec<Option<serde_json::Value>> =
            items.iter_mut().map(|v| Some(v.take())).collect();
        for (slot, i) in items.iter_mut().zip(order) {
            *slot = taken[i].take().unwrap_or_default();
        }
        Ok(())
    }
}

/// Sorts `items` by `sort_by` for a non-table output.
pub fn sort_by(items: &mut [serde_json::Value], sort_by: &str) -> Result<(), PrintError> {
    SortBy::new(sort_by).sort(items, SortTarget::Objects)
}

/// `reflect.Value.Kind().String()` of a found value.
fn kind_name(v: &JVal) -> &'static str {
    match v {
        JVal::Data(_) => "interface",
        JVal::Text(_) => "string",
        JVal::Int(_) => "int",
        JVal::Float(_) => "float64",
        JVal::Bool(_) => "bool",
        JVal::Byte(_) => "uint8",
        JVal::Invalid => "invalid",
    }
}

/// kubectl's `isLess` for values found in unstructured objects (held in interfaces).
fn is_less(i: &JVal, j: &JVal) -> Result<bool, String> {
    match (i, j) {
        (JVal::Data(a), JVal::Data(b)) => match (a, b) {
            (Data::Null, Data::Null) => Ok(false),
            (Data::Null, _) => Ok(true),
            (_, Data::Null) => Ok(false),
            (Data::Int(x), Data::Int(y)) => Ok(x < y),
            (Data::Float(x), Data::Float(y)) => Ok(x < y),
            (Data::Str(x), Data::Str(y)) => Ok(match (parse_quantity(x), parse_quantity(y)) {
                (Some(p), Some(q)) => p < q,
                _ => x < y,
            }),
            (Data::Int(_) | Data::Float(_) | Data::Str(_), _) => {
                Err("unsortable interface: interface".into())
            }
            (other, _) => Err(format!("unsortable type: {}", other.type_name())),
        },
        (JVal::Text(x), JVal::Text(y)) => Ok(x < y),
        (JVal::Int(x), JVal::Int(y)) => Ok(x < y),
        (JVal::Float(x), JVal::Float(y)) => Ok(x < y),
        (JVal::Byte(x), JVal::Byte(y)) => Ok(x < y),
        (other, _) => Err(format!("unsortable type: {}", kind_name(other))),
    }
}

/// The value of a Kubernetes quantity (`resource.ParseQuantity`): a decimal number with an SI
/// (`m`, `k`, `M` ...), binary (`Ki`, `Mi` ...) or exponent (`e3`) suffix.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    let number: f64 = s[..i].parse().ok()?;
    let suffix = &s[i..];
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            10f64.powi(exp.parse::<i32>().ok()?)
        }
    };
    Some(number * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(items: &[serde_json::Value]) -> Vec<&str> {
        items
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    fn pod(name: &str, restarts: Option<i64>, mem: &str) -> serde_json::Value {
        let mut p = json!({"metadata": {"name": name}, "spec": {"mem": mem}});
        if let Some(r) = restarts {
            p["status"] = json!({"restarts": r});
        }
        p
    }

    #[test]
    fn sorts_numbers_strings_quantities_and_missing_first() {
        let mut items = vec![
            pod("web-10", Some(3), "1Gi"),
            pod("web-9", None, "100Mi"),
            pod("web-2", Some(0), "2Gi"),
        ];
        sort_by(&mut items, ".metadata.name").unwrap();
        assert_eq!(names(&items), ["web-10", "web-2", "web-9"]);
        sort_by(&mut items, "{.status.restarts}").unwrap();
        assert_eq!(names(&items), ["web-9", "web-2", "web-10"]);
        sort_by(&mut items, "spec.mem").unwrap();
        assert_eq!(names(&items), ["web-9", "web-10", "web-2"]);
    }

    #[test]
    fn errors_like_kubectl() {
        let mut items = vec![pod("a", Some(1), "1"), pod("b", Some(2), "2")];
        assert_eq!(
            sort_by(&mut items, ".nope").unwrap_err().to_string(),
            "couldn't find any field with path \"{.nope}\" in the list of objects"
        );
        assert_eq!(
            sort_by(&mut items, ".status").unwrap_err().to_string(),
            "Field {.status} in *unstructured.Unstructured is an unsortable type: interface, err: unsortable type: map[string]interface {}"
        );
        let mut one = vec![pod("a", None, "1")];
        assert!(sort_by(&mut one, ".nope").is_ok());
        assert!(SortBy::new(".nope")
            .sort(&mut one, SortTarget::Table)
            .is_err());
        assert!(sort_by(&mut one, "{.a").is_ok());
        assert_eq!(
            SortBy::new("{.a")
                .sort(&mut one, SortTarget::Table)
                .unwrap_err()
                .to_string(),
            "sorting error: unclosed action"
        );
    }
}
