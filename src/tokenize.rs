//! Tokenizer, chat templates and streaming detokenization for the gateway.
//!
//! `Tokenizer` wraps an HF `tokenizer.json` plus what `tokenizer_config.json`
//! adds (special tokens, chat template, max length). It is an `Arc` inside,
//! so cloning is cheap and it can be shared by many tasks.

mod chat_input;
mod chat_template;
mod config;
mod content;
mod detokenize;
mod error;
mod plain_words;
mod segments;
#[cfg(test)]
mod tests;
mod text_bound;

pub use chat_input::ChatTemplateInput;
pub use chat_template::{python_json_dumps, python_json_dumps_ascii, ContentFormat};
pub use detokenize::{DecodeDelta, IncrementalDecoder};
pub use error::TokenizeError;

use chat_template::ChatTemplate;
use config::TokenizerConfig;

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Prompts longer than this are tokenized on the blocking pool: a few milliseconds of
/// tokenizing on an I/O thread would delay every stream that thread serves.
pub const OFF_THREAD_BYTES: usize = 16 * 1024;

/// `encode(text, true)`, moved off the I/O threads when the text is long.
pub async fn encode_off_thread(tok: &Tokenizer, text: String) -> Result<Vec<u32>, TokenizeError> {
    if text.len() < OFF_THREAD_BYTES {
        return tok.encode(&text, true);
    }
    let tok = tok.clone();
    tokio::task::spawn_blocking(move || tok.encode(&text, true))
        .await
        .map_err(|e| TokenizeError::Encode(format!("tokenizer task failed: {e}")))?
}

/// A loaded tokenizer. Cheap to clone (shared `Arc`), `Send + Sync`.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

/// Short on purpose: the derived form would print the whole vocabulary.
impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("eos_token_ids", &self.inner.eos_ids)
            .field("model_max_length", &self.inner.config.model_max_length)
            .field("chat_template", &self.inner.template)
            .finish()
    }
}

#[derive(Clone)]
struct Inner {
    hf: tokenizers::Tokenizer,
    config: TokenizerConfig,
    template: Option<ChatTemplate>,
    eos_ids: Vec<u32>,
    /// Sorted ids of added tokens flagged `special`.
    special_ids: Vec<u32>,
    /// Piecewise cached encoding of prompts, where it gives the same ids as a plain encode.
    segmenter: Option<Arc<segments::Segmenter>>,
    /// The quick way to encode a plain word the piece cache lacks, where it gives the same ids.
    plain_words: Option<plain_words::PlainWords>,
    /// `add_special_tokens` adds no ids for this tokenizer.
    adds_nothing: bool,
    /// See [`Tokenizer::max_bytes_per_token`].
    max_bytes_per_token: Option<usize>,
    /// Counted once: `tokenizers` looks every added token up to count them.
    vocab_size: usize,
    /// The special tokens as chat template variables.
    template_vars: Arc<chat_input::SpecialTokenVars>,
}

/// The tokenizer as the segmenter calls it for pieces its cache lacks.
struct PieceEncoder<'a> {
    hf: &'a tokenizers::Tokenizer,
    plain_words: Option<&'a plain_words::PlainWords>,
}

impl segments::Encode for PieceEncoder<'_> {
    fn with_offsets(&self, text: &str) -> Result<segments::Encoded, TokenizeError> {
        let enc = self
            .hf
            .encode(text, false)
            .map_err(|e| TokenizeError::Encode(e.to_string()))?;
        let starts = enc.get_offsets().iter().map(|&(start, _)| start);
        Ok(enc.get_ids().iter().copied().zip(starts).collect())
    }

    fn pieces(&self, pieces: &[&str]) -> Vec<Option<Vec<u32>>> {
        match self.plain_words {
            Some(words) => words.encode_many(self.hf, pieces),
            None => vec![None; pieces.len()],
        }
    }
}

impl Tokenizer {
    /// Load `tokenizer.json` and `tokenizer_config.json` from `dir`, plus the
    /// optional `generation_config.json` (extra eos ids) and
    /// `chat_template.jinja` (overrides the config's template, as in HF).
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, TokenizeError> {
        let read = |name: &str| -> Result<Option<Vec<u8>>, TokenizeError> {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(TokenizeError::Load(path, e.to_string())),
            }
        };
        let tok_path = dir.join("tokenizer.json");
        let tok_json = read("tokenizer.json")?
            .ok_or_else(|| TokenizeError::Load(tok_path.clone(), "file not found".into()))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let mut config = match read("tokenizer_config.json")? {
            Some(b) => TokenizerConfig::parse(&b).map_err(|r| TokenizeError::Load(cfg_path, r))?,
            None => {
                tracing::warn!(dir = %dir.display(), "no tokenizer_config.json: no chat template or special tokens");
                TokenizerConfig::default()
            }
        };
        if let Some(b) = read("generation_config.json")? {
            config
                .add_generation_config(&b)
                .map_err(|r| TokenizeError::Load(dir.join("generation_config.json"), r))?;
        }
        if let Some(b) = read("chat_template.jinja")? {
            let src = String::from_utf8(b)
                .map_err(|e| TokenizeError::Load(dir.join("chat_template.jinja"), e.to_string()))?;
            config.chat_template = Some(src);
            config.tool_use_template = None;
        }
        Self::build(&tok_json, tok_path, config)
    }

    /// Load from in-memory `tokenizer.json` and `tokenizer_config.json`.
    pub fn from_bytes(
        tokenizer_json: &[u8],
        tokenizer_config_json: &[u8],
    ) -> Result<Tokenizer, TokenizeError> {
        let config = TokenizerConfig::parse(tokenizer_config_json)
            .map_err(|r| TokenizeError::Load(PathBuf::from("<tokenizer_config.json>"), r))?;
        Self::build(tokenizer_json, PathBuf::from("<tokenizer.json>"), config)
    }

    fn build(
        tok_json: &[u8],
        tok_path: PathBuf,
        config: TokenizerConfig,
    ) -> Result<Tokenizer, TokenizeError> {
        let mut hf = tokenizers::Tokenizer::from_bytes(tok_json)
            .map_err(|e| TokenizeError::Load(tok_path.clone(), e.to_string()))?;
        // Prompts must never be cut or padded behind the gateway's back.
        hf.with_truncation(None)
            .map_err(|e| TokenizeError::Load(tok_path, e.to_string()))?;
        hf.with_padding(None);

        let mut special_ids: Vec<u32> = hf
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        special_ids.sort_unstable();

        let mut eos_ids = Vec::new();
        if let Some(eos) = &config.eos_token {
            match hf.token_to_id(eos) {
                Some(id) => eos_ids.push(id),
                None => tracing::warn!(token = %eos, "eos_token is not in the vocabulary"),
            }
        }
        for id in &config.generation_eos_ids {
            if !eos_ids.contains(id) {
                eos_ids.push(*id);
            }
        }

        let added = hf.get_added_tokens_decoder();
        let splits = |t: &tokenizers::AddedToken| {
            t.special && !t.lstrip && !t.rstrip && !t.single_word && !t.normalized
        };
        let splitters: Vec<(String, u32)> = added
            .iter()
            .filter(|(_, t)| splits(t))
            .map(|(id, t)| (t.content.clone(), *id))
            .collect();
        // The other added tokens are matched inside pieces: none may strip or hold whitespace.
        let pieces_safe = added.values().filter(|t| !splits(t)).all(|t| {
            !t.lstrip && !t.rstrip && !t.single_word && !t.content.contains(char::is_whitespace)
        });
        // Piecewise encoding only where it provably gives the same ids on a hard sample, both
        // while the cache fills and from it; cuts between digits too if they pass as well.
        let contents: Vec<String> = added.values().map(|t| t.content.clone()).collect();
        let sample = segments::self_check_sample(&contents);
        let plain = hf.encode_fast(sample.as_str(), false).ok();
        let plain_words = plain_words::PlainWords::new(&hf);
        let encoder = PieceEncoder {
            hf: &hf,
            plain_words: plain_words.as_ref(),
        };
        let passes = |seg: &segments::Segmenter| {
            let piecewise = || seg.encode(&sample, &encoder);
            plain.as_ref().is_some_and(|plain| {
                (0..2).all(|_| piecewise().is_ok_and(|ids| ids == plain.get_ids()))
            })
        };
        let candidates = [
            segments::Segmenter::new(splitters.clone()).map(segments::Segmenter::with_digit_cuts),
            segments::Segmenter::new(splitters),
        ];
        let segmenter = candidates
            .into_iter()
            .flatten()
            .filter(|_| pieces_safe)
            .find(|seg| passes(seg));
        // With no post-processor tokens (no BOS/EOS added), `add_special_tokens` changes nothing
        // and raw prompts can be segmented too.
        let adds_nothing = hf
            .encode_fast("probe text", true)
            .ok()
            .zip(hf.encode_fast("probe text", false).ok())
            .is_some_and(|(a, b)| a.get_ids() == b.get_ids());
        let template = match &config.chat_template {
            Some(src) => Some(ChatTemplate::new(
                src.clone(),
                config.tool_use_template.clone(),
            )?),
            None => None,
        };
        let max_bytes_per_token = text_bound::bytes_per_token_bound(&hf);
        let vocab_size = hf.get_vocab_size(true);
        let template_vars = Arc::new(chat_input::SpecialTokenVars::new(&config));
        Ok(Tokenizer {
            inner: Arc::new(Inner {
                vocab_size,
                template_vars,
                hf,
                config,
                template,
                eos_ids,
                special_ids,
                segmenter: segmenter.map(Arc::new),
                plain_words,
                adds_nothing,
                max_bytes_per_token,
            }),
        })
    }

    /// Replace the chat template (the CLI's `--chat-template FILE`).
    pub fn with_chat_template(self, template_source: String) -> Result<Self, TokenizeError> {
        let template = ChatTemplate::new(template_source.clone(), None)?;
        let mut inner = Arc::unwrap_or_clone(self.inner);
        inner.config.chat_template = Some(template_source);
        inner.config.tool_use_template = None;
        inner.template = Some(template);
        Ok(Tokenizer {
            inner: Arc::new(inner),
        })
    }

    /// Ids of `text`; words and repeated messages come from the piece cache where the tokenizer
    /// allows it (see `segments`).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizeError> {
        match &self.inner.segmenter {
            Some(seg) if !add_special_tokens || self.inner.adds_nothing => {
                let encoder = PieceEncoder {
                    hf: &self.inner.hf,
                    plain_words: self.inner.plain_words.as_ref(),
                };
                seg.encode(text, &encoder)
            }
            _ => self.encode_plain(text, add_special_tokens),
        }
    }

    fn encode_plain(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizeError> {
        // encode_fast: same ids, skips the offsets we never use.
        self.inner
            .hf
            .encode_fast(text, add_special_tokens)
            .map(|enc| enc.get_ids().to_vec())
            .map_err(|e| TokenizeError::Encode(e.to_string()))
    }

    /// How prompts are cut for the piece cache: "off" where cutting could change ids.
    pub fn piece_cuts(&self) -> &'static str {
        match &self.inner.segmenter {
            None => "off",
            Some(seg) if seg.digit_cuts() => "words and digits",
            Some(_) => "words",
        }
    }

    /// Estimated bytes held by the piece cache (0 when it is off).
    pub fn cached_bytes(&self) -> usize {
        self.inner
            .segmenter
            .as_ref()
            .map_or(0, |seg| seg.cached_bytes())
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizeError> {
        self.inner
            .hf
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizeError::Decode(e.to_string()))
    }

    /// A streaming decoder for one response (see `IncrementalDecoder`).
    pub fn incremental_decoder(
        &self,
        skip_special_tokens: bool,
        stops: Vec<String>,
    ) -> IncrementalDecoder {
        IncrementalDecoder::new(self.clone(), skip_special_tokens, stops)
    }

    /// Vocabulary size including added tokens (HF's `len(tokenizer)`).
    /// The most bytes of text one token can cover (`None`: no bound for this model), so a text
    /// longer than `context × this` is over the context without tokenizing it.
    pub fn max_bytes_per_token(&self) -> Option<usize> {
        self.inner.max_bytes_per_token
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.vocab_size
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.hf.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.hf.id_to_token(id)
    }

    /// Ids that end generation: the config's `eos_token`, then the
    /// `generation_config.json` ids, without duplicates.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.inner.eos_ids
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.inner.config.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.inner.config.eos_token.as_deref()
    }

    /// The context length the tokenizer declares; `None` when absent or a
    /// placeholder (HF writes 1e30 when the model does not say).
    pub fn model_max_length(&self) -> Option<usize> {
        self.inner.config.model_max_length
    }

    /// Whether `id` is an added token flagged special (skipped by decode).
    pub fn is_special(&self, id: u32) -> bool {
        self.inner.special_ids.binary_search(&id).is_ok()
    }

    /// The source of the template that renders `tools` (HF's `tool_use` one, else the chat
    /// template).
    pub fn tool_template_source(&self) -> Option<&str> {
        let config = &self.inner.config;
        config
            .tool_use_template
            .as_deref()
            .or(config.chat_template.as_deref())
    }

    /// How message `content` lists are passed to this template.
    pub fn content_format(&self) -> Option<ContentFormat> {
        self.inner
            .template
            .as_ref()
            .map(ChatTemplate::content_format)
    }
}
