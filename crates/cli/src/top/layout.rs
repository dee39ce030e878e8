//! The fleet as lines of text: the `--once` table and the live screen draw the same lines
//! (the screen adds colour by each span's tone). Fits 80 columns; a wider terminal gives
//! node names the extra room.

use kk_sim::fleet::{Fleet, NodeRow, Use};

/// How a span is meant to look; the live screen maps tones to colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Heading,
    Good,
    Warn,
    Bad,
    Dim,
}

pub type Line = Vec<(String, Tone)>;

/// The narrowest layout.
pub const MIN_WIDTH: usize = 80;
const NAME_WIDTH: usize = 13;
const POOL_WIDTH: usize = 9;

/// Eighths of a cell, for bars of sub-cell resolution.
const EIGHTHS: [char; 8] = ['▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'];

/// A `width`-cell bar of `fraction` (0..=1), padded with `·` so an empty bar still shows.
pub fn bar(fraction: f64, width: usize) -> String {
    let eighths = (fraction.clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    let mut out = String::new();
    for cell in 0..width {
        let filled = eighths.saturating_sub(cell * 8).min(8);
        out.push(match filled {
            0 => '·',
            n => EIGHTHS[n - 1],
        });
    }
    out
}

/// `45s`, `12m`, `3h`, `2d`.
pub fn age(seconds: Option<i64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) if s < 172_800 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86400),
    }
}

/// Cut to `width` characters, marking the cut with `…`.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return format!("{text:<width$}");
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A node name without the EC2 DNS suffix every node shares.
fn short_name(name: &str) -> &str {
    if let Some(n) = name.strip_suffix(".ec2.internal") {
        return n;
    }
    if let Some(n) = name.strip_suffix(".compute.internal") {
        // ip-10-0-1-23.eu-west-1.compute.internal: the region goes too.
        return n.rsplit_once('.').map_or(n, |(host, _)| host);
    }
    name
}

fn use_bar(u: Use) -> (String, Tone) {
    if u.allocatable <= 0 {
        return ("   -".into(), Tone::Dim);
    }
    let f = u.fraction();
    let tone = if f >= 0.9 { Tone::Warn } else { Tone::Plain };
    (bar(f, 4), tone)
}

fn state_tone(state: &str) -> Tone {
    match state {
        "initialized" => Tone::Good,
        "drifted" | "disrupting" | "do-not-disrupt" => Tone::Warn,
        "not-ready" | "unhealthy" => Tone::Bad,
        _ => Tone::Dim,
    }
}

fn money(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

/// Column widths: a wider terminal gives pool names room first (up to 16), then node names.
#[derive(Clone, Copy)]
struct Widths {
    name: usize,
    pool: usize,
}

impl Widths {
    fn for_terminal(width: usize) -> Widths {
        let extra = width.saturating_sub(MIN_WIDTH);
        let pool = POOL_WIDTH + extra.min(7);
        let name = NAME_WIDTH + (extra - (pool - POOL_WIDTH)).min(24);
        Widths { name, pool }
    }
}

fn node_line(n: &NodeRow, w: Widths) -> Line {
    let price = n.price_per_hour.map_or("-".into(), money);
    let mut line = vec![(
        format!(
            "{} {} {} {:<2} {:<2} {:>4} {:>6} ",
            fit(short_name(&n.name), w.name),
            fit(n.node_pool.as_deref().unwrap_or("-"), w.pool),
            fit(
                if n.instance_type.is_empty() {
                    "-"
                } else {
                    &n.instance_type
                },
                11
            ),
            n.capacity_type_short(),
            n.zone_short(),
            age(n.age_seconds),
            price,
        ),
        Tone::Plain,
    )];
    for u in [n.cpu, n.memory, n.gpu] {
        line.push(use_bar(u));
        line.push((" ".into(), Tone::Plain));
    }
    // 11 columns are left at 80; the JSON keeps Karpenter's full word.
    let word = if n.state == "do-not-disrupt" {
        "no-disrupt"
    } else {
        &n.state
    };
    line.push((word.to_owned(), state_tone(&n.state)));
    line
}

/// Every line of the view, `width` columns at most (at least [`MIN_WIDTH`] is assumed).
pub fn lines(fleet: &Fleet, width: usize, clock: &str) -> Vec<Line> {
    let w = Widths::for_terminal(width);
    let t = &fleet.totals;
    let mut out: Vec<Line> = Vec::new();
    let head = format!(
        "{} node(s)  ${}/h  ${:.0}/month  {} pending  {} in flight",
        t.nodes,
        money(t.price_per_hour),
        t.price_per_month,
        t.pending_pods,
        t.node_claims_in_flight
    );
    let pad = width
        .saturating_sub(head.chars().count() + clock.chars().count())
        .max(1);
    out.push(vec![
        (head, Tone::Heading),
        (" ".repeat(pad), Tone::Plain),
        (clock.to_owned(), Tone::Dim),
    ]);
    out.push(vec![(
        format!(
            "{} {} {} {:<2} {:<2} {:>4} {:>6} {:<4} {:<4} {:<4} {}",
            fit("NODE", w.name),
            fit("POOL", w.pool),
            fit("TYPE", 11),
            "CT",
            "AZ",
            "AGE",
            "$/H",
            "CPU",
            "MEM",
            "GPU",
            "STATE"
        ),
        Tone::Heading,
    )]);
    if fleet.nodes.is_empty() {
        out.push(vec![("(no nodes)".into(), Tone::Dim)]);
    }
    out.extend(fleet.nodes.iter().map(|n| node_line(n, w)));

    out.push(Vec::new());
    out.push(vec![(
        format!(
            "{} {:>5} {:>8}  LIMITS (held of limit)",
            fit("POOL", 16),
            "NODES",
            "$/H"
        ),
        Tone::Heading,
    )]);
    for p in &fleet.pools {
        let limits: Vec<String> = p
            .limits
            .iter()
            .map(|(k, u)| {
                format!(
                    "{k} {} {}/{}",
                    bar(u.fraction(), 3),
                    short_quantity(k, u.requested),
                    short_quantity(k, u.allocatable)
                )
            })
            .collect();
        let at_limit = p
            .limits
            .values()
            .any(|u| u.allocatable > 0 && u.requested >= u.allocatable);
        out.push(vec![
            (
                format!(
                    "{} {:>5} {:>8}  ",
                    fit(&p.name, 16),
                    p.nodes,
                    money(p.price_per_hour)
                ),
                Tone::Plain,
            ),
            (
                if limits.is_empty() {
                    "none".into()
                } else {
                    limits.join(", ")
                },
                if at_limit { Tone::Warn } else { Tone::Plain },
            ),
        ]);
        if let Some(b) = &p.budget {
            // The spend budget under the pool's line: spend of budget, and whether it holds
            // launches back.
            out.push(vec![(
                format!(
                    "{} budget {}/{} ({:.0}%){}",
                    fit("", 16),
                    money(b.spend_per_hour),
                    money(b.per_hour),
                    if b.per_hour > 0.0 {
                        100.0 * b.spend_per_hour / b.per_hour
                    } else {
                        0.0
                    },
                    if b.at_budget {
                        ": at budget, launches wait"
                    } else {
                        ""
                    }
                ),
                if b.at_budget || b.warns() {
                    Tone::Warn
                } else {
                    Tone::Plain
                },
            )]);
        }
    }

    if !fleet.node_claims_in_flight.is_empty() {
        out.push(Vec::new());
        out.push(vec![("NODECLAIMS IN FLIGHT".into(), Tone::Heading)]);
        for c in &fleet.node_claims_in_flight {
            out.push(vec![(
                format!(
                    "{} {} {} {:<10} {:>4}",
                    fit(&c.name, w.name),
                    fit(c.node_pool.as_deref().unwrap_or("-"), w.pool),
                    fit(c.instance_type.as_deref().unwrap_or("-"), 11),
                    c.phase,
                    age(c.age_seconds)
                ),
                if c.stuck { Tone::Bad } else { Tone::Plain },
            )]);
            if let Some(cause) = &c.likely_cause {
                out.extend(wrapped(&format!("stuck: {cause}"), width, 2, Tone::Bad));
            }
        }
    }

    if !fleet.pending.is_empty() {
        out.push(Vec::new());
        out.push(vec![(
            "PENDING PODS, by plan's reason".into(),
            Tone::Heading,
        )]);
        for g in &fleet.pending {
            let tone = if g.waiting { Tone::Plain } else { Tone::Warn };
            out.extend(wrapped(
                &format!("{} pod(s): {}", g.pods.len(), g.reason),
                width,
                2,
                tone,
            ));
            let shown: Vec<&str> = g.pods.iter().take(4).map(String::as_str).collect();
            let more = g.pods.len().saturating_sub(shown.len());
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            out.extend(wrapped(
                &format!("{}{tail}", shown.join(", ")),
                width,
                4,
                Tone::Dim,
            ));
        }
    }
    out.into_iter().map(|l| clip(l, width)).collect()
}

/// `cpu` in cores, `memory` in GiB, the rest as counts.
fn short_quantity(resource: &str, value: i64) -> String {
    match resource {
        "cpu" => format!("{}", value / 1000),
        "memory" => format!("{}Gi", value >> 30),
        _ => value.to_string(),
    }
}

/// `text` in lines of at most `width` characters, broken at spaces, each indented `indent`.
fn wrapped(text: &str, width: usize, indent: usize, tone: Tone) -> Vec<Line> {
    let room = width.saturating_sub(indent).max(20);
    let pad = " ".repeat(indent);
    let mut out = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > room {
            out.push(vec![(format!("{pad}{current}"), tone)]);
            current.clear();
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        out.push(vec![(format!("{pad}{current}"), tone)]);
    }
    out
}

/// Cuts a line to `width` characters. Every line passes here, so here is where text from the
/// cluster (names, pod and reason strings a node or a pod wrote) is escaped for the terminal.
fn clip(line: Line, width: usize) -> Line {
    let mut left = width;
    let mut out = Vec::new();
    for (text, tone) in line {
        if left == 0 {
            break;
        }
        let text = kk_model::visible(&text).into_owned();
        let n = text.chars().count();
        if n <= left {
            left -= n;
            out.push((text, tone));
        } else {
            out.push((text.chars().take(left - 1).chain(['…']).collect(), tone));
            left = 0;
        }
    }
    out
}

/// The lines as plain text, trailing blanks trimmed.
pub fn plain(lines: &[Line]) -> String {
    let mut out = String::new();
    for l in lines {
        let text: String = l.iter().map(|(t, _)| t.as_str()).collect();
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_by_eighths() {
        assert_eq!(bar(0.0, 4), "····");
        assert_eq!(bar(1.0, 4), "████");
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(bar(1.0 / 32.0, 4), "▏···");
        assert_eq!(bar(7.0, 2), "██");
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(age(Some(45)), "45s");
        assert_eq!(age(Some(600)), "10m");
        assert_eq!(age(Some(3 * 3600)), "3h");
        assert_eq!(age(Some(3 * 86400)), "3d");
        assert_eq!(age(None), "-");
    }

    #[test]
    fn names_lose_the_shared_suffix_and_fit() {
        assert_eq!(short_name("ip-10-0-1-23.ec2.internal"), "ip-10-0-1-23");
        assert_eq!(
            short_name("ip-10-0-1-23.eu-west-1.compute.internal"),
            "ip-10-0-1-23"
        );
        assert_eq!(short_name("gpu-node-7"), "gpu-node-7");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("ab", 4), "ab  ");
    }

    #[test]
    fn lines_never_pass_the_width() {
        let line = vec![("x".repeat(50), Tone::Plain), ("y".repeat(50), Tone::Warn)];
        let clipped = clip(line, 80);
        let n: usize = clipped.iter().map(|(t, _)| t.chars().count()).sum();
        assert_eq!(n, 80);
        assert!(clipped[1].0.ends_with('…'));
    }

    /// The attack (issue 47): a kubelet names itself, or a pod's reason carries, an escape
    /// sequence that would retitle the operator's terminal, a bidi override, a newline that
    /// forges a line of the table. What reaches the screen carries none of them as themselves.
    #[test]
    fn text_from_the_cluster_reaches_the_terminal_escaped() {
        let line = vec![
            ("\u{1b}]0;owned\u{7}node".to_owned(), Tone::Plain),
            ("a\u{202e}b\nFORGED".to_owned(), Tone::Warn),
        ];
        let clipped = clip(line, 80);
        let text: String = clipped.iter().map(|(t, _)| t.as_str()).collect();
        assert!(!text.chars().any(kk_model::visible::is_unsafe), "{text:?}");
        assert_eq!(text, "\\e]0;owned\\u{7}nodea\\u{202e}b\\nFORGED");
    }
}
