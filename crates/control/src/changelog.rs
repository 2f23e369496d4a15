//! The change log: one JSON line per committed change, `{"rv":N,"type":"ADDED","kind":"Pod",
//! "object":{...}}`, in resourceVersion order. It is the store's write-ahead log (a change is
//! committed once its line is whole and fsynced; the object files are redone from it after a
//! crash) and what every watch reads, from any process.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The type of a change, as a Kubernetes watch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        })
    }
}

/// One line of the log. `rv` comes first so that a reader can skip old lines cheaply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub rv: u64,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub kind: String,
    pub object: Value,
}

impl Record {
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("a record encodes");
        line.push(b'\n');
        line
    }

    pub fn parse(line: &[u8], path: &Path) -> Result<Record> {
        serde_json::from_slice(line).map_err(|e| corrupt(path, e))
    }
}

/// What a watcher needs of a line before it knows the change is of its kind: the object is
/// skipped over, not built (a Pod's object is most of the line).
#[derive(Deserialize)]
pub(crate) struct Head<'a> {
    pub rv: u64,
    #[serde(borrow)]
    pub kind: std::borrow::Cow<'a, str>,
}

/// A line whose change is of the kind `T`, its object read straight into `T`.
#[derive(Deserialize)]
pub(crate) struct Typed<T> {
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub object: T,
}

impl Head<'_> {
    pub fn parse<'a>(line: &'a [u8], path: &Path) -> Result<Head<'a>> {
        serde_json::from_slice(line).map_err(|e| corrupt(path, e))
    }
}

fn corrupt(path: &Path, e: serde_json::Error) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        message: format!("change log line: {e}"),
    }
}

/// The resourceVersion of a line, read from its `{"rv":N,` prefix without parsing the object.
pub(crate) fn rv_of_line(line: &[u8]) -> Option<u64> {
    let digits = line.strip_prefix(br#"{"rv":"#)?;
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// Reads whole lines of the log from a byte offset on. A line still being written (no `\n`
/// yet) is left for the next call, and read again from its start.
pub(crate) struct LogReader {
    path: PathBuf,
    file: Option<File>,
    offset: u64,
}

impl LogReader {
    pub fn new(path: PathBuf, offset: u64) -> Self {
        LogReader {
            path,
            file: None,
            offset,
        }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `each` for every whole line after the offset, up to `end` if given, and moves the
    /// offset past them. Returns how many lines were read.
    pub fn read_lines(
        &mut self,
        end: Option<u64>,
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        const CHUNK: usize = 1 << 20;
        if self.file.is_none() {
            let file = File::open(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
            self.file = Some(file);
        }
        let file = self.file.as_ref().expect("opened above");
        let mut lines = 0;
        // Watchers call this every few hundred milliseconds: nothing new costs one fstat, and
        // the buffer is only as large as what there is to read.
        let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        let limit = end.map_or(size, |end| end.min(size));
        if limit <= self.offset {
            return Ok(0);
        }
        let mut buffer = vec![0u8; CHUNK.min((limit - self.offset) as usize).max(4096)];
        loop {
            let want = match end {
                Some(end) if end <= self.offset => return Ok(lines),
                Some(end) => buffer.len().min((end - self.offset) as usize),
                None => buffer.len(),
            };
            let got = read_at_most(file, &mut buffer[..want], self.offset)
                .map_err(|e| Error::io("read", &self.path, e))?;
            if got == 0 {
                return Ok(lines);
            }
            let Some(last_newline) = buffer[..got].iter().rposition(|&b| b == b'\n') else {
                let at_end = end.is_some_and(|end| self.offset + got as u64 >= end);
                if got < want || at_end {
                    return Ok(lines); // a line still being written
                }
                buffer.resize(buffer.len() * 2, 0); // a line longer than the buffer
                continue;
            };
            for line in buffer[..last_newline].split(|&b| b == b'\n') {
                each(line)?;
                lines += 1;
            }
            self.offset += last_newline as u64 + 1;
        }
    }
}

fn read_at_most(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rv_is_read_from_the_line_prefix() {
        let record = Record {
            rv: 42,
            event_type: EventType::Added,
            kind: "Pod".into(),
            object: serde_json::json!({"metadata": {"name": "x"}}),
        };
        let line = record.to_line();
        assert_eq!(rv_of_line(&line), Some(42));
        assert!(String::from_utf8(line)
            .unwrap()
            .contains(r#""type":"ADDED""#));
    }

    #[test]
    fn a_half_written_line_is_left_for_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, b"{\"rv\":1}\n{\"rv\":2").unwrap();
        let mut reader = LogReader::new(path.clone(), 0);
        let mut seen = Vec::new();
        reader
            .read_lines(None, |l| {
                seen.push(l.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![b"{\"rv\":1}".to_vec()]);
        assert_eq!(reader.offset(), 9);
        std::fs::write(&path, b"{\"rv\":1}\n{\"rv\":2}\n").unwrap();
        reader
            .read_lines(None, |l| {
                seen.push(l.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(rv_of_line(&seen[1]), Some(2));
    }
}
