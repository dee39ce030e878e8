//! `render` checks its input itself: a caller that builds or edits an `ElasticCluster` in code
//! (not through `parse_spec`) cannot get a bundle out of an invalid spec.

use kk_render::{RenderError, inline_ca_pem, render};
use kk_spec::{EXAMPLE, parse_spec};

#[test]
fn an_edited_invalid_spec_is_refused_with_its_fields() {
    let mut cluster = parse_spec(EXAMPLE, "example").unwrap().spec;
    let pem = inline_ca_pem(&cluster).unwrap().unwrap();
    assert!(render(&cluster, &pem).is_ok());
    cluster.spec.kubean.ssh.user = "root; curl evil".into();
    cluster.spec.kubean.infra_taints = vec!["x $(id):NoSchedule".into()];
    match render(&cluster, &pem) {
        Err(RenderError::Invalid(text)) => {
            assert!(text.contains("spec.kubean.ssh.user"), "{text}");
            assert!(text.contains("spec.kubean.infraTaints[0]"), "{text}");
        }
        other => panic!(
            "rendered an invalid spec: {:?}",
            other.map(|b| b.files.len())
        ),
    }
}
