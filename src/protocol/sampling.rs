//! OpenAI sampling fields → SGLang `sampling_params`, with the range checks OpenAI documents.

use super::openai::Sampling;
use super::sglang::SamplingParams;

/// A request field a client got wrong: becomes a 400 naming `param`.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{message}")]
pub struct InvalidField {
    pub message: String,
    pub param: &'static str,
}

pub fn invalid(param: &'static str, message: impl Into<String>) -> InvalidField {
    InvalidField {
        message: message.into(),
        param,
    }
}

/// Most choices one request may ask for (OpenAI's limit).
const MAX_CHOICES: i64 = 128;

/// Most stop strings a request may carry (OpenAI allows 4; SGLang more; be generous).
const MAX_STOP_STRINGS: usize = 16;

impl Sampling {
    /// `max_new_tokens` is decided by the caller (it depends on the prompt and the context).
    pub fn to_sglang(&self, max_new_tokens: u32) -> Result<SamplingParams, InvalidField> {
        check_range("temperature", self.temperature, 0.0, 2.0)?;
        check_range("top_p", self.top_p, 0.0, 1.0)?;
        check_range("min_p", self.min_p, 0.0, 1.0)?;
        check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        check_range("repetition_penalty", self.repetition_penalty, 0.0, 2.0)?;
        if let Some(k) = self.top_k {
            if k == 0 || k < -1 {
                return Err(invalid(
                    "top_k",
                    "top_k must be -1 (disabled) or at least 1",
                ));
            }
        }
        if let Some(n) = self.n {
            if !(1..=MAX_CHOICES).contains(&n) {
                return Err(invalid(
                    "n",
                    format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
                ));
            }
        }
        let stop = self.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
        if stop.len() > MAX_STOP_STRINGS {
            return Err(invalid(
                "stop",
                format!("at most {MAX_STOP_STRINGS} stop sequences are allowed"),
            ));
        }
        let min_new_tokens = match self.min_tokens {
            None => None,
            Some(m) if m >= 0 && m <= i64::from(max_new_tokens) => Some(m as u32),
            Some(_) => {
                return Err(invalid(
                    "min_tokens",
                    "min_tokens must be between 0 and max_tokens",
                ))
            }
        };
        Ok(SamplingParams {
            max_new_tokens: Some(max_new_tokens),
            min_new_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            repetition_penalty: self.repetition_penalty,
            stop,
            stop_token_ids: self.stop_token_ids.clone().unwrap_or_default(),
            ignore_eos: self.ignore_eos,
            skip_special_tokens: self.skip_special_tokens,
            no_stop_trim: self.no_stop_trim,
            sampling_seed: self.seed,
            regex: self.regex.clone(),
            ebnf: self.ebnf.clone(),
            ..SamplingParams::default()
        })
    }

    /// `n`: we generate one choice per request; other values go to the worker's own route.
    pub fn wants_single_choice(&self) -> bool {
        self.n.is_none_or(|n| n == 1)
    }
}

fn check_range(param: &'static str, v: Option<f64>, lo: f64, hi: f64) -> Result<(), InvalidField> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(invalid(
            param,
            format!("{param} must be between {lo} and {hi}, got {x}"),
        )),
        _ => Ok(()),
    }
}

/// The client's token limit: `None` when absent. Rejects zero, negatives and values no context
/// could hold.
pub fn requested_max_tokens(
    param: &'static str,
    v: Option<i64>,
    context_length: usize,
) -> Result<Option<u32>, InvalidField> {
    match v {
        None => Ok(None),
        Some(n) if n < 1 => Err(invalid(
            param,
            format!("{param} must be at least 1, got {n}"),
        )),
        Some(n) if n as u128 > context_length as u128 => Err(invalid(
            param,
            format!(
                "{param} is {n}, but the model's context length is only {context_length} tokens"
            ),
        )),
        Some(n) => Ok(Some(n as u32)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_fields_and_checks_ranges() {
        let s = Sampling {
            temperature: Some(0.5),
            seed: Some(7),
            min_tokens: Some(2),
            ..Default::default()
        };
        let p = s.to_sglang(10).unwrap();
        assert_eq!(
            (
                p.max_new_tokens,
                p.temperature,
                p.sampling_seed,
                p.min_new_tokens
            ),
            (Some(10), Some(0.5), Some(7), Some(2))
        );
        let bad = Sampling {
            temperature: Some(3.0),
            ..Default::default()
        };
        assert_eq!(bad.to_sglang(10).unwrap_err().param, "temperature");
        let bad = Sampling {
            top_k: Some(0),
            ..Default::default()
        };
        assert_eq!(bad.to_sglang(10).unwrap_err().param, "top_k");
    }

    #[test]
    fn max_tokens_limits() {
        assert_eq!(
            requested_max_tokens("max_tokens", Some(5), 100),
            Ok(Some(5))
        );
        assert!(requested_max_tokens("max_tokens", Some(0), 100).is_err());
        assert!(requested_max_tokens("max_tokens", Some(-3), 100).is_err());
        assert!(requested_max_tokens("max_tokens", Some(1 << 40), 100).is_err());
        assert_eq!(requested_max_tokens("max_tokens", None, 100), Ok(None));
    }
}
