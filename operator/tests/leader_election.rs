//! Leader election against a real kube-apiserver (the local control plane of `nodewright-e2e`):
//! one cluster, one test, several phases, each asserting outcomes rather than speed. Waits are
//! bounded generously only so a broken build fails instead of hanging.
//!
//! 1. Two electors: exactly one leads, and it is the Lease's holder.
//! 2. The leader shuts down: it releases the Lease, and the standby takes over without waiting for
//!    the Lease to expire.
//! 3. Another identity force-writes the Lease (a steal): the leader reports the loss at its next
//!    renewal; once the intruder's Lease expires, one of the contenders takes it again.
//! 4. The leader is partitioned from the apiserver (its connections go through a TCP proxy that
//!    starts dropping and black-holing traffic): it gives up leadership at its renew deadline,
//!    before the other replica takes over; healed, it contends again and leads once the other
//!    leaves (never one-shot).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_operator::metrics::LeaderMetrics;
use nodewright_operator::runtime::leader::{Elector, LeaderHandle, LeaseConfig, LeaseTimings};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "nodewright-operator";

/// Short enough for a quick test, long enough for a loaded 2-core machine: the renew deadline
/// leaves a request timeout of 3s, twice per deadline.
fn timings() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(6),
        retry_period: Duration::from_secs(1),
    }
}

/// Bound on any wait: far beyond anything the election needs, only there to end a broken run.
const BOUND: Duration = Duration::from_secs(60);

/// Each term as a reconciler sees it: (start, end when its token was cancelled).
type TermLog = Arc<Mutex<Vec<(Instant, Option<Instant>)>>>;

/// One running elector, with a log of its terms (start, end) as its reconcilers would see them.
struct Replica {
    identity: String,
    handle: LeaderHandle,
    metrics: LeaderMetrics,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    terms: TermLog,
}

impl Replica {
    fn start(client: kube::Client, namespace: &str, identity: &str) -> Replica {
        let config = LeaseConfig {
            namespace: namespace.to_owned(),
            name: LEASE.to_owned(),
            identity: identity.to_owned(),
            timings: timings(),
        };
        let metrics = LeaderMetrics::default();
        let (elector, handle) = Elector::new(client, config).expect("valid elector");
        let elector = elector.with_metrics(metrics.clone());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(elector.run(shutdown.clone()));
        // A stand-in reconciler: records when each term starts and when its token is cancelled.
        let terms: TermLog = Arc::default();
        let mut watcher = handle.clone();
        let log = terms.clone();
        tokio::spawn(async move {
            while let Some(term) = watcher.acquired().await {
                let index = {
                    let mut log = log.lock().expect("log");
                    log.push((Instant::now(), None));
                    log.len() - 1
                };
                term.cancelled().await;
                log.lock().expect("log")[index].1 = Some(Instant::now());
            }
        });
        Replica {
            identity: identity.to_owned(),
            handle,
            metrics,
            shutdown,
            task,
            terms,
        }
    }

    fn leads(&self) -> bool {
        self.handle.is_leader()
    }

    /// Start of the latest term.
    fn last_won(&self) -> Option<Instant> {
        self.terms.lock().expect("log").last().map(|t| t.0)
    }

    /// End of the latest term, if it ended.
    fn last_lost(&self) -> Option<Instant> {
        self.terms.lock().expect("log").last().and_then(|t| t.1)
    }

    /// Graceful shutdown: the term ends, then the Lease is released; returns when both are done.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(BOUND, self.task)
            .await
            .expect("the elector stops")
            .expect("the elector task does not panic");
    }
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < BOUND,
            "timed out after {BOUND:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get(LEASE)
        .await
        .expect("the lease is readable")
        .spec
        .and_then(|s| s.holder_identity)
}

/// A TCP proxy in front of the apiserver that can be cut: existing connections are reset, and new
/// ones are accepted but never forwarded (requests hang), as in a network partition.
struct Proxy {
    addr: SocketAddr,
    cut: Arc<Mutex<bool>>,
    forwarding: Arc<Mutex<Vec<JoinHandle<()>>>>,
    held: Arc<Mutex<Vec<TcpStream>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(Mutex::new(false));
        let forwarding: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, f, h) = (cut.clone(), forwarding.clone(), held.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if *c.lock().expect("cut") {
                    h.lock().expect("held").push(inbound);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                f.lock().expect("forwarding").push(task);
            }
        });
        Proxy {
            addr,
            cut,
            forwarding,
            held,
            accept,
        }
    }

    fn partition(&self) {
        *self.cut.lock().expect("cut") = true;
        for task in self.forwarding.lock().expect("forwarding").drain(..) {
            task.abort();
        }
    }

    fn heal(&self) {
        *self.cut.lock().expect("cut") = false;
        self.held.lock().expect("held").clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.partition();
    }
}

/// A client whose every connection goes through `proxy` (same TLS identity, other port).
async fn client_through(cluster: &Cluster, proxy: &Proxy) -> kube::Client {
    let mut config = cluster.config().await.expect("kubeconfig");
    let host = config.cluster_url.host().expect("server host").to_owned();
    config.cluster_url = format!("https://{host}:{}", proxy.addr.port())
        .parse()
        .expect("proxy url");
    kube::Client::try_from(config).expect("proxied client")
}

async fn upstream_addr(cluster: &Cluster) -> SocketAddr {
    let config = cluster.config().await.expect("kubeconfig");
    let host = config.cluster_url.host().expect("server host").to_owned();
    let port = config.cluster_url.port_u16().unwrap_or(443);
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("server resolves")
        .next()
        .expect("an address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_election_on_a_real_apiserver() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("nodewright_operator=debug")
        .try_init();
    let started = Instant::now();
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..Default::default()
    })
    .await
    .expect("the local control plane starts");
    eprintln!("cluster up after {:?}", started.elapsed());
    let namespace = cluster.create_namespace("leader").await.expect("namespace");
    let client = cluster.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);

    // Phase 1: exactly one of two leads, and it is the holder.
    let phase = Instant::now();
    let a = Replica::start(client.clone(), &namespace, "replica-a");
    let b = Replica::start(client.clone(), &namespace, "replica-b");
    wait_until("one replica leads", || a.leads() || b.leads()).await;
    let sample_end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < sample_end {
        assert!(!(a.leads() && b.leads()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };
    assert!(leader.leads() && !standby.leads(), "exactly one leads");
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(leader.identity.as_str())
    );
    assert_eq!(leader.metrics.is_leader.get(), 1);
    assert_eq!(standby.metrics.is_leader.get(), 0);
    assert_eq!(leader.handle.is_leader_gauge(), 1);
    assert!(leader.handle.term().is_some() && standby.handle.term().is_none());
    assert_eq!(
        leader.handle.lease_transitions(),
        0,
        "created, never handed over"
    );
    eprintln!("phase 1 (one leader) took {:?}", phase.elapsed());

    // Phase 2: graceful shutdown releases the Lease; the standby takes over well before the
    // Lease would have expired.
    let phase = Instant::now();
    let old_term_ended = leader.terms.clone();
    let old_identity = leader.identity.clone();
    leader.stop().await;
    // `stop` returns once the Lease is released: it no longer names the old leader (no holder,
    // or already the standby). A takeover by expiry would find it still naming the old leader.
    let after_stop = holder(&leases).await;
    assert_ne!(
        after_stop.as_deref(),
        Some(old_identity.as_str()),
        "the Lease was not released on graceful shutdown: standbys would wait for its expiry"
    );
    wait_until("the old leader's term ended with its elector", || {
        old_term_ended
            .lock()
            .expect("log")
            .iter()
            .all(|t| t.1.is_some())
    })
    .await;
    let took = wait_until("the standby leads after the release", || standby.leads()).await;
    eprintln!("the standby took over {took:?} after the release");
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(standby.identity.as_str())
    );
    assert_eq!(standby.handle.lease_transitions(), 1);
    assert_eq!(standby.metrics.transitions.get(), 1, "one gain so far");
    eprintln!("phase 2 (release and takeover) took {:?}", phase.elapsed());

    // Phase 3: a steal. The leader sees another holder at its next renewal and stops at once;
    // the intruder never renews, so its Lease expires and a contender takes it again.
    let phase = Instant::now();
    let upstream = upstream_addr(&cluster).await;
    let proxy = Proxy::start(upstream).await;
    let c = Replica::start(
        client_through(&cluster, &proxy).await,
        &namespace,
        "replica-c",
    );
    let first = standby;
    let before_steal = Instant::now();
    let renewed = serde_json::to_value(MicroTime(Timestamp::now())).expect("time");
    leases
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"holderIdentity": "intruder", "renewTime": renewed, "leaseDurationSeconds": 10}
            })),
        )
        .await
        .expect("the intruder writes the lease");
    let stolen = Instant::now();
    wait_until("the robbed leader reports the loss", || {
        !first.leads() && first.last_lost().is_some()
    })
    .await;
    let noticed = first
        .last_lost()
        .expect("the term ended")
        .duration_since(stolen);
    eprintln!("the robbed leader noticed the loss after {noticed:?}");
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some("intruder"),
        "the robbed leader stopped while the intruder's lease was live (at its next renewal, \
         not once that lease expired)"
    );
    assert!(
        !c.leads(),
        "the intruder's lease is live: nobody else leads yet"
    );
    wait_until("a contender takes the expired lease", || {
        first.leads() || c.leads()
    })
    .await;
    assert!(!(first.leads() && c.leads()), "two leaders at once");
    assert!(
        before_steal.elapsed() + Duration::from_millis(100) >= Duration::from_secs(10),
        "the intruder's live lease was taken after only {:?}",
        before_steal.elapsed()
    );
    eprintln!(
        "phase 3 (steal, then expiry) took {:?}; {} took the lease back",
        phase.elapsed(),
        if first.leads() {
            "the robbed replica"
        } else {
            "the proxied replica"
        }
    );

    // Phase 4: partition the proxied replica while it leads.
    let phase = Instant::now();
    let other = if first.leads() {
        // Hand over to the proxied replica: graceful stop, then a fresh direct replica stands by.
        first.stop().await;
        wait_until("the proxied replica leads", || c.leads()).await;
        Replica::start(client.clone(), &namespace, "replica-d")
    } else {
        first
    };
    assert!(c.leads() && !other.leads());
    proxy.partition();
    let cut = Instant::now();
    wait_until("the partitioned leader gives up", || {
        !c.leads() && c.last_lost().is_some()
    })
    .await;
    let gave_up = c.last_lost().expect("the term ended");
    assert!(
        gave_up.duration_since(cut) <= timings().renew_deadline + Duration::from_secs(1),
        "the partitioned leader held on for {:?}, past its renew deadline",
        gave_up.duration_since(cut)
    );
    wait_until("the other replica takes the expired lease", || {
        other.leads() && other.last_won().is_some()
    })
    .await;
    let other_won = other.last_won().expect("a term started");
    assert!(
        gave_up < other_won,
        "the partitioned leader stopped only {:?} after the other started",
        gave_up.duration_since(other_won)
    );
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(other.identity.as_str())
    );
    proxy.heal();
    // Healed, it contends again: a live lease keeps it standing by...
    tokio::time::sleep(timings().retry_period * 3).await;
    assert!(
        !c.leads() && other.leads(),
        "healed replica must not steal a live lease"
    );
    // ...and it leads once the other leaves.
    other.stop().await;
    wait_until("the healed replica leads again", || c.leads()).await;
    assert!(c.metrics.transitions.get() >= 3, "gained, lost, gained");
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-c"));
    eprintln!(
        "phase 4 (partition, heal, lead again) took {:?}",
        phase.elapsed()
    );

    c.stop().await;
    assert_eq!(holder(&leases).await, None, "released on shutdown");
    eprintln!("whole test took {:?}", started.elapsed());
}
