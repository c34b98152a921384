//! Request bytes: one pre-built HTTP/1.1 request per shared-prefix group, copied into a
//! connection's own buffer and given a unique serial number in place, so issuing a request
//! allocates nothing and every prompt is still distinct (no accidental prefix-cache hits).

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Api {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
    /// SGLang's native `/generate` with `text`
    Generate,
}

impl Api {
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
            Api::Generate => "/generate",
        }
    }
}

pub struct Shape {
    pub api: Api,
    pub stream: bool,
    pub max_tokens: u32,
    pub prompt_words: usize,
    /// 0: every prompt unique from its first word; G > 0: G shared prefixes.
    pub groups: usize,
    pub prefix_words: usize,
    pub model: String,
}

/// Ordinary words that SmolLM2/Qwen-style tokenizers encode as one token each with their
/// leading space, so N words ≈ N prompt tokens.
const WORDS: [&str; 32] = [
    "the", "model", "answer", "question", "time", "people", "water", "system", "light", "house",
    "world", "number", "story", "music", "river", "city", "night", "paper", "money", "field",
    "market", "garden", "window", "letter", "school", "family", "table", "power", "color", "road",
    "voice", "friend",
];

/// Width of the serial number patched into every request.
const SERIAL: usize = 10;

fn words(seed: u64, n: usize, out: &mut String) {
    // xorshift: deterministic across runs so direct and gateway phases see the same prompts.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(' ');
        out.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
    }
}

pub struct Template {
    bytes: Vec<u8>,
    serial_at: usize,
}

pub struct Workload {
    templates: Vec<Template>,
}

impl Workload {
    pub fn new(shape: &Shape) -> Self {
        let groups = shape.groups.max(1);
        let templates = (0..groups)
            .map(|g| {
                let mut prompt = String::new();
                let prefix = if shape.groups == 0 {
                    0
                } else {
                    shape.prefix_words.min(shape.prompt_words)
                };
                words(1000 + g as u64, prefix, &mut prompt);
                // The serial sits right after the shared prefix (at the start for unique prompts).
                let serial_in_prompt = prompt.len() + 1;
                prompt.push(' ');
                prompt.push_str(&"0".repeat(SERIAL));
                words(7, shape.prompt_words.saturating_sub(prefix), &mut prompt);
                let (body, key) = body(shape, &prompt);
                let head = format!(
                    "POST {} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    shape.api.path(),
                    body.len()
                );
                // The key ends with the opening quote: the prompt starts right after it.
                let serial_at =
                    head.len() + body.find(key).expect("prompt key") + key.len() + serial_in_prompt;
                let bytes = [head.into_bytes(), body.into_bytes()].concat();
                // `fill` overwrites these bytes in place: they must be the serial placeholder.
                assert_eq!(&bytes[serial_at..serial_at + SERIAL], "0".repeat(SERIAL).as_bytes());
                Template { bytes, serial_at }
            })
            .collect();
        Workload { templates }
    }

    /// Writes request number `n` into `out` (reusing its allocation).
    pub fn fill(&self, n: u64, out: &mut Vec<u8>) {
        let t = &self.templates[(n % self.templates.len() as u64) as usize];
        out.clear();
        out.extend_from_slice(&t.bytes);
        let mut v = n;
        for b in out[t.serial_at..t.serial_at + SERIAL].iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
}

/// The JSON body around `prompt` and the key whose string value is the prompt.
fn body(shape: &Shape, prompt: &str) -> (String, &'static str) {
    // Words and digits only: no JSON escaping needed.
    let (m, n, s) = (&shape.model, shape.max_tokens, shape.stream);
    match shape.api {
        Api::Chat => (
            format!(
                r#"{{"model":"{m}","messages":[{{"role":"user","content":"{prompt}"}}],"max_tokens":{n},"stream":{s}}}"#
            ),
            r#""content":""#,
        ),
        Api::Completions => (
            format!(r#"{{"model":"{m}","prompt":"{prompt}","max_tokens":{n},"stream":{s}}}"#),
            r#""prompt":""#,
        ),
        Api::Generate => (
            format!(
                r#"{{"text":"{prompt}","sampling_params":{{"max_new_tokens":{n}}},"stream":{s}}}"#
            ),
            r#""text":""#,
        ),
    }
}
