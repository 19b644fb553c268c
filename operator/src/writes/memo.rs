//! What this term already wrote, so a write whose content is unchanged is not sent again (DESIGN
//! §4.5: API calls few). A node-metadata ConfigMap is applied before every Job that mounts it; on
//! a fleet that is one request per node-stage, nearly all of them writing what is already there.
//!
//! Entries are per term (a new leader writes each once) and expire after [`MEMO_TTL`], so a
//! ConfigMap changed or deleted behind the operator's back is written again within that bound.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a remembered write is trusted.
pub const MEMO_TTL: Duration = Duration::from_secs(300);

/// Remembered writes: key → content stamp and when it was written.
#[derive(Debug, Default)]
pub struct WriteMemo {
    entries: Mutex<HashMap<String, (u64, Instant)>>,
}

/// The stamp of a content (a hash: equal content, equal stamp).
pub fn stamp(content: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    content.hash(&mut h);
    h.finish()
}

/// The stamp of a serializable content, from its JSON streamed into the hasher (nothing allocated:
/// a NodeWright's per-node records of a large fleet are a megabyte of JSON).
pub fn stamp_json(content: &impl serde::Serialize) -> u64 {
    struct HashWriter(DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(DefaultHasher::new());
    // Serializing plain data into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut w, content);
    w.0.finish()
}

impl WriteMemo {
    /// Whether `key` was written with content `stamp` less than [`MEMO_TTL`] ago.
    pub fn is_current(&self, key: &str, stamp: u64) -> bool {
        let Ok(entries) = self.entries.lock() else {
            return false;
        };
        entries
            .get(key)
            .is_some_and(|(s, at)| *s == stamp && at.elapsed() < MEMO_TTL)
    }

    /// Remembers that `key` now holds content `stamp`; drops expired entries on the way.
    pub fn remember(&self, key: String, stamp: u64) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() % 256 == 255 {
                entries.retain(|_, (_, at)| at.elapsed() < MEMO_TTL);
            }
            entries.insert(key, (stamp, Instant::now()));
        }
    }

    /// Forgets `key` (its object was deleted, or a write of it failed).
    pub fn forget(&self, key: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }

    /// Keeps only the keys `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|key, _| keep(key));
        }
    }

    /// The keys remembered.
    pub fn keys(&self) -> Vec<String> {
        self.entries
            .lock()
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_content_is_current() {
        let memo = WriteMemo::default();
        assert!(!memo.is_current("cm/a", stamp("x")));
        memo.remember("cm/a".into(), stamp("x"));
        assert!(memo.is_current("cm/a", stamp("x")));
        assert!(!memo.is_current("cm/a", stamp("y")));
        assert!(!memo.is_current("cm/b", stamp("x")));
        memo.forget("cm/a");
        assert!(!memo.is_current("cm/a", stamp("x")));
    }
}
