//! `spec.apiServer` and `spec.caBundle`: the endpoint nodes join and the CA they pin.

use super::*;

pub(super) fn api_server(p: &mut Problems, at: &FieldPath, api: &ApiServer) {
    let name = api.dns_name.as_str();
    if name.parse::<IpAddr>().is_err() && !(DNS_SUBDOMAIN.is_match(name) && name.len() <= 253) {
        p.push((at.key("dnsName"), format!("{name:?} is not a DNS name")));
    }
    if api.port == 0 {
        p.push((at.key("port"), "port must be 1–65535".into()));
    }
    if let Some(address) = &api.load_balancer_address
        && address.parse::<IpAddr>().is_err()
    {
        p.push((
            at.key("loadBalancerAddress"),
            format!("{address:?} is not an IP address"),
        ));
    }
}

pub(super) fn ca_bundle(p: &mut Problems, at: &FieldPath, ca: &CaBundleSource) {
    let set = [
        ca.file.is_some(),
        ca.base64.is_some(),
        ca.kubeconfig.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    // None set is stage 1: the CA does not exist until Kubean has built the control plane.
    if set > 1 {
        p.push((
            at.clone(),
            format!("set one of file, base64, kubeconfig (found {set})"),
        ));
    }
    if let Some(b64) = &ca.base64 {
        use base64::Engine;
        match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
            // Certificates only: whatever else the PEM holds (the CA's private key) would be
            // copied to every node. The error names the block's type, never its content.
            Ok(bytes) => match std::str::from_utf8(&bytes)
                .map_err(|_| crate::ca::CaError::NotText)
                .and_then(crate::ca::certificate_blocks)
            {
                Ok(_) => {}
                Err(crate::ca::CaError::NoCertificate | crate::ca::CaError::NotText) => p.push((
                    at.key("base64"),
                    "decodes, but not to a PEM certificate".into(),
                )),
                Err(e) => p.push((at.key("base64"), format!("in the decoded PEM, {e}"))),
            },
            Err(e) => p.push((at.key("base64"), format!("not valid base64: {e}"))),
        }
    }
}
