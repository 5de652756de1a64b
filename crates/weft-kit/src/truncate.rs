//! Tool-result size cap: cut at a UTF-8 boundary and end with the truncation marker.

/// Cut `text` so the whole result, marker included, fits in `max_bytes`.
///
/// Returns the text unchanged when it already fits.
pub fn truncate_result(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let full = text.len() as u64;
    cut_with_marker(text, max_bytes, &marker(full))
}

/// The start of something `full_bytes` long (a file read only partly), cut to fit
/// `max_bytes` with the marker giving the true size.
pub fn truncate_known_size(text: String, max_bytes: usize, full_bytes: u64) -> String {
    if text.len() as u64 >= full_bytes && text.len() <= max_bytes {
        return text;
    }
    cut_with_marker(text, max_bytes, &marker(full_bytes))
}

fn marker(full_bytes: u64) -> String {
    format!("[…truncated; full result {full_bytes} bytes]")
}

/// Cut `text` at a UTF-8 boundary so that it and `marker` fit in `max_bytes`, then append
/// the marker.
pub fn cut_with_marker(text: String, max_bytes: usize, marker: &str) -> String {
    let mut cut = max_bytes.saturating_sub(marker.len());
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + marker.len());
    out.push_str(&text[..cut]);
    out.push_str(marker);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate_result("abc".into(), 10), "abc");
    }

    #[test]
    fn cuts_at_char_boundary_and_appends_marker() {
        let text = "é".repeat(100); // 200 bytes
        let out = truncate_result(text, 80);
        assert!(out.len() <= 80, "{} bytes", out.len());
        assert!(out.ends_with("[…truncated; full result 200 bytes]"));
        let body = out.trim_end_matches("[…truncated; full result 200 bytes]");
        assert!(body.chars().all(|c| c == 'é'));
        assert!(!body.is_empty());
    }
}
