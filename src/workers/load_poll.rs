//! Polling each worker's own load report: SGLang's `/v1/loads` (0.5.x), falling back to the
//! deprecated `/get_load` list; engines with neither (llama.cpp, vLLM) keep zeros and are
//! routed on the gateway's own bookings alone.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{EngineLoad, Registry, Worker};
use crate::upstream::Client;

#[derive(Deserialize)]
struct Loads {
    loads: Vec<RankLoad>,
}

#[derive(Deserialize, Default)]
struct RankLoad {
    #[serde(default)]
    num_running_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_waiting_uncached_tokens: u64,
}

#[derive(Deserialize)]
struct LegacyLoad {
    #[serde(default)]
    num_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_tokens: u64,
}

/// Parses either shape; data-parallel ranks are summed.
pub fn parse(v1_loads: Option<&[u8]>, get_load: Option<&[u8]>) -> Option<EngineLoad> {
    if let Some(l) = v1_loads.and_then(|b| serde_json::from_slice::<Loads>(b).ok()) {
        return Some(
            l.loads
                .iter()
                .fold(EngineLoad::default(), |acc, r| EngineLoad {
                    running_requests: acc.running_requests + r.num_running_reqs,
                    waiting_requests: acc.waiting_requests + r.num_waiting_reqs,
                    waiting_uncached_tokens: acc.waiting_uncached_tokens
                        + r.num_waiting_uncached_tokens,
                }),
        );
    }
    let ranks = get_load.and_then(|b| serde_json::from_slice::<Vec<LegacyLoad>>(b).ok())?;
    Some(
        ranks
            .iter()
            .fold(EngineLoad::default(), |acc, r| EngineLoad {
                running_requests: acc.running_requests
                    + r.num_reqs.saturating_sub(r.num_waiting_reqs),
                waiting_requests: acc.waiting_requests + r.num_waiting_reqs,
                // 0.5.9 reports used KV plus waiting prompt tokens together; the waiting part is unknown.
                waiting_uncached_tokens: acc.waiting_uncached_tokens
                    + if r.num_waiting_reqs > 0 {
                        r.num_tokens
                    } else {
                        0
                    },
            }),
    )
}

async fn poll_one(client: &Client, worker: &Worker, timeout: Duration) -> Option<EngineLoad> {
    let ok = |r: Result<(axum::http::StatusCode, bytes::Bytes), _>| {
        r.ok().filter(|(s, _)| s.is_success()).map(|(_, b)| b)
    };
    if let Some(body) = ok(client.get(worker, "/v1/loads", timeout).await) {
        if let Some(load) = parse(Some(&body), None) {
            return Some(load);
        }
    }
    let body = ok(client.get(worker, "/get_load", timeout).await)?;
    parse(None, Some(&body))
}

pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for w in registry.snapshot().iter().filter(|w| w.is_healthy()) {
                if let Some(load) =
                    poll_one(&client, w, interval.max(Duration::from_millis(200))).await
                {
                    w.set_engine_load(load);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_shapes() {
        let v1 = br#"{"version":"0.5.23","loads":[{"num_running_reqs":3,"num_waiting_reqs":2,"num_waiting_uncached_tokens":700},{"num_running_reqs":1}]}"#;
        assert_eq!(
            parse(Some(v1), None),
            Some(EngineLoad {
                running_requests: 4,
                waiting_requests: 2,
                waiting_uncached_tokens: 700
            })
        );
        let legacy = br#"[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":1,"num_tokens":900}]"#;
        assert_eq!(
            parse(None, Some(legacy)),
            Some(EngineLoad {
                running_requests: 4,
                waiting_requests: 1,
                waiting_uncached_tokens: 900
            })
        );
        assert_eq!(parse(Some(b"<html>"), Some(b"{}")), None);
    }
}
