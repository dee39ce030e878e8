//! `spec.join`: how nodes get a join credential (token store, rotation, KMS key).

use super::*;

fn join_kms(p: &mut Problems, at: &FieldPath, j: &Join) {
    let Some(kms) = &j.kms else {
        return;
    };
    let at = at.key("kms");
    if j.mode == JoinMode::Static {
        p.push((at, "static mode uses no store to encrypt".into()));
        return;
    }
    if !KMS_KEY_ARN.is_match(&kms.key_arn) {
        p.push((
            at.key("keyArn"),
            format!(
                "{:?} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<uuid>)",
                kms.key_arn
            ),
        ));
    }
    if kms.writer_arns.is_empty() {
        p.push((
            at.key("writerArns"),
            "name the rotator's IAM role or user: nobody else may write the store".into(),
        ));
    }
    for (i, arn) in kms.writer_arns.iter().enumerate() {
        if !IAM_PRINCIPAL_ARN.is_match(arn) {
            p.push((
                at.key("writerArns").index(i),
                format!("{arn:?} is not an IAM role or user ARN"),
            ));
        }
    }
}

pub(super) fn join(p: &mut Problems, at: &FieldPath, j: &Join) {
    join_kms(p, at, j);
    match j.mode {
        JoinMode::Static => {
            if !j.allow_insecure_static {
                p.push((
                    at.key("mode"),
                    "static mode puts a kubeadm token in userData, where anyone who reads \
                     userData (IMDS, ec2:DescribeInstanceAttribute, the EC2NodeClass) can \
                     register as any node until it expires; use ssm or secrets-manager (a \
                     short-lived rotated token, CSRs approved only for NodeClaims) or \
                     joinMethod: iam, or for a lab set join.allowInsecureStatic: true"
                        .into(),
                ));
            }
            match &j.token {
                None => p.push((
                    at.key("token"),
                    "static mode needs a bootstrap token".into(),
                )),
                Some(t) if !TOKEN.is_match(t) => p.push((
                    at.key("token"),
                    "a bootstrap token is [a-z0-9]{6}.[a-z0-9]{16}".into(),
                )),
                Some(_) => {}
            }
            if j.store_name.is_some() {
                p.push((at.key("storeName"), "static mode uses no store".into()));
            }
        }
        JoinMode::Ssm | JoinMode::SecretsManager => {
            if j.allow_insecure_static {
                p.push((
                    at.key("allowInsecureStatic"),
                    "applies to static mode only".into(),
                ));
            }
            if j.token.is_some() {
                p.push((
                    at.key("token"),
                    "the token lives in the store, not in the spec (set it only in static mode)"
                        .into(),
                ));
            }
            if let Some(name) = &j.store_name {
                let (ok, rule) = if j.mode == JoinMode::Ssm {
                    let lower = name.to_ascii_lowercase();
                    (
                        SSM_NAME.is_match(name)
                            && !lower.starts_with("/aws")
                            && !lower.starts_with("/ssm"),
                        "an SSM parameter path like /kubean-karpenter/demo/join (not under /aws or /ssm)",
                    )
                } else {
                    (
                        SECRET_NAME.is_match(name),
                        "a Secrets Manager name ([A-Za-z0-9/_+=.@-], ≤ 512)",
                    )
                };
                if !ok {
                    p.push((at.key("storeName"), format!("must be {rule}")));
                }
            }
        }
    }
    if let Some(hash) = &j.ca_cert_hash
        && !CA_HASH.is_match(hash)
    {
        p.push((
            at.key("caCertHash"),
            "must be sha256: followed by 64 lowercase hex digits".into(),
        ));
    }
}
