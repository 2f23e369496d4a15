//! What a check finds: each part of the goal, met or still missing, in plain words.

/// The parts of a lab's goal, in the order the check looked at them.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
struct Part {
    met: bool,
    words: String,
}

impl Verdict {
    pub fn new() -> Verdict {
        Verdict::default()
    }

    /// A part that is met: what the check saw.
    pub fn met(&mut self, words: impl Into<String>) {
        self.parts.push(Part {
            met: true,
            words: words.into(),
        });
    }

    /// A part that is still missing: what is missing, and what the check saw instead.
    pub fn missing(&mut self, words: impl Into<String>) {
        self.parts.push(Part {
            met: false,
            words: words.into(),
        });
    }

    /// Records `met_words` if `ok`, else `missing_words`; returns `ok`.
    pub fn part(
        &mut self,
        ok: bool,
        met_words: impl Into<String>,
        missing_words: impl Into<String>,
    ) -> bool {
        if ok {
            self.met(met_words);
        } else {
            self.missing(missing_words);
        }
        ok
    }

    /// Whether every part is met (and there is at least one).
    pub fn passed(&self) -> bool {
        !self.parts.is_empty() && self.parts.iter().all(|p| p.met)
    }

    /// The missing parts' words.
    pub fn missing_parts(&self) -> Vec<&str> {
        self.parts
            .iter()
            .filter(|p| !p.met)
            .map(|p| p.words.as_str())
            .collect()
    }

    /// The check's report: one line per part, `[done]` or `[todo]`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            let mark = if part.met { "done" } else { "todo" };
            let mut lines = part.words.lines();
            out.push_str(&format!(
                "  [{mark}] {}\n",
                lines.next().unwrap_or_default()
            ));
            for line in lines {
                out.push_str(&format!("         {line}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_passes_only_with_every_part_met() {
        let mut v = Verdict::new();
        assert!(!v.passed(), "an empty verdict checks nothing");
        v.met("a");
        assert!(v.passed());
        v.missing("b is missing");
        assert!(!v.passed());
        assert_eq!(v.missing_parts(), ["b is missing"]);
        assert_eq!(v.render(), "  [done] a\n  [todo] b is missing\n");
    }
}
