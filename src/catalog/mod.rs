//! The embedded EC2 instance-type catalog and the allocatable computation.
