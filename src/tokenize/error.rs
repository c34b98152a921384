use std::path::PathBuf;

/// Everything that can go wrong while loading a tokenizer, rendering a chat
/// template, encoding or decoding.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// A tokenizer file is missing or malformed.
    #[error("cannot load {path}: {1}", path = .0.display())]
    Load(PathBuf, String),
    /// The chat template failed to compile or to render.
    #[error("chat template error: {0}")]
    Template(String),
    /// The template called `raise_exception(msg)`; the message is the
    /// template's own wording (e.g. bad role alternation).
    #[error("{0}")]
    TemplateRaised(String),
    /// A message carries content this gateway cannot put in a text prompt
    /// (images, audio, unknown part types).
    #[error("unsupported message content: {0}")]
    UnsupportedContent(String),
    #[error("encode failed: {0}")]
    Encode(String),
    #[error("decode failed: {0}")]
    Decode(String),
}

impl TokenizeError {
    /// True when the request, not the server, is at fault (map to HTTP 400).
    /// Render-time template errors count as client errors because they come
    /// from message shapes the template does not accept, as SGLang treats them.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            TokenizeError::Template(_)
                | TokenizeError::TemplateRaised(_)
                | TokenizeError::UnsupportedContent(_)
        )
    }
}
