//! `podlab label` and `podlab annotate`: kubectl's edits of an object's labels or annotations.
//! `KEY=VALUE` sets, `KEY-` removes; a key that already has another value is refused unless
//! `--overwrite` is given, with kubectl's messages (`pod/web labeled`, `unlabeled`,
//! `not labeled`, `annotated`). Objects are named as `TYPE NAME...`, `TYPE/NAME`, or by
//! `TYPE -l SELECTOR` / `TYPE --all`.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use crate::context::Ctx;
use crate::objects;

/// Which of the two metadata maps the verb edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Map {
    Labels,
    Annotations,
}

impl Map {
    fn field(self) -> &'static str {
        match self {
            Map::Labels => "labels",
            Map::Annotations => "annotations",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Map::Labels => "label",
            Map::Annotations => "annotate",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Map::Labels => "label",
            Map::Annotations => "annotation",
        }
    }
}

#[derive(clap::Args)]
pub struct MapArgs {
    /// `TYPE NAME... KEY=VALUE... KEY-...` (or `TYPE/NAME`).
    #[arg(required = true)]
    args: Vec<String>,
    /// Replace the value of a key that has one.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    selection: objects::Selection,
}

/// The changes asked for: keys to set and keys to remove.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    pub set: BTreeMap<String, String>,
    pub remove: Vec<String>,
}

/// Splits kubectl's arguments into targets and changes (`KEY=VALUE`, `KEY-`), validating the
/// changes as the verb does before it reads anything.
pub fn parse_changes(map: Map, args: &[String]) -> Result<(Vec<String>, Changes)> {
    let mut targets = Vec::new();
    let mut changes = Changes::default();
    for arg in args {
        if let Some((key, value)) = arg.split_once('=') {
            if map == Map::Labels {
                let one = BTreeMap::from([(key.to_string(), value.to_string())]);
                if let Some(e) = podlab_control::selector::validate_labels(&one, "").first() {
                    let why = e.message.split_once(": ").map_or("", |(_, w)| w);
                    let why = why.split_once(": ").map_or(why, |(_, w)| w);
                    bail!("invalid label value: {arg:?}: {why}");
                }
            } else if podlab_control::selector::label_key_problem(key).is_some() {
                bail!("invalid annotation format: {arg}");
            }
            if changes.set.insert(key.into(), value.into()).is_some() {
                bail!(
                    "can not both modify and remove the same {} in the same command",
                    map.noun()
                );
            }
        } else if let Some(key) = arg.strip_suffix('-').filter(|k| !k.is_empty()) {
            changes.remove.push(key.to_string());
        } else {
            targets.push(arg.clone());
        }
    }
    if changes.remove.iter().any(|k| changes.set.contains_key(k)) {
        bail!(
            "can not both modify and remove the same {} in the same command",
            map.noun()
        );
    }
    if changes.set.is_empty() && changes.remove.is_empty() {
        bail!("at least one {} update is required", map.noun());
    }
    Ok((targets, changes))
}

/// What applying the changes to one object's map did, and the new map.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub map: BTreeMap<String, String>,
    /// `labeled`, `unlabeled`, `not labeled`, `annotated`.
    pub message: &'static str,
    /// Keys to remove that the object did not have (`label "x" not found.`).
    pub missing: Vec<String>,
}

/// The verb's rules on one map: refuse to overwrite without `--overwrite`, set, remove.
pub fn apply_changes(
    which: Map,
    current: &BTreeMap<String, String>,
    changes: &Changes,
    overwrite: bool,
) -> Result<Outcome> {
    if !overwrite {
        let taken: Vec<String> = changes
            .set
            .iter()
            .filter_map(|(key, value)| {
                current
                    .get(key)
                    .filter(|now| *now != value)
                    .map(|now| format!("'{key}' already has a value ({now})"))
            })
            .collect();
        if !taken.is_empty() {
            return Err(match which {
                Map::Labels => anyhow!(
                    "{}",
                    taken
                        .iter()
                        .map(|t| format!("{t}, and --overwrite is false"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                Map::Annotations => anyhow!(
                    "--overwrite is false but found the following declared annotation(s): {}",
                    taken.join("; ")
                ),
            });
        }
    }
    let mut map = current.clone();
    map.extend(changes.set.clone());
    let mut missing = Vec::new();
    for key in &changes.remove {
        if map.remove(key).is_none() {
            missing.push(key.clone());
        }
    }
    let message = match which {
        Map::Annotations => "annotated",
        // kubectl compares the object's JSON before and after: shorter without --overwrite
        // means a label went away.
        Map::Labels if map == *current => "not labeled",
        Map::Labels if !overwrite && json_len(&map) < json_len(current) => "unlabeled",
        Map::Labels => "labeled",
    };
    Ok(Outcome {
        map,
        message,
        missing,
    })
}

fn json_len(map: &BTreeMap<String, String>) -> usize {
    if map.is_empty() {
        return 0;
    }
    serde_json::to_string(map).map_or(0, |s| s.len())
}

pub fn run(which: Map, args: MapArgs) -> Result<()> {
    let (target_args, changes) = parse_changes(which, &args.args)?;
    let ctx = Ctx::open()?;
    let namespace = &args.selection.namespace;
    let named = args.selection.resolve(&ctx, &target_args, which.verb())?;
    // As kubectl: a name that is not there is reported and the others are still changed.
    let mut not_found = Vec::new();
    for (kind, name) in named {
        let outcome = objects::modify(&ctx, kind, namespace, &name, |object| {
            let current: BTreeMap<String, String> =
                serde_json::from_value(object["metadata"][which.field()].clone())
                    .unwrap_or_default();
            let outcome = apply_changes(which, &current, &changes, args.overwrite)?;
            let changed = outcome.map != current;
            object["metadata"][which.field()] = match outcome.map.is_empty() {
                true => Value::Null,
                false => serde_json::to_value(&outcome.map)?,
            };
            Ok((changed, outcome))
        });
        match outcome {
            Ok(outcome) => {
                if which == Map::Labels {
                    for key in &outcome.missing {
                        println!("label {key:?} not found.");
                    }
                }
                println!("{}/{name} {}", objects::qualified(kind), outcome.message);
            }
            Err(e) if objects::is_not_found(&e) => not_found.push(e.to_string()),
            Err(e) => return Err(e),
        }
    }
    if !not_found.is_empty() {
        bail!("{}", not_found.join("\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn arguments_split_into_targets_sets_and_removals() {
        let (targets, changes) =
            parse_changes(Map::Labels, &args(&["pod", "a", "b", "env=prod", "tier-"])).unwrap();
        assert_eq!(targets, args(&["pod", "a", "b"]));
        assert_eq!(changes.set, map(&[("env", "prod")]));
        assert_eq!(changes.remove, args(&["tier"]));
        let e = parse_changes(Map::Labels, &args(&["pod", "a"])).unwrap_err();
        assert_eq!(e.to_string(), "at least one label update is required");
        let e = parse_changes(Map::Annotations, &args(&["pod", "a"])).unwrap_err();
        assert_eq!(e.to_string(), "at least one annotation update is required");
        let e = parse_changes(Map::Labels, &args(&["pod", "a", "env=prod", "env-"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "can not both modify and remove the same label in the same command"
        );
        let e = parse_changes(Map::Labels, &args(&["pod", "a", "env=a b"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid label value: \"env=a b\": a valid label must be"),
            "{e}"
        );
    }

    #[test]
    fn a_key_with_another_value_needs_overwrite_in_kubectls_words() {
        let current = map(&[("env", "dev")]);
        let changes = Changes {
            set: map(&[("env", "prod")]),
            remove: vec![],
        };
        let e = apply_changes(Map::Labels, &current, &changes, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "'env' already has a value (dev), and --overwrite is false"
        );
        let e = apply_changes(Map::Annotations, &current, &changes, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--overwrite is false but found the following declared annotation(s): 'env' already has a value (dev)"
        );
        let done = apply_changes(Map::Labels, &current, &changes, true).unwrap();
        assert_eq!(
            (done.map, done.message),
            (map(&[("env", "prod")]), "labeled")
        );
    }

    #[test]
    fn the_message_says_what_changed_as_kubectls_does() {
        let current = map(&[("env", "dev"), ("tier", "web")]);
        let same = Changes {
            set: map(&[("env", "dev")]),
            remove: vec![],
        };
        let out = apply_changes(Map::Labels, &current, &same, false).unwrap();
        assert_eq!(out.message, "not labeled");
        let remove = Changes {
            set: BTreeMap::new(),
            remove: args(&["tier", "nosuch"]),
        };
        let out = apply_changes(Map::Labels, &current, &remove, false).unwrap();
        assert_eq!(out.message, "unlabeled");
        assert_eq!(out.map, map(&[("env", "dev")]));
        assert_eq!(out.missing, args(&["nosuch"]));
        let out = apply_changes(Map::Annotations, &current, &same, false).unwrap();
        assert_eq!(out.message, "annotated");
    }
}
