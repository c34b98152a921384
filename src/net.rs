//! The TCP listener both servers use: TCP_NODELAY on every connection (without it a small SSE
//! chunk can wait ~40 ms for a delayed ACK), and an optional drop-everything switch for the
//! simulator's connection fault.

pub mod tls;

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: String,
    pub source: std::io::Error,
}

/// Binds `host:port` and returns the listener with the address it really got (port 0 picks one).
pub async fn bind(host: &str, port: u16) -> Result<(TcpListener, std::net::SocketAddr), BindError> {
    let addr = format!("{host}:{port}");
    let fail = |source| BindError {
        addr: addr.clone(),
        source,
    };
    let tcp = TcpListener::bind(&addr).await.map_err(fail)?;
    let local = tcp.local_addr().map_err(fail)?;
    Ok((tcp, local))
}

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

/// The client's address, as handlers see it (`ConnectInfo<ClientAddr>`) through our listener.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Listener>>
    for ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Listener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

/// An error with its causes, `a: b: c`: HTTP clients' (hyper's, reqwest's) top-level messages
/// hide what happened (refused, DNS, TLS) in the source chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cur = c.source();
    }
    msg
}
