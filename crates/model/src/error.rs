//! The one error type for "a problem at file:line:col" that spec, sim and lint report.

use std::fmt;

use crate::yaml::Pos;

/// A problem located in an input: `file:line:col: field: message`, where the position is
/// missing when the problem is about the file as a whole (or no file at all, as `<options>`) and
/// the field is empty when it is about the whole document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub struct LocatedError {
    /// The input's name as the user gave it (`pools.yaml`, `-`).
    pub file: String,
    pub pos: Option<Pos>,
    /// The field path as written in messages (`spec.template.spec.containers[0].image`); empty
    /// for the whole document or file.
    pub field: String,
    pub message: String,
}

impl LocatedError {
    /// A problem with the file or document as a whole.
    pub fn new(file: &str, pos: Option<Pos>, message: impl Into<String>) -> LocatedError {
        LocatedError {
            file: file.to_owned(),
            pos,
            field: String::new(),
            message: message.into(),
        }
    }

    /// The same problem, at `field` (a path such as `spec.pools[0].name`).
    pub fn at_field(mut self, field: impl Into<String>) -> LocatedError {
        self.field = field.into();
        self
    }
}

impl fmt::Display for LocatedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(pos) = self.pos {
            write!(f, ":{pos}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_file_line_col_field_message() {
        let at = Some(Pos { line: 3, col: 7 });
        assert_eq!(
            LocatedError::new("a.yaml", at, "bad")
                .at_field("spec.x")
                .to_string(),
            "a.yaml:3:7: spec.x: bad"
        );
        assert_eq!(
            LocatedError::new("a.yaml", at, "bad").to_string(),
            "a.yaml:3:7: bad"
        );
        assert_eq!(
            LocatedError::new("-", None, "too big").to_string(),
            "-: too big"
        );
    }
}
