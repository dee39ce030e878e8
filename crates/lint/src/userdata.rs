//! Reading a userData shell script the way a reviewer does: commands with their line numbers,
//! continuation lines joined, comments skipped. Not a shell parser; rules use it for patterns
//! (an IMDS call, a kubelet flag) and must tolerate scripts it does not understand.

use std::collections::BTreeMap;

/// One logical command: a line plus the lines it continues onto with a trailing `\`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// 1-based line of the script where the command starts.
    pub line: usize,
    /// 1-based column of its first non-blank character.
    pub col: usize,
    /// The command with continuations joined by a space.
    pub text: String,
}

/// The commands of `script`, comment lines left out.
pub fn commands(script: &str) -> Vec<Command> {
    let mut out = Vec::new();
    let mut current: Option<Command> = None;
    for (i, raw) in script.lines().enumerate() {
        let line = raw.trim_end();
        let (body, continues) = match line.strip_suffix('\\') {
            Some(body) => (body, true),
            None => (line, false),
        };
        match &mut current {
            Some(cmd) => {
                cmd.text.push(' ');
                cmd.text.push_str(body.trim());
            }
            None => {
                let trimmed = body.trim_start();
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    continue;
                }
                current = Some(Command {
                    line: i + 1,
                    col: body.len() - trimmed.len() + 1,
                    text: trimmed.trim_end().to_owned(),
                });
            }
        }
        if !continues && let Some(cmd) = current.take() {
            out.push(cmd);
        }
    }
    out.extend(current);
    out
}

/// Values of a kubelet flag (`--node-labels=a=b,c=d` or `--node-labels a=b`) anywhere in the
/// script, with the 1-based line they are on.
pub fn flag_values(script: &str, flag: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in script.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find(flag) {
            let after = &rest[at + flag.len()..];
            let value = match after.strip_prefix('=').or_else(|| after.strip_prefix(' ')) {
                Some(v) => v
                    .trim_start_matches(['"', '\''])
                    .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                    .next()
                    .unwrap_or_default(),
                None => "",
            };
            if !value.is_empty() {
                out.push((i + 1, value.to_owned()));
            }
            rest = after;
        }
    }
    out
}

/// `--node-labels` of the script as a map; values built from shell variables are skipped.
pub fn node_labels(script: &str) -> BTreeMap<String, String> {
    flag_values(script, "--node-labels")
        .into_iter()
        .flat_map(|(_, list)| {
            list.split(',')
                .filter_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    (!k.contains('$') && !v.contains('$')).then(|| (k.to_owned(), v.to_owned()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A comment line of a script (`#!` included).
fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// One use of a command-line flag in a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagUse {
    /// 1-based line of the script.
    pub line: usize,
    /// 1-based column of the flag's first `-`.
    pub col: usize,
    /// Its value with surrounding quotes removed (`--token "$TOKEN"` → `$TOKEN`); empty when it
    /// has none.
    pub value: String,
}

/// Every use of `flag` outside comment lines, written `--flag=V`, `--flag V` or `--flag \`
/// with `V` on the next line. The flag must stand alone: `--token` matches neither
/// `--token-ttl` nor `--discovery-token`. Works inside `KUBELET_EXTRA_ARGS=...` and
/// `Environment="KUBELET_EXTRA_ARGS=..."` alike.
pub fn flag_uses(script: &str, flag: &str) -> Vec<FlagUse> {
    let lines: Vec<&str> = script.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if is_comment(line) || flag.is_empty() {
            continue;
        }
        let mut from = 0;
        // Characters before `counted_to`, so columns cost no rescan of a long line.
        let (mut counted_to, mut chars_before) = (0, 0);
        while let Some(found) = line.get(from..).and_then(|rest| rest.find(flag)) {
            let at = from + found;
            from = at + flag.len();
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                continue;
            }
            let after = &line[at + flag.len()..];
            let value = match after.chars().next() {
                Some('=') => flag_value(&after[1..]),
                Some(c) if c.is_whitespace() => {
                    let rest = after.trim_start();
                    if rest == "\\" {
                        lines
                            .get(i + 1)
                            .map(|next| flag_value(next.trim_start()))
                            .unwrap_or_default()
                    } else {
                        flag_value(rest)
                    }
                }
                None => String::new(),
                Some(_) => continue,
            };
            let value = if value.starts_with("--") {
                String::new()
            } else {
                value
            };
            chars_before += line[counted_to..at].chars().count();
            counted_to = at;
            out.push(FlagUse {
                line: i + 1,
                col: chars_before + 1,
                value,
            });
        }
    }
    out
}

/// A flag's value at the start of `text`: a quoted string, or up to whitespace or a quote.
fn flag_value(text: &str) -> String {
    match text.chars().next() {
        Some(q @ ('"' | '\'')) => text[1..].split(q).next().unwrap_or_default().to_owned(),
        _ => text
            .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// A shell variable assignment (`NAME=value`, `export NAME="value"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// 1-based line of the script.
    pub line: usize,
    /// 1-based column of the name.
    pub col: usize,
    pub name: String,
    /// The value after quote removal; `$VAR`, `${VAR}` and `$(...)` are kept as written.
    pub value: String,
}

/// Every variable assignment outside comment lines and quoted strings.
pub fn assignments(script: &str) -> Vec<Assignment> {
    let mut out = Vec::new();
    for (i, line) in script.lines().enumerate() {
        if is_comment(line) {
            continue;
        }
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let mut quote: Option<char> = None;
        let mut k = 0;
        while k < chars.len() {
            let (at, c) = chars[k];
            if let Some(q) = quote {
                if c == q {
                    quote = None;
                } else if c == '\\' && q == '"' {
                    k += 1;
                }
                k += 1;
                continue;
            }
            match c {
                '\'' | '"' => {
                    quote = Some(c);
                    k += 1;
                    continue;
                }
                '\\' => {
                    k += 2;
                    continue;
                }
                '#' if k == 0 || chars[k - 1].1.is_whitespace() => break,
                _ => {}
            }
            let starts_word = k == 0 || " \t;&|(){}".contains(chars[k - 1].1);
            if !(starts_word && (c.is_ascii_alphabetic() || c == '_')) {
                k += 1;
                continue;
            }
            let end = chars[k..]
                .iter()
                .position(|(_, ch)| !(ch.is_ascii_alphanumeric() || *ch == '_'))
                .map_or(chars.len(), |n| k + n);
            let name_end = chars.get(end).map_or(line.len(), |(b, _)| *b);
            let is_assignment = chars.get(end).is_some_and(|(_, ch)| *ch == '=')
                && !chars
                    .get(end + 1)
                    .is_some_and(|(_, ch)| *ch == '=' || *ch == '~');
            if !is_assignment {
                k = end.max(k + 1);
                continue;
            }
            let value_at = name_end + 1;
            let (value, used) = shell_word(&line[value_at..]);
            out.push(Assignment {
                line: i + 1,
                col: k + 1,
                name: line[at..name_end].to_owned(),
                value,
            });
            let next_byte = value_at + used;
            k = chars[end..]
                .iter()
                .position(|(b, _)| *b >= next_byte)
                .map_or(chars.len(), |n| end + n)
                .max(end + 1);
        }
    }
    out
}

/// Reads one shell word at the start of `text`: quotes removed, `$(...)` kept whole (nested
/// quotes included). Returns the word and the bytes it took.
fn shell_word(text: &str) -> (String, usize) {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut iter = text.char_indices().peekable();
    while let Some((at, c)) = iter.next() {
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                } else {
                    out.push(c);
                }
                continue;
            }
            Some(_) if c == '"' && depth == 0 => {
                quote = None;
                continue;
            }
            None if depth == 0 && (c.is_whitespace() || matches!(c, ';' | '&' | '|' | ')')) => {
                return (out, at);
            }
            None if c == '\'' => {
                quote = Some('\'');
                continue;
            }
            None if c == '"' && depth == 0 => {
                quote = Some('"');
                continue;
            }
            _ => {}
        }
        match c {
            '\\' => {
                out.push(c);
                if let Some((_, next)) = iter.next() {
                    out.push(next);
                }
            }
            '$' if iter.peek().is_some_and(|(_, n)| *n == '(') => {
                depth += 1;
                out.push(c);
                if let Some((_, open)) = iter.next() {
                    out.push(open);
                }
            }
            ')' if depth > 0 => {
                depth -= 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    (out, text.len())
}

/// The variable `text` is exactly one reference to (`$NAME`, `${NAME}`, `${NAME:-x}`).
pub fn variable_ref(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('$')?;
    let name = match rest.strip_prefix('{') {
        Some(inner) => {
            let inner = inner.strip_suffix('}')?;
            let end = inner
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(inner.len());
            if end < inner.len() && !inner[end..].starts_with([':', '-', '=', '?', '+']) {
                return None;
            }
            &inner[..end]
        }
        None => {
            if !rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            rest
        }
    };
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    valid.then_some(name)
}

/// The value `name` was last given with a non-empty value at or before `line` (else anywhere).
pub fn assigned<'a>(
    assignments: &'a [Assignment],
    name: &str,
    line: usize,
) -> Option<&'a Assignment> {
    let mut of_name = assignments
        .iter()
        .filter(|a| a.name == name && !a.value.is_empty());
    let before = of_name.clone().rfind(|a| a.line <= line);
    before.or_else(|| of_name.next_back())
}

/// Whether a command of the script runs `kubeadm join`.
pub fn joins_with_kubeadm(script: &str) -> bool {
    commands(script).iter().any(|c| {
        let words: Vec<&str> = c.text.split_whitespace().collect();
        words
            .windows(2)
            .any(|w| w[0].trim_matches(['"', '\'']).ends_with("kubeadm") && w[1] == "join")
    })
}

/// Where the script sets the kubelet's extra flags (`KUBELET_EXTRA_ARGS`): the first such line
/// and the column of the name. Findings about a missing kubelet flag point there.
pub fn kubelet_args_at(script: &str) -> Option<(usize, usize)> {
    script.lines().enumerate().find_map(|(i, line)| {
        if is_comment(line) {
            return None;
        }
        let at = line.find("KUBELET_EXTRA_ARGS=")?;
        Some((i + 1, line[..at].chars().count() + 1))
    })
}

/// The first `kubeadm join` command: line and column.
pub fn kubeadm_join_at(script: &str) -> Option<(usize, usize)> {
    commands(script)
        .into_iter()
        .find(|c| c.text.contains("kubeadm join"))
        .map(|c| (c.line, c.col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_join_continuations_and_skip_comments() {
        let cmds = commands("#!/bin/bash\n# c\n  kubeadm join x \\\n    --token t\necho hi\n");
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].line, 3);
        assert_eq!(cmds[0].col, 3);
        assert_eq!(cmds[0].text, "kubeadm join x --token t");
        assert_eq!(cmds[1].line, 5);
    }

    #[test]
    fn node_labels_from_kubelet_args() {
        let labels = node_labels(
            "Environment=\"KUBELET_EXTRA_ARGS=--cloud-provider=external --node-labels=a=b,node.accelerator=nvidia-gpu,x=${Y}\"\n",
        );
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["node.accelerator"], "nvidia-gpu");
    }
}
