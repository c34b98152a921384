//! A worker's own load report, read field by field. SGLang's report differs by version: 0.5.23's
//! `/v1/loads` has every field and no `/get_load`; 0.5.9's `/v1/loads` has no
//! `num_waiting_uncached_tokens`, so that figure comes from its deprecated `/get_load` (used KV
//! plus waiting tokens, less the used KV `/v1/loads` gave). Each field is taken only from a
//! source that sent it, and which source that was is kept for `GET /workers`. A gRPC worker
//! reports through its `GetLoads` RPC, the same figures as `/v1/loads`.

use serde::{Deserialize, Serialize};

use super::EngineLoad;

/// Where one figure came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadSource {
    V1Loads,
    GetLoad,
    Metrics,
    /// A gRPC worker's `GetLoads`.
    GrpcGetLoads,
    /// No source sent it: the router counts it as zero.
    #[default]
    None,
}

/// Which source each figure of a worker's [`EngineLoad`] came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LoadSources {
    pub running_requests: LoadSource,
    pub waiting_requests: LoadSource,
    pub waiting_uncached_tokens: LoadSource,
}

/// What one source said; `None` for a field it does not send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    pub running: Option<u64>,
    pub waiting: Option<u64>,
    pub waiting_tokens: Option<u64>,
    /// KV tokens in use (0.5.x `/v1/loads`): what `/get_load`'s `num_tokens` adds waiting tokens to.
    pub used_tokens: Option<u64>,
}

impl Reading {
    /// With no request waiting there are no waiting tokens: 0.5.9's `/v1/loads` then needs no
    /// `/get_load` to say so, which halves an idle 0.5.9 worker's load-poll requests.
    fn implied(mut self) -> Reading {
        if self.waiting == Some(0) {
            self.waiting_tokens.get_or_insert(0);
        }
        self
    }
}

#[derive(Deserialize)]
struct Loads {
    loads: Vec<RankLoad>,
}

#[derive(Deserialize)]
struct RankLoad {
    dp_rank: Option<usize>,
    num_running_reqs: Option<u64>,
    num_waiting_reqs: Option<u64>,
    num_waiting_uncached_tokens: Option<u64>,
    num_used_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct LegacyLoad {
    dp_rank: Option<usize>,
    #[serde(default)]
    num_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_tokens: u64,
}

/// Sums a field over data-parallel ranks; present if any rank sent it.
fn sum<T>(items: &[T], field: impl Fn(&T) -> Option<u64>) -> Option<u64> {
    items
        .iter()
        .filter_map(field)
        .fold(None, |acc, v| Some(acc.unwrap_or(0) + v))
}

/// `/v1/loads`, either version.
pub fn v1_loads(body: &[u8]) -> Option<Reading> {
    let l: Loads = serde_json::from_slice(body).ok()?;
    Some(
        Reading {
            running: sum(&l.loads, |r| r.num_running_reqs),
            waiting: sum(&l.loads, |r| r.num_waiting_reqs),
            waiting_tokens: sum(&l.loads, |r| r.num_waiting_uncached_tokens),
            used_tokens: sum(&l.loads, |r| r.num_used_tokens),
        }
        .implied(),
    )
}

/// `/v1/loads` rank by rank (a data-parallel worker's units), indexed by `dp_rank` (by position
/// where a rank has none).
pub fn v1_loads_by_rank(body: &[u8]) -> Option<Vec<Reading>> {
    let l: Loads = serde_json::from_slice(body).ok()?;
    let mut ranks = vec![Reading::default(); l.loads.len()];
    for (i, r) in l.loads.iter().enumerate() {
        if let Some(slot) = ranks.get_mut(r.dp_rank.unwrap_or(i)) {
            *slot = Reading {
                running: r.num_running_reqs,
                waiting: r.num_waiting_reqs,
                waiting_tokens: r.num_waiting_uncached_tokens,
                used_tokens: r.num_used_tokens,
            }
            .implied();
        }
    }
    Some(ranks)
}

/// 0.5.9's `/get_load` rank by rank, each given that rank's used KV from `/v1/loads`.
pub fn get_load_by_rank(body: &[u8], used: &[Option<u64>]) -> Option<Vec<Reading>> {
    let list: Vec<serde_json::Value> = serde_json::from_slice(body).ok()?;
    let mut ranks = vec![Reading::default(); used.len()];
    for (i, item) in list.iter().enumerate() {
        let Ok(one) = serde_json::from_value::<LegacyLoad>(item.clone()) else {
            continue;
        };
        let rank = one.dp_rank.unwrap_or(i);
        if let (Some(slot), Ok(single)) = (ranks.get_mut(rank), serde_json::to_vec(&[item])) {
            if let Some(r) = get_load(&single, used.get(rank).copied().flatten()) {
                *slot = r;
            }
        }
    }
    Some(ranks)
}

/// 0.5.9's `/get_load` list. `num_tokens` is used KV plus the waiting requests' tokens: the
/// waiting part alone is known only given the used KV (`used_tokens`, from `/v1/loads`); without
/// it, the whole figure stands in while anything waits.
pub fn get_load(body: &[u8], used_tokens: Option<u64>) -> Option<Reading> {
    let ranks: Vec<LegacyLoad> = serde_json::from_slice(body).ok()?;
    let waiting: u64 = ranks.iter().map(|r| r.num_waiting_reqs).sum();
    let tokens: u64 = ranks.iter().map(|r| r.num_tokens).sum();
    let waiting_tokens = match used_tokens {
        Some(used) => tokens.saturating_sub(used),
        None if waiting > 0 => tokens,
        None => 0,
    };
    Some(Reading {
        running: Some(
            ranks
                .iter()
                .map(|r| r.num_reqs.saturating_sub(r.num_waiting_reqs))
                .sum(),
        ),
        waiting: Some(waiting),
        waiting_tokens: Some(waiting_tokens),
        used_tokens: None,
    })
}

/// A gRPC worker's `GetLoads`, summed over its data-parallel ranks (proto3 sends every field).
pub fn grpc_loads(r: &crate::protocol::grpc::pb::GetLoadsResponse) -> Reading {
    let total = |f: fn(&crate::protocol::grpc::pb::SchedulerLoad) -> i32| {
        Some(r.loads.iter().map(|l| f(l).max(0) as u64).sum())
    };
    Reading {
        running: total(|l| l.num_running_reqs),
        waiting: total(|l| l.num_waiting_reqs),
        waiting_tokens: total(|l| l.num_waiting_uncached_tokens),
        used_tokens: total(|l| l.num_used_tokens),
    }
}

/// `GetLoads` rank by rank (a data-parallel worker's units), indexed by `dp_rank` (by position
/// where a rank is out of range).
pub fn grpc_loads_by_rank(r: &crate::protocol::grpc::pb::GetLoadsResponse) -> Vec<Reading> {
    let count = |n: i32| Some(n.max(0) as u64);
    let mut ranks = vec![Reading::default(); r.loads.len()];
    for (i, l) in r.loads.iter().enumerate() {
        let at = usize::try_from(l.dp_rank)
            .ok()
            .filter(|&d| d < ranks.len())
            .unwrap_or(i);
        ranks[at] = Reading {
            running: count(l.num_running_reqs),
            waiting: count(l.num_waiting_reqs),
            waiting_tokens: count(l.num_waiting_uncached_tokens),
            used_tokens: count(l.num_used_tokens),
        };
    }
    ranks
}

/// Prometheus gauges that say the same: SGLang's own, or llama.cpp's. Neither has waiting tokens.
pub fn metrics(text: &str) -> Option<Reading> {
    let sum = |names: &[&str]| metric_sum(text, names);
    let running = sum(&["sglang:num_running_reqs", "llamacpp:requests_processing"])?;
    let waiting = sum(&["sglang:num_queue_reqs", "llamacpp:requests_deferred"]);
    Some(Reading {
        running: Some(running as u64),
        waiting: waiting.map(|w| w as u64),
        waiting_tokens: None,
        used_tokens: None,
    })
}

/// The sum of every series of the named metrics in a Prometheus text page (labels ignored);
/// `None` when none of them is there.
pub fn metric_sum(text: &str, names: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if names.contains(&&line[..name_end]) {
            let v: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// Fills what `first` (from `source`) lacks from `second` (from `fallback`), field by field.
pub fn merge(
    first: (Reading, LoadSource),
    second: Option<(Reading, LoadSource)>,
) -> (EngineLoad, LoadSources) {
    let (a, sa) = first;
    let pick = |own: Option<u64>, other: fn(&Reading) -> Option<u64>| -> (u64, LoadSource) {
        match (
            own,
            second
                .as_ref()
                .and_then(|(b, sb)| other(b).map(|v| (v, *sb))),
        ) {
            (Some(v), _) => (v, sa),
            (None, Some(found)) => found,
            (None, None) => (0, LoadSource::None),
        }
    };
    let (running, s_running) = pick(a.running, |b| b.running);
    let (waiting, s_waiting) = pick(a.waiting, |b| b.waiting);
    let (tokens, s_tokens) = pick(a.waiting_tokens, |b| b.waiting_tokens);
    (
        EngineLoad {
            running_requests: running,
            waiting_requests: waiting,
            waiting_uncached_tokens: tokens,
        },
        LoadSources {
            running_requests: s_running,
            waiting_requests: s_waiting,
            waiting_uncached_tokens: s_tokens,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_rank_by_rank() {
        let v1 = br#"{"loads":[{"dp_rank":1,"num_running_reqs":1,"num_waiting_reqs":0,"num_used_tokens":10},{"dp_rank":0,"num_running_reqs":3,"num_waiting_reqs":2,"num_used_tokens":50}]}"#;
        let ranks = v1_loads_by_rank(v1).unwrap();
        assert_eq!(ranks[0].running, Some(3));
        assert_eq!(ranks[1].running, Some(1));
        assert_eq!(ranks[0].waiting_tokens, None);
        let legacy = br#"[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":2,"num_tokens":450},{"dp_rank":1,"num_reqs":1,"num_waiting_reqs":0,"num_tokens":10}]"#;
        let g = get_load_by_rank(legacy, &[Some(50), Some(10)]).unwrap();
        assert_eq!(g[0].waiting_tokens, Some(400));
        assert_eq!(g[1].waiting_tokens, Some(0));
        assert_eq!(g[0].running, Some(3));
    }

    #[test]
    fn v0_5_23_loads_give_every_field() {
        let v1 = br#"{"version":"0.5.23","loads":[{"num_running_reqs":3,"num_waiting_reqs":2,"num_waiting_uncached_tokens":700,"num_used_tokens":50},{"num_running_reqs":1,"num_waiting_reqs":0,"num_waiting_uncached_tokens":0}]}"#;
        let r = v1_loads(v1).unwrap();
        let (load, sources) = merge((r, LoadSource::V1Loads), None);
        assert_eq!(
            load,
            EngineLoad {
                running_requests: 4,
                waiting_requests: 2,
                waiting_uncached_tokens: 700
            }
        );
        assert_eq!(sources.waiting_uncached_tokens, LoadSource::V1Loads);
    }

    #[test]
    fn v0_5_9_waiting_tokens_come_from_get_load_less_used_kv() {
        let v1 = br#"{"version":"0.5.9","loads":[{"num_running_reqs":1,"num_waiting_reqs":1,"num_used_tokens":300}]}"#;
        let r = v1_loads(v1).unwrap();
        assert_eq!(r.waiting_tokens, None);
        let legacy = br#"[{"dp_rank":0,"num_reqs":2,"num_waiting_reqs":1,"num_tokens":350}]"#;
        let fallback = get_load(legacy, r.used_tokens).unwrap();
        let (load, sources) = merge(
            (r, LoadSource::V1Loads),
            Some((fallback, LoadSource::GetLoad)),
        );
        assert_eq!(
            load,
            EngineLoad {
                running_requests: 1,
                waiting_requests: 1,
                waiting_uncached_tokens: 50
            }
        );
        assert_eq!(
            sources,
            LoadSources {
                running_requests: LoadSource::V1Loads,
                waiting_requests: LoadSource::V1Loads,
                waiting_uncached_tokens: LoadSource::GetLoad,
            }
        );
    }

    #[test]
    fn v0_5_9_with_nothing_waiting_has_no_waiting_tokens_to_ask_for() {
        let v1 = br#"{"version":"0.5.9","loads":[{"dp_rank":0,"num_running_reqs":2,"num_waiting_reqs":0,"num_used_tokens":300},{"dp_rank":1,"num_running_reqs":0,"num_waiting_reqs":3,"num_used_tokens":9}]}"#;
        let ranks = v1_loads_by_rank(v1).unwrap();
        assert_eq!(ranks[0].waiting_tokens, Some(0));
        assert_eq!(
            ranks[1].waiting_tokens, None,
            "waiting: /get_load says how much"
        );
        assert_eq!(v1_loads(v1).unwrap().waiting_tokens, None);
        let idle = br#"{"version":"0.5.9","loads":[{"num_running_reqs":0,"num_waiting_reqs":0,"num_used_tokens":0}]}"#;
        let (load, sources) = merge((v1_loads(idle).unwrap(), LoadSource::V1Loads), None);
        assert_eq!(load, EngineLoad::default());
        assert_eq!(sources.waiting_uncached_tokens, LoadSource::V1Loads);
    }

    #[test]
    fn legacy_alone_and_unknown_shapes() {
        let legacy = br#"[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":1,"num_tokens":900}]"#;
        let r = get_load(legacy, None).unwrap();
        assert_eq!(
            (r.running, r.waiting, r.waiting_tokens),
            (Some(4), Some(1), Some(900))
        );
        assert_eq!(v1_loads(b"<html>"), None);
        assert_eq!(get_load(b"{}", None), None);
        let (load, sources) = merge((Reading::default(), LoadSource::Metrics), None);
        assert_eq!(load, EngineLoad::default());
        assert_eq!(sources.running_requests, LoadSource::None);
    }

    #[test]
    fn reads_prometheus_gauges_of_sglang_and_llama_cpp() {
        let sglang = "# HELP x\nsglang:num_running_reqs{dp_rank=\"0\"} 3\nsglang:num_running_reqs{dp_rank=\"1\"} 2\nsglang:num_queue_reqs 4\n";
        let r = metrics(sglang).unwrap();
        assert_eq!(
            (r.running, r.waiting, r.waiting_tokens),
            (Some(5), Some(4), None)
        );
        let llama = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n";
        let r = metrics(llama).unwrap();
        assert_eq!((r.running, r.waiting), (Some(2), Some(1)));
        assert_eq!(metrics("other_metric 1\n"), None);
    }
}
