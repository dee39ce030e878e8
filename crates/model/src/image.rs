//! Container image references: `[host[:port]/]path[:tag][@digest]`, and which tags float.
//! One home for what spec (the versions table, overrides), render and lint ask of a reference.

/// A reference split into its parts; `tag` and `digest` absent when not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef<'a> {
    pub repository: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// Splits without validating: a colon after the last `/` starts the tag (a colon before it
    /// is a registry port), an `@` starts the digest.
    pub fn parse(reference: &'a str) -> ImageRef<'a> {
        let (name, digest) = match reference.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (reference, None),
        };
        let last = name.rfind('/').map_or(0, |i| i + 1);
        match name[last..].find(':') {
            Some(colon) => ImageRef {
                repository: &name[..last + colon],
                tag: Some(&name[last + colon + 1..]),
                digest,
            },
            None => ImageRef {
                repository: name,
                tag: None,
                digest,
            },
        }
    }

    /// Pinned by digest: what runs is exactly the bytes that were reviewed.
    pub fn has_digest(&self) -> bool {
        self.digest.is_some_and(|d| d.starts_with("sha256:"))
    }
}

/// A tag that names no fixed release: `latest` and friends, a bare major (`v1`) or a
/// `v`-prefixed major.minor (`v0.20`, `v1.35`), which registries move as patches come out.
/// An absent tag means `latest` to every runtime.
pub fn is_floating(tag: &str) -> bool {
    const MOVING: [&str; 6] = ["", "latest", "stable", "main", "master", "edge"];
    if MOVING.contains(&tag) {
        return true;
    }
    let numeric = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    match tag.strip_prefix('v') {
        Some(rest) => numeric(rest) && rest.split('.').count() < 3,
        None => numeric(tag) && !tag.contains('.'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split() {
        let r = ImageRef::parse("host:5000/a/b:v1.2.3@sha256:00");
        assert_eq!(
            (r.repository, r.tag, r.digest),
            ("host:5000/a/b", Some("v1.2.3"), Some("sha256:00"))
        );
        let r = ImageRef::parse("host:5000/a/b");
        assert_eq!(
            (r.repository, r.tag, r.digest),
            ("host:5000/a/b", None, None)
        );
        let r = ImageRef::parse("busybox@sha256:ab");
        assert_eq!((r.repository, r.tag), ("busybox", None));
        assert!(r.has_digest());
    }

    #[test]
    fn floating_tags() {
        for floating in ["latest", "v1.35", "v0", "2", ""] {
            assert!(is_floating(floating), "{floating}");
        }
        for fixed in [
            "v1.35.3",
            "1.14.1",
            "3.7",
            "vectoradd-cuda12.5.0",
            "v6.3.0-eksbuild.4",
        ] {
            assert!(!is_floating(fixed), "{fixed}");
        }
    }
}
