//! Certificates made at test time (a CA, a server certificate for 127.0.0.1 and a client
//! certificate, all PEM files in a temp folder) and a TLS-terminating proxy in front of a plain
//! worker, optionally requiring a client certificate (mTLS), on 127.0.0.1.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Pki {
    /// Removed with the `Pki`, at the end of the test.
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    /// `ca.pem`; `server.pem`/`server.key` for 127.0.0.1 and localhost; `client.pem`/`client.key`;
    /// and `other-ca.pem`, a CA that signed none of them.
    pub fn generate(tag: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sb-tls-{tag}-"))
            .tempdir()
            .unwrap();
        let issuer = ca("switchboard test CA");
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", issuer.pem());
        write("other-ca.pem", ca("unrelated CA").pem());
        for (name, sans) in [
            (
                "server",
                vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ),
            ("client", vec!["gateway.test".to_owned()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(sans)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}.key"), key.serialize_pem());
        }
        Pki { dir }
    }

    fn certs(&self, file: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(self.dir.path().join(file))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The CA as reqwest takes it.
    pub fn reqwest_ca(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(&std::fs::read(self.dir.path().join("ca.pem")).unwrap())
            .unwrap()
    }

    /// A server config with the server certificate; with `client_ca`, clients must show a
    /// certificate that CA signed.
    fn server_config(&self, require_client_cert: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            for c in self.certs("ca.pem") {
                roots.add(c).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::from_pem_file(self.dir.path().join("server.key")).unwrap();
        Arc::new(
            builder
                .with_single_cert(self.certs("server.pem"), key)
                .unwrap(),
        )
    }
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A TLS-terminating proxy on 127.0.0.1 in front of `upstream` (an `http://` base URL); returns
/// its `https://` base URL. The task ends with the test's runtime.
pub async fn proxy(pki: &Pki, upstream: &str, require_client_cert: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    proxy_on(listener, pki, upstream, require_client_cert)
}

/// [`proxy`] on a listener the caller bound (an address handed out before it serves).
pub fn proxy_on(
    listener: tokio::net::TcpListener,
    pki: &Pki,
    upstream: &str,
    require_client_cert: bool,
) -> String {
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(require_client_cert));
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                // A refused handshake (unknown CA on the client side, no client certificate)
                // just closes the connection, as a real TLS server does.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    url
}
