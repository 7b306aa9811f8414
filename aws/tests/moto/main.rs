//! Integration tests of the AWS provider against moto, a real AWS API emulator, through
//! the real AWS SDK clients. One test binary shares one moto server (started on first use,
//! stopped when the binary exits); every test creates its own VPC objects with unique tags
//! so tests run in parallel without seeing each other's resources.

mod ami;
mod catalog;
mod cloudprovider;
mod discovery;
mod drift;
mod iam_policy;
mod instance_status;
mod instancetypes;
mod interruption;
mod io;
mod launch;
mod ml_launch;
mod nodeclass;
mod pricing;
mod reservations;
mod support;
