//! Table-driven tests taken from apimachinery's `pkg/api/resource/quantity_test.go`
//! (TestQuantityParse, TestQuantityString, TestQuantityParseEmit, TestParseQuantity,
//! TestMilliNewSet, TestNewSet, TestNewScaledSet, TestAdd, TestSub, TestMul), plus
//! property tests of the print/parse round trip.

use super::*;
use Format::{BinarySI, DecimalExponent, DecimalSI};
use proptest::prelude::*;

/// apimachinery's `decQuantity(i, exponent, format)`: `i × 10^exponent`.
fn dq(i: i128, exponent: i32, format: Format) -> Quantity {
    let shift = exponent + 9;
    let nanos = if shift >= 0 {
        i * 10i128.pow(shift as u32)
    } else {
        i / 10i128.pow((-shift) as u32)
    };
    Quantity::from_nanos(nanos, format)
}

fn q(text: &str) -> Quantity {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

const MOST_POSITIVE: i128 = i64::MAX as i128;

#[test]
fn parses_apimachinery_table() {
    let table: Vec<(&str, Quantity)> = vec![
        ("0", dq(0, 0, DecimalSI)),
        ("0n", dq(0, 0, DecimalSI)),
        ("0u", dq(0, 0, DecimalSI)),
        ("0m", dq(0, 0, DecimalSI)),
        ("0Ki", dq(0, 0, BinarySI)),
        ("0k", dq(0, 0, DecimalSI)),
        ("0Mi", dq(0, 0, BinarySI)),
        ("0M", dq(0, 0, DecimalSI)),
        ("0Gi", dq(0, 0, BinarySI)),
        ("0G", dq(0, 0, DecimalSI)),
        ("0Ti", dq(0, 0, BinarySI)),
        ("0T", dq(0, 0, DecimalSI)),
        ("1", dq(1, 0, DecimalSI)),
        ("1Ki", dq(1024, 0, BinarySI)),
        ("8Ki", dq(8 * 1024, 0, BinarySI)),
        ("7Mi", dq(7 << 20, 0, BinarySI)),
        ("6Gi", dq(6 << 30, 0, BinarySI)),
        ("5Ti", dq(5 << 40, 0, BinarySI)),
        ("4Pi", dq(4 << 50, 0, BinarySI)),
        ("3Ei", dq(3 << 60, 0, BinarySI)),
        ("10Ti", dq(10 << 40, 0, BinarySI)),
        ("100Ti", dq(100 << 40, 0, BinarySI)),
        ("5n", dq(5, -9, DecimalSI)),
        ("4u", dq(4, -6, DecimalSI)),
        ("3m", dq(3, -3, DecimalSI)),
        ("9", dq(9, 0, DecimalSI)),
        ("8k", dq(8, 3, DecimalSI)),
        ("50k", dq(5, 4, DecimalSI)),
        ("7M", dq(7, 6, DecimalSI)),
        ("6G", dq(6, 9, DecimalSI)),
        ("5T", dq(5, 12, DecimalSI)),
        ("40T", dq(4, 13, DecimalSI)),
        ("300T", dq(3, 14, DecimalSI)),
        ("2P", dq(2, 15, DecimalSI)),
        ("1E", dq(1, 18, DecimalSI)),
        ("1E-3", dq(1, -3, DecimalExponent)),
        ("1e3", dq(1, 3, DecimalExponent)),
        ("1E6", dq(1, 6, DecimalExponent)),
        ("1e9", dq(1, 9, DecimalExponent)),
        ("1E12", dq(1, 12, DecimalExponent)),
        ("1e15", dq(1, 15, DecimalExponent)),
        ("1E18", dq(1, 18, DecimalExponent)),
        ("1e14", dq(1, 14, DecimalExponent)),
        ("1e13", dq(1, 13, DecimalExponent)),
        ("100.035k", dq(100035, 0, DecimalSI)),
        ("0.001", dq(1, -3, DecimalSI)),
        ("0.0005k", dq(5, -1, DecimalSI)),
        ("0.005", dq(5, -3, DecimalSI)),
        ("0.05", dq(5, -2, DecimalSI)),
        ("0.5", dq(5, -1, DecimalSI)),
        ("0.00050k", dq(5, -1, DecimalSI)),
        ("0.00500", dq(5, -3, DecimalSI)),
        ("0.05000", dq(5, -2, DecimalSI)),
        ("0.50000", dq(5, -1, DecimalSI)),
        ("0.5e0", dq(5, -1, DecimalExponent)),
        ("0.5e-1", dq(5, -2, DecimalExponent)),
        ("0.5e-2", dq(5, -3, DecimalExponent)),
        ("10.035M", dq(10035, 3, DecimalSI)),
        ("1.2e3", dq(12, 2, DecimalExponent)),
        ("1.3E+6", dq(13, 5, DecimalExponent)),
        ("1.40e9", dq(14, 8, DecimalExponent)),
        ("1.53E12", dq(153, 10, DecimalExponent)),
        ("1.6e15", dq(16, 14, DecimalExponent)),
        ("1.7E18", dq(17, 17, DecimalExponent)),
        ("9.01", dq(901, -2, DecimalSI)),
        ("8.1k", dq(81, 2, DecimalSI)),
        ("7.123456M", dq(7123456, 0, DecimalSI)),
        ("6.987654321G", dq(6987654321, 0, DecimalSI)),
        ("5.444T", dq(5444, 9, DecimalSI)),
        ("40.1T", dq(401, 11, DecimalSI)),
        ("300.2T", dq(3002, 11, DecimalSI)),
        ("2.5P", dq(25, 14, DecimalSI)),
        ("1.01E", dq(101, 16, DecimalSI)),
        // Things that saturate or round.
        ("3.001n", dq(4, -9, DecimalSI)),
        ("1.1E-9", dq(2, -9, DecimalExponent)),
        ("0.0000000001", dq(1, -9, DecimalSI)),
        ("0.0000000005", dq(1, -9, DecimalSI)),
        ("0.00000000050", dq(1, -9, DecimalSI)),
        ("0.5e-9", dq(1, -9, DecimalExponent)),
        ("0.9n", dq(1, -9, DecimalSI)),
        ("0.00000012345", dq(124, -9, DecimalSI)),
        ("0.00000012354", dq(124, -9, DecimalSI)),
        ("9Ei", dq(MOST_POSITIVE, 0, BinarySI)),
        ("9223372036854775807Ki", dq(MOST_POSITIVE, 0, BinarySI)),
        ("12E", dq(12, 18, DecimalSI)),
        // Fractional binary.
        ("100.035Ki", dq(10243584, -2, BinarySI)),
        ("0.5Mi", dq(512 * 1024, 0, BinarySI)),
        ("0.05Gi", dq(536870912, -1, BinarySI)),
        ("0.025Ti", dq(274877906944, -1, BinarySI)),
        // Things written by trolls.
        ("0.000000000001Ki", dq(2, -9, DecimalSI)),
        (".001", dq(1, -3, DecimalSI)),
        (".0001k", dq(100, -3, DecimalSI)),
        ("1.", dq(1, 0, DecimalSI)),
        ("1.G", dq(1, 9, DecimalSI)),
    ];
    for (input, expected) in &table {
        let got = q(input);
        assert_eq!(got.nanos(), expected.nanos(), "{input}");
        assert_eq!(got.format(), expected.format(), "{input}");
        let negative = q(&format!("-{input}"));
        assert_eq!(negative.nanos(), -expected.nanos(), "-{input}");
        assert_eq!(negative.format(), expected.format(), "-{input}");
        let plus = q(&format!("+{input}"));
        assert_eq!(plus.nanos(), expected.nanos(), "+{input}");
        assert_eq!(plus.format(), expected.format(), "+{input}");
    }
}

#[test]
fn rejects_apimachinery_invalid_inputs() {
    for input in [
        "",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        " 1",
        "1 ",
        "Non-Numeric",
    ] {
        assert!(
            input.parse::<Quantity>().is_err(),
            "{input:?} parsed unexpectedly"
        );
    }
    assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
    assert!(matches!(Quantity::parse("1ki"), Err(QuantityError::Suffix(text)) if text == "1ki"));
    assert!(matches!(
        Quantity::parse("1Zi"),
        Err(QuantityError::Malformed(_))
    ));
    assert!(matches!(
        Quantity::parse("1 "),
        Err(QuantityError::Malformed(_))
    ));
}

#[test]
fn rejects_values_beyond_the_i128_nano_range() {
    assert!(matches!(
        Quantity::parse("1e30"),
        Err(QuantityError::OutOfRange(_))
    ));
    assert!(matches!(
        Quantity::parse("1e99999999999"),
        Err(QuantityError::OutOfRange(_))
    ));
    // Zero and vanishing values are fine whatever the exponent.
    assert!(q("0e999999").is_zero());
    assert_eq!(q("1e-999999").nanos(), 1);
}

#[test]
fn prints_apimachinery_string_table() {
    let table = [
        (dq(1 << 30, 0, BinarySI), "1Gi", "1024Mi"),
        (dq(300 << 20, 0, BinarySI), "300Mi", "307200Ki"),
        (dq(6 * 1024, 0, BinarySI), "6Ki", ""),
        (dq(1001 << 30, 0, BinarySI), "1001Gi", "1025024Mi"),
        (dq(1 << 40, 0, BinarySI), "1Ti", "1024Gi"),
        (dq(5, 0, BinarySI), "5", "5000m"),
        (dq(500, -3, BinarySI), "500m", "0.5"),
        (dq(1, 9, DecimalSI), "1G", "1000M"),
        (dq(1000, 6, DecimalSI), "1G", "0.001T"),
        (dq(1000000, 3, DecimalSI), "1G", ""),
        (dq(1000000000, 0, DecimalSI), "1G", ""),
        (dq(1, -3, DecimalSI), "1m", "1000u"),
        (dq(80, -3, DecimalSI), "80m", ""),
        (dq(1080, -3, DecimalSI), "1080m", "1.08"),
        (dq(108, -2, DecimalSI), "1080m", "1080000000n"),
        (dq(10800, -4, DecimalSI), "1080m", ""),
        (dq(300, 6, DecimalSI), "300M", ""),
        (dq(1, 12, DecimalSI), "1T", ""),
        (dq(1234567, 6, DecimalSI), "1234567M", ""),
        (dq(1234567, -3, BinarySI), "1234567m", ""),
        (dq(3, 3, DecimalSI), "3k", ""),
        (dq(1025, 0, BinarySI), "1025", ""),
        (dq(0, 0, DecimalSI), "0", ""),
        (dq(0, 0, BinarySI), "0", ""),
        (dq(1, 9, DecimalExponent), "1e9", ".001e12"),
        (dq(1, -3, DecimalExponent), "1e-3", "0.001e0"),
        (dq(1, -9, DecimalExponent), "1e-9", "1000e-12"),
        (dq(80, -3, DecimalExponent), "80e-3", ""),
        (dq(300, 6, DecimalExponent), "300e6", ""),
        (dq(1, 12, DecimalExponent), "1e12", ""),
        (dq(1, 3, DecimalExponent), "1e3", ""),
        (dq(3, 3, DecimalExponent), "3e3", ""),
        (dq(3, 3, DecimalSI), "3k", ""),
        (dq(0, 0, DecimalExponent), "0", "00"),
        (dq(1, -9, DecimalSI), "1n", ""),
        (dq(80, -9, DecimalSI), "80n", ""),
        (dq(1080, -9, DecimalSI), "1080n", ""),
        (dq(108, -8, DecimalSI), "1080n", ""),
        (dq(10800, -10, DecimalSI), "1080n", ""),
        (dq(1, -6, DecimalSI), "1u", ""),
        (dq(80, -6, DecimalSI), "80u", ""),
        (dq(1080, -6, DecimalSI), "1080u", ""),
    ];
    for (quantity, expected, alternate) in table {
        assert_eq!(quantity.to_string(), expected, "{quantity:?}");
        assert_eq!(q(expected).to_string(), expected);
        if !alternate.is_empty() {
            assert_eq!(q(alternate).to_string(), expected, "alternate {alternate}");
        }
        if !quantity.is_zero() {
            assert_eq!((-quantity).to_string(), format!("-{expected}"));
        }
    }
}

#[test]
fn parse_then_emit_matches_apimachinery() {
    for (input, expected) in [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        // The brief's examples of canonical form.
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("1000m", "1"),
        ("0.5", "500m"),
        ("100M", "100M"),
        ("1e3", "1e3"),
        ("1.5", "1500m"),
        ("9Ei", "9223372036854775807"),
    ] {
        assert_eq!(q(input).to_string(), expected, "{input}");
        assert_eq!(
            q(&format!("-{input}")).to_string(),
            format!("-{expected}"),
            "-{input}"
        );
    }
}

#[test]
fn large_values_reserialize_like_apimachinery() {
    for (input, canonical) in [
        ("-999999999999999999", ""),
        ("999999999999999999.0", "999999999999999999"),
        ("999999999999999999.1", "999999999999999999100m"),
        ("9999999999999999999", ""),
        ("-1E", ""),
        ("1000000000000000000", "1E"),
        ("1.0E", "1E"),
        ("9999999999999999999000m", "9999999999999999999"),
        ("1.0000000000000000001E", "1000000000000000000100m"),
        ("1.000000000000000001E", "1000000000000000001"),
        ("10E", ""),
        ("10000000000000000000000m", "10E"),
        ("-10.0000000000000000001E", "-10000000000000000000100m"),
        ("10.000000000000000001E", "10000000000000000001"),
        ("-9223372036854775809.1", "-9223372036854775809100m"),
        ("9223372036854775808", ""),
        ("9223372036854775807000m", "9223372036854775807"),
    ] {
        let expected = if canonical.is_empty() {
            input
        } else {
            canonical
        };
        assert_eq!(q(input).to_string(), expected, "{input}");
    }
}

#[test]
fn new_quantities_print_like_apimachinery() {
    for (millis, format, expected) in [
        (1, DecimalSI, "1m"),
        (1000, DecimalSI, "1"),
        (1234000, DecimalSI, "1234"),
        (1024, BinarySI, "1024m"),
        (1000000, DecimalExponent, "1e3"),
        (1024 * 1024, BinarySI, "1048576m"),
    ] {
        assert_eq!(Quantity::from_milli(millis, format).to_string(), expected);
        assert_eq!(q(expected).milli_value(), millis);
    }
    for (value, format, expected) in [
        (1, DecimalSI, "1"),
        (1000, DecimalSI, "1k"),
        (1234000, DecimalSI, "1234k"),
        (1024, BinarySI, "1Ki"),
        (1000000, DecimalExponent, "1e6"),
        (1024 * 1024, BinarySI, "1Mi"),
    ] {
        assert_eq!(Quantity::new(value, format).to_string(), expected);
        assert_eq!(q(expected).value(), value);
    }
    for (nanos, expected) in [
        (1, "1n"),
        (1000, "1u"),
        (1_000_000, "1m"),
        (1_000_000_000, "1"),
        (0, "0"),
    ] {
        assert_eq!(Quantity::from_nanos(nanos, DecimalSI).to_string(), expected);
    }
}

#[test]
fn value_and_milli_value_round_away_from_zero() {
    assert_eq!(q("1n").milli_value(), 1);
    assert_eq!(q("1n").value(), 1);
    assert_eq!(q("-1n").milli_value(), -1);
    assert_eq!(q("9.01").value(), 10);
    assert_eq!(q("-9.01").value(), -10);
    assert_eq!(q("1500m").value(), 2);
    assert_eq!(q("1.5").milli_value(), 1500);
    assert_eq!(q("100Gi").value(), 107374182400);
    assert_eq!(q("1e18").value(), 1_000_000_000_000_000_000);
    assert_eq!(q("1e28").value(), i64::MAX, "saturates");
    assert_eq!(q("2.0001m").round_up_to_milli(), q("3m"));
}

#[test]
fn add_sub_mul_follow_apimachinery() {
    // TestAdd / TestSub: values, and the left operand's format unless it is zero.
    let add = [
        (
            dq(10, 0, DecimalSI),
            dq(1, 1, DecimalSI),
            dq(20, 0, DecimalSI),
        ),
        (
            dq(10, 0, DecimalSI),
            dq(1, 0, BinarySI),
            dq(11, 0, DecimalSI),
        ),
        (
            dq(10, 0, BinarySI),
            dq(1, 0, DecimalSI),
            dq(11, 0, BinarySI),
        ),
        (Quantity::ZERO, dq(50, 0, DecimalSI), dq(50, 0, DecimalSI)),
        (dq(50, 0, DecimalSI), Quantity::ZERO, dq(50, 0, DecimalSI)),
    ];
    for (a, b, expected) in add {
        let sum = a + b;
        assert_eq!(sum, expected);
        assert_eq!(sum.format(), expected.format());
    }
    let sub = [
        (
            dq(10, 0, DecimalSI),
            dq(1, 1, DecimalSI),
            dq(0, 0, DecimalSI),
        ),
        (
            dq(10, 0, DecimalSI),
            dq(1, 0, BinarySI),
            dq(9, 0, DecimalSI),
        ),
        (dq(10, 0, BinarySI), dq(1, 0, DecimalSI), dq(9, 0, BinarySI)),
        (Quantity::ZERO, dq(50, 0, DecimalSI), dq(-50, 0, DecimalSI)),
    ];
    for (a, b, expected) in sub {
        let difference = a - b;
        assert_eq!(difference, expected);
        assert_eq!(difference.format(), expected.format());
    }
    // Adding or subtracting zero preserves the suffix, in either order.
    for text in ["100m", "1Gi"] {
        assert_eq!((q(text) + Quantity::ZERO).to_string(), text);
        assert_eq!((Quantity::ZERO + q(text)).to_string(), text);
        assert_eq!((q(text) - Quantity::ZERO).to_string(), text);
        assert_eq!((Quantity::ZERO - q(text)).to_string(), format!("-{text}"));
    }
    assert_eq!(
        dq(10, 0, DecimalSI).saturating_mul(-10),
        dq(-100, 0, DecimalSI)
    );
    assert_eq!(
        dq(MOST_POSITIVE, 0, DecimalSI).saturating_mul(2),
        dq(2 * MOST_POSITIVE, 0, DecimalSI)
    );
    assert_eq!(
        dq(-50, 0, DecimalSI).saturating_mul(-50),
        dq(2500, 0, DecimalSI)
    );
    assert_eq!(q("1Gi").saturating_mul(3).to_string(), "3Gi");
    assert_eq!(q("1").sub_or_zero(q("2")), Quantity::ZERO);
    assert_eq!(q("3").sub_or_zero(q("2")), q("1"));
    assert_eq!(
        Quantity::from_nanos(i128::MAX, DecimalSI) + q("1"),
        Quantity::from_nanos(i128::MAX, DecimalSI)
    );
    assert_eq!(
        Quantity::from_nanos(i128::MAX, DecimalSI).checked_add(q("1n")),
        None
    );
}

#[test]
fn comparison_ignores_format() {
    assert_eq!(q("1Gi"), q("1073741824"));
    assert_eq!(q("1000m"), q("1"));
    assert!(q("100m") > q("50m"));
    assert!(q("10000T") > q("100Gi"));
    assert!(q("-1") < Quantity::ZERO);
    assert_eq!(q("1Gi").max(q("1G")), q("1Gi"));
}

#[test]
fn percentage_matches_go_float_semantics() {
    // ceil(20Gi / 100 * 10) = ceil(2147483648.0000002?) computed in f64 like upstream.
    let expected = (21474836480f64 / 100.0 * 10.0).ceil();
    let ten_percent = q("20Gi").percentage(10.0);
    assert_eq!(ten_percent.nanos(), expected as i128 * 1_000_000_000);
    // Go prints 2.147483648e+09, which parses as a decimal-exponent quantity.
    assert_eq!(ten_percent.format(), DecimalExponent);
    assert_eq!(ten_percent.to_string(), "2147483648");
    assert_eq!(q("100").percentage(5.0).to_string(), "5");
    assert_eq!(q("100").percentage(5.0).format(), DecimalSI);
    assert_eq!(q("30G").percentage(10.0).to_string(), "3e9");
    assert_eq!(
        quantity_from_go_float(1e6).map(|q| q.format()),
        Some(DecimalExponent)
    );
    assert_eq!(
        quantity_from_go_float(999999.0).map(|q| q.format()),
        Some(DecimalSI)
    );
    assert_eq!(quantity_from_go_float(f64::NAN), None);
    // 2^60 prints as 1.152921504606847e+18 in Go: the shortest digits, not the exact value.
    assert_eq!(
        quantity_from_go_float(2f64.powi(60)).map(|q| q.value()),
        Some(1152921504606847000)
    );
}

#[test]
fn serde_uses_kubernetes_strings() {
    let quantity: Quantity = serde_json::from_str("\"1.5Gi\"").expect("string");
    assert_eq!(
        serde_json::to_string(&quantity).expect("serialize"),
        "\"1536Mi\""
    );
    let number: Quantity = serde_json::from_str("2").expect("integer");
    assert_eq!(number, q("2"));
    let fraction: Quantity = serde_json::from_str("0.5").expect("float");
    assert_eq!(fraction.to_string(), "500m");
    let padded: Quantity = serde_json::from_str("\" 100m \"").expect("whitespace is trimmed");
    assert_eq!(padded, q("100m"));
    let error = serde_json::from_str::<Quantity>("\"abc\"").expect_err("invalid");
    assert!(error.to_string().contains("\"abc\""), "{error}");
}

#[test]
fn resources_keep_names_sorted_and_treat_absent_as_zero() {
    let resources: Resources = [
        ("pods", q("110")),
        ("nvidia.com/gpu", q("1")),
        ("cpu", q("2")),
        ("memory", q("4Gi")),
        ("vpc.amazonaws.com/efa", q("1")),
        ("ephemeral-storage", q("20Gi")),
    ]
    .into_iter()
    .collect();
    let names: Vec<&str> = resources.iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "ephemeral-storage",
            "memory",
            "nvidia.com/gpu",
            "pods",
            "vpc.amazonaws.com/efa"
        ]
    );
    assert_eq!(resources.cpu(), q("2"));
    assert_eq!(resources.get("nvidia.com/gpu"), Some(q("1")));
    assert_eq!(resources.get_or_zero("amd.com/gpu"), Quantity::ZERO);
    assert_eq!(resources.len(), 6);
    assert_eq!(
        serde_json::to_string(&resources).expect("serialize"),
        r#"{"cpu":"2","ephemeral-storage":"20Gi","memory":"4Gi","nvidia.com/gpu":"1","pods":"110","vpc.amazonaws.com/efa":"1"}"#
    );
    let back: Resources =
        serde_json::from_str(&serde_json::to_string(&resources).expect("json")).expect("parse");
    assert_eq!(back, resources);
}

#[test]
fn resources_arithmetic_follows_karpenter_helpers() {
    let capacity = Resources::new()
        .with("cpu", q("4"))
        .with("memory", q("16Gi"))
        .with("nvidia.com/gpu", q("1"));
    let overhead = Resources::new()
        .with("cpu", q("80m"))
        .with("memory", q("1Gi"))
        .with("hugepages-2Mi", q("1"));
    // Subtract only touches the left-hand names.
    let allocatable = capacity.subtract(&overhead);
    assert_eq!(
        allocatable.to_string(),
        "{cpu: 3920m, memory: 15Gi, nvidia.com/gpu: 1}"
    );
    // Merge is the union with sums.
    let merged = capacity.merged(&overhead);
    assert_eq!(merged.get("hugepages-2Mi"), Some(q("1")));
    assert_eq!(merged.cpu(), q("4080m"));
    // SubtractFrom adds missing names as negatives.
    let mut left = capacity.clone();
    left.sub_assign(&overhead);
    assert_eq!(left.get("hugepages-2Mi"), Some(q("-1")));
    // Max is per name over the union.
    let max = capacity.max(&Resources::new().with("cpu", q("8")).with("pods", q("1")));
    assert_eq!(
        max.to_string(),
        "{cpu: 8, memory: 16Gi, nvidia.com/gpu: 1, pods: 1}"
    );
    // Min is per name over the union, a missing name counting as zero.
    let min = capacity.min(&Resources::new().with("cpu", q("2")).with("pods", q("1")));
    assert_eq!(
        min.to_string(),
        "{cpu: 2, memory: 0, nvidia.com/gpu: 0, pods: 0}"
    );
    // Fits: every request at most the total (absent = 0); a negative total never fits.
    let request = Resources::new()
        .with("cpu", q("3920m"))
        .with("memory", q("1Gi"));
    assert!(request.fits(&allocatable));
    assert!(!Resources::new().with("cpu", q("3921m")).fits(&allocatable));
    assert_eq!(
        Resources::new()
            .with("amd.com/gpu", q("1"))
            .first_unfit(&allocatable),
        Some("amd.com/gpu")
    );
    assert!(
        Resources::new()
            .with("amd.com/gpu", q("0"))
            .fits(&allocatable)
    );
    let negative = allocatable.clone().with("pods", q("-1"));
    assert_eq!(Resources::new().first_unfit(&negative), Some("pods"));
    assert!(Resources::new().with("cpu", q("0")).is_zero());
    assert_eq!(capacity.clone().remove("nvidia.com/gpu"), Some(q("1")));
}

fn arbitrary_quantity() -> impl Strategy<Value = Quantity> {
    let format = prop_oneof![Just(DecimalSI), Just(BinarySI), Just(DecimalExponent)];
    let nanos = prop_oneof![
        any::<i64>().prop_map(|n| n as i128),
        (any::<i64>(), 0u32..20).prop_map(|(n, shift)| n as i128 * 10i128.pow(shift)),
        (any::<i32>(), 0u32..7)
            .prop_map(|(n, power)| n as i128 * (1i128 << (10 * power)) * 1_000_000_000),
    ];
    // Binary text parses capped at 2^63-1 units (as upstream), so larger binary values are
    // generated in decimal form.
    let binary_cap = i64::MAX as i128 * 1_000_000_000;
    (nanos, format).prop_map(move |(nanos, format)| {
        let format = if format == BinarySI && nanos.abs() > binary_cap {
            DecimalSI
        } else {
            format
        };
        Quantity::from_nanos(nanos, format)
    })
}

proptest! {
    #[test]
    fn printing_then_parsing_gives_back_the_value(quantity in arbitrary_quantity()) {
        let printed = quantity.to_string();
        let parsed: Quantity = printed.parse().map_err(|e| TestCaseError::fail(format!("{printed}: {e}")))?;
        prop_assert_eq!(parsed, quantity, "{}", printed);
        // Reprinting is stable once the text has been parsed (a binary value that is not a
        // multiple of 1024 prints without suffix and so re-parses as decimal, as upstream).
        let reparsed: Quantity = parsed.to_string().parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(reparsed.to_string(), parsed.to_string());
    }

    #[test]
    fn addition_and_subtraction_cancel(a in arbitrary_quantity(), b in arbitrary_quantity()) {
        prop_assert_eq!(a + b - b, a);
    }
}
