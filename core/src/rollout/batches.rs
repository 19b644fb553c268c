//! Rollout strategies (upstream-api.md §5.4–§5.7, with DESIGN §5's changes): how large each batch of
//! a compartment is, when a batch is over, whether it failed, and when the rollout stops.
//!
//! A compartment with a strategy rolls in batches: a new batch starts only when no node of the
//! previous one is still in flight. Its size comes from the strategy (fixed, linear, exponential) and
//! is always capped by the budget ceiling (upstream ignored the ceiling with a strategy). When a batch
//! is over, its outcome is the change in complete and failed nodes since the last checkpoint; a batch
//! whose success percent is below `batchThreshold` failed, which shrinks the next batch while the
//! progress is below `safetyLimit`, and `failureThreshold` failed batches in a row there stop the
//! rollout (`shouldStop`, cleared only by a reset).
//!
//! A node counts as failed once its stage timed out (its attempts are spent and nothing reruns it
//! without a fix). Upstream kept such a node "in" its batch forever, so a broken package pinned the
//! rollout and the failure threshold was rarely reached; here it ends the node's part of the batch as
//! a failure. A node that is erroring but still has attempts left is still in flight: it may recover.
//!
//! With a `soak`, a batch that ended is judged only once it has soaked: its end starts the soak
//! (`soakUntil`, persisted like every batch-state change), and until then nothing new starts. A node
//! of the batch that goes erroring meanwhile is in flight again, which keeps the batch open; it ends
//! as the batch's failure if its stage times out.
//!
//! Everything here is pure, so it is computed identically on every pass and tested exhaustively.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use nodewright_shared::api::{
    BatchParameters, BatchState, DeploymentStrategy, MAX_SOAK_HOURS, NodeWright,
};
use nodewright_shared::duration::GoDuration;

use super::budget::Slot;

/// Defaults of the strategy parameters when an object reached storage without them
/// (upstream-api.md §5.6: the Go side's fallbacks).
const DEFAULT_INITIAL_BATCH: i64 = 1;
const DEFAULT_BATCH_THRESHOLD: i64 = 100;
const DEFAULT_SAFETY_LIMIT: i64 = 50;
const DEFAULT_DELTA: i64 = 1;
const DEFAULT_GROWTH_FACTOR: i64 = 2;

/// Whether a strategy names one of fixed, linear or exponential (a policy's `default.strategy` is a
/// struct, so an object that bypassed admission can carry an empty one: no strategy).
pub fn is_set(strategy: &DeploymentStrategy) -> bool {
    strategy.fixed.is_some() || strategy.linear.is_some() || strategy.exponential.is_some()
}

/// The strategy's name as in the rollout metrics' `strategy` label.
pub fn strategy_name(strategy: Option<&DeploymentStrategy>) -> &'static str {
    match strategy {
        Some(s) if s.fixed.is_some() => "fixed",
        Some(s) if s.linear.is_some() => "linear",
        Some(s) if s.exponential.is_some() => "exponential",
        _ => "unknown",
    }
}

/// How the batch size evolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Growth {
    Fixed,
    Linear(i64),
    Exponential(i64),
}

/// The longest `soak` admission accepts ([`MAX_SOAK_HOURS`]).
pub const MAX_SOAK: SignedDuration = SignedDuration::from_hours(MAX_SOAK_HOURS);

/// The parameters every strategy has (`None`: no strategy set).
pub fn batch_parameters(strategy: &DeploymentStrategy) -> Option<&BatchParameters> {
    strategy
        .linear
        .as_ref()
        .map(|l| &l.batch)
        .or_else(|| strategy.exponential.as_ref().map(|e| &e.batch))
        .or(strategy.fixed.as_ref())
}

/// The strategy's soak (`None`: unset, zero, or unreadable, which admission refuses).
pub fn soak(strategy: &DeploymentStrategy) -> Option<SignedDuration> {
    let text = batch_parameters(strategy)?.soak.as_deref()?;
    let nanos = GoDuration::parse(text).ok()?.to_std()?;
    let soak = SignedDuration::try_from(nanos).ok()?.min(MAX_SOAK);
    (!soak.is_zero()).then_some(soak)
}

/// The strategy without its soak (the preview's simulation: a soak delays the batches, it does not
/// change them).
pub fn without_soak(strategy: &DeploymentStrategy) -> DeploymentStrategy {
    let mut s = strategy.clone();
    for b in [
        s.fixed.as_mut(),
        s.linear.as_mut().map(|l| &mut l.batch),
        s.exponential.as_mut().map(|e| &mut e.batch),
    ]
    .into_iter()
    .flatten()
    {
        b.soak = None;
    }
    s
}

/// A strategy's parameters with defaults applied and clamped to their documented ranges (objects can
/// reach storage without the webhook; a zero growth factor must not stall or divide by zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    growth: Growth,
    initial: i64,
    threshold: i64,
    failure_threshold: Option<i64>,
    safety: i64,
}

fn params(strategy: &DeploymentStrategy) -> Params {
    let (batch, growth) = if let Some(l) = &strategy.linear {
        (
            &l.batch,
            Growth::Linear(l.delta.map_or(DEFAULT_DELTA, i64::from).max(1)),
        )
    } else if let Some(e) = &strategy.exponential {
        (
            &e.batch,
            Growth::Exponential(
                e.growth_factor
                    .map_or(DEFAULT_GROWTH_FACTOR, i64::from)
                    .max(2),
            ),
        )
    } else if let Some(f) = &strategy.fixed {
        (f, Growth::Fixed)
    } else {
        return Params {
            growth: Growth::Fixed,
            initial: DEFAULT_INITIAL_BATCH,
            threshold: DEFAULT_BATCH_THRESHOLD,
            failure_threshold: None,
            safety: DEFAULT_SAFETY_LIMIT,
        };
    };
    Params {
        growth,
        initial: batch
            .initial_batch
            .map_or(DEFAULT_INITIAL_BATCH, i64::from)
            .max(1),
        threshold: batch
            .batch_threshold
            .map_or(DEFAULT_BATCH_THRESHOLD, i64::from)
            .clamp(1, 100),
        failure_threshold: batch.failure_threshold.map(|t| i64::from(t).max(1)),
        safety: batch
            .safety_limit
            .map_or(DEFAULT_SAFETY_LIMIT, i64::from)
            .clamp(1, 100),
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_i32(n: i64) -> i32 {
    i32::try_from(n.max(0)).unwrap_or(i32::MAX)
}

/// Percent of `total` nodes that are done (complete or failed), rounded down; 0 with no nodes.
fn progress(done: i64, total: i64) -> i64 {
    if total <= 0 {
        0
    } else {
        done.saturating_mul(100) / total
    }
}

/// The batch state of a compartment that has none yet (or after a reset): batch 1, nothing
/// evaluated, and the checkpoints at the current counts so nodes that were already complete (or
/// failed) before it never count as the first batch's outcome.
pub fn initial(complete: usize, failed: usize) -> BatchState {
    BatchState {
        current_batch: 1,
        completed_nodes: to_i32(to_i64(complete)),
        failed_nodes: to_i32(to_i64(failed)),
        ..BatchState::default()
    }
}

/// The size of the next batch (upstream-api.md §5.5) over a compartment of `total` nodes, before the
/// ceiling: fixed ⇒ initialBatch; linear ⇒ initialBatch first, then the last size ± delta;
/// exponential ⇒ initialBatch first, then the last size × or ÷ growthFactor (capped at `total`).
/// It shrinks only after a failed batch while the progress is below safetyLimit. Then capped to the
/// nodes not yet done, at least 1; 0 for an empty compartment.
pub fn batch_size(strategy: &DeploymentStrategy, state: &BatchState, total: usize) -> usize {
    let total = to_i64(total);
    if total == 0 {
        return 0;
    }
    let p = params(strategy);
    let done = i64::from(state.completed_nodes.max(0)) + i64::from(state.failed_nodes.max(0));
    let last = i64::from(state.last_batch_size.max(0));
    let slow_down = state.last_batch_failed && progress(done, total) < p.safety;
    let size = match p.growth {
        Growth::Fixed => p.initial,
        _ if last == 0 => p.initial,
        Growth::Linear(delta) if slow_down => (last - delta).max(1),
        Growth::Linear(delta) => last.saturating_add(delta),
        Growth::Exponential(g) if slow_down => (last / g).max(1),
        Growth::Exponential(g) => last.saturating_mul(g).min(total),
    };
    let remaining = total.saturating_sub(done);
    usize::try_from(size.min(remaining).max(1)).unwrap_or(1)
}

/// The batch sizes a rollout over `total` nodes goes through when every batch passes: what the
/// strategy plans before failures change it (the admission warnings' batch count).
pub fn planned(strategy: &DeploymentStrategy, total: usize) -> Vec<usize> {
    let mut state = initial(0, 0);
    let (mut done, mut sizes) = (0, Vec::new());
    // Every batch takes at least one node: at most `total` of them.
    while done < total && sizes.len() < total {
        let size = batch_size(strategy, &state, total).min(total - done).max(1);
        done += size;
        sizes.push(size);
        state = evaluate(strategy, &state, done, 0, total);
    }
    sizes
}

/// Evaluates the batch that just ended (upstream-api.md §5.6), given the compartment's current
/// `complete` and `failed` node counts; called only when no node of the compartment is in flight.
/// - counts below the checkpoints (nodes left, or a failed node was fixed and reran): resync, no
///   evaluation;
/// - no change: nothing happened since the last evaluation;
/// - else the batch is the change: success percent below batchThreshold ⇒ failed, counted in
///   consecutiveFailures, and with failureThreshold set, progress below safetyLimit and that many
///   failures in a row ⇒ shouldStop; a passed batch resets consecutiveFailures. Next batch.
pub fn evaluate(
    strategy: &DeploymentStrategy,
    state: &BatchState,
    complete: usize,
    failed: usize,
    total: usize,
) -> BatchState {
    let (complete, failed, total) = (to_i64(complete), to_i64(failed), to_i64(total));
    let mut next = state.clone();
    let (checked_complete, checked_failed) = (
        i64::from(state.completed_nodes),
        i64::from(state.failed_nodes),
    );
    next.completed_nodes = to_i32(complete);
    next.failed_nodes = to_i32(failed);
    if complete < checked_complete || failed < checked_failed {
        return next;
    }
    let (succeeded, lost) = (complete - checked_complete, failed - checked_failed);
    let size = succeeded + lost;
    if size == 0 {
        return next;
    }
    let p = params(strategy);
    let batch_failed = succeeded * 100 / size < p.threshold;
    next.last_batch_size = to_i32(size);
    next.last_batch_failed = batch_failed;
    if batch_failed {
        next.consecutive_failures = state.consecutive_failures.saturating_add(1);
        if let Some(limit) = p.failure_threshold
            && progress(complete + failed, total) < p.safety
            && i64::from(next.consecutive_failures) >= limit
        {
            next.should_stop = true;
        }
    } else {
        next.consecutive_failures = 0;
    }
    next.current_batch = state.current_batch.saturating_add(1);
    next
}

/// Concludes a batch that is over (no node in flight) at `now`: with a soak, its end starts the soak
/// and it is evaluated ([`evaluate`]) only once the soak is over; without, at once. A state whose
/// soak runs is returned unchanged.
fn conclude(
    strategy: &DeploymentStrategy,
    state: &BatchState,
    complete: usize,
    failed: usize,
    total: usize,
    now: Timestamp,
) -> BatchState {
    let moved = to_i64(complete) > i64::from(state.completed_nodes)
        || to_i64(failed) > i64::from(state.failed_nodes);
    if let Some(soak) = soak(strategy).filter(|_| moved) {
        match &state.soak_until {
            None => {
                let mut next = state.clone();
                next.soak_until = Some(Time(now.checked_add(soak).unwrap_or(now)));
                return next;
            }
            Some(until) if now < until.0 => return state.clone(),
            Some(_) => {}
        }
    }
    let mut next = evaluate(strategy, state, complete, failed, total);
    next.soak_until = None;
    next
}

/// What a strategy compartment does this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDecision<'a> {
    /// Nodes worked on: every admitted incomplete node (a timed-out one only shows its status), plus
    /// the new batch's nodes.
    pub admit: Vec<&'a str>,
    /// The batch state to persist.
    pub state: BatchState,
}

/// One pass of a strategy compartment. `slots` are its nodes in rollout order; `previous` the
/// persisted batch state (`None`, or batch 0: start afresh); `may_start`: a new batch may be admitted
/// (not paused, not disabled, the policy exists). The evaluation runs regardless, so a batch that
/// ends while paused is still accounted for.
///
/// A pass whose evaluation changes the batch state admits nobody new: the state is persisted first
/// (the status write, guarded by the resourceVersion it was computed from, is what triggers the next
/// pass), and only a pass that finds it persisted starts the next batch. Otherwise a batch could start
/// while its evaluation's status write is lost, and the next pass, seeing the new batch in flight,
/// would never evaluate the previous one.
#[cfg(test)]
pub fn step<'a>(
    strategy: &DeploymentStrategy,
    previous: Option<&BatchState>,
    slots: &[Slot<'a>],
    ceiling: usize,
    may_start: bool,
) -> BatchDecision<'a> {
    step_at(
        strategy,
        previous,
        slots,
        ceiling,
        may_start,
        Timestamp::UNIX_EPOCH,
    )
}

/// [`step`] at the pass's clock `now` (a soaking batch starts nothing new until its soak is over).
pub fn step_at<'a>(
    strategy: &DeploymentStrategy,
    previous: Option<&BatchState>,
    slots: &[Slot<'a>],
    ceiling: usize,
    may_start: bool,
    now: Timestamp,
) -> BatchDecision<'a> {
    let Counts {
        complete,
        failed,
        in_flight,
    } = counts(slots);
    let persisted = previous.filter(|s| s.current_batch > 0);
    let mut state = persisted
        .cloned()
        .unwrap_or_else(|| initial(complete, failed));
    let mut admit: Vec<&str> = slots
        .iter()
        .filter(|s| s.admitted && !s.complete && !s.blocked)
        .map(|s| s.node)
        .collect();
    if in_flight > 0 {
        return BatchDecision { admit, state };
    }
    state = conclude(strategy, &state, complete, failed, slots.len(), now);
    if !may_start || state.should_stop || state.soak_until.is_some() || persisted != Some(&state) {
        return BatchDecision { admit, state };
    }
    let size = batch_size(strategy, &state, slots.len()).min(ceiling);
    admit.extend(
        slots
            .iter()
            .filter(|s| !s.admitted && !s.complete && !s.blocked)
            .take(size)
            .map(|s| s.node),
    );
    BatchDecision { admit, state }
}

/// A compartment's nodes by where they are in the batch.
struct Counts {
    complete: usize,
    /// Timed out and not complete: the batch's failures.
    failed: usize,
    /// Admitted, neither done nor blocked.
    in_flight: usize,
}

fn counts(slots: &[Slot<'_>]) -> Counts {
    Counts {
        complete: slots.iter().filter(|s| s.complete).count(),
        failed: slots.iter().filter(|s| !s.complete && s.timed_out).count(),
        in_flight: slots
            .iter()
            .filter(|s| s.admitted && !s.complete && !s.timed_out && !s.blocked)
            .count(),
    }
}

/// The batch state after a pass, from `slots` as the pass left them (nodes it admitted, nodes that
/// completed during it): a batch that ended during the pass is evaluated in the same status write
/// that reports its nodes complete, so a NodeWright never reads `complete` with its last batch
/// unaccounted. Evaluating twice is harmless: an evaluated batch moved the checkpoints.
#[cfg(test)]
pub fn settle(strategy: &DeploymentStrategy, state: &BatchState, slots: &[Slot<'_>]) -> BatchState {
    settle_at(strategy, state, slots, Timestamp::UNIX_EPOCH)
}

/// [`settle`] at the pass's clock `now`: a batch that ended during the pass starts its soak.
pub fn settle_at(
    strategy: &DeploymentStrategy,
    state: &BatchState,
    slots: &[Slot<'_>],
    now: Timestamp,
) -> BatchState {
    let Counts {
        complete,
        failed,
        in_flight,
    } = counts(slots);
    if in_flight > 0 {
        return state.clone();
    }
    conclude(strategy, state, complete, failed, slots.len(), now)
}

/// The policy-level reset setting of a legacy `interruptionBudget` rollout (no policy): off, as
/// upstream (upstream-operator.md §4.5: legacy batches never reset). Its fixed strategy has no failure
/// threshold, so nothing ever waits on a reset; the batch count keeps telling how many batches the
/// rollouts took. The NodeWright's own `deploymentPolicyOptions` still win.
pub const LEGACY_RESET: Option<bool> = Some(false);

/// Whether batch states are reset on completion and on a version change: the NodeWright's
/// `deploymentPolicyOptions` win, then the policy's setting, else true (the documented default, and
/// what the CRD defaulting gives every object created through the API).
pub fn reset_enabled(nodewright: &NodeWright, policy_setting: Option<bool>) -> bool {
    nodewright
        .spec
        .deployment_policy_options
        .as_ref()
        .and_then(|o| o.reset_batch_state_on_completion)
        .or(policy_setting)
        .unwrap_or(true)
}

/// Whether a package kept in the spec changed version since `old_package_list` (the status'
/// `name:version,...`), which starts a new rollout whose batches begin afresh when reset is enabled.
/// Added or removed packages are not version changes.
pub fn versions_changed(old_package_list: &str, nodewright: &NodeWright) -> bool {
    old_package_list
        .split(',')
        .filter_map(|entry| entry.split_once(':'))
        .any(|(name, version)| {
            nodewright
                .spec
                .packages
                .get(name)
                .is_some_and(|p| p.version != version)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{
        BatchParameters, DeploymentPolicyOptions, ExponentialStrategy, LinearStrategy,
        NodeWrightSpec, Package,
    };

    fn fixed(initial: i32) -> DeploymentStrategy {
        DeploymentStrategy {
            fixed: Some(BatchParameters {
                initial_batch: Some(initial),
                ..BatchParameters::default()
            }),
            ..DeploymentStrategy::default()
        }
    }

    fn linear(initial: i32, delta: i32, batch: BatchParameters) -> DeploymentStrategy {
        DeploymentStrategy {
            linear: Some(LinearStrategy {
                batch: BatchParameters {
                    initial_batch: Some(initial),
                    ..batch
                },
                delta: Some(delta),
            }),
            ..DeploymentStrategy::default()
        }
    }

    fn exponential(initial: i32, growth: i32, batch: BatchParameters) -> DeploymentStrategy {
        DeploymentStrategy {
            exponential: Some(ExponentialStrategy {
                batch: BatchParameters {
                    initial_batch: Some(initial),
                    ..batch
                },
                growth_factor: Some(growth),
            }),
            ..DeploymentStrategy::default()
        }
    }

    fn state(last: i32, failed: bool, done: i32) -> BatchState {
        BatchState {
            current_batch: 2,
            completed_nodes: done,
            last_batch_size: last,
            last_batch_failed: failed,
            ..BatchState::default()
        }
    }

    #[test]
    fn a_finished_batch_soaks_before_it_is_judged_and_the_next_starts() {
        let strategy = DeploymentStrategy {
            fixed: Some(BatchParameters {
                initial_batch: Some(1),
                soak: Some("10m".into()),
                ..BatchParameters::default()
            }),
            ..DeploymentStrategy::default()
        };
        assert_eq!(soak(&strategy), Some(SignedDuration::from_mins(10)));
        let at = |s: i64| Timestamp::from_second(s).expect("time");
        let persisted = BatchState {
            current_batch: 1,
            ..BatchState::default()
        };
        // Batch 1 (a) just completed: the soak starts, nothing new starts, nothing is judged yet.
        let slots = [slot("a", true, true, false), slot("b", false, false, false)];
        let d = step_at(&strategy, Some(&persisted), &slots, 5, true, at(1_000));
        assert_eq!(d.admit, Vec::<&str>::new());
        assert_eq!(d.state.soak_until, Some(Time(at(1_600))));
        assert_eq!((d.state.current_batch, d.state.completed_nodes), (1, 0));
        // The same at the end of the pass that completed it.
        assert_eq!(settle_at(&strategy, &persisted, &slots, at(1_000)), d.state);
        // Persisted and still soaking: unchanged, b waits.
        let soaking = d.state.clone();
        let d = step_at(&strategy, Some(&soaking), &slots, 5, true, at(1_599));
        assert_eq!((d.admit.len(), &d.state), (0, &soaking));
        // a goes erroring during the soak: in flight again, the batch stays open.
        let relapsed = [
            slot("a", true, false, false),
            slot("b", false, false, false),
        ];
        let d = step_at(&strategy, Some(&soaking), &relapsed, 5, true, at(1_700));
        assert_eq!((d.admit, &d.state), (vec!["a"], &soaking));
        // ...and times out: once over, the batch is judged failed.
        let failed = [slot("a", true, false, true), slot("b", false, false, false)];
        let d = step_at(&strategy, Some(&soaking), &failed, 5, true, at(1_800));
        assert_eq!(d.state.soak_until, None);
        assert!(d.state.last_batch_failed && d.state.current_batch == 2);
        // Healthy through the soak instead: judged passed once it is over, then b starts.
        let d = step_at(&strategy, Some(&soaking), &slots, 5, true, at(1_600));
        assert_eq!(d.state.soak_until, None);
        assert!(!d.state.last_batch_failed && d.state.current_batch == 2);
        assert_eq!(
            d.admit,
            Vec::<&str>::new(),
            "the judged state is persisted first"
        );
        let d = step_at(
            &strategy,
            Some(&d.state.clone()),
            &slots,
            5,
            true,
            at(1_601),
        );
        assert_eq!(d.admit, vec!["b"]);
    }

    #[test]
    fn soak_reads_go_durations_and_ignores_zero() {
        let with = |text: &str| DeploymentStrategy {
            linear: Some(LinearStrategy {
                batch: BatchParameters {
                    soak: Some(text.into()),
                    ..BatchParameters::default()
                },
                delta: None,
            }),
            ..DeploymentStrategy::default()
        };
        assert_eq!(soak(&with("1h30m")), Some(SignedDuration::from_mins(90)));
        assert_eq!(soak(&with("0")), None);
        assert_eq!(soak(&with("nonsense")), None);
        assert_eq!(soak(&with("9999h")), Some(MAX_SOAK));
        assert_eq!(soak(&fixed(1)), None);
    }

    #[test]
    fn strategy_names_and_presence() {
        assert!(!is_set(&DeploymentStrategy::default()));
        assert!(is_set(&fixed(1)));
        assert_eq!(strategy_name(None), "unknown");
        assert_eq!(
            strategy_name(Some(&DeploymentStrategy::default())),
            "unknown"
        );
        assert_eq!(strategy_name(Some(&fixed(1))), "fixed");
        assert_eq!(
            strategy_name(Some(&linear(1, 1, BatchParameters::default()))),
            "linear"
        );
        assert_eq!(
            strategy_name(Some(&exponential(1, 2, BatchParameters::default()))),
            "exponential"
        );
    }

    #[test]
    fn fixed_batches_are_constant_and_capped_to_what_remains() {
        let s = fixed(3);
        assert_eq!(batch_size(&s, &BatchState::default(), 10), 3);
        assert_eq!(batch_size(&s, &state(3, false, 3), 10), 3);
        assert_eq!(batch_size(&s, &state(3, true, 3), 10), 3, "no shrinking");
        assert_eq!(batch_size(&s, &state(3, false, 9), 10), 1, "one left");
        assert_eq!(batch_size(&s, &state(3, false, 10), 10), 1, "at least 1");
        assert_eq!(batch_size(&s, &BatchState::default(), 0), 0, "no nodes");
    }

    #[test]
    fn linear_batches_grow_and_shrink_by_delta() {
        let s = linear(2, 3, BatchParameters::default());
        assert_eq!(batch_size(&s, &BatchState::default(), 100), 2, "first");
        assert_eq!(batch_size(&s, &state(2, false, 2), 100), 5, "grow");
        // Failed below the safety limit (default 50%): shrink, at least 1.
        assert_eq!(batch_size(&s, &state(5, true, 7), 100), 2);
        assert_eq!(batch_size(&s, &state(2, true, 9), 100), 1);
        // Failed at or beyond the safety limit: keep growing.
        assert_eq!(batch_size(&s, &state(5, true, 50), 100), 8);
        assert_eq!(batch_size(&s, &state(5, false, 97), 100), 3, "remaining");
    }

    #[test]
    fn exponential_batches_multiply_and_divide_by_the_growth_factor() {
        let s = exponential(1, 2, BatchParameters::default());
        assert_eq!(batch_size(&s, &BatchState::default(), 7), 1);
        assert_eq!(batch_size(&s, &state(1, false, 1), 7), 2);
        assert_eq!(batch_size(&s, &state(2, false, 3), 7), 4);
        assert_eq!(
            batch_size(&s, &state(4, false, 3), 7),
            4,
            "capped at remaining"
        );
        let g3 = exponential(2, 3, BatchParameters::default());
        assert_eq!(batch_size(&g3, &state(6, false, 8), 100), 18);
        assert_eq!(batch_size(&g3, &state(6, true, 8), 100), 2, "÷3");
        assert_eq!(batch_size(&g3, &state(2, true, 8), 100), 1, "at least 1");
        assert_eq!(
            batch_size(&g3, &state(80, false, 10), 100),
            90,
            "× capped at total, then at remaining"
        );
    }

    #[test]
    fn out_of_range_parameters_are_clamped() {
        let zero_growth = exponential(0, 0, BatchParameters::default());
        assert_eq!(batch_size(&zero_growth, &BatchState::default(), 10), 1);
        assert_eq!(batch_size(&zero_growth, &state(3, false, 3), 10), 6);
        assert_eq!(batch_size(&zero_growth, &state(3, true, 3), 10), 1);
        let negative_delta = linear(1, -4, BatchParameters::default());
        assert_eq!(batch_size(&negative_delta, &state(3, false, 3), 10), 4);
        let garbage = BatchState {
            completed_nodes: -5,
            failed_nodes: -5,
            last_batch_size: -1,
            ..BatchState::default()
        };
        assert_eq!(batch_size(&fixed(2), &garbage, 10), 2);
    }

    #[test]
    fn evaluation_of_a_passed_and_a_failed_batch() {
        let s = exponential(1, 2, BatchParameters::default());
        let start = initial(0, 0);
        assert_eq!(start.current_batch, 1);
        // Nothing happened yet.
        assert_eq!(evaluate(&s, &start, 0, 0, 4), start);
        let one = evaluate(&s, &start, 1, 0, 4);
        assert_eq!(
            one,
            BatchState {
                current_batch: 2,
                completed_nodes: 1,
                last_batch_size: 1,
                ..BatchState::default()
            }
        );
        // One of the next two failed: 50% < 100% ⇒ failed, no stop without a failureThreshold.
        let two = evaluate(&s, &one, 2, 1, 4);
        assert_eq!(
            (
                two.current_batch,
                two.last_batch_size,
                two.last_batch_failed,
                two.consecutive_failures,
                two.should_stop
            ),
            (3, 2, true, 1, false)
        );
        assert_eq!((two.completed_nodes, two.failed_nodes), (2, 1));
        // A passed batch resets the consecutive failures.
        let three = evaluate(&s, &two, 3, 1, 4);
        assert_eq!(
            (three.consecutive_failures, three.last_batch_failed),
            (0, false)
        );
    }

    #[test]
    fn the_batch_threshold_decides_pass_or_fail() {
        let s = fixed(4);
        let lenient = DeploymentStrategy {
            fixed: Some(BatchParameters {
                initial_batch: Some(4),
                batch_threshold: Some(75),
                ..BatchParameters::default()
            }),
            ..DeploymentStrategy::default()
        };
        let start = initial(0, 0);
        assert!(evaluate(&s, &start, 3, 1, 8).last_batch_failed);
        assert!(!evaluate(&lenient, &start, 3, 1, 8).last_batch_failed);
        assert!(evaluate(&lenient, &start, 2, 2, 8).last_batch_failed);
    }

    #[test]
    fn consecutive_failures_below_the_safety_limit_stop_the_rollout() {
        let params = BatchParameters {
            failure_threshold: Some(2),
            safety_limit: Some(50),
            ..BatchParameters::default()
        };
        let s = linear(1, 1, params.clone());
        let first = evaluate(&s, &initial(0, 0), 0, 1, 10);
        assert!(!first.should_stop, "one failure of two allowed");
        let second = evaluate(&s, &first, 0, 2, 10);
        assert_eq!(second.consecutive_failures, 2);
        assert!(second.should_stop);
        // The same failures beyond the safety limit do not stop it.
        let late = BatchState {
            completed_nodes: 6,
            consecutive_failures: 1,
            ..initial(6, 0)
        };
        let beyond = evaluate(&s, &late, 6, 1, 10);
        assert_eq!(beyond.consecutive_failures, 2);
        assert!(!beyond.should_stop);
    }

    #[test]
    fn nodes_moving_away_resync_without_an_evaluation() {
        let s = fixed(1);
        let before = BatchState {
            current_batch: 3,
            completed_nodes: 4,
            failed_nodes: 1,
            last_batch_size: 2,
            ..BatchState::default()
        };
        let after = evaluate(&s, &before, 2, 1, 5);
        assert_eq!(
            after,
            BatchState {
                completed_nodes: 2,
                ..before.clone()
            }
        );
        // A failed node fixed and rerun: fewer failures, resync.
        let fixed_node = evaluate(&s, &before, 4, 0, 5);
        assert_eq!(fixed_node.current_batch, 3);
        assert_eq!(fixed_node.failed_nodes, 0);
    }

    fn slot(node: &str, admitted: bool, complete: bool, timed_out: bool) -> Slot<'_> {
        Slot {
            node,
            admitted,
            complete,
            timed_out,
            blocked: false,
        }
    }

    /// Passes until the batch state is persisted (each pass's state is written before the next).
    fn until_persisted<'a>(
        s: &DeploymentStrategy,
        previous: Option<&BatchState>,
        slots: &[Slot<'a>],
        ceiling: usize,
    ) -> BatchDecision<'a> {
        let mut d = step(s, previous, slots, ceiling, true);
        for _ in 0..3 {
            let next = step(s, Some(&d.state), slots, ceiling, true);
            if next.state == d.state {
                return next;
            }
            d = next;
        }
        panic!("the batch state does not settle: {d:?}");
    }

    #[test]
    fn a_changed_batch_state_is_persisted_before_the_next_batch_starts() {
        let s = fixed(1);
        let mut slots = vec![
            slot("a", false, false, false),
            slot("b", false, false, false),
        ];
        // No state yet: the first pass only records batch 1.
        let first = step(&s, None, &slots, 5, true);
        assert!(first.admit.is_empty());
        assert_eq!(first.state, initial(0, 0));
        assert_eq!(step(&s, Some(&first.state), &slots, 5, true).admit, ["a"]);
        // a completes: the evaluation is persisted first, then b starts.
        slots[0].admitted = true;
        slots[0].complete = true;
        let evaluated = step(&s, Some(&first.state), &slots, 5, true);
        assert!(evaluated.admit.is_empty());
        assert_eq!(evaluated.state.current_batch, 2);
        let next = step(&s, Some(&evaluated.state), &slots, 5, true);
        assert_eq!(next.admit, ["b"]);
        assert_eq!(next.state, evaluated.state);
    }

    #[test]
    fn a_batch_that_ends_during_the_pass_is_evaluated_in_its_write() {
        let s = fixed(2);
        let state = BatchState {
            current_batch: 1,
            ..BatchState::default()
        };
        // a and b were in flight when the pass started; a completed during it, b did not.
        let mut slots = vec![slot("a", true, true, false), slot("b", true, false, false)];
        assert_eq!(
            super::settle(&s, &state, &slots),
            state,
            "b still in flight"
        );
        // Both completed during the pass: batch 1 is evaluated now.
        slots[1].complete = true;
        let settled = super::settle(&s, &state, &slots);
        assert_eq!(
            (
                settled.current_batch,
                settled.completed_nodes,
                settled.last_batch_size,
                settled.last_batch_failed
            ),
            (2, 2, 2, false)
        );
        // Settling again changes nothing: the checkpoints moved.
        assert_eq!(super::settle(&s, &settled, &slots), settled);
    }

    #[test]
    fn an_exponential_rollout_goes_in_growing_batches() {
        let s = exponential(1, 2, BatchParameters::default());
        let names = ["a", "b", "c", "d", "e", "f", "g"];
        // Pass 1: nothing admitted: batch 1 of 1 node.
        let slots: Vec<Slot<'_>> = names.iter().map(|n| slot(n, false, false, false)).collect();
        let d = until_persisted(&s, None, &slots, 100);
        assert_eq!(d.admit, ["a"]);
        assert_eq!(d.state.current_batch, 1);
        // a in flight: nobody new.
        let mut slots = slots;
        slots[0].admitted = true;
        let d = step(&s, Some(&d.state), &slots, 100, true);
        assert_eq!(d.admit, ["a"]);
        // a complete: batch 2 of 2 nodes.
        slots[0].complete = true;
        let d = until_persisted(&s, Some(&d.state), &slots, 100);
        assert_eq!(d.admit, ["b", "c"]);
        assert_eq!((d.state.current_batch, d.state.last_batch_size), (2, 1));
        for s in &mut slots[1..3] {
            s.admitted = true;
            s.complete = true;
        }
        // Batch 3: 4 nodes.
        let d = until_persisted(&s, Some(&d.state), &slots, 100);
        assert_eq!(d.admit, ["d", "e", "f", "g"]);
        assert_eq!((d.state.current_batch, d.state.last_batch_size), (3, 2));
        for s in &mut slots[3..] {
            s.admitted = true;
            s.complete = true;
        }
        let d = until_persisted(&s, Some(&d.state), &slots, 100);
        assert!(d.admit.is_empty());
        assert_eq!(
            d.state,
            BatchState {
                current_batch: 4,
                completed_nodes: 7,
                last_batch_size: 4,
                ..BatchState::default()
            }
        );
    }

    #[test]
    fn the_ceiling_caps_a_strategy_batch() {
        let s = exponential(8, 2, BatchParameters::default());
        let slots: Vec<Slot<'_>> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| slot(n, false, false, false))
            .collect();
        assert_eq!(until_persisted(&s, None, &slots, 2).admit, ["a", "b"]);
        assert!(until_persisted(&s, None, &slots, 0).admit.is_empty());
    }

    #[test]
    fn a_timed_out_node_ends_its_batch_as_a_failure_and_stays_shown() {
        let params = BatchParameters {
            failure_threshold: Some(1),
            ..BatchParameters::default()
        };
        let s = fixed(1);
        let stop_on_first = DeploymentStrategy {
            fixed: Some(BatchParameters {
                initial_batch: Some(1),
                ..params
            }),
            ..DeploymentStrategy::default()
        };
        let mut slots = vec![
            slot("a", true, false, false),
            slot("b", false, false, false),
            slot("c", false, false, false),
            slot("d", false, false, false),
        ];
        let start = initial(0, 0);
        // a still retrying: in flight, b waits.
        assert_eq!(step(&s, Some(&start), &slots, 5, true).admit, ["a"]);
        // a timed out: the batch is over (failed) and the next one starts.
        slots[0].timed_out = true;
        let d = until_persisted(&s, Some(&start), &slots, 5);
        assert_eq!(d.admit, ["a", "b"]);
        assert_eq!(
            (
                d.state.failed_nodes,
                d.state.last_batch_failed,
                d.state.consecutive_failures
            ),
            (1, true, 1)
        );
        // With failureThreshold 1 below the safety limit, the rollout stops instead.
        let d = until_persisted(&stop_on_first, Some(&start), &slots, 5);
        assert!(d.state.should_stop);
        assert_eq!(d.admit, ["a"]);
        // Stopped stays stopped.
        let again = step(&stop_on_first, Some(&d.state), &slots, 5, true);
        assert_eq!(again.admit, ["a"]);
        assert!(again.state.should_stop);
    }

    #[test]
    fn blocked_nodes_are_never_admitted_and_no_start_while_not_allowed() {
        let s = fixed(2);
        let slots = vec![
            Slot {
                blocked: true,
                ..slot("a", false, false, false)
            },
            slot("b", false, false, false),
            slot("c", false, false, false),
        ];
        assert_eq!(until_persisted(&s, None, &slots, 5).admit, ["b", "c"]);
        let held = step(&s, None, &slots, 5, false);
        assert!(held.admit.is_empty());
        assert_eq!(held.state, initial(0, 0));
    }

    #[test]
    fn nodes_complete_before_the_first_batch_are_not_its_outcome() {
        let s = exponential(1, 2, BatchParameters::default());
        let slots = vec![
            slot("a", false, true, false),
            slot("b", false, false, false),
        ];
        let d = until_persisted(&s, None, &slots, 5);
        assert_eq!(d.admit, ["b"]);
        assert_eq!((d.state.current_batch, d.state.last_batch_size), (1, 0));
        // A persisted batch 0 (never started) is treated the same way.
        let zero = BatchState::default();
        assert_eq!(
            step(&s, Some(&zero), &slots, 5, true).state.current_batch,
            1
        );
    }

    fn nodewright(packages: &[(&str, &str)], reset: Option<bool>) -> NodeWright {
        NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: packages
                    .iter()
                    .map(|(n, v)| {
                        (
                            (*n).to_owned(),
                            Package {
                                version: (*v).to_owned(),
                                ..Package::default()
                            },
                        )
                    })
                    .collect(),
                deployment_policy_options: reset.map(|r| DeploymentPolicyOptions {
                    reset_batch_state_on_completion: Some(r),
                }),
                ..NodeWrightSpec::default()
            },
        )
    }

    #[test]
    fn reset_setting_precedence() {
        assert!(reset_enabled(&nodewright(&[], None), None));
        assert!(!reset_enabled(&nodewright(&[], None), Some(false)));
        assert!(reset_enabled(&nodewright(&[], Some(true)), Some(false)));
        assert!(!reset_enabled(&nodewright(&[], Some(false)), Some(true)));
        // Legacy (no policy, which stands for a `false` setting): never, unless the NodeWright says so.
        assert!(!reset_enabled(&nodewright(&[], None), LEGACY_RESET));
        assert!(reset_enabled(&nodewright(&[], Some(true)), LEGACY_RESET));
    }

    #[test]
    fn version_changes_are_detected_from_the_package_list() {
        let nw = nodewright(&[("a", "1.0.0"), ("b", "2.0.0")], None);
        assert!(!versions_changed("", &nw));
        assert!(!versions_changed("a:1.0.0,b:2.0.0", &nw));
        assert!(!versions_changed("a:1.0.0", &nw), "b added");
        assert!(!versions_changed("a:1.0.0,b:2.0.0,c:1", &nw), "c removed");
        assert!(versions_changed("a:0.9.0,b:2.0.0", &nw));
    }
}
