//! What each connection is doing (requests under way, its last read or
//! write), and the connections without a request under way that may give
//! their place at the cap.

use std::{
    net::IpAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

/// The connections with no request under way, oldest first, and by peer
/// address: at the cap, one gives its place to a new connection.
#[derive(Default)]
pub(super) struct Idle {
    inner: std::sync::Mutex<IdleInner>,
}

#[derive(Default)]
struct IdleInner {
    next: u64,
    /// Registration order → (since when, its peer, the connection's eviction).
    order: std::collections::BTreeMap<u64, (Instant, IpAddr, CancellationToken)>,
    /// Each peer's waiting connections, in registration order.
    by_peer: std::collections::HashMap<IpAddr, std::collections::BTreeSet<u64>>,
}

impl IdleInner {
    fn take(&mut self, key: u64) -> Option<CancellationToken> {
        let (_, peer, evict) = self.order.remove(&key)?;
        if let Some(keys) = self.by_peer.get_mut(&peer) {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_peer.remove(&peer);
            }
        }
        Some(evict)
    }
}

impl Idle {
    fn add(&self, peer: IpAddr, evict: &CancellationToken) -> u64 {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = i.next;
        i.next += 1;
        i.order.insert(key, (Instant::now(), peer, evict.clone()));
        i.by_peer.entry(peer).or_default().insert(key);
        key
    }

    fn remove(&self, key: u64) {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        i.take(key);
    }

    /// Makes room for a new connection from `newcomer`: closes the oldest
    /// waiting connection of the peer that has the most waiting, if that is
    /// another peer with several; else the oldest waiting connection of
    /// all, if it has waited `at_least`. Whether one was closed.
    pub(super) fn evict_for(&self, newcomer: IpAddr, at_least: Duration) -> bool {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let heaviest = i
            .by_peer
            .iter()
            .max_by_key(|(_, keys)| keys.len())
            .filter(|(peer, keys)| **peer != newcomer && keys.len() > 1)
            .and_then(|(_, keys)| keys.first().copied());
        let key = match heaviest {
            Some(key) => key,
            None => match i.order.first_key_value() {
                Some((&key, (since, ..))) if since.elapsed() >= at_least => key,
                _ => return false,
            },
        };
        match i.take(key) {
            Some(evict) => {
                evict.cancel();
                true
            }
            None => false,
        }
    }
}

/// What a connection is doing: requests under way, and when it last read or
/// wrote (ms after `start`); while none is under way, it is in `idle`
/// (unless it is beyond the cap, where it takes no place).
pub(super) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    requests: AtomicUsize,
    idle: Arc<Idle>,
    evicted: CancellationToken,
    /// Its key in `idle` while it waits there.
    waiting: std::sync::Mutex<Option<u64>>,
    /// Whether it takes a place (within the cap) that it can give up.
    evictable: bool,
    peer: IpAddr,
}

impl Activity {
    pub(super) fn new(
        idle: Arc<Idle>,
        peer: IpAddr,
        evicted: CancellationToken,
        evictable: bool,
    ) -> Self {
        let waiting = evictable.then(|| idle.add(peer, &evicted));
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
            idle,
            evicted,
            waiting: std::sync::Mutex::new(waiting),
            evictable,
            peer,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Out of `idle` (a request began, or the connection ended).
    fn leave_idle(&self) {
        if let Some(key) = self.waiting().take() {
            self.idle.remove(key);
        }
    }

    /// The connection ended: out of `idle` for good.
    pub(super) fn forget(&self) {
        self.evicted.cancel();
        self.leave_idle();
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        if self.requests.fetch_add(1, Ordering::Relaxed) == 0 {
            self.leave_idle();
        }
        Busy(self.clone())
    }

    /// When the connection is idle long enough, if nothing happens before.
    pub(super) fn idle_at(&self, idle: Duration) -> Instant {
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        if self.requests.load(Ordering::Relaxed) > 0 {
            Instant::now() + idle
        } else {
            last + idle
        }
    }

    pub(super) fn is_idle(&self, idle: Duration) -> bool {
        self.requests.load(Ordering::Relaxed) == 0 && Instant::now() >= self.idle_at(idle)
    }
}

/// A request under way on a connection, until dropped.
pub(super) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        a.touch();
        if a.requests.fetch_sub(1, Ordering::Relaxed) == 1
            && a.evictable
            && !a.evicted.is_cancelled()
        {
            let mut waiting = a.waiting();
            if waiting.is_none() {
                *waiting = Some(a.idle.add(a.peer, &a.evicted));
            }
        }
    }
}

/// The connection's socket, noting each read and write.
pub(super) struct Watched {
    pub(super) inner: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
