//! The quantity rule pod resources must satisfy: a quantity the API server parses (see
//! [`crate::resources::Quantity`]) that is not negative.

use crate::resources::Quantity;

/// Accepts a well-formed, non-negative quantity; otherwise says what is wrong.
pub(crate) fn non_negative(text: &str) -> Result<Quantity, String> {
    let quantity = Quantity::parse(text).map_err(|error| error.to_string())?;
    if quantity.signum() < 0 {
        return Err(format!("must be greater than or equal to 0, got {text:?}"));
    }
    Ok(quantity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kubernetes_forms() {
        for text in [
            "0", "1", "+2", "250m", "1.5", ".5", "5.", "512Mi", "2Gi", "1e3", "1E-2", "100k", "-0",
        ] {
            non_negative(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }

    #[test]
    fn rejects_malformed_and_negative() {
        for text in ["", "1x", "1.2.3", "1 Gi", "1mi", "abc"] {
            assert!(non_negative(text).is_err(), "{text} should be rejected");
        }
        assert!(
            non_negative("-1")
                .expect_err("negative")
                .contains("greater than or equal to 0")
        );
    }
}
