//! The object store: per-resource tables of shared, immutable objects under one global
//! resourceVersion, with a bounded per-resource event history and broadcast fan-out.
//!
//! Every write takes one lock, assigns the next resourceVersion, and publishes the event
//! while still holding it, so each table's history and broadcast are in resourceVersion
//! order and a watcher that subscribes under the same lock never misses or repeats one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::object::GroupResource;
use crate::object::{self, ObjectKey, Stored};

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The requested resourceVersion has been compacted out of the history.
    #[error("too old resource version: {requested} ({oldest})")]
    TooOld {
        /// What the client asked for.
        requested: u64,
        /// The oldest resourceVersion still available.
        oldest: u64,
    },
    /// An object could not be encoded.
    #[error("cannot encode object")]
    Encode(#[from] object::Error),
}

/// Results of store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One change, shared by the history and every watcher.
#[derive(Debug)]
pub(crate) struct Event {
    /// What happened.
    pub(crate) kind: EventKind,
    /// The object after the change (for a delete: its last state, at the delete's resourceVersion).
    pub(crate) obj: Arc<Stored>,
    /// The object before the change, for updates and deletes.
    pub(crate) prev: Option<Arc<Stored>>,
}

impl Event {
    /// The event's resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.obj.meta.rv
    }
}

/// Live events of one resource.
pub(crate) type Subscription = broadcast::Receiver<Arc<Event>>;

/// Work for the garbage collector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum GcWork {
    /// Re-evaluate one object.
    Object(GroupResource, ObjectKey),
    /// Re-evaluate every dependent of this owner uid.
    Owner(String),
}

struct Table {
    objects: BTreeMap<ObjectKey, Arc<Stored>>,
    history: VecDeque<Arc<Event>>,
    /// Every event with a resourceVersion above this is in `history`.
    floor: u64,
    tx: broadcast::Sender<Arc<Event>>,
    /// Keys by label pair, so equality-selected lists do not scan the table.
    labels: HashMap<(String, String), BTreeSet<ObjectKey>>,
}

impl Table {
    fn new(floor: u64, fanout: usize) -> Self {
        Self {
            labels: HashMap::new(),
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            floor,
            tx: broadcast::channel(fanout).0,
        }
    }
}

/// Everything behind the lock.
pub(crate) struct Inner {
    rv: u64,
    tables: HashMap<GroupResource, Table>,
    by_uid: HashMap<String, (GroupResource, ObjectKey)>,
    dependents: HashMap<String, HashSet<(GroupResource, ObjectKey)>>,
    gc: VecDeque<GcWork>,
    /// The resourceVersion of the last whole-store compaction (0 = none).
    compacted: u64,
    /// What `gc` holds, so work is queued once however often it is asked for.
    gc_queued: HashSet<GcWork>,
    history_cap: usize,
    fanout: usize,
    /// Shares `managedFields` between stored objects.
    interner: crate::object::Interner,
}

/// The store.
pub(crate) struct Store {
    inner: Mutex<Inner>,
    /// Woken when garbage-collector work is queued.
    pub(crate) gc_wake: Notify,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// A consistent page of a list.
#[derive(Debug)]
pub(crate) struct Page {
    /// The resourceVersion the list is consistent at.
    pub(crate) rv: u64,
    /// Matching objects, in key order.
    pub(crate) items: Vec<Arc<Stored>>,
    /// The key after which the next page starts, when there is one.
    pub(crate) next: Option<ObjectKey>,
    /// How many matching objects follow this page (only counted without selectors).
    pub(crate) remaining: Option<u64>,
}

/// What a list reads.
pub(crate) struct ListQuery<'a> {
    /// The resource.
    pub(crate) gr: &'a GroupResource,
    /// Only this namespace, when set.
    pub(crate) namespace: Option<&'a str>,
    /// Read the state at exactly this resourceVersion (continue tokens, `Exact`).
    pub(crate) at: Option<u64>,
    /// Start after this key.
    pub(crate) after: Option<&'a ObjectKey>,
    /// At most this many items (0 = all).
    pub(crate) limit: usize,
    /// The filter.
    pub(crate) filter: &'a dyn Fn(&Stored) -> bool,
    /// Count the remaining items.
    pub(crate) count_remaining: bool,
    /// A label pair every match must have (from an equality selector), to use the index.
    pub(crate) label_hint: Option<(&'a str, &'a str)>,
}

impl<'a> ListQuery<'a> {
    /// Every object of `gr`, as it is now.
    pub(crate) fn everything(gr: &'a GroupResource) -> Self {
        Self {
            gr,
            namespace: None,
            at: None,
            after: None,
            limit: 0,
            filter: &|_| true,
            count_remaining: false,
            label_hint: None,
        }
    }
}

impl Store {
    /// An empty store whose tables keep `history_cap` events each.
    pub(crate) fn new(history_cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                tables: HashMap::new(),
                by_uid: HashMap::new(),
                dependents: HashMap::new(),
                gc: VecDeque::new(),
                compacted: 0,
                gc_queued: HashSet::new(),
                history_cap: history_cap.max(1),
                interner: crate::object::Interner::new(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64)
                        ^ std::process::id() as u64,
                ),
                fanout: 16_384,
            }),
            gc_wake: Notify::new(),
        }
    }

    /// Takes the lock for a sequence of reads and writes.
    pub(crate) fn lock(&self) -> Txn<'_> {
        Txn {
            inner: self.inner.lock().unwrap_or_else(|e| e.into_inner()),
            store: self,
            queued_gc: false,
        }
    }
}

/// Exclusive access to the store; publishes GC work when dropped.
pub(crate) struct Txn<'a> {
    inner: MutexGuard<'a, Inner>,
    store: &'a Store,
    queued_gc: bool,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.queued_gc {
            self.store.gc_wake.notify_one();
        }
    }
}

impl Txn<'_> {
    /// The current global resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.inner.rv
    }

    fn table(&mut self, gr: &GroupResource) -> &mut Table {
        let Inner {
            tables,
            compacted,
            fanout,
            ..
        } = &mut *self.inner;
        // A resource never written to has missed no events since the last compaction.
        tables
            .entry(gr.clone())
            .or_insert_with(|| Table::new(*compacted, *fanout))
    }

    /// One object.
    pub(crate) fn get(&self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Stored>> {
        self.inner.tables.get(gr)?.objects.get(key).cloned()
    }

    /// Where the object with this uid lives.
    pub(crate) fn by_uid(&self, uid: &str) -> Option<(GroupResource, ObjectKey)> {
        self.inner.by_uid.get(uid).cloned()
    }

    /// The objects that name `uid` as an owner.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(GroupResource, ObjectKey)> {
        let mut v: Vec<_> = self
            .inner
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Keys of every object in a namespace, across all tables except those named.
    pub(crate) fn in_namespace(&self, ns: &str) -> Vec<(GroupResource, ObjectKey)> {
        let mut out = Vec::new();
        let start = ObjectKey::new(ns, "");
        for (gr, t) in &self.inner.tables {
            for (k, _) in t.objects.range(start.clone()..) {
                if k.namespace != ns {
                    break;
                }
                out.push((gr.clone(), k.clone()));
            }
        }
        out.sort();
        out
    }

    /// Queues garbage-collector work.
    pub(crate) fn queue_gc(&mut self, work: GcWork) {
        if self.inner.gc_queued.insert(work.clone()) {
            self.inner.gc.push_back(work);
            self.queued_gc = true;
        }
    }

    /// Takes the next garbage-collector work item.
    pub(crate) fn next_gc(&mut self) -> Option<GcWork> {
        let work = self.inner.gc.pop_front()?;
        self.inner.gc_queued.remove(&work);
        Some(work)
    }

    /// Writes `value` as the new state of its object (created or changed), at the next
    /// resourceVersion, and publishes the event.
    pub(crate) fn put(&mut self, gr: &GroupResource, mut value: Value) -> Result<Arc<Stored>> {
        let rv = self.inner.rv + 1;
        if let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let stored = Stored::interned(value, &mut self.inner.interner)?;
        self.inner.rv = rv;
        let key = stored.meta.key();
        let prev = self.table(gr).objects.insert(key.clone(), stored.clone());
        self.index(gr, &key, prev.as_deref(), Some(&stored));
        let kind = if prev.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.publish(gr, kind, stored.clone(), prev);
        Ok(stored)
    }

    /// Removes an object; `last` is its final state (it gets the delete's resourceVersion).
    pub(crate) fn remove(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        mut last: Value,
    ) -> Result<Arc<Stored>> {
        let rv = self.inner.rv + 1;
        if let Some(md) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let stored = Stored::interned(last, &mut self.inner.interner)?;
        self.inner.rv = rv;
        let prev = self.table(gr).objects.remove(key);
        self.index(gr, key, prev.as_deref(), None);
        self.publish(gr, EventKind::Deleted, stored.clone(), prev);
        Ok(stored)
    }

    /// Drops a whole table without events (the CRD that defined it is gone and its
    /// objects were deleted one by one before).
    pub(crate) fn drop_table(&mut self, gr: &GroupResource) {
        self.inner.tables.remove(gr);
    }

    fn index(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        old: Option<&Stored>,
        new: Option<&Stored>,
    ) {
        let inner = &mut *self.inner;
        if let Some(table) = inner.tables.get_mut(gr) {
            let same = |a: Option<&Stored>, b: Option<&Stored>| match (a, b) {
                (Some(a), Some(b)) => a.meta.labels == b.meta.labels,
                _ => false,
            };
            if !same(old, new) {
                for (k, v) in old.map(|o| o.meta.labels.as_slice()).unwrap_or_default() {
                    let pair = (k.clone(), v.clone());
                    if let Some(set) = table.labels.get_mut(&pair) {
                        set.remove(key);
                        if set.is_empty() {
                            table.labels.remove(&pair);
                        }
                    }
                }
                for (k, v) in new.map(|n| n.meta.labels.as_slice()).unwrap_or_default() {
                    table
                        .labels
                        .entry((k.clone(), v.clone()))
                        .or_default()
                        .insert(key.clone());
                }
            }
        }
        let entry = (gr.clone(), key.clone());
        if let Some(o) = old {
            for r in &o.meta.owners {
                if let Some(set) = inner.dependents.get_mut(&r.uid) {
                    set.remove(&entry);
                    if set.is_empty() {
                        inner.dependents.remove(&r.uid);
                    }
                }
            }
            if new.is_none() {
                inner.by_uid.remove(&o.meta.uid);
            }
        }
        if let Some(n) = new {
            for r in &n.meta.owners {
                inner
                    .dependents
                    .entry(r.uid.clone())
                    .or_default()
                    .insert(entry.clone());
            }
            if !n.meta.uid.is_empty() {
                inner.by_uid.insert(n.meta.uid.clone(), entry.clone());
            }
        }
    }

    fn publish(
        &mut self,
        gr: &GroupResource,
        kind: EventKind,
        obj: Arc<Stored>,
        prev: Option<Arc<Stored>>,
    ) {
        let cap = self.inner.history_cap;
        let event = Arc::new(Event { kind, obj, prev });
        let table = self.table(gr);
        table.history.push_back(event.clone());
        while table.history.len() > cap {
            if let Some(old) = table.history.pop_front() {
                table.floor = old.rv();
            }
        }
        // No receivers is not an error: nobody is watching.
        let _ = table.tx.send(event);
    }

    /// Starts a watch: the events after `from` still in history, and a receiver for the rest.
    pub(crate) fn watch_from(
        &mut self,
        gr: &GroupResource,
        from: u64,
    ) -> Result<(Vec<Arc<Event>>, Subscription)> {
        let table = self.table(gr);
        if from < table.floor {
            return Err(Error::TooOld {
                requested: from,
                oldest: table.floor + 1,
            });
        }
        let start = table.history.partition_point(|e| e.rv() <= from);
        let replay = table.history.range(start..).cloned().collect();
        Ok((replay, table.tx.subscribe()))
    }

    /// Forgets the history and moves the resourceVersion on by one, so that a watch from
    /// any resourceVersion handed out so far gets 410 Gone (etcd compaction does the same).
    pub(crate) fn compact(&mut self, gr: Option<&GroupResource>) {
        self.inner.rv += 1;
        let rv = self.inner.rv;
        if gr.is_none() {
            self.inner.compacted = rv;
        }
        for (g, t) in &mut self.inner.tables {
            if gr.is_none_or(|x| x == g) {
                t.history.clear();
                t.floor = rv;
            }
        }
    }

    /// Reads one page of a list.
    pub(crate) fn list(&mut self, q: &ListQuery<'_>) -> Result<Page> {
        let current = self.inner.rv;
        let at = q.at.unwrap_or(current);
        let table = self.table(q.gr);
        // The state at `at` is the current state with every later change undone.
        let mut overrides: BTreeMap<ObjectKey, Option<Arc<Stored>>> = BTreeMap::new();
        if at < current {
            if at < table.floor {
                return Err(Error::TooOld {
                    requested: at,
                    oldest: table.floor + 1,
                });
            }
            for e in table.history.iter().rev() {
                if e.rv() <= at {
                    break;
                }
                let before = match e.kind {
                    EventKind::Added => None,
                    _ => e.prev.clone(),
                };
                overrides.insert(e.obj.meta.key(), before);
            }
        }
        let lower: Bound<ObjectKey> = match (q.after, q.namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included(ObjectKey::new(ns, "")),
            (None, None) => Bound::Unbounded,
        };
        let in_ns = |k: &ObjectKey| q.namespace.is_none_or(|ns| k.namespace == ns);
        if let (Some((lk, lv)), true) = (q.label_hint, overrides.is_empty()) {
            // Only the objects carrying the label pair can match.
            let empty = BTreeSet::new();
            let keys = table
                .labels
                .get(&(lk.to_owned(), lv.to_owned()))
                .unwrap_or(&empty);
            let mut items = Vec::new();
            let mut next = None;
            let mut remaining = 0u64;
            let start = match q.after {
                Some(k) => Bound::Excluded(k.clone()),
                None => Bound::Unbounded,
            };
            for k in keys.range((start, Bound::Unbounded)) {
                let Some(obj) = table.objects.get(k) else {
                    continue;
                };
                if !in_ns(k) || !(q.filter)(obj) {
                    continue;
                }
                if q.limit > 0 && items.len() == q.limit {
                    next = items.last().map(|o: &Arc<Stored>| o.meta.key());
                    remaining += 1;
                    if !q.count_remaining {
                        break;
                    }
                    continue;
                }
                items.push(obj.clone());
            }
            return Ok(Page {
                rv: at,
                items,
                next,
                remaining: (q.count_remaining && remaining > 0).then_some(remaining),
            });
        }
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining: u64 = 0;
        let merged = Merge {
            base: table
                .objects
                .range((lower.clone(), Bound::Unbounded))
                .peekable(),
            over: overrides
                .range((lower.clone(), Bound::Unbounded))
                .map(|(k, v)| (k, v.as_ref()))
                .peekable(),
        };
        for (k, obj) in merged {
            if !in_ns(k) {
                if q.namespace.is_some_and(|ns| k.namespace.as_str() > ns) {
                    break;
                }
                continue;
            }
            let Some(obj) = obj else { continue };
            if !(q.filter)(obj) {
                continue;
            }
            if q.limit > 0 && items.len() == q.limit {
                if next.is_none() {
                    next = items.last().map(|o: &Arc<Stored>| o.meta.key());
                }
                if !q.count_remaining {
                    remaining = 1;
                    break;
                }
                remaining += 1;
                continue;
            }
            items.push(obj.clone());
        }
        Ok(Page {
            rv: at,
            items,
            next,
            remaining: (q.count_remaining && remaining > 0).then_some(remaining),
        })
    }
}

/// Merges the current table with the undo overrides, both in key order.
struct Merge<'a, B, O>
where
    B: Iterator<Item = (&'a ObjectKey, &'a Arc<Stored>)>,
    O: Iterator<Item = (&'a ObjectKey, Option<&'a Arc<Stored>>)>,
{
    base: std::iter::Peekable<B>,
    over: std::iter::Peekable<O>,
}

impl<'a, B, O> Iterator for Merge<'a, B, O>
where
    B: Iterator<Item = (&'a ObjectKey, &'a Arc<Stored>)>,
    O: Iterator<Item = (&'a ObjectKey, Option<&'a Arc<Stored>>)>,
{
    type Item = (&'a ObjectKey, Option<&'a Arc<Stored>>);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.base.peek(), self.over.peek()) {
            (None, None) => None,
            (Some(_), None) => self.base.next().map(|(k, v)| (k, Some(v))),
            (None, Some(_)) => self.over.next(),
            (Some((bk, _)), Some((ok, _))) => {
                if bk < ok {
                    self.base.next().map(|(k, v)| (k, Some(v)))
                } else if ok < bk {
                    self.over.next()
                } else {
                    self.base.next();
                    self.over.next()
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns", "uid": name}})
    }

    #[test]
    fn a_resource_first_watched_late_replays_from_an_older_resource_version() {
        let store = Store::new(10);
        let mut txn = store.lock();
        let pods = GroupResource::new("", "pods");
        let cms = GroupResource::new("", "configmaps");
        txn.put(&pods, cm("p")).unwrap();
        let old = txn.rv();
        txn.put(&pods, cm("q")).unwrap();
        // configmaps were never touched: a watch from an older resourceVersion is fine.
        let (replay, _rx) = txn.watch_from(&cms, old - 1).unwrap();
        assert!(replay.is_empty());
    }

    #[test]
    fn history_beyond_its_size_is_gone() {
        let store = Store::new(2);
        let mut txn = store.lock();
        let cms = GroupResource::new("", "configmaps");
        let first = txn.put(&cms, cm("a")).unwrap().meta.rv;
        for n in ["b", "c", "d"] {
            txn.put(&cms, cm(n)).unwrap();
        }
        assert!(matches!(
            txn.watch_from(&cms, first),
            Err(Error::TooOld { .. })
        ));
        let (replay, _rx) = txn.watch_from(&cms, first + 1).unwrap();
        assert_eq!(replay.len(), 2);
    }

    #[test]
    fn an_exact_list_undoes_later_changes() {
        let store = Store::new(100);
        let mut txn = store.lock();
        let cms = GroupResource::new("", "configmaps");
        txn.put(&cms, cm("a")).unwrap();
        let at = txn.rv();
        txn.put(&cms, cm("b")).unwrap();
        let a = txn.get(&cms, &ObjectKey::new("ns", "a")).unwrap();
        txn.remove(&cms, &ObjectKey::new("ns", "a"), a.value().unwrap())
            .unwrap();
        let page = txn
            .list(&ListQuery {
                at: Some(at),
                ..ListQuery::everything(&cms)
            })
            .unwrap();
        let names: Vec<&str> = page.items.iter().map(|o| o.meta.name.as_str()).collect();
        assert_eq!(names, ["a"]);
    }
}
