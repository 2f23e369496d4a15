//! Go's `text/tabwriter` as kubectl configures it (`printers.GetNewTabWriter`): cells end at a
//! tab, lines at a newline; each column block (consecutive lines that have a cell in that column)
//! is padded to its widest cell plus 3 spaces, at least 6; the last cell of a line is never padded.
//! kubectl's fork adds `RememberWidths`: a column never gets narrower than it was in an earlier
//! block, which shows when a multi-line value interrupts a table.

/// kubectl's `tabwriterMinWidth`.
pub(crate) const MIN_WIDTH: usize = 6;
/// kubectl's `tabwriterPadding`.
pub(crate) const PADDING: usize = 3;

struct Cell<'a> {
    text: &'a str,
    width: usize,
}

/// Aligns tab-separated `text` the way kubectl's tab writer does when flushed.
pub(crate) fn align(text: &str) -> String {
    let lines: Vec<Vec<Cell>> = text
        .split('\n')
        .map(|line| {
            line.split('\t')
                .map(|cell| Cell {
                    text: cell,
                    width: cell.chars().count(),
                })
                .collect()
        })
        .collect();
    let mut writer = Formatter {
        lines: &lines,
        widths: Vec::new(),
        max_widths: Vec::new(),
        out: String::with_capacity(text.len() * 2),
    };
    writer.format(0, lines.len());
    writer.out
}

struct Formatter<'a> {
    lines: &'a [Vec<Cell<'a>>],
    widths: Vec<usize>,
    max_widths: Vec<usize>,
    out: String,
}

impl Formatter<'_> {
    fn format(&mut self, mut line0: usize, line1: usize) {
        let column = self.widths.len();
        let mut this = line0;
        while this < line1 {
            if column + 1 >= self.lines[this].len() {
                this += 1;
                continue;
            }
            // A cell exists in this column: print the lines before the block, then the block.
            self.write_lines(line0, this);
            line0 = this;
            let mut width = MIN_WIDTH;
            while this < line1 && column + 1 < self.lines[this].len() {
                width = width.max(self.lines[this][column].width + PADDING);
                this += 1;
            }
            if self.max_widths.len() < self.widths.len() {
                let missing = self.widths[self.max_widths.len()..].to_vec();
                self.max_widths.extend(missing);
            }
            if self.max_widths.len() == self.widths.len() {
                self.max_widths.push(width);
            } else if self.max_widths[column] > width {
                width = self.max_widths[column];
            } else {
                self.max_widths[column] = width;
            }
            self.widths.push(width);
            self.format(line0, this);
            self.widths.pop();
            line0 = this;
        }
        self.write_lines(line0, line1);
    }

    fn write_lines(&mut self, line0: usize, line1: usize) {
        for i in line0..line1 {
            for (j, cell) in self.lines[i].iter().enumerate() {
                self.out.push_str(cell.text);
                if j < self.widths.len() {
                    let pad = self.widths[j].saturating_sub(cell.width);
                    self.out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            if i + 1 < self.lines.len() {
                self.out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_columns_but_not_the_last() {
        assert_eq!(
            align("NAME\tIP\nweb-1\t10.0.0.1\n"),
            "NAME    IP\nweb-1   10.0.0.1\n"
        );
        assert_eq!(align("A\tB\n1\t2\n"), "A     B\n1     2\n");
    }

    #[test]
    fn remembers_widths_across_a_multiline_break() {
        let text = "lower\tANN\nPod\tmap[a:line one\nline two\n b:x]\nPod\tmap[]\n";
        assert_eq!(
            align(text),
            "lower   ANN\nPod     map[a:line one\nline two\n b:x]\nPod     map[]\n"
        );
    }
}
