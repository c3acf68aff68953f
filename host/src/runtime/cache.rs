//! Compiled components, cached by content digest and engine compatibility:
//! in memory, and optionally on disk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use super::engine::Engine;
use super::error::Result;

/// The SHA-256 digest of a component's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Digests `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
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
}

pub(crate) struct Cache {
    memory: Mutex<HashMap<Key, Component>>,
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
        }
    }

    /// Returns the compiled component for `bytes`, compiling it on a miss.
    /// `compile` is only called on a miss of both tiers.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        digest: Digest,
        compile: impl FnOnce() -> Result<Component>,
    ) -> Result<(Component, Source, Duration)> {
        let started = Instant::now();
        let key = Key {
            digest,
            engine: engine.compatibility(),
        };
        if let Some(found) = self.lock().get(&key).cloned() {
            self.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((found, Source::Memory, started.elapsed()));
        }
        if let Some(found) = self.read_disk(engine, &key) {
            self.disk_hits.fetch_add(1, Ordering::Relaxed);
            self.lock().insert(key, found.clone());
            return Ok((found, Source::Disk, started.elapsed()));
        }
        let component = compile()?;
        self.compiles.fetch_add(1, Ordering::Relaxed);
        let elapsed = started.elapsed();
        self.write_disk(&key, &component);
        self.lock().insert(key, component.clone());
        Ok((component, Source::Compiled, elapsed))
    }

    /// Forgets a compiled component (e.g. after its policy was replaced).
    pub(crate) fn evict(&self, engine: &Engine, digest: Digest) {
        self.lock().remove(&Key {
            digest,
            engine: engine.compatibility(),
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Component>> {
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

    use super::super::engine::EngineConfig;

    fn engine() -> Engine {
        Engine::new(&EngineConfig {
            max_instances: 2,
            ..EngineConfig::default()
        })
        .unwrap()
    }

    fn compile_counting<'a>(
        engine: &'a Engine,
        bytes: &'a [u8],
        count: &'a std::cell::Cell<u32>,
    ) -> impl FnOnce() -> Result<Component> + 'a {
        move || {
            count.set(count.get() + 1);
            Component::new(engine.wasmtime(), bytes).map_err(super::super::Error::Corrupt)
        }
    }

    #[test]
    fn a_second_load_of_the_same_bytes_does_not_compile_again() {
        let engine = engine();
        let cache = Cache::new(None);
        let bytes = wat::parse_str("(component)").unwrap();
        let digest = Digest::of(&bytes);
        let compiles = std::cell::Cell::new(0);
        let (_, first, _) = cache
            .get_or_compile(
                &engine,
                digest,
                compile_counting(&engine, &bytes, &compiles),
            )
            .unwrap();
        let (_, second, _) = cache
            .get_or_compile(
                &engine,
                digest,
                compile_counting(&engine, &bytes, &compiles),
            )
            .unwrap();
        assert_eq!((first, second), (Source::Compiled, Source::Memory));
        assert_eq!(compiles.get(), 1);
        assert_eq!(
            cache.stats(),
            CacheStats {
                compiles: 1,
                memory_hits: 1,
                disk_hits: 0
            }
        );
    }

    #[test]
    fn the_disk_tier_survives_a_new_cache() {
        let engine = engine();
        // A unit test has no CARGO_TARGET_TMPDIR; cargo's directory for test
        // data is `<target>/tmp`, and this binary is `<target>/<profile>/deps/<name>`.
        let exe = std::env::current_exe().unwrap();
        let target = exe.ancestors().nth(3).unwrap();
        let dir = target
            .join("tmp")
            .join(format!("policyhost-cache-test-{}", std::process::id()));
        let bytes = wat::parse_str("(component)").unwrap();
        let digest = Digest::of(&bytes);
        let compiles = std::cell::Cell::new(0);
        let first = Cache::new(Some(dir.clone()));
        first
            .get_or_compile(
                &engine,
                digest,
                compile_counting(&engine, &bytes, &compiles),
            )
            .unwrap();
        let second = Cache::new(Some(dir.clone()));
        let (_, source, _) = second
            .get_or_compile(
                &engine,
                digest,
                compile_counting(&engine, &bytes, &compiles),
            )
            .unwrap();
        assert_eq!(source, Source::Disk);
        assert_eq!(compiles.get(), 1);
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
