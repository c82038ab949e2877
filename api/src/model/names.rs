//! Names from the library's registries (strategies, orders, plan statuses, rewrites, conv
//! algorithm modes, spill strategies) and arena budgets, as OpenAPI schemas that list every
//! name with what it means.

use super::rules;
use memplan::conv_algo::ConvAlgoMode;
use memplan::{OrderMode, PlanStatus, Rewrite, Strategy};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::openapi::schema::{
    ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

fn name_schema(
    names: impl IntoIterator<Item = (&'static str, &'static str)>,
    what: &str,
    example: &str,
) -> RefOr<Schema> {
    let names: Vec<_> = names.into_iter().collect();
    let about: Vec<String> = names.iter().map(|(n, a)| format!("`{n}`: {a}")).collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names.iter().map(|(n, _)| *n)))
        .description(Some(format!("{what}. {}.", about.join("; "))))
        .examples([json!(example)])
        .into()
}

/// A strategy name (`memplan::Strategy`): which solvers run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StrategyName(pub String);

impl PartialSchema for StrategyName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            Strategy::ALL.map(|s| (s.name(), s.about())),
            "Which solvers run (default `auto`)",
            "heuristic",
        )
    }
}
impl ToSchema for StrategyName {}

/// An order mode name (`memplan::OrderMode`): which op orders are considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderName(pub String);

impl PartialSchema for OrderName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            OrderMode::ALL.map(|m| (m.name(), m.about())),
            "Which op orders are considered (default `auto`)",
            "auto",
        )
    }
}
impl ToSchema for OrderName {}

/// What a plan status means (one line, for the documentation).
fn plan_status_about(s: PlanStatus) -> &'static str {
    match s {
        PlanStatus::Optimal => "the peak meets a proven lower bound",
        PlanStatus::Feasible => {
            "the solvers used their whole work budget (`effort`); the gap to the proven bound \
             is in `gap`"
        }
        PlanStatus::TimeLimit => {
            "the wall-clock cap (`time_limit_s`) stopped a stage before its work budget was spent"
        }
        PlanStatus::Cancelled => "the run was cancelled; the best plan found so far",
        PlanStatus::HeuristicOnly => "only the heuristics ran (strategy `heuristic`)",
    }
}

/// A plan status name (`memplan::PlanStatus`): the one status vocabulary of plans, the same
/// in plan stats, job progress, the CLI and the zoo report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlanStatusName(pub String);

impl PartialSchema for PlanStatusName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            PlanStatus::ALL.map(|s| (s.as_str(), plan_status_about(s))),
            "How good a plan is and why planning stopped",
            "optimal",
        )
    }
}
impl ToSchema for PlanStatusName {}

/// A graph rewrite name (`memplan::Rewrite`), or `all` / `none`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RewriteName(pub String);

/// What a rewrite does (one line, for the documentation).
fn rewrite_about(r: Rewrite) -> &'static str {
    match r {
        Rewrite::Tile => "spatial tiling into H-strips (strips per `tile`)",
        Rewrite::Fuse => {
            "operator fusion (conv → batch_norm → activation, element-wise chains, pad folding)"
        }
        Rewrite::ConvAlgos => "conv algorithm choice (per `conv_algos`)",
    }
}

impl PartialSchema for RewriteName {
    fn schema() -> RefOr<Schema> {
        let names = Rewrite::ALL
            .map(|r| (r.name(), rewrite_about(r)))
            .into_iter()
            .chain([("all", "every rewrite"), ("none", "no rewrite")]);
        name_schema(
            names,
            "A graph rewrite run before planning (default none: the graph is planned as given)",
            "fuse",
        )
    }
}
impl ToSchema for RewriteName {}

/// A conv algorithm mode name (`memplan::conv_algo::ConvAlgoMode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConvAlgoName(pub String);

/// What a conv algorithm mode does (one line, for the documentation).
fn conv_algo_about(m: ConvAlgoMode) -> &'static str {
    match m {
        ConvAlgoMode::Auto => {
            "the fastest algorithm per conv that keeps the planned peak at the min-memory plan's"
        }
        ConvAlgoMode::Fastest => "the fastest algorithm per conv",
        ConvAlgoMode::MinMemory => "the least workspace per conv",
        ConvAlgoMode::Off => {
            "no choice: takes the `conv-algos` rewrite out (as the CLI's `--conv-algos off`)"
        }
    }
}

impl PartialSchema for ConvAlgoName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            ConvAlgoMode::ALL.map(|m| (m.name(), conv_algo_about(m))),
            "How the `conv-algos` rewrite picks each conv's algorithm (default `auto`); giving \
             a mode adds the rewrite, `off` takes it out, as the CLI's `--conv-algos` does",
            "auto",
        )
    }
}
impl ToSchema for ConvAlgoName {}

/// A spill strategy name (`memplan::budget`): how a plan is brought under a budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SpillStrategyName(pub String);

impl PartialSchema for SpillStrategyName {
    fn schema() -> RefOr<Schema> {
        let registry = memplan::budget::registry();
        let names = std::iter::once((memplan::budget::BEST, memplan::budget::BEST_ABOUT))
            .chain(registry.iter().map(|s| (s.name(), s.about())))
            .chain(std::iter::once((
                memplan::budget::JOINT,
                memplan::budget::JOINT_ABOUT,
            )));
        name_schema(
            names,
            "How a plan is brought under `budget` (default `best`; other values need a budget)",
            "best",
        )
    }
}
impl ToSchema for SpillStrategyName {}

/// An arena budget: bytes (an integer, or a string of digits) or a percentage of the
/// unconstrained plan's peak (`"60%"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetValue {
    /// Bytes.
    Bytes(u64),
    /// `BYTES` or `PCT%`.
    Text(String),
}

impl PartialSchema for BudgetValue {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(u64::MAX as usize))
                    .format(Some(SchemaFormat::Custom("uint64".into())))
                    .description(Some("Bytes")),
            )
            .item(budget_text_schema())
            .description(Some(
                "Arena budget the plan must fit, by spilling to host memory and recomputing: \
                 bytes, or a percentage in (0, 100] of the unconstrained plan's peak \
                 (`\"60%\"`). A budget below what any plan can reach is refused with 422 \
                 naming the smallest peak reached.",
            ))
            .examples([json!("60%"), json!(1_073_741_824u64)])
            .into()
    }
}
impl ToSchema for BudgetValue {}

fn budget_text_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(rules::BUDGET_TEXT_PATTERN))
        .description(Some(
            "Bytes as digits (1 to 19, no leading zero), or a percentage in (0, 100] of the \
             unconstrained plan's peak (`60%`, `12.5%`)",
        ))
        .examples([json!("60%")])
}

/// Every name `rewrite` takes: the library's rewrites, `all` and `none`.
fn rewrite_names() -> Vec<&'static str> {
    Rewrite::ALL
        .map(Rewrite::name)
        .into_iter()
        .chain(["all", "none"])
        .collect()
}

fn rewrite_list_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(rules::rewrite_list_pattern(&rewrite_names())))
        .description(Some(
            "Comma-separated rewrite names (spaces around them allowed; empty: none)",
        ))
        .examples([json!("fuse,conv-algos")])
}

/// The body's `rewrite`: a list of names, a comma-separated string, or null.
pub(super) fn rewrite_option() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ArrayBuilder::new().items(RewriteName::schema()))
        .item(rewrite_list_schema())
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "Graph rewrites to run before planning, in the pipeline's order (tile, fuse, \
             conv-algos): a list of names, or one comma-separated string; `all` for every \
             rewrite. Default none: the graph is planned as given. When a rewrite changed the \
             graph, the plan carries the graph it refers to (`rewritten_graph`).",
        ))
        .examples([json!(["fuse", "conv-algos"])])
        .into()
}

/// The query parameter `rewrite`.
pub(super) fn rewrite_list() -> RefOr<Schema> {
    rewrite_list_schema().into()
}

fn tile_text_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(rules::TILE_PATTERN))
        .examples([json!("auto")])
}

/// The body's `tile`: a string, a strip count, or null.
pub(super) fn tile_option() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(tile_text_schema())
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(2))
                .maximum(Some(rules::MAX_TILE_STRIPS as usize)),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "Spatial tiling: `auto`, or a strip count from 2 to 999999999 as a string or an \
             integer (default `auto`); giving it adds the `tile` rewrite, `off` takes it out, as \
             the CLI's `--tile` does.",
        ))
        .examples([json!("auto"), json!(4)])
        .into()
}

/// The query parameter `tile`.
pub(super) fn tile_text() -> RefOr<Schema> {
    tile_text_schema().into()
}

fn tier_alignment_schema(nullable: bool) -> ObjectBuilder {
    let ty = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::Type(Type::String)
    };
    ObjectBuilder::new()
        .schema_type(ty)
        .pattern(Some(rules::tier_alignment_pattern()))
        .description(Some(
            "With tiers: alignment floors in bytes, powers of two: \
             `persistent=256,activations=256,temporaries=512` (each tier at most once) or one \
             number for all.",
        ))
        .examples([
            json!("persistent=256,activations=256,temporaries=512"),
            json!("512"),
        ])
}

/// The body's `tier_alignment`.
pub(super) fn tier_alignment_option() -> RefOr<Schema> {
    tier_alignment_schema(true).into()
}

/// The query parameter `tier_alignment`.
pub(super) fn tier_alignment_text() -> RefOr<Schema> {
    tier_alignment_schema(false).into()
}

/// The query parameter `budget`.
pub(super) fn budget_text() -> RefOr<Schema> {
    budget_text_schema().into()
}

/// The boolean words a query parameter takes (the empty value, a bare name, is true).
pub const QUERY_BOOLEANS: [&str; 9] = ["true", "false", "1", "0", "yes", "no", "on", "off", ""];

/// A boolean query parameter.
pub(super) fn query_bool() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(QUERY_BOOLEANS))
        .description(Some(
            "A boolean: `true`, `1`, `yes`, `on` or empty (the bare name); `false`, `0`, `no` \
             or `off`",
        ))
        .examples([json!("true")])
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_plan_status_is_documented_by_its_json_name() {
        let names: Vec<Value> = PlanStatus::ALL
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        match PlanStatusName::schema() {
            RefOr::T(Schema::Object(o)) => assert_eq!(o.enum_values, Some(names)),
            _ => panic!("not an object schema"),
        }
    }
}
