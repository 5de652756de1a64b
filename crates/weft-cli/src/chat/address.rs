//! The server's addresses from what the user typed: its base URL or its `/ws` address.

/// The websocket address: `http://h:8080`, `http://h:8080/` and `ws://h:8080/ws` all give
/// `ws://h:8080/ws`.
pub fn websocket(url: &str) -> String {
    let base = base(url);
    let base = match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some(("http", rest)) => format!("ws://{rest}"),
        _ => base,
    };
    format!("{base}/ws")
}

/// The REST base: `ws://h:8080/ws` gives `http://h:8080`.
pub fn base(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let url = url.strip_suffix("/ws").unwrap_or(url);
    match url.split_once("://") {
        Some(("wss", rest)) => format!("https://{rest}"),
        Some(("ws", rest)) => format!("http://{rest}"),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_or_ws_address() {
        for url in [
            "http://h:8080",
            "http://h:8080/",
            "ws://h:8080/ws",
            "http://h:8080/ws/",
        ] {
            assert_eq!(websocket(url), "ws://h:8080/ws", "{url}");
            assert_eq!(base(url), "http://h:8080", "{url}");
        }
        assert_eq!(websocket("https://h/weft"), "wss://h/weft/ws");
        assert_eq!(base("wss://h/weft/ws"), "https://h/weft");
    }
}
