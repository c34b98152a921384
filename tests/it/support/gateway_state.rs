//! What a running gateway reports about itself: its metrics and its worker list.

use super::{client, metric_sum};

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

/// The gateway's `GET /workers` answer.
pub async fn workers(gw_url: &str) -> serde_json::Value {
    client()
        .get(format!("{gw_url}/workers"))
        .send()
        .await
        .expect("GET /workers")
        .json()
        .await
        .expect("/workers json")
}
