//! `SglangScheduler`'s RPCs besides `Generate`, with `smg-grpc-servicer`'s answers: health
//! (the fault knobs apply as on `/health`), abort (always `success`, prefix match as the
//! scheduler does), model and server info, loads, the cache flush, KV events (`kv_events`);
//! what the simulator has no engine for (embeddings, LoRA, the tokenizer bundle) is refused as
//! the servicer refuses it when that part is not configured.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tonic::{Request, Response, Status};

use super::generate::{self, GenerateStream};
use super::kv_events;
use crate::protocol::grpc::pb;
use crate::protocol::grpc::pb::sglang_scheduler_server::SglangScheduler;
use crate::protocol::grpc::smg::grpc::common;
use crate::sim::state::SimState;

type Reply<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

pub struct Scheduler {
    state: Arc<SimState>,
}

impl Scheduler {
    pub fn new(state: Arc<SimState>) -> Scheduler {
        Scheduler { state }
    }
}

#[tonic::async_trait]
impl SglangScheduler for Scheduler {
    type GenerateStream = GenerateStream;

    async fn generate(&self, req: Request<pb::GenerateRequest>) -> Reply<GenerateStream> {
        generate::start(&self.state, req.into_inner()).map(Response::new)
    }

    async fn embed(&self, _: Request<pb::EmbedRequest>) -> Reply<pb::EmbedResponse> {
        Err(Status::invalid_argument(
            "the simulated model is a generation model, not an embedding one",
        ))
    }

    async fn health_check(
        &self,
        _: Request<pb::HealthCheckRequest>,
    ) -> Reply<pb::HealthCheckResponse> {
        let slow = self.state.faults.get().slow_health_secs;
        if slow > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(slow)).await;
        }
        let healthy = !self.state.faults.health_down();
        Ok(Response::new(pb::HealthCheckResponse {
            healthy,
            message: if healthy {
                "Health check passed"
            } else {
                "Health check probe failed"
            }
            .to_owned(),
        }))
    }

    async fn abort(&self, req: Request<pb::AbortRequest>) -> Reply<pb::AbortResponse> {
        let rid = req.into_inner().request_id;
        let s = &self.state;
        s.metrics.abort_requests.inc();
        let delay = s.faults.get().abort_delay_secs;
        if delay > 0.0 {
            let s = Arc::clone(s);
            let rid = rid.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs_f64(delay)).await;
                s.driver.abort_by_rid(&rid, false);
            });
        } else {
            s.driver.abort_by_rid(&rid, false);
        }
        // The servicer answers success once the abort is on its way to the scheduler.
        Ok(Response::new(pb::AbortResponse {
            success: true,
            message: format!("Request {rid} aborted"),
        }))
    }

    async fn get_model_info(
        &self,
        _: Request<pb::GetModelInfoRequest>,
    ) -> Reply<pb::GetModelInfoResponse> {
        let s = &self.state;
        let context = i32::try_from(s.context_length).unwrap_or(i32::MAX);
        Ok(Response::new(pb::GetModelInfoResponse {
            model_path: s.model_name.clone(),
            tokenizer_path: s.tokenizer_path.clone(),
            is_generation: true,
            weight_version: "default".into(),
            served_model_name: s.model_name.clone(),
            max_context_length: context,
            vocab_size: i32::try_from(s.tokenizer.vocab_size()).unwrap_or(i32::MAX),
            model_type: "simulated".into(),
            eos_token_ids: s
                .tokenizer
                .eos_token_ids()
                .iter()
                .filter_map(|&id| i32::try_from(id).ok())
                .collect(),
            max_req_input_len: context.saturating_sub(1),
            architectures: vec!["SimulatedForCausalLM".into()],
            ..Default::default()
        }))
    }

    async fn get_server_info(
        &self,
        _: Request<pb::GetServerInfoRequest>,
    ) -> Reply<pb::GetServerInfoResponse> {
        let s = &self.state;
        let loads = s.driver.loads();
        let now = super::super::state::unix_now();
        Ok(Response::new(pb::GetServerInfoResponse {
            server_args: struct_of(&s.server_args),
            scheduler_info: struct_of(&serde_json::json!({
                "max_total_num_tokens": loads.max_total_num_tokens,
                "max_running_requests": loads.max_running_requests,
                "max_req_input_len": s.context_length.saturating_sub(1),
            })),
            active_requests: count(loads.num_running_reqs + loads.num_waiting_reqs),
            is_paused: false,
            last_receive_timestamp: 0.0,
            uptime_seconds: now.saturating_sub(s.started_unix) as f64,
            sglang_version: s.version.as_str().to_owned(),
            server_type: "grpc".into(),
            start_time: Some(prost_types::Timestamp {
                seconds: i64::try_from(s.started_unix).unwrap_or(0),
                nanos: 0,
            }),
            max_total_num_tokens: count(loads.max_total_num_tokens),
        }))
    }

    async fn get_loads(&self, req: Request<pb::GetLoadsRequest>) -> Reply<pb::GetLoadsResponse> {
        let s = &self.state;
        let wanted = req.into_inner().dp_rank;
        // One entry per DP rank (the servicer reads each scheduler's snapshot), the filter
        // applied before the aggregate, as `GetLoads` does.
        let loads: Vec<pb::SchedulerLoad> = s
            .driver
            .rank_loads()
            .iter()
            .filter(|l| wanted.is_none_or(|w| i64::from(w) == l.dp_rank as i64))
            .map(|l| pb::SchedulerLoad {
                dp_rank: count(l.dp_rank),
                num_running_reqs: count(l.num_running_reqs),
                num_waiting_reqs: count(l.num_waiting_reqs),
                num_total_reqs: count(l.num_running_reqs + l.num_waiting_reqs),
                num_used_tokens: count(l.num_used_tokens),
                max_total_num_tokens: count(l.max_total_num_tokens),
                token_usage: l.token_usage,
                cache_hit_rate: l.cache_hit_rate,
                max_running_requests: count(l.max_running_requests),
                num_waiting_uncached_tokens: count(l.num_waiting_uncached_tokens),
                ..Default::default()
            })
            .collect();
        let n = loads.len().max(1) as f64;
        let aggregate = pb::AggregateMetrics {
            total_running_reqs: loads.iter().map(|l| l.num_running_reqs).sum(),
            total_waiting_reqs: loads.iter().map(|l| l.num_waiting_reqs).sum(),
            total_reqs: loads.iter().map(|l| l.num_total_reqs).sum(),
            avg_token_usage: loads.iter().map(|l| l.token_usage).sum::<f64>() / n,
            ..Default::default()
        };
        Ok(Response::new(pb::GetLoadsResponse {
            timestamp: super::super::state::unix_now().to_string(),
            version: s.version.as_str().to_owned(),
            dp_rank_count: count(loads.len()),
            aggregate: Some(aggregate),
            loads,
        }))
    }

    async fn flush_cache(
        &self,
        _: Request<common::FlushCacheRequest>,
    ) -> Reply<common::FlushCacheResponse> {
        let success = self.state.driver.flush_cache();
        Ok(Response::new(common::FlushCacheResponse {
            success,
            message: if success {
                "Cache flushed."
            } else {
                "Cache not flushed: the server is not idle."
            }
            .to_owned(),
        }))
    }

    async fn start_profile(
        &self,
        _: Request<common::StartProfileRequest>,
    ) -> Reply<common::ProfileResponse> {
        Ok(Response::new(no_profiler()))
    }

    async fn stop_profile(
        &self,
        _: Request<common::StopProfileRequest>,
    ) -> Reply<common::ProfileResponse> {
        Ok(Response::new(no_profiler()))
    }

    type GetTokenizerStream = BoxStream<common::GetTokenizerChunk>;

    async fn get_tokenizer(
        &self,
        _: Request<common::GetTokenizerRequest>,
    ) -> Reply<Self::GetTokenizerStream> {
        // The servicer's answer when it has no tokenizer directory to bundle.
        Err(Status::failed_precondition(
            "the simulator serves no tokenizer bundle; load the tokenizer from its path",
        ))
    }

    type SubscribeKvEventsStream = BoxStream<common::KvEventBatch>;

    async fn subscribe_kv_events(
        &self,
        req: Request<common::SubscribeKvEventsRequest>,
    ) -> Reply<Self::SubscribeKvEventsStream> {
        let s = &self.state;
        let relay = kv_events::Relay {
            version: s.version,
            page_size: s.page_size,
        };
        let start = req.into_inner().start_sequence_number;
        kv_events::subscribe(&s.kv_events_taps, start, relay).map(Response::new)
    }

    async fn load_lo_ra_adapter(
        &self,
        _: Request<pb::LoadLoRaAdapterRequest>,
    ) -> Reply<pb::LoadLoRaAdapterResponse> {
        Ok(Response::new(pb::LoadLoRaAdapterResponse {
            success: false,
            message: "LoRA is not enabled on this server".into(),
            loaded_lora_ids: Vec::new(),
        }))
    }

    async fn unload_lo_ra_adapter(
        &self,
        _: Request<pb::UnloadLoRaAdapterRequest>,
    ) -> Reply<pb::UnloadLoRaAdapterResponse> {
        Ok(Response::new(pb::UnloadLoRaAdapterResponse {
            success: false,
            message: "LoRA is not enabled on this server".into(),
            loaded_lora_ids: Vec::new(),
        }))
    }

    async fn list_loaded_lo_ra_adapters(
        &self,
        _: Request<pb::ListLoadedLoRaAdaptersRequest>,
    ) -> Reply<pb::ListLoadedLoRaAdaptersResponse> {
        Ok(Response::new(pb::ListLoadedLoRaAdaptersResponse::default()))
    }
}

fn no_profiler() -> common::ProfileResponse {
    common::ProfileResponse {
        success: false,
        message: "the simulator has no profiler".into(),
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A JSON object as a protobuf `Struct` (what the servicer sends its server args as).
fn struct_of(v: &serde_json::Value) -> Option<prost_types::Struct> {
    let prost_types::value::Kind::StructValue(s) = value_of(v).kind? else {
        return None;
    };
    Some(s)
}

fn value_of(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    use serde_json::Value as J;
    let kind = match v {
        J::Null => Kind::NullValue(0),
        J::Bool(b) => Kind::BoolValue(*b),
        J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        J::String(s) => Kind::StringValue(s.clone()),
        J::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(value_of).collect(),
        }),
        J::Object(o) => Kind::StructValue(prost_types::Struct {
            fields: o.iter().map(|(k, v)| (k.clone(), value_of(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}
