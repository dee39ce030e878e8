//! The catalog as a whole: contents, order, lookups, filters, offerings and prices.

use kk_catalog::{
    Arch, CapacityType, Catalog, Filter, OfferingConfig, PriceError, PriceTable, catalog,
    kwok_catalog,
};

#[test]
fn contents() {
    let c = catalog();
    assert_eq!(c.len(), 1363);
    assert_eq!(
        c.iter().filter(|t| t.on_demand_price.is_some()).count(),
        1345
    );
    assert_eq!(c.iter().filter(|t| t.eni.is_some()).count(), 1355);
    assert_eq!(c.iter().filter(|t| t.arch == Arch::Arm64).count(), 396);
    assert_eq!(c.iter().filter(|t| t.gpu.is_some()).count(), 70);
    assert_eq!(
        c.gpu_names().into_iter().collect::<Vec<_>>(),
        [
            "a100",
            "a10g",
            "b200",
            "b300",
            "h100",
            "h200",
            "l4",
            "l40s",
            "radeon-pro-v520",
            "rtx-pro-4500",
            "rtx-pro-server-6000",
            "t4",
            "t4g",
            "v100"
        ]
    );
    assert_eq!(kwok_catalog().len(), 144);
}

#[test]
fn deterministic_order_by_name() {
    let c = catalog();
    assert!(
        c.types().windows(2).all(|w| w[0].name < w[1].name),
        "strictly increasing names"
    );
    assert_eq!(c.types()[0].name, "a1.2xlarge");
    let again = Catalog::aws(&OfferingConfig::default()).unwrap();
    assert_eq!(again.types(), c.types());
    assert!(
        kwok_catalog()
            .types()
            .windows(2)
            .all(|w| w[0].name < w[1].name)
    );
}

#[test]
fn lookup() {
    assert_eq!(catalog().get("m6i.large").unwrap().name, "m6i.large");
    assert!(catalog().get("m6i.huge").is_none());
    assert!(catalog().get("").is_none());
}

#[test]
fn default_offerings_and_price_lookup() {
    let it = catalog().get("m6i.large").unwrap();
    assert_eq!(it.on_demand_price, Some(0.096));
    assert_eq!(
        catalog().zones(),
        ["us-east-1a", "us-east-1b", "us-east-1c"]
    );
    assert_eq!(it.offerings.len(), 6);
    let od = it.offering("us-east-1b", CapacityType::OnDemand).unwrap();
    assert_eq!(od.price, 0.096);
    assert!(od.available);
    let spot = it.offering("us-east-1c", CapacityType::Spot).unwrap();
    assert!((spot.price - 0.096 * 0.4).abs() < 1e-12);
    assert_eq!(it.cheapest(None).unwrap().capacity_type, CapacityType::Spot);
    assert_eq!(&*it.offerings[0].zone, "us-east-1a");
    assert_eq!(it.offerings[0].capacity_type, CapacityType::OnDemand);
}

#[test]
fn unpriced_types_have_no_offerings() {
    let it = catalog().get("p5e.48xlarge").unwrap();
    assert_eq!(it.on_demand_price, None);
    assert!(it.offerings.is_empty());
    assert_eq!(
        catalog().iter().filter(|t| t.offerings.is_empty()).count(),
        18
    );
}

#[test]
fn custom_zones_fraction_and_price_file() {
    let prices = PriceTable::parse_csv(
        "instance_type,zone,capacity_type,price\n\
         g6.xlarge,eu-west-1a,spot,0.25\n\
         p5e.48xlarge,eu-west-1b,on-demand,60.0\n",
    )
    .unwrap();
    let config = OfferingConfig {
        zones: vec!["eu-west-1a".into(), "eu-west-1b".into()],
        spot_fraction: Some(0.3),
        prices,
        ..Default::default()
    };
    let c = catalog().with_offerings(&config).unwrap();
    assert_eq!(c.zones(), ["eu-west-1a", "eu-west-1b"]);
    let g6 = c.get("g6.xlarge").unwrap();
    assert_eq!(g6.offerings.len(), 4);
    assert_eq!(
        g6.offering("eu-west-1a", CapacityType::Spot).unwrap().price,
        0.25
    );
    let modelled = g6.offering("eu-west-1b", CapacityType::Spot).unwrap().price;
    assert!((modelled - 0.8048 * 0.3).abs() < 1e-12);
    // A price file can make an unpriced type launchable, offering by offering.
    let p5e = c.get("p5e.48xlarge").unwrap();
    assert_eq!(p5e.offerings.len(), 1);
    assert_eq!(p5e.offerings[0].price, 60.0);
    // Built afresh, the same.
    assert_eq!(Catalog::aws(&config).unwrap().types(), c.types());
}

#[test]
fn only_some_capacity_types() {
    let config = OfferingConfig {
        capacity_types: vec![CapacityType::OnDemand],
        ..Default::default()
    };
    let c = catalog().with_offerings(&config).unwrap();
    assert!(
        c.iter()
            .flat_map(|t| &t.offerings)
            .all(|o| o.capacity_type == CapacityType::OnDemand)
    );
}

#[test]
fn bad_offering_configs() {
    let with_prices = |csv: &str| OfferingConfig {
        prices: PriceTable::parse_csv(csv).unwrap(),
        ..Default::default()
    };
    let err = |config: OfferingConfig| catalog().with_offerings(&config).unwrap_err();
    assert_eq!(
        err(with_prices("m6i.huge,us-east-1a,spot,1")),
        PriceError::UnknownType {
            instance_type: "m6i.huge".into()
        }
    );
    assert_eq!(
        err(with_prices("m6i.large,eu-west-1a,spot,1")).to_string(),
        "price for m6i.large in zone eu-west-1a: the zone is not one of the offering zones \
         (us-east-1a, us-east-1b, us-east-1c)"
    );
    let mut spot_only = with_prices("m6i.large,us-east-1a,on-demand,1");
    spot_only.capacity_types = vec![CapacityType::Spot];
    assert!(matches!(
        err(spot_only),
        PriceError::UnofferedCapacityType { .. }
    ));
    for f in [0.0, -0.5, f64::NAN, f64::INFINITY] {
        let config = OfferingConfig {
            spot_fraction: Some(f),
            ..Default::default()
        };
        assert!(matches!(err(config), PriceError::SpotFraction(_)), "{f}");
    }
}

#[test]
fn availability() {
    let mut c = catalog().clone();
    let it = c.get("m6i.large").unwrap().clone();
    let cheapest = it.cheapest(Some(CapacityType::Spot)).unwrap().zone.clone();
    assert!(c.set_available("m6i.large", &cheapest, CapacityType::Spot, false));
    let it = c.get("m6i.large").unwrap();
    assert_ne!(
        it.cheapest(Some(CapacityType::Spot)).unwrap().zone,
        cheapest
    );
    assert!(!c.set_available("m6i.large", "mars-1a", CapacityType::Spot, false));
    assert!(!c.set_available("m6i.huge", "us-east-1a", CapacityType::Spot, false));
}

#[test]
fn kwok_offerings_come_from_the_data() {
    let c = kwok_catalog();
    assert_eq!(
        c.zones(),
        ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]
    );
    let it = c.get("m-8x-arm64-linux").unwrap();
    assert_eq!(it.offerings.len(), 8);
    let od = it
        .offering("test-zone-a", CapacityType::OnDemand)
        .unwrap()
        .price;
    let spot = it
        .offering("test-zone-d", CapacityType::Spot)
        .unwrap()
        .price;
    assert_eq!(od, 0.268719476736);
    assert_eq!(spot, 0.18810363371519997);
    assert!(
        (spot / od - 0.7).abs() < 1e-9,
        "KWOK spot = 0.7 × on-demand"
    );
    // An explicit fraction replaces the data's spot price.
    let half = c
        .with_offerings(&OfferingConfig {
            spot_fraction: Some(0.5),
            ..Default::default()
        })
        .unwrap();
    let it = half.get("m-8x-arm64-linux").unwrap();
    let spot = it
        .offering("test-zone-a", CapacityType::Spot)
        .unwrap()
        .price;
    assert!((spot - od * 0.5).abs() < 1e-12);
}

#[test]
fn filters() {
    let c = catalog();
    let l4 = Filter {
        gpu_name: Some("L4".into()),
        ..Default::default()
    };
    let names: Vec<&str> = c.filter(&l4).map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 15);
    assert!(names.contains(&"g6.xlarge") && names.contains(&"g6f.large"));

    let big_graviton = Filter {
        arch: Some(Arch::Arm64),
        family: Some("m7g".into()),
        min_vcpu: Some(16),
        ..Default::default()
    };
    let names: Vec<&str> = c.filter(&big_graviton).map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "m7g.12xlarge",
            "m7g.16xlarge",
            "m7g.4xlarge",
            "m7g.8xlarge",
            "m7g.metal"
        ]
    );
    let launchable_spot = Filter {
        capacity_type: Some(CapacityType::Spot),
        ..Default::default()
    };
    assert_eq!(c.filter(&launchable_spot).count(), 1345);
    let no_gpu = Filter {
        has_gpu: Some(false),
        ..Default::default()
    };
    assert_eq!(c.filter(&no_gpu).count(), 1363 - 70);
}

#[test]
fn caller_built_types() {
    let mut small = catalog().get("m6i.large").unwrap().clone();
    small.name = "test.small".into();
    small.on_demand_price = Some(0.01);
    let c = Catalog::from_types(
        vec![small, catalog().get("c7g.large").unwrap().clone()],
        &OfferingConfig::default(),
    )
    .unwrap();
    let names: Vec<&str> = c.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["c7g.large", "test.small"]);
    assert_eq!(
        c.get("test.small").unwrap().cheapest(None).unwrap().price,
        0.01 * 0.4
    );
}
