//! `text.template`: a Jinja template (`minijinja`) rendered with the node's other inputs, on
//! a blocking thread with fuel (a bound on the work and on the memory a render may use) and
//! a bound on the text it makes, so a runaway template ends by itself and the node's timeout
//! is never left waiting on a busy worker.

use std::io::Write;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::node::{NodeContext, NodeType, Ports};

pub struct Template;

#[async_trait]
impl NodeType for Template {
    fn type_name(&self) -> &str {
        "text.template"
    }
    fn description(&self) -> &str {
        "Render a Jinja template (`Hello {{ name }}`) with the node's other inputs as variables."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "template": {"type": "string", "description": "The template."},
        }, "required": ["template"], "additionalProperties": true})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    async fn run(&self, mut inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let template = match inputs.remove("template") {
            Some(Value::String(t)) => t,
            _ => return Err("template must be a string".to_owned()),
        };
        let (fuel, max_bytes) = (ctx.limits.template_fuel, ctx.limits.max_template_bytes);
        let rendered = tokio::task::spawn_blocking(move || {
            render(&template, Value::Object(inputs), fuel, max_bytes)
        })
        .await
        .map_err(|e| format!("template: the render failed: {e}"))??;
        Ok(Ports::from_iter([(
            "text".to_owned(),
            Value::String(rendered),
        )]))
    }
}

/// Render `template` with `vars`, within `fuel` and `max_bytes` of output.
pub fn render(template: &str, vars: Value, fuel: u64, max_bytes: usize) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(fuel));
    let compiled = env
        .template_from_str(template)
        .map_err(|e| format!("template: {e}"))?;
    let mut out = Capped {
        text: Vec::new(),
        max: max_bytes,
        over: false,
    };
    let rendered = compiled.render_captured_to(
        minijinja::Value::from(minijinja::value::Serde(vars)),
        &mut out,
    );
    if out.over {
        return Err(format!(
            "template: the text passed {max_bytes} bytes ([workflow] max_template_bytes)"
        ));
    }
    match rendered {
        Ok(_) => String::from_utf8(out.text).map_err(|e| format!("template: {e}")),
        Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => Err(format!(
            "template: it did more work than allowed ({fuel} fuel, [workflow] template_fuel)"
        )),
        Err(e) => Err(format!("template: {e}")),
    }
}

/// Output that refuses to grow past `max` bytes.
struct Capped {
    text: Vec<u8>,
    max: usize,
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + buf.len() > self.max {
            self.over = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_render_stays_within_its_fuel_and_its_output() {
        assert_eq!(
            render("Hi {{ name }}", json!({"name": "Ada"}), 10_000, 100).unwrap(),
            "Hi Ada"
        );
        let nested =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let e = render(nested, json!({}), 1_000_000, 1 << 20).unwrap_err();
        assert!(e.contains("more work than allowed"), "{e}");
        let long = "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}";
        let e = render(long, json!({}), u64::MAX, 1 << 10).unwrap_err();
        assert!(e.contains("passed 1024 bytes"), "{e}");
        // Doubling a string costs fuel for the bytes it makes.
        let doubling = format!(
            "{{% set x = 'xxxxxxxxxxxxxxxx' %}}{}{{{{ x|length }}}}",
            "{% set x = x ~ x %}".repeat(40)
        );
        let e = render(&doubling, json!({}), 1_000_000, 1 << 20).unwrap_err();
        assert!(e.contains("more work than allowed"), "{e}");
    }
}
