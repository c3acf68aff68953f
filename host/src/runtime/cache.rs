//! Compiled components, cached by content digest and engine compatibility:
//! in memory, and optionally on disk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use super::engine::Engine;

/// The SHA-256 digest of a component's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Digests `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// `sha256:` and 64 lowercase hexadecimal digits, as a digest.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("sha256:")?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex, &mut bytes).ok()?;
        Some(Self(bytes))
    }

    /// Lowercase hex, as written in `status.policy.digest`.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// What identifies compiled code: the source digest and the engine it was
/// compiled for (a different wasmtime version or configuration makes it
/// unusable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    digest: Digest,
    engine: u64,
}

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// Compiled now.
    Compiled,
    /// Found in the in-memory cache.
    Memory,
    /// Deserialized from the on-disk cache.
    Disk,
}

/// Cache statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components compiled from source.
    pub compiles: u64,
    /// Loads answered from memory.
    pub memory_hits: u64,
    /// Loads answered from disk.
    pub disk_hits: u64,
    /// Compiled components in memory now: those a loaded policy holds.
    pub resident: usize,
}

/// Compiled components by digest and engine.
///
/// # Guarantees
///
/// Memory follows what is in use: the in-memory tier holds each component
/// weakly, and every [`Policy`](super::Policy) holds its own strongly, so
/// a component stays resident exactly while a policy uses it (the version
/// in service, a version being loaded, the calls in flight on a version
/// replaced meanwhile). When the last one goes, wasmtime unmaps its code
/// and purges its memory images from the instance pool
/// (`ModuleInner::drop`). A later load of the same digest is a memory hit
/// while any policy holds it, then a disk hit where there is a cache
/// directory, else a compile.
pub(crate) struct Cache {
    memory: Mutex<HashMap<Key, Weak<Component>>>,
    dir: Option<PathBuf>,
    compiles: AtomicU64,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
}

impl Cache {
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            memory: Mutex::new(HashMap::new()),
            dir,
            compiles: AtomicU64::new(0),
            memory_hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            compiles: self.compiles.load(Ordering::Relaxed),
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            resident: self
                .lock()
                .values()
                .filter(|held| held.strong_count() > 0)
                .count(),
        }
    }

    /// The compiled component of `digest` for `engine`, from memory or disk.
    pub(crate) fn lookup(
        &self,
        engine: &Engine,
        digest: Digest,
    ) -> Option<(Arc<Component>, Source)> {
        let key = Key {
            digest,
            engine: engine.compatibility(),
        };
        if let Some(found) = self.lock().get(&key).and_then(Weak::upgrade) {
            self.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Some((found, Source::Memory));
        }
        let found = Arc::new(self.read_disk(engine, &key)?);
        self.disk_hits.fetch_add(1, Ordering::Relaxed);
        self.keep(key, &found);
        Some((found, Source::Disk))
    }

    /// Keeps a component compiled now (in memory while it is used, and on
    /// disk if there is a cache directory).
    pub(crate) fn insert(
        &self,
        engine: &Engine,
        digest: Digest,
        component: Component,
    ) -> Arc<Component> {
        let key = Key {
            digest,
            engine: engine.compatibility(),
        };
        self.compiles.fetch_add(1, Ordering::Relaxed);
        self.write_disk(&key, &component);
        let component = Arc::new(component);
        self.keep(key, &component);
        component
    }

    fn keep(&self, key: Key, component: &Arc<Component>) {
        let mut memory = self.lock();
        // The entries of components nobody holds any more go here: the map
        // is as large as the components in use, plus this one.
        memory.retain(|_, held| held.strong_count() > 0);
        memory.insert(key, Arc::downgrade(component));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Weak<Component>>> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path(&self, key: &Key) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(dir.join(format!("{}-{:016x}.cwasm", key.digest, key.engine)))
    }

    fn read_disk(&self, engine: &Engine, key: &Key) -> Option<Component> {
        let path = self.path(key)?;
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file lives in the host's private cache directory and
        // was written by `write_disk` from a component this engine compiled;
        // its name carries the engine compatibility hash, and wasmtime checks
        // the header again and refuses code from another engine.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine.wasmtime(), &path) };
        match loaded {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring unusable compiled policy in the cache");
                None
            }
        }
    }

    fn write_disk(&self, key: &Key, component: &Component) {
        let Some(path) = self.path(key) else { return };
        let result = component
            .serialize()
            .map_err(|error| error.to_string())
            .and_then(|bytes| {
                let tmp = path.with_extension("tmp");
                std::fs::create_dir_all(path.parent().unwrap_or(&path))
                    .and_then(|()| std::fs::write(&tmp, bytes))
                    .and_then(|()| std::fs::rename(&tmp, &path))
                    .map_err(|error| error.to_string())
            });
        if let Err(error) = result {
            // The disk tier is an optimisation: a failure costs a compile later.
            tracing::warn!(path = %path.display(), %error, "cannot write compiled policy to the cache");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Looks `bytes` up, compiling them on a miss; counts the compiles.
    fn load(cache: &Cache, engine: &Engine, bytes: &[u8]) -> (Arc<Component>, Source) {
        let digest = Digest::of(bytes);
        cache.lookup(engine, digest).unwrap_or_else(|| {
            let component = Component::new(engine.wasmtime(), bytes).unwrap();
            (cache.insert(engine, digest, component), Source::Compiled)
        })
    }

    #[test]
    fn a_second_load_of_the_same_bytes_does_not_compile_again() {
        let engine = Engine::for_tests();
        let cache = Cache::new(None);
        let bytes = wat::parse_str("(component)").unwrap();
        let (held, first) = load(&cache, &engine, &bytes);
        let (_, second) = load(&cache, &engine, &bytes);
        assert_eq!((first, second), (Source::Compiled, Source::Memory));
        assert_eq!(
            cache.stats(),
            CacheStats {
                compiles: 1,
                memory_hits: 1,
                disk_hits: 0,
                resident: 1,
            }
        );
        drop(held);
    }

    #[test]
    fn a_component_nobody_holds_leaves_memory() {
        let engine = Engine::for_tests();
        let cache = Cache::new(None);
        let versions: Vec<Vec<u8>> = (0..50)
            .map(|i| {
                wat::parse_str(format!(
                    "(component (core module (func (export \"f{i}\"))))"
                ))
                .unwrap()
            })
            .collect();
        let mut serving = None;
        for bytes in &versions {
            // A swap: the new version in, the one it replaced dropped.
            serving = Some(load(&cache, &engine, bytes).0);
            assert_eq!(cache.stats().resident, 1);
        }
        assert!(cache.lock().len() <= 2, "dead entries are swept");
        drop(serving);
        assert_eq!(cache.stats().resident, 0);
        let (_, again) = load(&cache, &engine, &versions[0]);
        assert_eq!(again, Source::Compiled, "nothing held it: compiled again");
        assert_eq!(cache.stats().compiles, 51);
    }

    #[test]
    fn the_disk_tier_survives_a_new_cache() {
        let engine = Engine::for_tests();
        // A unit test has no CARGO_TARGET_TMPDIR; cargo's directory for test
        // data is `<target>/tmp`, and this binary is `<target>/<profile>/deps/<name>`.
        let exe = std::env::current_exe().unwrap();
        let target = exe.ancestors().nth(3).unwrap();
        let dir = target
            .join("tmp")
            .join(format!("policyhost-cache-test-{}", std::process::id()));
        let bytes = wat::parse_str("(component)").unwrap();
        let first = Cache::new(Some(dir.clone()));
        load(&first, &engine, &bytes);
        let second = Cache::new(Some(dir.clone()));
        let (_, source) = load(&second, &engine, &bytes);
        assert_eq!(source, Source::Disk);
        assert_eq!(second.stats().compiles, 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn digest_is_lowercase_hex_sha256() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
