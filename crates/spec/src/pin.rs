//! Pinning a pool's AMI in the spec's own text: only the written value changes, so every
//! other byte (comments, order, quoting, blank lines) survives. Pure: text in, text out.
//!
//! A pool pins its image one of three ways (`types::Ami`): `alias: al2023@v<date>` and
//! `ssmRelease: <k8s>-<date>` name an EKS-optimized release (pin another with a release date),
//! `id: ami-…` a custom image (pin another id). The form is kept: switching between an EKS
//! image and a custom one also switches how nodes join, which is an edit to make by hand.

use kk_karpenter::ami;
use kk_model::{FieldPath, Pos};

use crate::load::{SpecError, parse_spec};

/// What to pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinTarget {
    /// An AL2023 release date, `20260827` (from `v20260827`).
    Release(String),
    /// A custom image id.
    Id(String),
}

/// The edited text and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub text: String,
    /// `spec.pools[2].ami.alias`.
    pub field: String,
    pub pos: Pos,
    pub old: String,
    pub new: String,
}

impl Pinned {
    pub fn changed(&self) -> bool {
        self.old != self.new
    }
}

/// Pins `pool`'s AMI to `target` in `text` (a valid spec named `file`); errors are located.
pub fn pin_ami(
    text: &str,
    file: &str,
    pool: &str,
    target: &PinTarget,
) -> Result<Pinned, Vec<SpecError>> {
    let loaded = parse_spec(text, file)?;
    let doc = &loaded.document;
    let at = |path: &FieldPath, message: String| {
        vec![SpecError::new(file, Some(doc.pos(path)), message).at_field(path.to_string())]
    };
    let pools = &loaded.spec.spec.pools;
    let pools_path = FieldPath::parse("spec.pools");
    let Some(index) = pools.iter().position(|p| p.name == pool) else {
        let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        return Err(at(
            &pools_path,
            format!("no pool named {pool:?} (pools: {})", known.join(", ")),
        ));
    };
    let found = &pools[index];
    let (form, old) = if let Some(alias) = &found.ami.alias {
        ("alias", alias.clone())
    } else if let Some(release) = &found.ami.ssm_release {
        ("ssmRelease", release.clone())
    } else {
        ("id", found.ami.id.clone().unwrap_or_default())
    };
    let path = pools_path.index(index).key("ami").key(form);
    let new = match (target, form) {
        (PinTarget::Release(date), _) if !ami::is_release_date(date) => {
            return Err(at(
                &path,
                format!(
                    "release v{date} is not an AL2023 release date: write v<YYYYMMDD>, such as \
                     v20260827 (`ami list` shows the published ones)"
                ),
            ));
        }
        (PinTarget::Release(date), "alias") => {
            format!("{}@v{date}", ami::alias_family(&old))
        }
        (PinTarget::Release(date), "ssmRelease") => {
            let version = old.split_once('-').map_or(old.as_str(), |(v, _)| v);
            format!("{version}-{date}")
        }
        (PinTarget::Release(date), _) => {
            return Err(at(
                &path,
                format!(
                    "pool {pool} pins a custom image by id; a release (v{date}) names an \
                     EKS-optimized image: pin another image with --id ami-…"
                ),
            ));
        }
        (PinTarget::Id(id), _) if !ami::is_ami_id(id) => {
            return Err(at(
                &path,
                format!("{id:?} is not an AMI id (ami- and 8 or 17 lowercase hex digits)"),
            ));
        }
        (PinTarget::Id(id), "id") => id.clone(),
        (PinTarget::Id(id), _) => {
            return Err(at(
                &path,
                format!(
                    "pool {pool} pins an EKS-optimized release by {form}; {id} would be a custom \
                     image, which joins differently (joinMethod): pin a release with --release \
                     v<date>, or change `ami` and `joinMethod` by hand"
                ),
            ));
        }
    };
    let Some(range) = doc.scalar_byte_range(text, &path) else {
        return Err(at(
            &path,
            "the value is not written here (a YAML alias?): edit it where it is written".into(),
        ));
    };
    let written = &text[range.clone()];
    let quote = written
        .chars()
        .next()
        .filter(|c| *c == '"' || *c == '\'')
        .map(String::from)
        .unwrap_or_default();
    let mut edited = String::with_capacity(text.len() + new.len());
    edited.push_str(&text[..range.start]);
    edited.push_str(&format!("{quote}{new}{quote}"));
    edited.push_str(&text[range.end..]);
    // The result must still be a valid spec, with the new value where we meant it.
    let reloaded = parse_spec(&edited, file)?;
    let ami_now = &reloaded.spec.spec.pools[index].ami;
    let now = match form {
        "alias" => ami_now.alias.as_deref(),
        "ssmRelease" => ami_now.ssm_release.as_deref(),
        _ => ami_now.id.as_deref(),
    };
    if now != Some(new.as_str()) {
        return Err(at(
            &path,
            format!("could not pin {new} here without changing how the value is read"),
        ));
    }
    Ok(Pinned {
        text: edited,
        field: path.to_string(),
        pos: doc.pos(&path),
        old,
        new,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EXAMPLE;

    fn release(date: &str) -> PinTarget {
        PinTarget::Release(date.into())
    }

    #[test]
    fn an_id_pin_changes_only_the_value() {
        let pinned = pin_ami(
            EXAMPLE,
            "c.yaml",
            "workload-gpu-l4",
            &PinTarget::Id("ami-0123456789abcdef0".into()),
        )
        .unwrap();
        assert_eq!(pinned.old, "ami-0c0ffee0c0ffee002");
        assert_eq!(
            pinned.text,
            EXAMPLE.replace("ami-0c0ffee0c0ffee002", "ami-0123456789abcdef0")
        );
        assert_eq!(pinned.field, "spec.pools[1].ami.id");
    }

    #[test]
    fn a_release_on_an_id_pin_is_refused_where_the_id_is() {
        let errors =
            pin_ami(EXAMPLE, "c.yaml", "workload-gpu-l4", &release("20260827")).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.pools[1].ami.id");
        assert!(errors[0].message.contains("--id"), "{}", errors[0].message);
    }

    #[test]
    fn unknown_pools_and_malformed_values_are_located() {
        let errors = pin_ami(EXAMPLE, "c.yaml", "nope", &release("20260827")).unwrap_err();
        assert_eq!(errors[0].field, "spec.pools");
        assert!(errors[0].message.contains("workload-general"));
        let errors = pin_ami(
            EXAMPLE,
            "c.yaml",
            "workload-general",
            &PinTarget::Id("ami-XYZ".into()),
        )
        .unwrap_err();
        assert_eq!(errors[0].field, "spec.pools[0].ami.id");
        assert!(errors[0].pos.is_some());
    }
}
