//! kerf's AWS cloud provider: the [`cloudprovider::AwsCloudProvider`] the controller
//! (`kerf-actors`) drives through the core's `CloudProvider` trait. It discovers an
//! EC2NodeClass's subnets, security groups and AMIs (EC2, SSM), renders user data per AMI
//! family, keeps launch templates, launches with CreateFleet and turns its errors into
//! unavailable offerings, lists and terminates instances, prices offerings (Pricing API,
//! spot price history), detects drift and reads the interruption queue (SQS). All of kerf's
//! AWS SDK code lives in this crate, so the core and most tests never compile the SDK; its
//! tests run against moto, a real AWS API emulator ([`moto`]).

pub mod ami;
pub mod batcher;
pub mod cache;
pub mod capacityreservation;
pub mod clients;
pub mod cloudprovider;
pub mod drift;
pub mod errors;
pub mod fleet;
pub mod instance;
pub mod instance_status;
pub mod instanceprofile;
pub mod instancetype;
pub mod interruption;
pub mod io;
pub mod launchtemplate;
pub mod moto;
pub mod nodeclass;
pub mod placementgroup;
pub mod pricing;
pub mod reconcile;
pub mod securitygroup;
pub mod selection;
pub mod selectors;
pub mod ssm;
pub mod subnet;
pub mod tags;
pub mod unavailable;
pub mod userdata;
pub mod version;
