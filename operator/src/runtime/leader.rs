//! Leader election on a `coordination.k8s.io/v1` Lease (DESIGN §1: one active replica, the others
//! hot standbys). kube has none built in, and this loop is small enough to own rather than track a
//! third-party crate across kube majors.
//!
//! The rules, and why (rust-ecosystem.md §4, "Leader election hiccups"):
//! - a replica takes the Lease when it is absent, released (no holder) or expired, always with an
//!   optimistic-concurrency write (create, or replace with the observed `resourceVersion`), so two
//!   candidates can never both succeed;
//! - expired means `renewTime + leaseDurationSeconds < now` on our clock, **or** the Lease has not
//!   changed for `leaseDurationSeconds` on our monotonic clock; the second rule needs no clock
//!   agreement and catches a dead holder whose clock ran ahead. Clock skew up to
//!   `lease_duration − retry_period` cannot make a live holder look expired;
//! - the leader renews every retry period; when no renewal succeeds within the renew deadline (which
//!   is shorter than the lease duration, so it stops before anyone may take over), or when it sees
//!   another holder or a conflicting write, it has **lost at once**: the term's
//!   [`CancellationToken`] is cancelled before `is_leader` turns false, so reconcilers stop writing
//!   first. It then contends again (never one-shot: kuberhealthy#1533);
//! - every API call is bounded by a timeout shorter than the renew deadline, so a hanging apiserver
//!   cannot keep a replica "leading" past its deadline;
//! - on graceful shutdown the Lease is released, so a standby takes over at its next retry instead
//!   of waiting out the lease duration.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;

use crate::writes::LeaseWriter;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::metrics::LeaderMetrics;

/// How long a Lease lives, and how hard its holder tries to keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// `leaseDurationSeconds`: how long standbys wait for a silent holder (whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives leadership up.
    pub renew_deadline: Duration,
    /// Interval between renewals (leader) and checks (standby).
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    /// controller-runtime's defaults: 15s / 10s / 2s.
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTimings {
    /// Checks the ordering the safety argument relies on: retry < renew deadline < lease duration.
    pub fn check(&self) -> Result<(), LeaderError> {
        let ok = self.lease_duration >= Duration::from_secs(1)
            && self.lease_duration.subsec_nanos() == 0
            && !self.retry_period.is_zero()
            && self.retry_period < self.renew_deadline
            && self.renew_deadline < self.lease_duration;
        ok.then_some(()).ok_or(LeaderError::Timings(*self))
    }

    /// The bound of every API call: half the renew deadline, so a renewal that hangs still leaves
    /// time for another attempt before the deadline.
    pub fn request_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }

    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Which Lease, who we are, and the timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease (the operator's).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity`; unique per replica (the pod name).
    pub identity: String,
    /// Durations.
    pub timings: LeaseTimings,
}

/// Why an election step failed. Each names the Lease so a log line stands on its own.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The timings would let a standby take over while the leader still believes it leads.
    #[error(
        "invalid lease timings {0:?}: need whole-second lease duration >= 1s > renew deadline > retry period > 0"
    )]
    Timings(LeaseTimings),
    /// No identity: the Lease could not tell replicas apart.
    #[error("lease {lease}: the holder identity is empty (set POD_NAME)")]
    EmptyIdentity {
        /// `namespace/name` of the Lease.
        lease: String,
    },
    /// An API call failed.
    #[error("lease {lease}: {action} failed: {source}")]
    Api {
        /// `namespace/name` of the Lease.
        lease: String,
        /// `read`, `create`, `update` or `release`.
        action: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// What to do after looking at the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, holding it.
    Create,
    /// The Lease is free (released) or expired: take it over (a new term; transitions + 1).
    Acquire {
        /// The holder it is taken from, if any.
        previous: Option<String>,
    },
    /// We hold it: write a fresh `renewTime`.
    Renew,
    /// Someone else holds a live Lease: check again after the retry period.
    Wait {
        /// The holder.
        holder: String,
    },
    /// We believed we led, but someone else holds the Lease now: stop at once.
    Lost {
        /// The new holder.
        holder: String,
    },
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The Lease as read, `None` when it does not exist.
    pub lease: Option<&'a Lease>,
    /// Our wall clock.
    pub now: Timestamp,
    /// How long (our monotonic clock) the Lease's resourceVersion has been the same.
    pub unchanged_for: Duration,
    /// Our identity.
    pub identity: &'a str,
    /// Whether we currently believe we lead.
    pub leading: bool,
    /// Our lease duration, used when the Lease states none.
    pub lease_duration: Duration,
}

/// The election's decision for one observation. Pure, so every edge case is a table row.
pub fn decide(o: &Observation<'_>) -> Decision {
    let Some(lease) = o.lease else {
        return Decision::Create;
    };
    let free = LeaseSpec::default();
    let spec = lease.spec.as_ref().unwrap_or(&free);
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        None => Decision::Acquire { previous: None },
        Some(holder) if holder == o.identity => Decision::Renew,
        Some(holder) if o.leading => Decision::Lost {
            holder: holder.to_owned(),
        },
        Some(holder) if is_expired(spec, o.now, o.unchanged_for, o.lease_duration) => {
            Decision::Acquire {
                previous: Some(holder.to_owned()),
            }
        }
        Some(holder) => Decision::Wait {
            holder: holder.to_owned(),
        },
    }
}

/// Whether a held Lease has expired: by its timestamps on our clock, or by having stayed unchanged
/// for its duration on our monotonic clock (immune to skew; slower only on a first look).
pub fn is_expired(
    spec: &LeaseSpec,
    now: Timestamp,
    unchanged_for: Duration,
    fallback: Duration,
) -> bool {
    let duration = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .map_or(fallback, |s| Duration::from_secs(s.unsigned_abs().into()));
    let last = spec.renew_time.as_ref().or(spec.acquire_time.as_ref());
    let by_wall = last.is_some_and(|MicroTime(at)| {
        // Negative (a renewTime in our future) never converts: not expired.
        Duration::try_from(now.duration_since(*at)).is_ok_and(|age| age > duration)
    });
    by_wall || unchanged_for >= duration
}

/// The Lease to write for `decision` (`Create`, `Acquire`, `Renew`), from the one read.
pub fn claim(
    current: Option<Lease>,
    decision: &Decision,
    config: &LeaseConfig,
    now: Timestamp,
) -> Lease {
    let mut lease = current.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some(config.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let held_by_us = spec.holder_identity.as_deref() == Some(config.identity.as_str());
    match decision {
        Decision::Create => spec.lease_transitions = Some(0),
        Decision::Acquire { .. } if !held_by_us => {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        _ => {}
    }
    if !held_by_us || spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.holder_identity = Some(config.identity.clone());
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(config.timings.lease_duration_seconds());
    lease
}

/// Outcome of one read-decide-write round.
enum Step {
    /// We hold the Lease now.
    Holding,
    /// Someone else does.
    HeldBy(String),
    /// Our write lost a race (HTTP 409): someone else changed the Lease.
    Conflict,
}

/// Runs the election for one replica. Build with [`Elector::new`], then spawn [`Elector::run`].
pub struct Elector {
    lease: LeaseWriter,
    config: LeaseConfig,
    lease_ref: String,
    leader_tx: watch::Sender<bool>,
    term_tx: watch::Sender<Option<CancellationToken>>,
    transitions: Arc<AtomicI32>,
    metrics: Option<LeaderMetrics>,
}

/// What the rest of the process sees of the election. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LeaderHandle {
    leader_rx: watch::Receiver<bool>,
    term_rx: watch::Receiver<Option<CancellationToken>>,
    transitions: Arc<AtomicI32>,
}

impl LeaderHandle {
    /// A handle that leads until `shutdown` (for `LEADER_ELECTION=false`, a single replica).
    pub fn unconditional(shutdown: &CancellationToken) -> Self {
        let (_, leader_rx) = watch::channel(true);
        let (_, term_rx) = watch::channel(Some(shutdown.child_token()));
        LeaderHandle {
            leader_rx,
            term_rx,
            transitions: Arc::default(),
        }
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        *self.leader_rx.borrow()
    }

    /// [`LeaderHandle::is_leader`] as a gauge value: 1 leading, 0 not.
    pub fn is_leader_gauge(&self) -> i64 {
        i64::from(self.is_leader())
    }

    /// `spec.leaseTransitions` as last read or written: how often the Lease changed hands.
    pub fn lease_transitions(&self) -> i32 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// The current term's token while leading: reconcilers `select!` on `token.cancelled()`.
    pub fn term(&self) -> Option<CancellationToken> {
        self.term_rx
            .borrow()
            .as_ref()
            .filter(|t| !t.is_cancelled())
            .cloned()
    }

    /// Waits until this replica leads and returns that term's token, cancelled the moment the term
    /// ends. `None` once the election has stopped (shutdown): the caller's loop ends.
    pub async fn acquired(&mut self) -> Option<CancellationToken> {
        loop {
            let current = self.term_rx.borrow_and_update().clone();
            if let Some(token) = current.filter(|t| !t.is_cancelled()) {
                return Some(token);
            }
            self.term_rx.changed().await.ok()?;
        }
    }
}

impl Elector {
    /// An elector for `config`, and the handle that reports its state.
    pub fn new(
        client: kube::Client,
        config: LeaseConfig,
    ) -> Result<(Elector, LeaderHandle), LeaderError> {
        config.timings.check()?;
        let lease_ref = format!("{}/{}", config.namespace, config.name);
        if config.identity.trim().is_empty() {
            return Err(LeaderError::EmptyIdentity { lease: lease_ref });
        }
        let (leader_tx, leader_rx) = watch::channel(false);
        let (term_tx, term_rx) = watch::channel(None);
        let transitions = Arc::new(AtomicI32::new(0));
        let handle = LeaderHandle {
            leader_rx,
            term_rx,
            transitions: transitions.clone(),
        };
        let elector = Elector {
            lease: LeaseWriter::new(client, &config.namespace, &config.name),
            config,
            lease_ref,
            leader_tx,
            term_tx,
            transitions,
            metrics: None,
        };
        Ok((elector, handle))
    }

    /// Keeps `nodewright_operator_is_leader` and `..._leader_transitions_total` up to date.
    pub fn with_metrics(mut self, metrics: LeaderMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Contends, leads, loses and contends again until `shutdown` is cancelled; then ends the term
    /// and releases the Lease. Cancel `shutdown` only once the reconcilers have stopped: a standby
    /// may start writing right after the release.
    pub async fn run(self, shutdown: CancellationToken) {
        let span = info_span!("leader_election", lease = %self.lease_ref, identity = %self.config.identity);
        self.run_loop(shutdown).instrument(span).await;
    }

    async fn run_loop(self, shutdown: CancellationToken) {
        let timings = self.config.timings;
        let mut observed: Option<(Option<String>, Instant)> = None;
        // Some(start of the last successful renewal) while leading.
        let mut renewed: Option<Instant> = None;
        info!("contending for the lease");
        loop {
            let started = Instant::now();
            let mut budget = timings.request_timeout();
            if let Some(at) = renewed {
                let deadline = at + timings.renew_deadline;
                if started >= deadline {
                    self.lose("no renewal succeeded within the renew deadline");
                    renewed = None;
                } else {
                    budget = budget.min(deadline - started);
                }
            }
            let leading = renewed.is_some();
            let round = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                r = tokio::time::timeout(budget, self.round(&mut observed, leading)) => r,
            };
            match round {
                Ok(Ok(Step::Holding)) => {
                    if !leading {
                        self.win();
                    }
                    renewed = Some(started);
                }
                Ok(Ok(Step::HeldBy(holder))) if leading => {
                    self.lose(format_args!("the lease is held by {holder}"));
                    renewed = None;
                }
                Ok(Ok(Step::HeldBy(holder))) => debug!(%holder, "standing by"),
                Ok(Ok(Step::Conflict)) if leading => {
                    self.lose("another writer changed the lease");
                    renewed = None;
                }
                Ok(Ok(Step::Conflict)) => debug!("lost a race for the lease"),
                Ok(Err(error)) => warn!(%error, leading, "lease round failed"),
                Err(_) => warn!(timeout = ?budget, leading, "lease round timed out"),
            }
            let mut next = started + timings.retry_period;
            if let Some(at) = renewed {
                next = next.min(at + timings.renew_deadline);
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        if renewed.is_some() {
            self.lose("shutting down");
        }
        self.release().await;
    }

    /// Reads the Lease, decides, and writes when the decision is to hold it.
    async fn round(
        &self,
        observed: &mut Option<(Option<String>, Instant)>,
        leading: bool,
    ) -> Result<Step, LeaderError> {
        let now = Timestamp::now();
        let current = self
            .lease
            .get()
            .await
            .map_err(|source| self.api_error("read", source))?;
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let unchanged_for = match observed {
            Some((seen, at)) if *seen == version => at.elapsed(),
            _ => {
                *observed = Some((version, Instant::now()));
                Duration::ZERO
            }
        };
        if let Some(lease) = &current {
            self.note_transitions(lease);
        }
        let decision = decide(&Observation {
            lease: current.as_ref(),
            now,
            unchanged_for,
            identity: &self.config.identity,
            leading,
            lease_duration: self.config.timings.lease_duration,
        });
        let (written, action) = match &decision {
            Decision::Wait { holder } | Decision::Lost { holder } => {
                return Ok(Step::HeldBy(holder.clone()));
            }
            Decision::Create => {
                let lease = claim(None, &decision, &self.config, now);
                (self.lease.create(&lease).await, "create")
            }
            Decision::Acquire { .. } | Decision::Renew => {
                if let Decision::Acquire { previous } = &decision {
                    info!(
                        previous = previous.as_deref().unwrap_or("<none>"),
                        "taking over the lease"
                    );
                }
                let lease = claim(current, &decision, &self.config, now);
                let pp = PostParams::default();
                (self.lease.replace(&lease, &pp).await, "update")
            }
        };
        match written {
            Ok(lease) => {
                *observed = Some((lease.metadata.resource_version.clone(), Instant::now()));
                self.note_transitions(&lease);
                Ok(Step::Holding)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Step::Conflict),
            Err(source) => Err(self.api_error(action, source)),
        }
    }

    /// Starts a term: the token exists before anyone can see `is_leader == true`.
    fn win(&self) {
        self.term_tx.send_replace(Some(CancellationToken::new()));
        self.leader_tx.send_replace(true);
        if let Some(m) = &self.metrics {
            m.is_leader.set(1);
            m.transitions.inc();
        }
        info!(
            lease_transitions = self.transitions.load(Ordering::Relaxed),
            "became leader"
        );
    }

    /// Ends the term: the token is cancelled before `is_leader` turns false.
    fn lose(&self, why: impl fmt::Display) {
        if let Some(token) = self.term_tx.borrow().as_ref() {
            token.cancel();
        }
        self.term_tx.send_replace(None);
        self.leader_tx.send_replace(false);
        if let Some(m) = &self.metrics {
            m.is_leader.set(0);
            m.transitions.inc();
        }
        warn!(reason = %why, "lost leadership: the term is cancelled");
    }

    /// Hands the Lease back if we still hold it: no holder, renewed in the past, so any standby
    /// takes it at its next retry.
    async fn release(&self) {
        let attempt = async {
            let Some(mut lease) = self
                .lease
                .get()
                .await
                .map_err(|source| self.api_error("read", source))?
            else {
                return Ok(false);
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            let past = Timestamp::now()
                .checked_sub(self.config.timings.lease_duration)
                .unwrap_or(Timestamp::UNIX_EPOCH);
            spec.holder_identity = None;
            spec.acquire_time = None;
            spec.renew_time = Some(MicroTime(past));
            spec.lease_duration_seconds = Some(1);
            self.lease
                .replace(&lease, &PostParams::default())
                .await
                .map_err(|source| self.api_error("release", source))?;
            Ok::<_, LeaderError>(true)
        };
        let timeout = self.config.timings.request_timeout();
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(true)) => info!("released the lease"),
            Ok(Ok(false)) => debug!("not the holder at shutdown: nothing to release"),
            Ok(Err(error)) => {
                warn!(%error, "could not release the lease; standbys wait for it to expire")
            }
            Err(_) => warn!(
                ?timeout,
                "releasing the lease timed out; standbys wait for it to expire"
            ),
        }
    }

    fn note_transitions(&self, lease: &Lease) {
        if let Some(n) = lease.spec.as_ref().and_then(|s| s.lease_transitions) {
            self.transitions.store(n, Ordering::Relaxed);
        }
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            lease: self.lease_ref.clone(),
            action,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "operator-a";
    const OTHER: &str = "operator-b";
    const D: Duration = Duration::from_secs(15);

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    /// `now` shifted by `secs` (negative: in the past).
    fn at(millis: i64) -> Option<MicroTime> {
        let t = now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(millis))
            .expect("in range");
        Some(MicroTime(t))
    }

    fn lease(holder: Option<&str>, renew_ms_ago: Option<i64>, duration: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("nodewright-operator".into()),
                namespace: Some("nodewright".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renew_ms_ago.and_then(|ms| at(-ms)),
                acquire_time: at(-60_000),
                lease_duration_seconds: duration,
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    fn decide_for(lease: Option<&Lease>, unchanged_secs: u64, leading: bool) -> Decision {
        decide(&Observation {
            lease,
            now: now(),
            unchanged_for: Duration::from_secs(unchanged_secs),
            identity: ME,
            leading,
            lease_duration: D,
        })
    }

    fn wait() -> Decision {
        Decision::Wait {
            holder: OTHER.into(),
        }
    }

    fn take() -> Decision {
        Decision::Acquire {
            previous: Some(OTHER.into()),
        }
    }

    #[test]
    fn decision_table() {
        let no_spec = Lease {
            spec: None,
            ..lease(None, None, None)
        };
        let mut no_times = lease(Some(OTHER), None, Some(15));
        if let Some(s) = no_times.spec.as_mut() {
            s.acquire_time = None;
        }
        let mut acquired_only = lease(Some(OTHER), None, Some(15));
        if let Some(s) = acquired_only.spec.as_mut() {
            s.acquire_time = at(-20_000);
        }
        let free = Decision::Acquire { previous: None };
        let lost = Decision::Lost {
            holder: OTHER.into(),
        };
        #[rustfmt::skip]
        let rows: Vec<(&str, Option<Lease>, u64, bool, Decision)> = vec![
            ("absent", None, 0, false, Decision::Create),
            ("absent while leading (deleted under us)", None, 0, true, Decision::Create),
            ("no spec", Some(no_spec), 0, false, free.clone()),
            ("released: no holder", Some(lease(None, Some(1_000), Some(1))), 0, false, free.clone()),
            ("released: empty holder", Some(lease(Some(""), Some(1_000), Some(15))), 0, false, free.clone()),
            ("ours, fresh", Some(lease(Some(ME), Some(1_000), Some(15))), 0, true, Decision::Renew),
            ("ours after a restart", Some(lease(Some(ME), Some(1_000), Some(15))), 0, false, Decision::Renew),
            ("ours, long expired", Some(lease(Some(ME), Some(600_000), Some(15))), 99, false, Decision::Renew),
            ("theirs, fresh", Some(lease(Some(OTHER), Some(5_000), Some(15))), 0, false, wait()),
            ("theirs, fresh, we thought we led", Some(lease(Some(OTHER), Some(5_000), Some(15))), 0, true, lost.clone()),
            ("theirs, stale, we thought we led", Some(lease(Some(OTHER), Some(60_000), Some(15))), 99, true, lost),
            ("theirs, exactly at expiry", Some(lease(Some(OTHER), Some(15_000), Some(15))), 0, false, wait()),
            ("theirs, just past expiry", Some(lease(Some(OTHER), Some(15_001), Some(15))), 0, false, take()),
            ("theirs, long expired", Some(lease(Some(OTHER), Some(3_600_000), Some(15))), 0, false, take()),
            ("their clock 13s behind ours, alive", Some(lease(Some(OTHER), Some(14_000), Some(15))), 1, false, wait()),
            ("their clock 60s ahead, alive", Some(lease(Some(OTHER), Some(-60_000), Some(15))), 2, false, wait()),
            ("their clock ahead, silent for the duration", Some(lease(Some(OTHER), Some(-60_000), Some(15))), 15, false, take()),
            ("their own longer duration wins", Some(lease(Some(OTHER), Some(30_000), Some(60))), 30, false, wait()),
            ("their longer duration, then expired", Some(lease(Some(OTHER), Some(61_000), Some(60))), 0, false, take()),
            ("no duration: ours applies", Some(lease(Some(OTHER), Some(16_000), None)), 0, false, take()),
            ("zero duration: ours applies", Some(lease(Some(OTHER), Some(10_000), Some(0))), 0, false, wait()),
            ("negative duration: ours applies", Some(lease(Some(OTHER), Some(16_000), Some(-5))), 0, false, take()),
            ("no times: first look waits", Some(no_times.clone()), 0, false, wait()),
            ("no times: silent for the duration", Some(no_times), 15, false, take()),
            ("no renewTime: acquireTime counts", Some(acquired_only), 0, false, take()),
        ];
        for (name, lease, unchanged, leading, want) in rows {
            assert_eq!(
                decide_for(lease.as_ref(), unchanged, leading),
                want,
                "{name}"
            );
        }
    }

    fn config() -> LeaseConfig {
        LeaseConfig {
            namespace: "nodewright".into(),
            name: "nodewright-operator".into(),
            identity: ME.into(),
            timings: LeaseTimings::default(),
        }
    }

    fn spec(lease: &Lease) -> &LeaseSpec {
        lease.spec.as_ref().expect("spec")
    }

    #[test]
    fn claims_write_holder_times_and_transitions() {
        let created = claim(None, &Decision::Create, &config(), now());
        assert_eq!(
            created.metadata.name.as_deref(),
            Some("nodewright-operator")
        );
        assert_eq!(created.metadata.namespace.as_deref(), Some("nodewright"));
        let s = spec(&created);
        assert_eq!(s.holder_identity.as_deref(), Some(ME));
        assert_eq!(s.lease_transitions, Some(0));
        assert_eq!(s.lease_duration_seconds, Some(15));
        assert_eq!(s.renew_time, Some(MicroTime(now())));
        assert_eq!(s.acquire_time, Some(MicroTime(now())));

        let taken = claim(
            Some(lease(Some(OTHER), Some(20_000), Some(30))),
            &take(),
            &config(),
            now(),
        );
        let s = spec(&taken);
        assert_eq!(s.holder_identity.as_deref(), Some(ME));
        assert_eq!(s.lease_transitions, Some(4), "a new holder is a transition");
        assert_eq!(s.acquire_time, Some(MicroTime(now())));
        assert_eq!(
            s.lease_duration_seconds,
            Some(15),
            "our duration from now on"
        );
        assert_eq!(
            taken.metadata.resource_version.as_deref(),
            Some("7"),
            "precondition kept"
        );

        let renewed = claim(
            Some(lease(Some(ME), Some(2_000), Some(15))),
            &Decision::Renew,
            &config(),
            now(),
        );
        let s = spec(&renewed);
        assert_eq!(s.lease_transitions, Some(3), "renewing is no transition");
        assert_eq!(s.acquire_time, at(-60_000), "the term's start is kept");
        assert_eq!(s.renew_time, Some(MicroTime(now())));

        let free = claim(
            Some(lease(None, Some(2_000), Some(1))),
            &Decision::Acquire { previous: None },
            &config(),
            now(),
        );
        assert_eq!(spec(&free).lease_transitions, Some(4));
    }

    #[test]
    fn timings_must_nest() {
        assert!(LeaseTimings::default().check().is_ok());
        assert_eq!(
            LeaseTimings::default().request_timeout(),
            Duration::from_secs(5)
        );
        let t = |d: u64, r: u64, p: u64| LeaseTimings {
            lease_duration: Duration::from_millis(d),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
        };
        assert!(t(4_000, 3_000, 500).check().is_ok());
        for bad in [
            t(10_000, 10_000, 2_000),
            t(15_000, 2_000, 2_000),
            t(15_000, 10_000, 0),
            t(1_500, 1_000, 100),
            t(500, 400, 100),
        ] {
            let err = bad.check().expect_err("invalid");
            assert!(err.to_string().contains("renew deadline"), "{err}");
        }
    }

    #[tokio::test]
    async fn unconditional_handle_leads_until_shutdown() {
        let shutdown = CancellationToken::new();
        let mut handle = LeaderHandle::unconditional(&shutdown);
        assert!(handle.is_leader());
        assert_eq!(handle.is_leader_gauge(), 1);
        let term = handle.acquired().await.expect("leads");
        assert!(handle.term().is_some());
        shutdown.cancel();
        assert!(term.is_cancelled());
        assert!(
            handle.acquired().await.is_none(),
            "no new term after shutdown"
        );
        assert!(handle.term().is_none());
    }
}
