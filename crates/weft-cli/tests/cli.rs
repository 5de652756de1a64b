//! The `weft` binary end to end: `serve` (with SIGTERM), `chat` (streaming, the tool tree, an
//! inline approval, the `--agent` warning) and `threads`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

struct Server {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
    workspace: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"conversations": [
            {"match": "count", "steps": [{"text": "```js\nconst keys = await tools.memory_list({});\noutput(`keys: ${keys.length}`);\ndone();\n```"}]},
            {"match": "draft", "steps": [{"tool_calls": [{"name": "memory_write", "arguments": {"key": "d", "value": "v"}}]}, {"text": "drafted"}]},
            {"match": "notes", "steps": [
                {"chunks": ["Writing ", "notes. "], "tool_calls": [
                    {"name": "run_subtask", "arguments": {"title": "Draft", "instructions": "draft the notes"}}]},
                {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "from the terminal"}}]},
                {"text": "All done.", "repeat": true}]}
        ]}"#,
    )
    .unwrap();
    let workspace = dir.path().join("workspace");
    let mut child = Command::new(WEFT)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("WEFT_SCRIPT", &script)
        .env(
            "WEFT_DATABASE_URL",
            format!("sqlite://{}/weft.db", dir.path().display()),
        )
        .env("WEFT_WORKSPACE", &workspace)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        assert!(
            Instant::now() < deadline,
            "the server never said `listening on`"
        );
        let line = lines.next().expect("server output").unwrap();
        if let Some(at) = line.find("listening on ") {
            let rest: String = line[at + 13..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '\u{1b}')
                .collect();
            break rest;
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        url: format!("http://{addr}"),
        _dir: dir,
        workspace,
    }
}

#[test]
fn chat_streams_draws_the_tree_and_asks_inline_then_sigterm_stops_cleanly() {
    let mut server = start_server();
    let mut chat = Command::new(WEFT)
        .args(["chat", "--url", &server.url, "--agent", "write my notes"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("--agent is deprecated"), "{stderr}");
    assert!(stdout.contains("Writing notes."), "{stdout}");
    assert!(stdout.contains("  ├─ run_subtask “Draft” …"), "{stdout}");
    assert!(
        stdout.contains("    ├─ memory_write …"),
        "nested calls are indented: {stdout}"
    );
    assert!(stdout.contains("  └─ run_subtask ✓ drafted"), "{stdout}");
    assert!(stdout.contains("? write_file wants to run"), "{stdout}");
    assert!(
        stdout.contains("└─ write_file ✓ wrote 17 bytes to notes.md"),
        "{stdout}"
    );
    assert!(stdout.contains("All done."), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("local").join("notes.md")).unwrap(),
        "from the terminal"
    );

    let threads = Command::new(WEFT)
        .args(["threads", "--url", &server.url])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&threads.stdout);
    assert!(listing.contains("write my notes"), "{listing}");

    // SIGTERM: the server stops accepting, finishes, and exits cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn chat_in_code_mode_runs_the_models_code() {
    let server = start_server();
    let out = Command::new(WEFT)
        .args([
            "chat",
            "--url",
            &server.url,
            "--mode",
            "code",
            "count my keys",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("├─ code.execute …"), "{stdout}");
    assert!(stdout.contains("  └─ memory_list ✓ []"), "{stdout}");
    assert!(stdout.contains("keys: 0"), "{stdout}");
}

#[test]
fn chat_in_plan_mode_never_writes() {
    let server = start_server();
    let out = Command::new(WEFT)
        .args([
            "chat",
            "--url",
            &server.url,
            "--permission-mode",
            "plan",
            "write my notes",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("└─ write_file ✗ refused: write_file is unavailable in plan mode"),
        "{stdout}"
    );
    assert!(!server.workspace.join("notes.md").exists());
}
