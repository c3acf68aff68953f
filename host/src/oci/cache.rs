//! Blobs on disk by digest (`<dir>/sha256/<hex>`): a manifest and its
//! component, so that a restart or a rollback to a version pulled before
//! reaches no registry. A file is written whole and renamed into place,
//! and checked when read: its size against what the reader expects at most
//! before a byte is read (a file grown to gigabytes must not take the
//! operator's memory with it), then its digest while it streams in. A torn,
//! grown or altered file is removed and pulled again, never loaded.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::runtime::Digest;

/// The bytes read from a file at a time while its digest is computed.
const CHUNK: usize = 64 * 1024;

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

    /// The blob of `digest`, if cached intact and at most `limit` bytes
    /// long (its recorded size, or the most the reader accepts): a longer
    /// file is removed unread.
    #[must_use]
    pub fn get(&self, digest: &Digest, limit: u64) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let file = File::open(&path).ok()?;
        match read_checked(file, digest, limit) {
            Ok(bytes) => Some(bytes),
            Err(why) => {
                tracing::warn!(path = %path.display(), why = why.as_str(), "a cached blob is not served: removed");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
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

    /// The signature manifest last read for the artifact `digest`, if at
    /// most `limit` bytes long: not checked further here, as its signatures
    /// are checked against the keys.
    #[must_use]
    pub fn signature(&self, digest: &Digest, limit: u64) -> Option<Vec<u8>> {
        let file = File::open(self.signature_path(digest)?).ok()?;
        if file.metadata().ok()?.len() > limit {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes).ok()?;
        Some(bytes)
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

/// Why a cached file is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unfit {
    /// It is longer than the reader accepts.
    TooLong,
    /// Its bytes are not those of its name.
    Digest,
    /// It cannot be read.
    Unreadable,
}

impl Unfit {
    fn as_str(self) -> &'static str {
        match self {
            Self::TooLong => "longer than its recorded size",
            Self::Digest => "does not match its digest",
            Self::Unreadable => "cannot be read",
        }
    }
}

/// The bytes of `file`, checked to be at most `limit` long before they are
/// read and to have `digest` as they stream in.
fn read_checked(file: File, digest: &Digest, limit: u64) -> Result<Vec<u8>, Unfit> {
    let length = file.metadata().map_err(|_| Unfit::Unreadable)?.len();
    if length > limit {
        return Err(Unfit::TooLong);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(length).map_err(|_| Unfit::TooLong)?);
    let mut hasher = Sha256::new();
    // One byte past the limit shows a file that grew after its length was read.
    let mut reader = file.take(limit.saturating_add(1));
    let mut chunk = vec![0; CHUNK];
    loop {
        let read = reader.read(&mut chunk).map_err(|_| Unfit::Unreadable)?;
        if read == 0 {
            break;
        }
        hasher.update(&chunk[..read]);
        bytes.extend_from_slice(&chunk[..read]);
    }
    if bytes.len() as u64 > limit {
        return Err(Unfit::TooLong);
    }
    if Digest(hasher.finalize().into()) != *digest {
        return Err(Unfit::Digest);
    }
    Ok(bytes)
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
        assert_eq!(cache.get(&digest, 100), None, "nothing yet");
        cache.put(&digest, b"component");
        assert_eq!(cache.get(&digest, 9).as_deref(), Some(&b"component"[..]));
        let path = dir.join("sha256").join(digest.to_hex());
        std::fs::write(&path, b"altered").expect("alter it");
        assert_eq!(
            cache.get(&digest, 100),
            None,
            "an altered blob is not served"
        );
        assert!(!path.exists(), "and is removed");
        assert_eq!(BlobCache::default().get(&digest, 100), None);
        // A cache that cannot be written keeps nothing, and fails nothing.
        let file = dir.join("not-a-directory");
        std::fs::write(&file, b"").expect("a file");
        let unwritable = BlobCache::new(file);
        unwritable.put(&digest, b"component");
        assert_eq!(unwritable.get(&digest, 100), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_blob_longer_than_its_limit_is_removed_unread() {
        let dir = std::env::temp_dir().join(format!("policyhost-grown-{}", std::process::id()));
        let cache = BlobCache::new(dir.clone());
        let digest = Digest::of(b"component");
        cache.put(&digest, b"component");
        let path = dir.join("sha256").join(digest.to_hex());
        // Grown past its recorded size: sparse, so the test writes nothing
        // of its length; a read of it would allocate all of it.
        let grown = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open it");
        grown.set_len(2 << 30).expect("grow it to 2 GiB");
        drop(grown);
        assert_eq!(cache.get(&digest, 9), None, "a grown blob is not served");
        assert!(!path.exists(), "and is removed");
        // Intact but longer than the reader accepts now.
        cache.put(&digest, b"component");
        assert_eq!(cache.get(&digest, 8), None);
        assert!(!path.exists());
        // The signature manifest is not read past its limit either.
        cache.put_signature(&digest, b"manifest");
        assert_eq!(cache.signature(&digest, 7), None);
        assert_eq!(
            cache.signature(&digest, 8).as_deref(),
            Some(&b"manifest"[..])
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
