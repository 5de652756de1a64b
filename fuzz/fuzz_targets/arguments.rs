//! Fuzz tool-argument handling: parsing, the injected-arg split, strict / lenient / none
//! validation against a schema, and result truncation. Never a panic; a truncated result
//! always fits its cap.
#![no_main]



use libfuzzer_sys::fuzz_target;
use serde_json::json;
use weft_core::truncate::truncate_result;
use weft_core::validate::prepare_args;
use weft_protocol::ArgValidation;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let schema = json!({"type": "object", "properties": {
        "path": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
        "x": {"type": "number"}, "items": {"type": "array", "items": {"type": "string"}}},
        "required": ["path"]});
    let validator = jsonschema::validator_for(&schema).ok();
    let mut injected = weft_protocol::InjectedArgs::new();
    injected.insert("trace_id".to_owned(), "correlation".to_owned());
    for mode in [
        ArgValidation::Strict,
        ArgValidation::Lenient,
        ArgValidation::None,
    ] {
        if let Ok(prepared) = prepare_args(raw, &schema, validator.as_ref(), mode, &injected) {
            assert!(prepared.args.is_object());
            assert!(prepared.args.get("trace_id").is_none());
        }
    }
    let cap = data.first().map_or(64, |b| 48 + usize::from(*b));
    let cut = truncate_result(raw.to_owned(), cap);
    if raw.len() <= cap {
        assert_eq!(cut, raw);
    } else {
        assert!(cut.len() <= cap, "{} bytes over a cap of {cap}", cut.len());
        assert!(cut.ends_with(&format!("full result {} bytes]", raw.len())));
    }
});
