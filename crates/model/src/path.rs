//! Field paths in the apiserver's spelling: `spec.pools[0].name`, `metadata.labels[node.kubernetes.io/x]`.

use std::fmt;

/// One step into a document: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// A path from the document root to a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<PathSeg>);

impl FieldPath {
    pub fn root() -> Self {
        Self(Vec::new())
    }

    pub fn key(&self, key: &str) -> Self {
        let mut next = self.clone();
        next.0.push(PathSeg::Key(key.to_owned()));
        next
    }

    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(PathSeg::Index(index));
        next
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path one step up, or `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        let mut up = self.clone();
        up.0.pop().map(|_| up)
    }

    /// Parses `a.b[0][c.d]`, the inverse of `Display`. Keys holding `.` or `/`
    /// are written in brackets, as the apiserver does for map keys.
    pub fn parse(text: &str) -> Self {
        let mut segs = Vec::new();
        let mut chars = text.char_indices().peekable();
        let mut current = String::new();
        while let Some((_, c)) = chars.next() {
            match c {
                '.' => {
                    if !current.is_empty() {
                        segs.push(PathSeg::Key(std::mem::take(&mut current)));
                    }
                }
                '[' => {
                    if !current.is_empty() {
                        segs.push(PathSeg::Key(std::mem::take(&mut current)));
                    }
                    let mut inner = String::new();
                    for (_, c) in chars.by_ref() {
                        if c == ']' {
                            break;
                        }
                        inner.push(c);
                    }
                    match inner.parse::<usize>() {
                        Ok(index) => segs.push(PathSeg::Index(index)),
                        Err(_) => segs.push(PathSeg::Key(inner)),
                    }
                }
                c => current.push(c),
            }
        }
        if !current.is_empty() {
            segs.push(PathSeg::Key(current));
        }
        Self(segs)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSeg::Index(index) => write!(f, "[{index}]")?,
                PathSeg::Key(key) if needs_brackets(key) => write!(f, "[{key}]")?,
                PathSeg::Key(key) if i == 0 => write!(f, "{key}")?,
                PathSeg::Key(key) => write!(f, ".{key}")?,
            }
        }
        Ok(())
    }
}

fn needs_brackets(key: &str) -> bool {
    key.is_empty() || key.chars().any(|c| matches!(c, '.' | '/' | '[' | ']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_are_inverse() {
        let path = FieldPath::root()
            .key("spec")
            .key("pools")
            .index(2)
            .key("labels")
            .key("node.kubernetes.io/x");
        let text = path.to_string();
        assert_eq!(text, "spec.pools[2].labels[node.kubernetes.io/x]");
        assert_eq!(FieldPath::parse(&text), path);
    }

    #[test]
    fn parent_walks_up() {
        let path = FieldPath::parse("a.b[3]");
        assert_eq!(path.parent().unwrap().to_string(), "a.b");
        assert_eq!(FieldPath::root().parent(), None);
    }
}
