//! The CRI log format, the one kubelet reads for `kubectl logs`: one record per line,
//! `<RFC3339Nano time> <stdout|stderr> <F|P> <content>\n`. `F` ends a line of the program's
//! output; `P` is a piece of a longer one (longer than [`MAX_LINE`], or cut off by the end of
//! the stream without a newline), continued by the next record of the same stream.
//!
//! [`LineSplitter`] turns the bytes read from a container's pipe into records the way
//! containerd's log redirector does; [`parse_line`] and [`read_log`] go back.

use std::io::Write;

use serde::{Deserialize, Serialize};

/// containerd's default `max_container_log_line_size`.
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `2024-05-01T12:34:56.123456789Z` for nanoseconds since the epoch (UTC, all nine digits).
pub fn format_timestamp(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let second_of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// One record: `time stream tag content\n`.
pub fn format_record(ns: i64, stream: Stream, partial: bool, content: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(content.len() + 48);
    record.extend_from_slice(format_timestamp(ns).as_bytes());
    record.push(b' ');
    record.extend_from_slice(stream.as_str().as_bytes());
    record.extend_from_slice(if partial { b" P " } else { b" F " });
    record.extend_from_slice(content);
    record.push(b'\n');
    record
}

/// Cuts one stream's bytes into records. Complete lines become `F` records as soon as their
/// newline arrives; a line that grows past [`MAX_LINE`] is written in `P` pieces of that size;
/// what is left when the stream ends is a `P` record.
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    pending: Vec<u8>,
    max_line: usize,
}

impl LineSplitter {
    pub fn new(stream: Stream) -> LineSplitter {
        LineSplitter::with_max_line(stream, MAX_LINE)
    }

    pub fn with_max_line(stream: Stream, max_line: usize) -> LineSplitter {
        LineSplitter {
            stream,
            pending: Vec::new(),
            max_line: max_line.max(1),
        }
    }

    /// The records for `bytes` just read, stamped `now_ns`.
    pub fn push(&mut self, bytes: &[u8], now_ns: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..newline]);
            self.cut_long(&mut out, now_ns);
            out.extend(format_record(now_ns, self.stream, false, &self.pending));
            self.pending.clear();
            rest = &rest[newline + 1..];
        }
        self.pending.extend_from_slice(rest);
        self.cut_long(&mut out, now_ns);
        out
    }

    /// The record for what is left at the end of the stream (none when nothing is).
    pub fn finish(&mut self, now_ns: i64) -> Vec<u8> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let record = format_record(now_ns, self.stream, true, &self.pending);
        self.pending.clear();
        record
    }

    fn cut_long(&mut self, out: &mut Vec<u8>, now_ns: i64) {
        while self.pending.len() > self.max_line {
            let piece: Vec<u8> = self.pending.drain(..self.max_line).collect();
            out.extend(format_record(now_ns, self.stream, true, &piece));
        }
    }
}

/// One parsed record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    pub timestamp: String,
    pub stream: Stream,
    pub partial: bool,
    pub content: Vec<u8>,
}

/// Parses one record (without its newline).
pub fn parse_line(line: &[u8]) -> Option<LogRecord> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let timestamp = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let stream = match parts.next()? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    let content = parts.next().unwrap_or_default().to_vec();
    Some(LogRecord {
        timestamp,
        stream,
        partial,
        content,
    })
}

/// A line of a container's output, put back together from its records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The time of its first record.
    pub timestamp: String,
    pub stream: Stream,
    pub content: Vec<u8>,
    /// False when the stream ended in the middle of it (no newline was written).
    pub complete: bool,
}

/// The lines of a CRI log text, partial records joined per stream; unreadable lines are skipped.
pub fn parse_log(text: &[u8]) -> Vec<LogLine> {
    let mut lines: Vec<LogLine> = Vec::new();
    let mut open: [Option<usize>; 2] = [None, None];
    for raw in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Some(record) = parse_line(raw) else {
            continue;
        };
        let slot = &mut open[record.stream as usize];
        let index = match *slot {
            Some(index) => {
                lines[index].content.extend_from_slice(&record.content);
                index
            }
            None => {
                lines.push(LogLine {
                    timestamp: record.timestamp,
                    stream: record.stream,
                    content: record.content,
                    complete: false,
                });
                lines.len() - 1
            }
        };
        if record.partial {
            *slot = Some(index);
        } else {
            lines[index].complete = true;
            *slot = None;
        }
    }
    lines
}

/// [`parse_log`] of a file.
pub fn read_log(path: &std::path::Path) -> std::io::Result<Vec<LogLine>> {
    Ok(parse_log(&std::fs::read(path)?))
}

/// The output as the program wrote it (both streams, in record order), for `podlab logs`.
pub fn write_plain(lines: &[LogLine], out: &mut impl Write) -> std::io::Result<()> {
    for line in lines {
        out.write_all(&line.content)?;
        if line.complete {
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_with_nanoseconds() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000000000Z");
        // 2016-10-06T00:17:09.669794202Z, the example of the CRI log design document.
        assert_eq!(
            format_timestamp(1_475_713_029_669_794_202),
            "2016-10-06T00:17:09.669794202Z"
        );
        assert_eq!(
            format_timestamp(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
        assert_eq!(
            format_timestamp(-1_000_000_000),
            "1969-12-31T23:59:59.000000000Z"
        );
    }

    #[test]
    fn complete_lines_are_f_records() {
        let mut s = LineSplitter::new(Stream::Stdout);
        let out = s.push(b"hello\nworld\n", 0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000000000Z stdout F hello\n\
             1970-01-01T00:00:00.000000000Z stdout F world\n"
        );
        assert!(s.finish(0).is_empty());
    }

    #[test]
    fn a_line_split_across_reads_is_one_record() {
        let mut s = LineSplitter::new(Stream::Stderr);
        assert!(s.push(b"hel", 0).is_empty());
        let out = s.push(b"lo\n", 0);
        assert!(out.ends_with(b" stderr F hello\n"));
        let empty = s.push(b"\n", 0);
        assert!(
            empty.ends_with(b" stderr F \n"),
            "an empty line is a record"
        );
    }

    #[test]
    fn long_lines_and_the_unterminated_end_are_partial() {
        let mut s = LineSplitter::with_max_line(Stream::Stdout, 4);
        let out = String::from_utf8(s.push(b"abcdefghij\nxy", 0)).unwrap();
        let tags: Vec<&str> = out.lines().map(|l| l.split(' ').nth(2).unwrap()).collect();
        assert_eq!(tags, ["P", "P", "F"]);
        assert!(out.lines().last().unwrap().ends_with(" F ij"));
        let end = String::from_utf8(s.finish(0)).unwrap();
        assert!(end.ends_with(" stdout P xy\n"), "{end}");
    }

    #[test]
    fn records_round_trip_into_lines() {
        let mut s = LineSplitter::with_max_line(Stream::Stdout, 3);
        let mut text = s.push(b"abcdef\nok\n", 5);
        text.extend(format_record(6, Stream::Stderr, false, b"err"));
        text.extend(s.push(b"tail", 7));
        text.extend(s.finish(7));
        let lines = parse_log(&text);
        let got: Vec<(Stream, &[u8], bool)> = lines
            .iter()
            .map(|l| (l.stream, l.content.as_slice(), l.complete))
            .collect();
        assert_eq!(
            got,
            vec![
                (Stream::Stdout, &b"abcdef"[..], true),
                (Stream::Stdout, &b"ok"[..], true),
                (Stream::Stderr, &b"err"[..], true),
                (Stream::Stdout, &b"tail"[..], false),
            ]
        );
        let mut plain = Vec::new();
        write_plain(&lines, &mut plain).unwrap();
        assert_eq!(plain, b"abcdef\nok\nerr\ntail");
    }

    #[test]
    fn content_with_spaces_survives_parsing() {
        let record = format_record(0, Stream::Stdout, false, b"a b  c");
        let parsed = parse_line(&record[..record.len() - 1]).unwrap();
        assert_eq!(parsed.content, b"a b  c");
        assert!(!parsed.partial);
        assert!(parse_line(b"garbage").is_none());
    }
}
