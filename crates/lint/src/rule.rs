//! What a rule is: its metadata and the [`Rule`] trait. Rules depend on this module and on
//! [`crate::context`]; only [`crate::registry`] lists them, so no rule depends on the list.

use crate::context::Context;
use crate::diagnostic::Diagnostic;
pub use crate::diagnostic::{RuleMeta, Severity};

/// One check over the whole set of objects (rules see every object, so cross-object checks are
/// ordinary rules).
pub trait Rule: Sync {
    fn meta(&self) -> &'static RuleMeta;

    /// Appends findings. Must not panic on any input: objects may be half-valid.
    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>);

    fn code(&self) -> &'static str {
        self.meta().code
    }
}
