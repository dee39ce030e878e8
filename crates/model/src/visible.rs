//! Text read from a cluster or an AWS account, made safe to show: in a terminal, a log line or
//! a YAML comment. A Node writes its own `status.nodeInfo`, so whoever controls a kubelet
//! controls those bytes; unescaped, an ESC sequence retitles or rewrites the reader's terminal,
//! a newline ends a YAML comment and starts a key, and a bidi override shows text in another
//! order than it is read (issue 47 item 10). Every such character is shown as an escape
//! instead; all other text, other scripts included, passes unchanged.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal or a comment as itself: C0 and C1 controls (ESC, BEL,
/// CR, LF, NEL…), DEL, the line and paragraph separators, the bidi embeddings, overrides,
/// isolates and marks, zero-width characters and the BOM.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `text` with every [`is_unsafe`] character, and the backslash (so an escape in the input
/// cannot pass for one of ours), written as a Rust-style escape: `\e` for ESC, `\n`, `\r`,
/// `\t`, `\\`, else `\u{…}`. Borrowed when nothing needs escaping.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || is_unsafe(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A YAML double-quoted scalar that reads back as exactly `text`, with every [`is_unsafe`]
/// character escaped (YAML's `\uXXXX`/`\UXXXXXXXX`), so the line stays one line on any screen
/// and in any YAML 1.1 or 1.2 reader (NEL and the separators break lines in YAML 1.1).
pub fn yaml_double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) && (c as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTACK: &str = "\x1b]0;pwned\x07\n# injected: true";

    #[test]
    fn plain_text_and_other_scripts_pass_unchanged() {
        for text in ["v1.36.3", "sha256:…", "Knoten — ノード", ""] {
            assert!(matches!(visible(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn terminal_escapes_newlines_and_bidi_are_shown_not_obeyed() {
        assert_eq!(visible(ATTACK), "\\e]0;pwned\\u{7}\\n# injected: true");
        assert_eq!(visible("a\u{202e}b\u{2066}c"), "a\\u{202e}b\\u{2066}c");
        assert_eq!(visible("x\u{85}y\u{2028}z\r"), "x\\u{85}y\\u{2028}z\\r");
        assert_eq!(visible("\u{9b}31m\u{7f}"), "\\u{9b}31m\\u{7f}");
        // An escape already in the input stays distinguishable from one of ours.
        assert_eq!(visible("\\e"), "\\\\e");
        let shown = visible(ATTACK);
        assert!(!shown.chars().any(is_unsafe), "{shown}");
    }

    #[test]
    fn the_yaml_scalar_reads_back_as_the_text_and_stays_one_line() {
        for text in [
            ATTACK,
            "a\u{202e}b",
            "x\u{85}y\u{2028}z\r\t\"q\"\\",
            "plain",
            "emoji 🙂 and \u{1f}",
        ] {
            let quoted = yaml_double_quoted(text);
            assert!(!quoted.chars().any(is_unsafe), "{quoted:?}");
            let doc = format!("key: {quoted}  # comment\n");
            let docs =
                crate::yaml::load_documents(&doc, crate::yaml::LoadLimits::default()).unwrap();
            assert_eq!(docs[0].value["key"], serde_json::json!(text), "{quoted}");
            assert_eq!(docs[0].value.as_object().unwrap().len(), 1);
        }
    }
}
