//! The planning options: [`PlanOptionsBody`] (the body's `options`), [`PlanQuery`] (the same
//! as query parameters), [`ResolvedOptions`] (what a plan or job ran with) and
//! [`PlanRequest`], the body of `POST /v1/plan` and `POST /v1/jobs`.

use super::{
    example_graph, BudgetValue, ConvAlgoName, GraphDoc, OrderName, RewriteName, SpillStrategyName,
    StrategyName,
};
use memplan::{PipelineOptions, Rewrite};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

fn example_plan_request() -> Value {
    json!({"graph": example_graph(), "options": {"strategy": "heuristic", "order": "auto", "time_limit_s": 1.0}})
}

/// Device figures of the cost model (`memplan::cost::DeviceProfile`); every field is optional
/// (missing ones keep the H200's; null is refused), unknown fields are refused. Rates are at least 1 per
/// second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "h100", "half_flops_per_s": 989e12, "fp32_flops_per_s": 67e12,
    "memory_bytes_per_s": 3.35e12, "h2d_bytes_per_s": 55e9, "d2h_bytes_per_s": 55e9})))]
pub struct DeviceProfileDoc {
    /// Name shown in the stats.
    #[schema(nullable = false)]
    pub name: Option<String>,
    /// Dense 16-bit (bf16/fp16) throughput (FLOP/s).
    #[schema(minimum = 1.0, nullable = false)]
    pub half_flops_per_s: Option<f64>,
    /// Dense fp32 throughput (FLOP/s).
    #[schema(minimum = 1.0, nullable = false)]
    pub fp32_flops_per_s: Option<f64>,
    /// Device memory bandwidth (bytes/s).
    #[schema(minimum = 1.0, nullable = false)]
    pub memory_bytes_per_s: Option<f64>,
    /// Host→device link bandwidth, for spill-ins (bytes/s).
    #[schema(minimum = 1.0, nullable = false)]
    pub h2d_bytes_per_s: Option<f64>,
    /// Device→host link bandwidth, for spill-outs (bytes/s).
    #[schema(minimum = 1.0, nullable = false)]
    pub d2h_bytes_per_s: Option<f64>,
}

/// Options of `POST /v1/plan` and `POST /v1/jobs` (the body's `options`), and the query
/// parameters of `POST /plan` and `POST /jobs`: every field of the planning pipeline's
/// options (`memplan::PipelineOptions`, the same as the CLI's flags) plus the service's
/// `cache`. Every field is optional and null reads as absent; unknown fields are refused
/// (422). Options that cannot be combined are refused with the pipeline's own message (the
/// CLI's): `budget` with `tiers` or `inplace`, a `spill_strategy` other than `best` without a
/// `budget`, `tier_alignment` without `tiers`, a `tile_overhead_pct` other than 10 without
/// the `tile` rewrite, a `stream_peak_ratio` other than 1.10 with one stream. As the CLI's `--conv-algos` and `--tile`, a
/// given `conv_algos` or `tile` adds its rewrite and `off` takes it out. A `budget` below what any plan of the graph
/// can reach is refused naming the smallest peak reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"strategy": "auto", "order": "auto", "time_limit_s": 5.0,
    "rewrite": ["fuse", "conv-algos"], "budget": "60%", "spill_strategy": "best"})))]
pub struct PlanOptionsBody {
    /// Graph rewrites to run before planning, in the pipeline's order (tile, fuse,
    /// conv-algos): a list of names, or one comma-separated string; `all` for every rewrite.
    /// Default none: the graph is planned as given. When a rewrite changed the graph, the plan
    /// carries the graph it refers to (`rewritten_graph`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = super::names::rewrite_option)]
    pub rewrite: Option<Vec<RewriteName>>,
    /// How each conv's algorithm is chosen; giving it adds the `conv-algos` rewrite, `off`
    /// takes it out (the CLI's `--conv-algos`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv_algos: Option<ConvAlgoName>,
    /// Spatial tiling: `auto`, or a strip count from 2 to 999999999 as a string or an integer
    /// (default `auto`); giving it adds the `tile` rewrite, `off` takes it out (the CLI's
    /// `--tile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = super::names::tile_option)]
    pub tile: Option<String>,
    /// With the `tile` rewrite: the largest modelled run-time overhead tiling may add
    /// (percent of the untiled graph's modelled time; default 10; another value without the
    /// rewrite is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0)]
    pub tile_overhead_pct: Option<f64>,
    /// Which op orders are considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderName>,
    /// Which solvers run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<StrategyName>,
    /// Effort in deterministic work units (a multiplier of every solver's work caps: search
    /// nodes, iterations, HiGHS nodes; default 1, `0` for the heuristics' own caps only). The
    /// same graph and options give the same plan unless the time limit binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1000)]
    pub effort: Option<u64>,
    /// Wall-clock cap of the whole planning in seconds, on top of `effort` (default: the
    /// pipeline's 60 s, as in the CLI, lowered to the service's cap; at most
    /// `sync_time_limit_cap` for `POST /v1/plan` and `POST /plan`, `max_time_limit` for jobs). When it binds, the plan's status says
    /// `time_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Honour the graph's in-place hints (plans then use the `inplace_of` alloc extension;
    /// default false). Not with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inplace: Option<bool>,
    /// Arena budget the plan must fit by spilling and recomputing (bytes, or `"60%"` of the
    /// unconstrained peak). Not with tiers or in-place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetValue>,
    /// With a budget: how the plan is brought under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_strategy: Option<SpillStrategyName>,
    /// Memory tiers: activations and temporaries (workspaces) in regions of their own
    /// (default false). Not with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<bool>,
    /// With tiers: alignment floors in bytes, `persistent=256,activations=256,temporaries=512`
    /// or one number for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = super::names::tier_alignment_option)]
    pub tier_alignment: Option<String>,
    /// Device figures for the cost model (conv algorithm times, tiling overhead, spills);
    /// default the H200's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_profile: Option<DeviceProfileDoc>,
    /// Host link bandwidth per direction in GB/s (overrides the device profile's), from 0.001
    /// to 1e12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.001, maximum = 1e12)]
    pub link_gbps: Option<f64>,
    /// Streams the plan may run on (default 1): with more, independent branches run
    /// concurrently, with `record_event` / `wait_event` instructions keeping every reuse of
    /// bytes safe; the plan's `stats.streams` gives the modelled makespans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 64)]
    pub streams: Option<u32>,
    /// With `streams`: the most arena bytes the parallel plan may take, as a multiple of the
    /// single-stream peak (default 1.10; a budget caps it instead; another value with one
    /// stream is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1.0)]
    pub stream_peak_ratio: Option<f64>,
    /// Answer with the stored plan of an identical earlier request (same graph and options)
    /// without solving again (default true). `false` solves again and stores the new plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
}

/// Query parameters of `POST /plan` and `POST /jobs`: the fields of [`PlanOptionsBody`], one
/// parameter each (documentation only; the service parses the query string into a JSON
/// object, then reads it as the body's options, so the rules and messages are the same).
/// Numbers and booleans (`true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`, or the bare name
/// for true) are read as such; `rewrite` is a comma-separated list (or repeated); `device_profile` is a
/// JSON-encoded object (URL-encoded). Unknown parameters are refused (422).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PlanQuery {
    /// Graph rewrites: comma-separated names (`tile`, `fuse`, `conv-algos`), `all` or `none`
    /// (default none: the graph is planned as given).
    #[param(schema_with = super::names::rewrite_list, example = "fuse,conv-algos")]
    pub rewrite: Option<String>,
    /// `auto`, `fastest`, `min-memory` (default `auto`; adds the `conv-algos` rewrite) or
    /// `off` (takes it out), as the CLI's `--conv-algos`.
    #[param(value_type = Option<ConvAlgoName>)]
    pub conv_algos: Option<String>,
    /// `auto` or a strip count from 2 to 999999999 (default `auto`; adds the `tile` rewrite)
    /// or `off` (takes it out), as the CLI's `--tile`.
    #[param(schema_with = super::names::tile_text, example = "auto")]
    pub tile: Option<String>,
    /// With the `tile` rewrite: the largest modelled overhead tiling may add (percent).
    #[param(minimum = 0.0)]
    pub tile_overhead_pct: Option<f64>,
    /// Which op orders are considered (default `auto`).
    #[param(value_type = Option<OrderName>)]
    pub order: Option<String>,
    /// Which solvers run (default `auto`).
    #[param(value_type = Option<StrategyName>)]
    pub strategy: Option<String>,
    /// Effort in deterministic work units (default 1).
    #[param(minimum = 0, maximum = 1000)]
    pub effort: Option<u64>,
    /// Wall-clock cap in seconds (default the pipeline's 60 s, as in the CLI, lowered to the
    /// service's cap; at most `sync_time_limit_cap` for `POST /plan`, `max_time_limit` for
    /// `POST /jobs`).
    #[param(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Honour the graph's in-place hints (default false).
    #[param(schema_with = super::names::query_bool)]
    pub inplace: Option<bool>,
    /// Arena budget: bytes, or a percentage in (0, 100] of the unconstrained peak (`60%`,
    /// URL-encoded `60%25`).
    #[param(schema_with = super::names::budget_text, example = "60%")]
    pub budget: Option<String>,
    /// With a budget: the spill strategy (default `best`).
    #[param(value_type = Option<SpillStrategyName>)]
    pub spill_strategy: Option<String>,
    /// Memory tiers (default false).
    #[param(schema_with = super::names::query_bool)]
    pub tiers: Option<bool>,
    /// With tiers: alignment floors, `persistent=256,activations=256,temporaries=512` or one
    /// power of two for all.
    #[param(schema_with = super::names::tier_alignment_text)]
    pub tier_alignment: Option<String>,
    /// Device figures as a JSON-encoded object (the body's `device_profile`, URL-encoded),
    /// e.g. `{"h2d_bytes_per_s":25e9}`.
    #[param(example = r#"{"h2d_bytes_per_s":25e9,"d2h_bytes_per_s":25e9}"#)]
    pub device_profile: Option<String>,
    /// Host link bandwidth per direction in GB/s, from 0.001 to 1e12.
    #[param(minimum = 0.001, maximum = 1e12)]
    pub link_gbps: Option<f64>,
    /// Streams the plan may run on (default 1).
    #[param(minimum = 1, maximum = 64)]
    pub streams: Option<u32>,
    /// With `streams`: the arena cap as a multiple of the single-stream peak (default 1.10).
    #[param(minimum = 1.0)]
    pub stream_peak_ratio: Option<f64>,
    /// Answer from a stored plan of an identical request (default true).
    #[param(schema_with = super::names::query_bool)]
    pub cache: Option<bool>,
}

/// Option fields that may be null once resolved (the others always have a value).
pub const NULLABLE_OPTIONS: [&str; 4] = ["budget", "tier_alignment", "device_profile", "link_gbps"];

/// The options a job or plan ran with, defaults filled in: the planning pipeline's options
/// (`memplan::PipelineOptions`, serialised with all its fields) and the service's `cache`.
/// The service shows them [`ResolvedOptions::echoed`], so that, sent back, they plan the same.
///
/// Stored jobs of earlier versions (fields `order`, `strategy`, `time_limit_s`, `inplace`,
/// `cache`, `budget` in bytes) still read: missing fields take the pipeline's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOptions {
    /// The pipeline options, normalised (`PipelineOptions::normalised`).
    #[serde(flatten)]
    pub pipeline: PipelineOptions,
    /// Stored plans reused.
    #[serde(default = "yes")]
    pub cache: bool,
}

fn yes() -> bool {
    true
}

impl ResolvedOptions {
    /// The options as the service shows them: `conv_algos` is `off` when `rewrite` lacks
    /// `conv-algos`, and `tile` is `off` when it lacks `tile`, so that the options sent back
    /// plan the same (a given mode other than `off` adds its rewrite, `off` reads back as the
    /// rewrite absent and the field at its default: `PipelineOptions::apply_given_modes`).
    pub fn echoed(mut self) -> ResolvedOptions {
        self.pipeline = self.pipeline.echoed();
        self
    }
}

impl PartialSchema for ResolvedOptions {
    fn schema() -> RefOr<Schema> {
        let mut s = PlanOptionsBody::schema();
        if let RefOr::T(Schema::Object(o)) = &mut s {
            o.required = o.properties.keys().cloned().collect();
            o.description = Some(
                "The options a plan or job ran with, defaults filled in (every field of \
                 `PlanOptionsBody`; `budget`, `tier_alignment`, `device_profile` and \
                 `link_gbps` are null when not set). `rewrite` is the list of rewrite names, \
                 `budget` bytes or a percentage string. `conv_algos` and `tile` are `off` \
                 when `rewrite` does not name their rewrite, so that these options, sent \
                 back, plan the same."
                    .to_string(),
            );
            o.examples = vec![example_resolved_options()];
        }
        s
    }
}

impl ToSchema for ResolvedOptions {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <PlanOptionsBody as ToSchema>::schemas(schemas);
    }
}

/// The example resolved options of the OpenAPI document.
pub(super) fn example_resolved_options() -> Value {
    let options = ResolvedOptions {
        pipeline: PipelineOptions {
            time_limit_s: 60.0,
            rewrite: vec![Rewrite::Fuse],
            ..PipelineOptions::default()
        },
        cache: true,
    };
    serde_json::to_value(options.echoed()).unwrap_or(Value::Null)
}

/// Body of `POST /v1/plan` (`JobRequest`, the body of `POST /v1/jobs`, is the same with the
/// jobs' time-limit cap). Other fields are refused.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(example_plan_request))]
pub struct PlanRequest {
    /// The graph (memplan-graph/1).
    pub graph: GraphDoc,
    /// Planning options.
    #[serde(default)]
    pub options: Option<PlanOptionsBody>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use memplan::{OrderMode, Strategy};
    use std::collections::BTreeSet;

    fn properties(schema: RefOr<Schema>) -> BTreeSet<String> {
        match schema {
            RefOr::T(Schema::Object(o)) => o.properties.keys().cloned().collect(),
            _ => panic!("not an object schema"),
        }
    }

    fn keys(v: Value) -> BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    }

    #[test]
    fn the_documented_options_name_every_pipeline_option_and_cache() {
        let mut expected = keys(serde_json::to_value(PipelineOptions::default()).unwrap());
        expected.insert("cache".into());
        assert_eq!(properties(PlanOptionsBody::schema()), expected);
        assert_eq!(properties(ResolvedOptions::schema()), expected);
        // What the service reports is what it documents.
        let resolved = ResolvedOptions {
            pipeline: PipelineOptions::default(),
            cache: true,
        };
        assert_eq!(keys(serde_json::to_value(&resolved).unwrap()), expected);
        let documented: BTreeSet<String> = PlanQuery::into_params(|| None)
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(documented, expected);
    }

    #[test]
    fn the_documented_device_profile_names_every_field() {
        let expected = keys(serde_json::to_value(memplan::cost::DeviceProfile::h200()).unwrap());
        assert_eq!(properties(DeviceProfileDoc::schema()), expected);
    }

    #[test]
    fn resolved_options_of_an_earlier_version_still_read() {
        let old: ResolvedOptions = serde_json::from_str(
            r#"{"order": "given", "strategy": "heuristic", "time_limit_s": 0.5,
                "inplace": true, "cache": false, "budget": 4096}"#,
        )
        .unwrap();
        assert_eq!(old.pipeline.order, OrderMode::Given);
        assert_eq!(old.pipeline.strategy, Strategy::Heuristic);
        assert_eq!(old.pipeline.time_limit_s, 0.5);
        assert!(old.pipeline.inplace && !old.cache);
        assert_eq!(
            old.pipeline.budget,
            Some(memplan::budget::BudgetSpec::Bytes(4096))
        );
        assert!(
            old.pipeline.rewrite.is_empty(),
            "old jobs planned the graph as given"
        );
        // And the current form survives a round trip.
        let now = ResolvedOptions {
            pipeline: PipelineOptions {
                rewrite: vec![Rewrite::Fuse],
                budget: Some(memplan::budget::BudgetSpec::Percent(60.0)),
                ..PipelineOptions::default()
            },
            cache: true,
        };
        let back: ResolvedOptions =
            serde_json::from_str(&serde_json::to_string(&now).unwrap()).unwrap();
        assert_eq!(back, now);
    }
}
