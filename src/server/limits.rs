//! Bounds on what one request may make the gateway hold, derived from the context length so
//! that anything a real prompt can use fits and nothing much larger is read or parsed.
//!
//! - Body: `--max-body-bytes`, by default 1 MiB + 64 bytes per context token (3 MiB for 32k).
//!   A full-context prompt is ~4 bytes of text or ≤ 7 bytes of JSON id per token; 64 leaves
//!   room for escaped non-ASCII text and long messages' JSON.
//! - JSON items (values in arrays, members of objects): 64 Ki + 4 per context token, counted
//!   before parsing. A parsed JSON value takes ~30–80 bytes whatever its text took, so a body of
//!   `[1,1,1,…]` would otherwise grow ~20× in memory; an id prompt over the context is refused
//!   here without being parsed at all.
//! - Prompt text: see `Model::max_prompt_text_bytes` (checked before tokenizing).

use crate::config::ServeConfig;

const BASE_BODY_BYTES: usize = 1 << 20;
const BODY_BYTES_PER_TOKEN: usize = 64;
const BASE_JSON_ITEMS: usize = 64 << 10;
const JSON_ITEMS_PER_TOKEN: usize = 4;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub body_bytes: usize,
    pub json_items: usize,
}

impl Limits {
    pub fn new(config: &ServeConfig, context_length: usize) -> Limits {
        Limits {
            body_bytes: config.max_body_bytes.unwrap_or_else(|| {
                BASE_BODY_BYTES.saturating_add(context_length.saturating_mul(BODY_BYTES_PER_TOKEN))
            }),
            json_items: BASE_JSON_ITEMS
                .saturating_add(context_length.saturating_mul(JSON_ITEMS_PER_TOKEN)),
        }
    }
}

/// Whether the JSON text has more than `limit` items (array elements and object members; a
/// scalar body counts one). A linear scan over the bytes, outside strings: about as fast as
/// reading them, and it stops as soon as the limit is passed.
pub fn json_items_over(bytes: &[u8], limit: usize) -> bool {
    // Every item needs at least a byte: a shorter body cannot be over.
    if bytes.len() <= limit {
        return false;
    }
    let (mut items, mut in_string, mut escaped) = (1usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => {
                items += 1;
                if items > limit {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_items_outside_strings_only() {
        let ids = format!("[{}1]", "1,".repeat(99));
        assert!(!json_items_over(ids.as_bytes(), 101));
        assert!(json_items_over(ids.as_bytes(), 50));
        // Commas and brackets inside a string (escaped quotes too) are text, not items.
        let text = format!(r#"{{"a":"{}\"{}"}}"#, ",[{".repeat(100), ",".repeat(100));
        assert!(!json_items_over(text.as_bytes(), 10));
        let objects = "[{},{},{},{},{}]".repeat(10);
        assert!(json_items_over(objects.as_bytes(), 50));
    }

    #[test]
    fn the_default_body_limit_follows_the_context() {
        let config = ServeConfig::from_args(["--worker-urls", "http://127.0.0.1:1"]).unwrap();
        let limits = Limits::new(&config, 32768);
        assert_eq!(limits.body_bytes, 3 << 20);
        assert_eq!(limits.json_items, (64 << 10) + 4 * 32768);
        let config = ServeConfig::from_args([
            "--worker-urls",
            "http://127.0.0.1:1",
            "--max-body-bytes",
            "1000",
        ])
        .unwrap();
        assert_eq!(Limits::new(&config, 32768).body_bytes, 1000);
    }
}
