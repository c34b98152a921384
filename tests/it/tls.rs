//! TLS: `https://` workers (behind a TLS-terminating proxy with a CA made at test time) trusted
//! through `--worker-ca-cert`, mTLS with `--worker-client-cert`/`--worker-client-key`, and the
//! gateway's own HTTPS listener (`--tls-cert`/`--tls-key`).

use std::time::Duration;

use serde_json::json;

use crate::support::fake_kube::{pod, FakeKube};
use crate::support::tls::{proxy, proxy_on, Pki};
use crate::support::{self, MODEL};

fn chat_body() -> serde_json::Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
}

/// Status and body of a chat request through `gw`.
async fn chat(client: &reqwest::Client, gw: &str) -> (u16, String) {
    let r = client
        .post(format!("{gw}/v1/chat/completions"))
        .json(&chat_body())
        .send()
        .await
        .expect("send");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// A client that trusts the test CA.
fn https_client(pki: &Pki) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(pki.reqwest_ca())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Waits for `/readiness` 200 over HTTPS.
async fn ready_https(client: &reqwest::Client, gw: &support::Proc) {
    support::eventually("the HTTPS gateway ready", || async {
        let r = client.get(format!("{}/readiness", gw.url)).send().await;
        matches!(r, Ok(r) if r.status().is_success())
    })
    .await;
}

#[tokio::test]
async fn https_worker_needs_its_ca_and_serves_with_it() {
    let pki = Pki::generate("worker");
    let sim = support::sim(&[]).await;
    let url = proxy(&pki, &sim.url, false).await;

    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &url,
            "--worker-ca-cert",
            &pki.path("ca.pem"),
        ],
    )
    .await;
    support::ready(&gw).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 200, "{body}");

    // A CA that did not sign the worker's certificate: no request gets through, and the
    // log names the certificate problem.
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &url,
            "--worker-ca-cert",
            &pki.path("other-ca.pem"),
        ],
    )
    .await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 503, "{body}");
    support::eventually("the reason logged", || async {
        gw.logs()
            .contains("invalid peer certificate: UnknownIssuer")
    })
    .await;
}

#[tokio::test]
async fn mtls_worker_admits_only_a_gateway_with_a_client_certificate() {
    let pki = Pki::generate("mtls");
    let sim = support::sim(&[]).await;
    let url = proxy(&pki, &sim.url, true).await;
    let ca = pki.path("ca.pem");

    let gw = support::gateway(&[], &["--worker-urls", &url, "--worker-ca-cert", &ca]).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 503, "{body}");
    support::eventually("the reason logged", || async {
        gw.logs().contains("CertificateRequired")
    })
    .await;

    let (cert, key) = (pki.path("client.pem"), pki.path("client.key"));
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &url,
            "--worker-ca-cert",
            &ca,
            "--worker-client-cert",
            &cert,
            "--worker-client-key",
            &key,
        ],
    )
    .await;
    support::ready(&gw).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 200, "{body}");
}

/// A worker first unreachable (still starting) and then refusing the gateway's handshake: the
/// log says both reasons, so the first, transient one does not hide the lasting one.
#[tokio::test]
async fn a_worker_not_ready_logs_its_reason_again_when_it_changes() {
    let pki = Pki::generate("late");
    let sim = support::sim(&[]).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("https://{addr}");
    let ca = pki.path("ca.pem");
    let gw = support::gateway(&[], &["--worker-urls", &url, "--worker-ca-cert", &ca]).await;
    support::eventually("the first reason logged", || async {
        gw.logs().contains("Connection refused")
    })
    .await;

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    proxy_on(listener, &pki, &sim.url, true);
    support::eventually("the new reason logged", || async {
        gw.logs().contains("CertificateRequired")
    })
    .await;
}

#[tokio::test]
async fn listener_serves_https_and_refuses_plain_http() {
    let pki = Pki::generate("listener");
    let sim = support::sim(&[]).await;
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let gw = support::gateway_https(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--worker-urls",
        &sim.url,
    ])
    .await;
    assert!(gw.url.starts_with("https://127.0.0.1:"), "{}", gw.url);
    let client = https_client(&pki);
    ready_https(&client, &gw).await;
    let (status, body) = chat(&client, &gw.url).await;
    assert_eq!(status, 200, "{body}");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = gw.url.replacen("https://", "http://", 1);
    let r = support::client()
        .get(format!("{plain}/health"))
        .send()
        .await;
    assert!(
        r.is_err(),
        "plain HTTP answered: {:?}",
        r.map(|r| r.status())
    );
    // Nor does a client that does not trust the certificate.
    let r = support::client()
        .get(format!("{}/health", gw.url))
        .send()
        .await;
    assert!(r.is_err(), "an untrusted certificate was accepted");
}

/// The OpenAI SDK (httpx trusting the test CA) through the gateway's HTTPS listener.
#[tokio::test]
async fn openai_sdk_through_the_https_listener() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let pki = Pki::generate("sdk");
    let sim = support::sim(&["--enable-cache-report"]).await;
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let gw = support::gateway_https(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--worker-urls",
        &sim.url,
    ])
    .await;
    ready_https(&https_client(&pki), &gw).await;
    let r = support::python::run(
        &py,
        "tests/python/openai_sdk_check.py",
        vec![gw.url.clone(), MODEL.into(), pki.path("ca.pem")],
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
}

/// `grpcs://` workers (issue 17): a gRPC sim behind the TLS-terminating proxy, trusted through
/// `--worker-ca-cert`; with mTLS, admitted only with the client certificate.
#[tokio::test]
async fn grpcs_worker_serves_over_tls_with_its_ca_and_client_certificate() {
    let pki = Pki::generate("grpcs");
    let sim = support::grpc_sim(&[]).await;
    let plain = sim.url.trim_start_matches("grpc://");
    let ca = pki.path("ca.pem");
    let url = proxy(&pki, plain, false)
        .await
        .replace("https://", "grpcs://");
    let gw = support::gateway(&[], &["--worker-urls", &url, "--worker-ca-cert", &ca]).await;
    support::ready(&gw).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 200, "{body}");

    let mtls = proxy(&pki, plain, true)
        .await
        .replace("https://", "grpcs://");
    let gw = support::gateway(&[], &["--worker-urls", &mtls, "--worker-ca-cert", &ca]).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 503, "{body}");
    let (cert, key) = (pki.path("client.pem"), pki.path("client.key"));
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &mtls,
            "--worker-ca-cert",
            &ca,
            "--worker-client-cert",
            &cert,
            "--worker-client-key",
            &key,
        ],
    )
    .await;
    support::ready(&gw).await;
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 200, "{body}");
}

/// Pods discovered with `--service-discovery-protocol grpcs` are `grpcs://` workers: a gRPC
/// sim behind the TLS proxy, found through the fake API server, serves a chat.
#[tokio::test]
async fn discovered_pods_can_be_grpcs_workers() {
    let pki = Pki::generate("discovery-grpcs");
    let sim = support::grpc_sim(&[]).await;
    let url = proxy(&pki, sim.url.trim_start_matches("grpc://"), false).await;
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("proxy port");
    let kube = FakeKube::start().await;
    kube.put(pod("tls", json!({"app": "sim"}), true, port));
    let (ca, kubeconfig) = (pki.path("ca.pem"), kube.kubeconfig.display().to_string());
    let gw = support::gateway_env(
        &[],
        &[
            "--service-discovery",
            "--selector",
            "app=sim",
            "--service-discovery-namespace",
            "default",
            "--service-discovery-protocol",
            "grpcs",
            "--worker-ca-cert",
            &ca,
        ],
        &[("KUBECONFIG", &kubeconfig)],
    )
    .await;
    support::ready(&gw).await;
    let workers = support::workers(&gw.url).await;
    assert_eq!(
        workers["workers"][0]["url"],
        format!("grpcs://127.0.0.1:{port}"),
        "{workers}"
    );
    let (status, body) = chat(&support::client(), &gw.url).await;
    assert_eq!(status, 200, "{body}");
}
