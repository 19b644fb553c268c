//! Every open connection's phase, the cap on their number, and the read deadlines that follow
//! from the phase.
//!
//! No client authenticates to an admission webhook, so anything that can reach the port can open
//! connections and stay silent. Two bounds keep the port answering the kube-apiserver:
//!
//! - **Deadlines by phase** (as Go's net/http: a header timeout starts at a request's first byte,
//!   an idle timeout covers the wait for it). A connection waiting for a request, whether it has
//!   served one ([`Phase::Idle`]) or not yet ([`Phase::Fresh`], from its TLS handshake), may wait
//!   [`crate::server::KEEP_ALIVE_IDLE`]; a request head must then be complete within the read
//!   timeout of its first byte ([`Phase::Head`]). A fresh connection gets the idle wait, not the
//!   read timeout, because the apiserver's client (Go's net/http Transport) keeps a connection it
//!   dialed for a request that another connection served first in its idle pool, unused, and sends
//!   a later request on it: closing it after the read timeout raced that request, which failed
//!   with "write: broken pipe" (rotation_load in CI, 10 s after a burst of dials). hyper's own
//!   header-read timer starts whenever it waits for a head, which ties the two together: either
//!   idle keep-alive connections of the apiserver are closed early (a request sent on one as it
//!   closes fails), or a slow head holds a connection for minutes. The same phases apply to
//!   HTTP/2, where hyper has no header or idle timeout at all (a request there is a stream; a
//!   connection is idle when it has none open). Bytes on an idle HTTP/2 connection start the read
//!   timeout as a head would, so a client that only pings an idle connection has it closed after
//!   the read timeout; the webhook sends no pings of its own (the apiserver calls webhooks over
//!   HTTP/1.1).
//!
//! The eviction can pick a connection in the instant between its request head arriving and the
//! request being marked started; that request then fails. Only a full table under a flood of new
//! connections does this, and the flood would otherwise be refused outright.
//! - **A cap**: at most `max` connections. At the cap a new connection takes the slot of the
//!   oldest one that never sent a byte of a request (a silent client's, or one the apiserver
//!   dialed and has not needed: the cheapest to lose), else of the one idle longest; when every
//!   connection is in a request, the new one is refused at once. Evicting rather than refusing
//!   means a flood of silent connections cannot lock the apiserver out while they wait.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// Where a connection is in its life; sets its read deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Handshaking or, handshaken, waiting for the first byte of its first request (since the
    /// instant).
    Fresh(Instant),
    /// Idle between requests (since the instant).
    Idle(Instant),
    /// Reading a request head whose first byte came at the instant.
    Head(Instant),
    /// Answering this many requests (bounded by the request timeout, not here).
    Busy(usize),
}

/// The deadlines of the phases.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For a request head, from its first byte.
    pub read: Duration,
    /// For a connection's next (or first) request to start.
    pub idle: Duration,
}

/// One connection's shared state: its phase and whether it was evicted.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    phase: Mutex<Phase>,
    timeouts: Timeouts,
    evicted: AtomicBool,
    evict: Notify,
    registry: Arc<Registry>,
}

impl Slot {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        // A poisoned lock only means a panic elsewhere while holding it; the phase is still a value.
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When the connection must have made progress by, in its current phase (`None` while busy).
    pub fn deadline(&self) -> Option<Instant> {
        match *self.phase() {
            Phase::Head(since) => Some(since + self.timeouts.read),
            Phase::Fresh(since) | Phase::Idle(since) => Some(since + self.timeouts.idle),
            Phase::Busy(_) => None,
        }
    }

    /// Bytes arrived: on a fresh or idle connection, a request has begun.
    fn on_bytes(&self) {
        let mut phase = self.phase();
        if let Phase::Fresh(_) | Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
        }
    }

    /// A request head was read; the connection is busy until the returned guard drops.
    pub fn request(self: &Arc<Self>) -> RequestGuard {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        };
        RequestGuard { slot: self.clone() }
    }

    /// The TLS handshake finished: the connection waits for its first request.
    pub fn handshaken(&self) {
        *self.phase() = Phase::Fresh(Instant::now());
    }

    /// Resolves when another connection took this one's slot.
    pub async fn evicted(&self) {
        let notified = self.evict.notified();
        if self.evicted.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.close(self.id);
    }
}

/// Marks one request of a connection in progress.
#[derive(Debug)]
pub struct RequestGuard {
    slot: Arc<Slot>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut phase = self.slot.phase();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
    }
}

/// What happened to a connection at [`Registry::open`].
#[derive(Debug)]
pub enum Admitted {
    /// Under the cap.
    Opened(Arc<Slot>),
    /// At the cap; another connection was evicted for it.
    Evicted(Arc<Slot>),
}

/// The open connections, at most `max`.
#[derive(Debug)]
pub struct Registry {
    max: usize,
    timeouts: Timeouts,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, std::sync::Weak<Slot>>>,
}

impl Registry {
    /// A registry admitting `max` connections (at least one).
    pub fn new(max: usize, timeouts: Timeouts) -> Arc<Registry> {
        Arc::new(Registry {
            max: max.max(1),
            timeouts,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn open_map(&self) -> MutexGuard<'_, HashMap<u64, std::sync::Weak<Slot>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open_map().len()
    }

    /// True when no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registers a new connection; `None` when every slot is in a request (refuse it).
    pub fn open(self: &Arc<Self>) -> Option<Admitted> {
        let mut open = self.open_map();
        let mut evicted = false;
        if open.len() >= self.max {
            let victim = open
                .iter()
                .filter_map(|(id, slot)| {
                    let slot = slot.upgrade()?;
                    if slot.evicted.load(Ordering::SeqCst) {
                        return None;
                    }
                    let phase = *slot.phase();
                    let rank = match phase {
                        Phase::Fresh(since) => (0, since),
                        Phase::Idle(since) => (1, since),
                        Phase::Head(_) | Phase::Busy(_) => return None,
                    };
                    Some((rank, *id, slot))
                })
                .min_by_key(|(rank, id, _)| (*rank, *id));
            let (_, id, slot) = victim?;
            slot.evicted.store(true, Ordering::SeqCst);
            slot.evict.notify_waiters();
            open.remove(&id);
            evicted = true;
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let slot = Arc::new(Slot {
            id,
            phase: Mutex::new(Phase::Fresh(Instant::now())),
            timeouts: self.timeouts,
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
            registry: self.clone(),
        });
        open.insert(id, Arc::downgrade(&slot));
        Some(if evicted {
            Admitted::Evicted(slot)
        } else {
            Admitted::Opened(slot)
        })
    }

    fn close(&self, id: u64) {
        self.open_map().remove(&id);
    }
}

/// A connection's stream with the deadline of its phase: a read or write that is still waiting
/// when the deadline passes fails with `TimedOut`, which ends the connection.
pub struct Deadlined<S> {
    inner: S,
    slot: Arc<Slot>,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl<S> Deadlined<S> {
    /// Wraps `inner`, the stream of the connection of `slot`.
    pub fn new(inner: S, slot: Arc<Slot>) -> Self {
        let now = Instant::now();
        Deadlined {
            inner,
            slot,
            sleep: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
        }
    }

    /// For an operation that is waiting: `Ready(Err)` once the phase's deadline has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.slot.deadline() else {
            return Poll::Pending;
        };
        if self.armed != Some(deadline) {
            self.sleep.as_mut().reset(deadline);
            self.armed = Some(deadline);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no progress within the deadline of {:?}",
                    *self.slot.phase()
                ),
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadlined<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.slot.on_bytes();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.expired(cx).map(Err),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadlined<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.expired(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.expired(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.expired(cx).map(Err),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Timeouts {
        Timeouts {
            read: Duration::from_secs(10),
            idle: Duration::from_secs(120),
        }
    }

    fn slot(admitted: Option<Admitted>) -> Arc<Slot> {
        match admitted.expect("admitted") {
            Admitted::Opened(s) | Admitted::Evicted(s) => s,
        }
    }

    /// `deadline` is `after` from some instant within `[before, now]`.
    fn due_after(deadline: Option<Instant>, before: Instant, after: Duration) {
        let deadline = deadline.expect("a deadline");
        assert!(
            deadline >= before + after && deadline <= Instant::now() + after,
            "{deadline:?} is not {after:?} after an instant since {before:?}"
        );
    }

    #[tokio::test]
    async fn deadlines_follow_the_phase() {
        let registry = Registry::new(4, timeouts());
        let before = Instant::now();
        let s = slot(registry.open());
        due_after(s.deadline(), before, Duration::from_secs(120));
        // Handshaken and silent, it waits as an idle one: the apiserver's pool keeps unused dials.
        let before = Instant::now();
        s.handshaken();
        due_after(s.deadline(), before, Duration::from_secs(120));
        let before = Instant::now();
        s.on_bytes();
        due_after(s.deadline(), before, Duration::from_secs(10));
        let guard = s.request();
        assert_eq!(s.deadline(), None, "no deadline while answering");
        s.on_bytes();
        assert_eq!(s.deadline(), None, "a body's bytes do not start a head");
        let second = s.request();
        drop(guard);
        assert_eq!(s.deadline(), None, "still one request in flight (h2)");
        let before = Instant::now();
        drop(second);
        due_after(s.deadline(), before, Duration::from_secs(120));
        let before = Instant::now();
        s.on_bytes();
        due_after(s.deadline(), before, Duration::from_secs(10));
        // More bytes of the same head do not move its deadline.
        let head = s.deadline();
        s.on_bytes();
        assert_eq!(s.deadline(), head);
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_fresh_then_the_longest_idle_is_evicted_never_a_busy_one() {
        let registry = Registry::new(3, timeouts());
        let busy = slot(registry.open());
        let _busy_request = busy.request();
        let idle = slot(registry.open());
        drop(idle.request());
        let fresh = slot(registry.open());
        assert_eq!(registry.len(), 3);

        let Some(Admitted::Evicted(newcomer)) = registry.open() else {
            panic!("a fresh connection is evicted at the cap");
        };
        assert!(fresh.evicted.load(Ordering::SeqCst));
        fresh.evicted().await;
        let _newcomer_request = newcomer.request();
        let Some(Admitted::Evicted(second)) = registry.open() else {
            panic!("then the idle one");
        };
        assert!(idle.evicted.load(Ordering::SeqCst));
        let _second_request = second.request();
        assert!(!busy.evicted.load(Ordering::SeqCst));
        assert!(registry.open().is_none(), "every slot busy: refused");
        assert_eq!(registry.len(), 3);
    }

    #[tokio::test]
    async fn a_closed_connection_frees_its_slot() {
        let registry = Registry::new(1, timeouts());
        let s = slot(registry.open());
        drop(s);
        assert!(registry.is_empty());
        assert!(matches!(registry.open(), Some(Admitted::Opened(_))));
    }
}
