//! Starts and stops moto, the AWS API emulator the AWS provider is tested against. A small
//! Python launcher (embedded here, run with `python3 -c`) starts moto's threaded server on a
//! free 127.0.0.1 port and keeps a line protocol on its stdin/stdout, so tests can also seed
//! backend state moto's API refuses to create (the EKS AMI parameters under `/aws/service/`),
//! or answers only with placeholders (instance types and their zones, spot prices).
//! The server lives as long as the launcher's stdin is open: dropping [`MotoServer`] kills
//! it, and a test process that exits closes the pipe, so no emulator outlives its tests.
//! When moto is not installed, [`MotoServer::start`] fails with a message that says how to
//! install it rather than letting tests pass without it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use thiserror::Error;

/// The account moto attributes every resource to.
pub const MOTO_ACCOUNT_ID: &str = "123456789012";

const LAUNCHER: &str = include_str!("launcher.py");

/// Why moto could not be started or driven.
#[derive(Debug, Error)]
pub enum MotoError {
    #[error(
        "starting the moto launcher with `python3` failed: {0}; install Python 3 and moto \
         (pip install 'moto[server]')"
    )]
    SpawnLauncher(std::io::Error),
    #[error("moto could not start: {0}")]
    StartServer(String),
    #[error("talking to the moto launcher failed: {0}")]
    Protocol(String),
    #[error("moto refused the command {command}: {message}")]
    CommandRejected { command: String, message: String },
}

/// A running moto server and the control channel of its launcher.
pub struct MotoServer {
    endpoint: String,
    child: Mutex<Child>,
    control: Mutex<Control>,
}

struct Control {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl MotoServer {
    /// Starts moto on a free loopback port and waits until it accepts requests.
    pub fn start() -> Result<Self, MotoError> {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(LAUNCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(MotoError::SpawnLauncher)?;
        let stdin = child.stdin.take().expect("stdin was configured as piped");
        let stdout = child.stdout.take().expect("stdout was configured as piped");
        let mut control = Control {
            stdin,
            stdout: BufReader::new(stdout),
        };
        let first = control.read_line().map_err(|e| {
            let _ = child.kill();
            MotoError::StartServer(format!(
                "the launcher exited before reporting a port ({e}); check that \
                 `python3 -c 'import moto.server'` works (pip install 'moto[server]')"
            ))
        })?;
        let port = match first.split_once(' ') {
            Some(("PORT", port)) => port.to_owned(),
            _ => {
                let _ = child.kill();
                return Err(MotoError::StartServer(first));
            }
        };
        Ok(Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            child: Mutex::new(child),
            control: Mutex::new(control),
        })
    }

    /// The URL to point the AWS SDK's endpoint override at.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Writes an SSM parameter straight into moto's backend, bypassing the API's refusal of
    /// reserved `/aws/...` names.
    pub fn seed_ssm_parameter(
        &self,
        region: &str,
        name: &str,
        value: &str,
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ssm_put",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "name": name,
            "value": value,
        }))
    }

    /// Sets image attributes RegisterImage cannot: architecture, creation date and
    /// deprecation time (RFC 3339).
    pub fn set_image_attributes(
        &self,
        region: &str,
        image_id: &str,
        attrs: &ImageAttributes,
    ) -> Result<(), MotoError> {
        let mut command = serde_json::json!({
            "op": "ec2_image",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "image_id": image_id,
        });
        for (key, value) in [
            ("architecture", &attrs.architecture),
            ("creation_date", &attrs.creation_date),
            ("deprecation_time", &attrs.deprecation_time),
        ] {
            if let Some(v) = value {
                command[key] = serde_json::Value::String(v.clone());
            }
        }
        self.command(command)
    }

    /// Sets an instance's launch time (RFC 3339) in moto's backend, so a test can make an
    /// instance old without waiting.
    pub fn set_instance_launch_time(
        &self,
        region: &str,
        instance_id: &str,
        launch_time: &str,
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_instance_launch_time",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "instance_id": instance_id,
            "launch_time": launch_time,
        }))
    }

    /// Makes `name` offered in exactly `zones` of `region`, first adding it to
    /// DescribeInstanceTypes as a copy of `like` when moto does not know it (a type AWS
    /// added since the embedded catalog was generated).
    pub fn set_instance_type_zones(
        &self,
        region: &str,
        name: &str,
        like: &str,
        zones: &[&str],
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_instance_type",
            "region": region,
            "name": name,
            "like": like,
            "zones": zones,
        }))
    }

    /// Sets the spot price DescribeSpotPriceHistory answers for `instance_type` in `zone`
    /// (moto's own answer is a placeholder 0.00001 for every offering).
    pub fn set_spot_price(
        &self,
        region: &str,
        instance_type: &str,
        zone: &str,
        price: f64,
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_spot_price",
            "region": region,
            "instance_type": instance_type,
            "zone": zone,
            "price": price.to_string(),
        }))
    }

    /// Seeds (or replaces) a capacity reservation that DescribeCapacityReservations answers
    /// in `region` of moto's account: moto has no capacity-reservation API of its own.
    pub fn seed_capacity_reservation(
        &self,
        region: &str,
        reservation: &SeededReservation,
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_capacity_reservation",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "id": reservation.id,
            "instance_type": reservation.instance_type,
            "zone": reservation.zone,
            "available": reservation.available,
            "total": reservation.total,
            "match_criteria": reservation.match_criteria,
            "reservation_type": reservation.reservation_type,
            "interruptible": reservation.interruptible,
            "end_date": reservation.end_date,
            "state": reservation.state,
            "tags": reservation.tags,
        }))
    }

    /// Ends On-Demand Capacity Reservation `id` as EC2 does: it expires and its instances
    /// run on as plain on-demand ones.
    pub fn end_capacity_reservation(&self, region: &str, id: &str) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_capacity_reservation_end",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "id": id,
        }))
    }

    /// Seeds (or replaces) a placement group that DescribePlacementGroups answers in `region`
    /// of moto's account: moto has no placement-group API of its own. `strategy` is
    /// `cluster`, `partition` or `spread`; `state` `available`, `pending`, `deleting`, ...
    pub fn seed_placement_group(
        &self,
        region: &str,
        group: &SeededPlacementGroup,
    ) -> Result<(), MotoError> {
        self.command(serde_json::json!({
            "op": "ec2_placement_group",
            "account": MOTO_ACCOUNT_ID,
            "region": region,
            "id": group.id,
            "name": group.name,
            "strategy": group.strategy,
            "partition_count": group.partition_count,
            "state": group.state,
        }))
    }

    /// Every CreateFleet request moto received so far, oldest first, as moto parsed its
    /// parameters (`LaunchTemplateConfigs`, `TargetCapacitySpecification`, `OnDemandOptions`,
    /// `ReservedCapacityOptions`, ...): what a test checks a launch sent.
    pub fn fleet_requests(&self) -> Result<Vec<serde_json::Value>, MotoError> {
        let answer = self.query(serde_json::json!({"op": "ec2_fleet_requests"}))?;
        serde_json::from_str(&answer).map_err(|e| MotoError::Protocol(e.to_string()))
    }

    fn command(&self, command: serde_json::Value) -> Result<(), MotoError> {
        self.query(command).map(drop)
    }

    /// Sends `command`; its answer's payload (what follows `OK `).
    fn query(&self, command: serde_json::Value) -> Result<String, MotoError> {
        let mut control = self
            .control
            .lock()
            .map_err(|_| MotoError::Protocol("control channel poisoned".into()))?;
        writeln!(control.stdin, "{command}").map_err(|e| MotoError::Protocol(e.to_string()))?;
        control
            .stdin
            .flush()
            .map_err(|e| MotoError::Protocol(e.to_string()))?;
        let answer = control.read_line().map_err(MotoError::Protocol)?;
        match answer.as_str() {
            "OK" => Ok(String::new()),
            ok if ok.starts_with("OK ") => Ok(ok["OK ".len()..].to_owned()),
            other => Err(MotoError::CommandRejected {
                command: command.to_string(),
                message: other.to_owned(),
            }),
        }
    }
}

/// A capacity reservation as [`MotoServer::seed_capacity_reservation`] seeds it.
#[derive(Clone, Debug)]
pub struct SeededReservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub available: u32,
    pub total: u32,
    /// `open` or `targeted`.
    pub match_criteria: String,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    pub interruptible: bool,
    /// RFC 3339, or none for an open-ended reservation.
    pub end_date: Option<String>,
    /// `active`, `expired`, `cancelled`, ...
    pub state: String,
    pub tags: std::collections::BTreeMap<String, String>,
}

impl SeededReservation {
    /// An active, targeted, open-ended `default` reservation with nothing launched into it.
    pub fn new(id: &str, instance_type: &str, zone: &str, count: u32) -> Self {
        Self {
            id: id.to_owned(),
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            available: count,
            total: count,
            match_criteria: "targeted".to_owned(),
            reservation_type: "default".to_owned(),
            interruptible: false,
            end_date: None,
            state: "active".to_owned(),
            tags: std::collections::BTreeMap::new(),
        }
    }
}

/// A placement group as [`MotoServer::seed_placement_group`] seeds it.
#[derive(Clone, Debug)]
pub struct SeededPlacementGroup {
    pub id: String,
    pub name: String,
    pub strategy: String,
    /// Partitions of a `partition` group.
    pub partition_count: Option<u32>,
    pub state: String,
}

impl SeededPlacementGroup {
    /// An available group of `strategy`.
    pub fn new(id: &str, name: &str, strategy: &str) -> Self {
        Self {
            id: id.to_owned(),
            name: name.to_owned(),
            strategy: strategy.to_owned(),
            partition_count: None,
            state: "available".to_owned(),
        }
    }
}

/// Image attributes [`MotoServer::set_image_attributes`] can set.
#[derive(Clone, Debug, Default)]
pub struct ImageAttributes {
    pub architecture: Option<String>,
    pub creation_date: Option<String>,
    pub deprecation_time: Option<String>,
}

impl Control {
    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("launcher closed its output".to_owned()),
            Ok(_) => Ok(line.trim_end().to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
