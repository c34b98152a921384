//! Request bytes: one pre-built HTTP/1.1 request per shared-prefix group, copied into a
//! connection's own buffer and given a unique serial number in place, so issuing a request
//! allocates nothing and every prompt is still distinct (no accidental prefix-cache hits).
//!
//! One word in `NOVEL_EVERY` after the shared prefix (the 17th, 67th, …) is also made up per request (8 letters
//! derived from the serial): real prompts carry names, numbers and typos no cache has seen, and
//! a gateway that caches tokenization by word must pay for those, not just for the serial.

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
    /// Distinct ordinary words prompts are drawn from: the 32 of `WORDS`, then made-up words of
    /// two or three syllables (most several tokens), for prompts whose words do not all repeat.
    pub vocabulary: usize,
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
/// One word in this many (after the shared prefix) is made up per request: about 2 %.
const NOVEL_EVERY: usize = 50;
/// Length of a made-up word.
const NOVEL: usize = 8;

fn words(vocabulary: &[String], seed: u64, n: usize) -> impl Iterator<Item = &str> {
    // xorshift: deterministic across runs so direct and gateway phases see the same prompts.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        vocabulary[(x % vocabulary.len() as u64) as usize].as_str()
    })
}

/// `WORDS`, then made-up words up to `n` in all, spelled in syllables from a counter: distinct,
/// of letters only (a tokenizer's plain-word path), most of them several tokens.
fn vocabulary(n: usize) -> Vec<String> {
    const SYLLABLES: [&str; 40] = [
        "ba", "be", "bo", "da", "de", "di", "fa", "fo", "ga", "go", "ka", "ke", "ki", "la", "le",
        "li", "lo", "ma", "me", "mi", "mo", "na", "ne", "no", "pa", "pe", "po", "ra", "re", "ri",
        "ro", "sa", "se", "si", "so", "ta", "te", "to", "va", "vi",
    ];
    let base = SYLLABLES.len();
    // Two syllables first (1,600 words), then three (64,000).
    let made_up = (0..).map(|k: usize| {
        let syllables = if k < base * base { 2 } else { 3 };
        (0..syllables)
            .map(|i| SYLLABLES[k / base.pow(i) % base])
            .collect::<String>()
    });
    let mut out: Vec<String> = WORDS.iter().map(|w| (*w).to_owned()).collect();
    out.extend(made_up.take(n.saturating_sub(out.len())));
    out.truncate(n.max(1));
    out
}

pub struct Template {
    bytes: Vec<u8>,
    serial_at: usize,
    /// Where the made-up words go.
    novel_at: Vec<usize>,
}

pub struct Workload {
    templates: Vec<Template>,
}

impl Workload {
    pub fn new(shape: &Shape) -> Self {
        let groups = shape.groups.max(1);
        let vocabulary = vocabulary(shape.vocabulary);
        let templates = (0..groups)
            .map(|g| {
                let mut prompt = String::new();
                let prefix = if shape.groups == 0 {
                    0
                } else {
                    shape.prefix_words.min(shape.prompt_words)
                };
                for w in words(&vocabulary, 1000 + g as u64, prefix) {
                    prompt.push(' ');
                    prompt.push_str(w);
                }
                // The serial sits right after the shared prefix (at the start for unique prompts).
                let serial_in_prompt = prompt.len() + 1;
                prompt.push(' ');
                prompt.push_str(&"0".repeat(SERIAL));
                let mut novel_in_prompt = Vec::new();
                let rest = shape.prompt_words.saturating_sub(prefix);
                for (k, w) in words(&vocabulary, 7, rest).enumerate() {
                    prompt.push(' ');
                    // From the 17th word on, so a short (32-word) prompt has one too.
                    if k % NOVEL_EVERY == 16 {
                        novel_in_prompt.push(prompt.len());
                        prompt.push_str(&"x".repeat(NOVEL));
                    } else {
                        prompt.push_str(w);
                    }
                }
                let (body, key) = body(shape, &prompt);
                let head = format!(
                    "POST {} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    shape.api.path(),
                    body.len()
                );
                // The key ends with the opening quote: the prompt starts right after it.
                let prompt_at = head.len() + body.find(key).expect("prompt key") + key.len();
                let serial_at = prompt_at + serial_in_prompt;
                let novel_at: Vec<usize> = novel_in_prompt.iter().map(|i| prompt_at + i).collect();
                let bytes = [head.into_bytes(), body.into_bytes()].concat();
                // `fill` overwrites these bytes in place: they must be the placeholders.
                assert_eq!(&bytes[serial_at..serial_at + SERIAL], "0".repeat(SERIAL).as_bytes());
                for &at in &novel_at {
                    assert_eq!(&bytes[at..at + NOVEL], "x".repeat(NOVEL).as_bytes());
                }
                Template {
                    bytes,
                    serial_at,
                    novel_at,
                }
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
        for (k, &at) in t.novel_at.iter().enumerate() {
            // splitmix64 of (request, slot): distinct letters per request and per slot.
            let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k as u64) << 48;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            for b in &mut out[at..at + NOVEL] {
                *b = b'a' + (x % 26) as u8;
                x /= 26;
            }
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
