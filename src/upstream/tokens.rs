//! One generation leg's token stream, from whichever wire its worker speaks: `/generate` over
//! HTTP, or `Generate` over gRPC. Both give the same text deltas, keep the output ids (for a
//! migration) and the decoder state, so the relay above has one loop for both.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::Either;

use super::generate::{self, Delta, GenerateStream};
use super::grpc::generate::{self as grpc_generate, GrpcStream};
use super::{Client, Origin, UpstreamError};
use crate::protocol::sglang::GenerateRequest;
use crate::tokenize::{IncrementalDecoder, Tokenizer};

pub enum TokenStream {
    Http(GenerateStream),
    Grpc(GrpcStream),
}

/// Sends the generation to `worker` over its wire; returns once the worker accepted the call.
pub async fn start(
    client: &Client,
    worker: &Arc<Origin>,
    tokenizer: Arc<Tokenizer>,
    request: &GenerateRequest<'_>,
    decoder: Option<IncrementalDecoder>,
) -> Result<TokenStream, UpstreamError> {
    if worker.is_grpc() {
        // PD pairs are HTTP workers (their bootstrap fields are `/generate`'s).
        let s = grpc_generate::start(client.grpc(), worker, &tokenizer, request, decoder).await?;
        return Ok(TokenStream::Grpc(s));
    }
    let s = generate::start(client, worker, tokenizer, request, decoder).await?;
    Ok(TokenStream::Http(s))
}

impl TokenStream {
    /// The next delta that carries anything; `None` after the finishing one.
    pub fn next_delta(
        &mut self,
    ) -> impl Future<Output = Result<Option<Delta>, UpstreamError>> + '_ {
        // The protocol's own future as it is, not moved into one more of ours per token.
        match self {
            TokenStream::Http(s) => Either::Left(s.next()),
            TokenStream::Grpc(s) => Either::Right(s.next()),
        }
    }

    /// The client left: counts what the worker still generates until the abort lands.
    pub fn count_leftover(&mut self, counter: prometheus::IntCounter) {
        match self {
            TokenStream::Http(s) => s.count_leftover(counter),
            TokenStream::Grpc(s) => s.count_leftover(counter),
        }
    }

    /// The decoder in the state it reached (`None` if the worker's own text was used).
    pub fn take_decoder(&mut self) -> Option<IncrementalDecoder> {
        match self {
            TokenStream::Http(s) => s.take_decoder(),
            TokenStream::Grpc(s) => s.take_decoder(),
        }
    }

    /// The output ids received so far on this leg.
    pub fn output_ids(&self) -> &[u32] {
        match self {
            TokenStream::Http(s) => s.output_ids(),
            TokenStream::Grpc(s) => s.output_ids(),
        }
    }

    /// The prompt's cached count as another worker reported it (a PD pair's prefill).
    pub fn set_cached_tokens(&mut self, cached: u32) {
        match self {
            TokenStream::Http(s) => s.set_cached_tokens(cached),
            TokenStream::Grpc(s) => s.set_cached_tokens(cached),
        }
    }

    /// We ended the answer at a stop string while the worker may still be generating.
    pub fn stopped_here(&self) -> bool {
        match self {
            TokenStream::Http(s) => s.stopped_here(),
            TokenStream::Grpc(s) => s.stopped_here(),
        }
    }
}
