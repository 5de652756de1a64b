//! The config: every key optional, environment overrides, strict keys, the shipped default,
//! values checked at load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weft_config::{ApiKeyEntry, Config, StrictError};

#[test]
fn every_key_is_optional_and_env_overrides_win() {
    let mut config = Config::from_toml(
        r#"
        [server]
        bind = "0.0.0.0:9000"
        [agent]
        max_total_tool_calls = 7
        [auth]
        api_keys = [{ key = "k-alice", user = "alice" }]
        [pricing]
        "my-model" = { input_per_mtok = 1.0, output_per_mtok = 2.0 }
        "#,
    )
    .unwrap();
    assert_eq!(config.server.max_frame_bytes, 1 << 20);
    assert_eq!(config.agent.max_total_tool_calls, 7);
    assert_eq!(config.agent.max_depth, 3);
    assert!(config.pricing.rate("my-model").is_some());
    let env = |k: &str| match k {
        "WEFT_BIND" => Some("127.0.0.1:1".to_owned()),
        "DATABASE_URL" => Some("postgres://x/y".to_owned()),
        "WEFT_SCRIPT" => Some("s.json".to_owned()),
        "WEFT_API_KEYS" => Some("k1:alice, k2:bob,broken".to_owned()),
        _ => None,
    };
    config.apply_env(env);
    assert_eq!(config.server.bind, "127.0.0.1:1");
    assert_eq!(config.database.url, "postgres://x/y");
    assert_eq!(config.default_provider(), "scripted");
    let keys: Vec<_> = config
        .auth
        .api_keys
        .iter()
        .map(|k| (k.key.as_str(), k.user.as_str()))
        .collect();
    assert_eq!(keys, vec![("k1", "alice"), ("k2", "bob")]);
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    for (text, key) in [
        ("[server]\nbnid = \"x\"", "server.bnid"),
        ("[agent]\nmax_toolcalls = 3", "agent.max_toolcalls"),
        ("[sever]\nbind = \"x\"", "sever"),
        (
            "[auth]\napi_keys = [{ key = \"k\", usr = \"a\", user = \"a\" }]",
            "auth.api_keys.0.usr",
        ),
    ] {
        match Config::from_toml_strict(text) {
            Err(StrictError::Unknown(k)) => assert_eq!(k, key),
            other => panic!("{text}: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.toml");
    std::fs::write(&path, "[policy]\nworkspace_rot = \"w\"\n").unwrap();
    let e = Config::from_file(&path).unwrap_err().to_string();
    assert!(
        e.contains("weft.toml") && e.contains("policy.workspace_rot"),
        "{e}"
    );
}

#[test]
fn user_names_must_be_identifiers() {
    let mut config = Config::default();
    config.auth.api_keys = vec![ApiKeyEntry {
        key: "k".into(),
        user: "../etc".into(),
    }];
    assert!(config.validate().is_err());
    for name in [".", "..", ".hidden"] {
        config.auth.api_keys[0].user = name.into();
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("not starting with `.`"), "{name}: {e}");
    }
    // The environment's keys are checked the same way.
    let mut config = Config::default();
    config.apply_env(|k| (k == "WEFT_API_KEYS").then(|| "k1:..,k2:bob".to_owned()));
    assert!(config.validate().is_err());
    config.auth.api_keys[0].user = "alice.b".into();
    assert!(config.validate().is_ok());
}

#[test]
fn a_stalled_transaction_limit_is_off_or_at_least_a_second() {
    let mut config = Config::default();
    assert_eq!(config.database.stalled_transaction_ms, 5_000);
    for (ms, ok) in [
        (0, true),
        (999, false),
        (1, false),
        (1_000, true),
        (60_000, true),
    ] {
        config.database.stalled_transaction_ms = ms;
        match config.validate() {
            Ok(()) => assert!(ok, "{ms} was taken"),
            Err(e) => {
                assert!(!ok, "{ms}: {e}");
                assert!(e.to_string().contains("stalled_transaction_ms"), "{e}");
            }
        }
    }
}

#[test]
fn mcp_servers_need_distinct_names_and_one_transport() {
    let server = |name: &str, command: Option<&str>, url: Option<&str>| {
        toml::from_str::<weft_tools::mcp::McpServerConfig>(&format!(
            "name = {name:?}\n{}{}",
            command
                .map(|c| format!("command = {c:?}\n"))
                .unwrap_or_default(),
            url.map(|u| format!("url = {u:?}\n")).unwrap_or_default()
        ))
        .unwrap()
    };
    let check = |servers| {
        let mut config = Config::default();
        config.mcp.servers = servers;
        config.validate().map_err(|e| e.to_string())
    };
    assert!(check(vec![server("files", Some("npx"), None)]).is_ok());
    let twice = check(vec![
        server("files", Some("npx"), None),
        server("files", None, Some("http://x/mcp")),
    ]);
    assert!(twice.unwrap_err().contains("two servers are named"));
    let both = check(vec![server("files", Some("npx"), Some("http://x/mcp"))]);
    assert!(both.unwrap_err().contains("exactly one of"));
    assert!(check(vec![server("a__b", Some("npx"), None)]).is_err());
    assert!(check(vec![server("", Some("npx"), None)]).is_err());
}

#[test]
fn the_shipped_default_config_loads() {
    let config = Config::from_toml_strict(include_str!("../../../config/default.toml")).unwrap();
    assert_eq!(config.server.bind, "127.0.0.1:8080");
    assert_eq!(config.database.sqlite_synchronous, "normal");
}

/// Tables whose keys are the user's own (model names), documented by their header alone.
const FREE_FORM: [&str; 3] = ["pricing", "context_windows", "agent.injected_tool_args"];

/// Every key path of a config value: `server.bind`, `mcp.servers.name` (an array's keys from
/// its first element), a free-form table or an unset section as a path of its own.
fn key_paths(value: &serde_json::Value, prefix: &str, paths: &mut Vec<String>) {
    let child = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        serde_json::Value::Object(map) if !map.is_empty() && !FREE_FORM.contains(&prefix) => {
            for (key, value) in map {
                key_paths(value, &child(key), paths);
            }
        }
        serde_json::Value::Array(items) if items.first().is_some_and(|i| i.is_object()) => {
            paths.push(prefix.to_owned());
            key_paths(&items[0], prefix, paths);
        }
        _ => paths.push(prefix.to_owned()),
    }
}

/// Whether `config/default.toml` mentions `path`, set or commented out: `key =` under its
/// table's header, or a header of its own.
fn documented(text: &str, path: &str) -> bool {
    let header = |line: &str| -> Option<String> {
        let line = line.trim_start_matches('#').trim();
        let inner = line
            .strip_prefix("[[")
            .and_then(|l| l.split_once("]]"))
            .or_else(|| line.strip_prefix('[').and_then(|l| l.split_once(']')))?;
        let rest = inner.1.trim();
        (rest.is_empty() || rest.starts_with('#')).then(|| inner.0.to_owned())
    };
    let (table, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut current = String::new();
    for line in text.lines() {
        if let Some(name) = header(line) {
            if name == path {
                return true;
            }
            current = name;
            continue;
        }
        let assignment = line.trim_start_matches(['#', ' ']);
        let sets_key = assignment
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='));
        if current == table && sets_key {
            return true;
        }
    }
    false
}

#[test]
fn the_shipped_default_config_documents_every_key() {
    let text = include_str!("../../../config/default.toml");
    let mut config = Config::default();
    // Keys of optional sections and of list entries come from a filled-in example.
    config.mcp.servers = vec![toml::from_str("name = \"files\"\ncommand = \"npx\"").unwrap()];
    let mut paths = Vec::new();
    key_paths(&serde_json::to_value(&config).unwrap(), "", &mut paths);
    assert!(paths.len() > 100, "{paths:?}");
    let missing: Vec<&String> = paths.iter().filter(|p| !documented(text, p)).collect();
    assert!(
        missing.is_empty(),
        "config/default.toml does not mention {missing:?}"
    );
}

#[test]
fn weft_database_url_beats_database_url() {
    let mut config = Config::default();
    config.apply_env(|k| match k {
        "WEFT_DATABASE_URL" => Some("sqlite://a.db".to_owned()),
        "DATABASE_URL" => Some("postgres://b".to_owned()),
        _ => None,
    });
    assert_eq!(config.database.url, "sqlite://a.db");
}

#[test]
fn provider_falls_back_to_the_environment_then_the_demo() {
    let mut config = Config::default();
    assert_eq!(config.default_provider(), "demo");
    config.apply_env(|k| (k == "OPENAI_API_KEY").then(|| "sk".to_owned()));
    assert_eq!(config.default_provider(), "openai");
}

#[test]
fn a_bus_needs_postgresql() {
    let mut config = Config::default();
    config.apply_env(|k| (k == "WEFT_NATS_URL").then(|| "nats://127.0.0.1:4222".to_owned()));
    assert_eq!(config.cluster.nats_url, "nats://127.0.0.1:4222");
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("SQLite") && e.contains("nats_url"), "{e}");
    config.database.url = "postgres://127.0.0.1/weft".into();
    assert!(config.validate().is_ok());
}
