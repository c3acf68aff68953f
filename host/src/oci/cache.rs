//! Blobs on disk by digest (`<dir>/sha256/<hex>`): a manifest and its
//! component, so that a restart or a rollback to a version pulled before
//! reaches no registry. A file is written whole and renamed into place,
//! and checked against its name when read: a torn or altered file is
//! removed and pulled again, never loaded.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::runtime::Digest;

/// The blob cache; without a directory it keeps nothing.
#[derive(Debug, Clone, Default)]
pub struct BlobCache {
    dir: Option<PathBuf>,
}

impl BlobCache {
    /// A cache in `dir` (created on the first write).
    #[must_use]
    pub fn new(dir: PathBuf) -> Self {
        Self { dir: Some(dir) }
    }

    fn path(&self, digest: &Digest) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join("sha256").join(digest.to_hex()))
    }

    /// The blob of `digest`, if cached intact.
    #[must_use]
    pub fn get(&self, digest: &Digest) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if Digest::of(&bytes) == *digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), "a cached blob does not match its digest: removed");
        let _ = std::fs::remove_file(&path);
        None
    }

    /// Keeps `bytes` under `digest`, theirs (checked by the caller; a file
    /// under another name is removed when read). A cache that cannot be
    /// written costs a pull later, nothing else: the failure is logged.
    pub fn put(&self, digest: &Digest, bytes: &[u8]) {
        let Some(path) = self.path(digest) else {
            return;
        };
        if let Err(error) = write_atomically(&path, bytes) {
            tracing::warn!(path = %path.display(), %error, "cannot cache a pulled blob");
        }
    }
}

impl BlobCache {
    fn signature_path(&self, digest: &Digest) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join("signatures").join(digest.to_hex()))
    }

    /// The signature manifest last read for the artifact `digest`: not
    /// checked here, as its signatures are checked against the keys.
    #[must_use]
    pub fn signature(&self, digest: &Digest) -> Option<Vec<u8>> {
        std::fs::read(self.signature_path(digest)?).ok()
    }

    /// Keeps the signature manifest of the artifact `digest`.
    pub fn put_signature(&self, digest: &Digest, manifest: &[u8]) {
        let Some(path) = self.signature_path(digest) else {
            return;
        };
        if let Err(error) = write_atomically(&path, manifest) {
            tracing::warn!(path = %path.display(), %error, "cannot cache a signature");
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temporary = dir.join(format!(
        ".{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("blob"),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_comes_back_intact_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("policyhost-blobs-{}", std::process::id()));
        let cache = BlobCache::new(dir.clone());
        let digest = Digest::of(b"component");
        assert_eq!(cache.get(&digest), None, "nothing yet");
        cache.put(&digest, b"component");
        assert_eq!(cache.get(&digest).as_deref(), Some(&b"component"[..]));
        let path = dir.join("sha256").join(digest.to_hex());
        std::fs::write(&path, b"altered").expect("alter it");
        assert_eq!(cache.get(&digest), None, "an altered blob is not served");
        assert!(!path.exists(), "and is removed");
        assert_eq!(BlobCache::default().get(&digest), None);
        // A cache that cannot be written keeps nothing, and fails nothing.
        let file = dir.join("not-a-directory");
        std::fs::write(&file, b"").expect("a file");
        let unwritable = BlobCache::new(file);
        unwritable.put(&digest, b"component");
        assert_eq!(unwritable.get(&digest), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
