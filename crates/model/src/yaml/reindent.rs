//! Lines inside flow collections that the API's own clients read and saphyr refuses.
//!
//! In flow context (`[` … `]`, `{` … `}`) saphyr holds every line one column right of the
//! enclosing block, as the YAML spec says; go-yaml (kubectl), libyaml and PyYAML do not check
//! it. Public NodePools close `values: [` with a `]` under `values`, and a reader stricter than
//! kubectl loses its user at the first file (issue 53). Such a refusal moves that line one
//! space right and reads the text again, within a budget, and every position is mapped back
//! to the original text. The differential test over `fixtures/yaml-odd` holds the verdicts to
//! kubectl's.

use std::collections::BTreeMap;

use super::{Document, Pos, YamlError};

/// Whether saphyr refused a line inside a flow collection for its indentation: the one check
/// of the YAML spec that go-yaml (kubectl), libyaml and PyYAML do not make. In flow context
/// saphyr wants every line one column right of the enclosing block's, so a `]` under its key
/// (`values: [` … `]`, as in public NodePools) is "invalid indentation" there and valid to the
/// API's own clients.
pub(super) fn is_flow_indentation(e: &YamlError) -> bool {
    matches!(
        e.message.as_str(),
        "invalid indentation" | "invalid indentation in flow construct"
    )
}

/// The input with lines that saphyr refused inside flow collections moved right, one space
/// per refusal, and the way back to the original's positions. Bounded: at most
/// [`Reindented::MAX_SHIFTS`] re-reads of the whole text, then the refusal stands.
pub(super) struct Reindented {
    pub(super) text: String,
    /// Spaces added at the start of each 1-based line.
    added: BTreeMap<usize, usize>,
    shifts: usize,
}

impl Reindented {
    /// A line under its key needs one space; a line at column 1 of a deep flow a few more.
    const MAX_SHIFTS: usize = 64;
    /// Bytes read again in all, so a large hostile text cannot buy 64 full re-reads.
    const REREAD_BUDGET: usize = 16 * 1024 * 1024;

    pub(super) fn new(text: &str) -> Self {
        Reindented {
            text: text.to_owned(),
            added: BTreeMap::new(),
            shifts: 0,
        }
    }

    /// Adds a space at the start of 1-based `line`; false when the budget is spent or the line
    /// does not exist.
    pub(super) fn shift(&mut self, line: usize) -> bool {
        let reread = self.text.len().saturating_mul(self.shifts + 1);
        if self.shifts >= Self::MAX_SHIFTS || reread > Self::REREAD_BUDGET || line == 0 {
            return false;
        }
        let start = if line == 1 {
            0
        } else {
            match self.text.match_indices('\n').nth(line - 2) {
                Some((at, _)) => at + 1,
                None => return false,
            }
        };
        self.text.insert(start, ' ');
        *self.added.entry(line).or_insert(0) += 1;
        self.shifts += 1;
        true
    }

    /// `pos` in the re-indented text as a position in the original.
    pub(super) fn original(&self, pos: Pos) -> Pos {
        let added = self.added.get(&pos.line).copied().unwrap_or(0);
        Pos {
            line: pos.line,
            col: pos.col.saturating_sub(added).max(1),
        }
    }

    /// `index` (a character offset in the re-indented text) as one in the original: the spaces
    /// added on earlier lines come off, and those of its own line before it.
    fn original_index(&self, index: u32, line_starts: &[(u32, usize, usize)]) -> u32 {
        // line_starts: (start in the re-indented text, spaces added before that line, on it).
        let at = line_starts.partition_point(|(start, _, _)| *start <= index);
        match at.checked_sub(1).map(|i| line_starts[i]) {
            Some((start, before, on)) => {
                let into = (index - start) as usize;
                let removed = before + into.min(on);
                index.saturating_sub(u32::try_from(removed).unwrap_or(u32::MAX))
            }
            None => index,
        }
    }

    /// Moves a document read from the re-indented text onto the original's positions.
    pub(super) fn restore(&self, doc: &mut Document) {
        doc.move_positions(|p| self.original(p));
        // Where each shifted line starts in the re-indented text, in characters.
        let mut line_starts = Vec::new();
        let mut before = 0usize;
        if let Some(&on) = self.added.get(&1) {
            line_starts.push((0, 0, on));
            before = on;
        }
        let mut line = 1usize;
        for (chars, c) in self.text.chars().enumerate() {
            if c == '\n' {
                line += 1;
                if let Some(&on) = self.added.get(&line) {
                    let start = u32::try_from(chars + 1).unwrap_or(u32::MAX);
                    line_starts.push((start, before, on));
                    before += on;
                }
            }
        }
        for node in &mut doc.located.nodes {
            if let Some((start, end)) = node.span {
                node.span = Some((
                    self.original_index(start, &line_starts),
                    self.original_index(end, &line_starts),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{LoadLimits, load_documents};
    use crate::FieldPath;
    use crate::yaml::Pos;

    fn odd(name: &str) -> String {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/yaml-odd");
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    /// Differential: on every file of `fixtures/yaml-odd` our reader's verdict is kubectl's
    /// (go-yaml's, recorded in verdicts.tsv by its `verdicts` script, PyYAML's beside it).
    #[test]
    fn our_verdicts_are_kubectls() {
        let table = odd("verdicts.tsv");
        let mut rows = 0;
        for line in table.lines().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            let (file, go_yaml) = (cols[0], cols[1]);
            let text = std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../fixtures/yaml-odd")
                    .join(file),
            )
            .unwrap();
            let text = String::from_utf8(text).unwrap();
            let ours = match load_documents(&text, LoadLimits::default()) {
                Ok(_) => "ok",
                Err(_) => "refused",
            };
            assert_eq!(ours, go_yaml, "{file}: ours {ours}, kubectl's {go_yaml}");
            rows += 1;
        }
        assert!(rows >= 12, "only {rows} files");
    }

    /// Positions and scalar ranges of values on moved lines are the original text's.
    #[test]
    fn positions_are_the_originals() {
        let text = odd("flow-closed-under-key.yaml");
        let docs = load_documents(&text, LoadLimits::default()).unwrap();
        let doc = &docs[0];
        let path = FieldPath::parse("requirements[0].values[2]");
        assert_eq!(doc.value["requirements"][0]["values"][2], "r5d");
        assert_eq!(doc.pos(&path), Pos { line: 6, col: 7 });
        let range = doc.scalar_byte_range(&text, &path).unwrap();
        assert_eq!(&text[range], "\"r5d\"");
        // A value after the moved lines is where it was too.
        let arch = FieldPath::parse("requirements[1].values[0]");
        assert_eq!(doc.pos(&arch), Pos { line: 9, col: 14 });
        assert_eq!(
            &text[doc.scalar_byte_range(&text, &arch).unwrap()],
            "\"amd64\""
        );

        let text = odd("flow-items-at-column-1.yaml");
        let doc = &load_documents(&text, LoadLimits::default()).unwrap()[0];
        assert_eq!(
            doc.value["spec"]["values"],
            serde_json::json!(["a", "b", "c"])
        );
        assert_eq!(
            doc.pos(&FieldPath::parse("spec.values[1]")),
            Pos { line: 3, col: 4 }
        );
        assert_eq!(
            doc.pos(&FieldPath::parse("spec.values[2]")),
            Pos { line: 4, col: 1 }
        );
    }

    /// What stays refused is reported at the original position, and the re-reads are bounded:
    /// a flow line 80 columns left of its block (kubectl would read it) needs more moves than
    /// the budget and is refused, quickly, rather than read 80 times.
    #[test]
    fn refusals_stay_located_and_bounded() {
        let e = load_documents(&odd("unclosed-flow.yaml"), LoadLimits::default()).unwrap_err();
        assert_eq!(e.pos.line, 2, "{e}");
        let nested: String = (0..40)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect::<String>()
            + &format!("{}v: [\na]\n", "  ".repeat(40));
        let e = load_documents(&nested, LoadLimits::default()).unwrap_err();
        assert_eq!(e.pos.line, 42, "{e}");
        assert!(e.pos.col >= 1);
    }
}
