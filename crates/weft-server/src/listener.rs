//! Accepting connections, bounded: at most `server.max_connections` sockets at once (an
//! upgraded websocket keeps its slot until it closes); a request head must arrive within
//! `server.header_timeout_ms`; an address may hold at most
//! `server.max_unauthenticated_per_address` connections that have not authenticated; and
//! when every slot is taken the oldest unauthenticated connection is closed to make room. So
//! half-open or trickling clients cannot hold the server, and one address cannot fill it.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// A socket holding one of the server's connection slots until it is dropped.
struct Counted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// Connections one address may hold before any of them authenticates (0: no cap).
    pub max_unauthenticated_per_address: usize,
}

/// A connection's standing: unauthenticated (counted against its address, first to be shed
/// when the server is full) until a request on it authenticates. Carried in every request's
/// extensions.
pub struct Ticket {
    id: u64,
    address: IpAddr,
    authenticated: AtomicBool,
    /// Cancelled to close the connection (it was shed).
    shed: CancellationToken,
    registry: Arc<Registry>,
}

impl Ticket {
    /// A request on this connection authenticated: it is no longer sheddable or counted.
    pub fn authenticated(&self) {
        if !self.authenticated.swap(true, Ordering::Relaxed) {
            self.registry.forget(self);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.authenticated.load(Ordering::Relaxed) {
            self.registry.forget(self);
        }
    }
}

/// Unauthenticated connections: how many each address holds, and each one's way to be shed,
/// oldest first.
#[derive(Default)]
struct Registry {
    inner: parking_lot::Mutex<Unauthenticated>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Unauthenticated {
    per_address: HashMap<IpAddr, usize>,
    oldest_first: BTreeMap<u64, CancellationToken>,
}

impl Registry {
    /// A ticket for a new connection from `address`, unless the address holds `max` (0: no
    /// cap) unauthenticated connections already.
    fn admit(self: &Arc<Self>, address: IpAddr, max: usize) -> Option<Arc<Ticket>> {
        let mut inner = self.inner.lock();
        let held = inner.per_address.entry(address).or_insert(0);
        if max > 0 && *held >= max {
            return None;
        }
        *held += 1;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let shed = CancellationToken::new();
        inner.oldest_first.insert(id, shed.clone());
        Some(Arc::new(Ticket {
            id,
            address,
            authenticated: AtomicBool::new(false),
            shed,
            registry: self.clone(),
        }))
    }

    fn forget(&self, ticket: &Ticket) {
        let mut inner = self.inner.lock();
        inner.oldest_first.remove(&ticket.id);
        if let Some(held) = inner.per_address.get_mut(&ticket.address) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                inner.per_address.remove(&ticket.address);
            }
        }
    }

    /// Close the oldest unauthenticated connection; false when there is none.
    fn shed_oldest(&self) -> bool {
        let oldest = self.inner.lock().oldest_first.pop_first();
        match oldest {
            Some((_, shed)) => {
                shed.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting and let open
/// HTTP exchanges finish (websockets close themselves on the server's shutdown token).
pub async fn accept(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let registry = Arc::new(Registry::default());
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    // HTTP/1 only: a version sniff would wait for the client's first bytes with no timeout.
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = take_slot(&slots, &registry) => match slot {
                Some(slot) => slot,
                None => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(ticket) = registry.admit(peer.ip(), limits.max_unauthenticated_per_address) else {
            tracing::debug!(%peer, "refused: too many unauthenticated connections from one address");
            continue;
        };
        // Frames are small and flushed in batches: Nagle would add delays.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let io = TokioIo::new(Counted {
            stream,
            _slot: slot,
        });
        let carried = ticket.clone();
        let service =
            TowerToHyperService::new(app.clone().map_request(move |request: Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(carried.clone());
                request
            }));
        let connection = builder.serve_connection(io, service).with_upgrades();
        let closing = closing.clone();
        connections.spawn(async move {
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = ticket.shed.cancelled() => {
                    tracing::debug!("shed an unauthenticated connection to make room");
                    return;
                }
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    tracing::info!("shutting down: no new connections");
    // Open exchanges get a moment; upgraded sockets close on the server's own token.
    closing.cancel();
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), connections.wait()).await;
}

/// A free connection slot; when there is none, the oldest unauthenticated connection is
/// closed to make one (a slowloris cannot hold the server), else it waits for one.
async fn take_slot(slots: &Arc<Semaphore>, registry: &Registry) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    registry.shed_oldest();
    slots.clone().acquire_owned().await.ok()
}

/// The connection cap in force: `server.max_connections`, else the process's file limit
/// minus a reserve for the database pool, the listener, files and logs.
pub fn connection_cap(configured: Option<usize>) -> usize {
    configured.unwrap_or_else(|| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        let descriptors = if ok { limit.rlim_cur as usize } else { 1024 };
        descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(16)
    })
}

/// File descriptors kept free for the database pool, the listener, files and logs.
const RESERVED_DESCRIPTORS: usize = 64;
