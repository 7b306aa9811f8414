//! `kerf catalog`: lists the embedded EC2 instance types of a region with their labels,
//! capacity, allocatable (for an optional EC2NodeClass and the `RESERVED_ENIS` /
//! `VM_MEMORY_OVERHEAD_PERCENT` settings) and offerings, as JSON or as a table.

mod nodeclass;

use kerf::catalog::{
    AllocatableSettings, CapacityType, Catalog, DEFAULT_VM_MEMORY_OVERHEAD_PERCENT, InstanceType,
    add_reserved_offerings,
};
use kerf::labels::{ARCH, RESOURCE_CPU, RESOURCE_MEMORY, RESOURCE_PODS};
use kerf::resources::Resources;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// AWS region whose zones and prices to use.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// EC2NodeClass manifest (YAML) whose AMI family, kubelet settings and volumes shape
    /// capacity and allocatable. Without it: AL2023 with upstream defaults.
    #[arg(long, value_name = "FILE")]
    nodeclass: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Only these instance types (repeatable).
    #[arg(long = "instance-type", value_name = "NAME")]
    instance_types: Vec<String>,
    /// ENIs withheld from the ENI-limited max-pods computation.
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0)]
    reserved_enis: u32,
    /// Share of EC2-reported memory lost to the hypervisor (0 ≤ F < 1).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT)]
    vm_memory_overhead_percent: f64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Json,
    Table,
}

pub fn run(args: Args) -> ExitCode {
    match list(&args) {
        Ok(types) => write_output(&types, args.output),
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
    }
}

/// The instance types to print, or what to print about the input instead: node class
/// errors as `kerf validate` prints them (they name file and object), others prefixed with
/// the command.
fn list(args: &Args) -> Result<Vec<InstanceType>, String> {
    let failed = |message: String| format!("kerf catalog: {message}");
    if !(0.0..1.0).contains(&args.vm_memory_overhead_percent) {
        return Err(failed(format!(
            "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT) must be in [0, 1), got {}",
            args.vm_memory_overhead_percent
        )));
    }
    let (settings, node_class) = match &args.nodeclass {
        Some(file) => {
            let (settings, node_class) =
                nodeclass::read(file, args.reserved_enis, args.vm_memory_overhead_percent)
                    .map_err(|e| e.to_string())?;
            (settings, Some(node_class))
        }
        None => (
            AllocatableSettings {
                reserved_enis: args.reserved_enis,
                vm_memory_overhead_percent: args.vm_memory_overhead_percent,
                ..AllocatableSettings::default()
            },
            None,
        ),
    };
    let catalog = Catalog::embedded(&args.region).map_err(|e| failed(e.to_string()))?;
    // The class's reservations (from its status) as reserved offerings; the status does not
    // say how much room each has, so they are listed as available.
    let reserve = |mut types: Vec<InstanceType>| {
        if let Some(status) = node_class.as_ref().and_then(|c| c.status.as_ref()) {
            add_reserved_offerings(&mut types, &status.capacity_reservations, |_| {
                Some(u32::MAX)
            });
        }
        types
    };
    if args.instance_types.is_empty() {
        return Ok(reserve(catalog.instance_types(&settings)));
    }
    args.instance_types
        .iter()
        .map(|name| {
            catalog.instance_type(name, &settings).ok_or_else(|| {
                failed(format!(
                    "instance type {name:?} is not offered in {} for AMI family {}",
                    args.region, settings.ami_family
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(reserve)
}

/// One instance type as `-o json` prints it.
#[derive(Serialize)]
struct JsonInstanceType<'a> {
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
    capacity: &'a Resources,
    allocatable: Resources,
    offerings: Vec<JsonOffering<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonOffering<'a> {
    zone: &'a str,
    zone_id: &'a str,
    capacity_type: CapacityType,
    price: f64,
    available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity_reservation_id: Option<&'a str>,
}

fn write_output(types: &[InstanceType], output: Output) -> ExitCode {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = match output {
        Output::Json => write_json(&mut out, types),
        Output::Table => write_table(&mut out, types),
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`kerf catalog | head`) is not an error worth reporting.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kerf catalog: writing output: {error}");
            ExitCode::FAILURE
        }
    }
}

fn write_json(out: &mut impl Write, types: &[InstanceType]) -> io::Result<()> {
    let json: Vec<JsonInstanceType> = types
        .iter()
        .map(|it| JsonInstanceType {
            name: &it.name,
            labels: &it.labels,
            capacity: &it.capacity,
            allocatable: it.allocatable(),
            offerings: it
                .offerings
                .iter()
                .map(|o| JsonOffering {
                    zone: &o.zone,
                    zone_id: &o.zone_id,
                    capacity_type: o.capacity_type,
                    price: o.price,
                    available: o.available,
                    capacity_reservation_id: o.reservation.as_ref().map(|r| r.id.as_str()),
                })
                .collect(),
        })
        .collect();
    serde_json::to_writer_pretty(&mut *out, &json).map_err(io::Error::from)?;
    writeln!(out)
}

fn write_table(out: &mut impl Write, types: &[InstanceType]) -> io::Result<()> {
    let header = [
        "NAME",
        "ARCH",
        "CPU",
        "MEMORY",
        "PODS",
        "ALLOC CPU",
        "ALLOC MEMORY",
        "ALLOC PODS",
        "ON-DEMAND",
        "SPOT FROM",
        "RESERVED",
        "ZONES",
    ];
    let rows: Vec<[String; 12]> = types.iter().map(table_row).collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// The class's available reservations of the type, as `id@zone`; `-` when none.
fn reserved(it: &InstanceType) -> String {
    let ids: Vec<String> = it
        .available_offerings()
        .filter_map(|o| Some(format!("{}@{}", o.reservation.as_ref()?.id, o.zone)))
        .collect();
    if ids.is_empty() {
        "-".to_owned()
    } else {
        ids.join(",")
    }
}

fn table_row(it: &InstanceType) -> [String; 12] {
    let allocatable = it.allocatable();
    let quantity = |resources: &Resources, name: &str| {
        resources
            .get(name)
            .map_or_else(|| "-".to_owned(), |q| q.to_string())
    };
    let cheapest = |capacity_type: CapacityType| {
        it.available_offerings()
            .filter(|o| o.capacity_type == capacity_type)
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .map_or_else(|| "-".to_owned(), |price| format!("{price:.5}"))
    };
    let mut zones: Vec<&str> = it.offerings.iter().map(|o| o.zone.as_str()).collect();
    zones.dedup();
    [
        it.name.clone(),
        it.label(ARCH).unwrap_or("-").to_owned(),
        quantity(&it.capacity, RESOURCE_CPU),
        quantity(&it.capacity, RESOURCE_MEMORY),
        quantity(&it.capacity, RESOURCE_PODS),
        quantity(&allocatable, RESOURCE_CPU),
        quantity(&allocatable, RESOURCE_MEMORY),
        quantity(&allocatable, RESOURCE_PODS),
        cheapest(CapacityType::OnDemand),
        cheapest(CapacityType::Spot),
        reserved(it),
        zones.join(","),
    ]
}
