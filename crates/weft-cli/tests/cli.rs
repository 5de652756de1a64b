//! The `weft` binary end to end: `serve` (with SIGTERM), `chat` (streaming, the tool tree, an
//! inline approval, the `--agent` warning, local commands, Ctrl-C, colour, its addresses and
//! threads, frames bigger than its read buffer) and `threads`.
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
                {"text": "All done.", "repeat": true}]},
            {"match": "slow", "steps": [{"chunks": ["s0 ", "s1 ", "s2 ", "s3 ", "s4 ", "s5 ", "s6 ", "s7 ", "s8 ", "s9 "],
                "repeat_chunks": 20, "chunk_delay_ms": 50}]},
            {"match": "long", "steps": [{"chunks": ["0123456789"], "repeat_chunks": 10000}]},
            {"match": "*", "steps": [{"text": "fine", "repeat": true}]}
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
    assert!(
        stdout.contains("  └─ run_subtask “Draft” ✓ drafted"),
        "{stdout}"
    );
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

/// `weft chat` with `args` and `stdin`, to its end: (success, stdout, stderr).
fn chat(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let mut child = Command::new(WEFT)
        .arg("chat")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The id in `(new thread <id>: …)`.
fn new_thread(stdout: &str) -> String {
    let at = stdout.find("(new thread ").expect(stdout) + 12;
    stdout[at..].split(':').next().unwrap().to_owned()
}

#[test]
fn chat_takes_the_ws_address_prints_its_thread_and_refuses_an_unknown_one() {
    let server = start_server();
    let ws = format!("{}/ws", server.url.replace("http://", "ws://"));
    let (ok, stdout, stderr) = chat(&["--url", &ws, "hello"], "", &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("fine"), "{stdout}");
    let thread = new_thread(&stdout);
    assert!(
        stdout.contains(&format!("continue it with --thread {thread}")),
        "{stdout}"
    );

    let (ok, stdout, stderr) = chat(&["--url", &ws, "--thread", &thread, "again"], "", &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fine") && !stdout.contains("(new thread"),
        "{stdout}"
    );

    let (ok, stdout, stderr) = chat(
        &["--url", &server.url, "--thread", "no-such-thread", "hi"],
        "",
        &[],
    );
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("no thread `no-such-thread` of yours"),
        "{stderr}"
    );

    let threads = Command::new(WEFT)
        .args(["threads", "--url", &ws])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&threads.stdout).contains(&thread));
}

#[test]
fn chat_commands_are_local_and_mode_applies_to_the_next_message() {
    let server = start_server();
    let typed = "/help\n/mode plan\n/mode\n/mode sideways\n/frob\nwrite my notes\n";
    let (ok, stdout, stderr) = chat(&["--url", &server.url], typed, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("local commands (never sent to the model)"),
        "{stdout}"
    );
    assert!(stdout.contains("(permission mode: plan)"), "{stdout}");
    assert!(
        stdout.contains("(no permission mode `sideways`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(no command /frob: /help lists them)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("write_file ✗ refused: write_file is unavailable in plan mode"),
        "{stdout}"
    );
    // Only the message reached the server: one thread, titled by it.
    let threads = Command::new(WEFT)
        .args(["threads", "--url", &server.url])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&threads.stdout);
    assert_eq!(listing.lines().count(), 1, "{listing}");
    assert!(
        listing.contains("write my notes") && listing.contains("plan"),
        "{listing}"
    );
}

/// 100 KB streamed at once goes out in frames of up to 16 KiB, twice the client's read buffer:
/// each gets room made for it, and the answer is printed whole.
#[test]
fn chat_prints_a_long_answer_whole_though_its_frames_outgrow_the_read_buffer() {
    let server = start_server();
    let (ok, stdout, stderr) = chat(&["--url", &server.url, "a long one"], "", &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&"0123456789".repeat(10_000)),
        "{} bytes printed, starting:\n{}",
        stdout.len(),
        stdout.chars().take(300).collect::<String>()
    );
}

#[test]
fn chat_is_coloured_only_when_asked_and_never_with_no_color() {
    let server = start_server();
    let (_, plain, _) = chat(&["--url", &server.url, "draft it"], "", &[]);
    assert!(
        !plain.contains('\u{1b}'),
        "piped output has no colour: {plain:?}"
    );
    let (_, coloured, _) = chat(
        &["--url", &server.url, "draft it"],
        "",
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(coloured.contains("\u{1b}[36mmemory_write"), "{coloured:?}");
    assert!(coloured.contains("\u{1b}[32m✓"), "{coloured:?}");
    let (_, no_color, _) = chat(
        &["--url", &server.url, "draft it"],
        "",
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
    );
    assert!(!no_color.contains('\u{1b}'), "{no_color:?}");
}

#[test]
fn ctrl_c_stops_the_turn_on_the_server_and_a_second_quits() {
    let server = start_server();
    let mut child = Command::new(WEFT)
        .args(["chat", "--url", &server.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a slow story\n").unwrap();
    let shown = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = shown.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !shown.lock().unwrap().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "never saw {needle:?}: {}",
                shown.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let interrupt = |pid: u32| {
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    wait_for("s3 ");
    interrupt(child.id());
    wait_for("(stopping the turn…)");
    // The turn ends (cancelled on the server) and the prompt comes back: the client lives on.
    wait_for("(new thread ");
    let deadline = Instant::now() + Duration::from_secs(10);
    while shown.lock().unwrap().matches("\n› ").count() < 2 {
        assert!(Instant::now() < deadline, "no prompt after the stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C only stops the turn"
    );
    let text = shown.lock().unwrap().clone();
    let thread = new_thread(&text);
    let messages = get_json(&server.url, &format!("/threads/{thread}/messages"));
    let answer = &messages[1];
    assert_eq!(answer["status"], "cancelled", "{messages}");
    assert!(
        answer["content"].as_str().unwrap().len() < 600,
        "stopped early: {answer}"
    );
    // At the prompt, Ctrl-C quits.
    interrupt(child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Ctrl-C at the prompt did not quit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
}

/// A GET over plain HTTP/1.0, its body as JSON.
fn get_json(url: &str, path: &str) -> serde_json::Value {
    let mut stream = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: weft\r\n\r\n").unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

/// With `RUST_LOG` naming targets (`warn,weft_server=info`), on a PostgreSQL database that
/// needs no migration, `serve` still says where it listens (as a per-layer filter the
/// `EnvFilter` dropped that line).
#[tokio::test]
async fn serve_says_where_it_listens_whatever_the_log_filter() {
    let db = weft_store::testing::TestDb::postgres().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for filter in ["warn,weft_server=info", "weft_server=info", "info"] {
        let mut child = Command::new(WEFT)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("WEFT_DATABASE_URL", &db.url)
            .env("WEFT_WORKSPACE", dir.path().join("workspace"))
            .env("RUST_LOG", filter)
            .env("NO_COLOR", "1")
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // A server that never says it does not stop: the line is looked for on a thread.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on 127.0.0.1:") {
                    let _ = tx.send(line);
                    return;
                }
            }
        });
        let said = rx.recv_timeout(Duration::from_secs(20));
        let _ = child.kill();
        let _ = child.wait();
        assert!(said.is_ok(), "RUST_LOG={filter}: no `listening on` line");
    }
    db.drop_database().await.unwrap();
}
