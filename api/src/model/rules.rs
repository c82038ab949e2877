//! Schemas of value rules that derive attributes cannot state: power-of-two alignments (an
//! `enum` of every power of two of u64), constant format names, any JSON value, and the
//! patterns of the option strings. The server checks exactly these rules (422 otherwise).

use serde_json::{json, Value};
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;

/// Every power of two a u64 holds: 1, 2, 4, ..., 2^63.
pub fn powers_of_two() -> impl Iterator<Item = u64> {
    (0..64).map(|k| 1u64 << k)
}

/// An alignment: a power of two (listed, since JSON Schema has no power-of-two keyword),
/// or null when `nullable`. `zero_is_default`: 0 also reads as the default.
fn alignment(nullable: bool, zero_is_default: bool, description: &str) -> RefOr<Schema> {
    let mut values: Vec<Value> = Vec::new();
    if zero_is_default {
        values.push(json!(0));
    }
    values.extend(powers_of_two().map(Value::from));
    let ty = if nullable {
        values.push(Value::Null);
        SchemaType::from_iter([Type::Integer, Type::Null])
    } else {
        SchemaType::Type(Type::Integer)
    };
    ObjectBuilder::new()
        .schema_type(ty)
        .enum_values(Some(values))
        .description(Some(description))
        .examples([json!(256)])
        .into()
}

/// A tensor's or buffer's alignment: a power of two, or null (absent: the default).
pub fn alignment_or_null() -> RefOr<Schema> {
    alignment(
        true,
        false,
        "Offset alignment in bytes: a power of two (1, 2, 4, ..., 2^63); null or absent for \
         the default.",
    )
}

/// The graph's default alignment: a power of two, or 0 / null (absent) for 256.
pub fn graph_alignment() -> RefOr<Schema> {
    alignment(
        true,
        true,
        "Default tensor alignment in bytes: a power of two (1, 2, 4, ..., 2^63); 0, null or \
         absent for 256.",
    )
}

/// The alignment of a placement request: a power of two (absent: 1).
pub fn place_alignment() -> RefOr<Schema> {
    alignment(
        true,
        false,
        "Alignment of buffers that give none: a power of two (1, 2, 4, ..., 2^63); null or \
         absent for 1.",
    )
}

/// The query parameter `alignment` of a placement: a power of two (absent: 1).
pub fn place_alignment_param() -> RefOr<Schema> {
    alignment(
        false,
        false,
        "Alignment of buffers that give none: a power of two (1, 2, 4, ..., 2^63); absent for 1.",
    )
}

/// A string that must be exactly `value`.
pub fn constant(value: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .description(Some(description))
        .examples([json!(value)])
        .into()
}

/// Any JSON value (informative fields the server does not read).
pub fn any_value(description: &str, example: Value) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(description))
        .examples([example])
        .into()
}

/// The decimal powers of two as a regular expression alternation (longest first).
fn pow2_decimal() -> String {
    let mut all: Vec<String> = powers_of_two().map(|p| p.to_string()).collect();
    all.reverse();
    format!("(?:{})", all.join("|"))
}

/// The pattern of `tier_alignment`: one power of two for every tier, or
/// `tier=N` items (tiers `persistent`, `activations`, `temporaries`), comma-separated.
pub fn tier_alignment_pattern() -> String {
    let n = pow2_decimal();
    let item = format!("(?:persistent|activations|temporaries)={n}");
    format!("^(?:{n}|{item}(?:,{item}){{0,2}})$")
}

/// The pattern of `tile`: `auto`, `off`, or a strip count from 2 to 999999999.
pub const TILE_PATTERN: &str = "^(?:auto|off|[2-9]|[1-9][0-9]{1,8})$";

/// Largest strip count `tile` takes.
pub const MAX_TILE_STRIPS: u64 = 999_999_999;

/// The pattern of a budget given as text: bytes (1 to 19 digits, no leading zero) or a
/// percentage in (0, 100] (`60%`, `12.5%`, `100%`).
pub const BUDGET_TEXT_PATTERN: &str =
    r"^(?:[1-9][0-9]{0,18}|(?:[1-9][0-9]?(?:\.[0-9]+)?|0?\.[0-9]*[1-9][0-9]*|100(?:\.0+)?)%)$";

/// The pattern of a minimalloc CSV body as the service reads it: the header
/// `id,lower,upper,size` (or with `,alignment`), then one row per buffer: an id without commas
/// or line breaks, integers (lower and upper up to 19 digits, size > 0, alignment a power of
/// two); lines end with `\n`.
pub fn buffer_csv_pattern() -> String {
    let n = "(?:0|[1-9][0-9]{0,18})";
    let p = "[1-9][0-9]{0,18}";
    let id = "[^,\r\n]*";
    let a = pow2_decimal();
    format!(
        "^(?:id,lower,upper,size(?:\n{id},{n},{n},{p})*|id,lower,upper,size,alignment(?:\n{id},{n},{n},{p},{a})*)\n?$"
    )
}

/// The pattern of a comma-separated rewrite list, spaces allowed around the names (empty:
/// no rewrite).
pub fn rewrite_list_pattern(names: &[&str]) -> String {
    let one = format!(" *(?:{}) *", names.join("|"));
    format!("^(?:{one}(?:,{one})*)?$")
}

/// Whether `s` matches [`rewrite_list_pattern`] of `names`.
pub fn rewrite_list_ok(s: &str, names: &[&str]) -> bool {
    s.is_empty()
        || s.split(',')
            .all(|item| names.contains(&item.trim_matches(' ')))
}

/// Whether `s` matches [`TILE_PATTERN`].
pub fn tile_ok(s: &str) -> bool {
    s == "auto" || s == "off" || strip_count(s).is_some()
}

/// A strip count as [`TILE_PATTERN`] writes it (2 to [`MAX_TILE_STRIPS`], no leading zero).
fn strip_count(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 9 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok().filter(|&n| n >= 2)
}

/// Whether `s` is a decimal power of two as [`pow2_decimal`] writes it.
fn pow2_text_ok(s: &str) -> bool {
    powers_of_two().any(|p| p.to_string() == s)
}

/// Whether `s` matches [`tier_alignment_pattern`].
pub fn tier_alignment_ok(s: &str) -> bool {
    if pow2_text_ok(s) {
        return true;
    }
    let items: Vec<&str> = s.split(',').collect();
    items.len() <= 3
        && items.iter().all(|item| {
            item.split_once('=').is_some_and(|(tier, n)| {
                ["persistent", "activations", "temporaries"].contains(&tier) && pow2_text_ok(n)
            })
        })
}

/// Whether `s` matches [`BUDGET_TEXT_PATTERN`].
pub fn budget_text_ok(s: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let Some(p) = s.strip_suffix('%') else {
        return digits(s) && s.len() <= 19 && !s.starts_with('0');
    };
    if let Some(zeros) = p.strip_prefix("100") {
        return zeros.is_empty()
            || zeros
                .strip_prefix('.')
                .is_some_and(|z| !z.is_empty() && z.bytes().all(|b| b == b'0'));
    }
    let (whole, frac) = match p.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (p, None),
    };
    match frac {
        Some(f) if whole.is_empty() || whole == "0" => digits(f) && f.bytes().any(|b| b != b'0'),
        _ => {
            digits(whole) && whole.len() <= 2 && !whole.starts_with('0') && frac.is_none_or(digits)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_rules_accept_what_their_patterns_describe() {
        for ok in [
            "1",
            "18446744073709551",
            "60%",
            "12.5%",
            "100%",
            "100.00%",
            "0.5%",
            ".5%",
            "99.99%",
        ] {
            assert!(budget_text_ok(ok), "{ok}");
        }
        for bad in [
            "0",
            "007",
            "0%",
            "0.0%",
            "100.5%",
            "101%",
            "60 %",
            "5.%",
            "%",
            "",
            "1e3",
            "12345678901234567890",
        ] {
            assert!(!budget_text_ok(bad), "{bad}");
        }
        for ok in ["auto", "off", "2", "10", "999999999"] {
            assert!(tile_ok(ok), "{ok}");
        }
        for bad in ["1", "0", "02", "+4", "1000000000", "", "Auto"] {
            assert!(!tile_ok(bad), "{bad}");
        }
        for ok in [
            "512",
            "1",
            "persistent=256,activations=256,temporaries=512",
            "temporaries=4096",
        ] {
            assert!(tier_alignment_ok(ok), "{ok}");
        }
        for bad in [
            "0",
            "3",
            "0512",
            "persistent=3",
            "weights=256",
            "",
            "a=1,b=2,c=4,d=8",
        ] {
            assert!(!tier_alignment_ok(bad), "{bad}");
        }
        let names = ["tile", "fuse", "conv-algos", "all", "none"];
        for ok in ["", "fuse", "fuse,tile", " fuse , conv-algos ", "all"] {
            assert!(rewrite_list_ok(ok, &names), "{ok}");
        }
        for bad in ["fusion", "fuse,,tile", ",", "fuse\ttile"] {
            assert!(!rewrite_list_ok(bad, &names), "{bad}");
        }
    }
}
