//! KK038: MIME multi-part userData whose last part is never closed by a boundary line.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports the `userData` of an `al2` or `al2023` EC2NodeClass that is MIME multi-part
(`Content-Type: multipart/mixed; boundary=…`) and whose last part runs to the end of the text:
no `--<boundary>` line (nor the closing `--<boundary>--`) follows it.

## Why
For these families Karpenter (v1.0 to 1.15, `pkg/providers/amifamily/bootstrap`) parses your
MIME document to merge its own bootstrap part into it, with Go's `mime/multipart`. A part
that ends without a boundary line is a truncated message to that parser: reading it fails
with "unexpected EOF", Karpenter cannot build the launch template's user data, and every
launch for the node class fails. (cloud-init, which reads a `Custom` family's userData as it
is, tolerates it: the rule leaves `Custom` alone.) A document whose last part is followed by a
delimiter line `--BOUNDARY` without the closing `--`, as Karpenter's own examples end, is read
to its end without error and is not reported.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@v20260827
  userData: |
    MIME-Version: 1.0
    Content-Type: multipart/mixed; boundary="BOUNDARY"

    --BOUNDARY
    Content-Type: text/x-shellscript; charset="us-ascii"

    #!/bin/bash
    echo hello
```

## Fix
End the document with the closing delimiter, `--BOUNDARY--`, on its own line.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK038",
    name: "mime-userdata-unclosed",
    severity: Severity::Error,
    summary: "multi-part userData whose last part has no closing boundary: Karpenter cannot merge it and every launch fails",
    doc: DOC,
    advice: None,
};

pub struct MimeUserDataUnclosed;

/// The boundary a `Content-Type: multipart/…; boundary=…` header of `text` names.
pub fn boundary(text: &str) -> Option<String> {
    let header = text.lines().find(|l| {
        let l = l.trim_start().to_ascii_lowercase();
        l.starts_with("content-type:") && l.contains("multipart/")
    })?;
    let at = header.to_ascii_lowercase().find("boundary=")?;
    let value = header[at + "boundary=".len()..].trim();
    let value = match value.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => value.split([';', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// The 1-based line of the last part's start when no delimiter line follows it: the part that
/// runs to the end. `None` when the document is closed (or has no part at all).
pub fn unclosed_part(text: &str, boundary: &str) -> Option<usize> {
    let delimiter = format!("--{boundary}");
    let closing = format!("{delimiter}--");
    let mut last_delimiter = None;
    let mut content_after = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line == closing {
            return None;
        }
        if line == delimiter {
            last_delimiter = Some(i + 1);
            content_after = false;
        } else if last_delimiter.is_some() && !line.is_empty() {
            content_after = true;
        }
    }
    last_delimiter.filter(|_| content_after)
}

impl Rule for MimeUserDataUnclosed {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            if !matches!(view.family().as_deref(), Some("al2" | "al2023")) {
                continue;
            }
            let Some(text) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            let Some(boundary) = boundary(text) else {
                continue;
            };
            let Some(line) = unclosed_part(text, &boundary) else {
                continue;
            };
            out.push(
                ctx.diag_at(
                    &META,
                    view.obj,
                    ctx.pos_in_string(view.obj, &path, line, 1),
                    format!(
                        "the MIME part that starts here runs to the end of userData: no \
                         --{boundary} line closes it, Karpenter's merge fails with \
                         \"unexpected EOF\" and no instance of this class launches"
                    ),
                )
                .with_help(format!("end userData with a line --{boundary}--")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{boundary, unclosed_part};

    #[test]
    fn finds_the_boundary_quoted_or_not() {
        assert_eq!(
            boundary("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n")
                .as_deref(),
            Some("//")
        );
        assert_eq!(
            boundary("Content-Type: multipart/mixed; boundary=BOUNDARY; charset=x\n").as_deref(),
            Some("BOUNDARY")
        );
        assert_eq!(boundary("#!/bin/bash\necho hi\n"), None);
    }

    #[test]
    fn a_part_running_to_the_end_is_unclosed() {
        let open = "Content-Type: multipart/mixed; boundary=\"B\"\n\n--B\nContent-Type: text/x-shellscript\n\necho\n";
        assert_eq!(unclosed_part(open, "B"), Some(3));
        let closed = format!("{open}--B--\n");
        assert_eq!(unclosed_part(&closed, "B"), None);
        // A delimiter after the last part, without the closing `--`, is read as the end.
        let delimited = format!("{open}--B\n");
        assert_eq!(unclosed_part(&delimited, "B"), None);
        let crlf = open.replace('\n', "\r\n") + "--B--\r\n";
        assert_eq!(unclosed_part(&crlf, "B"), None);
    }
}
