//! Watch: the changes of one kind after a resourceVersion, read from the change log, so that a
//! watcher in one process sees what a writer in another committed.
//!
//! A waiting watcher sleeps in poll(2) on an inotify instance that watches the log for
//! `IN_MODIFY`; the inotify watch is placed before the first read, so an append made after any
//! read wakes it. The sleep is also cut at [`RECHECK`], so a missed wake-up costs a bounded
//! delay, never a hang.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::changelog::{rv_of_line, EventType, Head, LogReader, Typed};
use crate::error::{Error, Result};
use crate::kind::StoreObject;

/// The longest a waiting watcher sleeps before it looks at the log again by itself.
pub const RECHECK: Duration = Duration::from_millis(200);

/// One change, as a Kubernetes watch event: its type, the object after the change (before it,
/// for DELETED), and the change's resourceVersion.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent<T> {
    pub event_type: EventType,
    pub resource_version: u64,
    pub object: T,
}

/// A stream of changes of kind `T`. [`Iterator::next`] blocks until the next change; use
/// [`Watch::next_timeout`] to wait a bounded time.
pub struct Watch<T> {
    reader: LogReader,
    from_rv: u64,
    seen_rv: u64,
    pending: VecDeque<WatchEvent<T>>,
    inotify: Inotify,
    _kind: PhantomData<fn() -> T>,
}

impl<T: StoreObject> Watch<T> {
    pub(crate) fn new(reader: LogReader, from_rv: u64) -> Result<Self> {
        let path = reader.path().to_path_buf();
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|errno| Error::sys("inotify_init1", &path, errno))?;
        inotify
            .add_watch(&path, AddWatchFlags::IN_MODIFY)
            .map_err(|errno| Error::sys("inotify_add_watch", &path, errno))?;
        Ok(Watch {
            reader,
            from_rv,
            seen_rv: from_rv,
            pending: VecDeque::new(),
            inotify,
            _kind: PhantomData,
        })
    }

    /// The resourceVersion this watch has read up to, counting changes of every kind: a
    /// bookmark to start a later watch from.
    pub fn resource_version(&self) -> u64 {
        self.seen_rv
    }

    /// The next change if one is committed already; never waits.
    pub fn try_next(&mut self) -> Result<Option<WatchEvent<T>>> {
        if self.pending.is_empty() {
            self.read_log()?;
        }
        Ok(self.pending.pop_front())
    }

    /// The next change, waiting at most `timeout` for one.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<WatchEvent<T>>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(event) = self.try_next()? {
                return Ok(Some(event));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.sleep(left.min(RECHECK))?;
        }
    }

    fn read_log(&mut self) -> Result<()> {
        let path = self.reader.path().to_path_buf();
        let (from_rv, seen_rv, pending) = (self.from_rv, &mut self.seen_rv, &mut self.pending);
        self.reader.read_lines(None, |line| {
            if rv_of_line(line).is_some_and(|rv| rv <= from_rv) {
                return Ok(());
            }
            let head = Head::parse(line, &path)?;
            *seen_rv = head.rv;
            if head.rv <= from_rv || head.kind != T::STORE_KIND.name() {
                return Ok(());
            }
            let typed: Typed<T> = serde_json::from_slice(line).map_err(|e| Error::Corrupt {
                path: path.clone(),
                message: format!("rv {}: {e}", head.rv),
            })?;
            pending.push_back(WatchEvent {
                event_type: typed.event_type,
                resource_version: head.rv,
                object: typed.object,
            });
            Ok(())
        })?;
        Ok(())
    }

    /// Sleeps until the log is modified or `duration` has passed.
    fn sleep(&mut self, duration: Duration) -> Result<()> {
        let path = self.reader.path();
        let millis = u16::try_from(duration.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(millis)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => return Err(Error::sys("poll", path, errno)),
        }
        match self.inotify.read_events() {
            Ok(_) | Err(Errno::EAGAIN) => Ok(()),
            Err(errno) => Err(Error::sys("read inotify", path, errno)),
        }
    }
}

impl<T: StoreObject> Iterator for Watch<T> {
    type Item = Result<WatchEvent<T>>;

    /// Blocks until the next change.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(event)) => return Some(Ok(event)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
