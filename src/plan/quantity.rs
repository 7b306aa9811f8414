//! The quantity rule pod resources must satisfy: a well-formed Kubernetes quantity
//! (`<sign><number><suffix>`) that is not negative.

/// Accepts a well-formed, non-negative quantity; otherwise says what is wrong.
pub(crate) fn non_negative(text: &str) -> Result<(), String> {
    let (negative, number_and_suffix) = split_sign(text);
    let suffix_start = number_and_suffix
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(number_and_suffix.len());
    let (number, suffix) = number_and_suffix.split_at(suffix_start);
    if !is_number(number) || !is_suffix(suffix) {
        return Err(format!(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"
        ));
    }
    if negative && number.chars().any(|c| c.is_ascii_digit() && c != '0') {
        return Err(format!("must be greater than or equal to 0, got {text:?}"));
    }
    Ok(())
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

fn is_number(number: &str) -> bool {
    let digits = number.chars().filter(char::is_ascii_digit).count();
    digits > 0 && number.matches('.').count() <= 1
}

fn is_suffix(suffix: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    let Some(exponent) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !exponent.is_empty() && exponent.chars().all(|c| c.is_ascii_digit())
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
        for text in ["", "1x", "m", "1.2.3", "1 Gi", "Gi", "1e", "1mi", "abc"] {
            assert!(non_negative(text).is_err(), "{text} should be rejected");
        }
        assert!(
            non_negative("-1")
                .expect_err("negative")
                .contains("greater than or equal to 0")
        );
    }
}
