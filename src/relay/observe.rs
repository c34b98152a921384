//! Token counts read out of forwarded responses (SGLang native chunks and OpenAI chunks alike),
//! so the byte-forwarding path measures what the token-id path does.

use serde::Deserialize;

/// Reads token counts out of SGLang native chunks and OpenAI chunks alike.
#[derive(Default)]
pub struct Observer {
    pub completion_tokens: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Content-bearing chunks, for OpenAI streams without a usage chunk.
    pub chunks: u64,
}

#[derive(Deserialize)]
struct AnyChunk<'a> {
    #[serde(default)]
    meta_info: Option<Meta>,
    #[serde(default)]
    usage: Option<UsageCounts>,
    #[serde(borrow, default)]
    choices: Option<Vec<ChoiceView<'a>>>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct UsageCounts {
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize)]
struct CachedDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow, default)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<DeltaView<'a>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow, default)]
    content: Option<std::borrow::Cow<'a, str>>,
}

impl Observer {
    /// New tokens this event carried.
    pub fn event(&mut self, data: &[u8]) -> u64 {
        let Ok(chunk) = serde_json::from_slice::<AnyChunk>(data) else {
            return 0;
        };
        self.usage(&chunk);
        if let Some(meta) = chunk.meta_info {
            let new = meta
                .completion_tokens
                .saturating_sub(self.completion_tokens);
            self.completion_tokens = self.completion_tokens.max(meta.completion_tokens);
            self.prompt_tokens = meta.prompt_tokens;
            self.cached_tokens = meta.cached_tokens;
            return new;
        }
        let has_text = chunk.choices.iter().flatten().any(|c| {
            c.text.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .is_some_and(|t| !t.is_empty())
        });
        if has_text {
            self.chunks += 1;
        }
        u64::from(has_text)
    }

    pub fn whole(&mut self, body: &[u8]) {
        if let Ok(chunk) = serde_json::from_slice::<AnyChunk>(body) {
            self.usage(&chunk);
            if let Some(meta) = chunk.meta_info {
                self.completion_tokens = meta.completion_tokens;
                self.prompt_tokens = meta.prompt_tokens;
                self.cached_tokens = meta.cached_tokens;
            }
        }
    }

    fn usage(&mut self, chunk: &AnyChunk) {
        if let Some(u) = &chunk.usage {
            self.completion_tokens = u.completion_tokens;
            self.prompt_tokens = u.prompt_tokens;
            self.cached_tokens = u
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens);
        }
    }
}
