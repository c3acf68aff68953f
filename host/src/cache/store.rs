//! A keyed store of projected objects with secondary indexes kept up to date
//! from watch events.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use super::key::ObjectKey;

/// An object the cache can hold: it knows its identity and version.
pub trait Cached: Send + Sync + 'static {
    /// The object's namespace and name.
    fn key(&self) -> ObjectKey;
    /// The object's `metadata.resourceVersion`: an update carrying the version
    /// the store already holds is not a change.
    fn resource_version(&self) -> &str;
}

/// What an index maps objects by: a name (`String`, the default) or a
/// struct of several parts, never a `format!`-ed string of them.
pub trait IndexValue: Eq + Hash + Clone + Send + Sync + 'static {}

impl<V: Eq + Hash + Clone + Send + Sync + 'static> IndexValue for V {}

/// One update from a watch stream, already projected.
///
/// It mirrors `kube_runtime::watcher::Event`: `Init`, `InitApply`* and
/// `InitDone` frame a (re-)list, which replaces the store's contents.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<T> {
    /// An object was added or modified.
    Apply(T),
    /// An object was deleted.
    Delete(T),
    /// A re-list starts; the store keeps serving its current contents until `InitDone`.
    Init,
    /// An object that exists as of the re-list.
    InitApply(T),
    /// The re-list is complete: objects it did not mention are gone.
    InitDone,
}

/// The part of the cluster one watch stream covers. A re-list replaces only
/// the objects of its own scope, so one store can be fed by one stream per
/// namespace (`--namespace`, repeated) without one stream's re-list dropping
/// another's objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every namespace (and cluster-scoped objects).
    Cluster,
    /// One namespace.
    Namespace(Arc<str>),
}

impl Scope {
    /// True when the object with `key` is in this scope.
    #[must_use]
    pub fn contains(&self, key: &ObjectKey) -> bool {
        match self {
            Self::Cluster => true,
            Self::Namespace(namespace) => key.namespace() == Some(&**namespace),
        }
    }
}

/// What an event changed in the store; the controller maps these to work.
#[derive(Debug)]
pub enum Change<T> {
    /// An object was added (`old` is `None`) or modified.
    Applied {
        /// The version the store held before, if any.
        old: Option<Arc<T>>,
        /// The version the store holds now.
        new: Arc<T>,
    },
    /// An object left the store (deleted, or absent from a re-list).
    Deleted(Arc<T>),
}

/// A typed handle to an index registered with [`StoreBuilder::index`].
pub struct Index<T, V = String> {
    slot: usize,
    _object: PhantomData<fn(&T) -> V>,
}

impl<T, V> Clone for Index<T, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, V> Copy for Index<T, V> {}

impl<T, V> fmt::Debug for Index<T, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Index").field(&self.slot).finish()
    }
}

type IndexFn<T, V> = Box<dyn Fn(&T) -> Vec<V> + Send + Sync>;

/// A named function from an object to the values it is indexed under.
struct Indexer<T, V> {
    name: &'static str,
    values: IndexFn<T, V>,
}

/// Registers indexes before the store is built, as controller-runtime's
/// FieldIndexer does before the manager starts. Every index of one store
/// maps by values of one type `V`.
pub struct StoreBuilder<T, V = String> {
    indexers: Vec<Indexer<T, V>>,
    scopes: Vec<Scope>,
}

impl<T: Cached, V: IndexValue> Default for StoreBuilder<T, V> {
    fn default() -> Self {
        Self {
            indexers: Vec::new(),
            scopes: vec![Scope::Cluster],
        }
    }
}

impl<T: Cached, V: IndexValue> StoreBuilder<T, V> {
    /// Registers an index: `values` returns every value the object is found
    /// under (none, one, or several). The returned handle queries it.
    pub fn index(
        &mut self,
        name: &'static str,
        values: impl Fn(&T) -> Vec<V> + Send + Sync + 'static,
    ) -> Index<T, V> {
        self.indexers.push(Indexer {
            name,
            values: Box::new(values),
        });
        Index {
            slot: self.indexers.len() - 1,
            _object: PhantomData,
        }
    }

    /// Declares the scopes of the streams that will feed the store (default:
    /// one stream for the whole cluster). The store is ready once each has
    /// completed a list.
    #[must_use]
    pub fn scopes(mut self, scopes: Vec<Scope>) -> Self {
        self.scopes = scopes;
        self
    }

    /// Builds the (empty, not yet ready) store.
    #[must_use]
    pub fn build(self) -> Store<T, V> {
        let state = State {
            objects: HashMap::new(),
            indexes: self.indexers.iter().map(|_| HashMap::new()).collect(),
            relists: HashMap::new(),
            unlisted: self.scopes.into_iter().collect(),
        };
        Store {
            state: Arc::new(RwLock::new(state)),
            indexers: self.indexers.into(),
            ready: Arc::new(watch::channel(false).0),
        }
    }
}

impl<T: Cached> StoreBuilder<T> {
    /// Registers the index of objects by namespace.
    pub fn namespace_index(&mut self) -> Index<T> {
        self.index("namespace", |object| {
            object
                .key()
                .namespace()
                .map(str::to_owned)
                .into_iter()
                .collect()
        })
    }
}

/// Objects by key, plus one map per index from value to keys.
struct State<T, V> {
    objects: HashMap<ObjectKey, Arc<T>>,
    indexes: Vec<HashMap<V, HashSet<ObjectKey>>>,
    /// Objects seen so far in each scope's unfinished re-list.
    relists: HashMap<Scope, HashMap<ObjectKey, Arc<T>>>,
    /// Scopes that have not completed a first list.
    unlisted: HashSet<Scope>,
}

/// An indexed in-memory cache of one kind of object.
///
/// Cloning gives another handle on the same store. Reads return shared
/// `Arc`s: nothing is deep-copied per read.
///
/// # Guarantees
/// - After every event, each index answers exactly what a full scan of the
///   store with the index function would (property-tested below).
/// - A re-list replaces the contents atomically at `InitDone`, and reports
///   objects that vanished during a watch gap as [`Change::Deleted`].
pub struct Store<T, V = String> {
    state: Arc<RwLock<State<T, V>>>,
    indexers: Arc<[Indexer<T, V>]>,
    ready: Arc<watch::Sender<bool>>,
}

impl<T, V> Clone for Store<T, V> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            indexers: Arc::clone(&self.indexers),
            ready: Arc::clone(&self.ready),
        }
    }
}

impl<T: Cached> Store<T> {
    /// Starts registering indexes by name; `StoreBuilder::default()`
    /// starts a store whose indexes map by another type of value.
    #[must_use]
    pub fn builder() -> StoreBuilder<T> {
        StoreBuilder::default()
    }
}

impl<T: Cached, V: IndexValue> Store<T, V> {
    /// Applies one event of the cluster-wide stream and returns what it changed.
    pub fn apply(&self, event: Event<T>) -> Vec<Change<T>> {
        self.apply_in(&Scope::Cluster, event)
    }

    /// Applies one event of the stream covering `scope` and returns what it changed.
    pub fn apply_in(&self, scope: &Scope, event: Event<T>) -> Vec<Change<T>> {
        let mut state = self.write();
        match event {
            Event::Apply(object) => state.upsert(&self.indexers, object).into_iter().collect(),
            Event::Delete(object) => state
                .remove(&self.indexers, &object.key())
                .map(Change::Deleted)
                .into_iter()
                .collect(),
            Event::Init => {
                state.relists.insert(scope.clone(), HashMap::new());
                Vec::new()
            }
            Event::InitApply(object) => match state.relists.get_mut(scope) {
                Some(relist) => {
                    relist.insert(object.key(), Arc::new(object));
                    Vec::new()
                }
                // An InitApply outside a re-list is still the object's state.
                None => state.upsert(&self.indexers, object).into_iter().collect(),
            },
            Event::InitDone => {
                let changes = state.finish_relist(&self.indexers, scope);
                state.unlisted.remove(scope);
                if state.unlisted.is_empty() {
                    self.ready.send_replace(true);
                }
                changes
            }
        }
    }

    /// The object with this key, if cached.
    #[must_use]
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<T>> {
        self.read().objects.get(key).cloned()
    }

    /// Every object indexed under `value`, in key order.
    #[must_use]
    pub fn lookup<Q>(&self, index: Index<T, V>, value: &Q) -> Vec<Arc<T>>
    where
        V: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.read();
        let Some(keys) = state.indexes[index.slot].get(value) else {
            return Vec::new();
        };
        let mut found: Vec<(&ObjectKey, &Arc<T>)> = keys
            .iter()
            .filter_map(|key| state.objects.get_key_value(key))
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(b.0));
        found
            .into_iter()
            .map(|(_, object)| Arc::clone(object))
            .collect()
    }

    /// The keys indexed under `value`, in key order.
    #[must_use]
    pub fn lookup_keys<Q>(&self, index: Index<T, V>, value: &Q) -> Vec<ObjectKey>
    where
        V: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.read();
        let mut keys: Vec<ObjectKey> = state.indexes[index.slot]
            .get(value)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default();
        keys.sort_unstable();
        keys
    }

    /// How many objects are indexed under `value`.
    #[must_use]
    pub fn count<Q>(&self, index: Index<T, V>, value: &Q) -> usize
    where
        V: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read().indexes[index.slot]
            .get(value)
            .map_or(0, HashSet::len)
    }

    /// Every cached object, in key order.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<T>> {
        let state = self.read();
        let mut all: Vec<(&ObjectKey, &Arc<T>)> = state.objects.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
            .map(|(_, object)| Arc::clone(object))
            .collect()
    }

    /// Every object `keep` accepts, in no particular order: a full scan under
    /// the read lock, copying only the matches. What the indexes exist to
    /// avoid; the naive cache (the baseline) finds children this way.
    #[must_use]
    pub fn scan(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        self.read()
            .objects
            .values()
            .filter(|object| keep(object))
            .cloned()
            .collect()
    }

    /// The number of cached objects.
    #[must_use]
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// True when nothing is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name an index was registered with (for metrics and logs).
    #[must_use]
    pub fn index_name(&self, index: Index<T, V>) -> &'static str {
        self.indexers[index.slot].name
    }

    /// True once every scope has completed its first list.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until every scope has completed its first list.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we wait.
        let _ = ready.wait_for(|ready| *ready).await;
    }

    fn read(&self) -> RwLockReadGuard<'_, State<T, V>> {
        // A panic while holding the lock cannot leave a half-applied event:
        // every mutation below completes before anything can panic.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State<T, V>> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Cached, V: IndexValue> State<T, V> {
    /// Inserts or replaces an object; `None` when the store already held this version.
    fn upsert(&mut self, indexers: &[Indexer<T, V>], object: T) -> Option<Change<T>> {
        self.upsert_shared(indexers, Arc::new(object))
    }

    fn upsert_shared(&mut self, indexers: &[Indexer<T, V>], new: Arc<T>) -> Option<Change<T>> {
        let key = new.key();
        if let Some(old) = self.objects.get(&key)
            && old.resource_version() == new.resource_version()
        {
            return None;
        }
        let old = self.objects.insert(key.clone(), Arc::clone(&new));
        for (slot, indexer) in indexers.iter().enumerate() {
            let index = &mut self.indexes[slot];
            let before = old.as_deref().map(&indexer.values).unwrap_or_default();
            let after = (indexer.values)(&new);
            for value in before.iter().filter(|value| !after.contains(value)) {
                unindex(index, value, &key);
            }
            for value in after {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        Some(Change::Applied { old, new })
    }

    fn remove(&mut self, indexers: &[Indexer<T, V>], key: &ObjectKey) -> Option<Arc<T>> {
        let old = self.objects.remove(key)?;
        for (slot, indexer) in indexers.iter().enumerate() {
            for value in (indexer.values)(&old) {
                unindex(&mut self.indexes[slot], &value, key);
            }
        }
        Some(old)
    }

    /// Makes the re-listed set the scope's contents, incrementally.
    fn finish_relist(&mut self, indexers: &[Indexer<T, V>], scope: &Scope) -> Vec<Change<T>> {
        let listed = self.relists.remove(scope).unwrap_or_default();
        let gone: Vec<ObjectKey> = self
            .objects
            .keys()
            .filter(|key| scope.contains(key) && !listed.contains_key(*key))
            .cloned()
            .collect();
        let mut changes: Vec<Change<T>> = gone
            .iter()
            .filter_map(|key| self.remove(indexers, key))
            .map(Change::Deleted)
            .collect();
        changes.extend(
            listed
                .into_values()
                .filter_map(|object| self.upsert_shared(indexers, object)),
        );
        changes
    }
}

fn unindex<V: IndexValue>(index: &mut HashMap<V, HashSet<ObjectKey>>, value: &V, key: &ObjectKey) {
    if let Some(keys) = index.get_mut(value) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A tiny object: a name, a version, an owner and tags.
    #[derive(Debug, Clone, PartialEq)]
    struct Obj {
        namespace: &'static str,
        name: &'static str,
        version: u8,
        owner: Option<&'static str>,
        tags: Vec<&'static str>,
    }

    impl Cached for Obj {
        fn key(&self) -> ObjectKey {
            ObjectKey::namespaced(self.namespace, self.name)
        }
        fn resource_version(&self) -> &str {
            ["0", "1", "2", "3"][usize::from(self.version % 4)]
        }
    }

    fn obj(name: &'static str, owner: Option<&'static str>) -> Obj {
        Obj {
            namespace: "ns",
            name,
            version: 0,
            owner,
            tags: vec![],
        }
    }

    struct Fixture {
        store: Store<Obj>,
        by_owner: Index<Obj>,
        by_tag: Index<Obj>,
        by_namespace: Index<Obj>,
    }

    fn fixture() -> Fixture {
        let mut builder = Store::builder();
        let by_owner = builder.index("owner", |o: &Obj| {
            o.owner.map(str::to_owned).into_iter().collect()
        });
        let by_tag = builder.index("tag", |o: &Obj| {
            o.tags.iter().map(|t| (*t).to_owned()).collect()
        });
        let by_namespace = builder.namespace_index();
        Fixture {
            store: builder.build(),
            by_owner,
            by_tag,
            by_namespace,
        }
    }

    fn names(objects: &[Arc<Obj>]) -> Vec<&'static str> {
        objects.iter().map(|o| o.name).collect()
    }

    #[test]
    fn apply_indexes_an_object_under_its_owner() {
        let f = fixture();
        f.store.apply(Event::Apply(obj("a", Some("u1"))));
        f.store.apply(Event::Apply(obj("b", Some("u2"))));
        assert_eq!(names(&f.store.lookup(f.by_owner, "u1")), ["a"]);
        assert_eq!(f.store.count(f.by_owner, "u2"), 1);
        assert!(f.store.lookup(f.by_owner, "u3").is_empty());
    }

    #[test]
    fn an_update_moves_the_object_between_index_values() {
        let f = fixture();
        f.store.apply(Event::Apply(obj("a", Some("u1"))));
        let mut moved = obj("a", Some("u2"));
        moved.version = 1;
        let changes = f.store.apply(Event::Apply(moved));
        assert!(matches!(
            &changes[..],
            [Change::Applied { old: Some(_), .. }]
        ));
        assert!(f.store.lookup(f.by_owner, "u1").is_empty());
        assert_eq!(names(&f.store.lookup(f.by_owner, "u2")), ["a"]);
    }

    #[test]
    fn the_same_resource_version_again_is_not_a_change() {
        let f = fixture();
        f.store.apply(Event::Apply(obj("a", None)));
        assert!(f.store.apply(Event::Apply(obj("a", None))).is_empty());
    }

    #[test]
    fn delete_removes_the_object_from_every_index() {
        let f = fixture();
        let mut tagged = obj("a", Some("u1"));
        tagged.tags = vec!["x", "y"];
        f.store.apply(Event::Apply(tagged.clone()));
        let changes = f.store.apply(Event::Delete(tagged));
        assert!(matches!(&changes[..], [Change::Deleted(o)] if o.name == "a"));
        assert_eq!(f.store.count(f.by_owner, "u1"), 0);
        assert_eq!(f.store.count(f.by_tag, "x"), 0);
        assert_eq!(f.store.count(f.by_namespace, "ns"), 0);
    }

    #[test]
    fn a_relist_keeps_serving_until_done_then_reports_what_vanished() {
        let f = fixture();
        f.store.apply(Event::Apply(obj("stale", Some("u1"))));
        f.store.apply(Event::Apply(obj("kept", Some("u1"))));
        f.store.apply(Event::Init);
        f.store.apply(Event::InitApply(obj("kept", Some("u1"))));
        f.store.apply(Event::InitApply(obj("new", Some("u1"))));
        assert_eq!(names(&f.store.lookup(f.by_owner, "u1")), ["kept", "stale"]);
        let changes = f.store.apply(Event::InitDone);
        assert_eq!(names(&f.store.lookup(f.by_owner, "u1")), ["kept", "new"]);
        let deleted: Vec<_> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Deleted(o) => Some(o.name),
                Change::Applied { .. } => None,
            })
            .collect();
        assert_eq!(deleted, ["stale"]);
        // "kept" came back with the same version: only "new" is an addition.
        assert_eq!(changes.len(), 2);
    }

    #[tokio::test]
    async fn the_store_becomes_ready_at_the_first_init_done() {
        let f = fixture();
        assert!(!f.store.is_ready());
        f.store.apply(Event::Init);
        assert!(!f.store.is_ready());
        let waiter = {
            let store = f.store.clone();
            tokio::spawn(async move { store.wait_until_ready().await })
        };
        f.store.apply(Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("ready within the timeout")
            .expect("waiter did not panic");
        assert!(f.store.is_ready());
    }

    // ---- property test: the indexes always equal a full scan ----

    const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
    const NAMESPACES: [&str; 2] = ["ns", "other"];
    const OWNERS: [&str; 3] = ["u1", "u2", "u3"];
    const TAGS: [&str; 3] = ["x", "y", "z"];

    /// Objects whose content is a function of (name, version), as on a real
    /// API server where a resourceVersion names one state (the namespace is
    /// left out so that a test may move an object into a given namespace).
    fn any_obj() -> impl Strategy<Value = Obj> {
        (0..NAMESPACES.len(), 0..NAMES.len(), 0u8..4).prop_map(|(ns, name, version)| {
            let seed = name * 3 + usize::from(version);
            Obj {
                namespace: NAMESPACES[ns],
                name: NAMES[name],
                version,
                owner: OWNERS.get(seed % (OWNERS.len() + 1)).copied(),
                tags: TAGS
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| seed & (1 << bit) != 0)
                    .map(|(_, tag)| *tag)
                    .collect(),
            }
        })
    }

    fn any_event() -> impl Strategy<Value = Event<Obj>> {
        prop_oneof![
            4 => any_obj().prop_map(Event::Apply),
            2 => any_obj().prop_map(Event::Delete),
            1 => Just(Event::Init),
            3 => any_obj().prop_map(Event::InitApply),
            1 => Just(Event::InitDone),
        ]
    }

    /// The naive model: a map replaced wholesale at the end of a re-list.
    #[derive(Default)]
    struct Model {
        objects: BTreeMap<ObjectKey, Obj>,
        relist: Option<BTreeMap<ObjectKey, Obj>>,
    }

    impl Model {
        fn apply(&mut self, event: &Event<Obj>) {
            match event {
                Event::Apply(o) => {
                    self.objects.insert(o.key(), o.clone());
                }
                Event::Delete(o) => {
                    self.objects.remove(&o.key());
                }
                Event::Init => self.relist = Some(BTreeMap::new()),
                Event::InitApply(o) => match self.relist.as_mut() {
                    Some(relist) => {
                        relist.insert(o.key(), o.clone());
                    }
                    None => {
                        self.objects.insert(o.key(), o.clone());
                    }
                },
                Event::InitDone => self.objects = self.relist.take().unwrap_or_default(),
            }
        }

        fn scan(&self, matches: impl Fn(&Obj) -> bool) -> Vec<Obj> {
            self.objects
                .values()
                .filter(|o| matches(o))
                .cloned()
                .collect()
        }
    }

    fn deref(objects: Vec<Arc<Obj>>) -> Vec<Obj> {
        objects.iter().map(|o| (**o).clone()).collect()
    }

    /// The naive model of a store fed by one stream per namespace.
    #[derive(Default)]
    struct ScopedModel {
        per_namespace: BTreeMap<&'static str, Model>,
    }

    impl ScopedModel {
        fn apply(&mut self, namespace: &'static str, event: &Event<Obj>) {
            self.per_namespace
                .entry(namespace)
                .or_default()
                .apply(event);
        }

        fn all(&self) -> Vec<Obj> {
            let mut all: Vec<Obj> = self
                .per_namespace
                .values()
                .flat_map(|m| m.scan(|_| true))
                .collect();
            all.sort_by_key(Cached::key);
            all
        }
    }

    /// An event of the stream watching one namespace: its objects are in it.
    fn any_namespaced_event() -> impl Strategy<Value = (&'static str, Event<Obj>)> {
        (prop::sample::select(&NAMESPACES[..]), any_event()).prop_map(|(namespace, event)| {
            let move_in = |mut o: Obj| {
                o.namespace = namespace;
                o
            };
            let event = match event {
                Event::Apply(o) => Event::Apply(move_in(o)),
                Event::Delete(o) => Event::Delete(move_in(o)),
                Event::InitApply(o) => Event::InitApply(move_in(o)),
                other => other,
            };
            (namespace, event)
        })
    }

    proptest! {
        #[test]
        fn a_relist_in_one_namespace_leaves_the_others_alone(
            events in prop::collection::vec(any_namespaced_event(), 0..60)
        ) {
            let mut builder = Store::builder();
            let by_owner = builder.index("owner", |o: &Obj| {
                o.owner.map(str::to_owned).into_iter().collect()
            });
            let store = builder
                .scopes(NAMESPACES.iter().map(|ns| Scope::Namespace((*ns).into())).collect())
                .build();
            let mut model = ScopedModel::default();
            let mut listed = std::collections::HashSet::new();
            for (namespace, event) in &events {
                if *event == Event::InitDone {
                    listed.insert(*namespace);
                }
                store.apply_in(&Scope::Namespace((*namespace).into()), event.clone());
                model.apply(namespace, event);
                prop_assert_eq!(deref(store.all()), model.all());
                for owner in OWNERS {
                    let expected: Vec<Obj> =
                        model.all().into_iter().filter(|o| o.owner == Some(owner)).collect();
                    prop_assert_eq!(deref(store.lookup(by_owner, owner)), expected);
                }
                prop_assert_eq!(store.is_ready(), listed.len() == NAMESPACES.len());
            }
        }

        #[test]
        fn indexes_always_equal_a_full_scan(events in prop::collection::vec(any_event(), 0..60)) {
            let f = fixture();
            let mut model = Model::default();
            for event in &events {
                f.store.apply(event.clone());
                model.apply(event);
                prop_assert_eq!(deref(f.store.all()), model.scan(|_| true));
                for owner in OWNERS {
                    prop_assert_eq!(
                        deref(f.store.lookup(f.by_owner, owner)),
                        model.scan(|o| o.owner == Some(owner))
                    );
                }
                for tag in TAGS {
                    prop_assert_eq!(
                        deref(f.store.lookup(f.by_tag, tag)),
                        model.scan(|o| o.tags.contains(&tag))
                    );
                }
                for namespace in NAMESPACES {
                    prop_assert_eq!(
                        deref(f.store.lookup(f.by_namespace, namespace)),
                        model.scan(|o| o.namespace == namespace)
                    );
                }
            }
        }
    }
}
