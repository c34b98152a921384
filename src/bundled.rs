//! The tokenizer compiled into the binary (SmolLM2-135M-Instruct, Apache-2.0; see
//! `assets/tokenizers/`), so `switchboard sim` and `switchboard demo` need no files.

use crate::tokenize::{TokenizeError, Tokenizer};

pub const MODEL_NAME: &str = "smollm2-135m-instruct";

const TOKENIZER_JSON: &[u8] =
    include_bytes!("../assets/tokenizers/smollm2-135m-instruct/tokenizer.json");
const TOKENIZER_CONFIG: &[u8] =
    include_bytes!("../assets/tokenizers/smollm2-135m-instruct/tokenizer_config.json");

pub fn tokenizer() -> Result<Tokenizer, TokenizeError> {
    Tokenizer::from_bytes(TOKENIZER_JSON, TOKENIZER_CONFIG)
}
