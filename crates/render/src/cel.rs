//! CEL string literals for the admission policies we render.
//!
//! Every string from the spec that lands in a policy expression goes through
//! [`string_literal`]: a quote in a name must end nothing, so it cannot turn
//! `request.userInfo.username == '<name>'` into an expression of its author's choosing.

/// `s` as a single-quoted CEL string literal that evaluates to exactly `s` (a `"` needs no
/// escape between single quotes).
pub fn string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::string_literal;
    use kube_cel::cel::{Context, Program, Value};
    use std::sync::Arc;

    /// The attack (finding #10; a CEL evaluation with the `cel` crate, not the apiserver's
    /// cel-go — validation refuses such names before any policy is rendered, this is the
    /// second wall): a name that closes the string and appends `|| true` would make the
    /// rotator's match condition match everyone, or `&& false` no one. Escaped, the literal
    /// equals the name exactly and the expression compares one string.
    #[test]
    fn a_quote_in_a_name_cannot_end_the_cel_string() {
        for hostile in [
            "x' || true || '",
            "x' && false && '",
            "back\\slash' || '",
            "new\nline",
            "tab\there",
            "double\"quote",
            "nul\u{0}bell\u{7}",
            "ünïcödé",
        ] {
            let account = format!("system:serviceaccount:{hostile}:kubean-karpenter-rotator");
            let expression = format!("user == {}", string_literal(&account));
            let program = Program::compile(&expression)
                .unwrap_or_else(|e| panic!("{hostile:?}: {expression}: {e}"));
            for (user, want) in [(account.as_str(), true), ("system:anonymous", false)] {
                let mut ctx = Context::default();
                ctx.add_variable_from_value("user", Value::String(Arc::new(user.to_owned())));
                assert_eq!(
                    program.execute(&ctx).unwrap(),
                    Value::Bool(want),
                    "{hostile:?} as {user:?}: {expression}"
                );
            }
        }
    }
}
