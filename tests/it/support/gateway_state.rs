//! What a running gateway reports about itself: its metrics, its worker list and their health.

use super::{client, eventually, metric_sum, wait_ok};

/// The Prometheus text of `url/metrics`.
pub async fn metrics_text(url: &str) -> String {
    client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// The gateway's in-flight requests summed over its workers. A missing gauge is a failure,
/// not a zero (else "back to 0" would hold for a renamed metric).
pub async fn gateway_in_flight(gw_url: &str) -> f64 {
    const GAUGE: &str = "switchboard_worker_in_flight_requests";
    let text = metrics_text(gw_url).await;
    assert!(
        text.lines().any(|l| l.starts_with(&format!("{GAUGE}{{"))),
        "no {GAUGE} in {gw_url}/metrics:\n{text}"
    );
    metric_sum(&text, GAUGE)
}

/// The JSON body of `GET url`; panics, naming `url`, if nothing answered or the body is not JSON.
pub async fn get_json(url: &str) -> serde_json::Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// The gateway's `GET /workers` answer.
pub async fn workers(gw_url: &str) -> serde_json::Value {
    get_json(&format!("{gw_url}/workers")).await
}

/// Waits until the gateway counts every worker it knows as healthy. Readiness alone needs one:
/// a test that sent requests then could see the others join mid-test, and a key that should
/// stay on one worker move to a newly healthy one.
pub async fn all_workers_healthy(gw_url: &str) {
    wait_ok(&format!("{gw_url}/readiness")).await;
    eventually("every worker healthy", || async {
        let r = client().get(format!("{gw_url}/readiness")).send().await;
        match r {
            Ok(r) => r
                .json::<serde_json::Value>()
                .await
                .is_ok_and(|v| v["healthy_workers"] == v["total_workers"]),
            Err(_) => false,
        }
    })
    .await;
}
