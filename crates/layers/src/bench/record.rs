//! The rows of one run and their CSV form.
//!
//! One row per (comparison, subject, metric, level): the median, minimum and maximum of its
//! samples, and `podlab_ratio` = podlab's median / this row's median for the same comparison,
//! metric and level, measured in the same run (empty when podlab's row is pending). podlab's
//! own rows carry the command they ran, or, while pending, the command they will run.

use std::fmt::Write as _;

use super::stats::{summarize, Outcome};
use crate::{Error, Result};

pub const HEADER: &str =
    "comparison,subject,metric,level,unit,n,median,min,max,podlab_ratio,status,command";

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub comparison: String,
    pub subject: String,
    pub metric: String,
    /// Pods alive (scale), pods deleted (teardown); None elsewhere.
    pub level: Option<u32>,
    pub unit: String,
    pub n: usize,
    pub median: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub podlab_ratio: Option<f64>,
    pub status: String,
    pub command: String,
}

impl Row {
    pub fn is_podlab(&self) -> bool {
        self.subject.starts_with("podlab")
    }

    pub fn with_subject(mut self, subject: &str) -> Row {
        self.subject = subject.into();
        self
    }
}

/// The rows of one comparison's outcomes: one per contender and metric.
pub fn rows_of(
    comparison: &str,
    level: Option<u32>,
    metrics: &[(&str, &str)],
    outcomes: &[Outcome],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for outcome in outcomes {
        for (m, (metric, unit)) in metrics.iter().enumerate() {
            let samples = outcome.samples.get(m).map(Vec::as_slice).unwrap_or(&[]);
            let s = summarize(samples);
            rows.push(Row {
                comparison: comparison.into(),
                subject: outcome.name.clone(),
                metric: (*metric).into(),
                level,
                unit: (*unit).into(),
                n: s.map_or(0, |s| s.n),
                median: s.map(|s| s.median),
                min: s.map(|s| s.min),
                max: s.map(|s| s.max),
                podlab_ratio: None,
                status: outcome.status.clone(),
                command: outcome.command.clone(),
            });
        }
    }
    rows
}

/// Fills `podlab_ratio` of every peer row from the podlab row of the same comparison, metric
/// and level (the first podlab row that has a median; the `podlab` one before helpers).
pub fn fill_ratios(rows: &mut [Row]) {
    let podlab: Vec<(String, String, Option<u32>, f64)> = {
        let mut found: Vec<&Row> = rows
            .iter()
            .filter(|r| r.is_podlab() && r.median.is_some())
            .collect();
        found.sort_by_key(|r| r.subject != "podlab");
        found
            .into_iter()
            .map(|r| {
                (
                    r.comparison.clone(),
                    r.metric.clone(),
                    r.level,
                    r.median.unwrap_or(0.0),
                )
            })
            .collect()
    };
    for row in rows.iter_mut().filter(|r| !r.is_podlab()) {
        let ours = podlab
            .iter()
            .find(|(c, m, l, _)| *c == row.comparison && *m == row.metric && *l == row.level);
        row.podlab_ratio = match (ours, row.median) {
            (Some((_, _, _, p)), Some(theirs)) if theirs > 0.0 => Some(p / theirs),
            _ => None,
        };
    }
}

pub fn to_csv(rows: &[Row]) -> String {
    let mut out = format!("{HEADER}\n");
    let num = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            quote(&r.comparison),
            quote(&r.subject),
            quote(&r.metric),
            r.level.map(|l| l.to_string()).unwrap_or_default(),
            quote(&r.unit),
            r.n,
            num(r.median),
            num(r.min),
            num(r.max),
            r.podlab_ratio
                .map(|v| format!("{v:.4}"))
                .unwrap_or_default(),
            quote(&r.status),
            quote(&r.command),
        );
    }
    out
}

pub fn from_csv(text: &str) -> Result<Vec<Row>> {
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim() == HEADER => {}
        other => {
            return Err(Error::Parse {
                what: "peers CSV header",
                text: other.unwrap_or("").into(),
            })
        }
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .map(parse_row)
        .collect()
}

fn parse_row(line: &str) -> Result<Row> {
    let bad = || Error::Parse {
        what: "peers CSV row",
        text: line.into(),
    };
    let f = split_csv(line).ok_or_else(bad)?;
    if f.len() != 12 {
        return Err(bad());
    }
    let opt = |s: &str| -> Result<Option<f64>> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse().map(Some).map_err(|_| bad())
        }
    };
    Ok(Row {
        comparison: f[0].clone(),
        subject: f[1].clone(),
        metric: f[2].clone(),
        level: if f[3].is_empty() {
            None
        } else {
            Some(f[3].parse().map_err(|_| bad())?)
        },
        unit: f[4].clone(),
        n: f[5].parse().map_err(|_| bad())?,
        median: opt(&f[6])?,
        min: opt(&f[7])?,
        max: opt(&f[8])?,
        podlab_ratio: opt(&f[9])?,
        status: f[10].clone(),
        command: f[11].clone(),
    })
}

/// RFC 4180 quoting: only fields with a comma, quote or newline are quoted.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

fn split_csv(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        let field = fields.last_mut()?;
        match (quoted, c) {
            (false, ',') => fields.push(String::new()),
            (false, '"') if field.is_empty() => quoted = true,
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (_, c) => field.push(c),
        }
    }
    (!quoted).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(name: &str, samples: Vec<f64>, status: &str) -> Outcome {
        Outcome {
            name: name.into(),
            command: format!("{name} run --rm, \"quoted\""),
            samples: vec![samples],
            status: status.into(),
        }
    }

    #[test]
    fn rows_ratios_and_csv_round_trip() {
        let outcomes = vec![
            outcome("podlab", vec![2.0, 4.0, 3.0], "measured"),
            outcome("runc", vec![30.0, 10.0, 20.0], "measured"),
            outcome("crun", vec![], "failed: crun refused"),
        ];
        let mut rows = rows_of("container-true", None, &[("total", "ms")], &outcomes);
        fill_ratios(&mut rows);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].median, Some(20.0));
        assert_eq!(rows[1].podlab_ratio, Some(3.0 / 20.0));
        assert_eq!(rows[0].podlab_ratio, None);
        assert_eq!(rows[2].median, None);
        let csv = to_csv(&rows);
        assert!(csv.starts_with(HEADER));
        let back = from_csv(&csv).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[1].command, "runc run --rm, \"quoted\"");
        assert_eq!(
            back[1].podlab_ratio.map(|r| (r * 1e4).round()),
            Some(1500.0)
        );
        assert_eq!(back[2].status, "failed: crun refused");
    }

    #[test]
    fn pending_podlab_gives_no_ratio_and_bad_csv_is_an_error() {
        let outcomes = vec![
            outcome("podlab", vec![], "pending"),
            outcome("podman", vec![400.0], "measured"),
        ];
        let mut rows = rows_of("pod", None, &[("up", "ms")], &outcomes);
        fill_ratios(&mut rows);
        assert_eq!(rows[1].podlab_ratio, None);
        assert!(from_csv("a,b\n").is_err());
        assert!(from_csv(&format!("{HEADER}\nx,y\n")).is_err());
        assert!(from_csv(&format!(
            "{HEADER}\n\"unterminated,1,2,3,4,5,6,7,8,9,10,11\n"
        ))
        .is_err());
    }
}
