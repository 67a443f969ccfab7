//! A TCP proxy in front of PostgreSQL that a test can cut and restore, to
//! simulate a database outage without touching the shared server; or in
//! front of moto, on the port a compose service would have.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};

use tokio::{net::TcpListener, task::AbortHandle};

#[derive(Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, upstream)
    }

    /// A proxy listening on `addr` (a loopback address of the test's
    /// choosing: a service's port, under a name the test resolves to it).
    pub async fn start_on(addr: SocketAddr, upstream: String) -> std::io::Result<Self> {
        Ok(Self::serve(TcpListener::bind(addr).await?, upstream))
    }

    fn serve(listener: TcpListener, upstream: String) -> Self {
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (d, c) = (down.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if d.load(Ordering::SeqCst) {
                    drop(inbound); // refused while down
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                c.lock().unwrap().push(task.abort_handle());
            }
        });
        Self { addr, down, conns }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}
