//! An informer: client-go's `SharedIndexInformer` for one kind, driven by its caller.
//!
//! It lists the kind once, then watches the change log from the list's resourceVersion (so it
//! misses nothing and sees nothing twice), keeps an [`Indexer`] up to date, and calls the
//! registered [`EventHandler`]s: `on_add` for an object it had not seen, `on_update` with the
//! old and new object, `on_delete` with the last state. The caller decides when it runs:
//! [`Informer::pump`] handles what has arrived (waiting a bounded time for the first change),
//! [`Informer::wait_for`] pumps until a given resourceVersion has been seen (a controller uses it
//! to see its own writes before it looks again), [`Informer::run`] loops until told to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::changelog::EventType;
use crate::error::{IndexError, Result};
use crate::indexer::{Indexer, Indexers};
use crate::indexes::{namespace_index_func, NAMESPACE_INDEX};
use crate::kind::StoreObject;
use crate::store::Store;
use crate::watch::{Watch, WatchEvent};

/// Called by an informer for each change it applies to its cache.
pub trait EventHandler<T>: Send {
    fn on_add(&mut self, object: &T);
    fn on_update(&mut self, old: &T, new: &T);
    fn on_delete(&mut self, object: &T);
}

type Callback1<T> = Box<dyn FnMut(&T) + Send>;
type Callback2<T> = Box<dyn FnMut(&T, &T) + Send>;

/// Handlers made of closures, as client-go's `ResourceEventHandlerFuncs`; unset ones do nothing.
pub struct HandlerFuncs<T> {
    add: Option<Callback1<T>>,
    update: Option<Callback2<T>>,
    delete: Option<Callback1<T>>,
}

impl<T> Default for HandlerFuncs<T> {
    fn default() -> Self {
        HandlerFuncs {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<T> HandlerFuncs<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn on_add(mut self, f: impl FnMut(&T) + Send + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    pub fn on_update(mut self, f: impl FnMut(&T, &T) + Send + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    pub fn on_delete(mut self, f: impl FnMut(&T) + Send + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<T> EventHandler<T> for HandlerFuncs<T> {
    fn on_add(&mut self, object: &T) {
        if let Some(f) = &mut self.add {
            f(object)
        }
    }

    fn on_update(&mut self, old: &T, new: &T) {
        if let Some(f) = &mut self.update {
            f(old, new)
        }
    }

    fn on_delete(&mut self, object: &T) {
        if let Some(f) = &mut self.delete {
            f(object)
        }
    }
}

/// List + watch of one kind into an indexed cache.
pub struct Informer<T> {
    store: Store,
    indexer: Arc<Indexer<T>>,
    handlers: Vec<Box<dyn EventHandler<T>>>,
    watch: Option<Watch<T>>,
    resource_version: u64,
}

impl<T: StoreObject> Informer<T> {
    /// An informer whose cache has the `namespace` index.
    pub fn new(store: Store) -> Self {
        let indexers = Indexers::from([(NAMESPACE_INDEX.to_string(), namespace_index_func())]);
        Self::with_indexers(store, indexers)
    }

    pub fn with_indexers(store: Store, indexers: Indexers<T>) -> Self {
        Informer {
            store,
            indexer: Arc::new(Indexer::with_indexers(indexers)),
            handlers: Vec::new(),
            watch: None,
            resource_version: 0,
        }
    }

    /// The cache (client-go's `GetIndexer`).
    pub fn indexer(&self) -> Arc<Indexer<T>> {
        self.indexer.clone()
    }

    /// Adds indexes; allowed after the informer has started (the cache is indexed at once).
    pub fn add_indexers(&self, indexers: Indexers<T>) -> Result<(), IndexError> {
        self.indexer.add_indexers(indexers)
    }

    /// Registers a handler. If the informer has listed already, the handler is first told
    /// about every cached object as an add, as client-go does for a late handler.
    pub fn add_event_handler(&mut self, handler: impl EventHandler<T> + 'static) {
        let mut handler: Box<dyn EventHandler<T>> = Box::new(handler);
        if self.has_synced() {
            for object in self.indexer.snapshot() {
                handler.on_add(&object);
            }
        }
        self.handlers.push(handler);
    }

    /// Whether the initial list is in the cache.
    pub fn has_synced(&self) -> bool {
        self.watch.is_some()
    }

    /// The resourceVersion the cache reflects (changes of every kind up to it are applied).
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// Lists the kind into the cache if that has not happened yet.
    pub fn sync(&mut self) -> Result<()> {
        if self.watch.is_some() {
            return Ok(());
        }
        let (objects, bookmark) = self.store.list_with_bookmark::<T>(None)?;
        let watch = self.store.watch_from::<T>(bookmark)?;
        for object in &objects {
            for handler in &mut self.handlers {
                handler.on_add(object);
            }
        }
        self.indexer.replace(objects);
        self.resource_version = bookmark.resource_version;
        self.watch = Some(watch);
        Ok(())
    }

    /// Applies every change that has arrived, waiting up to `timeout` for the first one.
    /// Returns how many changes were applied.
    pub fn pump(&mut self, timeout: Duration) -> Result<usize> {
        self.sync()?;
        let mut applied = 0;
        let mut wait = timeout;
        loop {
            let watch = self.watch.as_mut().expect("synced above");
            let next = if wait.is_zero() {
                watch.try_next()?
            } else {
                watch.next_timeout(wait)?
            };
            self.resource_version = self.resource_version.max(watch.resource_version());
            let Some(event) = next else {
                return Ok(applied);
            };
            self.apply(event);
            applied += 1;
            wait = Duration::ZERO;
        }
    }

    /// Pumps until the cache reflects `resource_version` or `timeout` passes; returns whether
    /// it got there.
    pub fn wait_for(&mut self, resource_version: u64, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            self.pump(Duration::ZERO)?;
            if self.resource_version >= resource_version {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.pump(left.min(crate::watch::RECHECK))?;
        }
    }

    /// Pumps until `stop` is set (checked at least every [`RECHECK`](crate::watch::RECHECK)).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.pump(crate::watch::RECHECK)?;
        }
        Ok(())
    }

    fn apply(&mut self, event: WatchEvent<T>) {
        let object = event.object;
        match event.event_type {
            EventType::Added | EventType::Modified => {
                let new = object.clone();
                match self.indexer.add(object) {
                    Some(old) => self
                        .handlers
                        .iter_mut()
                        .for_each(|h| h.on_update(&old, &new)),
                    None => self.handlers.iter_mut().for_each(|h| h.on_add(&new)),
                }
            }
            EventType::Deleted => {
                self.indexer.delete(&object);
                self.handlers.iter_mut().for_each(|h| h.on_delete(&object));
            }
        }
    }
}
