//! `plan --html FILE`: the numbers on the page are `plan -o json`'s, the page is the same bytes
//! every time and loads nothing from anywhere, and headless Chromium (Debian's
//! chromium-headless-shell, installed by .ci/setup-tools) renders it: script ran, one box per
//! NodeClaim, coloured pods inside, not a blank page.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sim")
        .join(name)
        .display()
        .to_string()
}

/// The fixtures with two NodePools used, an existing node and Pending pods of one reason.
fn inputs() -> Vec<String> {
    vec![
        "-f".into(),
        fixture("pools.yaml"),
        "-w".into(),
        fixture("gpu-50.yaml"),
        "-w".into(),
        fixture("cpu-app.yaml"),
    ]
}

fn plan(args: &[String]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("plan")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn report(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    let mut args = inputs();
    args.extend(["--html".into(), path.display().to_string()]);
    let (code, table) = plan(&args);
    assert_eq!(code, 1, "Pending pods still exit 1: {table}");
    assert!(
        table.contains("total: "),
        "the table is still printed: {table}"
    );
    std::fs::read_to_string(path).unwrap()
}

/// Every `attr="value"` inside each element that starts with `open` (e.g. `<figure class="claim"`).
fn elements<'a>(html: &'a str, open: &str) -> Vec<(BTreeMap<&'a str, &'a str>, &'a str)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(open) {
        let tail = &rest[i..];
        let end = tail.find('>').unwrap();
        let mut attrs = BTreeMap::new();
        for part in tail[..end].split("\" ") {
            if let Some((k, v)) = part.split_once("=\"") {
                let k = k.rsplit(' ').next().unwrap();
                attrs.insert(k, v.trim_end_matches('"'));
            }
        }
        out.push((attrs, &tail[end + 1..]));
        rest = &tail[end..];
    }
    out
}

/// The `data-pod` names of the list items in `body` up to the first `</ol>`.
fn listed_pods(body: &str) -> Vec<String> {
    let list = &body[..body.find("</ol>").unwrap()];
    elements(list, "<li class=\"pod\"")
        .into_iter()
        .map(|(a, _)| unescape(a["data-pod"]))
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn field(html: &str, name: &str) -> Vec<String> {
    let key = format!("data-field=\"{name}\">");
    html.match_indices(&key)
        .map(|(i, _)| {
            let s = &html[i + key.len()..];
            s[..s.find('<').unwrap()].to_owned()
        })
        .collect()
}

fn price(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn the_numbers_on_the_page_are_plan_json() {
    let mut args = inputs();
    args.extend(["-o".into(), "json".into()]);
    let (_, json) = plan(&args);
    let json: Value = serde_json::from_str(&json).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = report(dir.path(), "plan.html");

    let t = &json["totals"];
    assert_eq!(field(&html, "totals.nodes"), [t["nodes"].to_string()]);
    assert_eq!(
        field(&html, "totals.podsPlaced"),
        [t["podsPlaced"].to_string()]
    );
    assert_eq!(
        field(&html, "totals.podsPending"),
        [t["podsPending"].to_string()]
    );
    for shown in field(&html, "totals.pricePerHour") {
        assert_eq!(shown.parse::<f64>().unwrap(), price(&t["pricePerHour"]));
    }
    assert_eq!(
        field(&html, "totals.pricePerHour").len(),
        2,
        "header and table"
    );
    let monthly: f64 = field(&html, "totals.pricePerMonth")[0].parse().unwrap();
    assert!(
        (monthly - price(&t["pricePerHour"]) * 730.5).abs() < 0.01,
        "{monthly}"
    );

    // One box per NodeClaim (#N is the JSON's N-th), grouped by NodePool, with the JSON's
    // pool, type, capacity, zone, price, pods.
    let claims = json["nodeClaims"].as_array().unwrap();
    assert!(claims.len() >= 2, "the fixture plans several NodeClaims");
    let figures = elements(&html, "<figure class=\"claim\"");
    assert_eq!(figures.len(), claims.len());
    let pools_in_order: Vec<&str> = figures.iter().map(|(a, _)| a["data-pool"]).collect();
    let mut grouped = pools_in_order.clone();
    grouped.dedup();
    let distinct: std::collections::BTreeSet<&str> = pools_in_order.iter().copied().collect();
    assert_eq!(
        grouped.len(),
        distinct.len(),
        "each pool's boxes together: {pools_in_order:?}"
    );
    let mut by_pool: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for (attrs, body) in &figures {
        let n: usize = attrs["id"].strip_prefix("claim-").unwrap().parse().unwrap();
        let c = &claims[n - 1];
        // Requested of allocatable, CPU beside memory and GPU.
        for resource in ["cpu", "memory", "nvidia.com/gpu"] {
            assert!(
                body.contains(&format!("data-resource=\"{resource}\"")),
                "{resource} bar in {body}"
            );
        }
        assert_eq!(attrs["data-pool"], c["nodePool"]);
        assert_eq!(attrs["data-instance-type"], c["instanceType"]);
        assert_eq!(attrs["data-capacity-type"], c["capacityType"]);
        assert_eq!(attrs["data-zone"], c["zone"]);
        assert_eq!(
            attrs["data-price"].parse::<f64>().unwrap(),
            price(&c["pricePerHour"])
        );
        let pods: Vec<String> = c["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(attrs["data-pods"], pods.len().to_string());
        assert_eq!(listed_pods(body), pods);
        // The SVG draws each of them, and the requests line is the JSON's.
        let svg = &body[..body.find("</svg>").unwrap()];
        let drawn: Vec<String> = elements(svg, "<rect class=\"pod\"")
            .into_iter()
            .map(|(a, _)| unescape(a["data-pod"]))
            .collect();
        assert_eq!(drawn, pods);
        let req: Vec<String> = c["requests"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect();
        assert!(
            body.contains(&format!("requests {}<", req.join(" "))),
            "{req:?}"
        );
        let e = by_pool
            .entry(c["nodePool"].as_str().unwrap().to_owned())
            .or_default();
        e.0 += 1;
        e.1 += price(&c["pricePerHour"]);
    }

    // $/h per NodePool: the sum of that pool's NodeClaims in the JSON.
    let rows = elements(&html, "<tr class=\"pool\"");
    assert_eq!(rows.len(), by_pool.len());
    assert!(by_pool.len() >= 2, "two NodePools launch");
    for (attrs, body) in rows {
        let (n, cost) = by_pool[attrs["data-pool"]];
        let cells: Vec<&str> = body
            .split("<td")
            .skip(2)
            .map(|c| &c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()])
            .collect();
        assert_eq!(cells[0], n.to_string());
        assert!(
            (cells[2].parse::<f64>().unwrap() - cost).abs() < 1e-6,
            "{cells:?} vs {cost}"
        );
    }

    // Pending pods grouped by reason: the same pods, the same reasons.
    let mut pending: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in json["pending"].as_array().unwrap() {
        pending
            .entry(p["reason"].as_str().unwrap().to_owned())
            .or_default()
            .push(p["pod"].as_str().unwrap().to_owned());
    }
    assert!(!pending.is_empty(), "the fixture leaves pods Pending");
    let groups = elements(&html, "<div class=\"reason\"");
    assert_eq!(groups.len(), pending.len());
    for ((attrs, body), (reason, pods)) in groups.iter().zip(&pending) {
        assert_eq!(attrs["data-count"], pods.len().to_string());
        let why = &body[body.find("class=\"why\">").unwrap() + 12..];
        assert_eq!(unescape(&why[..why.find("</span>").unwrap()]), *reason);
        assert_eq!(&listed_pods(body), pods);
    }
}

#[test]
fn each_pod_carries_its_explain_text() {
    let dir = tempfile::tempdir().unwrap();
    let html = report(dir.path(), "plan.html");
    for pod in ["inference/vllm-0", "inference/vllm-6"] {
        let mut args = inputs();
        args.extend(["--explain".into(), pod.into()]);
        let (_, text) = plan(&args);
        let escaped = text
            .trim_end()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;");
        assert!(
            html.contains(&format!("data-pod=\"{pod}\" title=\"{escaped}\"")),
            "{pod}: the list item's tooltip is not plan --explain's text:\n{text}"
        );
    }
    assert!(html.contains("<rect class=\"pod\" data-pod=\"inference/vllm-0\""));
}

#[test]
fn the_page_is_deterministic_and_loads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = report(dir.path(), "a.html");
    let b = report(dir.path(), "b.html");
    assert_eq!(a, b, "same plan, same bytes");
    for reference in [
        "http://", "https://", "src=", "href=", "<link", "@import", "url(",
    ] {
        assert!(!a.contains(reference), "the page references {reference:?}");
    }
    assert!(
        a.contains("default-src 'none'"),
        "the page forbids every fetch"
    );
    assert!(a.starts_with("<!DOCTYPE html>"));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("a.html"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn a_report_that_cannot_be_written_is_an_error_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = inputs();
    let path = dir.path().join("missing-dir/plan.html");
    args.extend(["--html".into(), path.display().to_string()]);
    let out = Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
        .arg("plan")
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing-dir/plan.html"), "{err}");
    assert!(!path.exists());
}

fn chromium() -> Option<&'static str> {
    let found = ["chromium-headless-shell", "chromium"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        // .ci/setup-tools installs it: under CI a missing browser is a failure.
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "chromium-headless-shell not installed and CI=true"
        );
        eprintln!("chromium-headless-shell not installed: the rendering check is skipped");
    }
    found
}

fn browse(browser: &str, profile: &Path, page: &Path, what: &[&str]) -> String {
    let mut cmd = Command::new(browser);
    if browser == "chromium" {
        cmd.arg("--headless");
    }
    let out = cmd
        .args([
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--virtual-time-budget=2000",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(what)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A PNG's pixels as (width, height, RGB rows), decoded by python3's zlib (no image crate here).
fn pixel_stats(png: &Path) -> Value {
    let script = r#"
import json, struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat, ihdr = 8, b'', None
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos+8])
    body = data[pos+8:pos+8+n]
    if kind == b'IHDR': ihdr = struct.unpack('>IIBBBBB', body)
    if kind == b'IDAT': idat += body
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = ihdr
assert depth == 8 and interlace == 0 and ctype in (2, 6), ihdr
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
saturated = dark_top = 0
colours = set()
for y in range(h):
    f = raw[y*(stride+1)]
    line = bytearray(raw[y*(stride+1)+1:(y+1)*(stride+1)])
    for i in range(stride):
        a = line[i-bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i-bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p-a), abs(p-b), abs(p-c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x+1], line[x+2]
        colours.add((r, g, b))
        if max(r, g, b) - min(r, g, b) > 80: saturated += 1
        if y < 40 and max(r, g, b) < 60: dark_top += 1
    prev = line
print(json.dumps({"width": w, "height": h, "colours": len(colours), "saturated": saturated, "darkTop": dark_top}))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn headless_chromium_renders_the_page() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = report(dir.path(), "plan.html");
    let page = dir.path().join("plan.html");
    let claims = elements(&html, "<figure class=\"claim\"").len();

    // The DOM after the page's script ran: it marked the body, and every box is there.
    let dom = browse(browser, &dir.path().join("p1"), &page, &["--dump-dom"]);
    assert!(
        dom.contains("data-ready=\"1\""),
        "the script did not run:\n{dom}"
    );
    assert_eq!(dom.matches("<figure class=\"claim\"").count(), claims);
    assert!(dom.contains("<svg class=\"node\""));
    assert!(dom.contains("id=\"pending\""));

    // The pixels: the dark header drawn at the top, many colours, and a good area of the
    // saturated pod fills (nothing else on the page is saturated), so not a blank page.
    let shot = dir.path().join("shot.png");
    browse(
        browser,
        &dir.path().join("p2"),
        &page,
        &[&format!("--screenshot={}", shot.display())],
    );
    let stats = pixel_stats(&shot);
    eprintln!("screenshot: {stats}");
    assert_eq!(
        (stats["width"].as_u64(), stats["height"].as_u64()),
        (Some(1400), Some(1000))
    );
    assert!(stats["darkTop"].as_u64().unwrap() > 1400 * 20, "{stats}");
    assert!(stats["colours"].as_u64().unwrap() > 50, "{stats}");
    assert!(
        stats["saturated"].as_u64().unwrap() > 5_000,
        "no pods drawn: {stats}"
    );
}

#[test]
fn two_hundred_nodeclaims_fit_a_few_screens_grouped_by_pool() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("fleet.html");
    let (code, _) = plan(&[
        "-f".into(),
        fixture("pools.yaml"),
        "-w".into(),
        fixture("gpu-50.yaml"),
        "-w".into(),
        fixture("fleet-200.yaml"),
        "--html".into(),
        page.display().to_string(),
    ]);
    assert_eq!(code, 1, "the GPU limit leaves pods Pending");
    let html = std::fs::read_to_string(&page).unwrap();
    let figures = elements(&html, "<figure class=\"claim\"");
    assert_eq!(figures.len(), 200);
    assert_eq!(elements(&html, "<section class=\"pool-group\"").len(), 2);

    // Laid out by the browser at 1400×1000: no sideways scroll, and the whole page — 200
    // boxes with their CPU, memory and GPU bars, the pools, the Pending pods — within six
    // screens (the old layout, two 360×220 boxes a row with their pod lists, needed about
    // thirty).
    let dom = browse(browser, &dir.path().join("p"), &page, &["--dump-dom"]);
    let attr = |name: &str| -> u64 {
        let key = format!("{name}=\"");
        let at = dom
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in the DOM"))
            + key.len();
        dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap()
    };
    let (width, height) = (attr("data-width"), attr("data-height"));
    eprintln!("200 NodeClaims: page {width}×{height}");
    assert!(width <= 1400, "the page scrolls sideways: {width}");
    assert!(height <= 6000, "200 NodeClaims take {height} px");
}
