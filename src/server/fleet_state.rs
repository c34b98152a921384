//! The fleet's `internal_states`: what each worker's `/server_info` says about its schedulers,
//! folded into one entry, so a client that reads `internal_states[0]` (bench_serving's "Accept
//! length", `last_gen_throughput`) sees the whole fleet as it would see one SGLang server.
//!
//! [`aggregate`] is pure (a PD answer can build its `decode[0]` from the decode workers with
//! it); [`fetch`] asks the workers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::task::JoinSet;

use crate::upstream::Client;
use crate::workers::load_report::metric_sum;
use crate::workers::Worker;

/// One worker's report.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerState {
    pub id: u32,
    /// Its `/server_info` `internal_states` (one entry per data-parallel scheduler).
    pub internal_states: Vec<Value>,
    /// Tokens it generated over its lifetime (`sglang:generation_tokens_total`), when its
    /// `/metrics` says.
    pub generated_tokens: Option<f64>,
}

/// One entry for the fleet:
/// * `last_gen_throughput`: the sum over every scheduler of every worker;
/// * `avg_spec_accept_length`: tokens per verify round over the fleet. A worker's average is
///   its tokens over its rounds, so the fleet's is `Σ tokens / Σ (tokens / average)`: weighted
///   by the tokens each worker generated. When a reporting worker's token count is unknown
///   (no `/metrics`) every reporter counts the same. Absent when no worker reports one;
/// * every other field that all entries share with the same value (server args, as SGLang
///   0.5.9 puts them there), unchanged.
pub fn aggregate(workers: &[WorkerState]) -> Value {
    let entries: Vec<&Map<String, Value>> = workers
        .iter()
        .flat_map(|w| w.internal_states.iter())
        .filter_map(Value::as_object)
        .collect();
    let mut out = Map::new();
    if let Some((first, rest)) = entries.split_first() {
        for (key, value) in first.iter() {
            if rest.iter().all(|e| e.get(key) == Some(value)) {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    let throughput: Option<f64> = entries
        .iter()
        .filter_map(|e| e.get("last_gen_throughput").and_then(Value::as_f64))
        .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v));
    if let Some(t) = throughput {
        out.insert("last_gen_throughput".into(), t.into());
    }
    match accept_length(workers) {
        Some(a) => out.insert("avg_spec_accept_length".into(), a.into()),
        None => out.remove("avg_spec_accept_length"),
    };
    Value::Object(out)
}

/// The fleet's accept length (see [`aggregate`]).
fn accept_length(workers: &[WorkerState]) -> Option<f64> {
    // Per worker: the mean over its schedulers (they share its token count), and its weight.
    let reports: Vec<(f64, Option<f64>)> = workers
        .iter()
        .filter_map(|w| {
            let lengths: Vec<f64> = w
                .internal_states
                .iter()
                .filter_map(|e| e.get("avg_spec_accept_length").and_then(Value::as_f64))
                .filter(|a| a.is_finite() && *a > 0.0)
                .collect();
            let mean = lengths.iter().sum::<f64>() / lengths.len().max(1) as f64;
            (!lengths.is_empty()).then_some((mean, w.generated_tokens))
        })
        .collect();
    if reports.is_empty() {
        return None;
    }
    let weighted = reports.iter().all(|(_, t)| t.is_some_and(|t| t > 0.0));
    let (tokens, rounds) = reports.iter().fold((0.0, 0.0), |(t, r), &(a, w)| {
        let w = if weighted { w.unwrap_or(1.0) } else { 1.0 };
        (t + w, r + w / a)
    });
    Some(tokens / rounds)
}

/// Asks every worker for its `/server_info` and `/metrics` at once, each under `timeout`.
/// A worker that does not answer is left out.
pub async fn fetch(
    client: &Client,
    workers: &[Arc<Worker>],
    timeout: Duration,
) -> Vec<WorkerState> {
    let mut tasks = JoinSet::new();
    for (i, w) in workers.iter().enumerate() {
        let (client, origin, id) = (client.clone(), w.origin.clone(), w.id.0);
        tasks.spawn(async move {
            let info = client.get(&origin, "/server_info", timeout);
            let metrics = client.get(&origin, "/metrics", timeout);
            let (info, metrics) = tokio::join!(info, metrics);
            let internal_states = match info {
                Ok((s, body)) if s.is_success() => serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.get("internal_states").and_then(Value::as_array).cloned()),
                _ => None,
            }?;
            let generated_tokens = match metrics {
                Ok((s, body)) if s.is_success() => std::str::from_utf8(&body)
                    .ok()
                    .and_then(|t| metric_sum(t, &["sglang:generation_tokens_total"])),
                _ => None,
            };
            Some((
                i,
                WorkerState {
                    id,
                    internal_states,
                    generated_tokens,
                },
            ))
        });
    }
    let mut found: Vec<(usize, WorkerState)> =
        tasks.join_all().await.into_iter().flatten().collect();
    found.sort_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worker(id: u32, states: Value, tokens: Option<f64>) -> WorkerState {
        WorkerState {
            id,
            internal_states: states.as_array().cloned().unwrap_or_default(),
            generated_tokens: tokens,
        }
    }

    #[test]
    fn one_worker_passes_through() {
        let w = worker(
            0,
            json!([{"last_gen_throughput": 120.5, "avg_spec_accept_length": 2.93, "page_size": 1}]),
            Some(8192.0),
        );
        assert_eq!(
            aggregate(&[w]),
            json!({"last_gen_throughput": 120.5, "avg_spec_accept_length": 2.93, "page_size": 1})
        );
    }

    #[test]
    fn accept_length_is_tokens_over_rounds_and_throughput_sums() {
        // 3000 tokens at 3.0 = 1000 rounds; 1000 tokens at 2.0 = 500 rounds: 4000 / 1500.
        let a = worker(
            0,
            json!([{"last_gen_throughput": 100.0, "avg_spec_accept_length": 3.0, "page_size": 1}]),
            Some(3000.0),
        );
        let b = worker(
            1,
            json!([{"last_gen_throughput": 50.0, "avg_spec_accept_length": 2.0, "page_size": 16}]),
            Some(1000.0),
        );
        let v = aggregate(&[a, b]);
        let len = v["avg_spec_accept_length"].as_f64().unwrap_or(0.0);
        assert!((len - 4000.0 / 1500.0).abs() < 1e-12, "{v}");
        assert_eq!(v["last_gen_throughput"], 150.0);
        assert!(
            v.get("page_size").is_none(),
            "fields that differ are left out: {v}"
        );
    }

    #[test]
    fn unknown_token_counts_weigh_alike_and_silent_workers_are_skipped() {
        let a = worker(0, json!([{"avg_spec_accept_length": 3.0}]), None);
        let b = worker(1, json!([{"avg_spec_accept_length": 2.0}]), Some(10.0));
        let c = worker(2, json!([{"last_gen_throughput": 7.0}]), Some(99.0));
        let v = aggregate(&[a, b, c]);
        let len = v["avg_spec_accept_length"].as_f64().unwrap_or(0.0);
        assert!((len - 2.0 / (1.0 / 3.0 + 1.0 / 2.0)).abs() < 1e-12, "{v}");
        assert_eq!(v["last_gen_throughput"], 7.0);
    }

    #[test]
    fn no_reports_no_accept_length() {
        assert_eq!(aggregate(&[]), json!({}));
        let w = worker(0, json!([{}]), Some(1.0));
        assert!(aggregate(&[w]).get("avg_spec_accept_length").is_none());
    }
}
