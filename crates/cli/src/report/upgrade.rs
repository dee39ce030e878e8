//! `upgrade plan --html FILE`: the upgrade plan as one self-contained page beside `plan --html`'s
//! (same stylesheet, no network, no script). Each step is a card with what it changes, why it is
//! safe at that point of the order and what to run; each AMI step draws its drift as a timeline:
//! one row per pool, one block per wave of replacements (as many nodes at once as the pool's
//! Drifted budget allows), all rows to one time scale so the slow pool stands out.
//!
//! Built only from `kk_render::upgrade::UpgradePlan`; deterministic (same plan, same bytes).

use std::fmt::Write as _;

use kk_render::upgrade::{self, Drift, UpgradePlan};

use super::{esc, num};

/// Widest timeline row, in CSS pixels (the longest drift of the plan).
const TIMELINE_W: f64 = 560.0;
const ROW_H: f64 = 18.0;

pub fn html(plan: &UpgradePlan) -> String {
    let mut h = String::new();
    let title = format!("Upgrade {} → {}", plan.from, plan.to);
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>{style}\nbody {{ display: block; }} main {{ max-width: 60rem; }} \
         ol.steps > li {{ background: #fff; border: 1px solid var(--line); border-radius: 6px; \
         padding: 0.3rem 0.8rem 0.6rem; margin-bottom: 0.8rem; }} dt {{ font-weight: 600; \
         margin-top: 0.4rem; }} pre {{ background: var(--bg); padding: 0.3rem 0.5rem; \
         white-space: pre-wrap; }} svg.timeline rect.wave {{ fill: #6b8fd6; stroke: #1d2330; \
         stroke-width: 0.5; }} svg.timeline rect.blocked {{ fill: #d65b5b; }}</style></head>\n<body>\n",
        t = esc(&title),
        style = super::STYLE
    );
    let _ = writeln!(
        h,
        "<header><h1>{}</h1><p>Kubean {} · Karpenter {} · {} step{} in this order · {} s per replacement, one drift command per {} s</p></header>",
        esc(&title),
        esc(&plan.kubean_release),
        esc(&plan.karpenter_version),
        plan.steps.len(),
        if plan.steps.len() == 1 { "" } else { "s" },
        plan.replace_seconds,
        upgrade::DRIFT_LOOP_SECONDS
    );
    h.push_str("<main>\n<ol class=\"steps\">\n");
    let longest = plan
        .steps
        .iter()
        .flat_map(|s| &s.drift)
        .filter_map(|d| d.seconds)
        .max()
        .unwrap_or(0);
    for step in &plan.steps {
        let _ = writeln!(h, "<li><h2>{}</h2><dl>", esc(&step.title));
        list(&mut h, "Changes", &step.changes);
        list(&mut h, "Safe because", &step.safe_because);
        if !step.drift.is_empty() {
            h.push_str("<dt>Drift</dt><dd>");
            let lines: Vec<String> = step
                .drift
                .iter()
                .map(|d| upgrade::drift_line(d, plan.replace_seconds))
                .collect();
            bullets(&mut h, &lines);
            timeline(&mut h, &step.drift, longest, plan.replace_seconds);
            h.push_str("</dd>");
        }
        if !step.commands.is_empty() {
            let _ = write!(
                h,
                "<dt>Run</dt><dd><pre>{}</pre></dd>",
                esc(&step.commands.join("\n"))
            );
        }
        h.push_str("</dl></li>\n");
    }
    h.push_str("</ol>\n");
    if !plan.notes.is_empty() {
        h.push_str("<section id=\"notes\"><h2>Notes</h2>");
        bullets(&mut h, &plan.notes);
        h.push_str("</section>\n");
    }
    h.push_str("</main>\n</body></html>\n");
    h
}

fn list(h: &mut String, term: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = write!(h, "<dt>{term}</dt><dd>");
    bullets(h, items);
    h.push_str("</dd>");
}

fn bullets(h: &mut String, items: &[String]) {
    h.push_str("<ul>");
    for i in items {
        let _ = write!(h, "<li>{}</li>", esc(i));
    }
    h.push_str("</ul>");
}

/// One row per pool whose duration is known: a block per wave, to the plan's one time scale.
/// A pool whose budget allows nothing at once is one red block the width of the row.
fn timeline(h: &mut String, drifts: &[Drift], longest: u64, replace_seconds: u64) {
    let rows: Vec<&Drift> = drifts
        .iter()
        .filter(|d| d.seconds.is_some() || d.at_once == Some(0))
        .collect();
    if rows.is_empty() {
        return;
    }
    let label_w = 140.0;
    let scale = if longest == 0 {
        0.0
    } else {
        TIMELINE_W / longest as f64
    };
    let height = rows.len() as f64 * (ROW_H + 6.0);
    let _ = write!(
        h,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" viewBox=\"0 0 {w} {height}\">",
        w = num(label_w + TIMELINE_W + 60.0),
        height = num(height)
    );
    for (i, d) in rows.iter().enumerate() {
        let y = i as f64 * (ROW_H + 6.0);
        let _ = write!(
            h,
            "<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text>",
            num(y + 13.0),
            esc(&d.pool)
        );
        if d.at_once == Some(0) {
            let _ = write!(
                h,
                "<rect class=\"wave blocked\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: blocked by its Drifted budget ({})</title></rect>",
                num(label_w),
                num(y),
                num(TIMELINE_W),
                num(ROW_H),
                esc(&d.pool),
                esc(&d.budget)
            );
            continue;
        }
        let (Some(nodes), Some(at_once), Some(seconds)) = (d.nodes, d.at_once, d.seconds) else {
            continue;
        };
        let waves = (nodes.max(0) as u64).div_ceil(at_once.max(1) as u64).max(1);
        let wave_w = seconds as f64 * scale / waves as f64;
        for k in 0..waves {
            let in_wave = (nodes as u64 - k * at_once as u64).min(at_once as u64);
            let _ = write!(
                h,
                "<rect class=\"wave\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: wave {} of {waves}, {in_wave} node{} (about {} s each)</title></rect>",
                num(label_w + k as f64 * wave_w),
                num(y),
                num((wave_w - 1.0).max(1.0)),
                num(ROW_H),
                esc(&d.pool),
                k + 1,
                if in_wave == 1 { "" } else { "s" },
                replace_seconds
            );
        }
        let _ = write!(
            h,
            "<text x=\"{}\" y=\"{}\" font-size=\"12\">{} min</text>",
            num(label_w + seconds as f64 * scale + 4.0),
            num(y + 13.0),
            seconds.div_ceil(60)
        );
    }
    h.push_str("</svg>");
}
