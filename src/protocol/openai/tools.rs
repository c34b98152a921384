//! Tools, tool choice and response formats: typed so that a malformed one is refused with a
//! clear 400 naming the field, whatever the gateway then does with it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Function,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: FunctionDef,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolChoiceMode {
    None,
    Auto,
    Required,
}

/// `"none"`, `"auto"`, `"required"` or `{"type": "function", "function": {"name": …}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Function(String),
}

/// The deprecated `function_call`: `"none"`, `"auto"` or `{"name": …}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionCall {
    Mode(ToolChoiceMode),
    Function(String),
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct NamedTool {
    #[serde(rename = "type")]
    _kind: ToolKind,
    function: Named,
}

/// One of the strings, or an object of shape `O`. Written out rather than `untagged`: serde's
/// untagged enums buffer the value and answer "did not match any variant", which says nothing.
fn mode_or_object<'de, D, O>(
    d: D,
    modes: &[&str],
    expected: &str,
) -> Result<Result<ToolChoiceMode, O>, D::Error>
where
    D: Deserializer<'de>,
    O: serde::de::DeserializeOwned,
{
    let fail = || D::Error::custom(format!("expected {expected}"));
    match Value::deserialize(d)? {
        Value::String(s) if modes.contains(&s.as_str()) => Ok(Ok(match s.as_str() {
            "none" => ToolChoiceMode::None,
            "auto" => ToolChoiceMode::Auto,
            _ => ToolChoiceMode::Required,
        })),
        v @ Value::Object(_) => serde_json::from_value(v).map(Err).map_err(|_| fail()),
        _ => Err(fail()),
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let expected =
            r#""none", "auto", "required" or {"type": "function", "function": {"name": "..."}}"#;
        Ok(
            match mode_or_object::<D, NamedTool>(d, &["none", "auto", "required"], expected)? {
                Ok(mode) => ToolChoice::Mode(mode),
                Err(named) => ToolChoice::Function(named.function.name),
            },
        )
    }
}

impl<'de> Deserialize<'de> for FunctionCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let expected = r#""none", "auto" or {"name": "..."}"#;
        Ok(
            match mode_or_object::<D, Named>(d, &["none", "auto"], expected)? {
                Ok(mode) => FunctionCall::Mode(mode),
                Err(named) => FunctionCall::Function(named.name),
            },
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: String,
    pub description: Option<String>,
    pub schema: Option<Map<String, Value>>,
    pub strict: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_choice_takes_the_three_modes_and_a_named_function() {
        let parse = |v: Value| serde_json::from_value::<ToolChoice>(v);
        assert_eq!(
            parse(json!("required")).unwrap(),
            ToolChoice::Mode(ToolChoiceMode::Required)
        );
        assert_eq!(
            parse(json!({"type": "function", "function": {"name": "f"}})).unwrap(),
            ToolChoice::Function("f".into())
        );
        for bad in [
            json!(1),
            json!("sometimes"),
            json!({"type": "function"}),
            json!([]),
        ] {
            let e = parse(bad.clone()).unwrap_err().to_string();
            assert!(e.contains(r#""none", "auto", "required""#), "{bad}: {e}");
        }
        // `function_call` has no "required".
        assert!(serde_json::from_value::<FunctionCall>(json!("required")).is_err());
        assert_eq!(
            serde_json::from_value::<FunctionCall>(json!({"name": "g"})).unwrap(),
            FunctionCall::Function("g".into())
        );
    }
}
