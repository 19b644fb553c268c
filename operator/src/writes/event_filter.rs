//! The Event spam filter: a token bucket per (object, reason), as client-go's
//! `EventSourceObjectSpamFilter` (burst 25, one more every 5 minutes), so a rollout over a fleet or a
//! flapping stage cannot flood the apiserver with Events. kube's recorder already folds repeats of
//! one (object, reason) into one Event series, but every repeat is still a PATCH that only bumps its
//! count: past the burst, those repeats are dropped here instead. Keyed by reason too, so a burst of
//! `Apply` Events never silences a `StageTimedOut` on the same object.
//!
//! Bounded like client-go's (an LRU of 4096): above [`PRUNE_ABOVE`] keys, full buckets (which
//! behave as untracked ones) are dropped, and if more than half remain, the least recently used
//! ones too (their budget starts over). Without that, churning objects (each NodeWright publishes
//! under its own uid) would keep a bucket each for minutes after they are gone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Events one (object, reason) may publish at once.
const BURST: f64 = 25.0;
/// One more Event per (object, reason) every so often once the burst is spent.
const REFILL_EVERY: Duration = Duration::from_secs(300);
/// Above this many tracked keys, full buckets are dropped, then the least recently used beyond half.
const PRUNE_ABOVE: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// The tokens at `now` (refilled since `at`, capped at the burst).
    fn tokens_at(&self, now: Instant) -> f64 {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
        (self.tokens + refill).min(BURST)
    }
}

/// The buckets of every (object, reason) that published recently.
#[derive(Debug, Default)]
pub struct SpamFilter {
    buckets: HashMap<String, Bucket>,
}

impl SpamFilter {
    /// Whether an Event keyed `key` may be published at `now` (and spends a token if so).
    pub fn allow(&mut self, key: &str, now: Instant) -> bool {
        if self.buckets.len() > PRUNE_ABOVE {
            self.buckets.retain(|_, b| b.tokens_at(now) < BURST);
            self.keep_most_recent(PRUNE_ABOVE / 2);
        }
        let bucket = self.buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        let tokens = bucket.tokens_at(now);
        let allowed = tokens >= 1.0;
        *bucket = Bucket {
            tokens: if allowed { tokens - 1.0 } else { tokens },
            at: now,
        };
        allowed
    }

    /// Drops the least recently used buckets beyond `keep` (ties are kept).
    fn keep_most_recent(&mut self, keep: usize) {
        if self.buckets.len() <= keep {
            return;
        }
        let mut last_used: Vec<Instant> = self.buckets.values().map(|b| b.at).collect();
        last_used.sort_unstable();
        let cutoff = last_used[last_used.len() - keep];
        self.buckets.retain(|_, b| b.at >= cutoff);
    }

    /// How many keys are tracked (for tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_one_per_refill_period() {
        let mut filter = SpamFilter::default();
        let t0 = Instant::now();
        let passed = (0..100).filter(|_| filter.allow("nw/a|Apply", t0)).count();
        assert_eq!(passed, 25, "the burst");
        assert!(!filter.allow("nw/a|Apply", t0 + REFILL_EVERY / 2));
        assert!(
            filter.allow("nw/a|Apply", t0 + REFILL_EVERY),
            "one more per period"
        );
        assert!(!filter.allow("nw/a|Apply", t0 + REFILL_EVERY));
    }

    #[test]
    fn other_reasons_and_objects_have_their_own_bucket() {
        let mut filter = SpamFilter::default();
        let t0 = Instant::now();
        for _ in 0..25 {
            assert!(filter.allow("nw/a|Apply", t0));
        }
        assert!(!filter.allow("nw/a|Apply", t0));
        assert!(
            filter.allow("nw/a|StageTimedOut", t0),
            "a warning is not silenced"
        );
        assert!(filter.allow("nw/b|Apply", t0), "another object");
    }

    /// Thousands of objects publishing within one refill period (NodeWright churn: a key per uid):
    /// the tracked keys stay bounded, and the busiest recent key keeps its spent budget.
    #[test]
    fn churning_keys_stay_bounded() {
        let mut filter = SpamFilter::default();
        let t0 = Instant::now();
        for _ in 0..25 {
            assert!(filter.allow("nw/hot|Apply", t0));
        }
        for i in 0..(3 * PRUNE_ABOVE) {
            let at = t0 + Duration::from_millis(i as u64);
            assert!(filter.allow(&format!("nw/{i}|State"), at));
            if i % 64 == 0 {
                // The hot key keeps publishing (and keeps being refused).
                filter.allow("nw/hot|Apply", at);
            }
            assert!(filter.tracked() <= PRUNE_ABOVE + 1, "{}", filter.tracked());
        }
        assert!(
            !filter.allow("nw/hot|Apply", t0 + Duration::from_secs(13)),
            "a recently used key is not forgotten"
        );
    }

    #[test]
    fn a_quiet_key_fills_up_again_and_full_buckets_are_pruned() {
        let mut filter = SpamFilter::default();
        let t0 = Instant::now();
        for _ in 0..25 {
            assert!(filter.allow("nw/a|Apply", t0));
        }
        let later = t0 + REFILL_EVERY * 30;
        assert_eq!(
            (0..100)
                .filter(|_| filter.allow("nw/a|Apply", later))
                .count(),
            25,
            "refilled to the burst, not beyond"
        );
        for i in 0..=PRUNE_ABOVE {
            assert!(filter.allow(&format!("node/{i}|Apply"), t0));
        }
        // Every bucket is full again much later: the next call prunes them all but its own.
        let much_later = later + REFILL_EVERY * 30;
        assert!(filter.allow("nw/z|Apply", much_later));
        assert_eq!(filter.tracked(), 1);
    }
}
