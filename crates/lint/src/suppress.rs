//! Inline suppressions.
//!
//! `# kubean-karpenter-lint: disable=KK007,KK008` silences those codes for a finding on the
//! same line or the line after, and for every finding of an object whose first line is that
//! line or the next. `# kubean-karpenter-lint: disable-file=KK007` in the comment block at the
//! top of a file silences the codes for the whole file. `all` stands for every code.

use std::collections::{BTreeMap, BTreeSet};

use crate::diagnostic::Diagnostic;

/// The comment marker of inline suppressions.
pub const DIRECTIVE: &str = "kubean-karpenter-lint:";

/// The inline suppressions of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    /// Codes disabled for the whole file (`all` included as is).
    pub file: BTreeSet<String>,
    /// Codes disabled by a comment on each line.
    pub lines: BTreeMap<usize, BTreeSet<String>>,
}

impl Directives {
    pub fn parse(text: &str) -> Self {
        let mut directives = Directives::default();
        let mut in_header = true;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            let is_comment = trimmed.starts_with('#');
            if !(trimmed.is_empty() || is_comment || trimmed == "---") {
                in_header = false;
            }
            let Some(at) = line.find('#') else { continue };
            // Every `#` on the line, so `key: value # kubean-karpenter-lint: ...` works too.
            for comment in line[at..].split('#').skip(1) {
                let Some(rest) = comment.trim_start().strip_prefix(DIRECTIVE) else {
                    continue;
                };
                for word in rest.split_whitespace() {
                    if let Some(codes) = word.strip_prefix("disable-file=") {
                        if in_header && is_comment {
                            directives.file.extend(split_codes(codes));
                        }
                    } else if let Some(codes) = word.strip_prefix("disable=") {
                        directives
                            .lines
                            .entry(i + 1)
                            .or_default()
                            .extend(split_codes(codes));
                    }
                }
            }
        }
        directives
    }

    fn line_disables(&self, line: usize, code: &str) -> bool {
        self.lines
            .get(&line)
            .is_some_and(|codes| codes.contains(code) || codes.contains("all"))
    }

    /// Whether `diagnostic` (of an object starting at `object_line`) is silenced here.
    pub fn suppresses(&self, diagnostic: &Diagnostic, object_line: usize) -> bool {
        let code = diagnostic.code;
        if self.file.contains(code) || self.file.contains("all") {
            return true;
        }
        let line = diagnostic.pos.line;
        [
            line,
            line.saturating_sub(1),
            object_line,
            object_line.saturating_sub(1),
        ]
        .into_iter()
        .filter(|l| *l > 0)
        .any(|l| self.line_disables(l, code))
    }
}

fn split_codes(codes: &str) -> impl Iterator<Item = String> + '_ {
    codes
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            if c.eq_ignore_ascii_case("all") {
                "all".to_owned()
            } else {
                c.to_ascii_uppercase()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_on_lines_and_file() {
        let d = Directives::parse(
            "# kubean-karpenter-lint: disable-file=KK017\n---\nkind: X # kubean-karpenter-lint: disable=kk007,KK008\n# kubean-karpenter-lint: disable-file=KK002\n",
        );
        assert_eq!(d.file, BTreeSet::from(["KK017".to_owned()]));
        assert_eq!(
            d.lines[&3],
            BTreeSet::from(["KK007".to_owned(), "KK008".to_owned()])
        );
    }
}
