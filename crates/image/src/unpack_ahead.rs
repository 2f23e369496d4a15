//! A layer unpacked while it downloads. The chunks the registry sends for a layer blob go to
//! the file in `ingest/` and, through a bounded channel, to two threads: one inflates them, the
//! other hashes the tar (the DiffID) and writes its files, so that the work of a layer overlaps
//! the wait for its bytes instead of starting after the last one, and uses both cores of a
//! small node. The pull's commit then moves the folder into its staging snapshots instead of
//! unpacking the blob again.
//!
//! Why two: a pull of busybox here is three phases (`perf sched` of 20 pulls): the registry's
//! answer (10 ms, the registry's CPU), the unpack (12.7 ms), the commit (1.5 ms). One thread
//! that inflated and unpacked ran 11 of the unpack's 12.7 ms while the other core sat idle for
//! 8.6; inflating is about half of that thread's work.
//!
//! ```text
//! ROOT/ingest/<hex>.unpacking                 the thread's folder while the blob streams
//! ROOT/ingest/<hex>.unpacking.<pid>-<n>-<ns>  the same for an instant: made under a name of
//!                                             its own (see make_spread_folder)
//! ROOT/ingest/<hex>.unpacked.<diff hex>       whole, made from the verified blob, this DiffID
//! ROOT/ingest/<hex>.unpacked-bottom.<diff hex> the same, for the bottom layer only (below)
//! ```
//!
//! They are guarded by the blob's `<hex>.lock`, as the download is: the folder is renamed to
//! its final name only after the blob's digest matched and before the lock is let go, so a
//! folder under a final name is always complete. What is unsure is thrown away, never used:
//! a download that breaks off and resumes, a digest that does not match, a tar the thread
//! cannot read. The commit then unpacks from the blob as it always did. A tar that leaves
//! folders out makes them with attributes of the layers below, which the thread does not
//! have: such a layer is kept only as the bottom one of its image (`unpacked-bottom`), used
//! only where nothing is below it, and thrown away above the bottom.

use std::fs;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;

use bytes::{Buf, Bytes};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};

use crate::content::COPY_BUFFER;
use crate::digest::Digest;
use crate::error::Result;
use crate::layer::{self, Unpacked};

/// Chunks waiting for the thread (a few MB at most): a slow disk slows the download, it does
/// not fill the memory.
const QUEUED_CHUNKS: usize = 128;

/// Inflated bytes go from the inflater to the unpacker in blocks of this size, reused.
const BLOCK: usize = 64 * 1024;
/// Blocks inflated ahead of the unpacker, at most.
const QUEUED_BLOCKS: usize = 8;

/// A block of inflated bytes (the buffer and how much of it is filled), or what stopped the
/// inflater.
type Block = std::io::Result<(Vec<u8>, usize)>;

/// The folder a finished layer waits in for the commit, named after the blob and its DiffID;
/// `bottom_only` when its tar left folders out (it is right only with nothing below it).
fn ready_path(ingest: &Path, blob: &Digest, diff_id: &Digest, bottom_only: bool) -> PathBuf {
    let kind = if bottom_only {
        "unpacked-bottom"
    } else {
        "unpacked"
    };
    ingest.join(format!("{}.{kind}.{}", blob.hex(), diff_id.hex()))
}

fn working_path(ingest: &Path, blob: &Digest) -> PathBuf {
    ingest.join(format!("{}.unpacking", blob.hex()))
}

/// Makes `folder` under a name of its own first, then renames it. ext4's Orlov allocator puts
/// a folder made in `ingest/` (see `Store::prepare_ingest`) in the emptiest block group it
/// finds from a start hashed from the folder's *name*, and the layer's files follow it there.
/// Under one name per blob, the same layer pulled again went to the group where its last copy
/// had just been deleted: 120-170 µs an inode there after a few minutes of pulls and removals
/// of busybox (ext4 tracepoints), against 10-20 in a group of its own.
fn make_spread_folder(folder: &Path) -> std::io::Result<()> {
    let mut unique = folder.as_os_str().to_owned();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    unique.push(format!(".{}-{nanos}", crate::unique::suffix()));
    fs::create_dir(&unique)?;
    fs::rename(&unique, folder).inspect_err(|_| {
        let _ = fs::remove_dir(&unique);
    })
}

/// Removes the finished folders of `blobs` that a commit passed over (their snapshots were
/// there already). A folder still being unpacked is its pull's to remove.
pub(crate) fn discard_ready(ingest: &Path, blobs: &[Digest]) {
    let Ok(entries) = fs::read_dir(ingest) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.split_once('.').is_some_and(|(hex, kind)| {
            kind.starts_with("unpacked") && blobs.iter().any(|b| b.hex() == hex)
        });
        if ours {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// One layer being unpacked by its thread. Dropped without [`UnpackAhead::finish`], it stops
/// the thread and removes the folder.
pub(crate) struct UnpackAhead {
    chunks: Option<mpsc::Sender<Bytes>>,
    /// The unpacking thread, then the inflating one.
    threads: Vec<JoinHandle<()>>,
    /// What the thread unpacked, sent just before it ends (awaited without a blocking thread).
    outcome: Option<oneshot::Receiver<Result<Unpacked>>>,
    folder: PathBuf,
    ingest: PathBuf,
    blob: Digest,
    bottom: bool,
}

impl UnpackAhead {
    /// Starts the thread for `blob`, the bottom layer of its image when `bottom`; `None` when
    /// its folder cannot be made (the commit then unpacks as usual). Called with the blob's
    /// ingest lock held.
    pub fn start(ingest: &Path, blob: &Digest, bottom: bool) -> Option<UnpackAhead> {
        let folder = working_path(ingest, blob);
        // Left by a pull that was killed while it held this lock.
        let _ = fs::remove_dir_all(&folder);
        make_spread_folder(&folder).ok()?;
        // As a snapshot's folder is made; the tar's own `./` entry, if any, decides after.
        let _ = fs::set_permissions(&folder, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        let (sender, receiver) = mpsc::channel(QUEUED_CHUNKS);
        let (report, outcome) = oneshot::channel();
        let (into, name) = (
            folder.clone(),
            format!("{blob} (unpacked while downloading)"),
        );
        let (blocks, inflated) = std::sync::mpsc::sync_channel(QUEUED_BLOCKS);
        let (spent, empties) = std::sync::mpsc::channel();
        let inflate_name = name.clone();
        let (unpacker_cpus, inflater_cpus) = apart().unzip();
        let inflater = std::thread::Builder::new()
            .name("podlab-inflate".into())
            .spawn(move || {
                keep_to(inflater_cpus);
                let stream = BufReader::with_capacity(
                    COPY_BUFFER,
                    ChunkReader {
                        receiver,
                        chunk: Bytes::new(),
                    },
                );
                inflate(stream, &inflate_name, &blocks, &empties);
            });
        let Ok(inflater) = inflater else {
            let _ = fs::remove_dir(&folder);
            return None;
        };
        let thread = std::thread::Builder::new()
            .name("podlab-unpack".into())
            .spawn(move || {
                keep_to(unpacker_cpus);
                let tar = BlockReader {
                    inflated,
                    spent,
                    block: Vec::new(),
                    filled: 0,
                    at: 0,
                };
                let unpacked = layer::unpack(tar, &into, &[], &name);
                let _ = report.send(unpacked);
            });
        let Ok(thread) = thread else {
            drop(sender); // the inflater's stream ends, and so does it
            let _ = inflater.join();
            let _ = fs::remove_dir(&folder);
            return None;
        };
        Some(UnpackAhead {
            chunks: Some(sender),
            threads: vec![thread, inflater],
            outcome: Some(outcome),
            folder,
            ingest: ingest.to_owned(),
            blob: blob.clone(),
            bottom,
        })
    }

    /// Hands the thread the next chunk of the blob; waits while its queue is full. A thread
    /// that stopped reading (a tar it cannot unpack) gets nothing more.
    pub async fn feed(&mut self, chunk: &Bytes) {
        if let Some(chunks) = &self.chunks {
            if chunks.send(chunk.clone()).await.is_err() {
                self.chunks = None;
            }
        }
    }

    /// The blob is whole and its digest matched: waits for the thread and puts its folder
    /// under its final name. Whether the folder can be used; when not, it is gone.
    pub async fn finish(mut self) -> bool {
        self.chunks = None; // the end of the stream
        let Some(outcome) = self.outcome.take() else {
            return false;
        };
        let unpacked = outcome.await.ok().and_then(|result| result.ok());
        // The unpacker has sent its outcome and the inflater has read the stream's end (or
        // lost its reader): both are ending.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        match unpacked {
            Some(unpacked) if self.bottom || !unpacked.implied_folders => {
                let bottom_only = unpacked.implied_folders;
                let ready = ready_path(&self.ingest, &self.blob, &unpacked.diff_id, bottom_only);
                let _ = fs::remove_dir_all(&ready);
                fs::rename(&self.folder, &ready).is_ok()
            }
            _ => false,
        }
    }
}

impl Drop for UnpackAhead {
    fn drop(&mut self) {
        self.chunks = None;
        // The closed queue ends the inflater's stream; the unpacker then reads the end of
        // what was inflated, or the error a cut-off stream makes.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        let _ = fs::remove_dir_all(&self.folder);
    }
}

/// CPUs for the unpacker (the caller's CPU) and for the inflater (every other one it may
/// use), or None when the caller may use one CPU only. Left to the kernel, the two shared one
/// CPU while the other idled: each block the inflater sends wakes the unpacker on the
/// inflater's CPU (the kernel looks no further for an idle one while the cache it shares
/// looks busy on average, as it does during a pull), and they took turns there
/// (`perf sched`, a pull of busybox: 10 ms on one CPU, the other idle).
fn apart() -> Option<(CpuSet, CpuSet)> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
    // SAFETY: sched_getcpu has no preconditions.
    let here = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
    let mut others = allowed;
    others.unset(here).ok()?;
    let any_other = (0..CpuSet::count()).any(|cpu| others.is_set(cpu).unwrap_or(false));
    if !any_other || !allowed.is_set(here).unwrap_or(false) {
        return None;
    }
    let mut mine = CpuSet::new();
    mine.set(here).ok()?;
    Some((mine, others))
}

/// Keeps the calling thread to `cpus`, if given; a thread that cannot be kept goes anywhere.
fn keep_to(cpus: Option<CpuSet>) {
    if let Some(cpus) = cpus {
        let _ = sched_setaffinity(Pid::from_raw(0), &cpus);
    }
}

/// The inflater's life: the layer's bytes (`stream`) inflated into blocks for the unpacker,
/// in buffers it hands back (`empties`). It ends at the stream's end, at an error (sent on),
/// or when the unpacker stops taking blocks.
fn inflate(
    stream: impl std::io::BufRead,
    what: &str,
    blocks: &SyncSender<Block>,
    empties: &Receiver<Vec<u8>>,
) {
    let mut decoded = match crate::compression::decompress(stream, what) {
        Ok((_, decoded)) => decoded,
        Err(e) => {
            let _ = blocks.send(Err(std::io::Error::other(e)));
            return;
        }
    };
    let mut made = 0;
    loop {
        let mut block = match empties.try_recv() {
            Ok(block) => block,
            Err(_) if made <= QUEUED_BLOCKS => {
                made += 1;
                vec![0; BLOCK]
            }
            Err(_) => match empties.recv() {
                Ok(block) => block,
                Err(_) => return,
            },
        };
        let mut filled = 0;
        while filled < BLOCK {
            match decoded.read(&mut block[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if filled > 0 {
                        let _ = blocks.send(Ok((block, filled)));
                    }
                    let _ = blocks.send(Err(e));
                    return;
                }
            }
        }
        if filled > 0 && blocks.send(Ok((block, filled))).is_err() {
            return; // the unpacker stopped
        }
        if filled < BLOCK {
            return; // the end: the closed queue tells the unpacker
        }
    }
}

/// The inflater's blocks as one byte stream, each block handed back once read.
struct BlockReader {
    inflated: Receiver<Block>,
    spent: std::sync::mpsc::Sender<Vec<u8>>,
    block: Vec<u8>,
    filled: usize,
    at: usize,
}

impl Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.filled {
            let read = std::mem::take(&mut self.block);
            if !read.is_empty() {
                let _ = self.spent.send(read);
            }
            match self.inflated.recv() {
                Ok(Ok((block, filled))) => (self.block, self.filled, self.at) = (block, filled, 0),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.filled - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The queue's chunks as one byte stream; it ends when the sender is dropped.
struct ChunkReader {
    receiver: mpsc::Receiver<Bytes>,
    chunk: Bytes,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while !self.chunk.has_remaining() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.chunk = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.remaining());
        self.chunk.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}

/// The folder unpacked ahead for `blob` with `diff_id` that fits where the layer is (`bottom`:
/// nothing below it), if a pull left one. A blob can be the bottom layer of one image and sit
/// above others in another.
pub(crate) fn ready(
    ingest: &Path,
    blob: &Digest,
    diff_id: &Digest,
    bottom: bool,
) -> Option<PathBuf> {
    let fitting: &[bool] = if bottom { &[false, true] } else { &[false] };
    fitting
        .iter()
        .map(|&bottom_only| ready_path(ingest, blob, diff_id, bottom_only))
        .find(|path| path.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A tar of `entries` (`name/` is a folder), owned by the caller's ids.
    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, bytes) in entries {
            let mut header = tar::Header::new_gnu();
            let folder = name.ends_with('/');
            header.set_entry_type(if folder {
                tar::EntryType::Directory
            } else {
                tar::EntryType::Regular
            });
            header.set_mode(if folder { 0o755 } else { 0o644 });
            header.set_uid(nix::unistd::geteuid().as_raw().into());
            header.set_gid(nix::unistd::getegid().as_raw().into());
            header.set_size(bytes.len() as u64);
            header.set_mtime(1_000_000_000);
            builder.append_data(&mut header, name, *bytes).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    /// Streams `blob` in small chunks, as a registry's response arrives, then finishes.
    fn stream(ingest: &Path, blob: &[u8], bottom: bool) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut ahead = UnpackAhead::start(ingest, &Digest::of(blob), bottom).unwrap();
            for chunk in blob.chunks(333) {
                ahead.feed(&Bytes::copy_from_slice(chunk)).await;
            }
            ahead.finish().await
        })
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_streamed_layer_waits_whole_under_its_blob_and_diff_id() {
        let ingest = tempfile::tempdir().unwrap();
        let tar = tar_of(&[("etc/", b""), ("etc/os", b"streamed\n")]);
        let blob = gzip(&tar);
        assert!(stream(ingest.path(), &blob, false), "usable");
        let ready = ready(ingest.path(), &Digest::of(&blob), &Digest::of(&tar), false)
            .expect("named after the blob and the tar's sha256");
        assert_eq!(fs::read(ready.join("etc/os")).unwrap(), b"streamed\n");
        assert_eq!(
            entries(ingest.path()),
            [ready.file_name().unwrap().to_string_lossy().into_owned()],
            "nothing else is left in ingest"
        );
        discard_ready(ingest.path(), &[Digest::of(&blob)]);
        assert!(entries(ingest.path()).is_empty());
    }

    #[test]
    fn a_layer_above_the_bottom_that_leaves_folders_out_is_not_kept() {
        let ingest = tempfile::tempdir().unwrap();
        // `etc/` is not in the tar: its attributes would come from the layers below.
        let tar = tar_of(&[("etc/os", b"top\n")]);
        let blob = gzip(&tar);
        assert!(!stream(ingest.path(), &blob, false));
        assert!(entries(ingest.path()).is_empty(), "its folder is removed");
        assert!(
            stream(ingest.path(), &blob, true),
            "the bottom layer has nothing below it: kept"
        );
        let (blob, tar) = (Digest::of(&blob), Digest::of(&tar));
        assert!(ready(ingest.path(), &blob, &tar, true).is_some());
        assert!(
            ready(ingest.path(), &blob, &tar, false).is_none(),
            "not for the same blob above another layer, in another image"
        );
        discard_ready(ingest.path(), &[blob]);
        assert!(entries(ingest.path()).is_empty());
    }

    #[test]
    fn a_stream_given_up_before_its_end_leaves_nothing() {
        let ingest = tempfile::tempdir().unwrap();
        let tar = tar_of(&[("etc/", b""), ("etc/os", &[7u8; 100_000])]);
        let blob = gzip(&tar);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut ahead = UnpackAhead::start(ingest.path(), &Digest::of(&blob), true).unwrap();
            ahead
                .feed(&Bytes::copy_from_slice(&blob[..blob.len() / 2]))
                .await;
            // The digest did not match, or the connection broke: dropped, not finished.
        });
        assert!(
            entries(ingest.path()).is_empty(),
            "{:?}",
            entries(ingest.path())
        );
    }

    /// Bytes that gzip cannot shrink, so that the layer spans many of the inflater's blocks.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) as u8
            })
            .collect()
    }

    #[test]
    fn a_layer_of_many_blocks_is_inflated_and_written_whole() {
        let ingest = tempfile::tempdir().unwrap();
        let big = noise(3 * BLOCK * QUEUED_BLOCKS + 12_345, 1);
        let small = noise(777, 2);
        let tar = tar_of(&[("lib/", b""), ("lib/big", &big), ("lib/small", &small)]);
        let blob = gzip(&tar);
        assert!(stream(ingest.path(), &blob, true));
        let ready = ready(ingest.path(), &Digest::of(&blob), &Digest::of(&tar), true)
            .expect("named after the tar's sha256: every block reached the unpacker in order");
        assert!(fs::read(ready.join("lib/big")).unwrap() == big);
        assert_eq!(fs::read(ready.join("lib/small")).unwrap(), small);
    }

    #[test]
    fn a_gzip_stream_corrupt_midway_leaves_nothing_and_ends_both_threads() {
        let ingest = tempfile::tempdir().unwrap();
        let tar = tar_of(&[("etc/", b""), ("etc/data", &noise(4 * BLOCK, 3))]);
        let mut blob = gzip(&tar);
        let middle = blob.len() / 2;
        for byte in &mut blob[middle..middle + 64] {
            *byte ^= 0x5a;
        }
        // The inflater's error reaches the unpacker, and both threads end: finish returns.
        assert!(!stream(ingest.path(), &blob, true));
        assert!(
            entries(ingest.path()).is_empty(),
            "{:?}",
            entries(ingest.path())
        );
    }

    #[test]
    fn the_inflater_and_the_unpacker_are_kept_to_different_cpus() {
        let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let count = (0..CpuSet::count())
            .filter(|&cpu| allowed.is_set(cpu).unwrap())
            .count();
        let Some((unpacker, inflater)) = apart() else {
            assert_eq!(count, 1, "apart only when one CPU is all there is");
            return;
        };
        for cpu in 0..CpuSet::count() {
            let (u, i) = (unpacker.is_set(cpu).unwrap(), inflater.is_set(cpu).unwrap());
            assert!(!(u && i), "CPU {cpu} is in both sets");
            assert!(
                !(u || i) || allowed.is_set(cpu).unwrap(),
                "CPU {cpu} not allowed"
            );
        }
        let unpacker_cpus = (0..CpuSet::count())
            .filter(|&cpu| unpacker.is_set(cpu).unwrap())
            .count();
        assert_eq!(unpacker_cpus, 1, "the unpacker stays on the caller's CPU");
    }

    #[test]
    fn a_blob_that_is_not_a_layer_is_not_kept() {
        let ingest = tempfile::tempdir().unwrap();
        assert!(!stream(ingest.path(), b"{\"not\": \"a tar\"}", true));
        assert!(entries(ingest.path()).is_empty());
    }
}
