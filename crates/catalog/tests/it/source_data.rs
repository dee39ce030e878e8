//! The embedded catalog against the shared files it was generated from (is the build step
//! faithful?) and against a raw EC2 `DescribeInstanceTypes` response (do the ENI columns mean
//! what the formulas assume?).

use std::path::PathBuf;

use kk_catalog::{Arch, catalog, kwok_catalog};
use serde_json::Value;

fn shared_file(name: &str) -> Value {
    let dir = std::env::var_os("KK_SHARED_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let path = dir.join("data/ec2").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[test]
fn every_row_is_embedded_faithfully() {
    let file = shared_file("ec2_instance_types_karpenter.json");
    let rows = file["instance_types"].as_array().unwrap();
    assert_eq!(rows.len(), catalog().len());
    for row in rows {
        let name = row["name"].as_str().unwrap();
        let it = catalog().get(name).unwrap();
        let ctx = |f: &str| format!("{name}: {f}");
        assert_eq!(
            u64::from(it.vcpu),
            num(&row["vcpu"]).unwrap(),
            "{}",
            ctx("vcpu")
        );
        assert_eq!(
            it.memory_mib,
            num(&row["memory_mib"]).unwrap(),
            "{}",
            ctx("memory")
        );
        assert_eq!(it.arch.as_str(), row["arch"].as_str().unwrap());
        assert_eq!(it.family, row["family"].as_str().unwrap());
        assert_eq!(it.size, row["size"].as_str().unwrap());
        // serde_json's default float parsing may be 1 ULP off; the build step parses exactly.
        let price = row["od_price_usd_hr_us_east_1"].as_f64();
        assert_eq!(
            it.on_demand_price.is_some(),
            price.is_some(),
            "{}",
            ctx("price")
        );
        if let (Some(ours), Some(theirs)) = (it.on_demand_price, price) {
            assert!((ours - theirs).abs() <= theirs * 1e-15, "{}", ctx("price"));
        }
        assert_eq!(it.hypervisor.as_deref(), row["hypervisor"].as_str());
        assert_eq!(
            it.local_nvme_gb,
            num(&row["local_nvme_gb"]),
            "{}",
            ctx("nvme")
        );
        assert_eq!(
            it.network_bandwidth_mbps,
            num(&row["network_bandwidth_mbps"])
        );
        assert_eq!(
            it.gpu.as_ref().map(|g| g.name.as_str()),
            row["gpu_name"].as_str()
        );
        assert_eq!(
            it.gpu.as_ref().map(|g| u64::from(g.count)),
            num(&row["gpu_count"])
        );
        assert_eq!(
            it.eni.map(|e| u64::from(e.default_card_max_enis)),
            num(&row["default_card_max_enis"])
        );
        assert_eq!(
            it.eni.map(|e| u64::from(e.ipv4_per_eni)),
            num(&row["ipv4_per_eni"])
        );
        let doc = it.documented.unwrap();
        assert_eq!(doc.cpu_milli as u64, num(&row["alloc_cpu_m"]).unwrap());
        assert_eq!(
            doc.memory_mib as f64,
            row["alloc_memory_mib"].as_f64().unwrap()
        );
        assert_eq!(doc.pods as u64, num(&row["alloc_pods"]).unwrap());
        for (resource, column) in [
            ("nvidia.com/gpu", "nvidia_gpu"),
            ("amd.com/gpu", "amd_gpu"),
            ("aws.amazon.com/neuron", "aws_neuron"),
            ("aws.amazon.com/neuroncore", "aws_neuroncore"),
            ("habana.ai/gaudi", "habana_gaudi"),
            ("vpc.amazonaws.com/efa", "efa"),
        ] {
            assert_eq!(
                it.capacity.get(resource) as u64,
                num(&row[column]).unwrap_or(0),
                "{}",
                ctx(resource)
            );
        }
    }
}

#[test]
fn kwok_rows_are_embedded_faithfully() {
    let rows = shared_file("kwok_synthetic_instance_types.json");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), kwok_catalog().len());
    for row in rows {
        let it = kwok_catalog().get(row["name"].as_str().unwrap()).unwrap();
        assert_eq!(it.arch.as_str(), row["architecture"].as_str().unwrap());
        assert_eq!(it.os, row["operatingSystems"][0].as_str().unwrap());
        assert_eq!(u64::from(it.vcpu), num(&row["resources"]["cpu"]).unwrap());
        assert_eq!(
            it.capacity.pods as u64,
            num(&row["resources"]["pods"]).unwrap()
        );
        assert_eq!(
            it.labels["karpenter.kwok.sh/instance-memory"],
            row["resources"]["memory"].as_str().unwrap()
        );
    }
}

/// amazon-ec2-instance-selector's 25-type DescribeInstanceTypes fixture (older values): the
/// ENI columns are EC2's `MaximumNetworkInterfaces` and `Ipv4AddressesPerInterface`, so the
/// pod formula gives the same result from the raw API shape.
#[test]
fn describe_instance_types_fixture_agrees() {
    let fixture = shared_file("ec2_describe_instance_types_25_fixture.json");
    let types = fixture["InstanceTypes"].as_array().unwrap();
    assert_eq!(types.len(), 25);
    for raw in types {
        let name = raw["InstanceType"].as_str().unwrap();
        let it = catalog().get(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            u64::from(it.vcpu),
            num(&raw["VCpuInfo"]["DefaultVCpus"]).unwrap()
        );
        assert_eq!(it.memory_mib, num(&raw["MemoryInfo"]["SizeInMiB"]).unwrap());
        let archs: Vec<&str> = raw["ProcessorInfo"]["SupportedArchitectures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let expected = if archs.contains(&"arm64") {
            Arch::Arm64
        } else {
            Arch::Amd64
        };
        assert_eq!(it.arch, expected, "{name}");
        let net = &raw["NetworkInfo"];
        let enis = num(&net["MaximumNetworkInterfaces"]).unwrap() as i64;
        let ips = num(&net["Ipv4AddressesPerInterface"]).unwrap() as i64;
        assert_eq!(it.eni_limited_pods(0), Some(enis * (ips - 1) + 2), "{name}");
        assert_eq!(it.bare_metal, raw["BareMetal"].as_bool().unwrap(), "{name}");
    }
}
