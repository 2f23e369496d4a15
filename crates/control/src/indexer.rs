//! The informer's cache: client-go's `ThreadSafeStore` behind the `Indexer` interface.
//!
//! Objects are kept by key (`namespace/name`). An *index function* maps an object to zero or
//! more values; an *index* maps each value to the set of keys of the objects that produced it.
//! Every add, update and delete moves the object's key out of the values it had and into the
//! values it has now, in every index, and drops a value whose set became empty; so an object is
//! always under exactly the values its functions return, and a lookup costs the size of its
//! answer, not the size of the cache.
//!
//! Reads hand out `Arc`s of the cached objects (like client-go's shared pointers, they must not
//! be changed), and count how many objects they handed out, so that a caller can prove it did
//! not scan the cache ([`Indexer::objects_read`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::error::IndexError;
use crate::kind::object_key;

/// Object → index values (client-go's `IndexFunc`).
pub type IndexFunc<T> = Arc<dyn Fn(&T) -> Vec<String> + Send + Sync>;

/// Index name → index function (client-go's `Indexers`).
pub type Indexers<T> = HashMap<String, IndexFunc<T>>;

/// Wraps a closure as an [`IndexFunc`].
pub fn index_func<T>(f: impl Fn(&T) -> Vec<String> + Send + Sync + 'static) -> IndexFunc<T> {
    Arc::new(f)
}

/// The cache with its indexes. All methods take `&self`; share it with `Arc`.
pub struct Indexer<T> {
    inner: RwLock<Inner<T>>,
    objects_read: AtomicU64,
}

struct Inner<T> {
    items: HashMap<String, Arc<T>>,
    indexers: Indexers<T>,
    /// index name → value → keys
    indices: HashMap<String, HashMap<String, BTreeSet<String>>>,
}

impl<T: k8s_openapi::Metadata<Ty = ObjectMeta>> Default for Indexer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: k8s_openapi::Metadata<Ty = ObjectMeta>> Indexer<T> {
    pub fn new() -> Self {
        Indexer {
            inner: RwLock::new(Inner {
                items: HashMap::new(),
                indexers: HashMap::new(),
                indices: HashMap::new(),
            }),
            objects_read: AtomicU64::new(0),
        }
    }

    pub fn with_indexers(indexers: Indexers<T>) -> Self {
        let indexer = Self::new();
        indexer
            .add_indexers(indexers)
            .expect("a new indexer has no indexes yet");
        indexer
    }

    /// Registers index functions. A name that is already registered is an error and nothing is
    /// added. Objects already in the cache are indexed at once (client-go since PR #117046).
    pub fn add_indexers(&self, indexers: Indexers<T>) -> Result<(), IndexError> {
        let mut inner = self.write();
        let mut taken: Vec<String> = indexers
            .keys()
            .filter(|name| inner.indexers.contains_key(*name))
            .cloned()
            .collect();
        if !taken.is_empty() {
            taken.sort();
            return Err(IndexError::Conflict(taken));
        }
        for (name, function) in indexers {
            let mut index: HashMap<String, BTreeSet<String>> = HashMap::new();
            for (key, object) in &inner.items {
                for value in function(object) {
                    index.entry(value).or_default().insert(key.clone());
                }
            }
            inner.indices.insert(name.clone(), index);
            inner.indexers.insert(name, function);
        }
        Ok(())
    }

    /// The names of the registered indexes (client-go's `GetIndexers`), sorted.
    pub fn index_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().indexers.keys().cloned().collect();
        names.sort();
        names
    }

    pub fn has_index(&self, name: &str) -> bool {
        self.read().indexers.contains_key(name)
    }

    /// Adds or replaces the object under its key; returns the object it replaced.
    pub fn add(&self, object: T) -> Option<Arc<T>> {
        let key = object_key(object.metadata());
        self.write().put(key, Arc::new(object))
    }

    /// Same as [`add`](Self::add): the cache keeps the newest object per key.
    pub fn update(&self, object: T) -> Option<Arc<T>> {
        self.add(object)
    }

    pub fn delete(&self, object: &T) -> Option<Arc<T>> {
        self.delete_key(&object_key(object.metadata()))
    }

    pub fn delete_key(&self, key: &str) -> Option<Arc<T>> {
        self.write().remove(key)
    }

    /// Makes the cache hold exactly `objects` (a relist), keeping the indexes right.
    pub fn replace(&self, objects: Vec<T>) {
        let mut inner = self.write();
        let fresh: HashMap<String, Arc<T>> = objects
            .into_iter()
            .map(|o| (object_key(o.metadata()), Arc::new(o)))
            .collect();
        let gone: Vec<String> = inner
            .items
            .keys()
            .filter(|key| !fresh.contains_key(*key))
            .cloned()
            .collect();
        for key in gone {
            inner.remove(&key);
        }
        for (key, object) in fresh {
            inner.put(key, object);
        }
    }

    pub fn get_by_key(&self, key: &str) -> Option<Arc<T>> {
        let found = self.read().items.get(key).cloned();
        self.count(found.is_some() as usize);
        found
    }

    /// Every cached object (a full scan), sorted by key.
    pub fn list(&self) -> Vec<Arc<T>> {
        let objects = self.snapshot();
        self.count(objects.len());
        objects
    }

    /// Every cached object, sorted by key, not counted as read (the informer's own use).
    pub(crate) fn snapshot(&self) -> Vec<Arc<T>> {
        let inner = self.read();
        let mut keys: Vec<&String> = inner.items.keys().collect();
        keys.sort();
        keys.into_iter().map(|k| inner.items[k].clone()).collect()
    }

    /// The cached objects for which `keep` is true: a full scan, in no particular order, counted
    /// as reading every object (it looks at each).
    pub fn select(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        let inner = self.read();
        self.count(inner.items.len());
        inner.items.values().filter(|o| keep(o)).cloned().collect()
    }

    pub fn list_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.read().items.keys().cloned().collect();
        keys.sort();
        keys
    }

    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects under `value` in the index `index_name` (client-go's `ByIndex`), by key.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<T>>, IndexError> {
        let inner = self.read();
        let index = inner.index(index_name)?;
        let objects: Vec<Arc<T>> = index
            .get(value)
            .into_iter()
            .flatten()
            .map(|key| inner.items[key].clone())
            .collect();
        self.count(objects.len());
        Ok(objects)
    }

    /// The keys under `value` in the index (client-go's `IndexKeys`), sorted.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.read();
        let index = inner.index(index_name)?;
        Ok(index.get(value).into_iter().flatten().cloned().collect())
    }

    /// The objects that share at least one value with `object` (client-go's `Index`).
    pub fn index(&self, index_name: &str, object: &T) -> Result<Vec<Arc<T>>, IndexError> {
        let inner = self.read();
        let index = inner.index(index_name)?;
        let function = &inner.indexers[index_name];
        let keys: BTreeSet<&String> = function(object)
            .iter()
            .filter_map(|value| index.get(value))
            .flatten()
            .collect();
        let objects: Vec<Arc<T>> = keys.into_iter().map(|k| inner.items[k].clone()).collect();
        self.count(objects.len());
        Ok(objects)
    }

    /// Every value present in the index (client-go's `ListIndexFuncValues`), sorted; an
    /// unknown index has none.
    pub fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        let inner = self.read();
        let mut values: Vec<String> = inner
            .indices
            .get(index_name)
            .map(|index| index.keys().cloned().collect())
            .unwrap_or_default();
        values.sort();
        values
    }

    /// Value → number of objects, for every value of an index (what `podlab get --index` and
    /// the demos print).
    pub fn index_sizes(&self, index_name: &str) -> BTreeMap<String, usize> {
        let inner = self.read();
        inner
            .indices
            .get(index_name)
            .map(|index| {
                index
                    .iter()
                    .map(|(v, keys)| (v.clone(), keys.len()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many objects the read methods have handed out so far.
    pub fn objects_read(&self) -> u64 {
        self.objects_read.load(Ordering::Relaxed)
    }

    fn count(&self, objects: usize) {
        self.objects_read
            .fetch_add(objects as u64, Ordering::Relaxed);
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner<T>> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<T>> {
        self.inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T> Inner<T> {
    fn index(&self, name: &str) -> Result<&HashMap<String, BTreeSet<String>>, IndexError> {
        self.indices
            .get(name)
            .ok_or_else(|| IndexError::NoSuchIndex(name.to_string()))
    }

    fn put(&mut self, key: String, object: Arc<T>) -> Option<Arc<T>> {
        let old = self.items.insert(key.clone(), object.clone());
        self.reindex(&key, old.as_deref(), Some(&object));
        old
    }

    fn remove(&mut self, key: &str) -> Option<Arc<T>> {
        let old = self.items.remove(key)?;
        self.reindex(key, Some(&old), None);
        Some(old)
    }

    /// Moves `key` from the values of `old` to those of `new`, in every index.
    fn reindex(&mut self, key: &str, old: Option<&T>, new: Option<&T>) {
        for (name, function) in &self.indexers {
            let old_values: BTreeSet<String> =
                old.map(|o| function(o)).into_iter().flatten().collect();
            let new_values: BTreeSet<String> =
                new.map(|n| function(n)).into_iter().flatten().collect();
            if old_values == new_values {
                continue;
            }
            let index = self
                .indices
                .get_mut(name)
                .expect("every indexer has an index");
            for value in old_values.difference(&new_values) {
                if let Some(keys) = index.get_mut(value) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(value);
                    }
                }
            }
            for value in new_values.difference(&old_values) {
                index
                    .entry(value.clone())
                    .or_default()
                    .insert(key.to_string());
            }
        }
    }
}
