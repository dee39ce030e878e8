//! `plan --html FILE`: the plan as one self-contained page — no network, no external file:
//! inline CSS, inline SVG, a few lines of inline script. NodeClaims are small multiples grouped
//! by NodePool (each group with its count, $/h and $/month), so a fleet of hundreds fits a few
//! screens. Each is a card with CPU, memory and GPU requested of allocatable as bars, and a box
//! whose width is its allocatable CPU and height its allocatable memory (one scale for the whole
//! page), with its pods packed inside as a staircase: pod k spans the CPU and memory the pods
//! before it did not use, so the corner the staircase reaches is what the pods request and
//! whichever edge it nears first is the binding resource; its pods, requests and allocatable
//! fold out. Also: $/h and $/month per NodePool and in total, existing nodes that took pods,
//! Pending pods grouped by reason, warnings. Every pod carries its `--explain` text: a tooltip
//! on hover (SVG `<title>`, no script needed), the side panel on click.
//!
//! Built only from plan's public output (`kk_sim::Plan`, `Explanation`), the public input
//! (`kk_sim::Input`: pods' requests, pools' kubelet settings, the catalog for allocatable) and
//! the view model `top` draws too (`kk_sim::fleet::Fleet::from_plan`).
//! Deterministic: the same plan gives the same bytes (ordered maps, fixed number formats).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kk_catalog::resources::{self as r, Resources, format_quantity};
use kk_sim::fleet::{Fleet, HOURS_PER_MONTH, Use};
use kk_sim::{Input, Plan};

/// Widest and tallest NodeClaim box, in CSS pixels; every other box is to the same scale.
/// Small multiples: a few hundred NodeClaims fit a few screens.
const MAX_BOX_W: f64 = 110.0;
const MAX_BOX_H: f64 = 44.0;
/// Smallest box side, so a 2-vCPU node next to a 192-vCPU one stays visible.
const MIN_BOX: f64 = 16.0;
/// Smallest pod side: a 10m / 16Mi pod must still be a target for the mouse.
const MIN_POD: f64 = 2.0;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("report.js");

pub mod upgrade;

/// What the page shows of one pod.
struct PodView<'a> {
    key: String,
    owner: &'a str,
    cpu_milli: i64,
    memory_bytes: i64,
    requests: String,
    explain: Option<&'a str>,
}

type Pods<'a> = BTreeMap<String, PodView<'a>>;

/// The page for `plan`; `explanations` maps `namespace/name` to `--explain`'s text.
pub fn html(plan: &Plan, input: &Input, explanations: &BTreeMap<String, String>) -> String {
    let pods: Pods = input
        .pods
        .iter()
        .map(|p| {
            let key = p.key();
            let mut req: Vec<String> = p
                .requests
                .iter()
                .map(|(k, v)| format!("{k}={}", format_quantity(k, *v)))
                .collect();
            if req.is_empty() {
                req.push("no requests".into());
            }
            let view = PodView {
                explain: explanations.get(&key).map(String::as_str),
                key: key.clone(),
                owner: &p.owner,
                cpu_milli: p.requests.get(r::CPU).copied().unwrap_or(0),
                memory_bytes: p.requests.get(r::MEMORY).copied().unwrap_or(0),
                requests: req.join(" "),
            };
            (key, view)
        })
        .collect();

    let boxes: Vec<Option<Resources>> = plan
        .node_claims
        .iter()
        .map(|c| allocatable(input, &c.node_pool, &c.instance_type))
        .collect();
    let max = |name: &str| {
        boxes
            .iter()
            .flatten()
            .map(|b| b.get(name))
            .max()
            .unwrap_or(1)
            .max(1) as f64
    };
    let (max_cpu, max_mem) = (max(r::CPU), max(r::MEMORY));
    let (sx, sy) = (MAX_BOX_W / max_cpu, MAX_BOX_H / max_mem);
    let fleet = Fleet::from_plan(plan, input);

    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n");
    h.push_str("<title>kubean-karpenter plan</title>\n<style>\n");
    h.push_str(STYLE);
    h.push_str("</style>\n</head>\n<body>\n");
    let t = &plan.totals;
    let _ = writeln!(
        h,
        "<header><h1>Karpenter plan</h1><p id=\"summary\"><span class=\"num\" data-field=\"totals.nodes\">{}</span> new NodeClaim{}, \
         <span class=\"num\" data-field=\"totals.podsPlaced\">{}</span> pod{} placed, \
         <span class=\"num\" data-field=\"totals.podsPending\">{}</span> Pending, \
         $<span class=\"num\" data-field=\"totals.pricePerHour\">{}</span>/h, \
         $<span class=\"num\" data-field=\"totals.pricePerMonth\">{}</span>/month</p></header>",
        t.nodes,
        plural(t.nodes),
        t.pods_placed,
        plural(t.pods_placed),
        t.pods_pending,
        price(t.price_per_hour),
        month(t.price_per_hour)
    );
    h.push_str("<main>\n");
    pools_table(&mut h, plan, &fleet);
    claims(&mut h, plan, &fleet, &boxes, &pods, sx, sy);
    existing(&mut h, plan, &pods);
    pending(&mut h, plan, &pods);
    if !plan.warnings.is_empty() {
        h.push_str("<section id=\"warnings\"><h2>Warnings</h2><ul>\n");
        for w in &plan.warnings {
            let _ = writeln!(h, "<li>{}</li>", esc(w));
        }
        h.push_str("</ul></section>\n");
    }
    h.push_str("</main>\n");
    let explained = pods.values().filter(|p| p.explain.is_some()).count();
    let _ = writeln!(
        h,
        "<aside id=\"panel\"><h2>Explain</h2><p id=\"panel-hint\">Click a pod for its <code>plan --explain</code> \
         text ({explained} of {} pods explained here; <code>plan --explain NAMESPACE/POD</code> gives any).</p>\
         <pre id=\"explain\"></pre></aside>",
        pods.len()
    );
    h.push_str("<script>\n");
    h.push_str(SCRIPT);
    h.push_str("</script>\n</body>\n</html>\n");
    h
}

/// What a claim's likely instance type offers pods, with its NodePool's kubelet settings.
fn allocatable(input: &Input, pool: &str, instance_type: &str) -> Option<Resources> {
    let pool = input.pools.iter().find(|p| p.name == pool)?;
    let it = input
        .catalog
        .types()
        .iter()
        .find(|t| t.name == instance_type)?;
    Some(it.allocatable(&pool.kubelet))
}

fn pools_table(h: &mut String, plan: &Plan, fleet: &Fleet) {
    h.push_str("<section id=\"pools\"><h2>Cost by NodePool</h2>\n<table>\n<thead><tr><th>NodePool</th><th>NodeClaims</th><th>pods</th><th>$/h</th><th>$/month</th></tr></thead>\n<tbody>\n");
    for pool in &fleet.pools {
        let pods: usize = plan
            .node_claims
            .iter()
            .filter(|c| c.node_pool == pool.name)
            .map(|c| c.pods.len())
            .sum();
        let _ = writeln!(
            h,
            "<tr class=\"pool\" data-pool=\"{p}\"><td>{p}</td><td class=\"num\">{n}</td><td class=\"num\">{pods}</td><td class=\"num price\">{}</td><td class=\"num\">{}</td></tr>",
            price(pool.price_per_hour),
            month(pool.price_per_hour),
            n = pool.nodes,
            p = esc(&pool.name)
        );
    }
    let _ = writeln!(
        h,
        "</tbody>\n<tfoot><tr><th>total</th><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num price\" data-field=\"totals.pricePerHour\">{}</td><td class=\"num\">{}</td></tr></tfoot>\n</table></section>",
        plan.totals.nodes,
        plan.node_claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        price(plan.totals.price_per_hour),
        month(plan.totals.price_per_hour)
    );
}

/// One resource's requested of allocatable as a bar with its numbers; `-` when not offered.
fn use_bar(h: &mut String, label: &str, resource: &str, u: Use) {
    if u.allocatable <= 0 {
        let _ = write!(
            h,
            "<div class=\"use none\" data-resource=\"{resource}\" title=\"no {label}\"><b>{label}</b><span class=\"bar\"></span></div>"
        );
        return;
    }
    let _ = write!(
        h,
        "<div class=\"use\" data-resource=\"{resource}\" data-requested=\"{rq}\" data-allocatable=\"{al}\" title=\"{label} {a} of {b} requested\"><b>{label}</b><span class=\"bar\"><i style=\"width:{pct}%\"></i></span></div>",
        rq = u.requested,
        al = u.allocatable,
        pct = num(u.fraction() * 100.0),
        a = format_quantity(resource, u.requested),
        b = format_quantity(resource, u.allocatable),
    );
}

fn claims(
    h: &mut String,
    plan: &Plan,
    fleet: &Fleet,
    boxes: &[Option<Resources>],
    pods: &Pods,
    sx: f64,
    sy: f64,
) {
    h.push_str("<section id=\"claims\"><h2>NodeClaims by NodePool</h2>\n<p class=\"note\">Box: allocatable (width CPU, height memory, one scale for all). Pods: requests, packed corner to corner. Bars: requested of allocatable.</p>\n");
    for pool in &fleet.pools {
        let _ = writeln!(
            h,
            "<section class=\"pool-group\" data-pool=\"{p}\"><h3>{p} <span class=\"req\">{n} NodeClaim{s} · ${ph}/h · ${pm}/month</span></h3>\n<div class=\"grid\">",
            p = esc(&pool.name),
            n = pool.nodes,
            s = plural(pool.nodes),
            ph = price(pool.price_per_hour),
            pm = month(pool.price_per_hour),
        );
        for (i, (c, b)) in plan.node_claims.iter().zip(boxes).enumerate() {
            if c.node_pool == pool.name {
                claim(h, i, c, b.as_ref(), &fleet.nodes[i], pods, sx, sy);
            }
        }
        h.push_str("</div></section>\n");
    }
    if plan.node_claims.is_empty() {
        h.push_str("<p>No new NodeClaims.</p>\n");
    }
    h.push_str("</section>\n");
}

#[allow(clippy::too_many_arguments)]
fn claim(
    h: &mut String,
    i: usize,
    c: &kk_sim::plan::PlannedClaim,
    b: Option<&Resources>,
    row: &kk_sim::fleet::NodeRow,
    pods: &Pods,
    sx: f64,
    sy: f64,
) {
    {
        let req: Vec<String> = c.requests.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            h,
            "<figure class=\"claim\" id=\"claim-{n}\" data-pool=\"{pool}\" data-instance-type=\"{it}\" data-capacity-type=\"{ct}\" data-zone=\"{zone}\" data-price=\"{price}\" data-pods=\"{np}\">\n\
             <figcaption title=\"{ct} · {zone}\"><b>#{n}</b> {it}<br>{cts} {zs} $<span class=\"price\">{price}</span>/h</figcaption>",
            cts = row.capacity_type_short(),
            zs = esc(&row.zone_short()),
            n = i + 1,
            pool = esc(&c.node_pool),
            it = esc(&c.instance_type),
            ct = esc(&c.capacity_type),
            zone = esc(&c.zone),
            price = price(c.price_per_hour),
            np = c.pods.len(),
        );
        let alloc = b.map_or_else(
            || "unknown (no launchable type)".to_owned(),
            |a| {
                a.iter()
                    .filter(|(_, v)| *v > 0)
                    .map(|(k, v)| format!("{k}={}", format_quantity(k, v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        );
        h.push_str("<div class=\"uses\">");
        use_bar(h, "CPU", r::CPU, row.cpu);
        use_bar(h, "MEM", r::MEMORY, row.memory);
        use_bar(h, "GPU", r::NVIDIA_GPU, row.gpu);
        h.push_str("</div>\n");
        let (cpu, mem, max_pods) = b.map_or((0, 0, 0), |a| {
            (a.get(r::CPU), a.get(r::MEMORY), a.get(r::PODS))
        });
        let w = (cpu as f64 * sx).max(MIN_BOX);
        let hgt = (mem as f64 * sy).max(MIN_BOX);
        let _ = writeln!(
            h,
            "<svg class=\"node\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"NodeClaim {n}: {it}, allocatable cpu {ac}, memory {am}, pods {max_pods}\">\n\
             <rect class=\"alloc\" x=\"0.5\" y=\"0.5\" width=\"{w1}\" height=\"{h1}\"><title>{it} allocatable: cpu {ac}, memory {am}, pods {max_pods}</title></rect>",
            W = num(w + 1.0),
            H = num(hgt + 1.0),
            w1 = num(w),
            h1 = num(hgt),
            n = i + 1,
            it = esc(&c.instance_type),
            ac = format_quantity(r::CPU, cpu),
            am = format_quantity(r::MEMORY, mem),
        );
        let (mut x, mut y) = (0.5, 0.5);
        for key in &c.pods {
            let Some(p) = pods.get(key) else {
                continue;
            };
            let pw = (p.cpu_milli as f64 * sx).max(MIN_POD);
            let ph = (p.memory_bytes as f64 * sy).max(MIN_POD);
            pod_rect(h, p, x, y, pw, ph);
            x += pw;
            y += ph;
        }
        let _ = write!(
            h,
            "</svg>\n<details><summary>{} pod{}</summary><p class=\"req\">requests {}</p><p class=\"req\">allocatable {}</p><ol class=\"pods\">",
            c.pods.len(),
            plural(c.pods.len()),
            esc(&req.join(" ")),
            esc(&alloc)
        );
        for key in &c.pods {
            pod_item(h, key, pods.get(key));
        }
        h.push_str("</ol></details></figure>\n");
    }
}

fn pod_rect(h: &mut String, p: &PodView, x: f64, y: f64, w: f64, hgt: f64) {
    let _ = writeln!(
        h,
        "<rect class=\"pod\" data-pod=\"{key}\" x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{hh}\" style=\"fill:hsl({hue},60%,62%)\"><title>{title}</title></rect>",
        key = esc(&p.key),
        x = num(x),
        y = num(y),
        w = num(w),
        hh = num(hgt),
        hue = hue(p.owner),
        title = esc(&tooltip(p)),
    );
}

fn tooltip(p: &PodView) -> String {
    match p.explain {
        Some(text) => text.trim_end().to_owned(),
        None => format!("pod {}\n  requests: {}", p.key, p.requests),
    }
}

fn pod_item(h: &mut String, key: &str, p: Option<&PodView>) {
    let (title, hue) = match p {
        Some(p) => (tooltip(p), hue(p.owner)),
        None => (key.to_owned(), 0),
    };
    let _ = write!(
        h,
        "<li class=\"pod\" data-pod=\"{k}\" title=\"{t}\"><i style=\"background:hsl({hue},60%,62%)\"></i>{k}</li>",
        k = esc(key),
        t = esc(&title)
    );
}

fn existing(h: &mut String, plan: &Plan, pods: &Pods) {
    if plan.existing_nodes.is_empty() {
        return;
    }
    h.push_str("<section id=\"existing\"><h2>Existing nodes</h2>\n");
    for e in &plan.existing_nodes {
        let _ = write!(
            h,
            "<div class=\"existing\" data-node=\"{n}\" data-pods=\"{c}\"><h3>{n}{pool}</h3><ol class=\"pods\">",
            n = esc(&e.node),
            c = e.pods.len(),
            pool = e
                .node_pool
                .as_ref()
                .map(|p| format!(" (nodepool {})", esc(p)))
                .unwrap_or_default()
        );
        for key in &e.pods {
            pod_item(h, key, pods.get(key));
        }
        h.push_str("</ol></div>\n");
    }
    h.push_str("</section>\n");
}

fn pending(h: &mut String, plan: &Plan, pods: &Pods) {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &plan.pending {
        by_reason.entry(&p.reason).or_default().push(&p.pod);
    }
    let _ = writeln!(
        h,
        "<section id=\"pending\"><h2>Pending: <span class=\"num\">{}</span></h2>",
        plan.pending.len()
    );
    if by_reason.is_empty() {
        h.push_str("<p>Every pod is placed.</p>\n");
    }
    for (reason, keys) in by_reason {
        let _ = write!(
            h,
            "<div class=\"reason\" data-count=\"{c}\"><h3><span class=\"num\">{c}</span> × <span class=\"why\">{r}</span></h3><ol class=\"pods\">",
            c = keys.len(),
            r = esc(reason)
        );
        for key in keys {
            pod_item(h, key, pods.get(key));
        }
        h.push_str("</ol></div>\n");
    }
    h.push_str("</section>\n");
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A price as `plan -o json` writes it (rounded to 6 decimals there): shortest round-trip text.
fn price(x: f64) -> String {
    let x = (x * 1e6).round() / 1e6;
    format!("{x}")
}

/// $/month (730.5 h) of an hourly price, to the cent.
fn month(per_hour: f64) -> String {
    format!("{:.2}", per_hour * HOURS_PER_MONTH)
}

/// SVG coordinates: two decimals, no trailing zeros.
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// A stable colour per workload (FNV-1a of its owner).
fn hue(owner: &str) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in owner.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x01000193);
    }
    h % 360
}

/// Text for HTML content and double-quoted attributes.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{esc, num, price};

    #[test]
    fn text_cannot_open_markup() {
        assert_eq!(
            esc("<script>alert(\"x\")</script> & 'y'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn numbers_have_one_spelling() {
        assert_eq!(price(0.32192), "0.32192");
        assert_eq!(price(1.9927200000001), "1.99272");
        assert_eq!(price(0.0), "0");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.126), "0.13");
        assert_eq!(num(3.10), "3.1");
    }
}
