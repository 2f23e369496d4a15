//! Go's `text/tabwriter`: cells end at a tab, lines at a newline; each column block (consecutive
//! lines that have a cell in that column) is padded to its widest cell plus the padding, at least
//! the minimum width; the last cell of a line is never padded. kubectl configures it two ways:
//!
//! * its printers (`printers.GetNewTabWriter`, [`PRINTERS`]): padding 3, at least 6, and its
//!   fork's `RememberWidths`: a column never gets narrower than it was in an earlier block,
//!   which shows when a multi-line value interrupts a table;
//! * its describers (`tabbedString`, [`DESCRIBE`]): the standard library's writer, padding 2,
//!   no minimum.

/// How a tab writer is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub min_width: usize,
    pub padding: usize,
    pub remember_widths: bool,
}

/// kubectl's printers: `tabwriterMinWidth` 6, `tabwriterPadding` 3, `RememberWidths`.
pub(crate) const PRINTERS: Settings = Settings {
    min_width: 6,
    padding: 3,
    remember_widths: true,
};

/// kubectl's describers: `tabwriter.Writer.Init(buf, 0, 8, 2, ' ', 0)`.
pub(crate) const DESCRIBE: Settings = Settings {
    min_width: 0,
    padding: 2,
    remember_widths: false,
};

struct Cell<'a> {
    text: &'a str,
    width: usize,
}

/// Aligns tab-separated `text` the way kubectl's printers' tab writer does when flushed.
pub(crate) fn align(text: &str) -> String {
    align_with(text, PRINTERS)
}

/// Aligns tab-separated `text` as a tab writer set up with `settings` does when flushed.
pub(crate) fn align_with(text: &str, settings: Settings) -> String {
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
        settings,
        lines: &lines,
        widths: Vec::new(),
        max_widths: Vec::new(),
        out: String::with_capacity(text.len() * 2),
    };
    writer.format(0, lines.len());
    writer.out
}

struct Formatter<'a> {
    settings: Settings,
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
            let mut width = self.settings.min_width;
            while this < line1 && column + 1 < self.lines[this].len() {
                width = width.max(self.lines[this][column].width + self.settings.padding);
                this += 1;
            }
            if !self.settings.remember_widths {
                self.widths.push(width);
                self.format(line0, this);
                self.widths.pop();
                line0 = this;
                continue;
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
    fn describe_blocks_are_as_wide_as_their_widest_cell_plus_two() {
        let text =
            "Name:\tweb\nService Account:\tdefault\nContainers:\n  app:\n    Image:\tbusybox\n";
        assert_eq!(
            align_with(text, DESCRIBE),
            "Name:             web\nService Account:  default\nContainers:\n  app:\n    Image:  busybox\n"
        );
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
