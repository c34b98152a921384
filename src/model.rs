//! The model this gateway serves: the name clients send, the tokenizer (with its chat template)
//! and the context length. What `prepare` needs and nothing more.

use std::sync::Arc;

use crate::tokenize::Tokenizer;

pub struct Model {
    pub name: Arc<str>,
    pub tokenizer: Arc<Tokenizer>,
    pub context_length: usize,
}
