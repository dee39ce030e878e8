//! `catalog`: list EC2 instance types with their GPUs, pods, allocatable resources and prices
//! (the embedded kk-catalog data; see docs/reference/catalog.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use kk_catalog::resources::format_quantity;
use kk_catalog::{
    Arch, CapacityType, Catalog, Filter, InstanceType, KubeletOverrides, OfferingConfig,
    PriceTable, Resources,
};
use serde_json::{Map, Value, json};

use crate::Failure;

#[derive(clap::Args)]
pub struct CatalogArgs {
    /// Only types with this GPU (the instance-gpu-name label: l4, a10g, h100, ...).
    #[arg(long, value_name = "NAME")]
    gpu: Option<String>,
    /// Only this instance family (g6, m7g, ...).
    #[arg(long, value_name = "F")]
    family: Option<String>,
    /// Only this architecture.
    #[arg(long, value_name = "A", value_parser = ["amd64", "arm64"])]
    arch: Option<String>,
    /// Only types with at least N vCPUs.
    #[arg(long, value_name = "N")]
    min_cpu: Option<u32>,
    /// Only this instance type (m6i.large).
    #[arg(long = "type", value_name = "T")]
    instance_type: Option<String>,
    /// Output: table (`text`), or json / yaml (an array of objects).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    output: crate::flags::OutputFormat,
    /// Offering zones, comma-separated [default: us-east-1a,us-east-1b,us-east-1c].
    #[arg(long, value_delimiter = ',', value_name = "ZONES")]
    zones: Vec<String>,
    /// Spot price as this fraction of on-demand [default: 0.4].
    #[arg(long, value_name = "FRACTION")]
    spot_fraction: Option<f64>,
    /// Price file, CSV `instance_type,zone,capacity_type,price`; its prices win.
    #[arg(long, value_name = "CSV")]
    prices: Option<PathBuf>,
    /// EC2NodeClass spec.kubelet.maxPods to compute pods and allocatable with.
    #[arg(long, value_name = "N")]
    max_pods: Option<u32>,
    /// Which data: the EC2 types, or Karpenter's synthetic KWOK types.
    #[arg(long, value_parser = ["aws", "kwok"], default_value = "aws")]
    provider: String,
}

pub fn run(args: CatalogArgs) -> Result<ExitCode, Failure> {
    let mut config = OfferingConfig {
        zones: args
            .zones
            .iter()
            .map(|z| z.trim().to_owned())
            .filter(|z| !z.is_empty())
            .collect(),
        spot_fraction: args.spot_fraction,
        ..OfferingConfig::default()
    };
    if let Some(path) = &args.prices {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
        config.prices = PriceTable::parse_csv(&text)
            .map_err(|e| Failure::msg(format!("{}: {e}", path.display())))?;
    }
    let base = if args.provider == "kwok" {
        kk_catalog::kwok_catalog()
    } else {
        kk_catalog::catalog()
    };
    let owned: Catalog;
    let catalog = if config == OfferingConfig::default() {
        base
    } else {
        owned = base.with_offerings(&config)?;
        &owned
    };

    let filter = filter(&args, catalog)?;
    let overrides = KubeletOverrides {
        max_pods: args.max_pods.map(i64::from),
        ..KubeletOverrides::default()
    };
    let types: Vec<&InstanceType> = catalog.filter(&filter).collect();

    let mut out = std::io::stdout().lock();
    let written = if args.output == crate::flags::OutputFormat::Json {
        let rows: Vec<Value> = types.iter().map(|t| to_json(t, &overrides)).collect();
        serde_json::to_writer_pretty(&mut out, &rows)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else if args.output == crate::flags::OutputFormat::Yaml {
        let rows: Vec<Value> = types.iter().map(|t| to_json(t, &overrides)).collect();
        let text = kk_model::yaml::to_yaml(&rows).map_err(std::io::Error::other)?;
        out.write_all(text.as_bytes())
    } else if types.is_empty() {
        eprintln!("no instance types match");
        Ok(())
    } else {
        write_table(&mut out, &types, &overrides)
    };
    match written {
        // `catalog | head` is fine.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The filter, with flag values checked against what the catalog holds.
fn filter(args: &CatalogArgs, catalog: &Catalog) -> Result<Filter, Failure> {
    if let Some(gpu) = &args.gpu {
        let names = catalog.gpu_names();
        if !names.iter().any(|n| n.eq_ignore_ascii_case(gpu)) {
            let known = names.into_iter().collect::<Vec<_>>().join(", ");
            return Err(Failure::msg(format!(
                "--gpu {gpu:?}: no instance type has that GPU (known: {})",
                if known.is_empty() { "none" } else { &known }
            )));
        }
    }
    if let Some(family) = &args.family
        && !catalog.families().contains(family.as_str())
    {
        return Err(Failure::msg(format!(
            "--family {family:?}: unknown instance family (examples: m7i, c7g, g6, p5)"
        )));
    }
    if let Some(name) = &args.instance_type
        && catalog.get(name).is_none()
    {
        return Err(Failure::msg(format!(
            "--type {name:?}: unknown instance type (for example m6i.large)"
        )));
    }
    let arch = match args.arch.as_deref() {
        None => None,
        Some(a) => Some(a.parse::<Arch>().map_err(Failure::from)?),
    };
    Ok(Filter {
        name: args.instance_type.clone(),
        family: args.family.clone(),
        arch,
        gpu_name: args.gpu.clone(),
        min_vcpu: args.min_cpu,
        ..Filter::default()
    })
}

fn gib(bytes: i64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn spot_price(t: &InstanceType) -> Option<f64> {
    t.cheapest(Some(CapacityType::Spot)).map(|o| o.price)
}

fn on_demand_price(t: &InstanceType) -> Option<f64> {
    t.cheapest(Some(CapacityType::OnDemand)).map(|o| o.price)
}

/// `1×l4`, `8×h100`, `1×inferentia2`, `<1×l4` (a fraction of a GPU: g6f, gr6f), or `-`.
fn devices(t: &InstanceType) -> String {
    match (&t.gpu, &t.accelerator) {
        (Some(g), _) if g.count == 0 => format!("<1×{}", g.name),
        (Some(g), _) => format!("{}×{}", g.count, g.name),
        (None, Some(a)) => format!("{}×{}", a.count, a.name),
        (None, None) => "-".into(),
    }
}

fn write_table(
    out: &mut impl Write,
    types: &[&InstanceType],
    overrides: &KubeletOverrides,
) -> std::io::Result<()> {
    let price = |p: Option<f64>| p.map_or("-".to_owned(), |p| format!("{p:.4}"));
    let header = [
        "NAME",
        "VCPU",
        "MEMORY(GiB)",
        "GPUS",
        "PODS",
        "ALLOC-CPU",
        "ALLOC-MEM(GiB)",
        "ON-DEMAND($/h)",
        "SPOT($/h)",
    ];
    let rows: Vec<[String; 9]> = types
        .iter()
        .map(|t| {
            let alloc = t.allocatable(overrides);
            [
                t.name.clone(),
                t.vcpu.to_string(),
                trim_float(t.memory_mib as f64 / 1024.0),
                devices(t),
                alloc.pods.to_string(),
                format_quantity("cpu", alloc.cpu_milli),
                format!("{:.2}", gib(alloc.memory_bytes)),
                price(on_demand_price(t)),
                price(spot_price(t)),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &[&str]| -> std::io::Result<()> {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 0 {
                text.push_str(&format!("{cell:<w$}"));
            } else {
                text.push_str(&format!("  {cell:>w$}"));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, &header)?;
    for row in &rows {
        line(out, &row.each_ref().map(String::as_str))?;
    }
    Ok(())
}

/// `0.5`, `16`, `1.75`: at most two decimals, no trailing zeros.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn resources_json(r: &Resources) -> Value {
    let mut m = Map::new();
    m.insert("cpu".into(), json!(format_quantity("cpu", r.cpu_milli)));
    m.insert("cpu_millicores".into(), json!(r.cpu_milli));
    m.insert("memory_bytes".into(), json!(r.memory_bytes));
    m.insert("memory_mib".into(), json!(r.memory_bytes >> 20));
    m.insert(
        "ephemeral_storage_bytes".into(),
        json!(r.ephemeral_storage_bytes),
    );
    m.insert("pods".into(), json!(r.pods));
    for (k, v) in &r.extended {
        m.insert(k.clone(), json!(v));
    }
    Value::Object(m)
}

fn to_json(t: &InstanceType, overrides: &KubeletOverrides) -> Value {
    let alloc = t.allocatable(overrides);
    json!({
        "name": t.name,
        "family": t.family,
        "arch": t.arch.as_str(),
        "os": t.os,
        "vcpu": t.vcpu,
        "memory_mib": t.memory_mib,
        "memory_gib": t.memory_mib as f64 / 1024.0,
        "gpu": t.gpu.as_ref().map(|g| json!({
            "count": g.count,
            "name": g.name,
            "manufacturer": g.manufacturer,
            "memory_mib": g.memory_mib,
        })),
        "accelerator": t.accelerator.as_ref().map(|a| json!({
            "count": a.count,
            "name": a.name,
            "manufacturer": a.manufacturer,
        })),
        "pods": alloc.pods,
        "capacity": resources_json(&t.capacity_with(overrides)),
        "allocatable": resources_json(&alloc),
        "on_demand_price": on_demand_price(t),
        "spot_price": spot_price(t),
        "offerings": t.offerings.iter().map(|o| json!({
            "zone": &*o.zone,
            "capacity_type": o.capacity_type.as_str(),
            "price": o.price,
            "available": o.available,
        })).collect::<Vec<_>>(),
        "labels": t.labels,
    })
}
