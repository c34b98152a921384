//! `grpc.health.v1.Health`, as `smg-grpc-servicer` serves it for SGLang (`health_frame.py`,
//! `SGLangHealthServicer`): two services, the overall server (`""`, liveness: the process is
//! up) and `sglang.grpc.scheduler.SglangScheduler` (readiness: warmed up, not draining, the
//! scheduler not stuck). An unknown service is `NOT_FOUND` on `Check`; `Watch` answers the
//! current status once, an unknown service as `SERVICE_UNKNOWN`. The fault knobs: readiness is
//! NOT_SERVING while `/health` is flapped down or under `--fault-grpc-not-serving`, and both
//! services answer after `--fault-slow-health-secs`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, BoxStream, StreamExt};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::sim::state::SimState;

/// The engine's service: what readiness probes (and the gateway) ask about.
const ENGINE_SERVICE: &str = crate::protocol::grpc::pb::sglang_scheduler_server::SERVICE_NAME;

pub struct HealthService {
    pub state: Arc<SimState>,
}

impl HealthService {
    /// `None` for a service the servicer does not know.
    async fn status(&self, service: &str) -> Option<ServingStatus> {
        let faults = self.state.faults.get();
        if faults.slow_health_secs > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(faults.slow_health_secs)).await;
        }
        match service {
            "" => Some(ServingStatus::Serving),
            ENGINE_SERVICE if faults.grpc_not_serving || self.state.faults.health_down() => {
                Some(ServingStatus::NotServing)
            }
            ENGINE_SERVICE => Some(ServingStatus::Serving),
            _ => None,
        }
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = req.into_inner().service;
        match self.status(&service).await {
            Some(s) => Ok(Response::new(answer(s))),
            None => Err(Status::not_found(format!("Unknown service: {service}"))),
        }
    }

    type WatchStream = BoxStream<'static, Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let status = self
            .status(&req.into_inner().service)
            .await
            .unwrap_or(ServingStatus::ServiceUnknown);
        Ok(Response::new(stream::iter([Ok(answer(status))]).boxed()))
    }
}
