//! The label values of the per-endpoint and per-stage series: a closed set, resolved to
//! metric handles once at start-up.

/// The routes we measure; an index into per-endpoint metric handles resolved at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
    Generate,
    Messages,
    Responses,
}

impl Endpoint {
    pub const ALL: [Endpoint; 5] = [
        Endpoint::Chat,
        Endpoint::Completions,
        Endpoint::Generate,
        Endpoint::Messages,
        Endpoint::Responses,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
            Endpoint::Generate => "generate",
            Endpoint::Messages => "messages",
            Endpoint::Responses => "responses",
        }
    }

    /// The OpenTelemetry GenAI `gen_ai.operation.name` of a request to this endpoint.
    pub fn operation(self) -> &'static str {
        match self {
            Endpoint::Chat | Endpoint::Messages | Endpoint::Responses => "chat",
            Endpoint::Completions => "text_completion",
            Endpoint::Generate => "generate_content",
        }
    }
}

/// Gateway stages measured per request.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    Parse,
    Tokenize,
    Route,
    UpstreamHeaders,
    UpstreamFirstToken,
    /// PD: a pair's prefill worker, from the request sent to its answer read (its KV handed over).
    Prefill,
}

impl Stage {
    pub(super) const ALL: [Stage; 6] = [
        Stage::Parse,
        Stage::Tokenize,
        Stage::Route,
        Stage::UpstreamHeaders,
        Stage::UpstreamFirstToken,
        Stage::Prefill,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            Stage::Parse => "parse",
            Stage::Tokenize => "template_tokenize",
            Stage::Route => "route",
            Stage::UpstreamHeaders => "upstream_connect",
            Stage::UpstreamFirstToken => "upstream_first_token",
            Stage::Prefill => "pd_prefill",
        }
    }
}
