//! A JSON Schema checked against what Draft 2020-12's meta-schema requires of each keyword, as
//! SGLang's `Draft202012Validator.check_schema` does for tool parameters: a malformed schema is
//! the client's 400 here, not a grammar the worker fails to compile after the request started.
//! Unknown keywords are allowed (the meta-schema allows them).

use serde_json::{Map, Value};

const TYPES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// `Err` names the first keyword that is not what the meta-schema requires, by its path.
pub fn check(schema: &Value) -> Result<(), String> {
    check_at(schema, "")
}

fn check_at(schema: &Value, at: &str) -> Result<(), String> {
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(obj) => obj,
        other => return Err(format!("{} is not a schema: {other}", path(at))),
    };
    for (key, v) in obj {
        let here = format!("{at}/{key}");
        let bad = |what: &str| Err(format!("{} must be {what}, got {v}", path(&here)));
        match key.as_str() {
            "type" => {
                let ok = match v {
                    Value::String(t) => TYPES.contains(&t.as_str()),
                    Value::Array(ts) => {
                        !ts.is_empty()
                            && ts
                                .iter()
                                .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t)))
                            && unique(ts)
                    }
                    _ => false,
                };
                if !ok {
                    return bad("one of the JSON Schema types or a list of them");
                }
            }
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                match v {
                    Value::Object(map) => each(map, &here)?,
                    _ => return bad("an object of schemas"),
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "contains"
            | "if"
            | "then"
            | "else"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties" => check_at(v, &here)?,
            "prefixItems" | "allOf" | "anyOf" | "oneOf" => match v {
                Value::Array(items) if !items.is_empty() => {
                    for (i, item) in items.iter().enumerate() {
                        check_at(item, &format!("{here}/{i}"))?;
                    }
                }
                _ => return bad("a non-empty list of schemas"),
            },
            "required" => match v {
                Value::Array(names) if names.iter().all(Value::is_string) && unique(names) => {}
                _ => return bad("a list of distinct strings"),
            },
            "enum" if !v.is_array() => return bad("a list"),
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" | "minContains" | "maxContains"
                if !v.as_f64().is_some_and(|n| n >= 0.0 && n.fract() == 0.0) =>
            {
                return bad("a non-negative integer")
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" if !v.is_number() => {
                return bad("a number")
            }
            "multipleOf" if !v.as_f64().is_some_and(|n| n > 0.0) => return bad("a number above 0"),
            "pattern" | "format" | "$ref" | "$id" | "$schema" | "title" | "description"
                if !v.is_string() =>
            {
                return bad("a string")
            }
            _ => {}
        }
    }
    Ok(())
}

fn each(map: &Map<String, Value>, at: &str) -> Result<(), String> {
    for (name, schema) in map {
        check_at(schema, &format!("{at}/{name}"))?;
    }
    Ok(())
}

fn unique(items: &[Value]) -> bool {
    items
        .iter()
        .enumerate()
        .all(|(i, a)| items[..i].iter().all(|b| a != b))
}

fn path(at: &str) -> String {
    if at.is_empty() {
        "the schema".into()
    } else {
        format!("`{at}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn well_formed_schemas_pass_and_malformed_keywords_are_named() {
        let good = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]},
            "b": {"type": "array", "items": {"$ref": "#/$defs/x"}, "minItems": 1}},
            "required": ["a"], "$defs": {"x": {"enum": [1, "y"]}}, "x-unknown": 5,
            "anyOf": [true, {"maximum": 2.5}]});
        assert_eq!(check(&good), Ok(()));
        for (bad, at) in [
            (json!({"type": "str"}), "/type"),
            (
                json!({"properties": {"a": {"type": 5}}}),
                "/properties/a/type",
            ),
            (json!({"required": "a"}), "/required"),
            (json!({"items": 3}), "/items"),
            (json!({"anyOf": []}), "/anyOf"),
            (json!({"minItems": -1}), "/minItems"),
            (json!({"type": ["string", "string"]}), "/type"),
            (json!([]), "the schema"),
        ] {
            let e = check(&bad).unwrap_err();
            assert!(e.contains(at), "{bad}: {e}");
        }
    }
}
