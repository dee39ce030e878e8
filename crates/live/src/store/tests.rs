//! Unit tests of `store` (kept apart so the module itself stays short).

use super::*;

#[test]
fn the_store_format_round_trips_and_matches_the_userdata_keys() {
    let config = JoinConfig {
        api_server_endpoint: Some("api.demo.internal:6443".into()),
        token: BootstrapToken::parse("abcdef.0123456789abcdef").unwrap(),
        ca_cert_hash: format!("sha256:{}", "a".repeat(64)),
        expiration: "2030-01-01T00:00:00Z".parse().unwrap(),
        superseded: None,
    };
    let text = config.render();
    assert_eq!(
        text,
        format!(
            "KK_API_SERVER_ENDPOINT=api.demo.internal:6443\nKK_TOKEN=abcdef.0123456789abcdef\nKK_CA_CERT_HASH=sha256:{}\nKK_EXPIRATION=2030-01-01T00:00:00Z\n",
            "a".repeat(64)
        )
    );
    assert_eq!(JoinConfig::parse(&text).unwrap(), config);
    assert!(!format!("{config:?}").contains("0123456789abcdef"));
    // A rotation records the token it replaced (its ID only) and when it goes.
    let rotated = JoinConfig {
        superseded: Some(Superseded {
            id: "zyxwvu".into(),
            delete_after: "2030-01-01T00:20:00Z".parse().unwrap(),
        }),
        ..config
    };
    let text = rotated.render();
    assert!(text.ends_with(
        "KK_SUPERSEDED_TOKEN_ID=zyxwvu\nKK_SUPERSEDED_DELETE_AFTER=2030-01-01T00:20:00Z\n"
    ));
    assert_eq!(JoinConfig::parse(&text).unwrap(), rotated);
    let half = text.replace("KK_SUPERSEDED_TOKEN_ID=zyxwvu\n", "");
    assert!(JoinConfig::parse(&half).is_err());
}

#[test]
fn malformed_values_are_reported_without_the_value() {
    let text = "KK_TOKEN=abcdef.0123456789ABCDEF\nKK_CA_CERT_HASH=x\nKK_EXPIRATION=y\n";
    let e = JoinConfig::parse(text).unwrap_err().to_string();
    assert!(e.contains("KK_TOKEN") && !e.contains("0123456789"), "{e}");
    assert_eq!(
        JoinConfig::parse("").unwrap_err(),
        JoinConfigError::Missing("KK_TOKEN")
    );
}

#[test]
fn default_names_equal_the_renderers() {
    let mut cluster = kk_spec::parse_spec(kk_spec::EXAMPLE, "example")
        .unwrap()
        .spec;
    for mode in [kk_spec::JoinMode::Ssm, kk_spec::JoinMode::SecretsManager] {
        cluster.spec.join.mode = mode;
        cluster.spec.join.store_name = None;
        let kind = StoreKind::from_join_mode(mode).unwrap();
        assert_eq!(
            kind.default_name(&cluster.metadata.name),
            kk_spec::names::join_store(&cluster.spec, &cluster.metadata.name)
        );
    }
}

#[test]
fn endpoints_are_host_and_port() {
    assert!(validate_endpoint("api.demo.internal:6443").is_ok());
    assert!(validate_endpoint("[::1]:6443").is_ok());
    for bad in [
        "https://api:6443",
        "api",
        "api:",
        ":6443",
        "api:99999",
        "a b:1",
    ] {
        assert!(validate_endpoint(bad).is_err(), "{bad}");
    }
}
