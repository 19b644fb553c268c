//! A bounded map that evicts the least recently used entry when full: the `/metrics`
//! authentication's decision cache ([`crate::auth`]). Clearing the whole cache when it fills (what
//! it did before) let one client cycling through many tokens flush every scraper's decision, so
//! each scrape cost two API calls again; LRU eviction drops only the stalest entry.
//!
//! Every operation is O(log n): a map from key to (value, last use), and an index from last use
//! (a counter, never a clock) to key.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// At most `capacity` entries; inserting into a full map evicts the least recently used one.
#[derive(Debug)]
pub struct Lru<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, u64)>,
    by_use: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The value of `key`, marking it as just used.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        let tick = self.next_tick();
        let (_, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, key.clone());
        self.entries.get(key).map(|(v, _)| v)
    }

    /// Sets `key` to `value` as just used; evicts the least recently used other entry if full.
    pub fn insert(&mut self, key: K, value: V) {
        let tick = self.next_tick();
        if let Some((_, used)) = self.entries.remove(&key) {
            self.by_use.remove(&used);
        } else if self.entries.len() >= self.capacity
            && let Some((_, oldest)) = self.by_use.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.by_use.insert(tick, key.clone());
        self.entries.insert(key, (value, tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_only() {
        let mut lru = Lru::new(3);
        for k in ["a", "b", "c"] {
            lru.insert(k, k.to_uppercase());
        }
        // Use `a`: `b` is now the stalest.
        assert_eq!(lru.get(&"a").map(String::as_str), Some("A"));
        lru.insert("d", "D".to_owned());
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.get(&"b"), None, "the least recently used went");
        for k in ["a", "c", "d"] {
            assert!(lru.get(&k).is_some(), "{k} kept");
        }
        // Replacing a held key evicts nothing and counts as a use.
        lru.insert("c", "C2".to_owned());
        assert_eq!(lru.len(), 3);
        lru.insert("e", "E".to_owned());
        assert_eq!(
            lru.get(&"a"),
            None,
            "a was the stalest after c was replaced"
        );
        assert_eq!(lru.get(&"c").map(String::as_str), Some("C2"));
        assert!(lru.get(&"d").is_some() && lru.get(&"e").is_some());
    }

    #[test]
    fn a_stream_of_new_keys_never_flushes_a_key_in_use() {
        // One client cycling through many tokens, one scraper using its own all along.
        let mut lru = Lru::new(256);
        lru.insert(u32::MAX, "scraper");
        for k in 0..10_000u32 {
            lru.insert(k, "cycled");
            assert!(lru.len() <= 256);
            assert_eq!(lru.get(&u32::MAX), Some(&"scraper"), "after {k} new tokens");
        }
        assert_eq!(lru.len(), 256);
        assert_eq!(lru.by_use.len(), 256, "the index stays in step");
    }

    #[test]
    fn capacity_zero_holds_one() {
        let mut lru = Lru::new(0);
        lru.insert(1, 1);
        lru.insert(2, 2);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.get(&2), Some(&2));
        assert!(!lru.is_empty());
    }
}
