//! Tool-argument handling: parse the model's JSON, split off injected args, validate
//! (`strict`), coerce then validate (`lenient`), or pass through (`none`).

use std::sync::Arc;

use serde_json::{Map, Value};
use weft_protocol::{ArgValidation, InjectedArgs};

/// Arguments ready for a tool, and the schema-only injected args split away from them.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedArgs {
    pub args: Value,
    pub injected: Map<String, Value>,
    /// The arguments are the model's as parsed: nothing split off, dropped or coerced.
    pub as_sent: bool,
}

/// Parse raw argument text into an object; empty text is `{}`.
pub fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "arguments must be a JSON object, got {}",
            json_type(&other)
        )),
        Err(e) => Err(format!("arguments are not valid JSON ({e})")),
    }
}

/// A JSON value as compact text, as serde_json writes it (see [`json_text`](crate::json_text)).
pub fn compact(value: &Value) -> String {
    crate::json_text::to_string(value).unwrap_or_default()
}

/// [`compact`], sharing `raw` when `raw` is that very text: a model's arguments most often
/// are, so a call's card, its preview in the tree and the repetition guard hold one copy.
pub fn compact_sharing(value: &Value, raw: &Arc<str>) -> Arc<str> {
    // Writing a `Value` cannot fail.
    crate::json_text::write(value, |text| {
        if text == &**raw {
            raw.clone()
        } else {
            Arc::from(text)
        }
    })
    .unwrap_or_else(|_| Arc::from(""))
}

pub fn prepare_args(
    raw: &str,
    schema: &Value,
    validator: Option<&jsonschema::Validator>,
    mode: ArgValidation,
    injected_keys: &InjectedArgs,
) -> Result<PreparedArgs, String> {
    prepare_parsed(
        parse_arguments(raw)?,
        schema,
        validator,
        mode,
        injected_keys,
    )
}

/// As [`prepare_args`], for arguments already parsed (by [`parse_arguments`]).
pub fn prepare_parsed(
    mut args: Map<String, Value>,
    schema: &Value,
    validator: Option<&jsonschema::Validator>,
    mode: ArgValidation,
    injected_keys: &InjectedArgs,
) -> Result<PreparedArgs, String> {
    let mut injected = Map::new();
    for key in injected_keys.keys() {
        if let Some(v) = args.remove(key) {
            injected.insert(key.clone(), v);
        }
    }
    let coerced = mode == ArgValidation::Lenient && coerce_lenient(&mut args, schema);
    let as_sent = injected.is_empty() && !coerced;
    let args = Value::Object(args);
    if mode != ArgValidation::None {
        if let Some(validator) = validator {
            let errors: Vec<String> = validator
                .iter_errors(&args)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    if path.is_empty() {
                        e.to_string()
                    } else {
                        format!("{path}: {e}")
                    }
                })
                .collect();
            if !errors.is_empty() {
                return Err(errors.join("; "));
            }
        }
    }
    Ok(PreparedArgs {
        args,
        injected,
        as_sent,
    })
}

/// Coerce what is safely coercible toward the schema and drop properties it does not know;
/// true when anything changed.
pub fn coerce_lenient(args: &mut Map<String, Value>, schema: &Value) -> bool {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return false;
    };
    let open = matches!(
        schema.get("additionalProperties"),
        Some(Value::Bool(true)) | Some(Value::Object(_))
    );
    let before = args.len();
    if !open {
        args.retain(|k, _| props.contains_key(k));
    }
    let mut changed = args.len() != before;
    for (key, value) in args.iter_mut() {
        let Some(ty) = props
            .get(key)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        if let Some(coerced) = coerce_value(value, ty) {
            changed |= coerced != *value;
            *value = coerced;
        }
    }
    changed
}

fn coerce_value(value: &Value, ty: &str) -> Option<Value> {
    match (ty, value) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("integer", Value::Number(n)) if n.is_f64() => {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() < 9.0e15).then(|| Value::from(f as i64))
        }
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ("boolean", Value::String(s)) => match s.trim() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        _ => None,
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"},"s":{"type":"string"}},"required":["n"]})
    }

    fn run(raw: &str, mode: ArgValidation) -> Result<PreparedArgs, String> {
        let s = schema();
        let v = jsonschema::validator_for(&s).ok();
        prepare_args(raw, &s, v.as_ref(), mode, &InjectedArgs::new())
    }

    #[test]
    fn strict_rejects_a_string_number() {
        let err = run(r#"{"n":"3"}"#, ArgValidation::Strict).unwrap_err();
        assert!(err.contains("/n"), "{err}");
    }

    #[test]
    fn lenient_coerces_and_drops_unknown_properties() {
        let ok = run(
            r#"{"n":"3","ok":"true","s":7,"extra":1}"#,
            ArgValidation::Lenient,
        )
        .unwrap();
        assert_eq!(ok.args, json!({"n":3,"ok":true,"s":"7"}));
        assert!(!ok.as_sent);
        assert!(run(r#"{"n":3}"#, ArgValidation::Lenient).unwrap().as_sent);
        assert!(run(r#"{"n":3}"#, ArgValidation::Strict).unwrap().as_sent);
    }

    #[test]
    fn lenient_still_rejects_what_cannot_be_coerced() {
        assert!(run(r#"{"n":"three"}"#, ArgValidation::Lenient).is_err());
    }

    #[test]
    fn none_passes_anything_that_is_an_object() {
        assert_eq!(
            run(r#"{"n":"x"}"#, ArgValidation::None).unwrap().args,
            json!({"n":"x"})
        );
    }

    #[test]
    fn malformed_json_and_non_objects_are_errors() {
        assert!(run(r#"{"n":"#, ArgValidation::None)
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(run("[1]", ArgValidation::None)
            .unwrap_err()
            .contains("an array"));
        assert_eq!(parse_arguments("").unwrap(), Map::new());
    }

    #[test]
    fn injected_args_are_split_away() {
        let s = schema();
        let mut keys = InjectedArgs::new();
        keys.insert("ui_request_id".to_owned(), "corr".to_owned());
        let v = jsonschema::validator_for(&s).ok();
        let p = prepare_args(
            r#"{"n":1,"ui_request_id":"u1"}"#,
            &s,
            v.as_ref(),
            ArgValidation::Strict,
            &keys,
        )
        .unwrap();
        assert_eq!(p.args, json!({"n":1}));
        assert_eq!(p.injected.get("ui_request_id"), Some(&json!("u1")));
    }
}
