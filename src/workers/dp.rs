//! Data-parallel workers (SGLang's `--dp-size N`): N schedulers, each with its own queue and
//! prefix cache, behind one address. Such a worker is routed as N rank units (`registry`), so
//! the policy sees each rank's load and cache and the chosen rank is named in the request;
//! without it the worker's own round robin would split every prefix's cache N ways.
//!
//! `dp_size` and the release (which names the rank field) are read from `/server_info` (a
//! `grpc://` worker: `GetServerInfo`'s server args and `sglang_version`) each time the worker
//! becomes healthy, before it takes traffic; a worker that does not answer it (another engine)
//! is routed whole. A gRPC request names its rank in `GenerateRequest.data_parallel_rank`
//! whatever the release.

use std::time::Duration;

use prost_types::value::Kind;
use serde_json::Value;

use super::{Registry, Worker};
use crate::protocol::grpc::pb;
use crate::protocol::sglang::{DpRank, RankField};
use crate::upstream::Client;

const INFO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds what a worker's answer can make the gateway allocate.
const MAX_DP_SIZE: u64 = 1024;

/// The rank units a `/server_info` calls for: none unless `dp_size` > 1.
pub fn ranks_of(info: &Value) -> Vec<DpRank> {
    let dp = info.get("dp_size").and_then(Value::as_u64).unwrap_or(1);
    if dp <= 1 {
        return Vec::new();
    }
    let field = RankField::for_version(info.get("version").and_then(Value::as_str));
    let size = dp.min(MAX_DP_SIZE) as u32;
    (0..size).map(|rank| DpRank { rank, size, field }).collect()
}

/// `GetServerInfo` as the `/server_info` fields [`ranks_of`] reads.
fn grpc_info(info: &pb::GetServerInfoResponse) -> Value {
    let dp_size = info
        .server_args
        .as_ref()
        .and_then(|a| a.fields.get("dp_size"))
        .and_then(|v| match v.kind {
            Some(Kind::NumberValue(n)) if n >= 1.0 => Some(n as u64),
            _ => None,
        });
    serde_json::json!({"dp_size": dp_size, "version": info.sglang_version})
}

/// Reads the worker's `/server_info` (`GetServerInfo`) and sets its rank units accordingly; a
/// failed read leaves them as they were.
pub async fn learn(client: &Client, registry: &Registry, worker: &Worker) {
    if !registry.routes_dp_ranks() {
        return;
    }
    let info = if worker.origin.is_grpc() {
        crate::upstream::grpc::server_info(client.grpc(), &worker.origin, INFO_TIMEOUT)
            .await
            .ok()
            .map(|i| grpc_info(&i))
    } else {
        match client
            .get(&worker.origin, "/server_info", INFO_TIMEOUT)
            .await
        {
            Ok((status, body)) if status.is_success() => {
                serde_json::from_slice::<Value>(&body).ok()
            }
            _ => None,
        }
    };
    let Some(info) = info else {
        return;
    };
    let ranks = ranks_of(&info);
    if registry.set_dp_ranks(worker.id, &ranks) && !ranks.is_empty() {
        tracing::info!(worker = %worker.url(), dp_size = ranks.len(), "data-parallel worker: routed per rank");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ranks_follow_dp_size_and_release() {
        assert!(ranks_of(&json!({"dp_size": 1, "version": "0.5.23"})).is_empty());
        assert!(ranks_of(&json!({})).is_empty());
        let r = ranks_of(&json!({"dp_size": 4, "version": "0.5.9"}));
        assert_eq!(r.len(), 4);
        assert_eq!(r[3].rank, 3);
        assert_eq!(r[0].field, RankField::DataParallelRank);
        let r = ranks_of(&json!({"dp_size": 2, "version": "0.5.23"}));
        assert_eq!(r[1].field, RankField::RoutedDpRank);
    }
}
