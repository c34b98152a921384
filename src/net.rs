//! The TCP listener both servers use: TCP_NODELAY on every connection (without it a small SSE
//! chunk can wait ~40 ms for a delayed ACK), and an optional drop-everything switch for the
//! simulator's connection fault.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

pub type RefuseSwitch = Arc<dyn Fn() -> bool + Send + Sync>;

pub struct Listener {
    inner: TcpListener,
    refuse: Option<RefuseSwitch>,
}

impl Listener {
    pub fn new(inner: TcpListener) -> Listener {
        Listener {
            inner,
            refuse: None,
        }
    }

    pub fn with_refuse_switch(mut self, refuse: RefuseSwitch) -> Listener {
        self.refuse = Some(refuse);
        self
    }
}

impl axum::serve::Listener for Listener {
    type Io = TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (TcpStream, std::net::SocketAddr) {
        loop {
            let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            if self.refuse.as_ref().is_some_and(|r| r()) {
                drop(io);
                continue;
            }
            let _ = io.set_nodelay(true);
            return (io, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}
