//! The target that needs kk-live (`--features live`; kube and the AWS SDK make it a long
//! build): not a module of the library, the `store_lines` target includes it, as
//! `crates/cli/tests/it/fuzz_corpus.rs` does.

/// The join store's value (`KK_TOKEN=…` lines the userData reads and the rotator writes):
/// `JoinConfig::parse`; what parses must render to a value that parses back to the same
/// rendering (what the rotator writes, nodes read).
pub fn store_lines(data: &[u8]) {
    use kk_live::store::JoinConfig;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = JoinConfig::parse(text) {
        let rendered = config.render();
        let again = JoinConfig::parse(&rendered).map(|c| c.render());
        assert_eq!(
            again.as_deref(),
            Ok(rendered.as_str()),
            "render, parse, render differs"
        );
    }
}
