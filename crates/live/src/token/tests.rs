//! Unit tests of `token` (kept apart so the module itself stays short).

use super::*;

#[test]
fn generated_tokens_have_the_kubeadm_format_and_differ() {
    let a = BootstrapToken::generate().unwrap();
    let b = BootstrapToken::generate().unwrap();
    assert_ne!(a.expose(), b.expose());
    for t in [&a, &b] {
        let text = t.expose();
        let (id, secret) = text.split_once('.').unwrap();
        assert!(
            is_token_chars(id, 6) && is_token_chars(secret, 16),
            "{text}"
        );
        assert_eq!(BootstrapToken::parse(&text).unwrap(), *t);
    }
}

#[test]
fn the_secret_never_shows_in_debug_or_display() {
    let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
    for text in [format!("{t:?}"), format!("{t}")] {
        assert!(text.contains("abcdef"));
        assert!(!text.contains("0123456789abcdef"), "{text}");
    }
}

#[test]
fn malformed_tokens_are_refused_without_echo() {
    for bad in [
        "",
        "abcdef",
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abcdef.0123456789abcdef0",
        "abcdef_0123456789abcdef",
        "abcdéf.0123456789abcdef",
    ] {
        let e = BootstrapToken::parse(bad).unwrap_err();
        assert!(bad.is_empty() || !e.to_string().contains(bad), "{e}");
    }
}

#[test]
fn random_chars_cover_the_alphabet_roughly_uniformly() {
    let s = random_chars(36 * 400).unwrap();
    let mut counts = [0usize; 36];
    for b in s.bytes() {
        counts[ALPHABET.iter().position(|&a| a == b).unwrap()] += 1;
    }
    // Expected 400 each; a biased generator (b % 36 without rejection) still passes
    // this, so it only guards against gross mistakes such as a missing character.
    assert!(counts.iter().all(|&c| c > 250 && c < 550), "{counts:?}");
}

#[test]
fn the_secret_has_exactly_kubeadms_keys() {
    let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
    let exp: Timestamp = "2030-01-02T03:04:05Z".parse().unwrap();
    let s = token_secret(
        &t,
        exp,
        &NewToken {
            ttl: Duration::from_secs(60),
            description: Some("hello".into()),
            cluster: Some("demo".into()),
        },
    );
    assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
    assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
    let data = s.data.as_ref().unwrap();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "auth-extra-groups",
            "description",
            "expiration",
            "token-id",
            "token-secret",
            "usage-bootstrap-authentication",
            "usage-bootstrap-signing"
        ]
    );
    assert_eq!(data["expiration"].0, b"2030-01-02T03:04:05Z");
    let info = info_from_secret(&s).unwrap();
    assert!(info.managed);
    assert_eq!(info.cluster.as_deref(), Some("demo"));
    assert_eq!(info.usages, ["authentication", "signing"]);
    assert_eq!(info.extra_groups, [JOIN_TOKEN_GROUP]);
}

#[test]
fn ttls_over_a_day_are_refused() {
    let day = Duration::from_secs(86_400);
    assert!(check_ttl_ceiling(day).is_ok());
    let e = check_ttl_ceiling(day + Duration::from_secs(1)).unwrap_err();
    assert!(e.to_string().contains("ceiling"), "{e}");
    assert!(check_ttl_ceiling(Duration::from_secs(30 * 86_400)).is_err());
}

#[test]
fn expiration_rounds_up_to_whole_seconds() {
    let now: Timestamp = "2030-01-01T00:00:00.5Z".parse().unwrap();
    let exp = expiration_after(now, Duration::from_secs(6)).unwrap();
    assert_eq!(rfc3339(exp), "2030-01-01T00:00:07Z");
    assert!(expiration_after(now, Duration::ZERO).is_err());
}
