//! Identifiers the simulated EC2 hands out: instance ids (`i-` + 17 hex digits, as EC2's
//! long ids), fleet ids, private addresses and the private DNS names nodes are named after.

use rand::Rng;

/// A fresh random instance id; the caller checks it against existing ids.
pub(crate) fn instance_id(rng: &mut impl Rng) -> String {
    let bits: u128 = rng.random::<u128>() & ((1u128 << 68) - 1);
    format!("i-{bits:017x}")
}

/// A fleet id shaped like EC2's (`fleet-` + a UUID).
pub(crate) fn fleet_id(rng: &mut impl Rng) -> String {
    let b: u128 = rng.random();
    format!(
        "fleet-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (b >> 96) as u32,
        (b >> 80) as u16,
        (b >> 64) as u16,
        (b >> 48) as u16,
        b & 0xffff_ffff_ffff
    )
}

/// Whether `id` is shaped like an instance id (`i-` followed by 8 or 17 hex digits).
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// The `n`-th private address of the simulated VPC (10.0.0.0/8, skipping the reserved .0-.15).
pub(crate) fn private_ip(n: u32) -> String {
    let host = n.saturating_add(16);
    format!(
        "10.{}.{}.{}",
        (host >> 16) & 0xff,
        (host >> 8) & 0xff,
        host & 0xff
    )
}

/// EC2's private DNS name for an address: `ec2.internal` in us-east-1, else
/// `<region>.compute.internal`.
pub(crate) fn private_dns_name(ip: &str, region: &str) -> String {
    let host = format!("ip-{}", ip.replace('.', "-"));
    if region == "us-east-1" {
        format!("{host}.ec2.internal")
    } else {
        format!("{host}.{region}.compute.internal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_i_and_17_hex_digits() {
        let mut rng = rand::rng();
        for _ in 0..100 {
            let id = instance_id(&mut rng);
            assert_eq!(id.len(), 19, "{id}");
            assert!(is_instance_id(&id), "{id}");
        }
        assert!(!is_instance_id("i-xyz"));
        assert!(!is_instance_id("0123456789abcdef0"));
    }

    #[test]
    fn dns_names_follow_the_region_convention() {
        assert_eq!(private_ip(0), "10.0.0.16");
        assert_eq!(
            private_dns_name("10.0.1.2", "us-east-1"),
            "ip-10-0-1-2.ec2.internal"
        );
        assert_eq!(
            private_dns_name("10.0.1.2", "eu-west-1"),
            "ip-10-0-1-2.eu-west-1.compute.internal"
        );
    }

    #[test]
    fn fleet_ids_look_like_uuids() {
        let id = fleet_id(&mut rand::rng());
        assert_eq!(id.len(), "fleet-".len() + 36);
    }
}
