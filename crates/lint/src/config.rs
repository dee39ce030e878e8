//! Turning rules off for a whole run: a config file (`disable: [KK007]`). Inline comments are
//! in [`crate::suppress`].

use std::collections::BTreeSet;

use kk_model::LocatedError;
use kk_model::yaml::{LoadLimits, load_documents};
use serde_json::Value;

use crate::registry;

/// The file looked up in the working directory and its parents when `--config` is not given.
pub const CONFIG_FILE_NAME: &str = ".kubean-karpenter-lint.yaml";

/// Run-wide settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Codes of rules that do not run.
    pub disable: BTreeSet<String>,
}

impl Config {
    /// Reads a config file. Unknown keys and codes are errors: a typo must not silently
    /// leave a rule on.
    pub fn parse(text: &str, file: &str) -> Result<Self, LocatedError> {
        let limits = LoadLimits {
            max_bytes: 1024 * 1024,
            max_depth: 16,
            max_nodes: 10_000,
            ..LoadLimits::default()
        };
        let docs = load_documents(text, limits)
            .map_err(|e| LocatedError::new(file, Some(e.pos), e.message))?;
        let mut config = Config::default();
        let Some(doc) = docs.first() else {
            return Ok(config);
        };
        let Value::Object(map) = &doc.value else {
            return Err(LocatedError::new(
                file,
                Some(doc.start),
                "expected a mapping",
            ));
        };
        for (key, value) in map {
            let pos = doc.key_pos(&kk_model::FieldPath::root().key(key));
            match key.as_str() {
                "disable" => {
                    let Some(items) = value.as_array() else {
                        return Err(LocatedError::new(
                            file,
                            Some(pos),
                            "disable must be a list of rule codes",
                        ));
                    };
                    for item in items {
                        let code = item.as_str().unwrap_or_default();
                        let Some(rule) = registry::find(code) else {
                            return Err(LocatedError::new(
                                file,
                                Some(pos),
                                format!("unknown rule {item} in disable (see lint --list-rules)"),
                            ));
                        };
                        config.disable.insert(rule.code().to_owned());
                    }
                }
                other => {
                    return Err(LocatedError::new(
                        file,
                        Some(pos),
                        format!("unknown key {other:?} (supported: disable)"),
                    ));
                }
            }
        }
        Ok(config)
    }

    pub fn is_enabled(&self, code: &str) -> bool {
        !self.disable.contains(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_refuses_unknown_codes_and_keys() {
        assert!(Config::parse("disable: [KK999]\n", "c").is_err());
        assert!(Config::parse("disabled: [KK007]\n", "c").is_err());
        let config = Config::parse("disable: [kk007]\n", "c").unwrap();
        assert!(!config.is_enabled("KK007"));
    }
}
