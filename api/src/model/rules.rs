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

/// The pattern of `tier_alignment` (the library's grammar,
/// [`memplan::tiers::tier_alignment_pattern`]).
pub fn tier_alignment_pattern() -> String {
    memplan::tiers::tier_alignment_pattern()
}

/// The pattern of `tile` (the library's grammar, [`memplan::passes::tile::TILE_PATTERN`]).
pub const TILE_PATTERN: &str = memplan::passes::tile::TILE_PATTERN;

/// Largest strip count `tile` takes.
pub const MAX_TILE_STRIPS: u64 = memplan::passes::tile::MAX_TILE_STRIPS as u64;

/// The pattern of a budget given as text (the library's grammar,
/// [`memplan::budget::BUDGET_TEXT_PATTERN`]).
pub const BUDGET_TEXT_PATTERN: &str = memplan::budget::BUDGET_TEXT_PATTERN;

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

#[cfg(test)]
mod tests {

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
            assert!(memplan::budget::BudgetSpec::parse(ok).is_ok(), "{ok}");
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
            assert!(memplan::budget::BudgetSpec::parse(bad).is_err(), "{bad}");
        }
        for ok in ["auto", "off", "2", "10", "999999999"] {
            assert!(memplan::passes::tile::TileSpec::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["1", "0", "02", "+4", "1000000000", "", "Auto"] {
            assert!(
                memplan::passes::tile::TileSpec::parse(bad).is_err(),
                "{bad}"
            );
        }
        for ok in [
            "512",
            "1",
            "persistent=256,activations=256,temporaries=512",
            "temporaries=4096",
        ] {
            assert!(memplan::tiers::TierAlignment::parse(ok).is_ok(), "{ok}");
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
            assert!(memplan::tiers::TierAlignment::parse(bad).is_err(), "{bad}");
        }
        for ok in ["", "fuse", "fuse,tile", " fuse , conv-algos ", "all"] {
            assert!(memplan::pipeline::Rewrite::parse_list(ok).is_ok(), "{ok}");
        }
        for bad in ["fusion", "fuse,,tile", ",", "fuse\ttile"] {
            assert!(
                memplan::pipeline::Rewrite::parse_list(bad).is_err(),
                "{bad}"
            );
        }
    }
}
