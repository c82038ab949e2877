//! The bodies of `POST /v1/place`: [`PlaceRequest`] (or a CSV body with [`PlaceQuery`]) and
//! [`PlaceResponse`].

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A buffer id: text or a non-negative integer (written as one: `3`, not `3.0`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(examples("conv1.out"))]
pub enum BufferId {
    /// Text id.
    Text(String),
    /// Numeric id.
    Number(u64),
}

impl<'de> Deserialize<'de> for BufferId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Unexpected};
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(BufferId::Text(s)),
            serde_json::Value::Number(n) => match (n.as_u64(), n.as_f64()) {
                (Some(k), _) => Ok(BufferId::Number(k)),
                (None, Some(f)) if n.is_f64() => Err(D::Error::invalid_type(
                    Unexpected::Float(f),
                    &"u64 or a string (a buffer id)",
                )),
                _ => Err(D::Error::invalid_value(
                    Unexpected::Other("a negative integer"),
                    &"u64 or a string (a buffer id)",
                )),
            },
            other => Err(D::Error::custom(format!(
                "invalid type: {other}, expected u64 or a string (a buffer id)"
            ))),
        }
    }
}

impl BufferId {
    /// The id as text (as in a CSV).
    pub fn text(&self) -> String {
        match self {
            BufferId::Text(s) => s.clone(),
            BufferId::Number(n) => n.to_string(),
        }
    }
}

/// A buffer to place: lifetime `[lower, upper)` (`upper` > `lower`) and size. Ids are unique.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"id": "a", "lower": 0, "upper": 3, "size": 1024})))]
pub struct BufferBody {
    /// Unique id.
    pub id: BufferId,
    /// First step of the lifetime.
    pub lower: u64,
    /// End of the lifetime (exclusive, > lower).
    pub upper: u64,
    /// Bytes (> 0).
    #[schema(minimum = 1)]
    pub size: u64,
    /// Offset alignment, a power of two (default: the request's `alignment`).
    #[schema(schema_with = super::rules::alignment_or_null)]
    pub alignment: Option<u64>,
}

/// JSON body of `POST /v1/place` (a minimalloc CSV body with `Content-Type: text/csv` takes
/// the options as query parameters). The query parameters also apply to a JSON body, as long
/// as an option is not given both ways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"buffers": [
    {"id": "a", "lower": 0, "upper": 2, "size": 1024},
    {"id": "b", "lower": 1, "upper": 3, "size": 512},
    {"id": "c", "lower": 2, "upper": 4, "size": 1024}], "time_limit_s": 1.0})))]
pub struct PlaceRequest {
    /// The buffers (at most the service's `max_buffers`).
    pub buffers: Vec<BufferBody>,
    /// Arena capacity to fit (bytes); without it the peak is minimised.
    pub capacity: Option<u64>,
    /// Time limit in seconds (default 1, at most `sync_time_limit_cap`).
    #[schema(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Alignment of buffers that give none (default 1).
    #[schema(schema_with = super::rules::place_alignment)]
    pub alignment: Option<u64>,
    /// Heuristics only, no exact search (default false).
    pub heuristic: Option<bool>,
}

/// Options of `POST /v1/place` with a CSV body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PlaceQuery {
    /// Arena capacity to fit (bytes); without it the peak is minimised.
    pub capacity: Option<u64>,
    /// Time limit in seconds (default 1, at most `sync_time_limit_cap`).
    #[param(minimum = 0.0)]
    pub time_limit_s: Option<f64>,
    /// Alignment when the CSV has no `alignment` column (default 1): a power of two.
    #[param(schema_with = super::rules::place_alignment_param)]
    pub alignment: Option<u64>,
    /// Heuristics only, no exact search (default false).
    pub heuristic: Option<bool>,
}

/// A placed buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"id": "a", "offset": 0})))]
pub struct PlacedBuffer {
    /// Buffer id (as text).
    pub id: String,
    /// Offset (bytes).
    pub offset: u64,
}

/// Result of `POST /v1/place` as JSON (with `Accept: text/csv`, the CSV with an `offset`
/// column instead, the figures in `X-Memplan-*` headers: a CSV body comes back as sent, its
/// columns kept, with the offsets; a JSON body in the columns `id,lower,upper,size`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(examples(json!({"fits": true, "peak_bytes": 2048, "lower_bound_bytes": 2048, "gap": 0.0,
    "load_bytes": 2048, "status": "optimal", "method": "greedy-size", "elapsed_ms": 0.2,
    "buffers": [{"id": "a", "offset": 0}, {"id": "b", "offset": 1024}, {"id": "c", "offset": 0}]})))]
pub struct PlaceResponse {
    /// Whether the peak fits the capacity (true without one).
    pub fits: bool,
    /// Peak of the placement (bytes).
    pub peak_bytes: u64,
    /// Proven lower bound on the peak (bytes; above the capacity when infeasibility is proven).
    pub lower_bound_bytes: u64,
    /// Relative gap.
    pub gap: f64,
    /// LOAD: the most bytes alive at one step.
    pub load_bytes: u64,
    /// optimal / heuristic / time_limit / node_limit / infeasible.
    pub status: String,
    /// Algorithm of the placement; `online (capacity below the lower bound)` when the
    /// capacity is below the lower bound, answered at once (every buffer placed online, no
    /// heuristic or search run).
    pub method: String,
    /// Time taken (milliseconds).
    pub elapsed_ms: f64,
    /// Offsets, in request order.
    pub buffers: Vec<PlacedBuffer>,
}
