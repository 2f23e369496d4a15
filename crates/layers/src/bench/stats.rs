//! Interleaved runs and their summary.
//!
//! Each round runs every contender once, in an order that rotates from round to round
//! (A B C, B C A, C A B, ...), so that a slow phase of this shared machine falls on all of them
//! alike and none always runs right after another's clean-up. The first rounds are a warm-up
//! (page cache, the daemons' first-use paths, podman's pause image) and are not recorded.

use crate::{interrupt, Result};

/// Median, minimum and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// None for no samples; the median of an even count is the mean of the middle two.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        n,
        median,
        min: sorted[0],
        max: sorted[n - 1],
    })
}

/// One trial: the values of the comparison's metrics, in their order.
pub type Trial<'a> = Box<dyn FnMut() -> Result<Vec<f64>> + 'a>;

/// One side of a comparison.
pub struct Contender<'a> {
    pub name: String,
    /// What one trial runs, in words (the CSV's `command` column).
    pub command: String,
    /// None: not runnable yet (a pending podlab row).
    pub trial: Option<Trial<'a>>,
}

/// What became of one contender.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub name: String,
    pub command: String,
    /// One list per metric.
    pub samples: Vec<Vec<f64>>,
    /// "measured", "pending", or "failed: why".
    pub status: String,
}

/// Runs `warmup` then `rounds` interleaved rounds. A contender whose trial fails is dropped
/// from later rounds with the error as its status; Ctrl-C stops the whole run.
pub fn interleave(
    contenders: &mut [Contender<'_>],
    metrics: usize,
    warmup: usize,
    rounds: usize,
) -> Result<Vec<Outcome>> {
    let mut outcomes: Vec<Outcome> = contenders
        .iter()
        .map(|c| Outcome {
            name: c.name.clone(),
            command: c.command.clone(),
            samples: vec![Vec::new(); metrics],
            status: if c.trial.is_some() {
                "measured".into()
            } else {
                "pending".into()
            },
        })
        .collect();
    let count = contenders.len();
    for round in 0..warmup + rounds {
        for k in 0..count {
            let i = (k + round) % count.max(1);
            if outcomes[i].status != "measured" {
                continue;
            }
            let Some(trial) = contenders[i].trial.as_mut() else {
                continue;
            };
            interrupt::check()?;
            match trial() {
                Ok(values) if round >= warmup => {
                    for (list, v) in outcomes[i].samples.iter_mut().zip(values) {
                        list.push(v);
                    }
                }
                Ok(_) => {}
                Err(crate::Error::Interrupted) => return Err(crate::Error::Interrupted),
                Err(err) => {
                    eprintln!("  {} failed: {err}", outcomes[i].name);
                    outcomes[i].status = format!("failed: {err}");
                }
            }
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary() {
        assert_eq!(summarize(&[]), None);
        let s = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 3.0, 1.0, 5.0));
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    }

    #[test]
    fn rounds_rotate_and_failures_drop_out() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut calls_b = 0;
        let mut contenders = vec![
            Contender {
                name: "a".into(),
                command: "a".into(),
                trial: Some(Box::new(|| {
                    order.borrow_mut().push('a');
                    Ok(vec![1.0])
                })),
            },
            Contender {
                name: "b".into(),
                command: "b".into(),
                trial: Some(Box::new(|| {
                    order.borrow_mut().push('b');
                    calls_b += 1;
                    if calls_b == 3 {
                        Err(crate::Error::evidence("b works", "it broke"))
                    } else {
                        Ok(vec![2.0])
                    }
                })),
            },
            Contender {
                name: "podlab".into(),
                command: "podlab run".into(),
                trial: None,
            },
        ];
        let out = interleave(&mut contenders, 1, 1, 3).unwrap();
        drop(contenders);
        assert_eq!(order.into_inner().iter().collect::<String>(), "abbaaba");
        assert_eq!(out[0].samples[0], vec![1.0, 1.0, 1.0]);
        assert_eq!(out[1].samples[0], vec![2.0]);
        assert!(out[1].status.starts_with("failed: "));
        assert_eq!(out[2].status, "pending");
    }
}
