//! Solves one oracle scenario file and prints kk-sim's result in the oracle's format:
//! `cargo run -p kk-sim --example scenario -- FILE.json` (for reading a divergence).
fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: scenario FILE.json");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    match kk_sim::scenario::read(&text) {
        Ok(input) => {
            let result = kk_sim::scenario::result(&path, &input);
            println!(
                "{}",
                serde_json::to_string_pretty(&result).unwrap_or_default()
            );
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    }
}
