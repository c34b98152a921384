//! TLS with rustls (ring provider): PEM files read once at startup into the worker client's
//! config (system roots, an extra CA, a client certificate for mTLS) and the listener's, and a
//! listener whose handshakes run beside `accept`, so one slow client cannot stall the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A client that opens a connection and never finishes its handshake gives it up after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const READY_QUEUE: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {reason}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{what} {path} holds no PEM certificate")]
    Empty { what: &'static str, path: PathBuf },
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |reason: String| TlsError::Pem {
        what,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        what,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// The system trust store, read once per process (a gateway builds one client; tests build many).
fn system_roots() -> &'static RootCertStore {
    static ROOTS: std::sync::OnceLock<RootCertStore> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        // Unreadable system certificates are skipped (as curl does); the rest still count.
        let native = rustls_native_certs::load_native_certs();
        for err in &native.errors {
            tracing::debug!(error = %err, "system CA certificate skipped");
        }
        roots.add_parsable_certificates(native.certs);
        roots
    })
}

/// Where the worker client's trust and identity come from.
#[derive(Debug, Default, Clone)]
pub struct ClientTls<'a> {
    /// Trusted besides the system roots.
    pub extra_ca: Option<&'a Path>,
    /// Certificate chain and key presented to workers that ask for one (mTLS).
    pub identity: Option<(&'a Path, &'a Path)>,
}

impl ClientTls<'_> {
    pub fn config(&self) -> Result<ClientConfig, TlsError> {
        let mut roots = system_roots().clone();
        if let Some(path) = self.extra_ca {
            for cert in certs("worker CA certificate", path)? {
                roots.add(cert)?;
            }
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        Ok(match self.identity {
            Some((cert, key_path)) => builder.with_client_auth_cert(
                certs("worker client certificate", cert)?,
                key("worker client key", key_path)?,
            )?,
            None => builder.with_no_client_auth(),
        })
    }
}

/// The listener's config from a certificate chain and its key (PEM); ALPN offers HTTP/2 and 1.1,
/// which the server tells apart on its own.
pub fn server_config(cert: &Path, key_path: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs("TLS certificate", cert)?, key("TLS key", key_path)?)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts TCP connections on a task of its own and hands over those whose handshake finished.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    /// The server dropped the listener (it stopped): stop accepting, close the socket.
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl TlsListener {
    pub fn new(
        mut tcp: super::Listener,
        local: SocketAddr,
        config: Arc<ServerConfig>,
    ) -> TlsListener {
        let (tx, ready) = tokio::sync::mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let acceptor = tokio::spawn(async move {
            loop {
                let (io, addr) = axum::serve::Listener::accept(&mut tcp).await;
                let (tls, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(io)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, addr)).await;
                        }
                        // Plain HTTP on the TLS port, a bad client certificate, a scanner.
                        Ok(Err(e)) => {
                            tracing::debug!(client = %addr, error = %e, "TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(client = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            ready,
            local,
            acceptor,
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task only ends when aborted, which happens when this is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for super::ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        super::ClientAddr(*stream.remote_addr())
    }
}
