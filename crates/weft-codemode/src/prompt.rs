//! What the model is told in code mode, and how its answer is read: the first fenced code
//! block is the code; an answer without one is a plain text answer.

use weft_core::{prompts, Toolbelt};
use weft_protocol::PermissionMode;

use crate::catalogue::signatures;

const BASE: &str = "You are Weft, working in code mode. You act by writing JavaScript that runs \
in a sandbox: answer with one fenced ```js code block. Text outside the block is not shown to \
the user; speak to the user with output(). When you can answer without running anything, reply \
with plain text and no code block.

In the sandbox (top-level await and return work):
- await tools.<name>(args) calls a tool and gives its result (parsed when it is JSON); a failed \
or refused call throws an Error.
- Promise.all([...]) runs tool calls in parallel.
- output(text) shows text to the user, as it happens.
- done(value?) ends your turn after this run; a value is shown to the user.
- store(key, value) and recall(key) keep values between runs of this turn.
- log(...) notes come back to you with the run's result.
There is no filesystem, network, timer or module access except through the tools, and each run \
has limits on CPU time and memory. After each run you see what it returned, its logs, or its \
error, and you may run more code.";

/// The system prompt for a code-mode session with `tools`.
pub fn system_prompt(tools: &Toolbelt, mode: PermissionMode) -> String {
    let catalogue = signatures(tools);
    let mut prompt = String::from(BASE);
    if !catalogue.is_empty() {
        prompt.push_str("\n\nYour tools:\n");
        prompt.push_str(&catalogue);
    }
    prompt.push_str("\n\n");
    prompt.push_str(prompts::mode_line(mode));
    prompt
}

/// The code of the first fenced block (```js, ```javascript, ```ts or a bare ```), if any.
pub fn extract_code(answer: &str) -> Option<&str> {
    let start = answer.find("```")?;
    let after = &answer[start + 3..];
    let line_end = after.find('\n')?;
    let language = after[..line_end].trim();
    let known = ["", "js", "javascript", "ts", "typescript", "mjs"];
    if !known.contains(&language.to_ascii_lowercase().as_str()) {
        return None;
    }
    let body = &after[line_end + 1..];
    let end = body.find("```").unwrap_or(body.len());
    Some(body[..end].trim_end())
}

/// The call each code run is shown and recorded as.
pub const CODE_EXECUTE: &str = "code.execute";

/// How a code run's result reads in history (as a user message: `code.execute` is no tool a
/// provider knows).
pub fn code_result_message(result: &str) -> String {
    format!("[result of running that code]\n{result}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_js_block_is_the_code() {
        let answer = "Let me look.\n```js\nconst a = await tools.read_file({path: \"a\"});\noutput(a);\n```\nthanks";
        assert_eq!(
            extract_code(answer),
            Some("const a = await tools.read_file({path: \"a\"});\noutput(a);")
        );
        assert_eq!(extract_code("```\nreturn 1\n```"), Some("return 1"));
        assert_eq!(extract_code("plain answer"), None);
        assert_eq!(extract_code("```python\nprint(1)\n```"), None);
        // An unterminated block runs to the end.
        assert_eq!(extract_code("```javascript\nreturn 2"), Some("return 2"));
    }
}
