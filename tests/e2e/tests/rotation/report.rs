//! Sorting the requests into phases and printing the figures: failed admissions and p50/p99
//! latency during certificate rotation, while a webhook replica is down, and outside both.

use std::time::{Duration, Instant};

use super::load::{Op, Sample};

/// How long after a change to the stored or published material a request still counts as "during
/// rotation": the operator's propagation wait plus the time the apiserver and the webhook take to
/// pick the change up (their watches are sub-second here).
pub fn settle(propagation: Duration) -> Duration {
    propagation + Duration::from_secs(5)
}

/// A closed time interval.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: Instant,
    pub to: Instant,
}

impl Window {
    fn holds(&self, t: Instant) -> bool {
        t >= self.from && t <= self.to
    }
}

/// Overlapping or touching windows merged, in order.
pub fn merge(mut windows: Vec<Window>) -> Vec<Window> {
    windows.sort_by_key(|w| w.from);
    let mut out: Vec<Window> = Vec::new();
    for w in windows {
        match out.last_mut() {
            Some(last) if w.from <= last.to => last.to = last.to.max(w.to),
            _ => out.push(w),
        }
    }
    out
}

/// The phase a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Outside,
    Rotation,
    ReplicaDown,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Outside => "outside rotation",
            Phase::Rotation => "during rotation",
            Phase::ReplicaDown => "one replica killed",
        }
    }
}

/// A request's phase: a replica down wins over a rotation (its failures are the kill's).
pub fn phase(sample: &Sample, rotation: &[Window], down: &[Window]) -> Phase {
    let end = sample.start + sample.latency;
    let overlaps = |w: &Window| w.holds(sample.start) || w.holds(end);
    if down.iter().any(overlaps) {
        Phase::ReplicaDown
    } else if rotation.iter().any(overlaps) {
        Phase::Rotation
    } else {
        Phase::Outside
    }
}

/// Figures of one phase.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub requests: usize,
    pub creates: usize,
    pub failed: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub seconds: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Figures of the samples in `phase`; `seconds` is the time the phase lasted.
pub fn figures(samples: &[(Phase, &Sample)], which: Phase, seconds: f64) -> Figures {
    let mut latencies: Vec<Duration> = Vec::new();
    let mut f = Figures {
        seconds,
        ..Figures::default()
    };
    for (p, s) in samples {
        if *p != which {
            continue;
        }
        f.requests += 1;
        if s.op == Op::Create {
            f.creates += 1;
        }
        if s.error.is_some() {
            f.failed += 1;
        } else {
            latencies.push(s.latency);
        }
    }
    latencies.sort();
    f.p50 = percentile(&latencies, 50.0);
    f.p99 = percentile(&latencies, 99.0);
    f.max = latencies.last().copied().unwrap_or_default();
    f
}

/// The table: one row per phase.
pub fn table(rows: &[(Phase, Figures)]) -> String {
    let mut out = format!(
        "{:<20} {:>8} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8}\n",
        "phase", "seconds", "requests", "req/s", "failed", "p50 ms", "p99 ms", "max ms"
    );
    for (phase, f) in rows {
        let rate = if f.seconds > 0.0 {
            f.requests as f64 / f.seconds
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:<20} {:>8.1} {:>9} {:>8.1} {:>7} {:>8.1} {:>8.1} {:>8.1}\n",
            phase.label(),
            f.seconds,
            f.requests,
            rate,
            f.failed,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.max.as_secs_f64() * 1e3,
        ));
    }
    out
}

/// Seconds of `[from, to]` covered by `windows` (merged, non-overlapping).
pub fn covered(windows: &[Window], from: Instant, to: Instant) -> f64 {
    windows
        .iter()
        .map(|w| {
            let a = w.from.max(from);
            let b = w.to.min(to);
            if b > a { (b - a).as_secs_f64() } else { 0.0 }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_merge_and_phases_prefer_the_kill() {
        let t0 = Instant::now();
        let s = |a: u64, b: u64| Window {
            from: t0 + Duration::from_secs(a),
            to: t0 + Duration::from_secs(b),
        };
        let merged = merge(vec![s(10, 20), s(5, 12), s(30, 40)]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].from, t0 + Duration::from_secs(5));
        assert_eq!(merged[0].to, t0 + Duration::from_secs(20));
        assert!((covered(&merged, t0, t0 + Duration::from_secs(35)) - 20.0).abs() < 1e-9);
        let sample = Sample {
            start: t0 + Duration::from_secs(11),
            latency: Duration::from_millis(5),
            op: Op::Update,
            error: None,
        };
        assert_eq!(phase(&sample, &merged, &[]), Phase::Rotation);
        assert_eq!(phase(&sample, &merged, &[s(11, 12)]), Phase::ReplicaDown);
        assert_eq!(phase(&sample, &[], &[]), Phase::Outside);
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&sorted, 50.0), Duration::from_millis(50));
    }
}
