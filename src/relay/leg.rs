//! One leg of a generation: a worker picked through the retry loop, the `/generate` (or gRPC
//! `Generate`) request sent with the leg's ids, up to its first chunk; for a PD pair, the
//! prefill worker alongside.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use super::exchange::{Exchange, Placement};
use super::pd;
use super::reliability::AtOnce;
use super::retry::{self, Target};
use crate::error::GatewayError;
use crate::metrics::Stage;
use crate::protocol::sglang::{GenerateRequest, LegRanks, Pairing, SamplingParams};
use crate::routing::RouteRequest;
use crate::tokenize::IncrementalDecoder;
use crate::upstream::abort::Abort;
use crate::upstream::generate::Delta;
use crate::upstream::tokens::{self, TokenStream};
use crate::upstream::UpstreamError;

/// What one leg sends.
pub(super) struct Leg<'a> {
    pub input_ids: &'a [u32],
    pub params: &'a SamplingParams,
    pub session_key: Option<&'a str>,
    pub rid: &'a str,
    /// Output logprobs with this many top tokens each (`None`: not asked for).
    pub logprobs: Option<u32>,
    /// Workers to use while they can take it (see [`Target::prefer`]).
    pub prefer: Option<Placement>,
    /// Ask for the whole answer in one response where the worker can send it so (see
    /// `retry::Dest::at_once`).
    pub at_once: Option<AtOnce>,
}

/// One leg through the retry loop: `/generate` (a gRPC worker: `Generate`) with these ids, up
/// to the first chunk. With a `decoder`, the leg's text is decoded from its ids, continuing
/// from the decoder's state.
pub(super) async fn open_leg(
    exchange: &mut Exchange,
    leg: Leg<'_>,
    decoder: Option<&IncrementalDecoder>,
    tried: &mut retry::Tried,
) -> Result<(TokenStream, Delta), GatewayError> {
    let Leg {
        input_ids,
        params,
        session_key,
        rid,
        logprobs,
        prefer,
        at_once,
    } = leg;
    let relay = Arc::clone(exchange.relay());
    let target = Target {
        route: RouteRequest {
            prompt_ids: input_ids,
            session_key,
        },
        rid,
        abort: Abort::Rid,
        prefer,
        at_once,
    };
    retry::open(exchange, &target, tried, |dest| {
        let relay = Arc::clone(&relay);
        async move {
            let request = GenerateRequest {
                input_ids,
                sampling_params: params,
                stream: dest.at_once.is_none(),
                rid: &dest.rid,
                return_logprob: logprobs.is_some(),
                top_logprobs_num: logprobs.unwrap_or(0),
                bootstrap: dest.prefill.as_ref().map(|p| &p.bootstrap),
                ranks: LegRanks {
                    own: dest.worker.dp_rank(),
                    pairing: match &dest.prefill {
                        Some(p) => Pairing::DecodeLeg {
                            prefill: p.worker.dp_rank(),
                        },
                        None => Pairing::Alone,
                    },
                },
            };
            let decode = async {
                let started = Instant::now();
                // Boxed: the connect holds hyper's request future, which inline made the leg's
                // future (moved several times per request) kilobytes larger.
                let mut up = Box::pin(tokens::start(
                    &relay.client,
                    &dest.worker.origin,
                    Arc::clone(&relay.tokenizer),
                    &request,
                    decoder.cloned(),
                ))
                .instrument(crate::traces::stage("upstream_connect"))
                .await?;
                relay
                    .metrics
                    .stage(Stage::UpstreamHeaders, started.elapsed().as_secs_f64());
                match up.next_delta().await? {
                    Some(delta) => Ok((up, delta)),
                    None => Err(UpstreamError::Protocol {
                        url: dest.worker.url().to_owned(),
                        reason: "stream ended before any output".into(),
                    }),
                }
            };
            let Some(prefill) = &dest.prefill else {
                return decode.await;
            };
            let origin = &prefill.worker.origin;
            // The same request, on the prefill worker's rank.
            let prefill_request = GenerateRequest {
                ranks: LegRanks {
                    own: prefill.worker.dp_rank(),
                    pairing: Pairing::PrefillLeg,
                },
                ..request
            };
            let body = crate::upstream::generate::request_body(origin, &prefill_request)?;
            // Boxed: the pair's state is twice a lone leg's, and only PD legs need it.
            let ((mut up, mut first), prefilled) =
                Box::pin(pd::paired(&relay, prefill, "/generate", body, decode)).await?;
            // The prompt was cached (or not) on the prefill worker: that count is the usage's.
            if let Some(p) = prefilled {
                let cached = u32::try_from(p.cached_tokens).unwrap_or(u32::MAX);
                up.set_cached_tokens(cached);
                first.cached_tokens = cached;
            }
            Ok((up, first))
        }
    })
    .await
}
